#!/usr/bin/env bash
# Builds the Kubicle guest kernel (an uncompressed ELF vmlinux with a PVH
# entry note) from Debian's linux-source-6.1 and guest/linux/kernel.config.
#
#   guest/linux/build-kernel.sh            build or reuse; prints the vmlinux path
#   guest/linux/build-kernel.sh --force    rebuild even when cached
#
# Result: $KUBICLE_CACHE/kernel/<key>/vmlinux (and its .config), where key
# hashes the fragment, this script and the source package version. The
# config starts from `make allnoconfig`, the fragment is merged with
# scripts/kconfig/merge_config.sh, `make olddefconfig` settles dependencies,
# and every line of the fragment is then checked: a dropped option fails the
# build loudly instead of giving a kernel that cannot boot. JOBS overrides
# the parallelism (default: all cores, under nice).
set -euo pipefail
source "$(dirname "$0")/common.sh"

force=0
[ "${1:-}" = "--force" ] && force=1
fragment="$GUEST_LINUX_DIR/kernel.config"

ensure_packages linux-source-6.1 bc bison flex libelf-dev libssl-dev make gcc xz-utils
src_version=$(package_version linux-source-6.1)
key=$(content_key "$fragment" "$0" "linux-source-6.1=$src_version")
out="$KUBICLE_CACHE/kernel/$key"
if [ $force -eq 0 ] && [ -s "$out/vmlinux" ]; then
  log "cached: $out/vmlinux"
  echo "$out/vmlinux"
  exit 0
fi

mkdir -p "$KUBICLE_CACHE/kernel"
exec 9>"$KUBICLE_CACHE/kernel/.lock"
log "waiting for the kernel build lock" && flock 9
if [ $force -eq 0 ] && [ -s "$out/vmlinux" ]; then  # built while we waited
  echo "$out/vmlinux"
  exit 0
fi

start=$(date +%s)
src="$KUBICLE_CACHE/kernel/src-$src_version"
tarball=$(ls /usr/src/linux-source-6.1.tar.* | head -n1)
if [ ! -f "$src/.extracted" ]; then
  log "extracting $tarball (once per source version)"
  rm -rf "$src" && mkdir -p "$src"
  tar -xf "$tarball" -C "$src" --strip-components=1
  touch "$src/.extracted"
fi

build="$KUBICLE_CACHE/kernel/build-$key"
rm -rf "$build" && mkdir -p "$build"
mk=(nice -n 10 make -C "$src" O="$build" ARCH=x86_64)

log "configuring: allnoconfig + $(basename "$fragment") (merge_config.sh -n)"
(cd "$src" && ARCH=x86_64 nice -n 10 scripts/kconfig/merge_config.sh -n -O "$build" "$fragment" \
  >"$build/merge.log" 2>&1) || {
  cat "$build/merge.log" >&2
  die "merge_config.sh failed"
}
"${mk[@]}" -s olddefconfig >/dev/null

# Every fragment line must be in the final config, exactly.
missing=0
while IFS= read -r line; do
  if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
    grep -qxF "$line" "$build/.config" || {
      log "option lost: $line (final: $(grep -E "^(# )?${BASH_REMATCH[1]}[= ]" "$build/.config" || echo absent))"
      missing=1
    }
  elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set$ ]]; then
    if grep -qE "^${BASH_REMATCH[1]}=" "$build/.config"; then
      log "option should be off: ${BASH_REMATCH[1]} ($(grep -E "^${BASH_REMATCH[1]}=" "$build/.config"))"
      missing=1
    fi
  fi
done <"$fragment"
[ $missing -eq 0 ] || die "kernel.config options did not survive olddefconfig (see above)"
log "config verified: every option of $(basename "$fragment") is set"

jobs=${JOBS:-$(nproc)}
log "compiling vmlinux with $jobs jobs (log: $build/build.log)"
objects=0
set +e
"${mk[@]}" -j"$jobs" vmlinux 2>&1 | tee "$build/build.log" | while IFS= read -r l; do
  case $l in
    *"  CC "* | *"  AS "*)
      objects=$((objects + 1))
      if [ $((objects % 200)) -eq 0 ]; then log "  $objects objects compiled ($(elapsed "$start"))"; fi
      ;;
  esac
done
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  grep -E "error|Error" "$build/build.log" | tail -n 20 >&2 || true
  die "kernel build failed (full log: $build/build.log)"
fi

mkdir -p "$out.tmp"
cp "$build/vmlinux" "$out.tmp/vmlinux"
cp "$build/.config" "$out.tmp/config"
echo "linux-source-6.1=$src_version" >"$out.tmp/source-version"
rm -rf "$out" && mv "$out.tmp" "$out"
rm -rf "$build"
log "built $out/vmlinux ($(du -h "$out/vmlinux" | cut -f1)) in $(elapsed "$start")"
echo "$out/vmlinux"
