// Small socket helpers for the agent client: deadline-aware waits, sends and
// Unix-socket connects on non-blocking fds.
#pragma once

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "guest/client/agent_client.h"

namespace kubicle::guest::client {

// Waits until fd has `events` (POLLIN/POLLOUT) or the deadline passes
// (DeadlineExceeded). POLLHUP/POLLERR count as ready so the caller's
// read/write reports the actual error.
Status WaitFd(int fd, short events, Deadline deadline);
// Writes all bytes; *written (optional) reports progress so a caller can tell
// a clean timeout (nothing written) from a half-written frame.
Status SendAll(int fd, ByteSpan bytes, Deadline deadline, size_t* written = nullptr);
// Non-blocking, close-on-exec stream socket connected to `path`.
Result<UniqueFd> ConnectUnixSocket(const std::string& path, Deadline deadline);

}  // namespace kubicle::guest::client
