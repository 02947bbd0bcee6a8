/*
 * The pod's side ("lxc"): programs on the pod's device pair.
 *
 * nkc_from_pod - packets the pod sends. veth: tcx ingress of the host-side
 *   device. netkit: the peer hook. Lets on only frames it understands (frame.h:
 *   untagged IPv4/IPv6 from the pod's own address, ARP for it) and refuses the
 *   rest, counting why (nkc_drops). Then sends
 *   pod-to-pod traffic that is proven direct straight to its device, and
 *   everything else (Service VIPs, the node, the internet, flows that may be
 *   NAT'd) to the stack. The pod's only program: what the stack delivers to
 *   the pod needs no watching for NAT safety (see direct.h).
 *
 * nkc_pod_policy - what the host device transmits into a pod of a network that
 *   enforces NetworkPolicy: the stack's deliveries (from the node, other nodes'
 *   pods through the stack, a Service's DNAT) and netkit pods' plain redirects,
 *   judged against the pod's ingress rules, and a local source's egress rules
 *   (policy.h). tcx egress of the host-side device, or the netkit primary hook.
 *
 * nkc_pod_ingress - what the host device transmits into a pod with an ingress
 *   limit (bandwidth.h): the stack's deliveries, and the plain redirects of
 *   local pods and the uplink to it. tcx egress of the host-side device; a
 *   policed netkit pod's on the primary hook instead. Attached only to pods
 *   whose ingress is policed or paced (a tbf alone shapes the rest).
 *
 * The datapath kind is read at run time from the source endpoint's flags, so
 * one object serves both:
 *  - veth: we run in tcx ingress, where bpf_redirect_peer is allowed: it
 *    switches skb->dev to the peer inside the pod and re-runs the receive path
 *    without a backlog queue crossing.
 *  - netkit: we run from netkit's ndo_start_xmit. bpf_redirect_peer there is
 *    silently dropped (BPF_F_PEER is only honoured from tc ingress), so a
 *    local pod gets a plain bpf_redirect to its primary, whose xmit hands the
 *    packet to the peer. In the peer hook skb->ifindex is already the
 *    primary's ifindex (netkit sets skb->dev to the other end before running
 *    programs), which is what the endpoint map holds as host_ifindex.
 */
#include "common.h"
#include "bandwidth.h"
#include "counters.h"
#include "eps.h"
#include "direct.h"
#include "fib.h"
#include "frame.h"
#include "l3.h"
#include "policy.h"

static __always_inline int pass_to_stack(__u32 ifindex, enum nkc_counter why)
{
	nkc_count(ifindex, why);
	return NKC_NEXT;
}

/* Over the rate limit of the pod behind `ifindex` (its bucket counts it too). */
static __always_inline int drop_limited(__u32 ifindex)
{
	return nkc_refuse(ifindex, NKC_DROP_LIMIT);
}

/* What the pod sends to the stack, within its egress limit. */
static __always_inline int to_stack(struct __sk_buff *skb, const struct nkc_pkt *p, enum nkc_counter why)
{
	if (!nkc_bw_egress_ok(skb, skb->ifindex, p->family, NKC_BW_OUT_STACK))
		return drop_limited(skb->ifindex);
	return pass_to_stack(skb->ifindex, why);
}

/* What only the pod's link hears (ARP, NDP, DAD, MLD): the stack answers it on this node,
 * so the egress limit polices it, as what stays on the node; no fq would ever pace it. */
static __always_inline int to_link(struct __sk_buff *skb, const struct nkc_pkt *p)
{
	if (!nkc_bw_egress_ok(skb, skb->ifindex, p->family, NKC_BW_OUT_NODE))
		return drop_limited(skb->ifindex);
	return pass_to_stack(skb->ifindex, NKC_CNT_PASSED_STACK);
}

/* A header rewrite failed half-way: the packet can no longer be trusted. */
static __always_inline int drop_other(__u32 ifindex)
{
	return nkc_refuse(ifindex, NKC_DROP_REWRITE);
}

static __always_inline int deliver_local(struct __sk_buff *skb, struct nkc_pkt *p,
					 const struct nkc_endpoint *src_ep, const struct nkc_endpoint *dst_ep)
{
	__u32 ifindex = skb->ifindex;
	__u32 target = dst_ep->host_ifindex;

	/* The receiver's ingress rules, before any of the ways in (a peer redirect skips
	 * its host device's programs). */
	/* Counted into the flow here only when it goes by bpf_redirect_peer: the other ways
	 * cross the target's host device, whose nkc_pod_policy counts it. */
	int by_peer = !(src_ep->flags & NKC_EP_F_NETKIT) && !nkc_bw_ingress_via_host(target);
	if (nkc_policy(skb, p, target, NKC_POL_INGRESS | (by_peer ? NKC_POL_JUDGE_COUNTS : 0), 0) == NKC_POL_DROP)
		return NKC_DROP;
	/* Whichever way it takes, it stays on the node. */
	if (!nkc_bw_egress_ok(skb, ifindex, p->family, NKC_BW_OUT_NODE))
		return drop_limited(ifindex);
	if (src_ep->flags & NKC_EP_F_NETKIT) {
		/* A plain redirect to a veth host side would arrive with the wrong
		 * destination MAC for the veth pod (L2); the stack resolves it. */
		if (!(dst_ep->flags & NKC_EP_F_NETKIT))
			return pass_to_stack(ifindex, NKC_CNT_PASSED_STACK);
		if (nkc_dec_ttl(skb, p->family))
			return drop_other(ifindex);
		nkc_count(ifindex, NKC_CNT_REDIRECTED_LOCAL);
		return bpf_redirect(target, 0);
	}
	/* A paced or shaped target takes it through its host device's transmit, which
	 * charges it there (bandwidth.h). */
	if (nkc_bw_ingress_via_host(target)) {
		if (nkc_dec_ttl(skb, p->family))
			return drop_other(ifindex);
		nkc_count(ifindex, NKC_CNT_REDIRECTED_LOCAL);
		return nkc_redirect_via_host(dst_ep);
	}
	/* bpf_redirect_peer skips the target's host device, and nkc_pod_ingress with it. */
	if (!nkc_bw_ingress_ok(skb, target, p->family))
		return drop_limited(target);
	if (nkc_dec_ttl(skb, p->family))
		return drop_other(ifindex);
	nkc_count(ifindex, NKC_CNT_REDIRECTED_LOCAL);
	return bpf_redirect_peer(target, 0);
}

/* A subprogram (its bpf_fib_lookup struct on its own frame): nkc_from_pod's frame and
 * NetworkPolicy's judgment, also a subprogram, share the verifier's 512 bytes. */
static __attribute__((noinline)) int forward_fib(struct __sk_buff *skb, const struct nkc_pkt *p)
{
	__u32 ifindex = skb->ifindex;
	struct bpf_fib_lookup fib;
	long rc = nkc_fib_lookup(skb, p, &fib);

	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return to_stack(skb, p, NKC_CNT_PASSED_STACK);
	if (!nkc_bw_egress_ok(skb, ifindex, p->family, fib.ifindex))
		return drop_limited(ifindex);
	if (nkc_dec_ttl(skb, p->family))
		return drop_other(ifindex);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		nkc_count(ifindex, NKC_CNT_REDIRECTED_FIB);
		return nkc_fib_redirect(skb, &fib);
	}
	nkc_count(ifindex, NKC_CNT_REDIRECTED_NEIGH);
	return nkc_fib_redirect_neigh(&fib);
}

/*
 * The pod's gate, the same for both of its programs: only a frame the pod may send
 * (frame.h: untagged IPv4/IPv6, or ARP for its own address where ARP is spoken) from its
 * own address gets past; everything else is refused and counted by reason. *src_ep is
 * the pod's endpoint for a checked source, NULL for what only its link hears: ARP (which
 * leaves p.family 0) and IPv6 from a link-local or unspecified source (NDP, DAD, MLD),
 * which names no address the endpoint map could hold and no router forwards off the link.
 */
static __always_inline int nkc_pod_may_send(struct __sk_buff *skb, struct nkc_pkt *p, __u32 ifindex,
					    struct nkc_endpoint **src_ep)
{
	__u32 why = NKC_DROP_UNPARSABLE;

	*src_ep = NULL;
	switch (nkc_pod_frame(skb, p, ifindex, &why)) {
	case NKC_FRAME_IP:
		break;
	case NKC_FRAME_ARP:
		p->family = 0;
		return 1;
	default:
		nkc_count_drop(ifindex, why);
		return 0;
	}
	if (nkc_ipv6_link_only_src(p))
		return 1;
	/* A pod may only send from its own addresses. */
	struct nkc_endpoint *ep = nkc_endpoint_lookup(p->family, p->src);
	if (!ep || ep->host_ifindex != ifindex) {
		nkc_count_drop(ifindex, NKC_DROP_SPOOFED);
		return 0;
	}
	*src_ep = ep;
	return 1;
}

SEC("tc/from_pod")
int nkc_from_pod(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct nkc_endpoint *src_ep;
	struct nkc_pkt p;

	if (!nkc_pod_may_send(skb, &p, ifindex, &src_ep))
		return NKC_DROP;
	if (!src_ep)
		return to_link(skb, &p);
	if (nkc_policy_egress(skb, &p, ifindex) == NKC_POL_DROP)
		return NKC_DROP;

	/* Service VIPs, the node, the internet: netfilter may translate the flow. Each way
	 * out applies the pod's egress limit, which needs to know where the packet goes. */
	struct nkc_endpoint *dst_ep = nkc_endpoint_lookup(p.family, p.dst);
	if (!dst_ep && !nkc_in_cluster(p.family, p.dst))
		return to_stack(skb, &p, NKC_CNT_PASSED_STACK);
	if (!nkc_l4_redirectable(&p) || !nkc_ttl_allows_forward(&p))
		return to_stack(skb, &p, NKC_CNT_PASSED_STACK);
	if (!nkc_proven_direct(skb, &p, ifindex, dst_ep ? dst_ep->host_ifindex : 0))
		return to_stack(skb, &p, NKC_CNT_PASSED_STACK_UNPROVEN);
	if (dst_ep)
		return deliver_local(skb, &p, src_ep, dst_ep);
	return forward_fib(skb, &p);
}

/*
 * nkc_src_check - the pod's program where the network has "fastPath": false: the
 * same source check, and nothing else. Every packet the pod may send goes on to the
 * stack. (Reverse-path filtering cannot do this job: IPv6 has none, and IPv4's is only
 * as strict as the loosest of the device's and the node's settings.)
 */
SEC("tc/src_check")
int nkc_src_check(struct __sk_buff *skb)
{
	struct nkc_endpoint *src_ep;
	struct nkc_pkt p;

	if (!nkc_pod_may_send(skb, &p, skb->ifindex, &src_ep))
		return NKC_DROP;
	if (!src_ep)
		return to_link(skb, &p);
	if (nkc_policy_egress(skb, &p, skb->ifindex) == NKC_POL_DROP)
		return NKC_DROP;
	return to_stack(skb, &p, NKC_CNT_PASSED_STACK);
}

/*
 * nkc_pod_policy - NetworkPolicy on the host device's transmit into the pod (policy.h):
 * the receiver's ingress rules, with the pod's own node always allowed (a packet of one
 * of its sockets from an address no local pod has: kubelet's probes, hostNetwork pods),
 * and, for a packet from a local pod
 * the stack routed here, that pod's egress rules (its flow to a Service ClusterIP is
 * judged here, on the backend the DNAT chose). The pod is found by the destination
 * address, as nkc_pod_ingress finds it. Runs before nkc_pod_ingress: nothing dropped
 * here is charged to the pod's ingress limit.
 */
SEC("tc/pod_policy")
int nkc_pod_policy(struct __sk_buff *skb)
{
	struct nkc_pkt p;

	if (nkc_parse_ip(skb, &p, nkc_ethertype(skb), L3_OFF) != NKC_PARSE_IP)
		return NKC_NEXT; /* ARP: the link's */
	struct nkc_endpoint *dst = nkc_endpoint_lookup(p.family, p.dst);
	if (!dst)
		return NKC_NEXT; /* to a link-local address: neighbour discovery */
	struct nkc_endpoint *src = nkc_endpoint_lookup(p.family, p.src);
	if (src && nkc_policy(skb, &p, src->host_ifindex, NKC_POL_EGRESS, 0) == NKC_POL_DROP)
		return NKC_DROP;
	/* The node's own packets carry one of its sockets; so do a local pod's through netkit,
	 * which does not orphan a packet between namespaces, but those come from the pod's
	 * (checked) address: never the node's. */
	int from_node = skb->sk != 0 && !src;
	if (nkc_policy(skb, &p, dst->host_ifindex, NKC_POL_INGRESS | NKC_POL_JUDGE_COUNTS, from_node) == NKC_POL_DROP)
		return NKC_DROP;
	return NKC_NEXT;
}

/*
 * nkc_pod_ingress - the ingress limit on the host device's transmit into the pod: a
 * policed packet passes or is dropped, a paced one leaves stamped with its departure for
 * the fq behind this hook. The pod is found by the destination address: in netkit's
 * primary hook skb->ifindex is already the peer's (inside the pod's namespace), not the
 * host ifindex that keys nkc_bandwidth. A packet for no local endpoint (NDP to a link-local address, say) is
 * not limited.
 */
SEC("tc/pod_ingress")
int nkc_pod_ingress(struct __sk_buff *skb)
{
	struct nkc_pkt p;

	if (nkc_parse_ip(skb, &p, nkc_ethertype(skb), L3_OFF) != NKC_PARSE_IP)
		return NKC_NEXT;
	struct nkc_endpoint *ep = nkc_endpoint_lookup(p.family, p.dst);
	if (ep && !nkc_bw_ingress_ok(skb, ep->host_ifindex, p.family))
		return drop_limited(ep->host_ifindex);
	return NKC_NEXT;
}

char __license[] SEC("license") = "GPL";
