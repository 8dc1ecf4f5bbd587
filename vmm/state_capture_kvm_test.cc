// Capture a running tiny guest's vCPU and VM state, build a second VM from
// the state plus a copy of its memory, and check both continue exactly
// (label kvm). Guest code is a handful of instructions: CPL0 code is emulated
// at ~250 ns per instruction on our hosts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "snapshot/snapshot_dir.h"
#include "snapshot/testing/temp_dir.h"
#include "vmm/arch/x86_64/boot.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/arch/x86_64/test_images.h"
#include "vmm/kvm/vcpu_state.h"
#include "vmm/kvm/vm_state.h"
#include "vmm/memory_reservation.h"

namespace kubicle::vmm {
namespace {

using namespace snapshot;  // NOLINT: the state structs and the snapshot directory
using namespace kvm;       // NOLINT: capture and apply
using arch::kMiB;

std::vector<MemoryRegion> View(const GuestMemory& mem) {
  std::vector<MemoryRegion> out;
  for (const GuestRegion& r : mem.regions()) out.push_back({r.guest_base, r.size, r.host});
  return out;
}

// The snapshot's memory file mapped as guest memory (what Vm::Restore does
// over a reservation, here with plain mappings).
Result<std::unique_ptr<GuestMemory>> MapMemory(const SnapshotDir& snap) {
  ASSIGN_OR_RETURN(std::vector<MmapRegion> maps, snap.MapMemory());
  std::vector<GuestMemory::Range> ranges;
  for (const MemoryRange& r : snap.state().config.memory) ranges.push_back({r.guest_base, r.size});
  return GuestMemory::FromMappings(ranges, std::move(maps));
}

constexpr uint64_t kGuestEntry = 0x1000000;  // 16 MiB
constexpr uint64_t kCounterAddr = 0x3000000;
constexpr uint16_t kCounterPort = 0x510;

// .code64
//   xor eax, eax
// loop:
//   inc eax
//   add r8, rax
//   mov [0x3000000], eax
//   mov dx, 0x510
//   out dx, eax
//   jmp loop
const std::vector<uint8_t> kCounterGuest = {
    0x31, 0xc0,                                      // xor eax, eax
    0xff, 0xc0,                                      // inc eax
    0x49, 0x01, 0xc0,                                // add r8, rax
    0x89, 0x04, 0x25, 0x00, 0x00, 0x00, 0x03,        // mov [0x3000000], eax
    0x66, 0xba, 0x10, 0x05,                          // mov dx, 0x510
    0xef,                                            // out dx, eax
    0xeb, 0xed,                                      // jmp loop
};

struct Machine {
  kvm::VmFd vm;
  std::unique_ptr<GuestMemory> mem;
  std::vector<kvm::VcpuFd> vcpus;
};

Result<Machine> NewMachine(const kvm::Kvm& kvm, uint32_t vcpus) {
  ASSIGN_OR_RETURN(kvm::VmFd vm, kvm.CreateVm());
  RETURN_IF_ERROR(arch::ConfigureVm(vm));
  ASSIGN_OR_RETURN(std::unique_ptr<GuestMemory> mem,
                   GuestMemory::CreateAnonymous(arch::MemoryRanges(64 * kMiB)));
  RETURN_IF_ERROR(arch::RegisterGuestMemory(vm, *mem));
  Machine m{std::move(vm), std::move(mem), {}};
  for (uint32_t i = 0; i < vcpus; ++i) {
    ASSIGN_OR_RETURN(kvm::VcpuFd v, m.vm.CreateVcpu(i));
    m.vcpus.push_back(std::move(v));
  }
  return m;
}

// Runs to the next OUT to kCounterPort and returns its value.
Result<uint32_t> NextCount(kvm::VcpuFd& vcpu) {
  for (int i = 0; i < 100; ++i) {
    RETURN_IF_ERROR(vcpu.Run());
    kvm_run* run = vcpu.run();
    if (run->exit_reason != KVM_EXIT_IO) {
      return Status::Internal("unexpected exit reason " + std::to_string(run->exit_reason));
    }
    if (run->io.direction != KVM_EXIT_IO_OUT || run->io.port != kCounterPort) continue;
    uint32_t v = 0;
    std::memcpy(&v, reinterpret_cast<uint8_t*>(run) + run->io.data_offset, 4);
    return v;
  }
  return Status::Internal("no counter OUT after 100 exits");
}

class CaptureKvmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is not accessible";
    Result<kvm::Kvm> kvm = kvm::Kvm::Open();
    ASSERT_TRUE(kvm.ok()) << kvm.status().ToString();
    kvm_.emplace(std::move(*kvm));
    kernel_ = arch::test_images::WriteTempFile(arch::test_images::MakeElf(
        {{PT_LOAD, kGuestEntry, kCounterGuest, 0x1000}}, kGuestEntry));
  }
  void TearDown() override {
    if (!kernel_.empty()) ::unlink(kernel_.c_str());
  }

  // A two-vCPU machine booted into the counter loop (the AP never starts).
  Machine Boot() {
    Result<Machine> m = NewMachine(*kvm_, 2);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    arch::BootConfig cfg;
    cfg.kernel_path = kernel_;
    cfg.num_vcpus = 2;
    Result<arch::BootInfo> boot = arch::ConfigureBoot(*m->mem, cfg);
    EXPECT_TRUE(boot.ok()) << boot.status().ToString();
    Result<std::vector<kvm_cpuid_entry2>> cpuid = kvm_->SupportedCpuid();
    EXPECT_TRUE(cpuid.ok());
    for (uint32_t i = 0; i < 2; ++i) {
      Status st = arch::SetupVcpu(*kvm_, m->vcpus[i], i, 2, *boot, *cpuid);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    return std::move(*m);
  }

  // Everything a restore needs: state of every vCPU and of the VM.
  MachineState Capture(Machine& m) {
    MachineState s;
    for (kvm::VcpuFd& v : m.vcpus) {
      Status done = CompletePendingExit(v);
      EXPECT_TRUE(done.ok()) << done.ToString();
      Result<VcpuState> vs = CaptureVcpu(*kvm_, v);
      EXPECT_TRUE(vs.ok()) << vs.status().ToString();
      if (vs.ok()) s.vcpus.push_back(std::move(*vs));
    }
    Result<VmState> vm = CaptureVm(m.vm);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    if (vm.ok()) s.vm = *vm;
    return s;
  }

  // A new VM from state and a copy of memory.
  Machine Restore(const Machine& from, const MachineState& s) {
    Result<Machine> m = NewMachine(*kvm_, 2);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    for (size_t i = 0; i < from.mem->regions().size(); ++i) {
      const GuestRegion& src = from.mem->regions()[i];
      std::memcpy(m->mem->regions()[i].host, src.host, src.size);
    }
    Status vm = ApplyVm(m->vm, s.vm);
    EXPECT_TRUE(vm.ok()) << vm.ToString();
    for (size_t i = 0; i < m->vcpus.size(); ++i) {
      Status st = ApplyVcpu(m->vcpus[i], s.vcpus[i]);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    return std::move(*m);
  }

  uint32_t Counter(const Machine& m) { return *m.mem->ReadObj<uint32_t>(kCounterAddr); }

  std::optional<kvm::Kvm> kvm_;
  std::string kernel_;
};

TEST_F(CaptureKvmTest, RestoredVmContinuesExactlyAndIndependently) {
  Machine a = Boot();
  for (uint32_t want = 1; want <= 5; ++want) {
    Result<uint32_t> got = NextCount(a.vcpus[0]);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(*got, want);
  }
  MachineState s = Capture(a);
  ASSERT_EQ(s.vcpus.size(), 2u);
  EXPECT_EQ(s.vcpus[0].regs.r8, 15u);  // 1+2+3+4+5
  EXPECT_EQ(s.vcpus[1].mp_state.mp_state, static_cast<uint32_t>(KVM_MP_STATE_UNINITIALIZED));
  EXPECT_FALSE(s.vcpus[0].msrs.empty());
  EXPECT_GE(s.vcpus[0].xsave.size(), 4096u);

  Machine b = Restore(a, s);
  if (HasFailure()) return;
  // The pending OUT of 5 was completed before capture: B's next is 6, not 5.
  for (uint32_t want = 6; want <= 8; ++want) {
    Result<uint32_t> from_b = NextCount(b.vcpus[0]);
    ASSERT_TRUE(from_b.ok()) << from_b.status().ToString();
    EXPECT_EQ(*from_b, want);
    Result<uint32_t> from_a = NextCount(a.vcpus[0]);
    ASSERT_TRUE(from_a.ok()) << from_a.status().ToString();
    EXPECT_EQ(*from_a, want);
  }
  Result<kvm_regs> ra = a.vcpus[0].GetRegs(), rb = b.vcpus[0].GetRegs();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(rb->r8, 36u);  // 15+6+7+8: registers carried over
  EXPECT_EQ(ra->rip, rb->rip);
  // Memory diverges: B runs on while A stays at 8.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(NextCount(b.vcpus[0]).ok());
  EXPECT_EQ(Counter(b), 12u);
  EXPECT_EQ(Counter(a), 8u);
  Result<kvm_mp_state> ap = b.vcpus[1].GetMpState();
  ASSERT_TRUE(ap.ok());
  EXPECT_EQ(ap->mp_state, static_cast<uint32_t>(KVM_MP_STATE_UNINITIALIZED));
}

TEST_F(CaptureKvmTest, StateSurvivesTheFileFormatAndARestoreOfARestore) {
  Machine a = Boot();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(NextCount(a.vcpus[0]).ok());
  MachineState s = Capture(a);
  s.config.mem_bytes = 64 * kMiB;
  s.config.vcpus = 2;
  s.config.memory = {{0, 64 * kMiB}};
  Result<std::vector<uint8_t>> bytes = EncodeState(s);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  Result<MachineState> decoded = DecodeState(*bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(*decoded == s);

  Machine b = Restore(a, *decoded);
  if (HasFailure()) return;
  Result<uint32_t> next = NextCount(b.vcpus[0]);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, 4u);
  // Snapshot the restored VM and restore that again.
  MachineState s2 = Capture(b);
  Machine c = Restore(b, s2);
  if (HasFailure()) return;
  Result<uint32_t> after = NextCount(c.vcpus[0]);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, 5u);
  EXPECT_EQ(Counter(c), 5u);
  EXPECT_EQ(Counter(b), 4u);
}

// The whole path through the snapshot directory: write, open, map the
// memory file MAP_PRIVATE, apply state; several restores of one snapshot run
// side by side and diverge.
TEST_F(CaptureKvmTest, RestoresFromASnapshotDirectoryManyTimes) {
  Machine a = Boot();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(NextCount(a.vcpus[0]).ok());
  MachineState s = Capture(a);
  s.config.mem_bytes = 64 * kMiB;
  s.config.vcpus = 2;
  s.config.memory = {{0, 64 * kMiB}};
  snapshot::testing::TempDir dir;
  Result<SnapshotMeta> meta = SnapshotDir::Write(dir / "snap", s, {}, View(*a.mem), {});
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();

  std::vector<Machine> clones;
  std::vector<double> restore_us;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Result<SnapshotDir> snap = SnapshotDir::Open(dir / "snap");
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    Result<std::unique_ptr<GuestMemory>> mem = MapMemory(*snap);
    ASSERT_TRUE(mem.ok()) << mem.status().ToString();
    Result<kvm::VmFd> vm = kvm_->CreateVm();
    ASSERT_TRUE(vm.ok());
    ASSERT_TRUE(arch::ConfigureVm(*vm).ok());
    ASSERT_TRUE(arch::RegisterGuestMemory(*vm, **mem).ok());
    Machine m{std::move(*vm), std::move(*mem), {}};
    for (uint32_t v = 0; v < 2; ++v) {
      Result<kvm::VcpuFd> fd = m.vm.CreateVcpu(v);
      ASSERT_TRUE(fd.ok());
      m.vcpus.push_back(std::move(*fd));
    }
    ASSERT_TRUE(ApplyVm(m.vm, snap->state().vm).ok());
    for (uint32_t v = 0; v < 2; ++v) {
      Status st = ApplyVcpu(m.vcpus[v], snap->state().vcpus[v]);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    restore_us.push_back(std::chrono::duration<double, std::micro>(
                             std::chrono::steady_clock::now() - t0).count());
    clones.push_back(std::move(m));
  }
  // Each clone continues from 5 and runs a different number of steps.
  for (size_t i = 0; i < clones.size(); ++i) {
    for (uint32_t want = 5; want <= 5 + i; ++want) {
      Result<uint32_t> got = NextCount(clones[i].vcpus[0]);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(*got, want);
    }
  }
  for (size_t i = 0; i < clones.size(); ++i) EXPECT_EQ(Counter(clones[i]), 5 + i);
  EXPECT_EQ(Counter(a), 4u);
  RecordProperty("restore_us_first", std::to_string(restore_us[0]));
  RecordProperty("restore_us_last", std::to_string(restore_us.back()));
}

// The warm-pool path: memory slots registered ahead of time over a
// reservation; restore maps the memory file over it (MAP_FIXED) and only
// applies state. Two VMs from one snapshot, one file, no slot updates.
TEST_F(CaptureKvmTest, RestoresIntoAPreRegisteredReservation) {
  Machine a = Boot();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(NextCount(a.vcpus[0]).ok());
  MachineState s = Capture(a);
  s.config.mem_bytes = 64 * kMiB;
  s.config.vcpus = 2;
  s.config.memory = {{0, 64 * kMiB}};
  snapshot::testing::TempDir dir;
  ASSERT_TRUE(SnapshotDir::Write(dir / "snap", s, {}, View(*a.mem), {}).ok());

  for (int clone = 0; clone < 2; ++clone) {
    // Pool time: VM, irqchip, memory slots, vCPUs.
    Result<MemoryReservation> res = MemoryReservation::Create(s.config.memory);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    Result<kvm::VmFd> vm = kvm_->CreateVm();
    ASSERT_TRUE(vm.ok());
    ASSERT_TRUE(arch::ConfigureVm(*vm).ok());
    ASSERT_TRUE(res->RegisterWith(*vm).ok());
    std::vector<kvm::VcpuFd> vcpus;
    for (uint32_t v = 0; v < 2; ++v) vcpus.push_back(vm->CreateVcpu(v).value());
    // Restore time.
    auto t0 = std::chrono::steady_clock::now();
    Result<SnapshotDir> snap = SnapshotDir::Open(dir / "snap");
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    Result<std::unique_ptr<GuestMemory>> mem = res->MapFile(snap->memory_path(), snap->state().config.memory);
    ASSERT_TRUE(mem.ok()) << mem.status().ToString();
    ASSERT_TRUE(ApplyVm(*vm, snap->state().vm).ok());
    for (uint32_t v = 0; v < 2; ++v) ASSERT_TRUE(ApplyVcpu(vcpus[v], snap->state().vcpus[v]).ok());
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    RecordProperty("restore_us_" + std::to_string(clone), std::to_string(us));
    Result<uint32_t> next = NextCount(vcpus[0]);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_EQ(*next, 3u);
    EXPECT_EQ(*(*mem)->ReadObj<uint32_t>(kCounterAddr), 3u);
  }
  EXPECT_EQ(Counter(a), 2u);
}

TEST_F(CaptureKvmTest, ClockAdvancesByHostWallTime) {
  Machine a = Boot();
  Result<VmState> vm = CaptureVm(a.vm);
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  VmState old = *vm;
  old.captured_realtime_ns -= 3'600'000'000'000ull;  // "captured an hour ago"
  Result<Machine> b = NewMachine(*kvm_, 1);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(ApplyVm(b->vm, old, ClockPolicy::kAdvance).ok());
  Result<kvm_clock_data> advanced = b->vm.GetClock();
  ASSERT_TRUE(advanced.ok());
  EXPECT_GE(advanced->clock, vm->clock.clock + 3'600'000'000'000ull);
  EXPECT_LT(advanced->clock, vm->clock.clock + 3'610'000'000'000ull);
  ASSERT_TRUE(ApplyVm(b->vm, old, ClockPolicy::kExact).ok());
  Result<kvm_clock_data> exact = b->vm.GetClock();
  ASSERT_TRUE(exact.ok());
  EXPECT_LT(exact->clock, vm->clock.clock + 10'000'000'000ull);
}

TEST_F(CaptureKvmTest, ApplyRefusesAnotherVcpusState) {
  Machine a = Boot();
  MachineState s = Capture(a);
  Result<Machine> b = NewMachine(*kvm_, 2);
  ASSERT_TRUE(b.ok());
  Status st = ApplyVcpu(b->vcpus[0], s.vcpus[1]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubicle::vmm
