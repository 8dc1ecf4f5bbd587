// FileService: the streamed replies, FILE_READ and LIST, as Producers that
// the connection pumps one frame at a time while it has room.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "guest/agent/files.h"

namespace kubicle::guest::agent {

using protocol::Frame;

// Counts itself in FileService::readers_ so streams per connection are bounded.
class StreamCount {
 public:
  StreamCount(std::map<Connection*, size_t>* counts, Connection* c) : counts_(counts), c_(c) {
    ++(*counts_)[c_];
  }
  ~StreamCount() {
    auto it = counts_->find(c_);
    if (it != counts_->end() && it->second > 0 && --it->second == 0) counts_->erase(it);
  }
  StreamCount(const StreamCount&) = delete;
  StreamCount& operator=(const StreamCount&) = delete;

 private:
  std::map<Connection*, size_t>* counts_;
  Connection* c_;
};

class ReadProducer final : public Producer {
 public:
  ReadProducer(FileService* fs, Connection* c, uint32_t id, UniqueFd fd, uint64_t pos,
               uint64_t end, uint64_t size)
      : count_(&fs->readers_, c), id_(id), fd_(std::move(fd)), pos_(pos), end_(end), size_(size) {}

  bool Produce(Connection& c) override {
    protocol::FileReadChunk chunk;
    chunk.offset = pos_;
    if (first_) chunk.size = size_;
    first_ = false;
    const size_t want = pos_ < end_ ? size_t(std::min<uint64_t>(c.MaxChunk(), end_ - pos_)) : 0;
    chunk.data.resize(want);
    ssize_t n = 0;
    if (want > 0) {
      do {
        n = ::pread(fd_.get(), chunk.data.data(), want, off_t(pos_));
      } while (n < 0 && errno == EINTR);
      if (n < 0) {
        c.SendError(id_, FsError("read", errno));
        return true;
      }
    }
    chunk.data.resize(size_t(n));
    pos_ += uint64_t(n);
    // Done at the requested end, or at EOF (a read of 0; files in /proc
    // report size 0 and end only that way).
    const bool last = pos_ >= end_ || n == 0;
    c.Reply(chunk, id_, last ? 0 : protocol::kFlagMore);
    return last;
  }

 private:
  StreamCount count_;
  uint32_t id_;
  UniqueFd fd_;
  uint64_t pos_, end_, size_;
  bool first_ = true;
};

void FileService::HandleRead(Connection& c, const Frame& f) {
  auto req = protocol::FileReadRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  if (StreamsOf(c) >= kMaxStreams) {
    return c.SendError(f.id, Status::ResourceExhausted("too many open streams on this connection"));
  }
  // O_NONBLOCK so opening a FIFO cannot hang the agent; it is refused below.
  UniqueFd fd(::open(req->path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) return c.SendError(f.id, FsError("open " + req->path, errno));
  struct stat st;
  if (::fstat(fd.get(), &st) < 0) return c.SendError(f.id, FsError("stat " + req->path, errno));
  if (S_ISDIR(st.st_mode)) return c.SendError(f.id, FsError(req->path, EISDIR));
  if (!S_ISREG(st.st_mode)) {
    return c.SendError(f.id, Status::FailedPrecondition(req->path + " is not a regular file"));
  }
  const uint64_t size = uint64_t(st.st_size);
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t end = size > 0 ? size : kMax;  // size 0: read to EOF (procfs)
  if (req->length != 0) {
    const uint64_t want_end = req->offset > kMax - req->length ? kMax : req->offset + req->length;
    end = std::min(end, want_end);
  }
  // Past the end is not an error: one empty chunk at the requested offset.
  c.AddProducer(
      std::make_unique<ReadProducer>(this, &c, f.id, std::move(fd), req->offset, end, size));
}

class ListProducer final : public Producer {
 public:
  ListProducer(FileService* fs, Connection* c, uint32_t id, DIR* dir)
      : count_(&fs->readers_, c), id_(id), dir_(dir) {}
  ~ListProducer() override { ::closedir(dir_); }

  bool Produce(Connection& c) override {
    protocol::ListReply part;
    // Room for one more entry: name (<= 255) plus the fixed fields.
    const size_t budget = std::min<size_t>(64 * 1024, c.peer_max_payload()) - 512;
    size_t used = 0;
    bool end = false;
    while (used < budget) {
      errno = 0;
      dirent* ent = ::readdir(dir_);
      if (ent == nullptr) {
        if (errno != 0) {
          c.SendError(id_, FsError("readdir", errno));
          return true;
        }
        end = true;
        break;
      }
      const std::string name = ent->d_name;
      if (name == "." || name == "..") continue;
      struct stat st;
      if (::fstatat(::dirfd(dir_), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;  // gone
      protocol::DirEntry e;
      e.name = name;
      e.type = S_ISREG(st.st_mode)   ? protocol::FileType::kFile
               : S_ISDIR(st.st_mode) ? protocol::FileType::kDirectory
               : S_ISLNK(st.st_mode) ? protocol::FileType::kSymlink
                                     : protocol::FileType::kOther;
      e.size = uint64_t(st.st_size);
      e.mode = st.st_mode & 07777;
      e.mtime_ns = uint64_t(st.st_mtim.tv_sec) * 1000000000ull + uint64_t(st.st_mtim.tv_nsec);
      used += name.size() + 64;
      part.entries.push_back(std::move(e));
    }
    c.Reply(part, id_, end ? 0 : protocol::kFlagMore);
    return end;
  }

 private:
  StreamCount count_;
  uint32_t id_;
  DIR* dir_;
};

void FileService::HandleList(Connection& c, const Frame& f) {
  auto req = protocol::ListRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  if (StreamsOf(c) >= kMaxStreams) {
    return c.SendError(f.id, Status::ResourceExhausted("too many open streams on this connection"));
  }
  const int fd = ::open(req->path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return c.SendError(f.id, FsError("open " + req->path, errno));
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return c.SendError(f.id, FsError("opendir " + req->path, err));
  }
  c.AddProducer(std::make_unique<ListProducer>(this, &c, f.id, d));
}

}  // namespace kubicle::guest::agent
