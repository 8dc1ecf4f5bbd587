#include "noderuntime/nodeagent/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/unique_fd.h"

namespace kubicle::noderuntime::nodeagent {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
  // EVP_sha256 cannot fail to initialise short of allocation failure, which
  // the null check turns into a digest that never matches.
  if (ctx_) EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
}

void Sha256::Update(const void* data, size_t n) {
  if (ctx_ && n > 0) EVP_DigestUpdate(ctx_.get(), data, n);
}

std::string Sha256::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (!ctx_ || EVP_DigestFinal_ex(ctx_.get(), md, &n) != 1) return "(sha256 unavailable)";
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s.push_back(kHex[md[i] >> 4]);
    s.push_back(kHex[md[i] & 15]);
  }
  return s;
}

Result<std::string> Sha256OfFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open " + path);
  Sha256 h;
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + path);
    if (n == 0) break;
    h.Update(buf.data(), static_cast<size_t>(n));
  }
  return h.HexDigest();
}

bool IsSha256Hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace kubicle::noderuntime::nodeagent
