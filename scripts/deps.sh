#!/usr/bin/env bash
# Installs what building and testing netkit-cni needs on a fresh Debian 12 machine.
# Idempotent: every step checks first, so `make` targets can call it on every run.
# A failing step says which one failed and why (scripts/apt.sh).
#
#   scripts/deps.sh          build and test dependencies
#   scripts/deps.sh bench    also the benchmark's tools (sockperf, strace, iperf3)
#                            and the applications below
#   scripts/deps.sh apps     also the applications the workload section serves and loads
#                            (bench/lib/apps): nginx + wrk, Redis, PostgreSQL 15 + pgbench,
#                            etcd, memcached (its client is our own). The bench
#                            starts them itself, as plain processes inside namespaces; any
#                            system service the packages start stays in the root netns.
set -euo pipefail

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

[ "$(id -u)" = 0 ] || step_failed "check user" "run as root (apt, netns and bpffs need it)"

# The build (esbuild, Node's single executable support) and the tests run on Node >= 20.12
# (package.json "engines"); Debian 12's own nodejs is 18, too old. Say so before apt or npm
# do anything.
node_version=$(node --version 2>/dev/null) ||
  step_failed "check node" "no node on PATH: install Node.js 20.12 or later (e.g. the nodejs package of a Node 20 repository)"
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 12) ? 0 : 1)' ||
  step_failed "check node" "node $node_version is too old: the build needs 20.12 or later"

# Backports carries iproute2 6.15 / bpftool 7.5 (they know netkit), linux-libc-dev with the
# tcx/netkit uapi and linux-source-6.12 for the UML test kernel; non-free carries netperf.
codename=$(debian_codename)
ensure_sources deb "$codename-backports main contrib non-free" "$codename non-free"

apt_install -t "$codename-backports" iproute2 bpftool linux-libc-dev
# netperf (non-free): the rate-limit tests measure what a limited pod achieves with it.
# nftables: the agent's masquerade table; tcpdump: the WireGuard test's capture on the wire
# (test/distro); curl and openssl: its tests (endpoints, the
# stand-in API server's certificate).
apt_install clang llvm libbpf-dev containernetworking-plugins iputils-ping iptables \
  procps util-linux netperf nftables curl openssl tcpdump
if [ "${1:-}" = bench ]; then apt_install sockperf strace iperf3; fi
if [ "${1:-}" = bench ] || [ "${1:-}" = apps ]; then
  apt_install nginx-light wrk redis-server redis-tools postgresql-15 postgresql-client-15 \
    etcd-server etcd-client memcached
fi

# npm ci only when the lock file changed since the last install.
cd "$(dirname "$0")/.."
stamp=node_modules/.deps-stamp
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  run_step "npm ci" npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi
