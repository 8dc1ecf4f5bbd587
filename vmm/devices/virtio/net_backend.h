// NetBackend: where virtio-net's frames go and come from. The device speaks
// plain Ethernet frames to it (no virtio_net_hdr: no offloads are
// negotiated, so the header carries nothing the host needs). TapBackend
// (net_tap.h) is the real one; unit tests and the fuzzer use an in-memory
// fake.
//
// Contract: both calls are non-blocking and made on the device's thread
// under the transport lock. fd() is polled for readability by the device
// while it wants frames; -1 means the backend has no fd (a fake that the
// test pokes through the device instead).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <span>

#include "common/status.h"

namespace kubicle::vmm::devices::virtio {

class NetBackend {
 public:
  virtual ~NetBackend() = default;
  virtual int fd() const = 0;
  // Sends one frame gathered from iov. An error drops the frame (the device
  // counts it); nothing is retried.
  virtual Status Send(std::span<const iovec> frame) = 0;
  // Reads one frame into buf; 0 when none is waiting. A frame longer than
  // buf is truncated by the kernel: the device passes a buffer of the
  // maximal frame size plus one, so a result over the maximum means "too big".
  virtual Result<size_t> Receive(std::span<uint8_t> buf) = 0;
};

}  // namespace kubicle::vmm::devices::virtio
