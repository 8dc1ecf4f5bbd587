#!/usr/bin/env bash
# linux tier: the main job's swarm (scripts/swarm-demo.sh) with the python
# Linux template, inside the nested test host: kubicle-node bakes the
# template from the real Linux guest (cold boot, a python warm-up, snapshot
# with a read-only rootfs), restores 3 sandboxes, runs python in each and
# sweeps the run. Passes when every sandbox answered and none remain.
#
#   e2e/nested/node-swarm-test.sh BUILD_DIR IMAGES_ENV
set -uo pipefail
build=$(realpath "$1")
images=$2
here=$(dirname "$0")
set -a
. "$images"
set +a
out=$(mktemp)
BUILD_DIR=$build KUBICLE_DEMO_GUEST=python KUBICLE_DEMO_COUNT=3 \
  "$here/run-in-testhost.py" --timeout 900 -- "$here/../../scripts/swarm-demo.sh" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
fail() { rm -f "$out"; echo "node-swarm-test: FAIL: $*"; exit 1; }
[ "$status" -eq 0 ] || fail "swarm-demo.sh exited with $status"
grep -q "for 3 sandboxes (0 failed)" "$out" || fail "not every sandbox answered"
grep -Eq "^sb-[0-9a-f]+ .* 0 +sb-[0-9a-f]+ 3\.[0-9]+" "$out" || fail "no python output in the table"
grep -q "; 0 remain" "$out" || fail "the sweep left sandboxes behind"
rm -f "$out"
echo "node-swarm-test: passed"
