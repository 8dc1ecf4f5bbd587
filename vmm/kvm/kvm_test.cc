// Exercises the KVM wrappers against the host's /dev/kvm (label kvm). Skips
// when /dev/kvm is not usable.
#include "vmm/kvm/kvm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/event_fd.h"
#include "common/mmap_region.h"
#include "vmm/kvm/vcpu_fd.h"
#include "vmm/kvm/vm_fd.h"

namespace kubicle::vmm::kvm {
namespace {

#define SKIP_WITHOUT_KVM()                                                      \
  do {                                                                          \
    if (::access("/dev/kvm", R_OK | W_OK) != 0)                                 \
      GTEST_SKIP() << "/dev/kvm is absent or not accessible: skipping KVM test"; \
  } while (0)

constexpr uint64_t kMemSize = 2 << 20;

struct TestVm {
  Kvm kvm;
  VmFd vm;
  MmapRegion mem;
};

Result<TestVm> MakeVm() {
  ASSIGN_OR_RETURN(Kvm kvm, Kvm::Open());
  ASSIGN_OR_RETURN(VmFd vm, kvm.CreateVm());
  RETURN_IF_ERROR(vm.SetTssAddress(0xfffbd000));
  RETURN_IF_ERROR(vm.SetIdentityMapAddress(0xfffbc000));
  RETURN_IF_ERROR(vm.CreateIrqchip());
  RETURN_IF_ERROR(vm.CreatePit2());
  ASSIGN_OR_RETURN(MmapRegion mem, MmapRegion::Anonymous(kMemSize));
  RETURN_IF_ERROR(vm.SetUserMemoryRegion(0, 0, kMemSize, mem.data()));
  return TestVm{std::move(kvm), std::move(vm), std::move(mem)};
}

TEST(KvmTest, OpensAndReportsCapabilities) {
  SKIP_WITHOUT_KVM();
  Result<Kvm> kvm = Kvm::Open();
  ASSERT_TRUE(kvm.ok()) << kvm.status().ToString();
  EXPECT_GT(kvm->CheckExtension(KVM_CAP_IRQCHIP), 0);
  EXPECT_GE(kvm->vcpu_mmap_size(), sizeof(kvm_run));
  Result<std::vector<kvm_cpuid_entry2>> cpuid = kvm->SupportedCpuid();
  ASSERT_TRUE(cpuid.ok()) << cpuid.status().ToString();
  EXPECT_TRUE(std::any_of(cpuid->begin(), cpuid->end(),
                          [](const kvm_cpuid_entry2& e) { return e.function == 0x40000000; }));
  Result<std::vector<uint32_t>> msrs = kvm->MsrIndexList();
  ASSERT_TRUE(msrs.ok()) << msrs.status().ToString();
  EXPECT_NE(std::find(msrs->begin(), msrs->end(), 0x10u), msrs->end());  // IA32_TSC
  EXPECT_TRUE(kvm->FeatureMsrIndexList().ok());
}

TEST(KvmTest, OpenOfMissingPathNamesIt) {
  Result<Kvm> kvm = Kvm::Open("/nonexistent/kvm");
  ASSERT_FALSE(kvm.ok());
  EXPECT_EQ(kvm.status().code(), StatusCode::kNotFound);
  EXPECT_NE(kvm.status().message().find("/nonexistent/kvm"), std::string::npos);
}

TEST(KvmTest, NonKvmFdIsRejected) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[1]);
  Result<Kvm> kvm = Kvm::FromFd(UniqueFd(fds[0]));
  EXPECT_FALSE(kvm.ok());
}

TEST(KvmTest, VmStateRoundTrips) {
  SKIP_WITHOUT_KVM();
  Result<TestVm> t = MakeVm();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Result<kvm_clock_data> clock = t->vm.GetClock();
  ASSERT_TRUE(clock.ok()) << clock.status().ToString();
  kvm_clock_data set{};
  set.clock = clock->clock + 1'000'000'000ull;
  ASSERT_TRUE(t->vm.SetClock(set).ok());
  Result<kvm_clock_data> after = t->vm.GetClock();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(after->clock, set.clock);

  for (uint32_t chip : {KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE, KVM_IRQCHIP_IOAPIC}) {
    Result<kvm_irqchip> c = t->vm.GetIrqchip(chip);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(t->vm.SetIrqchip(*c).ok());
  }
  Result<kvm_pit_state2> pit = t->vm.GetPit2();
  ASSERT_TRUE(pit.ok()) << pit.status().ToString();
  EXPECT_TRUE(t->vm.SetPit2(*pit).ok());
  EXPECT_TRUE(t->vm.SetIrqLine(4, true).ok());
  EXPECT_TRUE(t->vm.SetIrqLine(4, false).ok());

  Result<EventFd> ev = EventFd::Create();
  ASSERT_TRUE(ev.ok());
  EXPECT_TRUE(t->vm.RegisterIrqfd(ev->fd(), 5).ok());
  EXPECT_TRUE(t->vm.UnregisterIrqfd(ev->fd(), 5).ok());
  EXPECT_TRUE(t->vm.RegisterIoeventfd(ev->fd(), 0xd0000050, 4, 0u).ok());
  EXPECT_TRUE(t->vm.UnregisterIoeventfd(ev->fd(), 0xd0000050, 4, 0u).ok());
  Status bad = t->vm.RegisterIoeventfd(ev->fd(), 0xd0000050, 3);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
}

// The CPUID leaves the VMM relies on (vmm/arch/x86_64/cpuid.h) and, in
// each, the fields it computes or reads back as the VM's identity: vendor
// and signature, APIC ids and topology, cache sharing, the XSAVE components,
// the KVM signature. These must come back from KVM_GET_CPUID2 as they were
// set. Feature flags are left out on purpose: KVM recomputes some of them at
// run time (OSXSAVE, APIC, MWAIT, OSPKE, XSAVE sizes, PV_UNHALT), and some
// hosts (nested, PVM) report their own (HTT, leaf 7, XSAVEC) on the way back.
struct ReliedLeaf {
  uint32_t function, index;
  uint32_t eax, ebx, ecx, edx;  // the bits that must survive
};
constexpr uint32_t kAll = ~0u;
constexpr ReliedLeaf kReliedLeaves[] = {
    {0x0, 0, kAll, kAll, kAll, kAll},              // max basic leaf, vendor
    {0x1, 0, kAll, kAll, 1u << 31, 0},             // signature; CLFLUSH, count, APIC id; hypervisor
    {0x4, 0, 0xffffc000, 0, 0, 0},                 // cores per package, threads per cache
    {0x4, 1, 0xffffc000, 0, 0, 0},
    {0x4, 2, 0xffffc000, 0, 0, 0},
    {0x4, 3, 0xffffc000, 0, 0, 0},
    {0x7, 0, 0, 0, 0, 0},                          // features (read for XSAVE)
    {0xb, 0, kAll, kAll, kAll, kAll},              // extended topology: SMT level
    {0xb, 1, kAll, kAll, kAll, kAll},              //   core level
    {0xd, 0, kAll, 0, kAll, kAll},                 // XCR0 components, largest area
    {0xd, 1, 0, 0, 0, 0},                          // XSAVEC, compacted size
    {0x1f, 0, kAll, kAll, kAll, kAll},             // V2 extended topology
    {0x1f, 1, kAll, kAll, kAll, kAll},
    {0x40000000, 0, kAll, kAll, kAll, kAll},       // "KVMKVMKVM", max leaf
    {0x40000001, 0, ~(1u << 7), 0, 0, 0},          // KVM paravirt features but PV_UNHALT
    {0x80000000, 0, kAll, 0, 0, 0},                // max extended leaf
    {0x80000001, 0, 0, 0, 0, 0},                   // extended features
    {0x80000008, 0, kAll, 0, 0xf0ff, 0},           // address sizes; AMD core count
    {0x8000001e, 0, kAll, kAll, kAll, 0},          // AMD extended APIC id, unit, node
};

const kvm_cpuid_entry2* FindEntry(const std::vector<kvm_cpuid_entry2>& t, uint32_t function,
                                  uint32_t index) {
  for (const kvm_cpuid_entry2& e : t) {
    if (e.function != function) continue;
    if ((e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX) && e.index != index) continue;
    return &e;
  }
  return nullptr;
}

// What matters of a CPUID round trip is that every leaf the VMM relies on
// comes back with the fields it set. How many entries come back is the
// host's business: with AMX, KVM_GET_CPUID2 returns fewer entries than were
// set (the AMX tile leaves 0x1d and 0x1e, AVX10's 0x24).
void ExpectReliedOnLeavesSurvive(const std::vector<kvm_cpuid_entry2>& set,
                                 const std::vector<kvm_cpuid_entry2>& got) {
  ASSERT_NE(FindEntry(set, 0x0, 0), nullptr) << "KVM offers no leaf 0";
  ASSERT_NE(FindEntry(set, 0x1, 0), nullptr) << "KVM offers no leaf 1";
  for (const ReliedLeaf& l : kReliedLeaves) {
    const kvm_cpuid_entry2* want = FindEntry(set, l.function, l.index);
    if (!want) continue;  // not on this host
    char name[32];
    std::snprintf(name, sizeof(name), "leaf 0x%x.%u", l.function, l.index);
    const kvm_cpuid_entry2* have = FindEntry(got, l.function, l.index);
    ASSERT_NE(have, nullptr) << name << " was set but did not come back";
    EXPECT_EQ(have->eax & l.eax, want->eax & l.eax) << name << " EAX";
    EXPECT_EQ(have->ebx & l.ebx, want->ebx & l.ebx) << name << " EBX";
    EXPECT_EQ(have->ecx & l.ecx, want->ecx & l.ecx) << name << " ECX";
    EXPECT_EQ(have->edx & l.edx, want->edx & l.edx) << name << " EDX";
  }
}

TEST(KvmTest, VcpuStateRoundTrips) {
  SKIP_WITHOUT_KVM();
  Result<TestVm> t = MakeVm();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Result<VcpuFd> vcpu = t->vm.CreateVcpu(0);
  ASSERT_TRUE(vcpu.ok()) << vcpu.status().ToString();
  Result<std::vector<kvm_cpuid_entry2>> cpuid = t->kvm.SupportedCpuid();
  ASSERT_TRUE(cpuid.ok());
  ASSERT_TRUE(vcpu->SetCpuid2(*cpuid).ok());
  Result<std::vector<kvm_cpuid_entry2>> got_cpuid = vcpu->GetCpuid2();
  ASSERT_TRUE(got_cpuid.ok()) << got_cpuid.status().ToString();
  ExpectReliedOnLeavesSurvive(*cpuid, *got_cpuid);

  Result<kvm_regs> regs = vcpu->GetRegs();
  ASSERT_TRUE(regs.ok());
  regs->rax = 0x1234;
  ASSERT_TRUE(vcpu->SetRegs(*regs).ok());
  EXPECT_EQ(vcpu->GetRegs()->rax, 0x1234u);

  std::vector<kvm_msr_entry> msrs(2);
  msrs[0].index = 0x174;  // SYSENTER_CS
  msrs[0].data = 0x10;
  msrs[1].index = 0xc0000102;  // KERNEL_GS_BASE
  msrs[1].data = 0xffff800000001000ull;
  ASSERT_TRUE(vcpu->SetMsrs(msrs).ok());
  std::vector<kvm_msr_entry> read(2);
  read[0].index = 0x174;
  read[1].index = 0xc0000102;
  Result<size_t> n = vcpu->GetMsrs(read);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(read[0].data, 0x10u);
  EXPECT_EQ(read[1].data, 0xffff800000001000ull);
  std::vector<kvm_msr_entry> bogus(1);
  bogus[0].index = 0xdeadbeef;
  Status st = vcpu->SetMsrs(bogus);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("0xdeadbeef"), std::string::npos) << st.message();

  ASSERT_TRUE(vcpu->GetSregs().ok());
  ASSERT_TRUE(vcpu->SetSregs(*vcpu->GetSregs()).ok());
  ASSERT_TRUE(vcpu->SetFpu(*vcpu->GetFpu()).ok());
  ASSERT_TRUE(vcpu->SetLapic(*vcpu->GetLapic()).ok());
  ASSERT_TRUE(vcpu->SetMpState(*vcpu->GetMpState()).ok());
  ASSERT_TRUE(vcpu->SetVcpuEvents(*vcpu->GetVcpuEvents()).ok());
  ASSERT_TRUE(vcpu->SetDebugRegs(*vcpu->GetDebugRegs()).ok());
  Result<kvm_xcrs> xcrs = vcpu->GetXcrs();
  ASSERT_TRUE(xcrs.ok()) << xcrs.status().ToString();
  ASSERT_TRUE(vcpu->SetXcrs(*xcrs).ok());
  Result<std::vector<uint8_t>> xsave = vcpu->GetXsave();
  ASSERT_TRUE(xsave.ok()) << xsave.status().ToString();
  EXPECT_GE(xsave->size(), 4096u);
  ASSERT_TRUE(vcpu->SetXsave(*xsave).ok());
  EXPECT_EQ(vcpu->SetXsave(std::span<const uint8_t>(xsave->data(), 100)).code(),
            StatusCode::kInvalidArgument);
  Result<uint32_t> khz = vcpu->GetTscKhz();
  ASSERT_TRUE(khz.ok()) << khz.status().ToString();
  EXPECT_GT(*khz, 0u);
}

// Real-mode guest at 0x1000: mov al, 0x42; out 0x10, al.
TEST(KvmTest, RunsARealModeGuestToAnIoExit) {
  SKIP_WITHOUT_KVM();
  Result<TestVm> t = MakeVm();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const uint8_t code[] = {0xb0, 0x42, 0xe6, 0x10};
  std::memcpy(t->mem.data() + 0x1000, code, sizeof(code));
  Result<VcpuFd> vcpu = t->vm.CreateVcpu(0);
  ASSERT_TRUE(vcpu.ok());
  kvm_sregs sregs = *vcpu->GetSregs();
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  ASSERT_TRUE(vcpu->SetSregs(sregs).ok());
  kvm_regs regs{};
  regs.rip = 0x1000;
  regs.rflags = 0x2;
  ASSERT_TRUE(vcpu->SetRegs(regs).ok());

  vcpu->SetImmediateExit(true);
  Status interrupted = vcpu->Run();
  EXPECT_TRUE(VcpuFd::IsInterrupted(interrupted)) << interrupted.ToString();
  EXPECT_EQ(interrupted.code(), StatusCode::kUnavailable);
  vcpu->SetImmediateExit(false);

  Status st = vcpu->Run();
  ASSERT_TRUE(st.ok()) << st.ToString();
  kvm_run* run = vcpu->run();
  ASSERT_EQ(run->exit_reason, KVM_EXIT_IO);
  EXPECT_EQ(run->io.direction, KVM_EXIT_IO_OUT);
  EXPECT_EQ(run->io.port, 0x10);
  EXPECT_EQ(run->io.size, 1);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(run)[run->io.data_offset], 0x42);
}

}  // namespace
}  // namespace kubicle::vmm::kvm
