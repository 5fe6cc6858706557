/*
 * The link interface: how the transport moves whole RoCEv2 packets (BTH to
 * ICRC) between devices. One implementation per medium: the UDP socket
 * (udp.c) and the same-host shared-memory link (shm.c). A link knows nothing
 * of QPs or of the packets' contents; the transport knows nothing of
 * sockets, and nothing of which links exist: it sees their properties
 * (struct urvt_link), their ops and their name, which names their
 * counters. links.h opens a device's links. docs/architecture.md has the
 * layers.
 *
 * Threading: send_batch may be called by several threads at once (each
 * with its own packets); recv_batch by one thread at a time (the
 * transport's rx_lock), and what it returns stays valid until that
 * thread's next recv_batch. A link whose memory the receiver reads
 * (builds_in_place) also lets the sender build a packet in place: tx_reserve, tx_commit,
 * then tx_kick once for the packets of a batch.
 */
#ifndef URVT_LINK_LINK_H
#define URVT_LINK_LINK_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "wire/hdr.h"
#include "wire/ip.h"

/* A peer of a link that keeps its own peers (resolve hands it out): the
 * family of its link address. */
#define URVT_LINK_AF_PEER AF_UNIX

/* resolve's qpn when the destination QPN is not known (an address handle:
 * each UD work request names its own). */
#define URVT_LINK_QPN_ANY 0xffffffffu

/* resolve and lookup's positive answer: the peer found owns every QPN of
 * the GID (a process without a host registry slot, docs/shm.md), so the
 * address is good for any QPN there; 0: for the QPNs of the slot of the
 * QPN asked (qpn >> 16) only. */
#define URVT_LINK_REACH_GID 1

/* Where a datagram goes on a link (UDP: the peer's address, port 4791; a
 * link with its own peers: an opaque handle that only that link reads). */
union urvt_link_addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
	struct {
		sa_family_t family;       /* URVT_LINK_AF_PEER */
		uint16_t id;              /* the link's, opaque; equal ids: one peer */
	} peer;
};

/* How long a sender waits for room on a lossless link: as the receive
 * path may (RX), as a sender that holds nothing the receiver needs may
 * (PATIENT: urvt_link_tx.patient), or not at all (NOW: a sender that has
 * another way, transport/req.c urvt_ud_send_direct). */
enum urvt_tx_wait { URVT_TX_WAIT_RX = 0, URVT_TX_WAIT_PATIENT = 1, URVT_TX_WAIT_NOW = 2 };

/* One packet to send. */
struct urvt_link_tx {
	uint8_t *buf;                     /* writable: IPv4 GSO rewrites the ICRC */
	uint32_t len;
	const union urvt_link_addr *dst;
	/* a lossless link may hold the sender back for as long as the
	 * receiver keeps draining (not only briefly): a sender that holds
	 * nothing the receiver needs (docs/shm.md "The rings") */
	bool patient;
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
	bool no_icrc;                     /* a lossless link's packet: no ICRC to check */
	bool shared;                      /* data is memory the sender can still write:
					     copy what is parsed, read it once */
	bool spans;                       /* from a link whose sender may join a request's
					     PMTUs into one packet (tx_span) */
	int cma_pid;                      /* the sending process, whose memory this
					     process may read (process_vm_readv) where
					     a packet says so (urvt_link.cma); 0: none */
	struct urvt_ipinfo ip;            /* addresses as GIDs, ports, TOS/TTL; IPv4 ID unknown */
};

/* What the link bound: the device's address and its interface. */
struct urvt_link_info {
	int family;                       /* AF_INET or AF_INET6 */
	struct in6_addr addr6;            /* the GID: IPv4 stored v4-mapped */
	unsigned int ifindex;
	char ifname[32];
	int if_mtu;                       /* the interface's MTU; 0 if unknown */
	uint8_t slot;                     /* the address is shared: our QPNs are
					     slot << 16 | n (docs/host-identity.md); 0: not */
};

struct urvt_link;

struct urvt_link_ops {
	const char *name;
	/* Send n packets, in order. Never blocks for long; a packet the host
	 * cannot take is lost (RC recovers it). Returns the number lost. */
	unsigned (*send_batch)(struct urvt_link *l, struct urvt_link_tx *pkts, unsigned n);
	/* Receive up to max datagrams without blocking; returns how many. */
	int (*recv_batch)(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max);
	/* Can this link reach the process that owns QPN qpn of the device
	 * whose GID this is (processes of one host may share a GID: the QPN
	 * names one; URVT_LINK_QPN_ANY: unknown)? 0 or URVT_LINK_REACH_GID
	 * and its link address, or a negative errno (another link must carry
	 * it). May make system calls: called when an address vector is set
	 * up, never per packet. */
	int (*resolve)(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn,
		       union urvt_link_addr *out);
	/* Optional, with resolve_later: resolve's answer if it is known
	 * already (a peer connected), else -ENOENT. No system call, no lock
	 * that can block: called per UD work request whose QPN is of another
	 * slot than its address handle's route. */
	int (*lookup)(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn,
		      union urvt_link_addr *out);
	/* Optional: lookup found nothing; resolve it in the background
	 * (service, on the progress thread) so that a later lookup may. No
	 * blocking; at most one system call (a doorbell) per destination
	 * and retry period, none when it was asked already. */
	void (*resolve_later)(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn);
	/* Optional: the caller stops polling and will sleep on wake_fd; make
	 * sure wake_fd becomes readable when data comes (at once if some is
	 * there already). */
	void (*arm)(struct urvt_link *l);
	/* Optional: wake_fd was readable; consume the wake-up. */
	void (*ack_wake)(struct urvt_link *l);
	/* Optional: ctl_fd is readable (progress thread): peers come and go. */
	void (*service)(struct urvt_link *l);
	/* Optional, for a cheap_poll link: is anything waiting? No system
	 * call, no side effect (a poller looks before it takes the receive
	 * lock). */
	bool (*pending)(struct urvt_link *l);
	/* Optional: room for one packet of up to maxlen bytes to dst, built in
	 * place, or NULL: no room in time or no peer (the packet is lost).
	 * The caller then holds dst's send lock until tx_commit: it builds
	 * that one packet and takes no other lock. wait: enum urvt_tx_wait. */
	uint8_t *(*tx_reserve)(struct urvt_link *l, const union urvt_link_addr *dst,
			       uint32_t maxlen, unsigned wait);
	/* Optional, with tx_reserve: payload bytes one request packet to any
	 * peer may carry now, several PMTUs of one message joined (a span,
	 * docs/shm.md "Spans"); tx_reserve then takes up to that plus
	 * URVT_HDR_MAX, pad and ICRC. 0 or less than a PMTU: one PMTU per
	 * packet. No system call, no lock. */
	uint32_t (*tx_span)(struct urvt_link *l);
	/* The reserved packet is complete, len bytes: the receiver may take it. */
	void (*tx_commit)(struct urvt_link *l, const union urvt_link_addr *dst, uint32_t len);
	/* After the commits of a batch: wake dst's receiver if it sleeps
	 * (once per peer: urvt_link_peer_same). */
	void (*tx_kick)(struct urvt_link *l, const union urvt_link_addr *dst);
	/* Optional, with cma (docs/shm.md "Single copy"): the epoch a push of
	 * READ data from dst into our memory must name now (urvt_cma_push). */
	uint32_t (*cma_epoch)(struct urvt_link *l, const union urvt_link_addr *dst);
	/* Optional, with cma: no push from dst named an earlier epoch lands
	 * after this returns (a READ that asked for one ends without its
	 * answer: its memory is the application's again). May wait for a
	 * push under way, bounded. */
	void (*cma_fence)(struct urvt_link *l, const union urvt_link_addr *dst);
	/* Optional, with cma: write len bytes from local (nl segments) into
	 * the memory of dst's process at remote (nr segments), in one system
	 * call, if epoch is still its epoch. true if every byte was written. */
	bool (*cma_push)(struct urvt_link *l, const union urvt_link_addr *dst, uint32_t epoch,
			 const struct iovec *local, unsigned nl, const struct iovec *remote,
			 unsigned nr, size_t len);
	/* Optional: receive what is sent to multicast group gid (0 or a
	 * negative errno), or stop receiving it. Slow path. */
	int (*mcast_join)(struct urvt_link *l, const uint8_t gid[16]);
	void (*mcast_leave)(struct urvt_link *l, const uint8_t gid[16]);
	/* Optional: hand over (on) or not each datagram's IP traffic class
	 * and hop limit, which only a UD receiver's GRH shows; without them a
	 * receive costs less (urvt_link_rx.ip then has 0 and 64). Slow path. */
	void (*ip_facts)(struct urvt_link *l, bool on);
	/* Optional: count forwarding among the host's processes from now on
	 * into ctrs[0] (out), ctrs[1] (in), ctrs[2] (lost), with relaxed
	 * atomic adds (link/udp_share.h). */
	void (*count_into)(struct urvt_link *l, uint64_t *ctrs);
	/* Send what is held back (fault injection), release everything. */
	void (*close)(struct urvt_link *l);
};

struct urvt_link {
	const struct urvt_link_ops *ops;
	struct urvt_link_info info;
	int wake_fd;                      /* readable when recv_batch has data; -1: none */
	int ctl_fd;                       /* watched always (service); -1: none */
	bool faults;                      /* send_batch may set urvt_link_tx.fault */
	bool lossless;                    /* nothing is lost, reordered or corrupted in transit:
					     the sender may leave the ICRC out */
	bool cheap_poll;                  /* an empty recv_batch makes no system call */
	bool builds_in_place;             /* tx_reserve, tx_commit and tx_kick are there */
	bool reaches_any;                 /* every GID is an address (resolve never fails) */
	bool cma;                         /* a peer's packets may refer to its memory:
					     urvt_link_rx.cma_pid (docs/shm.md
					     "Single copy") */
	bool cma_push;                    /* ... and its READ requests may ask for pushes
					     (cma_epoch, cma_fence, cma_push) */
};

static inline unsigned urvt_link_send(struct urvt_link *l, struct urvt_link_tx *p, unsigned n)
{
	return l->ops->send_batch(l, p, n);
}

static inline int urvt_link_recv(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max)
{
	return l->ops->recv_batch(l, rx, max);
}

static inline int urvt_link_resolve(struct urvt_link *l, const uint8_t gid[16], uint32_t qpn,
				    union urvt_link_addr *out)
{
	return l->ops->resolve(l, gid, qpn, out);
}

static inline void urvt_link_arm(struct urvt_link *l)
{
	if (l->ops->arm)
		l->ops->arm(l);
}

static inline bool urvt_link_pending(struct urvt_link *l)
{
	return !l->ops->pending || l->ops->pending(l);
}

static inline void urvt_link_close(struct urvt_link *l)
{
	if (l)
		l->ops->close(l);
}

static inline socklen_t urvt_link_addr_len(const union urvt_link_addr *a)
{
	return a->sa.sa_family == AF_INET ? sizeof(a->in4) :
	       a->sa.sa_family == AF_INET6 ? sizeof(a->in6) : sizeof(a->peer);
}

/* Two peer handles (family URVT_LINK_AF_PEER) of one link: the same peer? */
static inline bool urvt_link_peer_same(const union urvt_link_addr *a,
				       const union urvt_link_addr *b)
{
	return a->peer.id == b->peer.id;
}

/* The same destination: family, address and port (a peer's handle). */
static inline bool urvt_link_addr_same(const union urvt_link_addr *a,
				       const union urvt_link_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return false;
	if (a->sa.sa_family == AF_INET)
		return a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr &&
		       a->in4.sin_port == b->in4.sin_port;
	if (a->sa.sa_family == AF_INET6)
		return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16) &&
		       a->in6.sin6_port == b->in6.sin6_port &&
		       a->in6.sin6_scope_id == b->in6.sin6_scope_id;
	return a->peer.id == b->peer.id;
}

/* A reaches_any link's address of a GID (RoCEv2: the GID is the device's
 * IP address): its IPv4 (v4-mapped) or IPv6 address, port 4791. A few
 * stores, no lookup: the transport calls it per packet. */
static inline void urvt_link_gid_addr(const uint8_t gid[16], union urvt_link_addr *sa)
{
	if (urvt_gid_is_v4(gid)) {
		sa->in4 = (struct sockaddr_in){ .sin_family = AF_INET,
						.sin_port = htons(URVT_ROCE_UDP_PORT) };
		memcpy(&sa->in4.sin_addr, gid + 12, 4);
	} else {
		sa->in6 = (struct sockaddr_in6){ .sin6_family = AF_INET6,
						 .sin6_port = htons(URVT_ROCE_UDP_PORT) };
		memcpy(&sa->in6.sin6_addr, gid, 16);
	}
}

#endif
