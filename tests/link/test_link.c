/*
 * The UDP link on its own (link/udp.h, link/link.h): binding and address
 * selection, batches out and in, UDP GSO/GRO with the IPv4 ID each segment
 * leaves with (the ICRC must verify at the receiver), fault injection, and
 * the URVT_FAULT parser. Two links on 127.0.95.x talk to each other; no
 * transport, no QPs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/progress.h"
#include "link/fault.h"
#include "link/udp.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

#define ADDR_A "127.0.95.1"
#define ADDR_B "127.0.95.2"
#define MAXPKT 1100

static struct urvt_link *open_link(const char *addr, bool gso, bool gro, const char *fault,
				   struct urvt_progress *p, int *err)
{
	struct urvt_udp_cfg cfg = {
		.addr = addr, .gso = gso, .gro = gro, .fault = fault, .progress = p,
	};

	return urvt_udp_open(&cfg, err);
}

static union urvt_link_addr addr_of(const struct urvt_link *l)
{
	union urvt_link_addr a = { .in4 = { .sin_family = AF_INET,
					     .sin_port = htons(URVT_ROCE_UDP_PORT) } };

	memcpy(&a.in4.sin_addr, &l->info.addr6.s6_addr[12], 4);
	return a;
}

/* Receive until want datagrams arrived or 2 s passed; returns how many.
 * Each datagram's bytes are appended to out (GRO trains as they come). */
static int recv_some(struct urvt_link *l, int want, uint8_t *out, size_t cap, size_t *got_bytes,
		     struct urvt_link_rx *first)
{
	struct urvt_link_rx rx[32];
	int got = 0;

	*got_bytes = 0;
	for (int tries = 0; tries < 200 && got < want; tries++) {
		struct pollfd pfd = { .fd = l->wake_fd, .events = POLLIN };
		int n;
		poll(&pfd, 1, 10);
		n = urvt_link_recv(l, rx, 32);
		for (int i = 0; i < n; i++) {
			if (got == 0 && i == 0 && first)
				*first = rx[0];
			assert_true(*got_bytes + rx[i].len <= cap);
			memcpy(out + *got_bytes, rx[i].data, rx[i].len);
			*got_bytes += rx[i].len;
			/* a GRO train counts as its segments */
			got += rx[i].seg ? (int)((rx[i].len + rx[i].seg - 1) / rx[i].seg) : 1;
		}
	}
	return got;
}

/* A UD SEND ONLY of paylen bytes (filled with seed) with its ICRC for ID 0. */
static uint32_t build_pkt(uint8_t *buf, const struct urvt_link *from, const struct urvt_link *to,
			  uint32_t paylen, uint8_t seed)
{
	struct urvt_pkt f;
	struct urvt_ipinfo ip;
	size_t h;

	urvt_pkt_init(&f, URVT_OP_UD_SEND_ONLY, 0x11, seed);
	f.deth.qkey = 0x1234;
	f.deth.sqp = 0x22;
	f.paylen = paylen;
	h = urvt_pkt_build_hdr(buf, MAXPKT, &f);
	assert_true(h > 0);
	for (uint32_t i = 0; i < paylen; i++)
		buf[h + i] = (uint8_t)(seed + i);
	urvt_ipinfo_v4(&ip, *(const uint32_t *)&from->info.addr6.s6_addr[12],
		       *(const uint32_t *)&to->info.addr6.s6_addr[12], URVT_ROCE_UDP_PORT,
		       URVT_ROCE_UDP_PORT);
	ip.df = true;
	return (uint32_t)urvt_pkt_finish(buf, MAXPKT, h + paylen, &ip);
}

static void test_bind_and_info(void **state)
{
	int err = 0;
	struct urvt_link *a = open_link(ADDR_A, false, false, NULL, NULL, &err);
	struct urvt_link *again;
	struct in_addr want;

	(void)state;
	assert_non_null(a);
	assert_int_equal(a->info.family, AF_INET);
	inet_pton(AF_INET, ADDR_A, &want);
	/* the GID is the v4-mapped address */
	assert_true(IN6_IS_ADDR_V4MAPPED(&a->info.addr6));
	assert_memory_equal(&a->info.addr6.s6_addr[12], &want, 4);
	assert_string_equal(a->info.ifname, "lo");
	assert_true(a->info.ifindex > 0);
	assert_true(a->wake_fd >= 0);
	assert_false(a->faults);
	assert_string_equal(a->ops->name, "udp");
	/* the address is taken: a second link on it fails, and says why */
	again = open_link(ADDR_A, false, false, NULL, NULL, &err);
	assert_null(again);
	assert_int_equal(err, -EADDRINUSE);
	/* nothing to receive: returns at once */
	{
		struct urvt_link_rx rx[4];
		assert_int_equal(urvt_link_recv(a, rx, 4), 0);
	}
	urvt_link_close(a);
	/* closed: the address is free again */
	a = open_link(ADDR_A, false, false, NULL, NULL, &err);
	assert_non_null(a);
	urvt_link_close(a);
}

static void test_bad_config(void **state)
{
	int err = 0;

	(void)state;
	assert_null(open_link("not-an-address", false, false, NULL, NULL, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(open_link(ADDR_A, false, false, "drop=2", NULL, &err));
	assert_int_equal(err, -EINVAL);
	/* an active fault spec needs the progress engine for its timer */
	assert_null(open_link(ADDR_A, false, false, "drop=0.5", NULL, &err));
	assert_int_equal(err, -EINVAL);
	{
		struct urvt_udp_cfg cfg = { .netdev = "no-such-if0" };
		assert_null(urvt_udp_open(&cfg, &err));
		assert_true(err < 0);
	}
}

/* Without GSO: each packet its own datagram, in order, addresses as GIDs. */
static void test_batch_plain(void **state)
{
	int err = 0;
	struct urvt_link *a = open_link(ADDR_A, false, false, NULL, NULL, &err);
	struct urvt_link *b = open_link(ADDR_B, false, false, NULL, NULL, &err);
	static uint8_t out[8 * MAXPKT], in[8 * MAXPKT];
	struct urvt_link_tx tx[5];
	union urvt_link_addr dst;
	struct urvt_link_rx first;
	uint32_t off = 0;
	size_t got;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	dst = addr_of(b);
	for (int i = 0; i < 5; i++) {
		uint32_t n = build_pkt(out + off, a, b, 100u * (uint32_t)(i + 1), (uint8_t)i);
		tx[i] = (struct urvt_link_tx){ .buf = out + off, .len = n, .dst = &dst };
		off += n;
	}
	assert_int_equal(urvt_link_send(a, tx, 5), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(tx[i].ip_id, 0);
	assert_int_equal(recv_some(b, 5, in, sizeof(in), &got, &first), 5);
	assert_int_equal(got, off);
	assert_memory_equal(in, out, off);
	assert_int_equal(first.seg, 0);
	assert_false(first.trunc);
	assert_memory_equal(first.ip.sgid, &a->info.addr6, 16);
	assert_memory_equal(first.ip.dgid, &b->info.addr6, 16);
	assert_int_equal(first.ip.sport, URVT_ROCE_UDP_PORT);
	assert_int_equal(first.ip.dport, URVT_ROCE_UDP_PORT);
	assert_true(first.ip.df);
	/* what arrived verifies against the IP facts the link reported */
	{
		struct urvt_ipinfo ip = first.ip;
		assert_int_equal(urvt_icrc_check(&ip, first.data, first.len,
						 URVT_ICRC_V4_ID_UNKNOWN), 0);
		assert_int_equal(ip.ip_id, 0);
	}
	urvt_link_close(a);
	urvt_link_close(b);
}

/* GSO out, GRO in: one send for a run of equal-size packets; segment k
 * leaves with IPv4 ID k and its ICRC was patched for it, so every packet
 * verifies at the receiver (which learns each ID from the ICRC). */
static void test_batch_gso_gro(void **state)
{
	int err = 0;
	struct urvt_link *a = open_link(ADDR_A, true, false, NULL, NULL, &err);
	struct urvt_link *b = open_link(ADDR_B, false, true, NULL, NULL, &err);
	static uint8_t out[24 * MAXPKT], in[24 * MAXPKT];
	struct urvt_link_tx tx[20];
	union urvt_link_addr dst;
	uint32_t off = 0, plen = 0;
	size_t got;
	int n = 20;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	dst = addr_of(b);
	for (int i = 0; i < n; i++) {
		/* 19 full packets, then a shorter last one */
		uint32_t len = build_pkt(out + off, a, b, i == n - 1 ? 200 : 1024, (uint8_t)i);
		tx[i] = (struct urvt_link_tx){ .buf = out + off, .len = len, .dst = &dst };
		if (!plen)
			plen = len;
		off += len;
	}
	assert_int_equal(urvt_link_send(a, tx, (unsigned)n), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(tx[i].ip_id, i); /* one run: segment index */
	assert_int_equal(recv_some(b, n, in, sizeof(in), &got, NULL), n);
	assert_int_equal(got, off);
	/* split as the transport does, check every packet's ICRC and ID */
	for (uint32_t o = 0, k = 0; o < got; k++) {
		uint32_t len = got - o < plen ? (uint32_t)(got - o) : plen;
		struct urvt_ipinfo ip;
		urvt_ipinfo_v4(&ip, *(const uint32_t *)&a->info.addr6.s6_addr[12],
			       *(const uint32_t *)&b->info.addr6.s6_addr[12], URVT_ROCE_UDP_PORT,
			       URVT_ROCE_UDP_PORT);
		assert_int_equal(urvt_icrc_check(&ip, in + o, len, URVT_ICRC_V4_ID_UNKNOWN), 0);
		assert_int_equal(ip.ip_id, k);
		assert_int_equal(bth_psn(in + o), k);
		o += len;
	}
	urvt_link_close(a);
	urvt_link_close(b);
}

/* Sends n plain packets a -> b (seeds from seed) in one batch and waits
 * until they are in b's socket. */
static void send_n(struct urvt_link *a, struct urvt_link *b, int n, uint8_t seed)
{
	static uint8_t out[40 * 200];
	struct urvt_link_tx tx[40];
	union urvt_link_addr dst = addr_of(b);
	struct pollfd pfd = { .fd = b->wake_fd, .events = POLLIN };
	uint32_t off = 0;

	assert_true(n <= 40);
	for (int i = 0; i < n; i++) {
		uint32_t len = build_pkt(out + off, a, b, 100, (uint8_t)(seed + i));
		tx[i] = (struct urvt_link_tx){ .buf = out + off, .len = len, .dst = &dst };
		off += len;
	}
	assert_int_equal(urvt_link_send(a, tx, (unsigned)n), 0);
	assert_int_equal(poll(&pfd, 1, 2000), 1);
	usleep(20000); /* loopback delivers within the send; margin for a loaded machine */
}

/* One receive batch: how many datagrams, each checked to be the next
 * expected one (its PSN is its seed). */
static unsigned recv_batch_checked(struct urvt_link *b, uint32_t *next_psn)
{
	struct urvt_link_rx rx[32];
	int n = urvt_link_recv(b, rx, 32);

	assert_true(n >= 0);
	for (int i = 0; i < n; i++) {
		struct urvt_pkt p;
		assert_int_equal(urvt_pkt_parse(rx[i].data, rx[i].len, &p), 0);
		assert_int_equal(p.psn, *next_psn);
		(*next_psn)++;
	}
	return (unsigned)n;
}

/* The receive side offers recvmmsg as many slots as the traffic fills
 * (udp.c): after a batch of one, one slot; two full batches in a row
 * double the offer, back up to 32. Nothing is lost or reordered on the
 * way. */
static void test_recv_batch_adapts(void **state)
{
	int err = 0;
	struct urvt_link *a = open_link(ADDR_A, false, false, NULL, NULL, &err);
	struct urvt_link *b = open_link(ADDR_B, false, false, NULL, NULL, &err);
	static const unsigned ramp[] = { 1, 1, 2, 4, 8, 16, 8 };
	uint32_t psn = 0;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	/* a ping-pong's single datagram: the next offer is one slot */
	send_n(a, b, 1, 0);
	assert_int_equal(recv_batch_checked(b, &psn), 1);
	assert_int_equal(recv_batch_checked(b, &psn), 0);
	/* five waiting: 1 (full, the first), 1 (full again: doubles), 2, 1 */
	send_n(a, b, 5, (uint8_t)psn);
	assert_int_equal(recv_batch_checked(b, &psn), 1);
	assert_int_equal(recv_batch_checked(b, &psn), 1);
	assert_int_equal(recv_batch_checked(b, &psn), 2);
	assert_int_equal(recv_batch_checked(b, &psn), 1);
	assert_int_equal(recv_batch_checked(b, &psn), 0);
	/* a stream of 40: the offer ramps from one back to the full 32 */
	send_n(a, b, 40, (uint8_t)psn);
	for (unsigned i = 0; i < sizeof(ramp) / sizeof(ramp[0]); i++)
		assert_int_equal(recv_batch_checked(b, &psn), ramp[i]);
	assert_int_equal(recv_batch_checked(b, &psn), 0);
	assert_int_equal(psn, 46);
	send_n(a, b, 40, (uint8_t)psn);
	assert_int_equal(recv_batch_checked(b, &psn), 8); /* the last batch's 8 */
	assert_int_equal(recv_batch_checked(b, &psn), 8); /* full twice: doubles */
	assert_int_equal(recv_batch_checked(b, &psn), 16);
	assert_int_equal(recv_batch_checked(b, &psn), 8);
	assert_int_equal(psn, 86);
	urvt_link_close(a);
	urvt_link_close(b);
}

/* drop=1: nothing leaves, each packet says why; dup=1: each arrives twice. */
static void test_fault_injection(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	struct urvt_link *a, *b;
	static uint8_t out[4 * MAXPKT], in[16 * MAXPKT];
	struct urvt_link_tx tx[3];
	union urvt_link_addr dst;
	uint32_t off = 0;
	size_t got;

	(void)state;
	assert_non_null(p);
	b = open_link(ADDR_B, false, false, NULL, NULL, &err);
	assert_non_null(b);
	dst = addr_of(b);

	a = open_link(ADDR_A, true, false, "drop=1", p, &err);
	assert_non_null(a);
	assert_true(a->faults);
	for (int i = 0; i < 3; i++) {
		uint32_t len = build_pkt(out + off, a, b, 64, (uint8_t)i);
		tx[i] = (struct urvt_link_tx){ .buf = out + off, .len = len, .dst = &dst };
		off += len;
	}
	assert_int_equal(urvt_link_send(a, tx, 3), 0);
	for (int i = 0; i < 3; i++)
		assert_true(tx[i].fault & URVT_FAULT_F_DROP);
	assert_int_equal(recv_some(b, 1, in, sizeof(in), &got, NULL), 0);
	urvt_link_close(a);

	a = open_link(ADDR_A, true, false, "dup=1", p, &err);
	assert_non_null(a);
	assert_int_equal(urvt_link_send(a, tx, 3), 0);
	for (int i = 0; i < 3; i++)
		assert_true(tx[i].fault & URVT_FAULT_F_DUP);
	assert_int_equal(recv_some(b, 6, in, sizeof(in), &got, NULL), 6);
	assert_int_equal(got, 2 * off);
	urvt_link_close(a);

	/* held back, then released by the timer (or at close) */
	a = open_link(ADDR_A, true, false, "reorder=1", p, &err);
	assert_non_null(a);
	assert_int_equal(urvt_link_send(a, tx, 3), 0);
	for (int i = 0; i < 3; i++)
		assert_true(tx[i].fault & URVT_FAULT_F_REORDER);
	assert_int_equal(recv_some(b, 3, in, sizeof(in), &got, NULL), 3);
	assert_int_equal(got, off);
	urvt_link_close(a);

	urvt_link_close(b);
	urvt_progress_destroy(p);
}

static void test_fault_parse(void **state)
{
	struct urvt_fault_cfg c;

	(void)state;
	assert_int_equal(urvt_fault_parse("drop=0.05,dup=0.01,reorder=0.02,corrupt=0.5,"
					  "delay_us=50,seed=7", &c), 0);
	assert_true(c.drop == 0.05 && c.dup == 0.01 && c.reorder == 0.02 && c.corrupt == 0.5);
	assert_int_equal(c.delay_us, 50);
	assert_int_equal(c.seed, 7);
	assert_true(urvt_fault_active(&c));
	/* empty: nothing active, default seed */
	assert_int_equal(urvt_fault_parse("", &c), 0);
	assert_false(urvt_fault_active(&c));
	assert_int_equal(c.seed, 1);
	assert_int_equal(urvt_fault_parse(NULL, &c), 0);
	assert_false(urvt_fault_active(&c));
	/* only delay: active */
	assert_int_equal(urvt_fault_parse("delay_us=10", &c), 0);
	assert_true(urvt_fault_active(&c));
	/* every malformed spec is refused */
	static const char *const bad[] = {
		"drop",       "drop=",        "drop=1.5",    "drop=-0.1", "drop=abc",
		"dup=0.1x",   "unknown=1",    "=0.5",        "delay_us=", "delay_us=abc",
		"delay_us=-5", "seed=x",      "drop=0.1,,",  "drop=0.1,bogus", "drop=nan",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (urvt_fault_parse(bad[i], &c) != -EINVAL)
			fail_msg("URVT_FAULT=\"%s\" accepted", bad[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bind_and_info),
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_batch_plain),
		cmocka_unit_test(test_batch_gso_gro),
		cmocka_unit_test(test_recv_batch_adapts),
		cmocka_unit_test(test_fault_injection),
		cmocka_unit_test(test_fault_parse),
	};

	/* the links here stand alone: a process's one shared address is
	 * tested by tests/link/host_share.sh */
	setenv("URVT_SHARE", "0", 1);

	return cmocka_run_group_tests(tests, NULL, NULL);
}
