// kubicle-bench-vmm --only net: what a NIC adds to restore and fork (the
// clone's TAP opened inside its own network namespace, its new MAC).
#pragma once

#include "vmm/testing/vm_process.h"

namespace kubicle::bench {

// Warm-pool restore to agent answering and fork to child agent answering,
// each without a NIC and with one (a TAP in a fresh namespace per clone),
// runs of each interleaved so both see the same machine. False on failure
// (printed to stderr).
bool MeasureNet(const vmm::testing::VmProcessOptions& options, int runs);

}  // namespace kubicle::bench
