// SPDX-License-Identifier: MIT
/*
 * machine_limits: what this machine can do at all, measured in the same run
 * as the transports (bench/run), on 127.0.0.0/8 only.
 *
 *   machine_limits memcpy SIZE SECONDS
 *       single-core memcpy of SIZE bytes between two buffers: GB/s
 *   machine_limits udp-pps PAYLOAD SECONDS [gso]
 *       UDP datagrams of PAYLOAD bytes from a sender process (CPU 1) to a
 *       receiver process (CPU 0) over 127.x: received packets/s and GB/s;
 *       the receiver busy-polls (recvmmsg MSG_DONTWAIT), as urvt's pollers do.
 *       Plain: sendmmsg/recvmmsg of 32 datagrams per call (what urvt does).
 *       gso: the sender hands the kernel 64 KiB super-datagrams cut into
 *       PAYLOAD-byte segments (UDP_SEGMENT) and the receiver takes them
 *       back coalesced (UDP_GRO): the per-packet kernel cost urvt could save.
 *   machine_limits udp-stream PAYLOAD SECONDS [copy|crc] [--ns-tx NAME]
 *                  [--ns-rx NAME] [--dst ADDR] [--segs N[,N...]]
 *       the floor of a RoCEv2 stream over UDP (issue 34, the two-namespace
 *       rows): a sender process (CPU 1) hands the kernel GSO super-datagrams
 *       (UDP_SEGMENT) of PAYLOAD-byte segments, a receiver process (CPU 0)
 *       takes them back coalesced (UDP_GRO), busy-polling recvmmsg
 *       (MSG_DONTWAIT). --ns-rx / --ns-tx: the receiver / sender enter the
 *       network namespace /run/netns/NAME (setns) before making its socket;
 *       --dst: the receiver's address, in its namespace (default 127.233.0.1;
 *       the sender binds 127.233.0.2, or the wildcard address in a namespace).
 *       Each segment is a RoCE packet: 12 B BTH + data + 4 B ICRC, so
 *       PAYLOAD = 1040 is an RC WRITE middle packet at RoCE MTU 1024.
 *       Without copy/crc the segments are sent as they are (the kernel alone).
 *       --segs: segments per send, these counts in turn, instead of as many
 *       as one send holds (62 of 1040 B): "62,2" is the pattern of an RC
 *       WRITE of 64 KiB at RoCE MTU 1024 (its first packet, 16 B longer
 *       with the RETH, cannot share a send with the middle ones: only a
 *       send's last segment may differ).
 *       crc: the sender builds every segment as a RoCE sender builds a packet
 *       from an MR: the BTH, then one fused copy + CRC pass (urvt_crc32_copy)
 *       of the data out of a 1 MiB source buffer, the CRC stored as the ICRC;
 *       the receiver makes one fused copy + CRC pass per segment out of the
 *       GRO buffer into a 1 MiB destination buffer and checks the ICRC.
 *       copy: the same copies with memcpy, no CRC.
 *       Over a veth the super-datagram crosses whole (the receiving veth
 *       counts one packet per super-datagram), so the veth's MTU does not
 *       enter: the segments' size does (per-segment CRC, copy, GRO count).
 *       Prints Mpps (segments), gbytes_per_s = GB/s of RDMA data
 *       (PAYLOAD - 16 B per segment), udp_gbytes_per_s = GB/s of UDP
 *       payload, segs_per_recv (how much GRO coalesced), bad = segments
 *       whose ICRC did not match (exit 1 if any).
 *   machine_limits udp-rtt PAYLOAD ITERS
 *       UDP ping-pong between two processes (CPU 0, CPU 1), both
 *       busy-polling with MSG_DONTWAIT: RTT/2 in microseconds (the floor
 *       for a one-way small-message latency over UDP on this machine).
 *   machine_limits wake-rtt ITERS
 *       ping-pong between two processes that sleep: each blocks in
 *       epoll_wait on an eventfd the other writes; both on CPU 0, then on
 *       CPUs 0 and 1: RTT/2 in microseconds, the better one and both (the
 *       floor for one wake-up per message: what an event-driven receiver
 *       pays at least, TCP's blocking reader included).
 *   machine_limits line-rtt ITERS
 *       ping-pong of one cache line between two processes (CPUs 0 and 1)
 *       through a shared mapping, both spinning on it: each stores the next
 *       count, the other waits to see it and stores the one after. RTT/2
 *       in microseconds: the floor of a one-way message through shared
 *       memory on this machine, what any same-host transport's record or
 *       fragment pays to reach the other CPU (the MPI 8 B row).
 *   machine_limits cma SIZE SECONDS [WINDOW]
 *       single-copy bandwidth between two processes (CPUs 0 and 1): one
 *       process reads SIZE bytes out of the other's malloc'd buffer into
 *       its own with process_vm_readv (cross-memory attach, what Open MPI's
 *       vader and UCX's cma use for large messages), as one call and as
 *       calls of 64 KiB and 128 KiB: GB/s of each; then split, the other
 *       process writing the second half into this one's buffer
 *       (process_vm_writev) while this one reads the first, as urvt's READs
 *       by reference do (docs/shm.md "Single copy"); and the best (the
 *       most a single-copy transport moves with one or two cores; a
 *       transport that copies twice moves each byte through memcpy once
 *       on each side). WINDOW messages of SIZE bytes each (default 1)
 *       lie one after the other in each process, as bench/mpi_pingbw's 16
 *       buffers do: the copies then work on WINDOW times the bytes, which
 *       the caches may not hold. whole_min and whole_max: the slowest and
 *       fastest of the one-call rate's 20 ms slices (the host's own
 *       spread within a run).
 *
 * Prints one line: RESULT <what> key=value ...
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wire/crc32.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define BATCH 32
#define RCV_ADDR "127.233.0.1"
#define SND_ADDR "127.233.0.2"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("sched_setaffinity (continuing unpinned)");
}

/* A UDP socket bound to addr:0 (ephemeral port), big buffers. */
static int udp_socket(const char *addr, struct sockaddr_in *sin)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0), sz = 8 << 20;
	socklen_t len = sizeof(*sin);

	if (fd < 0)
		die("socket");
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, addr, &sin->sin_addr);
	if (bind(fd, (struct sockaddr *)sin, sizeof(*sin)))
		die("bind");
	if (getsockname(fd, (struct sockaddr *)sin, &len))
		die("getsockname");
	/* SO_*BUFFORCE works as root; fall back to the capped variant */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	return fd;
}

static int do_memcpy(size_t size, double secs)
{
	uint8_t *a = aligned_alloc(4096, size), *b = aligned_alloc(4096, size);
	uint64_t n = 0;
	double t0, t;

	if (!a || !b)
		die("aligned_alloc");
	memset(a, 1, size);
	memset(b, 2, size);
	t0 = now_s();
	do {
		for (int i = 0; i < 16; i++) {
			memcpy((n & 1) ? a : b, (n & 1) ? b : a, size);
			__asm__ volatile("" ::: "memory");
			n++;
		}
		t = now_s();
	} while (t - t0 < secs);
	printf("RESULT memcpy size=%zu gbytes_per_s=%.3f\n", size,
	       (double)n * (double)size / (t - t0) / 1e9);
	free(a);
	free(b);
	return 0;
}

/* The receiver's UDP_GRO: a GSO sender's super-datagrams arrive whole. */
static void gro_on(int fd)
{
	int on = 1;

	if (setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof(on)))
		die("setsockopt UDP_GRO");
}

/* A child process (0 in it); dies if there is none. */
static pid_t fork_or_die(void)
{
	pid_t child = fork();

	if (child < 0)
		die("fork");
	return child;
}

/* Receive buffers of the two stream receivers: BATCH datagrams of up to
 * 64 KiB (GRO) and room for UDP_GRO's segment size. */
struct rx_bufs {
	uint8_t buf[BATCH][65536];
	char cbuf[BATCH][CMSG_SPACE(sizeof(int))];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
};

/* One busy-polling recvmmsg into b, each buffer offered len bytes (no
 * wakeups to pay for on the sender's side): the datagrams read. */
static int rx_poll(int fd, struct rx_bufs *b, size_t len)
{
	memset(b->msgs, 0, sizeof(b->msgs));
	for (int i = 0; i < BATCH; i++) {
		b->iov[i].iov_base = b->buf[i];
		b->iov[i].iov_len = len;
		b->msgs[i].msg_hdr.msg_iov = &b->iov[i];
		b->msgs[i].msg_hdr.msg_iovlen = 1;
		b->msgs[i].msg_hdr.msg_control = b->cbuf[i];
		b->msgs[i].msg_hdr.msg_controllen = sizeof(b->cbuf[i]);
	}
	int n = recvmmsg(fd, b->msgs, BATCH, MSG_DONTWAIT, NULL);
	if (n < 0 && errno != EAGAIN && errno != EINTR)
		die("recvmmsg");
	return n;
}

/* The receivers measure from the first datagram after a 0.1 s warm-up:
 * 1 once measuring (*t0 set at the start), 0 while warming up, -1 when
 * nothing came within 5 s. */
static int rx_measuring(bool *started, double *t0, double t, double start, int n,
			const char *who)
{
	if (*started)
		return 1;
	if (n > 0 && t - start > 0.1) {
		*started = true;
		*t0 = t;
		return 1;
	}
	if (t - start > 5) {
		fprintf(stderr, "%s: no datagrams\n", who);
		return -1;
	}
	return 0;
}

/* Sender: plain sendmmsg batches, or GSO super-datagrams. Runs until killed. */
static void pps_sender(int fd, const struct sockaddr_in *dst, size_t payload, bool gso)
{
	static uint8_t buf[65536];
	memset(buf, 0x5a, sizeof(buf));
	if (gso) {
		int seg = (int)payload;
		size_t nseg = 65000 / payload, len = nseg * payload;
		if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)))
			die("setsockopt UDP_SEGMENT");
		for (;;) {
			if (sendto(fd, buf, len, 0, (const struct sockaddr *)dst, sizeof(*dst)) < 0 &&
			    errno != ENOBUFS && errno != EAGAIN)
				die("sendto (gso)");
		}
	}
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	memset(msgs, 0, sizeof(msgs));
	for (int i = 0; i < BATCH; i++) {
		iov[i].iov_base = buf;
		iov[i].iov_len = payload;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_name = (void *)dst;
		msgs[i].msg_hdr.msg_namelen = sizeof(*dst);
	}
	for (;;) {
		if (sendmmsg(fd, msgs, BATCH, 0) < 0 && errno != ENOBUFS && errno != EAGAIN)
			die("sendmmsg");
	}
}

static int do_udp_pps(size_t payload, double secs, bool gso)
{
	struct sockaddr_in rsin, ssin;
	int rfd = udp_socket(RCV_ADDR, &rsin), sfd = udp_socket(SND_ADDR, &ssin);
	pid_t child;

	if (payload < 1 || payload > 8192)
		return 2;
	if (gso)
		gro_on(rfd);
	child = fork_or_die();
	if (child == 0) {
		close(rfd);
		pin(1);
		pps_sender(sfd, &rsin, payload, gso);
		_exit(0);
	}
	close(sfd);
	pin(0);

	/* receive: count datagrams (GRO: bytes / payload) */
	static struct rx_bufs rb;
	uint64_t pkts = 0, bytes = 0;
	double t0 = 0, t = 0, start = now_s();
	bool started = false;

	for (;;) {
		/* GRO hands back up to 64 KiB at once; otherwise one packet */
		int n = rx_poll(rfd, &rb, gso ? sizeof(rb.buf[0]) : payload + 64);

		t = now_s();
		/* the batch that starts the measurement is not counted */
		if (!started) {
			if (rx_measuring(&started, &t0, t, start, n, "udp-pps") < 0)
				break;
			continue;
		}
		for (int i = 0; i < n; i++) {
			uint32_t len = rb.msgs[i].msg_len;
			bytes += len;
			pkts += (len + payload - 1) / payload;
		}
		if (t - t0 >= secs)
			break;
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	if (!started)
		return 1;
	printf("RESULT udp_pps payload=%zu gso=%d mpps=%.3f gbytes_per_s=%.3f\n", payload, gso,
	       (double)pkts / (t - t0) / 1e6, (double)bytes / (t - t0) / 1e9);
	return 0;
}

/* udp-stream: what the sender and the receiver do with each segment */
enum stream_work { WORK_NONE, WORK_COPY, WORK_CRC };

#define ROCE_BTH 12
#define ROCE_ICRC 4
#define MR_SIZE (1u << 20)

/* Enter the network namespace /run/netns/name (ip netns's), if any. */
static void enter_netns(const char *name)
{
	char path[4096];
	int fd;

	if (!name)
		return;
	snprintf(path, sizeof(path), "/run/netns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(path);
	if (setns(fd, CLONE_NEWNET))
		die("setns");
	close(fd);
}

static uint8_t *mr_alloc(void)
{
	uint8_t *mr = aligned_alloc(4096, MR_SIZE);

	if (!mr)
		die("aligned_alloc");
	for (size_t i = 0; i < MR_SIZE; i++)
		mr[i] = (uint8_t)(i * 131 + (i >> 12));
	return mr;
}

/* Segments of one GSO send: as many as fit (a stream of one message), or
 * the counts of --segs in turn (the pattern of one kind of message). */
#define SEGS_MAX 8
struct stream_segs {
	size_t n, count[SEGS_MAX];
};

static size_t stream_fit(size_t payload)
{
	size_t fit = 65000 / payload;

	return fit > 64 ? 64 : fit; /* UDP_MAX_SEGMENTS of older kernels */
}

/* Sender of udp-stream: GSO super-datagrams of nseg segments; each segment
 * built from the source MR first (copy, crc). Runs until killed. */
static void stream_sender(int fd, const struct sockaddr_in *dst, size_t payload,
			  enum stream_work work, const struct stream_segs *segs)
{
	static uint8_t buf[65536];
	size_t nseg, len, data = payload - ROCE_BTH - ROCE_ICRC, off = 0;
	uint8_t *mr = mr_alloc();
	int seg = (int)payload;
	uint32_t psn = 0;

	memset(buf, 0x5a, sizeof(buf));
	if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)))
		die("setsockopt UDP_SEGMENT");
	for (size_t k = 0;; k = segs->n ? (k + 1) % segs->n : 0) {
		nseg = segs->n ? segs->count[k] : stream_fit(payload);
		len = nseg * payload;
		for (size_t s = 0; work != WORK_NONE && s < nseg; s++) {
			uint8_t *p = buf + s * payload;

			/* BTH of an RDMA WRITE middle packet: opcode, flags, P_Key,
			 * destination QP, PSN */
			p[0] = 0x07;
			p[1] = 0x40;
			p[2] = p[3] = 0xff;
			p[4] = 0;
			p[5] = 0;
			p[6] = 0;
			p[7] = 0x11;
			p[8] = 0;
			p[9] = (uint8_t)(psn >> 16);
			p[10] = (uint8_t)(psn >> 8);
			p[11] = (uint8_t)psn;
			psn = (psn + 1) & 0xffffff;
			if (off + data > MR_SIZE)
				off = 0;
			if (work == WORK_CRC) {
				uint32_t c = urvt_crc32(0, p, ROCE_BTH);

				c = urvt_crc32_copy(c, p + ROCE_BTH, mr + off, data);
				memcpy(p + ROCE_BTH + data, &c, ROCE_ICRC);
			} else {
				memcpy(p + ROCE_BTH, mr + off, data);
			}
			off += data;
		}
		/* the kernel's queue full: send the same bytes again */
		while (sendto(fd, buf, len, 0, (const struct sockaddr *)dst, sizeof(*dst)) < 0) {
			if (errno != ENOBUFS && errno != EAGAIN && errno != EINTR)
				die("sendto (gso)");
		}
	}
}

static int do_udp_stream(size_t payload, double secs, enum stream_work work, const char *ns_tx,
			 const char *ns_rx, const char *dst, const struct stream_segs *segs)
{
	struct sockaddr_in rsin, ssin;
	int rfd;
	pid_t child;

	if (payload <= ROCE_BTH + ROCE_ICRC || payload > 8192 || secs <= 0)
		return 2;
	/* the receiver's socket in its namespace, then the sender's in its */
	enter_netns(ns_rx);
	rfd = udp_socket(dst ? dst : RCV_ADDR, &rsin);
	gro_on(rfd);
	child = fork_or_die();
	if (child == 0) {
		close(rfd);
		enter_netns(ns_tx);
		int sfd = udp_socket(ns_tx ? "0.0.0.0" : SND_ADDR, &ssin);
		pin(1);
		stream_sender(sfd, &rsin, payload, work, segs);
		_exit(0);
	}
	pin(0);

	static struct rx_bufs rb;
	uint8_t *mr = mr_alloc();
	size_t data = payload - ROCE_BTH - ROCE_ICRC, off = 0;
	uint64_t pkts = 0, bytes = 0, recvs = 0, bad = 0;
	double t0 = 0, t = 0, start = now_s();
	bool started = false;

	for (;;) {
		int n = rx_poll(rfd, &rb, sizeof(rb.buf[0]));

		t = now_s();
		for (int i = 0; i < n; i++) {
			struct msghdr *mh = &rb.msgs[i].msg_hdr;
			size_t len = rb.msgs[i].msg_len, seg = len;
			struct cmsghdr *cm;

			/* GRO: the segment size in a control message; none: one datagram */
			for (cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
				if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
					int g;

					memcpy(&g, CMSG_DATA(cm), sizeof(g));
					if (g > 0)
						seg = (size_t)g;
				}
			}
			for (size_t o = 0; work != WORK_NONE && o < len; o += seg) {
				const uint8_t *p = rb.buf[i] + o;
				size_t sl = len - o < seg ? len - o : seg, d;

				if (sl <= ROCE_BTH + ROCE_ICRC) {
					bad++;
					continue;
				}
				d = sl - ROCE_BTH - ROCE_ICRC;
				if (off + d > MR_SIZE)
					off = 0;
				if (work == WORK_CRC) {
					uint32_t c = urvt_crc32(0, p, ROCE_BTH), icrc;

					c = urvt_crc32_copy(c, mr + off, p + ROCE_BTH, d);
					memcpy(&icrc, p + ROCE_BTH + d, ROCE_ICRC);
					bad += c != icrc;
				} else {
					memcpy(mr + off, p + ROCE_BTH, d);
				}
				off += d;
			}
			if (started) {
				recvs++;
				bytes += len;
				pkts += (len + seg - 1) / seg;
			}
		}
		if (!started) {
			if (rx_measuring(&started, &t0, t, start, n, "udp-stream") < 0)
				break;
			continue;
		}
		if (t - t0 >= secs)
			break;
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	__asm__ volatile("" : : "r"(mr) : "memory");
	free(mr);
	if (!started)
		return 1;
	printf("RESULT udp_stream payload=%zu work=%s mpps=%.3f gbytes_per_s=%.3f"
	       " udp_gbytes_per_s=%.3f segs_per_recv=%.1f bad=%" PRIu64 " crc=%s\n",
	       payload, work == WORK_CRC ? "crc" : work == WORK_COPY ? "copy" : "none",
	       (double)pkts / (t - t0) / 1e6, (double)pkts * (double)data / (t - t0) / 1e9,
	       (double)bytes / (t - t0) / 1e9, recvs ? (double)pkts / (double)recvs : 0.0, bad,
	       urvt_crc32_impl());
	return bad ? 1 : 0;
}

static int do_udp_rtt(size_t payload, long iters)
{
	struct sockaddr_in asin, bsin;
	int afd = udp_socket(RCV_ADDR, &asin), bfd = udp_socket(SND_ADDR, &bsin);
	static uint8_t buf[65536];
	pid_t child;

	if (payload < 1 || payload > 8192 || iters < 1)
		return 2;
	child = fork_or_die();
	if (child == 0) {
		/* echo side: CPU 0 */
		pin(0);
		double end = now_s() + 60;
		for (long i = 0; i < iters + 1000; i++) {
			ssize_t n;
			while ((n = recv(bfd, buf, sizeof(buf), MSG_DONTWAIT)) < 0) {
				if (errno != EAGAIN || now_s() > end)
					_exit(1);
			}
			if (sendto(bfd, buf, (size_t)n, 0, (struct sockaddr *)&asin, sizeof(asin)) < 0)
				_exit(1);
		}
		_exit(0);
	}
	pin(1);
	double t0 = 0, end = now_s() + 60;
	for (long i = 0; i < iters + 1000; i++) {
		if (i == 1000)
			t0 = now_s(); /* after a warm-up */
		if (sendto(afd, buf, payload, 0, (struct sockaddr *)&bsin, sizeof(bsin)) < 0)
			die("sendto");
		while (recv(afd, buf, sizeof(buf), MSG_DONTWAIT) < 0) {
			if (errno != EAGAIN || now_s() > end) {
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				fprintf(stderr, "udp-rtt: no echo\n");
				return 1;
			}
		}
	}
	double t = now_s();
	waitpid(child, NULL, 0);
	printf("RESULT udp_rtt payload=%zu half_rtt_us=%.3f\n", payload,
	       (t - t0) / (double)iters / 2 * 1e6);
	return 0;
}

/* One side of wake-rtt: sleep in epoll_wait on rx, answer on tx. */
static void wake_side(int rx, int tx, long iters, bool first)
{
	struct epoll_event ev = { .events = EPOLLIN }, got;
	int ep = epoll_create1(0);
	uint64_t v = 1;

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, rx, &ev))
		die("epoll");
	for (long i = 0; i < iters; i++) {
		if (first && write(tx, &v, sizeof(v)) != sizeof(v))
			die("write");
		if (epoll_wait(ep, &got, 1, -1) != 1 || read(rx, &v, sizeof(v)) != sizeof(v))
			die("wait");
		if (!first && write(tx, &v, sizeof(v)) != sizeof(v))
			die("write");
	}
	close(ep);
}

static double wake_once(long iters, int cpu_b)
{
	int a = eventfd(0, EFD_CLOEXEC), b = eventfd(0, EFD_CLOEXEC);
	pid_t child;
	double t0, t;

	if (a < 0 || b < 0)
		die("eventfd");
	child = fork_or_die();
	if (!child) {
		pin(cpu_b);
		wake_side(a, b, iters, false);
		_exit(0);
	}
	pin(0);
	usleep(10000);
	t0 = now_s();
	wake_side(b, a, iters, true);
	t = now_s();
	waitpid(child, NULL, 0);
	close(a);
	close(b);
	return (t - t0) / (double)iters / 2 * 1e6;
}

static int do_wake_rtt(long iters)
{
	double one = wake_once(iters, 0), two = wake_once(iters, 1);

	printf("RESULT wake_rtt half_rtt_us=%.3f one_cpu_us=%.3f two_cpus_us=%.3f\n",
	       one < two ? one : two, one, two);
	return 0;
}

/* line-rtt's wait for the other side's count: bounded, a side that died
 * must not keep the other spinning (the clock is read once per 2^20
 * looks, off the measured path's common case) */
static void line_wait(_Atomic uint64_t *line, uint64_t v, double deadline)
{
	for (uint32_t n = 1; atomic_load_explicit(line, memory_order_acquire) != v; n++)
		if (!(n & 0xfffff) && now_s() > deadline)
			die("line-rtt: no answer");
}

/* line-rtt: the two sides take turns on one counter, odd counts the
 * child's, even ours; iters round trips, within 60 s. */
static int do_line_rtt(long iters)
{
	_Atomic uint64_t *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t child;
	double t0, t;

	if (line == MAP_FAILED || iters < 1)
		die("line-rtt");
	atomic_store(line, 0);
	child = fork_or_die();
	if (!child) {
		double end = now_s() + 60;

		pin(1);
		for (uint64_t i = 1; i < 2 * (uint64_t)iters; i += 2) {
			line_wait(line, i, end);
			atomic_store_explicit(line, i + 1, memory_order_release);
		}
		_exit(0);
	}
	pin(0);
	t0 = now_s();
	for (uint64_t i = 0; i < 2 * (uint64_t)iters; i += 2) {
		atomic_store_explicit(line, i + 1, memory_order_release);
		line_wait(line, i + 2, t0 + 60);
	}
	t = now_s();
	waitpid(child, NULL, 0);
	munmap((void *)line, 4096);
	printf("RESULT line_rtt half_rtt_us=%.4f\n", (t - t0) / (double)iters / 2 * 1e6);
	return 0;
}

/* The slowest and fastest slice of a rate (GB/s), and its slice's start. */
struct cma_slices {
	double min, max;
	double t0;
	uint64_t bytes;
};

#define CMA_SLICE_S 0.02

static void slice_note(struct cma_slices *sl, double t, uint64_t bytes)
{
	double r;

	sl->bytes += bytes;
	if (t - sl->t0 < CMA_SLICE_S)
		return;
	r = (double)sl->bytes / (t - sl->t0) / 1e9;
	sl->min = sl->min && sl->min < r ? sl->min : r;
	sl->max = sl->max > r ? sl->max : r;
	sl->t0 = t;
	sl->bytes = 0;
}

/* GB/s of reading window messages of size bytes at src in process pid, each
 * in calls of chunk bytes; sl (if not NULL) gets the 20 ms slices. */
static double cma_rate(pid_t pid, uint8_t *src, uint8_t *dst, size_t size, size_t window,
		       size_t chunk, double secs, struct cma_slices *sl)
{
	uint64_t n = 0;
	double t0 = now_s(), t;

	if (sl)
		*sl = (struct cma_slices){ .t0 = t0 };
	do {
		for (int r = 0; r < 8; r++, n++) {
			for (size_t m = 0; m < window; m++) {
				for (size_t off = 0; off < size; off += chunk) {
					size_t len = size - off < chunk ? size - off : chunk;
					size_t at = m * size + off;
					struct iovec l = { dst + at, len }, rv = { src + at, len };

					if (process_vm_readv(pid, &l, 1, &rv, 1, 0) != (ssize_t)len)
						die("process_vm_readv");
				}
			}
		}
		t = now_s();
		if (sl)
			slice_note(sl, t, 8 * (uint64_t)size * window);
	} while (t - t0 < secs);
	return (double)n * (double)(size * window) / (t - t0) / 1e9;
}

/* GB/s of moving size bytes of src in process pid into dst, the copy
 * split: pid writes the second half (on a go from *go, done in *done)
 * while this process reads the first. */
static double cma_split_rate(pid_t pid, _Atomic uint32_t *go, _Atomic uint32_t *done,
			     uint8_t *src, uint8_t *dst, size_t size, size_t window, double secs)
{
	size_t half = size / 2 / 4096 * 4096;
	uint32_t n = 0;
	double t0 = now_s(), t;

	do {
		for (int r = 0; r < 8; r++) {
			atomic_store(go, ++n);
			for (size_t m = 0; m < window && half; m++) {
				struct iovec l = { dst + m * size, half }, rv = { src + m * size, half };

				if (process_vm_readv(pid, &l, 1, &rv, 1, 0) != (ssize_t)half)
					die("process_vm_readv");
			}
			while (atomic_load(done) != n)
				;
		}
		t = now_s();
	} while (t - t0 < secs);
	return (double)n * (double)(size * window) / (t - t0) / 1e9;
}

/* The child of do_cma: it writes the second half of each of the window's
 * messages in src into the parent's dst at each go, until go is UINT32_MAX. */
static void cma_split_child(pid_t parent, _Atomic uint32_t *go, _Atomic uint32_t *done,
			    uint8_t *src, uint8_t *dst, size_t size, size_t window)
{
	size_t half = size / 2 / 4096 * 4096;
	uint32_t seen = 0;

	for (;;) {
		uint32_t g = atomic_load(go);

		if (g == UINT32_MAX)
			_exit(0);
		if (g == seen)
			continue;
		for (size_t m = 0; m < window; m++) {
			struct iovec l = { src + m * size + half, size - half },
				     rv = { dst + m * size + half, size - half };

			if (process_vm_writev(parent, &l, 1, &rv, 1, 0) != (ssize_t)(size - half))
				_exit(1);
		}
		seen = g;
		atomic_store(done, g);
	}
}

static int do_cma(size_t size, double secs, size_t window)
{
	size_t total = size * window;
	uint8_t *src = malloc(total), *dst = malloc(total);
	struct cma_slices sl;
	_Atomic uint32_t *sync = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				      -1, 0);
	pid_t child, parent = getpid();
	int go[2];
	char c = 0;

	if (!src || !dst || size < 1 || window < 1 || sync == MAP_FAILED || pipe(go))
		die("cma setup");
	/* the child owns src (the sender's buffer): touched, then idle until
	 * the split, where it writes */
	memset(src, 0x5a, total);
	memset(dst, 0, total);
	child = fork_or_die();
	if (!child) {
		pin(0);
		memset(src, 0xa5, total); /* its own copy of the pages */
		if (write(go[1], &c, 1) != 1)
			_exit(1);
		cma_split_child(parent, &sync[0], &sync[16], src, dst, size, window);
	}
	pin(1);
	if (read(go[0], &c, 1) != 1)
		die("cma child");
	cma_rate(child, src, dst, size, window, size, 0.05, NULL); /* warm-up */
	if (dst[0] != 0xa5 || dst[total - 1] != 0xa5) {
		fprintf(stderr, "cma: read the wrong bytes\n");
		return 1;
	}
	double whole = cma_rate(child, src, dst, size, window, size, secs / 3, &sl);
	/* a chunk as big as the buffer is the whole call again */
	double c64 = size > 65536 ? cma_rate(child, src, dst, size, window, 65536, secs / 3, NULL)
				  : whole;
	double c128 = size > 131072 ? cma_rate(child, src, dst, size, window, 131072, secs / 3, NULL)
				    : whole;
	memset(dst, 0, total);
	double split = cma_split_rate(child, &sync[0], &sync[16], src, dst, size, window, secs / 3);
	atomic_store(&sync[0], UINT32_MAX);
	waitpid(child, NULL, 0);
	if (dst[0] != 0xa5 || dst[total - 1] != 0xa5) {
		fprintf(stderr, "cma: the split moved the wrong bytes\n");
		return 1;
	}
	double best = whole > c64 ? whole : c64;
	best = best > c128 ? best : c128;
	best = best > split ? best : split;
	printf("RESULT cma size=%zu window=%zu gbytes_per_s=%.3f whole=%.3f chunk64k=%.3f "
	       "chunk128k=%.3f split=%.3f whole_min=%.3f whole_max=%.3f\n",
	       size, window, best, whole, c64, c128, split, sl.min ? sl.min : whole,
	       sl.max ? sl.max : whole);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "memcpy"))
		return do_memcpy(strtoul(argv[2], NULL, 0), strtod(argv[3], NULL));
	if (argc >= 4 && !strcmp(argv[1], "udp-pps"))
		return do_udp_pps(strtoul(argv[2], NULL, 0), strtod(argv[3], NULL),
				  argc >= 5 && !strcmp(argv[4], "gso"));
	if (argc >= 4 && !strcmp(argv[1], "udp-stream")) {
		const char *ns_tx = NULL, *ns_rx = NULL, *dst = NULL;
		enum stream_work work = WORK_NONE;
		struct stream_segs segs = { 0 };
		size_t payload = strtoul(argv[2], NULL, 0);

		for (int i = 4; i < argc; i++) {
			if (!strcmp(argv[i], "crc"))
				work = WORK_CRC;
			else if (!strcmp(argv[i], "copy"))
				work = WORK_COPY;
			else if (i + 1 < argc && !strcmp(argv[i], "--ns-tx"))
				ns_tx = argv[++i];
			else if (i + 1 < argc && !strcmp(argv[i], "--ns-rx"))
				ns_rx = argv[++i];
			else if (i + 1 < argc && !strcmp(argv[i], "--dst"))
				dst = argv[++i];
			else if (i + 1 < argc && !strcmp(argv[i], "--segs")) {
				/* N[,N...]: each from 1 to what one send holds */
				for (char *t = strtok(argv[++i], ","); t; t = strtok(NULL, ",")) {
					size_t c = strtoul(t, NULL, 0);
					if (segs.n == SEGS_MAX || !payload || c < 1 ||
					    c > stream_fit(payload))
						goto usage;
					segs.count[segs.n++] = c;
				}
			} else
				goto usage;
		}
		return do_udp_stream(payload, strtod(argv[3], NULL), work, ns_tx, ns_rx, dst, &segs);
	}
	if (argc >= 4 && !strcmp(argv[1], "udp-rtt"))
		return do_udp_rtt(strtoul(argv[2], NULL, 0), strtol(argv[3], NULL, 0));
	if (argc >= 3 && !strcmp(argv[1], "wake-rtt"))
		return do_wake_rtt(strtol(argv[2], NULL, 0));
	if (argc >= 3 && !strcmp(argv[1], "line-rtt"))
		return do_line_rtt(strtol(argv[2], NULL, 0));
	if (argc >= 4 && !strcmp(argv[1], "cma"))
		return do_cma(strtoul(argv[2], NULL, 0), strtod(argv[3], NULL),
			      argc >= 5 ? strtoul(argv[4], NULL, 0) : 1);
usage:
	fprintf(stderr, "usage: machine_limits memcpy SIZE SECONDS | udp-pps PAYLOAD SECONDS [gso]"
			" | udp-stream PAYLOAD SECONDS [copy|crc] [--ns-tx NAME] [--ns-rx NAME]"
			" [--dst ADDR] [--segs N[,N...]] | udp-rtt PAYLOAD ITERS | wake-rtt ITERS"
			" | line-rtt ITERS | cma SIZE SECONDS [WINDOW]\n");
	return 2;
}
