// Helpers for disk-layer tests: a patterned base image, a byte model of what
// the guest should read, and reads/writes through split iovecs (so requests
// cross iovec and cluster boundaries in every test).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "snapshot/crc32c.h"
#include "snapshot/layered_disk.h"

namespace kubicle::snapshot::testing {

inline uint8_t BaseByte(uint64_t off) { return static_cast<uint8_t>((off * 2654435761u) >> 13); }

inline std::vector<uint8_t> MakeBase(const std::string& path, uint64_t size) {
  std::vector<uint8_t> bytes(size);
  for (uint64_t i = 0; i < size; ++i) bytes[i] = BaseByte(i);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0444));
  if (::pwrite(fd.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(size)) bytes.clear();
  return bytes;
}

inline uint32_t FileCrc(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  struct stat st{};
  ::fstat(fd.get(), &st);
  std::vector<uint8_t> b(static_cast<size_t>(st.st_size));
  if (::pread(fd.get(), b.data(), b.size(), 0) != st.st_size) return 0;
  return Crc32c(b);
}

// Three iovecs of uneven size over buf.
inline std::vector<iovec> Split(uint8_t* buf, size_t len) {
  size_t a = len / 3, b = len / 2;
  return {{buf, a}, {buf + a, b - a}, {buf + b, len - b}};
}

inline Status Read(LayeredDisk& d, uint64_t off, std::vector<uint8_t>& out,
                   size_t len) {
  out.assign(len, 0xee);
  std::vector<iovec> iov = Split(out.data(), len);
  return d.ReadV(off, iov);
}

inline Status Write(LayeredDisk& d, uint64_t off,
                    const std::vector<uint8_t>& data) {
  std::vector<uint8_t> copy = data;
  std::vector<iovec> iov = Split(copy.data(), copy.size());
  return d.WriteV(off, iov);
}

inline std::vector<uint8_t> ReadAll(LayeredDisk& d) {
  std::vector<uint8_t> out;
  if (!Read(d, 0, out, d.size()).ok()) out.clear();
  return out;
}

// Random write to both the disk and the model.
inline Status RandomWrite(LayeredDisk& d, std::vector<uint8_t>& model,
                          std::mt19937_64& rng, uint64_t max_len = 200 << 10) {
  uint64_t len = 1 + rng() % max_len;
  if (len > model.size()) len = model.size();
  uint64_t off = rng() % (model.size() - len + 1);
  std::vector<uint8_t> data(len);
  uint8_t v = static_cast<uint8_t>(rng());
  for (auto& b : data) b = v++;
  std::copy(data.begin(), data.end(), model.begin() + static_cast<ptrdiff_t>(off));
  return Write(d, off, data);
}

}  // namespace kubicle::snapshot::testing
