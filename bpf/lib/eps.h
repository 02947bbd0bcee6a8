/*
 * Local endpoints (pods on this node) and the cluster's pod CIDRs. Both maps
 * are filled by userspace only; programs only look up.
 */
#ifndef NKC_EPS_H
#define NKC_EPS_H

#include "common.h"

NKC_MAP(nkc_endpoints, BPF_MAP_TYPE_HASH, struct nkc_endpoint_key, struct nkc_endpoint, NKC_MAX_ENDPOINTS, 0);

/* LPM tries must be created with BPF_F_NO_PREALLOC (kernel/bpf/lpm_trie.c). */
NKC_MAP(nkc_cluster, BPF_MAP_TYPE_LPM_TRIE, struct nkc_cidr_key, __u32, 64, BPF_F_NO_PREALLOC);

static __always_inline struct nkc_endpoint *nkc_endpoint_lookup(__u32 family, const __u8 *addr)
{
	struct nkc_endpoint_key key = { .family = family };

	__builtin_memcpy(key.addr, addr, 16);
	return bpf_map_lookup_elem(&nkc_endpoints, &key);
}

static __always_inline int nkc_in_cluster(__u32 family, const __u8 *addr)
{
	struct nkc_cidr_key key = {
		.prefixlen = 8 + (family == NKC_AF_INET ? 32 : 128),
		.family = family,
	};

	__builtin_memcpy(key.addr, addr, 16);
	return bpf_map_lookup_elem(&nkc_cluster, &key) != NULL;
}

#endif
