/*
 * Service translation at the socket ("serviceTranslation": true): a pod's socket that
 * connects or sends to a ClusterIP:port is given one of the Service's ready backends
 * before any packet exists, so the flow is pod to pod from its first packet and the
 * fast path can prove it direct. Replies and getpeername show the ClusterIP again.
 *
 * cgroup sock_addr programs on a cgroup v2 (the node's root by default):
 *   nkc_svc_connect4/6      connect(): TCP, and UDP sockets that connect
 *   nkc_svc_sendmsg4/6      sendto()/sendmsg() of unconnected UDP sockets
 *   nkc_svc_recvmsg4/6      recvfrom()/recvmsg(): the source shown as the Service
 *   nkc_svc_getpeername4/6  getpeername(): the peer shown as the Service
 * The *6 programs also serve IPv4-mapped addresses (::ffff:a.b.c.d) on IPv6 sockets.
 *
 * Only pods' sockets: a socket is translated only when its network namespace is one an
 * ADD recorded for a network that asked for translation (nkc_svc_netns, by netns
 * cookie). Host processes, pods of other networks and everything not in the tables
 * (NodePorts, external IPs, other protocols) are left as they are, for kube-proxy.
 *
 * Fail safe: a table read mid-change (a slot without a backend, a backend of another
 * Service) leaves the address as it is, so the stack (kube-proxy's rules) decides; it
 * is counted. A Service without ready backends refuses with ECONNREFUSED, as
 * kube-proxy's REJECT does. Layouts and the write order: include/nkc_svc_abi.h.
 */
#include "common.h"
#include "nkc_svc_abi.h"

#define NKC_ECONNREFUSED 111
#define NSEC_PER_SEC 1000000000ULL

/* The Service tables, written by userspace only. Preallocated (about 1.4, 4.2 and 5.8 MB):
 * a map without preallocation takes its elements from per-CPU caches refilled afterwards
 * (irq work), and an agent writing a cluster's Services at start found them empty
 * (ENOMEM half-way through a Service, in the UML guest). */
NKC_MAP(nkc_svc_services, BPF_MAP_TYPE_HASH, struct nkc_svc_key, struct nkc_svc, NKC_SVC_MAX, 0);
NKC_MAP(nkc_svc_slots, BPF_MAP_TYPE_HASH, struct nkc_svc_slot_key, __u32, NKC_SVC_BACKENDS_MAX, 0);
NKC_MAP(nkc_svc_backends, BPF_MAP_TYPE_HASH, __u32, struct nkc_svc_backend, NKC_SVC_BACKENDS_MAX, 0);
/* One write per ADD or DEL, never a burst: not preallocated.
 * netns cookie -> how many of its attachments asked for translation (ADD and DEL keep it). */
NKC_MAP(nkc_svc_netns, BPF_MAP_TYPE_HASH, __u64, __u32, NKC_SVC_PODS_MAX, BPF_F_NO_PREALLOC);
/* A pod's host ifindex -> its netns cookie: userspace's record of who asked. */
NKC_MAP(nkc_svc_pods, BPF_MAP_TYPE_HASH, __u32, __u64, NKC_SVC_PODS_MAX, BPF_F_NO_PREALLOC);
/* Written by the programs as sockets connect: LRU (preallocated), so that the oldest
 * entry makes room, never a failed write. */
NKC_MAP(nkc_svc_rev, BPF_MAP_TYPE_LRU_HASH, struct nkc_svc_rev_key, struct nkc_svc_origin, NKC_SVC_REV_MAX, 0);
NKC_MAP(nkc_svc_affinity, BPF_MAP_TYPE_LRU_HASH, struct nkc_svc_affinity_key, struct nkc_svc_affinity,
	NKC_SVC_AFFINITY_MAX, 0);
NKC_MAP(nkc_svc_stats, BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct nkc_svc_stats, 1, 0);

static __always_inline void nkc_svc_count(enum nkc_svc_counter counter)
{
	__u32 zero = 0;
	struct nkc_svc_stats *s = bpf_map_lookup_elem(&nkc_svc_stats, &zero);

	if (s && counter < NKC_SVC_CNT_MAX)
		s->v[counter] += 1;
}

/* The socket belongs to a pod whose network asked for translation. */
static __always_inline int nkc_svc_pod_socket(struct bpf_sock_addr *ctx)
{
	__u64 cookie = bpf_get_netns_cookie(ctx);

	return bpf_map_lookup_elem(&nkc_svc_netns, &cookie) != NULL;
}

/* The address a socket names: an IPv4 one, or an IPv6 one that may be IPv4-mapped. */
struct nkc_svc_addr {
	__u32 family;
	__u8 addr[16];
	__u16 port;   /* network order */
	__u8 mapped;  /* IPv4 carried as ::ffff:a.b.c.d on an IPv6 socket */
};

static __always_inline void nkc_svc_read4(struct bpf_sock_addr *ctx, struct nkc_svc_addr *a)
{
	__u32 ip = ctx->user_ip4;

	a->family = NKC_AF_INET;
	__builtin_memcpy(a->addr, &ip, 4);
	a->port = (__u16)ctx->user_port;
}

static __always_inline void nkc_svc_read6(struct bpf_sock_addr *ctx, struct nkc_svc_addr *a)
{
	__u32 w0 = ctx->user_ip6[0], w1 = ctx->user_ip6[1], w2 = ctx->user_ip6[2], w3 = ctx->user_ip6[3];

	a->port = (__u16)ctx->user_port;
	if (w0 == 0 && w1 == 0 && w2 == bpf_htonl(0x0000ffff)) {
		a->family = NKC_AF_INET;
		a->mapped = 1;
		__builtin_memcpy(a->addr, &w3, 4);
		return;
	}
	a->family = NKC_AF_INET6;
	__builtin_memcpy(a->addr, &w0, 4);
	__builtin_memcpy(a->addr + 4, &w1, 4);
	__builtin_memcpy(a->addr + 8, &w2, 4);
	__builtin_memcpy(a->addr + 12, &w3, 4);
}

static __always_inline void nkc_svc_write4(struct bpf_sock_addr *ctx, const __u8 *addr, __u16 port)
{
	__u32 ip;

	__builtin_memcpy(&ip, addr, 4);
	ctx->user_ip4 = ip;
	ctx->user_port = port;
}

static __always_inline void nkc_svc_write6(struct bpf_sock_addr *ctx, __u32 family, const __u8 *addr, __u16 port)
{
	__u32 w[4] = {};

	if (family == NKC_AF_INET) {
		w[2] = bpf_htonl(0x0000ffff);
		__builtin_memcpy(&w[3], addr, 4);
	} else {
		__builtin_memcpy(w, addr, 16);
	}
	ctx->user_ip6[0] = w[0];
	ctx->user_ip6[1] = w[1];
	ctx->user_ip6[2] = w[2];
	ctx->user_ip6[3] = w[3];
	ctx->user_port = port;
}

/* The backend of `svc` that ClientIP affinity holds this pod to, if still one of its. */
static __always_inline struct nkc_svc_backend *nkc_svc_affine(const struct nkc_svc *svc,
							      struct nkc_svc_affinity_key *key, __u64 now,
							      __u32 *backend_id)
{
	struct nkc_svc_affinity *held = bpf_map_lookup_elem(&nkc_svc_affinity, key);
	struct nkc_svc_backend *b;

	if (!held || now - held->last_ns > (__u64)svc->affinity_secs * NSEC_PER_SEC)
		return NULL;
	*backend_id = held->backend_id;
	b = bpf_map_lookup_elem(&nkc_svc_backends, backend_id);
	return b && b->svc_id == svc->id ? b : NULL;
}

enum nkc_svc_verdict {
	NKC_SVC_UNTOUCHED, /* not a Service of ours: leave the address */
	NKC_SVC_REFUSE,    /* a Service without a ready backend */
	NKC_SVC_TO_BACKEND,
};

/*
 * The backend for a socket of a pod naming `a` with `proto`: written over `a`, with the
 * Service remembered for the way back.
 */
static __always_inline enum nkc_svc_verdict nkc_svc_translate(struct bpf_sock_addr *ctx, struct nkc_svc_addr *a,
								__u8 proto)
{
	struct nkc_svc_key key = { .family = a->family, .port = a->port, .proto = proto };
	struct nkc_svc_affinity_key affinity = {};
	struct nkc_svc_rev_key rev = {};
	struct nkc_svc_origin origin = {};
	struct nkc_svc_backend *b = NULL;
	struct nkc_svc_slot_key slot;
	__u32 backend_id = 0;
	__u32 *id;
	struct nkc_svc *svc;
	__u64 now = 0;

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return NKC_SVC_UNTOUCHED;
	__builtin_memcpy(key.addr, a->addr, 16);
	svc = bpf_map_lookup_elem(&nkc_svc_services, &key);
	if (!svc || !nkc_svc_pod_socket(ctx))
		return NKC_SVC_UNTOUCHED;
	if (svc->backends == 0) {
		nkc_svc_count(NKC_SVC_CNT_REFUSED);
		return NKC_SVC_REFUSE;
	}
	if (svc->flags & NKC_SVC_F_AFFINITY) {
		now = bpf_ktime_get_ns();
		affinity.netns_cookie = bpf_get_netns_cookie(ctx);
		affinity.svc_id = svc->id;
		b = nkc_svc_affine(svc, &affinity, now, &backend_id);
	}
	if (!b) {
		slot.svc_id = svc->id;
		slot.slot = bpf_get_prandom_u32() % svc->backends;
		id = bpf_map_lookup_elem(&nkc_svc_slots, &slot);
		if (!id)
			goto unsure;
		backend_id = *id;
		b = bpf_map_lookup_elem(&nkc_svc_backends, &backend_id);
		if (!b || b->svc_id != svc->id)
			goto unsure;
	}
	if (b->family != a->family)
		goto unsure;
	if (svc->flags & NKC_SVC_F_AFFINITY) {
		struct nkc_svc_affinity held = { .last_ns = now, .backend_id = backend_id };

		bpf_map_update_elem(&nkc_svc_affinity, &affinity, &held, BPF_ANY);
	}
	rev.sock_cookie = bpf_get_socket_cookie(ctx);
	rev.family = b->family;
	__builtin_memcpy(rev.addr, b->addr, 16);
	rev.port = b->port;
	origin.family = a->family;
	__builtin_memcpy(origin.addr, a->addr, 16);
	origin.port = a->port;
	bpf_map_update_elem(&nkc_svc_rev, &rev, &origin, BPF_ANY);
	__builtin_memcpy(a->addr, b->addr, 16);
	a->port = b->port;
	nkc_svc_count(NKC_SVC_CNT_TRANSLATED);
	return NKC_SVC_TO_BACKEND;
unsure:
	nkc_svc_count(NKC_SVC_CNT_UNSURE);
	return NKC_SVC_UNTOUCHED;
}

/* What the hook returns for `verdict`: 1 lets the call go on; 0 with ECONNREFUSED set
 * fails it with that error instead of the default EPERM. */
static __always_inline int nkc_svc_result(enum nkc_svc_verdict verdict)
{
	if (verdict != NKC_SVC_REFUSE)
		return 1;
	bpf_set_retval(-NKC_ECONNREFUSED);
	return 0;
}

static __always_inline int nkc_svc_forward4(struct bpf_sock_addr *ctx)
{
	struct nkc_svc_addr a = {};
	enum nkc_svc_verdict verdict;

	nkc_svc_read4(ctx, &a);
	verdict = nkc_svc_translate(ctx, &a, (__u8)ctx->protocol);
	if (verdict == NKC_SVC_TO_BACKEND)
		nkc_svc_write4(ctx, a.addr, a.port);
	return nkc_svc_result(verdict);
}

static __always_inline int nkc_svc_forward6(struct bpf_sock_addr *ctx)
{
	struct nkc_svc_addr a = {};
	enum nkc_svc_verdict verdict;

	nkc_svc_read6(ctx, &a);
	verdict = nkc_svc_translate(ctx, &a, (__u8)ctx->protocol);
	if (verdict == NKC_SVC_TO_BACKEND)
		nkc_svc_write6(ctx, a.family, a.addr, a.port);
	return nkc_svc_result(verdict);
}

/* The Service a translated socket's peer stands for, or NULL. */
static __always_inline struct nkc_svc_origin *nkc_svc_origin_of(struct bpf_sock_addr *ctx,
								 const struct nkc_svc_addr *peer)
{
	struct nkc_svc_rev_key rev = { .family = peer->family, .port = peer->port };

	rev.sock_cookie = bpf_get_socket_cookie(ctx);
	__builtin_memcpy(rev.addr, peer->addr, 16);
	return bpf_map_lookup_elem(&nkc_svc_rev, &rev);
}

static __always_inline int nkc_svc_back4(struct bpf_sock_addr *ctx)
{
	struct nkc_svc_origin *origin;
	struct nkc_svc_addr a = {};

	nkc_svc_read4(ctx, &a);
	origin = nkc_svc_origin_of(ctx, &a);
	if (origin && origin->family == NKC_AF_INET) {
		nkc_svc_write4(ctx, origin->addr, origin->port);
		nkc_svc_count(NKC_SVC_CNT_REVERSED);
	}
	return 1;
}

static __always_inline int nkc_svc_back6(struct bpf_sock_addr *ctx)
{
	struct nkc_svc_origin *origin;
	struct nkc_svc_addr a = {};

	nkc_svc_read6(ctx, &a);
	origin = nkc_svc_origin_of(ctx, &a);
	if (origin && origin->family == a.family) {
		nkc_svc_write6(ctx, origin->family, origin->addr, origin->port);
		nkc_svc_count(NKC_SVC_CNT_REVERSED);
	}
	return 1;
}

SEC("cgroup/connect4")
int nkc_svc_connect4(struct bpf_sock_addr *ctx) { return nkc_svc_forward4(ctx); }

SEC("cgroup/connect6")
int nkc_svc_connect6(struct bpf_sock_addr *ctx) { return nkc_svc_forward6(ctx); }

SEC("cgroup/sendmsg4")
int nkc_svc_sendmsg4(struct bpf_sock_addr *ctx) { return nkc_svc_forward4(ctx); }

SEC("cgroup/sendmsg6")
int nkc_svc_sendmsg6(struct bpf_sock_addr *ctx) { return nkc_svc_forward6(ctx); }

SEC("cgroup/recvmsg4")
int nkc_svc_recvmsg4(struct bpf_sock_addr *ctx) { return nkc_svc_back4(ctx); }

SEC("cgroup/recvmsg6")
int nkc_svc_recvmsg6(struct bpf_sock_addr *ctx) { return nkc_svc_back6(ctx); }

SEC("cgroup/getpeername4")
int nkc_svc_getpeername4(struct bpf_sock_addr *ctx) { return nkc_svc_back4(ctx); }

SEC("cgroup/getpeername6")
int nkc_svc_getpeername6(struct bpf_sock_addr *ctx) { return nkc_svc_back6(ctx); }

char _license[] SEC("license") = "GPL";
