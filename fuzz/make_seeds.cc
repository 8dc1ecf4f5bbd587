// fuzz_make_seeds: writes the seed corpora under fuzz/<area>/corpus/<name>/
// from the project's own encoders (agent protocol frames, the golden state
// file, real disk layers, records, meta.json) and from hand-built driver
// sequences in the structured fuzzers' input formats (fuzz/common/
// fuzz_input.h). Run by hand after a format changes:
//   ninja -C build-fuzz fuzz_make_seeds && build-fuzz/fuzz/fuzz_make_seeds fuzz
// Files it does not write (regress-* reproducers of findings) are left alone.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"
#include "noderuntime/state/records.h"
#include "snapshot/layer_file.h"
#include "snapshot/meta.h"
#include "snapshot/state.h"
#include "snapshot/testing/sample_state.h"
#include "vmm/devices/virtio/layout.h"

namespace kubicle::fuzz {
namespace {

namespace fs = std::filesystem;
namespace p = guest::protocol;
using Bytes = std::vector<uint8_t>;

std::string g_root;

void Write(const std::string& area, const std::string& name, const std::string& seed,
           const Bytes& bytes) {
  fs::path dir = fs::path(g_root) / area / "corpus" / name;
  fs::create_directories(dir);
  std::ofstream(dir / seed, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}
void WriteText(const std::string& area, const std::string& name, const std::string& seed,
               const std::string& text) {
  Write(area, name, seed, Bytes(text.begin(), text.end()));
}

Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& b : parts) out.insert(out.end(), b.begin(), b.end());
  return out;
}

template <typename M>
Bytes Frame(const M& m, uint32_t id, uint32_t flags = 0) {
  return *p::EncodeFrame(p::MakeFrame(m, id, flags));
}

// ---- vmm ----

// A guest RAM image with a split virtqueue at 0 / 0x1000 / 0x2000 holding
// the given chains (buffers from 0x4000 up).
struct Chain {
  std::vector<std::pair<uint32_t, bool>> bufs;  // len, device-writable
};
Bytes RingImage(uint16_t size, const std::vector<Chain>& chains, uint16_t first_avail = 0) {
  Bytes ram(0x8000, 0);
  uint64_t heap = 0x4000;
  uint16_t desc = 0;
  uint16_t avail = first_avail;
  for (const Chain& c : chains) {
    const uint16_t head = desc;
    for (size_t i = 0; i < c.bufs.size(); ++i) {
      vmm::devices::virtio::VirtqDesc d{};
      d.addr = heap;
      d.len = c.bufs[i].first;
      d.flags = (c.bufs[i].second ? vmm::devices::virtio::kDescFlagWrite : 0) |
                (i + 1 < c.bufs.size() ? vmm::devices::virtio::kDescFlagNext : 0);
      d.next = static_cast<uint16_t>(desc + 1);
      std::memcpy(ram.data() + 16 * desc, &d, sizeof(d));
      heap += (c.bufs[i].first + 15) / 16 * 16;
      ++desc;
    }
    const uint16_t slot = avail % size;
    std::memcpy(ram.data() + 0x1000 + 4 + 2 * slot, &head, 2);
    ++avail;
  }
  std::memcpy(ram.data() + 0x1000 + 2, &avail, 2);
  // The fuzzer zeroes guest RAM before copying the image: trailing zeros
  // need not be stored.
  while (!ram.empty() && ram.back() == 0) ram.pop_back();
  return ram;
}

void VirtqueueSeeds() {
  auto seed = [](const char* name, uint8_t size_log2, uint8_t flags, const std::vector<Chain>& c,
                 const Bytes& ops) {
    FuzzOutput o;
    o.U8(size_log2).U8(flags).U16(0).U16(0).U8(0).U16(uint16_t(ops.size())).Bytes(ops);
    o.Bytes(RingImage(uint16_t(1u << size_log2), c));
    Write("vmm", "virtqueue", name, o.bytes());
  };
  // Pop; read 16, skip, write 1; AddUsed. Then NeedsInterrupt.
  const Bytes pop_use = {0, 2, 16, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1};
  seed("blk-request", 4, 0, {{{{16, false}, {512, true}, {1, true}}}}, pop_use);
  seed("three-chains-event-idx", 3, 1,
       {{{{44, false}}}, {{{44, false}, {100, false}}}, {{{44, true}, {4096, true}}}},
       {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 1});
  seed("undo-pop", 2, 0, {{{{8, true}}}}, {0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0});
  seed("guest-rewrites-desc", 4, 0, {{{{16, false}, {1, true}}}}, {2, 8, 0, 0xff, 0, 3, 5, 0, 0});
}

Bytes BlkHeader(uint32_t type, uint64_t sector) {
  FuzzOutput o;
  o.U32(type).U32(0).U64(sector);
  return o.bytes();
}

void BlkSeeds() {
  // flags, disk bytes, chains: (nbufs, per buf: len, flags, [bytes]), kicks
  auto request = [](FuzzOutput& o, uint32_t type, uint64_t sector, uint16_t data, bool data_in) {
    o.U8(data ? 3 : 2);
    o.U16(16).U8(0).Bytes(BlkHeader(type, sector));
    if (data) {
      o.U16(data).U8(data_in ? 1 : 0);
      if (!data_in) o.Bytes(Bytes(data, 0x5a));
    }
    o.U16(1).U8(1);
  };
  {
    FuzzOutput o;
    o.U8(0).U16(8192).U8(4);
    request(o, 0, 0, 512, true);    // IN
    request(o, 1, 3, 1024, false);  // OUT
    request(o, 4, 0, 0, false);     // FLUSH
    o.U8(3).U16(16).U8(0).Bytes(BlkHeader(8, 0)).U16(20).U8(1).U16(1).U8(1);  // GET_ID
    o.U8(0);
    Write("vmm", "virtio_blk", "in-out-flush-getid", o.bytes());
  }
  {
    FuzzOutput o;
    o.U8(1).U16(4096 + 100).U8(3);
    request(o, 1, 0, 512, false);  // write to a read-only disk
    request(o, 0, 7, 1024, true);  // past the end
    request(o, 99, 0, 0, false);   // unsupported
    o.U8(0);
    Write("vmm", "virtio_blk", "read-only-out-of-range", o.bytes());
  }
  {
    FuzzOutput o;
    o.U8(2).U16(2048).U8(1).U8(4).U16(8).U8(0).Bytes(Bytes(8, 0)).U16(8).U8(0).Bytes(Bytes(8, 0));
    o.U16(512).U8(1).U16(1).U8(1).U8(1);  // header split over two buffers
    Write("vmm", "virtio_blk", "split-header", o.bytes());
  }
}

void NetSeeds() {
  // flags [rates], then ops: 0 tx chain, 1 rx chain, 2 kick, 3 backend
  // frame, 4 clock, 5 loop turn, 6 SetMac/reset (virtio_net_fuzzer.cc)
  auto tx = [](FuzzOutput& o, uint16_t frame) {  // header + frame, one buffer
    o.U8(0).U8(1).U16(uint16_t(12 + frame)).U8(0).Bytes(Bytes(12 + frame, 0x42));
  };
  auto rx = [](FuzzOutput& o, uint16_t len) { o.U8(1).U8(1).U16(len).U8(1); };
  {
    FuzzOutput o;
    o.U8(0);
    tx(o, 60);
    tx(o, 1514);
    rx(o, 1526);
    rx(o, 1526);
    o.U8(3).U16(98).U8(0).U8(3).U16(1514).U8(0);
    o.U8(2).U8(3);
    Write("vmm", "virtio_net", "tx-rx", o.bytes());
  }
  {
    FuzzOutput o;
    o.U8(0);
    o.U8(0).U8(1).U16(8).U8(0).Bytes(Bytes(8, 0));         // shorter than the header
    o.U8(0).U8(1).U16(70).U8(1);                           // tx buffer the device may write
    o.U8(1).U8(1).U16(1526).U8(0).Bytes(Bytes(1526, 0));   // rx buffer it may only read
    rx(o, 100);                                            // smaller than the frame
    o.U8(3).U16(200).U8(0).U8(3).U16(100).U8(1);           // fits nothing; over the maximum
    o.U8(3).U16(50).U8(0);
    o.U8(2).U8(3);
    Write("vmm", "virtio_net", "hostile-chains", o.bytes());
  }
  {
    FuzzOutput o;
    o.U8(0x0c).U16(0).U16(2).U16(3000).U16(0);  // tx 2 pps, rx 3000 B/s
    for (int i = 0; i < 3; ++i) tx(o, 60);
    o.U8(2).U8(2);
    rx(o, 1526);
    o.U8(3).U16(1514).U8(0).U8(3).U16(1514).U8(0).U8(2).U8(1);
    o.U8(4).U16(600).U8(2).U8(3).U8(5).U8(6).U8(9).U8(6).U8(0x80);
    Write("vmm", "virtio_net", "rate-limits-mac-reset", o.bytes());
  }
}

void MmioSeeds() {
  for (uint8_t dev : {0, 1}) {
    FuzzOutput o;
    o.U8(dev);
    for (uint16_t off : {0x0, 0x4, 0x8, 0xc, 0x34, 0x70}) o.U8(0).U16(off).U8(0);  // reads
    o.U8(6).U8(4).U32(0x8000);                                                      // probe
    o.U8(3).U32(0x8000 + 16 * 16).U8(4).U16(0).U16(1);  // avail flags 0, idx 1
    o.U8(2).U16(0);                                      // notify
    o.U8(0).U16(0x100).U8(4);                            // config read, 8 bytes
    o.U8(0).U16(0x60).U8(0);                             // interrupt status
    o.U8(1).U16(0x64).U8(0).U64(3);                      // ack
    o.U8(5).U8(4).U8(7);                                 // save/restore, kick, reset
    Write("vmm", "mmio", dev == 0 ? "blk-probe-notify" : "rng-probe-notify", o.bytes());
  }
  FuzzOutput o;
  o.U8(0);
  // Out of order: DRIVER_OK before FEATURES_OK, queue registers after it.
  o.U8(1).U16(0x70).U8(0).U64(1).U8(1).U16(0x70).U8(0).U64(7).U8(1).U16(0x38).U8(0).U64(8);
  o.U8(1).U16(0x44).U8(0).U64(1).U8(1).U16(0x70).U8(0).U64(15);
  Write("vmm", "mmio", "out-of-order", o.bytes());
}

// device_persist: u8 selector (0 serial, 1 blk, 2 rng, 3 vsock; +4 newer
// minor), u16 record length, the record, then guest memory from address 0.
void DevicePersistSeeds() {
  auto seed = [](uint8_t selector, const Bytes& record, const Bytes& ram = {}) {
    FuzzOutput o;
    o.U8(selector).U16(uint16_t(record.size())).Bytes(record).Bytes(ram);
    return o.bytes();
  };
  const snapshot::MachineState s = snapshot::testing::SampleState();
  if (s.serial) Write("vmm", "device_persist", "sample-serial", seed(0, *s.serial));
  for (const snapshot::VirtioDeviceState& d : s.virtio) {
    const uint8_t selector = d.kind == snapshot::testing::kSampleBlockKind  ? 1
                             : d.kind == snapshot::testing::kSampleRngKind ? 2
                                                                           : 3;
    static const char* const kNames[] = {"", "sample-blk", "sample-rng", "sample-vsock"};
    Write("vmm", "device_persist", kNames[selector], seed(selector, d.state));
  }
  // A running virtio-rng (DRIVER_OK, VERSION_1) whose one 16-entry queue is
  // in guest memory with a chain of one writable buffer waiting: the restore
  // activates it and the kick fills the buffer.
  FuzzOutput rec;
  rec.U32(0xf).U32(0).U32(0).U64(1ull << 32).U32(0).U32(0).U32(1);  // transport
  rec.U32(1);                                                        // one queue
  rec.U16(16).U8(1).U64(0x1000).U64(0x2000).U64(0x3000).U16(0).U16(0).U8(0).U16(0).U8(0);
  rec.U32(0);  // no device bytes
  FuzzOutput ram;
  ram.Bytes(Bytes(0x1000, 0));
  ram.U64(0x8000).U32(64).U16(2).U16(0);  // desc[0]: 64 bytes, VIRTQ_DESC_F_WRITE
  ram.Bytes(Bytes(0x1000 - 16, 0));
  ram.U16(0).U16(1).U16(0);  // avail: flags 0, idx 1, ring[0] = 0
  Write("vmm", "device_persist", "rng-running-one-chain", seed(2, rec.bytes(), ram.bytes()));
  // A running virtio-net (DRIVER_OK, VERSION_1 and NET_F_MAC) with rx and tx
  // queues of 16 entries in guest memory, and a saved MAC and limits.
  FuzzOutput net;
  net.U32(0xf).U32(0).U32(0).U64((1ull << 32) | (1ull << 5)).U32(0).U32(0).U32(1);
  net.U32(2);
  for (uint64_t base : {0x1000, 0x4000})
    net.U16(16).U8(1).U64(base).U64(base + 0x1000).U64(base + 0x2000).U16(0).U16(0).U8(0)
        .U16(0).U8(0);
  net.U32(38).Bytes(Bytes{0x02, 0x4b, 0x42, 0, 0, 1}).U64(1 << 20).U64(100).U64(0).U64(0);
  Write("vmm", "device_persist", "net-running", seed(8, net.bytes()));
}

void VsockTx(FuzzOutput& o, uint16_t op, uint32_t src_port, const std::string& payload,
             uint32_t buf_alloc = 65536) {
  o.U8(0).U8(0).U32(src_port).U16(op).U32(0).U32(buf_alloc).U32(0);
  o.U16(uint16_t(payload.size())).Str(payload);
}

void VsockSeeds() {
  using namespace vmm::devices::virtio;
  {  // the guest dials port 1234, the service answers, data both ways, close
    FuzzOutput o;
    VsockTx(o, kVsockOpRequest, 5000, "");
    o.U8(2).U8(5).U8(5).Str("hello");
    o.U8(2);
    VsockTx(o, kVsockOpRw, 5000, "ping from the guest");
    o.U8(2).U8(1).U8(4).U16(4096).U8(2);
    VsockTx(o, kVsockOpShutdown, 5000, "");
    o.U8(5).U8(0).U8(2);
    Write("vmm", "vsock", "guest-connect-rw-shutdown", o.bytes());
  }
  {  // a host peer connects with CONNECT, the guest answers
    FuzzOutput o;
    o.U8(3).U8(13).Str("CONNECT 1024\n").U8(2);
    VsockTx(o, kVsockOpResponse, 1024, "");
    o.U8(4).U8(0).U8(5).Str("abcde").U8(2);
    VsockTx(o, kVsockOpCreditRequest, 1024, "");
    VsockTx(o, kVsockOpRst, 1024, "");
    Write("vmm", "vsock", "host-connect", o.bytes());
  }
  {  // garbage CONNECT line, wrong CIDs, a transport reset, a device reset
    FuzzOutput o;
    o.U8(3).U8(9).Str("HELLO x\n\n").U8(2);
    o.U8(0).U8(3).U64(7).U64(9).U32(1).U16(1).U32(0).U32(0).U32(0).U16(0);
    o.U8(6).U8(7);
    VsockTx(o, kVsockOpRw, 42, "data without a connection");
    Write("vmm", "vsock", "hostile-mix", o.bytes());
  }
}

// ---- guest ----

std::vector<Bytes> RequestFrames() {
  std::vector<Bytes> f;
  f.push_back(Frame(p::HelloRequest{}, 1));
  f.push_back(Frame(p::PingRequest{42}, 2));
  f.push_back(Frame(p::EchoMessage{Bytes(100, 'e')}, 3));
  p::ExecStartRequest e;
  e.argv = {"echo", "hi"};
  e.env = {"A=b"};
  f.push_back(Frame(e, 4));
  p::FileWriteChunk w;
  w.path = "/f";
  w.data = Bytes(300, 'w');
  f.push_back(Frame(w, 5));
  f.push_back(Frame(p::FileReadRequest{"/f"}, 6));
  f.push_back(Frame(p::ListRequest{"/"}, 7));
  f.push_back(Frame(p::StatRequest{"/f"}, 8));
  f.push_back(Frame(p::IdentityRequest{}, 9));
  f.push_back(Frame(p::DiskReadRequest{0, 1, 2}, 10));
  f.push_back(Frame(p::MemFillRequest{7, 4096}, 11));
  return f;
}

void AgentProtocolSeeds() {
  std::vector<Bytes> req = RequestFrames();
  Bytes stream = {7};  // chunk size byte
  for (const Bytes& b : req) stream.insert(stream.end(), b.begin(), b.end());
  Write("guest", "agent_protocol", "requests-stream", stream);
  // Replies, as the host client reads them.
  p::HelloReply hello;
  hello.name = "kubicle-agent";
  hello.capabilities = {"exec", "files"};
  p::ListReply list;
  p::DirEntry d;
  d.name = "a";
  list.entries = {d, d};
  p::ExecOutputChunk out;
  out.stream = p::OutputStream::kStdout;
  out.data = Bytes(50, 'o');
  p::ErrorReply err;
  err.code = p::ErrorCode::kNotFound;
  err.message = "no such file";
  Bytes replies = Cat({{0}, Frame(hello, 1, p::kFlagReply), Frame(list, 7, p::kFlagReply | p::kFlagMore),
                       Frame(list, 7, p::kFlagReply), Frame(out, 4, p::kFlagReply | p::kFlagMore),
                       Frame(err, 6, p::kFlagReply)});
  Write("guest", "agent_protocol", "replies-stream", replies);
  // Payload seeds: u16 type + payload.
  auto payload = [](const char* name, p::MsgType type, const Bytes& body) {
    uint16_t t = static_cast<uint16_t>(type);
    Bytes b(2);
    std::memcpy(b.data(), &t, 2);
    b.insert(b.end(), body.begin(), body.end());
    Write("guest", "agent_protocol", name, b);
  };
  p::ExecStartRequest e;
  e.shell_command = "ls -l";
  e.timeout_ms = 1000;
  payload("payload-exec-start", p::MsgType::kExecStart, e.Encode());
  payload("payload-list-reply", p::MsgType::kList, list.Encode());
  payload("payload-hello-reply", p::MsgType::kHello, hello.Encode());
  p::DiskInfoReply di;
  p::DiskDescription dd;
  dd.capacity_sectors = 16;
  dd.id = "disk0";
  di.disks = {dd};
  payload("payload-disk-info-reply", p::MsgType::kDiskInfo, di.Encode());
}

void TestguestSeeds() {
  Bytes stream = {0, 0};  // session mode, chunk 1 byte x 64
  stream[1] = 2;
  for (const Bytes& b : RequestFrames()) stream.insert(stream.end(), b.begin(), b.end());
  Write("guest", "testguest_agent", "session-requests", stream);
  // Vsock mode: REQUEST from the host, then RW carrying a PING frame.
  auto packet = [](FuzzOutput& o, uint16_t op, const Bytes& data) {
    vmm::devices::virtio::VsockHeader h{};
    h.src_cid = 2;
    h.dst_cid = 3;
    h.src_port = 1u << 30;
    h.dst_port = 1024;
    h.len = uint32_t(data.size());
    h.type = 1;
    h.op = op;
    h.buf_alloc = 1 << 18;
    o.Bytes({reinterpret_cast<const uint8_t*>(&h), sizeof(h)});
    o.U16(uint16_t(data.size())).Bytes(data).U8(0).U8(8);
  };
  FuzzOutput o;
  o.U8(1);
  packet(o, 1, {});
  packet(o, 5, Frame(p::PingRequest{7}, 1));
  packet(o, 6, {});
  packet(o, 4, {});
  Write("guest", "testguest_agent", "vsock-connect-ping", o.bytes());
}

// ---- snapshot ----

Bytes ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void SnapshotSeeds(const std::string& src_root) {
  Write("snapshot", "state", "golden-v1.0",
        ReadFile(src_root + "/snapshot/testdata/state-v1.0.bin"));
  Write("snapshot", "state", "sample-seed-2", *snapshot::EncodeState(snapshot::testing::SampleState(2)));

  snapshot::SnapshotMeta meta;
  meta.template_name = "python";
  meta.kernel = "/var/lib/kubicle/vmlinux";
  meta.created_at = "2026-01-02T03:04:05Z";
  meta.mem_bytes = 256 << 20;
  meta.vcpus = 2;
  meta.state = {4096, std::string(64, 'a')};
  meta.memory = {256 << 20, std::string(64, 'b')};
  meta.memory_data_bytes = 1 << 20;
  meta.disk = {120, std::string(64, 'c')};
  WriteText("snapshot", "meta", "meta.json", snapshot::MetaToJson(meta));
  WriteText("snapshot", "meta", "disk-index",
            snapshot::DiskIndexToJson(snapshot::testing::SampleDisks()));

  fs::path dir = fs::temp_directory_path() / "kubicle-make-seeds";
  fs::remove_all(dir);
  fs::create_directories(dir);
  snapshot::LayerFile::CreateOptions opt;
  opt.cluster_shift = 12;
  opt.durable = false;
  {
    auto l = snapshot::LayerFile::Create((dir / "a").string(), 3 * 4096, {}, opt);
    std::vector<uint8_t> data(4096, 0x11);
    iovec iov{data.data(), data.size()};
    (void)(*l)->Write(4096, {&iov, 1});
    (*l)->MarkAllocated(1);
    (void)(*l)->Sync();
    (void)(*l)->Sync();
  }
  Write("snapshot", "layer_header", "three-clusters-one-written",
        Cat({{0}, ReadFile((dir / "a").string())}));
  {
    auto l = snapshot::LayerFile::Create((dir / "b").string(), 1 << 20, {}, opt);
    (void)l;
  }
  Bytes b = ReadFile((dir / "b").string());
  b.resize(3 * 4096);  // header and maps; the data region is a sparse tail
  Write("snapshot", "layer_header", "empty-1mib-sparse", Cat({{4}, b}));
  fs::remove_all(dir);
}

// ---- noderuntime ----

void NodeSeeds() {
  noderuntime::SandboxRecord r;
  r.info.id = "sb-1";
  r.info.template_name = "python";
  r.info.labels = {{"app", "demo"}, {"kubicle.dev/run", "r1"}};
  r.info.state = noderuntime::SandboxState::kRunning;
  r.info.cid = 7;
  r.info.vmm_pid = 1234;
  r.info.mem_mib = 256;
  r.info.vcpus = 1;
  r.info.env = {{"A", "b"}};
  r.token_sha256 = std::string(64, 'f');
  r.generation = 3;
  r.control_path = "/var/lib/kubicle/sock/sb-1.ctl";
  r.vsock_path = "/var/lib/kubicle/sock/sb-1.vsock";
  WriteText("noderuntime", "records", "sandbox-record.json", noderuntime::EncodeSandboxRecord(r));
  r.info.network = noderuntime::SandboxNetworkInfo{
      "/var/lib/kubicle/netns/slot-3", 3, "02:5a:00:00:00:07",
      {noderuntime::network::EgressMode::kAllow,
       {{noderuntime::network::ParseCidr("1.2.3.0/24").value(), {443, 80}}}}};
  WriteText("noderuntime", "records", "sandbox-record-network.json", noderuntime::EncodeSandboxRecord(r));
  noderuntime::TemplateRecord t;
  t.info.spec.name = "python";
  t.info.spec.kernel = "/images/vmlinux";
  t.info.spec.disks = {"/images/rootfs.ext4,ro"};
  t.info.spec.warmup = {"python3 -c 1"};
  t.info.state = noderuntime::TemplateState::kReady;
  t.info.digest = "sha256:" + std::string(64, '0');
  WriteText("noderuntime", "records", "template-record.json",
            noderuntime::EncodeTemplateRecord(t));

  WriteText("noderuntime", "node_api_codec", "template-spec",
            R"({"kernel":"/images/vmlinux","disks":["/images/rootfs.ext4,ro"],"memMib":512,)"
            R"("vcpus":2,"warmup":["true"],"cmdline":"quiet"})");
  WriteText("noderuntime", "node_api_codec", "sandbox-spec",
            R"({"template":"python","id":"sb-1","labels":{"app":"demo"},"ttlSeconds":600,)"
            R"("hostname":"h","env":{"A":"b"}})");
  WriteText("noderuntime", "node_api_codec", "sandbox-spec-network",
            R"({"template":"python","network":{"egress":{"allow":[{"cidr":"1.2.3.0/24","ports":[443]},)"
            R"({"cidr":"9.9.9.9/32"}]}}})");
  WriteText("noderuntime", "node_api_codec", "fork",
            R"({"count":3,"labels":{"fork":"yes"},"ttlSeconds":60})");
  WriteText("noderuntime", "node_api_codec", "exec",
            R"j({"argv":["python3","-c","print(1)"],"env":["X=1"],"cwd":"/",)j"
            R"j("stdinBase64":"aGVsbG8=","timeoutSeconds":30})j");
  WriteText("noderuntime", "node_api_codec", "path-exec", "/v1/sandboxes/sb-1/exec");
  WriteText("noderuntime", "node_api_codec", "path-template", "/v1/templates/python/");
  WriteText("noderuntime", "node_api_codec", "bearer", "Bearer abcdef0123456789");
  WriteText("noderuntime", "node_api_codec", "base64", "aGVsbG8gd29ybGQ=");

  WriteText("noderuntime", "request_target", "list-selector",
            "/v1/sandboxes?labelSelector=kubicle.dev%2Frun%3Dr1,tier+in+(a,b),!gone");
  WriteText("noderuntime", "request_target", "sweep-notin",
            "/v1/sandboxes?labelSelector=app!%3Ddemo,tier%20notin%20(x)&x=1#frag");
  WriteText("noderuntime", "request_target", "files-path",
            "/v1/sandboxes/sb-1/files?path=%2Ftmp%2Fa%20b.txt&mode=0644");
  WriteText("noderuntime", "request_target", "exec-stream", "/v1/sandboxes/sb-1/exec?stream=true");
  WriteText("noderuntime", "request_target", "bad-escape", "/v1/templates/%zz?%=&&=");
  WriteText("noderuntime", "request_target", "port", "/v1/sandboxes/sb-1/ports/3000");
}

// http_server: a flags byte, then the client's bytes in pieces cut by 0xFF
// (http_server_fuzzer.cc's format); the node's tokens are "admin-token" and
// sb-1's "sandbox-token".
Bytes HttpSeed(uint8_t flags, std::initializer_list<std::string> pieces) {
  Bytes out{flags};
  bool first = true;
  for (const std::string& piece : pieces) {
    if (!first) out.push_back(0xff);
    first = false;
    for (char c : piece) {
      out.push_back(static_cast<uint8_t>(c));
      if (static_cast<uint8_t>(c) == 0xff) out.push_back(0xff);
    }
  }
  return out;
}

std::string HttpRequest(const std::string& method, const std::string& target,
                        const std::string& token, const std::string& body = "",
                        const std::string& extra = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: node\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty()) r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + extra + "\r\n" + body;
}

void HttpServerSeeds() {
  const std::string admin = "admin-token", tenant = "sandbox-token";
  const std::string exec = R"({"argv":["echo","hi"]})";
  auto seed = [](const std::string& name, const Bytes& b) {
    Write("noderuntime", "http_server", name, b);
  };
  seed("healthz", HttpSeed(0, {HttpRequest("GET", "/healthz", "")}));
  // An authed POST, its header and body in two pieces.
  const std::string post = HttpRequest("POST", "/v1/sandboxes/sb-1/exec", tenant, exec);
  const size_t head_end = post.find("\r\n\r\n") + 4;
  seed("authed-post-exec", HttpSeed(0, {post.substr(0, head_end), post.substr(head_end)}));
  // A chunked body over three pieces, the last chunk cut in its size line.
  seed("chunked-template-put",
       HttpSeed(0, {HttpRequest("PUT", "/v1/templates/t2", admin, "",
                                "Transfer-Encoding: chunked\r\n"),
                    "8\r\n{\"kernel\r\n6\r\n\":\"/k\"\r\n1", "\r\n}\r\n0\r\n\r\n"}));
  // Pipelined, one piece: public, admin, tenant, streamed exec, files.
  seed("pipelined",
       HttpSeed(0, {HttpRequest("GET", "/healthz", "") +
                    HttpRequest("GET", "/v1/sandboxes", admin) +
                    HttpRequest("GET", "/v1/sandboxes/sb-1", tenant) +
                    HttpRequest("POST", "/v1/sandboxes/sb-1/exec?stream=true", tenant, exec) +
                    HttpRequest("PUT", "/v1/sandboxes/sb-1/files?path=/a&mode=0600", tenant,
                                "hello") +
                    HttpRequest("GET", "/v1/sandboxes/sb-1/files?path=/a", tenant) +
                    HttpRequest("GET", "/v1/sandboxes/sb-1/stat?path=/a", tenant) +
                    HttpRequest("GET", "/v1/sandboxes/sb-1/ls?path=/", tenant) +
                    HttpRequest("DELETE", "/v1/sandboxes/sb-1/files?path=/a", tenant) +
                    HttpRequest("GET", "/v1/sandboxes/sb-1/console?follow=true", tenant) +
                    HttpRequest("GET", "/metrics", "")}));
  // A 256-byte header cap (bits 2-3 = 0) against a 400-byte field.
  seed("oversized-header",
       HttpSeed(0, {"GET /healthz HTTP/1.1\r\nX-Fill: " + std::string(200, 'a'),
                    std::string(200, 'b') + "\r\n\r\n"}));
  // 100-continue: the header alone first, the body once answered.
  const std::string tpl = R"({"kernel":"/k"})";
  const std::string put = HttpRequest("PUT", "/v1/templates/t3", admin, tpl,
                                      "Expect: 100-continue\r\n");
  seed("expect-continue",
       HttpSeed(0x0c, {put.substr(0, put.size() - tpl.size()), tpl,
                       HttpRequest("GET", "/v1/templates/t3", admin)}));
  // Refused from the header (no token): the body and the next request are
  // never read.
  seed("refused-then-pipelined",
       HttpSeed(0x0c, {"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100000\r\n\r\n",
                       std::string(3000, 'x') + HttpRequest("GET", "/healthz", "")}));
  // A sandbox token where only the admin's will do: 403.
  seed("tenant-forbidden",
       HttpSeed(0x0c, {HttpRequest("DELETE", "/v1/sandboxes/sb-1", tenant)}));
  // A chunked body past the small JSON cap (bit 4): 413 while reading.
  seed("chunked-over-cap",
       HttpSeed(0x1c, {HttpRequest("POST", "/v1/sandboxes", admin, "",
                                   "Transfer-Encoding: chunked\r\n"),
                       "40\r\n" + std::string(64, ' ') + "\r\n", "1\r\n \r\n0\r\n\r\n"}));
  // No budgets (bits 5, 6): 503 for the admin and for /healthz.
  seed("no-budget", HttpSeed(0x6c, {HttpRequest("GET", "/v1/templates", admin)}));
  // HTTP/1.0 and Connection: close end the connection after one answer.
  seed("connection-close",
       HttpSeed(0x0c, {HttpRequest("GET", "/healthz", "", "", "Connection: close\r\n") +
                       "GET /healthz HTTP/1.0\r\n\r\n"}));
  // The node stops accepting (ending 2) while the client is idle between
  // requests; the client goes away (ending 3) in the middle of a stream.
  seed("stop-accepting", HttpSeed(0x0e, {HttpRequest("GET", "/healthz", "")}));
  seed("client-aborts",
       HttpSeed(0x0f, {HttpRequest("POST", "/v1/sandboxes/sb-1/exec?stream=true", admin, exec)}));
  // A create, a fork and a delete with the admin token; a header cut mid-line.
  const std::string create = R"({"template":"tg","id":"sb-2"})";
  seed("admin-lifecycle",
       HttpSeed(0x0c, {HttpRequest("POST", "/v1/sandboxes", admin, create),
                       HttpRequest("POST", "/v1/sandboxes/sb-1/fork", admin, R"({"count":2})") +
                           "DELETE /v1/sandboxes/sb-2 HTTP/1.1\r\nAuthor",
                       "ization: Bearer admin-token\r\n\r\n"}));
  // Port streams (http_server_fuzzer.cc: sb-1's guest port 1 takes the
  // stream and closes at once; 2 is the fake's 409, others are refused):
  // a 409 and a 502 kept alive, then a 101 with bytes sent right behind
  // the request and more in the next piece, relayed to the guest.
  const std::string upgrade = "Connection: Upgrade\r\nUpgrade: kubicle-tcp\r\n";
  seed("port-stream",
       HttpSeed(0x0c, {HttpRequest("GET", "/v1/sandboxes/sb-1/ports/2", tenant, "", upgrade) +
                           HttpRequest("GET", "/v1/sandboxes/sb-1/ports/3000", admin, "", upgrade) +
                           HttpRequest("GET", "/v1/sandboxes/sb-1/ports/1", tenant, "", upgrade) +
                           "early bytes",
                       "GET / HTTP/1.1\r\n\r\n"}));
  // No upgrade asked for (426), a bad port (400): refusals from the header.
  seed("port-no-upgrade",
       HttpSeed(0x0c, {HttpRequest("GET", "/v1/sandboxes/sb-1/ports/1", tenant)}));
  // Workspaces: made by the admin, its files moved with its own token, a
  // sandbox token refused on it, and the workspace's token where only the
  // admin's will do (403).
  const std::string ws = "workspace-token";
  seed("workspace-files",
       HttpSeed(0x0c, {HttpRequest("PUT", "/v1/workspaces/ws-2", admin, R"({"sizeMiB":16})") +
                       HttpRequest("PUT", "/v1/workspaces/ws-1/files?path=/d/a&mode=0600", ws,
                                   "hello") +
                       HttpRequest("GET", "/v1/workspaces/ws-1/files?path=/d/a", ws) +
                       HttpRequest("GET", "/v1/workspaces/ws-1/stat?path=/d", ws) +
                       HttpRequest("GET", "/v1/workspaces/ws-1/ls?path=/", ws) +
                       HttpRequest("GET", "/v1/workspaces/ws-1", ws) +
                       HttpRequest("GET", "/v1/workspaces/ws-1/files?path=/d/a", tenant) +
                       HttpRequest("DELETE", "/v1/workspaces/ws-1/files?path=/d&recursive=true", ws) +
                       HttpRequest("DELETE", "/v1/workspaces/ws-1", ws) +
                       HttpRequest("GET", "/v1/workspaces", admin)}));
  seed("port-bad",
       HttpSeed(0x0c, {HttpRequest(
                           "GET", "/v1/sandboxes/sb-1/ports/01", tenant, "",
                           "Connection: keep-alive, upgrade\r\nUpgrade: KUBICLE-TCP\r\n")}));
}

}  // namespace
}  // namespace kubicle::fuzz

int main(int argc, char** argv) {
  using namespace kubicle::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FUZZ_DIR (the source tree's fuzz/)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  VirtqueueSeeds();
  BlkSeeds();
  NetSeeds();
  MmioSeeds();
  VsockSeeds();
  DevicePersistSeeds();
  AgentProtocolSeeds();
  TestguestSeeds();
  SnapshotSeeds(g_root + "/..");
  NodeSeeds();
  HttpServerSeeds();
  std::printf("fuzz_make_seeds: seeds written under %s\n", argv[1]);
  return 0;
}
