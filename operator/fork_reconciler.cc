#include "operator/fork_reconciler.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/sha256.h"
#include "kube/json_fields.h"

namespace kubicle::op {

using kube::SandboxResource;

namespace {

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

Json DesiredForkChild(const SandboxForkView& fork, const SandboxView& source,
                      const std::string& node, int index) {
  Json labels = Json::object();
  for (std::string_view l : {kLabelRun, kLabelAgent, kLabelTemplate}) {
    if (std::string v = source.meta.Label(l); !v.empty()) labels[std::string(l)] = v;
  }
  if (std::string run = fork.meta.Label(kLabelRun); !run.empty()) labels[std::string(kLabelRun)] = run;
  for (const auto& [k, v] : fork.spec.child_labels) labels[k] = v;
  labels[std::string(kLabelForkOf)] = fork.meta.name;
  labels[std::string(kLabelNode)] = node;
  Json md = {{"name", ForkChildName(fork.meta.name, index)},
             {"labels", labels},
             // Placed at birth, so the teardown finalizer comes with it
             // (one write less per child than a later EnsureFinalizer).
             {"finalizers", Json::array({kFinalizer})},
             {"ownerReferences", Json::array({ControllerRef(fork.object)})}};
  if (!fork.spec.child_annotations.empty()) md["annotations"] = fork.spec.child_annotations;
  Json spec = {{"templateRef", {{"name", source.spec.template_name}}},
               {"forkSource", source.meta.name}};
  // Copied as written; their shape was checked when the source was parsed.
  // network too: a child never gets a wider egress than its source had.
  for (const char* f : {"env", "resources", "network"}) {
    if (const Json& v = kube::At(source.object, {"spec", f}); !v.is_null()) spec[f] = v;
  }
  // The client's own token of this child (spec.childTokenSha256): no
  // Secret for it. One the CRD should have refused is not copied: the
  // child gets a minted token rather than failing on the Sandbox's CRD.
  const auto& hashes = fork.spec.child_token_sha256;
  if (index >= 0 && static_cast<size_t>(index) < hashes.size() && IsSha256Hex(hashes[index])) {
    spec["tokenSha256"] = hashes[index];
  }
  if (fork.spec.ttl_seconds) {
    spec["ttlSeconds"] = *fork.spec.ttl_seconds;
  } else if (fork.spec.expires_at) {
    spec["expiresAt"] = *fork.spec.expires_at;
  } else if (!source.status.expires_at.empty()) {
    spec["expiresAt"] = source.status.expires_at;  // forks never outlive the source's TTL
  }
  return Json{{"metadata", md}, {"spec", spec}};
}

Json ComputeForkStatus(const SandboxForkView& fork, const std::string& node,
                       const ForkWait& wait, const std::vector<Json>& children,
                       kube::TimePoint now) {
  int ready = 0, failed = 0;
  Json list = Json::array();
  for (const Json& c : children) {
    std::string phase = StatusString(c, "phase");
    if (phase == "Running") ++ready;
    if (phase == "Failed") ++failed;
    list.push_back({{"name", Name(c)}, {"phase", phase.empty() ? "Pending" : phase}});
  }
  const int64_t want = fork.spec.replicas;
  std::string phase = !wait.reason.empty() ? "Pending"
                      : failed > 0         ? "Failed"
                      : ready >= want      ? "Ready"
                                           : "Forking";
  Condition c = phase == "Ready"
                    ? Condition{"Ready", "True", "AllReady", std::to_string(ready) + " forks running"}
                : phase == "Pending" ? Condition{"Ready", "False", wait.reason,
                                                wait.message.empty() ? "waiting for the source"
                                                                     : wait.message}
                : phase == "Failed"  ? Condition{"Ready", "False", "ForkFailed",
                                                std::to_string(failed) + " forks failed"}
                                     : Condition{"Ready", "False", "Forking",
                                                std::to_string(ready) + "/" + std::to_string(want) +
                                                    " forks running"};
  const int64_t gen = fork.meta.generation;
  // A spec it cannot read, a child's name taken by another object, or a
  // failed child need the user: Stalled. Waiting for the source is not.
  const bool stuck = phase == "Failed" || wait.reason == "InvalidSpec" || wait.reason == "NameConflict";
  const Progress progress = phase == "Ready" ? Progress::kSettled
                            : stuck          ? Progress::kStalled
                                             : Progress::kWorking;
  Json conds = SetProgress(SetCondition(fork.status.conditions, c, gen, now), progress, c, gen, now);
  Json st = {{"observedGeneration", gen},
             {"phase", phase},
             {"replicas", static_cast<int>(children.size())},
             {"readyReplicas", ready},
             {"failedReplicas", failed},
             {"children", list},
             {"conditions", conds}};
  if (!node.empty()) st["nodeName"] = node;
  return st;
}

std::vector<Json> ForkReconciler::Children(const SandboxForkView& fork) {
  std::vector<Json> out;
  const std::string& ns = fork.meta.ns;
  const std::string& uid = fork.meta.uid;
  ctx_.lister->ForEach(SandboxResource(), [&](const Json& s) {
    if (Namespace(s) == ns && IsControlledBy(s, uid)) out.push_back(s);
  });
  std::sort(out.begin(), out.end(), [&](const Json& a, const Json& b) {
    return IndexOf(fork.meta.name, a) < IndexOf(fork.meta.name, b);
  });
  return out;
}

Status ForkReconciler::EnsureChildren(const SandboxForkView& fork, const SandboxView& source,
                                      const std::string& node, std::vector<Json>* children) {
  std::set<std::string> have;
  for (const Json& c : *children) have.insert(Name(c));
  std::vector<Json> missing;
  for (int i = 0; i < fork.spec.replicas; ++i) {
    Json child = DesiredForkChild(fork, source, node, i);
    if (!have.count(Name(child))) missing.push_back(std::move(child));
  }
  // Creates go out side by side: a 20-way fork is 20 round trips to the
  // apiserver, and its children are forked together only once they exist.
  std::vector<Result<Json>> results(missing.size(), Status::Internal("not sent"));
  ParallelFor(missing.size(), kParallelCreates, [&](size_t i) {
    results[i] = ctx_.client->Create(SandboxResource(), fork.meta.ns, missing[i]);
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
    auto existing = ctx_.client->Get(SandboxResource(), fork.meta.ns, Name(child));
    if (existing.ok() && !IsControlledBy(*existing, fork.meta.uid)) {
      return Status::AlreadyExists("Sandbox " + Name(child) + " exists and is not owned by this fork");
    }
    if (existing.ok()) children->push_back(*existing);
  }
  return Status::Ok();
}

Status ForkReconciler::ScaleDown(const SandboxForkView& fork, std::vector<Json>* children) {
  std::vector<Json> keep;
  for (const Json& c : *children) {
    if (IndexOf(fork.meta.name, c) < fork.spec.replicas) {
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
  const SandboxForkView fork = SandboxForkView::Parse(std::move(*got));
  std::vector<Json> children = Children(fork);
  const std::string& ns = fork.meta.ns;
  std::optional<Json> found =
      ctx_.lister->Get(SandboxResource(), kube::ObjectKey(ns, fork.spec.source_name));
  std::optional<SandboxView> source;
  if (found) source = SandboxView::Parse(std::move(*found));
  std::string node = source ? source->meta.Label(kLabelNode) : "";
  ForkWait wait;
  if (!fork.problems.empty()) {
    wait = {"InvalidSpec", JoinProblems(fork.problems)};  // a spec we cannot read forks nothing
  } else if (!source) {
    wait.reason = "SourceNotFound";
  } else if (source->meta.deleting) {
    wait.reason = "SourceDeleting";
  } else if (node.empty()) {
    wait.reason = "SourceNotScheduled";
  }
  Outcome out;
  if (wait.reason.empty()) {
    Status s = EnsureChildren(fork, *source, node, &children);
    if (kube::IsAlreadyExists(s)) {
      ctx_.Event(fork.object, "Warning", "NameConflict", s.message());
      wait = {"NameConflict", s.message()};
    } else {
      RETURN_IF_ERROR(s);
    }
    RETURN_IF_ERROR(ScaleDown(fork, &children));
  } else if (wait.reason != "InvalidSpec") {
    out.RequeueWithin(std::chrono::seconds(10));
  }
  Json desired = ComputeForkStatus(fork, node, wait, children, ctx_.clock->Now());
  RETURN_IF_ERROR(WriteStatusIfChanged(ctx_, kube::SandboxForkResource(), fork.object, desired).status());
  return out;
}

}  // namespace kubicle::op
