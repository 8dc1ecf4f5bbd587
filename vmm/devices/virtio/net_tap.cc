#include "vmm/devices/virtio/net_tap.h"

#include <fcntl.h>
#include <net/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kubicle::vmm::devices::virtio {

Result<std::unique_ptr<TapBackend>> TapBackend::Open(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ)
    return Status::InvalidArgument("TAP name must be 1.." + std::to_string(IFNAMSIZ - 1) +
                                   " bytes: '" + name + "'");
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
