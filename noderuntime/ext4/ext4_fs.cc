#include "noderuntime/ext4/ext4_fs.h"

#include <et/com_err.h>
#include <sys/stat.h>

#include <ctime>
#include <vector>

#include "noderuntime/ext4/ext4_wire.h"

namespace kubicle::noderuntime::ext4 {

using guest::protocol::DirEntry;
using guest::protocol::FileType;
using guest::protocol::StatReply;

namespace {

constexpr int kMaxDepth = 128;            // directory nesting a remove descends
constexpr size_t kMaxRemoved = 1000000;   // inodes one recursive remove may visit

bool IsCorruption(errcode_t err) {
  switch (err) {
    case EXT2_ET_FILE_NOT_FOUND:
    case EXT2_ET_NO_DIRECTORY:
    case EXT2_ET_DIR_NO_SPACE:
    case EXT2_ET_BLOCK_ALLOC_FAIL:
    case EXT2_ET_INODE_ALLOC_FAIL:
    case EXT2_ET_TOOSMALL:
    case EXT2_ET_NO_MEMORY:
    case ENOSPC:
    case ENOMEM:
    case ENOENT:
    case ENOTDIR:
    case EFBIG:
      return false;
    default:
      return true;
  }
}

FileType TypeOf(uint16_t mode) {
  if (LINUX_S_ISREG(mode)) return FileType::kFile;
  if (LINUX_S_ISDIR(mode)) return FileType::kDirectory;
  if (LINUX_S_ISLNK(mode)) return FileType::kSymlink;
  return FileType::kOther;
}

uint64_t MtimeNs(const ext2_inode_large& in) {
  return static_cast<uint64_t>(in.i_mtime) * 1000000000ull;
}

}  // namespace

Status FsError(errcode_t err, const std::string& what) {
  const std::string m = what + ": " + error_message(err);
  switch (err) {
    case EXT2_ET_FILE_NOT_FOUND:
    case ENOENT:
      return Status::NotFound(m);
    case EXT2_ET_NO_DIRECTORY:
    case ENOTDIR:
      return Status::FailedPrecondition(m);
    case EXT2_ET_BLOCK_ALLOC_FAIL:
    case EXT2_ET_INODE_ALLOC_FAIL:
    case EXT2_ET_DIR_NO_SPACE:
    case ENOSPC:
    case EFBIG:
      return Status::ResourceExhausted(m + " (the workspace is full)");
    case EXT2_ET_NO_MEMORY:
    case ENOMEM:
      return Status::ResourceExhausted(m + " (the helper's memory limit)");
    default:
      return IsCorruption(err) ? Status::DataLoss("the workspace's file system is damaged: " + m)
                               : Status::Internal(m);
  }
}

Result<std::unique_ptr<Ext4Fs>> Ext4Fs::Open(int fd, bool writable) {
  initialize_ext2_error_table();
  const std::string name = std::to_string(fd);
  ext2_filsys fs = nullptr;
  int flags = EXT2_FLAG_64BITS | EXT2_FLAG_SKIP_MMP;
  if (writable) flags |= EXT2_FLAG_RW;
  errcode_t err = ext2fs_open2(name.c_str(), nullptr, flags, 0, 0, unixfd_io_manager, &fs);
  if (err) return FsError(err, "opening the workspace image");
  std::unique_ptr<Ext4Fs> out(new Ext4Fs(fs));
  if (ext2fs_has_feature_journal_needs_recovery(fs->super))
    return Status::FailedPrecondition(
        "the workspace's file system needs journal recovery (its VM stopped without "
        "unmounting it): attach it to a sandbox once, which replays the journal");
  if (writable) {
    if (fs->super->s_state & EXT2_ERROR_FS)
      return Status::DataLoss("the workspace's file system has recorded errors: refused for writing");
    err = ext2fs_read_bitmaps(fs);
    if (err) return FsError(err, "reading the allocation bitmaps");
  }
  return out;
}

Ext4Fs::~Ext4Fs() {
  if (fs_) {
    // Not written back: a failed op must not commit half of itself.
    fs_->flags &= ~EXT2_FLAG_DIRTY;
    ext2fs_free(fs_);
  }
}

Status Ext4Fs::Close() {
  errcode_t err = ext2fs_close_free(&fs_);
  fs_ = nullptr;
  if (err) return FsError(err, "writing the workspace's file system back");
  return Status::Ok();
}

Result<ext2_ino_t> Ext4Fs::Lookup(const std::string& path) {
  RETURN_IF_ERROR(CheckPath(path));
  ext2_ino_t ino = 0;
  errcode_t err = ext2fs_namei(fs_, EXT2_ROOT_INO, EXT2_ROOT_INO, path.c_str(), &ino);
  if (err) return FsError(err, path);
  if (ino == 0 || ino > fs_->super->s_inodes_count)
    return Status::DataLoss("the workspace's file system is damaged: " + path + " has a bad inode");
  return ino;
}

Result<StatReply> Ext4Fs::Stat(const std::string& path) {
  ASSIGN_OR_RETURN(ext2_ino_t ino, Lookup(path));
  ext2_inode_large in{};
  errcode_t err = ext2fs_read_inode_full(fs_, ino, reinterpret_cast<ext2_inode*>(&in), sizeof(in));
  if (err) return FsError(err, path);
  StatReply r;
  r.type = TypeOf(in.i_mode);
  r.size = EXT2_I_SIZE(&in);
  r.mode = in.i_mode & 07777;
  r.mtime_ns = MtimeNs(in);
  r.uid = inode_uid(in);
  r.gid = inode_gid(in);
  return r;
}

Status Ext4Fs::Read(const std::string& path, size_t chunk,
                    const std::function<Status(uint64_t)>& on_size,
                    const std::function<Status(const char*, size_t)>& on_data) {
  ASSIGN_OR_RETURN(ext2_ino_t ino, Lookup(path));
  ext2_inode in{};
  errcode_t err = ext2fs_read_inode(fs_, ino, &in);
  if (err) return FsError(err, path);
  if (LINUX_S_ISDIR(in.i_mode)) return Status::FailedPrecondition(path + " is a directory");
  if (!LINUX_S_ISREG(in.i_mode)) return Status::FailedPrecondition(path + " is not a regular file");
  const uint64_t size = EXT2_I_SIZE(&in);
  RETURN_IF_ERROR(on_size(size));
  ext2_file_t f = nullptr;
  err = ext2fs_file_open(fs_, ino, 0, &f);
  if (err) return FsError(err, path);
  std::vector<char> buf(chunk);
  uint64_t done = 0;
  Status st;
  while (done < size) {
    unsigned got = 0;
    err = ext2fs_file_read(f, buf.data(), static_cast<unsigned>(chunk), &got);
    if (err) {
      st = FsError(err, path);
      break;
    }
    if (got == 0) {
      st = Status::DataLoss("the workspace's file system is damaged: " + path + " ends early");
      break;
    }
    st = on_data(buf.data(), got);
    if (!st.ok()) break;
    done += got;
  }
  ext2fs_file_close(f);
  return st;
}

Result<ext2_ino_t> Ext4Fs::MakeParents(const std::vector<std::string>& parts) {
  ext2_ino_t dir = EXT2_ROOT_INO;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& name = parts[i];
    ext2_ino_t next = 0;
    errcode_t err = ext2fs_lookup(fs_, dir, name.c_str(), static_cast<int>(name.size()), nullptr, &next);
    if (err == EXT2_ET_FILE_NOT_FOUND) {
      err = ext2fs_mkdir(fs_, dir, 0, name.c_str());
      if (err == EXT2_ET_DIR_NO_SPACE) {
        err = ext2fs_expand_dir(fs_, dir);
        if (!err) err = ext2fs_mkdir(fs_, dir, 0, name.c_str());
      }
      if (err) return FsError(err, "making directory " + name);
      err = ext2fs_lookup(fs_, dir, name.c_str(), static_cast<int>(name.size()), nullptr, &next);
    }
    if (err) return FsError(err, name);
    ext2_inode in{};
    err = ext2fs_read_inode(fs_, next, &in);
    if (err) return FsError(err, name);
    if (!LINUX_S_ISDIR(in.i_mode)) return Status::FailedPrecondition(name + " is not a directory");
    dir = next;
  }
  return dir;
}

Status Ext4Fs::Write(const std::string& path, uint32_t mode, uint64_t size,
                     const std::function<Result<size_t>(char*, size_t)>& next) {
  RETURN_IF_ERROR(CheckPath(path));
  if (path == "/") return Status::FailedPrecondition("/ is a directory");
  const auto parts = Components(path);
  ASSIGN_OR_RETURN(ext2_ino_t dir, MakeParents(parts));
  const std::string& name = parts.back();
  ext2_ino_t ino = 0;
  errcode_t err = ext2fs_lookup(fs_, dir, name.c_str(), static_cast<int>(name.size()), nullptr, &ino);
  const uint32_t now = static_cast<uint32_t>(::time(nullptr));
  if (err == EXT2_ET_FILE_NOT_FOUND) {
    err = ext2fs_new_inode(fs_, dir, LINUX_S_IFREG | 0644, nullptr, &ino);
    if (err) return FsError(err, "allocating an inode for " + path);
    err = ext2fs_link(fs_, dir, name.c_str(), ino, EXT2_FT_REG_FILE);
    if (err == EXT2_ET_DIR_NO_SPACE) {
      err = ext2fs_expand_dir(fs_, dir);
      if (!err) err = ext2fs_link(fs_, dir, name.c_str(), ino, EXT2_FT_REG_FILE);
    }
    if (err) return FsError(err, "linking " + path);
    ext2fs_inode_alloc_stats2(fs_, ino, +1, 0);
    ext2_inode in{};
    in.i_mode = static_cast<uint16_t>(LINUX_S_IFREG | (mode & 07777));
    in.i_atime = in.i_ctime = in.i_mtime = now;
    in.i_links_count = 1;
    if (ext2fs_has_feature_extents(fs_->super)) {
      ext2_extent_handle_t h = nullptr;
      err = ext2fs_extent_open2(fs_, ino, &in, &h);
      if (err) return FsError(err, "initialising " + path);
      ext2fs_extent_free(h);
    }
    err = ext2fs_write_new_inode(fs_, ino, &in);
    if (err) return FsError(err, "writing the inode of " + path);
  } else if (err) {
    return FsError(err, path);
  } else {
    ext2_inode in{};
    err = ext2fs_read_inode(fs_, ino, &in);
    if (err) return FsError(err, path);
    if (!LINUX_S_ISREG(in.i_mode)) return Status::FailedPrecondition(path + " exists and is not a regular file");
    in.i_mode = static_cast<uint16_t>(LINUX_S_IFREG | (mode & 07777));
    in.i_mtime = in.i_ctime = now;
    err = ext2fs_write_inode(fs_, ino, &in);
    if (err) return FsError(err, path);
  }
  ext2_file_t f = nullptr;
  err = ext2fs_file_open(fs_, ino, EXT2_FILE_WRITE, &f);
  if (err) return FsError(err, path);
  Status st;
  err = ext2fs_file_set_size2(f, 0);
  if (err) st = FsError(err, "truncating " + path);
  std::vector<char> buf(kMaxDataFrame);
  uint64_t done = 0;
  while (st.ok() && done < size) {
    auto n = next(buf.data(), std::min<uint64_t>(buf.size(), size - done));
    if (!n.ok()) {
      st = n.status();
      break;
    }
    if (*n == 0) {
      st = Status::InvalidArgument("the data ended before its announced size");
      break;
    }
    unsigned written = 0;
    err = ext2fs_file_write(f, buf.data(), static_cast<unsigned>(*n), &written);
    if (err || written != *n) {
      st = FsError(err ? err : ENOSPC, "writing " + path);
      break;
    }
    done += *n;
  }
  err = ext2fs_file_close(f);
  if (st.ok() && err) st = FsError(err, "writing " + path);
  return st;
}

namespace {
struct ListCtx {
  ext2_filsys fs;
  size_t max;
  size_t seen = 0;
  const std::function<Status(const DirEntry&)>* on_entry;
  Status st;
};

int ListOne(ext2_ino_t, int, ext2_dir_entry* d, int, int, char*, void* priv) {
  auto* c = static_cast<ListCtx*>(priv);
  const int len = ext2fs_dirent_name_len(d);
  std::string name(d->name, static_cast<size_t>(len));
  if (name == "." || name == "..") return 0;
  if (++c->seen > c->max) {
    c->st = Status::ResourceExhausted("the directory has more than " + std::to_string(c->max) +
                                      " entries");
    return DIRENT_ABORT;
  }
  DirEntry e;
  e.name = std::move(name);
  ext2_inode_large in{};
  if (d->inode != 0 && d->inode <= c->fs->super->s_inodes_count &&
      ext2fs_read_inode_full(c->fs, d->inode, reinterpret_cast<ext2_inode*>(&in), sizeof(in)) == 0) {
    e.type = TypeOf(in.i_mode);
    e.size = EXT2_I_SIZE(&in);
    e.mode = in.i_mode & 07777;
    e.mtime_ns = MtimeNs(in);
  } else {
    e.type = FileType::kOther;
  }
  c->st = (*c->on_entry)(e);
  return c->st.ok() ? 0 : DIRENT_ABORT;
}
}  // namespace

Status Ext4Fs::List(const std::string& path, size_t max_entries,
                    const std::function<Status(const DirEntry&)>& on_entry) {
  ASSIGN_OR_RETURN(ext2_ino_t ino, Lookup(path));
  ext2_inode in{};
  errcode_t err = ext2fs_read_inode(fs_, ino, &in);
  if (err) return FsError(err, path);
  if (!LINUX_S_ISDIR(in.i_mode)) return Status::FailedPrecondition(path + " is not a directory");
  ListCtx ctx{fs_, max_entries, 0, &on_entry, Status::Ok()};
  err = ext2fs_dir_iterate2(fs_, ino, 0, nullptr, ListOne, &ctx);
  if (!ctx.st.ok()) return ctx.st;
  if (err) return FsError(err, "listing " + path);
  return Status::Ok();
}

namespace {
struct ChildrenCtx {
  std::vector<std::pair<std::string, ext2_ino_t>> out;
  size_t max;
  bool over = false;
};
int CollectOne(ext2_ino_t, int, ext2_dir_entry* d, int, int, char*, void* priv) {
  auto* c = static_cast<ChildrenCtx*>(priv);
  std::string name(d->name, static_cast<size_t>(ext2fs_dirent_name_len(d)));
  if (name == "." || name == "..") return 0;
  if (c->out.size() >= c->max) {
    c->over = true;
    return DIRENT_ABORT;
  }
  c->out.emplace_back(std::move(name), d->inode);
  return 0;
}
}  // namespace

Status Ext4Fs::RemoveIno(ext2_ino_t parent, const std::string& name, ext2_ino_t ino,
                         bool recursive, int depth, size_t* budget) {
  if (ino == 0 || ino > fs_->super->s_inodes_count || ino < EXT2_FIRST_INO(fs_->super))
    return Status::DataLoss("the workspace's file system is damaged: " + name + " has a bad inode");
  if (*budget == 0) return Status::ResourceExhausted("the tree is too large to remove in one call");
  --*budget;
  ext2_inode in{};
  errcode_t err = ext2fs_read_inode(fs_, ino, &in);
  if (err) return FsError(err, name);
  const bool dir = LINUX_S_ISDIR(in.i_mode);
  if (dir) {
    if (depth > kMaxDepth) return Status::ResourceExhausted("directories nest too deep to remove");
    ChildrenCtx kids{{}, std::min<size_t>(*budget, 100000)};
    err = ext2fs_dir_iterate2(fs_, ino, 0, nullptr, CollectOne, &kids);
    if (err) return FsError(err, "listing " + name);
    if (kids.over) return Status::ResourceExhausted("the tree is too large to remove in one call");
    if (!kids.out.empty() && !recursive)
      return Status::FailedPrecondition("directory " + name + " is not empty");
    for (const auto& [n, child] : kids.out)
      RETURN_IF_ERROR(RemoveIno(ino, n, child, recursive, depth + 1, budget));
  }
  err = ext2fs_unlink(fs_, parent, name.c_str(), ino, 0);
  if (err) return FsError(err, "unlinking " + name);
  if (dir) {
    ext2_inode p{};
    if (ext2fs_read_inode(fs_, parent, &p) == 0 && p.i_links_count > 1) {
      --p.i_links_count;
      (void)ext2fs_write_inode(fs_, parent, &p);
    }
    in.i_links_count = 0;
  } else if (in.i_links_count > 0) {
    --in.i_links_count;
  }
  if (in.i_links_count == 0) {
    if (ext2fs_inode_has_valid_blocks2(fs_, &in)) {
      err = ext2fs_punch(fs_, ino, &in, nullptr, 0, ~0ULL);
      if (err) return FsError(err, "freeing the blocks of " + name);
    }
    in.i_dtime = static_cast<uint32_t>(::time(nullptr));
    ext2fs_inode_alloc_stats2(fs_, ino, -1, dir ? 1 : 0);
  }
  err = ext2fs_write_inode(fs_, ino, &in);
  if (err) return FsError(err, name);
  return Status::Ok();
}

Status Ext4Fs::Remove(const std::string& path, bool recursive) {
  RETURN_IF_ERROR(CheckPath(path));
  if (path == "/") return Status::InvalidArgument("the workspace's root cannot be removed");
  const auto parts = Components(path);
  ext2_ino_t parent = EXT2_ROOT_INO;
  if (parts.size() > 1) {
    std::string dir;
    for (size_t i = 0; i + 1 < parts.size(); ++i) dir += "/" + parts[i];
    ASSIGN_OR_RETURN(parent, Lookup(dir));
  }
  ext2_ino_t ino = 0;
  const std::string& name = parts.back();
  errcode_t err = ext2fs_lookup(fs_, parent, name.c_str(), static_cast<int>(name.size()), nullptr, &ino);
  if (err) return FsError(err, path);
  size_t budget = kMaxRemoved;
  return RemoveIno(parent, name, ino, recursive, 0, &budget);
}

}  // namespace kubicle::noderuntime::ext4
