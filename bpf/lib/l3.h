/*
 * What a router does to the L3 header when it forwards: lower the TTL / hop
 * limit. Redirects skip ip_forward(), so we do it ourselves; a packet whose
 * TTL would reach zero is left to the stack, which answers with ICMP time
 * exceeded.
 */
#ifndef NKC_L3_H
#define NKC_L3_H

#include <stddef.h>
#include "common.h"

static __always_inline int nkc_ttl_allows_forward(const struct nkc_pkt *p)
{
	return p->ttl > 1;
}

/* Returns 0 on success. Invalidates packet pointers (bpf_skb_store_bytes). The L3 header
 * at `l3_off`: L3_OFF behind Ethernet, 0 on a device without an L2 header (WireGuard's). */
static __always_inline int nkc_dec_ttl_at(struct __sk_buff *skb, __u32 family, const __u32 l3_off)
{
	if (family == NKC_AF_INET) {
		/* TTL shares a 16-bit checksum word with the protocol byte; replace the
		 * whole word so bpf_l3_csum_replace's incremental update (RFC 1624)
		 * sees the value exactly as it sits in the header. */
		const __u32 word_off = l3_off + offsetof(struct iphdr, ttl);
		__be16 old_word, new_word;

		if (bpf_skb_load_bytes(skb, word_off, &old_word, sizeof(old_word)))
			return -1;
		new_word = old_word;
		((__u8 *)&new_word)[0] -= 1;
		if (bpf_l3_csum_replace(skb, l3_off + offsetof(struct iphdr, check), old_word, new_word,
					sizeof(new_word)))
			return -1;
		return bpf_skb_store_bytes(skb, word_off, &new_word, sizeof(new_word), 0) ? -1 : 0;
	}
	/* IPv6 has no header checksum. */
	const __u32 off = l3_off + offsetof(struct ipv6hdr, hop_limit);
	__u8 hop_limit;

	if (bpf_skb_load_bytes(skb, off, &hop_limit, 1))
		return -1;
	hop_limit -= 1;
	return bpf_skb_store_bytes(skb, off, &hop_limit, 1, 0) ? -1 : 0;
}

static __always_inline int nkc_dec_ttl(struct __sk_buff *skb, __u32 family)
{
	return nkc_dec_ttl_at(skb, family, L3_OFF);
}

#endif
