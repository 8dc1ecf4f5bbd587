#!/usr/bin/env bash
# The main job: installs dependencies, builds everything, boots the test guest
# under kubicle-vmm on this machine's KVM, pings its agent over vsock and
# prints the round trip. (Grows into the swarm demo with kubicle-node.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec "${BUILD_DIR:-build}/bench/vmm/kubicle-demo"
