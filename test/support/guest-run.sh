# shellcheck shell=bash
# The half of a guest runner (test/vm/run.sh, test/qemu/run.sh) that does not depend on
# how the guest boots: the command line, the folder shared with the guest, the output
# relays, and the exit status. Sourced, not run; the runner boots its guest between
# guest_share and guest_finish, and keeps its own cleanup on EXIT.
#
# The contract (both runners' header): one COMMAND word is run as a /bin/sh script,
# several as a command and its arguments; the guest's init reads them from the shared
# folder, with the --env settings and the working folder, and leaves the exit status
# there. Harness failures: 124 = timed out (naming the test file it struck in, when a
# test run kept a note), 125 = the guest ended without reporting a status.

# The runner's usage (lines 4 to 12 of its header).
guest_usage() {
  sed -n '4,12s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

guest_die() {
  echo "run.sh: $1" >&2
  exit "${2:-125}"
}

# Reads the runner's arguments into `timeout`, `envs` and `guest_argv`.
guest_args() {
  timeout=600
  envs=()
  while (($#)); do
    case $1 in
      --timeout)
        [[ ${2:-} =~ ^[0-9]+$ ]] || guest_usage
        timeout=$2
        shift 2
        ;;
      --timeout=*)
        timeout=${1#*=}
        [[ $timeout =~ ^[0-9]+$ ]] || guest_usage
        shift
        ;;
      --env)
        [[ ${2:-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || guest_usage
        envs+=("$2")
        shift 2
        ;;
      --)
        shift
        break
        ;;
      *) guest_usage ;;
    esac
  done
  (($#)) || guest_usage
  guest_argv=("$@")
}

# The current folder, which the guest mounts read-write at the same path: both guests'
# mount options separate with commas, so its path must have none.
guest_cwd() {
  cwd=$(pwd -P)
  [[ $cwd != *,* ]] || guest_die "the current folder's path contains a comma: $cwd" 2
}

# Fills `$1/share` (the folder shared with the guest: the command, its environment, its
# working folder) and starts the relays of the output FIFOs `$1/stdout` and `$1/stderr`
# to ours (their pids in `relays`).
guest_share() {
  share=$1/share
  mkdir "$share"
  printf '%s\0' "${guest_argv[@]}" >"$share/argv"
  # Test runs inside keep a note of the files they are in (test/support/progress.ts), so
  # that a time-out can say where it struck.
  envs+=("NETKIT_TEST_PROGRESS=/run/netkit-vm/progress")
  printf '%s\0' "${envs[@]}" >"$share/env"
  printf '%s\n' "$cwd" >"$share/cwd"
  mkfifo "$1/stdout" "$1/stderr"
  relays=()
  cat "$1/stdout" &
  relays+=($!)
  cat "$1/stderr" >&2 &
  relays+=($!)
}

# Exits as the guest's command did, once the relays have drained. `$1`: the exit status
# of timeout(1) around the guest (124: it timed out); `$2`: what to say when the guest
# left no status (the guest's own exit status, where to look).
guest_finish() {
  wait "${relays[@]}" || true
  if [[ -s $share/status ]]; then
    exit "$(<"$share/status")"
  fi
  if (($1 == 124)); then
    if [[ -s $share/progress ]]; then
      echo "run.sh: guest timed out after ${timeout}s, in:" >&2
      sed 's/^/  /' "$share/progress" >&2
      exit 124
    fi
    guest_die "guest timed out after ${timeout}s" 124
  fi
  guest_die "guest ended without reporting the command's exit status ($2)" 125
}
