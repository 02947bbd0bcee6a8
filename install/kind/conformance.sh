#!/usr/bin/env bash
# Kubernetes' own sig-network conformance tests against a kind cluster running netkit-cni:
# install/kind/up.sh (image, cluster with kind's CNI off, the DaemonSet, Ready nodes, a
# pod-to-pod check), then the e2e.test binary of the cluster's Kubernetes version with
# one of two focuses: "conformance" (the default), sig-network's [Conformance] tests; or
# "netpol", upstream's NetworkPolicy truth tables (sig-network ... Feature:NetworkPolicy),
# which the agent enforces unless it runs with --network-policy=false. Needs docker, kind,
# kubectl and curl (or E2E_TEST pointing at an e2e.test already at hand), and a build
# (make build).
#
#   install/kind/conformance.sh [conformance|netpol]
#   E2E_TEST=/path/to/e2e.test  E2E_FOCUS='regex'  E2E_SKIP='regex'  ARTIFACTS=dir  KIND_CLUSTER_NAME=x  install/kind/conformance.sh
#
# e2e.test comes from kubernetes-test-linux-amd64.tar.gz of the server's version
# (downloaded here into $ARTIFACTS when E2E_TEST is not set). Results (JUnit) go to
# $ARTIFACTS (default: a new temporary directory); the exit status is e2e.test's.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name=${KIND_CLUSTER_NAME:-netkit}
ctx=kind-$name
artifacts=${ARTIFACTS:-$(mktemp -d -t netkit-cni-conformance.XXXXXX)}

say() { printf '==> %s\n' "$*"; }
die() { printf 'conformance.sh: %s\n' "$*" >&2; exit 1; }

case "${1:-conformance}" in
  conformance) focus='\[sig-network\].*\[Conformance\]' ;;
  netpol) focus='\[sig-network\].*Feature:NetworkPolicy' ;;
  *) die "unknown suite '$1' (conformance or netpol)" ;;
esac
focus=${E2E_FOCUS:-$focus}

"$here/up.sh"
mkdir -p "$artifacts"

e2e=${E2E_TEST:-}
if [ -z "$e2e" ]; then
  command -v curl >/dev/null || die "curl not found (or set E2E_TEST)"
  version=$(kubectl --context "$ctx" version -o json | sed -n 's/.*"gitVersion": *"\(v[^"]*\)".*/\1/p' | tail -n 1)
  [ -n "$version" ] || die "cannot tell the cluster's Kubernetes version"
  say "fetching e2e.test $version"
  curl -fsSL "https://dl.k8s.io/$version/kubernetes-test-linux-amd64.tar.gz" |
    tar -xz -C "$artifacts" kubernetes/test/bin/e2e.test
  e2e=$artifacts/kubernetes/test/bin/e2e.test
fi
[ -x "$e2e" ] || die "$e2e is not an executable"

kubeconfig=$artifacts/kubeconfig
kind get kubeconfig --name "$name" >"$kubeconfig"
say "running $focus (results in $artifacts)"
args=(
  --kubeconfig="$kubeconfig"
  --provider=skeleton
  --ginkgo.focus="$focus"
  --report-dir="$artifacts"
  --ginkgo.timeout=3h
)
[ -n "${E2E_SKIP:-}" ] && args+=(--ginkgo.skip="$E2E_SKIP")
exec "$e2e" "${args[@]}"
