/* The shared RoCEv2 socket (link/udp_share.h, docs/host-identity.md). */
#include "link/udp_share.h"

#include <errno.h>
#include <linux/filter.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/compiler.h"
#include "base/forkclose.h"
#include "base/hostreg.h"
#include "base/progress.h"
#include "base/random.h"
#include "base/timer.h"
#include "link/udp.h"
#include "wire/hdr.h"

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

#define REAP_PERIOD_NS 200000000ull
/* A probe: a datagram to the group that the steering program hands to
 * the member index it names (byte 1), from the member in slot (byte 2)
 * with that member's secret (bytes 8-15). 0xff is no transport opcode. */
#define PROBE_OP 0xff
#define PROBE_LEN 16
/* ask every member to learn its index again at most this often */
#define REPROBE_NS 1000000000ull


struct urvt_udp_share {
	struct urvt_host *host;
	uint8_t slot;
	pid_t pid;                        /* the process that joined (a forked child did not) */
	uint8_t key[16];                  /* the group: our address */
	int fd;                           /* the member socket (steering is set through it) */
	int fwd_fd;                       /* receives what others forward to us */
	uint32_t fwd_seen;                /* our slot's fwd_posted when we last looked */
	uint32_t gen_seen;                /* the registry's gen the program was built from */
	struct urvt_progress *progress;
	struct urvt_timer reap_timer;
	uint64_t secret;                  /* in our probes: nobody else can forge them */
	_Atomic int32_t learned_index;    /* where our own probe arrived; -1: not yet */
	_Atomic bool misdirected;         /* we forwarded a data packet: steering is off */
	uint32_t probe_seen;              /* the registry's probe_gen we answered */
	uint64_t last_reprobe;
	uint64_t own_ctrs[3];             /* until the transport gives its own */
	uint64_t *ctrs;                   /* out, in, lost */
};

static void count(struct urvt_udp_share *s, unsigned which)
{
	__atomic_fetch_add(&s->ctrs[which], 1, __ATOMIC_RELAXED);
}

void urvt_udp_fwd_name(struct sockaddr_un *sun, socklen_t *len, uint64_t ino, uint8_t slot,
		       int32_t pid)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	/* abstract: per network namespace, as the registry is */
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "urvt-fwd-%u-%llx-%u-%d",
		     (unsigned)geteuid(), (unsigned long long)ino, (unsigned)slot, (int)pid);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ------------------------------------------------------------------ */
/* Membership and steering (registry lock held)                       */
/* ------------------------------------------------------------------ */
/*
 * ldb [5] (the top byte of the BTH destination QPN), then one comparison
 * per live member of the group: its slot -> its member index. Anything
 * else (QP1, slot 0, a slot not in the group) goes to index 0, which
 * forwards it (urvt_udp_share_filter).
 */
static int steer_attach(struct urvt_udp_share *s)
{
	struct sock_filter prog[6 + 2 * URVT_HOST_SLOTS];
	struct sock_fprog fp = { .filter = prog };
	unsigned n = 0;

	/* a probe goes to the index it names */
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0);
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROBE_OP, 0, 2);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 5);
	for (unsigned slot = 1; slot <= URVT_HOST_LAST_SLOT; slot++) {
		const struct urvt_host_slot *sl = &s->host->t->slot[slot];
		if (!atomic_load(&sl->pid) || sl->index < 0 || sl->index >= URVT_HOST_SLOTS ||
		    !urvt_host_group_is(sl, s->key))
			continue;
		prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, slot, 0, 1);
		prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, (uint32_t)sl->index);
	}
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);
	fp.len = (unsigned short)n;
	s->gen_seen = atomic_load(&s->host->t->gen);
	return setsockopt(s->fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fp, sizeof(fp)) ? -errno
											: 0;
}

/* Send one probe per member index: the one the kernel hands back to us
 * tells our real index (what the registry says may be wrong: a member
 * killed while another was unknown, a damaged table, a forged change). */
static void probe_send(struct urvt_udp_share *s, int members)
{
	uint8_t p[PROBE_LEN] = { PROBE_OP, 0, s->slot };
	union urvt_link_addr to;

	urvt_link_gid_addr(s->key, &to);
	memcpy(p + 8, &s->secret, 8);
	for (int k = 0; k < members + 1 && k < URVT_HOST_SLOTS; k++) {
		p[1] = (uint8_t)k;
		(void)sendto(s->fd, p, sizeof(p), MSG_DONTWAIT, &to.sa, urvt_link_addr_len(&to));
	}
}

/*
 * Every 200 ms, on the progress thread: members that died (kill -9) left
 * the kernel's group with their socket: follow in the registry; take in
 * the index our probe found; when we had to forward data packets, ask
 * every member to probe; steer by the registry as it now is.
 */
static void reap_tick(struct urvt_timer *t)
{
	struct urvt_udp_share *s = container_of(t, struct urvt_udp_share, reap_timer);
	struct urvt_host_table *tb = s->host->t;
	struct urvt_host_slot *me = &tb->slot[s->slot];
	int32_t learned = atomic_exchange(&s->learned_index, -1);
	uint64_t now = urvt_now_ns();
	int probe_members = -1;

	urvt_host_lock(s->host);
	urvt_host_reap(s->host);
	if (learned >= 0 && learned != me->index) {
		/* whoever the registry had there is wrong too: it learns anew */
		for (unsigned k = 1; k <= URVT_HOST_LAST_SLOT; k++) {
			struct urvt_host_slot *o = &tb->slot[k];
			if (k != s->slot && o->index == learned && urvt_host_group_is(o, s->key))
				o->index = URVT_HOST_NO_INDEX;
		}
		me->index = learned;
		atomic_fetch_add(&tb->gen, 1);
		atomic_fetch_add(&tb->probe_gen, 1);
	}
	if (atomic_exchange(&s->misdirected, false) && now - s->last_reprobe > REPROBE_NS) {
		s->last_reprobe = now;
		atomic_fetch_add(&tb->probe_gen, 1);
	}
	if (atomic_load(&tb->gen) != s->gen_seen)
		(void)steer_attach(s);
	if (atomic_load(&tb->probe_gen) != s->probe_seen || me->index < 0) {
		s->probe_seen = atomic_load(&tb->probe_gen);
		probe_members = urvt_host_group_size(s->host, s->key);
	}
	urvt_host_unlock(s->host);
	if (probe_members > 0)
		probe_send(s, probe_members);
	urvt_timer_mod(s->progress, &s->reap_timer, urvt_now_ns() + REAP_PERIOD_NS);
}

/* The socket others forward to us on: bound before we join, so that
 * nothing steered our way meanwhile is lost. */
static int fwd_open(struct urvt_udp_share *s)
{
	struct sockaddr_un sun;
	socklen_t len;
	int on = 1, bytes = 8 << 20;

	s->fwd_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->fwd_fd < 0)
		return -errno;
	urvt_udp_fwd_name(&sun, &len, s->host->ino, s->slot, (int32_t)getpid());
	/* a dead predecessor's name is gone with its socket */
	if (bind(s->fwd_fd, (struct sockaddr *)&sun, len) ||
	    setsockopt(s->fwd_fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)))
		return -errno;
	if (setsockopt(s->fwd_fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)))
		(void)setsockopt(s->fwd_fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
	/* our name: not a forked child's to keep */
	(void)urvt_close_in_child(&s->fwd_fd);
	return 0;
}

int urvt_udp_share_bind(int family, const struct in6_addr *addr6, struct urvt_udp_share **out)
{
	struct urvt_udp_share *s;
	struct urvt_host *h;
	int err = 0, fd, index;

	*out = NULL;
	h = urvt_host_get(&err);
	if (!h)
		return urvt_udp_bind_port(family, addr6, false);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->host = h;
	s->slot = h->my_slot;
	s->pid = getpid();
	s->fd = -1;
	s->fwd_fd = -1;
	s->ctrs = s->own_ctrs;
	atomic_store(&s->learned_index, -1);
	s->secret = urvt_random64();
	memcpy(s->key, addr6, 16);
	fd = fwd_open(s);
	if (fd) {
		urvt_close_in_child_del(&s->fwd_fd);
		if (s->fwd_fd >= 0)
			close(s->fwd_fd);
		free(s);
		return fd;
	}
	urvt_host_lock(h);
	urvt_host_reap(h);
	if (h->t->slot[s->slot].index >= 0) {
		/* one device per process: a slot is one member of one group */
		urvt_host_unlock(h);
		urvt_close_in_child_del(&s->fwd_fd);
		close(s->fwd_fd);
		free(s);
		return -EADDRINUSE;
	}
	/* the kernel appends a joining socket: its index is the group's size */
	index = urvt_host_group_size(h, s->key);
	fd = urvt_udp_bind_port(family, addr6, true);
	if (fd >= 0)
		urvt_host_group_join(h, s->key, index);
	urvt_host_unlock(h);
	if (fd < 0) {
		urvt_close_in_child_del(&s->fwd_fd);
		close(s->fwd_fd);
		free(s);
		return fd;
	}
	s->fd = fd;
	*out = s;
	return fd;
}

uint8_t urvt_udp_share_slot(const struct urvt_udp_share *s)
{
	return s->slot;
}

int urvt_udp_share_start(struct urvt_udp_share *s, int fd, int epfd, struct urvt_progress *p)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ret;

	s->fd = fd;
	urvt_host_lock(s->host);
	ret = steer_attach(s);
	urvt_host_unlock(s->host);
	if (ret)
		return ret;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, s->fwd_fd, &ev))
		return -errno;
	s->fwd_seen = atomic_load(&s->host->t->slot[s->slot].fwd_posted);
	s->probe_seen = atomic_load(&s->host->t->probe_gen);
	if (p) {
		s->progress = p;
		urvt_timer_init(&s->reap_timer, reap_tick);
		urvt_timer_mod(p, &s->reap_timer, urvt_now_ns() + REAP_PERIOD_NS);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Which process a datagram is for                                    */
/* ------------------------------------------------------------------ */
#define MAD_OFF 20                        /* BTH 12 + DETH 8 */
#define MAD_DATA (MAD_OFF + 24)
#define MGMT_CLASS_CM 0x07

static uint16_t be16_at(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* The slot a QP1 MAD is for: a REQ or SIDR_REQ by its service ID's port
 * (the registry's listeners); a reply by the ID we put in it, whose top
 * byte is the slot of the process that sent the request. 0: ours. */
static uint8_t gsi_slot(struct urvt_udp_share *s, const uint8_t *p, uint32_t len)
{
	uint16_t attr;

	if (len < MAD_DATA + 16 || p[MAD_OFF + 1] != MGMT_CLASS_CM)
		return 0;
	attr = be16_at(p + MAD_OFF + 16);
	switch (attr) {
	case 0x0010: /* REQ */
	case 0x0017: /* SIDR_REQ: service ID at data offset 8 in both */
		/* rdma_cm's service IDs: 0x00000000_01 PS PORT */
		return urvt_host_port_owner(s->host, be16_at(p + MAD_DATA + 12),
					    be16_at(p + MAD_DATA + 14), s->key);
	case 0x0018: /* SIDR_REP: our request ID first */
		return p[MAD_DATA];
	case 0x0011: case 0x0012: case 0x0013: case 0x0014: case 0x0015:
	case 0x0016: case 0x0019: case 0x001a:
		/* MRA REJ REP RTU DREQ DREP LAP APR: our ID as the remote one */
		return p[MAD_DATA + 4];
	default:
		return 0;
	}
}

/* Is slot another member of our group (so a datagram for it is its)? */
static bool slot_in_group(struct urvt_udp_share *s, uint8_t slot)
{
	const struct urvt_host_slot *sl = &s->host->t->slot[slot];

	return atomic_load_explicit(&sl->pid, memory_order_relaxed) && urvt_host_group_is(sl, s->key);
}

/* The slot whose process a datagram is for; 0 or ours: ours to process
 * (our transport drops what names no QP of ours, as it should). */
static uint8_t dest_slot(struct urvt_udp_share *s, const uint8_t *p, uint32_t len)
{
	uint32_t dqpn;
	uint8_t slot;

	if (len < URVT_BTH_BYTES)
		return 0;
	dqpn = (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
	if (dqpn == URVT_GSI_QPN)
		slot = gsi_slot(s, p, len);
	else if (dqpn >> 16 > URVT_HOST_LAST_SLOT)
		return 0;                 /* multicast QPN: never a slot's */
	else
		slot = (uint8_t)(dqpn >> 16);
	if (likely(slot == s->slot) || !slot)
		return slot;
	/* a slot that is no member of this address's group: a peer's
	 * mistake or a stale QPN; ours to refuse */
	return slot_in_group(s, slot) ? slot : 0;
}

/* Hand one datagram to the process in slot. */
static void forward(struct urvt_udp_share *s, uint8_t slot, const uint8_t *p, uint32_t len,
		    uint32_t seg, const struct urvt_ipinfo *ip)
{
	/* QP1's MADs come to index 0 by design; anything else: steered wrong */
	if (p[5] || p[6] || p[7] != URVT_GSI_QPN)
		atomic_store_explicit(&s->misdirected, true, memory_order_relaxed);
	struct urvt_host_slot *to = &s->host->t->slot[slot];
	struct urvt_udp_fwd_hdr h = { .magic = URVT_UDP_FWD_MAGIC, .seg = seg, .ip = *ip };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)p, len } };
	struct sockaddr_un sun;
	struct msghdr m = { .msg_name = &sun, .msg_iov = iov, .msg_iovlen = 2 };

	urvt_udp_fwd_name(&sun, &m.msg_namelen, s->host->ino, slot,
			  atomic_load_explicit(&to->pid, memory_order_relaxed));
	/* the hint first: a receiver woken by the datagram must see it (a
	 * hint for a datagram that then fails costs it one empty read) */
	atomic_fetch_add_explicit(&to->fwd_posted, 1, memory_order_seq_cst);
	if (sendmsg(s->fwd_fd, &m, MSG_DONTWAIT) < 0) {
		count(s, 2);
		return;
	}
	count(s, 0);
}

/* A GRO train is one flow (every QP between two hosts shares the 4791
 * ports), steered by its first segment: forward the others' segments,
 * keep ours in order at the front. Returns the bytes kept. */
static uint32_t train_filter(struct urvt_udp_share *s, struct urvt_link_rx *r)
{
	uint8_t *data = (uint8_t *)r->data;
	uint32_t keep = 0, kept_segs = 0;

	for (uint32_t off = 0; off < r->len; off += r->seg) {
		uint32_t n = r->len - off < r->seg ? r->len - off : r->seg;
		uint8_t slot = dest_slot(s, data + off, n);
		if (slot && slot != s->slot) {
			forward(s, slot, data + off, n, 0, &r->ip);
			continue;
		}
		if (keep != off)
			memmove(data + keep, data + off, n);
		keep += n;
		kept_segs++;
	}
	if (kept_segs <= 1)
		r->seg = 0;
	return keep;
}

/* A probe reached us: ours tells our index; another member's is not
 * for anyone (it went astray while the program changed). */
static void probe_recv(struct urvt_udp_share *s, const uint8_t *p, uint32_t len)
{
	if (len == PROBE_LEN && p[2] == s->slot && !memcmp(p + 8, &s->secret, 8))
		atomic_store(&s->learned_index, p[1]);
}

unsigned urvt_udp_share_filter(struct urvt_udp_share *s, struct urvt_link_rx *rx, unsigned n)
{
	unsigned out = 0;

	for (unsigned i = 0; i < n; i++) {
		struct urvt_link_rx *r = &rx[i];
		uint8_t slot;

		if (unlikely(r->len && r->data[0] == PROBE_OP)) {
			probe_recv(s, r->data, r->len);
			continue;
		}
		slot = r->trunc ? 0 : dest_slot(s, r->data, r->seg ? r->seg : r->len);

		if (likely(!slot || slot == s->slot)) {
			if (unlikely(r->seg) && r->seg < r->len) {
				r->len = train_filter(s, r);
				if (!r->len)
					continue;
			}
		} else if (r->seg && r->seg < r->len) {
			r->len = train_filter(s, r);
			if (!r->len)
				continue;
		} else {
			forward(s, slot, r->data, r->len, 0, &r->ip);
			continue;
		}
		if (out != i)
			rx[out] = *r;
		out++;
	}
	return out;
}

bool urvt_udp_share_fwd_pending(struct urvt_udp_share *s)
{
	return atomic_load_explicit(&s->host->t->slot[s->slot].fwd_posted, memory_order_acquire) !=
	       s->fwd_seen;
}

bool urvt_udp_share_fwd_recv(struct urvt_udp_share *s, uint8_t *buf, uint32_t cap,
			     struct urvt_link_rx *r)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctl;

	for (;;) {
		struct iovec iov = { buf, cap };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				    .msg_controllen = sizeof(ctl.buf) };
		struct cmsghdr *c;
		struct urvt_udp_fwd_hdr h;
		bool ours = false;
		ssize_t got;

		/* catch up first: a forward posted after this read is seen next time */
		s->fwd_seen = atomic_load_explicit(&s->host->t->slot[s->slot].fwd_posted,
						   memory_order_acquire);
		got = recvmsg(s->fwd_fd, &m, MSG_DONTWAIT);
		if (got < 0)
			return false;
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			struct ucred cr;
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS)
				continue;
			memcpy(&cr, CMSG_DATA(c), sizeof(cr));
			ours = cr.uid == geteuid();
		}
		/* another user's, or not a forward: not for us */
		if (!ours || (size_t)got <= sizeof(h) || (m.msg_flags & MSG_TRUNC))
			continue;
		memcpy(&h, buf, sizeof(h));
		if (h.magic != URVT_UDP_FWD_MAGIC)
			continue;
		memset(r, 0, sizeof(*r));
		r->data = buf + sizeof(h);
		r->len = (uint32_t)((size_t)got - sizeof(h));
		r->seg = h.seg < r->len ? h.seg : 0;
		r->ip = h.ip;
		count(s, 1);
		return true;
	}
}

void urvt_udp_share_close(struct urvt_udp_share *s, int fd)
{
	if (s->progress)
		urvt_timer_del_sync(s->progress, &s->reap_timer);
	urvt_close_in_child_del(&s->fwd_fd);
	if (s->pid != getpid()) {
		/* a forked child's copy: the parent is still the member (the
		 * child closed its copy of the socket at fork: fd is -1) */
		if (fd >= 0)
			close(fd);
		if (s->fwd_fd >= 0)
			close(s->fwd_fd);
		free(s);
		return;
	}
	urvt_host_lock(s->host);
	urvt_host_group_leave(s->host, s->slot);
	/* steer by the indexes after our leaving while we can (a member
	 * sets the group's program) */
	(void)steer_attach(s);
	close(fd);
	urvt_host_unlock(s->host);
	if (s->fwd_fd >= 0)
		close(s->fwd_fd);
	free(s);
}

void urvt_udp_share_count_into(struct urvt_udp_share *s, uint64_t *ctrs)
{
	s->ctrs = ctrs;
}
