#!/usr/bin/env bash
# The main job: installs dependencies, builds its binaries, builds or reuses
# the local Kubernetes control plane (e2e/control-plane/build.sh, cached in
# ~/.cache/kubicle), then runs scripts/kube-demo.sh: the images, a real
# kubelet node and `helm install` of the chart on that control plane,
# `kubectl apply -f examples/` (a SandboxTemplate and a swarm of Sandboxes
# with one run id), a command in each Sandbox through the data plane, a table
# of results, the sweep by label, `helm uninstall`.
# Its environment variables pass through:
#
#   KUBICLE_DEMO_MODE        chart (default) or host: operator and node as
#                            host processes (see scripts/kube-demo.sh)
#   KUBICLE_DEMO_COUNT       Sandboxes in the swarm (default 20)
#   KUBICLE_DEMO_GUEST       testguest or python (see scripts/kube-demo.sh)
#   KUBICLE_DEMO_IMAGE_ROOT  where the guest images go (see scripts/kube-demo.sh)
#
# scripts/swarm-demo.sh is the same swarm on kubicle-node alone (no
# Kubernetes).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Only what the main job runs and puts in the images, not every test.
BUILD_TARGETS="kubicle-operator kubicle-node kubicle-vmm kubicle-ext4 kubicle-nodectl \
  kubectl-kubicle kubicle-agent kubicle-testguest kubicle-e2e-cluster" scripts/build.sh
echo "demo: building or reusing the Kubernetes control plane (cached in ~/.cache/kubicle)"
e2e/control-plane/build.sh
exec scripts/kube-demo.sh
