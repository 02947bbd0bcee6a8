/*
 * The node's side: programs on the node's uplink NIC.
 *
 * nkc_host_in - tcx ingress of the uplink. A packet for a local pod goes
 *   straight into the pod's namespace with bpf_redirect_peer (allowed here:
 *   tc ingress), skipping the host stack and the backlog queue crossing of
 *   the pod's device pair. Everything else: NEXT, on to the stack; a flow a
 *   pod elsewhere opens that way (e.g. to a hostPort) has its client
 *   remembered, so the local backend's replies go back through conntrack.
 * nkc_host_out - tcx egress of the uplink. Only observes: remembers flows from
 *   local pods that the stack sent out (e.g. after Service DNAT to a backend
 *   on another node), so their replies are not redirected past conntrack.
 */
#include "common.h"
#include "counters.h"
#include "eps.h"
#include "flows.h"
#include "l3.h"

SEC("tc/host_in")
int nkc_host_in(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct nkc_flow_key fk;
	struct nkc_pkt p;

	if (nkc_parse(skb, &p) != NKC_PARSE_IP)
		return NKC_NEXT; /* ARP, and malformed IP for the stack to drop */

	/* Frames not addressed to this host's MAC (promiscuous mode, flooding)
	 * are not ours to route, nor to remember. */
	if (skb->pkt_type != PACKET_HOST) {
		nkc_count(ifindex, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	struct nkc_endpoint *ep = nkc_endpoint_lookup(p.family, p.dst);
	if (!ep) {
		if (!p.fragment && !p.icmp_error && nkc_in_cluster(p.family, p.src))
			nkc_client_remember(&p);
		nkc_count(ifindex, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	__u32 pod = ep->host_ifindex;
	if (p.fragment || p.icmp_error || !nkc_ttl_allows_forward(&p)) {
		nkc_count(pod, NKC_CNT_PASSED_STACK);
		return NKC_NEXT;
	}
	nkc_flow_key(&p, &fk);
	if (nkc_flow_path(&fk) == NKC_FLOW_STACK || nkc_client_via_stack(&p)) {
		nkc_count(pod, NKC_CNT_PASSED_STACK_NAT);
		return NKC_NEXT;
	}
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

SEC("tc/host_out")
int nkc_host_out(struct __sk_buff *skb)
{
	struct nkc_flow_key fk;
	struct nkc_pkt p;

	if (nkc_parse(skb, &p) != NKC_PARSE_IP || p.fragment || p.icmp_error)
		return NKC_NEXT;
	/* Masqueraded packets carry the node's address by now (tc egress runs
	 * after POSTROUTING) and their replies are not for a pod address. */
	if (nkc_endpoint_lookup(p.family, p.src)) {
		nkc_flow_key(&p, &fk);
		nkc_flow_seen_in_stack(&fk);
	}
	return NKC_NEXT;
}

char __license[] SEC("license") = "GPL";
