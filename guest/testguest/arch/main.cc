// kmain: boot sequence and idle loop of the test guest (docs/testguest.md).
//
//   ring 0: IDT + TSS -> drop to ring 3 for good ->
//   banner -> boot info (zero page or PVH start info) -> PIC/LAPIC ->
//   virtio devices from the command line (rng first: the boot id) -> disks
//   -> net -> agent -> vsock -> application processors -> "ready" ->
//   loop { poll; sleep }.
#include "guest/protocol/wire.h"
#include "guest/testguest/agent.h"
#include "guest/testguest/arch/console.h"
#include "guest/testguest/arch/cpu.h"
#include "guest/testguest/arch/devices.h"
#include "guest/testguest/arch/interrupts.h"
#include "guest/testguest/arch/smp.h"
#include "guest/testguest/bootinfo.h"
#include "guest/testguest/freestanding.h"
#include "guest/testguest/vsock.h"

extern "C" {
extern uint8_t __image_end[];
[[noreturn]] void EnterUser(void (*fn)());
}

namespace kubicle::guest::testguest::arch {

constinit bool g_user_mode = false;

namespace {

namespace wire = ::kubicle::guest::protocol;

constexpr uint64_t kBootModeLinux = 0;
constexpr uint32_t kPvhMagic = 0x336ec578;
constexpr uint32_t kMaxCmdline = 4096;
constexpr uint32_t kMaxE820 = 64;
constexpr uint32_t kMaxDevices = 16;
constexpr uint64_t kMmioStart = 3ull << 30;  // RAM above this is not used

struct BootInfo {
  char cmdline[kMaxCmdline] = {};
  uint32_t cmdline_len = 0;
  E820Entry e820[kMaxE820] = {};
  uint32_t e820_count = 0;
};

constinit BootInfo g_boot;
constinit RngDevice g_rng;
constinit BlockDevice g_disks[BlockDevice::kMaxDisks];
constinit uint32_t g_disk_count = 0;
constinit NetDevice g_net;
constinit VsockDevice g_vsock;
constinit VsockEndpoint g_endpoint;
constinit Agent g_agent;
constinit Session g_sessions[VsockEndpoint::kMaxConnections];
__attribute__((section(".bss.large"))) alignas(4096) uint8_t
    g_session_bufs[VsockEndpoint::kMaxConnections][Session::kRxCap + Session::kTxCap];
__attribute__((section(".bss.large"))) alignas(4096) uint8_t g_file_data[RamFs::kDataBytes];

class GuestPlatform final : public Platform {
 public:
  bool ReadEntropy(uint8_t* out, uint32_t n) override { return g_rng.Read(out, n); }
  uint32_t CpusRunning() override { return arch::CpusRunning(); }
  uint64_t UptimeNs() override { return 0; }
  uint32_t DiskCount() override { return g_disk_count; }
  const DiskProperties* Disk(uint32_t i) override {
    return i < g_disk_count ? &g_disks[i].Refreshed() : nullptr;
  }
  DiskResult DiskRead(uint32_t i, uint64_t sector, uint32_t count, uint8_t* out) override {
    return i < g_disk_count ? g_disks[i].Read(sector, count, out) : DiskResult::kBroken;
  }
  DiskResult DiskWrite(uint32_t i, uint64_t sector, uint32_t count, const uint8_t* data) override {
    return i < g_disk_count ? g_disks[i].Write(sector, count, data) : DiskResult::kBroken;
  }
  DiskResult DiskFlush(uint32_t i) override {
    return i < g_disk_count ? g_disks[i].Flush() : DiskResult::kBroken;
  }
  void ConsoleWrite(const char* s, uint32_t n) override { arch::PrintN(s, n); }
};
constinit GuestPlatform g_platform;

void CopyCmdline(uint64_t addr, uint32_t max) {
  g_boot.cmdline_len = 0;
  if (addr == 0) return;
  const char* s = reinterpret_cast<const char*>(addr);
  if (max > kMaxCmdline - 1) max = kMaxCmdline - 1;
  while (g_boot.cmdline_len < max && s[g_boot.cmdline_len] != '\0') {
    g_boot.cmdline[g_boot.cmdline_len] = s[g_boot.cmdline_len];
    ++g_boot.cmdline_len;
  }
}

// Copies what we need out of the VMM's boot structures before anything (the
// AP trampoline) may overwrite low memory.
void ReadBootInfo(uint64_t info, uint64_t mode) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(info);
  if (mode == kBootModeLinux) {
    CopyCmdline(wire::LoadLe32(p + 0x228), wire::LoadLe32(p + 0x238));
    g_boot.e820_count = ReadZeroPageE820(p, g_boot.e820, kMaxE820);
    return;
  }
  if (wire::LoadLe32(p) != kPvhMagic) {
    Print("kubicle-testguest: bad PVH start info magic\n");
    return;
  }
  CopyCmdline(wire::LoadLe64(p + 24), kMaxCmdline);
  const uint8_t* map = reinterpret_cast<const uint8_t*>(wire::LoadLe64(p + 40));
  uint32_t n = wire::LoadLe32(p + 48);
  if (map == nullptr) n = 0;
  if (n > kMaxE820) n = kMaxE820;
  for (uint32_t i = 0; i < n; ++i) {
    g_boot.e820[i] = E820Entry{wire::LoadLe64(map + 24 * i), wire::LoadLe64(map + 24 * i + 8),
                               wire::LoadLe32(map + 24 * i + 16)};
  }
  g_boot.e820_count = n;
}

uint64_t UsableRam() {
  uint64_t total = 0;
  for (uint32_t i = 0; i < g_boot.e820_count; ++i) {
    if (g_boot.e820[i].type == 1) total += g_boot.e820[i].size;
  }
  return total;
}

// Free RAM for MEM_FILL: from the first 2 MiB boundary after the image to the
// end of the usable region containing it (below the MMIO window).
void FindFillArea(uint8_t** base, uint64_t* size) {
  const uint64_t start = (reinterpret_cast<uint64_t>(__image_end) + (2u << 20) - 1) & ~uint64_t((2u << 20) - 1);
  *base = nullptr;
  *size = 0;
  for (uint32_t i = 0; i < g_boot.e820_count; ++i) {
    const E820Entry& e = g_boot.e820[i];
    uint64_t end = e.addr + e.size;
    if (end > kMmioStart) end = kMmioStart;
    if (e.type == 1 && e.addr <= start && start < end) {
      *base = reinterpret_cast<uint8_t*>(start);
      *size = end - start;
    }
  }
}

const uint8_t* ReadPhys(uint64_t addr, uint32_t len) {
  // Low memory and anything below the MMIO window is identity-mapped RAM.
  if (addr == 0 || addr + len > kMmioStart) return nullptr;
  return reinterpret_cast<const uint8_t*>(addr);
}

void Line(const char* a, const char* b = nullptr) {
  Print("kubicle-testguest: ");
  Print(a);
  if (b != nullptr) Print(b);
  Print("\n");
}

// Disks keep their command-line order (DISK_INFO numbers them so); one that
// fails to initialise is reported and left out.
void InitDisks(const VirtioMmio* blocks, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    const char* why = nullptr;
    BlockDevice& d = g_disks[g_disk_count];
    if (!EnableIrqLine(blocks[i].irq()) || !d.Init(blocks[i], g_disk_count, &why)) {
      Line("virtio-blk failed: ", why != nullptr ? why : "irq line not routable");
      continue;
    }
    Print("kubicle-testguest: disk ");
    PrintDec(g_disk_count);
    Print(" sectors ");
    PrintDec(d.properties().capacity_sectors);
    Print(d.properties().read_only ? " ro" : " rw");
    Print(" id ");
    Print(d.properties().id[0] != '\0' ? d.properties().id : "-");
    Print("\n");
    ++g_disk_count;
  }
}

void PrintMac(const uint8_t* mac) {
  static constexpr char kHex[] = "0123456789abcdef";
  char text[17];
  for (uint32_t i = 0; i < 6; ++i) {
    text[3 * i] = kHex[mac[i] >> 4];
    text[3 * i + 1] = kHex[mac[i] & 0xf];
    if (i < 5) text[3 * i + 2] = ':';
  }
  PrintN(text, sizeof(text));
}

void InitNet(const VirtioMmio& net) {
  const char* why = nullptr;
  if (!EnableIrqLine(net.irq()) || !g_net.Init(net, &why)) {
    Line("virtio-net failed: ", why != nullptr ? why : "irq line not routable");
    return;
  }
  const uint8_t* ip = g_net.identity().ip;
  Print("kubicle-testguest: net mac ");
  PrintMac(g_net.identity().mac);
  Print(" ip ");
  for (uint32_t i = 0; i < 4; ++i) {
    PrintDec(ip[i]);
    if (i < 3) Print(".");
  }
  Print("\n");
}

void InitDevices() {
  VirtioMmioDevice devs[kMaxDevices];
  const uint32_t n = ParseVirtioMmioDevices(g_boot.cmdline, g_boot.cmdline_len, devs, kMaxDevices);
  VirtioMmio rng, vsock, net, blocks[BlockDevice::kMaxDisks];
  bool have_rng = false, have_vsock = false, have_net = false;
  uint32_t block_count = 0;
  for (uint32_t i = 0; i < n; ++i) {
    VirtioMmio t;
    const char* why = nullptr;
    Print("kubicle-testguest: virtio-mmio ");
    PrintHex(devs[i].base);
    Print(" irq ");
    PrintDec(devs[i].irq);
    if (!t.Probe(devs[i].base, devs[i].irq, &why)) {
      Print(" skipped: ");
      Print(why);
      Print("\n");
      continue;
    }
    Print(" id ");
    PrintDec(t.device_id());
    Print(" ");
    Print(VirtioDeviceName(t.device_id()));
    Print("\n");
    if (t.device_id() == virtio::kDeviceIdRng && !have_rng) {
      rng = t;
      have_rng = true;
    } else if (t.device_id() == virtio::kDeviceIdVsock && !have_vsock) {
      vsock = t;
      have_vsock = true;
    } else if (t.device_id() == virtio::kDeviceIdNet && !have_net) {
      net = t;
      have_net = true;
    } else if (t.device_id() == virtio::kDeviceIdBlock) {
      if (block_count < BlockDevice::kMaxDisks) {
        blocks[block_count++] = t;
      } else {
        Line("virtio-blk ignored: more than 4 disks");
      }
    }
  }
  const char* why = nullptr;
  if (have_rng && (!EnableIrqLine(rng.irq()) || !g_rng.Init(rng, &why))) {
    Line("virtio-rng failed: ", why != nullptr ? why : "irq line not routable");
  }
  if (!g_rng.ready()) Line("no entropy source: boot id is zero");
  InitDisks(blocks, block_count);
  if (have_net) InitNet(net);

  AgentConfig cfg;
  cfg.memory_bytes = UsableRam();
  FindFillArea(&cfg.fill_area, &cfg.fill_area_size);
  cfg.file_data = g_file_data;
  g_agent.Init(&g_platform, cfg);
  for (uint32_t i = 0; i < VsockEndpoint::kMaxConnections; ++i) {
    g_sessions[i].Attach(g_session_bufs[i], g_session_bufs[i] + Session::kRxCap);
    g_sessions[i].Reset(&g_agent);
  }
  g_endpoint.Init(&g_agent, g_sessions, 0, wire::kAgentVsockPort);
  why = nullptr;
  if (have_vsock && (!EnableIrqLine(vsock.irq()) || !g_vsock.Init(vsock, &g_endpoint, &g_agent, &why))) {
    Line("virtio-vsock failed: ", why != nullptr ? why : "irq line not routable");
  }
  g_endpoint.SetCid(g_vsock.cid());
  g_agent.SetCid(g_vsock.cid());
}

void StartCpus() {
  MpInfo mp;
  uint32_t aps = 0;
  const bool have_mp = ParseMpTable(ReadPhys, &mp);
  if (have_mp) aps = StartApplicationProcessors(mp);
  Print("kubicle-testguest: cpus ");
  PrintDec(1 + aps);
  if (!have_mp) {
    Print(" (");
    Print(mp.error);
    Print(")");
  } else if (aps + 1 < mp.cpu_count) {
    Print(" of ");
    PrintDec(mp.cpu_count);
    Print(" listed");
  }
  Print("\n");
}

// Runs in ring 3 (IF=0) forever: poll the devices, sleep when idle.
[[noreturn]] void UserMain() {
  Print("kubicle-testguest: ready\n");
  // Acknowledge once per wakeup, before looking at the rings (each register
  // access is a VM exit); keep polling while there is work.
  for (;;) {
    if (g_vsock.ready()) g_vsock.AckInterrupt();
    if (g_rng.ready()) g_rng.AckInterrupt();
    g_net.AckInterrupt();
    // Both devices each pass (no short circuit): a busy one starves neither.
    while (g_vsock.Poll() | g_net.Poll()) {
    }
    Idle();
  }
}

}  // namespace
}  // namespace kubicle::guest::testguest::arch

namespace kubicle::guest::testguest::arch {
namespace {
uint64_t g_boot_info = 0;
uint64_t g_boot_mode = 0;

// Everything after the CPU tables runs in ring 3, where this hypervisor runs
// code natively (ring 0 is emulated): parsing, device setup, AP start-up and
// the agent itself.
[[noreturn]] void UserBoot() {
  Print("kubicle-testguest: up\n");
  ReadBootInfo(g_boot_info, g_boot_mode);
  Print("kubicle-testguest: memory ");
  PrintDec(UsableRam() >> 20);
  Print(" MiB\n");
  InitInterruptControllers();
  InitDevices();
  StartCpus();
  if (g_vsock.ready()) {
    Print("kubicle-testguest: vsock cid ");
    PrintDec(g_vsock.cid());
    Print(" port ");
    PrintDec(kubicle::guest::protocol::kAgentVsockPort);
    Print("\n");
  } else {
    Print("kubicle-testguest: no vsock device\n");
  }
  UserMain();
}

}  // namespace
}  // namespace kubicle::guest::testguest::arch

extern "C" [[noreturn]] void kmain(uint64_t boot_info, uint64_t mode) {
  using namespace kubicle::guest::testguest::arch;
  g_boot_info = boot_info;
  g_boot_mode = mode;
  InitCpuTables();
  g_user_mode = true;
  EnterUser(UserBoot);
}
