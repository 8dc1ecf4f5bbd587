#include "common/status.h"

#include <cstring>

namespace kubicle {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::FromErrno(std::string what, int err) {
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case ENOENT: code = StatusCode::kNotFound; break;
    case EEXIST: code = StatusCode::kAlreadyExists; break;
    case EINVAL: code = StatusCode::kInvalidArgument; break;
    case ENOMEM: case ENOSPC: case EMFILE: case ENFILE: code = StatusCode::kResourceExhausted; break;
    case EACCES: case EPERM: code = StatusCode::kPermissionDenied; break;
    case EAGAIN: case EINTR: case ECONNREFUSED: case ECONNRESET: case EPIPE:
      code = StatusCode::kUnavailable; break;
    case ETIMEDOUT: code = StatusCode::kDeadlineExceeded; break;
    default: break;
  }
  return Status(code, what + ": " + std::strerror(err), err);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_, errno_);
}

}  // namespace kubicle
