#include "guest/agent/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace kubicle::guest::agent {

using protocol::Frame;

Status FsError(const std::string& what, int err) {
  Status s = Status::FromErrno(what, err);
  switch (err) {
    case ENOTDIR: case EISDIR: case ENOTEMPTY: case ELOOP: case EROFS: case EBUSY: case EXDEV:
    case ETXTBSY:
      return Status(StatusCode::kFailedPrecondition, s.message(), err);
    case ENAMETOOLONG:
      return Status(StatusCode::kInvalidArgument, s.message(), err);
    case EDQUOT: case EFBIG:
      return Status(StatusCode::kResourceExhausted, s.message(), err);
    default:
      return s;
  }
}

namespace {
protocol::FileType TypeOf(mode_t m) {
  if (S_ISREG(m)) return protocol::FileType::kFile;
  if (S_ISDIR(m)) return protocol::FileType::kDirectory;
  if (S_ISLNK(m)) return protocol::FileType::kSymlink;
  return protocol::FileType::kOther;
}
uint64_t MtimeNs(const struct stat& st) {
  return uint64_t(st.st_mtim.tv_sec) * 1000000000ull + uint64_t(st.st_mtim.tv_nsec);
}
std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}
Status WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return FsError("write", errno);
    p += w;
    n -= size_t(w);
  }
  return Status::Ok();
}
}  // namespace

size_t FileService::StreamsOf(Connection& c) const {
  size_t n = 0;
  for (const auto& [k, s] : writes_) n += k.first == &c;
  auto it = readers_.find(&c);
  return n + (it == readers_.end() ? 0 : it->second);
}

// ---- FILE_WRITE ----

Result<FileService::WriteStream> FileService::OpenStream(const protocol::FileWriteChunk& first) {
  WriteStream s;
  s.path = *first.path;
  if (first.atomic) {
    const std::string base = s.path.substr(s.path.rfind('/') + 1);
    if (base.empty()) return Status::InvalidArgument("path names a directory");
    std::string tmpl = DirName(s.path) + "/." + base.substr(0, 200) + ".kubicle-XXXXXX";
    const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) return FsError("create temporary file next to " + s.path, errno);
    s.fd.reset(fd);
    s.tmp_path = tmpl;
    struct stat st;
    if (::stat(s.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      ::unlink(s.tmp_path.c_str());
      return FsError(s.path, EISDIR);
    }
  } else {
    s.fd.reset(::open(s.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, first.mode));
    if (!s.fd) return FsError("open " + s.path, errno);
  }
  if (::fchmod(s.fd.get(), first.mode) < 0) {
    if (!s.tmp_path.empty()) ::unlink(s.tmp_path.c_str());
    return FsError("chmod " + s.path, errno);
  }
  return s;
}

Status FileService::Append(WriteStream& s, const protocol::FileWriteChunk& chunk) {
  if (chunk.offset != s.received) {
    return Status::InvalidArgument("chunk offset " + std::to_string(chunk.offset) +
                                   " does not match the " + std::to_string(s.received) +
                                   " bytes received");
  }
  RETURN_IF_ERROR(WriteAll(s.fd.get(), chunk.data.data(), chunk.data.size()));
  s.received += chunk.data.size();
  return Status::Ok();
}

Status FileService::Commit(WriteStream& s) {
  if (::fsync(s.fd.get()) < 0) return FsError("fsync " + s.path, errno);
  if (::close(s.fd.release()) < 0) return FsError("close " + s.path, errno);
  if (s.tmp_path.empty()) return Status::Ok();
  if (::rename(s.tmp_path.c_str(), s.path.c_str()) < 0) return FsError("rename to " + s.path, errno);
  s.tmp_path.clear();
  // The rename is durable only once the directory is.
  UniqueFd dir(::open(DirName(s.path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir) ::fsync(dir.get());
  return Status::Ok();
}

void FileService::AbortWrite(Connection& c, const Frame& f, const Status& why) {
  auto it = writes_.find({&c, f.id});
  if (it != writes_.end()) {
    if (!it->second.tmp_path.empty()) ::unlink(it->second.tmp_path.c_str());
    writes_.erase(it);
  }
  if (f.has_more()) dropping_.insert({&c, f.id});
  c.SendError(f.id, why);
}

bool FileService::Dropped(Connection& c, const Frame& f) {
  auto it = dropping_.find({&c, f.id});
  if (it == dropping_.end()) return false;
  if (!f.has_more()) dropping_.erase(it);
  return true;
}

void FileService::RefuseWrite(Connection& c, const Frame& f, const Status& why) {
  if (Dropped(c, f)) return;
  AbortWrite(c, f, why);
}

void FileService::HandleWrite(Connection& c, const Frame& f) {
  const Key key{&c, f.id};
  auto chunk = protocol::FileWriteChunk::Decode(f.payload);
  // A first chunk starts a new stream even on the id of one that failed:
  // the host may stop sending at our ERROR and later reuse the id, and
  // that new stream must be answered, not dropped as the old one's rest.
  if (chunk.ok() && chunk->path.has_value()) dropping_.erase(key);
  if (Dropped(c, f)) return;
  if (!chunk.ok()) return AbortWrite(c, f, chunk.status());
  auto it = writes_.find(key);
  if (it == writes_.end()) {
    if (!chunk->path.has_value()) {
      return AbortWrite(c, f, Status::FailedPrecondition(
                                  "no open write stream for this id (the first chunk carries "
                                  "the path)"));
    }
    if (chunk->offset != 0) return AbortWrite(c, f, Status::InvalidArgument("first chunk must have offset 0"));
    if (StreamsOf(c) >= kMaxStreams) {
      return AbortWrite(c, f, Status::ResourceExhausted("too many open streams on this connection"));
    }
    auto opened = OpenStream(*chunk);
    if (!opened.ok()) return AbortWrite(c, f, opened.status());
    it = writes_.emplace(key, std::move(*opened)).first;
  } else if (chunk->path.has_value()) {
    return AbortWrite(c, f, Status::InvalidArgument("path belongs in the first chunk only"));
  }
  Status s = Append(it->second, *chunk);
  if (s.ok() && !f.has_more()) s = Commit(it->second);
  if (!s.ok()) return AbortWrite(c, f, s);
  if (f.has_more()) return;
  const uint64_t size = it->second.received;
  writes_.erase(it);
  c.Reply(protocol::FileWriteReply{size}, f.id);
}

void FileService::OnClosed(Connection& c) {
  for (auto it = writes_.begin(); it != writes_.end();) {
    if (it->first.first == &c) {
      if (!it->second.tmp_path.empty()) ::unlink(it->second.tmp_path.c_str());
      it = writes_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = dropping_.begin(); it != dropping_.end();) {
    it = it->first == &c ? dropping_.erase(it) : std::next(it);
  }
  readers_.erase(&c);
}

// ---- STAT, MKDIR, REMOVE, CHMOD ----

void FileService::HandleStat(Connection& c, const Frame& f) {
  auto req = protocol::StatRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  struct stat st;
  if (::lstat(req->path.c_str(), &st) < 0) return c.SendError(f.id, FsError(req->path, errno));
  protocol::StatReply r;
  r.type = TypeOf(st.st_mode);
  r.size = uint64_t(st.st_size);
  r.mode = st.st_mode & 07777;
  r.mtime_ns = MtimeNs(st);
  r.uid = st.st_uid;
  r.gid = st.st_gid;
  c.Reply(r, f.id);
}

namespace {
Status MkdirOne(const std::string& path, uint32_t mode, bool exist_ok) {
  if (::mkdir(path.c_str(), mode) == 0) {
    if (::chmod(path.c_str(), mode) < 0) return FsError("chmod " + path, errno);
    return Status::Ok();
  }
  const int err = errno;
  struct stat st;
  if (err == EEXIST && exist_ok && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Status::Ok();
  }
  if (err == EEXIST && exist_ok) return FsError(path, ENOTDIR);
  return FsError("mkdir " + path, err);
}
}  // namespace

void FileService::HandleMkdir(Connection& c, const Frame& f) {
  auto req = protocol::MkdirRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  std::string path = req->path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  Status s;
  if (req->parents) {
    // Every missing ancestor (0755), then the directory itself (mode).
    for (size_t pos = path.find('/', 1); s.ok() && pos != std::string::npos;
         pos = path.find('/', pos + 1)) {
      if (path[pos - 1] != '/') s = MkdirOne(path.substr(0, pos), 0755, true);
    }
    if (s.ok()) s = MkdirOne(path, req->mode, true);
  } else {
    s = MkdirOne(path, req->mode, false);
  }
  if (!s.ok()) return c.SendError(f.id, s);
  c.Reply(protocol::EmptyMessageReply<protocol::MsgType::kMkdir>{}, f.id);
}

namespace {
constexpr int kMaxRemoveDepth = 256;

// Removes everything inside the directory `dfd` (which it closes).
Status RemoveContents(int dfd, const std::string& path, int depth) {
  if (depth > kMaxRemoveDepth) {
    ::close(dfd);
    return Status::FailedPrecondition("directory tree deeper than " +
                                      std::to_string(kMaxRemoveDepth) + " levels: " + path);
  }
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    ::close(dfd);
    return FsError("opendir " + path, errno);
  }
  Status s;
  while (s.ok()) {
    errno = 0;
    dirent* ent = ::readdir(d);
    if (ent == nullptr) {
      if (errno != 0) s = FsError("readdir " + path, errno);
      break;
    }
    const std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    if (::unlinkat(::dirfd(d), name.c_str(), 0) == 0) continue;
    if (errno != EISDIR && errno != EPERM) {
      s = FsError("unlink " + path + "/" + name, errno);
      break;
    }
    const int child = ::openat(::dirfd(d), name.c_str(),
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) {
      s = FsError("open " + path + "/" + name, errno);
      break;
    }
    s = RemoveContents(child, path + "/" + name, depth + 1);
    if (s.ok() && ::unlinkat(::dirfd(d), name.c_str(), AT_REMOVEDIR) < 0) {
      s = FsError("rmdir " + path + "/" + name, errno);
    }
  }
  ::closedir(d);
  return s;
}
}  // namespace

void FileService::HandleRemove(Connection& c, const Frame& f) {
  auto req = protocol::RemoveRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  struct stat st;
  if (::lstat(req->path.c_str(), &st) < 0) return c.SendError(f.id, FsError(req->path, errno));
  Status s;
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(req->path.c_str()) < 0) s = FsError("unlink " + req->path, errno);
  } else {
    if (req->recursive) {
      const int dfd = ::open(req->path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      s = dfd < 0 ? FsError("open " + req->path, errno) : RemoveContents(dfd, req->path, 0);
    }
    if (s.ok() && ::rmdir(req->path.c_str()) < 0) s = FsError("rmdir " + req->path, errno);
  }
  if (!s.ok()) return c.SendError(f.id, s);
  c.Reply(protocol::EmptyMessageReply<protocol::MsgType::kRemove>{}, f.id);
}

void FileService::HandleChmod(Connection& c, const Frame& f) {
  auto req = protocol::ChmodRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  if (::chmod(req->path.c_str(), req->mode) < 0) {
    return c.SendError(f.id, FsError("chmod " + req->path, errno));
  }
  c.Reply(protocol::EmptyMessageReply<protocol::MsgType::kChmod>{}, f.id);
}

}  // namespace kubicle::guest::agent
