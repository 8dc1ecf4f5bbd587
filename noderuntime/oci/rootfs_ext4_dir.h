// WriteDirectory: a directory's entries written as whole linear ext4
// blocks, for RootfsImage. One ext2fs_link per name scans the directory
// from its first block each time, so a directory of n names costs O(n^2)
// (20,000 names took 8 s; a hostile layer could ask for a million); here
// the blocks are filled in order: O(n).
//
// Contracts: `dir` was made by ext2fs_mkdir (or mke2fs) and holds exactly
// one block; its content is replaced by ".", ".." (= `parent`) and
// `entries` in order, as many blocks as they take (the first reused, the
// rest allocated through the inode's extents), each with its checksum tail
// when the file system has metadata_csum; i_size and the link count (2 +
// subdirectories, or 1 past 65,000 with dir_nlink) follow. Names are 1..255
// bytes (the caller checked). The directory is not indexed: the guest
// mounts it read-only and the kernel reads linear directories.
#pragma once

#include <ext2fs/ext2fs.h>

#include <string>
#include <vector>

namespace kubicle::noderuntime::oci {

struct DirEntryOut {
  std::string name;
  ext2_ino_t ino = 0;
  int file_type = EXT2_FT_UNKNOWN;
};

errcode_t WriteDirectory(ext2_filsys fs, ext2_ino_t dir, ext2_ino_t parent,
                         const std::vector<DirEntryOut>& entries);

}  // namespace kubicle::noderuntime::oci
