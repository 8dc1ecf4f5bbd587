// The fakes' RAM file table: a sandbox's guest files and a workspace's
// disk are both a map of absolute path -> (bytes, mode), with directories
// implied by the files under them ("/" always exists). One copy of the
// stat, list and remove rules, so the two fakes answer alike, as the
// guest agent and the workspace helper do.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "guest/protocol/messages.h"

namespace kubicle::noderuntime::server::testing {

using RamFiles = std::map<std::string, std::pair<guest::protocol::Bytes, uint32_t>>;

// NotFound for a path that is neither a file nor a directory.
Result<guest::protocol::StatReply> StatRamFile(const RamFiles& files, const std::string& path);
// FailedPrecondition for a file, NotFound for no such directory.
Result<std::vector<guest::protocol::DirEntry>> ListRamDir(const RamFiles& files,
                                                          const std::string& path);
// A file, or a directory with everything under it when `recursive`
// (FailedPrecondition otherwise); NotFound when nothing is there.
Status RemoveRamFile(RamFiles* files, const std::string& path, bool recursive);

}  // namespace kubicle::noderuntime::server::testing
