// ImageSource: where the kernel and initrd loaders read bytes from. The file
// implementation preads straight into guest memory (a 50 MiB vmlinux is never
// copied through the heap); the bytes implementation lets tests feed
// synthetic and corrupt images without touching the filesystem.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::vmm::arch {

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly len bytes at offset; DataLoss if the image is shorter.
  virtual Status ReadAt(uint64_t offset, void* dst, uint64_t len) const = 0;
  // For error messages: the path, or a label for in-memory images.
  virtual const std::string& name() const = 0;
};

// A regular file opened read-only.
class FileSource : public ImageSource {
 public:
  static Result<std::unique_ptr<FileSource>> Open(const std::string& path);
  uint64_t size() const override { return size_; }
  Status ReadAt(uint64_t offset, void* dst, uint64_t len) const override;
  const std::string& name() const override { return path_; }

 private:
  FileSource(UniqueFd fd, uint64_t size, std::string path)
      : fd_(std::move(fd)), size_(size), path_(std::move(path)) {}
  UniqueFd fd_;
  uint64_t size_;
  std::string path_;
};

// Borrowed bytes; the span must outlive the source.
class BytesSource : public ImageSource {
 public:
  BytesSource(std::span<const uint8_t> bytes, std::string name)
      : bytes_(bytes), name_(std::move(name)) {}
  uint64_t size() const override { return bytes_.size(); }
  Status ReadAt(uint64_t offset, void* dst, uint64_t len) const override;
  const std::string& name() const override { return name_; }

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
};

}  // namespace kubicle::vmm::arch
