#include "noderuntime/cli/node_client.h"

#include <boost/asio/ssl.hpp>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <fstream>

#include "noderuntime/api/codec.h"

namespace kubicle::noderuntime::cli {

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

Result<std::string> NodeClient::GetFile(const std::string& id, const std::string& path) {
  try {
    auto req = MakeRequest("GET", "/v1/sandboxes/" + id + "/files?path=" + QueryEscape(path),
                           token_);
    auto resp = http_->request(req).get();
    std::string text = BodyString(resp);
    if (resp.status_code() >= 300) return StatusFromHttp(resp.status_code(), text);
    return text;
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("GET file: ") + e.what());
  }
}

Status NodeClient::PutFile(const std::string& id, const std::string& path,
                           const std::string& data, uint32_t mode) {
  try {
    char m[8];
    std::snprintf(m, sizeof m, "%04o", mode & 07777);
    auto req = MakeRequest(
        "PUT", "/v1/sandboxes/" + id + "/files?path=" + QueryEscape(path) + "&mode=" + m, token_);
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
    auto body = resp.body();
    while (true) {
      concurrency::streams::container_buffer<std::string> line;
      size_t n = body.read_line(line).get();
      const std::string& text = line.collection();
      if (n == 0 && text.empty() && body.is_eof()) break;
      if (text.empty()) continue;
      json j = json::parse(text, nullptr, false);
      if (!j.is_object()) return Status::DataLoss("bad stream line: " + text);
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

std::string QueryEscape(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace kubicle::noderuntime::cli
