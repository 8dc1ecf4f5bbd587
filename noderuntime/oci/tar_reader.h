// TarReader: the entries of one tar stream (a container image layer), read
// forward once from a ByteSource, never the whole archive in memory.
//
// Formats: POSIX ustar (name + prefix), PAX extended headers ('x': path,
// linkpath, size, uid, gid, mtime, SCHILY.xattr.*; a global 'g' header is
// read within its limit and ignored), GNU long names and long link names
// ('L', 'K'), GNU base-256 numbers. Anything else (GNU sparse 'S', volume
// headers, ...) is refused: a rootfs builder must not guess at contents.
//
// Contracts:
//  - The stream is hostile. Every header's checksum is checked; numbers are
//    range-checked; a PAX or long-name block is bounded by TarLimits before
//    it is read; a stream that ends inside a header or inside an entry's data
//    is DataLoss ("truncated"). Errors are Status, never a crash, and name
//    the entry (its path as far as known).
//  - Paths are returned as the archive spells them (no normalisation: that
//    is the rootfs tree's job, which knows the image's namespace).
//  - Next() skips whatever the caller left unread of the previous entry's
//    data; ReadData() never returns more than the entry's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::oci {

// Where tar bytes come from (a decompressor over a layer file, or memory).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `max` bytes into buf; 0 only at the end of the stream.
  virtual Result<size_t> Read(char* buf, size_t max) = 0;
};

enum class TarType { kFile, kDirectory, kSymlink, kHardLink, kFifo, kCharDevice, kBlockDevice };

struct TarEntry {
  std::string path;
  TarType type = TarType::kFile;
  uint32_t mode = 0;  // permission and setuid/setgid/sticky bits (07777)
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint64_t size = 0;        // data bytes (regular files only; 0 otherwise)
  std::string link_target;  // symlink target, or the hard link's path
  std::vector<std::pair<std::string, std::string>> xattrs;  // name, value
};

struct TarLimits {
  uint64_t max_path_bytes = 4096;       // path and link target
  uint64_t max_pax_bytes = 1 << 20;     // one PAX header's records
  uint64_t max_xattr_count = 64;        // per entry
  uint64_t max_xattr_bytes = 64 << 10;  // names and values, per entry
};

// Which numeric fields a PAX header set (they override the ustar header's).
struct PaxSeen {
  bool size = false, uid = false, gid = false, mtime = false;
};

class TarReader {
 public:
  // `src` must outlive the reader.
  TarReader(ByteSource* src, TarLimits limits) : src_(src), limits_(limits) {}

  // The next entry into *e; false at the end of the archive (two zero
  // blocks, or the stream's end exactly at a header boundary).
  Result<bool> Next(TarEntry* e);
  // Up to `max` bytes of the current entry's data; 0 when it is all read.
  Result<size_t> ReadData(char* buf, size_t max);
  // Bytes of tar stream consumed so far.
  uint64_t offset() const { return offset_; }

 private:
  // What metadata headers said about the entry that follows them.
  struct PendingMeta {
    TarEntry pax;
    PaxSeen seen;
    bool have_pax = false;
    std::string long_name, long_link;
  };
  // Reads metadata headers into *meta up to an entry's header (into h,
  // 512 bytes); false at the archive's end.
  Result<bool> ReadHeader(char* h, PendingMeta* meta);
  // The entry from its header and the metadata before it.
  Status FillEntry(const char* h, PendingMeta& meta, TarEntry* e);
  Status ReadFull(char* buf, size_t n, const std::string& what);
  Status Skip(uint64_t n, const std::string& what);
  Result<std::string> ReadBlob(uint64_t size, uint64_t limit, const std::string& what);

  ByteSource* src_;
  TarLimits limits_;
  uint64_t offset_ = 0;
  uint64_t data_left_ = 0;  // of the current entry
  uint64_t pad_left_ = 0;   // to its 512-byte boundary
  std::string current_;     // the current entry's path, for messages
  bool done_ = false;
};

// PAX records ("<len> <key>=<value>\n" ...) applied onto *e; pure, for the
// reader and its fuzzer. Unknown keys are ignored; malformed records are
// InvalidArgument.
Status ApplyPaxRecords(const std::string& records, const TarLimits& limits, TarEntry* e,
                       PaxSeen* seen);

}  // namespace kubicle::noderuntime::oci
