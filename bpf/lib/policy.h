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
 * and the port (nkc_policy_rules_allow), in the direction that started it, or, where a
 * ClusterNetworkPolicy applies (nkc_pol_tiers), when its tiers read the matching rules
 * as allowed (nkc_pol_decide); then its entry lets replies and the rest of the flow through. Traffic its own node starts
 * (kubelet's probes: a packet of a socket of the node's) always passes, and so does
 * neighbour discovery (only as neighbour discovery: nkc_pol_ndisc). Denied packets are
 * dropped, counted under NKC_DROP_POLICY and the pod's nkc_pol_stats, and told to
 * `netkit-cni monitor` (nkc_pol_denials, a queue). While the agent records flows, every
 * judged flow's first packet, allowed or not, is told to it (nkc_flows: nkc_flows_on, nkc_flow_push).
 *
 * A remembered verdict is a cache, never an authority (nkc_policy_abi.h, struct
 * nkc_pol_ct): it counts for the flow it was made for (a TCP SYN opens another), while
 * that flow lives (conntrack's lifetimes), and under the rules that made it (the pod's
 * stamp). When the rules changed since, the flow is judged again as it started (its
 * direction, its remote end, the port it was opened towards) and its later packets,
 * replies too, pass only if the new rules would let it start now: established flows the
 * new rules deny are cut, both ways, at their next packet. An address's next owner meets
 * the rules as they are once the agent wrote them: the peers changed, and so the stamp.
 *
 * What travels with a flow passes with it: the later fragments of a datagram (the first
 * fragment's ports, remembered by identification: nkc_pol_fragment) and ICMP errors that
 * quote one of the pod's remembered flows (nkc_pol_related: path MTU discovery, port
 * unreachable). A later fragment whose first one was not seen is dropped (reordered
 * ahead of it, or a forgery), as Cilium drops it.
 *
 * Fail safe here means deny: a pod the agent has not judged yet (PENDING) gets nothing
 * but its node's traffic, one whose policy could not be written in full (INCOMPLETE)
 * nothing in its isolated directions; a packet whose ports cannot be read is denied for
 * an isolated pod; a full flow table only costs a judgment per packet.
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
NKC_MAP(nkc_pol_tiers, BPF_MAP_TYPE_HASH, struct nkc_pol_tier_key, struct nkc_pol_tier, NKC_POL_TIERS_MAX, 0);
NKC_MAP(nkc_pol_vips, BPF_MAP_TYPE_HASH, struct nkc_endpoint_key, __u32, NKC_POL_VIPS_MAX, 0);
/* Inner maps: LRU_HASH nkc_flow_key -> nkc_pol_ct, NKC_POL_CT_SIZE entries, made by
 * userspace (src/bpf/policy/ct.ts), owned per pod as the direct-flow tables are. */
NKC_MAP(nkc_pol_flowtabs, BPF_MAP_TYPE_ARRAY_OF_MAPS, __u32, __u32, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_pol_flow_owner, BPF_MAP_TYPE_HASH, __u32, struct nkc_flow_owner, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_pol_flow_pool, BPF_MAP_TYPE_ARRAY, __u32, struct nkc_flow_pool, 1, 0);
NKC_BTF_TYPE(nkc_pol_ct_value, struct nkc_pol_ct);
NKC_MAP(nkc_pol_stats, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_pol_stats, NKC_MAX_ENDPOINTS, 0);
NKC_QUEUE(nkc_pol_denials, struct nkc_pol_event, NKC_POL_EVENTS_MAX);
/* The node's new flows judged by the rules, by direction, deciding tier and verdict
 * (NKC_POL_VERDICT_INDEX): the agent's metrics per tier. */
NKC_MAP(nkc_pol_verdicts, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, __u64, NKC_POL_VERDICTS, 0);
/* Flow records (nkc_policy_abi.h): the switch the agent turns on, the queue, the lost. */
NKC_MAP(nkc_flow_switch, BPF_MAP_TYPE_ARRAY, __u32, __u32, 1, 0);
NKC_QUEUE(nkc_flows, struct nkc_pol_event, NKC_FLOW_EVENTS_MAX);
NKC_MAP(nkc_flow_lost, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, __u64, 1, 0);

/*
 * The judgment's bulky temporaries, in a per-CPU map rather than on the stack: the
 * judgment is a subprogram whose frame adds to its caller's, and together they must stay
 * within the verifier's 512 bytes. One judgment runs at a time on a CPU (tc programs run
 * with bottom halves off, and nothing the judgment calls runs another program), and each
 * judgment writes what it reads before it reads it. Never seen by userspace.
 */
struct nkc_pol_scratch {
	struct nkc_pkt quoted;           /* the packet an ICMP error quotes */
	struct nkc_flow_key key;         /* the flow's key in the pod's table */
	struct nkc_flow_key quoted_key;  /* the quoted packet's */
	struct nkc_flow_key frag_key;    /* a fragment's datagram */
	struct nkc_pol_ct entry;         /* an entry written */
	struct nkc_pol_event event;      /* a denial told */
};
NKC_MAP(nkc_pol_scratch, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct nkc_pol_scratch, 1, 0);

#define ICMPV6_NDISC_FIRST 133 /* router solicitation */
#define ICMPV6_NDISC_LAST 137  /* redirect */
#define NKC_NDISC_HOP_LIMIT 255 /* RFC 4861: what a router would have lowered */

/* ICMP errors, which quote the header of the packet they are about. */
#define NKC_ICMP_DEST_UNREACH 3
#define NKC_ICMP_TIME_EXCEEDED 11
#define NKC_ICMP_PARAMETERPROB 12
#define NKC_ICMPV6_DEST_UNREACH 1
#define NKC_ICMPV6_PKT_TOOBIG 2
#define NKC_ICMPV6_TIME_EXCEED 3
#define NKC_ICMPV6_PARAMPROB 4

/* A fragment entry's flags: the datagram's l4 (enum nkc_l4) and protocol. */
#define NKC_POL_CT_FRAG_FLAGS(l4, proto) (NKC_POL_CT_FRAGMENT | ((__u32)(l4) << 8) | ((__u32)(proto) << 16))
#define NKC_POL_CT_FRAG_L4(flags) (((flags) >> 8) & 0xff)
#define NKC_POL_CT_FRAG_PROTO(flags) (((flags) >> 16) & 0xff)

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

/*
 * Why a flow was denied, as struct nkc_pol_event tells it, packed in one word so that it
 * passes through the judgment as the bare reason did: the reason (enum nkc_pol_reason),
 * the tier that decided (enum nkc_pol_tier_id) and the rule bit (NKC_POL_RULE_NONE when
 * no single rule decided).
 */
#define NKC_POL_WHY(reason, tier, rule) ((__u32)(reason) | ((__u32)(tier) << 8) | ((__u32)(rule) << 16))
#define NKC_POL_WHY_REASON(why) ((__u8)((why) & 0xff))
#define NKC_POL_WHY_TIER(why) ((__u8)(((why) >> 8) & 0xff))
#define NKC_POL_WHY_RULE(why) ((__u8)(((why) >> 16) & 0xff))
/* The direction's default deny: no NetworkPolicy rule allows it. */
#define NKC_POL_WHY_DEFAULT NKC_POL_WHY(NKC_POL_DENIED, NKC_POL_TIER_NETWORK_POLICY, NKC_POL_RULE_NONE)
/* Allowed, by a tier (the rule that did, where one rule did). */
#define NKC_POL_WHY_ALLOWED(tier, rule) NKC_POL_WHY(0, tier, rule)
#define NKC_POL_WHY_NO_TIER NKC_POL_WHY_ALLOWED(NKC_POL_TIER_NONE, NKC_POL_RULE_NONE)

/* The number of the one bit set in `bit` (a power of two): the bits below it, counted
 * without a branch or a table (the verifier walks no extra path). */
static __always_inline __u8 nkc_pol_bit_index(__u64 bit)
{
	__u64 x = bit - 1;
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (__u8)((x * 0x0101010101010101ULL) >> 56);
}

/*
 * The one place a verdict is made from the rules that match a flow (`matched`: the AND
 * of its peers and ports bitmasks) and the tiers of `slot`'s direction `dir` (no
 * nkc_pol_tiers entry: NetworkPolicy alone, any matching rule allows). 1: allowed; 0:
 * denied; `why` says by what either way (nkc_policy_abi.h, struct nkc_pol_tier).
 *
 * A subprogram, as nkc_policy_judge is and for the same reason: the judgment decides in
 * three places (a new flow, a remembered one under a new stamp, the flow an ICMP error
 * quotes), and inlined, each tier's branches multiplied the paths after it (nkc_pod_policy
 * walked 159k instructions, 101k with this a subprogram, 85k before the tiers); as a
 * subprogram they merge again when it returns.
 */
static __attribute__((noinline)) int nkc_pol_decide(__u32 slot, __u32 dir, __u64 matched, __u32 *why)
{
	struct nkc_pol_tier_key tk = { .slot = slot, .dir = (__u8)dir };
	const struct nkc_pol_tier *t = bpf_map_lookup_elem(&nkc_pol_tiers, &tk);

	*why = NKC_POL_WHY_DEFAULT;
	if (!t) {
		/* Any matching rule allows; the lowest is named (flow records). */
		if (matched)
			*why = NKC_POL_WHY_ALLOWED(NKC_POL_TIER_NETWORK_POLICY, nkc_pol_bit_index(matched & -matched));
		return matched != 0;
	}
	__u64 admin = t->admin, baseline = t->baseline, deny = t->deny;
	__u64 a = matched & admin;
	if (a) {
		__u64 low = a & -a; /* the Admin rule of highest precedence that matches */
		if (low & deny) {
			*why = NKC_POL_WHY(NKC_POL_TIER_DENIED, NKC_POL_TIER_ADMIN, nkc_pol_bit_index(low));
			return 0;
		}
		if (!(low & t->pass)) {
			*why = NKC_POL_WHY_ALLOWED(NKC_POL_TIER_ADMIN, nkc_pol_bit_index(low)); /* Accept */
			return 1;
		}
		/* Pass: the rest of the Admin tier is skipped. */
	}
	if (t->flags & NKC_POL_TIER_F_NETWORK_POLICY) {
		__u64 np = matched & ~(admin | baseline);
		if (!np)
			return 0;
		*why = NKC_POL_WHY_ALLOWED(NKC_POL_TIER_NETWORK_POLICY, nkc_pol_bit_index(np & -np));
		return 1;
	}
	__u64 b = matched & baseline;
	if (b) {
		__u64 low = b & -b;
		if (low & deny) {
			*why = NKC_POL_WHY(NKC_POL_TIER_DENIED, NKC_POL_TIER_BASELINE, nkc_pol_bit_index(low));
			return 0;
		}
		*why = NKC_POL_WHY_ALLOWED(NKC_POL_TIER_BASELINE, nkc_pol_bit_index(low)); /* Accept */
		return 1;
	}
	*why = NKC_POL_WHY_NO_TIER; /* no tier decided: Kubernetes' default */
	return 1;
}

/* Do the rules of `slot` in direction `dir` let `remote` on `proto`/`port` (the port on
 * the side the flow was opened towards) through? `why`: what denied it. */
static __always_inline int nkc_policy_rules_allow(__u32 slot, __u8 dir, __u32 family, const __u8 *remote,
						  __u8 proto, __be16 port, __u32 *why)
{
	struct nkc_pol_peer_key pk = {
		.prefixlen = NKC_POL_PEER_FIXED_BITS + (family == NKC_AF_INET ? 32 : 128),
		.slot = slot,
		.dir = dir,
		.family = family,
	};
	__builtin_memcpy(pk.addr, remote, 16);
	__u64 matched = 0;
	__u64 *peers = bpf_map_lookup_elem(&nkc_pol_peers, &pk);
	if (peers && *peers) {
		struct nkc_pol_port_key qk = {
			.prefixlen = NKC_POL_PORT_FIXED_BITS + 16,
			.slot = slot,
			.dir = dir,
			.proto = proto,
			.port = port,
		};
		__u64 *ports = bpf_map_lookup_elem(&nkc_pol_ports, &qk);
		if (ports)
			matched = *peers & *ports;
	}
	/* Nothing matching may still be allowed: a ClusterNetworkPolicy's direction without
	 * a NetworkPolicy isolating it denies only by a Deny rule. */
	return nkc_pol_decide(slot, dir, matched, why);
}

/* What the policy reads the transport as: a fragment's is its datagram's (nkc_pol_fragment). */
static __always_inline __u8 nkc_pol_l4(const struct nkc_pkt *p)
{
	return p->frag == NKC_FRAG_NONE ? p->l4 : p->frag_l4;
}

/* The protocol a rule's port matches for this packet: none for what carries no ports. */
static __always_inline __u8 nkc_pol_proto(const struct nkc_pkt *p)
{
	__u8 l4 = nkc_pol_l4(p);
	return l4 == NKC_L4_TCP || l4 == NKC_L4_UDP || l4 == NKC_L4_SCTP ? p->proto : NKC_POL_PROTO_NONE;
}

static __always_inline int nkc_ipv6_link_local(const __u8 *a)
{
	return a[0] == 0xfe && (a[1] & 0xc0) == 0x80;
}

/*
 * Neighbour discovery (ICMPv6 133-137) as RFC 4861 has it: hop limit 255, so no router
 * forwarded it, and confined to the link, from a link-local or unspecified source or to
 * a link-local or link-scope multicast (ff02::/16) destination, which no router forwards
 * either: the pod and its own node talking about their link, never a pod's flow. Any
 * other packet of those types (a global source to a global destination: a tunnel through
 * the policy) is judged like any packet.
 */
static __always_inline int nkc_pol_ndisc(const struct nkc_pkt *p)
{
	if (p->family != NKC_AF_INET6 || p->l4 != NKC_L4_ICMP_OTHER || p->icmp_type < ICMPV6_NDISC_FIRST ||
	    p->icmp_type > ICMPV6_NDISC_LAST || p->ttl != NKC_NDISC_HOP_LIMIT)
		return 0;
	int link_scope_dst = nkc_ipv6_link_local(p->dst) || (p->dst[0] == 0xff && (p->dst[1] & 0x0f) == 0x02);
	return nkc_ipv6_link_only_src(p) || link_scope_dst;
}

/* The pod's flow table and the generation its entries carry; NULL when it has none. */
static __always_inline void *nkc_pol_ct_table(__u32 ifindex, __u64 *gen)
{
	struct nkc_flow_owner *o = bpf_map_lookup_elem(&nkc_pol_flow_owner, &ifindex);

	if (!o)
		return NULL;
	*gen = o->gen;
	return bpf_map_lookup_elem(&nkc_pol_flowtabs, &o->slot);
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

static __always_inline void nkc_pol_count_verdict(__u8 dir, __u8 tier, int allowed)
{
	__u32 i = NKC_POL_VERDICT_INDEX(dir, tier, allowed);
	if (i >= NKC_POL_VERDICTS)
		return;
	__u64 *n = bpf_map_lookup_elem(&nkc_pol_verdicts, &i);
	if (n)
		*n += 1; /* per-CPU value: no other writer */
}

static __always_inline void nkc_pol_event_of(struct nkc_pol_event *e, const struct nkc_pkt *p, __u32 ifindex,
					     __u32 slot, __u8 dir, __u32 why, __u8 flags)
{
	e->time_ns = bpf_ktime_get_ns();
	e->ifindex = ifindex;
	e->slot = slot;
	e->dir = dir;
	e->family = (__u8)p->family;
	e->proto = p->proto;
	e->reason = NKC_POL_WHY_REASON(why);
	e->sport = p->sport;
	e->dport = p->dport;
	__builtin_memcpy(e->src, p->src, 16);
	__builtin_memcpy(e->dst, p->dst, 16);
	e->tier = NKC_POL_WHY_TIER(why);
	e->rule = NKC_POL_WHY_RULE(why);
	e->flags = flags;
	__builtin_memset(e->pad, 0, sizeof(e->pad));
}

/* Is the agent recording flows (nkc_flow_switch)? One lookup, made only where a flow is judged. */
static __always_inline int nkc_flows_on(void)
{
	__u32 zero = 0;
	__u32 *on = bpf_map_lookup_elem(&nkc_flow_switch, &zero);

	return on && *on == NKC_FLOW_RECORD;
}

/* `e` to the agent; a full queue keeps what it holds and counts this one lost (the
 * reader is behind: what it has is what it can explain). */
static __always_inline void nkc_flow_push(struct nkc_pol_event *e)
{
	if (bpf_map_push_elem(&nkc_flows, e, 0)) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&nkc_flow_lost, &zero);
		if (lost)
			*lost += 1; /* per-CPU value: no other writer */
	}
}

static __always_inline void nkc_pol_tell(struct nkc_pol_event *e, const struct nkc_pkt *p, __u32 ifindex, __u32 slot,
					 __u8 dir, __u32 why)
{
	nkc_pol_event_of(e, p, ifindex, slot, dir, why, 0);
	/* A full queue gives up its oldest event (BPF_EXIST), never the verdict. */
	bpf_map_push_elem(&nkc_pol_denials, e, BPF_EXIST);
	if (nkc_flows_on())
		nkc_flow_push(e);
}

/* A denial (`why`: NKC_POL_WHY): counted under the pod's drops and its stats, told to monitor. */
static __always_inline enum nkc_pol_verdict nkc_pol_deny(struct nkc_pol_scratch *s, const struct nkc_pkt *p,
							 __u32 ifindex, __u32 slot, __u8 dir, __u32 why)
{
	nkc_pol_stat(ifindex, dir, 0);
	nkc_count_drop(ifindex, NKC_DROP_POLICY);
	nkc_pol_tell(&s->event, p, ifindex, slot, dir, why);
	return NKC_POL_DROP;
}

static __always_inline int nkc_pol_is_vip(__u32 family, const __u8 *addr)
{
	struct nkc_endpoint_key vip = { .family = family };
	__builtin_memcpy(vip.addr, addr, 16);
	return bpf_map_lookup_elem(&nkc_pol_vips, &vip) != NULL;
}

/* A TCP SYN without ACK: the first packet of a connection, whatever came before on its 5-tuple. */
static __always_inline int nkc_pol_opens(const struct nkc_pkt *p)
{
	return nkc_pol_l4(p) == NKC_L4_TCP && (p->tcp_flags & (NKC_TCP_SYN | NKC_TCP_ACK)) == NKC_TCP_SYN;
}

#define NKC_TCP_FIN 0x01
#define NKC_TCP_RST 0x04

/* Is the remembered flow still alive (its last packet within its kind's lifetime)? */
static __always_inline int nkc_pol_alive(const struct nkc_pol_ct *e, __u8 l4, __u64 now)
{
	__u64 life = NKC_POL_CT_OTHER_NS;
	if (l4 == NKC_L4_TCP)
		life = e->flags & NKC_POL_CT_CLOSING ? NKC_POL_CT_CLOSING_NS : NKC_POL_CT_TCP_NS;
	else if (l4 == NKC_L4_ECHO_REQUEST || l4 == NKC_L4_ECHO_REPLY || l4 == NKC_L4_ICMP_OTHER)
		life = NKC_POL_CT_ICMP_NS;
	/* Another CPU may have stamped it a moment "after" our clock read. */
	return (__s64)(now - e->seen_ns) < (__s64)life;
}

/* A packet of the remembered flow went by: its age restarts (at most once a second), and
 * a FIN or RST starts its close. */
static __always_inline void nkc_pol_touch(struct nkc_pol_ct *e, const struct nkc_pkt *p, __u64 now)
{
	if ((__s64)(now - e->seen_ns) > (__s64)NKC_POL_CT_TOUCH_NS)
		e->seen_ns = now;
	if (nkc_pol_l4(p) == NKC_L4_TCP && (p->tcp_flags & (NKC_TCP_FIN | NKC_TCP_RST)) &&
	    !(e->flags & NKC_POL_CT_CLOSING))
		e->flags |= NKC_POL_CT_CLOSING;
}

/*
 * Would the pod's policy now let a flow start in direction `dir` with `remote` on
 * `port` (the port it is opened towards)? `unreadable`: the reason an isolated direction
 * denies a packet whose ports could not be read (0: they could). `why`: what denied it
 * (NKC_POL_WHY), or, allowed, which tier let it through.
 */
static __always_inline int nkc_pol_admits(const struct nkc_pol_pod *pod, __u8 dir, const struct nkc_pkt *p,
					  const __u8 *remote, __be16 port, __u8 unreadable, __u32 *why)
{
	__u32 flags = pod->flags;

	if (flags & NKC_POL_F_PENDING) {
		*why = NKC_POL_WHY(NKC_POL_PENDING, NKC_POL_TIER_NONE, NKC_POL_RULE_NONE);
		return 0;
	}
	if (!(flags & (dir == NKC_POL_EGRESS ? NKC_POL_F_ISOLATED_OUT : NKC_POL_F_ISOLATED_IN))) {
		*why = NKC_POL_WHY_NO_TIER; /* isolated the other way only: remembered for the replies */
		return 1;
	}
	if (flags & NKC_POL_F_INCOMPLETE) {
		*why = NKC_POL_WHY(NKC_POL_INCOMPLETE, NKC_POL_TIER_NONE, NKC_POL_RULE_NONE);
		return 0;
	}
	if (unreadable) {
		*why = NKC_POL_WHY(unreadable, NKC_POL_TIER_NONE, NKC_POL_RULE_NONE);
		return 0;
	}
	return nkc_policy_rules_allow(pod->slot, dir, p->family, remote, nkc_pol_proto(p), port, why);
}

/*
 * A remembered flow whose rules changed since its verdict (`e`, its entry): would the
 * pod's policy let it start now as it started then? `p` is one of its packets in
 * direction `dir` (of the pod's): the remote end is the other side of `p`, and the port
 * it was opened towards is p's destination port if p goes the way the flow started, its
 * source port if p answers.
 */
static __always_inline int nkc_pol_readmits(const struct nkc_pol_ct *e, const struct nkc_pol_pod *pod,
					    const struct nkc_pkt *p, __u8 dir, __u32 *why)
{
	if (e->flags & NKC_POL_CT_NODE)
		return 1;
	__u8 started = e->flags & NKC_POL_CT_EGRESS ? NKC_POL_EGRESS : NKC_POL_INGRESS;
	const __u8 *remote = dir == NKC_POL_EGRESS ? p->dst : p->src;
	__be16 port = started == dir ? p->dport : p->sport;
	if ((e->flags & NKC_POL_CT_DEFERRED) && !(pod->flags & NKC_POL_F_PENDING) && nkc_pol_is_vip(p->family, remote))
		return 1;
	return nkc_pol_admits(pod, started, p, remote, port, 0, why);
}

/*
 * Looks the flow of `p` up in the pod's table: 1 when an entry vouches for it now
 * (refreshed under the current rules when they changed and still admit it), 0 when there
 * is none that counts (the flow is judged as new), -1 when the flow's rules changed
 * and no longer admit it (`why` says so: revoked, by the tier and rule that decided, when
 * the rules deny it). `deferring`: the pod's own program, where a
 * flow to a ClusterIP waits for the stack's DNAT; elsewhere an entry deferred to the
 * DNAT vouches only for the replies (a packet still addressed to the ClusterIP was not
 * translated).
 */
static __always_inline int nkc_pol_remembered(void *table, __u64 gen, const struct nkc_flow_key *k,
					      const struct nkc_pol_pod *pod, const struct nkc_pkt *p, __u8 dir,
					      int deferring, __u64 now, __u32 *why, struct nkc_pol_ct **found)
{
	struct nkc_pol_ct *e = bpf_map_lookup_elem(table, k);

	if (!e || e->gen != gen || (e->flags & NKC_POL_CT_FRAGMENT) || !nkc_pol_alive(e, nkc_pol_l4(p), now))
		return 0;
	if ((e->flags & NKC_POL_CT_DEFERRED) && dir == NKC_POL_EGRESS && !deferring)
		return 0;
	if (e->stamp != pod->stamp) {
		if (!nkc_pol_readmits(e, pod, p, dir, why)) {
			__u8 reason = NKC_POL_WHY_REASON(*why);
			if (reason == NKC_POL_DENIED || reason == NKC_POL_TIER_DENIED)
				*why = (*why & ~0xffU) | NKC_POL_REVOKED;
			return -1;
		}
		e->stamp = pod->stamp;
	}
	nkc_pol_touch(e, p, now);
	*found = e;
	return 1;
}

/*
 * A fragment, judged as its datagram: the first one's ports are remembered under the
 * datagram's identity (addresses, IPv4's protocol, identification: the kernel's
 * reassembly key) in the pod's own table, and a later one takes them from there. Returns
 * 0 for a later fragment the table knows nothing of (or a first one whose ports could
 * not be read). On success `q` carries the datagram's ports and protocol, and frag_l4
 * its l4, for the policy's eyes only: l4 stays opaque, so nothing redirects a fragment.
 * A later fragment resolved once (by the other end's policy) is not looked up again.
 */
static __always_inline int nkc_pol_fragment(struct nkc_pol_scratch *s, struct nkc_pkt *q, void *table, __u64 gen,
					    __u64 now)
{
	if (q->frag_l4 != NKC_L4_OPAQUE && q->frag == NKC_FRAG_LATER)
		return 1;
	struct nkc_flow_key *fk = &s->frag_key;
	fk->family = q->family;
	fk->proto = q->family == NKC_AF_INET ? q->proto : 0; /* IPv6 reassembles by addresses and id */
	fk->port_a = (__be16)(q->frag_id >> 16);
	fk->port_b = (__be16)(q->frag_id & 0xffff);
	fk->pad = NKC_POL_CT_KEY_FRAGMENT;
	__builtin_memcpy(fk->addr_a, q->src, 16);
	__builtin_memcpy(fk->addr_b, q->dst, 16);
	if (q->frag == NKC_FRAG_FIRST) {
		if (q->frag_l4 == NKC_L4_OPAQUE)
			return 0;
		if (table) {
			struct nkc_pol_ct *first = &s->entry;
			first->gen = gen;
			first->stamp = 0;
			first->seen_ns = now;
			first->flags = NKC_POL_CT_FRAG_FLAGS(q->frag_l4, q->proto);
			first->sport = q->sport;
			first->dport = q->dport;
			__builtin_memset(first->packets, 0, sizeof(first->packets));
			__builtin_memset(first->bytes, 0, sizeof(first->bytes));
			bpf_map_update_elem(table, fk, first, BPF_ANY);
		}
		return 1;
	}
	if (!table)
		return 0;
	struct nkc_pol_ct *e = bpf_map_lookup_elem(table, fk);
	if (!e || e->gen != gen || !(e->flags & NKC_POL_CT_FRAGMENT) ||
	    (__s64)(now - e->seen_ns) >= (__s64)NKC_POL_CT_FRAGMENT_NS)
		return 0;
	q->frag_l4 = NKC_POL_CT_FRAG_L4(e->flags);
	q->proto = NKC_POL_CT_FRAG_PROTO(e->flags);
	q->sport = e->sport;
	q->dport = e->dport;
	q->tcp_flags = 0;
	return 1;
}

static __always_inline int nkc_pol_icmp_error(const struct nkc_pkt *p)
{
	if (p->l4 != NKC_L4_ICMP_OTHER)
		return 0;
	if (p->family == NKC_AF_INET)
		return p->icmp_type == NKC_ICMP_DEST_UNREACH || p->icmp_type == NKC_ICMP_TIME_EXCEEDED ||
		       p->icmp_type == NKC_ICMP_PARAMETERPROB;
	return p->icmp_type >= NKC_ICMPV6_DEST_UNREACH && p->icmp_type <= NKC_ICMPV6_PARAMPROB;
}

/*
 * The packet an ICMP error `p` quotes (its IP header and the first 8 bytes after it),
 * read into `in`: 0 when it cannot be (cut short, a later fragment, an IPv6 extension
 * header, a quoted ICMP that is no echo request).
 */
static __always_inline int nkc_pol_quoted(struct __sk_buff *skb, const struct nkc_pkt *p, struct nkc_pkt *in)
{
	__u32 off = (__u32)p->l4_off + 8;

	__builtin_memset(in, 0, sizeof(*in));
	in->family = p->family;
	if (p->family == NKC_AF_INET) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)) || ip.version != 4 || ip.ihl < 5 ||
		    (ip.frag_off & bpf_htons(IP_OFFSET)))
			return 0;
		__builtin_memcpy(in->src, &ip.saddr, 4);
		__builtin_memcpy(in->dst, &ip.daddr, 4);
		in->proto = ip.protocol;
		off += (__u32)ip.ihl * 4;
	} else {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)) || ip6.version != 6)
			return 0;
		__builtin_memcpy(in->src, &ip6.saddr, 16);
		__builtin_memcpy(in->dst, &ip6.daddr, 16);
		in->proto = ip6.nexthdr;
		off += sizeof(ip6);
	}
	__u8 h[8];
	if (bpf_skb_load_bytes(skb, off, h, sizeof(h)))
		return 0;
	if (in->proto == IPPROTO_TCP || in->proto == IPPROTO_UDP || in->proto == IPPROTO_SCTP) {
		__builtin_memcpy(&in->sport, h, 2);
		__builtin_memcpy(&in->dport, h + 2, 2);
		in->l4 = in->proto == IPPROTO_TCP ? NKC_L4_TCP : in->proto == IPPROTO_UDP ? NKC_L4_UDP : NKC_L4_SCTP;
		in->tcp_flags = NKC_TCP_ACK; /* no SYN: the quote is about a flow, it opens none */
		return 1;
	}
	if (nkc_is_icmp(in) && h[0] == (in->family == NKC_AF_INET ? ICMP_ECHO : ICMPV6_ECHO_REQUEST)) {
		__builtin_memcpy(&in->sport, h + 4, 2);
		in->dport = in->sport;
		in->l4 = NKC_L4_ECHO_REQUEST;
		return 1;
	}
	return 0;
}

/*
 * An ICMP error about one of the pod's remembered flows, which passes as part of it
 * (path MTU discovery, a port unreachable): the quoted packet is one the pod sent when
 * the error comes in (its source is the error's destination), one it received when the
 * pod sends the error (its destination is the error's source). 1: related and admitted,
 * 0: not related (judged as any packet), -1: related to a flow its rules no longer admit.
 */
static __always_inline int nkc_pol_related(struct nkc_pol_scratch *s, struct __sk_buff *skb, const struct nkc_pkt *p,
					   void *table, __u64 gen, const struct nkc_pol_pod *pod, __u8 dir, __u64 now,
					   __u32 *why)
{
	struct nkc_pkt *in = &s->quoted;

	if (!table || !nkc_pol_icmp_error(p) || !nkc_pol_quoted(skb, p, in))
		return 0;
	const __u8 *mine = dir == NKC_POL_INGRESS ? in->src : in->dst;
	const __u8 *errors_end = dir == NKC_POL_INGRESS ? p->dst : p->src;
	__u64 a0, a1, b0, b1;
	__builtin_memcpy(&a0, mine, 8);
	__builtin_memcpy(&a1, mine + 8, 8);
	__builtin_memcpy(&b0, errors_end, 8);
	__builtin_memcpy(&b1, errors_end + 8, 8);
	if (a0 != b0 || a1 != b1)
		return 0;
	nkc_flow_key(in, &s->quoted_key);
	/* The quoted packet went the other way from the error; the error is none of its
	 * packets, and is not counted into it. */
	struct nkc_pol_ct *quoted;
	return nkc_pol_remembered(table, gen, &s->quoted_key, pod, in, dir ^ 1, 1, now, why, &quoted);
}

/*
 * A SYN the pod's table already lets through under the same rules, opened and not
 * closing: the same connection's SYN again (retransmitted, or met at a second judgment
 * point: the pod's program, then the uplink's), told once. A SYN on a closing or
 * forgotten 5-tuple opens a new connection, and is told. Asked only while flows are
 * recorded.
 */
static __always_inline const struct nkc_pol_ct *nkc_pol_seen_open(void *table, __u64 gen,
								 const struct nkc_flow_key *k,
								 const struct nkc_pol_pod *pod,
								 const struct nkc_pkt *p, __u64 now)
{
	if (!nkc_pol_opens(p))
		return 0;
	const struct nkc_pol_ct *e = bpf_map_lookup_elem(table, k);
	if (e && e->gen == gen && e->stamp == pod->stamp && !(e->flags & (NKC_POL_CT_CLOSING | NKC_POL_CT_FRAGMENT)) &&
	    nkc_pol_alive(e, nkc_pol_l4(p), now))
		return e;
	return 0;
}

/* How nkc_policy_judge is asked (one argument: a subprogram takes five). */
#define NKC_POL_JUDGE_FROM_NODE (1U << 1) /* the pod's own node sent it (ingress only) */
#define NKC_POL_JUDGE_DEFERRING (1U << 2) /* the pod's own program: a new flow to a ClusterIP waits for the DNAT */
/*
 * Where a packet is counted into its flow's entry while flows are recorded: once per
 * packet and direction, though a packet may be judged at two points. A pod's egress is
 * counted in the pod's own program (NKC_POL_JUDGE_DEFERRING), which every packet it
 * sends crosses, never again on the uplink or the receiver's host device. Its ingress
 * is counted on its host device's transmit (nkc_pod_policy), and at the points that
 * hand a packet straight to the pod's end (bpf_redirect_peer, which skips that
 * transmit): those say NKC_POL_JUDGE_COUNTS.
 */
#define NKC_POL_JUDGE_COUNTS (1U << 3)
#define NKC_POL_JUDGE_NO_L2 (1U << 4) /* the packet starts at its IP header (WireGuard) */

/* Is this packet counted here (NKC_POL_JUDGE_COUNTS)? Asked only while flows are recorded. */
static __always_inline int nkc_pol_counts_here(__u32 how)
{
	return (how & 1) == NKC_POL_EGRESS ? !!(how & NKC_POL_JUDGE_DEFERRING) : !!(how & NKC_POL_JUDGE_COUNTS);
}

/* One packet more for the flow `e`, in the pod's direction `dir`; other CPUs may count it
 * at once. */
static __always_inline void nkc_pol_count(struct nkc_pol_ct *e, struct __sk_buff *skb, __u8 dir, __u32 how)
{
	__u64 segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	__u64 len = skb->len;
	if (!(how & NKC_POL_JUDGE_NO_L2))
		len = len > ETH_HLEN ? len - ETH_HLEN : 0;
	dir &= 1;
	__sync_fetch_and_add(&e->packets[dir], segs);
	__sync_fetch_and_add(&e->bytes[dir], len);
}

/*
 * The verdict of the policy `pod` (of the pod behind `ifindex`, isolated) on packet `p`,
 * which it sends (NKC_POL_EGRESS) or receives (NKC_POL_INGRESS), the direction in the
 * low bit of `how`. NKC_POL_JUDGE_FROM_NODE: the pod's own node sent it (ingress only).
 * NKC_POL_JUDGE_DEFERRING: the pod's own program, where a new flow to a Service
 * ClusterIP is let through unjudged (the stack's DNAT picks the backend its egress is
 * judged on) and remembered for its replies. A drop is counted and told here; the caller
 * drops.
 *
 * A subprogram, not inlined (src/bpf/loader/subprograms.ts links it into each program): its
 * stack frame goes when it returns, so the verifier's paths through it merge again in
 * the caller, which may judge twice (nkc_pod_policy: a local sender's egress, then the
 * receiver's ingress) and goes on to redirect.
 */
static __attribute__((noinline)) int nkc_policy_judge(struct __sk_buff *skb, struct nkc_pkt *p, __u32 ifindex,
						     const struct nkc_pol_pod *pod, __u32 how)
{
	__u8 dir = how & 1;
	int from_node = how & NKC_POL_JUDGE_FROM_NODE;
	int deferring = how & NKC_POL_JUDGE_DEFERRING;

	if (nkc_pol_ndisc(p))
		return NKC_POL_PASS;
	__u32 zero = 0;
	struct nkc_pol_scratch *s = bpf_map_lookup_elem(&nkc_pol_scratch, &zero);
	if (!s)
		return NKC_POL_DROP; /* never: an array's first element */
	__u64 gen = 0, now = bpf_ktime_get_ns();
	void *table = nkc_pol_ct_table(ifindex, &gen);
	__u32 why = NKC_POL_WHY_DEFAULT;
	__u8 unreadable = 0;
	struct nkc_flow_key *k = &s->key;

	if (p->frag != NKC_FRAG_NONE && !nkc_pol_fragment(s, p, table, gen, now))
		unreadable = p->frag == NKC_FRAG_LATER ? NKC_POL_FRAGMENT : NKC_POL_OPAQUE;
	else if (nkc_pol_l4(p) == NKC_L4_OPAQUE)
		unreadable = NKC_POL_OPAQUE;

	if (!unreadable)
		nkc_flow_key(p, k);
	if (table && !unreadable && !nkc_pol_opens(p)) { /* a SYN opens a new connection: judged as one */
		/* An ICMP error belongs to the flow it quotes, if the pod's table has it, and to no
		 * flow of its own: its 5-tuple (router and pod, no ports) is no conversation, and
		 * an earlier error judged on it under rules changed since would cut path MTU
		 * discovery until it aged out. */
		struct nkc_pol_ct *e = 0;
		int known = nkc_pol_icmp_error(p) ? nkc_pol_related(s, skb, p, table, gen, pod, dir, now, &why)
						  : nkc_pol_remembered(table, gen, k, pod, p, dir, deferring, now, &why, &e);
		if (known > 0) {
			if (e && nkc_pol_counts_here(how) && nkc_flows_on())
				nkc_pol_count(e, skb, dir, how);
			return NKC_POL_PASS;
		}
		if (known < 0)
			return nkc_pol_deny(s, p, ifindex, pod->slot, dir, why);
	}

	/* A new flow (or one the table cannot vouch for). */
	__u32 started = dir == NKC_POL_EGRESS ? NKC_POL_CT_EGRESS : NKC_POL_CT_INGRESS;
	int allowed;
	if (from_node && dir == NKC_POL_INGRESS) {
		allowed = 1;
		why = NKC_POL_WHY_NO_TIER;
		started |= NKC_POL_CT_NODE;
	} else if (deferring && dir == NKC_POL_EGRESS && !unreadable && !(pod->flags & NKC_POL_F_PENDING) &&
		   nkc_pol_is_vip(p->family, p->dst)) {
		allowed = 1;
		started |= NKC_POL_CT_DEFERRED;
	} else {
		allowed = nkc_pol_admits(pod, dir, p, dir == NKC_POL_EGRESS ? p->dst : p->src, p->dport, unreadable,
					 &why);
		nkc_pol_count_verdict(dir, NKC_POL_WHY_TIER(why), allowed);
	}
	if (!allowed)
		return nkc_pol_deny(s, p, ifindex, pod->slot, dir, why);
	int recording = nkc_flows_on();
	/* The same connection's SYN again keeps its flow's counts (and is not told again). */
	const struct nkc_pol_ct *same = recording && table && !unreadable ? nkc_pol_seen_open(table, gen, k, pod, p, now) : 0;
	struct nkc_pol_ct *fresh = &s->entry;
	if (same) {
		__builtin_memcpy(fresh->packets, same->packets, sizeof(fresh->packets));
		__builtin_memcpy(fresh->bytes, same->bytes, sizeof(fresh->bytes));
	} else {
		__builtin_memset(fresh->packets, 0, sizeof(fresh->packets));
		__builtin_memset(fresh->bytes, 0, sizeof(fresh->bytes));
	}
	/* Deferred flows are judged where the DNAT sends them: counted and recorded there. */
	if (!(started & NKC_POL_CT_DEFERRED)) {
		nkc_pol_stat(ifindex, dir, 1);
		if (recording && !same) {
			nkc_pol_event_of(&s->event, p, ifindex, pod->slot, dir, why & ~0xffU,
					 started & NKC_POL_CT_NODE ? NKC_POL_EV_F_NODE : 0);
			nkc_flow_push(&s->event);
		}
	}
	if (table && !unreadable) {
		if (nkc_pol_l4(p) == NKC_L4_TCP && (p->tcp_flags & (NKC_TCP_FIN | NKC_TCP_RST)))
			started |= NKC_POL_CT_CLOSING;
		fresh->gen = gen;
		fresh->stamp = pod->stamp;
		fresh->seen_ns = now;
		fresh->flags = started;
		fresh->sport = 0;
		fresh->dport = 0;
		if (recording && nkc_pol_counts_here(how))
			nkc_pol_count(fresh, skb, dir, how);
		/* LRU: a full table makes room from this pod's own oldest flows. */
		bpf_map_update_elem(table, k, fresh, BPF_ANY);
	}
	return NKC_POL_PASS;
}

/* A pod that is not isolated (or not enforcing at all) is never judged, unless watched (audit mode). */
static __always_inline int nkc_pol_isolated(const struct nkc_pol_pod *pod)
{
	return pod &&
	       (pod->flags & (NKC_POL_F_ISOLATED_IN | NKC_POL_F_ISOLATED_OUT | NKC_POL_F_PENDING | NKC_POL_F_WATCH));
}

/* `dir` with, for an ingress point, NKC_POL_JUDGE_COUNTS and NKC_POL_JUDGE_NO_L2. */
static __always_inline enum nkc_pol_verdict nkc_policy(struct __sk_buff *skb, struct nkc_pkt *p, __u32 ifindex,
							__u32 dir, int from_node)
{
	struct nkc_pol_pod *pod = nkc_pol_pod_of(ifindex);

	if (!nkc_pol_isolated(pod))
		return NKC_POL_PASS;
	return nkc_policy_judge(skb, p, ifindex, pod, dir | (from_node ? NKC_POL_JUDGE_FROM_NODE : 0));
}

/*
 * A pod's egress, in its own program: as nkc_policy, and a new flow to a Service
 * ClusterIP is deferred to the backend the stack's DNAT chooses (judged in
 * nkc_pod_policy for a local one, nkc_host_out or nkc_wg_out for another node's). A pod
 * that is not isolated costs one lookup.
 */
static __always_inline enum nkc_pol_verdict nkc_policy_egress(struct __sk_buff *skb, struct nkc_pkt *p,
							       __u32 ifindex)
{
	struct nkc_pol_pod *pod = nkc_pol_pod_of(ifindex);

	if (!nkc_pol_isolated(pod))
		return NKC_POL_PASS;
	return nkc_policy_judge(skb, p, ifindex, pod, NKC_POL_EGRESS | NKC_POL_JUDGE_DEFERRING);
}

#endif
