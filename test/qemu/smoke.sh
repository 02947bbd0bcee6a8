#!/usr/bin/env bash
# Proves the qemu guest can run the distro lane: test/vm/smoke.sh's checks (6.12,
# netkit, namespaces, node, bpffs, cgroup2, tracefs, iptables NAT, the working
# folder), then what this guest adds: Debian's packaged kernel, the BPF JIT on, the
# package's modules loaded by modprobe. Run from the host (it re-runs itself in the
# guest through run.sh). Exits non-zero if any check fails; nothing is skipped.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
if [[ ${NETKIT_VM:-} != 1 ]]; then
  exec "$here/run.sh" --timeout 300 -- "$here/smoke.sh"
fi

failures=0
"$here/../vm/smoke.sh" || failures=1

check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    echo "ok   $name"
  else
    echo "FAIL $name"
    [[ -z $out ]] || printf '%s\n' "$out" | sed 's/^/     /'
    failures=$((failures + 1))
  fi
}

debian_kernel() { [[ $(uname -r) == 6.12.*+deb12*-amd64 ]] || { uname -r; return 1; }; }
jit_on() { [[ $(</proc/sys/net/core/bpf_jit_enable) == 1 ]]; }
# sch_fq is a module in Debian's kernel: modprobe (the host's kmod) finds it.
modprobe_loads() { modprobe sch_fq && [[ -d /sys/module/sch_fq ]]; }

check "Debian's packaged kernel" debian_kernel
check "BPF JIT on" jit_on
check "modprobe loads the package's modules" modprobe_loads

if ((failures)); then
  echo "some checks failed"
  exit 1
fi
echo "all qemu checks passed"
