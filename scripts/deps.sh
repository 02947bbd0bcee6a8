#!/usr/bin/env bash
# Installs what building and testing netkit-cni needs on a fresh Debian 12 machine.
# Idempotent: every step checks first, so `make` targets can call it on every run.
set -euo pipefail

need_root() { [ "$(id -u)" = 0 ] || { echo "deps.sh: run as root (apt, netns and bpffs need it)" >&2; exit 1; }; }

# Debian suites: backports carries iproute2 6.15 / bpftool 7.5 (they know netkit) and
# linux-source-6.12 for the UML test kernel; non-free carries netperf.
ensure_apt_sources() {
  local f=/etc/apt/sources.list.d/netkit-cni.sources
  [ -f "$f" ] && return 0
  APT_UPDATED=no
  cat >"$f" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
}

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

need_root
ensure_apt_sources
# linux-libc-dev from backports: the uapi headers for tcx and netkit (6.6+) the BPF C uses.
apt_install -t bookworm-backports iproute2 bpftool linux-libc-dev
apt_install clang llvm libbpf-dev containernetworking-plugins iputils-ping iptables \
  procps util-linux

# npm ci only when the lock file changed since the last install.
cd "$(dirname "$0")/.."
stamp=node_modules/.deps-stamp
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi
