#include "vmm/devices/legacy/console_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace kubicle::vmm::devices::legacy {

namespace {
std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
}  // namespace

Result<std::unique_ptr<ConsoleLog>> ConsoleLog::Open(const std::string& path,
                                                     const ConsoleLogLimits& limits, Now now) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640));
  if (!fd) return Status::FromErrno("open serial output " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("fstat " + path);
  return std::unique_ptr<ConsoleLog>(
      new ConsoleLog(std::move(fd), path, uint64_t(st.st_size), limits, std::move(now)));
}

std::unique_ptr<ConsoleLog> ConsoleLog::ForFd(UniqueFd fd, const ConsoleLogLimits& limits,
                                              Now now) {
  return std::unique_ptr<ConsoleLog>(new ConsoleLog(std::move(fd), "", 0, limits, std::move(now)));
}

ConsoleLog::ConsoleLog(UniqueFd fd, std::string path, uint64_t size,
                       const ConsoleLogLimits& limits, Now now)
    : fd_(std::move(fd)),
      path_(std::move(path)),
      size_(size),
      limits_(limits),
      now_(now ? std::move(now) : Now([] { return Clock::now(); })),
      tokens_(double(limits.burst_bytes)),
      refilled_(now_()) {}

void ConsoleLog::Write(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  const Clock::time_point now = limits_.rate_bytes_per_sec != 0 ? now_() : Clock::time_point();
  const size_t admitted = Admit(bytes.size(), now);
  dropped_ += bytes.size() - admitted;
  if (admitted > 0) dropped_ += Emit(bytes.first(admitted), false);
  if (admitted < bytes.size() && !rate_dropping_) {
    rate_dropping_ = true;
    dropping_since_ = now;
    dropped_in_run_ = bytes.size() - admitted;
    Emit(AsBytes("\n[kubicle-vmm: console output over " +
                 std::to_string(limits_.rate_bytes_per_sec) + " bytes/s; dropping it]\n"),
         true);
  }
}

size_t ConsoleLog::Admit(size_t n, Clock::time_point now) {
  if (limits_.rate_bytes_per_sec == 0) return n;
  const double elapsed = std::chrono::duration<double>(now - refilled_).count();
  refilled_ = now;
  const double burst = double(limits_.burst_bytes);
  tokens_ = std::min(burst, tokens_ + std::max(0.0, elapsed) * double(limits_.rate_bytes_per_sec));
  if (rate_dropping_) {
    if (tokens_ < burst / 2 || now - dropping_since_ < std::chrono::seconds(1)) {
      dropped_in_run_ += n;
      return 0;
    }
    rate_dropping_ = false;
    Emit(AsBytes("[kubicle-vmm: " + std::to_string(dropped_in_run_) +
                 " bytes of console output dropped]\n"),
         true);
  }
  const size_t admitted = size_t(std::min(double(n), tokens_));
  tokens_ -= double(admitted);
  return admitted;
}

size_t ConsoleLog::Emit(std::span<const uint8_t> bytes, bool marker) {
  if (path_.empty() || limits_.max_file_bytes == 0) return WriteFd(bytes);
  while (!bytes.empty()) {
    if (cap_reached_ || !fd_) return bytes.size();
    const uint64_t room = limits_.max_file_bytes > size_ ? limits_.max_file_bytes - size_ : 0;
    const bool fits = bytes.size() <= room;
    if (room == 0 || (marker && !fits && size_ > 0)) {
      if (limits_.rotated_files > 0) {
        Rotate();
        continue;
      }
      cap_reached_ = true;  // the one line allowed past the cap
      WriteFd(AsBytes("\n[kubicle-vmm: serial log reached " +
                      std::to_string(limits_.max_file_bytes) +
                      " bytes; later console output dropped]\n"));
      return bytes.size();
    }
    const size_t n = marker ? bytes.size() : size_t(std::min<uint64_t>(room, bytes.size()));
    const size_t lost = WriteFd(bytes.first(n));
    size_ += n - lost;
    if (lost > 0) return lost + (bytes.size() - n);
    bytes = bytes.subspan(n);
  }
  return 0;
}

void ConsoleLog::Rotate() {
  fd_.reset();
  for (uint32_t i = limits_.rotated_files; i >= 2; --i) {
    const std::string from = path_ + "." + std::to_string(i - 1);
    if (::rename(from.c_str(), (path_ + "." + std::to_string(i)).c_str()) != 0 &&
        errno != ENOENT) {
      LogErrorOnce("rename " + from);
    }
  }
  if (::rename(path_.c_str(), (path_ + ".1").c_str()) != 0) LogErrorOnce("rename " + path_);
  fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0640));
  if (!fd_) LogErrorOnce("reopen " + path_);
  size_ = 0;
  ++rotations_;
}

size_t ConsoleLog::WriteFd(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    if (!fd_) return bytes.size();
    const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
    if (n > 0) {
      bytes = bytes.subspan(size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) LogErrorOnce("write");
    return bytes.size();
  }
  return 0;
}

void ConsoleLog::LogErrorOnce(const std::string& what) {
  const int err = errno;
  if (logged_error_) return;  // a broken console must not flood the VMM's log
  logged_error_ = true;
  log::Warn("serial output failed",
            {{"op", what}, {"error", std::strerror(err)}, {"path", path_}});
}

}  // namespace kubicle::vmm::devices::legacy
