/*
 * The same-node socket bypass ("sockBypass": true): TCP between two local pods
 * spliced at the socket layer, skipping the TCP/IP stack and the device pair.
 *
 * nkc_sockops - sock_ops on a cgroup v2 (the node's root by default). When a TCP
 *   connection is established and both of its addresses are local pods whose
 *   network asked for the bypass (NKC_EP_F_SOCK_BYPASS in nkc_endpoints), and the
 *   socket lives in the network namespace its local address's pod was given at ADD,
 *   the socket is admitted: it goes into nkc_sock_hash, with its state in
 *   nkc_sock_admitted. Anything else (a Service VIP before DNAT, a hostPort, the
 *   node, a host process, a namespace that gave itself a pod's address, a socket
 *   established before this program was attached) is never added, so it keeps the
 *   packet path.
 *
 * nkc_sk_msg - sk_msg verdict on nkc_sock_hash: runs on every sendmsg, sendfile
 *   and splice of a socket in the sockhash and moves the message straight into
 *   the peer socket's receive queue (bpf_msg_redirect_hash with BPF_F_INGRESS).
 *
 * nkc_sock_release - cgroup sock_release on the same cgroup: when a process closes
 *   an admitted socket (the moment it leaves the sockhash), its state goes and its
 *   pod's count drops.
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
 * Namespaces, not addresses: a pod's address proves nothing at the socket layer, where
 * any namespace (an unprivileged user namespace is enough) can give itself every pod's
 * address and hold their ports. A socket is admitted only when bpf_get_netns_cookie()
 * (sock_ops and sk_msg have it since Linux 5.15) equals the cookie ADD recorded for the
 * pod of its local address in nkc_sock_pods; the peer socket was admitted under the same
 * check for its own address, and sk_msg redirects only into a peer whose admission
 * recorded the cookie its pod still has, and only while the sender's own namespace is
 * still its pod's. A pod with no recorded namespace is never admitted.
 *
 * Nothing is taken from a socket the programs did not admit: state is created with
 * BPF_NOEXIST, a socket whose key is taken gets no bypass, and only the socket that owns
 * a state (by socket cookie) removes it. Each pod holds at most NKC_SOCK_PER_POD sockets
 * in the sockhash, counted from admission to release; past that its sockets take the
 * stack. A socket leaves the sockhash when its process closes it, not at TCP_CLOSE (a
 * reset socket still held by its process stays), hence the release hook. The kernel
 * also drops an established socket no process ever accepted when its listener closes,
 * without a release: that socket stays counted until its pod's DEL, which only costs the
 * pod its own bypass sooner.
 *
 * Fail safe: whatever the programs do not know (no state, no recorded namespace, a full
 * map, an endpoint gone, a peer not in the sockhash) means the stack.
 */
#include "common.h"
#include "eps.h"

NKC_MAP(nkc_sock_hash, BPF_MAP_TYPE_SOCKHASH, struct nkc_sock_key, __u64, NKC_SOCK_MAX, 0);
NKC_MAP(nkc_sock_stats, BPF_MAP_TYPE_PERCPU_HASH, __u32, struct nkc_sock_stats, NKC_MAX_ENDPOINTS, 0);
NKC_MAP(nkc_sock_pods, BPF_MAP_TYPE_HASH, __u32, struct nkc_sock_pod, NKC_MAX_ENDPOINTS, 0);
/* Preallocated (about 8 and 7 MB): admissions run in softirq, where a map without
 * preallocation takes its elements from per-CPU caches that are refilled afterwards (irq
 * work); a burst of connections found them empty and its sockets silently went without
 * the bypass (seen in the UML guest: half of 4200 sockets opened one after another). */
NKC_MAP(nkc_sock_admitted, BPF_MAP_TYPE_HASH, struct nkc_sock_key, struct nkc_sock_admitted, NKC_SOCK_MAX, 0);
NKC_MAP(nkc_sock_cookies, BPF_MAP_TYPE_HASH, __u64, struct nkc_sock_key, NKC_SOCK_MAX, 0);

/* The pod's counters on this CPU, made on first use; NULL when the map is full. */
static __always_inline struct nkc_sock_stats *nkc_sock_stats_of(__u32 ifindex)
{
	struct nkc_sock_stats *c = bpf_map_lookup_elem(&nkc_sock_stats, &ifindex);

	if (!c) {
		struct nkc_sock_stats zero = {};
		bpf_map_update_elem(&nkc_sock_stats, &ifindex, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&nkc_sock_stats, &ifindex);
	}
	return c;
}

static __always_inline void nkc_sock_count(__u32 ifindex, enum nkc_sock_counter which, __u64 n)
{
	struct nkc_sock_stats *c = nkc_sock_stats_of(ifindex);

	if (c && which < NKC_SOCK_CNT_MAX)
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

/* The endpoint of a local pod of a bypass network at `addr`, else NULL. */
static __always_inline struct nkc_endpoint *nkc_sock_endpoint(__u32 family, const __u8 *addr)
{
	struct nkc_endpoint *ep = nkc_endpoint_lookup(family, addr);

	return ep && (ep->flags & NKC_EP_F_SOCK_BYPASS) ? ep : NULL;
}

/* True while the pod that holds `ifindex` is the one in `netns_cookie`: DEL deletes the
 * record, and a pod added since on the same ifindex has another namespace. */
static __always_inline int nkc_sock_pod_is(__u32 ifindex, __u64 netns_cookie)
{
	struct nkc_sock_pod *pod = bpf_map_lookup_elem(&nkc_sock_pods, &ifindex);

	return pod && pod->netns_cookie == netns_cookie;
}

/* Takes back what an admission created before it was refused: only its own entries. */
static __always_inline void nkc_sock_unadmit(const struct nkc_sock_key *key, __u64 socket_cookie)
{
	bpf_map_delete_elem(&nkc_sock_cookies, &socket_cookie);
	bpf_map_delete_elem(&nkc_sock_admitted, key);
}

static __always_inline void nkc_sock_established(struct bpf_sock_ops *skops)
{
	struct nkc_sock_key key;
	struct nkc_endpoint *local, *remote;
	struct nkc_sock_pod *pod;
	struct nkc_sock_admitted admitted = { .state = NKC_SOCK_UNDECIDED };
	__u32 ifindex;

	if (!nkc_sock_key_of(&key, skops->family, skops->local_ip4, skops->remote_ip4, skops->local_ip6,
			     skops->remote_ip6, skops->local_port, skops->remote_port))
		return;
	local = nkc_sock_endpoint(key.family, key.local);
	remote = nkc_sock_endpoint(key.family, key.remote);
	if (!local || !remote)
		return;
	/* Bytes that crossed the stack before now (TCP Fast Open data in the SYN, a
	 * client's SYN data still unacknowledged) could be overtaken: no bypass. */
	if (skops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB && skops->bytes_received != 0)
		return;
	if (skops->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && skops->snd_nxt != skops->snd_una)
		return;
	ifindex = local->host_ifindex;
	pod = bpf_map_lookup_elem(&nkc_sock_pods, &ifindex);
	if (!pod)
		return;
	admitted.netns_cookie = bpf_get_netns_cookie(skops);
	if (pod->netns_cookie != admitted.netns_cookie) {
		__sync_fetch_and_add(&pod->refused_netns, 1);
		return;
	}
	/* The peer's pod must be able to admit its end (checked against its own namespace
	 * when that end is established); without a record it never will. */
	ifindex = remote->host_ifindex;
	if (!bpf_map_lookup_elem(&nkc_sock_pods, &ifindex))
		return;
	admitted.socket_cookie = bpf_get_socket_cookie(skops);
	admitted.host_ifindex = local->host_ifindex;
	/* The state first, and only if the key is free: a socket in the sockhash without one
	 * would only ever take the stack, but the state must exist before its first message
	 * can be redirected. A taken key (another socket, or this one admitted already by the
	 * same program on an ancestor cgroup) is left alone. */
	if (bpf_map_update_elem(&nkc_sock_admitted, &key, &admitted, BPF_NOEXIST))
		return;
	if (bpf_map_update_elem(&nkc_sock_cookies, &admitted.socket_cookie, &key, BPF_NOEXIST)) {
		bpf_map_delete_elem(&nkc_sock_admitted, &key);
		return;
	}
	if (__sync_fetch_and_add(&pod->sockets, 1) >= NKC_SOCK_PER_POD) {
		__sync_fetch_and_sub(&pod->sockets, 1);
		__sync_fetch_and_add(&pod->refused_bound, 1);
		nkc_sock_unadmit(&key, admitted.socket_cookie);
		return;
	}
	if (bpf_sock_hash_update(skops, &nkc_sock_hash, &key, BPF_NOEXIST)) {
		__sync_fetch_and_sub(&pod->sockets, 1);
		nkc_sock_unadmit(&key, admitted.socket_cookie);
		return;
	}
	nkc_sock_count(admitted.host_ifindex, NKC_SOCK_CNT_ADDED, 1);
}

SEC("sockops")
int nkc_sockops(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		nkc_sock_established(skops);
		break;
	}
	return 1;
}

SEC("sk_msg")
int nkc_sk_msg(struct sk_msg_md *msg)
{
	struct nkc_sock_key key, peer_key;
	struct nkc_sock_admitted *self, *peer;
	struct nkc_sock_stats *c;
	__u32 ifindex;

	if (!nkc_sock_key_of(&key, msg->family, msg->local_ip4, msg->remote_ip4, msg->local_ip6,
			     msg->remote_ip6, msg->local_port, msg->remote_port))
		return SK_PASS;
	self = bpf_map_lookup_elem(&nkc_sock_admitted, &key);
	if (!self)
		return SK_PASS;
	ifindex = self->host_ifindex;
	/* Checked per message, against the record rather than the endpoint map: a pod that
	 * is gone (DEL deletes its record before its sockets), or one whose ifindex another
	 * pod holds now, gets no more redirects, nor does a socket of another namespace. */
	if (!nkc_sock_pod_is(ifindex, bpf_get_netns_cookie(msg))) {
		self->state = NKC_SOCK_STACK;
		return SK_PASS;
	}
	if (self->state == NKC_SOCK_STACK) {
		nkc_sock_count(ifindex, NKC_SOCK_CNT_PASSED_MSGS, 1);
		return SK_PASS;
	}
	/* Only into a peer admitted from the namespace its pod still has. */
	nkc_sock_peer_key(&peer_key, &key);
	peer = bpf_map_lookup_elem(&nkc_sock_admitted, &peer_key);
	if (!peer || !nkc_sock_pod_is(peer->host_ifindex, peer->netns_cookie)) {
		self->state = NKC_SOCK_STACK;
		nkc_sock_count(ifindex, NKC_SOCK_CNT_PASSED_MSGS, 1);
		return SK_PASS;
	}
	/* SK_PASS: msg->sk_redir is set and the message goes to the peer's ingress queue.
	 * Otherwise (no such peer in the sockhash) nothing is set and it takes the stack. */
	if (bpf_msg_redirect_hash(msg, &nkc_sock_hash, &peer_key, BPF_F_INGRESS) != SK_PASS) {
		self->state = NKC_SOCK_STACK;
		nkc_sock_count(ifindex, NKC_SOCK_CNT_PASSED_MSGS, 1);
		return SK_PASS;
	}
	self->state = NKC_SOCK_REDIRECT;
	c = nkc_sock_stats_of(ifindex);
	if (c) {
		c->v[NKC_SOCK_CNT_REDIRECTED_MSGS] += 1;
		c->v[NKC_SOCK_CNT_REDIRECTED_BYTES] += msg->size;
	}
	return SK_PASS;
}

/*
 * Runs in close() before the socket leaves the sockhash (inet_release, then the
 * sockhash's close). This hook may not read a socket's local address, so the socket
 * cookie leads to its key. Only the socket that owns the state removes it, and its pod's
 * count drops only while that pod (the same namespace) still holds the ifindex.
 */
SEC("cgroup/sock_release")
int nkc_sock_release(struct bpf_sock *sk)
{
	__u64 socket_cookie;
	struct nkc_sock_key *found, key;
	struct nkc_sock_admitted *admitted;
	struct nkc_sock_pod *pod;
	__u32 ifindex;

	if (sk->protocol != IPPROTO_TCP)
		return 1;
	socket_cookie = bpf_get_socket_cookie(sk);
	found = bpf_map_lookup_elem(&nkc_sock_cookies, &socket_cookie);
	if (!found)
		return 1;
	key = *found;
	admitted = bpf_map_lookup_elem(&nkc_sock_admitted, &key);
	if (admitted && admitted->socket_cookie == socket_cookie) {
		ifindex = admitted->host_ifindex;
		pod = bpf_map_lookup_elem(&nkc_sock_pods, &ifindex);
		if (pod && pod->netns_cookie == admitted->netns_cookie && pod->sockets > 0)
			__sync_fetch_and_sub(&pod->sockets, 1);
		bpf_map_delete_elem(&nkc_sock_admitted, &key);
	}
	bpf_map_delete_elem(&nkc_sock_cookies, &socket_cookie);
	return 1;
}

char __license[] SEC("license") = "GPL";
