#include "guest/testguest/ramfs.h"

#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

void RamFs::Attach(uint8_t* data) {
  for (uint32_t i = 0; i < kSlots; ++i) {
    files_[i].state = kFree;
    files_[i].data = data + size_t(i) * kMaxFileSize;
  }
}

bool RamFs::ValidPath(const char* p, uint32_t n) {
  if (n == 0 || n > kMaxPath || p[0] != '/') return false;
  if (n == 1) return true;
  if (p[n - 1] == '/') return false;
  uint32_t start = 1;
  for (uint32_t i = 1; i <= n; ++i) {
    if (i < n && p[i] != '/') continue;
    const uint32_t len = i - start;
    if (len == 0) return false;
    if (len == 1 && p[start] == '.') return false;
    if (len == 2 && p[start] == '.' && p[start + 1] == '.') return false;
    start = i + 1;
  }
  return true;
}

int RamFs::Find(const char* path, uint32_t len) const {
  for (uint32_t i = 0; i < kSlots; ++i) {
    const File& f = files_[i];
    if (f.state == kVisible && f.path_len == len && Equal(f.path, path, len)) return int(i);
  }
  return -1;
}

bool RamFs::Under(const File& f, const char* dir, uint32_t dir_len) const {
  if (f.state != kVisible) return false;
  if (dir_len == 1) return true;  // "/"
  return f.path_len > dir_len + 1 && Equal(f.path, dir, dir_len) && f.path[dir_len] == '/';
}

bool RamFs::IsDir(const char* path, uint32_t len) const {
  if (len == 1 && path[0] == '/') return true;
  for (uint32_t i = 0; i < kSlots; ++i) {
    if (Under(files_[i], path, len)) return true;
  }
  return false;
}

int RamFs::AllocPending(const char* path, uint32_t len, uint32_t mode) {
  for (uint32_t i = 0; i < kSlots; ++i) {
    File& f = files_[i];
    if (f.state != kFree) continue;
    f.state = kPending;
    f.path_len = len;
    Copy(f.path, path, len);
    f.path[len] = '\0';
    f.mode = mode;
    f.size = 0;
    f.mtime_ns = 0;
    return int(i);
  }
  return -1;
}

void RamFs::Release(int slot) {
  if (slot >= 0 && uint32_t(slot) < kSlots) files_[slot].state = kFree;
}

bool RamFs::Commit(int slot, uint64_t mtime_ns) {
  File& f = files_[slot];
  const int old = Find(f.path, f.path_len);
  if (old < 0) {
    uint32_t visible = 0;
    for (uint32_t i = 0; i < kSlots; ++i) visible += files_[i].state == kVisible;
    if (visible >= kMaxFiles) {
      Release(slot);
      return false;
    }
  } else {
    Release(old);
  }
  f.mtime_ns = mtime_ns;
  f.state = kVisible;
  return true;
}

uint32_t RamFs::RemoveTree(const char* path, uint32_t len) {
  uint32_t removed = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    if (Under(files_[i], path, len)) {
      Release(int(i));
      ++removed;
    }
  }
  return removed;
}

uint32_t RamFs::ChildOf(int i, const char* dir, uint32_t dir_len, const char** name,
                        bool* is_dir) const {
  const File& f = files_[i];
  if (!Under(f, dir, dir_len)) return 0;
  const uint32_t start = dir_len == 1 ? 1 : dir_len + 1;
  uint32_t end = start;
  while (end < f.path_len && f.path[end] != '/') ++end;
  *name = f.path + start;
  *is_dir = end < f.path_len;
  return end - start;
}

}  // namespace kubicle::guest::testguest
