# shellcheck shell=bash
# The half of a guest's PID 1 (test/vm/init.sh, test/qemu/init.sh) that does not depend on
# how the guest boots: PATH, the per-run folder, and running the command it names with
# its outputs relayed to the host. Sourced, not run; the init defines `fail` (report and
# power off) and wraps these in its run_command, where its own steps go between them
# (the UML guest mounts the working folder and drains its console afterwards, the qemu
# guest finds its serial ports and syncs afterwards). guest-run.sh is the host's half.
#
# The per-run folder holds argv (command words, NUL-separated; one word: a /bin/sh
# script), env (KEY=VALUE entries, NUL-separated, added to the command's environment),
# cwd (the command's working folder) and, once the command has ended, status.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
SHARE=/run/netkit-vm
# The command's outputs go through these FIFOs to relays into the host's outputs, so the
# command sees pipes, not ttys or ports (a port can be opened only once at a time, a FIFO
# again and again: tee /dev/stderr), and stragglers can be cut off (see guest_run).
OUT_FIFO=/run/netkit-vm-stdout
ERR_FIFO=/run/netkit-vm-stderr

# Reads the command into the caller's `argv`, `env` and `cwd`.
guest_read_command() {
  mapfile -d '' -t argv <"$SHARE/argv"
  mapfile -d '' -t env <"$SHARE/env"
  cwd=$(<"$SHARE/cwd")
  ((${#argv[@]})) || fail "empty command"
}

# Runs the command read by guest_read_command, its stdout relayed to $1 and its stderr
# to $2, and leaves its exit status in the caller's `status`. Then kills what it left
# running and waits for the relays to drain.
guest_run() {
  # One word is a shell script; several are a command and its arguments,
  # passed through unchanged.
  local -a sh=(/bin/sh -c "${argv[0]}")
  ((${#argv[@]} == 1)) || sh=(/bin/sh -c 'exec "$@"' sh "${argv[@]}")

  mkfifo "$OUT_FIFO" "$ERR_FIFO"
  cat "$OUT_FIFO" >"$1" &
  local out_relay=$!
  cat "$ERR_FIFO" >"$2" &
  local err_relay=$!

  # The outer 2>/dev/null swallows bash's own "Killed" report when the
  # command dies of a signal; the command's stderr goes to the FIFO.
  status=0
  {
    (cd "$cwd" && exec env -i \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root USER=root LOGNAME=root SHELL=/bin/sh TERM=dumb LANG=C.UTF-8 \
      PWD="$cwd" NETKIT_VM=1 "${env[@]}" "${sh[@]}") \
      >"$OUT_FIFO" 2>"$ERR_FIFO"
  } 2>/dev/null || status=$?

  # The command's end is the machine's end: kill what it left running so the
  # relays see end-of-file and drain instead of waiting forever.
  local pid
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    case $pid in 1 | "$out_relay" | "$err_relay") continue ;; esac
    kill -KILL "$pid" 2>/dev/null
  done
  wait "$out_relay" "$err_relay"
}
