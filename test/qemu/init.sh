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

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
SHARE=/run/netkit-vm
# The command's outputs go through these FIFOs to relays into the serial ports:
# a port can be opened only once at a time, a FIFO again and again (tee
# /dev/stderr), and stragglers can be cut off (see run_command).
OUT_FIFO=/run/netkit-vm-stdout
ERR_FIFO=/run/netkit-vm-stderr
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
  mapfile -d '' -t argv <"$SHARE/argv"
  mapfile -d '' -t env <"$SHARE/env"
  local cwd stdout stderr
  cwd=$(<"$SHARE/cwd")
  ((${#argv[@]})) || fail "empty command"
  stdout=$(virtio_port stdout)
  stderr=$(virtio_port stderr)

  # One word is a shell script; several are a command and its arguments,
  # passed through unchanged.
  local -a sh=(/bin/sh -c "${argv[0]}")
  ((${#argv[@]} == 1)) || sh=(/bin/sh -c 'exec "$@"' sh "${argv[@]}")

  mkfifo "$OUT_FIFO" "$ERR_FIFO"
  cat "$OUT_FIFO" >"$stdout" &
  local out_relay=$!
  cat "$ERR_FIFO" >"$stderr" &
  local err_relay=$!

  # The outer 2>/dev/null swallows bash's own "Killed" report when the
  # command dies of a signal; the command's stderr goes to the FIFO.
  local status=0
  {
    (cd "$cwd" && exec env -i \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root USER=root LOGNAME=root SHELL=/bin/sh TERM=dumb LANG=C.UTF-8 \
      PWD="$cwd" NETKIT_VM=1 "${env[@]}" "${sh[@]}") \
      >"$OUT_FIFO" 2>"$ERR_FIFO"
  } 2>/dev/null || status=$?

  # The command's end is the machine's end: kill what it left running so the
  # relays see end-of-file and drain instead of waiting forever. A blocking
  # write to a serial port returns once qemu has taken the bytes, so nothing
  # is lost at power-off.
  local pid
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    case $pid in 1 | "$out_relay" | "$err_relay") continue ;; esac
    kill -KILL "$pid" 2>/dev/null
  done
  wait "$out_relay" "$err_relay"
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
