#!/usr/bin/env bash
# Installs what the e2e suite (test/e2e) needs on Debian 12, on top of scripts/deps.sh:
# the real CNI clients (podman 4.3, containerd 1.6 + ctr, runc), a static busybox for
# container images, and cnitool, which Debian does not package: it is built from the
# Debian source of golang-github-appc-cni-dev with golang-go from bookworm-backports and
# cached under /var/cache/netkit-cni/cnitool/<source version>/.
# Idempotent: every step checks first; a machine that has everything only runs checks.
#
#   test/e2e/setup.sh            installs, then prints the path of cnitool
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "setup.sh: run as root" >&2; exit 1; }

CACHE=/var/cache/netkit-cni/cnitool
SRC_LIST=/etc/apt/sources.list.d/netkit-cni-e2e-src.sources

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/../../scripts/apt.sh"
# The runtimes as tested: without podman's recommended extras (buildah, slirp4netns, …).
APT_INSTALL_OPTS=--no-install-recommends

# deb-src for bookworm (cnitool's source) and the backports suite (golang-go 1.23).
ensure_sources() {
  if [ ! -f "$SRC_LIST" ]; then
    cat >"$SRC_LIST" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    APT_UPDATED=no
  fi
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat >/etc/apt/sources.list.d/netkit-cni-e2e-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    APT_UPDATED=no
  fi
}

ensure_sources
# The clients, the reference plugins, a static busybox for images; dpkg-dev for
# `apt-get source`; shellcheck, python3-yaml, openssl and curl for the install-kit tests.
apt_install podman conmon runc containerd busybox-static containernetworking-plugins \
  golang-github-appc-cni-dev iptables iproute2 dpkg-dev shellcheck python3-yaml openssl curl
apt_install -t bookworm-backports golang-go

# cnitool, keyed by the source version of the libcni the runtimes embed.
version=$(dpkg-query -W -f='${source:Version}' golang-github-appc-cni-dev)
bin=$CACHE/$version/cnitool
if [ ! -x "$bin" ]; then
  work=$(mktemp -d /tmp/nkc-cnitool.XXXXXX)
  chmod 0755 "$work" # apt-get source downloads as _apt
  trap 'rm -rf "$work"' EXIT
  apt_update
  (cd "$work" && apt-get source -qq "golang-github-appc-cni-dev=$version" >/dev/null)
  src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n1)
  [ -f "$src/cnitool/cnitool.go" ] || { echo "setup.sh: no cnitool/ in $src" >&2; exit 1; }
  mkdir -p "$work/gopath/src/github.com/containernetworking"
  ln -s "$src" "$work/gopath/src/github.com/containernetworking/cni"
  mkdir -p "$CACHE/$version"
  (cd "$work/gopath/src/github.com/containernetworking/cni" &&
    GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/gocache" GOFLAGS="" \
      go build -o "$bin.tmp" ./cnitool)
  mv -f "$bin.tmp" "$bin"
fi
echo "$bin"
