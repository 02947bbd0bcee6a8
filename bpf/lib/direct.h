/*
 * Which packets may skip the host stack. Redirects bypass netfilter, so a packet of a
 * flow that netfilter translates (kube-proxy Service DNAT, portmap hostPort DNAT,
 * masquerade) must go through the stack, where conntrack undoes the translation.
 *
 * The rule is proof, never absence of evidence: a packet is redirected only when its
 * flow is known to be direct; anything we know nothing about goes to the stack (slower,
 * still right). Forgetting can therefore only cost speed:
 *
 *  - TCP, UDP with NKC_CONNTRACK (kernels with a BPF JIT): conntrack itself is asked
 *    per packet (conntrack.h). No memory of ours at all.
 *  - TCP without it: the flow must have been seen opening here, on a path with no NAT
 *    (a SYN from a pod to a pod address, or from the wire to a local pod). A NAT'd
 *    flow's SYN went to a Service VIP or the node's address, i.e. through the stack,
 *    so only its replies reach us and they never find an entry. A SYN-ACK must follow
 *    a SYN seen here within NKC_SYNACK_WINDOW_NS: an entry left by an earlier flow on
 *    the same 5-tuple does not vouch for a new one.
 *  - UDP without conntrack: no packet proves a UDP flow direct (any one may be a
 *    reply), so UDP goes through the stack there.
 *  - ICMP echo (conntrack's kfuncs take TCP and UDP only): a request is never a reply,
 *    so it is redirected and remembered; a reply needs a request seen recently.
 *  - Everything else (fragments, ICMP errors, other protocols, opaque headers): stack.
 *
 * Memory is per endpoint: nkc_flow_owner maps a pod's host ifindex to its own LRU
 * table (a slot of nkc_flow_tables) and a generation. Tables are pooled: DEL hands the
 * table back and a later ADD takes it, because putting a table into a map of maps (or
 * taking it out) waits for an RCU grace period, and a pool pays that only when it grows.
 * A table therefore passes from endpoint to endpoint, so every entry carries the
 * generation of the endpoint that wrote it, and an entry of any other generation (a
 * previous holder's, or one a program still running at DEL wrote) is never trusted:
 * nothing a previous holder left can prove a flow direct. A flow is remembered in the table of the local
 * endpoint that saw it open: the opener's in nkc_from_pod, the receiver's in nkc_host_in
 * (the only local one). Its later packets are looked up in the table of the endpoint
 * whose hook runs and, for a flow between two local pods, in the other one's too. So a
 * pod flooding new flows evicts only its own entries (a pod elsewhere can fill the
 * table of a pod it opens flows to: those are that pod's flows), and no pod can affect
 * another's correctness at all.
 */
#ifndef NKC_DIRECT_H
#define NKC_DIRECT_H

#include "common.h"
#ifdef NKC_CONNTRACK
#include "conntrack.h"
#endif

/* Inner maps: LRU_HASH nkc_flow_key -> nkc_direct_flow, NKC_DIRECT_TABLE_SIZE entries
 * (created by userspace, see src/bpf/fastpath/direct.ts). nkc_flow_owner has one entry per
 * endpoint; NKC_MAX_ENDPOINTS of them. */
NKC_MAP(nkc_flow_tables, BPF_MAP_TYPE_ARRAY_OF_MAPS, __u32, __u32, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_flow_owner, BPF_MAP_TYPE_HASH, __u32, struct nkc_flow_owner, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_flow_pool, BPF_MAP_TYPE_ARRAY, __u32, struct nkc_flow_pool, 1, 0);
NKC_MAP(nkc_direct_stats, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_direct_stats, NKC_MAX_ENDPOINTS, 0);
NKC_BTF_TYPE(nkc_ep_flows_key, struct nkc_flow_key);
NKC_BTF_TYPE(nkc_ep_flows_value, struct nkc_direct_flow);

#define NKC_SYNACK_WINDOW_NS (5ULL * 1000000000ULL)
#define NKC_ECHO_WINDOW_NS   (5ULL * 1000000000ULL)

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

static __always_inline void nkc_direct_stat(__u32 ifindex, int forgotten)
{
	struct nkc_direct_stats *s = bpf_map_lookup_elem(&nkc_direct_stats, &ifindex);

	if (!s) {
		struct nkc_direct_stats zero = {};
		bpf_map_update_elem(&nkc_direct_stats, &ifindex, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&nkc_direct_stats, &ifindex);
		if (!s)
			return;
	}
	if (forgotten)
		s->forgotten += 1; /* per-CPU value: no other writer */
	else
		s->remembered += 1;
}

/* `ifindex`'s table and, in `*gen`, the generation its entries must carry; NULL when the
 * endpoint has none (its DEL is under way). */
static __always_inline void *nkc_flow_table(__u32 ifindex, __u64 *gen)
{
	struct nkc_flow_owner *o = bpf_map_lookup_elem(&nkc_flow_owner, &ifindex);

	if (!o)
		return NULL;
	*gen = o->gen;
	return bpf_map_lookup_elem(&nkc_flow_tables, &o->slot);
}

/* The flow opened in front of us: (re)start its entry in `ifindex`'s table. An
 * endpoint without a table simply remembers nothing. */
static __always_inline void nkc_direct_opened(__u32 ifindex, const struct nkc_flow_key *k, __u64 now)
{
	__u64 gen;
	void *table = nkc_flow_table(ifindex, &gen);

	if (!table)
		return;
	struct nkc_direct_flow fresh = { .opened_ns = now, .gen = gen };
	struct nkc_direct_flow *f = bpf_map_lookup_elem(table, k);
	if (f && f->gen == gen) {
		f->opened_ns = now;
		return;
	}
	/* A previous holder's entry on this key is replaced whole, never half rewritten. */
	if (bpf_map_update_elem(table, k, &fresh, f ? BPF_ANY : BPF_NOEXIST) == 0)
		nkc_direct_stat(ifindex, 0);
}

/* The entry for the flow in `ifindex`'s table, or NULL (also when another generation
 * wrote it). */
static __always_inline struct nkc_direct_flow *nkc_direct_entry(__u32 ifindex, const struct nkc_flow_key *k)
{
	__u64 gen;
	void *table = nkc_flow_table(ifindex, &gen);
	struct nkc_direct_flow *f = table ? bpf_map_lookup_elem(table, k) : NULL;

	return f && f->gen == gen ? f : NULL;
}

/* The flow's entry in `own`'s table, else in `peer`'s (0: none); `*where` says whose. */
static __always_inline struct nkc_direct_flow *nkc_direct_find(__u32 own, __u32 peer, const struct nkc_flow_key *k,
							       __u32 *where)
{
	struct nkc_direct_flow *f = nkc_direct_entry(own, k);

	*where = own;
	if (!f && peer) {
		f = nkc_direct_entry(peer, k);
		*where = peer;
	}
	return f;
}

static __always_inline int nkc_opened_within(__u32 own, __u32 peer, const struct nkc_flow_key *k, __u64 window)
{
	__u32 where;
	struct nkc_direct_flow *f = nkc_direct_find(own, peer, k, &where);

	return f && bpf_ktime_get_ns() - f->opened_ns < window;
}

#ifndef NKC_CONNTRACK
static __always_inline int nkc_tcp_proven(const struct nkc_pkt *p, const struct nkc_flow_key *k, __u32 own,
					  __u32 peer)
{
	__u8 syn = p->tcp_flags & NKC_TCP_SYN, ack = p->tcp_flags & NKC_TCP_ACK;

	if (syn && !ack) {
		nkc_direct_opened(own, k, bpf_ktime_get_ns());
		return 1;
	}
	__u32 where;
	struct nkc_direct_flow *f = nkc_direct_find(own, peer, k, &where);
	if (!f)
		return 0;
	if (syn && bpf_ktime_get_ns() - f->opened_ns >= NKC_SYNACK_WINDOW_NS) {
		/* A new flow on an old 5-tuple that did not open in front of us: it may be
		 * a NAT'd one's reply. Forget the old flow so the rest follows the stack. */
		__u64 gen;
		void *table = nkc_flow_table(where, &gen);
		if (table && bpf_map_delete_elem(table, k) == 0)
			nkc_direct_stat(where, 1);
		return 0;
	}
	return 1;
}
#endif

/* Could a packet of this kind ever be redirected? Fragments, ICMP errors, opaque
 * headers and other protocols always belong to the stack. */
static __always_inline int nkc_l4_redirectable(const struct nkc_pkt *p)
{
	return p->l4 == NKC_L4_TCP || p->l4 == NKC_L4_UDP || p->l4 == NKC_L4_ECHO_REQUEST ||
	       p->l4 == NKC_L4_ECHO_REPLY;
}

/*
 * May this packet be redirected? `own` is the host ifindex of the local endpoint whose
 * hook runs (a flow opening here is remembered in its table); `peer`, when non-zero,
 * that of a second local endpoint the packet is for, whose table is consulted too.
 *
 * A subprogram: its flow keys live on its own frame, not on its callers', which must
 * leave room for NetworkPolicy's judgment (the verifier allows 512 bytes a call chain).
 */
static __attribute__((noinline)) int nkc_proven_direct(struct __sk_buff *skb, const struct nkc_pkt *p, __u32 own,
						       __u32 peer)
{
	struct nkc_flow_key k;

	switch (p->l4) {
	case NKC_L4_TCP:
#ifdef NKC_CONNTRACK
		return !nkc_ct_translated(skb, p);
#else
		nkc_flow_key(p, &k);
		return nkc_tcp_proven(p, &k, own, peer);
#endif
	case NKC_L4_UDP:
#ifdef NKC_CONNTRACK
		return !nkc_ct_translated(skb, p);
#else
		return 0;
#endif
	case NKC_L4_ECHO_REQUEST:
		nkc_flow_key(p, &k);
		nkc_direct_opened(own, &k, bpf_ktime_get_ns());
		return 1;
	case NKC_L4_ECHO_REPLY:
		nkc_flow_key(p, &k);
		return nkc_opened_within(own, peer, &k, NKC_ECHO_WINDOW_NS);
	default:
		return 0;
	}
}

#endif
