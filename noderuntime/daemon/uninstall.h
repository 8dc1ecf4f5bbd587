// `kubicle-node uninstall`: what the chart's pre-delete hook runs before
// Helm deletes the operator and the nodes (docs/helm.md, "Uninstall").
//
// Every Sandbox holds the finalizer kubicle.dev/vm-teardown until its node
// has torn its VM down. Once the operator and the nodes are gone nobody
// removes it, so a Sandbox deleted after an uninstall would hang forever,
// and a VM whose object is never deleted would run on. So the hook deletes
// every SandboxFork and every Sandbox in every namespace while the operator
// and the nodes still run, and waits until the nodes have torn each VM down
// and released each finalizer. Workspaces (durable disks) and
// SandboxTemplates are kept.
//
// Contracts: Sandboxes that appear while it runs (a fork's children) are
// deleted too; a list the apiserver cannot serve yet (Unavailable) is
// retried until the deadline; PermissionDenied ends it at once. No CRD
// (NotFound) means nothing to delete.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/status.h"
#include "kube/kube_client.h"

namespace kubicle::noderuntime::daemon {

struct UninstallOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(240)};
  std::chrono::milliseconds poll{std::chrono::seconds(1)};
  // Progress lines ("deleting 20 Sandboxes", "waiting for 3: ...").
  std::function<void(const std::string&)> progress = [](const std::string&) {};
};

// OK once no Sandbox is left; DeadlineExceeded naming each one left (with
// its node, phase and finalizers) when the timeout passes first.
Status DeleteEverySandbox(kube::KubeClient& kube, const UninstallOptions& options);

}  // namespace kubicle::noderuntime::daemon
