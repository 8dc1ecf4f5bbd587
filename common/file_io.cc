#include "common/file_io.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "common/unique_fd.h"

namespace kubicle {

Status TransferAll(int fd, uint64_t offset, std::span<const iovec> iov, bool write,
                   std::string_view short_message) {
  std::vector<iovec> rest(iov.begin(), iov.end());
  size_t first = 0;
  while (first < rest.size()) {
    if (rest[first].iov_len == 0) {
      ++first;
      continue;
    }
    const int cnt = static_cast<int>(std::min<size_t>(rest.size() - first, IOV_MAX));
    const ssize_t n = write ? ::pwritev(fd, &rest[first], cnt, static_cast<off_t>(offset))
                            : ::preadv(fd, &rest[first], cnt, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(write ? "pwritev" : "preadv");
    if (n == 0) return Status::DataLoss(std::string(short_message));
    offset += static_cast<uint64_t>(n);
    auto left = static_cast<size_t>(n);
    while (first < rest.size() && left >= rest[first].iov_len) left -= rest[first++].iov_len;
    if (left > 0) {
      rest[first].iov_base = static_cast<uint8_t*>(rest[first].iov_base) + left;
      rest[first].iov_len -= left;
    }
  }
  return Status::Ok();
}

Status WriteAllAt(int fd, uint64_t offset, const void* data, size_t len) {
  const iovec one{const_cast<void*>(data), len};
  return TransferAll(fd, offset, {&one, 1}, /*write=*/true, "pwritev wrote nothing");
}

Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open " + path);
  auto too_big = [&] {
    return Status::OutOfRange(path + " is larger than " + std::to_string(max_bytes) + " bytes");
  };
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > max_bytes)
    return too_big();
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + path);
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) return too_big();  // it grew
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string TailOfFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return "";
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return "";
  off_t start =
      st.st_size > static_cast<off_t>(max_bytes) ? st.st_size - static_cast<off_t>(max_bytes) : 0;
  std::string out(static_cast<size_t>(st.st_size - start), '\0');
  ssize_t n = ::pread(fd.get(), out.data(), out.size(), start);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace kubicle
