// Serves /metrics (Prometheus text of a registry) and /healthz over plain
// HTTP on a cpprestsdk listener. Start() reports a bind failure as a
// Status; the listener's own exceptions never escape.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace web::http::experimental::listener {
class http_listener;
}

namespace kubicle::op {

class MetricsServer {
 public:
  // `healthy` decides /healthz (200 or 503).
  MetricsServer(metrics::Registry* registry, std::function<bool()> healthy);
  ~MetricsServer();
  Status Start(const std::string& address, int port);
  void Stop();

 private:
  metrics::Registry* registry_;
  std::function<bool()> healthy_;
  std::unique_ptr<web::http::experimental::listener::http_listener> listener_;
};

}  // namespace kubicle::op
