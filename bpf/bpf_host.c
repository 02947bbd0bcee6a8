/*
 * The node's side: the program on the node's uplink NIC.
 *
 * nkc_host_in - tcx ingress of the uplink. A packet for a local pod whose flow
 *   is proven direct (direct.h) goes straight into the pod's namespace with
 *   bpf_redirect_peer (allowed here: tc ingress), skipping the host stack and
 *   the backlog queue crossing of the pod's device pair. Everything else goes
 *   on to the stack: traffic for the node, flows that may be NAT'd (a
 *   Service's replies from a backend elsewhere), whatever we cannot parse.
 *   Packets that claim to come from a local pod cannot have come from the
 *   wire: they are dropped.
 */
#include "common.h"
#include "bandwidth.h"
#include "counters.h"
#include "direct.h"
#include "eps.h"
#include "l3.h"

SEC("tc/host_in")
int nkc_host_in(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct nkc_pkt p;

	if (nkc_parse(skb, &p) != NKC_PARSE_IP)
		return NKC_NEXT; /* ARP, and malformed IP for the stack to drop */

	/* A local pod's address as the source, arriving from outside: spoofed (its own
	 * packets leave through our programs or the stack, never come back in here). */
	if (nkc_endpoint_lookup(p.family, p.src)) {
		nkc_count(ifindex, NKC_CNT_DROPPED_SPOOFED);
		return NKC_DROP;
	}
	/* Frames not addressed to this host's MAC (promiscuous mode, flooding)
	 * are not ours to route. */
	if (skb->pkt_type != PACKET_HOST) {
		nkc_count(ifindex, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	struct nkc_endpoint *ep = nkc_endpoint_lookup(p.family, p.dst);
	if (!ep) {
		nkc_count(ifindex, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	__u32 pod = ep->host_ifindex;
	if (!nkc_l4_redirectable(&p) || !nkc_ttl_allows_forward(&p)) {
		nkc_count(pod, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	if (!nkc_proven_direct(skb, &p, pod, 0)) {
		nkc_count(pod, NKC_CNT_PASSED_STACK_UNPROVEN);
		return NKC_NEXT;
	}
	/* The pod's ingress limit: bpf_redirect_peer skips its host device's transmit,
	 * where nkc_pod_ingress limits what the stack delivers. */
	if (!nkc_bw_ingress_ok(skb, pod, p.family))
		return NKC_DROP;
	if (nkc_dec_ttl(skb, p.family)) {
		nkc_count(pod, NKC_CNT_DROPPED_OTHER);
		return NKC_DROP;
	}
	/* bpf_redirect_peer into the pod's device (veth peer or netkit peer):
	 * skb_scrub_packet() sets pkt_type PACKET_HOST, so the pod accepts the
	 * frame whatever its destination MAC. */
	nkc_count(pod, NKC_CNT_REDIRECTED_PEER);
	return bpf_redirect_peer(pod, 0);
}

char __license[] SEC("license") = "GPL";
