#!/bin/bash
# PID 1 of the UML guest started by run.sh.
#
# The guest's root is the host's root through hostfs, mounted read-only so the
# guest cannot damage the host. Stage one stacks a tmpfs overlay on top of it
# and switches into that, so the guest can write anywhere (writes vanish at
# power-off). Stage two mounts the usual kernel filesystems, the per-run folder
# and the caller's working folder (both read-write, straight through to the
# host), runs the command and powers off.
#
# Contract with run.sh, all in the per-run folder given as nkvm_share=<host path>
# on the kernel command line:
#   argv    command words, NUL-separated (one word: a /bin/sh script)
#   env     KEY=VALUE entries, NUL-separated, added to the command's environment
#   cwd     host folder mounted read-write at the same path; the command's cwd
#   status  written here: the command's exit status
# Console: /dev/tty1 is the host's stdout, /dev/tty2 the host's stderr.

# PATH, the per-run folder, and running the command: shared with test/qemu/init.sh.
# shellcheck source=../support/guest-init.sh
. "${0%/*}/../support/guest-init.sh"

power_off() {
  sync
  echo o >/proc/sysrq-trigger
  # PID 1 must never exit (that panics the kernel); wait for the power-off.
  while :; do sleep 60; done
}

fail() {
  echo "netkit-vm init: $*" >&2
  power_off
}

# Raw output: without it the tty turns "\n" into "\r\n".
console_setup() {
  stty -F /dev/tty1 raw -echo -opost 2>/dev/null
  stty -F /dev/tty2 raw -echo -opost 2>/dev/null
  exec </dev/null 2>/dev/tty2
}

stage1() {
  mount -t proc proc /proc || exit 1
  # The kernel mounts devtmpfs itself when built with DEVTMPFS_MOUNT.
  mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev || exit 1
  console_setup
  [[ -n ${nkvm_share:-} ]] || fail "no nkvm_share= on the kernel command line"
  # /tmp of the host root only serves as a mount point here.
  mount -t tmpfs -o mode=0755 tmpfs /tmp || fail "tmpfs"
  mkdir -p /tmp/upper /tmp/work /tmp/root
  mount -t overlay overlay -o lowerdir=/,upperdir=/tmp/upper,workdir=/tmp/work \
    /tmp/root || fail "overlay over /"
  # The switch_root idiom: make the overlay the root of the mount tree (not
  # only a chroot) so tools that pivot_root or inspect mounts behave normally.
  cd /tmp/root || fail "cd /tmp/root"
  # -n: the read-only root has no room for mount(8)'s bookkeeping.
  mount -n --move . / || fail "moving the overlay to /"
  exec chroot . /bin/bash "$0" stage2
}

mount_kernel_filesystems() {
  mount -t proc proc /proc
  mount -t sysfs sysfs /sys
  mount -t devtmpfs devtmpfs /dev
  mkdir -p /dev/pts /dev/shm
  # devtmpfs has no /dev/fd and friends (udev makes them on a real system); bash's
  # process substitution and many scripts need them.
  ln -sfn /proc/self/fd /dev/fd
  ln -sfn /proc/self/fd/0 /dev/stdin
  ln -sfn /proc/self/fd/1 /dev/stdout
  ln -sfn /proc/self/fd/2 /dev/stderr
  mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
  mount -t tmpfs -o mode=1777 tmpfs /dev/shm
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  mount -t tmpfs -o mode=0755 tmpfs /run
  mount -t bpf bpffs /sys/fs/bpf
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
  mount -t tracefs tracefs /sys/kernel/tracing
}

run_command() {
  local -a argv env
  local cwd status
  guest_read_command

  if [[ $cwd != / ]]; then
    { mkdir -p "$cwd" && mount -t hostfs -o "$cwd" hostfs "$cwd"; } ||
      fail "cannot mount the host folder $cwd"
  fi

  guest_run /dev/tty1 /dev/tty2
  # stty sets the mode with TCSADRAIN: it returns once the console has passed
  # everything on to the host, which power-off would otherwise cut short.
  stty -F /dev/tty1 raw 2>/dev/null
  stty -F /dev/tty2 raw 2>/dev/null

  echo "$status" >"$SHARE/status"
}

stage2() {
  mount_kernel_filesystems
  console_setup
  mkdir -p "$SHARE"
  mount -t hostfs -o "$nkvm_share" hostfs "$SHARE" ||
    fail "cannot mount the per-run folder $nkvm_share"
  hostname netkit-vm
  ip link set lo up
  run_command
  power_off
}

case ${1:-} in
  stage2) stage2 ;;
  *) stage1 ;;
esac
