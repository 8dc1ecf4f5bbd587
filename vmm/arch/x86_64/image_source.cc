#include "vmm/arch/x86_64/image_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace kubicle::vmm::arch {
namespace {

Status ShortImage(const std::string& name, uint64_t offset, uint64_t len) {
  return Status::DataLoss(name + ": unexpected end of file reading " + std::to_string(len) +
                          " bytes at offset " + std::to_string(offset));
}

}  // namespace

Result<std::unique_ptr<FileSource>> FileSource::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path);
  UniqueFd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno("stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  return std::unique_ptr<FileSource>(
      new FileSource(std::move(owned), static_cast<uint64_t>(st.st_size), path));
}

Status FileSource::ReadAt(uint64_t offset, void* dst, uint64_t len) const {
  if (offset > size_ || len > size_ - offset) return ShortImage(path_, offset, len);
  auto* out = static_cast<uint8_t*>(dst);
  while (len > 0) {
    ssize_t n = ::pread(fd_.get(), out, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + path_);
    if (n == 0) return ShortImage(path_, offset, len);  // file shrank under us
    out += n;
    offset += static_cast<uint64_t>(n);
    len -= static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status BytesSource::ReadAt(uint64_t offset, void* dst, uint64_t len) const {
  if (offset > bytes_.size() || len > bytes_.size() - offset) return ShortImage(name_, offset, len);
  if (len > 0) std::memcpy(dst, bytes_.data() + offset, len);
  return Status::Ok();
}

}  // namespace kubicle::vmm::arch
