/*
 * Forwarding through the kernel FIB (bpf_fib_lookup) for destinations in the
 * cluster's pod CIDRs that are not on this node.
 *
 * Kernel behaviour relied on (net/core/filter.c, bpf_ipv{4,6}_fib_lookup):
 *  - tot_len must stay 0. A non-zero tot_len makes bpf_skb_fib_lookup pass
 *    check_mtu to the lookup, which compares tot_len with the route MTU: a
 *    GSO packet (up to 64 KiB before segmentation) then comes back
 *    BPF_FIB_LKUP_RET_FRAG_NEEDED, silently sending all bulk traffic to the
 *    slow path. With 0 the skb is checked with is_skb_forwardable() against
 *    the egress device instead, which knows about GSO.
 *  - flags 0 is an ingress-style lookup from params->ifindex: forwarding must
 *    be enabled on that device, else BPF_FIB_LKUP_RET_FWD_DISABLED.
 *  - On SUCCESS, ifindex/smac/dmac hold the egress device and L2 addresses;
 *    on NO_NEIGH ifindex and ipv{4,6}_dst already hold the egress device and
 *    the next hop (the gateway when the route has one), and family says which
 *    (an IPv4 route may have an IPv6 gateway).
 *  - NOT_FWDED means a local destination (or no route): the stack's business.
 */
#ifndef NKC_FIB_H
#define NKC_FIB_H

#include "common.h"

static __always_inline long nkc_fib_lookup(struct __sk_buff *skb, const struct nkc_pkt *p,
					   struct bpf_fib_lookup *fib)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = p->family;
	fib->l4_protocol = p->proto;
	fib->sport = p->sport;
	fib->dport = p->dport;
	fib->tot_len = 0; /* see above: never set it */
	fib->ifindex = skb->ifindex;
	if (p->family == NKC_AF_INET) {
		fib->tos = p->tos;
		__builtin_memcpy(&fib->ipv4_src, p->src, 4);
		__builtin_memcpy(&fib->ipv4_dst, p->dst, 4);
	} else {
		fib->flowinfo = p->flowinfo;
		__builtin_memcpy(fib->ipv6_src, p->src, 16);
		__builtin_memcpy(fib->ipv6_dst, p->dst, 16);
	}
	return bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
}

/* After SUCCESS: the L2 header the next hop expects, then out of fib->ifindex. */
static __always_inline long nkc_fib_redirect(struct __sk_buff *skb, const struct bpf_fib_lookup *fib)
{
	if (bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_dest), fib->dmac, ETH_ALEN, 0) ||
	    bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_source), fib->smac, ETH_ALEN, 0))
		return NKC_DROP;
	return bpf_redirect(fib->ifindex, 0);
}

/* After NO_NEIGH: let the neighbour subsystem resolve the FIB's next hop and
 * fill in the L2 header (queueing the packet while it resolves). */
static __always_inline long nkc_fib_redirect_neigh(const struct bpf_fib_lookup *fib)
{
	struct bpf_redir_neigh nh = { .nh_family = fib->family };

	if (fib->family == NKC_AF_INET)
		nh.ipv4_nh = fib->ipv4_dst;
	else
		__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
	return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
}

#endif
