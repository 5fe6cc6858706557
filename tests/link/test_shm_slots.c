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
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/timer.h"
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

/* A record being written to a peer that leaves meanwhile: the writer
 * holds the peer's tx_lock from tx_reserve to tx_commit, and the slot's
 * release (its fds closed, its region parked) waits for it. */
struct held_writer {
	struct urvt_link *l;
	const union urvt_link_addr *dst;
	_Atomic int stage;                /* 1: reserved, 2: committed */
};

#define HOLD_NS 150000000ull

static void *write_slowly(void *arg)
{
	struct held_writer *w = arg;
	uint8_t *p = w->l->ops->tx_reserve(w->l, w->dst, 64, URVT_TX_WAIT_NOW);

	if (!p) {
		atomic_store(&w->stage, -1);
		return NULL;
	}
	atomic_store(&w->stage, 1);
	for (uint64_t end = urvt_now_ns() + HOLD_NS; urvt_now_ns() < end;)
		usleep(1000);
	memset(p, 0x5a, 64);
	/* the peer is gone by now; what matters is who comes first */
	atomic_store(&w->stage, 2);
	w->l->ops->tx_commit(w->l, w->dst, 64);
	return NULL;
}

static void test_release_waits_for_a_writer(void **state)
{
	struct urvt_link *srv = open_n(PEERS + 2), *c = open_n(PEERS + 3);
	union urvt_link_addr to, back;
	struct held_writer w = { .l = srv, .dst = &back };
	struct urvt_shm_stats st;
	pthread_t t;
	uint64_t t0;

	(void)state;
	assert_true(urvt_link_resolve(c, srv->info.addr6.s6_addr, URVT_LINK_QPN_ANY, &to) >= 0);
	service(srv);
	service(c);
	send_one(c, &to, srv, 1);
	assert_int_equal(urvt_link_resolve(srv, c->info.addr6.s6_addr, URVT_LINK_QPN_ANY, &back),
			 URVT_LINK_REACH_GID);
	assert_int_equal(pthread_create(&t, NULL, write_slowly, &w), 0);
	while (!atomic_load(&w.stage))
		usleep(100);
	assert_int_equal(atomic_load(&w.stage), 1);
	urvt_link_close(c);
	t0 = urvt_now_ns();
	st = settle(srv); /* retire, the receive loop's ack, release */
	/* the release waited for the writer's commit */
	assert_int_equal(atomic_load(&w.stage), 2);
	assert_true(urvt_now_ns() - t0 > HOLD_NS / 2);
	assert_int_equal(st.peers_gone, 1);
	pthread_join(t, NULL);
	/* the slot was let go: a new peer takes it and is reached */
	c = open_n(PEERS + 4);
	assert_true(urvt_link_resolve(c, srv->info.addr6.s6_addr, URVT_LINK_QPN_ANY, &to) >= 0);
	service(srv);
	service(c);
	send_one(c, &to, srv, 2);
	urvt_link_close(c);
	urvt_link_close(srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_more_peers_than_slots),
		cmocka_unit_test(test_release_waits_for_a_writer),
	};

	net = 100 + (unsigned)getpid() % 100;
	alarm(60);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
