#!/usr/bin/env bash
# Brings up a multi-node kind cluster (install/kind/cluster.yaml: kind's own CNI off, one
# control plane, two workers) running netkit-cni the way any cluster runs it: the image
# from install/Dockerfile and the DaemonSet install/daemonset.yaml, whose agent writes each
# node's conflist, routes the other nodes' pod CIDRs and masquerades pod egress. Then it
# proves that pods on two workers reach each other. Needs docker, kind and kubectl, and a
# build (make build). Nothing is done by hand on the nodes.
#
#   install/kind/up.sh            create (or reuse) the cluster "netkit" and install
#   KIND_CLUSTER_NAME=x  NETKIT_CNI_DATAPATH=veth  NETKIT_CNI_IMAGE=name:tag  install/kind/up.sh
#
# The three commands it runs, after `make build`:
#   docker build -f install/Dockerfile -t localhost/netkit-cni:0.1.0 . && \
#     kind create cluster --config install/kind/cluster.yaml && \
#     kind load docker-image localhost/netkit-cni:0.1.0 --name netkit
#   kubectl apply -f install/daemonset.yaml
# Remove the cluster with: kind delete cluster --name netkit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
name=${KIND_CLUSTER_NAME:-netkit}
image=${NETKIT_CNI_IMAGE:-localhost/netkit-cni:0.1.0}
datapath=${NETKIT_CNI_DATAPATH:-auto}
ctx=kind-$name

say() { printf '==> %s\n' "$*"; }
die() { printf 'up.sh: %s\n' "$*" >&2; exit 1; }
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || die "$tool not found (kind needs Docker: https://kind.sigs.k8s.io)"
done
[ -x "$repo/dist/netkit-cni" ] || die "$repo/dist/netkit-cni not found; run 'make build' first"

say "building image $image"
docker build -q -f "$repo/install/Dockerfile" -t "$image" "$repo"

if kind get clusters 2>/dev/null | grep -qx "$name"; then
  say "cluster $name exists; updating netkit-cni on it"
else
  say "creating kind cluster $name"
  kind create cluster --name "$name" --config "$here/cluster.yaml" --wait 0s
fi
k() { kubectl --context "$ctx" "$@"; }

cluster_cidr=$(sed -n 's/^ *podSubnet: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$here/cluster.yaml")
[ -n "$cluster_cidr" ] || die "no podSubnet in $here/cluster.yaml"

say "loading $image into the nodes"
kind load docker-image "$image" --name "$name"

say "applying install/daemonset.yaml (cluster CIDR $cluster_cidr, datapath $datapath)"
sed -e "s|localhost/netkit-cni:0.1.0|$image|" \
  -e "s|^\( *cluster-cidr:\).*|\1 \"$cluster_cidr\"|" \
  -e "s|^\( *datapath:\).*|\1 \"$datapath\"|" \
  "$repo/install/daemonset.yaml" | k apply -f -
k -n kube-system rollout restart daemonset/netkit-cni >/dev/null
k -n kube-system rollout status daemonset/netkit-cni --timeout=180s

say "waiting for the nodes to be Ready"
k wait --for=condition=Ready nodes --all --timeout=180s

# Two pods on two different workers (or on the first two nodes if there are no workers).
mapfile -t nodes < <(kind get nodes --name "$name" | sort)
[ "${#nodes[@]}" -ge 2 ] || die "expected 2+ nodes, got ${#nodes[*]}"
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
  docker exec "$n" /opt/cni/bin/netkit-cni status || true
  docker exec "$n" /opt/cni/bin/netkit-cni endpoints
done
k delete pod nk-a nk-b --wait=false >/dev/null
say "cluster $name is up with netkit-cni; kubectl --context $ctx ...; remove: kind delete cluster --name $name"
