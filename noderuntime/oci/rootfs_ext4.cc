#include "noderuntime/oci/rootfs_ext4.h"

// Not <et/com_err.h> on its own: ext2fs.h includes it inside extern "C".
#include <ext2fs/ext2fs.h>
#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "common/run_tool.h"
#include "common/unique_fd.h"
#include "noderuntime/oci/rootfs_ext4_dir.h"

namespace kubicle::noderuntime::oci {

namespace {

constexpr int kMaxDepth = 2048;        // a 4096-byte path has at most 2048 levels
constexpr uint16_t kMaxLinks = 65000;  // ext4's EXT4_LINK_MAX

Status Ext2Error(errcode_t err, const std::string& what) {
  const std::string m = what + ": " + error_message(err);
  switch (err) {
    case EXT2_ET_BLOCK_ALLOC_FAIL:
    case EXT2_ET_INODE_ALLOC_FAIL:
    case EXT2_ET_DIR_NO_SPACE:
    case EXT2_ET_EA_NO_SPACE:
    case ENOSPC:
      return Status::ResourceExhausted(m + " (the image is full)");
    case EXT2_ET_NO_MEMORY:
    case ENOMEM:
      return Status::ResourceExhausted(m);
    default:
      return Status::Internal(m);
  }
}

bool XattrNameAllowed(const std::string& name) {
  for (const char* p : {"user.", "trusted.", "security."})
    if (name.rfind(p, 0) == 0 && name.size() > std::string(p).size()) return true;
  return name == "system.posix_acl_access" || name == "system.posix_acl_default";
}

// ext4 keeps seconds as 32 signed bits plus 2 epoch bits in the extra
// field, beside the nanoseconds: 1901..2446.
void SetTime(uint32_t* base, uint32_t* extra, int64_t sec, uint32_t nsec) {
  constexpr int64_t kMin = INT32_MIN, kMax = INT32_MAX + (int64_t{3} << 32);
  sec = std::clamp(sec, kMin, kMax);
  const int64_t low = static_cast<int32_t>(static_cast<uint32_t>(sec));
  const uint32_t epoch = static_cast<uint32_t>(((sec - low) >> 32) & 3);
  *base = static_cast<uint32_t>(sec);
  *extra = (std::min<uint32_t>(nsec, 999999999u) << 2) | epoch;
}

int FileTypeOf(TarType t) {
  switch (t) {
    case TarType::kDirectory:
      return EXT2_FT_DIR;
    case TarType::kSymlink:
      return EXT2_FT_SYMLINK;
    case TarType::kFifo:
      return EXT2_FT_FIFO;
    default:
      return EXT2_FT_REG_FILE;
  }
}

}  // namespace

Result<std::unique_ptr<RootfsImage>> RootfsImage::Create(const std::string& path, uint64_t bytes,
                                                         uint64_t inodes,
                                                         const std::string& mke2fs) {
  initialize_ext2_error_table();
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd) return Status::FromErrno("creating " + path);
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
      return Status::FromErrno("sizing " + path);
  }
  RETURN_IF_ERROR(RunTool({mke2fs,
                           "-q",
                           "-F",
                           "-t",
                           "ext4",
                           "-b",
                           "4096",
                           "-I",
                           "256",
                           "-N",
                           std::to_string(inodes),
                           "-m",
                           "0",
                           "-O",
                           "^has_journal",
                           "-E",
                           "root_owner=0:0,lazy_itable_init=1,nodiscard",
                           "-L",
                           "kubicle-rootfs",
                           path},
                          path + ".mke2fs.log"));
  ext2_filsys fs = nullptr;
  errcode_t err = ext2fs_open2(path.c_str(), nullptr, EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0,
                               unix_io_manager, &fs);
  if (err) return Ext2Error(err, "opening the new image " + path);
  std::unique_ptr<RootfsImage> img(new RootfsImage(fs));
  err = ext2fs_read_bitmaps(fs);
  if (err) return Ext2Error(err, "reading the new image's bitmaps");
  return img;
}

RootfsImage::~RootfsImage() {
  if (fs_) {
    fs_->flags &= ~EXT2_FLAG_DIRTY;  // an image not closed is removed, not finished
    ext2fs_free(fs_);
  }
}

Status RootfsImage::Close() {
  errcode_t err = ext2fs_close_free(&fs_);
  fs_ = nullptr;
  if (err) return Ext2Error(err, "writing the image's metadata");
  return Status::Ok();
}

Result<uint32_t> RootfsImage::NewInode(uint32_t dir, uint16_t mode, const std::string& path) {
  ext2_ino_t ino = 0;
  errcode_t err = ext2fs_new_inode(fs_, dir, mode, nullptr, &ino);
  if (err) return Ext2Error(err, "allocating an inode for " + path);
  return ino;
}

Status RootfsImage::SetAttrs(uint32_t ino, const TreeInode& n, uint16_t type_bits,
                             const std::string& path) {
  ext2_inode_large in{};
  errcode_t err = ext2fs_read_inode_full(fs_, ino, reinterpret_cast<ext2_inode*>(&in), sizeof(in));
  if (err) return Ext2Error(err, "reading the inode of " + path);
  in.i_mode = static_cast<uint16_t>(type_bits | (n.mode & 07777));
  in.i_uid = static_cast<uint16_t>(n.uid & 0xffff);
  ext2fs_set_i_uid_high(in, n.uid >> 16);
  in.i_gid = static_cast<uint16_t>(n.gid & 0xffff);
  ext2fs_set_i_gid_high(in, n.gid >> 16);
  if (in.i_extra_isize < 24) in.i_extra_isize = sizeof(ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE;
  // atime, ctime and crtime are the mtime: the image is the same whenever it
  // is built.
  SetTime(&in.i_mtime, &in.i_mtime_extra, n.mtime_sec, n.mtime_nsec);
  SetTime(&in.i_atime, &in.i_atime_extra, n.mtime_sec, n.mtime_nsec);
  SetTime(&in.i_ctime, &in.i_ctime_extra, n.mtime_sec, n.mtime_nsec);
  SetTime(&in.i_crtime, &in.i_crtime_extra, n.mtime_sec, n.mtime_nsec);
  err = ext2fs_write_inode_full(fs_, ino, reinterpret_cast<ext2_inode*>(&in), sizeof(in));
  if (err) return Ext2Error(err, "writing the inode of " + path);
  return SetXattrs(ino, n, path);
}

Status RootfsImage::SetXattrs(uint32_t ino, const TreeInode& n, const std::string& path) {
  if (n.xattrs.empty()) return Status::Ok();
  for (const auto& [name, value] : n.xattrs)
    if (!XattrNameAllowed(name))
      return Status::InvalidArgument(
          "xattr '" + name.substr(0, 64) + "' of " + path +
          " is outside the user., trusted., security. and POSIX ACL names");
  ext2_xattr_handle* h = nullptr;
  errcode_t err = ext2fs_xattrs_open(fs_, ino, &h);
  if (!err) err = ext2fs_xattrs_read(h);
  for (size_t i = 0; !err && i < n.xattrs.size(); ++i)
    err = ext2fs_xattr_set(h, n.xattrs[i].first.c_str(), n.xattrs[i].second.data(),
                           n.xattrs[i].second.size());
  const errcode_t close_err = h ? ext2fs_xattrs_close(&h) : 0;
  if (!err) err = close_err;
  if (err) return Ext2Error(err, "writing the xattrs of " + path);
  return Status::Ok();
}

Status RootfsImage::WriteTree(const RootfsTree& tree) {
  RETURN_IF_ERROR(SetAttrs(EXT2_ROOT_INO, tree.root(), LINUX_S_IFDIR, "/"));
  // mke2fs's lost+found stays, unless the image brings its own.
  std::vector<DirEntryOut> entries;
  ext2_ino_t lost = 0;
  if (ext2fs_lookup(fs_, EXT2_ROOT_INO, "lost+found", 10, nullptr, &lost) == 0) {
    if (tree.root().children.count("lost+found")) {
      RETURN_IF_ERROR(DropDir(lost, "/lost+found"));
    } else {
      entries.push_back({"lost+found", lost, EXT2_FT_DIR});
    }
  }
  return WriteDir(EXT2_ROOT_INO, EXT2_ROOT_INO, tree.root(), "", 0, std::move(entries));
}

Status RootfsImage::DropDir(uint32_t ino, const std::string& path) {
  ext2_inode in{};
  errcode_t err = ext2fs_read_inode(fs_, ino, &in);
  if (!err) err = ext2fs_punch(fs_, ino, &in, nullptr, 0, ~0ULL);
  if (!err) {
    in.i_links_count = 0;
    in.i_dtime = 1;
    err = ext2fs_write_inode(fs_, ino, &in);
  }
  if (err) return Ext2Error(err, "removing " + path);
  ext2fs_inode_alloc_stats2(fs_, ino, -1, 1);
  ext2_inode root{};
  err = ext2fs_read_inode(fs_, EXT2_ROOT_INO, &root);
  if (!err) {
    --root.i_links_count;  // its ".." was a link to the root
    err = ext2fs_write_inode(fs_, EXT2_ROOT_INO, &root);
  }
  if (err) return Ext2Error(err, "removing " + path);
  return Status::Ok();
}

Status RootfsImage::WriteDir(uint32_t self, uint32_t parent, const TreeInode& dir,
                             const std::string& path, int depth, std::vector<DirEntryOut> entries) {
  if (depth > kMaxDepth) return Status::InvalidArgument(path + ": directories nest too deep");
  entries.reserve(entries.size() + dir.children.size());
  for (const auto& [name, child] : dir.children) {
    ASSIGN_OR_RETURN(uint32_t ino, WriteChild(self, *child.inode, path + "/" + name, depth));
    entries.push_back({name, ino, FileTypeOf(child.inode->type)});
  }
  // Names are written last, all at once (rootfs_ext4_dir.h says why).
  errcode_t err = WriteDirectory(fs_, self, parent, entries);
  if (err) return Ext2Error(err, "writing directory " + (path.empty() ? "/" : path));
  return Status::Ok();
}

Result<uint32_t> RootfsImage::WriteChild(uint32_t dir, const TreeInode& n, const std::string& path,
                                         int depth) {
  if (auto it = inos_.find(&n); it != inos_.end()) return AddLink(it->second, path);
  switch (n.type) {
    case TarType::kDirectory:
      return MakeDir(dir, n, path, depth);
    case TarType::kSymlink:
      return MakeSymlink(dir, n, path);
    case TarType::kFile:
    case TarType::kFifo:
      return MakeFile(dir, n, path);
    default:
      return Status::InvalidArgument(path + ": a type the image cannot hold");
  }
}

Result<uint32_t> RootfsImage::AddLink(uint32_t ino, const std::string& path) {
  ext2_inode in{};
  errcode_t err = ext2fs_read_inode(fs_, ino, &in);
  if (!err && in.i_links_count >= kMaxLinks)
    return Status::InvalidArgument(path + ": more than " + std::to_string(kMaxLinks) +
                                   " hard links to one file (ext4's limit)");
  if (!err) {
    ++in.i_links_count;
    err = ext2fs_write_inode(fs_, ino, &in);
  }
  if (err) return Ext2Error(err, "counting the links of " + path);
  return ino;
}

Result<uint32_t> RootfsImage::MakeDir(uint32_t dir, const TreeInode& n, const std::string& path,
                                      int depth) {
  // Made unnamed: the parent's names are written at its end.
  ASSIGN_OR_RETURN(uint32_t ino, NewInode(dir, LINUX_S_IFDIR | 0755, path));
  errcode_t err = ext2fs_mkdir(fs_, dir, ino, nullptr);
  if (err) return Ext2Error(err, "making directory " + path);
  inos_[&n] = ino;
  RETURN_IF_ERROR(SetAttrs(ino, n, LINUX_S_IFDIR, path));
  RETURN_IF_ERROR(WriteDir(ino, dir, n, path, depth + 1, {}));
  return ino;
}

Result<uint32_t> RootfsImage::MakeSymlink(uint32_t dir, const TreeInode& n,
                                          const std::string& path) {
  ASSIGN_OR_RETURN(uint32_t ino, NewInode(dir, LINUX_S_IFLNK | 0777, path));
  errcode_t err = ext2fs_symlink(fs_, dir, ino, nullptr, n.symlink_target.c_str());
  if (err) return Ext2Error(err, "making symlink " + path);
  inos_[&n] = ino;
  RETURN_IF_ERROR(SetAttrs(ino, n, LINUX_S_IFLNK, path));
  return ino;
}

Result<uint32_t> RootfsImage::MakeFile(uint32_t dir, const TreeInode& n, const std::string& path) {
  const uint16_t type_bits = n.type == TarType::kFile ? LINUX_S_IFREG : LINUX_S_IFIFO;
  ASSIGN_OR_RETURN(uint32_t ino, NewInode(dir, type_bits | 0644, path));
  ext2_inode in{};
  in.i_mode = type_bits | 0644;
  in.i_links_count = 1;
  errcode_t err = 0;
  if (n.type == TarType::kFile && ext2fs_has_feature_extents(fs_->super)) {
    // An empty extent tree, as the kernel expects of a file with extents.
    ext2_extent_handle_t eh = nullptr;
    err = ext2fs_extent_open2(fs_, ino, &in, &eh);
    if (err) return Ext2Error(err, "initialising " + path);
    ext2fs_extent_free(eh);
  }
  err = ext2fs_write_new_inode(fs_, ino, &in);
  if (err) return Ext2Error(err, "writing the inode of " + path);
  ext2fs_inode_alloc_stats2(fs_, ino, +1, 0);
  inos_[&n] = ino;
  RETURN_IF_ERROR(SetAttrs(ino, n, type_bits, path));
  if (n.inline_content) {
    size_t at = 0;
    RETURN_IF_ERROR(WriteFileData(n, [&](char* buf, size_t max) -> Result<size_t> {
      const size_t k = std::min(max, n.content.size() - at);
      std::copy_n(n.content.data() + at, k, buf);
      at += k;
      return k;
    }));
  }
  return ino;
}

Status RootfsImage::WriteFileData(const TreeInode& file,
                                  const std::function<Result<size_t>(char*, size_t)>& next) {
  auto it = inos_.find(&file);
  if (it == inos_.end()) return Status::Internal("a file the tree did not write");
  if (file.size == 0) return Status::Ok();
  ext2_file_t f = nullptr;
  errcode_t err = ext2fs_file_open(fs_, it->second, EXT2_FILE_WRITE, &f);
  if (err) return Ext2Error(err, "opening a file of the image");
  std::vector<char> buf(256 << 10);
  const std::vector<char> zeros(fs_->blocksize, 0);
  uint64_t done = 0;
  Status st;
  while (st.ok() && done < file.size) {
    auto n =
        next(buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), file.size - done)));
    if (!n.ok()) {
      st = n.status();
      break;
    }
    if (*n == 0) {
      st = Status::DataLoss("a file's data ended before its size");
      break;
    }
    // Whole blocks of zeros stay holes: images carry zero-filled files
    // (databases, swap placeholders) that need no blocks.
    size_t at = 0;
    while (st.ok() && at < *n) {
      const uint64_t pos = done + at;
      const size_t in_block = static_cast<size_t>(fs_->blocksize - pos % fs_->blocksize);
      const size_t k = std::min(in_block, *n - at);
      if (k == fs_->blocksize && std::equal(buf.data() + at, buf.data() + at + k, zeros.data())) {
        err = ext2fs_file_llseek(f, pos + k, EXT2_SEEK_SET, nullptr);
      } else {
        unsigned written = 0;
        err = ext2fs_file_llseek(f, pos, EXT2_SEEK_SET, nullptr);
        if (!err) err = ext2fs_file_write(f, buf.data() + at, static_cast<unsigned>(k), &written);
        if (!err && written != k) err = ENOSPC;
      }
      if (err) st = Ext2Error(err, "writing a file of the image");
      at += k;
    }
    done += *n;
  }
  if (st.ok()) {
    err = ext2fs_file_set_size2(f, file.size);  // a trailing hole still counts
    if (err) st = Ext2Error(err, "sizing a file of the image");
  }
  err = ext2fs_file_close(f);
  if (st.ok() && err) st = Ext2Error(err, "writing a file of the image");
  return st;
}

}  // namespace kubicle::noderuntime::oci
