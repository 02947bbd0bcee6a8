#!/usr/bin/env bash
# The main job, end to end: builds nothing itself (make demo builds first), then plays a
# container runtime. A "node" network namespace stands in for the host so the machine's
# own network is never touched; two pods are added with the real binary ("datapath":
# "auto": netkit where the kernel has it, else veth) and the embedded IPAM, traffic is
# shown flowing and the fast-path counters say which path it took, then everything is
# removed again, eBPF pins included.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=$PWD/dist/netkit-cni
NODE=nkdemo-node
PODS=(nkdemo-pod-a nkdemo-pod-b)
WORK=$(mktemp -d /tmp/nkdemo.XXXXXX)
CONF=$WORK/10-netkit-cni.conf
BPFFS=/sys/fs/bpf/netkit-cni-demo

bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
innode() { nsenter --net=/run/netns/$NODE "$@"; }

cleanup() {
  for ns in "${PODS[@]}" $NODE; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$WORK" "$BPFFS"
  # The node lock the plugin keeps for this bpffs root (src/datapath/node-datapath.ts).
  rm -f "/run/netkit-cni/node-$(printf %s "$BPFFS" | sha256sum | cut -c1-12).lock"
}
trap cleanup EXIT
cleanup_before() { for ns in "${PODS[@]}" $NODE; do ip netns del "$ns" 2>/dev/null || true; done; }
cleanup_before

bold "A node namespace with an uplink address (10.244.255.1, fd00:244:ff::1)"
ip netns add $NODE
innode ip link set lo up
innode ip link add uplink0 type veth peer name uplink0p
innode ip link set uplink0p up
innode ip link set uplink0 up
innode ip addr add 10.244.255.1/32 dev uplink0
innode ip -6 addr add fd00:244:ff::1/128 dev uplink0 nodad

cat >"$CONF" <<JSON
{
  "cniVersion": "1.1.0",
  "name": "demo",
  "type": "netkit-cni",
  "datapath": "auto",
  "hostInterface": "uplink0",
  "clusterCIDRs": ["10.244.0.0/16", "fd00:244::/48"],
  "bpffsRoot": "$BPFFS",
  "logFile": "$WORK/netkit-cni.log",
  "ipam": {
    "type": "netkit-cni",
    "ranges": [[{ "subnet": "10.244.1.0/24" }], [{ "subnet": "fd00:244:1::/64" }]],
    "dataDir": "$WORK/ipam"
  }
}
JSON
echo "network config ($CONF):"; sed 's/^/  /' "$CONF"

cni() { # cni VERB POD [extra env...]
  local verb=$1 pod=$2; shift 2
  innode env CNI_COMMAND="$verb" CNI_CONTAINERID="${pod#nkdemo-}" CNI_NETNS="/run/netns/$pod" \
    CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni "$@" "$BIN"
}

declare -A RESULT V4 V6
for pod in "${PODS[@]}"; do
  ip netns add "$pod"
  bold "ADD $pod"
  RESULT[$pod]=$(cni ADD "$pod" <"$CONF")
  echo "${RESULT[$pod]}" | node -e 'process.stdout.write(JSON.stringify(JSON.parse(require("fs").readFileSync(0)), null, 2) + "\n")'
  V4[$pod]=$(echo "${RESULT[$pod]}" | node -e 'const r=JSON.parse(require("fs").readFileSync(0));console.log(r.ips.find(i=>!i.address.includes(":")).address.split("/")[0])')
  V6[$pod]=$(echo "${RESULT[$pod]}" | node -e 'const r=JSON.parse(require("fs").readFileSync(0));console.log(r.ips.find(i=>i.address.includes(":")).address.split("/")[0])')
  echo "-- inside $pod:"
  ip -n "$pod" -br addr show dev eth0 | sed 's/^/  /'
  { ip -n "$pod" route; ip -n "$pod" -6 route show default; } | sed 's/^/  /'
done

A=${PODS[0]} B=${PODS[1]}
bold "Traffic"
ping_from() { # ping_from NETNS TARGET LABEL
  local out
  if out=$(nsenter --net="/run/netns/$1" ping -c 3 -i 0.2 -W 2 "$2" 2>&1); then
    printf '  %-34s %s\n' "$3" "$(echo "$out" | grep -o '[0-9]* received.*' | head -1; echo "$out" | tail -1 | sed 's/.*= /rtt /')" | paste -sd' '
  else
    printf '  %-34s FAILED\n%s\n' "$3" "$out"; exit 1
  fi
}
ping_from "$A" "${V4[$B]}" "pod-a -> pod-b ${V4[$B]}"
ping_from "$A" "${V6[$B]}" "pod-a -> pod-b ${V6[$B]}"
ping_from "$B" 10.244.255.1 "pod-b -> node 10.244.255.1"
ping_from "$B" fd00:244:ff::1 "pod-b -> node fd00:244:ff::1"
ping_from $NODE "${V4[$A]}" "node -> pod-a ${V4[$A]}"

bold "Host side (node namespace)"
innode ip -br link | grep '^nk' | sed 's/^/  /'
innode ip route | grep 10.244.1 | sed 's/^/  /'
DATAPATH=$(innode ip -d -j link show dev "$(echo "${RESULT[$A]}" | node -e 'console.log(JSON.parse(require("fs").readFileSync(0)).interfaces[0].name)')" | node -e 'console.log(JSON.parse(require("fs").readFileSync(0))[0].linkinfo.info_kind)')

bold "Endpoints and fast-path counters (netkit-cni endpoints)"
innode "$BIN" endpoints --bpffs-root "$BPFFS" | sed 's/^/  /'

bold "CHECK $A"
node -e 'const c=JSON.parse(require("fs").readFileSync(process.argv[1]));c.prevResult=JSON.parse(process.argv[2]);console.log(JSON.stringify(c))' "$CONF" "${RESULT[$A]}" >"$WORK/check.conf"
cni CHECK "$A" <"$WORK/check.conf"
echo "  ok"

for pod in "${PODS[@]}"; do
  bold "DEL $pod"
  cni DEL "$pod" <"$CONF"
  echo "  ok"
  ip netns del "$pod"
done

bold "Leftovers"
left=$(innode ip -br link | grep -c '^nk' || true)
ips=$(find "$WORK/ipam" -type f -regex '.*/[0-9a-f.:]+' | wc -l)
pins=$(find "$BPFFS/endpoints" -mindepth 1 2>/dev/null | wc -l)
echo "  plugin devices on the node: $left, allocated IPs: $ips, endpoint pins: $pins"
if [ "$left" != 0 ] || [ "$ips" != 0 ] || [ "$pins" != 0 ]; then
  echo "  something was left behind" >&2
  exit 1
fi
echo
if [ "$DATAPATH" = netkit ]; then
  echo "demo finished: datapath netkit"
else
  echo "demo finished: datapath $DATAPATH (this kernel has no netkit devices; 'make demo-vm' runs the demo on one that does)"
fi
