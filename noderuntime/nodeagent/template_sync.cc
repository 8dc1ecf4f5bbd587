#include "noderuntime/nodeagent/template_sync.h"

#include <filesystem>
#include <set>

#include "common/log.h"
#include "kube/api/names.h"
#include "kube/time_format.h"
#include "noderuntime/nodeagent/object_fields.h"

namespace kubicle::noderuntime::nodeagent {

using namespace std::chrono_literals;

namespace {

// Kubicle's part of the guest kernel command line; spec.kernelArgs follows.
constexpr char kBaseCmdline[] = "console=ttyS0 quiet reboot=k panic=1 kubicle.overlay=tmpfs";
constexpr auto kBakePoll = 250ms;
constexpr auto kProgressEvery = 1s;
constexpr auto kRetryTransient = 30s;

// metadata.generation; an object without one (never from an apiserver) is
// generation 1.
int64_t GenerationOf(const kube::api::ObjectMeta& meta) { return meta.generation ? meta.generation : 1; }

}  // namespace

std::optional<NodeEntry> EntryOf(const Json& tmpl, const std::string& node) {
  return SandboxTemplateView::Parse(tmpl).status.NodeReport(node);
}

Result<TemplateSpec> TemplateSpecFrom(const kube::api::SandboxTemplateSpec& spec,
                                      const std::string& node_template_name, const ResolveFn& resolve,
                                      const ImageFn& image, const GuestDefaults& guest) {
  TemplateSpec s;
  s.name = node_template_name;
  // The schema and the operator hold this too; a node acts on no guess.
  if (spec.image.has_value() == spec.rootfs.has_value()) {
    return Status::InvalidArgument("exactly one of spec.image and spec.rootfs is required");
  }
  if (spec.kernel) {
    ASSIGN_OR_RETURN(s.kernel, resolve({"kernel", *spec.kernel, spec.kernel_sha256.value_or("")}));
  } else if (guest.kernel.empty()) {
    return Status::FailedPrecondition(
        "spec.kernel is not set and this node has no default guest kernel (kubicle-node serve --default-kernel)");
  } else {
    s.kernel = guest.kernel;
    s.initrd = guest.initrd;
  }
  if (!spec.initrd.value_or("").empty()) {
    ASSIGN_OR_RETURN(s.initrd, resolve({"initrd", *spec.initrd, spec.initrd_sha256.value_or("")}));
  }
  std::string rootfs;
  if (spec.image) {
    if (!image) return Status::FailedPrecondition("spec.image: this node pulls no container images");
    ASSIGN_OR_RETURN(ImageRootfs built, image(*spec.image));
    rootfs = built.path;
  } else {
    ASSIGN_OR_RETURN(rootfs, resolve({"rootfs", *spec.rootfs, spec.rootfs_sha256.value_or("")}));
  }
  // Read-only under the guest's tmpfs overlay (kBaseCmdline), whichever
  // way it was made: one built rootfs serves every template of its image.
  s.disks = {rootfs + ",ro"};
  s.cmdline = kBaseCmdline;
  if (std::string args = spec.kernel_args.value_or(""); !args.empty()) s.cmdline += " " + args;
  s.mem_mib = static_cast<uint64_t>(spec.memory_mib.value_or(256));
  s.vcpus = static_cast<uint32_t>(spec.vcpus.value_or(1));
  for (const kube::api::WarmupStep& step : spec.warmup) {
    if (step.command.empty() || step.command[0].empty()) return Status::InvalidArgument("warmup step without a command");
    s.warmup.push_back(ShellJoin(step.command));
  }
  // The egress of its sandboxes that name none and of its per-call runs;
  // strict here as a Sandbox's (the CRD keeps egress free-form).
  auto network = network::ParseNetworkSpec(spec.network);
  if (!network.ok()) return Status::InvalidArgument("spec." + network.status().message());
  s.network = *network;
  return s;
}

TemplateSync::TemplateSync(kube::KubeClient* client, SandboxService* service, const AgentConfig& config,
                           metrics::Registry* registry)
    : client_(client),
      service_(service),
      config_(config),
      resolver_(config.images),
      informer_(client, kube::SandboxTemplateResource()),
      engine_({.workers = config.template_workers}) {
  status_write_seconds_ = &registry->AddHistogram(
      "kubicle_node_agent_status_write_seconds", "Latency of the node agent's status writes",
      {"kind"}, {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  registry->AddGaugeCallback("kubicle_node_agent_bake_queue", "Templates baking on this node", {},
                             [this] { return std::vector<std::pair<metrics::LabelValues, double>>{
                                          {{}, static_cast<double>(Baking())}}; });
  informer_.AddHandler([this](kube::WatchEventType, const Json& obj) { queue_.Add(kube::KeyOf(obj)); });
  engine_.Watch(&informer_);
}

TemplateSync::~TemplateSync() { Stop(); }

void TemplateSync::Start() {
  // What a previous run built for templates gone since, or left half-built.
  CollectImages();
  (void)engine_.Start([this](const std::string& key) { Sync(key); });
}

void TemplateSync::Stop() { engine_.Stop(); }

size_t TemplateSync::Baking() const {
  size_t n = resolving_;
  for (const TemplateInfo& t : service_->ListTemplates()) n += t.state == TemplateState::kBaking;
  return n;
}

void TemplateSync::Sync(const std::string& key) {
  auto got = informer_.Get(key);
  if (!got) return Forget(key);
  const SandboxTemplateView obj = SandboxTemplateView::Parse(std::move(*got));
  Known known;
  {
    std::lock_guard l(mu_);
    Known& k = known_[key];
    const std::string& uid = obj.meta.uid;
    const int64_t gen = GenerationOf(obj.meta);
    if (k.uid != uid || k.generation != gen) k = Known{uid, gen, std::nullopt, ""};
    known = k;
  }
  auto info = EnsureBaked(key, obj, &known);
  {
    std::lock_guard l(mu_);
    known_[key] = known;
  }
  NodeEntry entry{.observed_generation = known.generation};
  if (!info.ok()) {
    entry.phase = "Failed";
    entry.message = Bounded(info.status().message());
    // A download that failed for the network may work later; a bad spec will not.
    if (info.status().code() == StatusCode::kUnavailable) queue_.AddAfter(key, kRetryTransient);
  } else if (info->state == TemplateState::kBaking) {
    entry.image_digest = ImageDigestOf(info->spec);
    entry.phase = "Baking";
    entry.message = Bounded(info->message.empty() ? "baking" : info->message);
    queue_.AddAfter(key, kBakePoll);
  } else if (info->state == TemplateState::kReady) {
    entry.phase = "Ready";
    entry.snapshot_digest = info->digest;
    entry.bake_seconds = info->bake_seconds;
    entry.endpoint = config_.endpoint;
    entry.node_template = info->spec.name;
    entry.image_digest = ImageDigestOf(info->spec);
    // Every pass: a new Secret means a new hash, and the old token stops.
    Status st = service_->SetRunToken(info->spec.name, obj.status.run_token_sha256);
    if (!st.ok()) log::Warn("run token not set", {{"template", key}, {"error", st.ToString()}});
    DeleteOldGenerations(known, info->spec.name);
  } else {
    entry.phase = "Failed";
    entry.message = Bounded(info->message);
  }
  Report(key, obj, entry);
}

Result<TemplateInfo> TemplateSync::EnsureBaked(const std::string& key, const SandboxTemplateView& tmpl,
                                               Known* known) {
  const std::string name = TemplateNodeId(known->uid, known->generation);
  auto have = service_->GetTemplate(name);
  if (have.ok()) {
    if (!known->spec) known->spec = have->spec;  // baked before a restart
    return have;
  }
  if (!known->failure.empty()) return Status::FailedPrecondition(known->failure);
  Report(key, tmpl, {.phase = "Baking", .observed_generation = known->generation, .message = "resolving images"});
  Result<TemplateInfo> put = Status::Internal("not baked");
  {
    // An image's built rootfs is referenced by no node template until
    // PutTemplate: no collection in between.
    std::shared_lock images(images_mu_);
    ++resolving_;
    auto spec = SpecOf(key, tmpl, *known);
    --resolving_;
    if (!spec.ok()) {
      if (spec.status().code() != StatusCode::kUnavailable) known->failure = spec.status().message();
      log::Warn("template images refused", {{"template", key}, {"node", config_.node_name},
                                            {"error", spec.status().ToString()}});
      put = spec.status();
    } else {
      known->spec = *spec;
      put = service_->PutTemplate(*spec);
      if (!put.ok()) known->failure = put.status().message();
      else log::Info("baking template", {{"template", key}, {"node_template", name}});
    }
  }
  if (collect_pending_) CollectImages();
  return put;
}

Result<TemplateSpec> TemplateSync::SpecOf(const std::string& key, const SandboxTemplateView& tmpl,
                                          const Known& known) {
  auto progress = [&](const std::string& message) {
    Report(key, tmpl, {.phase = "Baking", .observed_generation = known.generation, .message = message});
  };
  ImageFn image;
  if (config_.image_rootfs) {
    image = [&](const std::string& reference) { return config_.image_rootfs->Resolve(reference, progress); };
  }
  GuestDefaults guest{config_.default_kernel, config_.default_initrd};
  // The node's own files: not under the image roots, but checked here so a
  // missing one fails the template with its flag's name, not the VMM's error.
  if (!tmpl.spec.kernel) {
    for (const auto& [flag, path] : {std::pair{"--default-kernel", guest.kernel},
                                     std::pair{"--default-initrd", guest.initrd}}) {
      std::error_code ec;
      if (!path.empty() && !std::filesystem::is_regular_file(path, ec)) {
        return Status::FailedPrecondition("spec.kernel is not set and the node's default guest file " + path +
                                          " (" + flag + ") is missing");
      }
    }
  }
  return TemplateSpecFrom(
      tmpl.spec, TemplateNodeId(known.uid, known.generation),
      [&](const ImageSource& src) { return resolver_.Resolve(src, progress); }, image, guest);
}

std::string TemplateSync::ImageDigestOf(const TemplateSpec& spec) const {
  if (!config_.image_rootfs || spec.disks.empty()) return "";
  std::string path = spec.disks[0];
  if (path.ends_with(",ro")) path.resize(path.size() - 3);
  return config_.image_rootfs->DigestOfPath(path);
}

void TemplateSync::CollectImages() {
  if (!config_.image_rootfs) return;
  std::unique_lock images(images_mu_, std::try_to_lock);
  if (!images.owns_lock()) {
    collect_pending_ = true;  // the resolution holding it collects when done
    return;
  }
  collect_pending_ = false;
  std::set<std::string> keep;
  for (const TemplateInfo& t : service_->ListTemplates()) {
    if (std::string digest = ImageDigestOf(t.spec); !digest.empty()) keep.insert(digest);
  }
  Status st = config_.image_rootfs->Collect(keep);
  if (!st.ok()) log::Warn("image collection failed", {{"node", config_.node_name}, {"error", st.ToString()}});
}

void TemplateSync::Report(const std::string& key, const SandboxTemplateView& tmpl, const NodeEntry& entry) {
  if (tmpl.status.NodeReport(config_.node_name) == entry) return;  // the object already says so
  const auto now = std::chrono::system_clock::now();
  {
    std::lock_guard l(mu_);
    auto& last = last_progress_[key];
    if (entry.phase == "Baking" && now - last < kProgressEvery) return;
    last = now;
  }
  Json apply = {{"apiVersion", kube::api::kGroupVersion}, {"kind", "SandboxTemplate"},
                {"metadata", {{"name", tmpl.meta.name}, {"namespace", tmpl.meta.ns}}},
                {"status", {{"nodes", Json::array({kube::api::TemplateNodeEntryJson(config_.node_name, entry, now)})}}}};
  kube::PatchOptions po;
  po.field_manager = FieldManager(config_);
  po.force = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client_->Patch(kube::SandboxTemplateResource(), tmpl.meta.ns, tmpl.meta.name, kube::PatchType::kApply,
                          apply, "status", po);
  status_write_seconds_->WithLabels({"SandboxTemplate"})
      .Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (!r.ok() && !kube::IsNotFound(r.status())) {
    log::Warn("template status write failed; retrying", {{"template", key}, {"error", r.status().ToString()}});
    queue_.AddRateLimited(key);
  } else {
    queue_.Forget(key);
  }
}

void TemplateSync::DeleteOldGenerations(const Known& known, const std::string& keep) {
  const std::string prefix = TemplateNodeIdPrefix(known.uid);
  const std::string keep_prefix = keep + "-";  // its shape variants stay too
  bool collect = false;
  for (const TemplateInfo& t : service_->ListTemplates()) {
    const std::string& n = t.spec.name;
    if (n.rfind(prefix, 0) != 0 || n == keep || n.rfind(keep_prefix, 0) == 0) continue;
    Status st = service_->DeleteTemplate(n);  // FailedPrecondition while sandboxes of it run
    if (st.ok()) {
      log::Info("deleted the node template of an older generation", {{"node_template", n}});
      collect = collect || !ImageDigestOf(t.spec).empty();  // a moved tag's image
    }
  }
  if (collect) CollectImages();
}

void TemplateSync::Forget(const std::string& key) {
  Known known;
  {
    std::lock_guard l(mu_);
    auto it = known_.find(key);
    if (it == known_.end()) return;
    known = it->second;
  }
  bool all_gone = true;
  const std::string prefix = TemplateNodeIdPrefix(known.uid);
  for (const TemplateInfo& t : service_->ListTemplates()) {
    if (t.spec.name.rfind(prefix, 0) != 0) continue;
    Status st = service_->DeleteTemplate(t.spec.name);
    if (!st.ok() && st.code() != StatusCode::kNotFound) all_gone = false;
  }
  if (all_gone) CollectImages();
  std::lock_guard l(mu_);
  if (all_gone) {
    known_.erase(key);
    last_progress_.erase(key);
  } else {
    queue_.AddAfter(key, kRetryTransient);  // sandboxes of it still run; they go first
  }
}

Result<std::string> TemplateSync::ReadyTemplateFor(const std::string& ns, const std::string& name,
                                                   const std::optional<ShapeOverride>& shape) {
  const std::string key = kube::ObjectKey(ns, name);
  // Right after a start the cache is not filled yet: absent is not gone.
  if (!informer_.HasSynced()) return Status::Unavailable("SandboxTemplates are not listed yet");
  auto obj = informer_.Get(key);
  if (!obj) return Status::NotFound("no SandboxTemplate " + key);
  const kube::api::ObjectMeta meta = kube::api::ParseObjectMeta(*obj);
  const std::string& uid = meta.uid;
  const int64_t gen = GenerationOf(meta);
  Known known;
  {
    std::lock_guard l(mu_);
    auto it = known_.find(key);
    if (it == known_.end() || it->second.uid != uid || it->second.generation != gen)
      return Status::Unavailable("template " + key + " is not baked on this node yet");
    known = it->second;
  }
  if (!known.failure.empty()) return Status::FailedPrecondition("template " + key + ": " + known.failure);
  const std::string base = TemplateNodeId(uid, gen);
  ASSIGN_OR_RETURN(TemplateInfo info, service_->GetTemplate(base));
  if (info.state == TemplateState::kBaking) return Status::Unavailable("template " + key + " is baking");
  if (info.state == TemplateState::kFailed)
    return Status::FailedPrecondition("template " + key + " failed to bake: " + info.message);
  if (!shape) return base;
  // A field spec.resources leaves unset (0) is the template's (docs/api.md).
  const ShapeOverride want{shape->mem_mib ? shape->mem_mib : info.spec.mem_mib,
                           shape->vcpus ? shape->vcpus : info.spec.vcpus};
  if (want.mem_mib == info.spec.mem_mib && want.vcpus == info.spec.vcpus) return base;
  if (want.mem_mib < info.spec.mem_mib) {
    return Status::FailedPrecondition(
        "spec.resources.memoryMiB " + std::to_string(want.mem_mib) + " is below template " + key +
        "'s " + std::to_string(info.spec.mem_mib) + " MiB: a restore cannot shrink guest memory");
  }
  if (!known.spec) known.spec = info.spec;
  return EnsureVariant(known, want);
}

// A template of another shape is baked from the same images on first use.
Result<std::string> TemplateSync::EnsureVariant(const Known& known, const ShapeOverride& shape) {
  const std::string name = TemplateNodeId(known.uid, known.generation, shape);
  auto have = service_->GetTemplate(name);
  if (!have.ok()) {
    TemplateSpec spec = *known.spec;
    spec.name = name;
    spec.mem_mib = shape.mem_mib;
    spec.vcpus = shape.vcpus;
    have = service_->PutTemplate(spec);
    if (!have.ok()) return have.status();
    log::Info("baking a template variant", {{"node_template", name}});
  }
  if (have->state == TemplateState::kBaking) return Status::Unavailable("baking variant " + name);
  if (have->state == TemplateState::kFailed)
    return Status::FailedPrecondition("variant " + name + " failed to bake: " + have->message);
  return name;
}

}  // namespace kubicle::noderuntime::nodeagent
