// KubeClient over HTTPS to a real apiserver, on cpprestsdk. TLS trusts the
// configured CA (OpenSSL via cpprestsdk's ssl_context_callback), presents the
// client certificate when there is one, and sends the bearer token (re-read
// from its file every minute, since bound service-account tokens rotate).
// cpprestsdk reports failures by throwing; every throw is caught here and
// becomes a Status (see kube_client.h for the mapping). Thread-safe.
#pragma once

#include <memory>
#include <mutex>

#include "kube/kube_client.h"
#include "kube/kubeconfig.h"

namespace web::http::client {
class http_client;
class http_client_config;
}  // namespace web::http::client

namespace kubicle::kube {

class HttpKubeClient final : public KubeClient {
 public:
  static Result<std::unique_ptr<HttpKubeClient>> Create(const RestConfig& config);
  ~HttpKubeClient() override;

  Result<Json> Get(const Resource& r, std::string_view ns, std::string_view name,
                   std::string_view subresource = {}) override;
  Result<Json> List(const Resource& r, std::string_view ns, const ListOptions& opts) override;
  Result<Json> Create(const Resource& r, std::string_view ns, const Json& object) override;
  Result<Json> Update(const Resource& r, std::string_view ns, const Json& object,
                      std::string_view subresource = {}) override;
  Result<Json> Patch(const Resource& r, std::string_view ns, std::string_view name,
                     PatchType type, const Json& patch, std::string_view subresource = {},
                     const PatchOptions& opts = {}) override;
  Status Delete(const Resource& r, std::string_view ns, std::string_view name,
                const DeleteOptions& opts = {}) override;
  Status DeleteCollection(const Resource& r, std::string_view ns,
                          std::string_view label_selector) override;
  Status Watch(const Resource& r, std::string_view ns, const WatchOptions& opts,
               const WatchHandler& handler, const CancelToken& cancel) override;

 private:
  explicit HttpKubeClient(RestConfig config);
  web::http::client::http_client_config MakeConfig(int timeout_seconds) const;
  std::string Token();
  // Sends one request and parses the JSON reply (null for an empty body).
  Result<Json> Do(const std::string& method, const std::string& path_and_query,
                  const Json* body, const std::string& content_type);

  RestConfig config_;
  // Replaced after a transport error so stale pooled connections are dropped.
  std::shared_ptr<web::http::client::http_client> Client();
  void ResetClient(const std::shared_ptr<web::http::client::http_client>& failed);
  std::mutex client_mu_;
  std::shared_ptr<web::http::client::http_client> client_;
  std::mutex token_mu_;
  std::string token_;
  std::chrono::steady_clock::time_point token_read_;
};

}  // namespace kubicle::kube
