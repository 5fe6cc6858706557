/*
 * The shared-memory link's private parts (link/shm.c, link/shm_peer.c): its
 * constants, a peer slot, the link, and the peer life cycle shm_peer.c
 * implements. The protocol is in the comment at the top of shm.c.
 */
#ifndef URVT_LINK_SHM_PRIV_H
#define URVT_LINK_SHM_PRIV_H

#include "link/shm.h"
#include "link/shm_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/biaslock.h"
#include "base/compiler.h"
#include "base/forkclose.h"
#include "base/timer.h"
#include "wire/hdr.h"

#define SHM_MAX_PEERS 256
/* A peer address: the slot in the low byte, its generation above. */
#define SHM_ID_IDX(id) ((uint32_t)(id) & 0xffu)
#define SHM_ID_GEN(id) ((uint32_t)(id) >> 8 & 0xffu)
_Static_assert(SHM_MAX_PEERS == 256, "a slot index is one byte of a peer address");
/* epoll's tags: the listener, ask_fd; a peer's is its gen << 32 | slot */
#define SHM_TAG_LISTEN 0
#define SHM_TAG_ASK UINT64_MAX
/* A full ring: how long a sender waits for the consumer before the packets
 * are lost. A patient sender (outside the receive path) gives up when the
 * tail stalled for SHM_STALL_NS, or after SHM_PATIENT_MAX_NS in all. The
 * receive path (rx_lock held) gives up after SHM_FULL_WAIT_NS if the peer
 * may be waiting on us (its ring to us is full: each would wait for the
 * other), else when the tail stalled for SHM_RX_STALL_NS (longer than a
 * time slice or a kernel thread's burst, which a consumer may lose to
 * another thread on its CPU) or after SHM_RX_MAX_NS. */
#define SHM_FULL_WAIT_NS 2000000
#define SHM_RX_STALL_NS 20000000
#define SHM_RX_MAX_NS 100000000
#define SHM_STALL_NS 50000000
#define SHM_PATIENT_MAX_NS 1000000000
/* resolve_later: destinations asked for and not connected yet, and how
 * long one that could not be reached is not tried again (a UD peer on
 * another host costs the progress thread a failed connect per period). */
/* How long a device open waits for its (GID, slot) name to come free. */
#define SHM_BIND_WAIT_NS 250000000ull
#define SHM_WANTS 32
#define SHM_RETRY_NS 1000000000

/* GONE: the peer closed the connection (exited): what it sent before is
 * still read, nothing more goes to it. DEAD: it misbehaved: nothing is
 * read or sent. */
enum peer_state { PEER_FREE, PEER_HANDSHAKE, PEER_UP, PEER_GONE, PEER_DEAD, PEER_RETIRING };

struct shm_peer {
	_Atomic int state;
	_Atomic uint32_t gen;             /* the occupant's: moves on at retire */
	uint32_t retire_at;               /* the retire_req that retired it */
	bool retired_dead;                /* it was DEAD, not GONE (stats) */
	bool mapped;                      /* region holds a peer's memfd, not parked */
	_Atomic bool rx_drained;          /* GONE and its ring read to the end */
	bool connector;                   /* we made the region (we are A) */
	uint8_t gid[16];
	uint8_t slot;                     /* its host registry slot (0: none) */
	int pid;                          /* its process (SO_PEERCRED), 0: unknown */
	int sock;
	_Atomic int doorbell;             /* the peer's eventfd, -1 until known */
	struct shm_region *region;
	struct shm_ctrl *tx_ctrl, *rx_ctrl;
	uint8_t *tx_ring, *rx_ring;
	/* producers of this process: a record is written under tx_lock,
	 * biased for the thread that sends here run after run
	 * (base/biaslock.h; tx_lock_peer); what else uses the peer enters
	 * it (users, shm_tx_enter) */
	struct urvt_biaslock tx_lock __cacheline_aligned;
	bool tx_fast;                     /* the holder took tx_lock the fast way */
	_Atomic uint32_t users;           /* enterers inside (shm_tx_enter) */
	uint32_t tx_head;
	uint32_t tx_tail_seen;            /* the tail at our last look: at most the
					     real one, so room by it is room */
	uint32_t tx_clear;                /* slots in [tx_head, tx_clear) do not read
					     as their mark: cleared or checked since
					     the consumer freed them (tx_mark) */
	uint32_t tx_rewind_look;          /* no rewind look before this head */
	uint32_t tx_win;                  /* records end within this much of the ring ... */
	uint32_t tx_win_n;                /* ... chosen for this many regions */
	_Atomic uint32_t *nregions;       /* the link's (shm_region_place, _park) */
	bool tx_stalled;                  /* the last wait for room timed out ... */
	uint32_t tx_stalled_tail;         /* ... at this tail: no wait until it moves */
	/* the consumer (rx_lock) */
	uint32_t rx_tail __cacheline_aligned; /* consumed up to here */
	uint32_t rx_released;             /* what tail says: packets up to rx_tail
					     are in the caller's hands until the
					     next recv_batch */
	bool rx_caught_up;                /* the last look found no record */
	uint32_t rx_empty_looks;          /* looks that found none (rx_peer: head) */
};

struct urvt_shm {
	struct urvt_link link;
	int listen_fd;
	int epfd;                         /* ctl_fd: the listener and every connection */
	int doorbell;                     /* wake_fd: our eventfd, which peers write */
	uid_t uid;
	uint8_t slot;                     /* ours: the listener's name, the hellos */
	bool to_self;                     /* our own GID resolves (URVT_PATH=shm) */
	int ask_fd;                       /* resolve_later's doorbell to service */
	urvt_spinlock_t wants_lock;
	struct shm_want {
		uint8_t gid[16];
		uint8_t slot;
		uint8_t state;            /* WANT_* */
		uint64_t retry_ns;        /* WANT_FAILED: not tried before */
	} wants[SHM_WANTS];
	pthread_mutex_t peers_lock;
	_Atomic uint32_t npeers;
	_Atomic uint32_t nregions;        /* peers' regions mapped: the windows' divisor */
	uint32_t reuse_next;              /* where peer_new looks for a FREE slot */
	_Atomic uint32_t retire_req;      /* peers_reap's last retire (peers_lock) */
	_Atomic uint32_t retired_gone, retired_dead; /* stats of retired peers */
	_Atomic uint32_t retire_ack __cacheline_aligned; /* the receive loop's */
	uint32_t rx_acked;                /* rx_lock: the last retire_ack stored */
	unsigned rx_next;                 /* round robin over peers (rx_lock) */
	bool rx_release_due;              /* a peer's rx_tail moved since the last
					     release of tails (rx_lock) */
	_Atomic uint32_t refused;
	struct shm_peer peers[SHM_MAX_PEERS];
};

enum { WANT_FREE, WANT_ASKED, WANT_CONNECTING, WANT_FAILED };

static inline struct urvt_shm *shm_of(struct urvt_link *l)
{
	return container_of(l, struct urvt_shm, link);
}

/* Is the peer's process of our user? Its pid, for reads of its memory
 * (docs/shm.md "Single copy"; 0 when our PID namespace cannot name it). */
static inline bool peer_is_us(struct shm_peer *p, uid_t uid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(p->sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) || cr.uid != uid)
		return false;
	p->pid = cr.pid;
	return true;
}

static inline void ring_doorbell(int fd)
{
	uint64_t one = 1;

	if (fd >= 0)
		(void)!write(fd, &one, sizeof(one));
}

/* A peer's doorbell, which our senders write: only an eventfd (a pipe
 * nobody reads or a file on a stalled filesystem would block them), made
 * non-blocking (the peer could have made it blocking and filled its
 * counter). It shares the file description with the peer, which could set
 * it blocking again: docs/shm.md "A hostile or broken peer". */
static inline bool doorbell_take(struct urvt_shm *s, int fd)
{
	char path[40], link[32];
	struct stat a, b;
	ssize_t n;
	int fl;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n >= 0) {
		link[n] = 0;
		if (strcmp(link, "anon_inode:[eventfd]"))
			return false;
	} else if (fstat(fd, &a) || fstat(s->doorbell, &b) || a.st_dev != b.st_dev ||
		   a.st_ino != b.st_ino) {
		return false; /* no /proc: at least an anonymous inode like ours */
	}
	fl = fcntl(fd, F_GETFL);
	return fl >= 0 && !fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---- shm_peer.c: slots, regions, the handshake's messages ---- */
struct shm_peer *shm_peer_new(struct urvt_shm *s);
void shm_region_park(struct shm_peer *p);
/* Enter the peer dst names if it is up (no lock); shm_tx_leave once done. */
struct shm_peer *shm_tx_enter(struct urvt_shm *s, const union urvt_link_addr *dst);
void shm_tx_leave(struct shm_peer *p);
/* link.h cma_epoch, cma_fence, cma_push (shm_cma.c) */
uint32_t shm_cma_epoch(struct urvt_link *l, const union urvt_link_addr *dst);
void shm_cma_fence(struct urvt_link *l, const union urvt_link_addr *dst);
bool shm_cma_push(struct urvt_link *l, const union urvt_link_addr *dst, uint32_t epoch,
		  const struct iovec *local, unsigned nl, const struct iovec *remote, unsigned nr,
		  size_t len);
bool shm_region_place(struct shm_peer *p, int fd);
uint64_t shm_peer_tag(struct urvt_shm *s, struct shm_peer *p);
bool shm_peer_map_dirs(struct shm_peer *p);
void shm_peer_end(struct urvt_shm *s, struct shm_peer *p, enum peer_state to);
void shm_peers_reap(struct urvt_shm *s);
void shm_peer_kill(struct urvt_shm *s, struct shm_peer *p);
int shm_send_msg(int sock, const struct shm_msg *m, const int *fds, int nfds);
int shm_recv_msg(int sock, struct shm_msg *m, int fds[2]);
int shm_region_create(struct shm_peer *p);
bool shm_region_map(struct shm_peer *p, int fd);
void shm_msg_init(struct shm_msg *m, uint32_t type, const uint8_t from[16], uint8_t from_slot, const uint8_t to[16], uint8_t to_slot);

#endif
