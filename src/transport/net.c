/*
 * Network I/O of the transport: the device's UDP socket options, the
 * packet-buffer pool, per-thread transmit queues (sendmmsg, UDP GSO), the
 * receive loop (recvmmsg) run by the progress thread or inline by poll_cq,
 * counters, tracing, and the core <-> transport ops (core/transport.h).
 * Threading: docs/transport.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/progress.h"
#include "core/ruc.h"
#include "core/rvt_api.h"
#include "core/transport.h"
#include "link/fault.h"
#include "transport/net.h"
#include "transport/tp.h"
#include "wire/icrc.h"
#include "wire/pcap.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_NO_CHECK6_RX
#define UDP_NO_CHECK6_RX 102
#endif

int urvt_debug;

void urvt_dbg_printf(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "urvt[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

/* ------------------------------------------------------------------ */
/* Packet pool                                                        */
/* ------------------------------------------------------------------ */
#define POOL_BUFS 4096

struct urvt_pktbuf *urvt_pkt_alloc(struct urvt_net *net)
{
	struct urvt_pktbuf *b = NULL;

	urvt_spin_lock(&net->pool_lock);
	if (net->pool_n)
		b = net->pool_free[--net->pool_n];
	urvt_spin_unlock(&net->pool_lock);
	return b;
}

void urvt_pkt_free(struct urvt_net *net, struct urvt_pktbuf *b)
{
	urvt_spin_lock(&net->pool_lock);
	net->pool_free[net->pool_n++] = b;
	urvt_spin_unlock(&net->pool_lock);
}

void urvt_pkt_free_list(struct urvt_net *net, struct urvt_pktbuf *b)
{
	if (!b)
		return;
	urvt_spin_lock(&net->pool_lock);
	while (b) {
		struct urvt_pktbuf *n = b->next;
		net->pool_free[net->pool_n++] = b;
		b = n;
	}
	urvt_spin_unlock(&net->pool_lock);
}

static int pool_init(struct urvt_net *net)
{
	size_t sz = (size_t)POOL_BUFS * sizeof(struct urvt_pktbuf);

	net->pool_mem = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (net->pool_mem == MAP_FAILED) {
		net->pool_mem = NULL;
		return -ENOMEM;
	}
	net->pool_free = calloc(POOL_BUFS, sizeof(*net->pool_free));
	if (!net->pool_free)
		return -ENOMEM;
	net->pool_cap = POOL_BUFS;
	for (uint32_t i = 0; i < POOL_BUFS; i++)
		net->pool_free[net->pool_n++] = &net->pool_mem[POOL_BUFS - 1 - i];
	return 0;
}

static void pool_fini(struct urvt_net *net)
{
	if (net->pool_mem)
		munmap(net->pool_mem, (size_t)POOL_BUFS * sizeof(struct urvt_pktbuf));
	free(net->pool_free);
}

/* ------------------------------------------------------------------ */
/* Counters                                                           */
/* ------------------------------------------------------------------ */
static struct urvt_stats_qp stats_overflow; /* QPs without a slot count here too */

/* Counter files of processes that died without closing the device. */
static void stats_reap_stale(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[300], *end;
		long pid;
		if (strncmp(e->d_name, "urvt.", 5))
			continue;
		pid = strtol(e->d_name + 5, &end, 10);
		if (*end || pid <= 0 || pid == getpid())
			continue;
		if (kill((pid_t)pid, 0) && errno == ESRCH) {
			snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
			unlink(path);
		}
	}
	closedir(d);
}

static int stats_init(struct urvt_net *net)
{
	const char *env = getenv("URVT_STATS");
	struct urvt_stats_shm *s = NULL;

	if (!env || strcmp(env, "0")) {
		int fd;
		stats_reap_stale();
		snprintf(net->shm_path, sizeof(net->shm_path), "/dev/shm/urvt.%d", (int)getpid());
		fd = open(net->shm_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			if (!ftruncate(fd, sizeof(*s))) {
				s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
				if (s == MAP_FAILED)
					s = NULL;
			}
			close(fd);
			if (!s)
				unlink(net->shm_path);
		}
		net->shm_mapped = s != NULL;
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
		net->shm_path[0] = 0;
	}
	s->version = URVT_STATS_VERSION;
	s->ncounters = URVT_CTR_NUM;
	s->nslots = URVT_STATS_QP_SLOTS;
	s->pid = (uint32_t)getpid();
	s->family = net->v4 ? AF_INET : AF_INET6;
	memcpy(s->gid, net->rdi->gid.raw, 16);
	memcpy(s->ifname, net->rdi->ifname, sizeof(s->ifname));
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		s->start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	/* readers check the magic last */
	__atomic_store_n(&s->magic, URVT_STATS_MAGIC, __ATOMIC_RELEASE);
	net->shm = s;
	return 0;
}

static void stats_fini(struct urvt_net *net)
{
	const char *keep = getenv("URVT_STATS_KEEP");

	if (!net->shm)
		return;
	if (net->shm_mapped) {
		munmap(net->shm, sizeof(*net->shm));
		if (!(keep && !strcmp(keep, "1")))
			unlink(net->shm_path);
	} else {
		free(net->shm);
	}
}

/* Slow path of urvt_qp_stats: claim a slot (qpn % slots, then 7 more). */
static struct urvt_stats_qp *stats_claim(struct rvt_qp *qp)
{
	struct urvt_net *net = qp_net(qp);
	struct urvt_stats_qp *slot = &stats_overflow, *want = NULL;

	for (uint32_t i = 0; i < 8; i++) {
		struct urvt_stats_qp *s = &net->shm->qp[(qp->qpn + i) % URVT_STATS_QP_SLOTS];
		uint32_t zero = 0;
		if (__atomic_compare_exchange_n(&s->in_use, &zero, 1, false, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			memset(&s->c, 0, sizeof(s->c));
			s->type = qp->type;
			__atomic_store_n(&s->qpn, qp->qpn, __ATOMIC_RELEASE);
			slot = s;
			break;
		}
	}
	if (!atomic_compare_exchange_strong(&qp_tp(qp)->stats, &want, slot)) {
		if (slot != &stats_overflow)
			__atomic_store_n(&slot->in_use, 0, __ATOMIC_RELEASE);
		return want;
	}
	return slot;
}

struct urvt_stats_qp *urvt_qp_stats(struct rvt_qp *qp)
{
	struct urvt_stats_qp *s = atomic_load_explicit(&qp_tp(qp)->stats, memory_order_acquire);

	if (likely(s))
		return s;
	return stats_claim(qp);
}

void urvt_stats_release(struct urvt_net *net, struct rvt_qp *qp)
{
	struct urvt_stats_qp *s = atomic_exchange(&qp_tp(qp)->stats, NULL);

	if (s && s != &stats_overflow)
		__atomic_store_n(&s->in_use, 0, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------ */
/* Transmit                                                           */
/* ------------------------------------------------------------------ */
static __thread bool tls_in_rx;

bool urvt_in_rx(void)
{
	return tls_in_rx;
}

void urvt_txq_flush_unless_rx(struct urvt_net *net, struct urvt_txq *q)
{
	if (!tls_in_rx)
		urvt_txq_flush(net, q);
}

static pthread_key_t txq_key;
static pthread_once_t txq_once = PTHREAD_ONCE_INIT;
static __thread struct urvt_txq *tls_txq;

static void txq_destroy(void *p)
{
	free(p);
}

static void txq_key_init(void)
{
	pthread_key_create(&txq_key, txq_destroy);
}

struct urvt_txq *urvt_txq_get(void)
{
	struct urvt_txq *q = tls_txq;

	if (likely(q))
		return q;
	/* Once per thread: the engines never allocate after this. */
	pthread_once(&txq_once, txq_key_init);
	q = aligned_alloc(64, sizeof(*q));
	if (!q)
		return NULL;
	q->used = q->n = 0;
	pthread_setspecific(txq_key, q);
	tls_txq = q;
	return q;
}

uint8_t *urvt_txq_reserve(struct urvt_net *net, struct urvt_txq *q, uint32_t maxlen)
{
	if (q->n == URVT_TXQ_PKTS || q->used + maxlen > URVT_TXQ_BYTES)
		urvt_txq_flush(net, q);
	return q->buf + q->used;
}

void urvt_txq_commit(struct urvt_txq *q, uint32_t len, const union urvt_sockaddr *dst,
		     struct urvt_stats_qp *qs)
{
	struct urvt_txpkt *t = &q->pkt[q->n++];

	t->off = q->used;
	t->len = len;
	if (dst->sa.sa_family == AF_INET)
		t->dst.in4 = dst->in4;
	else
		t->dst.in6 = dst->in6;
	t->qs = qs;
	q->used += len;
}

static socklen_t sa_len(const union urvt_sockaddr *a)
{
	return a->sa.sa_family == AF_INET ? sizeof(a->in4) : sizeof(a->in6);
}

static bool sa_equal(const union urvt_sockaddr *a, const union urvt_sockaddr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return false;
	if (a->sa.sa_family == AF_INET)
		return a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr;
	return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16);
}

static void sa_to_gid(const union urvt_sockaddr *a, uint8_t gid[16])
{
	if (a->sa.sa_family == AF_INET)
		urvt_gid_from_v4(gid, a->in4.sin_addr.s_addr);
	else
		memcpy(gid, &a->in6.sin6_addr, 16);
}

static void trace_tx(struct urvt_net *net, const uint8_t *buf, uint32_t len,
		     const union urvt_sockaddr *dst, uint16_t ip_id)
{
	struct urvt_ipinfo ip = net->ip_tmpl;

	sa_to_gid(dst, ip.dgid);
	ip.ip_id = ip_id;
	urvt_pcap_write(net->pcap, URVT_PCAP_OUT, &ip, buf, len);
}

/* One sendmmsg pass over msgs; waits briefly for room on EAGAIN. */
static void send_msgs(struct urvt_net *net, struct mmsghdr *m, unsigned n)
{
	unsigned done = 0;
	int again = 0;

	while (done < n) {
		int r = sendmmsg(net->fd, m + done, n - done, MSG_DONTWAIT);
		if (r > 0) {
			done += (unsigned)r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == ENOBUFS) && again++ < 4) {
			struct pollfd pfd = { .fd = net->fd, .events = POLLOUT };
			poll(&pfd, 1, 1);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		/* this datagram is lost (the protocol recovers); go on */
		URVT_DBG("send: %s (%u of %u lost)", strerror(errno), 1, n - done);
		tp_count(net, NULL, URVT_CTR_TX_ERRORS, 1);
		done++;
		again = 0;
	}
}

void urvt_net_sendto(struct urvt_net *net, const uint8_t *buf, uint32_t len,
		     const union urvt_sockaddr *dst)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct mmsghdr m = { .msg_hdr = { .msg_name = (void *)dst, .msg_namelen = sa_len(dst),
					 .msg_iov = &iov, .msg_iovlen = 1 } };

	if (unlikely(net->tx_sink)) {
		net->tx_sink(net->tx_sink_arg, buf, len, dst);
		return;
	}
	send_msgs(net, &m, 1);
}

static void fault_send(void *arg, const uint8_t *buf, uint32_t len, const void *dst,
		       uint32_t dstlen)
{
	urvt_net_sendto(arg, buf, len, dst);
}

#define GSO_MAX_SEGS 64
#define GSO_MAX_BYTES 65000

void urvt_txq_flush(struct urvt_net *net, struct urvt_txq *q)
{
	struct mmsghdr m[URVT_TXQ_PKTS + 8];
	struct iovec iov[URVT_TXQ_PKTS + 8];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl[URVT_TXQ_PKTS];
	unsigned nm = 0;

	if (!q->n)
		return;
	for (uint32_t i = 0; i < q->n;) {
		struct urvt_txpkt *t = &q->pkt[i];
		uint8_t *p = q->buf + t->off;
		uint32_t j = i + 1, seg_bytes = t->len;

		urvt_ctr_add(&net->shm->dev, URVT_CTR_TX_PKTS, 1);
		urvt_ctr_add(&net->shm->dev, URVT_CTR_TX_BYTES, t->len);
		if (t->qs) {
			urvt_ctr_add(&t->qs->c, URVT_CTR_TX_PKTS, 1);
			urvt_ctr_add(&t->qs->c, URVT_CTR_TX_BYTES, t->len);
		}
		if (unlikely(net->pcap))
			trace_tx(net, p, t->len, &t->dst, 0);
		if (unlikely(net->tx_sink)) {
			net->tx_sink(net->tx_sink_arg, p, t->len, &t->dst);
			i++;
			continue;
		}
		if (unlikely(net->fault)) {
			unsigned fl;
			enum urvt_fault_verdict v = urvt_fault_apply(net->fault, p, t->len, &t->dst,
								     sa_len(&t->dst), &fl);
			if (fl & URVT_FAULT_F_DROP)
				tp_count(net, t->qs, URVT_CTR_FAULT_DROP, 1);
			if (fl & URVT_FAULT_F_CORRUPT)
				tp_count(net, t->qs, URVT_CTR_FAULT_CORRUPT, 1);
			if (fl & URVT_FAULT_F_DUP)
				tp_count(net, t->qs, URVT_CTR_FAULT_DUP, 1);
			if (fl & URVT_FAULT_F_REORDER)
				tp_count(net, t->qs, URVT_CTR_FAULT_REORDER, 1);
			if (fl & URVT_FAULT_F_DELAY)
				tp_count(net, t->qs, URVT_CTR_FAULT_DELAY, 1);
			i++;
			if (v == URVT_FAULT_DROP || v == URVT_FAULT_HELD)
				continue;
			for (int k = 0; k < (v == URVT_FAULT_DUP ? 2 : 1); k++) {
				iov[nm] = (struct iovec){ .iov_base = p, .iov_len = t->len };
				m[nm].msg_hdr = (struct msghdr){ .msg_name = &t->dst,
								 .msg_namelen = sa_len(&t->dst),
								 .msg_iov = &iov[nm],
								 .msg_iovlen = 1 };
				nm++;
			}
			if (nm >= URVT_TXQ_PKTS) {
				send_msgs(net, m, nm);
				nm = 0;
			}
			continue;
		}
		/* UDP GSO: a run of equal-size packets to one peer (the last may
		 * be shorter) leaves as one send, cut by the kernel. */
		if (net->gso) {
			while (j < q->n && j - i < GSO_MAX_SEGS && q->pkt[j].len <= t->len &&
			       seg_bytes + q->pkt[j].len <= GSO_MAX_BYTES &&
			       q->pkt[j - 1].len == t->len && sa_equal(&q->pkt[j].dst, &t->dst)) {
				struct urvt_txpkt *u = &q->pkt[j];
				uint8_t *up = q->buf + u->off;
				uint16_t seg = (uint16_t)(j - i);
				/* The kernel (or NIC) gives segment k of an IPv4 GSO
				 * send the IP ID k (the send itself has ID 0: DF,
				 * unconnected); the ICRC covers it (roce-wire.md §1.3). */
				if (t->dst.sa.sa_family == AF_INET)
					urvt_icrc_put(up + u->len - URVT_ICRC_BYTES,
						      urvt_icrc_get(up + u->len - URVT_ICRC_BYTES) ^
							      urvt_icrc_v4_id_delta(u->len - URVT_ICRC_BYTES, seg));
				urvt_ctr_add(&net->shm->dev, URVT_CTR_TX_PKTS, 1);
				urvt_ctr_add(&net->shm->dev, URVT_CTR_TX_BYTES, u->len);
				if (u->qs) {
					urvt_ctr_add(&u->qs->c, URVT_CTR_TX_PKTS, 1);
					urvt_ctr_add(&u->qs->c, URVT_CTR_TX_BYTES, u->len);
				}
				if (unlikely(net->pcap))
					trace_tx(net, up, u->len, &u->dst,
						 t->dst.sa.sa_family == AF_INET ? seg : 0);
				seg_bytes += u->len;
				j++;
			}
		}
		iov[nm] = (struct iovec){ .iov_base = p, .iov_len = seg_bytes };
		m[nm].msg_hdr = (struct msghdr){ .msg_name = &t->dst,
						 .msg_namelen = sa_len(&t->dst),
						 .msg_iov = &iov[nm],
						 .msg_iovlen = 1 };
		if (j - i > 1) {
			struct cmsghdr *c = (struct cmsghdr *)ctl[nm].buf;
			uint16_t gso = (uint16_t)t->len;
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(gso));
			memcpy(CMSG_DATA(c), &gso, sizeof(gso));
			m[nm].msg_hdr.msg_control = ctl[nm].buf;
			m[nm].msg_hdr.msg_controllen = sizeof(ctl[nm].buf);
		}
		nm++;
		i = j;
	}
	if (nm)
		send_msgs(net, m, nm);
	q->n = 0;
	q->used = 0;
}

void urvt_net_tx_ipinfo(struct urvt_net *net, const struct urvt_av *av, struct urvt_ipinfo *ip)
{
	*ip = net->ip_tmpl;
	ip->sport = av->udp_sport;
	memcpy(ip->dgid, av->attr.grh.dgid.raw, 16);
}

uint8_t *urvt_build_start(struct rvt_qp *qp, struct urvt_txq *q, const struct urvt_pkt *f,
			  uint32_t *hlen)
{
	uint8_t *p = urvt_txq_reserve(qp_net(qp), q, URVT_PKT_MAX);

	*hlen = (uint32_t)urvt_pkt_build_hdr(p, URVT_PKT_MAX, f);
	return p;
}

void urvt_build_finish(struct rvt_qp *qp, struct urvt_txq *q, uint8_t *p, uint32_t len,
		       const struct urvt_av *av)
{
	struct urvt_net *net = qp_net(qp);
	struct urvt_ipinfo ip;
	union urvt_sockaddr dst;
	size_t total;

	urvt_net_tx_ipinfo(net, av, &ip);
	total = urvt_pkt_finish(p, URVT_PKT_MAX, len, &ip);
	if (unlikely(!total))
		return; /* cannot happen for lengths the engines build */
	urvt_av_link_addr(av, &dst);
	urvt_txq_commit(q, (uint32_t)total, &dst, urvt_qp_stats(qp));
}

/* ------------------------------------------------------------------ */
/* Receive                                                            */
/* ------------------------------------------------------------------ */
#define RX_BATCH 32
#define RX_CTRL 128
/* one slot holds a whole UDP GRO train (<= 64 KiB) */
#define RX_BUF_BYTES (65536 + 4096)

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

struct urvt_rx {
	struct mmsghdr msg[RX_BATCH];
	struct iovec iov[RX_BATCH];
	union urvt_sockaddr name[RX_BATCH];
	union {
		char buf[RX_CTRL];
		struct cmsghdr align;
	} ctrl[RX_BATCH];
	uint8_t *mem;                     /* RX_BATCH x RX_BUF_BYTES */
};

static void rx_slot_init(struct urvt_rx *rx, unsigned i)
{
	struct msghdr *mh = &rx->msg[i].msg_hdr;

	rx->iov[i].iov_base = rx->mem + (size_t)i * RX_BUF_BYTES;
	rx->iov[i].iov_len = RX_BUF_BYTES;
	mh->msg_name = &rx->name[i];
	mh->msg_namelen = sizeof(rx->name[i]);
	mh->msg_iov = &rx->iov[i];
	mh->msg_iovlen = 1;
	mh->msg_control = rx->ctrl[i].buf;
	mh->msg_controllen = RX_CTRL;
	mh->msg_flags = 0;
}

static int rx_init(struct urvt_net *net)
{
	struct urvt_rx *rx = calloc(1, sizeof(*rx));

	if (!rx)
		return -ENOMEM;
	rx->mem = mmap(NULL, (size_t)RX_BATCH * RX_BUF_BYTES, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (rx->mem == MAP_FAILED) {
		free(rx);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < RX_BATCH; i++)
		rx_slot_init(rx, i);
	net->rx = rx;
	return 0;
}

static void rx_fini(struct urvt_net *net)
{
	if (!net->rx)
		return;
	munmap(net->rx->mem, (size_t)RX_BATCH * RX_BUF_BYTES);
	free(net->rx);
	net->rx = NULL;
}

/* The IP info a UDP socket can see of one datagram (ID: unknown). */
static void rx_ipinfo(struct urvt_net *net, struct msghdr *mh, struct urvt_ipinfo *ip,
		      uint32_t *gso)
{
	const union urvt_sockaddr *src = mh->msg_name;

	memset(ip, 0, sizeof(*ip));
	memcpy(ip->dgid, net->rdi->gid.raw, 16);
	ip->dport = URVT_ROCE_UDP_PORT;
	ip->hop_limit = 64;
	if (src->sa.sa_family == AF_INET) {
		urvt_gid_from_v4(ip->sgid, src->in4.sin_addr.s_addr);
		ip->sport = ntohs(src->in4.sin_port);
		ip->df = true;
	} else {
		memcpy(ip->sgid, &src->in6.sin6_addr, 16);
		ip->sport = ntohs(src->in6.sin6_port);
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			urvt_gid_from_v4(ip->dgid, pi.ipi_addr.s_addr);
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
			ip->tclass = *(uint8_t *)CMSG_DATA(c);
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
			int v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			ip->hop_limit = (uint8_t)v;
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
			struct in6_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			memcpy(ip->dgid, &pi.ipi6_addr, 16);
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
			int v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			ip->tclass = (uint8_t)v;
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) {
			int v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			ip->hop_limit = (uint8_t)v;
		} else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
			int v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			*gso = v > 0 ? (uint32_t)v : 0;
		}
	}
}

int urvt_net_rx_batch(struct urvt_net *net)
{
	struct urvt_rx *rx = net->rx;
	struct urvt_txq *txq;
	bool in_rx;
	int got;

	got = recvmmsg(net->fd, rx->msg, RX_BATCH, MSG_DONTWAIT, NULL);
	if (got <= 0)
		return 0;
	txq = urvt_txq_get();
	in_rx = tls_in_rx;
	tls_in_rx = true;
	for (int i = 0; i < got; i++) {
		struct msghdr *mh = &rx->msg[i].msg_hdr;
		const uint8_t *data = rx->iov[i].iov_base;
		uint32_t len = rx->msg[i].msg_len, gso = 0;
		struct urvt_ipinfo ip;

		if (mh->msg_flags & MSG_TRUNC) {
			tp_count(net, NULL, URVT_CTR_DROP_BASE + URVT_TDROP_OVERSIZE, 1);
		} else {
			rx_ipinfo(net, mh, &ip, &gso);
			/* a UDP GRO train: segments of gso bytes, the last may be shorter */
			if (!gso || gso >= len)
				gso = len;
			for (uint32_t off = 0; off < len; off += gso) {
				uint32_t n = len - off < gso ? len - off : gso;
				struct urvt_ipinfo sip = ip;
				urvt_ctr_add(&net->shm->dev, URVT_CTR_RX_PKTS, 1);
				urvt_ctr_add(&net->shm->dev, URVT_CTR_RX_BYTES, n);
				urvt_recv_pkt(net, data + off, n, &sip);
			}
		}
		rx_slot_init(rx, (unsigned)i);
	}
	tls_in_rx = in_rx;
	/* responses the responder queued on this thread */
	if (txq && !in_rx)
		urvt_txq_flush(net, txq);
	return got;
}

/*
 * Who receives. A thread polling an empty CQ receives inline (trylock:
 * lowest latency, no wakeup); the progress thread receives for everyone
 * else: blocking applications (-e), applications that poll memory
 * (ib_write_lat spins on the target of the peer's WRITE), applications that
 * do not wait at all (a WRITE target). Both at it on one CPU take the CPU
 * from each other: every wakeup of the progress thread, even a timer that
 * only looks, costs a busy poller on this kind of VM tens of us. So the
 * socket has one owner at a time:
 *
 *  - an application thread takes it (the progress thread stops watching)
 *    after APP_RUN empty polls within APP_RUN_NS: it polls busily;
 *  - it goes back to the progress thread when the application says it will
 *    block (req_notify_cq); when a poll returns completions and the
 *    application has been seen to leave after its completions (its next
 *    verb came more than APP_LEAVE_NS later, repeatedly: it waits
 *    elsewhere, e.g. on memory) -- it takes the socket again at its next
 *    empty poll --; or when the watchdog saw no poll_cq for WATCHDOG_NS.
 *
 * No clock read per poll: a run is timed once per APP_RUN polls, the gap
 * after a poll that returned completions once. (Until 8f743b5 the
 * progress thread stepped aside itself and a 200 us watchdog took the
 * socket back after 20 us without a poll: its wakeups alone doubled
 * ib_send_lat, and a poller preempted for 20 us lost the socket.)
 */
#define APP_RUN 16                /* empty polls ... */
#define APP_RUN_NS (16 * 50000ull) /* ... within this: a busy poller */
#define APP_LEAVE_NS 5000         /* next verb later than this: it left */
#define APP_LEAVE_MAX 8           /* leave score: +2 per leave, -1 per stay ... */
#define APP_LEAVER 4              /* ... a leaver from here */
#define APP_EMPTY_SKIP 4          /* after an empty recvmmsg, skip this many polls */
#define APP_LINGER_NS 50000       /* a leaver's poll receives this much longer */
#define APP_LINGER_MAX 8
#define APP_LINGER_REST 256
#define WATCHDOG_NS 2000000       /* while an application owns the socket */

static void net_rx_cb(void *arg);

/* Any thread: the application owns the socket, the progress thread stops
 * watching it (a watchdog checks that it keeps polling). */
static void rx_take(struct urvt_net *net)
{
	bool arm = false;

	pthread_mutex_lock(&net->watch_lock);
	if (!atomic_load_explicit(&net->aside, memory_order_relaxed)) {
		urvt_progress_del_fd(net->rdi->progress, net->fd);
		atomic_store_explicit(&net->aside, true, memory_order_relaxed);
		arm = !net->wd_armed;
		net->wd_armed = true;
		net->wd_polls = atomic_load_explicit(&net->app_polls, memory_order_relaxed);
		URVT_DBG("rx: application polls, progress thread steps aside");
	}
	pthread_mutex_unlock(&net->watch_lock);
	if (arm)
		urvt_timer_mod(net->rdi->progress, &net->watchdog, urvt_now_ns() + WATCHDOG_NS);
}

/* Any thread: the progress thread watches the socket again. */
static void rx_watch(struct urvt_net *net)
{
	pthread_mutex_lock(&net->watch_lock);
	if (atomic_load_explicit(&net->aside, memory_order_relaxed)) {
		if (!urvt_progress_add_fd(net->rdi->progress, net->fd, net_rx_cb, net))
			atomic_store_explicit(&net->aside, false, memory_order_relaxed);
		URVT_DBG("rx: progress thread receives again");
	}
	pthread_mutex_unlock(&net->watch_lock);
}

static void net_rx_drain(struct urvt_net *net)
{
	pthread_mutex_lock(&net->rx_lock);
	/* bounded, so timers and work get their turn */
	for (int i = 0; i < 64; i++)
		if (urvt_net_rx_batch(net) < RX_BATCH)
			break;
	pthread_mutex_unlock(&net->rx_lock);
}

static void net_rx_cb(void *arg)
{
	net_rx_drain(arg);
}

static void watchdog_fn(struct urvt_timer *t)
{
	struct urvt_net *net = container_of(t, struct urvt_net, watchdog);
	uint32_t polls = atomic_load_explicit(&net->app_polls, memory_order_relaxed);
	bool give;

	pthread_mutex_lock(&net->watch_lock);
	give = atomic_load_explicit(&net->aside, memory_order_relaxed) && polls == net->wd_polls;
	if (atomic_load_explicit(&net->aside, memory_order_relaxed) && !give) {
		/* still polling: look again later */
		net->wd_polls = polls;
		urvt_timer_mod(net->rdi->progress, &net->watchdog, urvt_now_ns() + WATCHDOG_NS);
	} else {
		net->wd_armed = false;
	}
	pthread_mutex_unlock(&net->watch_lock);
	if (give) {
		atomic_store_explicit(&net->app_run, 0, memory_order_relaxed);
		rx_watch(net);
		net_rx_drain(net);
	}
}

void urvt_net_drain(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;

	if (!net || pthread_mutex_trylock(&net->rx_lock))
		return; /* someone is receiving right now */
	for (int i = 0; i < 64; i++)
		if (urvt_net_rx_batch(net) < RX_BATCH)
			break;
	pthread_mutex_unlock(&net->rx_lock);
}

int urvt_net_poll(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;
	uint32_t skip;
	int n;

	if (!net)
		return 0;
	/* the socket was empty a moment ago: a busy poller otherwise spends
	 * most of its time in recvmmsg returning EAGAIN */
	skip = atomic_load_explicit(&net->app_skip, memory_order_relaxed);
	if (skip) {
		atomic_store_explicit(&net->app_skip, skip - 1, memory_order_relaxed);
		return 0;
	}
	if (pthread_mutex_trylock(&net->rx_lock))
		return 0;
	n = urvt_net_rx_batch(net);
	pthread_mutex_unlock(&net->rx_lock);
	if (!n)
		atomic_store_explicit(&net->app_skip, APP_EMPTY_SKIP, memory_order_relaxed);
	return n;
}

/* The application called a verb again after a poll that returned
 * completions at t: did it wait elsewhere in between? */
static void app_back(struct urvt_net *net, uint64_t t, uint64_t now)
{
	uint32_t s = atomic_load_explicit(&net->app_leave, memory_order_relaxed);

	atomic_store_explicit(&net->app_ret_ns, 0, memory_order_relaxed);
	if (now - t > APP_LEAVE_NS)
		s = s + 2 > APP_LEAVE_MAX ? APP_LEAVE_MAX : s + 2;
	else if (s)
		s--;
	atomic_store_explicit(&net->app_leave, s, memory_order_relaxed);
}

void urvt_net_app_active(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;
	uint64_t t;

	if (!net)
		return;
	t = atomic_load_explicit(&net->app_ret_ns, memory_order_relaxed);
	if (t)
		app_back(net, t, urvt_now_ns());
}

void urvt_net_app_blocks(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;

	if (!net)
		return;
	atomic_store_explicit(&net->app_run, 0, memory_order_relaxed);
	if (atomic_load_explicit(&net->aside, memory_order_relaxed))
		rx_watch(net);
}

/* An empty poll: count the run; a busy poller takes the socket. */
static void app_empty_poll(struct urvt_net *net)
{
	uint32_t r;

	if (atomic_load_explicit(&net->aside, memory_order_relaxed))
		return;
	if (atomic_load_explicit(&net->take_next, memory_order_relaxed)) {
		/* a leaver is back and waits for its next completion */
		atomic_store_explicit(&net->take_next, false, memory_order_relaxed);
		rx_take(net);
		return;
	}
	r = atomic_load_explicit(&net->app_run, memory_order_relaxed);
	if (!r)
		atomic_store_explicit(&net->app_run_ns, urvt_now_ns(), memory_order_relaxed);
	if (++r < APP_RUN) {
		atomic_store_explicit(&net->app_run, r, memory_order_relaxed);
		return;
	}
	atomic_store_explicit(&net->app_run, 0, memory_order_relaxed);
	if (urvt_now_ns() - atomic_load_explicit(&net->app_run_ns, memory_order_relaxed) < APP_RUN_NS)
		rx_take(net);
}

/*
 * A leaver's poll returns completions: before it goes to wait on memory,
 * receive inline a little longer. What it waits for (the peer's WRITE)
 * usually comes within a round trip, and delivering it from the progress
 * thread costs a wakeup (tens of us here: ib_write_lat ~70 us instead of
 * ~7). Stops at the first batch received (unless it holds only the first
 * packets of a WRITE) or after APP_LINGER_NS. Scored so that an
 * application that computes between completions is not held up: a linger
 * that catches a WRITE gains 1, one that times out costs 2; at 0 lingering
 * is tried again only once per APP_LINGER_REST returns. Returns true if it
 * caught the end of a WRITE.
 */
static bool app_linger(struct urvt_net *net)
{
	uint32_t s = atomic_load_explicit(&net->app_linger, memory_order_relaxed);
	uint64_t end;

	if (!s) {
		uint32_t r = atomic_load_explicit(&net->app_linger_rest, memory_order_relaxed) + 1;
		atomic_store_explicit(&net->app_linger_rest, r < APP_LINGER_REST ? r : 0,
				      memory_order_relaxed);
		if (r < APP_LINGER_REST)
			return false;
		s = 1;
	}
	end = urvt_now_ns() + APP_LINGER_NS;
	/* bounded by the clock; the count only guards against a stuck one */
	for (uint32_t i = 0; i < (1u << 20); i++) {
		if (!pthread_mutex_trylock(&net->rx_lock)) {
			uint32_t w = atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed);
			uint32_t p = atomic_load_explicit(&net->rx_mem_pkts, memory_order_relaxed);
			int n = urvt_net_rx_batch(net);
			bool caught = atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed) != w;
			bool partial = atomic_load_explicit(&net->rx_mem_pkts, memory_order_relaxed) != p;
			pthread_mutex_unlock(&net->rx_lock);
			/* the first packets of a WRITE: wait for its last one */
			if (n > 0 && (caught || !partial)) {
				if (caught && s < APP_LINGER_MAX)
					s++;
				atomic_store_explicit(&net->app_linger, s, memory_order_relaxed);
				return caught;
			}
		}
		if (urvt_now_ns() >= end)
			break;
	}
	atomic_store_explicit(&net->app_linger, s > 2 ? s - 2 : 0, memory_order_relaxed);
	return false;
}

/* A poll returns completions: the application may wait elsewhere next. */
static void app_returns(struct urvt_net *net, uint64_t now)
{
	uint32_t leave = atomic_load_explicit(&net->app_leave, memory_order_relaxed);

	if (leave < APP_LEAVER) {
		atomic_store_explicit(&net->app_ret_ns, now, memory_order_relaxed);
		return;
	}
	if (app_linger(net)) {
		/* it got what it would have waited for: count that as a leave
		 * (its next verb comes at once) and let it keep the socket */
		leave = leave + 2 > APP_LEAVE_MAX ? APP_LEAVE_MAX : leave + 2;
		atomic_store_explicit(&net->app_leave, leave, memory_order_relaxed);
		return;
	}
	atomic_store_explicit(&net->app_ret_ns, urvt_now_ns(), memory_order_relaxed);
	if (atomic_load_explicit(&net->aside, memory_order_relaxed)) {
		rx_watch(net);
		atomic_store_explicit(&net->take_next, true, memory_order_relaxed);
	}
}

int urvt_net_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc)
{
	struct urvt_net *net = cq->uctx->rdi->transport_priv;
	int n = rvt_poll_cq(cq, num_entries, wc);
	uint64_t t, now = 0;

	if (!net || num_entries <= 0)
		return n;
	atomic_store_explicit(&net->app_polls,
			      atomic_load_explicit(&net->app_polls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	t = atomic_load_explicit(&net->app_ret_ns, memory_order_relaxed);
	if (unlikely(t)) {
		now = urvt_now_ns();
		app_back(net, t, now);
	}
	if (n == 0) {
		app_empty_poll(net);
		/* An empty CQ: receive inline (uncontended) before saying so. */
		if (urvt_net_poll(cq->uctx->rdi) <= 0)
			return 0;
		n = rvt_poll_cq(cq, num_entries, wc);
		if (n <= 0)
			return n;
		now = 0;
	}
	app_returns(net, now ? now : urvt_now_ns());
	return n;
}

/* ------------------------------------------------------------------ */
/* Device setup                                                       */
/* ------------------------------------------------------------------ */
static void setopt(int fd, int level, int name, int val, const char *what)
{
	if (setsockopt(fd, level, name, &val, sizeof(val)))
		URVT_DBG("setsockopt %s: %s", what, strerror(errno));
}

static void bufsize(int fd, int force, int plain, int bytes)
{
	/* root may exceed net.core.[rw]mem_max; others get the capped value */
	if (setsockopt(fd, SOL_SOCKET, force, &bytes, sizeof(bytes)))
		setsockopt(fd, SOL_SOCKET, plain, &bytes, sizeof(bytes));
}

static void socket_setup(struct urvt_net *net)
{
	int fd = net->fd;

	if (net->v4) {
		/* roce-wire §1.3, docs/wire.md: unconnected + DF => IPv4 ID 0.
		 * No IP_PKTINFO: the socket is bound to our address, so that
		 * is every packet's destination; TOS/TTL feed the UD GRH. */
		setopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER");
		setopt(fd, IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS");
		setopt(fd, IPPROTO_IP, IP_RECVTTL, 1, "IP_RECVTTL");
	} else {
		setopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER");
		setopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS");
		setopt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT");
		/* rxe sends IPv6 UDP checksum 0 (roce-wire §1.3) */
		setopt(fd, SOL_UDP, UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX");
	}
	bufsize(fd, SO_RCVBUFFORCE, SO_RCVBUF, 16 << 20);
	bufsize(fd, SO_SNDBUFFORCE, SO_SNDBUF, 4 << 20);
}

static void barrier_fn(struct urvt_work *w);
struct barrier_work {
	struct urvt_work w;
	struct urvt_net *net;
};

static void barrier_fn(struct urvt_work *w)
{
	struct urvt_net *net = container_of(w, struct barrier_work, w)->net;

	pthread_mutex_lock(&net->bar_lock);
	net->bar_done = true;
	pthread_cond_broadcast(&net->bar_cond);
	pthread_mutex_unlock(&net->bar_lock);
}

/* Wait until the progress thread has finished any callback it was in. */
static void progress_barrier(struct urvt_net *net)
{
	struct barrier_work bw = { .net = net };

	urvt_work_init(&bw.w, barrier_fn);
	net->bar_done = false;
	urvt_progress_queue_work(net->rdi->progress, &bw.w);
	pthread_mutex_lock(&net->bar_lock);
	while (!net->bar_done)
		pthread_cond_wait(&net->bar_cond, &net->bar_lock);
	pthread_mutex_unlock(&net->bar_lock);
	urvt_progress_cancel_work_sync(net->rdi->progress, &bw.w);
}

int urvt_net_create(struct rvt_dev_info *rdi, int fd, bool v4)
{
	struct urvt_net *net = calloc(1, sizeof(*net));
	const char *env;
	int ret;

	if (!net)
		return -ENOMEM;
	env = getenv("URVT_DEBUG");
	urvt_debug = env && *env && strcmp(env, "0");
	net->rdi = rdi;
	net->fd = fd;
	net->v4 = v4;
	pthread_mutex_init(&net->rx_lock, NULL);
	pthread_mutex_init(&net->watch_lock, NULL);
	pthread_mutex_init(&net->bar_lock, NULL);
	pthread_cond_init(&net->bar_cond, NULL);

	/* our side of every packet: source GID, port 4791 both ways (we send
	 * from the bound socket; rxe accepts any source port), ID 0 + DF */
	memset(&net->ip_tmpl, 0, sizeof(net->ip_tmpl));
	memcpy(net->ip_tmpl.sgid, rdi->gid.raw, 16);
	net->ip_tmpl.sport = URVT_ROCE_UDP_PORT;
	net->ip_tmpl.dport = URVT_ROCE_UDP_PORT;
	net->ip_tmpl.hop_limit = 64;
	net->ip_tmpl.df = true;

	ret = pool_init(net);
	if (ret)
		goto err;
	ret = stats_init(net);
	if (ret)
		goto err;
	ret = rx_init(net);
	if (ret)
		goto err;
	socket_setup(net);
	/* UDP GSO out, GRO in (docs/transport.md): on unless set to 0 */
	env = getenv("URVT_GSO");
	net->gso = env ? strcmp(env, "0") != 0 : true;
	env = getenv("URVT_GRO");
	if (!env || strcmp(env, "0"))
		setopt(net->fd, SOL_UDP, UDP_GRO, 1, "UDP_GRO");

	env = getenv("URVT_PCAP");
	if (env && *env) {
		/* "%p" in the name becomes the pid (one file per process) */
		char path[512];
		const char *pp = strstr(env, "%p");
		if (pp)
			snprintf(path, sizeof(path), "%.*s%d%s", (int)(pp - env), env, (int)getpid(),
				 pp + 2);
		else
			snprintf(path, sizeof(path), "%s", env);
		env = path;
		net->pcap = urvt_pcap_open(env);
		if (!net->pcap)
			fprintf(stderr, "urvt: URVT_PCAP=%s: %s\n", env, strerror(errno));
	}
	env = getenv("URVT_FAULT");
	if (env && *env) {
		struct urvt_fault_cfg cfg;
		ret = urvt_fault_parse(env, &cfg);
		if (ret)
			goto err;
		if (urvt_fault_active(&cfg)) {
			net->fault = urvt_fault_create(&cfg, rdi->progress, fault_send, net);
			if (!net->fault) {
				ret = -ENOMEM;
				goto err;
			}
		}
	}
	rdi->transport_priv = net;
	atomic_store(&net->app_linger, 2);
	urvt_timer_init(&net->watchdog, watchdog_fn);
	ret = urvt_progress_add_fd(rdi->progress, net->fd, net_rx_cb, net);
	if (ret) {
		rdi->transport_priv = NULL;
		goto err;
	}
	return 0;
err:
	urvt_fault_destroy(net->fault);
	urvt_pcap_close(net->pcap);
	rx_fini(net);
	stats_fini(net);
	pool_fini(net);
	free(net);
	return ret;
}

void urvt_net_destroy(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;

	if (!net)
		return;
	urvt_timer_del_sync(rdi->progress, &net->watchdog);
	pthread_mutex_lock(&net->watch_lock);
	urvt_progress_del_fd(rdi->progress, net->fd);
	atomic_store(&net->aside, true);
	pthread_mutex_unlock(&net->watch_lock);
	progress_barrier(net);
	urvt_timer_del_sync(rdi->progress, &net->watchdog);
	urvt_fault_destroy(net->fault);
	/* anything this thread still has queued */
	if (tls_txq)
		urvt_txq_flush(net, tls_txq);
	rdi->transport = NULL;
	rdi->transport_priv = NULL;
	urvt_pcap_close(net->pcap);
	rx_fini(net);
	stats_fini(net);
	pool_fini(net);
	pthread_mutex_destroy(&net->rx_lock);
	pthread_mutex_destroy(&net->watch_lock);
	pthread_mutex_destroy(&net->bar_lock);
	pthread_cond_destroy(&net->bar_cond);
	free(net);
}
