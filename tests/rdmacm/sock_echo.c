/*
 * sock_echo: a plain TCP echo over the socket API, nothing RDMA in it, for
 * running under Debian's librspreload.so (which turns its sockets into
 * rsockets) through urvt-run.
 *
 *   sock_echo -s ADDR PORT   serve one client: echo until it shuts down
 *   sock_echo -c ADDR PORT   send 1 B .. 4 MiB patterns, read each back,
 *                            compare; then SHUT_WR and expect EOF
 *
 * The client also polls for the echo before reading, and checks
 * getpeername. Exit status 0 and "sock_echo: OK" when all matched.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "sock_echo: %s: %s\n", what, strerror(errno));
	return 1;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t r = write(fd, p, n);

		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int serve(const struct sockaddr_in *a)
{
	static unsigned char buf[65536];
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), c;
	ssize_t n;

	if (l < 0)
		return fail("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (const struct sockaddr *)a, sizeof(*a)))
		return fail("bind");
	if (listen(l, 4))
		return fail("listen");
	c = accept(l, NULL, NULL);
	if (c < 0)
		return fail("accept");
	while ((n = read(c, buf, sizeof(buf))) > 0)
		if (write_all(c, buf, (size_t)n))
			return fail("write");
	if (n < 0)
		return fail("read");
	close(c);
	close(l);
	printf("sock_echo: server done\n");
	return 0;
}

static int client(const struct sockaddr_in *a)
{
	static const size_t sizes[] = { 1, 100, 4096, 65536, 1 << 20, 4 << 20 };
	unsigned char *out = malloc(4 << 20), *in = malloc(4 << 20);
	struct sockaddr_in peer;
	socklen_t plen = sizeof(peer);
	size_t total = 0;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	char rest;

	if (s < 0 || !out || !in)
		return fail("socket");
	for (int tries = 0; connect(s, (const struct sockaddr *)a, sizeof(*a)); tries++) {
		/* the server may not listen yet */
		if (tries == 20)
			return fail("connect");
		usleep(100000);
		close(s);
		s = socket(AF_INET, SOCK_STREAM, 0);
	}
	if (getpeername(s, (struct sockaddr *)&peer, &plen) ||
	    peer.sin_addr.s_addr != a->sin_addr.s_addr || peer.sin_port != a->sin_port) {
		fprintf(stderr, "sock_echo: getpeername does not name the server\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		struct pollfd p = { .fd = s, .events = POLLIN };

		for (size_t k = 0; k < n; k++)
			out[k] = (unsigned char)(k * 7 + i);
		/* the echo of a big write comes back while we still write:
		 * write in chunks, reading what came back in between */
		for (size_t done = 0, got = 0; got < n;) {
			if (done < n) {
				size_t chunk = n - done < 65536 ? n - done : 65536;

				if (write_all(s, out + done, chunk))
					return fail("write");
				done += chunk;
			}
			if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLIN)) {
				fprintf(stderr, "sock_echo: no echo within 10 s\n");
				return 1;
			}
			while (got < done) {
				ssize_t r = read(s, in + got, done - got);

				if (r <= 0)
					return fail("read");
				got += (size_t)r;
			}
		}
		if (memcmp(in, out, n)) {
			fprintf(stderr, "sock_echo: %zu bytes came back different\n", n);
			return 1;
		}
		total += n;
	}
	if (shutdown(s, SHUT_WR))
		return fail("shutdown");
	if (read(s, &rest, 1) != 0) {
		fprintf(stderr, "sock_echo: no EOF after the server closed\n");
		return 1;
	}
	close(s);
	printf("sock_echo: OK %zu bytes echoed\n", total);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };

	if (argc != 4 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c")) ||
	    inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: sock_echo -s|-c ADDR PORT\n");
		return 2;
	}
	a.sin_port = htons((uint16_t)atoi(argv[3]));
	return argv[1][1] == 's' ? serve(&a) : client(&a);
}
