#include "kube/kube_client.h"

namespace kubicle::kube {
namespace {
constexpr std::string_view kConflictTag = "Conflict: ";
constexpr std::string_view kGoneTag = "Gone: ";
}  // namespace

std::string_view WatchEventTypeName(WatchEventType t) {
  switch (t) {
    case WatchEventType::kAdded: return "ADDED";
    case WatchEventType::kModified: return "MODIFIED";
    case WatchEventType::kDeleted: return "DELETED";
    case WatchEventType::kBookmark: return "BOOKMARK";
    case WatchEventType::kError: return "ERROR";
  }
  return "?";
}

Result<WatchEventType> ParseEventType(const std::string& t) {
  if (t == "ADDED") return WatchEventType::kAdded;
  if (t == "MODIFIED") return WatchEventType::kModified;
  if (t == "DELETED") return WatchEventType::kDeleted;
  if (t == "BOOKMARK") return WatchEventType::kBookmark;
  if (t == "ERROR") return WatchEventType::kError;
  return Status::InvalidArgument("unknown watch event type " + t);
}

bool IsConflict(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition && s.message().starts_with(kConflictTag);
}

bool IsGone(const Status& s) {
  return s.code() == StatusCode::kOutOfRange && s.message().starts_with(kGoneTag);
}

Status StatusFromHttp(int http_code, const Json& body) {
  std::string message = "HTTP " + std::to_string(http_code);
  std::string reason;
  if (body.is_object()) {
    message = body.value("message", message);
    reason = body.value("reason", "");
  }
  switch (http_code) {
    case 404: return Status::NotFound(message);
    case 409:
      if (reason == "AlreadyExists") return Status::AlreadyExists(message);
      return Status::FailedPrecondition(std::string(kConflictTag) + message);
    case 410: return Status::OutOfRange(std::string(kGoneTag) + message);
    case 400:
    case 422: return Status::InvalidArgument(message);
    case 401:
    case 403: return Status::PermissionDenied(message);
    case 504: return Status::DeadlineExceeded(message);
    default:
      if (http_code == 429 || http_code >= 500) return Status::Unavailable(message);
      return Status::Internal("unexpected HTTP " + std::to_string(http_code) + ": " + message);
  }
}

Status RetryOnConflict(int attempts, const std::function<Status()>& fn) {
  Status s;
  for (int i = 0; i < attempts; ++i) {
    s = fn();
    if (!IsConflict(s)) return s;
  }
  return s;
}

}  // namespace kubicle::kube
