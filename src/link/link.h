/*
 * The link interface: how the transport moves whole RoCEv2 packets (BTH to
 * ICRC) between devices. One implementation per medium: the UDP socket
 * (udp.c) now, a same-host shared-memory link later. A link knows nothing
 * of QPs or of the packets' contents; the transport knows nothing of
 * sockets. docs/architecture.md has the layers.
 *
 * Threading: send_batch may be called by several threads at once (each
 * with its own packets); recv_batch by one thread at a time (the
 * transport's rx_lock), and what it returns stays valid until that
 * thread's next recv_batch.
 */
#ifndef URVT_LINK_LINK_H
#define URVT_LINK_LINK_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "wire/ip.h"

/* Where a datagram goes on a link (UDP: the peer's address, port 4791). */
union urvt_link_addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
};

/* One packet to send. */
struct urvt_link_tx {
	uint8_t *buf;                     /* writable: IPv4 GSO rewrites the ICRC */
	uint32_t len;
	const union urvt_link_addr *dst;
	/* filled in by send_batch: */
	uint16_t ip_id;                   /* the IPv4 ID it leaves with (0 unless GSO) */
	uint8_t fault;                    /* URVT_FAULT_F_* the fault injector applied */
};

/* One received datagram (or a GRO train of equal-size packets). */
struct urvt_link_rx {
	const uint8_t *data;
	uint32_t len;
	uint32_t seg;                     /* train: packets of seg bytes, the last may be
					     shorter; 0: one packet */
	bool trunc;                       /* larger than the receive buffer: drop */
	struct urvt_ipinfo ip;            /* addresses as GIDs, ports, TOS/TTL; IPv4 ID unknown */
};

/* What the link bound: the device's address and its interface. */
struct urvt_link_info {
	int family;                       /* AF_INET or AF_INET6 */
	struct in6_addr addr6;            /* the GID: IPv4 stored v4-mapped */
	unsigned int ifindex;
	char ifname[32];
	int if_mtu;                       /* the interface's MTU; 0 if unknown */
};

struct urvt_link;

struct urvt_link_ops {
	const char *name;
	/* Send n packets, in order. Never blocks for long; a packet the host
	 * cannot take is lost (RC recovers it). Returns the number lost. */
	unsigned (*send_batch)(struct urvt_link *l, struct urvt_link_tx *pkts, unsigned n);
	/* Receive up to max datagrams without blocking; returns how many. */
	int (*recv_batch)(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max);
	/* Send what is held back (fault injection), release everything. */
	void (*close)(struct urvt_link *l);
};

struct urvt_link {
	const struct urvt_link_ops *ops;
	struct urvt_link_info info;
	int wake_fd;                      /* readable when recv_batch has data; -1: none */
	bool faults;                      /* send_batch may set urvt_link_tx.fault */
};

static inline unsigned urvt_link_send(struct urvt_link *l, struct urvt_link_tx *p, unsigned n)
{
	return l->ops->send_batch(l, p, n);
}

static inline int urvt_link_recv(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max)
{
	return l->ops->recv_batch(l, rx, max);
}

static inline void urvt_link_close(struct urvt_link *l)
{
	if (l)
		l->ops->close(l);
}

static inline socklen_t urvt_link_addr_len(const union urvt_link_addr *a)
{
	return a->sa.sa_family == AF_INET ? sizeof(a->in4) : sizeof(a->in6);
}

#endif
