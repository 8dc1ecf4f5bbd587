// The node's admin bearer token, kept in a file the operator (or a human)
// can read: created with mode 0600 and 32 random bytes (hex) when absent.
#pragma once

#include <string>

#include "common/status.h"

namespace kubicle::noderuntime::daemon {

// Reads the token (surrounding whitespace trimmed) or creates the file.
// InvalidArgument if the file exists but holds no token or is readable by
// group or others (a leaked admin token opens every sandbox).
Result<std::string> LoadOrCreateAdminToken(const std::string& path);

}  // namespace kubicle::noderuntime::daemon
