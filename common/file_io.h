// File reads and writes that every layer needs and that are easy to get
// subtly wrong: EINTR, short transfers, and unbounded reads.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubicle {

// preadv / pwritev of all of `iov` at `offset`, resuming after short
// transfers and EINTR, IOV_MAX vectors at a time. A read that reaches the end
// of the file first fails with DataLoss(`short_message`).
Status TransferAll(int fd, uint64_t offset, std::span<const iovec> iov, bool write,
                   std::string_view short_message);
// All `len` bytes of `data` written at `offset` (TransferAll of one vector):
// a new file's whole content, a run of pages.
Status WriteAllAt(int fd, uint64_t offset, const void* data, size_t len);

// The whole file, refused (OutOfRange) beyond `max_bytes`, checked before
// and while reading: a kubeconfig, a token, a record, never a disk image.
inline constexpr size_t kDefaultMaxFileBytes = 16u << 20;
Result<std::string> ReadFileToString(const std::string& path,
                                     size_t max_bytes = kDefaultMaxFileBytes);

// The last `max_bytes` of a file, trailing newlines and spaces trimmed (""
// when it cannot be read): a log's tail for an error message.
std::string TailOfFile(const std::string& path, size_t max_bytes);

}  // namespace kubicle
