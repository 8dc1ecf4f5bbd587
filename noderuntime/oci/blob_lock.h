// BlobLock: the flock that makes one download of a blob at a time, between
// threads of one process and between processes (a flock belongs to an open
// file description, so two opens of the same file exclude each other).
//
// Contracts:
// - Acquire polls with LOCK_NB until `deadline` (DeadlineExceeded then), so
//   a stuck holder cannot hold a Pull past its timeout.
// - The lock file is removed on release; Acquire checks after locking that
//   the path still names the file it locked (else a releaser removed it in
//   between) and starts over, so removal never lets two holders in.
// - TryAcquire is Acquire without waiting: nullopt when someone holds it.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime::oci {

class BlobLock {
 public:
  static Result<BlobLock> Acquire(const std::string& path,
                                  std::chrono::steady_clock::time_point deadline);
  static Result<std::optional<BlobLock>> TryAcquire(const std::string& path);
  BlobLock(BlobLock&&) = default;
  BlobLock& operator=(BlobLock&&) = default;
  ~BlobLock();

 private:
  BlobLock(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

}  // namespace kubicle::noderuntime::oci
