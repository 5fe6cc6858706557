/*
 * The shared-memory link (link/shm.h, docs/shm.md).
 *
 * A connection between devices A (who connected) and B is one memfd that A
 * made: a header, then for each direction a control block and a ring of
 * SHM_RING_BYTES. Direction 0 is A to B, 1 is B to A. A packet is one
 * record: an 8-byte header (its length and ready mark) and the packet,
 * padded to 64 bytes; a record never wraps: where the rest of the ring is
 * too short, a WRAP record fills it. head and tail are free-running byte
 * counts. Each ring has one producer process and one consumer process:
 *
 *   producer: write the record at pos, make sure the slot after it has
 *             its mark cleared (tx_mark: mostly done ahead of time),
 *             store-release the record's mark (SHM-P0); after a batch,
 *             store-release head (SHM-P1); fence; if need_wake: clear it,
 *             write the consumer's doorbell.
 *   consumer: load-acquire the mark at tail (SHM-C0, pairs with SHM-P0):
 *             the record is there when it is tail's mark, and the next
 *             slot's mark is cleared or the next record's; hand the packets
 *             out; the next batch store-releases tail (SHM-C2, pairs with
 *             the producer's load-acquire of tail before it reuses the
 *             bytes). Only when no mark is there: load-acquire head
 *             (SHM-C1, pairs with SHM-P1); a head ahead of tail with no mark
 *             at tail is a broken peer.
 *   arm:      set need_wake; fence; look at head and the mark again (a
 *             packet that came in between is seen here or rings the
 *             doorbell).
 *
 * The mark spares the consumer a read of the producer's head line per
 * message: one cache miss less on the way of a ping-pong (docs/shm.md).
 *
 * Several threads of the producing process may send to one peer: they
 * take the peer's tx_lock, which lives in local memory, out of the peer's
 * reach (biased: the thread that sends to it run after run takes it with
 * plain stores, base/biaslock.h). The consumer side runs under the transport's rx_lock (one thread).
 * Peers are added by resolve (any thread) and service (progress thread)
 * under peers_lock; npeers (release store) only grows, and the hot paths
 * read the slots below it without a lock.
 *
 * Slots are reused, so that a long-lived device keeps meeting new peers.
 * A slot's memory (struct shm_peer, its region's address range) lasts as
 * long as the link; what a departed peer held (socket, doorbell, the
 * region's pages) is let go by shm_peers_reap (peers_lock held; the slots,
 * regions and handshake messages are in link/shm_peer.c) in two steps:
 *   retire:  a DEAD peer, or a GONE one whose ring the receive loop found
 *            drained, goes RETIRING (a CAS: the receive loop may be killing
 *            it at the same time) and its gen moves on; then retire_req.
 *   release: once the receive loop has acked that retire_req (it does at
 *            the start of a batch: what it handed out before is done with,
 *            and it looked at the states after the request, so it will not
 *            touch the peer again), no enterer is inside (users == 0) and
 *            the reaper has had the peer's tx_lock once (a record's writer
 *            that saw the peer UP is out), the fds are closed, the region
 *            is parked and the slot is FREE.
 * A record's writer takes the peer's tx_lock, then checks that the peer is
 * UP and of the generation its address names (tx_lock_peer: either it
 * sees RETIRING, or the reaper's take of the lock waits for it). Whatever
 * else uses the peer's fds or pid (the doorbell's kick, a cross-memory
 * copy) enters it by raising users, then checking the same (seq_cst both
 * sides: either the enterer sees RETIRING, or the reaper sees it inside
 * and waits). Readers that neither write nor hold fds (pending,
 * arm, lookup) are not waited for: a parked region is an anonymous mapping
 * over the same range, never a hole, so a stale read finds zeros or the
 * next occupant's ring, at worst a spurious "pending"; lookup rereads gen
 * after the fields it matched (a seqlock). A peer address (and epoll's tag)
 * carries the slot's gen, so an address kept from an earlier occupant never
 * reaches the next one (8 bits of it in the address: see peer_new for how
 * slots are picked to make that wrap rare).
 *
 * A peer is a (GID, host registry slot) pair: processes of one user share
 * a GID, and a QPN's top byte names the slot of the process that owns it
 * (docs/host-identity.md). Slot 0 is a process without a registry, which
 * owns every QPN of its GID. A UD work request may go to another slot than
 * its address handle's route: lookup finds a connected peer without a
 * system call, resolve_later has the progress thread connect (service).
 */
#include "base/env.h"
#include "link/shm_priv.h"

/* ------------------------------------------------------------------ */
/* resolve: connect to the device with this GID and slot if it is here */
/* ------------------------------------------------------------------ */
static int connect_peer(struct urvt_shm *s, const uint8_t gid[16], uint8_t slot,
			struct shm_peer *p)
{
	struct sockaddr_un sun;
	socklen_t len = shm_sock_name_slot(&sun, s->uid, gid, slot);
	struct shm_msg m;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
	int fds[2], rfd, ret;

	p->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (p->sock < 0)
		return -errno;
	if (connect(p->sock, (struct sockaddr *)&sun, len)) {
		ret = -errno; /* no urvt device of ours with that GID in this namespace */
		goto err_sock;
	}
	if (!peer_is_us(p, s->uid)) {
		atomic_fetch_add(&s->refused, 1);
		ret = -EPERM;
		goto err_sock;
	}
	rfd = shm_region_create(p);
	if (rfd < 0) {
		ret = rfd;
		goto err_sock;
	}
	memcpy(p->region->gid_a, &s->link.info.addr6, 16);
	memcpy(p->region->gid_b, gid, 16);
	p->region->slot_a = s->slot;
	p->region->slot_b = slot;
	p->connector = true;
	memcpy(p->gid, gid, 16);
	p->slot = slot;
	(void)shm_peer_map_dirs(p); /* our own fresh region */
	shm_msg_init(&m, SHM_MSG_HELLO, p->region->gid_a, s->slot, gid, slot);
	fds[0] = rfd;
	fds[1] = s->doorbell;
	ret = shm_send_msg(p->sock, &m, fds, 2);
	close(rfd);
	if (ret)
		goto err_map;
	/* UP before the progress thread can see the socket: the HELLO_ACK may
	 * come at once, and shm_service kills a connection that is not UP */
	ev.data.u64 = shm_peer_tag(s, p);
	atomic_store(&p->state, PEER_UP);
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, p->sock, &ev)) {
		/* senders may have seen it UP: peers_reap lets it go */
		ret = -errno;
		shm_peer_kill(s, p);
		return ret;
	}
	return 0;
err_map:
	shm_region_park(p);
err_sock:
	close(p->sock);
	p->sock = -1;
	return ret;
}

/* The slot that owns qpn if it is in a slot's range (0: unknown, or a
 * process without a slot, whose QPNs may have any top byte). */
static uint8_t qpn_slot(uint32_t qpn)
{
	return qpn == URVT_LINK_QPN_ANY ? 0 : (uint8_t)(qpn >> 16);
}

/* resolve and lookup's answer for peer p of generation gen, whose slot
 * (host registry) is pslot. */
static int peer_addr(struct urvt_shm *s, struct shm_peer *p, uint32_t gen, uint8_t pslot,
		     union urvt_link_addr *out)
{
	out->peer.family = URVT_LINK_AF_PEER;
	out->peer.id = (uint16_t)((gen & 0xffu) << 8 | (uint32_t)(p - s->peers));
	return pslot ? 0 : URVT_LINK_REACH_GID;
}

/* The address of an UP peer that owns qpn of gid (the one in its slot, or
 * a process without a slot: it owns the whole GID), or -ENOENT. No lock: a
 * peer's gid and slot are written before it is UP and change only when its
 * slot is reused, after gen moved on: read between two looks at gen (a
 * seqlock: the top). */
static int peer_find(struct urvt_shm *s, const uint8_t gid[16], uint32_t qpn,
		     union urvt_link_addr *out)
{
	uint32_t npeers = atomic_load_explicit(&s->npeers, memory_order_acquire);
	uint8_t slot = qpn_slot(qpn);

	for (uint32_t i = 0; i < npeers; i++) {
		struct shm_peer *p = &s->peers[i];
		uint32_t gen = atomic_load_explicit(&p->gen, memory_order_acquire);
		uint8_t pslot;
		bool match;

		if (atomic_load_explicit(&p->state, memory_order_acquire) != PEER_UP)
			continue;
		pslot = READ_ONCE(p->slot);
		match = (pslot == slot || !pslot) && !memcmp(p->gid, gid, 16);
		atomic_thread_fence(memory_order_acquire);
		if (match && atomic_load_explicit(&p->gen, memory_order_relaxed) == gen)
			return peer_addr(s, p, gen, pslot, out);
	}
	return -ENOENT;
}

/* (gid, slot) is this device: our GID, and our slot or any slot if we have
 * none (then no other process has our GID). */
static bool is_self(struct urvt_shm *s, const uint8_t gid[16], uint8_t slot)
{
	return !memcmp(gid, &s->link.info.addr6, 16) && (slot == s->slot || !s->slot);
}

/*
 * The listeners that may own qpn of gid, in order: the one of its slot
 * (qpn >> 16), then slot 0 (a process without a registry owns QPNs of any
 * top byte). An unknown QPN (URVT_LINK_QPN_ANY) tries slot 0 only: among
 * processes with slots, no one answers for the others. Ourselves: the
 * in-process path (-ENOENT), unless to_self.
 */
static int shm_resolve(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn,
		       union urvt_link_addr *out)
{
	struct urvt_shm *s = shm_of(l);
	uint8_t slots[2];
	unsigned nslots = 0;
	struct shm_peer *p;
	int ret = -ENOENT;

	if (qpn_slot(qpn))
		slots[nslots++] = qpn_slot(qpn);
	else if (qpn == URVT_LINK_QPN_ANY && s->to_self && s->slot &&
		 !memcmp(gid, &l->info.addr6, 16))
		/* URVT_PATH=shm: an AH to our own GID carries our own QPs'
		 * traffic first (others' WRs find their peers per WR) */
		slots[nslots++] = s->slot;
	slots[nslots++] = 0;
	pthread_mutex_lock(&s->peers_lock);
	ret = peer_find(s, gid, qpn, out);
	if (ret >= 0)
		goto out;
	ret = -ENOENT;
	for (unsigned i = 0; i < nslots; i++) {
		uint8_t slot = slots[i];
		if (is_self(s, gid, slot)) {
			if (!s->to_self)
				break; /* the in-process path */
			slot = s->slot;
		}
		p = shm_peer_new(s);
		if (!p) {
			ret = -ENOSPC;
			break;
		}
		ret = connect_peer(s, gid, slot, p);
		if (!ret) {
			ret = peer_addr(s, p, atomic_load(&p->gen), p->slot, out);
			break;
		}
		if (is_self(s, gid, slots[i]))
			break;
	}
out:
	shm_peers_reap(s);
	pthread_mutex_unlock(&s->peers_lock);
	return ret;
}

static int shm_lookup(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn,
		      union urvt_link_addr *out)
{
	return peer_find(shm_of(l), gid, qpn, out);
}

/* Note (gid, the QPN's slot) for service to resolve, and ring it once. A
 * full table drops the wish: a later work request asks again. */
static void shm_resolve_later(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn)
{
	struct urvt_shm *s = shm_of(l);
	uint8_t slot = qpn_slot(qpn);
	uint64_t now = urvt_now_ns();
	struct shm_want *w = NULL;
	bool ring = false;

	if (gid[0] == 0xff || (is_self(s, gid, slot) && !s->to_self))
		return; /* a multicast group (UDP's), or ourselves (in-process) */
	urvt_spin_lock(&s->wants_lock);
	for (unsigned i = 0; i < SHM_WANTS; i++) {
		struct shm_want *c = &s->wants[i];
		if (c->state != WANT_FREE && c->slot == slot && !memcmp(c->gid, gid, 16)) {
			w = c;
			break;
		}
		/* a free entry, else a failure due to be tried again */
		if (!w || w->state != WANT_FREE) {
			if (c->state == WANT_FREE ||
			    (c->state == WANT_FAILED && (int64_t)(now - c->retry_ns) >= 0))
				w = c;
		}
	}
	if (w && (w->state == WANT_FREE ||
		  (w->state == WANT_FAILED && (int64_t)(now - w->retry_ns) >= 0))) {
		memcpy(w->gid, gid, 16);
		w->slot = slot;
		w->state = WANT_ASKED;
		ring = true;
	}
	urvt_spin_unlock(&s->wants_lock);
	if (ring)
		ring_doorbell(s->ask_fd);
}

/* ------------------------------------------------------------------ */
/* service: the listener and the connections (progress thread)        */
/* ------------------------------------------------------------------ */
static void accept_peers(struct urvt_shm *s)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
		struct shm_peer *p, *pf;

		if (fd < 0)
			return;
		pthread_mutex_lock(&s->peers_lock);
		p = pf = shm_peer_new(s);
		if (p) {
			p->sock = fd;
			if (!peer_is_us(p, s->uid)) {
				atomic_fetch_add(&s->refused, 1);
				p = NULL;
			}
		}
		if (p) {
			ev.data.u64 = shm_peer_tag(s, p);
			if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev))
				p = NULL;
		}
		if (p) {
			atomic_store(&p->state, PEER_HANDSHAKE);
		} else {
			close(fd);
			if (pf)
				pf->sock = -1; /* stays FREE */
		}
		pthread_mutex_unlock(&s->peers_lock);
	}
}

/* B's side: the connector's HELLO with its region and doorbell. */
static void peer_hello(struct urvt_shm *s, struct shm_peer *p, const struct shm_msg *m,
		       int fds[2], int nfds)
{
	struct shm_msg ack;
	bool ok, acked;

	if (m->type != SHM_MSG_HELLO || nfds != 2 || memcmp(m->to_gid, &s->link.info.addr6, 16) ||
	    m->to_slot != s->slot)
		goto bad;
	ok = shm_region_map(p, fds[0]);
	close(fds[0]);
	fds[0] = -1;
	if (!ok || memcmp(p->region->gid_a, m->from_gid, 16) ||
	    memcmp(p->region->gid_b, m->to_gid, 16) || p->region->slot_a != m->from_slot ||
	    p->region->slot_b != m->to_slot)
		goto bad;
	memcpy(p->gid, m->from_gid, 16);
	p->slot = m->from_slot;
	p->connector = false;
	if (!shm_peer_map_dirs(p) || !doorbell_take(s, fds[1]))
		goto bad;
	atomic_store(&p->doorbell, fds[1]);
	fds[1] = -1;
	shm_msg_init(&ack, SHM_MSG_HELLO_ACK, m->to_gid, m->to_slot, m->from_gid, m->from_slot);
	acked = !shm_send_msg(p->sock, &ack, &s->doorbell, 1);
	atomic_store(&p->state, PEER_UP);
	/* A connector that left right after its HELLO (a UD sender that exits
	 * after its last send) cannot take the ACK, but its packets are in
	 * the ring: it is GONE, and what it sent is read all the same. */
	if (!acked)
		shm_peer_end(s, p, PEER_GONE);
	/* packets may be in the ring already: look at it */
	ring_doorbell(s->doorbell);
	return;
bad:
	for (int i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	atomic_fetch_add(&s->refused, 1);
	shm_peer_kill(s, p);
}

/* A's side: B's doorbell. A packet sent before it came may wait for it. */
static void peer_hello_ack(struct urvt_shm *s, struct shm_peer *p, const struct shm_msg *m,
			   int fds[2], int nfds)
{
	if (m->type != SHM_MSG_HELLO_ACK || nfds != 1 || atomic_load(&p->doorbell) >= 0 ||
	    memcmp(m->from_gid, p->gid, 16) || m->from_slot != p->slot ||
	    memcmp(m->to_gid, &s->link.info.addr6, 16) || m->to_slot != s->slot ||
	    !doorbell_take(s, fds[0])) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		shm_peer_kill(s, p);
		return;
	}
	atomic_store(&p->doorbell, fds[0]);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&p->tx_ctrl->need_wake) && atomic_exchange(&p->tx_ctrl->need_wake, 0))
		ring_doorbell(fds[0]);
}

/* What resolve_later asked for: resolve each (it may connect: system
 * calls, here on the progress thread), so that lookup finds the peer; a
 * destination not reached is not tried again for SHM_RETRY_NS. */
static void resolve_wanted(struct urvt_shm *s)
{
	uint64_t v;

	(void)!read(s->ask_fd, &v, sizeof(v));
	for (unsigned i = 0; i < SHM_WANTS; i++) {
		struct shm_want *w = &s->wants[i];
		union urvt_link_addr a;
		uint8_t gid[16], slot;
		int ret;

		urvt_spin_lock(&s->wants_lock);
		if (w->state != WANT_ASKED) {
			urvt_spin_unlock(&s->wants_lock);
			continue;
		}
		w->state = WANT_CONNECTING;
		memcpy(gid, w->gid, 16);
		slot = w->slot;
		urvt_spin_unlock(&s->wants_lock);
		ret = shm_resolve(&s->link, gid, (uint32_t)slot << 16, &a);
		urvt_spin_lock(&s->wants_lock);
		w->state = ret < 0 ? WANT_FAILED : WANT_FREE;
		w->retry_ns = urvt_now_ns() + SHM_RETRY_NS;
		urvt_spin_unlock(&s->wants_lock);
	}
}

static void shm_service(struct urvt_link *l)
{
	struct urvt_shm *s = shm_of(l);
	struct epoll_event ev[16];
	int n = epoll_wait(s->epfd, ev, 16, 0);

	for (int i = 0; i < n; i++) {
		uint64_t tag = ev[i].data.u64;
		uint32_t idx = (uint32_t)tag;
		struct shm_peer *p;
		struct shm_msg m;
		int fds[2] = { -1, -1 }, nfds;
		bool hup;

		if (tag == SHM_TAG_LISTEN) {
			accept_peers(s);
			continue;
		}
		if (tag == SHM_TAG_ASK) {
			resolve_wanted(s);
			continue;
		}
		/* an event of a slot's earlier occupant (reaped since): not
		 * this one's (the slot's memory lasts: the read is safe) */
		if (idx >= atomic_load(&s->npeers) ||
		    atomic_load(&s->peers[idx].gen) != (uint32_t)(tag >> 32))
			continue;
		p = &s->peers[idx];
		hup = ev[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR);
		/* A peer that hung up may have sent its HELLO first: an acceptor
		 * takes it all the same (its packets are in the region it
		 * names), then the peer is GONE. */
		if (hup && !(atomic_load(&p->state) == PEER_HANDSHAKE && (ev[i].events & EPOLLIN))) {
			shm_peer_end(s, p, PEER_GONE);
			/* what it sent before it left is still read: look */
			ring_doorbell(s->doorbell);
			continue;
		}
		nfds = shm_recv_msg(p->sock, &m, fds);
		/* no message (hung up before its HELLO), or a malformed one */
		if (nfds < 0)
			shm_peer_kill(s, p);
		else if (atomic_load(&p->state) == PEER_HANDSHAKE)
			peer_hello(s, p, &m, fds, nfds);
		else if (atomic_load(&p->state) == PEER_UP && p->connector)
			peer_hello_ack(s, p, &m, fds, nfds);
		else {
			for (int k = 0; k < nfds; k++)
				close(fds[k]);
			shm_peer_kill(s, p);
		}
	}
	/* a resolve holding the lock reaps on its way out (and service may
	 * run inside that resolve: test_hello_ack_before_resolve_returns) */
	if (!pthread_mutex_trylock(&s->peers_lock)) {
		shm_peers_reap(s);
		pthread_mutex_unlock(&s->peers_lock);
	}
}

/* ------------------------------------------------------------------ */
/* Data                                                               */
/* ------------------------------------------------------------------ */
/* SHM-P1: the records before tx_head are written. */
static void tx_publish(struct shm_peer *p)
{
	atomic_store_explicit(&p->tx_ctrl->head, p->tx_head, memory_order_release);
}

/* After a publish: the consumer sets need_wake, then looks at head; we
 * stored head, now look at need_wake: one of us sees the other. */
static bool peer_sleeps(struct shm_peer *p)
{
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load_explicit(&p->tx_ctrl->need_wake, memory_order_relaxed);
}

/* Ring a sleeping peer's doorbell. No doorbell yet (HELLO_ACK not in):
 * leave need_wake for peer_hello_ack, which rings it when it comes. */
static void tx_kick_peer(struct shm_peer *p)
{
	int db;

	if (!peer_sleeps(p))
		return;
	db = atomic_load_explicit(&p->doorbell, memory_order_acquire);
	if (db >= 0 && atomic_exchange(&p->tx_ctrl->need_wake, 0))
		ring_doorbell(db);
}

/* The peer's ring to us may be too full for its largest record (and a
 * WRAP): it may be waiting for us. Its head is the peer's word, which only
 * decides how long we wait. */
static bool peer_waits_on_us(struct shm_peer *p)
{
	uint32_t head = atomic_load_explicit(&p->rx_ctrl->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&p->rx_ctrl->tail, memory_order_relaxed);
	uint32_t win = atomic_load_explicit(&p->rx_ctrl->win, memory_order_relaxed);
	uint32_t used = head - tail;

	if (!win || win > SHM_RING_BYTES)
		win = SHM_RING_BYTES;
	if (used > SHM_RING_BYTES)
		return true;
	/* a head a lap ahead skipped the ring's end past its WRAP: at least
	 * the part beyond the window, which holds nothing */
	if ((head ^ tail) & ~(SHM_RING_BYTES - 1) && used >= SHM_RING_BYTES - win)
		used -= SHM_RING_BYTES - win;
	return used > win || win - used < 2 * shm_rec_bytes(shm_pkt_max_for_win(win));
}

/* Free bytes in p's ring if the consumer is at tail (tx_lock held). */
static uint32_t tx_free(const struct shm_peer *p, uint32_t tail)
{
	return SHM_RING_BYTES - (p->tx_head - tail);
}

/* p's ring has need free bytes (tx_lock held, tx_head at the end of a
 * record; waits for the consumer, as long as the rules above say for wait,
 * link.h urvt_tx_wait: a lossless link holds back rather than drops). A
 * consumer that let a wait time out is not waited for again until it
 * moves. */
static bool tx_room(struct shm_peer *p, uint32_t need, unsigned wait)
{
	uint64_t start = 0, moved_at = 0;
	uint32_t seen = 0;

	/* the consumer's tail line is read only when the last look says the
	 * ring is full: in a ping-pong that is one cache miss less per send */
	if (tx_free(p, p->tx_tail_seen) >= need)
		return true;
	for (unsigned spins = 0;; spins++) {
		uint32_t tail = atomic_load_explicit(&p->tx_ctrl->tail, memory_order_acquire);
		uint64_t now;
		bool give_up;

		p->tx_tail_seen = tail;
		if (tx_free(p, tail) >= need) {
			p->tx_stalled = false;
			return true;
		}
		if (atomic_load_explicit(&p->state, memory_order_relaxed) != PEER_UP ||
		    (p->tx_stalled && tail == p->tx_stalled_tail) || wait == URVT_TX_WAIT_NOW)
			return false;
		now = urvt_now_ns();
		if (!start) {
			/* a sleeping consumer would otherwise hear of what fills
			 * its ring only at the batch's kick, after this wait */
			tx_publish(p);
			tx_kick_peer(p);
			start = moved_at = now;
		} else if (tail != seen) {
			moved_at = now;
		}
		if (wait == URVT_TX_WAIT_PATIENT)
			give_up = now - moved_at > SHM_STALL_NS || now - start > SHM_PATIENT_MAX_NS;
		else if (peer_waits_on_us(p))
			give_up = now - start > SHM_FULL_WAIT_NS;
		else
			give_up = now - moved_at > SHM_RX_STALL_NS || now - start > SHM_RX_MAX_NS;
		if (give_up) {
			p->tx_stalled = true;
			p->tx_stalled_tail = tail;
			return false;
		}
		seen = tail;
		/* the consumer may share our CPU */
		if (spins % 64 == 63)
			sched_yield();
		else
			urvt_cpu_relax();
	}
}

/* The record slot at free-running position pos of a ring. */
static struct shm_rec *rec_at(uint8_t *ring, uint32_t pos)
{
	return (struct shm_rec *)(ring + (pos & (SHM_RING_BYTES - 1)));
}

/* The record at tx_head, of bytes bytes, is written (tx_lock held): mark
 * it (SHM-P0). The slot after it may hold payload from an earlier lap that
 * reads as its mark: it is cleared before the mark is stored, here or, as a
 * rule, ahead of time, right after an earlier mark. A clear's store misses
 * (its line was last written a lap ago), and a store ordered before the
 * mark delays the mark's visibility by that miss: a ping-pong's every
 * message, 0.62 -> 0.80 us one way when the clear was made here. Cleared
 * ahead, the miss falls behind the mark. Four slots cover a run of small
 * records; a 4 KiB record clears its next slot here: clearing a whole
 * record's length ahead cost 64 KiB WRITEs 30 % (docs/performance-history.md
 * "Suggestions, ranked" item 9). Ahead, a slot is only read, and written
 * only if it does read as the mark it will be looked at for: the
 * consumer's cache holds those lines (it read them a lap ago), and a store
 * would take each back from it, a miss that every later store, the next
 * record's mark included, waits for (x86 makes stores visible in order); a
 * load finds them in our cache. */
#define SHM_CLEAR_AHEAD (4 * SHM_REC_ALIGN)
static void tx_mark(struct shm_peer *p, uint32_t bytes)
{
	uint32_t next = p->tx_head + bytes;

	if ((int32_t)(p->tx_clear - next) < (int32_t)SHM_REC_ALIGN) {
		atomic_store_explicit(&rec_at(p->tx_ring, next)->mark, 0, memory_order_relaxed);
		p->tx_clear = next + SHM_REC_ALIGN;
	}
	atomic_store_explicit(&rec_at(p->tx_ring, p->tx_head)->mark, shm_rec_mark(p->tx_head),
			      memory_order_release);
	p->tx_head = next;
	/* only slots the consumer has freed (by the tail we last saw), and
	 * inside the window: a page past it is never touched */
	while ((int32_t)(p->tx_clear - next) < (int32_t)SHM_CLEAR_AHEAD &&
	       p->tx_clear + SHM_REC_ALIGN - p->tx_tail_seen <= SHM_RING_BYTES &&
	       (p->tx_clear & (SHM_RING_BYTES - 1)) + SHM_REC_ALIGN <= p->tx_win) {
		_Atomic uint32_t *m = &rec_at(p->tx_ring, p->tx_clear)->mark;
		if (atomic_load_explicit(m, memory_order_relaxed) == shm_rec_mark(p->tx_clear))
			atomic_store_explicit(m, 0, memory_order_relaxed);
		p->tx_clear += SHM_REC_ALIGN;
	}
}

/*
 * Rewind when drained: once tx_head is SHM_REWIND_AT into the ring and the
 * consumer has taken everything but a few small records (a ping-pong's
 * last ACK is still in), the next record goes to the ring's start
 * (after a WRAP record, which the consumer follows from any offset but 0).
 * A ping-pong then stays in the ring's first pages instead of walking all
 * 512 of them: each first write to another page cost a message ~5 us on
 * this project's VMs (every 32nd 8 B ping-pong message, docs/shm.md), and
 * a small working set meets the consumer in cache. Only for small
 * packets: a stream of MTU-sized ones ran 10-15 % slower in a small
 * working set (the producer's stores then take lines the consumer's cache
 * holds; docs/shm.md "rewind"). The look reads the consumer's tail line (a
 * miss), so a ring that is not drained is looked at again only
 * SHM_REWIND_EVERY bytes later.
 */
static bool tx_rewind_due(struct shm_peer *p, uint32_t off, uint32_t maxlen)
{
	uint32_t tail;

	if (maxlen > SHM_REWIND_MAX_PKT || off < SHM_REWIND_AT ||
	    (int32_t)(p->tx_head - p->tx_rewind_look) < 0)
		return false;
	tail = atomic_load_explicit(&p->tx_ctrl->tail, memory_order_acquire);
	p->tx_tail_seen = tail;
	if (p->tx_head - tail <= SHM_REWIND_SLACK)
		return true;
	p->tx_rewind_look = p->tx_head + SHM_REWIND_EVERY;
	return false;
}

/*
 * The window of a device with n peers' regions mapped:
 * SHM_WIN_BUDGET split among them, whole pages, at least SHM_WIN_MIN. A
 * ring's real memory is the pages it ever touched; walking whole rings,
 * 64 processes in an all-to-all grew to 70 MiB each in 8 rounds. With one
 * peer the window is the ring: a single pair streams as before (docs/shm.md
 * "Memory", docs/performance-history.md "Same-host memory per process").
 */
static uint32_t tx_win_for(uint32_t n)
{
	uint32_t w = n > 1 ? (SHM_WIN_BUDGET / n) & ~4095u : SHM_RING_BYTES;

	return w < SHM_WIN_MIN ? SHM_WIN_MIN : w > SHM_RING_BYTES ? SHM_RING_BYTES : w;
}

/* p's window now (tx_lock held): one relaxed load of a line written at a
 * connection's start and end; the consumer hears of a change through
 * ctrl's win. A window that grows needs nothing more: beyond the slots
 * cleared ahead, tx_mark clears the next slot before each mark. */
static uint32_t tx_win(struct shm_peer *p)
{
	uint32_t n = atomic_load_explicit(p->nregions, memory_order_relaxed);

	if (unlikely(n != p->tx_win_n)) {
		p->tx_win_n = n;
		p->tx_win = tx_win_for(n);
		atomic_store_explicit(&p->tx_ctrl->win, p->tx_win, memory_order_relaxed);
	}
	return p->tx_win;
}

/* Room for a record of up to maxlen packet bytes at tx_head, after a WRAP
 * record where the rest of the window is too short or the ring rewinds
 * (tx_lock held); false if there is none in time. In a window shorter than
 * the ring, the slot after the record (its mark is cleared, a WRAP may
 * go there) is inside the window too. */
static bool tx_room_for(struct shm_peer *p, uint32_t maxlen, unsigned wait)
{
	uint32_t off = p->tx_head & (SHM_RING_BYTES - 1), win = tx_win(p);
	uint32_t left = SHM_RING_BYTES - off, need = shm_rec_room(maxlen);
	uint32_t end = off + shm_rec_bytes(maxlen) + (win < SHM_RING_BYTES ? SHM_REC_ALIGN : 0);

	if (end <= win && !tx_rewind_due(p, off, maxlen))
		return tx_room(p, need, wait);
	/* fill the end with a WRAP record, start again at 0 */
	if (!tx_room(p, left + need, wait))
		return false;
	rec_at(p->tx_ring, p->tx_head)->len = SHM_REC_WRAP;
	tx_mark(p, left);
	return true;
}

/* The record at tx_head (tx_lock held). */
static struct shm_rec *tx_head_rec(struct shm_peer *p)
{
	return rec_at(p->tx_ring, p->tx_head);
}

/* The record at tx_head holds a len-byte packet (tx_lock held). */
static void tx_end_rec(struct shm_peer *p, uint32_t len)
{
	tx_head_rec(p)->len = len;
	tx_mark(p, shm_rec_bytes(len));
}

/* Packets [0, n) all go to peer p, whose tx_lock we hold. Returns the
 * number lost. */
static unsigned tx_peer(struct shm_peer *p, struct urvt_link_tx *pk, unsigned n)
{
	unsigned sent = 0;

	for (; sent < n; sent++) {
		if (pk[sent].len > SHM_PKT_MAX ||
		    !tx_room_for(p, pk[sent].len,
				 pk[sent].patient ? URVT_TX_WAIT_PATIENT : URVT_TX_WAIT_RX))
			break;
		memcpy(tx_head_rec(p)->data, pk[sent].buf, pk[sent].len);
		tx_end_rec(p, pk[sent].len);
	}
	tx_publish(p);
	return n - sent;
}

/* The peer a record goes to, its tx_lock taken, if it is up and the one
 * dst names; tx_unlock_peer once its records are written. The lock keeps
 * the slot: the reaper takes it before it lets the peer's fds go (the top,
 * and shm_peers_reap), so a record's writer needs no users count, whose
 * two locked instructions were on every message's way. */
/* The slot dst names, if there is one (what is in it: peer_is). */
static struct shm_peer *peer_slot(struct urvt_shm *s, const union urvt_link_addr *dst)
{
	uint32_t idx = SHM_ID_IDX(dst->peer.id);

	return idx < atomic_load_explicit(&s->npeers, memory_order_acquire) ? &s->peers[idx] : NULL;
}

/* p is up and the occupant dst names (its gen), as the gate or tx_lock of
 * the top asks it. */
static bool peer_is(struct shm_peer *p, const union urvt_link_addr *dst)
{
	return atomic_load(&p->state) == PEER_UP &&
	       (atomic_load_explicit(&p->gen, memory_order_relaxed) & 0xffu) ==
		       SHM_ID_GEN(dst->peer.id);
}

static struct shm_peer *tx_lock_peer(struct urvt_shm *s, const union urvt_link_addr *dst)
{
	struct shm_peer *p = peer_slot(s, dst);
	bool fast;

	if (!p)
		return NULL;
	fast = urvt_bias_take_noted(&p->tx_lock);
	if (peer_is(p, dst)) {
		p->tx_fast = fast;
		return p;
	}
	urvt_bias_leave(&p->tx_lock, fast);
	return NULL;
}

static void tx_unlock_peer(struct shm_peer *p)
{
	urvt_bias_leave(&p->tx_lock, p->tx_fast);
}

/* Enter the peer dst names, if it is up and the one dst names (no lock:
 * the gate at the top), to kick it or for a cross-memory copy; tx_leave
 * once done with it. */
struct shm_peer *shm_tx_enter(struct urvt_shm *s, const union urvt_link_addr *dst)
{
	struct shm_peer *p = peer_slot(s, dst);

	if (!p)
		return NULL;
	atomic_fetch_add(&p->users, 1);
	if (peer_is(p, dst))
		return p;
	atomic_fetch_sub_explicit(&p->users, 1, memory_order_release);
	return NULL;
}

void shm_tx_leave(struct shm_peer *p)
{
	atomic_fetch_sub_explicit(&p->users, 1, memory_order_release);
}

static uint8_t *shm_tx_reserve(struct urvt_link *l, const union urvt_link_addr *dst,
			       uint32_t maxlen, unsigned wait)
{
	struct shm_peer *p;

	if (maxlen > SHM_PKT_MAX)
		return NULL;
	p = tx_lock_peer(shm_of(l), dst);
	if (!p)
		return NULL;
	if (!tx_room_for(p, maxlen, wait)) {
		tx_unlock_peer(p);
		return NULL;
	}
	return tx_head_rec(p)->data;
}

/* The peer is the one tx_reserve locked: its state may have changed since,
 * its slot cannot have been reused (tx_lock). */
static void shm_tx_commit(struct urvt_link *l, const union urvt_link_addr *dst, uint32_t len)
{
	struct shm_peer *p = &shm_of(l)->peers[SHM_ID_IDX(dst->peer.id)];

	tx_end_rec(p, len);
	tx_publish(p);
	tx_unlock_peer(p);
}

/* After a publish: the peer's doorbell if it sleeps. Its need_wake is
 * looked at before the gate (a region's memory stays mapped while the link
 * lives: the top), so that a peer that polls costs the fence and a load,
 * not the users count's two locked instructions as well. */
static void shm_tx_kick(struct urvt_link *l, const union urvt_link_addr *dst)
{
	struct urvt_shm *s = shm_of(l);
	struct shm_peer *p = peer_slot(s, dst);

	/* the state's acquire pairs with the handshake's publish of tx_ctrl */
	if (!p || atomic_load_explicit(&p->state, memory_order_acquire) != PEER_UP ||
	    !peer_sleeps(p))
		return;
	p = shm_tx_enter(s, dst);
	if (p) {
		tx_kick_peer(p);
		shm_tx_leave(p);
	}
}

static unsigned shm_send_batch(struct urvt_link *l, struct urvt_link_tx *pk, unsigned n)
{
	struct urvt_shm *s = shm_of(l);
	unsigned lost = 0;

	for (unsigned i = 0; i < n;) {
		uint16_t idx = pk[i].dst->peer.id;
		unsigned j = i + 1;
		struct shm_peer *p;

		pk[i].ip_id = 0;
		pk[i].fault = 0;
		while (j < n && pk[j].dst->peer.id == idx) {
			pk[j].ip_id = 0;
			pk[j].fault = 0;
			j++;
		}
		p = tx_lock_peer(s, pk[i].dst);
		if (p) {
			lost += tx_peer(p, pk + i, j - i);
			tx_unlock_peer(p);
			shm_tx_kick(l, pk[i].dst);
		} else {
			lost += j - i;
		}
		i = j;
	}
	return lost;
}

/* The record at the consumer's tail is complete (SHM-C0). */
static bool rx_marked(struct shm_peer *p, uint32_t tail)
{
	return atomic_load_explicit(&rec_at(p->rx_ring, tail)->mark, memory_order_acquire) ==
	       shm_rec_mark(tail);
}

/* The peer wrote an impossible head (SHM-C1): more than a ring ahead of
 * or behind our tail (behind: the records we took are not yet published),
 * off a record boundary, or ahead of a slot with no mark (it stores head
 * after the marks: SHM-P0 before SHM-P1). */
static bool rx_head_broken(struct shm_peer *p, uint32_t tail)
{
	uint32_t head = atomic_load_explicit(&p->rx_ctrl->head, memory_order_acquire);
	int32_t ahead = (int32_t)(head - tail);

	return ahead > (int32_t)SHM_RING_BYTES || ahead < -(int32_t)SHM_RING_BYTES ||
	       (head - tail) % SHM_REC_ALIGN || (ahead > 0 && !rx_marked(p, tail));
}

/* A receive from p would find something: a record, or (heads) a broken
 * head that it cuts the peer off for (a head ahead of tail implies a
 * mark). A poller asks without heads: the producer stores head at every
 * send, and a line the poller reads at every look is a line the producer
 * must take back from it at every send (rx_peer). */
static bool rx_pending(struct shm_peer *p, bool heads)
{
	int st = atomic_load_explicit(&p->state, memory_order_acquire);
	uint32_t tail = READ_ONCE(p->rx_tail);

	return (st == PEER_UP || st == PEER_GONE) &&
	       (rx_marked(p, tail) || (heads && rx_head_broken(p, tail)));
}

/* Take up to max packets from p into rx: pointers into the ring (shared:
 * the transport copies what it parses), released at the next recv_batch.
 * The marks delimit the records; head is read only when there is none,
 * and then not at every look (SHM_HEAD_LOOKS).
 * The first record after a look that found none is taken alone: the next
 * slot's line was just written by the producer (it cleared the mark), and
 * its miss, which depends on this record's length, would otherwise delay
 * a ping-pong's every message; the next call reads on. */
#define SHM_RX_BATCH_BYTES (256u << 10)

/* A look at p that found no record at tail: head only at the first such
 * look and every SHM_HEAD_LOOKS after (read at every look, its line was the
 * producer's to take back at every send, and the store after a packet's
 * record waited for that: a ping-pong 0.93 -> 0.83 us one way). */
static void rx_none(struct urvt_shm *s, struct shm_peer *p, uint32_t tail)
{
	if (!(p->rx_empty_looks++ % SHM_HEAD_LOOKS) && rx_head_broken(p, tail))
		shm_peer_kill(s, p);
}

static unsigned rx_peer(struct urvt_shm *s, struct shm_peer *p, struct urvt_link_rx *rx,
			unsigned max)
{
	uint32_t tail = p->rx_tail, taken = 0;
	unsigned got = 0;
	bool caught_up = false;
	int cma_pid;

	/* nothing there: a busy poller's every look, kept short (the loop
	 * below looks again, at the same line, when there is) */
	if (!rx_marked(p, tail)) {
		rx_none(s, p, tail);
		p->rx_caught_up = true;
		return 0;
	}
	/* a gone peer's pid may name another process soon */
	cma_pid = s->link.cma && atomic_load_explicit(&p->state, memory_order_relaxed) == PEER_UP
			  ? p->pid
			  : 0;
	if (p->rx_caught_up && max > 1)
		max = 1;
	/* the producer gets the bytes back only at our next batch: a batch of
	 * spans stops at SHM_RX_BATCH_BYTES, or it would hold half the ring */
	while (got < max && taken < SHM_RX_BATCH_BYTES) {
		uint32_t off = tail & (SHM_RING_BYTES - 1);
		const struct shm_rec *rec = rec_at(p->rx_ring, tail);
		uint32_t len, need;
		struct urvt_link_rx *r;

		if (!rx_marked(p, tail)) {
			if (!got)
				rx_none(s, p, tail);
			caught_up = true;
			break;
		}
		len = READ_ONCE(rec->len);
		if (len == SHM_REC_WRAP) {
			/* at 0 it would skip a whole ring: no producer needs
			 * that, and a run of them would keep us here */
			if (!off) {
				shm_peer_kill(s, p);
				break;
			}
			tail += SHM_RING_BYTES - off;
			continue;
		}
		need = len && len <= SHM_PKT_MAX ? shm_rec_bytes(len) : 0;
		if (!need || need > SHM_RING_BYTES - off) {
			/* a record we cannot delimit: nothing after it can be trusted */
			shm_peer_kill(s, p);
			break;
		}
		r = &rx[got];
		tail += need;
		taken += need;
		/* len was read once, here: the peer may keep writing the record */
		*r = (struct urvt_link_rx){ .data = rec->data, .len = len, .no_icrc = true,
					    .shared = true, .spans = true, .cma_pid = cma_pid };
		memcpy(r->ip.sgid, p->gid, 16);
		memcpy(r->ip.dgid, &s->link.info.addr6, 16);
		r->ip.sport = r->ip.dport = URVT_ROCE_UDP_PORT;
		r->ip.hop_limit = 64;
		r->ip.df = urvt_gid_is_v4(p->gid);
		got++;
	}
	p->rx_caught_up = caught_up;
	WRITE_ONCE(p->rx_tail, tail); /* arm reads it from any thread */
	s->rx_release_due = true;
	return got;
}

/* Payload bytes a request to any peer may carry (link.h tx_span): by
 * the window every ring of ours has now. */
static uint32_t shm_tx_span(struct urvt_link *l)
{
	return shm_span_for_win(tx_win_for(atomic_load_explicit(&shm_of(l)->nregions,
								memory_order_relaxed)));
}

static int shm_recv_batch(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max)
{
	struct urvt_shm *s = shm_of(l);
	/* the reaper's request first (acquire: the RETIRING states stored
	 * before it are seen below, so those peers are not touched) */
	uint32_t req = atomic_load_explicit(&s->retire_req, memory_order_acquire);
	uint32_t npeers = atomic_load_explicit(&s->npeers, memory_order_acquire);
	unsigned got = 0;
	bool reap = false;

	if (req != s->rx_acked) {
		/* what the last batches handed out is done with */
		s->rx_acked = req;
		atomic_store_explicit(&s->retire_ack, req, memory_order_release);
		reap = true;
	}

	/* SHM-C2: what the last batch handed out is done with: the producer may
	 * reuse those bytes (due: a batch since the last release moved a tail) */
	for (uint32_t i = 0; s->rx_release_due && i < npeers; i++) {
		struct shm_peer *p = &s->peers[i];
		int st = atomic_load_explicit(&p->state, memory_order_acquire);
		/* a peer still in its handshake has its indices set up by
		 * the progress thread (peer_map_dirs): not ours to read yet */
		if (st != PEER_UP && st != PEER_GONE)
			continue;
		if (p->rx_released != p->rx_tail) {
			p->rx_released = p->rx_tail;
			atomic_store_explicit(&p->rx_ctrl->tail, p->rx_released,
					      memory_order_release);
		}
	}
	s->rx_release_due = false;
	/* the round starts one peer further each batch; wrapped by compare,
	 * not '%': two divisions a poll were a busy poller's slowest steps */
	uint32_t start = s->rx_next < npeers ? s->rx_next : 0;
	for (uint32_t k = 0; k < npeers && got < max; k++) {
		uint32_t idx = start + k < npeers ? start + k : start + k - npeers;
		struct shm_peer *p = &s->peers[idx];
		int st = atomic_load_explicit(&p->state, memory_order_acquire);
		unsigned n;

		if (st != PEER_UP && st != PEER_GONE)
			continue;
		n = rx_peer(s, p, rx + got, max - got);
		got += n;
		/* a peer killed here, or gone and read to the end: its slot
		 * can be reaped (a departure's one system call, not a packet's) */
		if (atomic_load_explicit(&p->state, memory_order_relaxed) == PEER_DEAD)
			reap = true;
		else if (st == PEER_GONE && !n && p->rx_caught_up &&
			 !atomic_load_explicit(&p->rx_drained, memory_order_relaxed)) {
			atomic_store(&p->rx_drained, true);
			reap = true;
		}
	}
	s->rx_next = start + 1 < npeers ? start + 1 : 0;
	if (reap)
		ring_doorbell(s->ask_fd); /* service runs peers_reap */
	return (int)got;
}

static bool shm_pending(struct urvt_link *l)
{
	struct urvt_shm *s = shm_of(l);
	uint32_t npeers = atomic_load_explicit(&s->npeers, memory_order_acquire);

	for (uint32_t i = 0; i < npeers; i++)
		if (rx_pending(&s->peers[i], false))
			return true;
	return false;
}

static void shm_arm(struct urvt_link *l)
{
	struct urvt_shm *s = shm_of(l);
	uint32_t npeers = atomic_load_explicit(&s->npeers, memory_order_acquire);
	bool pending = false;

	for (uint32_t i = 0; i < npeers; i++) {
		struct shm_peer *p = &s->peers[i];
		if (atomic_load_explicit(&p->state, memory_order_acquire) != PEER_UP)
			continue;
		atomic_store(&p->rx_ctrl->need_wake, 1);
	}
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < npeers && !pending; i++)
		pending = rx_pending(&s->peers[i], true);
	if (pending)
		ring_doorbell(s->doorbell);
}

static void shm_ack_wake(struct urvt_link *l)
{
	uint64_t v;

	(void)!read(shm_of(l)->doorbell, &v, sizeof(v));
}

/* ------------------------------------------------------------------ */
/* Open / close                                                       */
/* ------------------------------------------------------------------ */
static void shm_close(struct urvt_link *l)
{
	struct urvt_shm *s = shm_of(l);
	uint32_t npeers = atomic_load(&s->npeers);

	for (uint32_t i = 0; i < npeers; i++) {
		struct shm_peer *p = &s->peers[i];
		if (p->sock >= 0)
			close(p->sock);
		if (atomic_load(&p->doorbell) >= 0)
			close(atomic_load(&p->doorbell));
		if (p->region) /* a peer's, or parked */
			munmap(p->region, sizeof(*p->region));
	}
	urvt_close_in_child_del(&s->listen_fd);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	close(s->epfd);
	close(s->doorbell);
	close(s->ask_fd);
	pthread_mutex_destroy(&s->peers_lock);
	munmap(s, sizeof(*s));
}

void urvt_shm_get_stats(struct urvt_link *l, struct urvt_shm_stats *st)
{
	struct urvt_shm *s = shm_of(l);
	uint32_t npeers = atomic_load(&s->npeers);

	*st = (struct urvt_shm_stats){ .refused = atomic_load(&s->refused),
				       .peers_gone = atomic_load(&s->retired_gone),
				       .peers_dead = atomic_load(&s->retired_dead) };
	for (uint32_t i = 0; i < npeers; i++) {
		int state = atomic_load(&s->peers[i].state);
		st->peers_up += state == PEER_UP;
		st->peers_gone += state == PEER_GONE;
		st->peers_dead += state == PEER_DEAD;
	}
}

static const struct urvt_link_ops shm_ops = {
	.name = "shm",
	.send_batch = shm_send_batch,
	.recv_batch = shm_recv_batch,
	.resolve = shm_resolve,
	.lookup = shm_lookup,
	.resolve_later = shm_resolve_later,
	.arm = shm_arm,
	.ack_wake = shm_ack_wake,
	.service = shm_service,
	.pending = shm_pending,
	.tx_reserve = shm_tx_reserve,
	.tx_span = shm_tx_span,
	.tx_commit = shm_tx_commit,
	.tx_kick = shm_tx_kick,
	.cma_epoch = shm_cma_epoch,
	.cma_fence = shm_cma_fence,
	.cma_push = shm_cma_push,
	.close = shm_close,
};

struct urvt_link *urvt_shm_open_slot(const struct in6_addr *gid, uint8_t slot, bool to_self,
				     int *err)
{
	/* mmap: the peer table is large and mostly untouched */
	struct urvt_shm *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct epoll_event ev = { .events = EPOLLIN };
	struct sockaddr_un sun;
	socklen_t len;
	int ret;

	if (s == MAP_FAILED) {
		*err = -ENOMEM;
		return NULL;
	}
	s->listen_fd = s->epfd = s->doorbell = s->ask_fd = -1;
	s->uid = geteuid();
	s->slot = slot;
	/* docs/shm.md "Single copy"; URVT_CMA=0 turns it off */
	s->link.cma = !urvt_env_off("URVT_CMA");
	s->link.cma_push = s->link.cma && !urvt_env_off("URVT_CMA_PUSH");
	s->to_self = to_self;
	urvt_spin_init(&s->wants_lock);
	memcpy(&s->link.info.addr6, gid, 16);
	s->link.info.family = urvt_gid_is_v4(gid->s6_addr) ? AF_INET : AF_INET6;
	pthread_mutex_init(&s->peers_lock, NULL);
	s->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	s->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->ask_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->listen_fd < 0 || s->epfd < 0 || s->doorbell < 0 || s->ask_fd < 0) {
		ret = -errno;
		goto err;
	}
	len = shm_sock_name_slot(&sun, s->uid, gid->s6_addr, slot);
	/* The name is our registry slot's; its previous owner is gone, but a
	 * child of it may hold the socket a moment longer (forked before it
	 * closes it, or spawned and not yet exec'd): a busy name is tried
	 * again for up to SHM_BIND_WAIT_NS. Once in five full test runs a
	 * fresh process met it busy. */
	for (uint64_t end = urvt_now_ns() + SHM_BIND_WAIT_NS;;) {
		if (!bind(s->listen_fd, (struct sockaddr *)&sun, len))
			break;
		if (errno != EADDRINUSE || urvt_now_ns() >= end) {
			ret = -errno;
			goto err;
		}
		usleep(5000);
	}
	if (listen(s->listen_fd, 64)) {
		ret = -errno;
		goto err;
	}
	/* our (GID, slot) name: not a forked child's to keep */
	(void)urvt_close_in_child(&s->listen_fd);
	ev.data.u64 = SHM_TAG_LISTEN;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->listen_fd, &ev)) {
		ret = -errno;
		goto err;
	}
	ev.data.u64 = SHM_TAG_ASK;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->ask_fd, &ev)) {
		ret = -errno;
		goto err;
	}
	s->link.ops = &shm_ops;
	s->link.wake_fd = s->doorbell;
	s->link.ctl_fd = s->epfd;
	s->link.lossless = true;
	s->link.cheap_poll = true;
	s->link.builds_in_place = true;
	return &s->link;
err:
	urvt_close_in_child_del(&s->listen_fd);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->doorbell >= 0)
		close(s->doorbell);
	if (s->ask_fd >= 0)
		close(s->ask_fd);
	pthread_mutex_destroy(&s->peers_lock);
	munmap(s, sizeof(*s));
	*err = ret;
	return NULL;
}

struct urvt_link *urvt_shm_open(const struct in6_addr *gid, bool to_self, int *err)
{
	return urvt_shm_open_slot(gid, 0, to_self, err);
}
