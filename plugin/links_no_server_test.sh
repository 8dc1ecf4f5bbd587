#!/usr/bin/env bash
# kubectl-kubicle is a client of the node's data plane: it must carry the
# contract (noderuntime/api) and the client (noderuntime/client), and no
# code of the node's server (noderuntime/server) or runtime (SandboxManager
# and the rest of kubicle_noderuntime). Reads the defined symbols of the
# built binaries; the same patterns must match kubicle-node, so a pattern
# that matches nothing cannot pass this test by accident.
# Usage: links_no_server_test.sh KUBECTL_KUBICLE KUBICLE_NODE
set -euo pipefail
plugin=$1 node=$2

server='kubicle::noderuntime::server::'
runtime='kubicle::noderuntime::(SandboxManager|TemplateBaker|WarmPool|VmmProcess)\b'
contract='kubicle::noderuntime::api::'
client='kubicle::noderuntime::client::NodeClient::'

symbols() { nm -C --defined-only "$1"; }
fail=0
expect() {  # expect <binary> <present|absent> <what> <pattern>
  local n
  n=$(symbols "$1" | grep -cE "$4" || true)
  if [[ $2 == present && $n -eq 0 ]]; then
    echo "FAIL: $(basename "$1") has no $3 symbol (/$4/)"; fail=1
  elif [[ $2 == absent && $n -ne 0 ]]; then
    echo "FAIL: $(basename "$1") links $3 code: $n symbols, e.g."
    symbols "$1" | grep -E "$4" | head -5; fail=1
  else
    echo "ok: $(basename "$1") $2 $3 ($n symbols)"
  fi
}
expect "$node" present server "$server"
expect "$node" present runtime "$runtime"
expect "$plugin" present contract "$contract"
expect "$plugin" present client "$client"
expect "$plugin" absent server "$server"
expect "$plugin" absent runtime "$runtime"
exit $fail
