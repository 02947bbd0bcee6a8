/*
 * Wire traffic into a local pod: the one chain every program that takes a packet from
 * another node (nkc_host_in on the uplink, nkc_wg_in on the WireGuard device) runs
 * before it hands the packet to a pod of this node. In order:
 *
 *  - not for a local pod: the stack's (counted on the device it came in by);
 *  - from outside the pod CIDRs (another node's own address, a NodePort's SNAT, a host
 *    routed to pods): the pod's replies leave through the stack, where a masquerade of
 *    traffic leaving the cluster (the agent's, kindnet's) would take them for new flows
 *    and rewrite their source, unless conntrack saw the request on its way in. So the
 *    request goes in through the stack too, as the pod's egress sends such flows
 *    (bpf_lxc.c). So does what cannot be redirected (l4 opaque, a TTL that would expire);
 *  - not proven direct (direct.h): the stack's;
 *  - the pod's NetworkPolicy ingress rules (policy.h): both ways in from here skip its
 *    host device's programs (what goes on to the stack meets them in nkc_pod_policy);
 *  - its ingress limit (bandwidth.h): paced or shaped, through its host device's
 *    transmit, where the qdisc is; policed, its bucket before the peer redirect;
 *  - the TTL lowered, as a router's would be, and bpf_redirect_peer into its device.
 *
 * Each step counts what it decided on the pod's host ifindex (counters.h).
 */
#ifndef NKC_DELIVER_H
#define NKC_DELIVER_H

#include "common.h"
#include "bandwidth.h"
#include "counters.h"
#include "direct.h"
#include "eps.h"
#include "l3.h"
#include "policy.h"

/*
 * Delivers `p`, read from the wire by the device `ifindex`, to the local pod it is
 * addressed to, or says NKC_NEXT (the stack's) or NKC_DROP. Two parameters, constants
 * in each caller, tell the devices apart:
 *
 *  - `l3_off`: where the IP header starts, for the TTL's rewrite. L3_OFF behind the
 *    uplink's Ethernet header; 0 on WireGuard's device, which hands up decrypted IP
 *    packets with no L2 header (ARPHRD_NONE).
 *  - `paced_to_stack`: a pod whose ingress is paced or shaped must receive through its
 *    host device's transmit. From the uplink the packet goes there by
 *    nkc_redirect_via_host (bpf_redirect_neigh), after the proof and the policy, like
 *    a peer redirect. A packet without an L2 header cannot take that way (a redirect
 *    there would need an Ethernet header), so WireGuard's goes to the stack, which hands
 *    it to the host device's qdisc; it goes before anything else is asked of the flow
 *    (nothing is remembered of it here, and nkc_pod_policy judges it there).
 *
 * bpf_redirect_peer needs no L2 header: the pod's end receives the packet as it arrived
 * here (skb_scrub_packet() sets pkt_type PACKET_HOST, so the pod accepts the frame
 * whatever its destination MAC), and the stack there reads it from the IP header on.
 */
static __always_inline int nkc_deliver_from_wire(struct __sk_buff *skb, struct nkc_pkt *p, __u32 ifindex,
						 const __u32 l3_off, const int paced_to_stack)
{
	struct nkc_endpoint *ep = nkc_endpoint_lookup(p->family, p->dst);

	if (!ep) {
		nkc_count(ifindex, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	__u32 pod = ep->host_ifindex;

	if (!nkc_in_cluster(p->family, p->src) || !nkc_l4_redirectable(p) || !nkc_ttl_allows_forward(p) ||
	    (paced_to_stack && nkc_bw_ingress_via_host(pod))) {
		nkc_count(pod, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	if (!nkc_proven_direct(skb, p, pod, 0)) {
		nkc_count(pod, NKC_CNT_PASSED_STACK_UNPROVEN);
		return NKC_NEXT;
	}
	/* Counted here when it goes straight to the pod's end; through the host device,
	 * nkc_pod_policy counts it. */
	__u32 how = NKC_POL_INGRESS | (nkc_bw_ingress_via_host(pod) ? 0 : NKC_POL_JUDGE_COUNTS) |
		    (l3_off ? 0 : NKC_POL_JUDGE_NO_L2);
	if (nkc_policy(skb, p, pod, how, 0) == NKC_POL_DROP)
		return NKC_DROP;
	/* Paced or shaped: bpf_redirect_peer would skip the host device's transmit, and
	 * the qdisc with it (bandwidth.h). */
	if (!paced_to_stack && nkc_bw_ingress_via_host(pod)) {
		if (nkc_dec_ttl_at(skb, p->family, l3_off))
			return nkc_refuse(pod, NKC_DROP_REWRITE);
		nkc_count(pod, NKC_CNT_REDIRECTED_NEIGH);
		return nkc_redirect_via_host(ep);
	}
	/* A policed ingress limit: bpf_redirect_peer skips the host device's transmit,
	 * where nkc_pod_ingress limits what the stack delivers. */
	if (!nkc_bw_ingress_ok(skb, pod, p->family))
		return nkc_refuse(pod, NKC_DROP_LIMIT);
	if (nkc_dec_ttl_at(skb, p->family, l3_off))
		return nkc_refuse(pod, NKC_DROP_REWRITE);
	nkc_count(pod, NKC_CNT_REDIRECTED_PEER);
	return bpf_redirect_peer(pod, 0);
}

#endif
