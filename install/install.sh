#!/usr/bin/env bash
# Installs netkit-cni on this node from a build tree: runs `dist/netkit-cni install`,
# which copies the executable into the CNI bin dir and writes the conflist into the CNI
# config dir (both by temporary file + rename; identical files are left alone; a config
# of the same name that belongs to another plugin is kept unless --force).
#
#   install/install.sh --pod-cidr 10.244.1.0/24 --cluster-cidr 10.244.0.0/16
#   install/install.sh --conflist cni-conf/10-netkit-cni.conflist     (edit subnets first)
#   install/install.sh --help                                         (all options)
#
# Without --pod-cidr or --conflist it installs cni-conf/10-netkit-cni.conflist.
# NETKIT_CNI_BINARY overrides the executable (default: dist/netkit-cni of this tree).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
binary=${NETKIT_CNI_BINARY:-$here/dist/netkit-cni}
[ -x "$binary" ] || { echo "install.sh: $binary not found; run 'make build' first" >&2; exit 1; }

args=("$@")
case " $* " in
  *" --pod-cidr "* | *" --conflist "* | *" --help "*) ;;
  *) args+=(--conflist "$here/cni-conf/10-netkit-cni.conflist") ;;
esac
exec "$binary" install "${args[@]}"
