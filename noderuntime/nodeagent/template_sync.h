// Bakes the cluster's SandboxTemplates on this node and reports each in the
// template's status.nodes[] (docs/operator.md, "Node protocol" 2): one
// entry per node, applied server-side with field manager
// kubicle-node/<node>, so nodes never overwrite each other's entries.
//
// A SandboxTemplate generation becomes the node template
// TemplateNodeId(uid, generation): images resolved under the node's image
// roots (or downloaded and verified), or spec.image pulled and built into a
// root filesystem (ImageRootfsCache, once per manifest digest), then
// PutTemplate, whose bake is polled and reported as Baking (with progress),
// Ready (digest, bake time, the image's manifest digest) or Failed (the
// reason). A template without spec.kernel bakes the node's default guest.
// Built root filesystems, layers and manifests no node template uses are
// collected at Start and whenever a template's node templates go (removal,
// an older generation): a collection waits for no bake; one asked for
// while images are being resolved runs when they are done. A Ready entry carries the node's data-plane
// endpoint and node template name (where per-call runs go), and the
// template's status.runTokenSha256 is handed to the node (SetRunToken). Older generations' node templates are deleted
// once no sandbox uses them, and all of a template's when it is deleted.
// Status is written only when it differs from what the object shows, so
// the agent's own writes do not loop.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "kube/api/types.h"
#include "kube/controller_engine.h"
#include "kube/informer.h"
#include "noderuntime/nodeagent/agent_config.h"
#include "noderuntime/nodeagent/image_resolver.h"
#include "noderuntime/nodeagent/node_names.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::nodeagent {

using kube::api::SandboxTemplateView;
// The node's entry in status.nodes[] (kube/api: TemplateNodeEntryJson).
using NodeEntry = kube::api::TemplateNodeReport;
// The entry for `node` in a SandboxTemplate object, if any (pure).
std::optional<NodeEntry> EntryOf(const kube::Json& tmpl, const std::string& node);
// The node template spec of a SandboxTemplate's spec, with `resolve`
// turning each kernel/initrd/rootfs source into a local path and `image`
// spec.image into a built root filesystem (empty: this node takes no
// images); `guest` is used when spec.kernel is absent (pure).
using ResolveFn = std::function<Result<std::string>(const ImageSource&)>;
using ImageFn = std::function<Result<ImageRootfs>(const std::string& reference)>;
struct GuestDefaults {
  std::string kernel, initrd;  // empty kernel: none on this node
};
Result<TemplateSpec> TemplateSpecFrom(const kube::api::SandboxTemplateSpec& spec,
                                      const std::string& node_template_name, const ResolveFn& resolve,
                                      const ImageFn& image = {}, const GuestDefaults& guest = {});
inline Result<TemplateSpec> TemplateSpecFrom(const kube::Json& tmpl, const std::string& node_template_name,
                                             const ResolveFn& resolve, const ImageFn& image = {},
                                             const GuestDefaults& guest = {}) {
  return TemplateSpecFrom(kube::api::ParseSandboxTemplateSpec(tmpl, nullptr), node_template_name, resolve,
                          image, guest);
}

class TemplateSync {
 public:
  TemplateSync(kube::KubeClient* client, SandboxService* service, const AgentConfig& config,
               metrics::Registry* registry);
  ~TemplateSync();
  TemplateSync(const TemplateSync&) = delete;
  TemplateSync& operator=(const TemplateSync&) = delete;

  void Start();
  void Stop();
  bool WaitForSync(std::chrono::milliseconds timeout) const { return informer_.WaitForSync(timeout); }

  // The Ready node template a Sandbox of template `ns/name` restores from;
  // `shape` (Sandbox spec.resources) selects a variant, baked on first use.
  // Unavailable while it is baking (try again), FailedPrecondition when the
  // bake failed or the shape is invalid, NotFound without such a template.
  Result<std::string> ReadyTemplateFor(const std::string& ns, const std::string& name,
                                       const std::optional<ShapeOverride>& shape);
  // Templates on their way to Ready on this node (the
  // kubicle_node_agent_bake_queue gauge): images being resolved or
  // downloaded, and bakes in progress.
  size_t Baking() const;
  void Enqueue(const std::string& key) { queue_.Add(key); }

 private:
  struct Known {  // what the agent baked for one SandboxTemplate key
    std::string uid;
    int64_t generation = 0;
    std::optional<TemplateSpec> spec;  // resolved; the base of variants
    std::string failure;               // resolution failed for this generation
  };
  void Sync(const std::string& key);
  void Forget(const std::string& key);
  Result<TemplateInfo> EnsureBaked(const std::string& key, const SandboxTemplateView& tmpl, Known* known);
  void Report(const std::string& key, const SandboxTemplateView& tmpl, const NodeEntry& entry);
  void DeleteOldGenerations(const Known& known, const std::string& keep);
  Result<std::string> EnsureVariant(const Known& known, const ShapeOverride& shape);
  Result<TemplateSpec> SpecOf(const std::string& key, const SandboxTemplateView& tmpl, const Known& known);
  // The manifest digest of the image a node template's rootfs was built
  // from, "" for a hand-built rootfs.
  std::string ImageDigestOf(const TemplateSpec& spec) const;
  // Built root filesystems and layers no node template uses, removed.
  void CollectImages();

  kube::KubeClient* client_;
  SandboxService* service_;
  AgentConfig config_;
  ImageResolver resolver_;
  kube::Informer informer_;
  kube::ControllerEngine engine_;
  kube::WorkQueue& queue_ = engine_.Queue();
  metrics::Family<metrics::Histogram>* status_write_seconds_;
  std::atomic<size_t> resolving_{0};  // EnsureBaked calls fetching images
  // Held shared from an image's Resolve until its node template exists (so
  // its disk is in ListTemplates), exclusive by a collection.
  std::shared_mutex images_mu_;
  std::atomic<bool> collect_pending_{false};
  mutable std::mutex mu_;
  std::map<std::string, Known> known_;                    // by "ns/name"
  std::map<std::string, kube::TimePoint> last_progress_;  // rate limit of Baking messages
};

}  // namespace kubicle::noderuntime::nodeagent
