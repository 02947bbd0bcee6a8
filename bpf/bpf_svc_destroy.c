/*
 * Closing the sockets of a withdrawn backend (Service translation, bpf_svc.c): a socket
 * translated to a backend that stopped being one keeps talking to it, since nothing
 * translates a connected socket again; a connected UDP client (a DNS resolver) would
 * send to it forever. kube-proxy's answer is to flush conntrack; ours is to destroy the
 * socket, so the client sees an error (ECONNABORTED) and connects again, to a backend
 * that is one.
 *
 * nkc_svc_destroy_tcp, nkc_svc_destroy_udp - socket iterators (iter/tcp, iter/udp):
 *   userspace (the agent) puts the (Service, backend) pairs it withdrew in
 *   nkc_svc_withdrawn, then runs each iterator in each pod's network namespace (an
 *   iterator walks the sockets of the namespace it was created in). Each reads the
 *   socket's own storage (lib/svc_sock.h: what bpf_svc.c translated it from and to), and
 *   a socket that connected to a withdrawn pair is destroyed with bpf_sock_destroy
 *   (Linux 6.5+) and counted in nkc_svc_closed. A socket that only sent to it is left:
 *   its next send is given a backend that is one.
 *
 * Apart from bpf_svc.o: tracing programs and kfunc calls need BTF and a JIT, which a
 * kernel may lack while it runs the sock_addr programs fine.
 */
#include "common.h"
#include "nkc_svc_abi.h"
#include "svc_sock.h"

/* The iterators' contexts as the kernel defines them (struct bpf_iter__tcp and
 * bpf_iter__udp): the socket is the second argument. Only pointers are read. */
struct sock_common;
struct udp_sock;
struct bpf_iter_meta;

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	__u32 uid;
};

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
	__u32 uid;
	int bucket;
};

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

/* The (Service, backend) pairs withdrawn: written by userspace before a pass, emptied
 * after it. */
NKC_MAP(nkc_svc_withdrawn, BPF_MAP_TYPE_HASH, struct nkc_svc_pair, __u8, NKC_SVC_BACKENDS_MAX, BPF_F_NO_PREALLOC);
/* Sockets destroyed (slot 0), read and reset by userspace around a pass. */
NKC_MAP(nkc_svc_closed, BPF_MAP_TYPE_ARRAY, __u32, __u64, 1, 0);

static __always_inline void nkc_svc_close_if_withdrawn(struct sock_common *sk)
{
	struct nkc_svc_sock *st = bpf_sk_storage_get(&nkc_svc_sock, sk, NULL, 0);
	__u32 zero = 0, i;
	__u64 *closed;

	if (!st)
		return;
	for (i = 0; i < NKC_SVC_SOCK_SLOTS; i++) {
		struct nkc_svc_sock_entry *e = &st->e[i];

		if (!(e->flags & NKC_SVC_SOCK_F_CONNECTED) || !bpf_map_lookup_elem(&nkc_svc_withdrawn, &e->pair))
			continue;
		if (bpf_sock_destroy(sk) == 0) {
			closed = bpf_map_lookup_elem(&nkc_svc_closed, &zero);
			if (closed)
				__sync_fetch_and_add(closed, 1);
		}
		return;
	}
}

SEC("iter/tcp")
int nkc_svc_destroy_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *sk = ctx->sk_common;

	if (sk)
		nkc_svc_close_if_withdrawn(sk);
	return 0;
}

SEC("iter/udp")
int nkc_svc_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = (struct sock_common *)ctx->udp_sk;

	if (sk)
		nkc_svc_close_if_withdrawn(sk);
	return 0;
}

char _license[] SEC("license") = "GPL";
