#!/usr/bin/env bash
# Builds kubicle-health (this folder: kstatus from sigs.k8s.io/cli-utils and
# gopher-lua, for the chart's Argo CD health checks) with the Go toolchain
# through the module proxy it is configured with, into
#   ${KUBICLE_CACHE:-~/.cache/kubicle}/health/<sha256 of go.sum and sources>/
# and reuses it while that key does not change. Prints the binary's path.
# Environment: GO (default /usr/local/go/bin/go), KUBICLE_CACHE,
#   KUBICLE_BUILD_NICE (default 19); the toolchain's GOPROXY etc. apply.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
GO=${GO:-/usr/local/go/bin/go}
CACHE=${KUBICLE_CACHE:-$HOME/.cache/kubicle}
key=$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)
dir="$CACHE/health/$key"
bin="$dir/kubicle-health"
if [[ -x "$bin" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [[ ! -x "$bin" ]]; then
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
     nice -n "${KUBICLE_BUILD_NICE:-19}" "$GO" build -mod=readonly -trimpath \
     -ldflags "-s -w" -o "$bin.tmp" .) >&2
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
