// A deterministic MachineState with every field set to a distinct,
// non-trivial value: the content of the golden state file
// (testdata/state-v1.0.bin) and the input of the round-trip tests. Never
// change what it returns without adding a new golden file: the golden test
// exists to catch exactly that.
#pragma once

#include "snapshot/state.h"

namespace kubicle::snapshot::testing {

// seed varies the bytes so tests can build distinct states.
MachineState SampleState(uint8_t seed = 1);

// Fills a trivially copyable object with a byte pattern derived from seed.
template <typename T>
void FillPattern(T* obj, uint8_t seed) {
  auto* b = reinterpret_cast<uint8_t*>(obj);
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

}  // namespace kubicle::snapshot::testing
