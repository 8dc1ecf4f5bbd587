// RunTool: a host tool (mke2fs, ...) run to its end, for the node's
// libraries that make disk images (noderuntime/state's workspaces,
// noderuntime/oci's root filesystems).
//
// Contracts:
// - `args[0]` is searched in PATH; stdin and stdout are /dev/null, stderr
//   goes to `log` (created 0600 or truncated), no other descriptor of the
//   caller is inherited. The call blocks until the tool exits.
// - Exit status 0: OK. Any other end (an exit code, a signal): Internal
//   "<args[0]> failed: <the last 512 bytes of its stderr>". A tool that
//   cannot be started: the errno of posix_spawnp ("starting <args[0]>").
// - `log` is removed before RunTool returns, whatever the outcome.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle {

[[nodiscard]] Status RunTool(const std::vector<std::string>& args, const std::string& log);

}  // namespace kubicle
