// SandboxManager: creating sandboxes and forking running ones into N
// copy-on-write children — what a new sandbox is (id, labels, env, token,
// TTL), its template's admission, its record and log lines. The VMs under
// them are SandboxStarter's (sandbox_starter.h).
#include <signal.h>
#include <stdio.h>

#include <cctype>
#include <cstdio>

#include <thread>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;
using guest::client::AgentClient;

namespace {

constexpr uint32_t kMaxForkCount = 64;

Status CheckCommon(const Labels& labels, const std::optional<int64_t>& ttl) {
  RETURN_IF_ERROR(ValidateLabels(labels));
  if (ttl && *ttl <= 0) return Status::InvalidArgument("ttl_seconds must be positive");
  return Status::Ok();
}

// The limits of Sandbox spec.env (docs/api.md), applied again here since
// the HTTP API reaches this too.
Status ValidateEnv(const Env& env) {
  constexpr size_t kMaxVars = 256, kMaxValue = 32 * 1024;
  if (env.size() > kMaxVars) return Status::InvalidArgument("env: more than 256 variables");
  for (const auto& [name, value] : env) {
    bool ok = !name.empty() && name.size() <= 256 && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) return Status::InvalidArgument("env: '" + name.substr(0, 80) + "' is not a variable name");
    if (value.size() > kMaxValue || value.find('\0') != std::string::npos)
      return Status::InvalidArgument("env " + name + ": value over 32 KiB or with a NUL byte");
  }
  return Status::Ok();
}

// A given hash is the caller's token (the node agent's); with `later`, no
// hash yet (SetSandboxToken gives it; until then no token opens the
// sandbox); otherwise a new token is minted, returned once and only its
// hash kept.
Status SetToken(const std::string& given_sha256, bool later, std::string* token, std::string* sha256) {
  if (given_sha256.empty() && later) {
    token->clear();
    sha256->clear();
    return Status::Ok();
  }
  if (given_sha256.empty()) {
    *token = RandomHex(32);
    *sha256 = Sha256Hex(*token);
    return Status::Ok();
  }
  bool hex = given_sha256.size() == 64;
  for (char c : given_sha256) hex = hex && std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(static_cast<unsigned char>(c));
  if (!hex) return Status::InvalidArgument("token_sha256 is not 64 lowercase hex digits");
  token->clear();
  *sha256 = given_sha256;
  return Status::Ok();
}

std::string RunLabel(const Labels& l) {
  auto it = l.find("kubicle.dev/run");
  return it == l.end() ? "" : it->second;
}

}  // namespace

Result<std::shared_ptr<SandboxManager::Sandbox>> SandboxManager::NewSandbox(const SandboxSpec& spec,
                                                                             std::string* token) {
  RETURN_IF_ERROR(ValidateId(spec.template_name, "template name"));
  if (!spec.id.empty()) RETURN_IF_ERROR(ValidateId(spec.id, "sandbox id"));
  RETURN_IF_ERROR(CheckCommon(spec.labels, spec.ttl_seconds));
  auto sb = std::make_shared<Sandbox>();
  SandboxInfo& info = sb->rec.info;
  info.id = spec.id.empty() ? "sb-" + RandomHex(5) : spec.id;
  RETURN_IF_ERROR(guest::protocol::ValidateHostname(spec.hostname.empty() ? info.id : spec.hostname));
  info.template_name = spec.template_name;
  info.labels = spec.labels;
  info.env = spec.env;
  RETURN_IF_ERROR(ValidateEnv(info.env));
  info.created_at = config_.clock();
  if (spec.ttl_seconds) info.expires_at = info.created_at + std::chrono::seconds(*spec.ttl_seconds);
  RETURN_IF_ERROR(SetToken(spec.token_sha256, spec.token_later, token, &sb->rec.token_sha256));
  return sb;
}

// Under one hold of mu_, so DeleteTemplate cannot slip in between: the
// template is Ready, the id free; the sandbox enters the map as Creating.
Status SandboxManager::RegisterSandbox(const std::shared_ptr<Sandbox>& sb, std::string* snapshot_dir) {
  SandboxInfo& info = sb->rec.info;
  std::lock_guard l(mu_);
  if (shut_down_) return Status::Unavailable("the node runtime is shutting down");
  auto t = templates_.find(info.template_name);
  if (t == templates_.end()) return Status::NotFound("no template '" + info.template_name + "'");
  {
    std::lock_guard tl(t->second->mu);
    const TemplateInfo& ti = t->second->info;
    if (ti.state != TemplateState::kReady)
      return Status::FailedPrecondition("template '" + info.template_name + "' is " +
                                        TemplateStateName(ti.state) + (ti.message.empty() ? "" : ": " + ti.message));
    *snapshot_dir = ti.snapshot_dir;
    sb->shape = {ti.spec.mem_mib, ti.spec.vcpus};
    sb->nic = ti.nic;
    sb->workspace_slot = ti.workspace_slot;
    sb->template_egress = ti.spec.network;
  }
  return table_->Add(sb);  // under mu_: no DeleteTemplate in between
}

Result<SandboxInfo> SandboxManager::CreateSandbox(const SandboxSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string token, snapshot_dir;
  ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, NewSandbox(spec, &token));
  SandboxInfo& info = sb->rec.info;
  const std::string hostname = spec.hostname.empty() ? info.id : spec.hostname;
  std::unique_lock op(sb->op_mu);  // a concurrent delete waits for this create
  RETURN_IF_ERROR(RegisterSandbox(sb, &snapshot_dir));
  info.mem_mib = sb->shape.mem_mib;
  info.vcpus = sb->shape.vcpus;
  StepTimes steps;
  Status st = starter_->StartFromTemplate(sb, snapshot_dir, hostname, spec.workspace,
                                          spec.network.value_or(sb->template_egress), &steps);
  if (st.ok()) {
    std::lock_guard l(sb->mu);
    sb->rec.info.ready_ms = SecondsSince(t0) * 1000;
    st = supervisor_->Persist(*sb);
    steps.Mark("record");
  }
  if (!st.ok()) {
    bool deleted;
    {
      std::lock_guard l(sb->mu);
      deleted = sb->delete_requested;
    }
    (void)supervisor_->Teardown(sb);
    log::Warn("sandbox create failed", {{"sandbox", info.id}, {"template", info.template_name},
                                        {"run", RunLabel(info.labels)}, {"error", st.ToString()}});
    if (deleted) return Status::FailedPrecondition("sandbox '" + info.id + "' was deleted while being created");
    return st;
  }
  SandboxInfo out;
  {
    std::lock_guard l(sb->mu);
    out = sb->rec.info;
  }
  out.token = token;
  log::Info("sandbox created", {{"sandbox", out.id}, {"run", RunLabel(out.labels)},
                                {"template", out.template_name}, {"ready_ms", out.ready_ms},
                                {"steps_ms", steps.text()}});
  return out;
}

Result<std::shared_ptr<SandboxManager::Sandbox>> SandboxManager::NewForkChild(
    const ForkRequest& request, const ForkChildSpec* spec, const Sandbox& src, std::string* token) {
  auto k = std::make_shared<Sandbox>();
  SandboxInfo& ki = k->rec.info;
  ki.id = spec && !spec->id.empty() ? spec->id : "sb-" + RandomHex(5);
  ki.template_name = src.rec.info.template_name;
  ki.labels = src.rec.info.labels;
  for (const auto& [key, v] : request.labels) ki.labels[key] = v;
  ki.env = src.rec.info.env;
  if (spec) {
    for (const auto& [key, v] : spec->labels) ki.labels[key] = v;
    if (!spec->env.empty()) ki.env = spec->env;
  }
  ki.labels["kubicle.dev/fork-of"] = request.source_id;
  ki.fork_of = request.source_id;
  ki.created_at = config_.clock();
  if (request.ttl_seconds) ki.expires_at = ki.created_at + std::chrono::seconds(*request.ttl_seconds);
  else ki.expires_at = src.rec.info.expires_at;
  ki.mem_mib = src.shape.mem_mib;
  ki.vcpus = src.shape.vcpus;
  k->shape = src.shape;
  k->nic = src.nic;
  RETURN_IF_ERROR(SetToken(spec ? spec->token_sha256 : "", false, token, &k->rec.token_sha256));
  k->dir = SandboxDir(ki.id);
  k->log_path = src.log_path;  // a fork child keeps logging to its parent's stderr
  return k;
}

Result<std::vector<SandboxInfo>> SandboxManager::ForkSandbox(const ForkRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t count = request.children.empty() ? request.count : request.children.size();
  if (count < 1 || count > kMaxForkCount)
    return Status::InvalidArgument("fork count must be 1.." + std::to_string(kMaxForkCount));
  RETURN_IF_ERROR(CheckCommon(request.labels, request.ttl_seconds));
  for (const ForkChildSpec& c : request.children) {
    if (!c.id.empty()) RETURN_IF_ERROR(ValidateId(c.id, "sandbox id"));
    RETURN_IF_ERROR(CheckCommon(c.labels, std::nullopt));
    RETURN_IF_ERROR(ValidateEnv(c.env));
  }
  ASSIGN_OR_RETURN(auto src, Find(request.source_id));
  std::vector<std::shared_ptr<Sandbox>> kids;
  std::vector<std::string> tokens(count);
  std::vector<network::EgressPolicy> policies(count);
  std::string src_control;
  {
    std::lock_guard l(src->mu);
    if (src->rec.info.state != SandboxState::kRunning)
      return Status::FailedPrecondition("sandbox '" + request.source_id + "' is " +
                                        SandboxStateName(src->rec.info.state));
    // Refused rather than copied: the source writes its workspace in place,
    // so a child's copy would be a full O(size) copy (no reflink here) of a
    // disk whose mounted state lives in the source's page cache
    // (docs/workspaces.md, "Forks").
    if (!src->rec.info.workspace.empty())
      return Status::FailedPrecondition("sandbox '" + request.source_id + "' has workspace '" +
                                        src->rec.info.workspace +
                                        "' attached: a sandbox with a workspace cannot be forked");
    src_control = src->rec.control_path;
    for (uint32_t i = 0; i < count; ++i) {
      const ForkChildSpec* spec = request.children.empty() ? nullptr : &request.children[i];
      ASSIGN_OR_RETURN(auto k, NewForkChild(request, spec, *src, &tokens[i]));
      kids.push_back(std::move(k));
      // A child's own policy, else its source's.
      if (spec && spec->network) policies[i] = *spec->network;
      else if (src->rec.info.network) policies[i] = src->rec.info.network->policy;
    }
  }
  auto forked = starter_->Fork(src_control, kids, policies);
  if (!forked.ok()) {
    log::Warn("sandbox fork failed",
              {{"sandbox", request.source_id}, {"error", forked.status().ToString()}});
    return forked.status();
  }
  std::vector<SandboxInfo> out = std::move(forked).value();
  for (size_t i = 0; i < out.size(); ++i) out[i].token = tokens[i];
  fork_seconds_->WithLabels({}).Observe(SecondsSince(t0));
  log::Info("sandbox forked", {{"sandbox", request.source_id}, {"run", RunLabel(out[0].labels)},
                               {"template", out[0].template_name}, {"children", kids.size()}});
  return out;
}

Status SandboxManager::AdmitForkChild(const std::shared_ptr<Sandbox>& k) {
  // Under mu_, so a Shutdown either refuses it or sees it in the table.
  std::lock_guard l(mu_);
  if (shut_down_) return Status::Unavailable("the node runtime is shutting down");
  return table_->Add(k);
}

}  // namespace kubicle::noderuntime
