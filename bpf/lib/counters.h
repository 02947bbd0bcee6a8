/*
 * Per-endpoint packet counters: a per-CPU hash keyed by host ifindex (the
 * veth host side or netkit primary; the uplink's own ifindex for node ingress
 * packets that are not for a pod). Counting never changes a verdict: a full
 * map only loses the count.
 */
#ifndef NKC_COUNTERS_H
#define NKC_COUNTERS_H

#include "common.h"

NKC_MAP(nkc_counters, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_counters, NKC_MAX_ENDPOINTS, 0);

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

#endif
