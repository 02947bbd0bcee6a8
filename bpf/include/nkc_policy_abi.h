/*
 * NetworkPolicy's layouts (lib/policy.h), shared with userspace (src/bpf/policy/abi.ts
 * declares each again as a field table, held against the objects' BTF at build and at
 * load; the _Static_asserts pin the sizes). Who writes what:
 *
 *   nkc_pol_ep     the plugin, at ADD of a pod of a network with "networkPolicy": true:
 *                  host ifindex -> the pod's key (its namespace/name, hashed)
 *   nkc_pol_pods   the agent (and the plugin, only to mark a pod it wires before the agent
 *                  judged it): pod key -> its compiled policy's slot, isolation, flags
 *   nkc_pol_peers  the agent: per slot and direction, remote prefix -> rules that allow it
 *   nkc_pol_ports  the agent: per slot and direction, protocol and port -> rules that allow it
 *   nkc_pol_tiers  the agent: per slot and direction where a ClusterNetworkPolicy applies,
 *                  which of those rules are Admin or Baseline rules and what each does
 *   nkc_pol_vips   the agent: Service ClusterIPs (a pod's egress to one is judged after
 *                  the stack's DNAT, on the backend)
 *   nkc_pol_ct_*   the programs: each pod's own table of flows its policy let through
 *                  (a pool like the direct-flow tables', nkc_abi.h)
 *
 * A flow's rules are those that match both its remote address and its port: the AND of
 * two longest-prefix lookups, each a bitmask of rule numbers. With NetworkPolicy alone
 * (no nkc_pol_tiers entry) it is allowed when some rule matches. With a
 * ClusterNetworkPolicy, the bits are read in tiers (struct nkc_pol_tier): Admin, the
 * NetworkPolicies, Baseline, each tier's first matching rule deciding.
 */
#ifndef NKC_POLICY_ABI_H
#define NKC_POLICY_ABI_H

#include <linux/types.h>

#define NKC_POL_RULES 64          /* rules per slot and direction: the bits of a __u64 */
#define NKC_POL_PODS_MAX 16384    /* pods of the cluster whose policy this node holds */
#define NKC_POL_PEERS_MAX 262144  /* remote prefixes over every slot */
#define NKC_POL_PORTS_MAX 65536   /* port prefixes over every slot */
#define NKC_POL_VIPS_MAX 65536    /* Service ClusterIPs */
#define NKC_POL_CT_SIZE 2048      /* flows one pod's table remembers (LRU) */

enum nkc_pol_dir {
	NKC_POL_EGRESS = 0,  /* what the pod sends: judged against its egress rules */
	NKC_POL_INGRESS = 1, /* what reaches the pod: against its ingress rules */
};

/* nkc_pol_ep value, keyed by the pod's __u32 host ifindex. */
struct nkc_pol_ep {
	__u64 pod_key; /* the first 8 bytes of sha256("namespace/name"), little endian */
};
_Static_assert(sizeof(struct nkc_pol_ep) == 8, "nkc_pol_ep is 8 bytes");

/* The pod is isolated for ingress (egress): a policy of its namespace selects it for
 * that direction, and only its rules (and replies) get through. */
#define NKC_POL_F_ISOLATED_IN (1U << 0)
#define NKC_POL_F_ISOLATED_OUT (1U << 1)
/* Wired before the agent judged it, in a namespace that has policies: nothing but its
 * node's traffic passes until the agent writes its policy. */
#define NKC_POL_F_PENDING (1U << 2)
/* The agent could not write the pod's policy in full (a full map, a write error): its
 * isolated directions deny everything (slot 0 has no entries) until a retry succeeds. */
#define NKC_POL_F_INCOMPLETE (1U << 3)
/* Judge every new flow of the pod though it may be isolated in no direction (an
 * audit-mode policy selects it: the agent judges its records against that policy); a
 * direction not isolated still lets everything through. */
#define NKC_POL_F_WATCH (1U << 4)

/* nkc_pol_pods value, keyed by the __u64 pod key. No entry: the pod's namespace has no
 * policy, it is not isolated. */
struct nkc_pol_pod {
	__u32 slot;  /* its compiled policy in nkc_pol_peers and nkc_pol_ports (0: none) */
	__u32 flags; /* NKC_POL_F_* */
	/* The version of the rules the pod is judged by: a new value whenever the pod moves
	 * to another slot or its slot's tables are rewritten, never one used before on the
	 * node (the agent takes CLOCK_MONOTONIC, or its last one plus one). A verdict the
	 * pod's flow table remembers counts only under the stamp it was made with. */
	__u64 stamp;
};
_Static_assert(sizeof(struct nkc_pol_pod) == 16, "nkc_pol_pod is 16 bytes");

/*
 * nkc_pol_peers key (LPM trie). The first 64 bits after prefixlen (slot, direction,
 * family, padding) are part of every prefix: prefixlen = 64 + the address prefix.
 * Value: __u64, bit r set when rule r allows every address of the prefix.
 */
struct nkc_pol_peer_key {
	__u32 prefixlen;
	__u32 slot;
	__u8 dir;          /* enum nkc_pol_dir */
	__u8 family;       /* NKC_AF_INET or NKC_AF_INET6 */
	__u8 pad[2];       /* always zero */
	__u8 addr[16];     /* network order; IPv4 in addr[0..3] */
};
_Static_assert(sizeof(struct nkc_pol_peer_key) == 28, "nkc_pol_peer_key is 28 bytes");
#define NKC_POL_PEER_FIXED_BITS 64

/*
 * nkc_pol_ports key (LPM trie): slot, direction and protocol (48 bits) are part of
 * every prefix; then the port, network order, so a range is a few prefixes. Value:
 * __u64, bit r set when rule r allows every port of the prefix. A packet without ports
 * (ICMP, GRE, ...) looks up protocol NKC_POL_PROTO_NONE, port 0: only rules that name no
 * port at all allow it.
 */
struct nkc_pol_port_key {
	__u32 prefixlen;
	__u32 slot;
	__u8 dir;          /* enum nkc_pol_dir */
	__u8 proto;        /* IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP or NKC_POL_PROTO_NONE */
	__be16 port;
};
_Static_assert(sizeof(struct nkc_pol_port_key) == 12, "nkc_pol_port_key is 12 bytes");
#define NKC_POL_PORT_FIXED_BITS 48
#define NKC_POL_PROTO_NONE 0

/*
 * nkc_pol_tiers (HASH): per slot and direction, how the rule bits are read when a
 * ClusterNetworkPolicy applies. No entry: NetworkPolicy alone (any matching rule allows).
 * With one, of the rules matching a flow (`matched`):
 *  - the lowest Admin bit decides: Deny denies, Accept allows, Pass skips the rest of the
 *    Admin tier;
 *  - then, when NKC_POL_TIER_F_NETWORK_POLICY is set, a NetworkPolicy rule (a matching bit
 *    in neither tier) allows, and none denies (the direction's default deny);
 *  - then the lowest Baseline bit decides: Deny denies, anything else allows;
 *  - else the flow is allowed (Kubernetes' default).
 * The pod's NKC_POL_F_ISOLATED_* flag for the direction must be set whenever any tier or
 * NetworkPolicy applies to it: an unisolated direction is never judged.
 */
struct nkc_pol_tier_key {
	__u32 slot;
	__u8 dir;    /* enum nkc_pol_dir */
	__u8 pad[3]; /* always zero */
};
_Static_assert(sizeof(struct nkc_pol_tier_key) == 8, "nkc_pol_tier_key is 8 bytes");

struct nkc_pol_tier {
	__u64 admin;    /* bits of Admin-tier rules, lowest bit = highest precedence */
	__u64 baseline; /* bits of Baseline-tier rules, lowest bit first */
	__u64 deny;     /* of those, the Deny rules */
	__u64 pass;     /* of those, the Pass rules (Admin only) */
	__u32 flags;    /* NKC_POL_TIER_F_* */
	__u32 pad;      /* always zero */
};
_Static_assert(sizeof(struct nkc_pol_tier) == 40, "nkc_pol_tier is 40 bytes");

/* A NetworkPolicy isolates the pod this way: its rules (bits in neither tier) decide
 * between the tiers, and nothing matching them denies. */
#define NKC_POL_TIER_F_NETWORK_POLICY (1U << 0)
#define NKC_POL_TIERS_MAX (2 * NKC_POL_PODS_MAX)

/* Which tier decided a denial (struct nkc_pol_event). */
enum nkc_pol_tier_id {
	NKC_POL_TIER_NONE = 0,           /* no rule's verdict: pending, incomplete, unreadable */
	NKC_POL_TIER_ADMIN = 1,          /* a ClusterNetworkPolicy's Admin rule */
	NKC_POL_TIER_NETWORK_POLICY = 2, /* the pod's NetworkPolicies (their default deny) */
	NKC_POL_TIER_BASELINE = 3,       /* a ClusterNetworkPolicy's Baseline rule */
};
/* struct nkc_pol_event's rule when no single rule decided. */
#define NKC_POL_RULE_NONE 0xff

/* A flow of a pod's table (key: struct nkc_flow_key) started in this direction; the
 * entry lets its later packets, both ways, through. */
#define NKC_POL_CT_EGRESS (1U << 0)
#define NKC_POL_CT_INGRESS (1U << 1)
/* Started towards a Service ClusterIP: let through unjudged, the stack's DNAT sends it
 * on to a backend, where the pod's egress is judged. Only the replies need the entry. */
#define NKC_POL_CT_DEFERRED (1U << 2)
/* Started by the pod's own node (kubelet's probes): always allowed. */
#define NKC_POL_CT_NODE (1U << 3)
/* TCP: a FIN or RST was seen; the entry lives NKC_POL_CT_CLOSING_NS past its last packet. */
#define NKC_POL_CT_CLOSING (1U << 4)
/* Not a flow: the first fragment of a datagram (key: see NKC_POL_CT_KEY_FRAGMENT), whose
 * ports the later fragments take to be judged as the datagram's flow. */
#define NKC_POL_CT_FRAGMENT (1U << 5)

/* A fragment entry's key: struct nkc_flow_key with addr_a the source, addr_b the
 * destination, port_a and port_b the fragment identification's high and low 16 bits
 * (IPv4's is 16 bits: port_a 0), family and proto as for a flow, and pad this value,
 * which no flow's key has. */
#define NKC_POL_CT_KEY_FRAGMENT 1

/*
 * Value of a pod's flow table (nkc_pol_flowtabs' inner maps): a remembered verdict, a
 * cache the rules always outrank. It counts only when all of these hold; otherwise the
 * flow is judged again, as new (lib/policy.h):
 *  - gen is the table holder's generation (a pooled table's previous holder's entries
 *    are never trusted);
 *  - stamp is the pod's current nkc_pol_pod.stamp (its rules have not changed since);
 *  - the flow is alive: its last packet within the lifetime of its kind (TCP, closing
 *    TCP, other protocols), as conntrack keeps flows;
 *  - the packet is no TCP SYN without ACK (a SYN opens a new connection, whatever the
 *    5-tuple carried before).
 */
struct nkc_pol_ct {
	__u64 gen;
	__u64 stamp;       /* the pod's nkc_pol_pod.stamp when the verdict was made */
	__u64 seen_ns;     /* bpf_ktime_get_ns() of a recent packet (refreshed at most every second) */
	__u32 flags;       /* NKC_POL_CT_* */
	__be16 sport;      /* a fragment entry's: the datagram's ports (0 for a flow) */
	__be16 dport;
	/* While flows are recorded (nkc_flow_switch): the flow's packets and IP bytes, by
	 * the pod's direction (index NKC_POL_EGRESS, NKC_POL_INGRESS), each counted once,
	 * where it crosses the pod's device (lib/policy.h: NKC_POL_JUDGE_COUNTS). A GSO
	 * packet counts its segments, and its bytes as one IP packet of its length. */
	__u64 packets[2];
	__u64 bytes[2];
};
_Static_assert(sizeof(struct nkc_pol_ct) == 64, "nkc_pol_ct is 64 bytes");

/* How long a remembered flow lives past its last packet (conntrack's lifetimes: TCP
 * established, TCP after FIN or RST, UDP in both directions, other protocols, and
 * ICMP), and a fragment entry past its first fragment (IPv4's reassembly timeout). */
#define NKC_POL_CT_TCP_NS (432000ULL * 1000000000ULL)
#define NKC_POL_CT_CLOSING_NS (10ULL * 1000000000ULL)
#define NKC_POL_CT_OTHER_NS (120ULL * 1000000000ULL)
#define NKC_POL_CT_ICMP_NS (30ULL * 1000000000ULL)
#define NKC_POL_CT_FRAGMENT_NS (30ULL * 1000000000ULL)
/* seen_ns is rewritten only when it is older than this: one write a second per flow. */
#define NKC_POL_CT_TOUCH_NS (1000000000ULL)

/* nkc_pol_stats value (per CPU), keyed by __u32 host ifindex: new flows judged. */
struct nkc_pol_stats {
	__u64 allowed[2];  /* by enum nkc_pol_dir */
	__u64 denied[2];
};
_Static_assert(sizeof(struct nkc_pol_stats) == 32, "nkc_pol_stats is 32 bytes");

/* nkc_pol_verdicts (per-CPU array of __u64): the node's new flows the rules judged, at
 * index NKC_POL_VERDICT_INDEX(direction, deciding tier (enum nkc_pol_tier_id; NONE: no
 * tier decided, or the pod is isolated the other way only), allowed). */
#define NKC_POL_VERDICT_INDEX(dir, tier, allowed) ((((__u32)(dir) & 1) << 3) | (((__u32)(tier) & 3) << 1) | ((allowed) ? 1 : 0))
#define NKC_POL_VERDICTS 16

/*
 * A judged packet: a denied one, as nkc_pol_denials (a queue, newest kept) tells
 * `netkit-cni monitor`; and, while flow records are on (nkc_flow_switch), the first
 * packet of every flow a pod's policy judged, allowed or denied, as nkc_flows (a queue,
 * oldest kept, the rest counted lost) tells the agent.
 */
struct nkc_pol_event {
	__u64 time_ns;     /* bpf_ktime_get_ns() */
	__u32 ifindex;     /* the host ifindex of the pod whose policy denied it */
	__u32 slot;        /* its policy's slot then */
	__u8 dir;          /* enum nkc_pol_dir */
	__u8 family;
	__u8 proto;
	__u8 reason;       /* enum nkc_pol_reason */
	__be16 sport;
	__be16 dport;
	__u8 src[16];
	__u8 dst[16];
	__u8 tier;         /* enum nkc_pol_tier_id: the tier that decided */
	__u8 rule;         /* the rule bit (0..63) that decided, NKC_POL_RULE_NONE when none did
			    * (a default deny, pending, incomplete, unreadable) */
	__u8 flags;        /* NKC_POL_EV_F_* */
	__u8 pad[5];
};
_Static_assert(sizeof(struct nkc_pol_event) == 64, "nkc_pol_event is 64 bytes");
#define NKC_POL_EVENTS_MAX 4096
/* The pod's own node started the flow (kubelet's probes): allowed without rules. */
#define NKC_POL_EV_F_NODE (1U << 0)

/* nkc_flow_switch (ARRAY, one __u32 at key 0): NKC_FLOW_RECORD while the agent reads
 * nkc_flows; 0 (or no agent) costs a judged flow one lookup more, nothing else. */
#define NKC_FLOW_RECORD 1
/* Records nkc_flows holds until the agent takes them; what finds it full is counted in
 * nkc_flow_lost (a per-CPU __u64 at key 0) and never waits. */
#define NKC_FLOW_EVENTS_MAX 16384

enum nkc_pol_reason {
	NKC_POL_ALLOWED = 0,    /* a flow record's: let through (struct nkc_pol_event's tier says by what) */
	NKC_POL_DENIED = 1,     /* no rule allows it: the direction's default deny */
	NKC_POL_PENDING = 2,    /* the agent has not judged the pod yet */
	NKC_POL_OPAQUE = 3,     /* no transport header to judge (IPv4 options, an IPv6 chain not followed) */
	NKC_POL_INCOMPLETE = 4, /* the agent could not write the pod's policy in full */
	NKC_POL_FRAGMENT = 5,   /* a later fragment whose first fragment was not seen (or has aged out) */
	NKC_POL_REVOKED = 6,    /* a remembered flow that the pod's rules, changed since, no longer allow */
	NKC_POL_TIER_DENIED = 7, /* a ClusterNetworkPolicy's Deny rule (Admin or Baseline) denies it */
};

#endif
