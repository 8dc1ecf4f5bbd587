// RamFs: the test guest's file store, a fixed table of files in guest RAM.
// Paths are flat keys; directories exist implicitly ("/" and every proper
// prefix of a file path ending at a '/').
//
// Contracts: at most kMaxFiles visible files of at most kMaxFileSize bytes.
// A write goes to a pending slot that becomes visible (replacing any file of
// the same path) only on Commit, so every write is atomic. Paths are
// validated by ValidPath before any other call.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::guest::testguest {

class RamFs {
 public:
  static constexpr uint32_t kMaxFiles = 16;
  static constexpr uint32_t kSlots = kMaxFiles + 4;  // room for in-flight writes
  static constexpr uint32_t kMaxFileSize = 64 * 1024;
  static constexpr uint32_t kMaxPath = 127;
  static constexpr size_t kDataBytes = size_t(kSlots) * kMaxFileSize;

  struct File {
    uint8_t state;  // kFree, kPending, kVisible
    uint32_t path_len;
    char path[kMaxPath + 1];
    uint32_t mode;
    uint32_t size;
    uint64_t mtime_ns;
    uint8_t* data;  // kMaxFileSize bytes
  };
  enum : uint8_t { kFree = 0, kPending = 1, kVisible = 2 };

  // `data`: kDataBytes of storage (contents need no initialisation).
  void Attach(uint8_t* data);

  // Absolute, <= kMaxPath bytes, no empty, "." or ".." components, no
  // trailing '/' except for "/" itself.
  static bool ValidPath(const char* path, uint32_t len);

  int Find(const char* path, uint32_t len) const;  // visible slot, or -1
  // True for "/" and for any proper directory prefix of a visible file.
  bool IsDir(const char* path, uint32_t len) const;
  int AllocPending(const char* path, uint32_t len, uint32_t mode);  // -1 when full
  void Release(int slot);
  // Makes a pending slot visible, replacing a file of the same path. False
  // (and the slot is released) when that would exceed kMaxFiles.
  bool Commit(int slot, uint64_t mtime_ns);
  // Removes every visible file under directory `path` (which must be a dir).
  uint32_t RemoveTree(const char* path, uint32_t len);

  File& file(int slot) { return files_[slot]; }
  const File& file(int slot) const { return files_[slot]; }
  // If `path` is a directory and slot `i` is a visible file below it, returns
  // the length of the first component after the directory (the child name)
  // and sets *name to it; *is_dir tells whether more components follow.
  uint32_t ChildOf(int i, const char* dir, uint32_t dir_len, const char** name,
                   bool* is_dir) const;

 private:
  bool Under(const File& f, const char* dir, uint32_t dir_len) const;
  File files_[kSlots] = {};
};

}  // namespace kubicle::guest::testguest
