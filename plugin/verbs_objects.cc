// The verbs on Kubernetes objects: fork (a SandboxFork), sweep (a run's
// Sandboxes and SandboxForks), wait (a Sandbox's Ready condition), suspend
// and resume (a Sandbox's spec.suspend).
#include <iostream>
#include <random>

#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/client/node_client.h"
#include "plugin/verbs.h"
#include "plugin/watch_until.h"

namespace kubicle::plugin {

using kube::Json;
using kube::StrAt;

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

// Why a Sandbox will not become Ready, or nullopt while it still may.
std::optional<Status> Hopeless(const Json& sbx) {
  const std::string name = StrAt(sbx, {"metadata", "name"});
  std::string reason, message;
  ConditionStatus(sbx, "Ready", &reason, &message);
  if (StrAt(sbx, {"status", "phase"}) == "Failed") {
    return Status::FailedPrecondition("Sandbox " + name + " failed: " + reason +
                                      (message.empty() ? "" : ": " + message));
  }
  if (!StrAt(sbx, {"metadata", "deletionTimestamp"}).empty()) {
    return Status::FailedPrecondition("Sandbox " + name + " is being deleted");
  }
  return std::nullopt;
}

bool Ready(const Json& sbx) { return ConditionStatus(sbx, "Ready") == "True"; }

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
        std::string reason;
        ConditionStatus(it->second, "Ready", &reason);
        return "Sandbox " + name + " is " + StrAt(it->second, {"status", "phase"}) +
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
  Json fork_labels = Json::object();
  const Json& src_labels = kube::At(*src, {"metadata", "labels"});
  for (const char* k : {"kubicle.dev/run", "kubicle.dev/agent"}) {
    if (src_labels.is_object() && src_labels.contains(k) && src_labels[k].is_string()) {
      fork_labels[k] = src_labels[k];
    }
  }
  const std::string name = inv.Has("name") ? inv.Get("name") : source + "-f" + RandomSuffix();
  Json fork{{"apiVersion", std::string(kube::kGroup) + "/" + std::string(kube::kVersion)},
            {"kind", "SandboxFork"},
            {"metadata", {{"name", name}, {"labels", fork_labels}}},
            {"spec", {{"sourceRef", {{"name", source}}}, {"replicas", replicas}}}};
  if (!labels->empty()) fork["spec"]["childMetadata"] = {{"labels", *labels}};
  auto created = env.kube->Create(kube::SandboxForkResource(), env.ns, fork);
  if (!created.ok()) return Fail(env, "fork", created.status());
  *env.out << "sandboxfork.kubicle.dev/" << name << " created\n";
  if (!inv.Bool("wait")) return 0;
  std::vector<std::string> ready;
  Status st = WatchUntil(
      *env.kube, kube::SandboxResource(), env.ns, {"kubicle.dev/fork-of=" + name, ""}, *timeout,
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
  const std::string selector = "kubicle.dev/run=" + run;
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
          names += (names.empty() ? "" : ", ") + n + " (" + StrAt(o, {"status", "vm", "state"}) + ")";
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
                                 Json{{"spec", {{"suspend", suspend}}}});
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
        const std::string phase = StrAt(it->second, {"status", "phase"});
        if (suspend && phase == "Suspended") return Status::Ok();
        if (!suspend && phase == "Running" && Ready(it->second)) return Status::Ok();
        return Hopeless(it->second);
      },
      [&](const ObjectSet& objs) {
        auto it = objs.find(name);
        if (it == objs.end()) return std::string("Sandbox " + name + " is gone");
        const std::string why = StrAt(it->second, {"status", "vm", "message"});
        return "Sandbox " + name + " is " + StrAt(it->second, {"status", "phase"}) +
               (why.empty() ? "" : " (" + why + ")");
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
