/*
 * The UDP link (link/udp.h): the only code that makes system calls on the
 * RoCEv2 socket. The transport hands it whole packets and gets whole
 * datagrams back with the IP-level facts a UDP socket can see.
 */
#include "base/env.h"
#include "link/udp.h"

#include <errno.h>
#include <netinet/udp.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/compiler.h"
#include "base/forkclose.h"
#include "link/fault.h"
#include "link/udp_share.h"
#include "wire/hdr.h"
#include "wire/icrc.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef UDP_NO_CHECK6_RX
#define UDP_NO_CHECK6_RX 102
#endif

#define RX_BATCH 32
#define RX_CTRL 128
/* one slot holds a whole UDP GRO train (<= 64 KiB) */
#define RX_BUF_BYTES (65536 + 4096)
/* sendmmsg entries per call */
#define TX_CHUNK 64
/* a GSO send: at most this many segments and bytes (the kernel's limits) */
#define GSO_MAX_SEGS 64
#define GSO_MAX_BYTES 65000
/* multicast groups a link joins in its life (a socket each) */
#define MC_GROUPS 64

/* A multicast group: a socket bound to the group's address and port 4791,
 * a member on our interface. Slots are never reused for another group
 * (the receive path reads them without a lock); leaving drops the
 * membership, joining again takes it back. */
struct udp_group {
	int fd;
	uint8_t gid[16];
	_Atomic bool member;
};

struct urvt_udp {
	struct urvt_link link;
	int fd;
	int epfd;                         /* wake_fd: the socket and the groups' */
	bool gso;
	struct urvt_fault *fault;
	struct urvt_udp_share *share;     /* the address is the host's (udp_share.h), or NULL */
	pthread_mutex_t mc_lock;          /* join/leave */
	_Atomic unsigned mc_n;            /* slots in use, published with release */
	_Atomic unsigned mc_members;      /* groups we are a member of now */
	struct udp_group mc[MC_GROUPS];

	/* receive side: one thread at a time (link.h) */
	unsigned rx_used;                 /* slots the last recvmmsg filled */
	unsigned rx_want;                 /* slots the next recvmmsg offers (adapts) */
	bool rx_was_full;                 /* the last recvmmsg filled all it was offered */
	struct mmsghdr msg[RX_BATCH];
	struct iovec iov[RX_BATCH];
	union urvt_link_addr name[RX_BATCH];
	union {
		char buf[RX_CTRL];
		struct cmsghdr align;
	} ctrl[RX_BATCH];
	uint8_t *mem;                     /* RX_BATCH x RX_BUF_BYTES */
	struct urvt_link_rx *rx;          /* the caller's, during recv_batch */
};

static struct urvt_udp *udp_of(struct urvt_link *l)
{
	return container_of(l, struct urvt_udp, link);
}

/* ------------------------------------------------------------------ */
/* Socket options                                                     */
/* ------------------------------------------------------------------ */
static void setopt(int fd, int level, int name, int val)
{
	/* best effort: each option only improves on the default */
	(void)setsockopt(fd, level, name, &val, sizeof(val));
}

static void bufsize(int fd, int force, int plain, int bytes)
{
	/* root may exceed net.core.[rw]mem_max; others get the capped value */
	if (setsockopt(fd, SOL_SOCKET, force, &bytes, sizeof(bytes)))
		(void)setsockopt(fd, SOL_SOCKET, plain, &bytes, sizeof(bytes));
}

/* TOS/TTL (traffic class, hop limit) with each datagram: they feed the
 * UD GRH only (the ICRC masks them), and cost every receive two control
 * messages (~0.5 us a datagram here): asked for while UD QPs exist. */
static void socket_ip_facts(int fd, bool v4, bool on)
{
	if (v4) {
		setopt(fd, IPPROTO_IP, IP_RECVTOS, on);
		setopt(fd, IPPROTO_IP, IP_RECVTTL, on);
	} else {
		setopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, on);
		setopt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, on);
	}
}

static void socket_setup(int fd, bool v4, bool gro, bool facts)
{
	if (v4) {
		/* Unconnected + DF: the kernel writes IPv4 ID 0, which the
		 * ICRC covers (docs/wire.md). No IP_PKTINFO: the socket is
		 * bound to our address, so that is every packet's
		 * destination. */
		setopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO);
	} else {
		setopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO);
		/* rxe sends IPv6 UDP checksum 0 (docs/wire.md) */
		setopt(fd, SOL_UDP, UDP_NO_CHECK6_RX, 1);
	}
	socket_ip_facts(fd, v4, facts);
	bufsize(fd, SO_RCVBUFFORCE, SO_RCVBUF, 16 << 20);
	bufsize(fd, SO_SNDBUFFORCE, SO_SNDBUF, 4 << 20);
	if (gro)
		setopt(fd, SOL_UDP, UDP_GRO, 1);
}

/* What we send to a multicast group leaves by our interface (not by the
 * default route) and comes back to this host's members too. */
static void mc_sender_setup(struct urvt_udp *u)
{
	if (u->link.info.family == AF_INET) {
		struct ip_mreqn mr = { .imr_ifindex = (int)u->link.info.ifindex };
		memcpy(&mr.imr_address, u->link.info.addr6.s6_addr + 12, 4);
		(void)setsockopt(u->fd, IPPROTO_IP, IP_MULTICAST_IF, &mr, sizeof(mr));
		setopt(u->fd, IPPROTO_IP, IP_MULTICAST_LOOP, 1);
	} else {
		setopt(u->fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, (int)u->link.info.ifindex);
		setopt(u->fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 1);
	}
}

/* ------------------------------------------------------------------ */
/* Send                                                               */
/* ------------------------------------------------------------------ */
/* sendmmsg over m[0..n); waits briefly for room on EAGAIN. Returns the
 * datagrams lost. */
static unsigned send_msgs(int fd, struct mmsghdr *m, unsigned n)
{
	unsigned done = 0, lost = 0;
	int again = 0;

	while (done < n) {
		int r = sendmmsg(fd, m + done, n - done, MSG_DONTWAIT);
		if (r > 0) {
			done += (unsigned)r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == ENOBUFS) && again++ < 4) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			poll(&pfd, 1, 1);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		/* this datagram is lost (the protocol recovers); go on */
		done++;
		lost++;
		again = 0;
	}
	return lost;
}

static void msg_set(struct mmsghdr *m, struct iovec *iov, uint8_t *buf, uint32_t len,
		    const union urvt_link_addr *dst)
{
	*iov = (struct iovec){ .iov_base = buf, .iov_len = len };
	m->msg_hdr = (struct msghdr){ .msg_name = (void *)dst,
				      .msg_namelen = urvt_link_addr_len(dst),
				      .msg_iov = iov,
				      .msg_iovlen = 1 };
}

/* How many of p[0..n) leave as one GSO send with p[0]: a run of equal-size
 * packets to one peer (the last may be shorter), back to back in memory,
 * to QPNs of one top byte: a GSO send arrives as one GRO train, and a
 * host that shares its address steers a train by its first packet's QPN
 * (docs/host-identity.md). IPv4 segment k leaves
 * with IP ID k (the send itself has ID 0), which the ICRC covers: patch
 * each segment's ICRC for it (docs/wire.md). */
static unsigned gso_run(struct urvt_link_tx *p, unsigned n)
{
	uint32_t bytes = p[0].len, delta[GSO_MAX_SEGS];
	unsigned j = 1, same;

	while (j < n && j < GSO_MAX_SEGS && p[j].len <= p[0].len && p[j - 1].len == p[0].len &&
	       p[j].buf == p[j - 1].buf + p[j - 1].len && bytes + p[j].len <= GSO_MAX_BYTES &&
	       p[j].buf[5] == p[0].buf[5] && urvt_link_addr_same(p[j].dst, p[0].dst)) {
		bytes += p[j].len;
		j++;
	}
	if (j == 1 || p[0].dst->sa.sa_family != AF_INET)
		return j;
	/* the run's full-size packets' patches at once; a shorter last its own */
	same = p[j - 1].len == p[0].len ? j : j - 1;
	urvt_icrc_v4_id_deltas(p[0].len - URVT_ICRC_BYTES, same, delta);
	for (unsigned k = 1; k < j; k++) {
		uint8_t *icrc = p[k].buf + p[k].len - URVT_ICRC_BYTES;
		uint32_t d = k < same ? delta[k]
				      : urvt_icrc_v4_id_delta(p[k].len - URVT_ICRC_BYTES,
							      (uint16_t)k);

		urvt_icrc_put(icrc, urvt_icrc_get(icrc) ^ d);
		p[k].ip_id = (uint16_t)k;
	}
	return j;
}

static unsigned udp_send_batch(struct urvt_link *l, struct urvt_link_tx *p, unsigned n)
{
	struct urvt_udp *u = udp_of(l);
	struct mmsghdr m[TX_CHUNK];
	struct iovec iov[TX_CHUNK];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl[TX_CHUNK];
	unsigned nm = 0, lost = 0;

	for (unsigned i = 0; i < n;) {
		unsigned run = 1, copies = 1;

		p[i].ip_id = 0;
		p[i].fault = 0;
		if (unlikely(u->fault)) {
			unsigned fl;
			enum urvt_fault_verdict v = urvt_fault_apply(u->fault, p[i].buf, p[i].len,
								     p[i].dst,
								     urvt_link_addr_len(p[i].dst), &fl);
			p[i].fault = (uint8_t)fl;
			if (v == URVT_FAULT_DROP || v == URVT_FAULT_HELD) {
				i++;
				continue;
			}
			copies = v == URVT_FAULT_DUP ? 2 : 1;
		} else if (u->gso) {
			run = gso_run(p + i, n - i);
		}
		if (nm + copies > TX_CHUNK) {
			lost += send_msgs(u->fd, m, nm);
			nm = 0;
		}
		for (unsigned k = 0; k < copies; k++) {
			uint32_t bytes = 0;
			for (unsigned j = i; j < i + run; j++)
				bytes += p[j].len;
			msg_set(&m[nm], &iov[nm], p[i].buf, bytes, p[i].dst);
			if (run > 1) {
				/* the packets of a run sit back to back in the caller's buffer */
				struct cmsghdr *c = (struct cmsghdr *)ctl[nm].buf;
				uint16_t seg = (uint16_t)p[i].len;
				/* the padding after the data goes to the kernel too */
				memset(ctl[nm].buf, 0, sizeof(ctl[nm].buf));
				c->cmsg_level = SOL_UDP;
				c->cmsg_type = UDP_SEGMENT;
				c->cmsg_len = CMSG_LEN(sizeof(seg));
				memcpy(CMSG_DATA(c), &seg, sizeof(seg));
				m[nm].msg_hdr.msg_control = ctl[nm].buf;
				m[nm].msg_hdr.msg_controllen = sizeof(ctl[nm].buf);
			}
			nm++;
		}
		i += run;
	}
	if (nm)
		lost += send_msgs(u->fd, m, nm);
	return lost;
}

/* Held packets leave here (the fault injector's timer): no second fault. */
static void fault_release(void *arg, const uint8_t *buf, uint32_t len, const void *dst,
			  uint32_t dstlen)
{
	struct urvt_udp *u = arg;
	struct mmsghdr m;
	struct iovec iov;

	(void)dstlen;
	msg_set(&m, &iov, (uint8_t *)buf, len, dst);
	send_msgs(u->fd, &m, 1);
}

/* ------------------------------------------------------------------ */
/* Receive                                                            */
/* ------------------------------------------------------------------ */
static void rx_slot_init(struct urvt_udp *u, unsigned i)
{
	struct msghdr *mh = &u->msg[i].msg_hdr;

	u->iov[i].iov_base = u->mem + (size_t)i * RX_BUF_BYTES;
	u->iov[i].iov_len = RX_BUF_BYTES;
	mh->msg_name = &u->name[i];
	mh->msg_namelen = sizeof(u->name[i]);
	mh->msg_iov = &u->iov[i];
	mh->msg_iovlen = 1;
	mh->msg_control = u->ctrl[i].buf;
	mh->msg_controllen = RX_CTRL;
	mh->msg_flags = 0;
}

static int cmsg_int(const struct cmsghdr *c)
{
	int v;

	memcpy(&v, CMSG_DATA(c), sizeof(v));
	return v;
}

/* The IP facts a UDP socket can see of one datagram (the ID it cannot). */
static void rx_ipinfo(const uint8_t dgid[16], struct msghdr *mh, struct urvt_link_rx *r)
{
	const union urvt_link_addr *src = mh->msg_name;
	struct urvt_ipinfo *ip = &r->ip;

	memset(ip, 0, sizeof(*ip));
	memcpy(ip->dgid, dgid, 16);
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
	r->seg = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
			ip->tclass = *(uint8_t *)CMSG_DATA(c);
		else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL)
			ip->hop_limit = (uint8_t)cmsg_int(c);
		else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)
			ip->tclass = (uint8_t)cmsg_int(c);
		else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT)
			ip->hop_limit = (uint8_t)cmsg_int(c);
		else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
			r->seg = cmsg_int(c) > 0 ? (uint32_t)cmsg_int(c) : 0;
	}
}

/* Datagrams from fd into slots [first, first + max), their destination
 * dgid (the socket is bound to it). Returns how many. */
static unsigned rx_from(struct urvt_udp *u, int fd, const uint8_t dgid[16], unsigned first,
			unsigned max)
{
	int got = recvmmsg(fd, u->msg + first, max, MSG_DONTWAIT, NULL);

	if (got <= 0)
		return 0;
	for (unsigned i = first; i < first + (unsigned)got; i++)
		rx_ipinfo(dgid, &u->msg[i].msg_hdr, &u->rx[i]);
	return (unsigned)got;
}

static int udp_recv_batch(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max)
{
	struct urvt_udp *u = udp_of(l);
	unsigned got, cap = max > RX_BATCH ? RX_BATCH : max, slots;

	for (unsigned i = 0; i < u->rx_used; i++)
		rx_slot_init(u, i);
	u->rx_used = 0;
	if (max > RX_BATCH)
		max = RX_BATCH;
	u->rx = rx;
	/* As many slots as the traffic fills: recvmmsg tries the slots it is
	 * given until one finds the queue empty, and in a ping-pong that
	 * second try is a good part of a receive's cost
	 * (docs/performance-history.md "The UDP link between two namespaces
	 * (2026-12-02)" item 9). A batch fills fewer: offer that many next.
	 * Two full ones in a row (a stream; in a ping-pong an empty poll
	 * comes between): double. */
	if (max > u->rx_want)
		max = u->rx_want;
	got = rx_from(u, u->fd, u->link.info.addr6.s6_addr, 0, max);
	if (got == max) {
		if (u->rx_was_full)
			u->rx_want = max * 2 > RX_BATCH ? RX_BATCH : max * 2;
		u->rx_was_full = true;
	} else {
		if (got)
			u->rx_want = got;
		u->rx_was_full = false;
	}
	/* multicast: only while some group is joined */
	if (unlikely(atomic_load_explicit(&u->mc_members, memory_order_relaxed))) {
		unsigned n = atomic_load_explicit(&u->mc_n, memory_order_acquire);
		for (unsigned g = 0; g < n && got < max; g++)
			if (atomic_load_explicit(&u->mc[g].member, memory_order_relaxed))
				got += rx_from(u, u->mc[g].fd, u->mc[g].gid, got, max - got);
	}
	u->rx_used = got;
	for (unsigned i = 0; i < got; i++) {
		struct msghdr *mh = &u->msg[i].msg_hdr;
		struct urvt_link_rx *r = &rx[i];

		r->data = u->iov[i].iov_base;
		r->len = u->msg[i].msg_len;
		r->trunc = mh->msg_flags & MSG_TRUNC;
		if (r->seg >= r->len)
			r->seg = 0;
	}
	if (!u->share)
		return (int)got;
	/* a shared address: what is another process's goes there, what
	 * others forwarded to us comes in the free slots' memory */
	slots = got;
	got = urvt_udp_share_filter(u->share, rx, got);
	if (unlikely(urvt_udp_share_fwd_pending(u->share))) {
		unsigned kept = got;
		while (got < cap && slots < RX_BATCH &&
		       urvt_udp_share_fwd_recv(u->share, u->mem + (size_t)slots * RX_BUF_BYTES,
					       RX_BUF_BYTES, &rx[got])) {
			slots++;
			got++;
		}
		/* forwarded datagrams reached the host before what the socket
		 * holds now: they go first (a peer's REJ forwarded to us must
		 * not follow our own answer to its retransmitted REQ) */
		if (kept && got > kept) {
			struct urvt_link_rx tmp[RX_BATCH];
			memcpy(tmp, rx, kept * sizeof(*rx));
			memmove(rx, rx + kept, (got - kept) * sizeof(*rx));
			memcpy(rx + (got - kept), tmp, kept * sizeof(*rx));
		}
	}
	return (int)got;
}

/* ------------------------------------------------------------------ */
/* Multicast                                                          */
/* ------------------------------------------------------------------ */
/* Membership of g on our interface: add or drop. */
static int mc_member(struct urvt_udp *u, struct udp_group *g, bool add)
{
	int r;

	if (u->link.info.family == AF_INET) {
		struct ip_mreqn mr = { .imr_ifindex = (int)u->link.info.ifindex };
		memcpy(&mr.imr_multiaddr, g->gid + 12, 4);
		memcpy(&mr.imr_address, u->link.info.addr6.s6_addr + 12, 4);
		r = setsockopt(g->fd, IPPROTO_IP, add ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &mr,
			       sizeof(mr));
	} else {
		struct ipv6_mreq mr = { .ipv6mr_interface = u->link.info.ifindex };
		memcpy(&mr.ipv6mr_multiaddr, g->gid, 16);
		r = setsockopt(g->fd, IPPROTO_IPV6, add ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, &mr,
			       sizeof(mr));
	}
	return r ? -errno : 0;
}

/* A socket for group gid: bound to its address, port 4791, shared with
 * the other processes of this host that join it (SO_REUSEADDR: each gets
 * a copy). */
static int mc_socket(struct urvt_udp *u, const uint8_t gid[16])
{
	bool v4 = u->link.info.family == AF_INET;
	union urvt_link_addr a;
	struct epoll_event ev = { .events = EPOLLIN };
	int fd, one = 1;

	if (v4 != urvt_gid_is_v4(gid))
		return -EINVAL; /* an IPv6 group on an IPv4 device, or the reverse */
	urvt_link_gid_addr(gid, &a);
	fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (!v4)
		a.in6.sin6_scope_id = u->link.info.ifindex;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, &a.sa, urvt_link_addr_len(&a)) || epoll_ctl(u->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		int e = -errno;
		close(fd);
		return e;
	}
	socket_setup(fd, v4, false, true); /* a group's members are UD QPs */
	return fd;
}

static int udp_mcast_join(struct urvt_link *l, const uint8_t gid[16])
{
	struct urvt_udp *u = udp_of(l);
	unsigned n = atomic_load_explicit(&u->mc_n, memory_order_relaxed);
	struct udp_group *g = NULL;
	int ret = 0;

	pthread_mutex_lock(&u->mc_lock);
	for (unsigned i = 0; i < n && !g; i++)
		if (!memcmp(u->mc[i].gid, gid, 16))
			g = &u->mc[i];
	if (g && atomic_load(&g->member))
		goto out;
	if (!g) {
		int fd;
		ret = -ENOSPC;
		if (n == MC_GROUPS)
			goto out;
		fd = mc_socket(u, gid);
		ret = fd < 0 ? fd : 0;
		if (ret)
			goto out;
		g = &u->mc[n];
		g->fd = fd;
		memcpy(g->gid, gid, 16);
		atomic_store_explicit(&u->mc_n, n + 1, memory_order_release);
	} else {
		/* what came while we were out is not for us */
		while (recv(g->fd, u->mem, RX_BUF_BYTES, MSG_DONTWAIT) >= 0)
			;
	}
	ret = mc_member(u, g, true);
	if (!ret) {
		atomic_store(&g->member, true);
		atomic_fetch_add(&u->mc_members, 1);
	}
out:
	pthread_mutex_unlock(&u->mc_lock);
	return ret;
}

static void udp_mcast_leave(struct urvt_link *l, const uint8_t gid[16])
{
	struct urvt_udp *u = udp_of(l);
	unsigned n = atomic_load_explicit(&u->mc_n, memory_order_relaxed);

	pthread_mutex_lock(&u->mc_lock);
	for (unsigned i = 0; i < n; i++) {
		struct udp_group *g = &u->mc[i];
		if (memcmp(g->gid, gid, 16) || !atomic_load(&g->member))
			continue;
		(void)mc_member(u, g, false);
		atomic_store(&g->member, false);
		atomic_fetch_sub(&u->mc_members, 1);
	}
	pthread_mutex_unlock(&u->mc_lock);
}

/* ------------------------------------------------------------------ */
/* Open / close                                                       */
/* ------------------------------------------------------------------ */
static void udp_close(struct urvt_link *l)
{
	struct urvt_udp *u = udp_of(l);

	/* held packets leave through fault_release, on the socket */
	urvt_fault_destroy(u->fault);
	urvt_close_in_child_del(&u->fd);
	if (u->share)
		urvt_udp_share_close(u->share, u->fd);
	else
		close(u->fd);
	for (unsigned i = 0; i < atomic_load(&u->mc_n); i++)
		close(u->mc[i].fd);
	close(u->epfd);
	pthread_mutex_destroy(&u->mc_lock);
	munmap(u->mem, (size_t)RX_BATCH * RX_BUF_BYTES);
	free(u);
}

/* Any GID: its IPv4 (v4-mapped) or IPv6 address, port 4791. */
static int udp_resolve(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn,
		       union urvt_link_addr *out)
{
	(void)l;
	urvt_link_gid_addr(gid, out);
	return 0;
}

static void udp_count_into(struct urvt_link *l, uint64_t *ctrs)
{
	struct urvt_udp *u = udp_of(l);

	if (u->share)
		urvt_udp_share_count_into(u->share, ctrs);
}

static void udp_ip_facts(struct urvt_link *l, bool on)
{
	struct urvt_udp *u = udp_of(l);

	socket_ip_facts(u->fd, u->link.info.family == AF_INET, on);
}

static const struct urvt_link_ops udp_ops = {
	.name = "udp",
	.send_batch = udp_send_batch,
	.recv_batch = udp_recv_batch,
	.resolve = udp_resolve,
	.mcast_join = udp_mcast_join,
	.mcast_leave = udp_mcast_leave,
	.ip_facts = udp_ip_facts,
	.count_into = udp_count_into,
	.close = udp_close,
};

void urvt_udp_cfg_from_env(struct urvt_udp_cfg *cfg, struct urvt_progress *p)
{
	*cfg = (struct urvt_udp_cfg){
		.addr = getenv("URVT_ADDR"),
		.netdev = getenv("URVT_NETDEV"),
		.gso = !urvt_env_off("URVT_GSO"),
		.gro = !urvt_env_off("URVT_GRO"),
		.fault = getenv("URVT_FAULT"),
		.progress = p,
	};
}

struct urvt_link *urvt_udp_open(const struct urvt_udp_cfg *cfg, int *err)
{
	struct urvt_udp *u = calloc(1, sizeof(*u));
	int ret;

	if (!u) {
		*err = -ENOMEM;
		return NULL;
	}
	u->fd = -1;
	u->rx_want = RX_BATCH;
	pthread_mutex_init(&u->mc_lock, NULL);
	u->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (u->epfd < 0) {
		ret = -errno;
		pthread_mutex_destroy(&u->mc_lock);
		free(u);
		*err = ret;
		return NULL;
	}
	u->mem = mmap(NULL, (size_t)RX_BATCH * RX_BUF_BYTES, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (u->mem == MAP_FAILED) {
		close(u->epfd);
		pthread_mutex_destroy(&u->mc_lock);
		free(u);
		*err = -ENOMEM;
		return NULL;
	}
	for (unsigned i = 0; i < RX_BATCH; i++)
		rx_slot_init(u, i);
	if (cfg->fault && *cfg->fault) {
		struct urvt_fault_cfg fc;
		ret = urvt_fault_parse(cfg->fault, &fc);
		if (ret)
			goto err;
		if (urvt_fault_active(&fc)) {
			ret = -EINVAL;
			if (!cfg->progress)
				goto err;
			ret = -ENOMEM;
			u->fault = urvt_fault_create(&fc, cfg->progress, fault_release, u);
			if (!u->fault)
				goto err;
		}
	}
	u->fd = urvt_udp_bind(cfg->addr, cfg->netdev, &u->link.info, &u->share);
	if (u->fd < 0) {
		ret = u->fd;
		goto err;
	}
	socket_setup(u->fd, u->link.info.family == AF_INET, cfg->gro, false);
	mc_sender_setup(u);
	{
		struct epoll_event ev = { .events = EPOLLIN };
		if (epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->fd, &ev)) {
			ret = -errno;
			goto err;
		}
	}
	if (u->share) {
		ret = urvt_udp_share_start(u->share, u->fd, u->epfd, cfg->progress);
		if (ret)
			goto err;
		u->link.info.slot = urvt_udp_share_slot(u->share);
		/* a forked child's copy would keep our socket in the group after
		 * we leave it, a member nobody reads (docs/host-identity.md) */
		(void)urvt_close_in_child(&u->fd);
	}
	u->gso = cfg->gso;
	u->link.ops = &udp_ops;
	/* readable when the socket or a group's is (the progress thread
	 * sleeps on it) */
	u->link.wake_fd = u->epfd;
	u->link.ctl_fd = -1;
	u->link.faults = u->fault != NULL;
	u->link.reaches_any = true;
	return &u->link;
err:
	urvt_fault_destroy(u->fault);
	urvt_close_in_child_del(&u->fd);
	if (u->share)
		urvt_udp_share_close(u->share, u->fd);
	else if (u->fd >= 0)
		close(u->fd);
	close(u->epfd);
	pthread_mutex_destroy(&u->mc_lock);
	munmap(u->mem, (size_t)RX_BATCH * RX_BUF_BYTES);
	free(u);
	*err = ret;
	return NULL;
}
