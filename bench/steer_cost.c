/*
 * steer_cost: what it costs to hand each RoCEv2 datagram of one UDP port
 * to the process that owns its destination QP, when several processes of a
 * host share one address (docs/host-identity.md, where the figures are).
 *
 *   steer_cost one     N   one socket, one receiving thread (the baseline)
 *   steer_cost group   N   two sockets in a SO_REUSEPORT group on one port,
 *                          a classic BPF program choosing the socket from the
 *                          BTH destination QPN (its top byte, modulo 2); every
 *                          datagram is checked to arrive at the socket its QPN
 *                          names
 *   steer_cost forward N   one socket; the datagrams of the other QPN range
 *                          are copied into a ring in shared memory and taken
 *                          out by a second process (a socket owner that
 *                          forwards, FreeFlow's router or Socksdirect's
 *                          monitor in miniature)
 *   steer_cost leave       a group of three; the first member leaves: which
 *                          socket takes the QPNs the program still maps to
 *                          index 0 and 2 (the kernel moves the last member
 *                          into the hole)
 *
 * A sender thread sends N datagrams of 64 bytes (a BTH and an 8-byte SEND
 * payload: what matters is the per-datagram cost) in sendmmsg batches of 32
 * to 127.0.0.1, the QPN's top byte alternating 0 and 1. Prints one line:
 * "RESULT steer_cost MODE rx_mpps=X ns_per_pkt=Y misdelivered=Z lost=W",
 * ns_per_pkt being the receivers' CPU time (user + system) per datagram.
 * Loopback only; every wait is bounded (2 s without a datagram ends a run).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PKT 64
#define BATCH 32
#define IDLE_NS 2000000000ull

static uint16_t port;

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t cpu_ns(int who)
{
	struct rusage r;

	getrusage(who, &r);
	return (uint64_t)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000000ull +
	       (uint64_t)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1000ull;
}

static struct sockaddr_in loopback(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* A receiving socket on 127.0.0.1:port, in the reuseport group if group. */
static int rx_socket(int group)
{
	struct sockaddr_in a = loopback();
	int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1, buf = 8 << 20;
	struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };

	if (fd < 0)
		return -1;
	if (group)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The steering program: socket index = BTH byte 5 (the QPN's top byte)
 * modulo n. The program sees the UDP payload from offset 0; an index past
 * the group's size makes the kernel fall back to its hash. */
static int attach_steering(int fd, uint32_t n)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 5),
		BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, n),
		BPF_STMT(BPF_RET | BPF_A, 0),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };

	return setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog));
}

struct sender {
	uint64_t n;
	uint8_t slots; /* QPN top bytes 0 .. slots-1, in turn */
};

static void *send_main(void *arg)
{
	struct sender *s = arg;
	struct sockaddr_in a = loopback();
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	uint8_t pkts[BATCH][PKT];
	struct iovec iov[BATCH];
	struct mmsghdr m[BATCH];

	memset(pkts, 0, sizeof(pkts));
	for (int i = 0; i < BATCH; i++) {
		pkts[i][0] = 0x04; /* RC SEND_ONLY */
		pkts[i][5] = (uint8_t)(i % s->slots);
		pkts[i][7] = (uint8_t)i;
		iov[i] = (struct iovec){ .iov_base = pkts[i], .iov_len = PKT };
		m[i] = (struct mmsghdr){ .msg_hdr = { .msg_name = &a, .msg_namelen = sizeof(a),
						      .msg_iov = &iov[i], .msg_iovlen = 1 } };
	}
	for (uint64_t sent = 0; sent < s->n;) {
		unsigned k = s->n - sent < BATCH ? (unsigned)(s->n - sent) : BATCH;
		int r = sendmmsg(fd, m, k, 0);
		if (r > 0)
			sent += (uint64_t)r;
		else if (errno != EAGAIN && errno != ENOBUFS)
			break;
		/* the receivers are the subject: do not overrun their buffers */
		if (!(sent % 4096))
			usleep(200);
	}
	close(fd);
	return NULL;
}

struct receiver {
	int fd;
	int slot;                 /* the QPN top byte this socket should get; -1: any */
	uint64_t got, wrong, cpu;
	struct ring *fwd;         /* forward: the other slot's datagrams go here */
};

/* A single-producer single-consumer ring in shared memory: head and tail
 * indices, release/acquire ordering, fixed-size slots. */
#define RING_SLOTS 4096
struct ring {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic int done;
	uint8_t slot[RING_SLOTS][PKT];
};

static void ring_put(struct ring *r, const uint8_t *p)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t until = now_ns() + IDLE_NS;

	while (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING_SLOTS)
		if (now_ns() > until)
			return; /* the consumer is gone: the datagram is lost */
	memcpy(r->slot[h % RING_SLOTS], p, PKT);
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

static void *recv_main(void *arg)
{
	struct receiver *r = arg;
	uint8_t bufs[BATCH][2048];
	struct iovec iov[BATCH];
	struct mmsghdr m[BATCH];
	uint64_t c0 = cpu_ns(RUSAGE_THREAD), last = now_ns();

	for (int i = 0; i < BATCH; i++) {
		iov[i] = (struct iovec){ .iov_base = bufs[i], .iov_len = sizeof(bufs[i]) };
		m[i] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[i], .msg_iovlen = 1 } };
	}
	while (now_ns() - last < IDLE_NS) {
		int n = recvmmsg(r->fd, m, BATCH, 0, NULL);
		if (n <= 0)
			continue;
		last = now_ns();
		for (int i = 0; i < n; i++) {
			int slot = bufs[i][5];
			if (r->fwd && slot != r->slot) {
				ring_put(r->fwd, bufs[i]);
				continue;
			}
			r->got++;
			r->wrong += r->slot >= 0 && slot != r->slot;
		}
	}
	r->cpu = cpu_ns(RUSAGE_THREAD) - c0;
	return NULL;
}

static void report(const char *mode, uint64_t n, uint64_t got, uint64_t wrong, uint64_t cpu,
		   uint64_t wall)
{
	printf("RESULT steer_cost %s rx_mpps=%.3f ns_per_pkt=%.0f misdelivered=%llu lost=%llu\n",
	       mode, wall ? (double)got * 1e3 / (double)wall : 0, got ? (double)cpu / (double)got : 0,
	       (unsigned long long)wrong, (unsigned long long)(n - got));
}

/* Receivers in threads; the wall time runs from the first to the last
 * datagram (the 2 s idle tail is not counted). */
static int run_threads(const char *mode, uint64_t n, struct receiver *rx, int nrx)
{
	struct sender s = { .n = n, .slots = 2 };
	pthread_t st, rt[4];
	uint64_t t0 = now_ns(), got = 0, wrong = 0, cpu = 0;

	for (int i = 0; i < nrx; i++)
		pthread_create(&rt[i], NULL, recv_main, &rx[i]);
	pthread_create(&st, NULL, send_main, &s);
	pthread_join(st, NULL);
	for (int i = 0; i < nrx; i++) {
		pthread_join(rt[i], NULL);
		got += rx[i].got;
		wrong += rx[i].wrong;
		cpu += rx[i].cpu;
	}
	report(mode, n, got, wrong, cpu, now_ns() - t0 - IDLE_NS);
	return 0;
}

static int mode_group(uint64_t n)
{
	struct receiver rx[2];

	for (int i = 0; i < 2; i++) {
		rx[i] = (struct receiver){ .fd = rx_socket(1), .slot = i };
		if (rx[i].fd < 0) {
			perror("bind");
			return 1;
		}
	}
	/* one member attaches the program for the whole group */
	if (attach_steering(rx[0].fd, 2)) {
		perror("SO_ATTACH_REUSEPORT_CBPF");
		return 1;
	}
	return run_threads("group", n, rx, 2);
}

static int mode_forward(uint64_t n)
{
	struct ring *ring = mmap(NULL, sizeof(*ring), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct receiver owner = { .fd = rx_socket(0), .slot = 0, .fwd = ring };
	struct sender s = { .n = n, .slots = 2 };
	uint64_t *shared, t0, wall;
	pthread_t st, rt;
	pid_t child;
	int status;

	/* the peer's counts come back through this page */
	shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ring == MAP_FAILED || shared == MAP_FAILED || owner.fd < 0) {
		perror("forward setup");
		return 1;
	}
	child = fork();
	if (child == 0) {
		/* the other process: takes its datagrams out of the ring */
		uint64_t c0 = cpu_ns(RUSAGE_SELF), got = 0, wrong = 0, last = now_ns();
		uint8_t copy[PKT];
		while (now_ns() - last < IDLE_NS) {
			uint64_t t = atomic_load_explicit(&ring->tail, memory_order_relaxed);
			if (t == atomic_load_explicit(&ring->head, memory_order_acquire))
				continue;
			memcpy(copy, ring->slot[t % RING_SLOTS], PKT);
			atomic_store_explicit(&ring->tail, t + 1, memory_order_release);
			got++;
			wrong += copy[5] != 1;
			last = now_ns();
		}
		shared[0] = got;
		shared[1] = wrong;
		shared[2] = cpu_ns(RUSAGE_SELF) - c0;
		_exit(0);
	}
	t0 = now_ns();
	pthread_create(&rt, NULL, recv_main, &owner);
	pthread_create(&st, NULL, send_main, &s);
	pthread_join(st, NULL);
	pthread_join(rt, NULL);
	wall = now_ns() - t0 - IDLE_NS;
	waitpid(child, &status, 0);
	/* the consumer spins while it waits: its CPU is the ring's cost only in
	 * part, so the owner's CPU per datagram is reported, and both */
	report("forward", n, owner.got + shared[0], owner.wrong + shared[1], owner.cpu, wall);
	printf("  owner %llu datagrams (cpu %.0f ns each over all it read), peer %llu via the ring\n",
	       (unsigned long long)owner.got,
	       (double)owner.cpu / (double)(owner.got + shared[0] ? owner.got + shared[0] : 1),
	       (unsigned long long)shared[0]);
	return 0;
}

/* Which member takes which index once the first one left. */
static int mode_leave(void)
{
	int fd[3];
	struct sender s = { .n = 300, .slots = 3 };
	pthread_t st;
	uint8_t b[2048];

	for (int i = 0; i < 3; i++)
		if ((fd[i] = rx_socket(1)) < 0) {
			perror("bind");
			return 1;
		}
	if (attach_steering(fd[0], 3)) {
		perror("SO_ATTACH_REUSEPORT_CBPF");
		return 1;
	}
	close(fd[0]);
	pthread_create(&st, NULL, send_main, &s);
	pthread_join(st, NULL);
	for (int i = 1; i < 3; i++) {
		int seen[3] = { 0 };
		ssize_t r;
		while ((r = recv(fd[i], b, sizeof(b), MSG_DONTWAIT)) > 0)
			seen[b[5] % 3]++;
		printf("  joined %d-th: QPN slots 0/1/2: %d %d %d\n", i + 1, seen[0], seen[1], seen[2]);
	}
	printf("RESULT steer_cost leave done\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "one";
	uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 0) : 1000000;

	port = (uint16_t)(20000 + getpid() % 20000);
	if (!strcmp(mode, "one")) {
		struct receiver rx = { .fd = rx_socket(0), .slot = -1 };
		if (rx.fd < 0) {
			perror("bind");
			return 1;
		}
		return run_threads("one", n, &rx, 1);
	}
	if (!strcmp(mode, "group"))
		return mode_group(n);
	if (!strcmp(mode, "forward"))
		return mode_forward(n);
	if (!strcmp(mode, "leave"))
		return mode_leave();
	fprintf(stderr, "usage: steer_cost one|group|forward N | leave\n");
	return 2;
}
