#!/bin/busybox sh
# /init of the nested KVM test host (see run-in-testhost.py). Loads kvm-amd
# (nested=1) and 9p, mounts the host's root read-only at /host (so every
# binary and library of the build machine is there, at the same paths), a
# tmpfs on /host/tmp and the harness's scratch directory (and any shared
# /tmp directories) read-write at their own paths inside it, then runs
# $scratch/cmd.sh chrooted into /host with its output on the console (and a
# heartbeat line every 30 s), writes the exit status to
# $scratch/exit-status and powers off.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
export PATH=/bin
say() { echo "kubicle-testhost: $*" >/dev/console; }
die() { say "error: $*"; poweroff -f; }

scratch= shares=
for word in $(cat /proc/cmdline); do
  case $word in
    kubicle.scratch=*) scratch=${word#*=} ;;
    kubicle.shares=*) shares=${word#*=} ;;
  esac
done
[ -n "$scratch" ] || die "no kubicle.scratch= on the command line"

for m in $(cat /lib/modules/order); do
  case $m in
    kvm-amd.ko) insmod /lib/modules/$m nested=1 || die "insmod $m failed" ;;
    *) insmod /lib/modules/$m || die "insmod $m failed" ;;
  esac
done
[ -c /dev/kvm ] || die "/dev/kvm did not appear (is the CPU model missing svm?)"

mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /host ||
  die "cannot mount the host root"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /host/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
mount -t tmpfs -o mode=1777 tmpfs /host/tmp
mount -t tmpfs -o mode=0755 tmpfs /host/run
# cgroup v2 here (the build machine has v1), so kubicle-node's cgroup code
# runs on both hierarchies.
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup || die "cannot mount cgroup2"
mkdir -p "/host$scratch"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 scratch "/host$scratch" ||
  die "cannot mount the scratch directory"
# Directories of the host's /tmp the harness shares (hidden by the tmpfs).
i=0
for dir in $(echo "$shares" | tr ':' ' '); do
  mkdir -p "/host$dir"
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 "share$i" "/host$dir" ||
    die "cannot mount the shared directory $dir"
  i=$((i + 1))
done
hostname kubicle-testhost
ip link set lo up || die "cannot bring up the loopback interface"
say "ready after $(cut -d' ' -f1 /proc/uptime) s"

# A heartbeat: if these lines stop, the test host itself is wedged (not
# just the command); the load shows whether anything still runs.
( while sleep 30; do
    say "alive: uptime $(cut -d' ' -f1 /proc/uptime) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  done ) &
heartbeat=$!
chroot /host /bin/sh "$scratch/cmd.sh" </dev/null >/dev/console 2>&1
status=$?
kill $heartbeat
echo "$status" >"/host$scratch/exit-status"
sync
say "command exited with status $status"
umount "/host$scratch"
poweroff -f
