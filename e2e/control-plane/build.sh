#!/usr/bin/env bash
# Builds the real Kubernetes control plane used by Kubicle's e2e tests and
# benchmarks -- etcd, kube-apiserver, kube-controller-manager, kubectl and
# helm -- and a real node's kubelet and kube-scheduler (the same pinned
# k8s.io/kubernetes) and crictl to inspect that node, from Go modules
# fetched by the Go toolchain through the module proxy it is configured with
# (`go env GOPROXY`: $GOPROXY or `go env -w`; no GitHub releases, no
# dl.k8s.io, no registry address in this script).
# Versions are pinned below; the binaries land in
#   ${KUBICLE_CACHE:-~/.cache/kubicle}/control-plane/<version-key>/bin
# and are reused while the stamp file there says they are complete. A cache
# built before a binary joined the list rebuilds only the missing ones.
#
# Usage: e2e/control-plane/build.sh [--print-bin-dir] [--force]
#   --print-bin-dir  print the bin directory and exit (0 if complete, 1 if not)
#   --force          rebuild even when the stamp is present
# Environment: GO (default /usr/local/go/bin/go), KUBICLE_CACHE,
#   KUBICLE_BUILD_JOBS (go build -p, default 2), KUBICLE_BUILD_NICE (default 19);
#   the toolchain's own GOPROXY, GONOSUMDB, GOFLAGS, ... apply as usual.
set -euo pipefail

KUBE_VERSION=v1.36.3       # k8s.io/kubernetes
STAGING_VERSION=v0.36.3    # every k8s.io/* staging module, pinned by replace
ETCD_VERSION=v3.6.16       # go.etcd.io/etcd/server/v3 (what 1.36 runs on)
HELM_VERSION=v3.21.4       # helm.sh/helm/v3 (built against k8s 0.36)
CRI_TOOLS_VERSION=v1.36.0  # sigs.k8s.io/cri-tools: crictl, the CRI's own CLI

GO=${GO:-/usr/local/go/bin/go}
JOBS=${KUBICLE_BUILD_JOBS:-2}
NICE=${KUBICLE_BUILD_NICE:-19}
CACHE=${KUBICLE_CACHE:-$HOME/.cache/kubicle}
KEY="k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}"
ROOT="$CACHE/control-plane/$KEY"
BIN="$ROOT/bin"
STAMP="$ROOT/.complete"
LOG="$ROOT/build.log"
BINARIES=(etcd kube-apiserver kube-controller-manager kubectl helm kubelet kube-scheduler crictl)

# crictl's version is not in the key (it was added to a keyed cache later):
# a marker beside it says which one it is, and another version rebuilds it.
CRICTL_MARK="$BIN/.crictl-$CRI_TOOLS_VERSION"

complete() {
  [[ -f "$STAMP" && -f "$CRICTL_MARK" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
}

force=0
for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN"; complete && exit 0 || exit 1 ;;
    --force) force=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

if [[ $force == 0 ]] && complete; then
  echo "control plane: reusing $BIN"
  exit 0
fi

mkdir -p "$BIN" "$ROOT/src"
# One builder at a time (CI and a developer may start it together).
exec 9>"$ROOT/.lock"
flock 9
if [[ $force == 0 ]] && complete; then
  echo "control plane: reusing $BIN (built by a concurrent run)"
  exit 0
fi
rm -f "$STAMP"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
start=$(date +%s)
echo "control plane: building $KEY into $BIN (log: $LOG)"
echo "=== build started $(date -u) with $($GO version), GOPROXY=$($GO env GOPROXY)" >>"$LOG"

elapsed() { echo "$(( $(date +%s) - start ))s"; }

# Runs a go command at low priority; prints a progress line every 100
# packages compiled so the caller sees it is alive.
gorun() {
  echo "+ go $*" >>"$LOG"
  nice -n "$NICE" "$GO" "$@" 2>&1 | tee -a "$LOG" |
    awk '{ n++; if (n % 100 == 0) { printf "    ... %d packages\n", n; fflush() } }'
}

# build <binary> <module-dir> <package> [ldflags]
build() {
  local name=$1 dir=$2 pkg=$3 ldflags=${4:-}
  if [[ -x "$BIN/$name" && $force == 0 ]]; then
    echo "  [$(elapsed)] $name: already built"
    return
  fi
  echo "  [$(elapsed)] $name: building $pkg"
  (cd "$dir" && gorun build -mod=mod -p "$JOBS" -v -trimpath \
      -ldflags "-s -w $ldflags" -o "$BIN/$name.tmp" "$pkg")
  mv "$BIN/$name.tmp" "$BIN/$name"
  echo "  [$(elapsed)] $name: done"
}

# A throwaway wrapper module per tool, so each builds with exactly the
# dependency versions its own go.mod asks for.
wrapper() {
  local dir=$1; shift
  mkdir -p "$dir"
  printf 'module kubicle.dev/controlplane/%s\n\ngo 1.26.0\n\n' "$(basename "$dir")" >"$dir/go.mod"
  printf '%s\n' "$@" >>"$dir/go.mod"
  : >"$dir/go.sum"
  printf 'package tools\n' >"$dir/tools.go"
}

# --- etcd --------------------------------------------------------------------
wrapper "$ROOT/src/etcd" "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
build etcd "$ROOT/src/etcd" go.etcd.io/etcd/server/v3

# --- kubernetes --------------------------------------------------------------
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with ./staging paths, which do not apply to a dependency: pin each one to the
# published matching release instead.
# The toolchain fetches the module (the build needs it anyway) and checks it
# against the checksum database; its JSON names the go.mod in the cache.
kmod=$(cd "$ROOT/src" && "$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[[ -s "$kmod" ]] || { echo "go mod download k8s.io/kubernetes@$KUBE_VERSION gave no go.mod" >&2; exit 1; }
replaces=()
for m in $(sed -n '/^replace (/,/^)/p' "$kmod" | awk '/=>/ {print $1}'); do
  grep -qE "^\s+$m v0\.0\.0" "$kmod" || continue   # not in the build graph
  replaces+=("replace $m => $m $STAGING_VERSION")
done
wrapper "$ROOT/src/kube" "require k8s.io/kubernetes $KUBE_VERSION" "${replaces[@]}"
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kv="k8s.io/component-base/version"
kflags="-X $kv.gitVersion=$KUBE_VERSION -X $kv.gitMajor=1 -X $kv.gitMinor=$minor"
kflags+=" -X $kv.gitTreeState=clean -X $kv.buildDate=1970-01-01T00:00:00Z"
for b in kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet; do
  build "$b" "$ROOT/src/kube" "k8s.io/kubernetes/cmd/$b" "$kflags"
done

# --- helm --------------------------------------------------------------------
wrapper "$ROOT/src/helm" "require helm.sh/helm/v3 $HELM_VERSION"
build helm "$ROOT/src/helm" helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"

# --- crictl -------------------------------------------------------------------
[[ -f "$CRICTL_MARK" ]] || rm -f "$BIN/crictl"
wrapper "$ROOT/src/cri-tools" "require sigs.k8s.io/cri-tools $CRI_TOOLS_VERSION"
build crictl "$ROOT/src/cri-tools" sigs.k8s.io/cri-tools/cmd/crictl \
  "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION"
rm -f "$BIN"/.crictl-*
: >"$CRICTL_MARK"

total=$(( $(date +%s) - start ))
{
  echo "key=$KEY"
  echo "go=$($GO env GOVERSION)"
  echo "seconds=$total"
  echo "date=$(date -u +%FT%TZ)"
} >"$STAMP"
echo "control plane: built in ${total}s -> $BIN"
