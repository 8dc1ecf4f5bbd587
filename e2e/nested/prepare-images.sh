#!/usr/bin/env bash
# Builds (or finds in the cache) everything the linux tier needs and writes
# their paths to an env file that linux_guest_test reads:
#   guest kernel (guest/linux/build-kernel.sh), python and minimal rootfs
#   (build-rootfs.sh), initramfs with the given agent
#   (build-initramfs.sh), and the nested test host (build-testhost.sh).
#
#   e2e/nested/prepare-images.sh AGENT_BINARY ENV_FILE
#
# The CTest fixture `linux_images` runs this; a cold run takes a while (the
# kernel dominates) and prints how long each part took.
set -euo pipefail
source "$(dirname "$0")/../../guest/linux/common.sh"
agent=${1:?usage: prepare-images.sh AGENT_BINARY ENV_FILE}
env_file=${2:?usage: prepare-images.sh AGENT_BINARY ENV_FILE}
top=$(cd "$(dirname "$0")/../.." && pwd)

timed() {
  local what=$1 start result
  shift
  start=$(date +%s)
  result=$("$@" | tail -n1)
  log "$what: $result ($(elapsed "$start"))"
  echo "$result"
}

kernel=$(timed kernel "$top/guest/linux/build-kernel.sh")
rootfs=$(timed "python rootfs" "$top/guest/linux/build-rootfs.sh" python)
minimal=$(timed "minimal rootfs" "$top/guest/linux/build-rootfs.sh" minimal)
initramfs=$(timed initramfs "$top/guest/linux/build-initramfs.sh" "$agent")
testhost=$(timed "test host" "$top/e2e/nested/build-testhost.sh")
mkdir -p "$(dirname "$env_file")"
cat >"$env_file.tmp" <<EOT
KUBICLE_LINUX_KERNEL=$kernel
KUBICLE_LINUX_INITRAMFS=$initramfs
KUBICLE_LINUX_ROOTFS_PYTHON=$rootfs
KUBICLE_LINUX_ROOTFS_MINIMAL=$minimal
KUBICLE_TESTHOST_DIR=$testhost
EOT
mv "$env_file.tmp" "$env_file"
log "images ready: $env_file"
