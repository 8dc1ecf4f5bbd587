#!/usr/bin/env bash
# Builds the Kubicle initramfs: busybox-static, kubicle-agent and /init
# (guest/linux/init.sh), as an uncompressed newc cpio (no decompression at
# boot; the kernel also accepts a gzip one if you compress it).
#
#   guest/linux/build-initramfs.sh AGENT_BINARY [OUTPUT]
#
# AGENT_BINARY is the static kubicle-agent from the CMake build
# (build/guest/agent/kubicle-agent); it is stripped on the way in. Without
# OUTPUT the image goes to $KUBICLE_CACHE/initramfs/<key>/initramfs.cpio,
# keyed by the agent, init.sh, busybox and this script. Prints the path.
# Works without root: device nodes are created under fakeroot.
set -euo pipefail
source "$(dirname "$0")/common.sh"

agent=${1:?usage: build-initramfs.sh AGENT_BINARY [OUTPUT]}
[ -x "$agent" ] || die "no agent binary at $agent (build the kubicle-agent target)"
ensure_packages busybox-static cpio binutils
init="$GUEST_LINUX_DIR/init.sh"
key=$(content_key "$agent" "$init" "$0" "busybox=$(package_version busybox-static)")
output=${2:-$KUBICLE_CACHE/initramfs/$key/initramfs.cpio}
if [ -z "${2:-}" ] && [ -s "$output" ]; then
  log "cached: $output"
  echo "$output"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,run,newroot,mnt,root,usr/bin,usr/sbin}
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
strip -o "$root/bin/kubicle-agent" "$agent"
install -m 0755 "$init" "$root/init"

mkdir -p "$(dirname "$output")"
pack='cd "$1" && mknod -m 600 dev/console c 5 1 && mknod -m 666 dev/null c 1 3 &&
      find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0 > "$2"'
if [ "$(id -u)" -eq 0 ]; then
  bash -c "$pack" _ "$root" "$output.tmp"
else
  ensure_packages fakeroot
  fakeroot bash -c "$pack" _ "$root" "$output.tmp"
fi
mv "$output.tmp" "$output"
log "built $output ($(du -h "$output" | cut -f1))"
echo "$output"
