/*
 * The same-node socket bypass ("sockBypass": true): TCP between two local pods
 * spliced at the socket layer, skipping the TCP/IP stack and the device pair.
 *
 * nkc_sockops - sock_ops on a cgroup v2 (the node's root by default). When a TCP
 *   connection is established and both of its addresses are local pods whose
 *   network asked for the bypass (NKC_EP_F_SOCK_BYPASS in nkc_endpoints), the
 *   socket goes into nkc_sock_hash and gets a state in nkc_sock_state. Anything
 *   else (a Service VIP before DNAT, a hostPort, the node, a host process, a
 *   socket established before this program was attached) is never added, so it
 *   keeps the packet path. A closing socket leaves the sockhash by itself (the
 *   kernel unlinks it); its state goes on the TCP_CLOSE callback.
 *
 * nkc_sk_msg - sk_msg verdict on nkc_sock_hash: runs on every sendmsg, sendfile
 *   and splice of a socket in the sockhash and moves the message straight into
 *   the peer socket's receive queue (bpf_msg_redirect_hash with BPF_F_INGRESS).
 *
 * Ordering is the one thing a splice must never break. A receiver in the sockhash
 * reads its redirected queue before its TCP receive queue (tcp_bpf_recvmsg), so a
 * message redirected after an earlier one took the stack could overtake it. Hence
 * the per-socket state only moves one way (nkc_abi.h, enum nkc_sock_state): a socket
 * redirects only while everything it sent so far was redirected. A client that writes
 * before the server's end of the handshake is established (and in the sockhash)
 * therefore sends through the stack for good; a server's end is always in the
 * sockhash before accept() returns it. Data sent in a SYN (TCP Fast Open) also took
 * the stack, so such sockets are not added at all.
 *
 * Fail safe: whatever the programs do not know (no state, a full map, an endpoint
 * gone, a peer not in the sockhash) means the stack.
 */
#include "common.h"
#include "eps.h"

NKC_MAP(nkc_sock_hash, BPF_MAP_TYPE_SOCKHASH, struct nkc_sock_key, __u64, NKC_SOCK_MAX, 0);
NKC_MAP(nkc_sock_state, BPF_MAP_TYPE_HASH, struct nkc_sock_key, __u32, NKC_SOCK_MAX, BPF_F_NO_PREALLOC);
NKC_MAP(nkc_sock_stats, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_sock_stats, NKC_MAX_ENDPOINTS, 0);

static __always_inline void nkc_sock_count(__u32 ifindex, enum nkc_sock_counter which, __u64 n)
{
	struct nkc_sock_stats *c = bpf_map_lookup_elem(&nkc_sock_stats, &ifindex);

	if (!c) {
		struct nkc_sock_stats zero = {};
		bpf_map_update_elem(&nkc_sock_stats, &ifindex, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&nkc_sock_stats, &ifindex);
		if (!c)
			return;
	}
	if (which < NKC_SOCK_CNT_MAX)
		c->v[which] += n;
}

/*
 * The socket's key from the fields sock_ops and sk_msg share (both contexts give
 * remote_port in network order in the upper 16 bits and local_port in host order).
 * An IPv6 socket talking to an IPv4-mapped address is keyed as IPv4, so that both
 * ends agree whatever family each socket was opened with. False: not IP.
 */
static __always_inline int nkc_sock_key_of(struct nkc_sock_key *key, __u32 family, __u32 local_ip4,
					   __u32 remote_ip4, const __u32 *local_ip6, const __u32 *remote_ip6,
					   __u32 local_port, __u32 remote_port)
{
	__builtin_memset(key, 0, sizeof(*key));
	if (family == NKC_AF_INET6 && remote_ip6[0] == 0 && remote_ip6[1] == 0 &&
	    remote_ip6[2] == bpf_htonl(0xffff)) {
		family = NKC_AF_INET;
		local_ip4 = local_ip6[3];
		remote_ip4 = remote_ip6[3];
	}
	if (family == NKC_AF_INET) {
		__builtin_memcpy(key->local, &local_ip4, 4);
		__builtin_memcpy(key->remote, &remote_ip4, 4);
	} else if (family == NKC_AF_INET6) {
		__u32 l[4] = { local_ip6[0], local_ip6[1], local_ip6[2], local_ip6[3] };
		__u32 r[4] = { remote_ip6[0], remote_ip6[1], remote_ip6[2], remote_ip6[3] };
		__builtin_memcpy(key->local, l, 16);
		__builtin_memcpy(key->remote, r, 16);
	} else {
		return 0;
	}
	key->family = family;
	key->local_port = (__u16)local_port;
	key->remote_port = (__u16)(bpf_ntohl(remote_port));
	return 1;
}

static __always_inline void nkc_sock_peer_key(struct nkc_sock_key *peer, const struct nkc_sock_key *key)
{
	__builtin_memcpy(peer->local, key->remote, 16);
	__builtin_memcpy(peer->remote, key->local, 16);
	peer->local_port = key->remote_port;
	peer->remote_port = key->local_port;
	peer->family = key->family;
}

/* The local end's endpoint when both ends are local pods of bypass networks, else NULL. */
static __always_inline struct nkc_endpoint *nkc_sock_endpoints(const struct nkc_sock_key *key)
{
	struct nkc_endpoint *local = nkc_endpoint_lookup(key->family, key->local);
	struct nkc_endpoint *remote;

	if (!local || !(local->flags & NKC_EP_F_SOCK_BYPASS))
		return NULL;
	remote = nkc_endpoint_lookup(key->family, key->remote);
	if (!remote || !(remote->flags & NKC_EP_F_SOCK_BYPASS))
		return NULL;
	return local;
}

static __always_inline void nkc_sock_established(struct bpf_sock_ops *skops)
{
	struct nkc_sock_key key;
	struct nkc_endpoint *ep;
	__u32 state = NKC_SOCK_UNDECIDED;

	if (!nkc_sock_key_of(&key, skops->family, skops->local_ip4, skops->remote_ip4, skops->local_ip6,
			     skops->remote_ip6, skops->local_port, skops->remote_port))
		return;
	ep = nkc_sock_endpoints(&key);
	if (!ep)
		return;
	/* Bytes that crossed the stack before now (TCP Fast Open data in the SYN, a
	 * client's SYN data still unacknowledged) could be overtaken: no bypass. */
	if (skops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB && skops->bytes_received != 0)
		return;
	if (skops->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && skops->snd_nxt != skops->snd_una)
		return;
	/* The state first: a socket in the sockhash without one would only ever take the
	 * stack, but the state must exist before its first message can be redirected. */
	if (bpf_map_update_elem(&nkc_sock_state, &key, &state, BPF_ANY))
		return;
	if (bpf_sock_hash_update(skops, &nkc_sock_hash, &key, BPF_NOEXIST)) {
		bpf_map_delete_elem(&nkc_sock_state, &key);
		return;
	}
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
	nkc_sock_count(ep->host_ifindex, NKC_SOCK_CNT_ADDED, 1);
}

static __always_inline void nkc_sock_closed(struct bpf_sock_ops *skops)
{
	struct nkc_sock_key key;

	if (nkc_sock_key_of(&key, skops->family, skops->local_ip4, skops->remote_ip4, skops->local_ip6,
			    skops->remote_ip6, skops->local_port, skops->remote_port))
		bpf_map_delete_elem(&nkc_sock_state, &key);
}

SEC("sockops")
int nkc_sockops(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		nkc_sock_established(skops);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] == BPF_TCP_CLOSE)
			nkc_sock_closed(skops);
		break;
	}
	return 1;
}

SEC("sk_msg")
int nkc_sk_msg(struct sk_msg_md *msg)
{
	struct nkc_sock_key key, peer;
	struct nkc_endpoint *ep;
	__u32 *state;

	if (!nkc_sock_key_of(&key, msg->family, msg->local_ip4, msg->remote_ip4, msg->local_ip6,
			     msg->remote_ip6, msg->local_port, msg->remote_port))
		return SK_PASS;
	state = bpf_map_lookup_elem(&nkc_sock_state, &key);
	if (!state)
		return SK_PASS;
	/* Checked per message: a pod that is gone (DEL) gets no more redirects. */
	ep = nkc_sock_endpoints(&key);
	if (!ep) {
		*state = NKC_SOCK_STACK;
		return SK_PASS;
	}
	if (*state == NKC_SOCK_STACK) {
		nkc_sock_count(ep->host_ifindex, NKC_SOCK_CNT_PASSED_MSGS, 1);
		return SK_PASS;
	}
	nkc_sock_peer_key(&peer, &key);
	/* SK_PASS: msg->sk_redir is set and the message goes to the peer's ingress queue.
	 * Otherwise (no such peer in the sockhash) nothing is set and it takes the stack. */
	if (bpf_msg_redirect_hash(msg, &nkc_sock_hash, &peer, BPF_F_INGRESS) != SK_PASS) {
		*state = NKC_SOCK_STACK;
		nkc_sock_count(ep->host_ifindex, NKC_SOCK_CNT_PASSED_MSGS, 1);
		return SK_PASS;
	}
	*state = NKC_SOCK_REDIRECT;
	nkc_sock_count(ep->host_ifindex, NKC_SOCK_CNT_REDIRECTED_MSGS, 1);
	nkc_sock_count(ep->host_ifindex, NKC_SOCK_CNT_REDIRECTED_BYTES, msg->size);
	return SK_PASS;
}

char __license[] SEC("license") = "GPL";
