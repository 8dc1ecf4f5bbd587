#!/usr/bin/env bash
# Builds the nested KVM test host's boot files: Debian's linux-image-amd64
# kernel (taken from the .deb with `apt-get download`, never installed) and an
# initramfs with busybox, the kernel modules the test host needs (kvm-amd and
# its dependencies, 9p over virtio-pci, TAP, veth and nftables for the sandbox
# network, vhost for the network benchmark's QEMU) and testhost-init.sh as /init.
#
#   e2e/nested/build-testhost.sh     prints the directory with vmlinuz and
#                                     initramfs.cpio.gz
#
# Cached in $KUBICLE_CACHE/testhost/<key>/, keyed by the kernel package
# version, the init script and this script.
set -euo pipefail
source "$(dirname "$0")/../../guest/linux/common.sh"
here=$(cd "$(dirname "$0")" && pwd)

ensure_packages busybox-static cpio binutils xz-utils
meta_dep=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$meta_dep" ]; then
  apt-get update -qq
  meta_dep=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$meta_dep" ] || die "cannot resolve linux-image-amd64 to a kernel package"
kversion=$(apt-cache policy "$meta_dep" | awk '/Candidate:/ {print $2}')
key=$(content_key "$0" "$here/testhost-init.sh" "$meta_dep=$kversion")
out="$KUBICLE_CACHE/testhost/$key"
if [ -s "$out/vmlinuz" ] && [ -s "$out/initramfs.cpio.gz" ]; then
  log "cached: $out"
  echo "$out"
  exit 0
fi
mkdir -p "$KUBICLE_CACHE/testhost"
exec 9>"$KUBICLE_CACHE/testhost/.lock"
flock 9

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "downloading $meta_dep $kversion"
download() { (cd "$work" && apt-get download -q "$meta_dep" 2>&1 | grep -v "unsandboxed" >&2 || true); }
download
deb=$(ls "$work"/*.deb 2>/dev/null | head -n1)
if [ -z "$deb" ]; then  # stale package lists: the mirror moved on
  apt-get update -qq
  download
  deb=$(ls "$work"/*.deb 2>/dev/null | head -n1)
fi
[ -n "$deb" ] || die "apt-get download $meta_dep failed"
dpkg-deb -x "$deb" "$work/pkg"
kdir=$(ls -d "$work"/pkg/lib/modules/* | head -n1)
krel=$(basename "$kdir")

# Modules to load, dependencies first (from each module's .modinfo).
# A module's soft pre-dependencies ("softdep=pre: crc32c") name aliases that
# modprobe would resolve; the initramfs has no modprobe, so they are resolved
# here from every module's alias= lines and loaded first (libcrc32c fails its
# init with ENOENT unless a crc32c implementation is already registered).
declare -A path_of=() seen=() alias_of=()
while IFS= read -r f; do
  path_of[$(basename "$f" .ko)]=$f
  # A CPU-specific implementation may refuse TCG's CPU: the generic one wins.
  for a in $(tr '\0' '\n' <"$f" | sed -n 's/^alias=//p'); do
    case $f in *generic*) alias_of[$a]=$f ;; *) : "${alias_of[$a]:=$f}" ;; esac
  done
done < <(find "$kdir" -name '*.ko')
order=()
module_info() { tr '\0' '\n' <"$1" | sed -n "s/^$2=//p"; }
add_module() {
  local name=${1//-/_} alt=$1 dep
  [ -n "${seen[$name]:-}" ] && return 0
  seen[$name]=1
  local f=${path_of[$alt]:-${path_of[$name]:-${path_of[${name//_/-}]:-${alias_of[$alt]:-}}}}
  [ -n "$f" ] || die "module $alt not found in $meta_dep"
  for dep in $(module_info "$f" softdep | sed -n 's/^pre: *//p' | sed 's/ *post:.*//'); do
    [ -n "${path_of[$dep]:-}${alias_of[$dep]:-}" ] && add_module "$dep"
  done
  for dep in $(module_info "$f" depends | tr ',' ' '); do add_module "$dep"; done
  # seen[] is keyed by the name asked for; an alias and its module are one.
  case " ${order[*]} " in *" $f "*) ;; *) order+=("$f") ;; esac
}
# TCG emulates the CPU we name (-cpu EPYC): always AMD, so kvm-amd. tun and
# veth carry the guests' networks (TAPs in namespaces), nftables their NAT
# and egress policy (docs/network.md: masquerade, ct state, and `reject` in
# table ip, which is nft_reject_ipv4; the kernel would autoload these, but
# the initramfs has no modprobe). vhost_vsock and vhost_net let
# bench/linux/net-bench.sh run QEMU's virtio-net beside kubicle-vmm's, with
# the agent reached over vhost-vsock.
for m in kvm-amd 9pnet_virtio 9p virtio_pci tun veth nf_tables nft_chain_nat nft_masq nft_ct \
  nft_reject_ipv4 vhost_vsock vhost_net; do
  add_module "$m"
done

# Finds the compressed kernel inside a bzImage (as the kernel's
# scripts/extract-vmlinux does) and keeps it if it is an ELF with a PVH note.
extract_vmlinux() {
  local in=$1 out=$2 magic tool off
  for pair in "fd377a585a00:xz -dc" "1f8b0800:gzip -dc" "28b52ffd:zstd -dc"; do
    magic=${pair%%:*}
    tool=${pair#*:}
    command -v "${tool%% *}" >/dev/null || continue
    for off in $(od -An -v -tx1 "$in" | tr -d ' \n' | grep -ob "$magic" | cut -d: -f1); do
      [ $((off % 2)) -eq 0 ] || continue
      tail -c +$((off / 2 + 1)) "$in" | $tool >"$out" 2>/dev/null
      if [ "$(head -c 4 "$out" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] &&
        readelf -n "$out" 2>/dev/null | grep -q "0x00000012"; then
        return 0
      fi
    done
  done
  rm -f "$out"
  return 1
}

root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp,host,lib/modules}
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
: >"$root/lib/modules/order"
for f in "${order[@]}"; do
  cp "$f" "$root/lib/modules/"
  basename "$f" >>"$root/lib/modules/order"
done
install -m 0755 "$here/testhost-init.sh" "$root/init"

mkdir -p "$out.tmp"
cp "$work/pkg/boot/vmlinuz-$krel" "$out.tmp/vmlinuz"
# The uncompressed ELF (it has a PVH note) boots through QEMU's PVH loader:
# no decompression under TCG, which halves the test host's boot.
extract_vmlinux "$out.tmp/vmlinuz" "$out.tmp/vmlinux" ||
  log "no PVH vmlinux could be extracted; the test host boots the bzImage"
pack='cd "$1" && mknod -m 600 dev/console c 5 1 && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0'
if [ "$(id -u)" -eq 0 ]; then bash -c "$pack" _ "$root"; else ensure_packages fakeroot; fakeroot bash -c "$pack" _ "$root"; fi |
  gzip -1 >"$out.tmp/initramfs.cpio.gz"
echo "$meta_dep=$kversion modules: $(tr '\n' ' ' <"$root/lib/modules/order")" >"$out.tmp/contents"
rm -rf "$out" && mv "$out.tmp" "$out"
log "built $out ($krel; modules: $(tr '\n' ' ' <"$root/lib/modules/order"))"
echo "$out"
