#include "noderuntime/server/http_call.h"

#include "noderuntime/api/codec.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

int HttpCodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

Response JsonResponse(int code, const nlohmann::json& body) {
  Response r;
  r.code = code;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

Response ErrorResponse(int code, std::string_view err, const std::string& message) {
  return JsonResponse(code, {{"error", {{"code", std::string(err)}, {"message", message}}}});
}

std::optional<std::string> Call::Query(const std::string& key) const {
  auto it = query_.find(key);
  if (it == query_.end()) return std::nullopt;
  return it->second;
}

bool Call::OnlyQuery(std::initializer_list<const char*> known) {
  for (const auto& [k, _] : query_) {
    bool ok = false;
    for (const char* name : known) ok = ok || k == name;
    if (!ok) {
      Error(400, "InvalidArgument", "unknown query parameter \"" + k + "\"");
      return false;
    }
  }
  return true;
}

void Call::Send(Response response) {
  code_ = response.code;
  if (observer_) {
    observer_(code_);
    observer_ = nullptr;
  }
  responder_->Send(std::move(response));
}

void Call::Upgrade(UniqueFd upstream) {
  code_ = 101;
  if (observer_) {
    observer_(code_);
    observer_ = nullptr;
  }
  responder_->SwitchProtocols(Response{}, std::move(upstream), std::move(stream_hold_));
}

void Call::StartStream(int code, const std::string& content_type) {
  code_ = code;
  streaming_ = true;
  responder_->StartStream(code, content_type);
}

bool Call::Write(std::string data) { return responder_->Write(std::move(data)); }

void Call::AbortStream() {
  if (!streaming_) return;
  streaming_ = false;
  responder_->Abort();
}

void Call::EndStream() {
  if (!streaming_) return;
  streaming_ = false;
  responder_->EndStream();
}

void Call::Json(int code, const nlohmann::json& body) { Send(JsonResponse(code, body)); }

void Call::Error(int code, std::string_view err, const std::string& message) {
  Send(ErrorResponse(code, err, message));
}

void Call::Fail(const Status& status) {
  Error(HttpCodeFor(status.code()), StatusCodeName(status.code()), status.message());
}

void Call::Raw(int code, const std::vector<unsigned char>& body, const std::string& content_type) {
  Response r;
  r.code = code;
  r.content_type = content_type;
  r.body.assign(body.begin(), body.end());
  Send(std::move(r));
}

std::optional<std::string> Call::Body(size_t limit) {
  if (body_.size() > limit) {
    Error(413, "PayloadTooLarge",
          "request body exceeds the limit of " + std::to_string(limit) + " bytes");
    return std::nullopt;
  }
  return std::move(body_);
}

std::optional<nlohmann::json> Call::JsonBody(size_t limit) {
  auto body = Body(limit);
  if (!body) return std::nullopt;
  auto parsed = ParseJsonObject(*body);
  if (!parsed.ok()) {
    Fail(parsed.status());
    return std::nullopt;
  }
  return std::move(*parsed);
}

}  // namespace kubicle::noderuntime::server
