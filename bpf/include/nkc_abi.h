/*
 * The layouts shared with userspace: map definitions, map keys and values. src/bpf/
 * declares every struct here again as a field table (fastpath/abi.ts, sock/abi.ts,
 * bandwidth/abi.ts, nkc_map_def in loader/elf.ts), which the build and every load hold
 * against the objects' BTF: a field moved here alone fails both, by name (README.md,
 * "Maps"). The _Static_asserts pin the sizes. Owns layouts only: no logic, no maps.
 */
#ifndef NKC_ABI_H
#define NKC_ABI_H

#include <linux/types.h>

/*
 * Map definitions live in the legacy "maps" ELF section as this fixed struct,
 * one symbol per map. The loader reads it at the symbol's offset; no BTF
 * parsing is needed. libbpf 1.x dropped its own struct bpf_map_def, so the
 * struct is ours and only our loader reads it.
 */
struct nkc_map_def {
	__u32 type;        /* enum bpf_map_type */
	__u32 key_size;
	__u32 value_size;
	__u32 max_entries;
	__u32 map_flags;
};
_Static_assert(sizeof(struct nkc_map_def) == 20, "nkc_map_def is 20 bytes");

#define NKC_AF_INET  2
#define NKC_AF_INET6 10

/* nkc_endpoints key: one entry per pod address. IPv4 uses addr[0..3], rest zero. */
struct nkc_endpoint_key {
	__u32 family;      /* NKC_AF_INET or NKC_AF_INET6 */
	__u8 addr[16];     /* network order */
};
_Static_assert(sizeof(struct nkc_endpoint_key) == 20, "nkc_endpoint_key is 20 bytes");

/* The pod's device pair is netkit (else veth): decides how a redirect is made. */
#define NKC_EP_F_NETKIT (1U << 0)
/* The pod's network asked for the same-node socket bypass ("sockBypass": true):
 * bpf_sock.c splices a TCP connection only when both of its ends carry this flag. */
#define NKC_EP_F_SOCK_BYPASS (1U << 1)
/* The pod's device resolves no neighbours (netkit in L3 mode, IFF_NOARP): no ARP it
 * sends is honest. Without the flag (veth, netkit L2) ARP is let through when it speaks
 * for the pod's own address. */
#define NKC_EP_F_NO_ARP (1U << 2)

struct nkc_endpoint {
	__u32 host_ifindex; /* veth host side, or netkit primary */
	__u32 flags;        /* NKC_EP_F_* */
};
_Static_assert(sizeof(struct nkc_endpoint) == 8, "nkc_endpoint is 8 bytes");

/*
 * nkc_cluster key (LPM trie). The trie matches the first prefixlen bits of
 * everything after prefixlen, so the family byte comes first and is part of
 * every prefix: an entry for 10.0.0.0/8 has prefixlen 8 + 8.
 */
struct nkc_cidr_key {
	__u32 prefixlen;   /* 8 (family byte) + prefix length */
	__u8 family;
	__u8 addr[16];
	__u8 pad[3];       /* always zero */
};
_Static_assert(sizeof(struct nkc_cidr_key) == 24, "nkc_cidr_key is 24 bytes");

/* Sizes userspace needs to create the maps the ELF cannot describe (the flow tables in
 * nkc_flow_tables' slots, which userspace creates and hands to endpoints). */
#define NKC_MAX_ENDPOINTS   16384   /* nkc_endpoints, nkc_counters, nkc_flow_tables entries */
#define NKC_DIRECT_TABLE_SIZE 1024  /* flows one endpoint's table remembers (LRU) */

/*
 * Key of an endpoint's direct-flow table: a 5-tuple normalised so both directions of a
 * flow give the same key: the (addr, port) pair that sorts lower goes in slot a. ICMP
 * echo uses the echo identifier as both ports.
 */
struct nkc_flow_key {
	__u8 addr_a[16];
	__u8 addr_b[16];
	__be16 port_a;
	__be16 port_b;
	__u8 family;
	__u8 proto;
	__u16 pad;         /* always zero */
};
_Static_assert(sizeof(struct nkc_flow_key) == 40, "nkc_flow_key is 40 bytes");

/* Value of an endpoint's direct-flow table: when the flow last opened in front of us
 * (TCP SYN, echo request), bpf_ktime_get_ns(), and the generation of the endpoint that
 * saw it (nkc_flow_owner): a table passes from endpoint to endpoint, and an entry of
 * another generation proves nothing. */
struct nkc_direct_flow {
	__u64 opened_ns;
	__u64 gen;
};
_Static_assert(sizeof(struct nkc_direct_flow) == 16, "nkc_direct_flow is 16 bytes");

/* nkc_flow_owner value, keyed by __u32 host ifindex: which slot of nkc_flow_tables holds
 * the endpoint's table, and the generation its entries carry. Written by userspace only. */
struct nkc_flow_owner {
	__u32 slot;
	__u32 pad;         /* always zero */
	__u64 gen;
};
_Static_assert(sizeof(struct nkc_flow_owner) == 16, "nkc_flow_owner is 16 bytes");

/* nkc_flow_pool's one value (key 0), userspace's bookkeeping of the pool (no program
 * reads it): slots [0, tables) of nkc_flow_tables hold a table, and the generation last
 * handed out (each ADD takes the next). */
struct nkc_flow_pool {
	__u32 tables;
	__u32 pad;         /* always zero */
	__u64 last_gen;
};
_Static_assert(sizeof(struct nkc_flow_pool) == 16, "nkc_flow_pool is 16 bytes");

/* nkc_direct_stats value (per CPU), keyed by __u32 host ifindex: what the endpoint's
 * table took in and what the programs took out; the LRU evicted the rest. */
struct nkc_direct_stats {
	__u64 remembered;
	__u64 forgotten;
};
_Static_assert(sizeof(struct nkc_direct_stats) == 16, "nkc_direct_stats is 16 bytes");

/* nkc_counters value (per CPU), keyed by __u32 host ifindex. Order is ABI. */
enum nkc_counter {
	NKC_CNT_REDIRECTED_LOCAL,
	NKC_CNT_REDIRECTED_FIB,
	NKC_CNT_REDIRECTED_NEIGH,
	NKC_CNT_REDIRECTED_PEER,
	NKC_CNT_PASSED_STACK,
	NKC_CNT_PASSED_STACK_UNPROVEN, /* not known to be direct: NAT, or a flow not seen opening */
	NKC_CNT_DROPPED_SPOOFED,
	NKC_CNT_DROPPED_OTHER,
	NKC_CNT_MAX,
};

struct nkc_counters {
	__u64 v[NKC_CNT_MAX];
};
_Static_assert(sizeof(struct nkc_counters) == 64, "nkc_counters is 64 bytes");

/*
 * nkc_drops value (per CPU), keyed by __u32 host ifindex (the uplink's own for frames from
 * the wire that no pod owns): why the programs refused packets. Every refusal also counts
 * in nkc_counters (DROPPED_SPOOFED for NKC_DROP_SPOOFED, DROPPED_OTHER for the rest).
 * Order is ABI; the value has room for NKC_DROP_SLOTS reasons, so adding one keeps the
 * layout.
 */
enum nkc_drop_reason {
	NKC_DROP_SPOOFED,    /* a source address that is not the sender's (a pod's own, from the wire) */
	NKC_DROP_TAGGED,     /* an 802.1Q or 802.1ad tag: any from a pod, a third from the wire */
	NKC_DROP_ETHERTYPE,  /* from a pod: neither IPv4, IPv6 nor ARP it may send */
	NKC_DROP_UNPARSABLE, /* headers cut short, a wrong IP version, an ethertype skb->protocol denies */
	NKC_DROP_LIMIT,      /* over the pod's rate limit */
	NKC_DROP_REWRITE,    /* a header rewrite failed half-way */
	NKC_DROP_POLICY,     /* a NetworkPolicy of the pod denies it (policy.h) */
	NKC_DROP_MAX,
};
#define NKC_DROP_SLOTS 8
_Static_assert(NKC_DROP_MAX <= NKC_DROP_SLOTS, "nkc_drops has a slot per reason");

struct nkc_drops {
	__u64 v[NKC_DROP_SLOTS];
};
_Static_assert(sizeof(struct nkc_drops) == 64, "nkc_drops is 64 bytes");

/*
 * Socket bypass (bpf_sock.c). Key of nkc_sock_hash and nkc_sock_admitted: one TCP
 * socket, seen from its own side. IPv4 (also an IPv4-mapped IPv6 socket) uses
 * local[0..3] and remote[0..3], the rest zero; ports in host order. The peer's key
 * is the same with local and remote swapped.
 */
struct nkc_sock_key {
	__u8 local[16];
	__u8 remote[16];
	__u16 local_port;
	__u16 remote_port;
	__u32 family;      /* NKC_AF_INET or NKC_AF_INET6 */
};
_Static_assert(sizeof(struct nkc_sock_key) == 40, "nkc_sock_key is 40 bytes");

#define NKC_SOCK_MAX 65536 /* sockets in nkc_sock_hash, nkc_sock_admitted, nkc_sock_cookies */

/* How a socket's messages travel (struct nkc_sock_admitted's state). It only ever moves
 * down the list (UNDECIDED -> REDIRECT -> STACK, or UNDECIDED -> STACK): a message sent
 * through the stack may still be queued when a redirected one would overtake it. */
enum nkc_sock_state {
	NKC_SOCK_UNDECIDED = 0, /* in the sockhash, nothing sent yet */
	NKC_SOCK_REDIRECT = 1,  /* every message so far went straight to the peer socket */
	NKC_SOCK_STACK = 2,     /* the packet path, for good */
};

/* nkc_sock_stats value (per CPU), keyed by the sending endpoint's __u32 host ifindex. Order is ABI. */
enum nkc_sock_counter {
	NKC_SOCK_CNT_ADDED,          /* sockets put in the sockhash */
	NKC_SOCK_CNT_REDIRECTED_MSGS,
	NKC_SOCK_CNT_REDIRECTED_BYTES,
	NKC_SOCK_CNT_PASSED_MSGS,    /* messages of a socket in the sockhash sent by the stack */
	NKC_SOCK_CNT_MAX,
};

struct nkc_sock_stats {
	__u64 v[NKC_SOCK_CNT_MAX];
};
_Static_assert(sizeof(struct nkc_sock_stats) == 32, "nkc_sock_stats is 32 bytes");

/* ---- Socket bypass: namespaces and per-pod bound (bpf_sock.c) ---- */

/*
 * A socket is admitted only from the network namespace its pod's ADD recorded: addresses
 * alone prove nothing, any namespace can give itself a pod's address. Each pod may hold
 * at most NKC_SOCK_PER_POD sockets in the sockhash, so that no pod can fill it for the
 * others: a sixteenth of NKC_SOCK_MAX, far above what a pod keeps open to its neighbours
 * (its sockets past the bound take the stack, and still work).
 */
#define NKC_SOCK_PER_POD (NKC_SOCK_MAX / 16)

/* nkc_sock_pods value, keyed by the pod's __u32 host ifindex. Userspace writes it at ADD
 * (netns_cookie, the rest zero) and deletes it at DEL; the programs count. No entry: none
 * of the pod's sockets is admitted. */
struct nkc_sock_pod {
	__u64 netns_cookie;  /* SO_NETNS_COOKIE of a socket made in the pod's netns */
	__u32 sockets;       /* its sockets admitted and not yet released */
	__u32 pad;           /* always zero */
	__u64 refused_bound; /* sockets not admitted: the pod held NKC_SOCK_PER_POD */
	__u64 refused_netns; /* sockets on the pod's address made in another namespace */
};
_Static_assert(sizeof(struct nkc_sock_pod) == 32, "nkc_sock_pod is 32 bytes");

/* nkc_sock_admitted value, keyed by struct nkc_sock_key: a socket the programs put in
 * nkc_sock_hash, whose count it is in, and how its messages travel. nkc_sock_cookies
 * maps its socket cookie back to the key (the release hook cannot read local addresses). */
struct nkc_sock_admitted {
	__u64 socket_cookie;
	__u64 netns_cookie;  /* its pod's, when admitted */
	__u32 host_ifindex;  /* the pod whose count holds it */
	__u32 state;         /* enum nkc_sock_state */
};
_Static_assert(sizeof(struct nkc_sock_admitted) == 24, "nkc_sock_admitted is 24 bytes");

/* ---- end of socket bypass: namespaces and per-pod bound ---- */

/*
 * nkc_bandwidth (HASH), keyed by __u32 host ifindex: a pod's rate limits (bandwidth.h).
 * Userspace writes an entry at ADD for a pod that has limits and removes it at DEL;
 * the programs move the clocks and count drops. No entry: no limit.
 */
#define NKC_BW_MODE_POLICE 1 /* egress: token bucket in the programs: drop what exceeds it */
#define NKC_BW_MODE_EDT    2 /* egress: departure times, released by fq on paced_ifindex */

/* How the ingress limit is enforced. */
#define NKC_BW_IN_POLICE 0 /* token bucket before each delivery: drop what exceeds it */
#define NKC_BW_IN_EDT    1 /* departure times, released by fq on the pod's host device */
#define NKC_BW_IN_QDISC  2 /* the host device's shaping qdisc (tbf) alone */

struct nkc_bw_bucket {
	__u64 rate;     /* bits per second; 0: this direction is not limited */
	__u64 burst;    /* bits, as configured */
	__u64 burst_ns; /* the burst in time at `rate`: how far the clock may run ahead */
	__u64 clock_ns; /* when everything admitted so far will have been sent at `rate` */
	__u64 dropped;  /* packets dropped */
};
_Static_assert(sizeof(struct nkc_bw_bucket) == 40, "nkc_bw_bucket is 40 bytes");

struct nkc_bandwidth {
	struct nkc_bw_bucket egress;  /* what the pod sends */
	struct nkc_bw_bucket ingress; /* what is delivered to the pod */
	__u16 mode;                   /* NKC_BW_MODE_*: egress */
	__u16 ingress_mode;           /* NKC_BW_IN_* */
	__u32 paced_ifindex;          /* EDT: the uplink whose fq releases the departures; 0 */
};
_Static_assert(sizeof(struct nkc_bandwidth) == 88, "nkc_bandwidth is 88 bytes");

#endif
