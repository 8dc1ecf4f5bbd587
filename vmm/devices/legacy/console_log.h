// ConsoleLog: where the guest's serial console output goes (serial.log),
// bounded in disk and rate, because the guest is untrusted and can write to
// its console as fast as it can exit.
//
// Contracts:
// - Disk: a file log never holds more than max_file_bytes (plus one marker
//   line); when the next bytes would pass it, the file is rotated: path.N-1
//   -> path.N, ..., path -> path.1, and a new empty path is opened. With
//   rotated_files = 0 nothing is rotated and output beyond the cap is
//   dropped after a marker line. So the console's disk use is at most
//   (rotated_files + 1) x max_file_bytes.
// - Rate: a token bucket (rate_bytes_per_sec, burst_bytes). Output beyond it
//   is dropped, after a marker line saying so; output resumes (with a line
//   counting what was dropped) once the bucket is half full again and at
//   least a second has passed, so a flood leaves whole bursts, not a byte
//   here and there, and at most two marker lines a second.
// - Memory: nothing is buffered; each Write is one write(2) (the serial
//   device writes a byte at a time) or none.
// - An fd log (stdout) is rate limited but never rotated or capped. A full
//   non-blocking fd drops the bytes (counted), so a vCPU never blocks on a
//   slow reader.
// - Not thread-safe: the serial device calls it under its own lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::vmm::devices::legacy {

struct ConsoleLogLimits {
  uint64_t max_file_bytes = 1ull << 20;  // 0: no cap
  uint32_t rotated_files = 1;            // path.1 .. path.N kept
  uint64_t rate_bytes_per_sec = 64ull << 10;  // 0: no rate limit
  uint64_t burst_bytes = 256ull << 10;
};

class ConsoleLog {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  // Appends to path (created 0640); its current size counts toward the cap.
  static Result<std::unique_ptr<ConsoleLog>> Open(const std::string& path,
                                                  const ConsoleLogLimits& limits, Now now = {});
  // Writes to fd: rate limited only (max_file_bytes and rotation ignored).
  static std::unique_ptr<ConsoleLog> ForFd(UniqueFd fd, const ConsoleLogLimits& limits,
                                           Now now = {});

  void Write(std::span<const uint8_t> bytes);

  uint64_t dropped_bytes() const { return dropped_; }  // over the rate, the cap, or a full fd
  uint64_t rotations() const { return rotations_; }

 private:
  ConsoleLog(UniqueFd fd, std::string path, uint64_t size, const ConsoleLogLimits& limits,
             Now now);
  // How many of n guest bytes the rate allows now; emits the resume marker.
  size_t Admit(size_t n, Clock::time_point now);
  // Writes to the log, rotating (or, without rotation, stopping) at the cap.
  // A marker is never split across files. Returns the bytes not written.
  size_t Emit(std::span<const uint8_t> bytes, bool marker);
  void Rotate();
  // write(2) until done or refused; returns the bytes not written.
  size_t WriteFd(std::span<const uint8_t> bytes);
  void LogErrorOnce(const std::string& what);

  UniqueFd fd_;
  std::string path_;  // empty: an fd log
  uint64_t size_ = 0;
  ConsoleLogLimits limits_;
  Now now_;
  double tokens_ = 0;
  Clock::time_point refilled_;
  bool rate_dropping_ = false;
  Clock::time_point dropping_since_;
  uint64_t dropped_in_run_ = 0;  // since rate_dropping_ began
  bool cap_reached_ = false;  // rotated_files == 0 and the file is full
  uint64_t dropped_ = 0;
  uint64_t rotations_ = 0;
  bool logged_error_ = false;
};

}  // namespace kubicle::vmm::devices::legacy
