/*
 * Path memory that keeps netfilter NAT working (both maps LRU hashes).
 *
 * A flow that netfilter translates (kube-proxy Service DNAT, portmap hostPort
 * DNAT, masquerade) must cross the host stack in both directions, or replies
 * skip conntrack's reverse translation. Redirects bypass netfilter entirely
 * ("Redirects bypass host netfilter"), so before any redirect we ask two
 * questions:
 *
 * 1. Is the destination a client that opened a flow through the stack?
 *    (nkc_clients: address, port, protocol.) Whoever the stack then delivered
 *    that flow to (a DNAT backend on this node or another), the backend's
 *    replies are addressed to that client, so they are recognised without
 *    watching the backend's device. Written where the stack takes a packet
 *    that opens a flow: nkc_from_pod (a non-pod destination) and nkc_host_in
 *    (a packet from a pod elsewhere for a local non-pod address, e.g. a
 *    hostPort). Keying on the opening packet (TCP SYN, echo request) keeps a
 *    pod's server ports out: its replies to outside clients open nothing.
 * 2. Has this 5-tuple been seen going through the stack? (nkc_flows.) Written
 *    by nkc_from_pod when it hands a packet to the stack, and by nkc_host_out,
 *    which sees what the stack sends out of the uplink. That observer sees our
 *    own FIB redirects too, so the redirect path first marks its flow DIRECT
 *    and the observer leaves DIRECT alone.
 *
 * Per pod this needs one program only (nkc_from_pod): every extra tcx or
 * netkit link costs an RCU grace period under RTNL when the pod is created
 * and again when it is deleted.
 * We deliberately do not use the bpf_skb_ct_lookup kfunc: kernels without a
 * JIT (the UML test kernel) refuse kfunc calls at load time.
 */
#ifndef NKC_FLOWS_H
#define NKC_FLOWS_H

#include "common.h"

NKC_MAP(nkc_flows, BPF_MAP_TYPE_LRU_HASH, struct nkc_flow_key, struct nkc_flow, 65536, 0);
NKC_MAP(nkc_clients, BPF_MAP_TYPE_LRU_HASH, struct nkc_client_key, struct nkc_flow, 65536, 0);

/* Orders (addr, port) endpoints; any total order works as long as it is fixed. */
static __always_inline int nkc_side_before(const __u8 *a, __be16 pa, const __u8 *b, __be16 pb)
{
#pragma unroll
	for (int i = 0; i < 16; i += 4) {
		__u32 wa, wb;
		__builtin_memcpy(&wa, a + i, 4);
		__builtin_memcpy(&wb, b + i, 4);
		if (wa != wb)
			return wa < wb;
	}
	return pa <= pb;
}

static __always_inline void nkc_flow_key(const struct nkc_pkt *p, struct nkc_flow_key *k)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->family = p->family;
	k->proto = p->proto;
	if (nkc_side_before(p->src, p->sport, p->dst, p->dport)) {
		__builtin_memcpy(k->addr_a, p->src, 16);
		__builtin_memcpy(k->addr_b, p->dst, 16);
		k->port_a = p->sport;
		k->port_b = p->dport;
	} else {
		__builtin_memcpy(k->addr_a, p->dst, 16);
		__builtin_memcpy(k->addr_b, p->src, 16);
		k->port_a = p->dport;
		k->port_b = p->sport;
	}
}

/* The flow's recorded path, or 0 when the flow is unknown. */
static __always_inline __u32 nkc_flow_path(const struct nkc_flow_key *k)
{
	struct nkc_flow *f = bpf_map_lookup_elem(&nkc_flows, k);

	return f ? f->path : 0;
}

/* Pins a flow to the stack. Overwrites DIRECT on purpose: once a packet of the
 * flow went through the stack because we chose so, the rest follows it. */
static __always_inline void nkc_flow_to_stack(const struct nkc_flow_key *k)
{
	struct nkc_flow f = { .path = NKC_FLOW_STACK };

	if (nkc_flow_path(k) != NKC_FLOW_STACK)
		bpf_map_update_elem(&nkc_flows, k, &f, BPF_ANY);
}

/* An observer saw the flow leave the stack: pin it, unless we redirected it. */
static __always_inline void nkc_flow_seen_in_stack(const struct nkc_flow_key *k)
{
	struct nkc_flow f = { .path = NKC_FLOW_STACK };

	if (nkc_flow_path(k) == 0)
		bpf_map_update_elem(&nkc_flows, k, &f, BPF_NOEXIST);
}

/* Before a redirect whose packet an observer will see. */
static __always_inline void nkc_flow_mark_direct(const struct nkc_flow_key *k, __u32 path)
{
	struct nkc_flow f = { .path = NKC_FLOW_DIRECT };

	if (path == 0)
		bpf_map_update_elem(&nkc_flows, k, &f, BPF_NOEXIST);
}

static __always_inline void nkc_client_key(struct nkc_client_key *k, const struct nkc_pkt *p,
					   const __u8 *addr, __be16 port)
{
	__builtin_memset(k, 0, sizeof(*k));
	__builtin_memcpy(k->addr, addr, 16);
	k->port = port;
	k->family = p->family;
	k->proto = p->proto;
}

/* The packet's source opens a flow through the stack: remember the client. */
static __always_inline void nkc_client_remember(const struct nkc_pkt *p)
{
	struct nkc_flow f = { .path = NKC_FLOW_STACK };
	struct nkc_client_key k;

	if (!p->opens)
		return;
	nkc_client_key(&k, p, p->src, p->sport);
	if (!bpf_map_lookup_elem(&nkc_clients, &k))
		bpf_map_update_elem(&nkc_clients, &k, &f, BPF_ANY);
}

/* Is the packet addressed to a client whose flow went through the stack? */
static __always_inline int nkc_client_via_stack(const struct nkc_pkt *p)
{
	struct nkc_client_key k;

	nkc_client_key(&k, p, p->dst, p->dport);
	return bpf_map_lookup_elem(&nkc_clients, &k) != 0;
}

#endif
