#include "operator/fork_reconciler.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "common/log.h"

namespace kubicle::op {

using kube::SandboxResource;

namespace {
int Replicas(const Json& fork) { return fork["spec"].value("replicas", 1); }

constexpr size_t kParallelCreates = 8;

// fn(0..n-1), at most `width` at a time, each index on its own thread.
void ParallelFor(size_t n, size_t width, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < std::min(n, width); ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

int IndexOf(const std::string& fork_name, const Json& child) {
  std::string n = Name(child);
  std::string prefix = fork_name + "-";
  if (!n.starts_with(prefix)) return -1;
  try {
    return std::stoi(n.substr(prefix.size()));
  } catch (const std::exception&) {
    return -1;
  }
}
}  // namespace

std::string ForkChildName(const std::string& fork_name, int index) {
  return BoundedName(fork_name, "-" + std::to_string(index));
}

Json DesiredForkChild(const Json& fork, const Json& source, const std::string& node, int index) {
  Json labels = Json::object();
  for (std::string_view l : {kLabelRun, kLabelAgent, kLabelTemplate}) {
    if (!Label(source, l).empty()) labels[std::string(l)] = Label(source, l);
  }
  if (!Label(fork, kLabelRun).empty()) labels[std::string(kLabelRun)] = Label(fork, kLabelRun);
  const Json cm = fork["spec"].value("childMetadata", Json::object());
  const Json child_labels = cm.value("labels", Json::object());  // items() needs a live object
  for (const auto& [k, v] : child_labels.items()) labels[k] = v;
  labels[std::string(kLabelForkOf)] = Name(fork);
  labels[std::string(kLabelNode)] = node;
  Json md = {{"name", ForkChildName(Name(fork), index)},
             {"labels", labels},
             // Placed at birth, so the teardown finalizer comes with it
             // (one write less per child than a later EnsureFinalizer).
             {"finalizers", Json::array({kFinalizer})},
             {"ownerReferences", Json::array({ControllerRef(fork)})}};
  if (cm.contains("annotations")) md["annotations"] = cm["annotations"];
  const Json& sspec = source["spec"];
  Json spec = {{"templateRef", sspec["templateRef"]}, {"forkSource", Name(source)}};
  for (const char* f : {"env", "resources"}) {
    if (sspec.contains(f)) spec[f] = sspec[f];
  }
  if (fork["spec"].contains("ttlSeconds")) {
    spec["ttlSeconds"] = fork["spec"]["ttlSeconds"];
  } else if (fork["spec"].contains("expiresAt")) {
    spec["expiresAt"] = fork["spec"]["expiresAt"];
  } else if (!StatusString(source, "expiresAt").empty()) {
    spec["expiresAt"] = StatusString(source, "expiresAt");  // forks never outlive the source's TTL
  }
  return Json{{"metadata", md}, {"spec", spec}};
}

Json ComputeForkStatus(const Json& fork, const std::string& node, const std::string& wait_reason,
                       const std::vector<Json>& children, kube::TimePoint now) {
  int ready = 0, failed = 0;
  Json list = Json::array();
  for (const Json& c : children) {
    std::string phase = StatusString(c, "phase");
    if (phase == "Running") ++ready;
    if (phase == "Failed") ++failed;
    list.push_back({{"name", Name(c)}, {"phase", phase.empty() ? "Pending" : phase}});
  }
  const int want = Replicas(fork);
  std::string phase = !wait_reason.empty() ? "Pending"
                      : failed > 0         ? "Failed"
                      : ready >= want      ? "Ready"
                                           : "Forking";
  Condition c = phase == "Ready"
                    ? Condition{"Ready", "True", "AllReady", std::to_string(ready) + " forks running"}
                : phase == "Pending" ? Condition{"Ready", "False", wait_reason, "waiting for the source"}
                : phase == "Failed"  ? Condition{"Ready", "False", "ForkFailed",
                                                std::to_string(failed) + " forks failed"}
                                     : Condition{"Ready", "False", "Forking",
                                                std::to_string(ready) + "/" + std::to_string(want) +
                                                    " forks running"};
  Json conds = fork.contains("status") ? fork["status"].value("conditions", Json::array())
                                       : Json::array();
  Json st = {{"observedGeneration", Generation(fork)},
             {"phase", phase},
             {"replicas", static_cast<int>(children.size())},
             {"readyReplicas", ready},
             {"failedReplicas", failed},
             {"children", list},
             {"conditions", SetCondition(conds, c, Generation(fork), now)}};
  if (!node.empty()) st["nodeName"] = node;
  return st;
}

std::vector<Json> ForkReconciler::Children(const Json& fork) {
  std::vector<Json> out;
  const std::string ns = Namespace(fork), uid = Uid(fork);
  ctx_.lister->ForEach(SandboxResource(), [&](const Json& s) {
    if (Namespace(s) == ns && IsControlledBy(s, uid)) out.push_back(s);
  });
  std::sort(out.begin(), out.end(), [&](const Json& a, const Json& b) {
    return IndexOf(Name(fork), a) < IndexOf(Name(fork), b);
  });
  return out;
}

Status ForkReconciler::EnsureChildren(const Json& fork, const Json& source,
                                      const std::string& node, std::vector<Json>* children) {
  std::set<std::string> have;
  for (const Json& c : *children) have.insert(Name(c));
  std::vector<Json> missing;
  for (int i = 0; i < Replicas(fork); ++i) {
    Json child = DesiredForkChild(fork, source, node, i);
    if (!have.count(Name(child))) missing.push_back(std::move(child));
  }
  // Creates go out side by side: a 20-way fork is 20 round trips to the
  // apiserver, and its children are forked together only once they exist.
  std::vector<Result<Json>> results(missing.size(), Status::Internal("not sent"));
  ParallelFor(missing.size(), kParallelCreates, [&](size_t i) {
    results[i] = ctx_.client->Create(SandboxResource(), Namespace(fork), missing[i]);
  });
  for (size_t i = 0; i < missing.size(); ++i) {
    const Json& child = missing[i];
    const Result<Json>& created = results[i];
    if (created.ok()) {
      children->push_back(*created);
      continue;
    }
    if (!kube::IsAlreadyExists(created.status())) return created.status();
    // Made by an earlier pass the cache has not shown yet, or not ours.
    auto existing = ctx_.client->Get(SandboxResource(), Namespace(fork), Name(child));
    if (existing.ok() && !IsControlledBy(*existing, Uid(fork))) {
      return Status::AlreadyExists("Sandbox " + Name(child) + " exists and is not owned by this fork");
    }
    if (existing.ok()) children->push_back(*existing);
  }
  return Status::Ok();
}

Status ForkReconciler::ScaleDown(const Json& fork, std::vector<Json>* children) {
  std::vector<Json> keep;
  for (const Json& c : *children) {
    if (IndexOf(Name(fork), c) < Replicas(fork)) {
      keep.push_back(c);
      continue;
    }
    kube::DeleteOptions opts;
    opts.precondition_uid = Uid(c);
    Status s = ctx_.client->Delete(SandboxResource(), Namespace(c), Name(c), opts);
    if (!s.ok() && !kube::IsNotFound(s)) return s;
  }
  *children = keep;
  return Status::Ok();
}

Result<Outcome> ForkReconciler::Reconcile(const std::string& key) {
  std::optional<Json> got = ctx_.lister->Get(kube::SandboxForkResource(), key);
  if (!got || IsDeleting(*got)) return Outcome{};  // children go with the garbage collector
  const Json fork = *got;
  std::vector<Json> children = Children(fork);
  std::string ns = Namespace(fork);
  std::string src_name = fork["spec"]["sourceRef"].value("name", "");
  std::optional<Json> source = ctx_.lister->Get(SandboxResource(), kube::ObjectKey(ns, src_name));
  std::string node = source ? Label(*source, kLabelNode) : "";
  std::string wait_reason = !source ? "SourceNotFound"
                            : IsDeleting(*source) ? "SourceDeleting"
                            : node.empty() ? "SourceNotScheduled" : "";
  Outcome out;
  if (wait_reason.empty()) {
    Status s = EnsureChildren(fork, *source, node, &children);
    if (kube::IsAlreadyExists(s)) {
      ctx_.Event(fork, "Warning", "NameConflict", s.message());
      wait_reason = "NameConflict";
    } else {
      RETURN_IF_ERROR(s);
    }
    RETURN_IF_ERROR(ScaleDown(fork, &children));
  } else {
    out.RequeueWithin(std::chrono::seconds(10));
  }
  Json desired = ComputeForkStatus(fork, node, wait_reason, children, ctx_.clock->Now());
  RETURN_IF_ERROR(WriteStatusIfChanged(ctx_, kube::SandboxForkResource(), fork, desired).status());
  return out;
}

}  // namespace kubicle::op
