// FileService: FILE_WRITE, FILE_READ, STAT, LIST, MKDIR, REMOVE, CHMOD.
//
// Semantics:
//  - FILE_WRITE is a stream of frames with one id (MORE on all but the last);
//    the first frame carries path, mode and atomic. Data goes to disk as it
//    arrives (never buffered whole). Atomic writes go to a temporary file in
//    the target's directory which is fsynced and renamed over the target
//    (then the directory is fsynced), so readers see the old or the new file,
//    never a mix. The mode is applied exactly (not masked by umask). One
//    reply (size) after the last frame; on any error one ERROR, the rest of
//    the stream is dropped and a temporary file is removed. A frame refused
//    for its header fails its stream the same way; a first chunk (with a
//    path) on the id of a failed stream starts a new stream.
//  - FILE_READ streams regular files in chunks, produced only while the
//    connection has room (connection.h), so a large file is never in memory;
//    the first frame carries the size. Non-regular files are refused.
//  - STAT and LIST do not follow symlinks (lstat). LIST streams large
//    directories over several frames.
//  - MKDIR with parents behaves like `mkdir -p`; REMOVE with recursive like
//    `rm -r` (never follows symlinks, refuses "/").
//  - At most kMaxStreams open write/read/list streams per connection.
#pragma once

#include <map>
#include <set>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "guest/agent/connection.h"

namespace kubicle::guest::agent {

// errno -> Status with the agent's codes (ENOTDIR/EISDIR/ENOTEMPTY are
// FailedPrecondition, ENAMETOOLONG is InvalidArgument, ...).
Status FsError(const std::string& what, int err);

class FileService {
 public:
  static constexpr size_t kMaxStreams = 64;

  void HandleWrite(Connection& c, const protocol::Frame& f);
  void HandleRead(Connection& c, const protocol::Frame& f);
  void HandleStat(Connection& c, const protocol::Frame& f);
  void HandleList(Connection& c, const protocol::Frame& f);
  void HandleMkdir(Connection& c, const protocol::Frame& f);
  void HandleRemove(Connection& c, const protocol::Frame& f);
  void HandleChmod(Connection& c, const protocol::Frame& f);
  // A FILE_WRITE frame refused before its payload was read (bad header):
  // the stream it belongs to fails like any other, with its one ERROR.
  void RefuseWrite(Connection& c, const protocol::Frame& f, const Status& why);
  // Aborts the connection's write streams (temporary files are removed).
  void OnClosed(Connection& c);

 private:
  struct WriteStream {
    UniqueFd fd;
    std::string path;      // final path
    std::string tmp_path;  // atomic only
    uint64_t received = 0;
  };
  using Key = std::pair<Connection*, uint32_t>;
  Result<WriteStream> OpenStream(const protocol::FileWriteChunk& first);
  Status Append(WriteStream& s, const protocol::FileWriteChunk& chunk);
  Status Commit(WriteStream& s);
  void AbortWrite(Connection& c, const protocol::Frame& f, const Status& why);
  // True when `f` belongs to a stream that already failed (and forgets the
  // stream at its last frame): such frames are never answered again.
  bool Dropped(Connection& c, const protocol::Frame& f);
  size_t StreamsOf(Connection& c) const;

  std::map<Key, WriteStream> writes_;
  std::set<Key> dropping_;  // failed streams whose remaining frames are ignored
  std::map<Connection*, size_t> readers_;  // open read/list producers
  friend class ReadProducer;
  friend class ListProducer;
};

}  // namespace kubicle::guest::agent
