/*
 * Transport counters (docs/usage.md "Counters"). One table of 64-bit
 * counters per device and per QP, in a shared-memory file
 * /dev/shm/urvt.<pid> that tools/urvt-stat maps read-only. Layout below is
 * the interface: bump URVT_STATS_VERSION when it changes.
 */
#ifndef URVT_TRANSPORT_STATS_H
#define URVT_TRANSPORT_STATS_H

#include <stdint.h>

#include "wire/drop.h"

#define URVT_STATS_MAGIC 0x75727673u /* "urvs" */
#define URVT_STATS_VERSION 10
#define URVT_STATS_QP_SLOTS 1024   /* per-QP tables; QPs beyond share none */
#define URVT_STATS_LINKS 2         /* per-link counter pairs (URVT_CTR_LINK_PKTS) */

/* Drop reasons past the wire decoder's (enum urvt_wire_drop). */
enum urvt_tp_drop {
	URVT_TDROP_BAD_STATE = URVT_DROP_NUM, /* QP state does not accept it (rc-protocol §3) */
	URVT_TDROP_NO_BUF,                    /* packet pool exhausted */
	URVT_TDROP_RXQ_FULL,                  /* completer queue of the QP full */
	URVT_TDROP_OVERSIZE,                  /* datagram larger than a packet buffer */
	URVT_TDROP_MCAST,                     /* multicast QPN: not supported */
	URVT_TDROP_STALE_RESP,                /* no WQE waits for it (rc-protocol §4 step 1) */
	URVT_TDROP_BAD_RESP,                  /* response out of sequence / wrong PSN */
	URVT_TDROP_RESP_SILENT,               /* responder silent drops (UC/UD rules, dup READ unknown) */
	URVT_TDROP_NUM
};

enum urvt_ctr {
	URVT_CTR_TX_PKTS,
	URVT_CTR_TX_BYTES,
	URVT_CTR_RX_PKTS,
	URVT_CTR_RX_BYTES,
	URVT_CTR_TX_ERRORS,          /* packets a link could not take (lost locally) */
	URVT_CTR_RETRANSMITS,        /* request packets sent again after a rewind */
	URVT_CTR_TIMEOUTS,           /* retransmit timer expiries that rewound */
	URVT_CTR_PROBES,             /* tail-loss probes (one packet resent early) */
	URVT_CTR_RETRY_EXC,
	URVT_CTR_RNR_RETRY_EXC,
	URVT_CTR_ACKS_SENT,
	URVT_CTR_ACKS_RCVD,
	URVT_CTR_RNR_NAKS_SENT,
	URVT_CTR_RNR_NAKS_RCVD,
	URVT_CTR_DUP_REQUESTS,       /* duplicate requests seen by the responder */
	URVT_CTR_SEQ_ERRORS,         /* PSN gaps seen by the responder */
	URVT_CTR_NAK_SENT_SEQ,
	URVT_CTR_NAK_SENT_INV,
	URVT_CTR_NAK_SENT_ACCESS,
	URVT_CTR_NAK_SENT_OP,
	URVT_CTR_NAK_RCVD_SEQ,
	URVT_CTR_NAK_RCVD_INV,
	URVT_CTR_NAK_RCVD_ACCESS,
	URVT_CTR_NAK_RCVD_OP,
	URVT_CTR_FAULT_DROP,
	URVT_CTR_FAULT_DUP,
	URVT_CTR_FAULT_REORDER,
	URVT_CTR_FAULT_CORRUPT,
	URVT_CTR_FAULT_DELAY,
	/* per link: what each one carried, sent then received, for
	 * URVT_STATS_LINKS links; a link's pair is the one whose names start
	 * with its name (stats.c urvt_ctr_name, urvt_stats_link_slot) */
	URVT_CTR_LINK_PKTS,
	URVT_CTR_LINK_PKTS_END = URVT_CTR_LINK_PKTS + 2 * URVT_STATS_LINKS - 1,
	URVT_CTR_CC_LOSS,            /* congestion window cuts for loss (cc.c) */
	URVT_CTR_CC_DELAY,           /* ... for queueing delay */
	URVT_CTR_CC_STALLS,          /* requester runs held back by a window */
	URVT_CTR_CC_UNDO,            /* timeout cuts undone (the timeout was spurious) */
	URVT_CTR_ACK_SKIPS,          /* resends skipped: an ACK passed the resend cursor */
	URVT_CTR_XRC_BAD_SRQ,        /* XRC requests naming no SRQ of the target's domain */
	URVT_CTR_OOO_HELD,           /* RC requests held past a PSN gap (resp.c) */
	URVT_CTR_OOO_EXECUTED,       /* ... executed once the gap was filled */
	URVT_CTR_RX_BY_APP,          /* who receives (poll.c): datagrams an application's verb read */
	URVT_CTR_RX_BY_PROGRESS,     /* ... the progress thread read */
	URVT_CTR_RX_APP_TAKES,       /* the application took the link from the progress thread */
	URVT_CTR_RX_GIVE_LEAVER,     /* ... gave it back: it waits elsewhere after its completions */
	URVT_CTR_RX_GIVE_WATCHDOG,   /* ... taken back: no poll_cq for the watchdog's time */
	URVT_CTR_RX_GIVE_BLOCKS,     /* ... gave it back: it will block (req_notify_cq) */
	URVT_CTR_RX_WAITS,           /* sleeps of a thread in ibv_get_cq_event on the links */
	URVT_CTR_RX_BY_WAITER,       /* packets that thread received (poll.c urvt_net_wait_event) */
	URVT_CTR_ACKS_WAITED,        /* plain ACKs that waited for the application's next send (tx.c) */
	URVT_CTR_ACKS_REPLACED,      /* ... and were replaced by a later one to the same QP */
	URVT_CTR_COMP_DIRECT,        /* READ response PMTUs the receiving thread completed from the ring (engine.c) */
	URVT_CTR_ACKS_COALESCED,     /* plain ACKs not sent: a later one of the same receive batch covers them (resp.c) */
	URVT_CTR_RX_LATE_NO_WRITE,   /* verbs late after completions, with no WRITE in between: not a leave (poll.c) */
	URVT_CTR_CMA_REFS_SENT,      /* READ answers by reference sent (resp.c; docs/shm.md "Single copy") */
	URVT_CTR_CMA_REF_BYTES,      /* ... the READ bytes they stood for (read by the requester or pushed) */
	URVT_CTR_CMA_PULLS,          /* answers by reference read from the responder's process (comp.c) */
	URVT_CTR_CMA_BYTES,          /* ... their bytes */
	URVT_CTR_CMA_FAILS,          /* ... that could not be read: the READ is asked for again with data */
	URVT_CTR_CMA_PUSHES,         /* READ bytes written into the requester's process (resp.c) */
	URVT_CTR_CMA_PUSH_BYTES,     /* ... their bytes */
	URVT_CTR_CMA_PUSH_READS,     /* READs a push of a batch wrote whole (resp.c reads_pay) */
	URVT_CTR_FWD_OUT,            /* a shared address (docs/host-identity.md): datagrams
					which the kernel steered to us, forwarded to their process */
	URVT_CTR_FWD_IN,             /* ... forwarded to us by another process */
	URVT_CTR_FWD_LOST,           /* ... that could not be forwarded (process gone, queue full) */
	URVT_CTR_DROP_BASE,          /* + reason (enum urvt_wire_drop / urvt_tp_drop) */
	URVT_CTR_NUM = URVT_CTR_DROP_BASE + URVT_TDROP_NUM
};

/* The packets link slot s sent, and received. */
#define URVT_CTR_LINK_TX(s) ((enum urvt_ctr)(URVT_CTR_LINK_PKTS + 2 * (s)))
#define URVT_CTR_LINK_RX(s) ((enum urvt_ctr)(URVT_CTR_LINK_PKTS + 2 * (s) + 1))

struct urvt_ctrs {
	uint64_t v[URVT_CTR_NUM];
};

struct urvt_stats_qp {
	uint32_t qpn;                 /* valid when in_use or ever used */
	uint32_t in_use;              /* 1 while the QP lives */
	uint32_t type;                /* enum ibv_qp_type */
	uint32_t pad;
	struct urvt_ctrs c;
};

struct urvt_stats_file {
	uint32_t magic;
	uint32_t version;
	uint32_t ncounters;           /* URVT_CTR_NUM */
	uint32_t nslots;              /* URVT_STATS_QP_SLOTS */
	uint32_t pid;
	uint32_t family;              /* AF_INET / AF_INET6 */
	uint8_t gid[16];
	char ifname[32];
	uint64_t start_ns;            /* CLOCK_REALTIME at creation */
	uint64_t pad[4];
	struct urvt_ctrs dev;
	struct urvt_stats_qp qp[URVT_STATS_QP_SLOTS];
};

/* Counter names for printing (stats.c). */
extern const char *const urvt_ctr_name[URVT_CTR_NUM];
/* The link slot of the link named link_name (its ops->name: its counters
 * are <link_name>_tx_packets and _rx_packets), or -1: the file has none. */
int urvt_stats_link_slot(const char *link_name);

static inline void urvt_ctr_add(struct urvt_ctrs *c, enum urvt_ctr i, uint64_t n)
{
	__atomic_fetch_add(&c->v[i], n, __ATOMIC_RELAXED);
}

/* A counter that one thread at a time writes (a QP's and the device's
 * receive counters: the receiving thread holds rx_lock): a plain add, no
 * locked instruction per packet; readers still see whole values. */
static inline void urvt_ctr_add_rx(struct urvt_ctrs *c, enum urvt_ctr i, uint64_t n)
{
	__atomic_store_n(&c->v[i], __atomic_load_n(&c->v[i], __ATOMIC_RELAXED) + n,
			 __ATOMIC_RELAXED);
}

#endif
