// Pure functions behind the Sandbox reconciler: when a Sandbox expires, and
// the operator-owned part of its status recomputed from the world (the
// object, its placement, expiry, token and the node-reported status.vm).
#pragma once

#include <optional>
#include <string>

#include "operator/api.h"

namespace kubicle::op {

// spec.expiresAt, else creationTimestamp + spec.ttlSeconds, else
// creationTimestamp + default_ttl; nullopt when it never expires (no TTL and
// a zero default) or the timestamps cannot be read.
std::optional<kube::TimePoint> ComputeExpiry(const SandboxView& sandbox, kube::Duration default_ttl);

struct SandboxFacts {
  std::string node;              // placement ("" = not placed)
  std::string schedule_reason;   // why not placed (CamelCase), when node == ""
  std::string schedule_message;
  std::optional<kube::TimePoint> expires;
  bool expired = false;
  std::string token_secret;
  std::string token_sha256;
  bool placed_now = false;  // placed by this pass (for the Scheduled event)
  // Set when the node's Lease is gone or expired beyond the grace period:
  // the VM cannot be reached (or torn down) any more, so the Sandbox fails.
  std::string node_lost;
  // Set when the token Secret's name is taken by a Secret this Sandbox does
  // not own (or one it owns without a token): no token can be published, so
  // the Sandbox fails with Ready False <token_problem_reason> until it is
  // resolved (the operator never deletes or overwrites such a Secret).
  std::string token_problem_reason;
  std::string token_problem;
};

// {observedGeneration, phase, nodeName, expiresAt, tokenSecretName,
//  tokenSha256, conditions}: never status.vm (the node's).
Json ComputeSandboxStatus(const SandboxView& sandbox, const SandboxFacts& facts, kube::TimePoint now);

// Phase from deletion state, placement and the node-reported VM state.
std::string ComputePhase(const SandboxView& sandbox, const std::string& node, bool node_lost = false);

}  // namespace kubicle::op
