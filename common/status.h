// Status and Result<T>: how core Kubicle code reports failure.
//
// A Status carries a code, a message and (optionally) the errno that caused
// it. Result<T> is a value or a non-OK Status. Both are [[nodiscard]] so a
// dropped error is a compile error. Code that calls throwing libraries catches
// at its boundary and converts to Status.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kubicle {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller (or the guest) sent something malformed
  kNotFound,          // a named thing does not exist
  kAlreadyExists,
  kOutOfRange,        // an address or size outside the allowed range
  kResourceExhausted, // out of memory, capacity, fds, queue space
  kFailedPrecondition,// the object is not in a state that allows this
  kUnavailable,       // transient; retrying may succeed
  kDataLoss,          // corrupt or truncated persisted data
  kDeadlineExceeded,
  kPermissionDenied,
  kUnimplemented,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int err = 0)
      : code_(code), message_(std::move(message)), errno_(err) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  // From errno: "what: strerror(err)". Code is derived from err.
  static Status FromErrno(std::string what, int err = errno);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  int error_number() const { return errno_; }
  // "InvalidArgument: message" or "OK".
  std::string ToString() const;

  // Prefixes context: Status s = f(); return s.WithContext("loading kernel");
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  int errno_ = 0;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kubicle

#define KUBICLE_CONCAT_INNER(a, b) a##b
#define KUBICLE_CONCAT(a, b) KUBICLE_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): returns the Status if it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::kubicle::Status _st = (expr);                  \
    if (!_st.ok()) return _st;                       \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): lhs = value of Result expr, or return its Status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(KUBICLE_CONCAT(_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
