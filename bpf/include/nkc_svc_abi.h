/*
 * The layouts of Service translation (bpf_svc.c) shared with userspace
 * (src/bpf/svc-abi.ts mirrors every struct here byte for byte). Apart from
 * nkc_abi.h because only bpf_svc.c and its loader read them. Layouts only.
 *
 * How a connect finds its backend, and the order userspace writes in so that every
 * read on the way sees a consistent table (src/bpf/svc-table.ts):
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
#define NKC_SVC_REV_MAX      65536 /* translated sockets remembered for the way back */
#define NKC_SVC_AFFINITY_MAX 65536 /* (pod, Service) pairs held by ClientIP affinity */
#define NKC_SVC_PODS_MAX     16384 /* pods whose sockets are translated (NKC_MAX_ENDPOINTS) */

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

/* nkc_svc_rev: a translated socket's backend, to show the Service again on the way back
 * (recvmsg's source, getpeername). Keyed by socket and backend: one unconnected UDP
 * socket may talk to several Services. */
struct nkc_svc_rev_key {
	__u64 sock_cookie;
	__u32 family;
	__u8 addr[16];     /* the backend's, network order */
	__u16 port;        /* network order */
	__u16 pad;
};
_Static_assert(sizeof(struct nkc_svc_rev_key) == 32, "nkc_svc_rev_key is 32 bytes");

struct nkc_svc_origin {
	__u32 family;
	__u8 addr[16];     /* the Service's, network order */
	__u16 port;        /* network order */
	__u16 pad;
};
_Static_assert(sizeof(struct nkc_svc_origin) == 24, "nkc_svc_origin is 24 bytes");

/* nkc_svc_affinity: a pod's backend of a Service with ClientIP affinity. The pod is its
 * network namespace, which holds its client address. */
struct nkc_svc_affinity_key {
	__u64 netns_cookie;
	__u32 svc_id;
	__u32 pad;
};
_Static_assert(sizeof(struct nkc_svc_affinity_key) == 16, "nkc_svc_affinity_key is 16 bytes");

struct nkc_svc_affinity {
	__u64 last_ns;     /* bpf_ktime_get_ns() of its last use */
	__u32 backend_id;
	__u32 pad;
};
_Static_assert(sizeof(struct nkc_svc_affinity) == 16, "nkc_svc_affinity is 16 bytes");

/* nkc_svc_stats (per CPU, one slot): what the programs did. Order is ABI. */
enum nkc_svc_counter {
	NKC_SVC_CNT_TRANSLATED, /* connects and sends given a backend */
	NKC_SVC_CNT_REFUSED,    /* to a Service without a ready backend */
	NKC_SVC_CNT_REVERSED,   /* receives and getpeername shown the Service */
	NKC_SVC_CNT_UNSURE,     /* a table read mid-change: left to the stack */
	NKC_SVC_CNT_MAX,
};
struct nkc_svc_stats {
	__u64 v[NKC_SVC_CNT_MAX];
};
_Static_assert(sizeof(struct nkc_svc_stats) == 32, "nkc_svc_stats is 32 bytes");

#endif
