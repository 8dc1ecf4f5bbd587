#include "noderuntime/server/testing/fake_templates.h"

#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::server::testing {

namespace {

bool SameSpec(const TemplateSpec& a, const TemplateSpec& b) {
  return a.kernel == b.kernel && a.initrd == b.initrd && a.cmdline == b.cmdline &&
         a.disks == b.disks && a.mem_mib == b.mem_mib && a.vcpus == b.vcpus && a.warmup == b.warmup;
}

}  // namespace

Result<TemplateInfo> FakeTemplates::PutTemplate(const TemplateSpec& spec) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = templates_.find(spec.name);
  if (it != templates_.end()) {
    if (!SameSpec(it->second.spec, spec)) {
      return Status::AlreadyExists("template " + spec.name + " exists with another spec");
    }
    return it->second;
  }
  TemplateInfo info;
  info.spec = spec;
  info.state = TemplateState::kBaking;
  info.message = "cold boot";
  TemplateInfo ready = info;
  ready.state = TemplateState::kReady;
  ready.message = "";
  ready.digest = "sha256:" + std::string(64, '0');
  ready.snapshot_dir = "/fake/" + spec.name;
  ready.ready_at = std::chrono::system_clock::now();
  templates_[spec.name] = ready;
  return info;
}

Result<TemplateInfo> FakeTemplates::GetTemplate(const std::string& name) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = templates_.find(name);
  if (it == templates_.end()) return Status::NotFound("no template " + name);
  return it->second;
}

std::vector<TemplateInfo> FakeTemplates::ListTemplates() {
  ++calls_;
  std::lock_guard l(mu_);
  std::vector<TemplateInfo> out;
  for (const auto& [_, t] : templates_) out.push_back(t);
  return out;
}

Status FakeTemplates::DeleteTemplate(const std::string& name) {
  ++calls_;
  // Asked before the lock: the users' fake may ask this one under its own.
  const std::string user = user_of ? user_of(name) : "";
  std::lock_guard l(mu_);
  if (!templates_.count(name)) return Status::NotFound("no template " + name);
  if (!user.empty())
    return Status::FailedPrecondition("sandbox " + user + " uses template " + name);
  templates_.erase(name);
  return Status::Ok();
}

Status FakeTemplates::SetRunToken(const std::string& template_name,
                                  const std::string& token_sha256) {
  ++calls_;
  std::lock_guard l(mu_);
  if (!templates_.count(template_name))
    return Status::NotFound("no template '" + template_name + "'");
  run_tokens_[template_name] = token_sha256;
  return Status::Ok();
}

bool FakeTemplates::CheckRunToken(const std::string& template_name, const std::string& token) {
  std::lock_guard l(mu_);
  auto it = run_tokens_.find(template_name);
  return it != run_tokens_.end() && !it->second.empty() && !token.empty() &&
         Sha256Hex(token) == it->second;
}

void FakeTemplates::FailTemplate(const std::string& name, const std::string& message) {
  std::lock_guard l(mu_);
  auto t = templates_.find(name);
  if (t == templates_.end()) return;
  t->second.state = TemplateState::kFailed;
  t->second.message = message;
}

std::optional<TemplateInfo> FakeTemplates::Find(const std::string& name) const {
  std::lock_guard l(mu_);
  auto t = templates_.find(name);
  if (t == templates_.end()) return std::nullopt;
  return t->second;
}

}  // namespace kubicle::noderuntime::server::testing
