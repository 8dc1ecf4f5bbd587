// Ext4Fs: one workspace image opened with libext2fs, and the file
// operations kubicle-ext4 serves over it (read, write, stat, list, remove).
// It runs inside the confined helper; unit tests use it in-process on
// images made by mke2fs, good and corrupt.
//
// Contracts:
//  - The image is hostile (a guest wrote it): every libext2fs error is a
//    Status (DataLoss for a corrupt structure), loops are bounded (path
//    depth, symlink hops inside libext2fs, directory entries, recursion).
//  - A file system that needs journal recovery (its VM stopped without
//    unmounting it) is refused for every op: its metadata may be in the
//    journal only, so what the host would read is stale and what it would
//    write could be overwritten by the replay at the next mount.
//  - Writes are flushed by Close(); a write op that fails part-way leaves
//    the file system consistent (libext2fs updates bitmaps and inodes as
//    one unit at close) but the file may be partly written.
#pragma once

#include <ext2fs/ext2fs.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/protocol/messages.h"
#include "guest/protocol/wire.h"

namespace kubicle::noderuntime::ext4 {

class Ext4Fs {
 public:
  // `fd` is the image's (the helper's fd 3); it stays the caller's.
  static Result<std::unique_ptr<Ext4Fs>> Open(int fd, bool writable);
  ~Ext4Fs();
  // Writes bitmaps and superblock back (a writable fs); then closes.
  Status Close();

  Result<guest::protocol::StatReply> Stat(const std::string& path);
  // Calls on_data with chunks of at most `chunk` bytes; on_size first.
  Status Read(const std::string& path, size_t chunk,
              const std::function<Status(uint64_t size)>& on_size,
              const std::function<Status(const char* p, size_t n)>& on_data);
  // Creates or truncates `path` (parents made 0755) and fills it from
  // `next` (which returns bytes read into the buffer, 0 at the end).
  Status Write(const std::string& path, uint32_t mode, uint64_t size,
               const std::function<Result<size_t>(char* buf, size_t max)>& next);
  Status List(const std::string& path, size_t max_entries,
              const std::function<Status(const guest::protocol::DirEntry&)>& on_entry);
  Status Remove(const std::string& path, bool recursive);

 private:
  explicit Ext4Fs(ext2_filsys fs) : fs_(fs) {}
  Result<ext2_ino_t> Lookup(const std::string& path);
  Result<ext2_ino_t> MakeParents(const std::vector<std::string>& parts);
  Status RemoveIno(ext2_ino_t parent, const std::string& name, ext2_ino_t ino, bool recursive,
                   int depth, size_t* budget);

  ext2_filsys fs_;
};

// libext2fs' error as a Status ("what: message").
Status FsError(errcode_t err, const std::string& what);

}  // namespace kubicle::noderuntime::ext4
