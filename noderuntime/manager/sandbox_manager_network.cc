// SandboxManager and the sandbox network (docs/network.md): the namespace
// and MAC each create and fork child gets, the attachment the VMM opens,
// re-adoption of a running sandbox's slot, and a bake's NIC. The slots
// themselves are SandboxNetwork's (noderuntime/network/sandbox_network.h).
#include <cstdio>
#include <optional>

#include "common/log.h"
#include "noderuntime/network/guest_network.h"
#include "noderuntime/network/host_share.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"

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

Status SandboxManager::OpenNetwork() {
  const SandboxNetworkConfig& c = config_.network;
  if (!c.enabled) return Status::Ok();
  if (c.nameservers.empty() || c.nameservers.size() > 3)
    return Status::InvalidArgument("sandbox network: 1..3 nameservers");
  for (const std::string& ns : c.nameservers)
    RETURN_IF_ERROR(network::ParseIpv4(ns).status().WithContext("sandbox nameserver"));
  if (!config_.network.system) config_.network.system = std::make_shared<network::LinuxNetSystem>();
  network::SandboxNetwork::Options o;
  o.system = config_.network.system.get();
  ASSIGN_OR_RETURN(o.cidr, network::ParseCidr(c.cidr));
  o.netns_dir = c.netns_dir.empty() ? config_.state_dir + "/netns" : c.netns_dir;
  // Two nodes on one host (e2e) never touch each other's veths or table.
  o.tag = network::SandboxNetworkTag(config_.state_dir);
  o.pool_size = c.pool_size;
  o.on_built = [h = slot_build_seconds_](double seconds) { h->WithLabels({}).Observe(seconds); };
  o.on_build_failed = [c = slot_build_failures_] { c->WithLabels({}).Inc(); };
  o.on_orphans_swept = [c = orphans_swept_](size_t n) { c->WithLabels({}).Inc(double(n)); };
  auto n = network::SandboxNetwork::Open(std::move(o));
  if (!n.ok()) return NetworkSetupError(n.status());
  network_ = std::move(n).value();
  return Status::Ok();
}

Status SandboxManager::StartNetwork() {
  if (!network_) return Status::Ok();
  Status st = network_->Start();
  return st.ok() ? st : NetworkSetupError(st);
}

void SandboxManager::RegisterNetworkMetrics() {
  slot_build_seconds_ = &metrics_->AddHistogram(
      "kubicle_sandbox_network_slot_build_seconds",
      "Sandbox network: one namespace built (netns, veth, TAP, nftables), for the pool or a create", {},
      metrics::ExponentialBuckets(0.001, 2, 14));
  slot_build_failures_ = &metrics_->AddCounter("kubicle_sandbox_network_slot_build_failures_total",
                                               "Sandbox network: namespace builds that failed");
  slot_build_failures_->WithLabels({});
  // Scrape-time views of the slots' census; all zero with the network off.
  auto census = [link = scrape_link_]() -> std::optional<network::SandboxNetwork::Census> {
    std::lock_guard l(link->mu);
    if (link->manager == nullptr || !link->manager->network_) return std::nullopt;
    return link->manager->network_->census();
  };
  metrics_->AddGaugeCallback(
      "kubicle_sandbox_network_slots", "Sandbox network: namespaces by state (free: the CIDR's unused /30s)",
      {"state"}, [census] {
        const auto c = census().value_or(network::SandboxNetwork::Census{});
        return std::vector<std::pair<metrics::LabelValues, double>>{
            {{"in_use"}, double(c.in_use)},     {{"pooled"}, double(c.pooled)},
            {{"building"}, double(c.building)}, {{"releasing"}, double(c.releasing)},
            {{"free"}, double(c.free)}};
      });
  orphans_swept_ = &metrics_->AddCounter("kubicle_sandbox_network_orphans_swept_total",
                                         "Sandbox network: namespaces and host veths no slot held, torn down");
  orphans_swept_->WithLabels({});
}

Status SandboxManager::AttachNetwork(Sandbox& sb, const network::EgressPolicy& policy) {
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

std::optional<vmm::control::NetAttachment> SandboxManager::NetAttachmentOf(const Sandbox& sb) const {
  if (!sb.rec.info.network) return std::nullopt;
  return vmm::control::NetAttachment{network::kTapName, sb.rec.info.network->mac, sb.rec.info.network->netns};
}

Status SandboxManager::AdoptNetwork(Sandbox& sb) {
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

Result<std::optional<TemplateBaker::Nic>> SandboxManager::BakeNic(
    std::optional<network::NetworkSlot>* slot) {
  if (!network_) return std::optional<TemplateBaker::Nic>();
  // Warm-up commands may fetch packages: the default policy.
  ASSIGN_OR_RETURN(*slot, network_->Acquire({}));
  std::string dns;
  for (const std::string& ns : config_.network.nameservers) dns += (dns.empty() ? "" : ",") + ns;
  TemplateBaker::Nic nic;
  nic.tap = network::kTapName;
  nic.mac = RandomMac();
  nic.netns = (*slot)->netns;
  nic.cmdline = std::string("kubicle.net=") + network::kGuestAddress + "/" +
                std::to_string(network::kGuestPrefixLength) + "," + network::kGatewayAddress +
                " kubicle.dns=" + dns;
  return std::optional<TemplateBaker::Nic>(std::move(nic));
}

std::string SandboxManager::NetnsPathOf(const Sandbox& sb) const {
  return sb.rec.info.network ? sb.rec.info.network->netns : "";
}

}  // namespace kubicle::noderuntime
