// Writes the kernel command line into guest memory at kCmdlineAddr.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

// Writes cmdline and a terminating NUL at kCmdlineAddr. max_len is the
// longest command line accepted, NUL excluded (a bzImage advertises its own
// in setup_header.cmdline_size; ours is kCmdlineMaxSize - 1). Rejects an
// embedded NUL. Returns the bytes written, NUL included.
Result<uint32_t> WriteCmdline(const GuestMemory& mem, std::string_view cmdline, uint64_t max_len);

}  // namespace kubicle::vmm::arch
