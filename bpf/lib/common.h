/*
 * What every program needs: uapi includes, the verdicts, the map definition
 * macro and the parsed view of a packet (nkc_parse). Parsing only reads; it
 * never changes the packet.
 */
#ifndef NKC_COMMON_H
#define NKC_COMMON_H

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

#define NKC_MAP(name_, type_, key_t, value_t, max_, flags_)                    \
	struct nkc_map_def name_ SEC("maps") = {                               \
		.type = (type_),                                               \
		.key_size = sizeof(key_t),                                     \
		.value_size = sizeof(value_t),                                 \
		.max_entries = (max_),                                         \
		.map_flags = (flags_),                                         \
	}

/* linux/icmp.h pulls in linux/if.h and with it libc's sys/socket.h, which a
 * BPF target cannot include; the echo header is all we read. */
struct nkc_icmp_echo {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 id;
	__be16 sequence;
};
#define ICMP_ECHOREPLY 0
#define ICMP_ECHO      8

#define IP_MF     0x2000
#define IP_OFFSET 0x1fff
#define NEXTHDR_FRAGMENT 44

/* The parts of a packet our decisions read. Offsets are from the start of the frame. */
struct nkc_pkt {
	__u32 family;        /* NKC_AF_INET or NKC_AF_INET6 */
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;        /* or ICMP echo id */
	__be16 dport;        /* or ICMP echo id */
	__be32 flowinfo;     /* IPv6 traffic class + flow label, for the FIB */
	__u8 tos;            /* IPv4, for the FIB */
	__u8 proto;          /* L4 protocol (IPv6: the first next header) */
	__u8 ttl;            /* or hop limit */
	__u8 fragment;       /* IPv4 fragment or IPv6 fragment header: no ports */
	__u8 icmp_error;     /* ICMP(v6) other than echo: carries an inner header */
	__u8 opens;          /* may open a flow: TCP SYN without ACK, ICMP echo request,
	                        any packet of a protocol without a handshake (UDP, ...) */
};

enum nkc_parse_result {
	NKC_PARSE_IP,
	NKC_PARSE_NOT_IP,    /* ARP and every other ethertype */
	NKC_PARSE_BAD,       /* says IP but too short to be one */
};

#define L3_OFF ETH_HLEN

static __always_inline void nkc_ports(struct nkc_pkt *p, void *l4, void *end)
{
	if (p->fragment)
		return;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > end)
			return;
		p->sport = th->source;
		p->dport = th->dest;
		p->opens = th->syn && !th->ack;
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > end)
			return;
		p->sport = uh->source;
		p->dport = uh->dest;
		p->opens = 1;
	} else if (p->proto == IPPROTO_ICMP) {
		struct nkc_icmp_echo *ih = l4;
		if ((void *)(ih + 1) > end)
			return;
		if (ih->type == ICMP_ECHO || ih->type == ICMP_ECHOREPLY)
			p->sport = p->dport = ih->id;
		else
			p->icmp_error = 1;
		p->opens = ih->type == ICMP_ECHO;
	} else if (p->proto == IPPROTO_ICMPV6) {
		struct icmp6hdr *ih = l4;
		if ((void *)(ih + 1) > end)
			return;
		if (ih->icmp6_type == ICMPV6_ECHO_REQUEST || ih->icmp6_type == ICMPV6_ECHO_REPLY)
			p->sport = p->dport = ih->icmp6_identifier;
		else
			p->icmp_error = 1;
		p->opens = ih->icmp6_type == ICMPV6_ECHO_REQUEST;
	} else {
		p->opens = 1;
	}
}

static __always_inline enum nkc_parse_result nkc_parse(struct __sk_buff *skb, struct nkc_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	__builtin_memset(p, 0, sizeof(*p));
	if ((void *)(eth + 1) > end)
		return NKC_PARSE_NOT_IP;

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return NKC_PARSE_BAD;
		p->family = NKC_AF_INET;
		__builtin_memcpy(p->src, &ip->saddr, 4);
		__builtin_memcpy(p->dst, &ip->daddr, 4);
		p->tos = ip->tos;
		p->proto = ip->protocol;
		p->ttl = ip->ttl;
		p->fragment = (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)) != 0;
		nkc_ports(p, (void *)ip + ip->ihl * 4, end);
		return NKC_PARSE_IP;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return NKC_PARSE_BAD;
		p->family = NKC_AF_INET6;
		__builtin_memcpy(p->src, &ip6->saddr, 16);
		__builtin_memcpy(p->dst, &ip6->daddr, 16);
		p->flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
		p->proto = ip6->nexthdr;
		p->ttl = ip6->hop_limit;
		/* Extension headers other than a fragment header leave the ports at
		 * zero: such flows still get a consistent (coarser) key. */
		p->fragment = ip6->nexthdr == NEXTHDR_FRAGMENT;
		nkc_ports(p, ip6 + 1, end);
		return NKC_PARSE_IP;
	}
	return NKC_PARSE_NOT_IP;
}

/* Link-local and unspecified sources and multicast destinations (NDP, DAD,
 * MLD) are the pod talking to its link, not routing: the stack answers them. */
static __always_inline int nkc_ipv6_link_scope(const struct nkc_pkt *p)
{
	if (p->family != NKC_AF_INET6)
		return 0;
	if (p->dst[0] == 0xff)
		return 1;
	if (p->src[0] == 0xfe && (p->src[1] & 0xc0) == 0x80)
		return 1;
	__u64 hi, lo;
	__builtin_memcpy(&hi, p->src, 8);
	__builtin_memcpy(&lo, p->src + 8, 8);
	return hi == 0 && lo == 0;
}

#endif
