/*
 * A translated socket's own state (Service translation), read by bpf_svc.c's programs
 * and by the socket iterators of bpf_svc_destroy.c: socket-local storage, which the
 * kernel frees with the socket. Nothing about one socket lives in a map any other
 * socket's traffic can fill, so no pod's churn takes another pod's way back.
 * Socket storage must be created with BPF_F_NO_PREALLOC and no max_entries; the loader
 * gives it the types the kernel asks for (src/bpf/loader/map-btf.ts).
 */
#ifndef NKC_SVC_SOCK_H
#define NKC_SVC_SOCK_H

#include "common.h"
#include "nkc_svc_abi.h"

NKC_MAP(nkc_svc_sock, BPF_MAP_TYPE_SK_STORAGE, int, struct nkc_svc_sock, 0, BPF_F_NO_PREALLOC);

/* Two 24-byte addresses (struct nkc_svc_key, struct nkc_svc_peer: zero padding), compared
 * a 4-byte word at a time: both are 4-aligned, and no kernel is asked to read them unaligned. */
static __always_inline int nkc_svc_same24(const void *x, const void *y)
{
	const __u32 *a = x, *b = y;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

#endif
