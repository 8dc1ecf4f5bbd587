#!/usr/bin/env bash
# Checks the nested test host harness itself: a command's output and exit
# status come back, the test host has a nested-capable /dev/kvm, the hard
# timeout tears QEMU down (no process left behind), and a test host that
# falls silent is detected and the command rerun.
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
# A silent test host (its heartbeat stopped, as when it wedges) is killed
# and the command rerun in a fresh one; when every attempt wedges, 125.
log=$(mktemp)
"$run" --timeout 300 --wedge-after 40 --wedge-retries 1 -- sh -c \
  'for p in $(pgrep -x sleep); do kill -STOP "$(cut -d" " -f4 /proc/$p/stat)"; done; exec sleep 1000' \
  >/dev/null 2>"$log"
status=$?
grep -q "attempt 2" "$log" || { cat "$log"; fail "no second attempt after a wedge"; }
grep -q "wedged on every attempt" "$log" || { cat "$log"; fail "the final wedge was not reported"; }
rm -f "$log"
[ $status -eq 125 ] || fail "a wedged test host gave status $status, expected 125"

echo "harness-selftest: 3 passed, 0 failed"
