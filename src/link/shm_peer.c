/*
 * The shared-memory link's peers (link/shm_priv.h): a slot for each
 * connected device, its region's mapping, its life from the handshake to
 * its release, and the handshake's messages. Why slots are reused and how
 * a slot is let go safely: the comment at the top of link/shm.c.
 */
#include "link/shm_priv.h"

/* ------------------------------------------------------------------ */
/* Peers                                                              */
/* ------------------------------------------------------------------ */

/* A FREE slot for a new peer (peers_lock held), or NULL when all are taken.
 * It is visible to the readers already: FREE, they skip it; the caller
 * fills it in and then stores its state. A slot never used comes first;
 * then the FREE ones in turn from where the last reuse was, so that reuses
 * spread over the free slots and a slot's 8-bit gen (in the addresses)
 * comes round again as late as can be. */
struct shm_peer *shm_peer_new(struct urvt_shm *s)
{
	uint32_t n = atomic_load_explicit(&s->npeers, memory_order_relaxed);
	struct shm_peer *p = NULL;

	if (n < SHM_MAX_PEERS) {
		p = &s->peers[n];
		memset(p, 0, sizeof(*p));
		atomic_store(&p->gen, 1); /* never 0: a peer's epoll tag is not the listener's */
		urvt_bias_init(&p->tx_lock);
		atomic_store_explicit(&s->npeers, n + 1, memory_order_release);
	} else {
		shm_peers_reap(s);
		for (uint32_t k = 0; k < SHM_MAX_PEERS && !p; k++) {
			struct shm_peer *c = &s->peers[(s->reuse_next + k) % SHM_MAX_PEERS];
			if (atomic_load(&c->state) == PEER_FREE)
				p = c;
		}
		if (!p)
			return NULL;
		s->reuse_next = (uint32_t)(p - s->peers) + 1;
		/* the seqlock's writer: gen moved on (peers_reap) before the
		 * fields change */
		atomic_thread_fence(memory_order_release);
		/* not state, gen, users or tx_lock: a stale sender may be at
		 * its gate (tx_enter), and turns back there */
		p->connector = false;
		memset(p->gid, 0, 16);
		p->slot = 0;
		p->tx_stalled = false;
		p->rx_caught_up = false;
		atomic_store(&p->rx_drained, false);
	}
	p->sock = -1;
	p->nregions = &s->nregions;
	atomic_store(&p->doorbell, -1);
	return p;
}

/* Let go of a region: an anonymous mapping takes its range (a stale
 * lock-free reader finds zeros there, never a hole: see the top). If that
 * fails, the old mapping stays: a leak, not a fault. */
void shm_region_park(struct shm_peer *p)
{
	if (!p->region || !p->mapped)
		return;
	if (mmap(p->region, sizeof(*p->region), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED) {
		p->mapped = false;
		atomic_fetch_sub_explicit(p->nregions, 1, memory_order_relaxed);
	}
}

/* Map fd as p's region: at its slot's range if it has one (replacing the
 * parked mapping), else anywhere. false: p->region is unchanged. */
bool shm_region_place(struct shm_peer *p, int fd)
{
	void *r = mmap(p->region, sizeof(struct shm_region), PROT_READ | PROT_WRITE,
		       MAP_SHARED | (p->region ? MAP_FIXED : 0), fd, 0);

	if (r == MAP_FAILED) {
		if (p->region) {
			/* a failed MAP_FIXED may have unmapped the range (it was
			 * parked: not counted) */
			p->mapped = true;
			atomic_fetch_add_explicit(p->nregions, 1, memory_order_relaxed);
			shm_region_park(p);
		}
		return false;
	}
	if (!p->mapped)
		atomic_fetch_add_explicit(p->nregions, 1, memory_order_relaxed);
	p->region = r;
	p->mapped = true;
	return true;
}

/* p's epoll tag: a stale event (the slot was reaped and reused since
 * epoll_wait) names the old gen and is dropped. */
uint64_t shm_peer_tag(struct urvt_shm *s, struct shm_peer *p)
{
	return (uint64_t)atomic_load(&p->gen) << 32 | (uint32_t)(p - s->peers);
}

/* Our ends of the two rings. The starting head of the ring we fill and
 * tail of the ring we read come from the region; in a region the peer made
 * they must be those of a fresh connection: the ring we fill empty, both on
 * record boundaries (every later offset is one, so a WRAP header is never
 * written across the end of the mapping). false: refuse the region. */
bool shm_peer_map_dirs(struct shm_peer *p)
{
	int tx = p->connector ? 0 : 1;
	uint32_t head, tail;

	p->tx_ctrl = &p->region->ctrl[tx];
	p->rx_ctrl = &p->region->ctrl[!tx];
	p->tx_ring = p->region->ring[tx];
	p->rx_ring = p->region->ring[!tx];
	/* each read once: the peer may be changing them */
	head = atomic_load_explicit(&p->tx_ctrl->head, memory_order_relaxed);
	tail = atomic_load_explicit(&p->tx_ctrl->tail, memory_order_relaxed);
	p->tx_head = head;
	p->tx_clear = head;
	p->tx_tail_seen = tail;
	p->tx_rewind_look = head;
	p->tx_win = SHM_RING_BYTES;
	p->tx_win_n = 0;
	WRITE_ONCE(p->rx_tail, atomic_load_explicit(&p->rx_ctrl->tail, memory_order_relaxed));
	p->rx_released = p->rx_tail;
	p->rx_empty_looks = 0;
	return head == tail && head % SHM_REC_ALIGN == 0 && p->rx_tail % SHM_REC_ALIGN == 0;
}

/* The connection ends: to GONE (closed by the peer) or DEAD (it
 * misbehaved). Its memory stays mapped until peers_reap releases it (a
 * sender may be in it, a GONE peer's last packets are still read). The
 * progress thread and the receive loop may both end a peer: one CAS wins,
 * and the fds are touched by the winner only, before the receive loop's
 * next ack (the reaper closes them after it). */
void shm_peer_end(struct urvt_shm *s, struct shm_peer *p, enum peer_state to)
{
	int was = atomic_load(&p->state), now;

	do {
		if (was == PEER_DEAD || was == PEER_RETIRING || was == PEER_FREE ||
		    (was == PEER_GONE && to == PEER_GONE))
			return;
		/* only an UP peer's ring was ever set up to be read */
		now = was == PEER_UP || was == PEER_GONE ? (int)to : PEER_DEAD;
	} while (!atomic_compare_exchange_weak(&p->state, &was, now));
	if (was != PEER_GONE && p->sock >= 0) {
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, p->sock, NULL);
		shutdown(p->sock, SHUT_RDWR);
	}
}

/* Retire departed peers, release retired ones the receive loop and the
 * senders are done with (peers_lock held; the rule is at the top). */
void shm_peers_reap(struct urvt_shm *s)
{
	uint32_t npeers = atomic_load_explicit(&s->npeers, memory_order_relaxed);
	uint32_t req = atomic_load_explicit(&s->retire_req, memory_order_relaxed);
	uint32_t ack = atomic_load_explicit(&s->retire_ack, memory_order_acquire);
	bool retired = false;

	for (uint32_t i = 0; i < npeers; i++) {
		struct shm_peer *p = &s->peers[i];
		int st = atomic_load(&p->state);

		if (st == PEER_DEAD || (st == PEER_GONE && atomic_load(&p->rx_drained))) {
			if (!atomic_compare_exchange_strong(&p->state, &st, PEER_RETIRING))
				continue; /* the receive loop killed it: next time */
			/* gen first: lookup's seqlock and stale epoll events see it */
			atomic_store(&p->gen, atomic_load(&p->gen) + 1);
			p->retire_at = req + 1;
			p->retired_dead = st == PEER_DEAD;
			atomic_fetch_add(p->retired_dead ? &s->retired_dead : &s->retired_gone, 1);
			retired = true;
		} else if (st == PEER_RETIRING && (int32_t)(ack - p->retire_at) >= 0 &&
			   !atomic_load(&p->users)) {
			/* a record's writer that saw the peer UP (shm.c
			 * tx_lock_peer) is out once we have had its lock */
			urvt_bias_lock(&p->tx_lock);
			urvt_bias_unlock(&p->tx_lock);
			if (p->sock >= 0)
				close(p->sock); /* leaves the epoll set if still in */
			p->sock = -1;
			if (atomic_load(&p->doorbell) >= 0)
				close(atomic_load(&p->doorbell));
			atomic_store(&p->doorbell, -1);
			shm_region_park(p);
			atomic_store_explicit(&p->state, PEER_FREE, memory_order_release);
		}
	}
	if (retired) {
		atomic_store_explicit(&s->retire_req, req + 1, memory_order_release);
		/* the receive loop acks at its next batch: have it come by */
		ring_doorbell(s->doorbell);
	}
}

void shm_peer_kill(struct urvt_shm *s, struct shm_peer *p)
{
	shm_peer_end(s, p, PEER_DEAD);
}

int shm_send_msg(int sock, const struct shm_msg *m, const int *fds, int nfds)
{
	struct iovec iov = { .iov_base = (void *)m, .iov_len = sizeof(*m) };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		struct cmsghdr *c;
		memset(&ctl, 0, sizeof(ctl)); /* the padding goes to the kernel too */
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(*m) ? 0 : -EIO;
}

/* One message and up to two fds; fds beyond that are closed. Returns the
 * number of fds (>= 0), or -1 on EOF, error or a malformed message. */
int shm_recv_msg(int sock, struct shm_msg *m, int fds[2])
{
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	ssize_t r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int n = 0;

	if (r <= 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (n < 2)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	if (r != (ssize_t)sizeof(*m) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    m->magic != SHM_MAGIC || m->version != SHM_VERSION || m->ring_bytes != SHM_RING_BYTES ||
	    m->pkt_max != SHM_PKT_MAX || m->region_bytes != sizeof(struct shm_region)) {
		for (int i = 0; i < n; i++)
			close(fds[i]);
		return -1;
	}
	return n;
}

/* A region for a new connection: a sealed memfd (the peer can neither
 * shrink it under us nor grow it) mapped as p's. */
int shm_region_create(struct shm_peer *p)
{
	size_t len = sizeof(struct shm_region);
	int fd = memfd_create("urvt-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct shm_region *r;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
	    !shm_region_place(p, fd)) {
		int e = errno ? -errno : -ENOMEM;
		close(fd);
		return e;
	}
	r = p->region;
	r->magic = SHM_MAGIC;
	r->version = SHM_VERSION;
	r->ring_bytes = SHM_RING_BYTES;
	r->pkt_max = SHM_PKT_MAX;
	/* both consumers start asleep: the first packet each way rings, the
	 * consumer drains and arms from then on */
	atomic_store(&r->ctrl[0].need_wake, 1);
	atomic_store(&r->ctrl[1].need_wake, 1);
	return fd;
}

/* Map a region a peer sent as p's: only a sealed memfd of exactly our size. */
bool shm_region_map(struct shm_peer *p, int fd)
{
	const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || (seals & need) != need || fstat(fd, &st) ||
	    (size_t)st.st_size != sizeof(struct shm_region))
		return false;
	return shm_region_place(p, fd);
}

void shm_msg_init(struct shm_msg *m, uint32_t type, const uint8_t from[16],
		     uint8_t from_slot, const uint8_t to[16], uint8_t to_slot)
{
	memset(m, 0, sizeof(*m)); /* the holes too: they leave the process */
	m->magic = SHM_MAGIC;
	m->version = SHM_VERSION;
	m->type = type;
	m->ring_bytes = SHM_RING_BYTES;
	m->pkt_max = SHM_PKT_MAX;
	m->region_bytes = sizeof(struct shm_region);
	memcpy(m->from_gid, from, 16);
	memcpy(m->to_gid, to, 16);
	m->from_slot = from_slot;
	m->to_slot = to_slot;
}
