// SandboxManager's templates: put, get, list and delete, and each bake on a
// worker thread (TemplateBaker, template_baker.h, does the bake itself; this
// keeps the template's state, the warm pool's shapes and spec.json).
#include <unistd.h>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"

namespace kubicle::noderuntime {


namespace {

Status CheckTemplateSpec(const TemplateSpec& s) {
  RETURN_IF_ERROR(ValidateId(s.name, "template name"));
  if (s.kernel.empty()) return Status::InvalidArgument("template needs a kernel");
  for (const std::string* path : {&s.kernel, &s.initrd}) {
    if (!path->empty() && ::access(path->c_str(), R_OK) != 0)
      return Status::InvalidArgument("cannot read '" + *path + "'");
  }
  for (const std::string& d : s.disks) {
    std::string path = d.substr(0, d.find(','));
    if (::access(path.c_str(), R_OK) != 0) return Status::InvalidArgument("cannot read disk '" + path + "'");
  }
  if (s.mem_mib < 16 || s.mem_mib > 1024 * 1024) return Status::InvalidArgument("mem_mib must be 16..1048576");
  if (s.vcpus < 1 || s.vcpus > 64) return Status::InvalidArgument("vcpus must be 1..64");
  for (const std::string& w : s.warmup)
    if (w.empty()) return Status::InvalidArgument("empty warm-up command");
  return Status::Ok();
}

bool SameSpec(const TemplateSpec& a, const TemplateSpec& b) {
  return a.name == b.name && a.kernel == b.kernel && a.initrd == b.initrd && a.cmdline == b.cmdline &&
         a.disks == b.disks && a.mem_mib == b.mem_mib && a.vcpus == b.vcpus && a.warmup == b.warmup &&
         a.network == b.network;
}

}  // namespace

std::string SandboxManager::TemplateDir(const std::string& name) const {
  return config_.state_dir + "/templates/" + name;
}

Status SandboxManager::PersistTemplate(const Template& t) {
  return AtomicWriteFile(TemplateDir(t.info.spec.name) + "/spec.json", EncodeTemplateRecord({t.info}));
}

Result<TemplateInfo> SandboxManager::PutTemplate(const TemplateSpec& spec) {
  RETURN_IF_ERROR(CheckTemplateSpec(spec));
  auto t = std::make_shared<Template>();
  {
    std::lock_guard l(mu_);
    if (shut_down_) return Status::Unavailable("the node runtime is shutting down");
    auto it = templates_.find(spec.name);
    if (it != templates_.end()) {
      std::lock_guard tl(it->second->mu);
      if (!SameSpec(it->second->info.spec, spec))
        return Status::AlreadyExists("template '" + spec.name + "' exists with another spec");
      return it->second->info;
    }
    t->info.spec = spec;
    t->info.state = TemplateState::kBaking;
    t->info.message = "queued";
    t->info.snapshot_dir = TemplateDir(spec.name) + "/snapshot";
    Status st = MakeDirs(TemplateDir(spec.name));
    if (st.ok()) st = PersistTemplate(*t);
    if (!st.ok()) {
      (void)RemoveTree(TemplateDir(spec.name));
      return st;
    }
    templates_[spec.name] = t;
  }
  {
    std::lock_guard bl(bake_mu_);
    bakers_.emplace_back([this, t] { Bake(t); });
  }
  log::Info("template bake queued", {{"template", spec.name}});
  std::lock_guard tl(t->mu);
  return t->info;
}

Result<TemplateInfo> SandboxManager::GetTemplate(const std::string& name) {
  RETURN_IF_ERROR(ValidateId(name, "template name"));
  std::shared_ptr<Template> t;
  {
    std::lock_guard l(mu_);
    auto it = templates_.find(name);
    if (it == templates_.end()) return Status::NotFound("no template '" + name + "'");
    t = it->second;
  }
  std::lock_guard tl(t->mu);
  return t->info;
}

std::vector<TemplateInfo> SandboxManager::ListTemplates() {
  std::vector<TemplateInfo> out;
  std::lock_guard l(mu_);
  for (auto& [name, t] : templates_) {
    std::lock_guard tl(t->mu);
    out.push_back(t->info);
  }
  return out;
}

Status SandboxManager::DeleteTemplate(const std::string& name) {
  RETURN_IF_ERROR(ValidateId(name, "template name"));
  std::vector<std::shared_ptr<Sandbox>> all;
  std::shared_ptr<Template> t;
  {
    std::lock_guard l(mu_);
    auto it = templates_.find(name);
    if (it == templates_.end()) return Status::NotFound("no template '" + name + "'");
    t = it->second;
    {
      std::lock_guard tl(t->mu);
      if (t->info.state == TemplateState::kBaking)
        return Status::FailedPrecondition("template '" + name + "' is still baking");
    }
    // Sandboxes map the snapshot's memory file: it must outlive them all.
    // Checked under mu_ so no create can start from this template meanwhile.
    size_t users = 0;
    for (const auto& sb : table_->All())
      if (sb->rec.info.template_name == name) ++users;  // immutable after creation
    if (users > 0)
      return Status::FailedPrecondition("template '" + name + "' is used by " + std::to_string(users) +
                                        " sandbox(es)");
    templates_.erase(it);
  }
  std::lock_guard tl(t->mu);
  if (t->in_pool) pool_->Unwant({t->info.spec.mem_mib, t->info.spec.vcpus});
  t->in_pool = false;
  log::Info("template deleted", {{"template", name}});
  return RemoveTree(TemplateDir(name));
}

void SandboxManager::SetTemplateProgress(const std::shared_ptr<Template>& t, const std::string& message) {
  std::lock_guard l(t->mu);
  t->info.message = message;
  log::Info("template bake", {{"template", t->info.spec.name}, {"step", message}});
}

void SandboxManager::Bake(std::shared_ptr<Template> t) {
  const auto t0 = std::chrono::steady_clock::now();
  TemplateSpec spec;
  std::string snapshot_dir;
  {
    std::lock_guard l(t->mu);
    spec = t->info.spec;
    snapshot_dir = t->info.snapshot_dir;
  }
  // With the sandbox network on, the bake's VM has a NIC in a slot of its
  // own, so every sandbox of the template has one.
  std::optional<network::NetworkSlot> slot;
  auto nic = networks_->BakeNic(&slot);
  Result<std::string> digest =
      nic.ok() ? baker_->Bake(spec, TemplateDir(spec.name), snapshot_dir,
                              [&](const std::string& step) { SetTemplateProgress(t, step); }, *nic)
               : Result<std::string>(nic.status().WithContext("bake network"));
  if (slot) networks_->network()->Release(slot->index);
  std::lock_guard l(t->mu);
  if (digest.ok()) {
    t->info.nic = nic->has_value();
    t->info.workspace_slot = true;
    t->info.digest = *digest;
    t->info.state = TemplateState::kReady;
    t->info.message = "ready";
    t->info.bake_seconds = SecondsSince(t0);
    t->info.ready_at = config_.clock();
    bake_seconds_->WithLabels({}).Observe(t->info.bake_seconds);
    if (!t->in_pool) pool_->Want({t->info.spec.mem_mib, t->info.spec.vcpus});
    t->in_pool = true;
  } else {
    t->info.state = TemplateState::kFailed;
    t->info.message = digest.status().ToString();
  }
  Status p = PersistTemplate(*t);
  log::Info("template bake finished", {{"template", t->info.spec.name},
                                       {"state", TemplateStateName(t->info.state)},
                                       {"message", t->info.message},
                                       {"digest", t->info.digest},
                                       {"persist", p.ok() ? "ok" : p.ToString()}});
}

Status SandboxManager::LoadTemplates() {
  for (const std::string& name : SubDirs(config_.state_dir + "/templates")) {
    const std::string dir = TemplateDir(name);
    auto text = ReadFileToString(dir + "/spec.json");
    auto rec = text.ok() ? DecodeTemplateRecord(*text) : Result<TemplateRecord>(text.status());
    if (!rec.ok() || rec->info.spec.name != name) {
      // A put that died before its spec was written: nothing refers to it.
      log::Warn(
          "removing unreadable template",
          {{"template", name}, {"error", rec.ok() ? "name mismatch" : rec.status().ToString()}});
      (void)RemoveTree(dir);
      continue;
    }
    auto t = std::make_shared<Template>();
    t->info = std::move(rec->info);
    if (t->info.state == TemplateState::kReady &&
        ::access((t->info.snapshot_dir + "/state").c_str(), R_OK) != 0) {
      t->info.state = TemplateState::kFailed;
      t->info.message = "snapshot is missing from " + t->info.snapshot_dir;
    }
    if (t->info.state == TemplateState::kBaking)
      t->info.message = "bake restarted after a daemon restart";
    std::lock_guard l(mu_);
    templates_[name] = t;
  }
  return Status::Ok();
}

}  // namespace kubicle::noderuntime
