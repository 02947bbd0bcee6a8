#!/bin/sh
# /init of the qemu guest's initramfs (kernel.sh packs it; busybox runs it).
#
# Builds the whole machine before handing over, with busybox from RAM: every
# program started later comes from the host over 9p, which costs a fraction of
# a second per start under emulation.
# - The host's root, shared by qemu over 9p as "host", read-only, under a tmpfs
#   overlay: the guest may write anywhere, and those writes vanish at power-off.
# - Inside it: the kernel filesystems, the package's modules at
#   /lib/modules/<release> (kernel command line nkvm_modules=<host folder>),
#   the per-run folder (share "run") at /run/netkit-vm and the caller's working
#   folder (share "cwd") read-write at its own path (named in run/cwd).
# - The BPF JIT on, hostname netkit-vm, loopback up.
# Then nkvm_init= (test/qemu/init.sh) runs the command as PID 1 in the new root.
# Any failure powers off; run.sh then reports that the guest gave no status.
PATH=/bin
export PATH
NEW=/newroot
# 9p: the host's files through qemu's own file server. msize: larger messages,
# fewer round trips through the emulated device.
NINEP=trans=virtio,version=9p2000.L,msize=512000

fail() {
  echo "netkit-qemu initramfs: $*" >&2
  poweroff -f
}

/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev
# The 9p and overlay modules, dependencies first (kernel.sh wrote the order).
while read -r module; do
  insmod "/modules/$module" || fail "insmod $module"
done </modules/load-order
[ -n "$nkvm_init" ] && [ -n "$nkvm_modules" ] ||
  fail "nkvm_init= and nkvm_modules= are needed on the kernel command line"

# cache=loose: the host's root does not change under a test run, so the guest
# may keep what it has read (node, node_modules) instead of asking again.
mount -t 9p -o "ro,$NINEP,cache=loose" host /lower || fail "9p mount of the host's root"
mount -t tmpfs -o mode=0755 tmpfs /overlay || fail "tmpfs"
mkdir -p /overlay/upper /overlay/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/overlay/upper,workdir=/overlay/work \
  "$NEW" || fail "overlay over the host's root"

mount -t proc proc "$NEW/proc" &&
  mount -t sysfs sysfs "$NEW/sys" &&
  mount -t devtmpfs devtmpfs "$NEW/dev" &&
  mkdir -p "$NEW/dev/pts" "$NEW/dev/shm" &&
  mount -t devpts -o newinstance,ptmxmode=0666 devpts "$NEW/dev/pts" &&
  mount -t tmpfs -o mode=1777 tmpfs "$NEW/dev/shm" &&
  mount -t tmpfs -o mode=1777 tmpfs "$NEW/tmp" &&
  mount -t tmpfs -o mode=0755 tmpfs "$NEW/run" &&
  mount -t bpf bpffs "$NEW/sys/fs/bpf" &&
  mount -t cgroup2 cgroup2 "$NEW/sys/fs/cgroup" &&
  mount -t tracefs tracefs "$NEW/sys/kernel/tracing" || fail "kernel filesystems"
# devtmpfs has no /dev/fd and friends (udev makes them on a real system); bash's
# process substitution and many scripts need them.
ln -sfn /proc/self/fd "$NEW/dev/fd"
ln -sfn /proc/self/fd/0 "$NEW/dev/stdin"
ln -sfn /proc/self/fd/1 "$NEW/dev/stdout"
ln -sfn /proc/self/fd/2 "$NEW/dev/stderr"

# modprobe, and the kernel's request_module that runs it, look here; the host
# has no modules for this kernel.
modules=$NEW/lib/modules/$(uname -r)
mkdir -p "$modules" && mount --bind "$NEW$nkvm_modules" "$modules" ||
  fail "cannot mount the modules from $nkvm_modules"

mkdir -p "$NEW/run/netkit-vm" && mount -t 9p -o "$NINEP" run "$NEW/run/netkit-vm" ||
  fail "cannot mount the per-run folder"
cwd=$(cat "$NEW/run/netkit-vm/cwd")
# cache=loose here too: without it every start of the plugin's executable
# (100 MB, in dist/) reads it again over 9p, 3-6 s instead of 1. The guest is
# the folder's only writer while it runs; init.sh syncs before reporting.
if [ "$cwd" != / ]; then
  mkdir -p "$NEW$cwd" && mount -t 9p -o "$NINEP,cache=loose" cwd "$NEW$cwd" ||
    fail "cannot mount the host folder $cwd"
fi

# The JIT is what the conntrack kfunc needs; Debian's default, made explicit.
echo 1 >/proc/sys/net/core/bpf_jit_enable || fail "cannot enable the BPF JIT"
hostname netkit-vm
ip link set lo up

umount /proc
exec switch_root "$NEW" "$nkvm_init" stage2
