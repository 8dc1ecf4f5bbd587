#!/usr/bin/env bash
# Prints the path of the cached guest kernel, or exits 1 when it is not
# built; never builds (build-kernel.sh does). The key is build-kernel.sh's
# own -- kernel.config, that script's bytes and the source package version --
# computed here so that asking needs no change to build-kernel.sh, whose
# every edit would move the key and rebuild the kernel on every machine.
set -euo pipefail
source "$(dirname "$0")/common.sh"
src_version=$(package_version linux-source-6.1 2>/dev/null) || exit 1
key=$(content_key "$GUEST_LINUX_DIR/kernel.config" "$GUEST_LINUX_DIR/build-kernel.sh" \
                  "linux-source-6.1=$src_version")
vmlinux="$KUBICLE_CACHE/kernel/$key/vmlinux"
[ -s "$vmlinux" ] || exit 1
echo "$vmlinux"
