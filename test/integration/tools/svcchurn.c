/*
 * svcchurn HOST PORT COUNT MODE
 *
 * What a busy pod does to a node's Service translation: COUNT fresh sockets, each
 * naming the Service HOST:PORT (IPv4) once and closed again. MODE:
 *   udp-connect   connect(2) a UDP socket (translated at connect, sends nothing), then
 *                 getpeername(2), as a client that checks whom it talks to does
 *   udp-send      sendto(2) one byte from an unconnected UDP socket
 *   tcp-connect   a non-blocking TCP connect, closed before it completes
 * Prints "N translated-or-tried, E failed" and exits 0 when nothing failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	long count, i, failed = 0;
	const char *mode;

	if (argc != 5) {
		fprintf(stderr, "usage: svcchurn HOST PORT COUNT udp-connect|udp-send|tcp-connect\n");
		return 2;
	}
	if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", argv[1]);
		return 2;
	}
	to.sin_port = htons((unsigned short)atoi(argv[2]));
	count = atol(argv[3]);
	mode = argv[4];
	for (i = 0; i < count; i++) {
		int tcp = strcmp(mode, "tcp-connect") == 0;
		int fd = socket(AF_INET, (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK, 0);
		int r;

		if (fd < 0) {
			perror("socket");
			return 1;
		}
		if (strcmp(mode, "udp-send") == 0)
			r = sendto(fd, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)) == 1 ? 0 : -1;
		else
			r = connect(fd, (struct sockaddr *)&to, sizeof(to));
		if (r == 0 && strcmp(mode, "udp-connect") == 0) {
			struct sockaddr_in peer;
			socklen_t len = sizeof(peer);

			r = getpeername(fd, (struct sockaddr *)&peer, &len);
			if (r == 0 && (peer.sin_addr.s_addr != to.sin_addr.s_addr || peer.sin_port != to.sin_port))
				r = -1; /* not shown the Service it named */
		}
		if (r != 0 && !(tcp && errno == EINPROGRESS))
			failed++;
		close(fd);
	}
	printf("%ld tried, %ld failed\n", count, failed);
	return failed == 0 ? 0 : 1;
}
