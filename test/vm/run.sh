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

usage() {
  sed -n '4,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

die() {
  echo "run.sh: $*" >&2
  exit "${2:-125}"
}

timeout=600
envs=()
while (($#)); do
  case $1 in
    --timeout)
      [[ ${2:-} =~ ^[0-9]+$ ]] || usage
      timeout=$2
      shift 2
      ;;
    --timeout=*)
      timeout=${1#*=}
      [[ $timeout =~ ^[0-9]+$ ]] || usage
      shift
      ;;
    --env)
      [[ ${2:-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || usage
      envs+=("$2")
      shift 2
      ;;
    --)
      shift
      break
      ;;
    *) usage ;;
  esac
done
(($#)) || usage

kernel=$("$HERE/kernel.sh") || die "no UML kernel (kernel.sh failed)"

# hostfs takes the host path as its whole mount option string; mount(8)
# would split it at commas.
cwd=$(pwd -P)
[[ $cwd != *,* ]] || die "the current folder's path contains a comma: $cwd" 2

# Private folder per run: guest RAM file, UML's pid/console socket folder and
# the folder shared with the guest, so concurrent runs never meet.
run=$(mktemp -d /dev/shm/netkit-vm.XXXXXX)
uml_pid=
relays=()
cleanup() {
  if [[ -n $uml_pid ]]; then
    kill -TERM "$uml_pid" 2>/dev/null || true
    kill -KILL -- -"$uml_pid" 2>/dev/null || true
  fi
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

share=$run/share
mkdir "$share"
printf '%s\0' "$@" >"$share/argv"
: >"$share/env"
if ((${#envs[@]})); then printf '%s\0' "${envs[@]}" >"$share/env"; fi
printf '%s\n' "$cwd" >"$share/cwd"

# UML marks its console file descriptors non-blocking, which would leak to
# whoever shares our stdout/stderr; relays through FIFOs keep that contained.
mkfifo "$run/stdout" "$run/stderr"
cat "$run/stdout" &
relays+=($!)
cat "$run/stderr" >&2 &
relays+=($!)

# A crashing UML aborts; its core dump is of no use and would land in $cwd.
ulimit -c 0

# timeout(1) puts UML and all its host processes in one process group and
# signals the whole group when time runs out (0 disables the limit).
TMPDIR=$run timeout -k 5 "$timeout" "$kernel" \
  mem=2G root=/dev/root rootfstype=hostfs rootflags=/ ro \
  init="$HERE/init.sh" nkvm_share="$share" uml_dir="$run" \
  con=null con0=null,null con1=null,fd:1 con2=null,fd:2 ssl=null quiet \
  </dev/null >"$run/stdout" 2>"$run/stderr" &
uml_pid=$!
uml_status=0
wait "$uml_pid" || uml_status=$?
# Leftover UML helpers would hold the FIFOs open; then let the relays drain.
kill -KILL -- -"$uml_pid" 2>/dev/null || true
uml_pid=
wait "${relays[@]}" || true

if [[ -s $share/status ]]; then
  exit "$(<"$share/status")"
fi
if ((uml_status == 124)); then
  die "guest timed out after ${timeout}s" 124
fi
die "guest ended without reporting the command's exit status (UML exit status $uml_status)" 125
