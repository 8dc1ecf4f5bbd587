// Every phase of every kind (Sandbox, SandboxTemplate, SandboxFork,
// Workspace) as a whole object whose status the operator's own pure
// functions computed, with the health GitOps tools must compute from it:
// kstatus (sigs.k8s.io/cli-utils, what Flux and kpt run) and the chart's Argo
// CD health checks (helm/kubicle/argocd/health-<Kind>.lua).
//
// operator/health_phases_test.cc checks the conditions of each case;
// kubicle-health-phases prints the cases as JSON lines, and the Go checker
// (e2e/health) computes both answers with the real kstatus library and a
// real Lua interpreter and compares (CTest health_phases). The e2e test
// (e2e/health_e2e_test.cc) asks the same of objects from a real apiserver.
#pragma once

#include <string>
#include <vector>

#include "operator/api.h"

namespace kubicle::op {

struct HealthCase {
  std::string kind;     // Sandbox, SandboxTemplate, SandboxFork, Workspace
  std::string phase;    // what the case is, e.g. "Failed (VM died)"
  Json object;          // apiVersion, kind, metadata, spec, status
  std::string kstatus;  // InProgress, Current, Failed, Terminating
  std::string argocd;   // Progressing, Healthy, Degraded, Suspended
};

// The cases, statuses computed at a fixed time by ComputeSandboxStatus,
// ComputeTemplateStatus, ComputeForkStatus and ComputeWorkspaceStatus (plus
// what the node writes: status.vm, status.disk, status.nodes[]).
std::vector<HealthCase> HealthCases();

// {"kind", "phase", "object", "kstatus", "argocd"}: one line of the checker's
// --expect input.
Json HealthCaseJson(const HealthCase& c);

}  // namespace kubicle::op
