#!/bin/bash
# PID 1 of the qemu guest started by run.sh, once the initramfs has built the
# machine (initramfs-init.sh: root overlay, kernel filesystems, modules, the
# shared folders) and switched into it: runs the command and powers off. It
# starts few programs: each one comes from the host over 9p.
#
# Contract with run.sh:
#   the per-run folder, at /run/netkit-vm (read-write):
#     argv    command words, NUL-separated (one word: a /bin/sh script)
#     env     KEY=VALUE entries, NUL-separated, added to the command's environment
#     cwd     host folder mounted read-write at the same path; the command's
#             working folder (its writes are synced before the status)
#     status  written here: the command's exit status
#   virtio serial ports "stdout" and "stderr": run.sh's stdout and stderr.
#   /dev/console (the serial line): the guest's own messages.

# PATH, the per-run folder, and running the command: shared with test/vm/init.sh.
# shellcheck source=../support/guest-init.sh
. "${0%/*}/../support/guest-init.sh"

power_off() {
  echo o >/proc/sysrq-trigger
  # PID 1 must never exit (that panics the kernel); wait for the power-off.
  while :; do sleep 60; done
}

fail() {
  echo "netkit-qemu init: $*" >&2
  power_off
}

# The character device of the virtio serial port run.sh named $1.
virtio_port() {
  local port
  for port in /sys/class/virtio-ports/*; do
    [[ $(<"$port/name") == "$1" ]] && { echo "/dev/${port##*/}"; return; }
  done
  fail "no virtio serial port named $1"
}

run_command() {
  local -a argv env
  local cwd stdout stderr status
  guest_read_command
  stdout=$(virtio_port stdout)
  stderr=$(virtio_port stderr)

  # A blocking write to a serial port returns once qemu has taken the bytes, so
  # nothing the relays wrote is lost at power-off.
  guest_run "$stdout" "$stderr"
  # The working folder caches writes (cache=loose): they reach the host before
  # the status does. The per-run folder has no cache.
  sync
  echo "$status" >"$SHARE/status"
}

stage2() {
  exec </dev/null 2>/dev/console
  run_command
  power_off
}

case ${1:-} in
  stage2) stage2 ;;
  *) fail "run by run.sh through the initramfs only" ;;
esac
