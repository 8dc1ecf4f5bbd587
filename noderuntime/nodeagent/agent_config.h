// What the node agent needs to know about its node (from kubicle-node's
// flags, noderuntime/daemon/serve_flags.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <memory>

#include "noderuntime/nodeagent/image_resolver.h"
#include "noderuntime/nodeagent/image_rootfs_cache.h"

namespace kubicle::noderuntime::nodeagent {

struct AgentConfig {
  std::string node_name;                       // DNS subdomain; the kubicle.dev/node label value
  std::string lease_namespace = "kubicle-node-lease";
  std::chrono::seconds lease_duration{40};
  std::chrono::seconds renew_interval{10};
  uint32_t capacity_sandboxes = 500;
  uint64_t capacity_mem_mib = 0;               // 0: not advertised
  std::string endpoint;                        // data plane "host:port", in status.vm.endpoint
  // The CA (PEM) that signs the data plane's serving certificate, published
  // as the Lease annotation kubicle.dev/serving-ca; empty: plain HTTP.
  std::string serving_ca_pem;
  ImageResolverOptions images;                 // image roots and download cache
  // Templates naming spec.image are pulled and built through this (shared:
  // the config is copied); null: such templates fail on this node, saying so.
  std::shared_ptr<ImageRootfsCache> image_rootfs;
  // The guest of templates that name no kernel (--default-kernel,
  // --default-initrd): the node's own files, outside the image roots.
  // Empty: such templates fail on this node, saying so.
  std::string default_kernel, default_initrd;
  int sandbox_workers = 8;                     // concurrent restores/forks/teardowns
  int template_workers = 2;                    // concurrent image resolutions/bakes
  std::chrono::seconds resync{5};              // every object re-checked this often
  std::chrono::seconds reap_interval{30};      // VMs without an object are looked for this often
};

// Field manager of every write the agent makes ("kubicle-node/<node>").
inline std::string FieldManager(const AgentConfig& c) { return "kubicle-node/" + c.node_name; }

}  // namespace kubicle::noderuntime::nodeagent
