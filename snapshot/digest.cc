#include "snapshot/digest.h"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace kubicle::snapshot {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) { EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr); }
Sha256::~Sha256() = default;

void Sha256::Update(std::span<const uint8_t> data) { EVP_DigestUpdate(ctx_->md, data.data(), data.size()); }

Sha256Digest Sha256::Final() {
  Sha256Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, d.data(), &len);
  EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr);  // reusable
  return d;
}

Sha256Digest Sha256Of(std::span<const uint8_t> data) {
  Sha256Digest d{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

std::string DigestHex(const Sha256Digest& d) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : d) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

void ChunkedDigest::AddZeroChunk(uint64_t size) {
  static const Sha256Digest kFullZeroLeaf = [] {
    std::vector<uint8_t> zeros(kDigestChunkBytes, 0);
    return Sha256Of(zeros);
  }();
  if (size == kDigestChunkBytes) {
    outer_.Update(kFullZeroLeaf);
    return;
  }
  std::vector<uint8_t> zeros(size, 0);  // only ever the last, short chunk
  outer_.Update(Sha256Of(zeros));
}

namespace {

Status ReadFull(int fd, uint8_t* buf, size_t len, uint64_t offset) {
  while (len > 0) {
    ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("pread");
    if (n == 0) return Status::DataLoss("file shorter than its size while hashing");
    buf += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// True when [offset, offset + len) has no data extent (it is a hole).
bool IsHole(int fd, uint64_t offset, uint64_t len) {
  off_t data = ::lseek(fd, static_cast<off_t>(offset), SEEK_DATA);
  if (data < 0) return errno == ENXIO;  // no data at or after offset
  return static_cast<uint64_t>(data) >= offset + len;
}

}  // namespace

Result<std::string> Sha256FileHex(int fd) {
  Sha256 sha;
  std::vector<uint8_t> buf(1 << 20);
  uint64_t offset = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("pread");
    if (n == 0) break;
    sha.Update({buf.data(), static_cast<size_t>(n)});
    offset += static_cast<uint64_t>(n);
  }
  return DigestHex(sha.Final());
}

Result<std::string> ChunkedDigestOfFile(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) < 0) return Status::FromErrno("fstat");
  auto size = static_cast<uint64_t>(st.st_size);
  ChunkedDigest digest;
  std::vector<uint8_t> buf(kDigestChunkBytes);
  for (uint64_t at = 0; at < size; at += kDigestChunkBytes) {
    uint64_t len = std::min(kDigestChunkBytes, size - at);
    if (IsHole(fd, at, len)) {
      digest.AddZeroChunk(len);
      continue;
    }
    RETURN_IF_ERROR(ReadFull(fd, buf.data(), len, at));
    digest.AddChunk({buf.data(), len});
  }
  return digest.FinalHex();
}

}  // namespace kubicle::snapshot
