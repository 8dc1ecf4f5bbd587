#!/usr/bin/env bash
# The main job: installs dependencies, builds everything, then runs
# scripts/swarm-demo.sh (kubicle-node, the default template, a swarm of
# sandboxes with one run id, a sweep). Its environment variables pass through:
#
#   KUBICLE_DEMO_COUNT   sandboxes in the swarm (default 20)
#   KUBICLE_DEMO_GUEST   testguest or python (see scripts/swarm-demo.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec scripts/swarm-demo.sh
