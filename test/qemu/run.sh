#!/usr/bin/env bash
# Runs a command inside a qemu guest booting Debian's packaged 6.12 kernel.
#
#   run.sh [--timeout SECONDS] [--env KEY=VALUE]... -- COMMAND...
#
# One COMMAND word is run as a /bin/sh script; several are run as a command
# and its arguments, unchanged. The guest sees the host's files read-only
# (writes land in a throwaway overlay), except the current folder, which is
# mounted read-write at the same path and is the command's working folder.
# The command's stdout/stderr stream to ours and its exit status becomes ours.
# Harness failures: 124 = timed out, 125 = the guest ended without reporting a
# status; both with a message on stderr. The contract is test/vm/run.sh's.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/support/guest-run.sh
source "$HERE/../support/guest-run.sh"

guest_args "$@"
kernel=$("$HERE/kernel.sh") || guest_die "no guest kernel (kernel.sh failed)"

# qemu's option syntax separates with commas (a literal one would be doubled).
guest_cwd

# Private folder per run: the folder shared with the guest and the output
# FIFOs, so concurrent runs never meet.
run=$(mktemp -d /dev/shm/netkit-qemu.XXXXXX)
timeout_pid=
# qemu runs under timeout(1), whose death would orphan it: kill qemu (the
# child) first. Runs from the EXIT trap too, so nothing in it may fail under
# set -e.
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  local pid
  if [[ -n $timeout_pid ]]; then
    for pid in $(pgrep -P "$timeout_pid" || true) "$timeout_pid"; do
      kill -KILL "$pid" 2>/dev/null || true
    done
  fi
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# qemu writes each serial port into a FIFO; the relays pass it on, so qemu
# never reopens (and truncates) whatever our stdout/stderr are.
guest_share "$run"

# The guest kernel's own console (boot log, panics) is discarded unless
# NETKIT_VM_DEBUG=1, which sends it to stderr.
console=(-serial null)
append="quiet"
if [[ ${NETKIT_VM_DEBUG:-} == 1 ]]; then
  console=(-chardev "file,id=console,path=$run/stderr" -serial chardev:console)
  append="console=ttyS0 ignore_loglevel"
fi

# No KVM here: TCG emulates the CPU, one host thread per vCPU (thread=multi).
# One vCPU by default: on this 2-core machine, shared with other lanes, the distro
# test file took 151 s with one and 247 s with two (vCPUs that wait for each other's
# TLB flushes and IPIs cost more than they run in parallel).
# panic=-1 and -no-reboot: a guest kernel panic ends qemu at once.
# multidevs=remap: the host's root spans several filesystems whose inode
# numbers would collide in the guest's single 9p mount.
# On time-out, timeout(1) sends SIGTERM to qemu, which then exits.
timeout -k 5 "$timeout" qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp "${NETKIT_QEMU_SMP:-1}" -m 4G \
  -nodefaults -no-user-config -display none -no-reboot \
  -kernel "$kernel/vmlinuz" -initrd "$kernel/initramfs.cpio.gz" \
  -append "$append panic=-1 nkvm_init=$HERE/init.sh nkvm_modules=$kernel/modules" \
  "${console[@]}" \
  -virtfs "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$share,mount_tag=run,security_model=none" \
  -virtfs "local,path=$cwd,mount_tag=cwd,security_model=none" \
  -device virtio-serial-pci \
  -chardev "file,id=stdout,path=$run/stdout" -device virtserialport,chardev=stdout,name=stdout \
  -chardev "file,id=stderr,path=$run/stderr" -device virtserialport,chardev=stderr,name=stderr \
  </dev/null >/dev/null 2>"$run/qemu.log" &
timeout_pid=$!
qemu_status=0
wait "$timeout_pid" || qemu_status=$?
timeout_pid=
qemu_log=$(tail -n 3 "$run/qemu.log")
guest_finish "$qemu_status" "qemu exit status $qemu_status${qemu_log:+; qemu said: $qemu_log}; NETKIT_VM_DEBUG=1 shows the guest's console"
