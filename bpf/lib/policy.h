/*
 * NetworkPolicy in the datapath: a pod's policy judges each new flow where its packets
 * already pass, and remembers the verdict in the pod's own flow table, so the rest of
 * the flow, both ways, passes on one lookup.
 *
 *   egress    what a pod sends: nkc_from_pod and nkc_src_check (bpf_lxc.c), before any
 *             redirect or the stack
 *   ingress   what reaches a pod: before bpf_redirect_peer in nkc_host_in (bpf_host.c),
 *             before a local pod's redirect to it (the sender's program consults the
 *             receiver's rules), and in nkc_pod_policy on the pod's host device for
 *             whatever the stack delivers
 *
 * A pod is judged only when its network enforces policy (nkc_pol_ep has it) and its
 * namespace has a policy (nkc_pol_pods has it): every other pod passes after two
 * lookups. An isolated pod's new flow passes when a rule allows both the remote address
 * and the port (nkc_policy_rules_allow), in the direction that started it; then its
 * entry lets replies and the rest of the flow through. Traffic its own node starts
 * (kubelet's probes: a packet of a socket of the node's) always passes, and so does
 * neighbour discovery. Denied packets are dropped, counted under NKC_DROP_POLICY and
 * the pod's nkc_pol_stats, and told to `netkit-cni monitor` (nkc_pol_events, a queue).
 *
 * Fail safe here means deny: a pod the agent has not judged yet (PENDING) gets nothing
 * but its node's traffic; a packet whose ports cannot be read (a fragment) is denied
 * for an isolated pod; a full flow table only costs a judgment per packet.
 */
#ifndef NKC_POLICY_H
#define NKC_POLICY_H

#include "common.h"
#include "counters.h"
#include "direct.h"
#include "eps.h"
#include "nkc_policy_abi.h"

NKC_MAP(nkc_pol_ep, BPF_MAP_TYPE_HASH, __u32, struct nkc_pol_ep, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_pol_pods, BPF_MAP_TYPE_HASH, __u64, struct nkc_pol_pod, NKC_POL_PODS_MAX, 0);
/* LPM tries must be created with BPF_F_NO_PREALLOC (kernel/bpf/lpm_trie.c). */
NKC_MAP(nkc_pol_peers, BPF_MAP_TYPE_LPM_TRIE, struct nkc_pol_peer_key, __u64, NKC_POL_PEERS_MAX,
	BPF_F_NO_PREALLOC);
NKC_MAP(nkc_pol_ports, BPF_MAP_TYPE_LPM_TRIE, struct nkc_pol_port_key, __u64, NKC_POL_PORTS_MAX,
	BPF_F_NO_PREALLOC);
NKC_MAP(nkc_pol_vips, BPF_MAP_TYPE_HASH, struct nkc_endpoint_key, __u32, NKC_POL_VIPS_MAX, 0);
/* Inner maps: LRU_HASH nkc_flow_key -> nkc_pol_ct, NKC_POL_CT_SIZE entries, made by
 * userspace (src/bpf/table-pool.ts), owned per pod as the direct-flow tables are. */
NKC_MAP(nkc_pol_ct_tables, BPF_MAP_TYPE_ARRAY_OF_MAPS, __u32, __u32, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_pol_ct_owner, BPF_MAP_TYPE_HASH, __u32, struct nkc_flow_owner, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_pol_ct_pool, BPF_MAP_TYPE_ARRAY, __u32, struct nkc_flow_pool, 1, 0);
NKC_MAP(nkc_pol_stats, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_pol_stats, NKC_MAX_ENDPOINTS, 0);
NKC_QUEUE(nkc_pol_events, struct nkc_pol_event, NKC_POL_EVENTS_MAX);

#define ICMPV6_NDISC_FIRST 133 /* router solicitation */
#define ICMPV6_NDISC_LAST 137  /* redirect */

enum nkc_pol_verdict {
	NKC_POL_PASS,
	NKC_POL_DROP,
};

/* The pod behind `ifindex`, when its network enforces policy and its namespace has one. */
static __always_inline struct nkc_pol_pod *nkc_pol_pod_of(__u32 ifindex)
{
	struct nkc_pol_ep *ep = bpf_map_lookup_elem(&nkc_pol_ep, &ifindex);

	return ep ? bpf_map_lookup_elem(&nkc_pol_pods, &ep->pod_key) : NULL;
}

/* Does a rule of `slot` allow `remote` on `proto`/`port` (the port on the side the flow
 * was opened towards) in direction `dir`? */
static __always_inline int nkc_policy_rules_allow(__u32 slot, __u8 dir, __u32 family, const __u8 *remote,
						  __u8 proto, __be16 port)
{
	struct nkc_pol_peer_key pk = {
		.prefixlen = NKC_POL_PEER_FIXED_BITS + (family == NKC_AF_INET ? 32 : 128),
		.slot = slot,
		.dir = dir,
		.family = family,
	};
	__builtin_memcpy(pk.addr, remote, 16);
	__u64 *peers = bpf_map_lookup_elem(&nkc_pol_peers, &pk);
	if (!peers || !*peers)
		return 0;
	struct nkc_pol_port_key qk = {
		.prefixlen = NKC_POL_PORT_FIXED_BITS + 16,
		.slot = slot,
		.dir = dir,
		.proto = proto,
		.port = port,
	};
	__u64 *ports = bpf_map_lookup_elem(&nkc_pol_ports, &qk);
	return ports && (*peers & *ports) != 0;
}

/* The protocol a rule's port matches for this packet: none for what carries no ports. */
static __always_inline __u8 nkc_pol_proto(const struct nkc_pkt *p)
{
	return p->l4 == NKC_L4_TCP || p->l4 == NKC_L4_UDP || p->l4 == NKC_L4_SCTP ? p->proto : NKC_POL_PROTO_NONE;
}

/* Neighbour discovery (ICMPv6 133-137): the link's own traffic, never a pod's flow. */
static __always_inline int nkc_pol_ndisc(const struct nkc_pkt *p)
{
	return p->family == NKC_AF_INET6 && p->l4 == NKC_L4_ICMP_OTHER && p->icmp_type >= ICMPV6_NDISC_FIRST &&
	       p->icmp_type <= ICMPV6_NDISC_LAST;
}

/* The pod's flow table and the generation its entries carry; NULL when it has none. */
static __always_inline void *nkc_pol_ct_table(__u32 ifindex, __u64 *gen)
{
	struct nkc_flow_owner *o = bpf_map_lookup_elem(&nkc_pol_ct_owner, &ifindex);

	if (!o)
		return NULL;
	*gen = o->gen;
	return bpf_map_lookup_elem(&nkc_pol_ct_tables, &o->slot);
}

static __always_inline void nkc_pol_stat(__u32 ifindex, __u8 dir, int allowed)
{
	struct nkc_pol_stats *s = bpf_map_lookup_elem(&nkc_pol_stats, &ifindex);

	if (!s) {
		struct nkc_pol_stats zero = {};
		bpf_map_update_elem(&nkc_pol_stats, &ifindex, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&nkc_pol_stats, &ifindex);
		if (!s)
			return;
	}
	if (dir > NKC_POL_INGRESS)
		return;
	if (allowed)
		s->allowed[dir] += 1; /* per-CPU value: no other writer */
	else
		s->denied[dir] += 1;
}

static __always_inline void nkc_pol_tell(const struct nkc_pkt *p, __u32 ifindex, __u32 slot, __u8 dir, __u8 reason)
{
	struct nkc_pol_event e = {
		.time_ns = bpf_ktime_get_ns(),
		.ifindex = ifindex,
		.slot = slot,
		.dir = dir,
		.family = (__u8)p->family,
		.proto = p->proto,
		.reason = reason,
		.sport = p->sport,
		.dport = p->dport,
	};
	__builtin_memcpy(e.src, p->src, 16);
	__builtin_memcpy(e.dst, p->dst, 16);
	/* A full queue gives up its oldest event (BPF_EXIST), never the verdict. */
	bpf_map_push_elem(&nkc_pol_events, &e, BPF_EXIST);
}

/*
 * The verdict of the policy `pod` (of the pod behind `ifindex`, isolated) on packet `p`, which it sends
 * (NKC_POL_EGRESS) or receives (NKC_POL_INGRESS). `from_node`: the pod's own node sent
 * it (ingress only). A drop is counted and told here; the caller drops.
 */
static __always_inline enum nkc_pol_verdict nkc_policy_judge(const struct nkc_pkt *p, __u32 ifindex,
							      const struct nkc_pol_pod *pod, __u8 dir, int from_node)
{
	if (nkc_pol_ndisc(p))
		return NKC_POL_PASS;
	__u32 slot = pod->slot, flags = pod->flags;
	__u64 gen = 0;
	void *table = nkc_pol_ct_table(ifindex, &gen);
	struct nkc_flow_key k;

	nkc_flow_key(p, &k);
	if (table && p->l4 != NKC_L4_OPAQUE) {
		struct nkc_pol_ct *e = bpf_map_lookup_elem(table, &k);
		if (e && e->gen == gen)
			return NKC_POL_PASS;
	}

	__u8 reason = NKC_POL_DENIED;
	__u32 started = dir == NKC_POL_EGRESS ? NKC_POL_CT_EGRESS : NKC_POL_CT_INGRESS;
	int allowed;
	if (from_node && dir == NKC_POL_INGRESS) {
		allowed = 1;
		started |= NKC_POL_CT_NODE;
	} else if (flags & NKC_POL_F_PENDING) {
		allowed = 0;
		reason = NKC_POL_PENDING;
	} else if (!(flags & (dir == NKC_POL_EGRESS ? NKC_POL_F_ISOLATED_OUT : NKC_POL_F_ISOLATED_IN))) {
		allowed = 1; /* isolated the other way only: remembered for the replies */
	} else if (p->l4 == NKC_L4_OPAQUE) {
		allowed = 0;
		reason = NKC_POL_OPAQUE;
	} else {
		const __u8 *remote = dir == NKC_POL_EGRESS ? p->dst : p->src;
		allowed = nkc_policy_rules_allow(slot, dir, p->family, remote, nkc_pol_proto(p), p->dport);
	}
	nkc_pol_stat(ifindex, dir, allowed);
	if (!allowed) {
		nkc_count_drop(ifindex, NKC_DROP_POLICY);
		nkc_pol_tell(p, ifindex, slot, dir, reason);
		return NKC_POL_DROP;
	}
	if (table && p->l4 != NKC_L4_OPAQUE) {
		struct nkc_pol_ct fresh = { .gen = gen, .flags = started };
		/* LRU: a full table makes room from this pod's own oldest flows. */
		bpf_map_update_elem(table, &k, &fresh, BPF_ANY);
	}
	return NKC_POL_PASS;
}

/* A pod that is not isolated (or not enforcing at all) is never judged. */
static __always_inline int nkc_pol_isolated(const struct nkc_pol_pod *pod)
{
	return pod && (pod->flags & (NKC_POL_F_ISOLATED_IN | NKC_POL_F_ISOLATED_OUT | NKC_POL_F_PENDING));
}

static __always_inline enum nkc_pol_verdict nkc_policy(const struct nkc_pkt *p, __u32 ifindex, __u8 dir,
							int from_node)
{
	struct nkc_pol_pod *pod = nkc_pol_pod_of(ifindex);

	return nkc_pol_isolated(pod) ? nkc_policy_judge(p, ifindex, pod, dir, from_node) : NKC_POL_PASS;
}

/*
 * A pod's egress: a flow to a Service ClusterIP is not judged here (the stack's DNAT
 * picks the backend its egress is judged on, in nkc_pod_policy for a local one); it is
 * remembered, so that its replies, which come back from the ClusterIP, pass. Everything
 * else is judged now. A pod that is not isolated costs one lookup.
 */
static __always_inline enum nkc_pol_verdict nkc_policy_egress(const struct nkc_pkt *p, __u32 ifindex)
{
	struct nkc_pol_pod *pod = nkc_pol_pod_of(ifindex);

	if (!nkc_pol_isolated(pod))
		return NKC_POL_PASS;
	struct nkc_endpoint_key vip = { .family = p->family };
	__builtin_memcpy(vip.addr, p->dst, 16);
	if ((pod->flags & NKC_POL_F_PENDING) || p->l4 == NKC_L4_OPAQUE || !bpf_map_lookup_elem(&nkc_pol_vips, &vip))
		return nkc_policy_judge(p, ifindex, pod, NKC_POL_EGRESS, 0);
	__u64 gen = 0;
	void *table = nkc_pol_ct_table(ifindex, &gen);
	if (table) {
		struct nkc_flow_key k;
		struct nkc_pol_ct fresh = { .gen = gen, .flags = NKC_POL_CT_EGRESS | NKC_POL_CT_DEFERRED };
		nkc_flow_key(p, &k);
		bpf_map_update_elem(table, &k, &fresh, BPF_ANY);
	}
	return NKC_POL_PASS;
}

#endif
