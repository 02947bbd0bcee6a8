#!/usr/bin/env bash
# Brings up a multi-node kind cluster (install/kind/cluster.yaml: kind's own CNI off, one
# control plane, two workers) running netkit-cni, then proves pods reach each other
# across nodes. Needs docker, kind and kubectl, and a build (make build).
#
#   install/kind/up.sh            create (or reuse) the cluster "netkit" and install
#   KIND_CLUSTER_NAME=x  NETKIT_CNI_DATAPATH=veth  NETKIT_CNI_BINARY=path  install/kind/up.sh
#
# Per node: `docker cp` the executable in, run `netkit-cni install` there with the pod
# CIDR the control plane gave the node, and route every other node's pod CIDR via that
# node's address (netkit-cni forwards along the node's FIB; kind nodes share one L2
# network). Then two busybox pods on different workers ping each other. Remove the
# cluster with: kind delete cluster --name netkit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
name=${KIND_CLUSTER_NAME:-netkit}
binary=${NETKIT_CNI_BINARY:-$repo/dist/netkit-cni}
datapath=${NETKIT_CNI_DATAPATH:-auto}
ctx=kind-$name

say() { printf '==> %s\n' "$*"; }
die() { printf 'up.sh: %s\n' "$*" >&2; exit 1; }
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || die "$tool not found (kind needs Docker: https://kind.sigs.k8s.io)"
done
[ -x "$binary" ] || die "$binary not found; run 'make build' first"

if kind get clusters 2>/dev/null | grep -qx "$name"; then
  say "cluster $name exists; reinstalling netkit-cni on its nodes"
else
  say "creating kind cluster $name"
  kind create cluster --name "$name" --config "$here/cluster.yaml" --wait 0s
fi
k() { kubectl --context "$ctx" "$@"; }

cluster_cidr=$(sed -n 's/^ *podSubnet: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$here/cluster.yaml")
[ -n "$cluster_cidr" ] || die "no podSubnet in $here/cluster.yaml"
mapfile -t nodes < <(kind get nodes --name "$name" | sort)
[ "${#nodes[@]}" -ge 2 ] || die "expected 2+ nodes, got ${#nodes[*]}"

declare -A cidr ip
for n in "${nodes[@]}"; do
  # kube-controller-manager assigns spec.podCIDR shortly after the node registers.
  for _ in $(seq 60); do
    cidr[$n]=$(k get node "$n" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)
    [ -n "${cidr[$n]}" ] && break
    sleep 2
  done
  [ -n "${cidr[$n]}" ] || die "node $n got no pod CIDR"
  ip[$n]=$(k get node "$n" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}' | awk '{print $1}')
  say "$n: pod CIDR ${cidr[$n]}, node IP ${ip[$n]}"

  docker cp "$binary" "$n:/usr/local/bin/netkit-cni"
  docker exec "$n" /usr/local/bin/netkit-cni install \
    --bin-dir /opt/cni/bin --conf-dir /etc/cni/net.d \
    --pod-cidr "${cidr[$n]}" --cluster-cidr "$cluster_cidr" --datapath "$datapath"
done

for n in "${nodes[@]}"; do
  for m in "${nodes[@]}"; do
    [ "$n" = "$m" ] && continue
    docker exec "$n" ip route replace "${cidr[$m]}" via "${ip[$m]}"
  done
done

say "waiting for the nodes to be Ready"
k wait --for=condition=Ready nodes --all --timeout=180s

# Two pods on two different workers (or on the first two nodes if there are no workers).
mapfile -t workers < <(printf '%s\n' "${nodes[@]}" | grep -v control-plane || true)
[ "${#workers[@]}" -ge 2 ] || workers=("${nodes[@]}")
say "checking pod-to-pod across nodes: ${workers[0]} <-> ${workers[1]}"
k delete pod nk-a nk-b --ignore-not-found --wait=true >/dev/null
declare -A placement=([nk-a]=${workers[0]} [nk-b]=${workers[1]})
for pod in nk-a nk-b; do
  k apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  labels: {app: netkit-cni-check}
spec:
  nodeName: ${placement[$pod]}
  terminationGracePeriodSeconds: 0
  containers:
    - name: busybox
      image: busybox:1.36
      command: ["sleep", "3600"]
YAML
done
k wait --for=condition=Ready pod/nk-a pod/nk-b --timeout=180s
ip_a=$(k get pod nk-a -o jsonpath='{.status.podIP}')
ip_b=$(k get pod nk-b -o jsonpath='{.status.podIP}')
say "nk-a $ip_a on ${workers[0]}, nk-b $ip_b on ${workers[1]}"
k exec nk-a -- ping -c 3 -W 2 "$ip_b"
k exec nk-b -- ping -c 3 -W 2 "$ip_a"
for n in "${workers[0]}" "${workers[1]}"; do
  say "$n: netkit-cni status and endpoints"
  docker exec "$n" /usr/local/bin/netkit-cni status || true
  docker exec "$n" /usr/local/bin/netkit-cni endpoints
done
k delete pod nk-a nk-b --wait=false >/dev/null
say "cluster $name is up with netkit-cni; kubectl --context $ctx ...; remove: kind delete cluster --name $name"
