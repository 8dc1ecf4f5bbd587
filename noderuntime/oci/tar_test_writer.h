// TarTestWriter: tar archives built in memory for tests (and the fuzzer's
// seeds): ustar headers, PAX records (long names, xattrs, nanosecond
// mtimes) or GNU long-name headers, and raw headers for hostile cases.
// Test-only; not linked into the node.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kubicle::noderuntime::oci {

struct TestEntry {
  std::string path;
  char flag =
      '0';  // tar typeflag: '0' file, '1' hard link, '2' symlink, '3' char, '5' dir, '6' fifo
  uint32_t mode = 0644;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime = 1700000000;
  std::string mtime_pax;  // e.g. "1700000000.5": sent as a PAX mtime record
  std::string content;    // regular files
  std::string link;       // symlink target or hard link path
  std::vector<std::pair<std::string, std::string>> xattrs;  // as SCHILY.xattr.*
  bool gnu_long_name = false;  // a long path as a GNU 'L' header, not PAX
};

class TarTestWriter {
 public:
  TarTestWriter& Add(const TestEntry& e);
  TarTestWriter& File(const std::string& path, const std::string& content, uint32_t mode = 0644);
  TarTestWriter& Dir(const std::string& path, uint32_t mode = 0755);
  TarTestWriter& Symlink(const std::string& path, const std::string& target);
  TarTestWriter& HardLink(const std::string& path, const std::string& target);
  // Bytes appended as they are (a hand-made header, garbage).
  TarTestWriter& Raw(const std::string& bytes);
  // The archive with its two zero blocks.
  std::string Finish() const;
  // Without them (a stream that just stops).
  const std::string& bytes() const { return out_; }

 private:
  void Header(const std::string& name, char flag, const TestEntry& e, uint64_t size);
  void Pad();
  std::string out_;
};

// One 512-byte ustar header with a valid checksum.
std::string TarHeader(const std::string& name, char flag, uint32_t mode, uint64_t size,
                      const std::string& link = "");
// Recomputes a header's checksum (after a test edited it).
void SetTarChecksum(std::string& header);
// gzip of `data` (one member).
std::string Gzip(const std::string& data);
// zstd of `data` (one frame, with its checksum).
std::string Zstd(const std::string& data);

}  // namespace kubicle::noderuntime::oci
