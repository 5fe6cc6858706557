/*
 * The shm link's peer slots are reused (link/shm.c, the top): a long-lived
 * device that has met more peers over its life than it has slots
 * (SHM_MAX_PEERS, 256) still reaches a new one over shm, and an address
 * it kept from a departed peer reaches nobody, in particular not the
 * peer that took the slot after it. Each short-lived peer is a link of
 * this process with a GID of its own: to the long-lived link, another
 * peer. The test plays the progress thread and the receive loop.
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "link/shm.h"
#include "wire/ip.h"

#define PEERS 300 /* more than the 256 slots */

static unsigned net; /* 127.<net>.x.y: apart from a concurrent run's */

static struct in6_addr gid_n(unsigned i)
{
	struct in6_addr g;

	/* 0: the long-lived link; 1..: the peers */
	urvt_gid_from_v4(g.s6_addr, htonl(127u << 24 | net << 16 | (1 + i / 250) << 8 | (1 + i % 250)));
	return g;
}

static struct urvt_link *open_n(unsigned i)
{
	struct in6_addr g = gid_n(i);
	int err = 0;
	struct urvt_link *l = urvt_shm_open(&g, false, &err);

	if (!l)
		fail_msg("open %u: %d", i, err);
	return l;
}

static void service(struct urvt_link *l)
{
	for (int i = 0; i < 4; i++)
		l->ops->service(l);
}

/* One packet from -> dst; to gets exactly it (its first 4 bytes: seq). */
static void send_one(struct urvt_link *from, const union urvt_link_addr *dst,
		     struct urvt_link *to, uint32_t seq)
{
	uint8_t buf[64] = { 0 };
	struct urvt_link_tx tx = { .buf = buf, .len = sizeof(buf), .dst = dst };
	struct urvt_link_rx rx[4];
	uint32_t got;

	memcpy(buf, &seq, 4);
	if (urvt_link_send(from, &tx, 1))
		fail_msg("packet %u lost", seq);
	if (urvt_link_recv(to, rx, 4) != 1)
		fail_msg("packet %u not received", seq);
	memcpy(&got, rx[0].data, 4);
	assert_int_equal(got, seq);
	assert_memory_equal(rx[0].ip.sgid, &from->info.addr6, 16);
	assert_int_equal(urvt_link_recv(to, rx, 4), 0);
}

/* l's counters, with its peers reaped as far as they go: the progress
 * thread and the receive loop take turns, as a device's do. */
static struct urvt_shm_stats settle(struct urvt_link *l)
{
	struct urvt_link_rx rx[4];
	struct urvt_shm_stats st;

	for (int k = 0; k < 3; k++) {
		service(l);
		assert_int_equal(urvt_link_recv(l, rx, 4), 0);
	}
	urvt_shm_get_stats(l, &st);
	return st;
}

static void test_more_peers_than_slots(void **state)
{
	struct urvt_link *srv = open_n(0);
	union urvt_link_addr back[PEERS + 1], to;
	uint8_t buf[64] = { 0 };
	struct urvt_link_tx tx = { .buf = buf, .len = sizeof(buf) };
	struct urvt_link_rx rx[4];
	struct urvt_shm_stats st;
	bool reused = false;

	(void)state;
	for (unsigned i = 1; i <= PEERS; i++) {
		struct urvt_link *c = open_n(i);

		/* c connects, the server answers on the same connection */
		if (urvt_link_resolve(c, srv->info.addr6.s6_addr, URVT_LINK_QPN_ANY, &to) < 0)
			fail_msg("peer %u: no shm route to the server", i);
		service(srv);
		service(c);
		urvt_shm_get_stats(srv, &st);
		if (st.peers_up != 1)
			fail_msg("peer %u: the server has %u peers up (%u refused)", i, st.peers_up,
				 st.refused);
		send_one(c, &to, srv, i);
		assert_int_equal(urvt_link_resolve(srv, c->info.addr6.s6_addr, URVT_LINK_QPN_ANY,
						   &back[i]),
				 URVT_LINK_REACH_GID);
		send_one(srv, &back[i], c, 1000 + i);
		for (unsigned k = 1; k < i; k++)
			if ((back[k].peer.id & 0xff) == (back[i].peer.id & 0xff))
				reused = true;
		urvt_link_close(c);
		st = settle(srv);
		assert_int_equal(st.peers_up, 0);
		assert_int_equal(st.peers_gone, i);
	}
	assert_true(reused);

	/* a new peer, after 300: still over shm, both ways */
	{
		struct urvt_link *c = open_n(PEERS + 1);

		assert_true(urvt_link_resolve(c, srv->info.addr6.s6_addr, URVT_LINK_QPN_ANY, &to) >= 0);
		service(srv);
		service(c);
		send_one(c, &to, srv, 7777);
		assert_int_equal(urvt_link_resolve(srv, c->info.addr6.s6_addr, URVT_LINK_QPN_ANY,
						   &back[0]),
				 URVT_LINK_REACH_GID);
		send_one(srv, &back[0], c, 8888);
		/* every address of a departed peer is dead, even where its slot
		 * has a live occupant now: nothing reaches c */
		for (unsigned i = 1; i <= PEERS; i++) {
			tx.dst = &back[i];
			assert_int_equal(urvt_link_send(srv, &tx, 1), 1);
			assert_true(back[i].peer.id != back[0].peer.id);
		}
		assert_int_equal(urvt_link_recv(c, rx, 4), 0);
		urvt_shm_get_stats(srv, &st);
		assert_int_equal(st.peers_up, 1);
		urvt_link_close(c);
	}
	urvt_link_close(srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_more_peers_than_slots),
	};

	net = 100 + (unsigned)getpid() % 100;
	alarm(60);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
