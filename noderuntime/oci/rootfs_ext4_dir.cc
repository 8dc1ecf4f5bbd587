#include "noderuntime/oci/rootfs_ext4_dir.h"

#include <cstring>

namespace kubicle::noderuntime::oci {

namespace {

constexpr uint64_t kMaxDirLinks = 65000;  // EXT4_LINK_MAX

class BlockFiller {
 public:
  BlockFiller(ext2_filsys fs, ext2_ino_t dir)
      : fs_(fs),
        dir_(dir),
        buf_(fs->blocksize, 0),
        csum_(ext2fs_has_feature_metadata_csum(fs->super)),
        usable_(fs->blocksize - (csum_ ? sizeof(ext2_dir_entry_tail) : 0)) {}

  errcode_t Add(const std::string& name, ext2_ino_t ino, int file_type) {
    const unsigned rec = 8 + ((static_cast<unsigned>(name.size()) + 3) & ~3u);
    if (at_ + rec > usable_) {
      if (errcode_t err = Flush()) return err;
    }
    auto* d = reinterpret_cast<ext2_dir_entry*>(buf_.data() + at_);
    d->inode = ino;
    ext2fs_dirent_set_name_len(d, static_cast<int>(name.size()));
    ext2fs_dirent_set_file_type(d, ext2fs_has_feature_filetype(fs_->super) ? file_type : 0);
    if (errcode_t err = ext2fs_set_rec_len(fs_, rec, d)) return err;
    std::memcpy(d->name, name.data(), name.size());
    last_ = at_;
    at_ += rec;
    return 0;
  }

  // Writes the block being filled (its last entry spans to the tail).
  errcode_t Flush() {
    auto* last = reinterpret_cast<ext2_dir_entry*>(buf_.data() + last_);
    if (errcode_t err = ext2fs_set_rec_len(fs_, usable_ - last_, last)) return err;
    if (csum_) ext2fs_initialize_dirent_tail(fs_, EXT2_DIRENT_TAIL(buf_.data(), fs_->blocksize));
    ext2_inode inode{};
    if (errcode_t err = ext2fs_read_inode(fs_, dir_, &inode)) return err;
    blk64_t pblk = 0;
    // Block 0 is the one mkdir made; BMAP_ALLOC maps a new one (and
    // counts it in i_blocks) for the others.
    errcode_t err = ext2fs_bmap2(fs_, dir_, &inode, nullptr, lblk_ == 0 ? 0 : BMAP_ALLOC, lblk_,
                                 nullptr, &pblk);
    if (err) return err;
    if (pblk == 0) return EXT2_ET_DIR_CORRUPTED;
    if ((err = ext2fs_write_dir_block4(fs_, pblk, buf_.data(), 0, dir_))) return err;
    ++lblk_;
    std::fill(buf_.begin(), buf_.end(), 0);
    at_ = last_ = 0;
    return 0;
  }

  blk64_t blocks() const { return lblk_; }

 private:
  ext2_filsys fs_;
  ext2_ino_t dir_;
  std::vector<char> buf_;
  bool csum_;
  unsigned usable_;
  unsigned at_ = 0;
  unsigned last_ = 0;
  blk64_t lblk_ = 0;
};

}  // namespace

errcode_t WriteDirectory(ext2_filsys fs, ext2_ino_t dir, ext2_ino_t parent,
                         const std::vector<DirEntryOut>& entries) {
  ext2_inode inode{};
  errcode_t err = ext2fs_read_inode(fs, dir, &inode);
  if (err) return err;
  if (!LINUX_S_ISDIR(inode.i_mode) || EXT2_I_SIZE(&inode) != fs->blocksize)
    return EXT2_ET_DIR_CORRUPTED;
  BlockFiller f(fs, dir);
  if ((err = f.Add(".", dir, EXT2_FT_DIR))) return err;
  if ((err = f.Add("..", parent, EXT2_FT_DIR))) return err;
  for (const DirEntryOut& e : entries) {
    if (e.name.empty() || e.name.size() > EXT2_NAME_LEN) return EXT2_ET_INVALID_ARGUMENT;
    if ((err = f.Add(e.name, e.ino, e.file_type))) return err;
  }
  if ((err = f.Flush())) return err;
  if ((err = ext2fs_read_inode(fs, dir, &inode))) return err;
  if ((err = ext2fs_inode_size_set(fs, &inode, f.blocks() * fs->blocksize))) return err;
  // The link count from the names themselves ("." and each child's ".."),
  // not from mkdir's increments, which wrap at 65,536 subdirectories; past
  // ext4's limit it is 1, which dir_nlink reads as "many".
  uint64_t links = 2;
  for (const DirEntryOut& e : entries) links += e.file_type == EXT2_FT_DIR ? 1 : 0;
  if (links > kMaxDirLinks && !ext2fs_has_feature_dir_nlink(fs->super))
    return EXT2_ET_TOO_MANY_REFS;
  inode.i_links_count = static_cast<__u16>(links > kMaxDirLinks ? 1 : links);
  return ext2fs_write_inode(fs, dir, &inode);
}

}  // namespace kubicle::noderuntime::oci
