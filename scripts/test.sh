#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test tier
# (see docs/testing.md). CI runs exactly this through .ci/run.
#   scripts/test.sh            all tiers: unit kvm e2e linux
#   scripts/test.sh unit kvm   only these CTest labels
# Heavy artefacts (control plane, guest kernel, rootfs, test host) are built
# once into ~/.cache/kubicle, keyed by version, and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/install-deps.sh
scripts/build.sh
labels=("$@")
[ ${#labels[@]} -eq 0 ] && labels=(unit kvm e2e linux)
if [ ! -e /dev/kvm ]; then
  echo "test: /dev/kvm is absent: kvm- and linux-labelled tests will report themselves skipped"
fi
if [[ " ${labels[*]} " == *" e2e "* ]]; then
  echo "test: building or reusing the Kubernetes control plane for e2e"
  e2e/control-plane/build.sh
fi
regex=$(IFS='|'; echo "^(${labels[*]})\$")
echo "test: running CTest labels ${labels[*]}"
# The linux tier's fixture builds the guest images first (cached afterwards).
ctest --test-dir "$BUILD_DIR" -L "$regex" --output-on-failure -j 2 --timeout 3600
