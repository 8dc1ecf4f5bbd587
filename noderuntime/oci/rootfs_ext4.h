// RootfsImage: a RootfsTree written as a fresh ext4 image with libext2fs,
// in two steps: the tree's metadata (every inode, directory, symlink, hard
// link, xattr; regular files empty unless their content is inline), then
// each regular file's bytes streamed in from its layer.
//
// Why libext2fs, in the node's process: nothing is unpacked on the host, so
// no host path is ever created from an image name and no symlink of the
// image is ever followed by the host kernel; owners, setuid bits and xattrs
// are written exactly without root. libext2fs here only writes a file
// system this process has just made (it never parses a hostile one, which
// is why workspaces need the confined kubicle-ext4 and this does not); the
// hostile input is the tar stream, parsed by TarReader under its limits.
//
// Contracts:
//  - Create() runs `mke2fs` (ext4, 4 KiB blocks, 256-byte inodes, no
//    journal: the guest mounts it read-only) on a new sparse file of the
//    given size. The image keeps mke2fs's lost+found unless the tree has
//    its own. A directory's names are written all at once, after its
//    children (rootfs_ext4_dir.h: O(n), not ext2fs_link's O(n^2)).
//  - xattr names must be in the user., trusted., security. namespaces or be
//    system.posix_acl_access / _default; others are InvalidArgument.
//  - An out-of-space error is ResourceExhausted (the caller sized the
//    image; it may retry larger). Close() writes bitmaps and superblock; a
//    RootfsImage destroyed without Close() leaves a file to be removed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "noderuntime/oci/rootfs_tree.h"

// libext2fs' handle, declared here so its C header (and its warnings) stay
// in rootfs_ext4.cc.
struct struct_ext2_filsys;

namespace kubicle::noderuntime::oci {

struct DirEntryOut;  // rootfs_ext4_dir.h

class RootfsImage {
 public:
  static Result<std::unique_ptr<RootfsImage>> Create(const std::string& path, uint64_t bytes,
                                                     uint64_t inodes, const std::string& mke2fs);
  ~RootfsImage();

  Status WriteTree(const RootfsTree& tree);
  // Fills `file` (a regular file of the tree written by WriteTree) from
  // `next` (bytes read into buf, 0 at the end); exactly file.size bytes.
  Status WriteFileData(const TreeInode& file,
                       const std::function<Result<size_t>(char*, size_t)>& next);
  Status Close();

 private:
  explicit RootfsImage(struct_ext2_filsys* fs) : fs_(fs) {}
  Status WriteDir(uint32_t self, uint32_t parent, const TreeInode& dir, const std::string& path,
                  int depth, std::vector<DirEntryOut> entries);
  // Writes the inode of `n` (and, for a directory, its subtree); its name
  // is the caller's to write. An inode met again is a hard link.
  Result<uint32_t> WriteChild(uint32_t dir, const TreeInode& n, const std::string& path, int depth);
  Result<uint32_t> AddLink(uint32_t ino, const std::string& path);
  Result<uint32_t> MakeDir(uint32_t dir, const TreeInode& n, const std::string& path, int depth);
  Result<uint32_t> MakeSymlink(uint32_t dir, const TreeInode& n, const std::string& path);
  Result<uint32_t> MakeFile(uint32_t dir, const TreeInode& n, const std::string& path);
  Status DropDir(uint32_t ino, const std::string& path);
  Status SetAttrs(uint32_t ino, const TreeInode& n, uint16_t type_bits, const std::string& path);
  Status SetXattrs(uint32_t ino, const TreeInode& n, const std::string& path);
  Result<uint32_t> NewInode(uint32_t dir, uint16_t mode, const std::string& path);

  struct_ext2_filsys* fs_;
  std::unordered_map<const TreeInode*, uint32_t> inos_;
};

}  // namespace kubicle::noderuntime::oci
