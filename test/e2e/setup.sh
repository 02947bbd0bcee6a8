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

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/../../scripts/apt.sh"

[ "$(id -u)" = 0 ] || step_failed "check user" "run as root (apt and the runtimes need it)"

CACHE=/var/cache/netkit-cni/cnitool
# The runtimes as tested: without podman's recommended extras (buildah, slirp4netns, …).
APT_INSTALL_OPTS=--no-install-recommends

# deb-src for the release (cnitool's source) and the backports suite (golang-go 1.23),
# from the machine's own mirror.
codename=$(debian_codename)
ensure_sources deb-src "$codename main"
ensure_sources deb "$codename-backports main"

# The clients, the reference plugins, a static busybox for images; dpkg-dev for
# `apt-get source`; shellcheck, python3-yaml, openssl and curl for the install-kit tests;
# libc6-dev for the CRI test's pause binary (clang -static links libc.a).
apt_install podman conmon runc containerd busybox-static containernetworking-plugins \
  golang-github-appc-cni-dev iptables iproute2 dpkg-dev shellcheck python3-yaml openssl curl libc6-dev
apt_install -t "$codename-backports" golang-go

# cnitool, keyed by the source version of the libcni the runtimes embed.
version=$(dpkg-query -W -f='${source:Version}' golang-github-appc-cni-dev)
bin=$CACHE/$version/cnitool
if [ ! -x "$bin" ]; then
  work=$(mktemp -d /tmp/nkc-cnitool.XXXXXX)
  chmod 0755 "$work" # apt-get source downloads as _apt
  trap 'rm -rf "$work"' EXIT
  apt_update
  (cd "$work" && run_step "apt-get source golang-github-appc-cni-dev=$version" \
    apt-get source -qq "golang-github-appc-cni-dev=$version")
  src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n1)
  [ -f "$src/cnitool/cnitool.go" ] || step_failed "find cnitool's source" "no cnitool/cnitool.go in ${src:-$work}"
  mkdir -p "$work/gopath/src/github.com/containernetworking"
  ln -s "$src" "$work/gopath/src/github.com/containernetworking/cni"
  run_step "create $CACHE/$version" mkdir -p "$CACHE/$version"
  (cd "$work/gopath/src/github.com/containernetworking/cni" &&
    run_step "go build cnitool" env GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" \
      GOCACHE="$work/gocache" GOFLAGS="" go build -o "$bin.tmp" ./cnitool)
  run_step "install $bin" mv -f "$bin.tmp" "$bin"
fi
echo "$bin"
