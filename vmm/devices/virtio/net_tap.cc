#include "vmm/devices/virtio/net_tap.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace kubicle::vmm::devices::virtio {

namespace {

// Opens the TAP in the calling thread's network namespace (a tun fd belongs
// to the namespace it was opened in, so /dev/net/tun is opened here too).
Result<UniqueFd> OpenTapHere(const std::string& name) {
  // TUNSETIFF would create a missing TAP (with CAP_NET_ADMIN), one nobody
  // wired to anything: the node creates and places the TAP, so it must exist.
  if (::if_nametoindex(name.c_str()) == 0)
    return Status::NotFound("no network interface '" + name + "' in this network namespace");
  UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("open /dev/net/tun");
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.data(), name.size());
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  if (::ioctl(fd.get(), TUNSETIFF, &ifr) < 0)
    return Status::FromErrno("TUNSETIFF on TAP '" + name + "'");
  return fd;
}

// Pins the calling thread to `cpu` (best effort: without it the thread
// merely runs where the scheduler puts it).
void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)::sched_setaffinity(0, sizeof(set), &set);
}

// setns() changes only the calling thread's namespace: a thread of its own
// enters the namespace and ends, and the VMM's threads never leave theirs.
// It runs on the CPU its caller is on, which only waits for it: left to
// the scheduler it was often woken on the other, busy CPU of a 2-core host
// (TAP open in a restore, p90 0.87 ms unpinned, 0.36 ms pinned; docs/vmm.md).
Result<UniqueFd> OpenTapIn(const std::string& netns, const std::string& name) {
  UniqueFd ns(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return Status::FromErrno("open network namespace " + netns);
  Result<UniqueFd> out = Status::Internal("unreached");
  const int caller_cpu = ::sched_getcpu();
  std::thread([&] {
    PinTo(caller_cpu);
    if (::setns(ns.get(), CLONE_NEWNET) != 0) {
      out = Status::FromErrno("setns into " + netns);
      return;
    }
    out = OpenTapHere(name);
  }).join();
  if (!out.ok()) return out.status().WithContext("network namespace " + netns);
  return out;
}

}  // namespace

Result<std::unique_ptr<TapBackend>> TapBackend::Open(const std::string& name,
                                                      const std::string& netns) {
  if (name.empty() || name.size() >= IFNAMSIZ)
    return Status::InvalidArgument("TAP name must be 1.." + std::to_string(IFNAMSIZ - 1) +
                                   " bytes: '" + name + "'");
  ASSIGN_OR_RETURN(UniqueFd fd, netns.empty() ? OpenTapHere(name) : OpenTapIn(netns, name));
  return std::unique_ptr<TapBackend>(new TapBackend(std::move(fd), name));
}

Status TapBackend::Send(std::span<const iovec> frame) {
  for (;;) {
    ssize_t n = ::writev(fd_.get(), frame.data(), static_cast<int>(frame.size()));
    if (n >= 0) return Status::Ok();  // a TAP write is one whole frame or an error
    if (errno == EINTR) continue;
    // EAGAIN (the TAP's queue is full, nobody reads it) drops the frame, as
    // a full link would; the guest's TCP recovers.
    return Status::FromErrno("write to TAP '" + name_ + "'");
  }
}

Result<size_t> TapBackend::Receive(std::span<uint8_t> buf) {
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf.data(), buf.size());
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return size_t{0};
    return Status::FromErrno("read from TAP '" + name_ + "'");
  }
}

}  // namespace kubicle::vmm::devices::virtio
