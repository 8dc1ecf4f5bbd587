#!/usr/bin/env bash
# Checks the nested test host harness itself: a command's output and exit
# status come back, the test host has a nested-capable /dev/kvm, and the
# hard timeout tears QEMU down (no process left behind).
set -uo pipefail
run="$(dirname "$0")/run-in-testhost.py"
fail() { echo "harness-selftest: FAIL: $*"; exit 1; }

out=$("$run" --timeout 300 -- sh -c \
  'echo out-marker; test -c /dev/kvm && cat /sys/module/kvm_amd/parameters/nested; exit 3')
status=$?
[ $status -eq 3 ] || fail "exit status $status, expected 3"
echo "$out" | grep -qx out-marker || fail "command output missing: $out"
echo "$out" | grep -qx 1 || fail "kvm_amd nested=1 missing: $out"

log=$(mktemp)
"$run" --timeout 20 -- sleep 1000 >/dev/null 2>"$log"
status=$?
scratch=$(sed -n 's/.*scratch \(\/tmp\/kubicle-nested-[^)]*\)).*/\1/p' "$log" | head -n1)
rm -f "$log"
[ $status -eq 124 ] || fail "timeout gave status $status, expected 124"
[ -n "$scratch" ] || fail "the harness did not report its scratch directory"
sleep 1
if pgrep -f "kubicle.scratch=$scratch" >/dev/null; then
  pgrep -af "kubicle.scratch=$scratch"
  fail "QEMU survived the timeout"
fi
echo "harness-selftest: 2 passed, 0 failed"
