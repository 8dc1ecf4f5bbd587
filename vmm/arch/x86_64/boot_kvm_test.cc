// Boots tiny hand-assembled guests through ConfigureBoot/SetupVcpu on the
// host's KVM (label kvm): proves the GDT, page tables, zero page, PVH start
// info and registers give a working entry. Guest code is a few instructions
// because CPL0 code is emulated slowly on our hosts; with the in-kernel
// irqchip HLT does not exit, so each guest ends with an OUT we can see.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "vmm/arch/x86_64/boot.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/arch/x86_64/pvh.h"
#include "vmm/arch/x86_64/test_images.h"

namespace kubicle::vmm::arch {
namespace {

using namespace ::kubicle::vmm::arch::test_images;  // NOLINT

constexpr uint64_t kGuestEntry = 0x1000000;  // 16 MiB
constexpr uint64_t kProbeAddr = 0x3000000;   // 48 MiB: needs the 25th 2 MiB page
constexpr uint32_t kProbeValue = 0xcafebabe;

// .code64: out 'K' to COM1; out dword [rsi+0x202] ("HdrS") to 0x510;
// movabs rax, 0x1122334455667788; mov rbx, rax; push rbx; pop rcx;
// mov eax, [0x3000000]; out eax to 0x511; hlt
const std::vector<uint8_t> kLongModeGuest = {
    0xb0, 0x4b, 0x66, 0xba, 0xf8, 0x03, 0xee, 0x8b, 0x86, 0x02, 0x02, 0x00, 0x00, 0x66, 0xba,
    0x10, 0x05, 0xef, 0x48, 0xb8, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x48, 0x89,
    0xc3, 0x53, 0x59, 0x8b, 0x04, 0x25, 0x00, 0x00, 0x00, 0x03, 0x66, 0xba, 0x11, 0x05, 0xef,
    0xf4};
// .code32: out 'P' to COM1; mov eax, [ebx]; out eax to 0x510; hlt
const std::vector<uint8_t> kPvhGuest = {0xb0, 0x50, 0x66, 0xba, 0xf8, 0x03, 0xee, 0x8b,
                                        0x03, 0x66, 0xba, 0x10, 0x05, 0xef, 0xf4};

struct Machine {
  kvm::Kvm kvm;
  kvm::VmFd vm;
  std::unique_ptr<GuestMemory> mem;
  std::vector<kvm_cpuid_entry2> cpuid;
};

Result<Machine> MakeMachine() {
  ASSIGN_OR_RETURN(kvm::Kvm kvm, kvm::Kvm::Open());
  ASSIGN_OR_RETURN(kvm::VmFd vm, kvm.CreateVm());
  RETURN_IF_ERROR(ConfigureVm(vm));
  ASSIGN_OR_RETURN(std::unique_ptr<GuestMemory> mem,
                   GuestMemory::CreateAnonymous(MemoryRanges(64 * kMiB)));
  RETURN_IF_ERROR(RegisterGuestMemory(vm, *mem));
  ASSIGN_OR_RETURN(std::vector<kvm_cpuid_entry2> cpuid, kvm.SupportedCpuid());
  return Machine{std::move(kvm), std::move(vm), std::move(mem), std::move(cpuid)};
}

struct IoExit {
  uint16_t port;
  uint8_t size;
  uint32_t value;
};

// Runs until the next KVM_EXIT_IO (OUT) and returns it.
Result<IoExit> RunToIo(kvm::VcpuFd& vcpu) {
  for (int i = 0; i < 100; ++i) {
    RETURN_IF_ERROR(vcpu.Run());
    kvm_run* run = vcpu.run();
    if (run->exit_reason != KVM_EXIT_IO) {
      return Status::Internal("unexpected exit reason " + std::to_string(run->exit_reason));
    }
    if (run->io.direction != KVM_EXIT_IO_OUT) continue;
    IoExit io{run->io.port, run->io.size, 0};
    std::memcpy(&io.value, reinterpret_cast<uint8_t*>(run) + run->io.data_offset, run->io.size);
    return io;
  }
  return Status::Internal("no OUT after 100 exits");
}

class BootKvmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "/dev/kvm is absent or not accessible: skipping KVM boot test";
    }
  }
  void TearDown() override {
    for (const std::string& p : files_) ::unlink(p.c_str());
  }
  std::string File(const std::vector<uint8_t>& bytes) {
    files_.push_back(WriteTempFile(bytes));
    return files_.back();
  }
  std::vector<std::string> files_;
};

TEST_F(BootKvmTest, LongModeEntryRunsTheGuest) {
  Result<Machine> m = MakeMachine();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(m->mem->WriteObj<uint32_t>(kProbeAddr, kProbeValue).ok());
  BootConfig cfg;
  cfg.kernel_path = File(MakeElf({{PT_LOAD, kGuestEntry, kLongModeGuest, 0x1000}}, kGuestEntry));
  cfg.cmdline = "console=ttyS0";
  cfg.num_vcpus = 2;
  Result<BootInfo> boot = ConfigureBoot(*m->mem, cfg);
  ASSERT_TRUE(boot.ok()) << boot.status().ToString();
  ASSERT_EQ(boot->mode, EntryMode::kLinux64);

  Result<kvm::VcpuFd> bsp = m->vm.CreateVcpu(0);
  Result<kvm::VcpuFd> ap = m->vm.CreateVcpu(1);
  ASSERT_TRUE(bsp.ok() && ap.ok());
  Status s0 = SetupVcpu(m->kvm, *bsp, 0, 2, *boot, m->cpuid);
  ASSERT_TRUE(s0.ok()) << s0.ToString();
  Status s1 = SetupVcpu(m->kvm, *ap, 1, 2, *boot, m->cpuid);
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  // The AP waits for INIT/SIPI from the BSP.
  Result<kvm_mp_state> ap_state = ap->GetMpState();
  ASSERT_TRUE(ap_state.ok());
  EXPECT_EQ(ap_state->mp_state, static_cast<uint32_t>(KVM_MP_STATE_UNINITIALIZED));
  // Each vCPU got its own APIC id in CPUID.
  Result<std::vector<kvm_cpuid_entry2>> ap_cpuid = ap->GetCpuid2();
  ASSERT_TRUE(ap_cpuid.ok());
  for (const kvm_cpuid_entry2& e : *ap_cpuid) {
    if (e.function == 1) {
      EXPECT_EQ(e.ebx >> 24, 1u);
    }
  }

  Result<IoExit> serial = RunToIo(*bsp);
  ASSERT_TRUE(serial.ok()) << serial.status().ToString();
  EXPECT_EQ(serial->port, 0x3f8);
  EXPECT_EQ(serial->size, 1);
  EXPECT_EQ(serial->value, static_cast<uint32_t>('K'));

  Result<IoExit> header = RunToIo(*bsp);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->port, 0x510);
  EXPECT_EQ(header->size, 4);
  EXPECT_EQ(header->value, kSetupHeaderMagic);  // read through RSI = zero page

  Result<IoExit> probe = RunToIo(*bsp);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->port, 0x511);
  EXPECT_EQ(probe->value, kProbeValue);  // identity map beyond the first 2 MiB

  Result<kvm_regs> regs = bsp->GetRegs();
  ASSERT_TRUE(regs.ok());
  EXPECT_EQ(regs->rcx, 0x1122334455667788ull);  // 64-bit registers and the stack
  EXPECT_EQ(regs->rsp, kBootStackPointer);
  Result<kvm_sregs> sregs = bsp->GetSregs();
  ASSERT_TRUE(sregs.ok());
  EXPECT_TRUE(sregs->efer & kEferLma);
  EXPECT_EQ(sregs->cs.l, 1);
  EXPECT_EQ(sregs->cr3, kPml4Addr);
}

TEST_F(BootKvmTest, PvhEntryRunsTheGuest) {
  Result<Machine> m = MakeMachine();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  BootConfig cfg;
  cfg.kernel_path = File(MakeElf(
      {{PT_LOAD, kGuestEntry, kPvhGuest, 0x1000}, {PT_NOTE, 0, PvhNote(kGuestEntry), 0}},
      kGuestEntry));
  cfg.protocol = BootProtocol::kPvh;
  Result<BootInfo> boot = ConfigureBoot(*m->mem, cfg);
  ASSERT_TRUE(boot.ok()) << boot.status().ToString();
  Result<kvm::VcpuFd> bsp = m->vm.CreateVcpu(0);
  ASSERT_TRUE(bsp.ok());
  Status st = SetupVcpu(m->kvm, *bsp, 0, 1, *boot, m->cpuid);
  ASSERT_TRUE(st.ok()) << st.ToString();

  Result<IoExit> serial = RunToIo(*bsp);
  ASSERT_TRUE(serial.ok()) << serial.status().ToString();
  EXPECT_EQ(serial->value, static_cast<uint32_t>('P'));
  Result<IoExit> magic = RunToIo(*bsp);
  ASSERT_TRUE(magic.ok()) << magic.status().ToString();
  EXPECT_EQ(magic->port, 0x510);
  EXPECT_EQ(magic->value, kHvmStartMagic);  // EBX points at hvm_start_info
  Result<kvm_sregs> sregs = bsp->GetSregs();
  ASSERT_TRUE(sregs.ok());
  EXPECT_EQ(sregs->efer & kEferLma, 0u);
  EXPECT_EQ(sregs->cs.db, 1);
}

}  // namespace
}  // namespace kubicle::vmm::arch
