#include "operator/metrics_server.h"

#include <cpprest/http_listener.h>

namespace kubicle::op {

namespace http = web::http;
using web::http::experimental::listener::http_listener;

MetricsServer::MetricsServer(metrics::Registry* registry, std::function<bool()> healthy)
    : registry_(registry), healthy_(std::move(healthy)) {}

MetricsServer::~MetricsServer() { Stop(); }

Status MetricsServer::Start(const std::string& address, int port) {
  try {
    listener_ = std::make_unique<http_listener>("http://" + address + ":" + std::to_string(port));
    listener_->support(http::methods::GET, [this](http::http_request req) {
      try {
        std::string path = req.relative_uri().path();
        if (path == "/metrics") {
          req.reply(http::status_codes::OK, registry_->Render(),
                    "text/plain; version=0.0.4; charset=utf-8");
        } else if (path == "/healthz" || path == "/readyz") {
          bool ok = healthy_();
          req.reply(ok ? http::status_codes::OK : http::status_codes::ServiceUnavailable,
                    ok ? "ok" : "unhealthy");
        } else {
          req.reply(http::status_codes::NotFound, "not found");
        }
      } catch (const std::exception&) {
        // The client went away mid-reply; nothing to do.
      }
    });
    listener_->open().wait();
    return Status::Ok();
  } catch (const std::exception& e) {
    listener_.reset();
    return Status::Unavailable("metrics listener on " + address + ":" + std::to_string(port) +
                               ": " + e.what());
  }
}

void MetricsServer::Stop() {
  if (!listener_) return;
  try {
    listener_->close().wait();
  } catch (const std::exception&) {
  }
  listener_.reset();
}

}  // namespace kubicle::op
