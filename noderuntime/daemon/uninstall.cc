#include "noderuntime/daemon/uninstall.h"

#include <thread>
#include <vector>

namespace kubicle::noderuntime::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using kube::Json;

std::string Describe(const Json& o) {
  const Json& md = o["metadata"];
  std::string out = md.value("namespace", "") + "/" + md.value("name", "");
  std::string node = o.contains("status") ? o["status"].value("nodeName", "") : "";
  std::string phase = o.contains("status") ? o["status"].value("phase", "") : "";
  out += " (node " + (node.empty() ? std::string("none") : node) + ", phase " +
         (phase.empty() ? std::string("none") : phase) + ", finalizers " +
         (md.contains("finalizers") ? md["finalizers"].dump() : std::string("[]")) + ")";
  return out;
}

// Deletes every object of `r` not yet being deleted; the ones left
// (deleting or not), or the failure.
Result<std::vector<Json>> DeleteAll(kube::KubeClient& kube, const kube::Resource& r) {
  auto list = kube.List(r, "", {});
  if (kube::IsNotFound(list.status())) return std::vector<Json>{};  // no CRD: nothing of this kind
  if (!list.ok()) return list.status();
  std::vector<Json> left;
  for (const Json& o : (*list)["items"]) {
    const Json& md = o["metadata"];
    if (!md.contains("deletionTimestamp")) {
      kube::DeleteOptions opts;
      opts.propagation_policy = "Background";  // a fork's children go too
      Status s = kube.Delete(r, md.value("namespace", ""), md.value("name", ""), opts);
      if (kube::IsNotFound(s)) continue;
      if (!s.ok()) return s;
    }
    left.push_back(o);
  }
  return left;
}

}  // namespace

Status DeleteEverySandbox(kube::KubeClient& kube, const UninstallOptions& options) {
  const auto deadline = Clock::now() + options.timeout;
  Status last = Status::Ok();
  size_t announced = SIZE_MAX;
  while (true) {
    // Forks first: a fork being reconciled could otherwise add children.
    auto forks = DeleteAll(kube, kube::SandboxForkResource());
    Result<std::vector<Json>> sandboxes = forks.ok() ? DeleteAll(kube, kube::SandboxResource())
                                                     : Result<std::vector<Json>>(forks.status());
    if (sandboxes.ok()) {
      if (sandboxes->empty() && forks->empty()) {
        options.progress("no Sandbox is left");
        return Status::Ok();
      }
      if (sandboxes->size() != announced) {
        announced = sandboxes->size();
        options.progress("waiting for " + std::to_string(announced) +
                         " Sandboxes: their nodes tear the VMs down and release the finalizers");
      }
      last = Status::Ok();
    } else if (sandboxes.status().code() == StatusCode::kPermissionDenied) {
      return sandboxes.status();
    } else {
      last = sandboxes.status();  // the apiserver may come back before the deadline
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(options.poll);
  }
  if (!last.ok()) return Status::DeadlineExceeded("could not list Sandboxes: " + last.ToString());
  auto left = kube.List(kube::SandboxResource(), "", {});
  std::string names;
  if (left.ok()) {
    for (const Json& o : (*left)["items"]) names += (names.empty() ? "" : "; ") + Describe(o);
  }
  return Status::DeadlineExceeded(
      "Sandboxes still there after " + std::to_string(options.timeout.count() / 1000) + " s: " + names +
      ". Their nodes did not tear the VMs down (a node that is down cannot); see docs/helm.md, "
      "\"Uninstall\"");
}

}  // namespace kubicle::noderuntime::daemon
