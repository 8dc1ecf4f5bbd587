#include "snapshot/digest.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/file_io.h"
#include "common/hex.h"

namespace kubicle::snapshot {

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
  const iovec v{buf, len};
  return TransferAll(fd, offset, {&v, 1}, /*write=*/false, "file shorter than its size while hashing");
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
  return HexEncode(sha.Final());
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
