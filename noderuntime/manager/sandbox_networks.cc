// SandboxNetworks (sandbox_networks.h): a sandbox's network slot taken,
// re-adopted and described to its VMM, and a bake's NIC.
#include "noderuntime/manager/sandbox_networks.h"

#include <cstdio>
#include <optional>

#include "common/log.h"
#include "noderuntime/network/guest_network.h"
#include "noderuntime/network/host_share.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime {

namespace {

std::string FormatMac(const guest::protocol::Bytes& b) {
  char text[18];
  std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
  return text;
}

// A random locally administered unicast MAC, never the gateway's: every
// clone's NIC gets its own, so no two guests on a host share one even
// though their namespaces keep them apart (the guest's identity changes
// with each clone, as Firecracker's clones do).
std::string RandomMac() {
  for (;;) {
    guest::protocol::Bytes b = RandomBytes(6);
    b[0] = uint8_t((b[0] & 0xfc) | 0x02);
    std::string mac = FormatMac(b);
    if (mac != network::kGatewayMac) return mac;
  }
}

}  // namespace

// Bytes of a MAC this manager formatted (FormatMac).
guest::protocol::Bytes MacBytes(const std::string& mac) {
  unsigned v[6];
  char tail;
  if (std::sscanf(mac.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &tail) != 6)
    return {};
  return {uint8_t(v[0]), uint8_t(v[1]), uint8_t(v[2]), uint8_t(v[3]), uint8_t(v[4]), uint8_t(v[5])};
}

namespace {

// What every failure to set the network up says: the node never runs
// sandboxes without the isolation it was asked for, so the way out is to
// fix the host or to turn the network off out loud.
Status NetworkSetupError(const Status& why) {
  return Status(why.code(), "the sandbox network (--sandbox-network, on by default) cannot be set up: " +
                                why.message() +
                                ". Fix that, or start kubicle-node with --sandbox-network=off to run "
                                "sandboxes without a network (docs/network.md)");
}

}  // namespace

Result<std::unique_ptr<SandboxNetworks>> SandboxNetworks::Open(SandboxNetworkConfig c,
                                                               const std::string& state_dir,
                                                               Metrics metrics) {
  if (!c.enabled)
    return std::unique_ptr<SandboxNetworks>(new SandboxNetworks(std::move(c), nullptr));
  if (c.nameservers.empty() || c.nameservers.size() > 3)
    return Status::InvalidArgument("sandbox network: 1..3 nameservers");
  for (const std::string& ns : c.nameservers)
    RETURN_IF_ERROR(network::ParseIpv4(ns).status().WithContext("sandbox nameserver"));
  if (!c.system) c.system = std::make_shared<network::LinuxNetSystem>();
  network::SandboxNetwork::Options o;
  o.system = c.system.get();  // c, and so the system, live as long as the network
  ASSIGN_OR_RETURN(o.cidr, network::ParseCidr(c.cidr));
  o.netns_dir = c.netns_dir.empty() ? state_dir + "/netns" : c.netns_dir;
  // Two nodes on one host (e2e) never touch each other's veths or table.
  o.tag = network::SandboxNetworkTag(state_dir);
  o.pool_size = c.pool_size;
  o.on_built = [h = metrics.slot_build_seconds](double seconds) {
    h->WithLabels({}).Observe(seconds);
  };
  o.on_build_failed = [f = metrics.slot_build_failures] { f->WithLabels({}).Inc(); };
  o.on_orphans_swept = [f = metrics.orphans_swept](size_t n) { f->WithLabels({}).Inc(double(n)); };
  auto n = network::SandboxNetwork::Open(std::move(o));
  if (!n.ok()) return NetworkSetupError(n.status());
  return std::unique_ptr<SandboxNetworks>(new SandboxNetworks(std::move(c), std::move(n).value()));
}

Status SandboxNetworks::Start() {
  if (!network_) return Status::Ok();
  Status st = network_->Start();
  return st.ok() ? st : NetworkSetupError(st);
}

Status SandboxNetworks::Attach(ManagedSandbox& sb, const network::EgressPolicy& policy) {
  if (!sb.nic) return Status::Ok();  // a snapshot without a NIC: no network at all
  if (!network_)
    return Status::FailedPrecondition("template '" + sb.rec.info.template_name +
                                      "' was baked with a network device but the node's sandbox network "
                                      "is off (--sandbox-network): put it again");
  ASSIGN_OR_RETURN(network::NetworkSlot slot, network_->Acquire(policy));
  std::lock_guard l(sb.mu);
  sb.rec.info.network = SandboxNetworkInfo{slot.netns, slot.index, RandomMac(), policy};
  sb.holds_slot = true;
  return Status::Ok();
}

std::optional<vmm::control::NetAttachment> SandboxNetworks::AttachmentOf(const ManagedSandbox& sb) {
  if (!sb.rec.info.network) return std::nullopt;
  return vmm::control::NetAttachment{network::kTapName, sb.rec.info.network->mac, sb.rec.info.network->netns};
}

Status SandboxNetworks::Adopt(ManagedSandbox& sb) {
  if (!sb.rec.info.network) return Status::Ok();
  if (!network_) {
    // Its namespace lives on with the VMM; nothing here sweeps it.
    log::Warn("sandbox network is off: a re-adopted sandbox keeps its namespace unmanaged",
              {{"sandbox", sb.rec.info.id}, {"netns", sb.rec.info.network->netns}});
    return Status::Ok();
  }
  auto slot = network_->Adopt(sb.rec.info.network->slot);
  if (!slot.ok()) return slot.status().WithContext("network namespace");
  if (slot->netns != sb.rec.info.network->netns)
    return Status::FailedPrecondition("network namespace moved from " + sb.rec.info.network->netns);
  sb.holds_slot = true;
  return Status::Ok();
}

Result<std::optional<TemplateBaker::Nic>> SandboxNetworks::BakeNic(
    std::optional<network::NetworkSlot>* slot) {
  if (!network_) return std::optional<TemplateBaker::Nic>();
  // Warm-up commands may fetch packages: the default policy.
  ASSIGN_OR_RETURN(*slot, network_->Acquire({}));
  std::string dns;
  for (const std::string& ns : config_.nameservers) dns += (dns.empty() ? "" : ",") + ns;
  TemplateBaker::Nic nic;
  nic.tap = network::kTapName;
  nic.mac = RandomMac();
  nic.netns = (*slot)->netns;
  nic.cmdline = std::string("kubicle.net=") + network::kGuestAddress + "/" +
                std::to_string(network::kGuestPrefixLength) + "," + network::kGatewayAddress +
                " kubicle.dns=" + dns;
  return std::optional<TemplateBaker::Nic>(std::move(nic));
}

std::string SandboxNetworks::NetnsPathOf(const ManagedSandbox& sb) {
  return sb.rec.info.network ? sb.rec.info.network->netns : "";
}

}  // namespace kubicle::noderuntime
