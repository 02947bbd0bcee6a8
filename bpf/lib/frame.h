/*
 * Which frames the programs understand, read through whatever the kernel already took
 * off them. A frame is judged by what the stack would make of it, not by its first
 * ethertype alone: the stack strips VLAN tags (any number with VLAN ID 0, the priority
 * tag; others for a VLAN device on top), trusts skb->protocol over the Ethernet header,
 * and pulls headers from paged data. A program that hands on what it could not read
 * lets the stack deliver what it never checked.
 *
 * Kernel behaviour relied on (net/core/dev.c __netif_receive_skb_core, net/core/skbuff.c
 * skb_vlan_untag, drivers/net/netkit.c, linux-source-6.12):
 *  - On receive (veth's host side, the uplink) the kernel takes the outer tag off before
 *    tcx runs: skb->vlan_present, and the data starts with the next ethertype, which is
 *    skb->protocol. Further tags stay in the data.
 *  - netkit runs the peer hook from the pod's transmit, before any receive: tags are all
 *    in the data (or, from a VLAN device with tag offload, in skb->vlan_present), and
 *    skb->protocol is whatever the sender set; a packet socket sets it freely. After a
 *    pass the stack reads skb->protocol, not the header.
 *
 * The pod's side (nkc_pod_frame) lets a frame on only when it is IPv4 or IPv6 (whose
 * source the caller checks) or, on a device that resolves neighbours, ARP speaking for
 * the pod's own address; untagged, with skb->protocol agreeing. Everything else is
 * refused and counted by reason: a pod has no business sending it.
 * The wire's side (nkc_wire_frame) reads through up to two tags (802.1Q, 802.1ad; QinQ)
 * so the caller can refuse a local pod's source at any depth; tagged frames belong to
 * the node's VLAN devices and always go to the stack. A third tag cannot be read: such a
 * frame is refused rather than handed to a stack that would strip priority tags until it
 * found a packet nobody checked.
 */
#ifndef NKC_FRAME_H
#define NKC_FRAME_H

#include "common.h"
#include "eps.h"

enum nkc_frame {
	NKC_FRAME_IP,        /* untagged IPv4/IPv6, parsed */
	NKC_FRAME_TAGGED_IP, /* wire: IPv4/IPv6 under one or two tags, addresses parsed */
	NKC_FRAME_ARP,       /* pod: ARP for the pod's own address */
	NKC_FRAME_OTHER,     /* wire: not IP (ARP, LLDP, ...): the node's business */
	NKC_FRAME_REFUSED,   /* *why says why */
};

/* linux/if_arp.h pulls in libc's sys/socket.h (see common.h): its values are fixed by RFC 826. */
#define NKC_ARPHRD_ETHER   1
#define NKC_ARPOP_REQUEST  1
#define NKC_ARPOP_REPLY    2

static __always_inline int nkc_is_vlan(__be16 ethertype)
{
	return ethertype == bpf_htons(ETH_P_8021Q) || ethertype == bpf_htons(ETH_P_8021AD);
}

static __always_inline int nkc_is_ip(__be16 ethertype)
{
	return ethertype == bpf_htons(ETH_P_IP) || ethertype == bpf_htons(ETH_P_IPV6);
}

/* ARP over Ethernet for IPv4, as the fixed layout that follows the Ethernet header. */
struct nkc_arp {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));
_Static_assert(sizeof(struct nkc_arp) == 28, "ARP for IPv4 over Ethernet is 28 bytes");

/* A request or reply over Ethernet for IPv4, from the pod's own address, on a device
 * that resolves neighbours. A probe (sender 0.0.0.0) speaks for no address the pod was
 * given; its addresses are assigned, never negotiated. */
static __always_inline enum nkc_frame nkc_pod_arp(struct __sk_buff *skb, __u32 ifindex, __u32 *why)
{
	struct nkc_arp arp;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &arp, sizeof(arp)) || arp.htype != bpf_htons(NKC_ARPHRD_ETHER) ||
	    arp.ptype != bpf_htons(ETH_P_IP) || arp.hlen != ETH_ALEN || arp.plen != 4 ||
	    (arp.op != bpf_htons(NKC_ARPOP_REQUEST) && arp.op != bpf_htons(NKC_ARPOP_REPLY))) {
		*why = NKC_DROP_UNPARSABLE;
		return NKC_FRAME_REFUSED;
	}
	__u8 spa[16] = {};
	__builtin_memcpy(spa, arp.spa, 4);
	struct nkc_endpoint *ep = nkc_endpoint_lookup(NKC_AF_INET, spa);
	if (!ep || ep->host_ifindex != ifindex) {
		*why = NKC_DROP_SPOOFED;
		return NKC_FRAME_REFUSED;
	}
	if (ep->flags & NKC_EP_F_NO_ARP) {
		*why = NKC_DROP_ETHERTYPE;
		return NKC_FRAME_REFUSED;
	}
	return NKC_FRAME_ARP;
}

/*
 * A frame the pod behind `ifindex` sends: NKC_FRAME_IP (p parsed; the caller checks the
 * source), NKC_FRAME_ARP, or NKC_FRAME_REFUSED.
 */
static __always_inline enum nkc_frame nkc_pod_frame(struct __sk_buff *skb, struct nkc_pkt *p, __u32 ifindex,
						    __u32 *why)
{
	__be16 ethertype = nkc_ethertype(skb);
	__be16 protocol = skb->protocol;

	if (skb->vlan_present || nkc_is_vlan(ethertype) || nkc_is_vlan(protocol)) {
		*why = NKC_DROP_TAGGED;
		return NKC_FRAME_REFUSED;
	}
	/* Also a frame too short for an Ethernet header (ethertype 0). */
	if (ethertype != protocol) {
		*why = NKC_DROP_UNPARSABLE;
		return NKC_FRAME_REFUSED;
	}
	if (ethertype == bpf_htons(ETH_P_ARP))
		return nkc_pod_arp(skb, ifindex, why);
	if (!nkc_is_ip(ethertype)) {
		*why = NKC_DROP_ETHERTYPE;
		return NKC_FRAME_REFUSED;
	}
	if (nkc_parse_ip(skb, p, ethertype, L3_OFF) != NKC_PARSE_IP) {
		*why = NKC_DROP_UNPARSABLE;
		return NKC_FRAME_REFUSED;
	}
	return NKC_FRAME_IP;
}

/*
 * A frame from the wire: NKC_FRAME_IP or NKC_FRAME_TAGGED_IP (p parsed; the caller checks
 * the source at any depth), NKC_FRAME_OTHER for the stack, or NKC_FRAME_REFUSED.
 */
static __always_inline enum nkc_frame nkc_wire_frame(struct __sk_buff *skb, struct nkc_pkt *p, __u32 *why)
{
	__be16 ethertype = nkc_ethertype(skb);
	__u32 tags = skb->vlan_present ? 1 : 0;
	__u32 off = ETH_HLEN;

	/* What the kernel will act on must be what we read. It sets skb->protocol from the
	 * header itself here (802.3 length frames aside, none of them IP or tagged). */
	if (ethertype != skb->protocol &&
	    (nkc_is_ip(ethertype) || nkc_is_vlan(ethertype) || nkc_is_ip(skb->protocol) ||
	     nkc_is_vlan(skb->protocol))) {
		*why = NKC_DROP_UNPARSABLE;
		return NKC_FRAME_REFUSED;
	}
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (!nkc_is_vlan(ethertype))
			break;
		if (tags == 2)
			break;
		/* The tag's control information, then the ethertype it encloses. */
		if (bpf_skb_load_bytes(skb, off + 2, &ethertype, sizeof(ethertype))) {
			*why = NKC_DROP_UNPARSABLE;
			return NKC_FRAME_REFUSED;
		}
		off += 4;
		tags++;
	}
	if (nkc_is_vlan(ethertype)) {
		*why = NKC_DROP_TAGGED;
		return NKC_FRAME_REFUSED;
	}
	switch (nkc_parse_ip(skb, p, ethertype, off)) {
	case NKC_PARSE_NOT_IP:
		return NKC_FRAME_OTHER;
	case NKC_PARSE_BAD:
		/* The stack would drop it too (ip_rcv, ipv6_rcv); counted here. */
		*why = NKC_DROP_UNPARSABLE;
		return NKC_FRAME_REFUSED;
	case NKC_PARSE_IP:
		break;
	}
	return tags ? NKC_FRAME_TAGGED_IP : NKC_FRAME_IP;
}

#endif
