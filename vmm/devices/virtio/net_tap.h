// TapBackend: a NetBackend over an existing TAP interface, opened through
// /dev/net/tun with IFF_TAP | IFF_NO_PI (and IFF_VNET_HDR left off: with no
// offloads negotiated the header would always be zero). The interface is
// created and placed (netns, bridge, nftables) by the node, not here; the
// VMM only attaches to it by name, which needs CAP_NET_ADMIN only when the
// TAP is not owned by our uid.
#pragma once

#include <memory>
#include <string>

#include "common/unique_fd.h"
#include "vmm/devices/virtio/net_backend.h"

namespace kubicle::vmm::devices::virtio {

class TapBackend final : public NetBackend {
 public:
  // Attaches to the existing TAP `name` (at most IFNAMSIZ-1 bytes),
  // non-blocking; NotFound when there is none. With `netns` (the path of a
  // network namespace file) the TAP is looked up and opened in that
  // namespace, on a short-lived thread that enters it (setns needs
  // CAP_SYS_ADMIN): the fd keeps the TAP, whichever namespace the VMM is in.
  static Result<std::unique_ptr<TapBackend>> Open(const std::string& name,
                                                  const std::string& netns = "");

  int fd() const override { return fd_.get(); }
  Status Send(std::span<const iovec> frame) override;
  Result<size_t> Receive(std::span<uint8_t> buf) override;
  const std::string& name() const { return name_; }

 private:
  TapBackend(UniqueFd fd, std::string name) : fd_(std::move(fd)), name_(std::move(name)) {}
  UniqueFd fd_;
  std::string name_;
};

}  // namespace kubicle::vmm::devices::virtio
