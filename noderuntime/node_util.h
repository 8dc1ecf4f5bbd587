// Small helpers the node runtime shares: input validation (ids, labels),
// randomness and digests for tokens and snapshots, and crash-safe files for
// the state directory.
//
// Contracts: AtomicWriteFile either leaves the old content or the complete
// new content at `path`, even across a power loss (tmp file + fsync + rename
// + fsync of the directory). Every fd opened here is O_CLOEXEC, so VMM
// processes spawned concurrently never inherit one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_io.h"  // ReadFileToString, TailOfFile, for the runtime's callers
#include "common/sha256.h"   // Sha256Hex, ConstantTimeEqual, likewise
#include "common/status.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime {

// A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
Status ValidateId(std::string_view id, std::string_view what);
// Kubernetes label keys ([dns-subdomain-prefix/]name) and values.
Status ValidateLabels(const Labels& labels);
// An exec's environment: the sandbox's variables, then the exec's own
// "KEY=VALUE" entries, which win on the same name.
std::vector<std::string> MergedEnv(const Env& sandbox_env, const std::vector<std::string>& exec_env);

// An exec the node runs for a caller within `timeout`: the guest is told to
// kill the command at `timeout` (unless the request asks for sooner) and the
// node waits kExecAnswerGrace longer for the answer, which it returns. So a
// command that runs out of time is answered by the guest (timed_out, with
// its output so far), not by the node giving up first with
// DeadlineExceeded while the guest's answer is dropped on arrival; and no
// command outlives the node's wait.
inline constexpr std::chrono::seconds kExecAnswerGrace{5};
guest::client::Deadline BoundExec(guest::protocol::ExecStartRequest* request,
                                  std::chrono::milliseconds timeout);

guest::protocol::Bytes RandomBytes(size_t n);
std::string RandomHex(size_t bytes);
// SHA-256 over the concatenated contents of `paths`, as "sha256:<hex>".
Result<std::string> Sha256Files(const std::vector<std::string>& paths);

Status AtomicWriteFile(const std::string& path, std::string_view content);
using ::kubicle::TailOfFile;  // common/file_io.h
Status MakeDirs(const std::string& path);
// MakeDirs, then exactly `mode` on the last directory whatever the umask
// (the sock/ directory: 0700, so nobody else can reach a VM's sockets).
Status MakePrivateDir(const std::string& path, mode_t mode = 0700);
// Exactly `mode` on `path` whatever the umask it was created under (a
// socket a VMM bound: 0600). Refuses a symlink rather than follow it.
Status SetExactMode(const std::string& path, mode_t mode);
Status RemoveTree(const std::string& path);
// The names of the directories in `dir` (none when it cannot be read).
std::vector<std::string> SubDirs(const std::string& dir);

}  // namespace kubicle::noderuntime
