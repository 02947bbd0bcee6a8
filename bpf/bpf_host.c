/*
 * The node's side: the programs on the node's uplink NIC.
 *
 * nkc_host_in - tcx ingress of the uplink. A packet for a local pod whose flow
 *   is proven direct (direct.h) goes straight into the pod's namespace with
 *   bpf_redirect_peer (allowed here: tc ingress), skipping the host stack and
 *   the backlog queue crossing of the pod's device pair. Everything else goes
 *   on to the stack: traffic for the node, flows that may be NAT'd (a
 *   Service's replies from a backend elsewhere), flows from outside the
 *   cluster's pod CIDRs, tagged frames (the node's VLAN devices), what is not
 *   IP. A packet it redirects into a pod is judged against the pod's NetworkPolicy
 *   ingress rules first (policy.h). Packets that claim to come from a local pod cannot have come from the
 *   wire: they are dropped, under up to two tags (frame.h); a frame with more
 *   tags, or IP headers that cannot be read, is refused too.
 *
 * nkc_wg_in - tcx ingress of the node's WireGuard device (the agent's
 *   --encryption=wireguard): what another node's pods sent, decrypted. The same
 *   way into a local pod as nkc_host_in's (deliver.h, one chain for both), on a
 *   device without an L2 header.
 *   nkc_host_out and nkc_wg_out, on the egress of each: NetworkPolicy's last look
 *   at a pod's packet leaving the node.
 */
#include "common.h"
#include "counters.h"
#include "deliver.h"
#include "eps.h"
#include "frame.h"
#include "policy.h"

SEC("tc/host_in")
int nkc_host_in(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	__u32 why = NKC_DROP_UNPARSABLE;
	struct nkc_pkt p;

	enum nkc_frame frame = nkc_wire_frame(skb, &p, &why);
	if (frame == NKC_FRAME_REFUSED)
		return nkc_refuse(ifindex, why);
	if (frame == NKC_FRAME_OTHER)
		return NKC_NEXT; /* ARP and the rest of the node's own traffic */

	/* A local pod's address as the source, arriving from outside: spoofed (its own
	 * packets leave through our programs or the stack, never come back in here). */
	if (nkc_endpoint_lookup(p.family, p.src))
		return nkc_refuse(ifindex, NKC_DROP_SPOOFED);
	/* The node's VLAN devices: the stack's, like everything it may translate. */
	if (frame == NKC_FRAME_TAGGED_IP) {
		nkc_count(ifindex, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	/* Frames not addressed to this host's MAC (promiscuous mode, flooding)
	 * are not ours to route. */
	if (skb->pkt_type != PACKET_HOST) {
		nkc_count(ifindex, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	/* Into a local pod, if it is for one and proven direct (deliver.h). */
	return nkc_deliver_from_wire(skb, &p, ifindex, L3_OFF, 0);
}

/*
 * nkc_host_out - tcx egress of the uplink, where a network enforces NetworkPolicy. A
 * local pod's packet leaving the node meets the pod's egress rules here too: a flow to a
 * Service ClusterIP passed its pod's program unjudged (policy.h: deferred to the backend
 * the stack's DNAT chooses), and when that backend is on another node this is the last
 * place the pod's policy sees it. A flow the pod's program judged already is in the
 * pod's flow table: one lookup. The node's own packets, and what the stack masqueraded
 * (its source no longer a pod's), pass: so does what is not IP, which the pod's program
 * read and checked before the stack took it.
 */
static __always_inline int nkc_leaving_node(struct __sk_buff *skb, __be16 ethertype, const __u32 l3_off)
{
	struct nkc_pkt p;

	if (nkc_parse_ip(skb, &p, ethertype, l3_off) != NKC_PARSE_IP)
		return NKC_NEXT;
	struct nkc_endpoint *src = nkc_endpoint_lookup(p.family, p.src);
	if (src && nkc_policy(skb, &p, src->host_ifindex, NKC_POL_EGRESS, 0) == NKC_POL_DROP)
		return NKC_DROP;
	return NKC_NEXT;
}

SEC("tc/host_out")
int nkc_host_out(struct __sk_buff *skb)
{
	return nkc_leaving_node(skb, nkc_ethertype(skb), L3_OFF);
}

/*
 * WireGuard hands up decrypted IP packets with no L2 header (the device is ARPHRD_NONE):
 * the IP header is at 0 and skb->protocol names it. WireGuard has already checked the
 * source against the sending peer's allowed IPs; a local pod's address as the source is
 * refused all the same, as on the uplink. bpf_redirect_peer needs no L2 header: the pod's
 * end receives the packet as it arrived here, and the stack there reads it from the IP
 * header on. A pod whose ingress is paced or shaped goes through the stack, which hands it
 * to its host device's qdisc (a plain redirect there would need an Ethernet header).
 */
SEC("tc/wg_in")
int nkc_wg_in(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct nkc_pkt p;

	switch (nkc_parse_ip(skb, &p, skb->protocol, 0)) {
	case NKC_PARSE_IP:
		break;
	case NKC_PARSE_NOT_IP:
		return NKC_NEXT;
	default:
		return nkc_refuse(ifindex, NKC_DROP_UNPARSABLE);
	}
	if (nkc_endpoint_lookup(p.family, p.src))
		return nkc_refuse(ifindex, NKC_DROP_SPOOFED);
	/* nkc_host_in's way into a local pod (deliver.h), with the IP header at 0; a pod
	 * whose ingress is paced or shaped gets it through the stack. */
	return nkc_deliver_from_wire(skb, &p, ifindex, 0, 1);
}

/*
 * nkc_wg_out - tcx egress of the node's WireGuard device, where a network enforces
 * NetworkPolicy: what nkc_host_out is on the uplink. With encryption a pod's packet to
 * another node leaves through this device, and the uplink sees only WireGuard's UDP from
 * the node, so a Service flow the stack's DNAT sent to another node's backend meets the
 * pod's egress rules here or nowhere. The packet has no L2 header (the IP header at 0).
 */
SEC("tc/wg_out")
int nkc_wg_out(struct __sk_buff *skb)
{
	return nkc_leaving_node(skb, skb->protocol, 0);
}

char __license[] SEC("license") = "GPL";
