// Fuzzes the test guest's decoders (guest/testguest, compiled for the host as
// kubicle_testguest_core): its Session framing and Agent request handlers
// (the allocation-free Fields TLV reader, every built-in request), and its
// guest-side vsock endpoint (packet validation, credit, connection state).
//
// Input: u8 mode. Even: u8 chunk size, then the bytes the host sends on one
// connection, fed to a Session as a transport would. Odd: packets for the
// vsock endpoint until the end, each a 44-byte header (len as given), u16
// data size and the data, followed by a Pump with a TX queue of u8 slots.
//
// Checked: nothing crashes or overruns (ASan); every reply stream the guest
// produces parses as frames with well-formed TLVs (host codec) and is marked
// a reply; the endpoint never sends a packet whose len differs from its data,
// longer than kMaxPacketData or not from its own CID.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "guest/protocol/frame.h"
#include "guest/testguest/agent.h"
#include "guest/testguest/vsock.h"
#include "virtio/vsock.h"

namespace kubicle::fuzz {
namespace {

namespace tg = guest::testguest;
namespace p = guest::protocol;

class FakePlatform : public tg::Platform {
 public:
  bool ReadEntropy(uint8_t* out, uint32_t n) override {
    for (uint32_t i = 0; i < n; ++i) out[i] = uint8_t(i * 13);
    return true;
  }
  uint32_t CpusRunning() override { return 1; }
  uint64_t UptimeNs() override { return 1000; }
  uint32_t DiskCount() override { return 1; }
  const tg::DiskProperties* Disk(uint32_t i) override { return i == 0 ? &props_ : nullptr; }
  tg::DiskResult DiskRead(uint32_t i, uint64_t sector, uint32_t count, uint8_t* out) override {
    if (!Valid(i, sector, count)) return tg::DiskResult::kIoError;
    std::memcpy(out, disk_.data() + sector * 512, count * 512);
    return tg::DiskResult::kOk;
  }
  tg::DiskResult DiskWrite(uint32_t i, uint64_t sector, uint32_t count,
                           const uint8_t* data) override {
    if (!Valid(i, sector, count)) return tg::DiskResult::kIoError;
    std::memcpy(disk_.data() + sector * 512, data, count * 512);
    return tg::DiskResult::kOk;
  }
  tg::DiskResult DiskFlush(uint32_t) override { return tg::DiskResult::kOk; }

 private:
  // What agent.h promises the platform: a valid index, 1..kMaxDiskSectors.
  bool Valid(uint32_t i, uint64_t sector, uint32_t count) {
    FUZZ_CHECK(i == 0);
    FUZZ_CHECK(count >= 1 && count <= p::kMaxDiskSectors);
    return sector <= 32 && count <= 32 - sector;
  }
  tg::DiskProperties props_{32, false, "fuzz"};
  std::vector<uint8_t> disk_ = std::vector<uint8_t>(32 * 512, 3);
};

// The large buffers (file data, session RX/TX, MEM_FILL area) need no
// initialisation and are reused across inputs: allocating ~3 MB per input
// spent most of the time in page faults. Agent and sessions are new.
struct Buffers {
  std::vector<uint8_t> files = std::vector<uint8_t>(tg::RamFs::kDataBytes);
  std::vector<uint8_t> fill = std::vector<uint8_t>(1 << 16);
  std::vector<uint8_t> bufs = std::vector<uint8_t>(tg::VsockEndpoint::kMaxConnections *
                                                   (tg::Session::kRxCap + tg::Session::kTxCap));
};

struct Guest {
  explicit Guest(Buffers& b) : files(b.files), fill(b.fill), bufs(b.bufs) {
    tg::AgentConfig cfg;
    cfg.cid = 3;
    cfg.memory_bytes = 1 << 20;
    cfg.fill_area = fill.data();
    cfg.fill_area_size = fill.size();
    cfg.file_data = files.data();
    agent->Init(&platform, cfg);
    for (uint32_t i = 0; i < tg::VsockEndpoint::kMaxConnections; ++i) {
      uint8_t* base = bufs.data() + i * (tg::Session::kRxCap + tg::Session::kTxCap);
      sessions[i].Attach(base, base + tg::Session::kRxCap);
      sessions[i].Reset(agent.get());
    }
  }
  FakePlatform platform;
  std::unique_ptr<tg::Agent> agent = std::make_unique<tg::Agent>();
  std::unique_ptr<tg::Session[]> sessions =
      std::make_unique<tg::Session[]>(tg::VsockEndpoint::kMaxConnections);
  std::vector<uint8_t>& files;
  std::vector<uint8_t>& fill;
  std::vector<uint8_t>& bufs;
};

void CheckReplies(const std::vector<uint8_t>& out) {
  p::FrameDecoder dec;
  dec.Append(out);
  while (true) {
    auto f = dec.Next();
    FUZZ_CHECK(f.ok());
    if (!f->has_value()) break;
    FUZZ_CHECK((*f)->is_reply());
    FUZZ_CHECK(p::ValidateTlvs((*f)->payload.data(), (*f)->payload.size()) == p::WireError::kOk);
  }
}

void Take(tg::Session& s, std::vector<uint8_t>* out) {
  out->insert(out->end(), s.TxData(), s.TxData() + s.TxSize());
  s.TxConsume(s.TxSize());
}

void RunSession(Guest& g, FuzzInput& in) {
  tg::Session& s = g.sessions[0];
  const size_t chunk = 1 + in.U8() * 64;
  std::vector<uint8_t> out;
  while (!in.empty() && !s.close_requested()) {
    auto b = in.Bytes(std::min<size_t>(chunk, s.RxFree()));
    s.Receive(b.data(), static_cast<uint32_t>(b.size()));
    const uint32_t consumed = s.Process(g.agent.get());
    Take(s, &out);
    s.Process(g.agent.get());
    Take(s, &out);
    if (b.empty() && consumed == 0) break;  // a partial frame that cannot complete
  }
  CheckReplies(out);
}

class FakeTx : public tg::VsockTx {
 public:
  bool Send(const virtio::VsockHeader& hdr, const uint8_t* data, uint32_t len) override {
    if (slots == 0) return false;
    --slots;
    FUZZ_CHECK(hdr.len == len);
    FUZZ_CHECK(len <= tg::VsockEndpoint::kMaxPacketData);
    FUZZ_CHECK(hdr.src_cid == 3 && hdr.type == virtio::kVsockTypeStream);
    return true;
  }
  uint32_t slots = 0;
};

void RunVsock(Guest& g, FuzzInput& in) {
  auto ep = std::make_unique<tg::VsockEndpoint>();
  ep->Init(g.agent.get(), g.sessions.get(), 3, 1024);
  FakeTx tx;
  while (!in.empty()) {
    uint8_t hdr[virtio::kVsockHeaderSize] = {};
    auto h = in.Bytes(sizeof(hdr));
    std::memcpy(hdr, h.data(), h.size());
    auto data = in.Bytes(in.U16() % 8192);
    const uint8_t op = in.U8();
    if (op == 0xff) {
      ep->OnTransportReset();
    } else {
      ep->OnPacket(hdr, data.data(), static_cast<uint32_t>(data.size()));
    }
    tx.slots = in.U8();
    (void)ep->Pump(&tx);
  }
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  static Buffers* buffers = new Buffers;
  // The agent keeps files and identity between connections, like the guest;
  // a fresh one per input keeps runs reproducible.
  Guest guest(*buffers);
  FuzzInput in(data, size);
  if (in.U8() % 2 == 0) {
    RunSession(guest, in);
  } else {
    RunVsock(guest, in);
  }
  return 0;
}
