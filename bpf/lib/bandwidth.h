/*
 * Per-pod rate limits (the CNI bandwidth capability), enforced by policing: a token
 * bucket per direction, and what exceeds it is dropped. The bucket is kept as a virtual
 * clock (GCRA): clock_ns is when everything admitted so far will have been sent at the
 * pod's rate. A packet costs its wire length at that rate; it is admitted if the clock,
 * advanced by its cost, runs no further than the burst ahead of now.
 * Idle time refills the bucket because the clock never lags now. The same clock gives
 * departure times for EDT (NKC_BW_MODE_EDT): a packet beyond the burst is not dropped but
 * stamped with the time the rate allows it to leave, and the fq qdisc on the uplink
 * (src/datapath/shaping.ts) holds it until then; TCP sees a slower link, not losses.
 *
 * One bucket per pod and direction, shared by every CPU: per-CPU buckets would each need
 * the full rate (a flow sticks to one CPU, many flows spread), so the pod could send
 * that rate times the CPU count. The clock moves only by compare-and-swap (BPF_ATOMIC
 * CMPXCHG, -mcpu=v3): two CPUs can never both spend the same tokens. A spin lock would
 * need the map's BTF, which our loader does not load (bpf/README.md). After
 * NKC_BW_CAS_TRIES lost races the packet is dropped: the bucket is contended, so it is
 * being spent as fast as it fills.
 *
 * Where it runs: egress in the pod's own program (nkc_from_pod, nkc_src_check), once it
 * knows where the packet goes (pacing applies only on the way to the uplink). Ingress
 * depends on its mode (ingress_mode):
 *  - policed: on every path into the pod: before each bpf_redirect_peer into it
 *    (nkc_host_in, deliver_local), which skips the host device's transmit, and in
 *    nkc_pod_ingress on the host device's transmit (veth: tcx egress; netkit: the primary
 *    hook) for what the stack delivers and, netkit, what a local pod redirects there;
 *  - paced (EDT) or shaped by a qdisc: every path into the pod goes through its host
 *    device's transmit and the qdisc there (fq, or tbf): the redirects to it take
 *    bpf_redirect or bpf_redirect_neigh to the host device instead of the peer
 *    (nkc_bw_ingress_via_host). Paced, nkc_pod_ingress on tcx egress (either kind: it
 *    must run before the qdisc, and netkit's primary hook runs after it) stamps the
 *    departure; shaped, the qdisc does it all and no program takes part.
 *
 * Fail safe: no entry, rate 0 or an unknown mode is no limit, the right default for the
 * unlimited pods that have no entry at all.
 */
#ifndef NKC_BANDWIDTH_H
#define NKC_BANDWIDTH_H

#include "common.h"

NKC_MAP(nkc_bandwidth, BPF_MAP_TYPE_HASH, __u32, struct nkc_bandwidth, NKC_MAX_ENDPOINTS, 0);

#define NKC_NSEC_PER_SEC 1000000000ULL
#define NKC_BW_CAS_TRIES 4
/* EDT's bounded queue: a packet may wait at most this long beyond the pod's burst (at
 * 10 Mbit/s, 125 kB: what TCP needs to keep the rate); later ones are dropped. */
#define NKC_BW_HORIZON_NS (100ULL * 1000 * 1000)

/*
 * What the packet occupies on the wire. A GSO packet is one skb for many segments, each
 * of which carries its own headers once segmented: Ethernet, IP (by family) and TCP with
 * timestamps (32 bytes), the common case.
 */
static __always_inline __u64 nkc_wire_len(struct __sk_buff *skb, __u32 family)
{
	__u64 len = skb->len;
	__u32 segs = skb->gso_segs;

	if (segs > 1)
		len += (__u64)(segs - 1) * (ETH_HLEN + (family == NKC_AF_INET ? 20 : 40) + 32);
	return len;
}

/*
 * Takes `bytes` from the bucket; 0: refused (counted). Otherwise *depart_ns is when the
 * packet may leave to keep the rate: 0 (now) while the bucket holds its cost (the burst
 * leaves at once), else the time at which it would. A packet that would wait longer than
 * `horizon_ns` is refused: 0 for policing, the bounded queue for EDT.
 */
static __always_inline int nkc_bw_take(struct nkc_bw_bucket *b, __u64 bytes, __u64 horizon_ns, __u64 *depart_ns)
{
	__u64 rate = b->rate;

	*depart_ns = 0;
	if (!rate)
		return 1;
	/* bytes < 2^21 (the largest GSO packet): no overflow for any rate. */
	__u64 cost = bytes * 8 * NKC_NSEC_PER_SEC / rate;
	__u64 burst_ns = b->burst_ns;
	__u64 now = bpf_ktime_get_ns();

#pragma unroll
	for (int i = 0; i < NKC_BW_CAS_TRIES; i++) {
		__u64 clock = *(volatile __u64 *)&b->clock_ns;
		__u64 start = clock > now ? clock : now;
		__u64 debt = start - now;
		__u64 ahead = debt + cost;
		__u64 wait = ahead > burst_ns ? ahead - burst_ns : 0;
		/* A full bucket (no debt) admits one packet of any size: a GSO packet larger
		 * than the burst still passes, and the long-run rate stays exact. */
		if (debt && wait > horizon_ns)
			break;
		if (__sync_val_compare_and_swap(&b->clock_ns, clock, start + cost) == clock) {
			*depart_ns = wait ? now + wait : 0;
			return 1;
		}
	}
	__sync_fetch_and_add(&b->dropped, 1);
	return 0;
}

/* Policing: what the bucket does not hold is dropped. */
static __always_inline int nkc_bw_admit(struct nkc_bw_bucket *b, __u64 bytes)
{
	__u64 depart;

	return nkc_bw_take(b, bytes, 0, &depart);
}

/*
 * EDT: the packet leaves when the pod's rate allows, as a departure time in skb->tstamp
 * (CLOCK_MONOTONIC, typed as such so that crossing namespaces and forwarding keep it) that
 * the fq qdisc honours. A later departure the sender chose itself (TCP's pacing stamps
 * its packets too) stands. Any other time in tstamp (a receive time, which a packet from
 * the wire may still carry) would read to fq as a departure in the far future: it is
 * cleared.
 */
static __always_inline int nkc_bw_pace(struct __sk_buff *skb, struct nkc_bw_bucket *b, __u64 bytes)
{
	__u64 depart;

	if (!nkc_bw_take(b, bytes, NKC_BW_HORIZON_NS, &depart))
		return 0;
	/* Reading tstamp_type also makes the kernel show tstamp as it is, mono or not. */
	int mono = skb->tstamp_type == BPF_SKB_TSTAMP_DELIVERY_MONO;
	if (!depart) {
		if (!mono && skb->tstamp)
			bpf_skb_set_tstamp(skb, 0, BPF_SKB_TSTAMP_UNSPEC);
		return 1;
	}
	if (mono && skb->tstamp >= depart)
		return 1;
	bpf_skb_set_tstamp(skb, depart, BPF_SKB_TSTAMP_DELIVERY_MONO);
	return 1;
}

static __always_inline struct nkc_bandwidth *nkc_bw_lookup(__u32 host_ifindex)
{
	struct nkc_bandwidth *bw = bpf_map_lookup_elem(&nkc_bandwidth, &host_ifindex);

	if (!bw || (bw->mode != NKC_BW_MODE_POLICE && bw->mode != NKC_BW_MODE_EDT))
		return NULL;
	return bw->ingress_mode <= NKC_BW_IN_QDISC ? bw : NULL;
}

/* Where a packet the pod sends goes next, for nkc_bw_egress_ok: the device it leaves
 * by, or one of these. */
#define NKC_BW_OUT_STACK 0U          /* the stack routes it (most often out of the uplink) */
#define NKC_BW_OUT_NODE  0xffffffffU /* delivered on this node: no qdisc on the way */

/*
 * May the pod behind `host_ifindex` send this packet, which goes to `out`? A paced limit
 * (EDT) stamps what leaves through its uplink or through the stack; what stays on the node
 * meets no fq, so it is policed, from the same clock: both together hold the one rate.
 */
static __always_inline int nkc_bw_egress_ok(struct __sk_buff *skb, __u32 host_ifindex, __u32 family, __u32 out)
{
	struct nkc_bandwidth *bw = nkc_bw_lookup(host_ifindex);

	if (!bw)
		return 1;
	__u64 bytes = nkc_wire_len(skb, family);
	if (bw->mode == NKC_BW_MODE_EDT && (out == NKC_BW_OUT_STACK || out == bw->paced_ifindex))
		return nkc_bw_pace(skb, &bw->egress, bytes);
	return nkc_bw_admit(&bw->egress, bytes);
}

/* May this packet be delivered to the pod behind `host_ifindex`? Policed, paced for the
 * fq on its host device, or left to the qdisc there. */
static __always_inline int nkc_bw_ingress_ok(struct __sk_buff *skb, __u32 host_ifindex, __u32 family)
{
	struct nkc_bandwidth *bw = nkc_bw_lookup(host_ifindex);

	if (!bw || bw->ingress_mode == NKC_BW_IN_QDISC)
		return 1;
	__u64 bytes = nkc_wire_len(skb, family);
	if (bw->ingress_mode == NKC_BW_IN_EDT)
		return nkc_bw_pace(skb, &bw->ingress, bytes);
	return nkc_bw_admit(&bw->ingress, bytes);
}

/*
 * Must what is redirected to the pod behind `host_ifindex` go through its host device's
 * transmit, where its ingress qdisc paces or shapes it? Then nothing may take
 * bpf_redirect_peer into it, which skips that device, and whoever redirects charges
 * nothing: the host device's transmit does, once.
 */
static __always_inline int nkc_bw_ingress_via_host(__u32 host_ifindex)
{
	struct nkc_bandwidth *bw = nkc_bw_lookup(host_ifindex);

	return bw && bw->ingress.rate && bw->ingress_mode != NKC_BW_IN_POLICE;
}

/*
 * Into the pod behind `ep` through its host device's transmit (nkc_bw_ingress_via_host),
 * with the link-layer header the pod's device takes for its own: both kinds are Ethernet
 * devices to the kernel (netkit in L3 mode with all-zero addresses), and a frame whose
 * destination is not the peer's address reaches the pod as PACKET_OTHERHOST, which IP
 * drops. A packet from the wire or a veth pod carries another device's addresses; the
 * neighbour entry of the host route has the pod's (netkit L3: NOARP, the zero address).
 */
static __always_inline long nkc_redirect_via_host(const struct nkc_endpoint *ep)
{
	return bpf_redirect_neigh(ep->host_ifindex, NULL, 0, 0);
}

#endif
