// Test harness for the test guest's request handler on the host: a fake
// Platform (counting RNG, in-memory disks that refuse what virtio-blk
// refuses) and one Session + Agent served on a socketpair, reached through
// the real AgentClient. Shared by agent_test.cc and agent_disk_test.cc.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "guest/client/agent_client.h"
#include "guest/testguest/agent.h"

namespace kubicle::guest::testguest {

using client::AgentClient;
using protocol::Bytes;

// An in-memory disk behaving like kubicle-vmm's virtio-blk: IOERR for a
// write to a read-only disk or a range past the end.
struct FakeDisk {
  DiskProperties props;
  Bytes bytes;
  bool broken = false;
  int flushes = 0;
};

class FakePlatform : public Platform {
 private:
  DiskResult Check(uint32_t i, uint64_t sector, uint32_t count, bool write) {
    EXPECT_LT(i, disks.size()) << "the agent must check the disk index";
    EXPECT_GE(count, 1u);
    EXPECT_LE(count, protocol::kMaxDiskSectors);
    FakeDisk& d = disks.at(i);
    if (d.broken) return DiskResult::kBroken;
    if (write && d.props.read_only) return DiskResult::kIoError;
    const uint64_t cap = d.props.capacity_sectors;
    if (sector > cap || count > cap - sector) return DiskResult::kIoError;
    return DiskResult::kOk;
  }

 public:
  bool ReadEntropy(uint8_t* out, uint32_t n) override {
    if (!rng_ok) return false;
    for (uint32_t i = 0; i < n; ++i) out[i] = uint8_t(next++);
    return true;
  }
  uint32_t CpusRunning() override { return 3; }
  uint64_t UptimeNs() override { return 0; }

  uint32_t DiskCount() override { return uint32_t(disks.size()); }
  const DiskProperties* Disk(uint32_t i) override {
    return i < disks.size() ? &disks[i].props : nullptr;
  }
  DiskResult DiskRead(uint32_t i, uint64_t sector, uint32_t count, uint8_t* out) override {
    auto r = Check(i, sector, count, false);
    if (r == DiskResult::kOk) {
      std::memcpy(out, disks[i].bytes.data() + sector * 512, size_t(count) * 512);
    }
    return r;
  }
  DiskResult DiskWrite(uint32_t i, uint64_t sector, uint32_t count, const uint8_t* data) override {
    auto r = Check(i, sector, count, true);
    if (r == DiskResult::kOk) {
      std::memcpy(disks[i].bytes.data() + sector * 512, data, size_t(count) * 512);
    }
    return r;
  }
  DiskResult DiskFlush(uint32_t i) override {
    if (disks.at(i).broken) return DiskResult::kBroken;
    ++disks[i].flushes;
    return DiskResult::kOk;
  }
  void ConsoleWrite(const char* s, uint32_t n) override { console.append(s, n); }
  std::string console;  // what the console built-in wrote
  // Adds a disk of `sectors` sectors filled with a pattern.
  void AddDisk(uint64_t sectors, bool read_only, const char* id) {
    FakeDisk d;
    d.props.capacity_sectors = sectors;
    d.props.read_only = read_only;
    std::strncpy(d.props.id, id, sizeof(d.props.id) - 1);
    d.bytes.resize(sectors * 512);
    for (size_t k = 0; k < d.bytes.size(); ++k) d.bytes[k] = uint8_t(k * 3 + disks.size());
    disks.push_back(std::move(d));
  }

  bool rng_ok = true;
  std::vector<FakeDisk> disks;
  uint8_t next = 0x40;
};

// Runs one Session + Agent on one end of a socketpair, as the guest's vsock
// layer would: read what fits, process, write what is pending.
class Harness {
 public:
  explicit Harness(FakePlatform* platform = nullptr, uint8_t first_rng_byte = 0x40) {
    platform_.next = first_rng_byte;
    if (platform != nullptr) platform_ = *platform;
    rx_.resize(Session::kRxCap);
    tx_.resize(Session::kTxCap);
    files_.resize(RamFs::kDataBytes);
    fill_.resize(1 << 20);
    AgentConfig cfg;
    cfg.cid = 42;
    cfg.memory_bytes = 256ull << 20;
    cfg.fill_area = fill_.data();
    cfg.fill_area_size = fill_.size();
    cfg.file_data = files_.data();
    agent_->Init(&platform_, cfg);
    session_->Attach(rx_.data(), tx_.data());
    session_->Reset(agent_.get());
    int sv[2];
    EXPECT_EQ(0, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    guest_fd_ = UniqueFd(sv[0]);
    host_fd_ = UniqueFd(sv[1]);
    thread_ = std::thread([this] { Serve(); });
  }
  ~Harness() {
    ::shutdown(guest_fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::unique_ptr<AgentClient> Connect(client::ClientOptions options = {}) {
    auto c = AgentClient::Adopt(std::move(host_fd_), options);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  FakePlatform platform_;

 private:
  void Serve() {
    uint8_t buf[16384];
    for (;;) {
      pollfd p{guest_fd_.get(), short((session_->RxFree() > 0 ? POLLIN : 0) |
                                      (session_->TxSize() > 0 ? POLLOUT : 0)),
               0};
      if (::poll(&p, 1, 1000) < 0) return;
      if (p.revents & (POLLHUP | POLLERR)) return;
      if (p.revents & POLLIN) {
        const ssize_t n = ::recv(guest_fd_.get(), buf, std::min<size_t>(sizeof(buf), session_->RxFree()), 0);
        if (n <= 0) return;
        session_->Receive(buf, uint32_t(n));
      }
      session_->Process(agent_.get());
      while (session_->TxSize() > 0) {
        const ssize_t n = ::send(guest_fd_.get(), session_->TxData(), session_->TxSize(),
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0) break;
        session_->TxConsume(uint32_t(n));
        session_->Process(agent_.get());
      }
      if (session_->close_requested() && session_->TxSize() == 0) {
        ::shutdown(guest_fd_.get(), SHUT_RDWR);
        return;
      }
    }
  }

  std::unique_ptr<Agent> agent_ = std::make_unique<Agent>();
  std::unique_ptr<Session> session_ = std::make_unique<Session>();
  std::vector<uint8_t> rx_, tx_, files_, fill_;
  UniqueFd guest_fd_, host_fd_;
  std::thread thread_;
};

inline Bytes Pattern(size_t n, uint8_t salt) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(i * 31 + salt);
  return b;
}

}  // namespace kubicle::guest::testguest
