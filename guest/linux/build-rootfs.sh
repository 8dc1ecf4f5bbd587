#!/usr/bin/env bash
# Builds a root filesystem image (ext4) for the Kubicle Linux guest.
#
#   guest/linux/build-rootfs.sh minimal     busybox only (a few MB)
#   guest/linux/build-rootfs.sh python      Debian bookworm minbase + python3
#   guest/linux/build-rootfs.sh --force NAME  rebuild even when cached
#
# Prints the image path: $KUBICLE_CACHE/rootfs/<name>-<key>/rootfs.ext4,
# where key hashes this script and the inputs (busybox version, Debian suite
# and package list). Images are made with `mke2fs -d DIR`, so no loop mount
# and no root mount are needed. The agent is NOT in the image: the initramfs
# brings it (see build-initramfs.sh), so any ext4 image with /run, /proc,
# /sys, /dev and /tmp directories works as a rootfs.
#
# Env: DEBIAN_MIRROR (default: the archive the host's apt fetches the suite
# from, per its sources list; no registry address is spelled here),
# ROOTFS_EXTRA_MB (free space added to the image, default 256).
set -euo pipefail
source "$(dirname "$0")/common.sh"

force=0
if [ "${1:-}" = "--force" ]; then force=1; shift; fi
name=${1:?usage: build-rootfs.sh [--force] minimal|python}
suite=bookworm
python_packages=python3,ca-certificates
extra_mb=${ROOTFS_EXTRA_MB:-256}

case $name in
  minimal)
    ensure_packages busybox-static e2fsprogs
    key=$(content_key "$0" "busybox=$(package_version busybox-static)" "extra=$extra_mb")
    ;;
  python)
    ensure_packages debootstrap e2fsprogs
    key=$(content_key "$0" "$suite" "$python_packages" "extra=$extra_mb")
    ;;
  *) die "unknown rootfs '$name' (minimal or python)" ;;
esac

out="$KUBICLE_CACHE/rootfs/$name-$key"
if [ $force -eq 0 ] && [ -s "$out/rootfs.ext4" ]; then
  log "cached: $out/rootfs.ext4"
  echo "$out/rootfs.ext4"
  exit 0
fi
mkdir -p "$KUBICLE_CACHE/rootfs"
exec 9>"$KUBICLE_CACHE/rootfs/.lock-$name"
flock 9
if [ $force -eq 0 ] && [ -s "$out/rootfs.ext4" ]; then
  echo "$out/rootfs.ext4"
  exit 0
fi

start=$(date +%s)
work="$KUBICLE_CACHE/rootfs/work-$name-$key"
rm -rf "$work" "$out.tmp"
mkdir -p "$work" "$out.tmp"
dir="$work/root"

# The Debian archive to debootstrap from: $DEBIAN_MIRROR, else the one the
# host's apt is configured with for $suite (a Debian host of that release).
debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local uri
  uri=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' \
          "Release: $suite" 'Component: main' 2>/dev/null | head -n 1)
  [ -n "$uri" ] || die "the host's apt has no $suite archive: set DEBIAN_MIRROR to a Debian mirror"
  echo "$uri"
}

make_skeleton() {
  mkdir -p "$dir"/{bin,sbin,etc,proc,sys,dev,run,tmp,root,mnt,var/tmp,usr/bin,usr/sbin}
  chmod 1777 "$dir/tmp" "$dir/var/tmp"
  chmod 0700 "$dir/root"
  echo "kubicle" >"$dir/etc/hostname"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$dir/etc/hosts"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
}

case $name in
  minimal)
    log "assembling busybox rootfs"
    make_skeleton
    cp /bin/busybox "$dir/bin/busybox"
    for applet in $("$dir/bin/busybox" --list); do
      [ "$applet" = busybox ] || ln -sf busybox "$dir/bin/$applet"
    done
    ;;
  python)
    mirror=$(debian_mirror)
    log "debootstrap $suite minbase + $python_packages from $mirror (several minutes)"
    nice -n 10 debootstrap --variant=minbase --include="$python_packages" \
      "$suite" "$dir" "$mirror" >"$work/debootstrap.log" 2>&1 || {
      tail -n 30 "$work/debootstrap.log" >&2
      die "debootstrap failed (log: $work/debootstrap.log)"
    }
    # What a sandbox never needs: package caches, docs, man pages, locales.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
      "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* \
      "$dir"/var/log/*.log
    find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} + 2>/dev/null || true
    echo "kubicle" >"$dir/etc/hostname"
    mkdir -p "$dir/run" "$dir/tmp"
    "$dir/usr/bin/python3" --version >/dev/null 2>&1 || chroot "$dir" python3 --version >/dev/null \
      || die "python3 is not runnable in the image"
    ;;
esac

used_kb=$(du -sk "$dir" | cut -f1)
size_mb=$(((used_kb * 12 / 10) / 1024 + extra_mb))
log "making ext4 image: ${size_mb} MiB for $((used_kb / 1024)) MiB of files"
mke2fs -q -t ext4 -L "kubicle-$name" -d "$dir" -m 0 -E root_owner=0:0 \
  "$out.tmp/rootfs.ext4" "${size_mb}M"
echo "$name $suite $python_packages" >"$out.tmp/contents"
rm -rf "$out" && mv "$out.tmp" "$out"
rm -rf "$work"
log "built $out/rootfs.ext4 in $(elapsed "$start")"
echo "$out/rootfs.ext4"
