/*
 * Per-flow path memory (nkc_flows, LRU hash) that keeps netfilter NAT working.
 *
 * A flow that netfilter translates (kube-proxy Service DNAT, portmap hostPort
 * DNAT, masquerade) must cross the host stack in both directions, or replies
 * skip conntrack's reverse translation. Redirects bypass netfilter entirely
 * ("Redirects bypass host netfilter"), so before any redirect we ask: has this
 * flow been seen going through the stack? Entries are written by
 *   - nkc_from_pod when it hands a packet to the stack (non-pod destination),
 *   - nkc_to_pod, which sees what the stack delivered to a pod (our own
 *     redirects into a veth pod arrive by bpf_redirect_peer and skip it),
 *   - nkc_host_out, which sees what the stack sends out of the uplink.
 * Observers see our redirected packets too where a redirect goes through a
 * device's xmit (bpf_redirect to a netkit primary or to the uplink), so the
 * redirect path first marks its flow DIRECT and observers leave DIRECT alone.
 * We deliberately do not use the bpf_skb_ct_lookup kfunc: kernels without a
 * JIT (the UML test kernel) refuse kfunc calls at load time.
 */
#ifndef NKC_FLOWS_H
#define NKC_FLOWS_H

#include "common.h"

NKC_MAP(nkc_flows, BPF_MAP_TYPE_LRU_HASH, struct nkc_flow_key, struct nkc_flow, 65536, 0);

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

#endif
