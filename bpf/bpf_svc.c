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
 *
 * Scoped: what a socket needs on the way back is its own (socket storage, lib/svc_sock.h)
 * and a pod's affinity is its own (nkc_svc_clients, keyed by its namespace), so no pod's
 * traffic can take another's. A socket the kernel gives no storage is not translated:
 * its replies could not be shown as the Service, so the stack (kube-proxy) takes it.
 *
 * Every hook runs with the socket locked (connect: the caller holds it, for TCP, or the
 * hook takes it; sendmsg, recvmsg, getpeername: the hook or inet_getname takes it), so
 * one socket's storage is read and written by one program at a time.
 */
#include "common.h"
#include "nkc_svc_abi.h"
#include "svc_sock.h"

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
/* A pod's netns cookie -> its affinity and counters. Made by userspace with the pod's
 * record, before it (src/bpf/svc/objects.ts), and gone with it; the programs only change what is
 * in it. Never full: it has room for every pod nkc_svc_netns can hold. */
NKC_MAP(nkc_svc_clients, BPF_MAP_TYPE_HASH, __u64, struct nkc_svc_client, NKC_SVC_PODS_MAX, BPF_F_NO_PREALLOC);
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

/* The pod's own state, or NULL where the pod was recorded by a build that made none. */
static __always_inline struct nkc_svc_client *nkc_svc_client(struct bpf_sock_addr *ctx)
{
	__u64 cookie = bpf_get_netns_cookie(ctx);

	return bpf_map_lookup_elem(&nkc_svc_clients, &cookie);
}

/* The first of the entries a Service's affinity may take in a pod's state. */
static __always_inline __u32 nkc_svc_affinity_set(const struct nkc_svc *svc)
{
	return (svc->id % NKC_SVC_AFFINITY_SETS) * NKC_SVC_AFFINITY_WAYS;
}

/* The backend of `svc` that ClientIP affinity holds this pod to, if still one of its. */
static __always_inline struct nkc_svc_backend *nkc_svc_affine(const struct nkc_svc *svc, struct nkc_svc_client *c,
							      __u64 now, __u32 *backend_id)
{
	__u32 set = nkc_svc_affinity_set(svc), way;
	struct nkc_svc_backend *b;

	for (way = 0; way < NKC_SVC_AFFINITY_WAYS; way++) {
		struct nkc_svc_held *h = &c->held[(set + way) & (NKC_SVC_POD_AFFINITY - 1)];
		__u64 ids = h->ids;

		if ((__u32)ids != svc->id || h->expires_ns <= now)
			continue;
		*backend_id = (__u32)(ids >> 32);
		b = bpf_map_lookup_elem(&nkc_svc_backends, backend_id);
		return b && b->svc_id == svc->id ? b : NULL;
	}
	return NULL;
}

/* Holds the pod to `backend_id` for the Service's timeout: in the Service's set, its own
 * entry, else a free or expired one, else the one closest to expiring (counted: the pod
 * holds four Services of the set already). Several of the pod's sockets may do this at
 * once on other CPUs; the worst they do is take the same entry, so the pod forgets one
 * of its own Services, never another pod's. */
static __always_inline void nkc_svc_hold(struct nkc_svc_client *c, const struct nkc_svc *svc, __u32 backend_id,
					 __u64 now)
{
	__u32 set = nkc_svc_affinity_set(svc), way, pick = 0;
	__u64 soonest = ~0ULL;
	struct nkc_svc_held *h;

	for (way = 0; way < NKC_SVC_AFFINITY_WAYS; way++) {
		h = &c->held[(set + way) & (NKC_SVC_POD_AFFINITY - 1)];
		if ((__u32)h->ids == svc->id && h->expires_ns != 0) {
			pick = way;
			soonest = 0;
			break;
		}
		if (h->expires_ns < soonest) {
			soonest = h->expires_ns;
			pick = way;
		}
	}
	if (soonest > now)
		__sync_fetch_and_add(&c->affinity_replaced, 1);
	h = &c->held[(set + pick) & (NKC_SVC_POD_AFFINITY - 1)];
	h->ids = (__u64)svc->id | (__u64)backend_id << 32;
	h->expires_ns = now + (__u64)svc->affinity_secs * NSEC_PER_SEC;
}

/* The backend `b` as a socket sees it. */
static __always_inline void nkc_svc_peer_of(struct nkc_svc_peer *p, const struct nkc_svc_backend *b)
{
	p->family = b->family;
	__builtin_memcpy(p->addr, b->addr, 16);
	p->port = b->port;
}

/* The socket's entry for the Service `key`, or its free or least recently used one. */
static __always_inline __u32 nkc_svc_sock_slot(struct nkc_svc_sock *st, const struct nkc_svc_key *key, int *found)
{
	__u64 oldest = ~0ULL;
	__u32 i, pick = 0;

	*found = 0;
	for (i = 0; i < NKC_SVC_SOCK_SLOTS; i++) {
		struct nkc_svc_sock_entry *e = &st->e[i];
		__u64 used = (e->flags & NKC_SVC_SOCK_F_USED) ? e->used : 0;

		if (used && nkc_svc_same24(&e->pair.frontend, key)) {
			*found = 1;
			return i;
		}
		if (used < oldest) {
			oldest = used;
			pick = i;
		}
	}
	return pick;
}

/* A send's socket that already has a backend for the Service keeps it while it is one
 * (as conntrack keeps an unconnected UDP socket's flow on one backend): its replies, from
 * one backend, are shown as the Service. Otherwise NULL. */
static __always_inline struct nkc_svc_backend *nkc_svc_kept(const struct nkc_svc *svc,
							    const struct nkc_svc_sock_entry *e)
{
	__u32 id = e->backend_id;
	struct nkc_svc_backend *b = bpf_map_lookup_elem(&nkc_svc_backends, &id);
	struct nkc_svc_peer now = {};

	if (!b || b->svc_id != svc->id)
		return NULL;
	nkc_svc_peer_of(&now, b);
	return nkc_svc_same24(&now, &e->pair.backend) ? b : NULL;
}

enum nkc_svc_verdict {
	NKC_SVC_UNTOUCHED, /* not a Service of ours: leave the address */
	NKC_SVC_REFUSE,    /* a Service without a ready backend */
	NKC_SVC_TO_BACKEND,
};

/*
 * The backend for a socket of a pod naming `a` with `proto`: written over `a`, with the
 * Service kept in the socket's storage for the way back. `connected`: a connect, whose
 * backend the socket keeps for good (a send's is chosen again when it stops being one).
 */
static __always_inline enum nkc_svc_verdict nkc_svc_translate(struct bpf_sock_addr *ctx, struct nkc_svc_addr *a,
								__u8 proto, int connected)
{
	struct nkc_svc_key key = { .family = a->family, .port = a->port, .proto = proto };
	struct nkc_svc_client *client = NULL;
	struct nkc_svc_backend *b = NULL;
	struct nkc_svc_sock_entry *e;
	struct nkc_svc_slot_key slot;
	struct nkc_svc_sock *st;
	struct bpf_sock *sk;
	__u32 backend_id = 0;
	__u32 *id, at;
	struct nkc_svc *svc;
	__u64 now = 0;
	int found;

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
	sk = ctx->sk;
	if (!sk)
		goto unsure;
	st = bpf_sk_storage_get(&nkc_svc_sock, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		/* The socket's option memory (optmem_max) or the node's is spent. */
		client = nkc_svc_client(ctx);
		if (client)
			__sync_fetch_and_add(&client->no_socket_state, 1);
		goto unsure;
	}
	at = nkc_svc_sock_slot(st, &key, &found) & (NKC_SVC_SOCK_SLOTS - 1);
	e = &st->e[at];
	if (found && !connected) {
		b = nkc_svc_kept(svc, e);
		if (b) {
			backend_id = e->backend_id;
			goto chosen;
		}
	}
	if (svc->flags & NKC_SVC_F_AFFINITY) {
		client = nkc_svc_client(ctx);
		if (!client)
			goto unsure; /* no affinity to keep: the stack's rules have one */
		now = bpf_ktime_get_ns();
		b = nkc_svc_affine(svc, client, now, &backend_id);
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
	if (client && (svc->flags & NKC_SVC_F_AFFINITY))
		nkc_svc_hold(client, svc, backend_id, now);
	if (!found && (e->flags & NKC_SVC_SOCK_F_USED)) {
		/* The socket names more Services than it keeps: its own oldest gives way. */
		client = client ? client : nkc_svc_client(ctx);
		if (client)
			__sync_fetch_and_add(&client->socket_replaced, 1);
	}
	e->pair.frontend = key;
	nkc_svc_peer_of(&e->pair.backend, b);
	e->backend_id = backend_id;
	e->flags = NKC_SVC_SOCK_F_USED | (connected ? NKC_SVC_SOCK_F_CONNECTED : 0);
chosen:
	st->clock += 1;
	e->used = st->clock;
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

static __always_inline int nkc_svc_forward4(struct bpf_sock_addr *ctx, int connected)
{
	struct nkc_svc_addr a = {};
	enum nkc_svc_verdict verdict;

	nkc_svc_read4(ctx, &a);
	verdict = nkc_svc_translate(ctx, &a, (__u8)ctx->protocol, connected);
	if (verdict == NKC_SVC_TO_BACKEND)
		nkc_svc_write4(ctx, a.addr, a.port);
	return nkc_svc_result(verdict);
}

static __always_inline int nkc_svc_forward6(struct bpf_sock_addr *ctx, int connected)
{
	struct nkc_svc_addr a = {};
	enum nkc_svc_verdict verdict;

	nkc_svc_read6(ctx, &a);
	verdict = nkc_svc_translate(ctx, &a, (__u8)ctx->protocol, connected);
	if (verdict == NKC_SVC_TO_BACKEND)
		nkc_svc_write6(ctx, a.family, a.addr, a.port);
	return nkc_svc_result(verdict);
}

/* The Service a translated socket's peer stands for, or NULL: of the socket's entries
 * with that backend, the one it used last (two Services may share a backend). */
static __always_inline struct nkc_svc_key *nkc_svc_origin_of(struct bpf_sock_addr *ctx,
							      const struct nkc_svc_addr *a)
{
	struct nkc_svc_peer peer = { .family = a->family, .port = a->port };
	struct nkc_svc_key *origin = NULL;
	struct nkc_svc_sock *st;
	struct bpf_sock *sk = ctx->sk;
	__u64 last = 0;
	__u32 i;

	if (!sk)
		return NULL;
	st = bpf_sk_storage_get(&nkc_svc_sock, sk, NULL, 0);
	if (!st)
		return NULL;
	__builtin_memcpy(peer.addr, a->addr, 16);
	for (i = 0; i < NKC_SVC_SOCK_SLOTS; i++) {
		struct nkc_svc_sock_entry *e = &st->e[i];

		if ((e->flags & NKC_SVC_SOCK_F_USED) && e->used >= last && nkc_svc_same24(&e->pair.backend, &peer)) {
			last = e->used;
			origin = &e->pair.frontend;
		}
	}
	return origin;
}

static __always_inline int nkc_svc_back4(struct bpf_sock_addr *ctx)
{
	struct nkc_svc_key *origin;
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
	struct nkc_svc_key *origin;
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
int nkc_svc_connect4(struct bpf_sock_addr *ctx) { return nkc_svc_forward4(ctx, 1); }

SEC("cgroup/connect6")
int nkc_svc_connect6(struct bpf_sock_addr *ctx) { return nkc_svc_forward6(ctx, 1); }

SEC("cgroup/sendmsg4")
int nkc_svc_sendmsg4(struct bpf_sock_addr *ctx) { return nkc_svc_forward4(ctx, 0); }

SEC("cgroup/sendmsg6")
int nkc_svc_sendmsg6(struct bpf_sock_addr *ctx) { return nkc_svc_forward6(ctx, 0); }

SEC("cgroup/recvmsg4")
int nkc_svc_recvmsg4(struct bpf_sock_addr *ctx) { return nkc_svc_back4(ctx); }

SEC("cgroup/recvmsg6")
int nkc_svc_recvmsg6(struct bpf_sock_addr *ctx) { return nkc_svc_back6(ctx); }

SEC("cgroup/getpeername4")
int nkc_svc_getpeername4(struct bpf_sock_addr *ctx) { return nkc_svc_back4(ctx); }

SEC("cgroup/getpeername6")
int nkc_svc_getpeername6(struct bpf_sock_addr *ctx) { return nkc_svc_back6(ctx); }

char _license[] SEC("license") = "GPL";
