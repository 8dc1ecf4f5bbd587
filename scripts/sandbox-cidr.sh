# Sourced by the scripts that start kubicle-node (demo.sh, kube-demo.sh,
# swarm-demo.sh): take_sandbox_cidr sets SANDBOX_CIDR to a /20 of
# 10.240.0.0/12 that no other process on this host holds and no host route
# overlaps, and keeps it for as long as this shell lives (an flock on
# /tmp/kubicle-sandbox-cidr/<k>.lock, as the C++ and Python harnesses take
# them: noderuntime/network/host_share.h). Nodes sharing a host need
# distinct sandbox CIDRs: a node refuses one that another's veths route.
# KUBICLE_SANDBOX_CIDR, when set, is used as it is.

take_sandbox_cidr() {
  if [ -n "${KUBICLE_SANDBOX_CIDR:-}" ]; then
    SANDBOX_CIDR=$KUBICLE_SANDBOX_CIDR
    return 0
  fi
  local dir=/tmp/kubicle-sandbox-cidr k cidr fd
  mkdir -p "$dir" && chmod 1777 "$dir" 2>/dev/null || true
  for k in $(seq 0 255); do
    cidr="10.$((240 + k / 16)).$((k % 16 * 16)).0/20"
    # Routes inside the block, or covering it (the default route aside).
    [ -z "$(ip -4 -o route show table all root "$cidr" 2>/dev/null)" ] || continue
    [ -z "$(ip -4 -o route show table all match "$cidr" 2>/dev/null | grep -v '^default')" ] || continue
    exec {fd}>>"$dir/$k.lock"
    if flock -n "$fd"; then
      SANDBOX_CIDR=$cidr
      return 0
    fi
    exec {fd}>&-
  done
  echo "no free sandbox CIDR in 10.240.0.0/12 (every /20 is locked or routed)" >&2
  return 1
}
