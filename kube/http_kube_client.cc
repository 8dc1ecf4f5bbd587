#include "kube/http_kube_client.h"

#include <future>

#include <boost/asio/ssl.hpp>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include "common/file_io.h"
#include "common/log.h"
#include "common/query_escape.h"

namespace kubicle::kube {

namespace http = web::http;
namespace client = web::http::client;

namespace {

void AddParam(std::string* q, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  *q += q->empty() ? '?' : '&';
  *q += std::string(key) + "=" + QueryEscape(value);
}

Json ParseBody(const std::string& text) {
  if (text.empty()) return nullptr;
  Json j = Json::parse(text, nullptr, false);
  return j.is_discarded() ? Json(nullptr) : j;
}

std::string_view PatchContentType(PatchType t) {
  switch (t) {
    case PatchType::kMerge: return "application/merge-patch+json";
    case PatchType::kStrategicMerge: return "application/strategic-merge-patch+json";
    case PatchType::kApply: return "application/apply-patch+yaml";
  }
  return "";
}

}  // namespace

HttpKubeClient::HttpKubeClient(RestConfig config) : config_(std::move(config)) {}
HttpKubeClient::~HttpKubeClient() = default;

client::http_client_config HttpKubeClient::MakeConfig(int timeout_seconds) const {
  client::http_client_config cfg;
  cfg.set_timeout(std::chrono::seconds(timeout_seconds));
  cfg.set_validate_certificates(!config_.insecure_skip_verify);
  RestConfig tls = config_;
  cfg.set_ssl_context_callback([tls](boost::asio::ssl::context& ctx) {
    // Throws are caught by cpprestsdk and surface as a failed request.
    if (!tls.ca_pem.empty()) {
      ctx.add_certificate_authority(boost::asio::buffer(tls.ca_pem));
    }
    if (!tls.client_cert_pem.empty()) {
      ctx.use_certificate_chain(boost::asio::buffer(tls.client_cert_pem));
      ctx.use_private_key(boost::asio::buffer(tls.client_key_pem),
                          boost::asio::ssl::context::pem);
    }
  });
  return cfg;
}

Result<std::unique_ptr<HttpKubeClient>> HttpKubeClient::Create(const RestConfig& config) {
  if (config.server.empty()) return Status::InvalidArgument("no apiserver address");
  std::unique_ptr<HttpKubeClient> c(new HttpKubeClient(config));
  try {
    c->client_ = std::make_shared<client::http_client>(config.server, c->MakeConfig(30));
  } catch (const std::exception& e) {
    return Status::InvalidArgument("bad apiserver address " + config.server + ": " + e.what());
  }
  c->token_ = config.bearer_token;
  c->token_read_ = std::chrono::steady_clock::now();
  return c;
}

std::shared_ptr<client::http_client> HttpKubeClient::Client() {
  std::lock_guard lock(client_mu_);
  return client_;
}

void HttpKubeClient::ResetClient(const std::shared_ptr<client::http_client>& failed) {
  std::lock_guard lock(client_mu_);
  if (client_ != failed) return;  // another thread already replaced it
  try {
    client_ = std::make_shared<client::http_client>(config_.server, MakeConfig(30));
  } catch (const std::exception&) {
    // Keep the old one; the next failure tries again.
  }
}

std::string HttpKubeClient::Token() {
  std::lock_guard lock(token_mu_);
  if (!config_.bearer_token_file.empty() &&
      std::chrono::steady_clock::now() - token_read_ > std::chrono::minutes(1)) {
    auto t = ReadFileToString(config_.bearer_token_file);
    if (t.ok()) token_ = *t;
    token_read_ = std::chrono::steady_clock::now();
  }
  while (!token_.empty() && (token_.back() == '\n' || token_.back() == '\r')) token_.pop_back();
  return token_;
}

Result<Json> HttpKubeClient::Do(const std::string& method, const std::string& path_and_query,
                                const Json* body, const std::string& content_type) {
  // A pooled keep-alive connection the server closed (e.g. an apiserver
  // restart) fails on first use without reaching the server: retry once on a
  // fresh connection. A retried POST that did land reports AlreadyExists.
  std::string last_error;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<client::http_client> http_client = Client();
    try {
      http::http_request req(method);
      req.set_request_uri(path_and_query);
      req.headers().add("Accept", "application/json");
      std::string token = Token();
      if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
      if (body != nullptr) req.set_body(body->dump(), content_type);
      http::http_response resp = http_client->request(req).get();
      std::string text = resp.extract_utf8string(true).get();
      int code = resp.status_code();
      Json parsed = ParseBody(text);
      if (code >= 200 && code < 300) return parsed;
      return StatusFromHttp(code, parsed);
    } catch (const std::exception& e) {
      last_error = e.what();
      ResetClient(http_client);
    }
  }
  return Status::Unavailable(method + " " + path_and_query + ": " + last_error);
}

Result<Json> HttpKubeClient::Get(const Resource& r, std::string_view ns, std::string_view name,
                                 std::string_view subresource) {
  return Do("GET", r.Path(ns, name, subresource), nullptr, "");
}

Result<Json> HttpKubeClient::List(const Resource& r, std::string_view ns,
                                  const ListOptions& opts) {
  std::string q;
  AddParam(&q, "labelSelector", opts.label_selector);
  AddParam(&q, "fieldSelector", opts.field_selector);
  AddParam(&q, "resourceVersion", opts.resource_version);
  if (opts.limit > 0) AddParam(&q, "limit", std::to_string(opts.limit));
  AddParam(&q, "continue", opts.continue_token);
  return Do("GET", r.Path(ns) + q, nullptr, "");
}

Result<Json> HttpKubeClient::Create(const Resource& r, std::string_view ns, const Json& object) {
  Json obj = object;
  obj["apiVersion"] = r.ApiVersion();
  obj["kind"] = r.kind;
  return Do("POST", r.Path(ns), &obj, "application/json");
}

Result<Json> HttpKubeClient::Update(const Resource& r, std::string_view ns, const Json& object,
                                    std::string_view subresource) {
  Json obj = object;
  obj["apiVersion"] = r.ApiVersion();
  obj["kind"] = r.kind;
  std::string name = object["metadata"].value("name", "");
  return Do("PUT", r.Path(ns, name, subresource), &obj, "application/json");
}

Result<Json> HttpKubeClient::Patch(const Resource& r, std::string_view ns, std::string_view name,
                                   PatchType type, const Json& patch,
                                   std::string_view subresource, const PatchOptions& opts) {
  std::string q;
  Json body = patch;
  if (type == PatchType::kApply) {
    body["apiVersion"] = r.ApiVersion();
    body["kind"] = r.kind;
    AddParam(&q, "fieldManager", opts.field_manager);
    if (opts.force) AddParam(&q, "force", "true");
  }
  return Do("PATCH", r.Path(ns, name, subresource) + q, &body,
            std::string(PatchContentType(type)));
}

Status HttpKubeClient::Delete(const Resource& r, std::string_view ns, std::string_view name,
                              const DeleteOptions& opts) {
  Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!opts.propagation_policy.empty()) body["propagationPolicy"] = opts.propagation_policy;
  if (!opts.precondition_uid.empty()) body["preconditions"]["uid"] = opts.precondition_uid;
  if (!opts.precondition_resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = opts.precondition_resource_version;
  }
  return Do("DELETE", r.Path(ns, name), &body, "application/json").status();
}

Status HttpKubeClient::DeleteCollection(const Resource& r, std::string_view ns,
                                        std::string_view label_selector) {
  std::string q;
  AddParam(&q, "labelSelector", label_selector);
  return Do("DELETE", r.Path(ns) + q, nullptr, "").status();
}

}  // namespace kubicle::kube
