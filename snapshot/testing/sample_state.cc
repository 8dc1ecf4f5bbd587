#include "snapshot/testing/sample_state.h"

namespace kubicle::snapshot::testing {

std::vector<DiskIndexEntry> SampleDisks() {
  DiskIndexEntry d;
  d.slot = 0;
  d.read_only = false;
  d.serial = "rootfs";
  d.chain.base_path = "/var/lib/kubicle/images/python.ext4";
  d.chain.size = 1ull << 30;
  LayerRef layer;
  layer.path = "/var/lib/kubicle/layers/template-python.layer";
  for (size_t i = 0; i < layer.id.size(); ++i) layer.id[i] = static_cast<uint8_t>(0xa0 + i);
  d.chain.layers = {layer};
  return {d};
}

namespace {

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

// The records below are written by hand in the layout docs/snapshot-format.md
// gives for each device (section 2.4.5), not with the devices' own encoders:
// the golden file then checks those encoders (vmm/device_persist_test.cc)
// against the documented bytes.

void SampleQueue(ByteWriter& w, uint16_t i, uint8_t seed) {
  const uint64_t desc = 0x100000 + i * 0x10000 + seed;
  w.U16(256);                                  // size
  w.Bool(true);                                // ready
  w.U64(desc);                                 // descriptor table
  w.U64(desc + 0x1000);                        // avail ring
  w.U64(desc + 0x2000);                        // used ring
  w.U16(static_cast<uint16_t>(17 + i + seed));  // next_avail
  w.U16(static_cast<uint16_t>(15 + i + seed));  // next_used
  w.Bool(i % 2 == 0);                          // event_idx
  w.U16(static_cast<uint16_t>(14 + i));        // signalled_used
  w.Bool(i % 2 == 1);                          // signalled_used_valid
}

// A virtio-mmio record: the transport's state, then the device-specific bytes.
VirtioDeviceState SampleVirtio(DeviceKind kind, uint32_t slot, uint16_t queues, uint8_t seed,
                               const std::vector<uint8_t>& device) {
  VirtioDeviceState d;
  d.kind = kind;
  d.slot = slot;
  ByteWriter w(d.state);
  w.U32(0xf);  // status: ACK | DRIVER | DRIVER_OK | FEATURES_OK
  w.U32(1);    // device_features_sel
  w.U32(1);    // driver_features_sel
  w.U64((1ull << 32) | (1ull << 29) | seed);  // driver_features
  w.U32(queues - 1u);                          // queue_sel
  w.U32(1);                                    // interrupt_status
  w.U32(2 + slot);                             // config_generation
  w.U32(queues);
  for (uint16_t i = 0; i < queues; ++i) SampleQueue(w, i, seed);
  w.Bytes(device);
  return d;
}

std::vector<uint8_t> SampleBlock() {
  std::vector<uint8_t> b;
  ByteWriter w(b);
  DiskIndexEntry d = SampleDisks().at(0);
  w.Bool(d.read_only);
  w.String(d.serial);
  w.String(d.chain.base_path);
  w.U64(d.chain.size);
  w.U32(static_cast<uint32_t>(d.chain.layers.size()));
  for (const LayerRef& l : d.chain.layers) {
    w.String(l.path);
    w.Raw(l.id.data(), l.id.size());
  }
  return b;
}

std::vector<uint8_t> SampleVsock() {
  std::vector<uint8_t> b;
  ByteWriter(b).U64(3);  // guest_cid
  return b;
}

std::vector<uint8_t> SampleSerial() {
  std::vector<uint8_t> b;
  ByteWriter w(b);
  for (uint8_t v : {0x3, 0x3, 0xb, 0x5a, 1, 0}) w.U8(v);  // ier lcr mcr scr dll dlm
  w.Bool(true);   // fifo_enabled
  w.Bool(true);   // thre_pending
  w.Bool(false);  // overrun
  w.Bytes(std::vector<uint8_t>{'l', 's', '\n'});  // input
  return b;
}

}  // namespace

MachineState SampleState(uint8_t seed) {
  MachineState s;
  s.config.mem_bytes = 256ull << 20;
  s.config.vcpus = 2;
  s.config.memory = {{0, 256ull << 20}};
  s.config.cmdline = "console=ttyS0 reboot=k panic=1 virtio_mmio.device=4K@0xd0000000:5";
  s.config.devices = {{kSerialDeviceKind, 0},
                      {kSampleBlockKind, 0},
                      {kSampleVsockKind, 1},
                      {kSampleRngKind, 2}};
  FillPattern(&s.vm.pic_master, seed + 20);
  FillPattern(&s.vm.pic_slave, seed + 21);
  FillPattern(&s.vm.ioapic, seed + 22);
  FillPattern(&s.vm.pit, seed + 23);
  FillPattern(&s.vm.clock, seed + 24);
  s.vm.captured_realtime_ns = 1'767'225'600'000'000'000ull + seed;
  s.vcpus = {SampleVcpu(0, seed), SampleVcpu(1, seed + 50)};

  s.serial = SampleSerial();
  s.virtio = {SampleVirtio(kSampleBlockKind, 0, 1, seed, SampleBlock()),
              SampleVirtio(kSampleVsockKind, 1, 3, seed, SampleVsock()),
              SampleVirtio(kSampleRngKind, 2, 1, seed, {})};
  return s;
}

}  // namespace kubicle::snapshot::testing
