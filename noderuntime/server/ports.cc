// GET /v1/sandboxes/{id}/ports/{port} (docs/api.md, "Ports"): a guest TCP
// port reached through the data plane. The Gate has checked the upgrade,
// the token, the port and the stream budget; this connects to the guest
// (inside its namespace) and hands the connection over to the relay.
#include "common/log.h"
#include "noderuntime/api/codec.h"
#include "noderuntime/server/http_call.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

namespace {

// The node is the gateway here: a guest that refuses or does not answer
// is the upstream's failure (502/504), not the node being unavailable.
void FailConnect(Call& call, const Status& st) {
  switch (st.code()) {
    case StatusCode::kUnavailable: return call.Error(502, "BadGateway", st.message());
    case StatusCode::kDeadlineExceeded: return call.Error(504, "GatewayTimeout", st.message());
    default: return call.Fail(st);
  }
}

}  // namespace

void HandlePort(Call& call, GuestIo& svc) {
  if (!call.OnlyQuery({})) return;
  if (!ValidId(call.name())) {
    return call.Error(400, "InvalidArgument",
                      "sandbox id \"" + call.name() +
                          "\" must be a DNS-1123 label: [a-z0-9-], at most 63");
  }
  auto port = ParsePort(call.port());
  if (!port) {
    return call.Error(400, "InvalidArgument",
                      "port \"" + call.port() + "\" must be a number from 1 to 65535");
  }
  auto upstream = svc.ConnectGuestPort(call.name(), *port);
  if (!upstream.ok()) return FailConnect(call, upstream.status());
  log::Debug("port stream", {{"sandbox", call.name()}, {"port", int(*port)}});
  call.Upgrade(std::move(*upstream));
}

}  // namespace kubicle::noderuntime::server
