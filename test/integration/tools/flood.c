/*
 * flood DST[,DST...] TIMES
 *
 * Sends raw IPv4 packets (from the address the route gives) to each DST: a UDP datagram,
 * a TCP SYN and an ICMP echo request from every source port / echo id 1..65535, each
 * one TIMES times in a row (a flow seen again is one a cache keeps). Prints how many
 * packets went out. Batched with sendmmsg(2): millions of packets in seconds, which is
 * what it takes to overflow every flow memory on a node.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 512
#define PKT 48

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v & 0xff; }

/* IPv4 header; the kernel fills in the source address (zero here), the total length
 * and the checksum (raw(7)). */
static size_t build(uint8_t *p, struct in_addr dst, int kind, uint16_t port)
{
	memset(p, 0, PKT);
	p[0] = 0x45;
	put16(p + 6, 0x4000);
	p[8] = 64;
	memcpy(p + 16, &dst, 4);
	uint8_t *l4 = p + 20;
	switch (kind) {
	case 0: /* UDP */
		p[9] = IPPROTO_UDP;
		put16(l4, port);
		put16(l4 + 2, 53);
		put16(l4 + 4, 8);
		return 28;
	case 1: /* TCP SYN */
		p[9] = IPPROTO_TCP;
		put16(l4, port);
		put16(l4 + 2, 80);
		l4[12] = 5 << 4;
		l4[13] = 0x02;
		put16(l4 + 14, 65535);
		return 40;
	default: /* ICMP echo request */
		p[9] = IPPROTO_ICMP;
		l4[0] = 8;
		put16(l4 + 4, port);
		put16(l4 + 6, 1);
		return 28;
	}
}

/* Sends msgs[0..n), waiting out a full socket buffer. Returns 0, or -1 on a real error. */
static int flush(int fd, struct mmsghdr *msgs, int n)
{
	for (int done = 0; done < n;) {
		int r = sendmmsg(fd, msgs + done, n - done, 0);
		if (r < 0 && (errno == ENOBUFS || errno == EAGAIN || errno == EINTR)) {
			nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
			continue;
		}
		if (r < 0) {
			perror("flood: sendmmsg");
			return -1;
		}
		done += r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: flood DST[,DST...] TIMES\n");
		return 2;
	}
	int times = atoi(argv[2]);
	int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
	if (fd < 0) {
		perror("flood: socket");
		return 1;
	}
	static uint8_t bufs[BATCH][PKT];
	static struct iovec iov[BATCH];
	static struct mmsghdr msgs[BATCH];
	static struct sockaddr_in to[BATCH];
	unsigned long long sent = 0;
	int n = 0;
	char *save = NULL;
	for (char *d = strtok_r(argv[1], ",", &save); d; d = strtok_r(NULL, ",", &save)) {
		struct in_addr dst;
		if (inet_pton(AF_INET, d, &dst) != 1) {
			fprintf(stderr, "flood: bad destination %s\n", d);
			return 2;
		}
		for (int port = 1; port <= 65535; port++) {
			for (int kind = 0; kind < 3; kind++) {
				for (int t = 0; t < times; t++) {
					iov[n].iov_base = bufs[n];
					iov[n].iov_len = build(bufs[n], dst, kind, (uint16_t)port);
					to[n] = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr = dst };
					msgs[n].msg_hdr = (struct msghdr){ .msg_name = &to[n], .msg_namelen = sizeof(to[n]),
									  .msg_iov = &iov[n], .msg_iovlen = 1 };
					if (++n < BATCH)
						continue;
					if (flush(fd, msgs, n))
						return 1;
					sent += n;
					n = 0;
				}
			}
		}
	}
	if (flush(fd, msgs, n))
		return 1;
	sent += n;
	printf("%llu\n", sent);
	return 0;
}
