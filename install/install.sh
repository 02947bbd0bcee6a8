#!/usr/bin/env bash
# Installs netkit-cni on a node: the binary into the CNI bin dir, a conflist into the
# CNI config dir. Both are written to a temporary name and renamed into place, so the
# runtime never reads a half-written file. An existing conflist of another name is left
# alone; ours is only replaced with --force.
#
#   install/install.sh [--bin-dir /opt/cni/bin] [--conf-dir /etc/cni/net.d]
#                      [--conflist cni-conf/10-netkit-cni.conflist] [--force]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=/opt/cni/bin
conf_dir=/etc/cni/net.d
conflist=$here/cni-conf/10-netkit-cni.conflist
binary=$here/dist/netkit-cni
force=no
while [ $# -gt 0 ]; do
  case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --conf-dir) conf_dir=$2; shift 2 ;;
    --conflist) conflist=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --force) force=yes; shift ;;
    *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "install.sh: $binary not found; run 'make build' first" >&2; exit 1; }

install -d -m 0755 "$bin_dir" "$conf_dir"
# Replacing the binary by rename keeps running invocations on the old inode.
install -m 0755 "$binary" "$bin_dir/.netkit-cni.tmp"
mv -f "$bin_dir/.netkit-cni.tmp" "$bin_dir/netkit-cni"

target=$conf_dir/$(basename "$conflist")
if [ -e "$target" ] && ! cmp -s "$conflist" "$target" && [ $force = no ]; then
  echo "install.sh: $target exists and differs; not replaced (use --force)" >&2
  exit 1
fi
install -m 0644 "$conflist" "$conf_dir/.netkit-cni.conflist.tmp"
mv -f "$conf_dir/.netkit-cni.conflist.tmp" "$target"
echo "installed $bin_dir/netkit-cni and $target"
