// Pure functions behind the Workspace reconciler: the operator-owned part of
// a Workspace's status recomputed from the world (its placement, token
// Secret, the Sandboxes holding it and the node-reported status.disk), and
// which Sandboxes hold a workspace.
#pragma once

#include <string>
#include <vector>

#include "operator/api.h"

namespace kubicle::op {

struct WorkspaceFacts {
  std::string node;              // placement ("" = not placed)
  std::string schedule_reason;   // why not placed (CamelCase), when node == ""
  std::string schedule_message;
  std::string token_secret;
  std::string token_sha256;
  std::string token_problem_reason;  // as SandboxFacts: no token can be published
  std::string token_problem;
  std::vector<std::string> holders;  // Sandboxes (names) placed with it attached
  std::string node_lost;             // its node is gone past the grace period
  bool placed_now = false;
};

// {observedGeneration, phase, nodeName, tokenSecretName, tokenSha256,
//  attachedTo, bytesUsed, conditions}: never status.disk (the node's).
// Fields without a value are null, so the merge patch clears stale ones.
Json ComputeWorkspaceStatus(const WorkspaceView& ws, const WorkspaceFacts& facts, kube::TimePoint now);

// Sandbox names (sorted) in the workspace's namespace that reference it and
// are placed on a node (label kubicle.dev/node): they hold it, or are being
// torn down and may still, so no other Sandbox may be placed with it.
std::vector<std::string> WorkspaceHolders(const std::vector<Json>& sandboxes, const std::string& ns,
                                          const std::string& workspace);

// Name of a Workspace's token Secret: not "<name>-token", which a Sandbox of
// the same name uses (an agent's Sandbox and Workspace often share a name).
std::string WorkspaceTokenSecretName(const std::string& workspace_name);
inline constexpr std::string_view kWorkspaceTokenSecretType = "kubicle.dev/workspace-token";

// The node's name of a Workspace with UID `uid` ("w-<uid>"): object names
// are DNS subdomains of up to 253 characters and may repeat across
// namespaces; node workspace names are DNS labels, and a UID is unique.
std::string WorkspaceNodeName(const std::string& uid);

}  // namespace kubicle::op
