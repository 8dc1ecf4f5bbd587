// Journal replay of a workspace image whose VM stopped without unmounting
// it (a VMM crash, a SIGKILL): until the journal is replayed the image's
// metadata may be only in the journal, so kubicle-ext4 refuses it. The
// host replays it with e2fsck -E journal_only, never with its own kernel:
// e2fsck runs as a confined child with the image as its only open file
// (fd 3, named /proc/self/fd/3), stdin /dev/null, an empty environment,
// its own network, IPC and UTS namespaces (when the node may make them),
// no_new_privs, no core, rlimits on memory, CPU, file size (the image
// never grows) and open files, and a wall deadline after which it is
// killed. What it prints is read up to a bound and only ever logged.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace kubicle::noderuntime::ext4 {

// Whether the superblock says the journal needs replay (ext4's RECOVER
// incompat flag): one fixed read of 1 KiB at offset 1024, so a hostile
// image can only make the answer true or false. An image without the ext
// magic is DataLoss.
Result<bool> NeedsJournalReplay(const std::string& image);

struct JournalReplayOptions {
  std::string e2fsck = "e2fsck";               // a path, or a name found on PATH
  std::chrono::milliseconds deadline{60000};   // wall time
  uint64_t mem_mib = 512;                      // RLIMIT_AS
  uint64_t cpu_seconds = 60;                   // RLIMIT_CPU
};

// Replays the journal in place and checks the flag is gone. Ok when there
// was nothing to replay. DeadlineExceeded past the deadline; DataLoss when
// e2fsck cannot replay it (its output's tail in the message).
Status ReplayJournal(const std::string& image, const JournalReplayOptions& options);

}  // namespace kubicle::noderuntime::ext4
