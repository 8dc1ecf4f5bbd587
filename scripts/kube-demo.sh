#!/usr/bin/env bash
# The main job on the Kubernetes path: a local control plane
# (kubicle-e2e-cluster: etcd, kube-apiserver, kube-controller-manager) with a
# real node (containerd and a kubelet, e2e/harness/kubelet_node.h) and
# kube-scheduler, the images built from the tree (scripts/build-images.sh)
# imported into the node's containerd, and `helm install` of helm/kubicle
# (unmodified but for values): the operator Deployment elects a leader and
# the node DaemonSet's pod runs kubicle-node as demo-node. Then
# `kubectl apply -f examples/` (a SandboxTemplate and a swarm of 20 Sandboxes
# under kubicle.dev/run=demo), a wait until they are Ready, one command in
# each Sandbox through the node's data plane (the hostPort, TLS verified with
# the CA on its Lease) with that Sandbox's own token, a table of results, the
# sweep by label, and a check that no VM is left; on exit `helm uninstall` and
# the node's teardown, which must leave nothing on the host. Everything
# started here stops on exit, on failure too. Needs a build and the control
# plane (scripts/demo.sh does both).
#
# KUBICLE_DEMO_MODE=host runs kubicle-operator and kubicle-node as host
# processes instead (no kubelet, no images, no chart: quicker for
# development).
#
#   BUILD_DIR                the CMake build directory (default build)
#   KUBICLE_DEMO_MODE        chart (default) or host (see above)
#   KUBICLE_DEMO_COUNT       Sandboxes in the swarm (default 20, the count in
#                            examples/swarm.yaml; others are generated)
#   KUBICLE_DEMO_GUEST       testguest (default where /dev/kvm is itself
#                            virtualised) or python (examples/python/: the
#                            Linux guest, built and cached by guest/linux/)
#   KUBICLE_DEMO_ROLLOUT     1 (default): in chart mode, a helm upgrade that
#                            replaces the node's pod while the swarm runs,
#                            which must keep every VM and its files; 0 skips
#   KUBICLE_DEMO_OPERATOR_ROLLOUT  1 (default): in chart mode, more Sandboxes
#                            applied while the operator Deployment restarts;
#                            each must come Ready and answer; 0 skips
#   KUBICLE_DEMO_IMAGE_ROOT  where the guest images go, the node's
#                            --image-root (default /var/lib/kubicle/images/demo,
#                            the path in the examples; another one gets
#                            rewritten copies of the template)
#
# Exit status: 0 done, 1 a step failed (its log's tail is printed), 77 a
# prerequisite is missing (/dev/kvm, the control plane binaries; in chart
# mode also root, the kubelet and containerd).
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(realpath "${BUILD_DIR:-build}")
count=${KUBICLE_DEMO_COUNT:-20}
mode=${KUBICLE_DEMO_MODE:-chart}
guest=${KUBICLE_DEMO_GUEST:-}
default_images=/var/lib/kubicle/images/demo
images=${KUBICLE_DEMO_IMAGE_ROOT:-$default_images}
run=demo                     # the kubicle.dev/run label of examples/swarm.yaml
sel=kubicle.dev/run=$run
node=demo-node
say() { echo "demo: $*"; }

# --- failure reporting and cleanup -----------------------------------------

scratch=$(mktemp -d /tmp/kubicle-kube-demo-XXXXXX)
logs=$scratch/logs
state=$scratch/node
mkdir -p "$logs"
cluster_pid="" operator_pid="" node_pid="" watch_pid="" cp_dir="" node_dir="" installed=""

# die LOG MESSAGE: says what failed, shows the tail of LOG, exits 1.
die() {
  local log=$1
  shift
  say "FAILED: $*"
  [ "$mode" = chart ] && pod_logs
  if [ -n "$log" ] && [ -s "$log" ]; then
    say "last lines of $log:"
    tail -n 40 "$log" | sed 's/^/  | /'
  fi
  exit 1
}
trap 'rc=$?; say "FAILED: line $LINENO: \"$BASH_COMMAND\" exited $rc"; exit 1' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# stop PID NAME SECONDS: SIGTERM, then SIGKILL after SECONDS.
stop() {
  local pid=$1 name=$2 secs=$3 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < secs * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name did not stop in $secs s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null   # its exit status
}

# Chart mode: the operator's and the node's pod logs into $logs (what die()
# shows), through the kubelet.
pod_logs() {
  [ -n "$cp_dir" ] && [ -n "${KUBECONFIG:-}" ] || return 0
  "$kubectl" logs -n kubicle-system -l app.kubernetes.io/component=node --tail=-1 \
    >"$logs/node.log" 2>&1 || true
  "$kubectl" logs -n kubicle-system -l app.kubernetes.io/component=operator --tail=-1 \
    --prefix >"$logs/operator.log" 2>&1 || true
}

# Chart mode, after helm uninstall: what the node pod left on the host. A VM,
# or the sandbox network's host table or veths (kubicle-node keeps them only
# while VMs run, for the next pod), fails the demo; what is left is removed.
uninstall_leftovers() {
  local vmms tag links
  vmms=$(node_vmms)
  if [ -n "$vmms" ]; then
    say "FAILED: kubicle-vmm processes of $state outlived helm uninstall: $(echo $vmms)"
    return 1
  fi
  tag=$(printf %s "$state" | sha256sum | cut -c1-4)   # noderuntime SandboxNetworkTag
  links=$(ip -o link show 2>/dev/null | awk -F': ' -v t="kh$tag-" 'index($2, t) == 1 {sub(/@.*/, "", $2); print $2}')
  if nft list table ip "kubicle_$tag" >/dev/null 2>&1 || [ -n "$links" ]; then
    say "FAILED: helm uninstall left the node's host network: table ip kubicle_$tag${links:+, veths $(echo $links)}; removing them"
    nft delete table ip "kubicle_$tag" 2>/dev/null
    for l in $links; do ip link delete "$l" 2>/dev/null; done
    return 1
  fi
  say "after helm uninstall: no VM of $state is running"
}

# kubicle-vmm processes of this node's state directory.
node_vmms() { pgrep -f -- "kubicle-vmm .*$state/" || true; }

cleanup() {
  local rc=$? left
  trap - ERR
  set +e
  if [ -z "$cluster_pid" ]; then   # nothing was started
    rm -rf "$scratch"
    [ $rc -eq 0 ] || [ $rc -eq 77 ] || say "the demo FAILED (exit $rc)"
    exit $rc
  fi
  [ -n "$watch_pid" ] && stop "$watch_pid" "kubectl wait" 2
  if [ "$mode" = chart ]; then
    pod_logs
    if [ -n "$installed" ]; then
      say "helm uninstall kubicle"
      "$helm" uninstall kubicle -n kubicle-system --wait --timeout 180s >"$logs/helm-uninstall.log" 2>&1 ||
        { say "FAILED: helm uninstall: $(tail -n 3 "$logs/helm-uninstall.log" | tr '\n' ' ')"; rc=1; }
      uninstall_leftovers || rc=1
    fi
    say "stopping the node (kubelet, containerd, every pod) and the control plane"
    if ! stop "$cluster_pid" kubicle-e2e-cluster 90; then
      say "FAILED: the node's teardown: $(tail -n 5 "$logs/cluster.log" | tr '\n' ' ')"
      rc=1
    fi
    if [ -n "$node_dir" ] && [ -e "$node_dir" ]; then
      # Kept for its logs (KUBICLE_E2E_KEEP): nothing else may be left.
      for f in "$node_dir"/*.log; do [ -e "$f" ] && cp "$f" "$logs/node-$(basename "$f")"; done
      if [ -n "$(find "$node_dir" -mindepth 1 ! -name '*.log' -print -quit)" ]; then
        say "FAILED: the node's teardown left files in $node_dir"
        rc=1
      fi
      rm -rf "$node_dir"
    fi
    # The node's parent cgroup when its VMs live in the host's hierarchy
    # (kubicle-<sha256 of the state dir>, noderuntime/daemon/main.cc): it too
    # must go with the uninstall. Removed here when left, so the host stays
    # clean for the next run.
    cg_left=$(find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d \
                -name "kubicle-$(printf %s "$state" | sha256sum | cut -c1-12)" 2>/dev/null)
    if [ -n "$cg_left" ]; then
      say "FAILED: cgroups of the node outlived helm uninstall and its teardown: $(echo $cg_left | head -c 300)"
      for d in $cg_left; do find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; done
      rc=1
    fi
  else
    say "stopping kubicle-node, kubicle-operator and the control plane"
    stop "$node_pid" kubicle-node 30      # --stop-vms-on-exit: its VMs go with it
    stop "$operator_pid" kubicle-operator 10
    stop "$cluster_pid" kubicle-e2e-cluster 30
  fi
  # The swarm's VM cgroups (k-<uid>, wherever the node made them: under
  # its pod's group or the host's): none may outlive the teardown.
  if [ -s "$scratch/uids" ]; then
    left=$(while read -r uid; do
             find /sys/fs/cgroup -maxdepth 10 -type d -name "k-$uid" 2>/dev/null
           done <"$scratch/uids")
    if [ -n "$left" ]; then
      say "FAILED: VM cgroups outlived the node: $(echo $left | head -c 300)"
      rc=1
    fi
  fi
  left=$(node_vmms)
  if [ -n "$left" ]; then
    say "FAILED: kubicle-vmm processes of $state outlived kubicle-node: $(echo $left); killing them"
    kill -KILL $left 2>/dev/null
    rc=1
  fi
  if [ -n "$cp_dir" ] && [ -d "$cp_dir" ]; then
    for f in "$cp_dir"/*.log; do [ -e "$f" ] && cp "$f" "$logs/cp-$(basename "$f")"; done
    if [ -n "$(pgrep -f -- "$cp_dir/")" ]; then
      say "FAILED: control plane processes of $cp_dir are still running"
      rc=1
    fi
    rm -rf "$cp_dir"
  fi
  rm -rf "$state"
  say "logs in $logs: $(cd "$logs" && echo *)"
  if [ $rc -eq 0 ]; then
    say "done: nothing left running"
  elif [ $rc -ne 77 ]; then
    say "the demo FAILED (exit $rc)"
  fi
  exit $rc
}
trap cleanup EXIT

# --- prerequisites ----------------------------------------------------------

[ -e /dev/kvm ] || { say "/dev/kvm is absent: no VM can run here (skipped)"; exit 77; }
# Where kubicle-e2e-cluster looks too: $KUBICLE_CONTROL_PLANE_BIN, else the cache.
cp_bin=${KUBICLE_CONTROL_PLANE_BIN:-$(e2e/control-plane/build.sh --print-bin-dir || true)}
case $mode in
  chart) cp_need=(etcd kube-apiserver kube-controller-manager kubectl helm kube-scheduler kubelet crictl) ;;
  host) cp_need=(etcd kube-apiserver kube-controller-manager kubectl) ;;
  *) die "" "KUBICLE_DEMO_MODE must be chart or host, not '$mode'" ;;
esac
if [ "$mode" = chart ]; then
  [ "$(id -u)" = 0 ] || { say "the chart mode runs a kubelet node: it needs root (skipped; KUBICLE_DEMO_MODE=host does not)"; exit 77; }
  [ -x /usr/bin/containerd ] || { say "containerd is missing: run scripts/install-deps.sh (skipped)"; exit 77; }
fi
for f in "${cp_need[@]}"; do
  if [ ! -x "$cp_bin/$f" ]; then
    say "the control plane binaries are missing ($cp_bin/$f): run e2e/control-plane/build.sh (skipped)"
    exit 77
  fi
done
kubectl=$cp_bin/kubectl
helm=$cp_bin/helm
for f in e2e/kubicle-e2e-cluster operator/kubicle-operator noderuntime/daemon/kubicle-node \
         noderuntime/cli/kubicle-nodectl vmm/kubicle-vmm kubicle-testguest; do
  [ -x "$B/$f" ] || die "" "$B/$f is missing: build first (scripts/build.sh)"
done
case $count in
  '' | *[!0-9]* | 0*) die "" "KUBICLE_DEMO_COUNT must be a number from 1 to 500, not '$count'" ;;
esac
[ "$count" -le 500 ] || die "" "KUBICLE_DEMO_COUNT must be a number from 1 to 500, not '$count'"

if [ -z "$guest" ]; then
  if grep -qw hypervisor /proc/cpuinfo; then
    guest=testguest
    say "this host's /dev/kvm is itself virtualised (CPU flag 'hypervisor'): using the"
    say "tiny test guest; KUBICLE_DEMO_GUEST=python uses the Linux python template"
  else
    guest=python
  fi
fi

# --- guest images under the node's image root ------------------------------

# place SRC NAME: SRC as $images/NAME (a hard link when it can be: the node
# refuses symlinks out of its image roots, and rootfs images are big).
place() {
  rm -f "$images/$2"
  ln "$1" "$images/$2" 2>/dev/null || cp "$1" "$images/$2"
}
mkdir -p "$images" 2>/dev/null && [ -w "$images" ] ||
  die "" "cannot write $images (the image root of examples/): run as root, or set" \
         "KUBICLE_DEMO_IMAGE_ROOT to a writable absolute directory"
images=$(realpath "$images")
case $guest in
  testguest)
    template=examples/template.yaml
    place "$B/kubicle-testguest" kubicle-testguest
    truncate -s 1M "$images/rootfs.img"   # the test guest only lists its disk
    command=(hostname)
    ready_timeout=$((120 + count)) bake_timeout=120 ;;
  python)
    template=examples/python/template.yaml
    say "building or reusing the Linux guest images (cached in ~/.cache/kubicle)"
    kernel=${KUBICLE_LINUX_KERNEL:-$(guest/linux/build-kernel.sh | tail -n1)}
    initramfs=${KUBICLE_LINUX_INITRAMFS:-$(guest/linux/build-initramfs.sh "$B/guest/agent/kubicle-agent" | tail -n1)}
    rootfs=${KUBICLE_LINUX_ROOTFS_PYTHON:-$(guest/linux/build-rootfs.sh python | tail -n1)}
    place "$kernel" vmlinux
    place "$initramfs" initramfs.cpio
    place "$rootfs" rootfs-python.ext4
    command=(python3 -c 'import socket, sys; print(socket.gethostname(), "python", sys.version.split()[0])')
    ready_timeout=$((300 + 5 * count)) bake_timeout=900 ;;
  *) die "" "KUBICLE_DEMO_GUEST must be testguest or python, not '$guest'" ;;
esac
say "guest images ($guest) in $images"

# The manifests: examples/ itself when they fit, else rewritten copies.
manifests=$scratch/manifests
mkdir -p "$manifests"
if [ "$images" = "$default_images" ]; then
  cp "$template" "$manifests/template.yaml"
else
  sed "s|$default_images/|$images/|" "$template" >"$manifests/template.yaml"
fi
if [ "$count" -eq 20 ]; then
  cp examples/swarm.yaml "$manifests/swarm.yaml"
else
  for ((i = 0; i < count; i++)); do
    printf -- '---\napiVersion: kubicle.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: agent-%02d\n  labels:\n    kubicle.dev/run: %s\n    kubicle.dev/agent: agent-%02d\nspec:\n  templateRef:\n    name: demo\n  ttlSeconds: 3600\n' \
      "$i" "$run" "$i"
  done >"$manifests/swarm.yaml"
fi
if [ "$guest" = testguest ] && [ "$images" = "$default_images" ] && [ "$count" -eq 20 ]; then
  apply=(-f examples/)
else
  apply=(-f "$manifests/")
fi

# --- the control plane, the operator and the node --------------------------

# Every sandbox gets its own network namespace (the node's default), on a
# CIDR no other node on this host uses. Without root there is none to be
# had: said here, and the node runs with the network off.
. scripts/sandbox-cidr.sh
if [ "$(id -u)" = 0 ]; then
  take_sandbox_cidr || exit 2
  net_flags=(--sandbox-network-cidr="$SANDBOX_CIDR")
  say "sandbox network on: each sandbox in its own namespace, CIDR $SANDBOX_CIDR"
else
  net_flags=(--sandbox-network=off)
  say "not root: kubicle-node runs with --sandbox-network=off (sandboxes have no network)"
fi
k() { "$kubectl" "$@"; }

if [ "$mode" = chart ]; then
  t0=$SECONDS
  say "building or reusing the images (scripts/build-images.sh)"
  scripts/build-images.sh "$B" >"$logs/images.log" 2>&1 || die "$logs/images.log" "building the images failed"
  tag=$(sed -n 's/^appVersion: *"*\([^"]*\)"*$/\1/p' helm/kubicle/Chart.yaml)
  archives=("$B/images/kubicle-operator-$tag.oci.tar" "$B/images/kubicle-node-$tag.oci.tar")
  for a in "${archives[@]}"; do [ -s "$a" ] || die "$logs/images.log" "scripts/build-images.sh wrote no $a"; done
  say "images ready in $((SECONDS - t0)) s: $(cd "$B/images" && ls -s --block-size=M kubicle-*-"$tag".oci.tar | awk '{printf "%s%s %s", sep, $2, $1; sep = ", "}')"
  t0=$SECONDS
  say "starting the local control plane and a real node $node (containerd, kubelet, kube-scheduler)"
fi
cluster_args=()
[ "$mode" = chart ] && cluster_args=(--no-crds "--kubelet-node=$node" --node-label=kubicle.dev/kvm=true)
[ "$mode" = host ] && say "starting the local control plane (etcd, kube-apiserver, kube-controller-manager, CRDs)"
KUBICLE_E2E_KEEP=1 KUBICLE_CONTROL_PLANE_BIN=$cp_bin "$B/e2e/kubicle-e2e-cluster" "${cluster_args[@]}" \
  >"$logs/cluster.log" 2>&1 &
cluster_pid=$!
deadline=$((SECONDS + 300))
ready_line='^KUBECONFIG='
[ "$mode" = chart ] && ready_line='^CONTAINERD_SOCKET='
until grep -q "$ready_line" "$logs/cluster.log"; do
  [ -z "$cp_dir" ] && grep -q '^KUBECONFIG=' "$logs/cluster.log" &&
    cp_dir=$(dirname "$(sed -n 's/^KUBECONFIG=//p' "$logs/cluster.log")")
  kill -0 "$cluster_pid" 2>/dev/null || die "$logs/cluster.log" "kubicle-e2e-cluster exited"
  [ $SECONDS -lt $deadline ] || die "$logs/cluster.log" "the control plane did not come up in 300 s"
  sleep 0.2
done
export KUBECONFIG
KUBECONFIG=$(sed -n 's/^KUBECONFIG=//p' "$logs/cluster.log")
cp_dir=$(dirname "$KUBECONFIG")
say "control plane up: KUBECONFIG=$KUBECONFIG"

if [ "$mode" = chart ]; then
  node_ip=$(sed -n 's/^NODE_IP=//p' "$logs/cluster.log")
  node_dir=$(sed -n 's/^NODE_DIR=//p' "$logs/cluster.log")
  sock=$(sed -n 's/^CONTAINERD_SOCKET=//p' "$logs/cluster.log")
  say "node $node Ready in $((SECONDS - t0)) s at $node_ip (its files: $node_dir)"
  for a in "${archives[@]}"; do
    ctr --address "$sock" -n k8s.io images import "$a" >>"$logs/ctr-import.log" 2>&1 ||
      die "$logs/ctr-import.log" "ctr images import $a failed"
  done
  say "imported into the node's containerd: $(ctr --address "$sock" -n k8s.io images ls -q | grep kubicle- | tr '\n' ' ')"
  state=$node_dir/kubicle   # the node's hostPath state directory, swept with the node
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
  say "helm install kubicle helm/kubicle (namespace kubicle-system, image tag $tag, data plane on hostPort $port)"
  t0=$SECONDS
  installed=1
  "$helm" install kubicle helm/kubicle -n kubicle-system --create-namespace \
    --set image.tag="$tag" --set node.stateDir="$state" --set "node.imageRoots={$images}" \
    --set node.dataPlanePort="$port" --set node.network.cidr="$SANDBOX_CIDR" \
    --wait --timeout 300s >"$logs/helm-install.log" 2>&1 ||
    { pod_logs; k get pods -A -o wide >>"$logs/helm-install.log" 2>&1; die "$logs/helm-install.log" "helm install failed"; }
  say "helm install done in $((SECONDS - t0)) s: $(k get pods -n kubicle-system --no-headers | awk '{printf "%s%s %s", sep, $1, $3; sep = ", "}')"
  deadline=$((SECONDS + 120))
  until leader=$(k get lease -n kubicle-system kubicle-operator-leader -o jsonpath='{.spec.holderIdentity}' 2>/dev/null) &&
        [ -n "$leader" ] && k get lease -n kubicle-node-lease "kubicle-node-$node" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { pod_logs; die "$logs/node.log" "no operator leader or no Lease of node $node in 120 s"; }
    sleep 1
  done
  say "operator leader: $leader; kubicle-node $node (the DaemonSet's pod) holds Lease kubicle-node-lease/kubicle-node-$node"
  node_url=https://$node_ip:$port
else
k create namespace kubicle-node-lease >/dev/null   # node heartbeats (the chart makes it)
say "starting kubicle-operator"
"$B/operator/kubicle-operator" --kubeconfig="$KUBECONFIG" --leader-elect=false --metrics-port=0 \
  >"$logs/operator.log" 2>&1 &
operator_pid=$!

say "starting kubicle-node --node-name=$node (state $state, images $images)"
"$B/noderuntime/daemon/kubicle-node" serve --node-name="$node" --kubeconfig="$KUBECONFIG" \
  --state-dir="$state" --listen=127.0.0.1:0 --advertise-address=127.0.0.1 --tls=on \
  --vmm="$B/vmm/kubicle-vmm" --image-root="$images" --stop-vms-on-exit "${net_flags[@]}" \
  >"$logs/node.log" 2>&1 &
node_pid=$!
deadline=$((SECONDS + 60))
until grep -q 'operator running' "$logs/operator.log" && grep -q '^listening on ' "$logs/node.log" &&
      k get lease -n kubicle-node-lease "kubicle-node-$node" >/dev/null 2>&1; do
  kill -0 "$operator_pid" 2>/dev/null || die "$logs/operator.log" "kubicle-operator exited"
  kill -0 "$node_pid" 2>/dev/null || die "$logs/node.log" "kubicle-node exited"
  [ $SECONDS -lt $deadline ] || die "$logs/node.log" "kubicle-node did not heartbeat its Lease in 60 s"
  sleep 0.2
done
node_url=$(sed -n 's/^listening on //p' "$logs/node.log")
say "kubicle-operator running; kubicle-node $node serving $node_url, Lease kubicle-node-lease/kubicle-node-$node"
fi

# A node's data plane is https when its Lease publishes the CA of its serving
# certificate (kubicle.dev/serving-ca): clients verify the node against it.
# Sets tls_scheme and tls_args (--ca-file FILE, or none for plain http) for
# node $1, fetching its Lease once.
declare -A node_ca_file=()
tls_of() {
  if [ -z "${node_ca_file[$1]:-}" ]; then
    local ca=$scratch/serving-ca-$1.pem
    k get lease -n kubicle-node-lease "kubicle-node-$1" \
      -o jsonpath='{.metadata.annotations.kubicle\.dev/serving-ca}' >"$ca"
    if [ -s "$ca" ]; then node_ca_file[$1]=$ca; else node_ca_file[$1]=-; fi
  fi
  if [ "${node_ca_file[$1]}" = - ]; then
    tls_scheme=http tls_args=()
  else
    tls_scheme=https tls_args=(--ca-file "${node_ca_file[$1]}")
  fi
}
tls_of "$node"
[ "$tls_scheme" = https ] || die "$logs/node.log" "kubicle-node --tls=on published no kubicle.dev/serving-ca on its Lease"
node_tls_args=("${tls_args[@]}")
say "the node's serving CA is on its Lease (kubicle.dev/serving-ca); kubicle-nodectl verifies the node against it"

alive() {
  kill -0 "$cluster_pid" 2>/dev/null || die "$logs/cluster.log" "the control plane exited"
  [ "$mode" = chart ] && return 0
  kill -0 "$operator_pid" 2>/dev/null || die "$logs/operator.log" "kubicle-operator exited"
  kill -0 "$node_pid" 2>/dev/null || die "$logs/node.log" "kubicle-node exited"
}

# --- apply, bake, wait ------------------------------------------------------

say "kubectl apply ${apply[*]}"
t_apply=$EPOCHREALTIME
k apply "${apply[@]}" | sed 's/^/  /'

say "node $node bakes SandboxTemplate demo (cold boot, warm-up, snapshot)"
t0=$SECONDS
k wait --for=condition=Ready sandboxtemplate/demo --timeout="${bake_timeout}s" >"$logs/kubectl-wait.log" 2>&1 &
watch_pid=$!
last=""
while kill -0 "$watch_pid" 2>/dev/null; do
  alive
  entry=$(k get sandboxtemplate demo -o jsonpath="{.status.nodes[?(@.nodeName==\"$node\")].phase} {.status.nodes[?(@.nodeName==\"$node\")].message}" 2>/dev/null || true)
  [ "$entry" != "$last" ] && [ -n "${entry// /}" ] && say "  template on $node: $entry"
  last=$entry
  [ "${entry%% *}" = Failed ] && die "$logs/node.log" "the template failed to bake on $node: ${entry#* }"
  sleep 1
done
wait "$watch_pid" || die "$logs/node.log" "SandboxTemplate demo not Ready in $bake_timeout s ($(cat "$logs/kubectl-wait.log"))"
watch_pid=""
say "template Ready in $((SECONDS - t0)) s: $(k get sandboxtemplate demo -o jsonpath='{.status.nodes[0].bakeSeconds}') s to bake on $node"

say "kubectl wait --for=condition=Ready sandbox -l $sel --timeout=${ready_timeout}s"
t0=$SECONDS
k wait --for=condition=Ready sandbox -l "$sel" --timeout="${ready_timeout}s" >"$logs/kubectl-wait.log" 2>&1 &
watch_pid=$!
last="" said=$SECONDS
while kill -0 "$watch_pid" 2>/dev/null; do
  alive
  phases=$(k get sandboxes -l "$sel" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' 2>/dev/null || true)
  ready=$(grep -c '^Running$' <<<"$phases" || true)
  summary=$({ grep -v '^Running$' <<<"$phases" || true; } | sort | uniq -c | awk 'NF == 2 {printf "%s%s %s", sep, $2, $1; sep = ", "}')
  line="$ready/$count Ready${summary:+ ($summary)}"
  # A line a second while it changes, else one every 5 s.
  if [ "$line" != "$last" ] || [ $((SECONDS - said)) -ge 5 ]; then
    say "  $line"
    last=$line said=$SECONDS
  fi
  if grep -q '^Failed$' <<<"$phases"; then
    k get sandboxes -l "$sel" -o jsonpath='{range .items[?(@.status.phase=="Failed")]}{.metadata.name}: {.status.vm.message}{"\n"}{end}' |
      head -n 5 | sed 's/^/  /'
    die "$logs/node.log" "Sandboxes failed"
  fi
  sleep 1
done
wait "$watch_pid" || die "$logs/node.log" "not every Sandbox was Ready in $ready_timeout s ($(tail -n 3 "$logs/kubectl-wait.log" | tr '\n' ' '))"
watch_pid=""
say "$count/$count Ready in $((SECONDS - t0)) s; apply -> all Ready: $(awk -v a="$t_apply" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s ($mode mode)"
if [ "$mode" = chart ]; then
  # The node pod's memory with the swarm running: its pod cgroup, the VMs'
  # cgroup parent (kubicle-<sha256 of the state dir>) when the node makes
  # their groups in the host's hierarchy rather than its own, and
  # kubicle-node's own resident set.
  uid=$(k get pods -n kubicle-system -l app.kubernetes.io/component=node -o jsonpath='{.items[0].metadata.uid}')
  cg=$(find /sys/fs/cgroup/memory -maxdepth 5 -type d -name "pod$uid" 2>/dev/null | head -n 1)
  vm_cg=/sys/fs/cgroup/memory/kubicle-$(printf %s "$state" | sha256sum | cut -c1-12)
  # Other kubicle-node processes (other tests' nodes) may run beside it.
  rss=$(for p in $(pgrep -x kubicle-node); do
          if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--state-dir=$state "; then
            awk '/^VmRSS/ {print $2}' "/proc/$p/status"
          fi
        done | head -n 1)
  mib() { echo $(( $(cat "$1/memory.usage_in_bytes" 2>/dev/null || echo 0) / 1048576 )); }
  if [ -d "$vm_cg" ]; then
    vms="the VMs' cgroup $(basename "$vm_cg") $(mib "$vm_cg") MiB (outside the pod)"
  else
    vms="the VMs included"
  fi
  say "node pod memory with $count Sandboxes: pod cgroup $(mib "$cg") MiB, $vms; kubicle-node RSS $(( ${rss:-0} / 1024 )) MiB"
fi

# --- one command in each Sandbox, through the data plane --------------------

say "running '${command[*]}' in each Sandbox: POST https://<status.vm.endpoint>/v1/sandboxes/k-<uid>/exec"
say "with the Sandbox's own token (Secret status.tokenSecretName, data.token)"
rows=$(k get sandboxes -l "$sel" -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid} {.status.nodeName} {.status.vm.endpoint} {.status.vm.restoreMillis} {.status.tokenSecretName}{"\n"}{end}')
awk 'NF {print $2}' <<<"$rows" >"$scratch/uids"   # for the cgroup check at the end
declare -A tokens=()
while read -r secret token; do
  [ -n "$secret" ] && tokens[$secret]=$token
done < <(k get secrets -l "$sel" -o jsonpath='{range .items[*]}{.metadata.name} {.data.token}{"\n"}{end}')
table=$scratch/table
printf '%-10s %-10s %10s %8s  %s\n' NAME NODE RESTORE_MS EXEC_MS OUTPUT >"$table"
failed=0
while read -r name uid on endpoint restore secret; do
  [ -n "$name" ] || continue
  b64=${tokens[$secret]:-$(k get secret "$secret" -o jsonpath='{.data.token}')}
  token=$(base64 -d <<<"$b64")
  tls_of "$on"
  start=$EPOCHREALTIME
  if out=$(KUBICLE_NODE_TOKEN=$token "$B/noderuntime/cli/kubicle-nodectl" --server "$tls_scheme://$endpoint" \
             "${tls_args[@]}" exec "k-$uid" -- "${command[@]}" 2>&1); then rc=0; else rc=$?; fi
  end=$EPOCHREALTIME
  exec_ms=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", (b - a) * 1000}')
  out=$(tr '\n' ' ' <<<"$out" | sed 's/ *$//')
  # The guest's hostname is the Sandbox's name: the answer came from its VM.
  if [ $rc -ne 0 ] || [[ $out != "$name"* ]]; then
    failed=$((failed + 1))
    out="FAILED (exit $rc): $out"
  fi
  printf '%-10s %-10s %10.1f %8s  %s\n' "$name" "$on" "${restore:-0}" "$exec_ms" "$out" >>"$table"
done < <(sort <<<"$rows")
sed 's/^/  /' "$table"
awk 'NR > 1 {r[NR - 1] = $3; e[NR - 1] = $4; n++}
     function p(a, q,   i, j, t, m) {
       m = n; for (i = 1; i <= m; i++) s[i] = a[i]
       for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) {t = s[i]; s[i] = s[j]; s[j] = t}
       i = int(q * m + 0.999999); if (i < 1) i = 1; return s[i]
     }
     END {printf "demo: restore ms p50 %.1f max %.1f; exec ms p50 %.1f max %.1f (kubicle-nodectl exec, wall clock)\n",
                 p(r, 0.5), p(r, 1), p(e, 0.5), p(e, 1)}' "$table"
[ $failed -eq 0 ] || die "$logs/node.log" "$failed of $count execs failed"
[ "$(($(wc -l <"$table") - 1))" -eq "$count" ] || die "$logs/node.log" "expected $count Sandboxes, the table has $(($(wc -l <"$table") - 1))"

# --- a rollout: helm upgrade replaces the node's pod; every VM keeps running -
# Chart mode (KUBICLE_DEMO_ROLLOUT=0 skips it): a file in each Sandbox, then
# a helm upgrade that changes the node DaemonSet's template (its log level),
# so the kubelet stops the node's container and starts a new one on the same
# state directory. Every Sandbox must then answer through the new pod with
# its file, run by the same kubicle-vmm process as before, and no VMM may be
# duplicated (docs/node.md, "VMMs across node restarts and rollouts").
# as_sandbox SECRET ENDPOINT NODE ARGS...: kubicle-nodectl with that Sandbox's own token.
as_sandbox() {
  local secret=$1 endpoint=$2 on=$3 b64
  shift 3
  b64=${tokens[$secret]:-$(k get secret "$secret" -o jsonpath='{.data.token}')}
  tls_of "$on"
  KUBICLE_NODE_TOKEN=$(base64 -d <<<"$b64") "$B/noderuntime/cli/kubicle-nodectl" \
    --server "$tls_scheme://$endpoint" "${tls_args[@]}" "$@"
}
if [ "$mode" = chart ] && [ "${KUBICLE_DEMO_ROLLOUT:-1}" = 1 ]; then
  # vmm_of UID: the pid of the Sandbox's kubicle-vmm, as the node reports it.
  vmm_of() {
    KUBICLE_NODE_TOKEN_FILE=$state/admin-token "$B/noderuntime/cli/kubicle-nodectl" --server "$node_url" \
      "${node_tls_args[@]}" get "k-$1" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["vmmPid"])'
  }
  declare -A vmm_before=()
  while read -r name uid on endpoint restore secret; do
    [ -n "$name" ] || continue
    echo "kept by $name" | as_sandbox "$secret" "$endpoint" "$on" put-file "k-$uid" - /rollout >/dev/null 2>&1 ||
      die "$logs/node.log" "put-file /rollout into $name failed"
    vmm_before[$uid]=$(vmm_of "$uid") || die "$logs/node.log" "no kubicle-vmm pid for $name"
  done <<<"$rows"
  old_pod=$(k get pods -n kubicle-system -l app.kubernetes.io/component=node -o jsonpath='{.items[0].metadata.name}')
  say "rollout: a file in each of the $count Sandboxes, then helm upgrade --set node.logLevel=debug (replaces the node's pod $old_pod)"
  t0=$EPOCHREALTIME
  "$helm" upgrade kubicle helm/kubicle -n kubicle-system --reuse-values --set node.logLevel=debug \
    --wait --timeout 300s >"$logs/helm-upgrade.log" 2>&1 ||
    { pod_logs; die "$logs/helm-upgrade.log" "helm upgrade failed"; }
  deadline=$((SECONDS + 120))
  until new_pod=$(k get pods -n kubicle-system -l app.kubernetes.io/component=node \
                    -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}' |
                  awk -v old="$old_pod" '$1 != old && $2 == "Running" {print $1}') && [ -n "$new_pod" ] &&
        [ "$(k get pods -n kubicle-system -l app.kubernetes.io/component=node -o name | wc -l)" = 1 ]; do
    [ $SECONDS -lt $deadline ] || { pod_logs; die "$logs/helm-upgrade.log" "the node's pod $old_pod was not replaced in 120 s"; }
    sleep 1
  done
  kept=0
  while read -r name uid on endpoint restore secret; do
    [ -n "$name" ] || continue
    deadline=$((SECONDS + 60))  # the new node re-adopts, then serves
    until out=$(as_sandbox "$secret" "$endpoint" "$on" get-file "k-$uid" /rollout - 2>&1) && [ "$out" = "kept by $name" ]; do
      [ $SECONDS -lt $deadline ] || { pod_logs; die "$logs/node.log" "$name lost its file in the rollout: $out"; }
      sleep 1
    done
    out=$(as_sandbox "$secret" "$endpoint" "$on" exec "k-$uid" -- "${command[@]}" 2>&1) && [[ $out == "$name"* ]] ||
      die "$logs/node.log" "$name does not answer after the rollout: $out"
    now=$(vmm_of "$uid") || die "$logs/node.log" "no kubicle-vmm pid for $name after the rollout"
    [ "$now" = "${vmm_before[$uid]}" ] ||
      die "$logs/node.log" "$name runs in kubicle-vmm $now after the rollout, ${vmm_before[$uid]} before: its VM was not kept"
    kill -0 "$now" 2>/dev/null || die "$logs/node.log" "$name's kubicle-vmm $now is not running"
    kept=$((kept + 1))
  done <<<"$rows"
  [ "$kept" -eq "$count" ] || die "$logs/node.log" "$kept of $count Sandboxes kept their VM"
  vmms=$(node_vmms | wc -w)
  pool=$(find "$state/pool" -maxdepth 1 -name 'pool-*.log' | wc -l)
  [ "$vmms" -le $((count + pool)) ] ||
    die "$logs/node.log" "$vmms kubicle-vmm processes of $state after the rollout: $count Sandboxes and $pool pool VMs expected"
  say "rollout done in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s: pod $old_pod -> $new_pod; all $count Sandboxes answer with their file, each in the same kubicle-vmm as before; $vmms kubicle-vmm processes ($count Sandboxes, the rest the new pod's warm pool)"
fi

# --- an operator rollout while Sandboxes are being created -----------------
# Chart mode (KUBICLE_DEMO_OPERATOR_ROLLOUT=0 skips it): the operator
# Deployment is restarted and, until its rollout has finished, a Sandbox is
# applied every half second, the last one after it: they meet the old pod,
# the hand-over of the leader Lease and the new pod. Each must still come to
# Ready and answer exec with its own token: none lost, none stuck. They carry
# the run label, so the sweep below takes them.
if [ "$mode" = chart ] && [ "${KUBICLE_DEMO_OPERATOR_ROLLOUT:-1}" = 1 ]; then
  op=$(k get deploy -n kubicle-system -l app.kubernetes.io/component=operator -o jsonpath='{.items[0].metadata.name}')
  old_leader=$(k get lease -n kubicle-system kubicle-operator-leader -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  say "operator rollout: kubectl rollout restart deployment/$op (leader ${old_leader:-?}), a Sandbox applied every 0.5 s until it has finished"
  t0=$EPOCHREALTIME
  k rollout restart -n kubicle-system "deployment/$op" >/dev/null
  k rollout status -n kubicle-system "deployment/$op" --timeout=180s >"$logs/operator-rollout.log" 2>&1 &
  rollout=$!
  names=()
  while :; do
    name=$(printf 'operator-rollout-%02d' $((${#names[@]} + 1)))
    printf 'apiVersion: kubicle.dev/v1alpha1\nkind: Sandbox\nmetadata:\n  name: %s\n  labels:\n    kubicle.dev/run: %s\nspec:\n  templateRef:\n    name: demo\n  ttlSeconds: 3600\n' \
      "$name" "$run" | k apply -f - >/dev/null
    names+=("$name")
    # The rollout has finished (or failed): this Sandbox was the one after it.
    kill -0 "$rollout" 2>/dev/null || break
    # Bounded whatever the rollout does: its own timeout ends it at 180 s.
    [ ${#names[@]} -lt 40 ] || break
    sleep 0.5
  done
  wait "$rollout" || { pod_logs; die "$logs/operator-rollout.log" "the operator's rollout did not finish in 180 s"; }
  rolled=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
  k wait --for=condition=Ready "${names[@]/#/sandbox/}" --timeout=120s >>"$logs/operator-rollout.log" 2>&1 ||
    { pod_logs; die "$logs/operator-rollout.log" "Sandboxes applied during the operator's rollout did not come Ready: $(k get sandboxes "${names[@]}" --no-headers 2>&1 | tr '\n' ';')"; }
  for name in "${names[@]}"; do
    read -r uid on endpoint secret < <(k get sandbox "$name" -o jsonpath='{.metadata.uid} {.status.nodeName} {.status.vm.endpoint} {.status.tokenSecretName}{"\n"}')
    out=$(as_sandbox "$secret" "$endpoint" "$on" exec "k-$uid" -- "${command[@]}" 2>&1) && [[ $out == "$name"* ]] ||
      { pod_logs; die "$logs/operator.log" "$name, applied during the operator's rollout, does not answer: $out"; }
  done
  leader=$(k get lease -n kubicle-system kubicle-operator-leader -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [ -n "$leader" ] && [ "$leader" != "$old_leader" ] ||
    { pod_logs; die "$logs/operator-rollout.log" "the operator's leader Lease is held by '${leader}' after the rollout (before: '${old_leader}')"; }
  say "operator rollout done in $rolled s with ${#names[@]} Sandboxes applied during it; all Ready and answering in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s; leader $old_leader -> $leader"
fi

# --- the sweep --------------------------------------------------------------

say "sweep: kubectl delete sandboxes,sandboxforks -l $sel"
t0=$EPOCHREALTIME
k delete sandboxes,sandboxforks -l "$sel" --timeout=120s >"$logs/kubectl-delete.log" 2>&1 ||
  die "$logs/node.log" "the sweep failed: $(tail -n 3 "$logs/kubectl-delete.log")"
say "$(grep -c deleted "$logs/kubectl-delete.log" || true) objects deleted in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s (each waits for its VM teardown: finalizer kubicle.dev/vm-teardown)"
say "kubectl get sandboxes -l $sel"
left=$(k get sandboxes -l "$sel" -o name)
[ -z "$left" ] || die "$logs/operator.log" "Sandboxes left after the sweep: $left"
k get sandboxes -l "$sel" 2>&1 | sed 's/^/  /'
on_node=$(KUBICLE_NODE_TOKEN_FILE=$state/admin-token "$B/noderuntime/cli/kubicle-nodectl" --server "$node_url" \
            "${node_tls_args[@]}" ls | tail -n +2)
[ -z "$on_node" ] || die "$logs/node.log" "kubicle-node still runs sandboxes: $on_node"
vmms=$(node_vmms | wc -w)
pool=$(find "$state/pool" -maxdepth 1 -name 'pool-*.log' | wc -l)
[ "$vmms" -le "$pool" ] || die "$logs/node.log" "$vmms kubicle-vmm processes of $state, but only $pool idle warm-pool VMs"
say "VMs left: no sandbox on $node (kubicle-nodectl ls is empty); its $vmms kubicle-vmm processes are"
say "the idle warm pool ($state/pool), which holds no sandbox and stops with the node"
