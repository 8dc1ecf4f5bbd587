#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test tier
# (see docs/testing.md). CI runs exactly this through .ci/run.
#   scripts/test.sh            all tiers: unit kvm e2e linux fuzz
#   scripts/test.sh unit kvm   only these CTest labels
# The fuzz tier (a bounded run of every fuzzer) is built with clang into its
# own directory by scripts/fuzz.sh.
# Heavy artefacts (control plane, guest kernel, rootfs, test host) are built
# once into ~/.cache/kubicle, keyed by version, and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
scripts/install-deps.sh
scripts/build.sh
labels=("$@")
[ ${#labels[@]} -eq 0 ] && labels=(unit kvm e2e linux fuzz)
main_labels=()
for l in "${labels[@]}"; do [ "$l" = fuzz ] || main_labels+=("$l"); done
if [ ! -e /dev/kvm ]; then
  echo "test: /dev/kvm is absent: kvm- and linux-labelled tests will report themselves skipped"
fi
if [[ " ${labels[*]} " == *" e2e "* ]]; then
  echo "test: building or reusing the Kubernetes control plane for e2e"
  e2e/control-plane/build.sh
fi
if [ ${#main_labels[@]} -gt 0 ]; then
  regex=$(IFS='|'; echo "^(${main_labels[*]})\$")
  echo "test: running CTest labels ${main_labels[*]}"
  # The linux tier's fixture builds the guest images first (cached afterwards).
  ctest --test-dir "$BUILD_DIR" -L "$regex" --output-on-failure -j 2 --timeout 3600
fi
if [[ " ${labels[*]} " == *" fuzz "* ]]; then
  scripts/fuzz.sh build
  echo "test: running CTest label fuzz (every fuzzer for a bounded time)"
  ctest --test-dir "${FUZZ_BUILD_DIR:-build-fuzz}" -L '^fuzz$' --output-on-failure -j 2
fi
