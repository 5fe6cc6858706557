/*
 * The shm link on its own (link/shm.h, link/shm_proto.h): two links of one
 * process find each other by GID, packets cross in order (through ring
 * wrap-arounds and a full ring), doorbells ring, a closed peer's last
 * packets are still read; and a hostile peer speaking the protocol by hand
 * (bad hello, unsealed or short memfd, impossible head, bad records) is
 * refused or cut off without a crash or a packet. The test plays the
 * progress thread: it calls service itself.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "link/shm.h"
#include "link/shm_proto.h"
#include "wire/ip.h"

static struct in6_addr gid_of(const char *v4)
{
	struct in6_addr g;
	struct in_addr a;

	inet_pton(AF_INET, v4, &a);
	urvt_gid_from_v4(g.s6_addr, a.s_addr);
	return g;
}

static struct urvt_link *open_shm(const char *v4)
{
	struct in6_addr g = gid_of(v4);
	int err = 0;
	struct urvt_link *l = urvt_shm_open(&g, &err);

	assert_non_null(l);
	return l;
}

static void service(struct urvt_link *l)
{
	for (int i = 0; i < 4; i++)
		l->ops->service(l);
}

/* A connected pair: a resolves b, both serviced; returns a's address of b. */
static union urvt_link_addr connect_pair(struct urvt_link *a, struct urvt_link *b)
{
	union urvt_link_addr to;

	assert_int_equal(urvt_link_resolve(a, b->info.addr6.s6_addr, &to), 0);
	assert_int_equal(to.shm.family, AF_UNIX);
	service(b); /* accept + hello */
	service(a); /* hello ack */
	return to;
}

/* Packets carry their sequence number in the first 4 bytes. */
static void fill(uint8_t *buf, uint32_t len, uint32_t seq)
{
	memcpy(buf, &seq, 4);
	for (uint32_t i = 4; i < len; i++)
		buf[i] = (uint8_t)(seq + i);
}

static bool check(const struct urvt_link_rx *r, uint32_t len, uint32_t seq)
{
	uint32_t got;

	if (r->len != len || r->trunc || !r->no_icrc)
		return false;
	memcpy(&got, r->data, 4);
	if (got != seq)
		return false;
	for (uint32_t i = 4; i < len; i++)
		if (r->data[i] != (uint8_t)(seq + i))
			return false;
	return true;
}

static void test_resolve_and_send(void **state)
{
	struct urvt_link *a = open_shm("127.0.96.1"), *b = open_shm("127.0.96.2");
	union urvt_link_addr to, back, none;
	struct in6_addr nobody = gid_of("127.0.96.9");
	static uint8_t buf[8][4160];
	struct urvt_link_tx tx[8];
	struct urvt_link_rx rx[32];
	struct urvt_shm_stats st;
	int n;

	(void)state;
	assert_true(a->lossless && a->cheap_poll);
	assert_true(a->wake_fd >= 0 && a->ctl_fd >= 0);
	/* nobody listens there (another host, rxe, URVT_SHM=0): UDP's job */
	assert_true(urvt_link_resolve(a, nobody.s6_addr, &none) < 0);
	/* ourselves: the in-process path's job */
	assert_int_equal(urvt_link_resolve(a, a->info.addr6.s6_addr, &none), -ENOENT);
	to = connect_pair(a, b);
	for (uint32_t i = 0; i < 8; i++) {
		uint32_t len = 16 + i * 500;
		fill(buf[i], len, i);
		tx[i] = (struct urvt_link_tx){ .buf = buf[i], .len = len, .dst = &to };
	}
	assert_int_equal(urvt_link_send(a, tx, 8), 0);
	n = urvt_link_recv(b, rx, 32);
	assert_int_equal(n, 8);
	for (uint32_t i = 0; i < 8; i++) {
		assert_true(check(&rx[i], 16 + i * 500, i));
		assert_memory_equal(rx[i].ip.sgid, &a->info.addr6, 16);
		assert_memory_equal(rx[i].ip.dgid, &b->info.addr6, 16);
	}
	assert_int_equal(urvt_link_recv(b, rx, 32), 0);
	/* b answers on the connection a made: one connection for both ways */
	assert_int_equal(urvt_link_resolve(b, a->info.addr6.s6_addr, &back), 0);
	tx[0].dst = &back;
	assert_int_equal(urvt_link_send(b, tx, 1), 0);
	assert_int_equal(urvt_link_recv(a, rx, 32), 1);
	assert_true(check(&rx[0], 16, 0));
	urvt_shm_get_stats(b, &st);
	assert_int_equal(st.peers_up, 1);
	urvt_shm_get_stats(a, &st);
	assert_int_equal(st.peers_up, 1);
	urvt_link_close(a);
	urvt_link_close(b);
}

/* Far more bytes than the ring holds, in varied sizes, received as they
 * come: every packet arrives once, whole, in order, across wrap-arounds. */
static void test_wrap_in_order(void **state)
{
	struct urvt_link *a = open_shm("127.0.96.3"), *b = open_shm("127.0.96.4");
	union urvt_link_addr to = connect_pair(a, b);
	static uint8_t buf[16][4160];
	struct urvt_link_tx tx[16];
	struct urvt_link_rx rx[32];
	uint32_t next_tx = 0, next_rx = 0, total = 20000;

	(void)state;
	while (next_rx < total) {
		unsigned n = 0;
		while (n < 16 && next_tx < total) {
			uint32_t len = 8 + (next_tx * 2654435761u) % 4150;
			fill(buf[n], len, next_tx);
			tx[n] = (struct urvt_link_tx){ .buf = buf[n], .len = len, .dst = &to };
			n++;
			next_tx++;
		}
		if (n)
			assert_int_equal(urvt_link_send(a, tx, n), 0);
		for (int k; (k = urvt_link_recv(b, rx, 32)) > 0;)
			for (int i = 0; i < k; i++, next_rx++)
				if (!check(&rx[i], 8 + (next_rx * 2654435761u) % 4150, next_rx))
					fail_msg("packet %u damaged or out of order", next_rx);
	}
	assert_int_equal(next_rx, total);
	urvt_link_close(a);
	urvt_link_close(b);
}

/* Nobody reads: the ring fills, the link waits (bounded), then says what
 * it could not take; what it took arrives intact. */
static void test_full_ring(void **state)
{
	struct urvt_link *a = open_shm("127.0.96.5"), *b = open_shm("127.0.96.6");
	union urvt_link_addr to = connect_pair(a, b);
	static uint8_t buf[4160];
	struct urvt_link_tx tx = { .buf = buf, .len = 4096, .dst = &to };
	struct urvt_link_rx rx[32];
	uint32_t sent = 0, lost = 0, got = 0;

	(void)state;
	while (!lost && sent < 10000) {
		fill(buf, 4096, sent);
		lost = urvt_link_send(a, &tx, 1);
		sent += !lost;
	}
	assert_int_equal(lost, 1);
	/* 4 MiB of 4160-byte records */
	assert_true(sent > 900 && sent < 1100);
	for (int k; (k = urvt_link_recv(b, rx, 32)) > 0;)
		for (int i = 0; i < k; i++, got++)
			assert_true(check(&rx[i], 4096, got));
	assert_int_equal(got, sent);
	/* room again */
	assert_int_equal(urvt_link_send(a, &tx, 1), 0);
	urvt_link_close(a);
	urvt_link_close(b);
}

static bool readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1;
}

/* A consumer that armed is woken by the next packet; ack_wake quiets it. */
static void test_doorbell(void **state)
{
	struct urvt_link *a = open_shm("127.0.96.7"), *b = open_shm("127.0.96.8");
	union urvt_link_addr to = connect_pair(a, b);
	uint8_t buf[64] = { 0 };
	struct urvt_link_tx tx = { .buf = buf, .len = 64, .dst = &to };
	struct urvt_link_rx rx[4];

	(void)state;
	/* the accept rang b's own doorbell (a packet may have come first) */
	b->ops->ack_wake(b);
	assert_false(readable(b->wake_fd, 0));
	urvt_link_arm(b);
	assert_false(readable(b->wake_fd, 0)); /* nothing there: stays quiet */
	assert_int_equal(urvt_link_send(a, &tx, 1), 0);
	assert_true(readable(b->wake_fd, 100));
	b->ops->ack_wake(b);
	assert_int_equal(urvt_link_recv(b, rx, 4), 1);
	/* not armed: a send rings nobody (no system call for the producer) */
	assert_int_equal(urvt_link_send(a, &tx, 1), 0);
	assert_false(readable(b->wake_fd, 20));
	/* arming with a packet waiting rings at once */
	urvt_link_arm(b);
	assert_true(readable(b->wake_fd, 0));
	b->ops->ack_wake(b);
	assert_int_equal(urvt_link_recv(b, rx, 4), 1);
	urvt_link_close(a);
	urvt_link_close(b);
}

/* The peer exits: its last packets are still delivered, then nothing goes
 * to it any more. */
static void test_peer_gone(void **state)
{
	struct urvt_link *a = open_shm("127.0.96.10"), *b = open_shm("127.0.96.11");
	union urvt_link_addr to = connect_pair(a, b), back;
	uint8_t buf[128];
	struct urvt_link_tx tx = { .buf = buf, .len = 128, .dst = &to };
	struct urvt_link_rx rx[4];
	struct urvt_shm_stats st;

	(void)state;
	assert_int_equal(urvt_link_resolve(b, a->info.addr6.s6_addr, &back), 0);
	fill(buf, 128, 7);
	assert_int_equal(urvt_link_send(a, &tx, 1), 0);
	urvt_link_close(a);
	service(b);
	urvt_shm_get_stats(b, &st);
	assert_int_equal(st.peers_up, 0);
	assert_int_equal(st.peers_gone, 1);
	assert_int_equal(urvt_link_recv(b, rx, 4), 1);
	assert_true(check(&rx[0], 128, 7));
	/* what b still sends to the gone peer is lost, at once */
	tx.dst = &back;
	assert_int_equal(urvt_link_send(b, &tx, 1), 1);
	urvt_link_close(b);
}

/* ------------------------------------------------------------------ */
/* A hostile peer, by hand                                            */
/* ------------------------------------------------------------------ */
struct fake {
	int sock;
	int memfd;
	struct shm_region *r;
};

static int send_hello(int sock, const struct shm_msg *m, int fd0, int fd1)
{
	struct iovec iov = { .iov_base = (void *)m, .iov_len = sizeof(*m) };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	int fds[2] = { fd0, fd1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = CMSG_SPACE(2 * sizeof(int)) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(2 * sizeof(int));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	return sendmsg(sock, &mh, 0) == (ssize_t)sizeof(*m) ? 0 : -1;
}

/* Connect to the victim by hand and say hello with a region of size bytes,
 * sealed or not, claiming GID from. */
static struct fake fake_connect(struct urvt_link *victim, const struct in6_addr *from,
				size_t size, bool seal, uint32_t version)
{
	struct fake f = { .sock = socket(AF_UNIX, SOCK_SEQPACKET, 0) };
	struct sockaddr_un sun;
	socklen_t len = shm_sock_name(&sun, geteuid(), victim->info.addr6.s6_addr);
	struct shm_msg m = { .magic = SHM_MAGIC, .version = version, .type = SHM_MSG_HELLO,
			     .ring_bytes = SHM_RING_BYTES, .pkt_max = SHM_PKT_MAX,
			     .region_bytes = sizeof(struct shm_region) };
	int bell = eventfd(0, 0);

	assert_true(f.sock >= 0);
	assert_int_equal(connect(f.sock, (struct sockaddr *)&sun, len), 0);
	f.memfd = memfd_create("fake", MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(f.memfd, (off_t)size), 0);
	if (seal)
		assert_int_equal(fcntl(f.memfd, F_ADD_SEALS,
				       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	f.r = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f.memfd, 0);
	assert_true(f.r != MAP_FAILED);
	if (size >= sizeof(struct shm_region)) {
		memcpy(f.r->gid_a, from, 16);
		memcpy(f.r->gid_b, &victim->info.addr6, 16);
	}
	memcpy(m.from_gid, from, 16);
	memcpy(m.to_gid, &victim->info.addr6, 16);
	assert_int_equal(send_hello(f.sock, &m, f.memfd, bell), 0);
	close(bell);
	service(victim);
	return f;
}

static void fake_close(struct fake *f, size_t size)
{
	munmap(f->r, size);
	close(f->memfd);
	close(f->sock);
}

/* Refused hellos: unsealed memfd, wrong size, wrong version. */
static void test_hostile_hello(void **state)
{
	struct urvt_link *v = open_shm("127.0.96.20");
	struct in6_addr from = gid_of("127.0.96.21");
	struct urvt_shm_stats st;
	struct fake f;

	(void)state;
	f = fake_connect(v, &from, sizeof(struct shm_region), false, SHM_VERSION);
	fake_close(&f, sizeof(struct shm_region));
	f = fake_connect(v, &from, 4096, true, SHM_VERSION);
	fake_close(&f, 4096);
	f = fake_connect(v, &from, sizeof(struct shm_region), true, SHM_VERSION + 7);
	fake_close(&f, sizeof(struct shm_region));
	service(v);
	urvt_shm_get_stats(v, &st);
	assert_int_equal(st.peers_up, 0);
	assert_true(st.refused >= 2); /* the bad version fails in recv, before the count */
	urvt_link_close(v);
}

/* A peer that scribbles on the ring: impossible heads and records. The
 * victim delivers nothing it cannot delimit, cuts the peer off, goes on. */
static void test_hostile_ring(void **state)
{
	struct urvt_link *v = open_shm("127.0.96.22");
	struct in6_addr from = gid_of("127.0.96.23");
	struct urvt_link_rx rx[32];
	struct urvt_shm_stats st;
	/* ring 0 is the connector (the fake) to the victim */
	static const struct {
		uint32_t head, len;
		const char *what;
	} bad[] = {
		{ SHM_RING_BYTES + 64, 64, "head more than a ring ahead" },
		{ 100, 64, "head not on a record boundary" },
		{ 64, SHM_PKT_MAX + 1, "record longer than a packet" },
		{ 64, 200, "record longer than what head says is there" },
		{ 64, 0, "empty record" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct fake f = fake_connect(v, &from, sizeof(struct shm_region), true, SHM_VERSION);
		struct shm_rec *rec = (struct shm_rec *)f.r->ring[0];
		int n;

		urvt_shm_get_stats(v, &st);
		assert_int_equal(st.peers_up, 1);
		rec->len = bad[i].len;
		atomic_store(&f.r->ctrl[0].head, bad[i].head);
		n = urvt_link_recv(v, rx, 32);
		if (n != 0)
			fail_msg("%s: %d packets delivered", bad[i].what, n);
		urvt_shm_get_stats(v, &st);
		if (st.peers_up != 0 || st.peers_dead != i + 1)
			fail_msg("%s: peer not cut off", bad[i].what);
		/* and it stays cut off */
		rec->len = 64;
		atomic_store(&f.r->ctrl[0].head, 128);
		assert_int_equal(urvt_link_recv(v, rx, 32), 0);
		fake_close(&f, sizeof(struct shm_region));
		service(v);
	}
	/* a well-formed record after all that still gets through a fresh peer */
	{
		struct fake f = fake_connect(v, &from, sizeof(struct shm_region), true, SHM_VERSION);
		struct shm_rec *rec = (struct shm_rec *)f.r->ring[0];
		rec->len = 40;
		memset(rec->data, 0x5a, 40);
		atomic_store(&f.r->ctrl[0].head, shm_rec_bytes(40));
		assert_int_equal(urvt_link_recv(v, rx, 32), 1);
		assert_int_equal(rx[0].len, 40);
		assert_int_equal(rx[0].data[39], 0x5a);
		fake_close(&f, sizeof(struct shm_region));
	}
	urvt_link_close(v);
}

/* Another user's process may not connect (root only: it needs setuid). */
static void test_other_uid_refused(void **state)
{
	struct urvt_link *v;
	struct urvt_shm_stats st;
	pid_t pid;
	int status;

	(void)state;
	if (geteuid() != 0)
		skip();
	v = open_shm("127.0.96.30");
	pid = fork();
	if (pid == 0) {
		struct sockaddr_un sun;
		socklen_t len = shm_sock_name(&sun, 0, v->info.addr6.s6_addr);
		int s;
		if (setuid(65534))
			_exit(2);
		s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		_exit(connect(s, (struct sockaddr *)&sun, len) ? 3 : 0);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(WEXITSTATUS(status), 0); /* it could connect ... */
	service(v);
	urvt_shm_get_stats(v, &st);
	assert_int_equal(st.refused, 1); /* ... and was turned away */
	assert_int_equal(st.peers_up, 0);
	urvt_link_close(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resolve_and_send),
		cmocka_unit_test(test_wrap_in_order),
		cmocka_unit_test(test_full_ring),
		cmocka_unit_test(test_doorbell),
		cmocka_unit_test(test_peer_gone),
		cmocka_unit_test(test_hostile_hello),
		cmocka_unit_test(test_hostile_ring),
		cmocka_unit_test(test_other_uid_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
