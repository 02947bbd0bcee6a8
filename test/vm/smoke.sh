#!/usr/bin/env bash
# Proves the UML guest can run the netkit tests: the kernel is 6.12 with
# netkit, namespaces, BPF filesystem, tracing and netfilter NAT, and the host's
# node and iproute2 work inside it. Run from the host (it re-runs itself in the
# guest through run.sh) or inside the guest. Exits non-zero if any check fails;
# nothing is skipped.
set -uo pipefail

if [[ ${NETKIT_VM:-} != 1 ]]; then
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
  exec "$here/run.sh" --timeout 120 -- "$here/smoke.sh"
fi

failures=0
# check NAME COMMAND...: runs COMMAND, shows its output only when it fails.
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

kernel_is_6_12() { [[ $(uname -r) == 6.12.* ]] || { uname -r; return 1; }; }

netkit_pair() {
  ip link add nk0 type netkit mode l3 peer name nk1 &&
    ip -d link show nk0 | grep -qw netkit
}

netns_works() {
  ip netns add smoke && ip -n smoke link set lo up && ip -n smoke link show lo | grep -q UP
}

# Traffic across the pair proves the device forwards, not only that it exists.
netkit_forwards() {
  ip link set nk1 netns smoke &&
    ip addr add 10.98.0.1/24 dev nk0 && ip link set nk0 up &&
    ip -n smoke addr add 10.98.0.2/24 dev nk1 && ip -n smoke link set nk1 up &&
    ping -c 1 -W 5 10.98.0.2
}

node_runs() { [[ $(node -e 'console.log(1)') == 1 ]]; }

mounted() { [[ $(stat -f -c %T "$1") == "$2" ]] || { stat -f -c %T "$1"; return 1; }; }

tracepoint_available() { [[ -d /sys/kernel/tracing/events/net/netif_rx ]]; }

# iptables is iptables-nft on Debian: needs nft_compat and the xt extensions.
iptables_dnat() {
  ip netns exec smoke iptables -t nat -A OUTPUT -d 10.99.0.1 -j DNAT --to-destination 10.99.0.2 &&
    ip netns exec smoke iptables -t nat -S OUTPUT | grep -q 'DNAT --to-destination 10.99.0.2'
}

iptables_masquerade_conntrack() {
  ip netns exec smoke iptables -t nat -A POSTROUTING -m conntrack --ctstate DNAT \
    -m comment --comment smoke -j MASQUERADE &&
    ip netns exec smoke ip6tables -t nat -A POSTROUTING -o lo -j MASQUERADE
}

iptables_legacy_dnat() {
  ip netns exec smoke iptables-legacy -t nat -A OUTPUT -d 10.99.0.1 -j DNAT --to-destination 10.99.0.2
}

workdir_writable() {
  local f=.netkit-vm-smoke.$$
  echo ok >"$f" && [[ $(<"$f") == ok ]] && rm "$f"
}

check "kernel is 6.12.x" kernel_is_6_12
check "netkit pair (mode l3)" netkit_pair
check "network namespace" netns_works
check "netkit forwards a ping" netkit_forwards
check "node runs" node_runs
check "bpffs at /sys/fs/bpf" mounted /sys/fs/bpf bpf_fs
check "cgroup2 at /sys/fs/cgroup" mounted /sys/fs/cgroup cgroup2fs
check "tracefs net:netif_rx" tracepoint_available
check "iptables DNAT in a netns" iptables_dnat
check "iptables MASQUERADE + conntrack, ip6tables" iptables_masquerade_conntrack
check "iptables-legacy DNAT" iptables_legacy_dnat
check "working folder writable" workdir_writable

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
