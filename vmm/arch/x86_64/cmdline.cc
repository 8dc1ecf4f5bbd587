#include "vmm/arch/x86_64/cmdline.h"

#include <algorithm>
#include <string>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {

Result<uint32_t> WriteCmdline(const GuestMemory& mem, std::string_view cmdline, uint64_t max_len) {
  uint64_t limit = std::min<uint64_t>(max_len, kCmdlineMaxSize - 1);
  if (cmdline.size() > limit) {
    return Status::InvalidArgument("kernel command line is " + std::to_string(cmdline.size()) +
                                   " bytes, longer than the limit of " + std::to_string(limit));
  }
  if (cmdline.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("kernel command line contains a NUL byte");
  }
  std::string buf(cmdline);
  buf.push_back('\0');
  RETURN_IF_ERROR(mem.Write(kCmdlineAddr, buf.data(), buf.size()).WithContext("writing command line"));
  return static_cast<uint32_t>(buf.size());
}

}  // namespace kubicle::vmm::arch
