/*
 * Closing the sockets of a withdrawn backend (Service translation, bpf_svc.c): a socket
 * translated to a backend that stopped being one keeps talking to it, since nothing
 * translates a connected socket again; a connected UDP client (a DNS resolver) would
 * send to it forever. kube-proxy's answer is to flush conntrack; ours is to destroy the
 * socket, so the client sees an error (ECONNABORTED) and connects again, to a backend
 * that is one.
 *
 * nkc_svc_destroy_tcp, nkc_svc_destroy_udp - socket iterators (iter/tcp, iter/udp):
 *   userspace (the agent) puts the cookies of the sockets to close in nkc_svc_doomed,
 *   then runs each iterator in each pod's network namespace (an iterator walks the
 *   sockets of the namespace it was created in). A socket whose cookie is there is
 *   destroyed with bpf_sock_destroy (Linux 6.5+) and its cookie taken out, so what is
 *   left in the map afterwards was not found.
 *
 * Apart from bpf_svc.o: tracing programs and kfunc calls need BTF and a JIT, which a
 * kernel may lack while it runs the sock_addr programs fine.
 */
#include "common.h"

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

/* Socket cookie -> 0: the sockets to close (written by userspace, taken out here). */
NKC_MAP(nkc_svc_doomed, BPF_MAP_TYPE_HASH, __u64, __u8, 65536, BPF_F_NO_PREALLOC);

static __always_inline void nkc_svc_close_if_doomed(struct sock_common *sk)
{
	__u64 cookie = bpf_get_socket_cookie(sk);

	if (!bpf_map_lookup_elem(&nkc_svc_doomed, &cookie))
		return;
	if (bpf_sock_destroy(sk) == 0)
		bpf_map_delete_elem(&nkc_svc_doomed, &cookie);
}

SEC("iter/tcp")
int nkc_svc_destroy_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *sk = ctx->sk_common;

	if (sk)
		nkc_svc_close_if_doomed(sk);
	return 0;
}

SEC("iter/udp")
int nkc_svc_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = (struct sock_common *)ctx->udp_sk;

	if (sk)
		nkc_svc_close_if_doomed(sk);
	return 0;
}

char _license[] SEC("license") = "GPL";
