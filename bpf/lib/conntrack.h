/*
 * Asking the kernel's own conntrack whether netfilter translates a flow, with the
 * conntrack kfuncs (net/netfilter/nf_conntrack_bpf.c). Only in the objects built with
 * NKC_CONNTRACK: kfunc calls need a BPF JIT, and a kernel without one refuses the
 * whole program at load time, so the loader then takes the objects without it.
 *
 * Kernel behaviour relied on:
 *  - bpf_skb_ct_lookup() looks the tuple up in the conntrack table of skb->dev's
 *    namespace (netns_id -1), in either direction, takes a reference and says in
 *    opts->dir which direction matched. TCP and UDP only (-EPROTO otherwise).
 *  - opts__sz 12 is accepted by every kernel that has the kfuncs (later kernels also
 *    take 16, with zone fields we leave at the default zone, kube-proxy's).
 *  - Conntrack keeps every tuple of every entry unique, in both directions.
 */
#ifndef NKC_CONNTRACK_H
#define NKC_CONNTRACK_H

#include "common.h"

struct nf_conn;

/* struct bpf_ct_opts as the kernel defines it (not in uapi). */
struct nkc_ct_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u8 reserved[2];
};
_Static_assert(sizeof(struct nkc_ct_opts) == 12, "bpf_ct_opts is NF_BPF_CT_OPTS_SZ bytes");

#define NKC_CT_CURRENT_NETNS (-1)
#define NKC_ENOENT 2

extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *skb, struct bpf_sock_tuple *tuple, __u32 tuple__sz,
					 struct nkc_ct_opts *opts, __u32 opts__sz) __ksym;
extern void bpf_ct_release(struct nf_conn *ct) __ksym;

/* The packet's tuple, or (reversed) the tuple of a packet going the other way. */
static __always_inline __u32 nkc_ct_tuple(struct bpf_sock_tuple *t, const struct nkc_pkt *p, int reversed)
{
	const __u8 *src = reversed ? p->dst : p->src;
	const __u8 *dst = reversed ? p->src : p->dst;

	__builtin_memset(t, 0, sizeof(*t));
	if (p->family == NKC_AF_INET) {
		__builtin_memcpy(&t->ipv4.saddr, src, 4);
		__builtin_memcpy(&t->ipv4.daddr, dst, 4);
		t->ipv4.sport = reversed ? p->dport : p->sport;
		t->ipv4.dport = reversed ? p->sport : p->dport;
		return sizeof(t->ipv4);
	}
	__builtin_memcpy(t->ipv6.saddr, src, 16);
	__builtin_memcpy(t->ipv6.daddr, dst, 16);
	t->ipv6.sport = reversed ? p->dport : p->sport;
	t->ipv6.dport = reversed ? p->sport : p->dport;
	return sizeof(t->ipv6);
}

/*
 * Does netfilter translate this TCP or UDP packet's flow (Service DNAT, hostPort,
 * masquerade)? Then it must go through the stack, where conntrack undoes the
 * translation. A flow conntrack does not know never crossed this node's stack (our
 * redirects skip it), or crossed it so long ago that the stack could not translate it
 * either. A known flow is untranslated exactly when the reversed tuple is the same
 * entry's other direction. Anything unexpected counts as translated.
 */
static __always_inline int nkc_ct_translated(struct __sk_buff *skb, const struct nkc_pkt *p)
{
	struct nkc_ct_opts opts = { .netns_id = NKC_CT_CURRENT_NETNS, .l4proto = p->proto };
	struct bpf_sock_tuple t;
	__u32 size = nkc_ct_tuple(&t, p, 0);
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, &t, size, &opts, sizeof(opts));

	if (!ct)
		return opts.error != -NKC_ENOENT;

	struct nkc_ct_opts back = { .netns_id = NKC_CT_CURRENT_NETNS, .l4proto = p->proto };
	nkc_ct_tuple(&t, p, 1);
	struct nf_conn *reverse = bpf_skb_ct_lookup(skb, &t, size, &back, sizeof(back));
	int translated = 1;

	if (reverse) {
		translated = reverse != ct || back.dir == opts.dir;
		bpf_ct_release(reverse);
	}
	bpf_ct_release(ct);
	return translated;
}

#endif
