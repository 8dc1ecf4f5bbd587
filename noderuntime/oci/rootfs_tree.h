// RootfsTree: an image's file tree in memory, metadata only, built by
// applying the layers' tar entries bottom first with the OCI layer rules.
// File contents stay in the layers: a regular file remembers which layer's
// which entry holds its bytes, and the ext4 writer streams them from there.
//
// Rules (OCI image-spec "Applying changesets"):
//  - A later entry replaces an earlier one of the same path whatever the
//    types (a file replacing a directory drops the directory's subtree),
//    except directory over directory, which keeps the children and takes
//    the new metadata.
//  - `.wh.<name>` deletes <name> as lower layers left it; `.wh..wh..opq`
//    hides everything lower layers put in its directory (and below). Both
//    act on lower layers only, in whatever order the layer lists entries;
//    neither is kept. Other `.wh..wh.*` names (aufs internals) are ignored.
//  - Missing parents are created (0755, root, mtime 0).
//  - A hard link names a non-directory already in the image (this layer or
//    a lower one); both names then share one inode.
//
// Refusals (InvalidArgument unless said): a `..` component (any: the tree
// resolves nothing); an entry under a path that is a symlink in the image
// (the image's symlinks are never resolved, on the host or here: the tree is
// lexical, so following one would need the guest's view; real layers written
// by image builders never need it); a parent that is not a directory; a name
// component over 255 bytes; char and block devices (a rootfs for a VM
// whose /dev is the guest kernel's devtmpfs needs none, and a device node is
// a way out of a read-only root); a hard link to a directory or to a path
// not in the image; an empty symlink target or one of 4096 bytes or more; a regular file over
// max_file_bytes, file bytes over max_total_bytes, more than max_entries entries
// (ResourceExhausted). FIFOs are kept. A leading `/` or `./` is dropped (tar's absolute names mean
// the image's root).
//
// Memory: about 300 bytes per entry plus paths; max_entries bounds it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "noderuntime/oci/tar_reader.h"

namespace kubicle::noderuntime::oci {

struct TreeInode;

// A name in a directory, and the layer that last put it there.
struct TreeChild {
  std::shared_ptr<TreeInode> inode;
  uint32_t layer = 0;
};

struct TreeInode {
  TarType type = TarType::kDirectory;  // never kHardLink or a device
  uint32_t mode = 0755;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint64_t size = 0;           // regular files
  std::string symlink_target;  // symlinks, verbatim
  std::vector<std::pair<std::string, std::string>> xattrs;
  // Where a regular file's bytes are: entry `ordinal` of layer `layer`, or
  // `content` when `inline_content` (files the builder adds).
  uint32_t layer = 0;
  uint64_t ordinal = 0;
  bool inline_content = false;
  std::string content;
  std::map<std::string, TreeChild> children;  // directories
};

struct TreeLimits {
  uint64_t max_file_bytes = 4ull << 30;
  uint64_t max_total_bytes = 16ull << 30;
  uint64_t max_entries = 1'000'000;
};

// What the tree holds, for sizing the image.
struct TreeStats {
  uint64_t inodes = 0;       // distinct (hard links count once)
  uint64_t file_bytes = 0;   // regular files' sizes
  uint64_t data_blocks = 0;  // 4 KiB blocks: file data, directories, long symlinks, xattrs
};

class RootfsTree {
 public:
  explicit RootfsTree(TreeLimits limits);

  // Applies entry `ordinal` of layer `layer` (layers numbered from 0,
  // applied in order).
  Status Apply(uint32_t layer, uint64_t ordinal, const TarEntry& e);
  // A regular file with the given content, replacing whatever is at `path`
  // (parents made as for entries).
  Status PutFile(const std::string& path, uint32_t mode, std::string content);
  // A directory at `path` unless something (of any type) is there.
  Status EnsureDir(const std::string& path, uint32_t mode);

  const TreeInode& root() const { return *root_; }
  // The node at `path` (lexical), or nullptr.
  const TreeInode* Find(const std::string& path) const;
  TreeStats Stats() const;
  // The regular files whose bytes layer `layer` holds, by entry ordinal.
  std::map<uint64_t, TreeInode*> FilesOfLayer(uint32_t layer) const;
  uint64_t entries() const { return entries_; }

 private:
  Result<TreeInode*> Parent(const std::vector<std::string>& parts, uint32_t layer);
  Status Whiteout(TreeInode* dir, const std::string& name, uint32_t layer);
  Status HardLink(TreeInode* dir, const std::string& name, const TarEntry& e, uint32_t layer);
  // Counts the entry and checks the limits and refusals that need no tree.
  Status Admit(const TarEntry& e);

  TreeLimits limits_;
  std::shared_ptr<TreeInode> root_;
  uint64_t entries_ = 0;
  uint64_t total_bytes_ = 0;
};

// A tar path as components: `/` and `./` prefixes, empty and `.`
// components dropped; `..` and over-long names refused.
Result<std::vector<std::string>> SplitImagePath(const std::string& path);

}  // namespace kubicle::noderuntime::oci
