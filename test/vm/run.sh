#!/usr/bin/env bash
# Runs a command inside a User-Mode Linux 6.12 guest that has netkit.
#
#   run.sh [--timeout SECONDS] [--env KEY=VALUE]... -- COMMAND...
#
# One COMMAND word is run as a /bin/sh script; several are run as a command
# and its arguments, unchanged. The guest sees the host's files read-only
# (writes land in a throwaway overlay), except the current folder, which is
# mounted read-write at the same path and is the command's working folder.
# The command's stdout/stderr stream to ours and its exit status becomes ours.
# Harness failures: 124 = timed out, 125 = the guest ended without reporting a
# status; both with a message on stderr.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=test/support/guest-run.sh
source "$HERE/../support/guest-run.sh"

guest_args "$@"
kernel=$("$HERE/kernel.sh") || guest_die "no UML kernel (kernel.sh failed)"

# hostfs takes the host path as its whole mount option string; mount(8)
# would split it at commas.
guest_cwd

# Private folder per run: guest RAM file, UML's pid/console socket folder and
# the folder shared with the guest, so concurrent runs never meet.
run=$(mktemp -d /dev/shm/netkit-vm.XXXXXX)
UMID=guest
timeout_pid=
# UML starts by calling setsid, so neither our process group nor timeout(1)'s
# reaches its host processes: kill the session of timeout's child (before
# timeout goes and the child is orphaned), and the one named in UML's pid file.
# Runs from the EXIT trap too, so nothing in it may fail under set -e.
kill_guest() {
  local pids=() pid
  if [[ -n $timeout_pid ]]; then
    mapfile -t pids < <(pgrep -P "$timeout_pid" || true)
    kill -KILL "$timeout_pid" 2>/dev/null || true
  fi
  pids+=("$(cat "$run/$UMID/pid" 2>/dev/null || true)")
  for pid in "${pids[@]}"; do
    [[ $pid =~ ^[0-9]+$ ]] || continue
    kill -KILL -- -"$pid" "$pid" 2>/dev/null || true
  done
}
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  kill_guest
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# UML marks its console file descriptors non-blocking, which would leak to
# whoever shares our stdout/stderr; relays through FIFOs keep that contained.
guest_share "$run"

# A crashing UML aborts; its core dump is of no use and would land in $cwd.
ulimit -c 0

# The guest kernel's own console (boot log, panics) is discarded unless
# NETKIT_VM_DEBUG=1, which sends it to stderr.
console=("con0=null,null" quiet)
if [[ ${NETKIT_VM_DEBUG:-} == 1 ]]; then
  # A distinct descriptor: UML cannot watch one fd for two consoles.
  exec 3>"$run/stderr"
  console=("con0=null,fd:3")
fi

# On time-out, timeout(1) sends SIGTERM to UML, which then shuts down and
# takes its host processes with it (0 disables the limit).
TMPDIR=$run timeout -k 5 "$timeout" "$kernel" \
  mem=2G root=/dev/root rootfstype=hostfs rootflags=/ ro \
  init="$HERE/init.sh" nkvm_share="$share" uml_dir="$run" umid="$UMID" \
  con=null "${console[@]}" con1=null,fd:1 con2=null,fd:2 ssl=null \
  </dev/null >"$run/stdout" 2>"$run/stderr" &
timeout_pid=$!
exec 3>&-
uml_status=0
# 2>/dev/null: bash would add its own "Aborted" line when UML crashes.
{ wait "$timeout_pid"; } 2>/dev/null || uml_status=$?
timeout_pid=
# Leftover UML helpers would hold the FIFOs open; then let the relays drain.
kill_guest
guest_finish "$uml_status" "UML exit status $uml_status; NETKIT_VM_DEBUG=1 shows the guest's console"
