#include "noderuntime/client/node_client.h"

#include <boost/asio/ssl.hpp>
#include <cpprest/http_client.h>

#include <algorithm>
#include <fstream>
#include <optional>

#include "noderuntime/api/codec.h"

namespace kubicle::noderuntime::client {

namespace http = web::http;

namespace {

StatusCode CodeForHttp(int code) {
  switch (code) {
    case 400: case 413: return StatusCode::kInvalidArgument;
    case 401: case 403: return StatusCode::kPermissionDenied;
    case 404: return StatusCode::kNotFound;
    case 405: return StatusCode::kUnimplemented;
    case 409: return StatusCode::kFailedPrecondition;
    case 429: return StatusCode::kResourceExhausted;
    case 503: return StatusCode::kUnavailable;
    case 504: return StatusCode::kDeadlineExceeded;
    default: return StatusCode::kInternal;
  }
}

http::http_request MakeRequest(const std::string& method, const std::string& path,
                               const std::string& token) {
  http::http_request req(method);
  req.set_request_uri(path);
  req.headers().add(http::header_names::authorization, "Bearer " + token);
  return req;
}

// The lines of an NDJSON body, read in large pieces and split here:
// cpprestsdk's read_line goes a byte at a time, which capped a stream at
// ~12 MiB/s. A line is bounded, so a peer that never sends a newline costs
// at most kMaxLine bytes.
class LineReader {
 public:
  static constexpr size_t kMaxLine = 16u << 20;
  explicit LineReader(concurrency::streams::istream body) : body_(std::move(body)) {}

  // The next line without its newline; nullopt once the body has ended.
  Result<std::optional<std::string>> Next() {
    while (true) {
      size_t nl = buf_.find('\n', scanned_);
      if (nl != std::string::npos) return Take(nl, nl + 1);
      scanned_ = buf_.size();
      if (eof_) {
        if (start_ == buf_.size()) return std::optional<std::string>();
        return Take(buf_.size(), buf_.size());  // a last line without its newline
      }
      if (buf_.size() - start_ > kMaxLine) {
        return Status::DataLoss("a stream line exceeds " + std::to_string(kMaxLine) + " bytes");
      }
      Fill();
    }
  }

 private:
  std::optional<std::string> Take(size_t end, size_t next) {
    std::string line = buf_.substr(start_, end - start_);
    start_ = scanned_ = next;
    return line;
  }
  // getn(n) waits for n bytes: ask for what is there, or for one byte,
  // which waits for the next to arrive.
  void Fill() {
    buf_.erase(0, start_);  // once per read, not once per line
    scanned_ -= start_;
    start_ = 0;
    const size_t avail = body_.streambuf().in_avail();
    const size_t want = avail > 0 ? std::min<size_t>(avail, 256 * 1024) : 1;
    const size_t old = buf_.size();
    buf_.resize(old + want);
    const size_t n = body_.streambuf().getn(reinterpret_cast<uint8_t*>(buf_.data()) + old, want).get();
    buf_.resize(old + n);
    if (n == 0) eof_ = true;
  }

  concurrency::streams::istream body_;
  std::string buf_;
  size_t start_ = 0;    // where the next line begins
  size_t scanned_ = 0;  // buf_[start_, scanned_) holds no newline
  bool eof_ = false;
};

std::string BodyString(http::http_response& resp) {
  auto v = resp.extract_vector().get();
  return std::string(v.begin(), v.end());
}

}  // namespace

Status StatusFromHttp(int code, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  std::string err = "Error", msg = body;
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    err = j["error"].value("code", err);
    msg = j["error"].value("message", msg);
  }
  return Status(CodeForHttp(code), "HTTP " + std::to_string(code) + " " + err + ": " + msg);
}

NodeClient::NodeClient(std::string url, std::string token)
    : url_(std::move(url)), token_(std::move(token)) {}
NodeClient::~NodeClient() = default;

Result<std::unique_ptr<NodeClient>> NodeClient::Create(const std::string& url,
                                                       const std::string& token,
                                                       const std::string& ca_file) {
  if (!ca_file.empty()) {
    std::ifstream probe(ca_file);
    if (!probe) return Status::InvalidArgument("CA file " + ca_file + " cannot be read");
  }
  try {
    std::unique_ptr<NodeClient> c(new NodeClient(url, token));
    http::client::http_client_config config;
    config.set_timeout(std::chrono::seconds(600));
    if (!ca_file.empty()) {
      config.set_ssl_context_callback([ca_file](boost::asio::ssl::context& ctx) {
        boost::system::error_code ec;
        ctx.load_verify_file(ca_file, ec);  // a bad file: the handshake fails, as it should
      });
    }
    c->http_ = std::make_unique<http::client::http_client>(url, config);
    return c;
  } catch (const std::exception& e) {
    return Status::InvalidArgument("server URL " + url + ": " + e.what());
  }
}

Result<json> NodeClient::Call(const std::string& method, const std::string& path,
                              const json& body) {
  try {
    auto req = MakeRequest(method, path, token_);
    if (!body.is_null()) req.set_body(body.dump(), "application/json");
    auto resp = http_->request(req).get();
    std::string text = BodyString(resp);
    if (resp.status_code() >= 300) return StatusFromHttp(resp.status_code(), text);
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return Status::DataLoss("the server's reply is not JSON: " + text);
    return j;
  } catch (const std::exception& e) {
    return Status::Unavailable(method + " " + url_ + path + ": " + e.what());
  }
}

namespace {
std::string FilesPath(FilesOwner owner, const std::string& id, const std::string& path) {
  return std::string(owner == FilesOwner::kWorkspace ? "/v1/workspaces/" : "/v1/sandboxes/") + id +
         "/files?path=" + QueryEscape(path, kQueryKeep);
}
}  // namespace

Result<std::string> NodeClient::GetFile(const std::string& id, const std::string& path, FilesOwner owner) {
  try {
    const std::string target = FilesPath(owner, id, path);
    auto req = MakeRequest("GET", target, token_);
    auto resp = http_->request(req).get();
    std::string text = BodyString(resp);
    if (resp.status_code() >= 300) return StatusFromHttp(resp.status_code(), text);
    return text;
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("GET file: ") + e.what());
  }
}

Status NodeClient::PutFile(const std::string& id, const std::string& path,
                           const std::string& data, uint32_t mode, FilesOwner owner) {
  try {
    char m[8];
    std::snprintf(m, sizeof m, "%04o", mode & 07777);
    const std::string target = FilesPath(owner, id, path) + "&mode=" + m;
    auto req = MakeRequest("PUT", target, token_);
    req.set_body(std::vector<unsigned char>(data.begin(), data.end()));
    req.headers().set_content_type("application/octet-stream");
    auto resp = http_->request(req).get();
    std::string text = BodyString(resp);
    if (resp.status_code() >= 300) return StatusFromHttp(resp.status_code(), text);
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("PUT file: ") + e.what());
  }
}

Result<json> NodeClient::ExecStream(
    const std::string& id, const json& request,
    const std::function<void(const std::string&, const std::string&)>& on_output) {
  try {
    auto req = MakeRequest("POST", "/v1/sandboxes/" + id + "/exec?stream=true", token_);
    req.set_body(request.dump(), "application/json");
    auto resp = http_->request(req).get();
    if (resp.status_code() >= 300) return StatusFromHttp(resp.status_code(), BodyString(resp));
    LineReader lines(resp.body());
    while (true) {
      auto next = lines.Next();
      if (!next.ok()) return next.status();
      if (!*next) break;
      const std::string& text = **next;
      if (text.empty()) continue;
      json j = json::parse(text, nullptr, false);
      if (!j.is_object()) return Status::DataLoss("bad stream line: " + text.substr(0, 200));
      if (j.contains("exit")) return j["exit"];
      if (j.contains("error")) {
        return Status(StatusCode::kInternal, "exec failed: " + j["error"].value("code", "") +
                                                 ": " + j["error"].value("message", ""));
      }
      auto data = api::Base64Decode(j.value("data", ""));
      if (!data.ok()) return Status::DataLoss("bad base64 in stream line");
      on_output(j.value("stream", "stdout"), std::string(data->begin(), data->end()));
    }
    return Status::DataLoss("the exec stream ended without an exit line");
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("exec stream: ") + e.what());
  }
}

Result<json> ParseLabelArgs(const std::vector<std::string>& kvs) {
  json out = json::object();
  for (const std::string& kv : kvs) {
    size_t start = 0;
    while (start <= kv.size()) {
      size_t comma = kv.find(',', start);
      std::string one = kv.substr(start, comma == std::string::npos ? std::string::npos
                                                                    : comma - start);
      size_t eq = one.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Status::InvalidArgument("label \"" + one + "\" is not KEY=VALUE");
      }
      out[one.substr(0, eq)] = one.substr(eq + 1);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace kubicle::noderuntime::client
