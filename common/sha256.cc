#include "common/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "common/hex.h"
#include "common/unique_fd.h"

namespace kubicle {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

namespace {

// EVP fails only without memory or with a broken OpenSSL: no digest is
// better than a wrong one.
void Check(int ok) {
  if (ok != 1) std::abort();
}

}  // namespace

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  if (ctx_->md == nullptr) std::abort();
  Check(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr));
}
Sha256::~Sha256() = default;

void Sha256::Update(std::span<const uint8_t> data) {
  if (!data.empty()) Check(EVP_DigestUpdate(ctx_->md, data.data(), data.size()));
}

Sha256Digest Sha256::Final() {
  Sha256Digest d{};
  unsigned int len = 0;
  Check(EVP_DigestFinal_ex(ctx_->md, d.data(), &len));
  Check(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr));  // reusable
  return d;
}

std::string Sha256::FinalHex() { return HexEncode(Final()); }

Sha256Digest Sha256Of(std::span<const uint8_t> data) {
  Sha256Digest d{};
  unsigned int len = 0;
  Check(EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr));
  return d;
}

std::string Sha256Hex(std::string_view data) {
  return HexEncode(Sha256Of({reinterpret_cast<const uint8_t*>(data.data()), data.size()}));
}

Result<std::string> Sha256FileHex(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open " + path);
  Sha256 h;
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + path);
    if (n == 0) break;
    h.Update({buf.data(), static_cast<size_t>(n)});
  }
  return h.FinalHex();
}

bool IsSha256Hex(std::string_view s) {
  Sha256Digest ignored;
  return HexDecode(s, ignored);
}

}  // namespace kubicle
