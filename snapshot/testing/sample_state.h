// A deterministic MachineState with every field set to a distinct,
// non-trivial value: the content of the golden state file
// (testdata/state-v1.0.bin) and the input of the round-trip tests. Never
// change what it returns without adding a new golden file: the golden test
// exists to catch exactly that.
#pragma once

#include "snapshot/byte_io.h"
#include "snapshot/meta.h"
#include "snapshot/state.h"

namespace kubicle::snapshot::testing {

// The device kinds of the sample: what the VMM's virtio-blk, virtio-vsock and
// virtio-rng use (their own numbers, vmm/devices/virtio/persist.h).
inline constexpr DeviceKind kSampleBlockKind = 2;
inline constexpr DeviceKind kSampleRngKind = 3;
inline constexpr DeviceKind kSampleVsockKind = 4;

// seed varies the bytes so tests can build distinct states. Its devices: the
// serial port, a virtio-blk disk in slot 0 (SampleDisks), virtio-vsock in
// slot 1, virtio-rng in slot 2.
MachineState SampleState(uint8_t seed = 1);
// The disk index of SampleState's block device.
std::vector<DiskIndexEntry> SampleDisks();

// Fills a trivially copyable object with a byte pattern derived from seed.
template <typename T>
void FillPattern(T* obj, uint8_t seed) {
  auto* b = reinterpret_cast<uint8_t*>(obj);
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

}  // namespace kubicle::snapshot::testing
