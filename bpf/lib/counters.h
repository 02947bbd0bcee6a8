/*
 * Per-endpoint packet counters: per-CPU hashes keyed by host ifindex (the
 * veth host side or netkit primary; the uplink's own ifindex for node ingress
 * packets that are not for a pod): what happened to packets (nkc_counters) and
 * why refused ones were refused (nkc_drops). Counting never changes a verdict:
 * a full map only loses the count.
 */
#ifndef NKC_COUNTERS_H
#define NKC_COUNTERS_H

#include "common.h"

NKC_MAP(nkc_counters, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_counters, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_drops, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_drops, NKC_MAX_ENDPOINTS, 0);

static __always_inline void nkc_count(__u32 ifindex, enum nkc_counter which)
{
	struct nkc_counters *c = bpf_map_lookup_elem(&nkc_counters, &ifindex);

	if (!c) {
		struct nkc_counters zero = {};
		/* NOEXIST: another CPU may have created the entry meanwhile. */
		bpf_map_update_elem(&nkc_counters, &ifindex, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&nkc_counters, &ifindex);
		if (!c)
			return;
	}
	if (which < NKC_CNT_MAX)
		c->v[which] += 1; /* per-CPU value: no other writer */
}

/* Counts a refused packet under its reason, and in nkc_counters' totals. */
static __always_inline void nkc_count_drop(__u32 ifindex, enum nkc_drop_reason why)
{
	nkc_count(ifindex, why == NKC_DROP_SPOOFED ? NKC_CNT_DROPPED_SPOOFED : NKC_CNT_DROPPED_OTHER);

	struct nkc_drops *d = bpf_map_lookup_elem(&nkc_drops, &ifindex);
	if (!d) {
		struct nkc_drops zero = {};
		bpf_map_update_elem(&nkc_drops, &ifindex, &zero, BPF_NOEXIST);
		d = bpf_map_lookup_elem(&nkc_drops, &ifindex);
		if (!d)
			return;
	}
	if (why < NKC_DROP_MAX)
		d->v[why] += 1;
}

/* Refuses the packet, saying why. */
static __always_inline int nkc_refuse(__u32 ifindex, enum nkc_drop_reason why)
{
	nkc_count_drop(ifindex, why);
	return NKC_DROP;
}

#endif
