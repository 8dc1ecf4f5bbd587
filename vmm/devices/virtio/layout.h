// The virtio 1.x layout for the VMM's devices: the one copy in virtio/
// (spec.h, mmio.h, block.h, vsock.h), which the test guest's drivers compile too,
// brought into this folder's namespace. The devices, their tests and the
// fuzzers name the spec's constants and structs unqualified, as the spec
// does; the directive keeps them that way without a second table here.
#pragma once

#include "virtio/block.h"
#include "virtio/mmio.h"
#include "virtio/spec.h"
#include "virtio/vsock.h"

namespace kubicle::vmm::devices::virtio {

using namespace ::kubicle::virtio;  // NOLINT(google-build-using-namespace): see above

}  // namespace kubicle::vmm::devices::virtio
