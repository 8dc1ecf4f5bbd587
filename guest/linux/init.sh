#!/bin/busybox sh
# /init of the Kubicle initramfs (busybox sh). Mounts the kernel filesystems,
# applies hostname and clock from the kernel command line, mounts the root
# filesystem from the first virtio-blk disk (optionally under an overlay) and
# execs kubicle-agent as PID 1 inside it. Without a disk, the agent runs
# straight from the initramfs.
#
# Kernel command line (all optional):
#   kubicle.hostname=NAME        hostname
#   kubicle.clock=SECONDS        wall clock, Unix seconds (the host's time)
#   kubicle.root=DEV|none        root device (default /dev/vda when present)
#   kubicle.rootfstype=TYPE      default ext4
#   kubicle.rootflags=OPTS       extra mount options for the root
#   kubicle.overlay=tmpfs|DEV    root read-only under a writable overlay kept
#                                in RAM (tmpfs) or on a second disk (ext4)
#   kubicle.net=ADDR/LEN,GW      bring eth0 (virtio-net) up with ADDR/LEN and a
#                                default route via GW (docs/network.md)
#   kubicle.dns=IP[,IP...]       nameservers for /etc/resolv.conf
#   kubicle.port=N               agent vsock port (default 1024)
#   kubicle.agent_args="..."     extra agent arguments (e.g. --log-level debug)
#   kubicle.shell=1              start a shell on the console instead (debug)
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /newroot /mnt
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The agent (and every exec) gets exactly this environment, not the words
# the kernel passed to init from its command line.
agent_env="env -i PATH=$PATH HOME=/root TERM=linux LANG=C.UTF-8"

say() { echo "kubicle-init: $*" >/dev/console; }
fail() {
  say "error: $*"
  say "starting the agent from the initramfs instead"
  exec $agent_env /bin/kubicle-agent $agent_args
}

hostname=kubicle net= dns= root= rootfstype=ext4 rootflags= overlay= port=1024 agent_args= shell=
# The kernel passes unknown key=value words to init's environment as well,
# but dotted names are not valid shell variables: parse /proc/cmdline.
set -- $(cat /proc/cmdline)
for word in "$@"; do
  case $word in
    kubicle.hostname=*) hostname=${word#*=} ;;
    kubicle.clock=*) clock=${word#*=} ;;
    kubicle.root=*) root=${word#*=} ;;
    kubicle.rootfstype=*) rootfstype=${word#*=} ;;
    kubicle.rootflags=*) rootflags=${word#*=} ;;
    kubicle.overlay=*) overlay=${word#*=} ;;
    kubicle.net=*) net=${word#*=} ;;
    kubicle.dns=*) dns=${word#*=} ;;
    kubicle.port=*) port=${word#*=} ;;
    kubicle.agent_args=*) agent_args=$(echo "${word#*=}" | tr ',' ' ') ;;
    kubicle.shell=1) shell=1 ;;
  esac
done
agent_args="--vsock-port $port $agent_args"
# A clone's new MAC (POST_RESTORE) goes to the interface init configured.
[ -n "$net" ] && agent_args="$agent_args --nic eth0"

hostname "$hostname"
ip link set lo up
# The address plan is the same in every sandbox (its own namespace on the
# host), so a snapshot's clones keep it; only the MAC changes, and the agent
# applies that after a restore.
if [ -n "$net" ]; then
  if ip link set eth0 up && ip addr add "${net%%,*}" dev eth0 &&
    ip route add default via "${net#*,}" dev eth0; then :; else
    say "warning: could not configure eth0 from kubicle.net=$net"
  fi
fi
# resolv.conf in the initramfs; copied into the root below when it is one.
[ -n "$dns" ] && for ns in $(echo "$dns" | tr ',' ' '); do echo "nameserver $ns"; done >/etc/resolv.conf
[ -n "$clock" ] && date -u -s "@${clock%%.*}" >/dev/null
[ -n "$shell" ] && exec setsid cttyhack sh

# The workspace slot (serial "workspace", docs/workspaces.md) is never the
# root: the node mounts it at /workspace once a workspace is plugged in.
if [ -z "$root" ] && [ -b /dev/vda ] &&
   [ "$(cat /sys/block/vda/serial 2>/dev/null)" != workspace ]; then root=/dev/vda; fi
if [ -z "$root" ] || [ "$root" = none ]; then
  say "no root disk: agent runs from the initramfs"
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  exec $agent_env /bin/kubicle-agent $agent_args
fi

opts=${rootflags:+,$rootflags}
if [ -n "$overlay" ]; then
  mkdir -p /mnt/lower /mnt/rw
  mount -t "$rootfstype" -o "ro$opts" "$root" /mnt/lower || fail "cannot mount $root"
  if [ "$overlay" = tmpfs ]; then
    mount -t tmpfs -o mode=0755 tmpfs /mnt/rw || fail "cannot mount the overlay tmpfs"
  else
    mount -t ext4 "$overlay" /mnt/rw || fail "cannot mount overlay disk $overlay"
  fi
  mkdir -p /mnt/rw/upper /mnt/rw/work
  mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work \
    /newroot || fail "cannot mount the overlay"
else
  mount -t "$rootfstype" -o "rw$opts" "$root" /newroot || fail "cannot mount $root"
fi

# The agent comes from the initramfs (so any rootfs works): it lives in a
# tmpfs on the new root's /run, which is where a tmpfs belongs anyway.
[ -d /newroot/run ] || mkdir -p /newroot/run 2>/dev/null || fail "the rootfs has no /run"
mount -t tmpfs -o mode=0755,nosuid tmpfs /newroot/run || fail "cannot mount /run"
mkdir -p /newroot/run/kubicle
cp /bin/kubicle-agent /newroot/run/kubicle/kubicle-agent
# Nameservers: into the root's /etc when it is writable, else over it from
# /run (a read-only root keeps its own file underneath).
if [ -f /etc/resolv.conf ]; then
  cp /etc/resolv.conf /newroot/etc/resolv.conf 2>/dev/null || {
    cp /etc/resolv.conf /newroot/run/kubicle/resolv.conf &&
      touch /newroot/etc/resolv.conf 2>/dev/null
    mount --bind /newroot/run/kubicle/resolv.conf /newroot/etc/resolv.conf ||
      say "warning: /etc/resolv.conf of the root could not be set"
  }
fi
for d in proc sys dev tmp; do [ -d /newroot/$d ] || mkdir -p /newroot/$d 2>/dev/null; done
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
exec $agent_env switch_root /newroot /run/kubicle/kubicle-agent $agent_args
