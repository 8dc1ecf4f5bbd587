#include "snapshot/testing/sample_state.h"

namespace kubicle::snapshot::testing {
namespace {

using vmm::devices::virtio::QueueState;

VcpuState SampleVcpu(uint32_t id, uint8_t seed) {
  VcpuState v;
  v.id = id;
  FillPattern(&v.regs, seed + 1);
  FillPattern(&v.sregs, seed + 2);
  FillPattern(&v.fpu, seed + 3);
  for (uint32_t i = 0; i < 5; ++i) {
    kvm_msr_entry e{};
    e.index = 0xc0000080 + i;
    e.data = 0x1122334455667700ull + i * 3 + seed;
    v.msrs.push_back(e);
  }
  for (uint32_t i = 0; i < 3; ++i) {
    kvm_cpuid_entry2 e{};
    FillPattern(&e, static_cast<uint8_t>(seed + 10 + i));
    e.padding[0] = e.padding[1] = e.padding[2] = 0;
    v.cpuid.push_back(e);
  }
  FillPattern(&v.lapic, seed + 4);
  v.mp_state.mp_state = KVM_MP_STATE_RUNNABLE;
  FillPattern(&v.events, seed + 5);
  v.xsave.resize(4096 + 64 * id);
  for (size_t i = 0; i < v.xsave.size(); ++i) v.xsave[i] = static_cast<uint8_t>(i * 13 + seed);
  FillPattern(&v.xcrs, seed + 6);
  FillPattern(&v.debugregs, seed + 7);
  v.tsc_khz = 2'400'000 + id;
  return v;
}

QueueState SampleQueue(uint16_t i, uint8_t seed) {
  QueueState q;
  q.size = 256;
  q.ready = true;
  q.desc_table = 0x100000 + i * 0x10000 + seed;
  q.avail_ring = q.desc_table + 0x1000;
  q.used_ring = q.desc_table + 0x2000;
  q.next_avail = static_cast<uint16_t>(17 + i + seed);
  q.next_used = static_cast<uint16_t>(15 + i + seed);
  q.event_idx = i % 2 == 0;
  q.signalled_used = static_cast<uint16_t>(14 + i);
  q.signalled_used_valid = i % 2 == 1;
  return q;
}

VirtioDeviceState SampleVirtio(DeviceKind kind, uint32_t slot, uint16_t queues, uint8_t seed) {
  VirtioDeviceState d;
  d.kind = kind;
  d.slot = slot;
  d.transport.status = 0xf;  // ACK | DRIVER | DRIVER_OK | FEATURES_OK
  d.transport.device_features_sel = 1;
  d.transport.driver_features_sel = 1;
  d.transport.driver_features = (1ull << 32) | (1ull << 29) | seed;
  d.transport.queue_sel = queues - 1u;
  d.transport.interrupt_status = 1;
  d.transport.config_generation = 2 + slot;
  for (uint16_t i = 0; i < queues; ++i) d.transport.queues.push_back(SampleQueue(i, seed));
  return d;
}

}  // namespace

MachineState SampleState(uint8_t seed) {
  MachineState s;
  s.config.mem_bytes = 256ull << 20;
  s.config.vcpus = 2;
  s.config.memory = {{0, 256ull << 20}};
  s.config.cmdline = "console=ttyS0 reboot=k panic=1 virtio_mmio.device=4K@0xd0000000:5";
  s.config.devices = {{DeviceKind::kSerial, 0},
                      {DeviceKind::kVirtioBlock, 0},
                      {DeviceKind::kVirtioVsock, 1},
                      {DeviceKind::kVirtioRng, 2}};
  FillPattern(&s.vm.pic_master, seed + 20);
  FillPattern(&s.vm.pic_slave, seed + 21);
  FillPattern(&s.vm.ioapic, seed + 22);
  FillPattern(&s.vm.pit, seed + 23);
  FillPattern(&s.vm.clock, seed + 24);
  s.vm.captured_realtime_ns = 1'767'225'600'000'000'000ull + seed;
  s.vcpus = {SampleVcpu(0, seed), SampleVcpu(1, seed + 50)};

  vmm::devices::legacy::SerialState serial;
  serial.ier = 0x3;
  serial.lcr = 0x3;
  serial.mcr = 0xb;
  serial.scr = 0x5a;
  serial.dll = 1;
  serial.dlm = 0;
  serial.fifo_enabled = true;
  serial.thre_pending = true;
  serial.input = {'l', 's', '\n'};
  s.serial = serial;

  VirtioDeviceState blk = SampleVirtio(DeviceKind::kVirtioBlock, 0, 1, seed);
  blk.block.read_only = false;
  blk.block.serial = "rootfs";
  blk.block.chain.base_path = "/var/lib/kubicle/images/python.ext4";
  blk.block.chain.size = 1ull << 30;
  LayerRef layer;
  layer.path = "/var/lib/kubicle/layers/template-python.layer";
  for (size_t i = 0; i < layer.id.size(); ++i) layer.id[i] = static_cast<uint8_t>(0xa0 + i);
  blk.block.chain.layers = {layer};
  VirtioDeviceState vsock = SampleVirtio(DeviceKind::kVirtioVsock, 1, 3, seed);
  vsock.vsock.guest_cid = 3;
  VirtioDeviceState rng = SampleVirtio(DeviceKind::kVirtioRng, 2, 1, seed);
  s.virtio = {blk, vsock, rng};
  return s;
}

}  // namespace kubicle::snapshot::testing
