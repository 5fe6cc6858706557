/*
 * Hostile packets (docs/security.md; over the shm link, docs/shm.md): the device's QPs
 * face an attacker that sends hand-built RoCEv2 packets, and a stranger.
 * Built twice from this file: test_hostile, where each is a plain UDP
 * socket on its own 127.214.x address (port 4791), and test_hostile_shm
 * (HOSTILE_SHM=1), where each is a fake peer on the device's shm link
 * (docs/shm.md) that speaks its protocol by hand: a sealed memfd with the
 * two rings, doorbells, records. Every MR sits in a mapping between
 * PROT_NONE pages with canary bytes just outside it in the same pages;
 * regions no remote peer may change are compared with a snapshot after
 * every attack.
 *
 * Table-driven: each row builds one packet for a fresh victim QP (RC, UC
 * or UD, in the state the row names, one receive posted) and asserts
 * exactly what the reference gives (rc-protocol §3, §3.11, roce-wire §7,
 * §12): the packet on the wire (opcode, AETH syndrome, PSN) or nothing, the
 * victim's first receive completion (or none), its QP state, the counter
 * that moved (read through the counters file /dev/shm/urvt.<pid>, as
 * urvt-stat does), the link that carried it, and the canaries. A row runs
 * on both links with the same outcome unless it names the shm one (on_shm:
 * the shm link carries no ICRC) or why it cannot run there (udp_only).
 * Multi-packet attacks (duplicate atomic replay, responses injected into a
 * requester, SEND_WITH_INV of a key of another PD, ...) are separate tests
 * below the table; below them, shm only, the peer breaks the link itself
 * during transfers: it scribbles on its ring, dies, or never drains ours.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/rvt_api.h"
#include "link/shm.h"
#include "link/shm_proto.h"
#include "transport/stats.h"
#include "transport/tp.h"
#include "ut.h"
#include "wire/aeth.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/ip.h"
#include "wire/psn.h"

#ifndef HOSTILE_SHM
#define HOSTILE_SHM 0
#endif
/* the attacker's link: which build this is */
static const bool over_shm = HOSTILE_SHM;
static const char *const link_name = HOSTILE_SHM ? "shm" : "udp";

#define PEER_QPN 0x321
#define PEER_PSN 0x1000
#define MY_PSN 0x2000
#define UD_QKEY 0x5150
#define PAGE 4096
#define CANARY 0xA5
#define GAP 256 /* canary bytes before and after each MR inside its mapping */
#define PMTU 1024 /* what ut_to_rtr_path sets */

static struct ut_dev dev;
static struct rvt_pd *pd, *pd2;
static struct sockaddr_in dev_addr;
static const struct urvt_stats_file *stats; /* the counters file, read-only */

/* ------------------------------------------------------------------ */
/* Memory: every MR between PROT_NONE pages, canaries around it       */
/* ------------------------------------------------------------------ */
enum { M_RW, M_RO, M_LOCAL, M_OTHER, M_STALE, M_RECV, NMR };
static const char *const mr_name[NMR] = { "rw", "remote-read-only", "local-only",
					  "other-pd", "deregistered", "recv" };
#define MR_LEN 8192

struct region {
	uint8_t *map;   /* first usable page (after the PROT_NONE page) */
	size_t map_len; /* usable bytes */
	uint8_t *buf;   /* the MR: map + GAP */
	uint8_t snap[MR_LEN];
	struct rvt_mregion *mr;
	uint32_t key;
};
static struct region R[NMR];

static void region_init(struct region *r, struct rvt_pd *p, int access, uint8_t seed)
{
	size_t usable = (GAP + MR_LEN + GAP + PAGE - 1) & ~(size_t)(PAGE - 1);
	uint8_t *m = mmap(NULL, usable + 2 * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(m != MAP_FAILED);
	assert_int_equal(mprotect(m, PAGE, PROT_NONE), 0);
	assert_int_equal(mprotect(m + PAGE + usable, PAGE, PROT_NONE), 0);
	r->map = m + PAGE;
	r->map_len = usable;
	r->buf = r->map + GAP;
	memset(r->map, CANARY, usable);
	ut_fill(r->buf, MR_LEN, seed);
	memcpy(r->snap, r->buf, MR_LEN);
	r->mr = ut_mr(p, r->buf, MR_LEN, access);
	r->key = r->mr->lkey;
}

static uint64_t va_of(int m, uint64_t off)
{
	return (uint64_t)(uintptr_t)R[m].buf + off;
}

/* Canaries intact everywhere; MRs that must not change did not. */
static void check_memory(const char *when, bool rw_may_change)
{
	for (int i = 0; i < NMR; i++) {
		struct region *r = &R[i];
		for (size_t j = 0; j < r->map_len; j++)
			if ((j < GAP || j >= GAP + MR_LEN) && r->map[j] != CANARY)
				fail_msg("%s: canary of MR %s at %+ld overwritten", when, mr_name[i],
					 (long)j - GAP);
		if (i == M_RECV || (i == M_RW && rw_may_change))
			continue;
		if (memcmp(r->snap, r->buf, MR_LEN))
			fail_msg("%s: MR %s changed", when, mr_name[i]);
	}
}

/* ------------------------------------------------------------------ */
/* The attacker: an endpoint on one link or the other                 */
/* ------------------------------------------------------------------ */
/*
 * An endpoint sends packets to the device and receives the device's. UDP:
 * a socket on its own address. shm: a fake peer connected to the device's
 * shm link, which takes that address's GID; its UDP socket stays bound so
 * the address is ours alone and must stay silent (the device routes this
 * GID over shm, docs/shm.md "When it is used").
 */
struct ep {
	struct sockaddr_in addr;          /* its address, so its GID */
	int udp;
	/* shm */
	int sock, bell, dev_bell;         /* the connection, our doorbell, the device's */
	struct shm_region *r;
	uint32_t head;                    /* ring 0 (we fill it): bytes written */
	uint32_t tail;                    /* ring 1 (the device fills it): bytes consumed */
};
static struct ep peer, stranger;

static int open_sock(int first_host, struct sockaddr_in *out)
{
	for (int host = first_host; host < first_host + 100; host++) {
		int fd = socket(AF_INET, SOCK_DGRAM, 0), v = IP_PMTUDISC_DO;
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(URVT_ROCE_UDP_PORT) };
		a.sin_addr.s_addr = htonl(0x7f000000u | (214u << 16) | (uint32_t)host);
		setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v));
		if (!bind(fd, (struct sockaddr *)&a, sizeof(a))) {
			*out = a;
			return fd;
		}
		close(fd);
	}
	fail_msg("no free address for the attacker");
	return -1;
}

static struct urvt_link *dev_shm(void)
{
	struct urvt_net *net = dev.rdi->transport_priv;

	return urvt_net_link(net, "shm");
}

static struct urvt_shm_stats shm_stats(void)
{
	struct urvt_shm_stats st;

	urvt_shm_get_stats(dev_shm(), &st);
	return st;
}

/* Wait (bounded) until the device's shm link has up peers UP, gone GONE
 * and dead DEAD (-1: any). */
static bool shm_wait(int up, int gone, int dead, int ms)
{
	uint64_t end = ut_now_ms() + (uint64_t)ms;

	for (;;) {
		struct urvt_shm_stats st = shm_stats();
		if ((up < 0 || st.peers_up == (uint32_t)up) &&
		    (gone < 0 || st.peers_gone == (uint32_t)gone) &&
		    (dead < 0 || st.peers_dead == (uint32_t)dead))
			return true;
		if (ut_now_ms() >= end)
			return false;
		ut_sleep_ms(1);
	}
}

static void ring_bell(int fd)
{
	uint64_t one = 1;

	assert_int_equal(write(fd, &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* The handshake (docs/shm.md "Rendezvous and handshake") as the connector:
 * HELLO with a sealed memfd holding both rings and our doorbell, then
 * (bounded) the device's HELLO_ACK with its doorbell, then until the
 * device's side is UP, so a QP that goes to RTR now routes to us. */
static void shm_attach(struct ep *e)
{
	struct sockaddr_un sun;
	/* the device's slot of the host registry, if it has one (its QPN range) */
	uint8_t dslot = dev.rdi->qpn_table.range >= 0 ? (uint8_t)dev.rdi->qpn_table.range : 0;
	socklen_t sl = shm_sock_name_slot(&sun, geteuid(), dev.rdi->gid.raw, dslot);
	struct shm_msg m = { .magic = SHM_MAGIC, .version = SHM_VERSION, .type = SHM_MSG_HELLO,
			     .ring_bytes = SHM_RING_BYTES, .pkt_max = SHM_PKT_MAX,
			     .region_bytes = sizeof(struct shm_region) };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = CMSG_SPACE(2 * sizeof(int)) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	struct pollfd pfd;
	uint32_t up = shm_stats().peers_up;
	uint8_t gid[16];
	int fds[2], memfd;

	urvt_gid_from_v4(gid, e->addr.sin_addr.s_addr);
	e->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(e->sock >= 0);
	if (connect(e->sock, (struct sockaddr *)&sun, sl))
		fail_msg("the device's shm link does not listen: %s", strerror(errno));
	memfd = memfd_create("hostile-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(memfd >= 0);
	assert_int_equal(ftruncate(memfd, (off_t)sizeof(struct shm_region)), 0);
	assert_int_equal(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	e->r = mmap(NULL, sizeof(struct shm_region), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	assert_true(e->r != MAP_FAILED);
	e->r->magic = SHM_MAGIC;
	e->r->version = SHM_VERSION;
	e->r->ring_bytes = SHM_RING_BYTES;
	e->r->pkt_max = SHM_PKT_MAX;
	memcpy(e->r->gid_a, gid, 16);
	memcpy(e->r->gid_b, dev.rdi->gid.raw, 16);
	e->r->slot_b = dslot;
	/* as a fresh region: the first packet each way rings */
	atomic_store(&e->r->ctrl[0].need_wake, 1);
	atomic_store(&e->r->ctrl[1].need_wake, 1);
	e->head = e->tail = 0;
	e->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(e->bell >= 0);
	memcpy(m.from_gid, gid, 16);
	memcpy(m.to_gid, dev.rdi->gid.raw, 16);
	m.to_slot = dslot;
	fds[0] = memfd;
	fds[1] = e->bell;
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	assert_int_equal(sendmsg(e->sock, &mh, 0), (ssize_t)sizeof(m));
	close(memfd);

	pfd = (struct pollfd){ .fd = e->sock, .events = POLLIN };
	if (poll(&pfd, 1, 2000) != 1)
		fail_msg("no HELLO_ACK from the device");
	memset(&m, 0, sizeof(m));
	mh.msg_controllen = sizeof(ctl.buf);
	assert_int_equal(recvmsg(e->sock, &mh, MSG_CMSG_CLOEXEC), (ssize_t)sizeof(m));
	c = CMSG_FIRSTHDR(&mh);
	assert_true(c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)));
	memcpy(&e->dev_bell, CMSG_DATA(c), sizeof(int));
	assert_int_equal(m.type, SHM_MSG_HELLO_ACK);
	assert_memory_equal(m.from_gid, dev.rdi->gid.raw, 16);
	assert_memory_equal(m.to_gid, gid, 16);
	/* the device marks us UP just after it sent the ACK */
	if (!shm_wait((int)up + 1, -1, -1, 2000))
		fail_msg("the device did not take the fake peer");
}

static void ep_open(struct ep *e, int first_host)
{
	memset(e, 0, sizeof(*e));
	e->sock = e->bell = e->dev_bell = -1;
	e->udp = open_sock(first_host, &e->addr);
	if (over_shm)
		shm_attach(e);
}

/* The fake peer goes away as a process that exits: connection, doorbells
 * and its mapping of the region. */
static void ep_die(struct ep *e)
{
	if (e->sock >= 0)
		close(e->sock);
	if (e->bell >= 0)
		close(e->bell);
	if (e->dev_bell >= 0)
		close(e->dev_bell);
	if (e->r)
		munmap(e->r, sizeof(*e->r));
	e->sock = e->bell = e->dev_bell = -1;
	e->r = NULL;
}

static void ep_close(struct ep *e)
{
	ep_die(e);
	close(e->udp);
	e->udp = -1;
}

/* shm: whatever the device sends this address goes over shm, never UDP. */
static void udp_silent(const struct ep *e)
{
	uint8_t junk[64];

	if (over_shm && recv(e->udp, junk, sizeof(junk), MSG_DONTWAIT) >= 0)
		fail_msg("a packet for a shm peer went over UDP");
}

/* Append one record to ring 0 without publishing head (the producer's side
 * of docs/shm.md "The rings"), marked ready unless !mark; waits (bounded)
 * for room. */
static void ring_put_marked(struct ep *e, const uint8_t *pkt, uint32_t len, bool mark)
{
	uint32_t need = shm_rec_bytes(len), off = e->head & (SHM_RING_BYTES - 1);
	uint32_t left = SHM_RING_BYTES - off, total = need > left ? left + need : need;
	uint64_t end = ut_now_ms() + 2000;
	struct shm_rec *rec;

	assert_true(len && len <= SHM_PKT_MAX);
	while (e->head + total + SHM_REC_ALIGN -
		       atomic_load_explicit(&e->r->ctrl[0].tail, memory_order_acquire) >
	       SHM_RING_BYTES) {
		if (ut_now_ms() > end)
			fail_msg("the device stopped reading ring 0");
		ut_sleep_ms(1);
	}
	if (need > left) {
		rec = (struct shm_rec *)(void *)(e->r->ring[0] + off);
		rec->len = SHM_REC_WRAP;
		atomic_store_explicit(&((struct shm_rec *)(void *)e->r->ring[0])->mark, 0,
				      memory_order_relaxed);
		atomic_store_explicit(&rec->mark, shm_rec_mark(e->head), memory_order_release);
		e->head += left;
		off = 0;
	}
	rec = (struct shm_rec *)(void *)(e->r->ring[0] + off);
	memcpy(rec->data, pkt, len);
	rec->len = len;
	atomic_store_explicit(
		&((struct shm_rec *)(void *)(e->r->ring[0] +
					     ((e->head + need) & (SHM_RING_BYTES - 1))))->mark,
		0, memory_order_relaxed);
	if (mark)
		atomic_store_explicit(&rec->mark, shm_rec_mark(e->head), memory_order_release);
	e->head += need;
}

static void ring_put(struct ep *e, const uint8_t *pkt, uint32_t len)
{
	ring_put_marked(e, pkt, len, true);
}

/* Publish head (any value: hostile tests write impossible ones) and ring
 * the device if it asked (store head, fence, look at need_wake). */
static void ring_publish(struct ep *e, uint32_t head)
{
	atomic_store_explicit(&e->r->ctrl[0].head, head, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&e->r->ctrl[0].need_wake) && atomic_exchange(&e->r->ctrl[0].need_wake, 0))
		ring_bell(e->dev_bell);
}

/* The next record the device wrote into ring 1 after *cur, copied out;
 * false if there is none. The device is trusted to speak the protocol:
 * anything else fails the test. release: hand the bytes back (tail). */
static bool ring_take(struct ep *e, uint32_t *cur, bool release, uint8_t *buf, size_t cap,
		      uint32_t *len)
{
	uint32_t head = atomic_load_explicit(&e->r->ctrl[1].head, memory_order_acquire);

	if (head - *cur > SHM_RING_BYTES || (head - *cur) % SHM_REC_ALIGN)
		fail_msg("the device published head %u with tail %u", head, *cur);
	while (head != *cur) {
		uint32_t off = *cur & (SHM_RING_BYTES - 1);
		const struct shm_rec *rec = (const void *)(e->r->ring[1] + off);
		uint32_t n = rec->len;

		if (n == SHM_REC_WRAP) {
			if (SHM_RING_BYTES - off > head - *cur)
				fail_msg("the device wrote a WRAP past head");
			*cur += SHM_RING_BYTES - off;
			continue;
		}
		if (!n || n > SHM_PKT_MAX || n > cap || shm_rec_bytes(n) > head - *cur ||
		    shm_rec_bytes(n) > SHM_RING_BYTES - off)
			fail_msg("the device wrote a record of %u bytes", n);
		memcpy(buf, rec->data, n);
		*cur += shm_rec_bytes(n);
		if (release)
			atomic_store_explicit(&e->r->ctrl[1].tail, *cur, memory_order_release);
		*len = n;
		return true;
	}
	return false;
}

static void ep_send(struct ep *e, const uint8_t *pkt, size_t n)
{
	if (!over_shm) {
		assert_int_equal(sendto(e->udp, pkt, n, 0, (struct sockaddr *)&dev_addr,
					sizeof(dev_addr)), (ssize_t)n);
		return;
	}
	ring_put(e, pkt, (uint32_t)n);
	ring_publish(e, e->head);
}

/* One packet from the device within ms, parsed (asserting that it parses);
 * false if none came. */
static bool ep_recv(struct ep *e, struct urvt_pkt *p, uint8_t *buf, size_t cap, int ms)
{
	uint64_t end = ut_now_ms() + (uint64_t)ms;
	uint32_t n;

	if (!over_shm)
		return ut_peer_recv(e->udp, p, buf, cap, ms);
	for (;;) {
		struct pollfd pfd = { .fd = e->bell, .events = POLLIN };
		uint64_t now, v;

		udp_silent(e);
		if (ring_take(e, &e->tail, true, buf, cap, &n)) {
			assert_int_equal(urvt_pkt_parse(buf, n, p), 0);
			return true;
		}
		now = ut_now_ms();
		if (now >= end)
			return false;
		/* sleep on our doorbell: ask for it, then look again */
		atomic_store(&e->r->ctrl[1].need_wake, 1);
		atomic_thread_fence(memory_order_seq_cst);
		if (atomic_load_explicit(&e->r->ctrl[1].head, memory_order_acquire) != e->tail)
			continue;
		if (poll(&pfd, 1, (int)(end - now)) == 1)
			(void)!read(e->bell, &v, sizeof(v));
	}
}

static void ep_drain(struct ep *e)
{
	uint8_t junk[5000];
	uint32_t n;

	if (!over_shm) {
		while (recv(e->udp, junk, sizeof(junk), MSG_DONTWAIT) > 0)
			;
		return;
	}
	udp_silent(e);
	while (ring_take(e, &e->tail, true, junk, sizeof(junk), &n))
		;
}

static void map_stats(void)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/dev/shm/urvt.%d", (int)getpid());
	fd = open(path, O_RDONLY);
	if (fd < 0)
		fail_msg("no counters file %s (URVT_STATS=0?)", path);
	stats = mmap(NULL, sizeof(*stats), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(stats != MAP_FAILED);
	assert_int_equal(stats->magic, URVT_STATS_MAGIC);
	assert_int_equal(stats->ncounters, URVT_CTR_NUM);
}

static uint64_t ctr(enum urvt_ctr c)
{
	return __atomic_load_n(&stats->dev.v[c], __ATOMIC_RELAXED);
}

/* What the attacker's link counts, received and sent. */
static enum urvt_ctr link_rx_ctr(void)
{
	return URVT_CTR_LINK_RX(urvt_stats_link_slot(over_shm ? "shm" : "udp"));
}

static enum urvt_ctr link_tx_ctr(void)
{
	return URVT_CTR_LINK_TX(urvt_stats_link_slot(over_shm ? "shm" : "udp"));
}

static int setup(void **state)
{
	ut_open(&dev);
	pd = ut_pd(&dev);
	pd2 = ut_pd(&dev);
	map_stats();
	memset(&dev_addr, 0, sizeof(dev_addr));
	dev_addr.sin_family = AF_INET;
	dev_addr.sin_port = htons(URVT_ROCE_UDP_PORT);
	memcpy(&dev_addr.sin_addr, &dev.rdi->gid.raw[12], 4);
	if (over_shm && !dev_shm())
		fail_msg("the device has no shm link");
	ep_open(&peer, 10);
	ep_open(&stranger, 120);

	region_init(&R[M_RW], pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 1);
	region_init(&R[M_RO], pd, IBV_ACCESS_REMOTE_READ, 2);
	region_init(&R[M_LOCAL], pd, IBV_ACCESS_LOCAL_WRITE, 3);
	region_init(&R[M_OTHER], pd2, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 4);
	region_init(&R[M_STALE], pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 5);
	region_init(&R[M_RECV], pd, IBV_ACCESS_LOCAL_WRITE, 6);
	/* a key that was valid once; its memory stays mapped and watched */
	assert_int_equal(rvt_dereg_mr(R[M_STALE].mr), 0);
	R[M_STALE].mr = NULL;
	return 0;
}

static int teardown(void **state)
{
	ep_close(&peer);
	ep_close(&stranger);
	for (int i = 0; i < NMR; i++)
		if (R[i].mr)
			rvt_dereg_mr(R[i].mr);
	ut_close(&dev);
	return 0;
}

/* A packet from e: headers of f + payload + pad, then the ICRC: on UDP a
 * correct one for icrc_from's address (normally e's), on shm zero, as urvt
 * sends there (docs/shm.md: the link carries no ICRC). pre: mutate before
 * the ICRC is computed (the result still has a valid ICRC); post: after.
 * Unknown opcodes get a bare BTH. Returns the length. */
typedef void (*mut_fn)(uint8_t *buf, size_t *len);
static size_t build_pkt(uint8_t *buf, const struct sockaddr_in *icrc_from, struct urvt_pkt *f,
			const void *payload, uint32_t len, mut_fn pre, mut_fn post)
{
	struct urvt_ipinfo ip;
	size_t h, n;
	uint8_t pad;

	if (!f->pkey)
		f->pkey = 0xffff;
	f->paylen = len;
	h = urvt_pkt_build_hdr(buf, 5000, f);
	if (!h) {
		memset(buf, 0, URVT_BTH_BYTES);
		bth_set_opcode(buf, f->opcode);
		bth_set_pkey(buf, f->pkey);
		bth_set_qpn(buf, f->dest_qpn);
		bth_set_psn(buf, f->psn);
		h = URVT_BTH_BYTES;
	}
	if (len && payload)
		memcpy(buf + h, payload, len);
	n = h + len;
	pad = bth_pad(buf);
	memset(buf + n, 0, pad);
	n += pad;
	if (pre)
		pre(buf, &n);
	if (over_shm) {
		urvt_icrc_put(buf + n, 0);
	} else {
		urvt_ipinfo_v4(&ip, icrc_from->sin_addr.s_addr, dev_addr.sin_addr.s_addr,
			       URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
		urvt_icrc_put(buf + n, urvt_icrc(&ip, buf, n));
	}
	n += URVT_ICRC_BYTES;
	if (post)
		post(buf, &n);
	return n;
}

static void send_pkt(struct ep *e, struct urvt_pkt *f, const void *payload, uint32_t len,
		     mut_fn pre, mut_fn post)
{
	uint8_t buf[5000];

	ep_send(e, buf, build_pkt(buf, &e->addr, f, payload, len, pre, post));
}

static void flush_socks(void)
{
	ep_drain(&peer);
	ep_drain(&stranger);
}

/* ------------------------------------------------------------------ */
/* Victims                                                            */
/* ------------------------------------------------------------------ */
static struct rvt_cq *cq;

/* A fresh QP in state st whose peer is e (RC/UC: PEER_QPN at e's GID,
 * timeout and retry_cnt as given), one receive posted. */
static struct rvt_qp *victim_of(struct ep *e, enum ibv_qp_type t, int st, int access,
				uint8_t timeout, uint8_t retry_cnt)
{
	struct rvt_qp *qp = ut_qp(&dev, pd, t, cq, cq, NULL, NULL, false);
	const struct ut_path path = { .peer_s_addr = e->addr.sin_addr.s_addr,
				      .dest_qpn = PEER_QPN, .rq_psn = PEER_PSN, .sq_psn = MY_PSN,
				      .min_rnr_timer = 3, .timeout = timeout,
				      .retry_cnt = retry_cnt, .rnr_retry = 7, .max_rd_atomic = 4 };

	flush_socks();
	ep_drain(e);
	if (st == IBV_QPS_RESET)
		return qp;
	ut_to_init(qp, access, UD_QKEY);
	ut_post_recv(qp, 0xabc, R[M_RECV].buf, 512, R[M_RECV].key);
	if (st == IBV_QPS_INIT)
		return qp;
	ut_to_rtr_path(qp, &path);
	/* the address vector chose the link: shm exactly when the attacker
	 * is a shm peer (it is UP by now) */
	if (t != IBV_QPT_UD && (qp->remote_av.route != 0) != over_shm)
		fail_msg("the victim routes its peer over %s", qp->remote_av.route ? "shm" : "udp");
	if (st == IBV_QPS_RTR)
		return qp;
	ut_to_rts_path(qp, &path);
	if (st == IBV_QPS_ERR)
		ut_modify_state(qp, IBV_QPS_ERR);
	return qp;
}

static struct rvt_qp *victim(enum ibv_qp_type t, int st, int access)
{
	return victim_of(&peer, t, st, access, 18, 7);
}

/* ------------------------------------------------------------------ */
/* The table                                                          */
/* ------------------------------------------------------------------ */
enum qsel { Q_VICTIM, Q_NONE, Q_ZERO, Q_ONE, Q_MCAST };
enum ksel { K_NONE, K_RW, K_RO, K_LOCAL, K_OTHER, K_STALE, K_GUESS, K_NEXT, K_ZERO };
enum vsel { V_OFF, V_END, V_BEFORE, V_RAW };
#define NONE (-1)
#define ALL_RIGHTS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static void pre_tver1(uint8_t *b, size_t *n) { bth_set_tver(b, 1); }
static void post_flip(uint8_t *b, size_t *n) { b[14] ^= 0x40; }
static void post_icrc(uint8_t *b, size_t *n) { b[*n - 1] ^= 0x01; }
static void post_trunc3(uint8_t *b, size_t *n) { *n = 3; }
static void pre_cut_reth(uint8_t *b, size_t *n) { *n = 12 + 8; } /* BTH + half a RETH */
static void pre_odd_len(uint8_t *b, size_t *n) { *n -= 1; } /* not a multiple of 4 after ICRC */

struct attack {
	const char *name;
	enum ibv_qp_type qpt;
	int state;        /* victim's state */
	int access;       /* victim's qp_access_flags (0: all remote rights) */
	uint8_t op;
	enum qsel qsel;
	int psn_off;      /* PSN = PEER_PSN + psn_off */
	enum ksel key;
	enum vsel vsel;
	int64_t va_off;   /* offset into the MR (V_OFF), back from its end (V_END) ... */
	uint64_t va_raw;
	uint32_t dmalen;  /* RETH DMA length */
	uint32_t paylen;
	uint16_t pkey;    /* 0: 0xffff */
	uint32_t qkey;    /* UD: 0 means the victim's */
	bool stranger;    /* sent from another address */
	bool icrc_stranger; /* UDP: the ICRC computed for the stranger's address */
	mut_fn pre, post;
	/* expected */
	int resp_op;      /* NONE: nothing on the wire */
	int resp_syn;
	int resp_psn_off;
	int wc;           /* first completion on the CQ: status or NONE */
	int state_after;
	enum urvt_ctr c;
	bool rw_changes;  /* the (legitimate) control rows write M_RW */
	/* the shm link */
	const char *udp_only;             /* why the row cannot run over shm */
	const struct outcome *on_shm;     /* its outcome there, if not the above */
};

/* What a row expects (the last fields of struct attack). */
struct outcome {
	int resp_op, resp_syn, resp_psn_off, wc, state_after;
	enum urvt_ctr c;
	bool rw_changes;
};

static struct outcome expected(const struct attack *a)
{
	if (over_shm && a->on_shm)
		return *a->on_shm;
	return (struct outcome){ a->resp_op, a->resp_syn, a->resp_psn_off, a->wc, a->state_after,
				 a->c, a->rw_changes };
}

#define DROP(x) (URVT_CTR_DROP_BASE + (x))
#define NAK_INV 0x61 /* roce-wire §8 */
#define NAK_ACC 0x62
#define NAK_SEQ 0x60
#define RC IBV_QPT_RC
#define UC IBV_QPT_UC
#define UD IBV_QPT_UD
#define RTS IBV_QPS_RTS
#define ERR IBV_QPS_ERR
#define FL IBV_WC_WR_FLUSH_ERR
#define W_ONLY URVT_OP_RC_RDMA_WRITE_ONLY
#define R_REQ URVT_OP_RC_RDMA_READ_REQUEST
#define FADD URVT_OP_RC_FETCH_ADD
#define AW URVT_OP_RC_ATOMIC_WRITE
#define ACK URVT_OP_RC_ACKNOWLEDGE
#define S_ONLY URVT_OP_RC_SEND_ONLY

static const struct attack attacks[] = {
	/* controls: the legitimate operations work (and prove the harness) */
	{ "control: WRITE into an MR with REMOTE_WRITE", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF,
	  64, 0, 64, 64, .resp_op = ACK, .resp_syn = 0x1f, .resp_psn_off = 0, .wc = NONE,
	  .state_after = RTS, .c = URVT_CTR_ACKS_SENT, .rw_changes = true },
	{ "control: READ from an MR with REMOTE_READ", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RO, V_OFF,
	  0, 0, 100, 0, .resp_op = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, .resp_syn = 0x1f,
	  .resp_psn_off = 0, .wc = NONE, .state_after = RTS, .c = URVT_CTR_TX_PKTS },

	/* addressing: forged QPN, QPN 0 / 1 / multicast, wrong source, half-built QP */
	{ "forged QPN (no such QP)", RC, RTS, 0, W_ONLY, Q_NONE, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_NO_QP) },
	{ "QPN 0 (SMI)", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_ZERO, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_QPN) },
	{ "UD to QP1 (GSI, none here)", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_ONE, 0, K_NONE, V_OFF,
	  0, 0, 0, 16, .qkey = URVT_GSI_QKEY, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_NO_QP) },
	{ "multicast QPN", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_MCAST, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_TDROP_MCAST) },
	{ "WRITE from a stranger's address", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16,
	  16, .stranger = true, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_ADDR) },
	{ "UC WRITE from a stranger's address", UC, RTS, 0, URVT_OP_UC_RDMA_WRITE_ONLY, Q_VICTIM, 0,
	  K_RW, V_OFF, 0, 0, 16, 16, .stranger = true, .resp_op = NONE, .wc = NONE,
	  .state_after = RTS, .c = DROP(URVT_DROP_BAD_ADDR) },
	{ "WRITE to a QP in RESET", RC, IBV_QPS_RESET, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0,
	  16, 16, .resp_op = NONE, .wc = NONE, .state_after = IBV_QPS_RESET,
	  .c = DROP(URVT_DROP_NO_QP) },
	{ "WRITE to a QP in INIT", RC, IBV_QPS_INIT, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16,
	  16, .resp_op = NONE, .wc = NONE, .state_after = IBV_QPS_INIT,
	  .c = DROP(URVT_TDROP_BAD_STATE) },
	{ "WRITE to a QP in ERR", RC, ERR, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .resp_op = NONE, .wc = FL, .state_after = ERR, .c = DROP(URVT_TDROP_BAD_STATE) },

	/* keys: stale, guessed, next slot, other PD, 0, missing rights */
	{ "WRITE with a deregistered R_Key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_STALE, V_OFF, 0, 0,
	  16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with a guessed R_Key (other generation)", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_GUESS,
	  V_OFF, 0, 0, 16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with the next slot's key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_NEXT, V_OFF, 0, 0, 16,
	  16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with R_Key 0", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_ZERO, V_RAW, 0, 0x1000, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with the key of another PD's MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_OTHER, V_OFF,
	  0, 0, 16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE into a remote-read-only MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RO, V_OFF, 0, 0, 16,
	  16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE into a local-only MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_LOCAL, V_OFF, 0, 0, 16,
	  16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE to a QP without REMOTE_WRITE", RC, RTS, IBV_ACCESS_REMOTE_READ, W_ONLY, Q_VICTIM, 0,
	  K_RW, V_OFF, 0, 0, 16, 16, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0,
	  .wc = FL, .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "WRITE_WITH_IMM with a stale key (receive in progress)", RC, RTS, 0,
	  URVT_OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Q_VICTIM, 0, K_STALE, V_OFF, 0, 0, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = IBV_WC_LOC_PROT_ERR,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "UC WRITE with a stale key (dropped)", UC, RTS, 0, URVT_OP_UC_RDMA_WRITE_ONLY, Q_VICTIM, 0,
	  K_STALE, V_OFF, 0, 0, 16, 16, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_TDROP_RESP_SILENT) },

	/* ranges: beyond the end, before the start, wrap, 2^31+ */
	{ "WRITE past the end of the MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_END, 8, 0, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE before the start of the MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_BEFORE, 8, 0,
	  16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with addr+len wrapping 2^64", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_RAW, 0,
	  0xffffffffffffff00ull, 0x200, 0x200, .resp_op = ACK, .resp_syn = NAK_ACC,
	  .resp_psn_off = 0, .wc = FL, .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with RETH length 2^31+1", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0,
	  0x80000001u, 16, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "WRITE with more payload than RETH length", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF,
	  0, 0, 8, 64, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "READ beyond the MR", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RW, V_END, 16, 0, 32, 0,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "READ of 2^31+1 bytes", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 0x80000001u, 0,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_INV },
	{ "READ from a local-only MR", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_LOCAL, V_OFF, 0, 0, 16, 0,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "READ with a deregistered key", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_STALE, V_OFF, 0, 0, 16,
	  0, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "zero-length READ with a bad key (no key check, rc-protocol §3.6)", RC, RTS, 0, R_REQ,
	  Q_VICTIM, 0, K_ZERO, V_RAW, 0, 0xdead0000, 0, 0,
	  .resp_op = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, .resp_syn = 0x1f, .resp_psn_off = 0,
	  .wc = NONE, .state_after = RTS,
	  .c = URVT_CTR_TX_PKTS },
	{ "zero-length WRITE with a bad key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_STALE, V_RAW, 0,
	  0xdead0000, 0, 0, .resp_op = ACK, .resp_syn = 0x1f, .resp_psn_off = 0, .wc = NONE,
	  .state_after = RTS, .c = URVT_CTR_ACKS_SENT },

	/* atomics */
	{ "misaligned atomic", RC, RTS, 0, FADD, Q_VICTIM, 0, K_RW, V_OFF, 12, 0, 0, 0,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_INV },
	{ "atomic on an MR without REMOTE_ATOMIC", RC, RTS, 0, FADD, Q_VICTIM, 0, K_RO, V_OFF, 16, 0,
	  0, 0, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "atomic at the MR's end", RC, RTS, 0, FADD, Q_VICTIM, 0, K_RW, V_END, 0, 0, 0, 0,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "atomic to a QP without REMOTE_ATOMIC", RC, RTS, IBV_ACCESS_REMOTE_WRITE, FADD, Q_VICTIM,
	  0, K_RW, V_OFF, 16, 0, 0, 0, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0,
	  .wc = FL, .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },

	/* ATOMIC_WRITE (qp-semantics §2.10) */
	{ "control: ATOMIC_WRITE into an MR with REMOTE_WRITE", RC, RTS, 0, AW, Q_VICTIM, 0, K_RW,
	  V_OFF, 64, 0, 8, 8, .resp_op = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, .resp_syn = 0x1f,
	  .resp_psn_off = 0, .wc = NONE, .state_after = RTS, .c = URVT_CTR_TX_PKTS,
	  .rw_changes = true },
	{ "ATOMIC_WRITE with 4 bytes", RC, RTS, 0, AW, Q_VICTIM, 0, K_RW, V_OFF, 64, 0, 8, 4,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_INV },
	{ "ATOMIC_WRITE with RETH length 16", RC, RTS, 0, AW, Q_VICTIM, 0, K_RW, V_OFF, 64, 0, 16, 8,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_INV },
	{ "misaligned ATOMIC_WRITE", RC, RTS, 0, AW, Q_VICTIM, 0, K_RW, V_OFF, 12, 0, 8, 8,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_INV },
	{ "ATOMIC_WRITE into a remote-read-only MR", RC, RTS, 0, AW, Q_VICTIM, 0, K_RO, V_OFF, 16, 0,
	  8, 8, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "ATOMIC_WRITE at the MR's end", RC, RTS, 0, AW, Q_VICTIM, 0, K_RW, V_END, 4, 0, 8, 8,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "ATOMIC_WRITE to a QP without REMOTE_WRITE", RC, RTS, IBV_ACCESS_REMOTE_READ, AW,
	  Q_VICTIM, 0, K_RW, V_OFF, 16, 0, 8, 8, .resp_op = ACK, .resp_syn = NAK_INV,
	  .resp_psn_off = 0, .wc = FL, .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "ATOMIC_WRITE with the key of another PD's MR", RC, RTS, 0, AW, Q_VICTIM, 0, K_OTHER,
	  V_OFF, 16, 0, 8, 8, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },

	/* PSN */
	{ "PSN far ahead (+2^22)", RC, RTS, 0, W_ONLY, Q_VICTIM, 0x400000, K_RW, V_OFF, 0, 0, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_SEQ, .resp_psn_off = 0, .wc = NONE, .state_after = RTS,
	  .c = URVT_CTR_SEQ_ERRORS },
	{ "PSN far behind (-2^22): a duplicate, re-ACKed, not executed", RC, RTS, 0, W_ONLY,
	  Q_VICTIM, -0x400000, K_RW, V_OFF, 0, 0, 16, 16, .resp_op = ACK, .resp_syn = 0x1f,
	  .resp_psn_off = -1, .wc = NONE, .state_after = RTS, .c = URVT_CTR_DUP_REQUESTS },

	/* P_Key, Q_Key, TVer, ICRC, truncation */
	{ "wrong P_Key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16, .pkey = 0x1234,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_PKEY) },
	{ "invalid P_Key 0x8000", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .pkey = 0x8000, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_PKEY) },
	{ "wrong Q_Key", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .qkey = 0x999, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_QKEY) },
	{ "TVer 1", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16, .pre = pre_tver1,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_TVER) },
	/* no ICRC on the shm link (docs/shm.md): what a flipped bit makes of
	 * the packet is what the device takes, here a VA outside every MR */
	{ "bad ICRC (a RETH bit flipped after it)", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0,
	  0, 16, 16, .post = post_flip, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_ICRC),
	  .on_shm = &(const struct outcome){ .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0,
					     .wc = FL, .state_after = ERR,
					     .c = URVT_CTR_NAK_SENT_ACCESS } },
	{ "ICRC field corrupted, packet intact", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0,
	  16, 16, .post = post_icrc, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_ICRC),
	  .on_shm = &(const struct outcome){ .resp_op = ACK, .resp_syn = 0x1f, .resp_psn_off = 0,
					     .wc = NONE, .state_after = RTS,
					     .c = URVT_CTR_ACKS_SENT, .rw_changes = true } },
	{ "ICRC computed for another source address", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF,
	  0, 0, 16, 16, .icrc_stranger = true, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_ICRC),
	  .udp_only = "the shm link has no IP header, nothing for an ICRC to cover" },
	{ "truncated to 3 bytes", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .post = post_trunc3, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_TRUNCATED) },
	{ "WRITE cut inside the RETH (valid ICRC)", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0,
	  0, 16, 0, .pre = pre_cut_reth, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_TRUNCATED) },
	{ "length not a multiple of 4", RC, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .pre = pre_odd_len, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_LENGTH) },

	/* opcodes of the wrong transport, reserved, RD, CNP */
	{ "UC opcode to an RC QP", RC, RTS, 0, URVT_OP_UC_SEND_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0,
	  0, 0, 16, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "UD opcode to an RC QP", RC, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0,
	  0, 0, 16, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "RC READ request to a UC QP", UC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 0,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "RC SEND to a UD QP", UD, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "reserved opcode 0x15", RC, RTS, 0, 0x15, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 0,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_OPCODE) },
	{ "CNP to an RC QP", RC, RTS, 0, URVT_OP_CNP, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 0,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_QPT_MISMATCH) },

	/* lengths and sequence */
	{ "SEND larger than the PMTU", RC, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 2048,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = IBV_WC_LOC_QP_OP_ERR,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "SEND larger than the receive buffer", RC, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0,
	  0, 1000, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0,
	  .wc = IBV_WC_LOC_LEN_ERR, .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "WRITE_MIDDLE without FIRST", RC, RTS, 0, URVT_OP_RC_RDMA_WRITE_MIDDLE, Q_VICTIM, 0, K_NONE,
	  V_OFF, 0, 0, 0, 1024, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "UD SEND larger than the receive buffer", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_VICTIM, 0,
	  K_NONE, V_OFF, 0, 0, 0, 1000, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_TDROP_RESP_SILENT) },
};

static void build(const struct attack *a, struct rvt_qp *qp, struct urvt_pkt *f)
{
	static const int kmr[] = { [K_RW] = M_RW, [K_RO] = M_RO, [K_LOCAL] = M_LOCAL,
				   [K_OTHER] = M_OTHER, [K_STALE] = M_STALE, [K_GUESS] = M_RW,
				   [K_NEXT] = M_RW, [K_ZERO] = M_RW };
	uint32_t key = 0;
	uint64_t va;
	int m = a->key == K_NONE ? M_RW : kmr[a->key];

	memset(f, 0, sizeof(*f));
	f->opcode = a->op;
	f->psn = (uint32_t)(PEER_PSN + a->psn_off) & 0xffffff;
	f->ackreq = true;
	f->pkey = a->pkey;
	switch (a->qsel) {
	case Q_VICTIM: f->dest_qpn = qp->qpn; break;
	case Q_NONE: f->dest_qpn = 0xabcdef; break;
	case Q_ZERO: f->dest_qpn = 0; break;
	case Q_ONE: f->dest_qpn = 1; break;
	case Q_MCAST: f->dest_qpn = URVT_MULTICAST_QPN; break;
	}
	switch (a->key) {
	case K_NONE: break;
	case K_GUESS: key = R[M_RW].key ^ 1; break;
	case K_NEXT: key = R[M_RW].key + (1u << RVT_LKEY_GEN_BITS); break;
	case K_ZERO: key = 0; break;
	default: key = R[m].key; break;
	}
	switch (a->vsel) {
	case V_OFF: va = va_of(m, (uint64_t)a->va_off); break;
	case V_END: va = va_of(m, MR_LEN - (uint64_t)a->va_off); break;
	case V_BEFORE: va = va_of(m, 0) - (uint64_t)a->va_off; break;
	default: va = a->va_raw; break;
	}
	f->reth = (struct urvt_reth){ .va = va, .rkey = key, .len = a->dmalen };
	f->atmeth = (struct urvt_atmeth){ .va = va, .rkey = key, .swap_add = 1 };
	f->deth = (struct urvt_deth){ .qkey = a->qkey ? a->qkey : UD_QKEY, .sqp = PEER_QPN };
}

/* Runs the row; false if it does not apply to this link. */
static bool run_attack(const struct attack *a)
{
	struct outcome w = expected(a);
	struct rvt_qp *qp;
	static uint8_t payload[4096];
	uint64_t before, rx_before, tx_before, deadline;
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	struct ibv_wc wc;
	struct ep *from = a->stranger ? &stranger : &peer;

	if (over_shm && a->udp_only) {
		printf("  skip %s: %s\n", a->name, a->udp_only);
		return false;
	}
	qp = victim(a->qpt, a->state, a->access ? a->access : ALL_RIGHTS);
	before = ctr(w.c);
	rx_before = ctr(link_rx_ctr());
	tx_before = ctr(link_tx_ctr());
	ut_fill(payload, sizeof(payload), 99);
	build(a, qp, &f);
	ep_send(from, buf, build_pkt(buf, a->icrc_stranger ? &stranger.addr : &from->addr, &f,
				     payload, a->paylen, a->pre, a->post));
	if (w.resp_op != NONE) {
		if (!ep_recv(&peer, &p, buf, sizeof(buf), 2000))
			fail_msg("%s: no response", a->name);
		if (p.opcode != w.resp_op)
			fail_msg("%s: response opcode %#x, expected %#x", a->name, p.opcode,
				 w.resp_op);
		if (p.dest_qpn != PEER_QPN)
			fail_msg("%s: response to QPN %#x", a->name, p.dest_qpn);
		if ((p.mask & URVT_AETH_MASK) && p.aeth.syn != w.resp_syn)
			fail_msg("%s: syndrome %#x, expected %#x", a->name, p.aeth.syn, w.resp_syn);
		if (p.psn != ((uint32_t)(PEER_PSN + w.resp_psn_off) & 0xffffff))
			fail_msg("%s: response PSN %#x", a->name, p.psn);
		if (ctr(link_tx_ctr()) == tx_before)
			fail_msg("%s: the response did not go over %s", a->name, link_name);
	}
	/* the counter moves (bounded wait: the progress thread may receive) */
	deadline = ut_now_ms() + 2000;
	while (ctr(w.c) == before && ut_now_ms() < deadline)
		ut_sleep_ms(1);
	if (ctr(w.c) == before)
		fail_msg("%s: counter %s did not move", a->name, urvt_ctr_name[w.c]);
	if (ctr(link_rx_ctr()) == rx_before)
		fail_msg("%s: the packet did not come over %s", a->name, link_name);
	/* nothing (else) on the wire, to the attacker or the stranger */
	if (ep_recv(&peer, &p, buf, sizeof(buf), 30))
		fail_msg("%s: unexpected packet opcode %#x syn %#x psn %#x", a->name, p.opcode,
			 p.aeth.syn, p.psn);
	if (ep_recv(&stranger, &p, buf, sizeof(buf), 0))
		fail_msg("%s: a packet went to the stranger", a->name);
	if (w.wc != NONE) {
		if (ut_poll(cq, &wc, 1, 2000) != 1)
			fail_msg("%s: no completion", a->name);
		if ((int)wc.status != w.wc)
			fail_msg("%s: completion status %d, expected %d", a->name,
				 (int)wc.status, w.wc);
		if (wc.wr_id != 0xabc || wc.qp_num != qp->qpn)
			fail_msg("%s: completion for wr %#llx qp %u", a->name,
				 (unsigned long long)wc.wr_id, wc.qp_num);
	} else {
		if (ut_poll(cq, &wc, 1, 10) != 0)
			fail_msg("%s: unexpected completion status %d", a->name,
				 (int)wc.status);
	}
	if (ut_state(qp) != w.state_after)
		fail_msg("%s: QP state %d, expected %d", a->name, ut_state(qp), w.state_after);
	check_memory(a->name, w.rw_changes);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	while (ut_poll(cq, &wc, 1, 0) == 1)
		;
	ut_async_drain(&dev);
	if (w.rw_changes) {
		memcpy(R[M_RW].buf, R[M_RW].snap, MR_LEN); /* restore for the next rows */
	}
	printf("  ok  %s%s\n", a->name, over_shm && a->on_shm ? " (its shm outcome)" : "");
	return true;
}

static void test_table(void **state)
{
	size_t n = sizeof(attacks) / sizeof(attacks[0]), ran = 0;

	cq = ut_cq(&dev, 256);
	for (size_t i = 0; i < n; i++)
		ran += run_attack(&attacks[i]);
	printf("  %zu of %zu rows over %s\n", ran, n, link_name);
	rvt_destroy_cq(cq);
	cq = NULL;
}

/* ------------------------------------------------------------------ */
/* Multi-packet attacks                                               */
/* ------------------------------------------------------------------ */
static void expect(struct urvt_pkt *p, uint8_t *buf, uint8_t op)
{
	assert_true(ep_recv(&peer, p, buf, 5000, 2000));
	assert_int_equal(p->opcode, op);
	assert_int_equal(p->dest_qpn, PEER_QPN);
}

static void quiet(int ms)
{
	struct urvt_pkt p;
	uint8_t buf[5000];
	if (ep_recv(&peer, &p, buf, sizeof(buf), ms))
		fail_msg("unexpected packet opcode %#x psn %#x", p.opcode, p.psn);
}

/* A replayed atomic is answered from the saved result, never executed twice;
 * a PSN gap is NAKed once however many packets follow. */
static void test_replay_and_gap(void **state)
{
	struct rvt_qp *qp;
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	uint64_t *target = (uint64_t *)(void *)(R[M_RW].buf + 64), before = *target;
	uint64_t seq = ctr(URVT_CTR_NAK_SENT_SEQ);

	cq = ut_cq(&dev, 64);
	qp = victim(RC, RTS, ALL_RIGHTS);
	memset(&f, 0, sizeof(f));
	f.opcode = FADD;
	f.dest_qpn = qp->qpn;
	f.psn = PEER_PSN;
	f.ackreq = true;
	f.atmeth = (struct urvt_atmeth){ .va = va_of(M_RW, 64), .rkey = R[M_RW].key, .swap_add = 7 };
	for (int i = 0; i < 5; i++) {
		send_pkt(&peer, &f, NULL, 0, NULL, NULL);
		expect(&p, buf, URVT_OP_RC_ATOMIC_ACKNOWLEDGE);
		assert_int_equal(p.atmack_orig, before);
		assert_int_equal(p.psn, PEER_PSN);
	}
	assert_int_equal(*target, before + 7);
	/* the replay with another key/address is still the old result */
	f.atmeth.rkey = R[M_OTHER].key;
	send_pkt(&peer, &f, NULL, 0, NULL, NULL);
	expect(&p, buf, URVT_OP_RC_ATOMIC_ACKNOWLEDGE);
	assert_int_equal(p.atmack_orig, before);
	assert_int_equal(*target, before + 7);
	/* a gap: one NAK for many packets */
	memset(&f, 0, sizeof(f));
	f.opcode = S_ONLY;
	f.dest_qpn = qp->qpn;
	f.ackreq = true;
	for (int i = 0; i < 20; i++) {
		f.psn = PEER_PSN + 5 + (uint32_t)i;
		send_pkt(&peer, &f, buf, 8, NULL, NULL);
	}
	expect(&p, buf, ACK);
	assert_int_equal(p.aeth.syn, NAK_SEQ);
	assert_int_equal(p.psn, PEER_PSN + 1);
	quiet(50);
	assert_int_equal(ctr(URVT_CTR_NAK_SENT_SEQ), seq + 1);
	assert_int_equal(ut_state(qp), RTS);
	ut_cq_empty(cq, 10);
	*target = before;
	check_memory("replay", false);
	rvt_destroy_qp(qp);
	rvt_destroy_cq(cq);
}

/* A signaled send WR of one SGE (none for len 0); READ/WRITE at a remote
 * address the fake peer never checks. */
static void post_wr(struct rvt_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *addr,
		    uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = len ? 1 : 0,
				  .opcode = op, .send_flags = IBV_SEND_SIGNALED };

	wr.wr.rdma.remote_addr = 0x10000; /* the fake peer has no memory to check */
	wr.wr.rdma.rkey = 0x99;
	ut_post_send(qp, &wr);
}

/* qp went to ERR: its one posted receive is flushed. */
static void expect_recv_flushed(struct rvt_qp *qp)
{
	struct ibv_wc wc;

	assert_int_equal(ut_state(qp), IBV_QPS_ERR);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc.wr_id, 0xabc);
}

/* One WRITE packet of a span test (docs/shm.md "Spans": BTH resv7 holds
 * the PSNs past the first). */
static void span_write(struct rvt_qp *qp, uint8_t op, uint32_t psn, uint32_t more,
		       uint32_t reth_len, const uint8_t *payload, uint32_t len)
{
	struct urvt_pkt f;

	memset(&f, 0, sizeof(f));
	f.opcode = op;
	f.dest_qpn = qp->qpn;
	f.psn = psn;
	f.ackreq = true;
	f.span_more = more;
	f.reth = (struct urvt_reth){ .va = va_of(M_RW, 0), .rkey = R[M_RW].key, .len = reth_len };
	send_pkt(&peer, &f, payload, len, NULL, NULL);
}

/*
 * Spans (docs/shm.md "Spans"): over shm a WRITE of several PMTUs in one
 * packet lands and is acknowledged at its last PSN; a span whose length
 * does not match its PSN count (a short FIRST, an empty last PMTU) is an
 * invalid request. Over UDP the reserved bits mean nothing: the same
 * packet is longer than a PMTU, an invalid request (rc-protocol §3.5).
 */
static void test_spans(void **state)
{
	static uint8_t data[4 * PMTU];
	struct urvt_pkt p;
	uint8_t buf[5000];
	struct rvt_qp *qp;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 3);
	cq = ut_cq(&dev, 64);
	qp = victim(RC, RTS, ALL_RIGHTS);
	/* WRITE ONLY, 4 PMTUs less 96 bytes */
	span_write(qp, W_ONLY, PEER_PSN, 3, 4000, data, 4000);
	expect(&p, buf, ACK);
	if (!over_shm) {
		assert_int_equal(p.aeth.syn, NAK_INV);
		assert_int_equal(p.psn, PEER_PSN);
		expect_recv_flushed(qp);
		check_memory("span over udp", false);
		goto out;
	}
	assert_int_equal(p.aeth.syn & 0xe0, 0);
	assert_int_equal(p.psn, PEER_PSN + 3);
	assert_memory_equal(R[M_RW].buf, data, 4000);
	/* FIRST of 3 PMTUs, LAST of 2 (the last one partly): 5000 bytes */
	memset(R[M_RW].buf, 0, 5000);
	span_write(qp, URVT_OP_RC_RDMA_WRITE_FIRST, PEER_PSN + 4, 2, 5000, data, 3 * PMTU);
	span_write(qp, URVT_OP_RC_RDMA_WRITE_LAST, PEER_PSN + 7, 1, 0, data + 1000, 5000 - 3 * PMTU);
	/* the FIRST asked too: its own ACK, or none when both came in one
	 * receive batch (its ACK owed, covered by the LAST's) */
	expect(&p, buf, ACK);
	if (p.psn == PEER_PSN + 6)
		expect(&p, buf, ACK);
	assert_int_equal(p.aeth.syn & 0xe0, 0);
	assert_int_equal(p.psn, PEER_PSN + 8);
	assert_memory_equal(R[M_RW].buf, data, 3 * PMTU);
	assert_memory_equal(R[M_RW].buf + 3 * PMTU, data + 1000, 5000 - 3 * PMTU);
	assert_int_equal(ut_state(qp), RTS);
	/* a READ of 3500 bytes (4 PSNs) answered by one span: one whose last
	 * PMTU would be empty is dropped, the right one completes it */
	{
		uint64_t badlen = ctr(DROP(URVT_DROP_BAD_LENGTH));
		struct urvt_pkt f;
		struct ibv_wc wc;

		post_wr(qp, 9, IBV_WR_RDMA_READ, R[M_RECV].buf + 2048, 3500, R[M_RECV].key);
		expect(&p, buf, URVT_OP_RC_RDMA_READ_REQUEST);
		assert_int_equal(p.psn, MY_PSN);
		assert_int_equal(p.reth.len, 3500);
		memset(&f, 0, sizeof(f));
		f.opcode = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
		f.dest_qpn = qp->qpn;
		f.psn = MY_PSN;
		f.aeth.syn = 0x1f;
		f.span_more = 3;
		uint64_t direct = ctr(URVT_CTR_COMP_DIRECT);
		send_pkt(&peer, &f, data, 3 * PMTU, NULL, NULL);
		for (uint64_t end = ut_now_ms() + 2000;
		     ctr(DROP(URVT_DROP_BAD_LENGTH)) == badlen && ut_now_ms() < end;)
			assert_int_equal(rvt_poll_cq(cq, 1, &wc), 0);
		assert_int_equal(ctr(DROP(URVT_DROP_BAD_LENGTH)), badlen + 1);
		ut_cq_empty(cq, 5);
		send_pkt(&peer, &f, data, 3500, NULL, NULL);
		ut_poll1(cq, &wc);
		assert_int_equal(wc.wr_id, 9);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_memory_equal(R[M_RECV].buf + 2048, data, 3500);
		/* nobody ran the QP's engine (its first probe is 67 ms off): the
		 * receiving thread completed the 4 PMTUs from where they lay
		 * (engine.c "Straight to the completer") */
		assert_int_equal(ctr(URVT_CTR_COMP_DIRECT) - direct, 4);
	}
	/* a FIRST shorter than its PMTUs: invalid request, the QP to ERR */
	span_write(qp, URVT_OP_RC_RDMA_WRITE_FIRST, PEER_PSN + 9, 1, 5000, data, 2 * PMTU - 4);
	expect(&p, buf, ACK);
	assert_int_equal(p.aeth.syn, NAK_INV);
	assert_int_equal(p.psn, PEER_PSN + 9);
	expect_recv_flushed(qp);
	rvt_destroy_qp(qp);
	/* an ONLY whose last PMTU would be empty: invalid request */
	qp = victim(RC, RTS, ALL_RIGHTS);
	span_write(qp, W_ONLY, PEER_PSN, 3, 2 * PMTU, data, 2 * PMTU);
	expect(&p, buf, ACK);
	assert_int_equal(p.aeth.syn, NAK_INV);
	expect_recv_flushed(qp);
	check_memory("spans", true);
out:
	quiet(50);
	ut_cq_empty(cq, 10);
	memcpy(R[M_RW].buf, R[M_RW].snap, MR_LEN); /* as the next test expects it */
	rvt_destroy_qp(qp);
	rvt_destroy_cq(cq);
}

/* SEND_WITH_INV naming a key of another PD (or a dead key): the receive
 * completes with REM_INV_REQ_ERR, the QP goes to ERR (class J), and the
 * other PD's MR stays valid. */
static void test_send_with_inv_foreign_key(void **state)
{
	for (int round = 0; round < 2; round++) {
		struct rvt_qp *qp;
		struct urvt_pkt f, p;
		uint8_t buf[5000];
		struct ibv_wc wc;
		struct rvt_sge sge;

		cq = ut_cq(&dev, 64);
		qp = victim(RC, RTS, ALL_RIGHTS);
		memset(&f, 0, sizeof(f));
		f.opcode = URVT_OP_RC_SEND_ONLY_WITH_INVALIDATE;
		f.dest_qpn = qp->qpn;
		f.psn = PEER_PSN;
		f.ackreq = true;
		f.ieth_rkey = round ? R[M_STALE].key : R[M_OTHER].key;
		send_pkt(&peer, &f, buf, 8, NULL, NULL);
		ut_poll1(cq, &wc);
		assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR);
		assert_int_equal(wc.wr_id, 0xabc);
		assert_int_equal(ut_state(qp), ERR);
		quiet(30); /* class J: no NAK of its own */
		/* the other PD's MR is still usable by a QP of its PD */
		{
			struct rvt_qp *q2 = ut_qp(&dev, pd2, RC, cq, cq, NULL, NULL, false);
			memset(&sge, 0, sizeof(sge));
			assert_true(rvt_rkey_ok(q2, &sge, 8, va_of(M_OTHER, 0), R[M_OTHER].key,
						IBV_ACCESS_REMOTE_WRITE));
			rvt_put_sge(&sge);
			rvt_destroy_qp(q2);
		}
		(void)p;
		check_memory("send_with_inv", false);
		rvt_destroy_qp(qp);
		ut_async_drain(&dev);
		rvt_destroy_cq(cq);
	}
}

/* Responses injected into a requester: READ response with no READ
 * outstanding, ACK for a PSN never sent, a READ response for a SEND. */
static void test_response_injection(void **state)
{
	struct rvt_qp *qp;
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	struct ibv_wc wc;
	uint64_t stale = ctr(DROP(URVT_TDROP_STALE_RESP)), bad = ctr(DROP(URVT_TDROP_BAD_RESP));
	static uint8_t junk[1024];
	struct ibv_sge sge;
	struct ibv_send_wr wr;

	cq = ut_cq(&dev, 64);
	qp = victim(RC, RTS, ALL_RIGHTS);
	ut_fill(junk, sizeof(junk), 77);
	/* nothing outstanding: READ response dropped as stale, nothing written */
	memset(&f, 0, sizeof(f));
	f.opcode = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
	f.dest_qpn = qp->qpn;
	f.psn = MY_PSN;
	f.aeth.syn = 0x1f;
	send_pkt(&peer, &f, junk, 512, NULL, NULL);
	/* ACK for a PSN never sent */
	f.opcode = ACK;
	f.psn = MY_PSN + 100;
	send_pkt(&peer, &f, NULL, 0, NULL, NULL);
	ut_sleep_ms(50);
	assert_true(ctr(DROP(URVT_TDROP_STALE_RESP)) + ctr(DROP(URVT_TDROP_BAD_RESP)) >= stale + bad + 2);
	assert_int_equal(ut_state(qp), RTS);
	ut_cq_empty(cq, 10);

	/* a READ outstanding into M_LOCAL... a forged ACK (not a READ response)
	 * cannot complete it, a response longer than the READ is dropped */
	memset(&sge, 0, sizeof(sge));
	sge.addr = va_of(M_RECV, 1024);
	sge.length = 100;
	sge.lkey = R[M_RECV].key;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 5;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = 0x1000;
	wr.wr.rdma.rkey = 0x77;
	ut_post_send(qp, &wr);
	expect(&p, buf, R_REQ);
	f.opcode = ACK;
	f.psn = MY_PSN;
	send_pkt(&peer, &f, NULL, 0, NULL, NULL);
	f.opcode = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
	send_pkt(&peer, &f, junk, 1024, NULL, NULL); /* 1024 > 100 */
	ut_cq_empty(cq, 50);
	check_memory("read response too long", false);
	/* the right one completes it */
	send_pkt(&peer, &f, junk, 100, NULL, NULL);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 5);
	assert_memory_equal(R[M_RECV].buf + 1024, junk, 100);

	/* a READ response for a SEND: the WQE fails FATAL_ERR (rc-protocol §4
	 * step 5), the QP errors */
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 6;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	ut_post_send(qp, &wr);
	expect(&p, buf, S_ONLY);
	f.psn = p.psn;
	f.opcode = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
	send_pkt(&peer, &f, junk, 0, NULL, NULL);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 6);
	assert_int_equal(wc.status, IBV_WC_FATAL_ERR);
	ut_poll1(cq, &wc); /* the posted receive, flushed */
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(ut_state(qp), ERR);
	check_memory("response injection", false);
	rvt_destroy_qp(qp);
	ut_async_drain(&dev);
	rvt_destroy_cq(cq);
}

/* CQ overrun over the network (class G): SENDs completing into a full CQ
 * raise IBV_EVENT_CQ_ERR (once) and take the QP to ERR; nothing is
 * written outside the receive buffers. */
static void test_cq_overrun(void **state)
{
	struct rvt_qp *qp;
	struct urvt_pkt f;
	uint8_t data[64];
	int n, events;

	cq = ut_cq(&dev, 1);
	n = (int)cq->cqe; /* capacity as reported */
	qp = victim(RC, RTS, ALL_RIGHTS);
	for (int i = 1; i < n + 2; i++)
		ut_post_recv(qp, 0xabc + (uint64_t)i, R[M_RECV].buf + 512 * i, 512, R[M_RECV].key);
	memset(&f, 0, sizeof(f));
	f.opcode = S_ONLY;
	f.dest_qpn = qp->qpn;
	f.ackreq = true;
	for (int i = 0; i < n + 2; i++) {
		f.psn = PEER_PSN + (uint32_t)i;
		send_pkt(&peer, &f, data, sizeof(data), NULL, NULL);
	}
	events = ut_async_count(&dev, IBV_EVENT_CQ_ERR, cq, 2000);
	assert_int_equal(events, 1);
	assert_int_equal(ut_state(qp), ERR);
	check_memory("cq overrun", false);
	rvt_destroy_qp(qp);
	ut_async_drain(&dev);
	rvt_destroy_cq(cq);
	cq = NULL;
}

/* ------------------------------------------------------------------ */
/* shm only: the peer breaks the link during a transfer               */
/* ------------------------------------------------------------------ */
/* Their victims expect the peer to vanish: 4.096 us << 12 = 16.8 ms of
 * timeout, 3 retries (qp-semantics §5.1). */
#define SHORT_TIMEOUT 12
#define SHORT_RETRIES 3
#define W_FIRST URVT_OP_RC_RDMA_WRITE_FIRST
#define W_MIDDLE URVT_OP_RC_RDMA_WRITE_MIDDLE
#define W_LAST URVT_OP_RC_RDMA_WRITE_LAST

struct want_wc {
	uint64_t wr_id;
	int status;
};

/* Exactly these completions (any order) within ms, then nothing. */
static void expect_wcs(const char *what, const struct want_wc *want, int n, int ms)
{
	struct ibv_wc wc[8];
	int got = ut_poll(cq, wc, n, ms);

	assert_true(n <= 8);
	if (got != n)
		fail_msg("%s: %d of %d completions within %d ms", what, got, n, ms);
	for (int i = 0; i < n; i++) {
		int j = 0;
		while (j < n && wc[j].wr_id != want[i].wr_id)
			j++;
		if (j == n)
			fail_msg("%s: no completion for wr %#llx", what,
				 (unsigned long long)want[i].wr_id);
		if ((int)wc[j].status != want[i].status)
			fail_msg("%s: wr %#llx completed with status %d, expected %d", what,
				 (unsigned long long)want[i].wr_id, (int)wc[j].status,
				 want[i].status);
	}
	ut_cq_empty(cq, 10);
}

/* A record header in ring 0 with this length field and nothing sensible
 * behind it, one record slot (64 bytes) long as far as our head goes,
 * marked ready unless !mark. */
static void ring_put_bad(struct ep *e, uint32_t len_field, bool mark)
{
	struct shm_rec *rec = (void *)(e->r->ring[0] + (e->head & (SHM_RING_BYTES - 1)));

	rec->len = len_field;
	if (mark)
		atomic_store_explicit(&rec->mark, shm_rec_mark(e->head), memory_order_release);
	e->head += SHM_REC_ALIGN;
}

enum scribble { SC_HEAD_AHEAD, SC_HEAD_OFF, SC_LEN_ZERO, SC_LEN_BIG, SC_NO_MARK, SC_WRAP };
static const struct {
	enum scribble how;
	const char *what;
} scribbles[] = {
	/* the records behind a bad head have no marks: head alone claims them */
	{ SC_HEAD_AHEAD, "head more than a ring ahead of tail" },
	{ SC_HEAD_OFF, "head off a record boundary" },
	{ SC_LEN_ZERO, "a record of length 0" },
	{ SC_LEN_BIG, "a record longer than any packet" },
	/* marked records behind it, which head covers too */
	{ SC_NO_MARK, "a record under head with no ready mark" },
	/* over the consumed start of the ring, marked for the next lap: a
	 * reader that believed it went round the ring for ever (fixed in
	 * f339e9e) */
	{ SC_WRAP, "a WRAP record at the ring's start" },
};

/* Half of a 4-packet WRITE into M_RW has arrived (and been ACKed) and the
 * victim's own SEND to the peer is out when the peer scribbles on ring 0;
 * behind the scribble lie the rest of the WRITE and a SEND for the posted
 * receive. The device cuts the peer off and acts on nothing behind it; the
 * victim fails as one whose peer vanished: RETRY_EXC_ERR, then flushes. */
static void scribble_once(size_t k)
{
	const char *what = scribbles[k].what;
	static uint8_t a[2 * PMTU], b[2 * PMTU];
	uint8_t pkt[5000], buf[5000], recv_snap[512];
	uint32_t dead = shm_stats().peers_dead, h1, n;
	uint64_t t0;
	struct rvt_qp *qp;
	struct urvt_pkt f, p;
	struct ep x;
	const struct want_wc want[] = { { 0x5e, IBV_WC_RETRY_EXC_ERR }, { 0xabc, FL } };

	ep_open(&x, 300 + 10 * (int)k);
	cq = ut_cq(&dev, 64);
	qp = victim_of(&x, RC, RTS, ALL_RIGHTS, SHORT_TIMEOUT, SHORT_RETRIES);
	memcpy(recv_snap, R[M_RECV].buf, sizeof(recv_snap));
	ut_fill(a, sizeof(a), 41);
	ut_fill(b, sizeof(b), 42);
	memset(&f, 0, sizeof(f));
	f.opcode = W_FIRST;
	f.dest_qpn = qp->qpn;
	f.psn = PEER_PSN;
	f.reth = (struct urvt_reth){ .va = va_of(M_RW, 0), .rkey = R[M_RW].key, .len = 4 * PMTU };
	send_pkt(&x, &f, a, PMTU, NULL, NULL);
	f.opcode = W_MIDDLE;
	f.psn = PEER_PSN + 1;
	f.ackreq = true;
	send_pkt(&x, &f, a + PMTU, PMTU, NULL, NULL);
	if (!ep_recv(&x, &p, buf, sizeof(buf), 2000) || p.opcode != ACK || p.aeth.syn != 0x1f ||
	    p.psn != PEER_PSN + 1)
		fail_msg("%s: the first half of the WRITE was not ACKed", what);
	post_wr(qp, 0x5e, IBV_WR_SEND, NULL, 0, 0);
	if (!ep_recv(&x, &p, buf, sizeof(buf), 2000) || p.opcode != S_ONLY || p.psn != MY_PSN)
		fail_msg("%s: the victim's SEND did not come", what);

	t0 = ut_now_ms();
	switch (scribbles[k].how) {
	case SC_LEN_ZERO:
		ring_put_bad(&x, 0, true);
		break;
	case SC_LEN_BIG:
		ring_put_bad(&x, SHM_PKT_MAX + 1, true);
		break;
	case SC_NO_MARK:
		ring_put_bad(&x, 1000, false);
		break;
	case SC_WRAP: {
		uint32_t next_lap = (x.head | (SHM_RING_BYTES - 1)) + 1;
		struct shm_rec *start = (struct shm_rec *)(void *)x.r->ring[0];

		start->len = SHM_REC_WRAP;
		atomic_store(&start->mark, shm_rec_mark(next_lap));
		ring_put_bad(&x, SHM_REC_WRAP, true);
		break;
	}
	default:
		break;
	}
	if (scribbles[k].how != SC_WRAP) {
		bool mark = scribbles[k].how != SC_HEAD_AHEAD && scribbles[k].how != SC_HEAD_OFF;

		f.opcode = W_MIDDLE;
		f.psn = PEER_PSN + 2;
		f.ackreq = false;
		n = (uint32_t)build_pkt(pkt, &x.addr, &f, b, PMTU, NULL, NULL);
		ring_put_marked(&x, pkt, n, mark);
		f.opcode = W_LAST;
		f.psn = PEER_PSN + 3;
		f.ackreq = true;
		n = (uint32_t)build_pkt(pkt, &x.addr, &f, b + PMTU, PMTU, NULL, NULL);
		ring_put_marked(&x, pkt, n, mark);
		f.opcode = S_ONLY;
		f.psn = PEER_PSN + 4;
		n = (uint32_t)build_pkt(pkt, &x.addr, &f, b, 64, NULL, NULL);
		ring_put_marked(&x, pkt, n, mark);
	}
	ring_publish(&x, scribbles[k].how == SC_HEAD_AHEAD ? x.head + SHM_RING_BYTES :
			 scribbles[k].how == SC_HEAD_OFF ? x.head + 8 : x.head);
	if (!shm_wait(-1, -1, (int)dead + 1, 2000))
		fail_msg("%s: the device did not cut the peer off", what);
	ut_sleep_ms(5); /* a send that saw the peer UP just before may still land */
	h1 = atomic_load(&x.r->ctrl[1].head);

	expect_wcs(what, want, 2, 5000);
	printf("  ok  %s: cut off, the victim failed after %llu ms\n", what,
	       (unsigned long long)(ut_now_ms() - t0));
	/* the link knows the peer is gone: the QP gives up at the retransmit
	 * timer's first look (docs/shm.md), not after retry_cnt timeouts */
	if (ut_now_ms() - t0 > 1000)
		fail_msg("%s: the victim waited out its retries", what);
	/* never written again; before the cut, at most retransmissions of
	 * the SEND: any response would answer something behind the scribble */
	assert_int_equal(atomic_load(&x.r->ctrl[1].head), h1);
	while (ring_take(&x, &x.tail, true, buf, sizeof(buf), &n)) {
		assert_int_equal(urvt_pkt_parse(buf, n, &p), 0);
		if (p.opcode != S_ONLY || p.psn != MY_PSN)
			fail_msg("%s: the device sent opcode %#x psn %#x after the scribble", what,
				 p.opcode, p.psn);
	}
	assert_memory_equal(R[M_RW].buf, a, sizeof(a));
	assert_memory_equal(R[M_RW].buf + sizeof(a), R[M_RW].snap + sizeof(a),
			    MR_LEN - sizeof(a));
	assert_memory_equal(R[M_RECV].buf, recv_snap, sizeof(recv_snap));
	assert_int_equal(ut_state(qp), ERR);
	check_memory(what, true);
	memcpy(R[M_RW].buf, R[M_RW].snap, MR_LEN);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	ut_async_drain(&dev);
	rvt_destroy_cq(cq);
	cq = NULL;
	ep_close(&x);
}

static void test_shm_scribble(void **state)
{
	for (size_t k = 0; k < sizeof(scribbles) / sizeof(scribbles[0]); k++)
		scribble_once(k);
}

/* The peer dies (closes everything, as a process that exits) with the
 * victim's WRITE half ACKed: what it wrote before still counts (the ACK
 * completes the SEND before it: GONE, not DEAD, docs/shm.md), the WRITE
 * ends in RETRY_EXC_ERR (its retransmissions are lost), the rest flushes,
 * in bounded time. */
static void test_shm_peer_dies(void **state)
{
	const struct want_wc want[] = { { 0x70, IBV_WC_SUCCESS }, { 0x71, IBV_WC_RETRY_EXC_ERR },
					{ 0x72, FL }, { 0x73, FL }, { 0xabc, FL } };
	uint32_t gone = shm_stats().peers_gone, covered = 0;
	uint64_t t0;
	static uint8_t buf[SHM_PKT_MAX];
	struct rvt_qp *qp;
	struct urvt_pkt f, p;
	struct ep x;

	ep_open(&x, 400);
	cq = ut_cq(&dev, 64);
	qp = victim_of(&x, RC, RTS, ALL_RIGHTS, SHORT_TIMEOUT, SHORT_RETRIES);
	post_wr(qp, 0x70, IBV_WR_SEND, NULL, 0, 0);
	post_wr(qp, 0x71, IBV_WR_RDMA_WRITE, R[M_RW].buf, MR_LEN, R[M_RW].key);
	post_wr(qp, 0x72, IBV_WR_SEND, NULL, 0, 0);
	post_wr(qp, 0x73, IBV_WR_SEND, NULL, 0, 0);
	/* the SEND, then the WRITE's first PSNs: PMTUs, or a span of them
	 * (docs/shm.md "Spans") */
	while (covered < 4) {
		if (!ep_recv(&x, &p, buf, sizeof(buf), 2000) || p.psn != MY_PSN + covered ||
		    p.opcode != (covered ? (p.span_more == 7 ? W_ONLY : covered == 1 ? W_FIRST : W_MIDDLE)
					 : S_ONLY))
			fail_msg("PSN %u of the transfer did not come", covered);
		covered += p.span_more + 1;
	}
	memset(&f, 0, sizeof(f));
	f.opcode = ACK;
	f.dest_qpn = qp->qpn;
	f.psn = MY_PSN + 2; /* the SEND and the WRITE's first two packets */
	f.aeth.syn = 0x1f;
	send_pkt(&x, &f, NULL, 0, NULL, NULL);
	t0 = ut_now_ms();
	ep_die(&x);
	if (!shm_wait(-1, (int)gone + 1, -1, 2000))
		fail_msg("the device did not see the peer go");
	expect_wcs("peer dies", want, 5, 5000);
	printf("  ok  peer died mid-transfer: the victim failed after %llu ms\n",
	       (unsigned long long)(ut_now_ms() - t0));
	/* as above: the first look of the retransmit timer gives up */
	if (ut_now_ms() - t0 > 1000)
		fail_msg("peer dies: the victim waited out its retries");
	assert_int_equal(ut_state(qp), ERR);
	check_memory("peer dies", false);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	ut_async_drain(&dev);
	rvt_destroy_cq(cq);
	cq = NULL;
	ep_close(&x);
}

/* The peer reads (and ACKs) what the device writes into ring 1 but never
 * hands the bytes back (tail stays 0): the ring fills, the device's sender
 * waits once (50 ms for a requester), then counts the packets lost
 * (tx_errors) at once until the tail moves, and goes on (another peer is
 * served meanwhile); nothing unread is overwritten; the WRITE ends in
 * RETRY_EXC_ERR. */
#define BIG (6u << 20)
static void test_shm_ring_never_drained(void **state)
{
	const struct want_wc want[] = { { 0x81, IBV_WC_RETRY_EXC_ERR }, { 0xabc, FL } };
	uint64_t lost = ctr(URVT_CTR_TX_ERRORS), t0, idle_since = 0;
	uint32_t cur = 0, seen = 0, next = 0, n, win;
	struct rvt_mregion *mr;
	struct rvt_qp *qp;
	struct urvt_pkt f, p;
	static uint8_t buf[SHM_PKT_MAX];
	uint8_t *big;
	struct ep x;

	ep_open(&x, 500);
	cq = ut_cq(&dev, 64);
	/* retries for about half a second: long enough to meet a full ring */
	qp = victim_of(&x, RC, RTS, ALL_RIGHTS, 14, 7);
	big = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(big != MAP_FAILED);
	ut_fill(big, BIG, 7);
	mr = ut_mr(pd, big, BIG, IBV_ACCESS_LOCAL_WRITE);
	t0 = ut_now_ms();
	post_wr(qp, 0x81, IBV_WR_RDMA_WRITE, big, BIG, mr->lkey);
	memset(&f, 0, sizeof(f));
	f.opcode = ACK;
	f.dest_qpn = qp->qpn;
	f.aeth.syn = 0x1f;
	/* read without releasing, ACK what came, until the device has been
	 * losing packets and nothing came for 50 ms */
	for (;;) {
		bool got = false;
		while (ring_take(&x, &cur, false, buf, sizeof(buf), &n)) {
			/* in order, or a retransmission from an earlier PSN (a
			 * probe or timeout when our ACKs lag), the data of its
			 * PSNs (one PMTU, or a span of several: docs/shm.md).
			 * Once the device has lost spans that did not fit, a
			 * later single PMTU may fit still: a gap, which RC
			 * recovers like any loss */
			uint32_t i, k;
			bool gaps = ctr(URVT_CTR_TX_ERRORS) != lost;
			assert_int_equal(urvt_pkt_parse(buf, n, &p), 0);
			i = (p.psn - MY_PSN) & 0xffffff;
			k = p.span_more + 1;
			if (p.opcode != (i ? W_MIDDLE : W_FIRST) || (i > next && !gaps) ||
			    p.paylen != k * PMTU ||
			    memcmp(p.payload, big + (size_t)i * PMTU, (size_t)k * PMTU))
				fail_msg("record %u: opcode %#x psn %#x (+%u; next %u), or its data, "
					 "not what was sent", seen, p.opcode, p.psn, k - 1, next);
			if (i + k > next)
				next = i + k;
			seen++;
			got = true;
		}
		if (got) {
			f.psn = MY_PSN + next - 1;
			send_pkt(&x, &f, NULL, 0, NULL, NULL);
			idle_since = ut_now_ms();
		} else if (ctr(URVT_CTR_TX_ERRORS) != lost && ut_now_ms() - idle_since > 50) {
			break;
		} else if (ut_now_ms() - t0 > 10000) {
			fail_msg("the ring did not fill (%u records)", seen);
		}
		ut_sleep_ms(1);
	}
	/* full: less room left than a packet is built in (the largest one a
	 * record holds: packets are built in the ring), all of it unread, in
	 * order */
	assert_int_equal(atomic_load(&x.r->ctrl[1].tail), 0);
	assert_int_equal(atomic_load(&x.r->ctrl[1].head), cur);
	/* the device has had several peers: it may fill a window short of the
	 * ring, which also keeps the slot after the last record (shm.c
	 * tx_room_for) */
	win = atomic_load(&x.r->ctrl[1].win);
	if (!win)
		win = SHM_RING_BYTES;
	assert_true(win <= SHM_RING_BYTES && win % 4096 == 0);
	assert_true(cur <= win && win - cur < shm_rec_bytes(shm_pkt_max_for_win(win)) +
					      (win < SHM_RING_BYTES ? SHM_REC_ALIGN : 0));
	printf("  ok  ring full after %u records (window %u KiB), %llu packets lost so far\n",
	       seen, win >> 10, (unsigned long long)(ctr(URVT_CTR_TX_ERRORS) - lost));
	/* the device is not stuck on it: another peer's WRITE is ACKed */
	{
		struct rvt_cq *mine = cq;
		struct rvt_qp *q2;
		struct urvt_pkt g;
		uint8_t data[64];

		cq = ut_cq(&dev, 16);
		q2 = victim(RC, RTS, ALL_RIGHTS);
		memset(&g, 0, sizeof(g));
		g.opcode = W_ONLY;
		g.dest_qpn = q2->qpn;
		g.psn = PEER_PSN;
		g.ackreq = true;
		g.reth = (struct urvt_reth){ .va = va_of(M_RW, 0), .rkey = R[M_RW].key, .len = 64 };
		ut_fill(data, sizeof(data), 5);
		send_pkt(&peer, &g, data, sizeof(data), NULL, NULL);
		expect(&p, buf, ACK);
		assert_int_equal(p.aeth.syn, 0x1f);
		assert_memory_equal(R[M_RW].buf, data, sizeof(data));
		memcpy(R[M_RW].buf, R[M_RW].snap, MR_LEN);
		assert_int_equal(rvt_destroy_qp(q2), 0);
		rvt_destroy_cq(cq);
		cq = mine;
	}
	expect_wcs("ring never drained", want, 2, 10000);
	printf("  ok  the WRITE failed %llu ms after it was posted\n",
	       (unsigned long long)(ut_now_ms() - t0));
	/* since: at most retransmissions that fit where a span did not, each
	 * the data of its PSNs, after the records we read (none of which is
	 * overwritten: tail is still 0) and inside the window */
	while (ring_take(&x, &cur, false, buf, sizeof(buf), &n)) {
		uint32_t i, k;
		assert_int_equal(urvt_pkt_parse(buf, n, &p), 0);
		i = (p.psn - MY_PSN) & 0xffffff;
		k = p.span_more + 1;
		if (p.paylen != k * PMTU || memcmp(p.payload, big + (size_t)i * PMTU, (size_t)k * PMTU))
			fail_msg("a late record (psn %#x): not what was sent", p.psn);
	}
	assert_int_equal(atomic_load(&x.r->ctrl[1].head), cur);
	assert_true(cur <= win);
	assert_int_equal(ut_state(qp), ERR);
	check_memory("ring never drained", false);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	ut_async_drain(&dev);
	rvt_destroy_cq(cq);
	cq = NULL;
	assert_int_equal(rvt_dereg_mr(mr), 0);
	munmap(big, BIG);
	ep_close(&x);
}

/*
 * XRC (roce-wire §3.1, qp-semantics §16.4): a target QP of domain A facing
 * XRC requests that name an SRQ of domain B, an SRQ number nobody has, and
 * XRC opcodes sent to a plain RC QP (and RC opcodes to the XRC target). The
 * control row delivers to A's SRQ; every attack gets NAK Invalid Request
 * (the target to ERR, class C) or is dropped, and no SRQ's receive buffer
 * or MR changes.
 */
struct xrc_side {
	struct rvt_xrcd *xrcd;
	struct rvt_cq *cq;
	struct rvt_srq *srq;
	struct region buf;
};

static void xrc_side_init(struct xrc_side *x, uint8_t seed)
{
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						      IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = -1, .oflags = O_CREAT };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;
	int err = 0;

	x->xrcd = rvt_open_xrcd(dev.uctx, &xa, &err);
	assert_non_null(x->xrcd);
	x->cq = ut_cq(&dev, 16);
	x->srq = rvt_create_xsrq(pd, x->xrcd, x->cq, &sa, &err);
	assert_non_null(x->srq);
	region_init(&x->buf, pd, IBV_ACCESS_LOCAL_WRITE, seed);
	sge = (struct ibv_sge){ .addr = (uintptr_t)x->buf.buf, .length = 512,
				.lkey = x->buf.key };
	wr = (struct ibv_recv_wr){ .wr_id = 0x5eed, .sg_list = &sge, .num_sge = 1 };
	assert_int_equal(rvt_post_srq_recv(x->srq, &wr, &bad), 0);
}

static void xrc_side_fini(struct xrc_side *x)
{
	assert_int_equal(rvt_destroy_srq(x->srq), 0);
	assert_int_equal(rvt_destroy_cq(x->cq), 0);
	assert_int_equal(rvt_close_xrcd(x->xrcd), 0);
	assert_int_equal(rvt_dereg_mr(x->buf.mr), 0);
	munmap(x->buf.map - PAGE, x->buf.map_len + 2 * PAGE);
}

/* An XRC target of x's domain in RTS, its peer the attacker's PEER_QPN */
static struct rvt_qp *xrc_victim(struct xrc_side *x)
{
	struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_XRC_RECV,
					  .comp_mask = IBV_QP_INIT_ATTR_XRCD,
					  .xrcd = &x->xrcd->ibxrcd };
	const struct ut_path path = { .peer_s_addr = peer.addr.sin_addr.s_addr,
				      .dest_qpn = PEER_QPN, .rq_psn = PEER_PSN, .min_rnr_timer = 3 };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = MY_PSN, .timeout = 14 };
	struct rvt_qp *qp;
	int err = 0;

	qp = rvt_create_qp(dev.uctx, &ia, &err);
	assert_non_null(qp);
	flush_socks();
	ut_to_init(qp, ALL_RIGHTS, 0);
	ut_to_rtr_path(qp, &path);
	assert_int_equal(rvt_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT), 0);
	return qp;
}

static void xrc_check_buf(const struct xrc_side *x, const char *when)
{
	if (memcmp(x->buf.snap, x->buf.buf, MR_LEN))
		fail_msg("%s: an SRQ's receive buffer changed", when);
}

static void test_xrc(void **state)
{
	struct xrc_side a, b;
	struct urvt_pkt f, p;
	uint8_t buf[5000], data[64];
	struct ibv_wc wc;
	struct rvt_qp *qp, *rc;
	uint64_t bad, inv, qpt;

	xrc_side_init(&a, 11);
	xrc_side_init(&b, 12);
	assert_false(rvt_xrcd_same(a.xrcd, b.xrcd));
	ut_fill(data, sizeof(data), 9);

	/* 1. control: a SEND naming A's SRQ lands there, completes on its CQ */
	qp = xrc_victim(&a);
	memset(&f, 0, sizeof(f));
	f.opcode = URVT_OP_XRC_SEND_ONLY;
	f.dest_qpn = qp->qpn;
	f.psn = PEER_PSN;
	f.ackreq = true;
	f.xrc_srqn = a.srq->srq_num;
	send_pkt(&peer, &f, data, sizeof(data), NULL, NULL);
	expect(&p, buf, URVT_OP_XRC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, 0x1f);
	assert_int_equal(p.psn, PEER_PSN);
	ut_poll1(a.cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 0x5eed);
	assert_int_equal(wc.byte_len, sizeof(data));
	assert_int_equal(wc.qp_num, qp->qpn);
	assert_memory_equal(a.buf.buf, data, sizeof(data));
	memcpy(a.buf.snap, a.buf.buf, MR_LEN);
	assert_int_equal(ut_state(qp), RTS);
	assert_int_equal(rvt_destroy_qp(qp), 0);

	/* 2. the SRQ of another domain (SEND and WRITE), 3. an SRQ number
	 * nobody has: NAK Invalid Request for the PSN, nothing placed */
	for (int round = 0; round < 3; round++) {
		uint32_t srqn = round < 2 ? b.srq->srq_num : a.srq->srq_num ^ (1u << 20);

		bad = ctr(URVT_CTR_XRC_BAD_SRQ);
		inv = ctr(URVT_CTR_NAK_SENT_INV);
		qp = xrc_victim(&a);
		memset(&f, 0, sizeof(f));
		f.opcode = round == 1 ? URVT_OP_XRC_RDMA_WRITE_ONLY : URVT_OP_XRC_SEND_ONLY;
		f.dest_qpn = qp->qpn;
		f.psn = PEER_PSN;
		f.ackreq = true;
		f.xrc_srqn = srqn;
		f.reth = (struct urvt_reth){ .va = va_of(M_RW, 0), .rkey = R[M_RW].key,
					     .len = sizeof(data) };
		send_pkt(&peer, &f, data, sizeof(data), NULL, NULL);
		expect(&p, buf, URVT_OP_XRC_ACKNOWLEDGE);
		assert_int_equal(p.aeth.syn, NAK_INV);
		assert_int_equal(p.psn, PEER_PSN);
		quiet(30);
		assert_int_equal(ut_state(qp), ERR);
		assert_int_equal(ctr(URVT_CTR_XRC_BAD_SRQ), bad + 1);
		assert_int_equal(ctr(URVT_CTR_NAK_SENT_INV), inv + 1);
		ut_cq_empty(a.cq, 10);
		ut_cq_empty(b.cq, 10);
		xrc_check_buf(&a, "XRC, foreign SRQ");
		xrc_check_buf(&b, "XRC, foreign SRQ");
		check_memory("XRC, foreign SRQ", false);
		assert_int_equal(rvt_destroy_qp(qp), 0);
		ut_async_drain(&dev);
	}

	/* 4. the last packet of a message past a gap (its first ones lost, or
	 * sent before the target was ready): the RC rule, a PSN-sequence NAK
	 * for the expected PSN, the target stays in RTS; then a message whose
	 * second packet names another SRQ than its first: NAK Invalid Request */
	{
		uint8_t first[PMTU];
		struct ibv_recv_wr rwr, *rbad;
		struct ibv_sge rsge = { .addr = (uintptr_t)a.buf.buf, .length = 2048,
					.lkey = a.buf.key };

		qp = xrc_victim(&a);
		memset(&f, 0, sizeof(f));
		f.opcode = URVT_OP_XRC_SEND_FIRST + 2; /* SEND_LAST */
		f.dest_qpn = qp->qpn;
		f.psn = PEER_PSN + 3;
		f.ackreq = true;
		f.xrc_srqn = a.srq->srq_num;
		send_pkt(&peer, &f, data, sizeof(data), NULL, NULL);
		expect(&p, buf, URVT_OP_XRC_ACKNOWLEDGE);
		assert_int_equal(p.aeth.syn, NAK_SEQ);
		assert_int_equal(p.psn, PEER_PSN);
		assert_int_equal(ut_state(qp), RTS);
		ut_cq_empty(a.cq, 10);
		xrc_check_buf(&a, "XRC, gap");

		rwr = (struct ibv_recv_wr){ .wr_id = 0x77, .sg_list = &rsge, .num_sge = 1 };
		assert_int_equal(rvt_post_srq_recv(a.srq, &rwr, &rbad), 0);
		ut_fill(first, sizeof(first), 3);
		f.opcode = URVT_OP_XRC_SEND_FIRST;
		f.psn = PEER_PSN;
		f.ackreq = false;
		send_pkt(&peer, &f, first, sizeof(first), NULL, NULL);
		f.opcode = URVT_OP_XRC_SEND_FIRST + 2;
		f.psn = PEER_PSN + 1;
		f.ackreq = true;
		f.xrc_srqn = b.srq->srq_num;
		send_pkt(&peer, &f, data, sizeof(data), NULL, NULL);
		expect(&p, buf, URVT_OP_XRC_ACKNOWLEDGE);
		assert_int_equal(p.aeth.syn, NAK_INV);
		assert_int_equal(p.psn, PEER_PSN + 1);
		assert_int_equal(ut_state(qp), ERR);
		ut_cq_empty(b.cq, 10);
		xrc_check_buf(&b, "XRC, SRQ changed inside a message");
		memcpy(a.buf.snap, a.buf.buf, MR_LEN); /* the first packet landed in A's */
		assert_int_equal(rvt_destroy_qp(qp), 0);
		ut_async_drain(&dev);
		/* A's WQE went with the target (docs/deviations.md), or completed
		 * in error: nothing else may be there */
		while (ut_poll(a.cq, &wc, 1, 10) == 1)
			assert_int_not_equal(wc.status, IBV_WC_SUCCESS);
	}

	/* 5. an XRC opcode to a plain RC QP, and an RC opcode to the XRC
	 * target: dropped (opcode class), both stay in RTS */
	cq = ut_cq(&dev, 16);
	rc = victim(RC, RTS, ALL_RIGHTS);
	qp = xrc_victim(&a);
	qpt = ctr(URVT_CTR_DROP_BASE + URVT_DROP_QPT_MISMATCH);
	memset(&f, 0, sizeof(f));
	f.opcode = URVT_OP_XRC_SEND_ONLY;
	f.dest_qpn = rc->qpn;
	f.psn = PEER_PSN;
	f.ackreq = true;
	f.xrc_srqn = a.srq->srq_num;
	send_pkt(&peer, &f, data, sizeof(data), NULL, NULL);
	memset(&f, 0, sizeof(f));
	f.opcode = URVT_OP_RC_SEND_ONLY;
	f.dest_qpn = qp->qpn;
	f.psn = PEER_PSN;
	f.ackreq = true;
	send_pkt(&peer, &f, data, sizeof(data), NULL, NULL);
	quiet(50);
	assert_int_equal(ctr(URVT_CTR_DROP_BASE + URVT_DROP_QPT_MISMATCH), qpt + 2);
	assert_int_equal(ut_state(rc), RTS);
	assert_int_equal(ut_state(qp), RTS);
	ut_cq_empty(cq, 10);
	ut_cq_empty(a.cq, 10);
	xrc_check_buf(&a, "XRC, opcode class");
	check_memory("XRC, opcode class", false);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_destroy_qp(rc), 0);
	rvt_destroy_cq(cq);
	cq = NULL;

	xrc_side_fini(&a);
	xrc_side_fini(&b);
}

/* Every wait is bounded; a test that still does not end has a device
 * that hangs (a reader round the ring, a blocked doorbell): fail it with a
 * word rather than at ctest's timeout. */
static void on_alarm(int sig)
{
	static const char m[] = "test_hostile: a test ran out of time: the device hangs\n";

	(void)sig;
	(void)!write(2, m, sizeof(m) - 1);
	_exit(1);
}

static int watchdog(void **state)
{
	alarm(60); /* a test takes seconds; ctest gives the binary 120 s */
	return 0;
}

#define T(f) cmocka_unit_test_setup(f, watchdog)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_table),
		T(test_replay_and_gap),
		T(test_spans),
		T(test_send_with_inv_foreign_key),
		T(test_response_injection),
		T(test_cq_overrun),
		T(test_xrc),
		/* shm only, last */
		T(test_shm_scribble),
		T(test_shm_peer_dies),
		T(test_shm_ring_never_drained),
	};
	const char *env = getenv("URVT_SHM"), *path = getenv("URVT_PATH");

	if (over_shm && ((env && !strcmp(env, "0")) || (path && !strcmp(path, "udp")))) {
		printf("URVT_SHM=0 / URVT_PATH=udp: no shm link to attack\n");
		return 77;
	}
	signal(SIGALRM, on_alarm);
	return _cmocka_run_group_tests(link_name, tests,
				       sizeof(tests) / sizeof(tests[0]) - (over_shm ? 0 : 3),
				       setup, teardown);
}
