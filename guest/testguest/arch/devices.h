// The test guest's drivers: virtio-rng (entropy for the boot id and
// ENTROPY_READ), virtio-vsock (the agent's transport, bridging the device's
// queues to the portable VsockEndpoint), virtio-blk (DISK_* messages) and
// virtio-net (ARP and ICMP echo answers from the portable net.cc).
// Guest-only.
#pragma once

#include <stdint.h>

#include "guest/testguest/agent.h"
#include "guest/testguest/arch/virtio.h"
#include "guest/testguest/net.h"
#include "guest/testguest/vsock.h"
#include "virtio/block.h"

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

// One virtio-blk disk: one request queue, one request at a time, completed
// synchronously (poll briefly, then sleep until the device's interrupt), so
// the agent's loop needs no block state. Requests are not checked against
// capacity or read-only here: the device must refuse them (the kvm tests
// check that it does). A device that completes something never posted,
// leaves the status unwritten or stops waking us is marked broken.
class BlockDevice {
 public:
  static constexpr uint32_t kMaxDisks = 4;
  // slot < kMaxDisks picks the static queue.
  bool Init(const VirtioMmio& transport, uint32_t slot, const char** why);
  bool ready() const { return ready_; }
  const DiskProperties& properties() const { return props_; }
  // properties(), with the capacity read again when the device's
  // configuration changed (a workspace plugged into an empty slot after
  // a restore: docs/workspaces.md).
  const DiskProperties& Refreshed();
  DiskResult Read(uint64_t sector, uint32_t count, uint8_t* out);
  DiskResult Write(uint64_t sector, uint32_t count, const uint8_t* data);
  DiskResult Flush();

 private:
  // Posts header [+ data] + status as one chain and waits for it.
  DiskResult Submit(uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                    bool device_writes);
  void ReadId();

  VirtioMmio transport_;
  Virtq* queue_ = nullptr;
  DiskProperties props_;
  bool ready_ = false;
  bool flush_ = false;  // VIRTIO_BLK_F_FLUSH negotiated
  uint32_t generation_ = 0;  // ConfigGeneration when the capacity was read
  virtio::BlkRequestHeader header_ = {};
  uint8_t status_ = 0;
  char id_buf_[wire::kMaxDiskIdLen] = {};
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

  bool Send(const virtio::VsockHeader& hdr, const uint8_t* data, uint32_t len) override;

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

// One virtio-net device: every received frame goes through AnswerFrame and
// its reply, if any, is sent at once. Nothing else is ever sent, so a tx
// slot per rx buffer is enough; when none is free the reply is dropped (the
// host's ping or ARP retries). The MAC comes from the device's config
// space and is read again whenever its generation is new (checked on a
// config-change interrupt and before each batch of frames is answered): a
// restore or fork gives the clone its own MAC that way.
class NetDevice {
 public:
  bool Init(const VirtioMmio& transport, const char** why);
  bool ready() const { return ready_; }
  const NetIdentity& identity() const { return me_; }
  // Answers what arrived and reclaims sent frames; true when anything
  // happened.
  bool Poll();
  // Acknowledges the interrupt; a config change is handled by the next Poll.
  void AckInterrupt();

 private:
  void ReadMac();
  void RefreshMac();  // ReadMac when ConfigGeneration moved
  void PostRx(uint32_t buffer);
  void DrainTx();

  VirtioMmio transport_;
  NetIdentity me_;
  uint32_t generation_ = 0;
  bool config_changed_ = false;  // a config-change interrupt not yet handled
  bool ready_ = false;
  uint32_t rx_buffers_ = 0;
  uint32_t tx_slots_ = 0;
  uint32_t tx_free_[Virtq::kMax] = {};
  uint32_t tx_free_count_ = 0;
};

}  // namespace kubicle::guest::testguest::arch
