// The verbs on Kubernetes objects: fork (a SandboxFork), sweep (a run's
// Sandboxes and SandboxForks), wait (a Sandbox's Ready condition), suspend
// and resume (a Sandbox's spec.suspend).
#include <iostream>
#include <random>

#include "kube/api/names.h"
#include "kube/api/types.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/client/node_client.h"
#include "plugin/verbs.h"
#include "plugin/watch_until.h"

namespace kubicle::plugin {

using kube::Json;
using kube::api::FindCondition;
using kube::api::SandboxView;

namespace {

constexpr std::chrono::milliseconds kDefaultWait{120000};

int Usage(Env& env, const std::string& verb, const std::string& why) {
  *env.err << "kubectl-kubicle " << verb << ": " << why << "\nSee 'kubectl kubicle " << verb
           << " --help'.\n";
  return kExitUsage;
}

int Fail(Env& env, const std::string& verb, const Status& st) {
  *env.err << "kubectl-kubicle " << verb << ": " << st.message() << "\n";
  return kExitFailed;
}

Result<std::chrono::milliseconds> Timeout(const Invocation& inv) {
  if (!inv.Has("timeout")) return kDefaultWait;
  return ParseDuration(inv.Get("timeout"));
}

std::string RandomSuffix() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 6; ++i) s.push_back(kHex[rd() & 15]);
  return s;
}

// The Ready condition of a Sandbox, empty when it has none.
kube::api::Condition ReadyOf(const SandboxView& sbx) {
  return FindCondition(sbx.status.conditions, kube::api::kCondReady)
      .value_or(kube::api::Condition{});
}

// Why a Sandbox will not become Ready, or nullopt while it still may.
std::optional<Status> Hopeless(const Json& object) {
  const SandboxView sbx = SandboxView::Parse(object);
  const kube::api::Condition ready = ReadyOf(sbx);
  if (sbx.status.phase == "Failed") {
    return Status::FailedPrecondition("Sandbox " + sbx.meta.name + " failed: " + ready.reason +
                                      (ready.message.empty() ? "" : ": " + ready.message));
  }
  if (sbx.meta.deleting) {
    return Status::FailedPrecondition("Sandbox " + sbx.meta.name + " is being deleted");
  }
  return std::nullopt;
}

bool Ready(const Json& object) { return ReadyOf(SandboxView::Parse(object)).status == "True"; }

}  // namespace

int RunWait(const Invocation& inv, Env& env) {
  if (inv.positional.size() != 1) return Usage(env, "wait", "give one Sandbox name");
  std::string cond = inv.Get("for");
  for (char& ch : cond) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (cond == "condition=ready") cond = "ready";
  if (cond != "ready" && cond != "delete") {
    return Usage(env, "wait", "--for must be ready or delete (got \"" + inv.Get("for") + "\")");
  }
  auto timeout = Timeout(inv);
  if (!timeout.ok()) return Usage(env, "wait", timeout.status().message());
  const std::string name = inv.positional[0];
  bool seen = false;
  Status st = WatchUntil(
      *env.kube, kube::SandboxResource(), env.ns, {"", name}, *timeout,
      [&](const ObjectSet& objs) -> std::optional<Status> {
        auto it = objs.find(name);
        if (cond == "delete") {
          if (it == objs.end()) return Status::Ok();
          return std::nullopt;
        }
        if (it == objs.end()) {
          return Status::NotFound(seen ? "Sandbox " + name + " was deleted"
                                       : "Sandbox \"" + name + "\" not found in namespace " + env.ns);
        }
        seen = true;
        if (Ready(it->second)) return Status::Ok();
        return Hopeless(it->second);
      },
      [&](const ObjectSet& objs) {
        auto it = objs.find(name);
        if (it == objs.end()) return std::string("Sandbox " + name + " still exists");
        const SandboxView sbx = SandboxView::Parse(it->second);
        const std::string reason = ReadyOf(sbx).reason;
        return "Sandbox " + name + " is " + sbx.status.phase +
               (reason.empty() ? "" : " (" + reason + ")");
      });
  if (!st.ok()) return Fail(env, "wait", st);
  *env.out << "sandbox.kubicle.dev/" << name << (cond == "ready" ? " condition met\n" : " deleted\n");
  return 0;
}

int RunFork(const Invocation& inv, Env& env) {
  if (inv.positional.size() != 1) return Usage(env, "fork", "give one source Sandbox name");
  if (!inv.Has("replicas")) return Usage(env, "fork", "--replicas N is required");
  const std::string rep = inv.Get("replicas");
  int replicas = 0;
  if (rep.empty() || rep.size() > 3 || rep.find_first_not_of("0123456789") != std::string::npos ||
      (replicas = std::stoi(rep)) < 1 || replicas > 100) {
    return Usage(env, "fork", "--replicas must be 1..100 (got \"" + rep + "\")");
  }
  auto timeout = Timeout(inv);
  if (!timeout.ok()) return Usage(env, "fork", timeout.status().message());
  auto labels = noderuntime::client::ParseLabelArgs(inv.All("labels"));
  if (!labels.ok()) return Usage(env, "fork", labels.status().message());
  const std::string source = inv.positional[0];
  auto src = env.kube->Get(kube::SandboxResource(), env.ns, source);
  if (!src.ok()) {
    return Fail(env, "fork", kube::IsNotFound(src.status())
                                 ? Status::NotFound("Sandbox \"" + source + "\" not found in namespace " + env.ns)
                                 : src.status());
  }
  // The source's run and agent labels go on the fork itself, so a sweep of
  // the run deletes it (its children carry them anyway).
  const kube::api::ObjectMeta src_meta = kube::api::ParseObjectMeta(*src);
  std::map<std::string, std::string> fork_labels;
  for (std::string_view k : {kube::api::kLabelRun, kube::api::kLabelAgent}) {
    if (auto it = src_meta.labels.find(std::string(k)); it != src_meta.labels.end())
      fork_labels.insert(*it);
  }
  const std::string name = inv.Has("name") ? inv.Get("name") : source + "-f" + RandomSuffix();
  kube::api::SandboxForkSpec spec;
  spec.source_name = source;
  spec.replicas = replicas;
  for (const auto& [k, v] : labels->items()) spec.child_labels[k] = v.get<std::string>();
  auto created = env.kube->Create(kube::SandboxForkResource(), env.ns,
                                  kube::api::NewSandboxFork(name, fork_labels, spec));
  if (!created.ok()) return Fail(env, "fork", created.status());
  *env.out << "sandboxfork.kubicle.dev/" << name << " created\n";
  if (!inv.Bool("wait")) return 0;
  std::vector<std::string> ready;
  Status st = WatchUntil(
      *env.kube, kube::SandboxResource(), env.ns,
      {std::string(kube::api::kLabelForkOf) + "=" + name, ""}, *timeout,
      [&](const ObjectSet& children) -> std::optional<Status> {
        ready.clear();
        for (const auto& [n, c] : children) {
          if (auto bad = Hopeless(c)) return bad;
          if (Ready(c)) ready.push_back(n);
        }
        if (static_cast<int>(ready.size()) >= replicas) return Status::Ok();
        return std::nullopt;
      },
      [&](const ObjectSet& children) {
        return std::to_string(ready.size()) + " of " + std::to_string(replicas) +
               " children Ready (" + std::to_string(children.size()) + " created)";
      });
  if (!st.ok()) return Fail(env, "fork", st);
  for (const std::string& n : ready) *env.out << "sandbox.kubicle.dev/" << n << " ready\n";
  return 0;
}

int RunSweep(const Invocation& inv, Env& env) {
  if (!inv.positional.empty()) return Usage(env, "sweep", "takes no names, only --run ID");
  const std::string run = inv.Get("run");
  if (run.empty()) return Usage(env, "sweep", "--run ID is required (the kubicle.dev/run label)");
  if (run.find_first_of(",=!() ") != std::string::npos) {
    return Usage(env, "sweep", "--run must be a label value, not a selector");
  }
  auto timeout = Timeout(inv);
  if (!timeout.ok()) return Usage(env, "sweep", timeout.status().message());
  const std::string selector = std::string(kube::api::kLabelRun) + "=" + run;
  kube::ListOptions lo;
  lo.label_selector = selector;
  auto before = env.kube->List(kube::SandboxResource(), env.ns, lo);
  if (!before.ok()) return Fail(env, "sweep", before.status());
  const size_t initial = kube::At(*before, {"items"}).is_array() ? kube::At(*before, {"items"}).size() : 0;
  // Forks first: a fork deleted after its children would make them again.
  Status st = env.kube->DeleteCollection(kube::SandboxForkResource(), env.ns, selector);
  if (st.ok()) st = env.kube->DeleteCollection(kube::SandboxResource(), env.ns, selector);
  if (!st.ok()) return Fail(env, "sweep", st);
  st = WatchUntil(
      *env.kube, kube::SandboxResource(), env.ns, {selector, ""}, *timeout,
      [&](const ObjectSet& left) -> std::optional<Status> {
        if (left.empty()) return Status::Ok();
        return std::nullopt;
      },
      [&](const ObjectSet& left) {
        std::string names;
        for (const auto& [n, o] : left) {
          if (names.size() > 200) {
            names += ", ...";
            break;
          }
          names += (names.empty() ? "" : ", ") + n + " (" +
                   kube::api::ParseSandboxStatus(o).vm.state + ")";
        }
        return std::to_string(left.size()) + " Sandboxes still there: " + names;
      });
  if (!st.ok()) return Fail(env, "sweep", st);
  // The forks have no finalizer; check none was left behind (or made meanwhile).
  auto forks = env.kube->List(kube::SandboxForkResource(), env.ns, lo);
  if (forks.ok() && kube::At(*forks, {"items"}).is_array() && !kube::At(*forks, {"items"}).empty()) {
    return Fail(env, "sweep", Status::FailedPrecondition("SandboxForks of run " + run + " are still there"));
  }
  *env.out << "run " << run << ": " << initial << " Sandboxes deleted, every VM gone\n";
  return 0;
}

int RunSuspend(const Invocation& inv, Env& env) {
  const std::string& verb = inv.verb;
  const bool suspend = verb == "suspend";
  if (inv.positional.size() != 1) return Usage(env, verb, "give one Sandbox name");
  auto timeout = Timeout(inv);
  if (!timeout.ok()) return Usage(env, verb, timeout.status().message());
  const std::string name = inv.positional[0];
  auto patched = env.kube->Patch(kube::SandboxResource(), env.ns, name, kube::PatchType::kMerge,
                                 kube::api::SandboxSuspendPatch(suspend));
  if (!patched.ok()) {
    return Fail(env, verb, kube::IsNotFound(patched.status())
                               ? Status::NotFound("Sandbox \"" + name + "\" not found in namespace " + env.ns)
                               : patched.status());
  }
  if (inv.Has("wait") && !inv.Bool("wait")) {
    *env.out << "sandbox.kubicle.dev/" << name << (suspend ? " suspend" : " resume") << " requested\n";
    return 0;
  }
  Status st = WatchUntil(
      *env.kube, kube::SandboxResource(), env.ns, {"", name}, *timeout,
      [&](const ObjectSet& objs) -> std::optional<Status> {
        auto it = objs.find(name);
        if (it == objs.end()) return Status::NotFound("Sandbox " + name + " was deleted");
        const std::string phase = kube::api::ParseSandboxStatus(it->second).phase;
        if (suspend && phase == "Suspended") return Status::Ok();
        if (!suspend && phase == "Running" && Ready(it->second)) return Status::Ok();
        return Hopeless(it->second);
      },
      [&](const ObjectSet& objs) {
        auto it = objs.find(name);
        if (it == objs.end()) return std::string("Sandbox " + name + " is gone");
        const kube::api::SandboxStatus status = kube::api::ParseSandboxStatus(it->second);
        const std::string& why = status.vm.message;
        return "Sandbox " + name + " is " + status.phase + (why.empty() ? "" : " (" + why + ")");
      });
  if (!st.ok()) return Fail(env, verb, st);
  *env.out << "sandbox.kubicle.dev/" << name << (suspend ? " suspended\n" : " resumed\n");
  return 0;
}

int RunVerb(const Invocation& inv, Env& env) {
  if (inv.verb == "exec") return RunExec(inv, env);
  if (inv.verb == "run") return RunRun(inv, env);
  if (inv.verb == "cp") return RunCp(inv, env);
  if (inv.verb == "logs") return RunLogs(inv, env);
  if (inv.verb == "top") return RunTop(inv, env);
  if (inv.verb == "fork") return RunFork(inv, env);
  if (inv.verb == "sweep") return RunSweep(inv, env);
  if (inv.verb == "wait") return RunWait(inv, env);
  if (inv.verb == "suspend" || inv.verb == "resume") return RunSuspend(inv, env);
  if (inv.verb == "port-forward") return RunPortForward(inv, env);
  *env.err << "kubectl-kubicle: unknown command \"" << inv.verb << "\"\n";
  return kExitUsage;
}

}  // namespace kubicle::plugin
