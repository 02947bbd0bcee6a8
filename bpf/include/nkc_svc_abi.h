/*
 * The layouts of Service translation (bpf_svc.c) shared with userspace
 * (src/bpf/svc/abi.ts declares each again as a field table, held against the objects'
 * BTF at build and at load). Apart from nkc_abi.h because only bpf_svc.c and its
 * loader read them. Layouts only.
 *
 * How a connect finds its backend, and the order userspace writes in so that every
 * read on the way sees a consistent table (src/bpf/svc/table.ts):
 *
 *   nkc_svc_services  (family, ClusterIP, port, protocol) -> id, backend count, affinity
 *   nkc_svc_slots     (service id, slot < count)          -> backend id
 *   nkc_svc_backends  backend id                          -> service id, address, port
 *
 * A backend is written before any slot names it, and a slot before the count covers
 * it; a count shrinks before its slots go, and a backend goes last. A backend names its
 * service, so a slot read just before a change never lends another service's backend.
 */
#ifndef NKC_SVC_ABI_H
#define NKC_SVC_ABI_H

#include <linux/types.h>

#define NKC_SVC_MAX          16384 /* Services (front ends: address, port, protocol) */
#define NKC_SVC_BACKENDS_MAX 65536 /* backends, over all Services, and their slots */
#define NKC_SVC_PODS_MAX     16384 /* pods whose sockets are translated (NKC_MAX_ENDPOINTS) */
#define NKC_SVC_SOCK_SLOTS   4     /* Services one socket is shown back, each (nkc_svc_sock) */
#define NKC_SVC_AFFINITY_WAYS 4    /* a pod's affinity: NKC_SVC_AFFINITY_SETS sets of 4 entries */
#define NKC_SVC_AFFINITY_SETS 8    /* (a Service's set is its id modulo 8) */
#define NKC_SVC_POD_AFFINITY (NKC_SVC_AFFINITY_WAYS * NKC_SVC_AFFINITY_SETS)

/* nkc_svc_services key: a Service's front end. IPv4 uses addr[0..3], rest zero. */
struct nkc_svc_key {
	__u32 family;      /* NKC_AF_INET or NKC_AF_INET6 */
	__u8 addr[16];     /* network order */
	__u16 port;        /* network order */
	__u8 proto;        /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};
_Static_assert(sizeof(struct nkc_svc_key) == 24, "nkc_svc_key is 24 bytes");

/* The Service holds clients to their first backend (sessionAffinity: ClientIP). */
#define NKC_SVC_F_AFFINITY (1U << 0)

/* nkc_svc_services value. backends == 0: the Service has no ready backend, and a
 * connect to it is refused (ECONNREFUSED), as kube-proxy's REJECT rule does. */
struct nkc_svc {
	__u32 id;
	__u16 backends;       /* slots 0 .. backends-1 are in use */
	__u8 flags;           /* NKC_SVC_F_* */
	__u8 pad;
	__u32 affinity_secs;  /* sessionAffinityConfig.clientIP.timeoutSeconds */
	__u32 pad2;
};
_Static_assert(sizeof(struct nkc_svc) == 16, "nkc_svc is 16 bytes");

struct nkc_svc_slot_key {
	__u32 svc_id;
	__u32 slot;
};
_Static_assert(sizeof(struct nkc_svc_slot_key) == 8, "nkc_svc_slot_key is 8 bytes");

/* nkc_svc_backends value (keyed by a __u32 backend id). */
struct nkc_svc_backend {
	__u32 svc_id;      /* the Service whose slot names it */
	__u32 family;      /* NKC_AF_INET or NKC_AF_INET6, the Service's own */
	__u8 addr[16];     /* network order */
	__u16 port;        /* network order */
	__u16 pad;
};
_Static_assert(sizeof(struct nkc_svc_backend) == 28, "nkc_svc_backend is 28 bytes");

/* A backend's address as a socket sees it. IPv4 uses addr[0..3], rest zero. */
struct nkc_svc_peer {
	__u32 family;
	__u8 addr[16];     /* network order */
	__u16 port;        /* network order */
	__u16 pad;
};
_Static_assert(sizeof(struct nkc_svc_peer) == 24, "nkc_svc_peer is 24 bytes");

/* What one socket was translated from and to: the Service's front end (as its key in
 * nkc_svc_services: family, ClusterIP, port, protocol) and the backend. Also the key of
 * the pairs the agent withdrew (bpf_svc_destroy.c). Padding is zero. */
struct nkc_svc_pair {
	struct nkc_svc_key frontend;
	struct nkc_svc_peer backend;
};
_Static_assert(sizeof(struct nkc_svc_pair) == 48, "nkc_svc_pair is 48 bytes");

#define NKC_SVC_SOCK_F_USED      (1U << 0)
#define NKC_SVC_SOCK_F_CONNECTED (1U << 1) /* written by connect(): the socket's peer */

struct nkc_svc_sock_entry {
	struct nkc_svc_pair pair;
	__u32 backend_id;  /* the backend's id when chosen (nkc_svc_backends) */
	__u32 flags;       /* NKC_SVC_SOCK_F_* */
	__u64 used;        /* the socket's nkc_svc_sock.clock at its last use */
};
_Static_assert(sizeof(struct nkc_svc_sock_entry) == 64, "nkc_svc_sock_entry is 64 bytes");

/* nkc_svc_sock: socket-local storage (BPF_MAP_TYPE_SK_STORAGE) of a translated socket,
 * which the kernel frees with the socket: one entry per Service it named, at most
 * NKC_SVC_SOCK_SLOTS, the least recently used giving way to a new one. */
struct nkc_svc_sock {
	__u64 clock;       /* counts the socket's uses of its entries */
	struct nkc_svc_sock_entry e[NKC_SVC_SOCK_SLOTS];
};
_Static_assert(sizeof(struct nkc_svc_sock) == 8 + 64 * NKC_SVC_SOCK_SLOTS, "nkc_svc_sock is 264 bytes");

/* One Service a pod is held to by ClientIP affinity: the Service's id in the low half of
 * `ids`, its backend's in the high half (one 8-byte store, so a reader never sees one
 * Service's id with another's backend), until `expires_ns` (bpf_ktime_get_ns()). A zero
 * `expires_ns` is a free entry. */
struct nkc_svc_held {
	__u64 ids;
	__u64 expires_ns;
};
_Static_assert(sizeof(struct nkc_svc_held) == 16, "nkc_svc_held is 16 bytes");

/* nkc_svc_clients value, keyed by a pod's netns cookie: what is the pod's own. Its
 * affinity (a pod is its network namespace, which holds its client address): up to 32
 * Services, each in one of 8 sets of 4 entries, so that a lookup reads 4 entries, not 32;
 * and what was refused or given up for it. Counters only grow. */
struct nkc_svc_client {
	__u64 no_socket_state; /* sockets left to the stack: the kernel gave no socket storage */
	__u64 socket_replaced; /* a socket's least recently used entry given up for another Service */
	__u64 affinity_replaced; /* a held Service given up for another, the pod holding as many as it may */
	__u64 pad;
	struct nkc_svc_held held[NKC_SVC_POD_AFFINITY];
};
_Static_assert(sizeof(struct nkc_svc_client) == 32 + 16 * NKC_SVC_POD_AFFINITY, "nkc_svc_client is 544 bytes");

/* nkc_svc_stats (per CPU, one slot): what the programs did. Order is ABI. */
enum nkc_svc_counter {
	NKC_SVC_CNT_TRANSLATED, /* connects and sends given a backend */
	NKC_SVC_CNT_REFUSED,    /* to a Service without a ready backend */
	NKC_SVC_CNT_REVERSED,   /* receives and getpeername shown the Service */
	NKC_SVC_CNT_UNSURE,     /* left to the stack: a table read mid-change, or no pod state */
	NKC_SVC_CNT_MAX,
};
struct nkc_svc_stats {
	__u64 v[NKC_SVC_CNT_MAX];
};
_Static_assert(sizeof(struct nkc_svc_stats) == 32, "nkc_svc_stats is 32 bytes");

#endif
