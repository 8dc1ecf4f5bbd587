#include "noderuntime/api/http_call.h"


#include "noderuntime/api/codec.h"

namespace kubicle::noderuntime::api {

namespace http = web::http;

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

void Call::Send(http::http_response response, bool streamed) {
  code_ = response.status_code();
  if (observer_ && !streamed) {
    observer_(code_);
    observer_ = nullptr;
  }
  try {
    // Observe the task: an unobserved exceptional pplx task raises SIGTRAP.
    req_.reply(response).then([](pplx::task<void> t) {
      try {
        t.get();
      } catch (const std::exception&) {
      }
    });
  } catch (const std::exception&) {
    // The connection is gone; nothing to answer.
  }
}

void Call::Json(int code, const nlohmann::json& body) {
  http::http_response resp(static_cast<http::status_code>(code));
  resp.set_body(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                "application/json");
  Send(std::move(resp));
}

void Call::Error(int code, std::string_view err, const std::string& message) {
  Json(code, {{"error", {{"code", std::string(err)}, {"message", message}}}});
}

void Call::Fail(const Status& status) {
  Error(HttpCodeFor(status.code()), StatusCodeName(status.code()), status.message());
}

void Call::Raw(int code, std::vector<unsigned char> body, const std::string& content_type) {
  http::http_response resp(static_cast<http::status_code>(code));
  resp.set_body(std::move(body));
  resp.headers().set_content_type(content_type);
  Send(std::move(resp));
}

std::optional<std::string> Call::Body(size_t limit) {
  auto too_large = [&] {
    Error(413, "PayloadTooLarge",
          "request body exceeds the limit of " + std::to_string(limit) + " bytes");
    return std::nullopt;
  };
  uint64_t declared = req_.headers().content_length();
  if (declared > limit) return too_large();
  try {
    // The listener has buffered the body by now; Content-Length (checked
    // above) is what stops a declared oversized upload before it is read.
    std::vector<unsigned char> v = req_.extract_vector().get();
    if (v.size() > limit) return too_large();
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    Error(400, "BadRequest", std::string("could not read the request body: ") + e.what());
    return std::nullopt;
  }
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

}  // namespace kubicle::noderuntime::api
