/*
 * The RoCEv2 transport: internal interfaces between its parts (net.c the
 * device state, pool.c packet buffers, counters.c, tx.c transmit queues,
 * rx.c receive batches, poll.c who receives, recv.c classification,
 * engine.c the send engine, req.c requester, comp.c completer, resp.c
 * responder). See docs/transport.md for the threading model.
 */
#ifndef URVT_TRANSPORT_TP_H
#define URVT_TRANSPORT_TP_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/biaslock.h"
#include "base/progress.h"
#include "core/rvt.h"
#include "link/link.h"
#include "link/links.h"
#include "transport/stats.h"
#include "transport/tp_qp.h"
#include "wire/hdr.h"
#include "wire/ip.h"

struct urvt_pcap;
struct urvt_cc_table;

/* Largest UDP payload a packet buffer holds: PMTU 4096 + headers + pad + ICRC. */
#define URVT_PKT_MAX (4096 + 64)
#define URVT_PKTBUF_DATA 4224
/* The largest span a link may ask for (link.h tx_span), with headers: a
 * bound for the transmit queue, which builds a lost one */
#define URVT_SPAN_PKT_MAX (64u << 10)

/* A received packet handed to a QP's completer (tp.rxq). */
struct urvt_pktbuf {
	struct urvt_pktbuf *next;
	struct urvt_pkt pkt;              /* parsed; pointers into data[] */
	uint32_t len;
	uint8_t data[URVT_PKTBUF_DATA] __attribute__((aligned(64)));
};

/* Send WQE flags owned by the transport (bits 8+ of wqe_flags; post clears them). */
enum {
	RVT_SWQE_T_SENT = 1 << 8,         /* every packet sent at least once (rc-protocol §2.1 pending) */
	RVT_SWQE_T_CREDIT = 1 << 9,       /* holds an rd_atomic credit (rc-protocol §2.2) */
	RVT_SWQE_T_CMA = 1 << 10,         /* a READ that asked for answers by reference
					     (counted in cma_reads) */
};

/* The engine sets its flag bits with a relaxed atomic store: a dereg reads
 * wqe_flags from another thread (core/qp.c sends_have_mr, for the
 * poster's bits, set before the WQE was published); TSan saw the plain
 * |= race with that read. */
static inline void wqe_flags_set(struct rvt_swqe *wqe, uint16_t f)
{
	__atomic_store_n(&wqe->wqe_flags, (uint16_t)(wqe->wqe_flags | f), __ATOMIC_RELAXED);
}

/* Per-QP completer queue bound. */
#define URVT_RXQ_MAX 1024
/* rc-protocol §2.2: RXE_MAX_UNACKED_PSNS */
#define URVT_MAX_UNACKED_PSNS 128
/* rc-protocol §2.3 / roce-wire §10: rxe asks for an ACK every 64 packets
 * (RXE_MAX_PKT_PER_ACK); urvt every 32 and on the packet that fills the
 * window, so one lost ACK does not stall a full window until the timeout. */
#define URVT_MAX_PKT_PER_ACK 32

/*
 * Transmit queue: packets built back to back in one buffer, handed to the
 * link in one urvt_link_send (the UDP link sends consecutive equal-size
 * packets to one peer as one GSO send). One per thread (TLS), so engines
 * on different threads never share.
 */
#ifndef URVT_TXQ_BYTES
#define URVT_TXQ_BYTES (256 * 1024)
#endif
#define URVT_TXQ_PKTS 128

/* Plain ACKs that wait for the application's next send (tx.c "ACKs
 * that wait"): at most this many, each at most this long. */
#define URVT_WAIT_ACKS 16
#define URVT_WAIT_ACK_BYTES 32
/* QPs of one receive batch that owe an ACK (resp.c "ACKs of a batch") */
#define URVT_ACKS_DUE 16
/* READs a receive batch answers at its end, at most (resp.c "READs of a
 * batch"): more than a requester keeps in flight (UCX asks 8 at a time) */
#define URVT_READS_DUE 16

/* Datagrams one receive batch takes from a link. */
#define URVT_RX_BATCH 32

/* The device's links (link/links.h): links[0] reaches any GID and is
 * addressed by it (av->route 0); the others reach some peers only, are
 * tried first (av_resolve) and address a peer by the handle their
 * resolve gave (av->route: urvt_route). */
#define URVT_LINKS URVT_LINKS_MAX
#define URVT_LINK_ANY 0                   /* links[0]: reaches any GID */

/* av->route of link k's peer (k > 0), and back. */
static inline uint32_t urvt_route(unsigned k, uint16_t peer)
{
	return (uint32_t)k << 16 | peer;
}

static inline unsigned urvt_route_link(uint32_t route)
{
	return route >> 16;
}

/* urvt_av.route_slot when the route is good for every QPN of the GID (a
 * peer without a host registry slot owns them all, or no link but
 * links[0] can reach anyone); a slot is 0..255. */
#define URVT_ROUTE_SLOT_ANY 0x100

/* Where a queued packet is: in the queue's buffer, or built in the
 * link's own memory (builds_in_place: committed there already), or nowhere
 * (the link had no room for it: lost). */
enum urvt_txpkt_where { URVT_TXPKT_QUEUED, URVT_TXPKT_IN_LINK, URVT_TXPKT_LOST };

struct urvt_txpkt {
	uint32_t off, len;
	union urvt_link_addr dst;
	uint8_t link;                     /* index in net->links */
	uint8_t where;                    /* enum urvt_txpkt_where */
	bool may_wait;                    /* a plain ACK: may wait for the next send (tx.c) */
	struct urvt_stats_qp *qs;
	uint8_t dgid[16];                 /* for URVT_PCAP only */
};

struct urvt_txq {
	uint32_t used, n;
	/* the packet between urvt_build_start and _finish */
	const struct urvt_av *cur_av;
	uint8_t cur_where;                /* enum urvt_txpkt_where */
	uint32_t cur_cap;                 /* ... may take this many bytes */
	bool cur_may_wait;                /* ... is a plain ACK (urvt_txq_next_may_wait) */
	/* the last packet queued, when the next of its message can be built
	 * from it (urvt_build_next_middle): a BTH-only packet to UDP of this
	 * QP, q->used just after it, its ICRC register after the BTH */
	const struct rvt_qp *tmpl_qp;
	uint32_t tmpl_end, tmpl_crc;
	struct urvt_txq *all_prev, *all_next; /* every thread's queue (tx.c) */
	/* the QPs this thread's receive batch owes an ACK (resp.c), by QPN:
	 * looked up again at the batch's end, a reset or destroy may come first */
	uint32_t ack_due_n;
	struct {
		struct rvt_dev_info *rdi;
		uint32_t qpn;
	} ack_due[URVT_ACKS_DUE];
	/* the READs this thread's receive batch answers at its end (resp.c
	 * "READs of a batch"), in arrival order, each holding its QP and its
	 * MR: the answers must go out before anything else their QPs say */
	uint32_t read_due_n;
	struct urvt_read_due {
		struct rvt_qp *qp;
		struct rvt_sge sge;
		uint32_t len, psn;
		struct urvt_cma_push push;
	} read_due[URVT_READS_DUE];
	struct urvt_txpkt pkt[URVT_TXQ_PKTS];
	uint8_t buf[URVT_TXQ_BYTES] __attribute__((aligned(64)));
};

/* The device's transport (rdi->transport_priv). */
/* while an application owns the socket, the watchdog looks this often
 * at first; each look that finds it still polling doubles the period, up
 * to URVT_WATCHDOG_BACKOFF times it (poll.c "Who receives") */
#define URVT_WATCHDOG_NS 2000000
#define URVT_WATCHDOG_BACKOFF 8
/* ACKs that wait (tx.c): the score a device starts with */
#define URVT_WAIT_SCORE_START 4

struct urvt_net {
	struct rvt_dev_info *rdi;
	struct urvt_link *links[URVT_LINKS]; /* opened by attach.c, closed after us */
	unsigned nlinks;
	/* link k's counters: link_ctr[k] its packets sent, + 1 received
	 * (stats.h URVT_CTR_LINK_TX, found by the link's name) */
	enum urvt_ctr link_ctr[URVT_LINKS];
	/* a cheap_poll link other than links[0] (polled at every poll, and
	 * links[0] backs off beside it: poll.c) */
	bool cheap_beside;
	struct urvt_ipinfo ip_tmpl;       /* our side of what we send: sgid, ports */

	/* packet pool: a free stack under pool_lock */
	struct {
		urvt_spinlock_t pool_lock;
		struct urvt_pktbuf **pool_free;
		uint32_t pool_n, pool_cap;
	} __attribute__((aligned(64)));
	struct urvt_pktbuf *pool_mem;

	/* the receive side: one thread at a time (rx_lock: urvt_rx_trylock) */
	struct urvt_biaslock rx_lock;
	struct urvt_link_rx *rx;          /* URVT_RX_BATCH slots */
	/* RDMA WRITEs that complete nothing (recv.c; written under rx_lock) */
	_Atomic uint32_t rx_mem_writes;   /* last packets of such messages */
	_Atomic uint32_t rx_mem_pkts;     /* their other packets */
	/* application pollers (poll.c "Who receives"); written by the
	 * application's threads without read-modify-writes: a lost update
	 * only delays a heuristic */
	struct {
		_Atomic uint32_t app_polls;       /* poll_cq calls (the watchdog compares) */
		_Atomic uint32_t app_run;         /* empty polls in the current run */
		_Atomic uint64_t app_run_ns;      /* when the run started */
		_Atomic uint32_t app_skip;        /* polls left before asking the socket again */
		uint32_t udp_idle;                /* the last skip, backing off (rx_lock) */
		uint64_t udp_rx_seen;             /* udp_rx_packets at the last ask (rx_lock) */
		uint64_t udp_rx_cyc;              /* when an ask first saw them changed (urvt_cycles) */
		/* what the cheap_poll links beside links[0] received, at the
		 * last ask (rx_lock), and when an ask first saw it changed
		 * (urvt_cycles) */
		uint64_t beside_rx_seen;
		uint64_t beside_rx_cyc;
		uint64_t quiet_cyc;               /* APP_QUIET_NS in urvt_cycles (poll.c) */
		_Atomic uint64_t udp_ask_cyc;     /* the last ask of the socket (urvt_cycles) */
		uint64_t ask_gap_cyc;             /* APP_ASK_GAP_NS in urvt_cycles (poll.c) */
		_Atomic uint32_t app_leave;       /* leave score: the app waits elsewhere */
		_Atomic uint64_t app_ret_cyc;     /* a poll returned completions, urvt_cycles (0: came back since) */
		_Atomic uint32_t app_ret_writes;  /* ... rx_mem_writes then */
		uint64_t app_leave_cyc;           /* APP_LEAVE_NS in urvt_cycles (poll.c) */
		uint64_t app_leave_poll_cyc;      /* APP_LEAVE_POLL_NS in urvt_cycles (poll.c) */
		_Atomic bool take_next;           /* the next empty poll takes the socket */
		_Atomic uint32_t app_linger;      /* linger score: lingering caught WRITEs */
		_Atomic uint32_t app_linger_rest; /* returns since lingering was given up */
		/* rx_mem_writes at the first poll_cq after the application's
		 * last completions (app_writes_fresh: take it at the next) */
		_Atomic uint32_t app_writes;
		_Atomic bool app_writes_fresh;
	} __attribute__((aligned(64)));
	/* ACKs that wait for the application's next send (tx.c), under
	 * rx_lock; wait_n is read without it to skip the lock */
	struct {
		_Atomic bool ack_wait;            /* URVT_ACK_WAIT (default on) */
		_Atomic uint32_t wait_n;
		/* do the application's sends follow its receives? +1 per
		 * wait a send ended, -2 per wait a batch ended; ACKs wait
		 * only above 0 (tx.c) */
		uint32_t wait_score;              /* from URVT_WAIT_SCORE_START */
		uint32_t wait_retry;              /* batches since the score hit 0 */
		struct urvt_wait_ack {
			uint32_t len;
			union urvt_link_addr dst;
			struct urvt_stats_qp *qs;
			uint8_t dgid[16];
			uint8_t buf[URVT_WAIT_ACK_BYTES];
		} wait_ack[URVT_WAIT_ACKS];
	};
	pthread_mutex_t facts_lock;       /* ud_qps and the UDP link's ip_facts */
	uint32_t ud_qps;                  /* UD QPs (GSI included) that exist */
	pthread_mutex_t watch_lock;       /* transitions of 'aside' (+ epoll_ctl), wd_* */
	_Atomic bool aside;               /* the progress thread is not watching the link */
	_Atomic uintptr_t taker;          /* the thread that took it (urvt_self), 0 while not aside */
	_Atomic bool wait_excl;           /* a channel has a waiter's watch (poll.c wait_setup) */
	struct urvt_net_wake {            /* the progress thread's watch on links[k]'s wake_fd */
		struct urvt_net *net;
		unsigned k;
	} wake[URVT_LINKS];
	bool wd_armed;                    /* the watchdog is pending */
	uint32_t wd_polls;                /* app_polls at the watchdog's last look */
	uint64_t wd_period_ns;            /* the watchdog's next period (backs off) */
	_Atomic uint64_t watchdog_ns;     /* its period: URVT_WATCHDOG_NS (tests stretch it) */
	struct urvt_timer watchdog;

	struct urvt_cc_table *cc;         /* congestion control: the peers (cc.c) */

	struct urvt_stats_file *stats;    /* counters (or a private copy) */
	bool stats_mapped;
	char stats_path[256];
	bool stats_keep;                  /* URVT_STATS_FILE: the file stays */

	struct urvt_pcap *pcap;

	/* progress-thread barrier for teardown */
	pthread_mutex_t bar_lock;
	pthread_cond_t bar_cond;
	bool bar_done;

	/* every device of the process, for the exit handler (net.c) */
	struct urvt_net *next_net;
	_Atomic bool exiting;             /* set under rx_lock: no more batches */
};

extern int urvt_debug;
#define URVT_DBG(...)                                                     \
	do {                                                              \
		if (unlikely(urvt_debug))                                 \
			urvt_dbg_printf(__VA_ARGS__);                     \
	} while (0)
void urvt_dbg_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* This thread is inside a receive batch. */
bool urvt_in_rx(void);
static inline struct urvt_net *qp_net(struct rvt_qp *qp)
{
	return qp->rdi->transport_priv;
}

/* An application thread calls a verb (post_send): it is not waiting elsewhere. */
void urvt_net_app_active(struct rvt_dev_info *rdi);

/* Engine or UD send: an application thread that posts is back from
 * wherever it waited since its last completions (poll.c "Who receives";
 * a send that came late made it a leaver). */
static inline void urvt_net_app_posts(struct rvt_qp *qp)
{
	if (unlikely(atomic_load_explicit(&qp_net(qp)->app_ret_cyc, memory_order_relaxed)) &&
	    !urvt_in_rx() && !urvt_progress_on_thread(qp->rdi->progress))
		urvt_net_app_active(qp->rdi);
}

/* The device's link named name (its ops->name), or NULL. Slow path. */
static inline struct urvt_link *urvt_net_link(const struct urvt_net *net, const char *name)
{
	for (unsigned k = 0; k < net->nlinks; k++)
		if (net->links[k] && !strcmp(net->links[k]->ops->name, name))
			return net->links[k];
	return NULL;
}

/* ---- counters ---- */
struct urvt_stats_qp *urvt_qp_stats(struct rvt_qp *qp);
/* Where QPs without a slot of their own count (of every device, any thread). */
extern struct urvt_stats_qp urvt_stats_overflow;
static inline void tp_count(struct urvt_net *net, struct urvt_stats_qp *qs, enum urvt_ctr c,
			    uint64_t n)
{
	urvt_ctr_add(&net->stats->dev, c, n);
	if (qs)
		urvt_ctr_add(&qs->c, c, n);
}
static inline void qp_count(struct rvt_qp *qp, enum urvt_ctr c, uint64_t n)
{
	tp_count(qp_net(qp), urvt_qp_stats(qp), c, n);
}
void urvt_stats_release(struct urvt_net *net, struct rvt_qp *qp);
/* counters.c: the counters file (or a private copy); 0 or -ENOMEM. */
int urvt_stats_init(struct urvt_net *net);
void urvt_stats_fini(struct urvt_net *net);

/* ---- pool.c ---- */
int urvt_pool_init(struct urvt_net *net);
void urvt_pool_fini(struct urvt_net *net);
struct urvt_pktbuf *urvt_pkt_alloc(struct urvt_net *net);
/* A buffer only while more than half the pool is free (for what may be
 * dropped instead: requests held past a PSN gap), else NULL. */
struct urvt_pktbuf *urvt_pkt_alloc_spare(struct urvt_net *net);
void urvt_pkt_free(struct urvt_net *net, struct urvt_pktbuf *b);
void urvt_pkt_free_list(struct urvt_net *net, struct urvt_pktbuf *b);

/* ---- tx.c ---- */
/* This thread's transmit queue (allocated on first use; NULL if out of memory). */
struct urvt_txq *urvt_txq_get(void);
/* This thread's transmit queue if it has one. */
struct urvt_txq *urvt_txq_peek(void);
/* core->av_resolve: the first link after links[0] that reaches the GID
 * and av->dqpn's owner, else links[0]; av->route_slot says for which
 * QPNs. */
void urvt_tp_av_resolve(struct rvt_dev_info *rdi, struct urvt_av *av);
/* A UD work request to qpn through av (a snapshot of its AH), whose route
 * is for another slot: a peer already connected there, else links[0] and
 * a connect in the background (no system call but, once per destination,
 * a doorbell: docs/shm.md "UD: a route per work request"). */
void urvt_tp_ud_reroute(struct urvt_net *net, struct urvt_av *av, uint32_t qpn);
/* The UD fast path: av's route is good for qpn (one compare when the
 * slots match). */
static inline bool urvt_av_route_fits(const struct urvt_av *av, uint32_t qpn)
{
	/* range 0xff is no process's (the multicast QPN's): any route will do */
	return likely(av->route_slot == qpn >> 16) || av->route_slot == URVT_ROUTE_SLOT_ANY ||
	       qpn >> 16 == 0xff;
}
/* core->mcast_join / mcast_leave: the groups of links[0]. */
int urvt_tp_mcast_join(struct rvt_dev_info *rdi, const union ibv_gid *gid);
void urvt_tp_mcast_leave(struct rvt_dev_info *rdi, const union ibv_gid *gid);
void urvt_txq_flush(struct urvt_net *net, struct urvt_txq *q);
/* Flush, except while this thread is inside a receive batch (which flushes
 * once at its end, so ACK-driven engine runs share one sendmmsg). */
void urvt_txq_flush_unless_rx(struct urvt_net *net, struct urvt_txq *q);
/* Between urvt_build_start and _finish: the packet is a plain ACK, which
 * may wait for the application's next send. */
void urvt_txq_next_may_wait(struct urvt_txq *q);
/* The end of a receive batch (caller holds rx_lock): what it queued on
 * this thread leaves, or waits (app; see tx.c "ACKs that wait"). */
void urvt_txq_batch_end(struct urvt_net *net, bool app);
/* The ACKs that wait leave now (wait: take rx_lock, else only if free). */
void urvt_net_acks_flush(struct urvt_net *net, bool wait);
/* Mark the start of a receive batch (returns the previous mark) and its end. */
bool urvt_rx_enter(void);
void urvt_rx_leave(bool was);

/*
 * rx_lock, biased for the thread that receives (base/biaslock.h): a busy
 * poller takes and leaves it with plain stores, not two locked
 * instructions a poll. Held while urvt_rx_trylock's answer is >= 0, left
 * with urvt_rx_unlock. A thread that holds it does not get it again (a
 * send from inside a batch that receives, as a pthread mutex's trylock
 * would refuse it: the fast way would let it in). note: a receiving take,
 * which counts towards owning the lock.
 */
struct urvt_rx_hold {
	int how;                  /* urvt_bias_try: 1 fast, 0 locked, -1 not held */
	struct urvt_net *outer;   /* another device's rx_lock this thread holds */
};
extern URVT_TLS struct urvt_net *urvt_rx_holder;
static inline struct urvt_rx_hold urvt_rx_trylock(struct urvt_net *net, bool note)
{
	struct urvt_rx_hold h = { -1, urvt_rx_holder };

	if (unlikely(h.outer == net))
		return h;
	h.how = urvt_bias_try(&net->rx_lock);
	if (h.how < 0)
		return h;
	if (!h.how && note)
		urvt_bias_note(&net->rx_lock);
	urvt_rx_holder = net;
	return h;
}
static inline void urvt_rx_unlock(struct urvt_net *net, struct urvt_rx_hold h)
{
	urvt_rx_holder = h.outer;
	urvt_bias_leave(&net->rx_lock, h.how > 0);
}
/* Waits for it (yielding the CPU, whose holder may be next to run). */
struct urvt_rx_hold urvt_rx_lock(struct urvt_net *net, bool note);

/* IP info of a packet we send to dst (for the ICRC): ID 0 + DF, port 4791 both ways. */
void urvt_net_tx_ipinfo(struct urvt_net *net, const struct urvt_av *av, struct urvt_ipinfo *ip);


/* ---- rx.c (caller holds rx_lock) ---- */
/* Take one batch from each link and process it; returns the datagrams read. */
int urvt_net_rx_batch(struct urvt_net *net);
/* The same for all links or only those whose empty poll costs no system
 * call; app: an application's poll (its plain ACKs may wait for its next
 * send). */
int urvt_net_rx_links(struct urvt_net *net, bool all, bool app);
/* Batches until the links (all, or only the cheap_poll ones:
 * urvt_net_rx_links) are empty, at most 64; the datagrams read. */
int urvt_net_rx_drain_links(struct urvt_net *net, bool all);
/* Any cheap_poll link has something waiting (no lock needed). */
bool urvt_net_rx_pending(struct urvt_net *net);

/* ---- poll.c ---- */
/* The progress thread starts / stops watching the link (create, destroy). */
int urvt_net_watch_start(struct urvt_net *net);
void urvt_net_watch_stop(struct urvt_net *net);

/* ---- net.c ---- */
/* Tests and fuzzers: put another link (a test double) in place of the UDP
 * link attach opened, before any traffic; returns the old one, which the
 * caller now owns. */
struct urvt_link *urvt_net_swap_link(struct urvt_net *net, struct urvt_link *link);
/* The process exits (an atexit handler; tests call it): every device's
 * waiting ACKs leave, then no receive batch runs (net->exiting). */
void urvt_net_exit_quiesce(void);
/* A UD QP is created (+1) or freed (-1): the UDP link hands over the IP
 * facts of their GRH (traffic class, hop limit) only while one exists. */
void urvt_net_ud_qps(struct urvt_net *net, int delta);

/* ---- recv.c ---- */
/*
 * Classify and dispatch one received packet (a UDP payload, or one segment
 * of a GRO train). ip holds the addresses (ID unknown for IPv4; the
 * recovered one is stored); flags URVT_RX_*. Requests run here; responses
 * are copied to a pool buffer for the QP's completer.
 *
 * held (NULL: none): the receive batch's QP reference. The packet's QP is
 * kept there for the next packet, whose lookup it spares when that one is
 * for the same QP (a GRO train is one QP's packets, most often); another
 * QPN releases it first, so one reference at most is held. The batch
 * releases it at its end (urvt_recv_release): a reset or destroy of that
 * QP waits for it (core/qp.c rvt_reset_qp), a batch at most.
 */
enum {
	URVT_RX_NO_ICRC = 1 << 0,         /* from a lossless link: it carries no ICRC */
	URVT_RX_SHARED = 1 << 1,          /* data is shared memory (link.h urvt_link_rx.shared) */
	URVT_RX_SPANS = 1 << 2,           /* a request may be a span (link.h urvt_link_rx.spans) */
};
void urvt_recv_pkt(struct urvt_net *net, const uint8_t *data, uint32_t len,
		   const struct urvt_ipinfo *ip, unsigned flags, int cma_pid, struct rvt_qp **held);
void urvt_recv_release(struct rvt_qp **held);

/* ---- req.c ---- */
void urvt_req_run(struct rvt_qp *qp, struct urvt_txq *q);
/* Restart sending at the oldest unretired WQE from comp_psn (rc-protocol §4.3 rewind). */
void urvt_req_rewind(struct rvt_qp *qp);
/* Tail-loss probe: resend the oldest unacknowledged packet with AckReq. */
void urvt_req_probe(struct rvt_qp *qp, struct urvt_txq *q);
/* Build and queue one UD packet. */
void urvt_ud_send(struct rvt_qp *qp, struct rvt_swqe *wqe);
/* core->ud_send_direct: the same for a WR posted to an idle, empty send
 * queue (wqe->ud_av is then the AH's own AV); false: nothing done. */
bool urvt_ud_send_direct(struct rvt_qp *qp, struct rvt_swqe *wqe);

/* ---- comp.c ---- */
/* Retire s_last with a status (rvt_send_complete) and keep the requester's
 * cursor consistent if s_cur moved with it. False if nothing was retired
 * (a reset landed: callers looping over WQEs must stop). */
bool urvt_retire(struct rvt_qp *qp, struct rvt_swqe *wqe, enum ibv_wc_status st);
void urvt_comp_pkt(struct rvt_qp *qp, const struct urvt_pkt *pkt);
/* A READ response of n PSNs (a span, docs/shm.md "Spans", or an answer by
 * reference, "Single copy"): is len bytes its length (each PMTU full but
 * the last of a LAST/ONLY)? Its piece j: the PMTU packet it stands for,
 * opcode and PSN as the responder would have sent them. */
bool urvt_span_len_ok(uint8_t opcode, uint32_t len, uint32_t n, uint32_t pmtu);
void urvt_span_piece(const struct urvt_pkt *pkt, uint32_t j, uint32_t pmtu, struct urvt_pkt *o);
void urvt_comp_timeout(struct rvt_qp *qp, struct urvt_txq *q);
void urvt_comp_flush(struct rvt_qp *qp);
/* Arm the retransmit timer if anything is unacknowledged and it is not armed. */
void urvt_comp_arm_timer(struct rvt_qp *qp);

/* ---- engine.c ---- */
/* The engine entry point (transport->do_send): completer, timers, requester. */
void urvt_tp_do_send(struct rvt_qp *qp);
void urvt_tp_retry_timeout(struct rvt_qp *qp);
void urvt_tp_qp_reset(struct rvt_qp *qp);
/* Drop the responses queued for the completer. */
void urvt_rxq_drop(struct rvt_qp *qp);
/* Hand a response to the QP's completer and kick the engine (recv.c). */
void urvt_comp_enqueue(struct urvt_net *net, struct rvt_qp *qp, struct urvt_pktbuf *b,
		       bool *consumed);
/* The same for the n buffers b .. last (linked through next), in order. */
void urvt_comp_enqueue_list(struct urvt_net *net, struct rvt_qp *qp, struct urvt_pktbuf *b,
			    struct urvt_pktbuf *last, uint32_t n, bool *consumed);
/* Responses straight to the completer (engine.c "Straight to the
 * completer"): _begin takes the QP's engine if nobody runs it and nothing
 * waits in its queue (false: queue them instead); _pkt completes one, read
 * where it lies; _end runs the rest of the engine and lets it go. */
bool urvt_comp_direct_begin(struct rvt_qp *qp);
void urvt_comp_direct_pkt(struct rvt_qp *qp, const struct urvt_pkt *pkt);
void urvt_comp_direct_end(struct rvt_qp *qp);

/* ---- cc.c: congestion control (engine context unless said) ---- */
int urvt_cc_init(struct urvt_net *net);
void urvt_cc_fini(struct urvt_net *net);
/* First engine run: the QP's window limit and its peer (none: fixed window). */
void urvt_cc_qp_setup(struct rvt_qp *qp);
/* How many PSNs from psn on the windows let out now (0: wait for ACKs). */
uint32_t urvt_cc_allow(struct rvt_qp *qp, uint32_t psn);
/* Charge the peer with what the QP has in flight now (end of an engine run). */
void urvt_cc_sync(struct rvt_qp *qp);
/* Reset: give the QP's charge back, forget the peer. */
void urvt_cc_qp_release(struct rvt_qp *qp);
/* comp_psn moved forward by npsn (an ACK, READ responses). */
void urvt_cc_acked(struct rvt_qp *qp, uint32_t npsn);
/* Loss seen: a NAK or READ gap (timeout false), or a retransmit timeout. */
void urvt_cc_loss(struct rvt_qp *qp, bool timeout);
/* A timeout's rewind was spurious (its originals were acknowledged). */
void urvt_cc_undo(struct rvt_qp *qp);
/* A first transmission of psn that asks for an ACK: time it if nothing is. */
void urvt_cc_sent(struct rvt_qp *qp, uint32_t psn);
/* Tail-loss probe interval: from the peer's RTT, at most dflt. */
uint64_t urvt_cc_probe_ns(const struct rvt_qp *qp, uint64_t dflt);
uint32_t urvt_cc_cwnd(const struct rvt_qp *qp);

/* ---- resp.c ---- */
/* Drop the requests the responder held past a PSN gap (QP reset). */
void urvt_resp_ooo_drop(struct rvt_qp *qp);
/* A request for qp (referenced; state checked by recv.c). */
void urvt_resp_rcv(struct rvt_qp *qp, struct urvt_pkt *pkt, const struct urvt_ipinfo *ip);

/* ---- helpers shared by the engines ---- */
/* Advance an SGE cursor by n bytes without copying (rvt_copy_sge's walk). */
void urvt_sge_skip(struct rvt_sge_state *ss, uint32_t n);

/* Start a packet to av: BTH + headers into the txq, or straight into the
 * memory of a link that builds in place (whose send lock is then held: build this one packet,
 * take no lock, then finish). *hlen: the header bytes written. */
/* Payload bytes one request packet to av may carry as a span (several
 * PMTUs of one message: link.h tx_span, docs/shm.md "Spans"); 0: none. */
uint32_t urvt_tx_span(const struct urvt_net *net, const struct urvt_av *av);
/* May READs to and from av be answered by reference, the requester
 * reading the responder's memory itself (link.h urvt_link.cma, docs/shm.md
 * "Single copy")? From URVT_CMA_MIN bytes: below, the ring's two copies
 * on two cores were as fast (ib_read_bw at 16 KiB). */
#define URVT_CMA_MIN (32u << 10)
/* Up to this many bytes the requester reads URVT_CMA_PULL_EIGHTHS eighths
 * of a READ, or of a batch's READs (resp.c reads_pay), and the responder
 * writes the rest; above, half each (req.c rd_ask_push) */
#define URVT_CMA_UNEVEN_MAX (128u << 10)
#define URVT_CMA_PULL_EIGHTHS 3
bool urvt_tx_cma(const struct urvt_net *net, const struct urvt_av *av);
/* Pushes of READ data (link.h cma_epoch, cma_fence, cma_push) over av,
 * which urvt_tx_cma allowed (the fence: any av). The epoch: false if av's
 * link takes no pushes (urvt_link.cma_push). */
bool urvt_tx_cma_epoch(const struct urvt_net *net, const struct urvt_av *av, uint32_t *epoch);
void urvt_tx_cma_fence(const struct urvt_net *net, const struct urvt_av *av);
bool urvt_tx_cma_push(const struct urvt_net *net, const struct urvt_av *av, uint32_t epoch,
		      const struct iovec *local, unsigned nl, const struct iovec *remote,
		      unsigned nr, size_t len);
uint8_t *urvt_build_start(struct rvt_qp *qp, struct urvt_txq *q, const struct urvt_pkt *f,
			  const struct urvt_av *av, uint32_t *hlen);
/* A UD SEND Only (with Immediate) that f describes, its paylen payload
 * bytes gathered from ss, built and committed in one go in the memory of
 * route's link, where there is room now (no wait, link.h URVT_TX_WAIT_NOW):
 * what urvt_build_start and urvt_build_finish_sge do for it, without
 * their other cases. False: nothing built, nothing held (no link that
 * builds in place, a trace, no room, no peer, a full queue). */
/* An ACKNOWLEDGE or ATOMIC ACKNOWLEDGE (an ACK, a NAK, an atomic's answer)
 * built and committed in one go in the memory of route's link, where there
 * is room now, as urvt_build_start and urvt_build_finish would build it
 * there (wire/hdr.h urvt_pkt_build_ack; no ICRC on a lossless link).
 * False: nothing built (not such an opcode, no link that builds in place,
 * a trace, no room, a full queue): build it the usual way. */
bool urvt_build_ack_now(struct rvt_qp *qp, struct urvt_txq *q, const struct urvt_pkt *f,
			uint32_t route);
bool urvt_build_ud_now(struct rvt_qp *qp, struct urvt_txq *q, const struct urvt_pkt *f,
		       uint32_t route, struct rvt_sge_state *ss);
/* Finish (pad + ICRC for the path) and commit the len-byte packet. */
void urvt_build_finish(struct rvt_qp *qp, struct urvt_txq *q, uint8_t *p, uint32_t len);
/* rvt_copy_from_sge of paylen payload bytes to p + hlen, then
 * urvt_build_finish: on the UDP link in one pass (the ICRC as it copies). */
void urvt_build_finish_sge(struct rvt_qp *qp, struct urvt_txq *q, uint8_t *p, uint32_t hlen,
			   struct rvt_sge_state *ss, uint32_t paylen);
/* The next packet of a message whose packet before it, with opcode op
 * and the BTH alone, was the last one qp built in q (to UDP): its BTH
 * with psn and ackreq, paylen bytes from ss, the same destination. What
 * urvt_build_start and urvt_build_finish_sge do for it, without deciding
 * again what they decided for the one before. False: nothing built (the
 * packet before is not that, or q is full). */
bool urvt_build_next_middle(struct rvt_qp *qp, struct urvt_txq *q, uint8_t op, uint32_t psn,
			    bool ackreq, struct rvt_sge_state *ss, uint32_t paylen);

/* Responder: send an ACK/NAK (syndrome) for psn now (queued on this thread's txq). */
void urvt_send_ack(struct rvt_qp *qp, uint8_t syn, uint32_t psn);
/* The end of a receive batch on this thread: the ACKs it owes leave. */
void urvt_resp_acks_due_flush(struct urvt_txq *q);
/* The READs this thread's receive batch let wait (resp.c "READs of a
 * batch"): answered now, before the batch's ACKs. */
void urvt_resp_reads_due_flush(struct urvt_txq *q);
/* A QP being reset: its owed ACK leaves now, from this thread (the
 * application may have taken the receive completion and destroyed the QP
 * before the receiving batch ended). */
void urvt_resp_ack_owed_send(struct rvt_qp *qp);

#endif
