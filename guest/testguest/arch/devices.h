// The test guest's two drivers: virtio-rng (entropy for the boot id and
// ENTROPY_READ) and virtio-vsock (the agent's transport, bridging the
// device's queues to the portable VsockEndpoint). Guest-only.
#pragma once

#include <stdint.h>

#include "guest/testguest/arch/virtio.h"
#include "guest/testguest/vsock.h"

namespace kubicle::guest::testguest::arch {

class RngDevice {
 public:
  bool Init(const VirtioMmio& transport, const char** why);
  bool ready() const { return ready_; }
  // Fills out[0..n); false if the device fails to deliver.
  bool Read(uint8_t* out, uint32_t n);
  void AckInterrupt() const { transport_.AckInterrupt(); }

 private:
  VirtioMmio transport_;
  bool ready_ = false;
};

class VsockDevice final : public VsockTx {
 public:
  bool Init(const VirtioMmio& transport, VsockEndpoint* endpoint, Agent* agent, const char** why);
  bool ready() const { return ready_; }
  uint64_t cid() const { return cid_; }
  // Drains the used rings, feeds the endpoint and sends what it has.
  // Returns true when anything happened (so the caller polls again before
  // halting).
  bool Poll();
  void AckInterrupt() const { transport_.AckInterrupt(); }

  bool Send(const VsockHdr& hdr, const uint8_t* data, uint32_t len) override;

 private:
  void PostRx(uint32_t buffer);
  void PostEvent(uint32_t buffer);
  bool DrainRx();
  bool DrainEvents();
  bool DrainTx();

  VirtioMmio transport_;
  VsockEndpoint* endpoint_ = nullptr;
  Agent* agent_ = nullptr;
  uint64_t cid_ = 0;
  bool ready_ = false;
  bool tx_notify_ = false;
  uint32_t rx_buffers_ = 0;
  uint32_t tx_slots_ = 0;
  uint32_t tx_free_[Virtq::kMax / 2] = {};
  uint32_t tx_free_count_ = 0;
  uint32_t event_buffers_ = 0;
};

}  // namespace kubicle::guest::testguest::arch
