#!/usr/bin/env bash
# Guest-to-host TCP throughput and round trip of the Linux python guest under
# kubicle-vmm and under QEMU (userspace virtio-net, without offloads, and
# vhost-net), side by side in one nested test host (kubicle-bench-net-linux,
# docs/testing.md "Benchmarks in the linux tier"). Prints figures only.
#
#   bench/linux/net-bench.sh [BENCH_ARGS...]     e.g. --runs 5 --mib 128
#
# BUILD_DIR (default build) must hold a build with kubicle-bench-net-linux
# (ninja -C build kubicle-bench-net-linux); the guest images and the test
# host are built or reused from ~/.cache/kubicle (the linux_images fixture's
# prepare-images.sh).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath "${BUILD_DIR:-$top/build}")
bench=$build/bench/linux/kubicle-bench-net-linux
[ -x "$bench" ] || { echo "net-bench: $bench is missing (ninja -C $build kubicle-bench-net-linux)"; exit 2; }
images=$build/e2e/nested/images.env
"$top/e2e/nested/prepare-images.sh" "$build/guest/agent/kubicle-agent" "$images" >&2
exec "$top/e2e/nested/run-in-testhost.py" --timeout 1800 -- "$bench" --images "$images" "$@"
