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
  echo "test: /dev/kvm is absent: kvm-labelled tests and the e2e tests that run VMs will report" \
       "themselves skipped (the linux tier runs its own nested KVM under QEMU TCG)"
fi
# Each CTest run writes a JUnit file; scripts/ctest-summary.py counts and names
# the skipped tests from it and fails the run when one skipped on a host with
# /dev/kvm, /dev/net/tun and root (docs/testing.md, "Skips"). Passed tests'
# whole output goes in, for the cases a binary or pytest suite skipped inside.
run_ctest() {  # run_ctest DIR JUNIT ctest-args...
  local dir=$1 junit=$2 rc=0 summary=0
  shift 2
  rm -f "$junit"
  ctest --test-dir "$dir" --output-junit "$junit" --test-output-size-passed 4194304 \
        --test-output-truncation middle "$@" || rc=$?
  scripts/ctest-summary.py "$junit" || summary=$?
  [ "$rc" -ne 0 ] || rc=$summary
  return "$rc"
}
if [[ " ${labels[*]} " == *" e2e "* ]]; then
  echo "test: building or reusing the Kubernetes control plane for e2e"
  e2e/control-plane/build.sh
  # The chart's images (docs/helm.md, "Images"): rewritten only when changed.
  # With the linux tier the node image carries the Linux guest, whose kernel
  # and initramfs that tier builds anyway (the same cache): every run then
  # builds the same images, not one without the guest on a cold cache.
  if [[ " ${labels[*]} " == *" linux "* ]]; then
    scripts/build-images.sh --linux "$BUILD_DIR"
  else
    ninja -C "$BUILD_DIR" kubicle_images
  fi
fi
if [ ${#main_labels[@]} -gt 0 ]; then
  regex=$(IFS='|'; echo "^(${main_labels[*]})\$")
  echo "test: running CTest labels ${main_labels[*]}"
  # The linux tier's fixture builds the guest images first (cached afterwards).
  run_ctest "$BUILD_DIR" "$(realpath -m "$BUILD_DIR")/Testing/junit.xml" \
            -L "$regex" --output-on-failure -j 2 --timeout 3600
fi
if [[ " ${labels[*]} " == *" fuzz "* ]]; then
  scripts/fuzz.sh build
  echo "test: running CTest label fuzz (every fuzzer for a bounded time)"
  fuzz_dir=${FUZZ_BUILD_DIR:-build-fuzz}
  run_ctest "$fuzz_dir" "$(realpath -m "$fuzz_dir")/Testing/junit.xml" -L '^fuzz$' --output-on-failure -j 2
fi
