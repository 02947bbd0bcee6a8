/*
 * What every program needs: uapi includes, the verdicts, the map definition
 * macro and the parsed view of an IP packet (nkc_parse_ip). Parsing only reads;
 * it never changes the packet. Every header is read with bpf_skb_load_bytes,
 * which reaches paged data too: a frame whose headers lie beyond the linear part
 * is read like any other, never mistaken for a short one. Whatever cannot be read
 * with certainty is marked NKC_L4_OPAQUE, and an opaque packet is never
 * redirected. Which frames are read at all, and through which tags: frame.h.
 */
#ifndef NKC_COMMON_H
#define NKC_COMMON_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/icmpv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "nkc_abi.h"

/*
 * Verdicts. The same programs run on tcx (veth) and on netkit hooks; the two
 * enums coincide numerically (uapi linux/bpf.h enum tcx_action_base and
 * linux/if_link.h enum netkit_action), which these asserts hold us to.
 * NEXT hands the packet on: to the next program of the hook, and after the
 * last one to the stack (tcx) or on to the other end of the pair (netkit,
 * whose xmit switch treats NETKIT_NEXT like NETKIT_PASS).
 */
#define NKC_NEXT     TCX_NEXT
#define NKC_DROP     TCX_DROP
#define NKC_REDIRECT TCX_REDIRECT
_Static_assert(TCX_NEXT == NETKIT_NEXT, "tcx and netkit NEXT differ");
_Static_assert(TCX_PASS == NETKIT_PASS, "tcx and netkit PASS differ");
_Static_assert(TCX_DROP == NETKIT_DROP, "tcx and netkit DROP differ");
_Static_assert(TCX_REDIRECT == NETKIT_REDIRECT, "tcx and netkit REDIRECT differ");

/* The build's epoch (scripts/build-bpf.sh), kept in a section no loader reads: builds
 * of different epochs are different objects even when their code is the same. */
#ifdef NKC_BUILD_EPOCH
static const unsigned long long nkc_build_epoch __attribute__((section(".nkc.build"), used)) = NKC_BUILD_EPOCH;
#endif

/* Puts a type in the object's BTF, which clang -g writes for the types of globals (not
 * of locals): a pointer to it, in a section no loader reads. Every map's key and value
 * get one, so user space can hold its declaration of each struct it reads or writes
 * against the compiler's (src/bpf/loader/struct-btf.ts), at build and at load. */
#define NKC_BTF_TYPE(name_, type_) type_ *nkc_btf_##name_ __attribute__((section(".nkc.types"), used))

#define NKC_MAP(name_, type_, key_t, value_t, max_, flags_)                    \
	NKC_BTF_TYPE(name_##_key, key_t);                                      \
	NKC_BTF_TYPE(name_##_value, value_t);                                  \
	struct nkc_map_def name_ SEC("maps") = {                               \
		.type = (type_),                                               \
		.key_size = sizeof(key_t),                                     \
		.value_size = sizeof(value_t),                                 \
		.max_entries = (max_),                                         \
		.map_flags = (flags_),                                         \
	}

/* A FIFO of `max_` values (BPF_MAP_TYPE_QUEUE): no key. Userspace pops with
 * BPF_MAP_LOOKUP_AND_DELETE_ELEM, no mmap needed. */
#define NKC_QUEUE(name_, value_t, max_)                                        \
	NKC_BTF_TYPE(name_##_value, value_t);                                  \
	struct nkc_map_def name_ SEC("maps") = {                               \
		.type = BPF_MAP_TYPE_QUEUE,                                    \
		.value_size = sizeof(value_t),                                 \
		.max_entries = (max_),                                         \
	}

/* linux/icmp.h pulls in linux/if.h and with it libc's sys/socket.h, which a
 * BPF target cannot include; the first bytes of an ICMP header are all we read. */
#define ICMP_ECHOREPLY 0
#define ICMP_ECHO      8

#define IP_MF     0x2000
#define IP_OFFSET 0x1fff

/* IPv6 next-header values of the extension headers we walk (RFC 8200, RFC 4302). */
#define NKC_NEXTHDR_HOP      0
#define NKC_NEXTHDR_ROUTING  43
#define NKC_NEXTHDR_FRAGMENT 44
#define NKC_NEXTHDR_AH       51
#define NKC_NEXTHDR_DEST     60
/* Extension headers followed before giving up (the verifier needs a bound; real
 * packets carry one or two). A longer chain is opaque, so it goes to the stack. */
#define NKC_IPV6_MAX_EXT 6

/* What the transport header says, as far as our decisions care. */
enum nkc_l4 {
	NKC_L4_OPAQUE,       /* no transport header we may trust: a fragment (p->frag), IPv4
	                        options, an IPv6 chain we do not follow, a truncated header */
	NKC_L4_TCP,
	NKC_L4_UDP,
	NKC_L4_ECHO_REQUEST, /* ICMP / ICMPv6 echo */
	NKC_L4_ECHO_REPLY,
	NKC_L4_ICMP_OTHER,   /* errors and the rest: may quote a header conntrack translates */
	NKC_L4_SCTP,         /* ports read for policy; never redirected */
	NKC_L4_OTHER,        /* a protocol we never redirect (GRE, ESP, ...) */
};

#define NKC_TCP_SYN 0x02
#define NKC_TCP_ACK 0x10

/* The parts of a packet our decisions read. */
struct nkc_pkt {
	__u32 family;        /* NKC_AF_INET or NKC_AF_INET6 */
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;        /* or ICMP echo id */
	__be16 dport;        /* or ICMP echo id */
	__be32 flowinfo;     /* IPv6 traffic class + flow label, for the FIB */
	__u8 tos;            /* IPv4, for the FIB */
	__u8 proto;          /* L4 protocol: after the IPv6 extension headers */
	__u8 ttl;            /* or hop limit */
	__u8 l4;             /* enum nkc_l4 */
	__u8 tcp_flags;      /* NKC_TCP_* when l4 is NKC_L4_TCP */
	__u8 icmp_type;      /* when l4 is NKC_L4_ICMP_OTHER */
	__u8 frag;           /* enum nkc_frag: a fragment's l4 is NKC_L4_OPAQUE */
	__u8 frag_l4;        /* NKC_FRAG_FIRST: what l4 would be, its ports read */
	__u16 l4_off;        /* where the transport header starts, when it was read */
	__u32 frag_id;       /* a fragment's identification (IPv4: 16 bits) */
};

/*
 * Fragments. Only the first carries the transport header, so no fragment is ever
 * redirected (l4 stays NKC_L4_OPAQUE) and conntrack reassembles them in the stack.
 * NetworkPolicy judges them as their datagram (policy.h): the first fragment's ports
 * (read here, kept in sport and dport), remembered by identification for the others.
 */
enum nkc_frag {
	NKC_FRAG_NONE,
	NKC_FRAG_FIRST,      /* offset 0, more to come: sport, dport and frag_l4 read */
	NKC_FRAG_LATER,      /* offset > 0: no transport header */
};

enum nkc_parse_result {
	NKC_PARSE_IP,
	NKC_PARSE_NOT_IP,    /* an ethertype other than IPv4 and IPv6 */
	NKC_PARSE_BAD,       /* says IP but too short, or the wrong version, to be one */
};

#define L3_OFF ETH_HLEN

static __always_inline int nkc_is_icmp(const struct nkc_pkt *p)
{
	return p->family == NKC_AF_INET ? p->proto == IPPROTO_ICMP : p->proto == IPPROTO_ICMPV6;
}

/* Reads the transport header at `off`. Bytes are read with bpf_skb_load_bytes: the
 * offset depends on the packet, and the header may sit in paged data. */
static __always_inline void nkc_transport(struct __sk_buff *skb, struct nkc_pkt *p, __u32 off)
{
	if (p->proto == IPPROTO_TCP) {
		__u8 h[14]; /* ports, sequence, ack, data offset, flags */
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)))
			return;
		__builtin_memcpy(&p->sport, h, 2);
		__builtin_memcpy(&p->dport, h + 2, 2);
		p->tcp_flags = h[13];
		p->l4 = NKC_L4_TCP;
		p->l4_off = off;
	} else if (p->proto == IPPROTO_UDP || p->proto == IPPROTO_SCTP) {
		__be16 ports[2]; /* both start with the source and destination ports */
		if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)))
			return;
		p->sport = ports[0];
		p->dport = ports[1];
		p->l4 = p->proto == IPPROTO_UDP ? NKC_L4_UDP : NKC_L4_SCTP;
		p->l4_off = off;
	} else if (nkc_is_icmp(p)) {
		__u8 h[6]; /* type, code, checksum, echo identifier */
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)))
			return;
		__u8 request = p->family == NKC_AF_INET ? ICMP_ECHO : ICMPV6_ECHO_REQUEST;
		__u8 reply = p->family == NKC_AF_INET ? ICMP_ECHOREPLY : ICMPV6_ECHO_REPLY;
		if (h[0] == request || h[0] == reply) {
			__builtin_memcpy(&p->sport, h + 4, 2);
			p->dport = p->sport;
			p->l4 = h[0] == request ? NKC_L4_ECHO_REQUEST : NKC_L4_ECHO_REPLY;
		} else {
			p->l4 = NKC_L4_ICMP_OTHER;
			p->icmp_type = h[0];
		}
		p->l4_off = off;
	} else {
		p->l4 = NKC_L4_OTHER;
	}
}

/*
 * Walks the IPv6 extension headers to the transport header. Returns its offset, or 0
 * when there is none we may use: a later fragment (p->frag says so: only the first has
 * ports), a second fragment header, a routing header that still has segments to visit
 * (the destination address is not the final one), a chain longer than NKC_IPV6_MAX_EXT,
 * or a header cut short. A first fragment's walk goes on past its fragment header (the
 * caller reads its ports and marks it); an atomic fragment (offset 0, no more to come,
 * RFC 6946) is a whole packet, as the kernel takes it.
 */
static __always_inline __u32 nkc_ipv6_skip_ext(struct __sk_buff *skb, struct nkc_pkt *p, __u32 l3_off)
{
	__u32 off = l3_off + sizeof(struct ipv6hdr);
	__u8 next = p->proto;

#pragma unroll
	for (int i = 0; i < NKC_IPV6_MAX_EXT; i++) {
		__u8 h[8]; /* next header, length, and for routing: type, segments left; a fragment header whole */
		switch (next) {
		case NKC_NEXTHDR_HOP:
		case NKC_NEXTHDR_DEST:
			if (bpf_skb_load_bytes(skb, off, h, 2))
				return 0;
			off += ((__u32)h[1] + 1) * 8;
			break;
		case NKC_NEXTHDR_ROUTING:
			if (bpf_skb_load_bytes(skb, off, h, 4) || h[3] != 0)
				return 0;
			off += ((__u32)h[1] + 1) * 8;
			break;
		case NKC_NEXTHDR_AH:
			if (bpf_skb_load_bytes(skb, off, h, 2))
				return 0;
			off += ((__u32)h[1] + 2) * 4;
			break;
		case NKC_NEXTHDR_FRAGMENT: {
			if (p->frag != NKC_FRAG_NONE || bpf_skb_load_bytes(skb, off, h, 8))
				return 0;
			__u16 offlg = ((__u16)h[2] << 8) | h[3];
			__u32 id = ((__u32)h[4] << 24) | ((__u32)h[5] << 16) | ((__u32)h[6] << 8) | h[7];
			if (offlg & 0xfff8) {
				p->frag = NKC_FRAG_LATER;
				p->frag_id = id;
				p->proto = h[0];
				return 0;
			}
			if (offlg & 1) {
				p->frag = NKC_FRAG_FIRST;
				p->frag_id = id;
			}
			off += 8;
			break;
		}
		default:
			p->proto = next;
			return off;
		}
		next = h[0];
	}
	return 0;
}

/* A first fragment whose transport header was read: its l4 goes to frag_l4, its ports
 * stay, and l4 says opaque, as it does for every fragment. */
static __always_inline void nkc_first_fragment(struct nkc_pkt *p)
{
	p->frag_l4 = p->l4;
	p->l4 = NKC_L4_OPAQUE;
}

/*
 * Reads the IP packet at `l3_off` whose ethertype (network order) the frame gave. The
 * transport header is read only for an untagged packet, whose L3 header starts right
 * after the Ethernet header, or at 0 on a device without one (WireGuard's): only those
 * are ever redirected (frame.h).
 */
static __always_inline enum nkc_parse_result nkc_parse_ip(struct __sk_buff *skb, struct nkc_pkt *p,
							  __be16 ethertype, __u32 l3_off)
{
	__builtin_memset(p, 0, sizeof(*p));
	if (ethertype == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, l3_off, &ip, sizeof(ip)) || ip.version != 4 || ip.ihl < 5)
			return NKC_PARSE_BAD;
		p->family = NKC_AF_INET;
		__builtin_memcpy(p->src, &ip.saddr, 4);
		__builtin_memcpy(p->dst, &ip.daddr, 4);
		p->tos = ip.tos;
		p->proto = ip.protocol;
		p->ttl = ip.ttl;
		/* Options may reroute the packet (source routing) or ask every router
		 * for work (record route): the stack's to handle. So are fragments, whose
		 * first one's ports are read all the same (for NetworkPolicy). */
		if ((l3_off == L3_OFF || l3_off == 0) && ip.ihl == 5) {
			__u16 frag = bpf_ntohs(ip.frag_off);
			if (frag & IP_OFFSET) {
				p->frag = NKC_FRAG_LATER;
				p->frag_id = bpf_ntohs(ip.id);
				return NKC_PARSE_IP;
			}
			nkc_transport(skb, p, l3_off + sizeof(struct iphdr));
			if (frag & IP_MF) {
				p->frag = NKC_FRAG_FIRST;
				p->frag_id = bpf_ntohs(ip.id);
				nkc_first_fragment(p);
			}
		}
		return NKC_PARSE_IP;
	}
	if (ethertype == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, l3_off, &ip6, sizeof(ip6)) || ip6.version != 6)
			return NKC_PARSE_BAD;
		p->family = NKC_AF_INET6;
		__builtin_memcpy(p->src, &ip6.saddr, 16);
		__builtin_memcpy(p->dst, &ip6.daddr, 16);
		p->flowinfo = *(__be32 *)&ip6 & bpf_htonl(0x0fffffff);
		p->proto = ip6.nexthdr;
		p->ttl = ip6.hop_limit;
		if (l3_off == L3_OFF || l3_off == 0) {
			__u32 off = nkc_ipv6_skip_ext(skb, p, l3_off);
			if (off) {
				nkc_transport(skb, p, off);
				if (p->frag == NKC_FRAG_FIRST)
					nkc_first_fragment(p);
			}
		}
		return NKC_PARSE_IP;
	}
	return NKC_PARSE_NOT_IP;
}

/* The ethertype of an untagged frame, network order; 0 when the frame is too short. */
static __always_inline __be16 nkc_ethertype(struct __sk_buff *skb)
{
	__be16 ethertype;

	if (bpf_skb_load_bytes(skb, offsetof(struct ethhdr, h_proto), &ethertype, sizeof(ethertype)))
		return 0;
	return ethertype;
}

/*
 * A link-local (fe80::/10) or unspecified (::) IPv6 source: the pod talking to its own
 * link (NDP, DAD and MLD are sent from these), not routing. No router forwards such a
 * packet off the link (RFC 4291 2.5.2, 2.5.6), so the stack answers it, and the source
 * check has nothing to match it against (the endpoint map holds no link-local address).
 * The destination exempts nothing: a multicast packet with a global source reaches the
 * node's own sockets under that source, and wider scopes (ff05::, ff0e::) may be
 * forwarded by multicast routing, so it gets the source check like any other.
 */
static __always_inline int nkc_ipv6_link_only_src(const struct nkc_pkt *p)
{
	if (p->family != NKC_AF_INET6)
		return 0;
	if (p->src[0] == 0xfe && (p->src[1] & 0xc0) == 0x80)
		return 1;
	__u64 hi, lo;
	__builtin_memcpy(&hi, p->src, 8);
	__builtin_memcpy(&lo, p->src + 8, 8);
	return hi == 0 && lo == 0;
}

#endif
