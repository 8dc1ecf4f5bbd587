#include "vmm/seccomp_mode.h"

namespace kubicle::vmm {

Result<SeccompMode> ParseSeccompMode(const std::string& text, const std::string& flag) {
  if (text == "enforce") return SeccompMode::kEnforce;
  if (text == "log") return SeccompMode::kLog;
  if (text == "off") return SeccompMode::kOff;
  return Status::InvalidArgument(flag + ": '" + text + "' is not enforce, log or off");
}

const char* SeccompModeName(SeccompMode mode) {
  switch (mode) {
    case SeccompMode::kEnforce: return "enforce";
    case SeccompMode::kLog: return "log";
    case SeccompMode::kOff: return "off";
  }
  return "enforce";
}

}  // namespace kubicle::vmm
