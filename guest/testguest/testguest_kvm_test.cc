// The test guest under the real kubicle-vmm on this machine's /dev/kvm:
// serial banner, identity, RAM files, clone hook, memory fill, several vsock
// connections at once, hostile frames and virtio-blk disks backed by image
// files, all through the AgentClient.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/hex.h"
#include "guest/protocol/tlv.h"
#include "snapshot/digest.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::guest::testguest {
namespace {

using namespace std::chrono_literals;
using client::AgentClient;
using protocol::Bytes;
using vmm::testing::VmProcess;
using vmm::testing::VmProcessOptions;

class TestGuestKvm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
  }
  std::unique_ptr<VmProcess> Boot(int vcpus = 1, uint64_t cid = 3, std::string mem = "128M",
                                  std::vector<std::string> disks = {},
                                  std::vector<std::string> extra_args = {}) {
    VmProcessOptions o;
    o.disks = std::move(disks);
    o.extra_args = std::move(extra_args);
    o.vmm_binary = KUBICLE_VMM_BIN;
    o.kernel = KUBICLE_TESTGUEST_ELF;
    o.vcpus = vcpus;
    o.cid = cid;
    o.mem = mem;
    auto vm = VmProcess::Start(o);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    if (!vm.ok()) return nullptr;
    Status ready = (*vm)->WaitForSerial("kubicle-testguest: ready", 60s);
    EXPECT_TRUE(ready.ok()) << ready.ToString() << "\n" << (*vm)->SerialOutput();
    return ready.ok() ? std::move(vm).value() : nullptr;
  }
  static std::unique_ptr<AgentClient> Connect(VmProcess& vm) {
    auto c = vm.ConnectAgent(30s);
    EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << vm.SerialOutput();
    return c.ok() ? std::move(c).value() : nullptr;
  }
};

TEST_F(TestGuestKvm, BannerAndIdentity) {
  auto vm = Boot(2, 7, "128M");
  ASSERT_TRUE(vm);
  const std::string serial = vm->SerialOutput();
  EXPECT_NE(serial.find("kubicle-testguest: up\n"), std::string::npos) << serial;
  // The banner reports the APs that checked in within a bounded spin; on a
  // loaded host the second vCPU may come up later, which Identity shows.
  EXPECT_NE(serial.find("kubicle-testguest: cpus "), std::string::npos) << serial;
  EXPECT_NE(serial.find("kubicle-testguest: vsock cid 7 port 1024\n"), std::string::npos) << serial;
  EXPECT_NE(serial.find(" id 4 rng\n"), std::string::npos) << serial;
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->agent().name, "kubicle-testguest");
  auto id = c->Identity();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  for (int i = 0; i < 500 && id.ok() && id->cpus < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    id = c->Identity();
  }
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->cid, 7u);
  EXPECT_EQ(id->cpus, 2u) << serial;
  EXPECT_EQ(id->hostname, "kubicle-testguest");
  EXPECT_EQ(id->generation, 0u);
  EXPECT_GT(id->memory_bytes, 120ull << 20);
  EXPECT_LE(id->memory_bytes, 128ull << 20);
  ASSERT_EQ(id->boot_id.size(), 16u);
  EXPECT_NE(id->boot_id, Bytes(16, 0)) << "boot id should come from virtio-rng";
}

TEST_F(TestGuestKvm, TwoBootsHaveDifferentBootIds) {
  auto a = Boot();
  auto b = Boot(1, 4);
  ASSERT_TRUE(a && b);
  auto ca = Connect(*a);
  auto cb = Connect(*b);
  ASSERT_TRUE(ca && cb);
  EXPECT_NE(ca->Identity()->boot_id, cb->Identity()->boot_id);
}

TEST_F(TestGuestKvm, FilesAndPostRestore) {
  auto vm = Boot();
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  Bytes data(64 * 1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 13 + (i >> 9));
  ASSERT_TRUE(c->WriteFile("/work/data.bin", data).ok());
  auto back = c->ReadFile("/work/data.bin");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  auto list = c->List("/work");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "data.bin");
  ASSERT_TRUE(c->Remove("/work", true).ok());
  EXPECT_EQ(c->Stat("/work/data.bin").status().code(), StatusCode::kNotFound);

  const uint64_t digest = c->Identity()->entropy_digest;
  protocol::PostRestoreRequest pr;
  pr.entropy_seed = Bytes(32, 0x5a);
  pr.hostname = "sbx-clone-1";
  pr.generation = 3;
  pr.wall_clock_ns = 1'800'000'000'000'000'000ull;
  ASSERT_TRUE(c->PostRestore(pr).ok());
  auto id = c->Identity();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->hostname, "sbx-clone-1");
  EXPECT_EQ(id->generation, 3u);
  EXPECT_EQ(id->wall_clock_ns, pr.wall_clock_ns);
  EXPECT_NE(id->entropy_digest, digest);
}

TEST_F(TestGuestKvm, EightConnectionsAtOnceAndTheNinthIsRefused) {
  auto vm = Boot();
  ASSERT_TRUE(vm);
  std::vector<std::unique_ptr<AgentClient>> clients;
  for (int i = 0; i < 8; ++i) {
    auto c = Connect(*vm);
    ASSERT_TRUE(c) << i;
    clients.push_back(std::move(c));
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (auto& c : clients) {
    threads.emplace_back([&c, &ok] {
      // Large echoes on 8 connections at once overrun the 64 TX slots, so
      // the guest must sleep on a full TX ring and be woken by completions.
      for (int i = 0; i < 20; ++i) {
        const Bytes msg(i % 4 == 0 ? 60000 : 3000, uint8_t(i));
        auto e = c->Echo(msg, client::DeadlineIn(30s));
        ok += e.ok() && *e == msg;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 160);
  auto ninth = AgentClient::ConnectVsock(vm->vsock_path(), protocol::kAgentVsockPort, {},
                                         client::DeadlineIn(5s));
  EXPECT_FALSE(ninth.ok());
  clients.pop_back();  // frees a slot (the VMM resets the guest connection)
  auto again = vm->ConnectAgent(10s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->Ping().ok());
}

TEST_F(TestGuestKvm, MalformedFramesOverVsockKeepTheConnection) {
  auto vm = Boot();
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  protocol::Frame f;
  f.type = protocol::MsgType::kStat;
  f.id = 500;
  f.payload = protocol::TlvBuilder().Str(protocol::Tag::kPath, "/a").Str(protocol::Tag::kPath, "/b").Take();
  auto r = c->RawExchange(500, *protocol::EncodeFrame(f));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->type, protocol::MsgType::kError);
  EXPECT_EQ(protocol::ErrorReply::Decode(r->payload)->code, protocol::ErrorCode::kInvalidArgument);
  protocol::ExecStartRequest ex;
  ex.shell_command = "true";
  EXPECT_EQ(c->Exec(ex).status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(c->Ping().ok());
}

Bytes ImagePattern(size_t n, uint32_t salt);

TEST_F(TestGuestKvm, BuiltInExecThroughAgentClient) {
  auto vm = Boot();
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->agent().HasCapability("exec"));
  auto str = [](const Bytes& b) { return std::string(b.begin(), b.end()); };
  auto run = [&](std::vector<std::string> argv, Bytes in = {}) {
    protocol::ExecStartRequest req;
    req.argv = std::move(argv);
    req.stdin_data = std::move(in);
    auto r = c->Exec(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : client::ExecResult{};
  };
  auto echo = run({"echo", "hello", "kvm"});
  EXPECT_EQ(str(echo.stdout_data), "hello kvm\n");
  EXPECT_EQ(echo.exit_code, 0);
  EXPECT_EQ(run({"true"}).exit_code, 0);
  EXPECT_EQ(run({"false"}).exit_code, 1);
  auto missing = run({"/bin/sh", "-c", "true"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(str(missing.stderr_data).find("not found"), std::string::npos);
  EXPECT_EQ(str(run({"cat"}, Bytes{'s', 'i'}).stdout_data), "si");
  ASSERT_TRUE(c->WriteFile("/etc/motd", ImagePattern(40000, 4)).ok());
  EXPECT_EQ(run({"cat", "/etc/motd"}).stdout_data, ImagePattern(40000, 4));
  const Bytes motd = ImagePattern(40000, 4);
  EXPECT_EQ(str(run({"sha256sum", "/etc/motd"}).stdout_data),
            HexEncode(snapshot::Sha256Of(motd)) + "  /etc/motd\n");
  EXPECT_EQ(str(run({"hostname"}).stdout_data), "kubicle-testguest\n");
  protocol::PostRestoreRequest pr;
  pr.hostname = "sandbox-1";
  pr.generation = 1;
  ASSERT_TRUE(c->PostRestore(pr).ok());
  EXPECT_EQ(str(run({"hostname"}).stdout_data), "sandbox-1\n");
  EXPECT_TRUE(c->Ping().ok());
}

// A guest flooding its console: kubicle-vmm's serial log stays within its
// rotation cap and rate limit, with marker lines, and the VM stays usable.
// The limits are tiny because this guest's console is slow under nested KVM
// (every byte is an exit to kubicle-vmm: a few KB/s here).
TEST_F(TestGuestKvm, ConsoleFloodIsCappedRotatedAndRateLimited) {
  auto vm = Boot(1, 3, "128M", {},
                 // The burst alone fills a file and rotates it, and the rate
                 // is far below any guest's console speed: what is dropped
                 // does not depend on how fast this machine runs the guest.
                 {"--serial-max-bytes", "2K", "--serial-files", "1", "--serial-rate", "256",
                  "--serial-burst", "4K"});
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  protocol::ExecStartRequest flood;
  flood.argv = {"console", "16000"};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->Exec(flood, {}, client::DeadlineIn(120s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  const double flood_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  // Output resumes once the bucket has refilled to half the burst (8 s at
  // this rate): keep writing a line until one lands, however slow the host.
  const std::string line = "kubicle-testguest: console flood ..............................\n";
  flood.argv = {"console", "64"};
  bool resumed = false;
  for (int i = 0; i < 120 && !resumed; ++i) {
    ASSERT_TRUE(c->Exec(flood).ok());
    const std::string now = slurp(vm->serial_path());
    resumed = now.size() >= line.size() && now.substr(now.size() - line.size()) == line;
    if (!resumed) std::this_thread::sleep_for(500ms);
  }
  EXPECT_TRUE(resumed) << "console output never resumed after the flood";
  EXPECT_TRUE(c->Ping().ok());

  const std::string cur = slurp(vm->serial_path());
  const std::string old = slurp(vm->serial_path() + ".1");
  EXPECT_FALSE(std::filesystem::exists(vm->serial_path() + ".2"));
  const size_t kCap = 2 * 1024, kMarker = 128;
  EXPECT_LE(cur.size(), kCap + kMarker);
  EXPECT_LE(old.size(), kCap + kMarker);
  EXPECT_GT(old.size(), kCap / 2) << "a file filled up and was rotated";
  const std::string all = old + cur;
  EXPECT_NE(all.find("[kubicle-vmm: console output over 256 bytes/s; dropping it]"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find(" bytes of console output dropped]\n"), std::string::npos);
  ASSERT_GE(cur.size(), line.size());
  EXPECT_EQ(cur.substr(cur.size() - line.size()), line) << "output after the flood is kept";
  // What went to disk is bounded by the burst plus the rate over the run.
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LE(all.size(), 4 * 1024 + size_t(256 * run_s) + 16 * kMarker + 2048 /* boot banner */);
  RecordProperty("console_flood_seconds", std::to_string(flood_s));
}

TEST_F(TestGuestKvm, LargeMemoryFillMatchesTheHostChecksum) {
  auto vm = Boot(1, 3, "256M");
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  const uint64_t size = 64ull << 20;
  ASSERT_TRUE(c->MemFill(99, size, client::DeadlineIn(60s)).ok());
  auto sum = c->MemChecksum(client::DeadlineIn(60s));
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->size, size);
  EXPECT_EQ(sum->checksum, protocol::ExpectedMemChecksum(99, size));
  EXPECT_EQ(c->MemFill(1, 1ull << 30).code(), StatusCode::kOutOfRange);
}

// A scratch directory for disk images, removed with everything in it.
class ImageDir {
 public:
  ImageDir() {
    std::string tmpl = "/tmp/kubicle-testguest-disk-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ImageDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  // Writes an image file and returns its path.
  std::string Create(const std::string& name, const Bytes& content) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(content.data()), std::streamsize(content.size()));
    return p;
  }
  bool ok() const { return !path_.empty(); }

 private:
  std::string path_;
};

Bytes ReadImage(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes ImagePattern(size_t n, uint32_t salt) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t((i * 2654435761u + salt) >> 13);
  return b;
}

// virtio-blk end to end: the guest reads what the host wrote into the image
// files, its writes land in the file at the right offset, and what the VMM
// must refuse (writes to a read-only disk, ranges past the end) comes back
// as clear errors with the files untouched and the guest still answering.
TEST_F(TestGuestKvm, DisksReadAndWriteImageFiles) {
  ImageDir dir;
  ASSERT_TRUE(dir.ok());
  const Bytes rw_content = ImagePattern(1 << 20, 1);        // 2048 sectors
  const Bytes ro_content = ImagePattern(64 * 1024 + 100, 2);  // 128 sectors + a partial one
  const std::string rw = dir.Create("rw.img", rw_content);
  const std::string ro = dir.Create("ro.img", ro_content);
  auto vm = Boot(1, 3, "128M", {rw, ro + ",ro"});
  ASSERT_TRUE(vm);
  const std::string serial = vm->SerialOutput();
  EXPECT_NE(serial.find(" id 2 block\n"), std::string::npos) << serial;
  EXPECT_NE(serial.find("kubicle-testguest: disk 0 sectors 2048 rw id disk0\n"), std::string::npos)
      << serial;
  EXPECT_NE(serial.find("kubicle-testguest: disk 1 sectors 128 ro id disk1\n"), std::string::npos)
      << serial;
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->agent().HasCapability("disk"));

  auto info = c->DiskInfo();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->size(), 2u);
  EXPECT_EQ((*info)[0], (protocol::DiskDescription{2048, false, "disk0"}));
  EXPECT_EQ((*info)[1], (protocol::DiskDescription{128, true, "disk1"}));

  // Reads return the host's bytes: the whole rw disk (16 frames), a range of
  // the read-only one.
  auto all = c->DiskRead(0, 0, 2048, client::DeadlineIn(60s));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(*all == rw_content) << "DISK_READ differs from the image file";
  auto part = c->DiskRead(1, 5, 3);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(*part, Bytes(ro_content.begin() + 5 * 512, ro_content.begin() + 8 * 512));

  // A write of 300 sectors at sector 100 (three frames), flushed, shows up
  // in the file there and nowhere else.
  const Bytes data = ImagePattern(300 * 512, 77);
  ASSERT_TRUE(c->DiskWrite(0, 100, data, /*flush=*/true, client::DeadlineIn(60s)).ok());
  Bytes expect = rw_content;
  std::copy(data.begin(), data.end(), expect.begin() + 100 * 512);
  EXPECT_TRUE(ReadImage(rw) == expect) << "image file differs after DISK_WRITE";
  auto back = c->DiskRead(0, 100, 300);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
  // The last sector, and a flush on its own.
  ASSERT_TRUE(c->DiskWrite(0, 2047, Bytes(512, 0xee)).ok());
  ASSERT_TRUE(c->DiskWrite(0, 0, {}, /*flush=*/true).ok());
  std::fill(expect.end() - 512, expect.end(), 0xee);
  EXPECT_TRUE(ReadImage(rw) == expect);

  // The read-only disk refuses writes; the file is untouched.
  Status denied = c->DiskWrite(1, 0, Bytes(1024, 0x55), /*flush=*/true);
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied) << denied.ToString();
  EXPECT_NE(denied.message().find("read-only"), std::string::npos) << denied.ToString();
  EXPECT_TRUE(ReadImage(ro) == ro_content) << "read-only image changed";

  // Ranges past the end (including the partial last sector and a sector
  // number near 2^64) fail cleanly; nothing is written.
  for (auto [sector, count] : std::vector<std::pair<uint64_t, uint32_t>>{
           {2048, 1}, {2040, 9}, {~uint64_t{0}, 1}}) {
    auto r = c->DiskRead(0, sector, count);
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << sector << " " << r.status().ToString();
  }
  EXPECT_EQ(c->DiskRead(1, 128, 1).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->DiskWrite(0, 2047, Bytes(1024, 0x11)).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->DiskRead(2, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ReadImage(rw) == expect);
  EXPECT_TRUE(c->Ping().ok());
  auto last = c->DiskRead(0, 2047, 1);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(*last, Bytes(512, 0xee));
}

}  // namespace
}  // namespace kubicle::guest::testguest
