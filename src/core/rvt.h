/*
 * urvt core: the rdmavt object model in user space.
 *
 * Every verbs object embeds its public libibverbs struct as the first member
 * (so the header's inline verbs and the application see the layout they were
 * compiled against) and adds the rdmavt state after it. Names follow
 * rdmavt's (struct rvt_qp, rvt_post_send, rvt_lkey_ok, ...) so the code can
 * be read beside the kernel documentation. Functions named rvt_* return 0 or
 * a negative errno; the verbs edge (src/verbs) turns that into the positive
 * errno / NULL+errno of libibverbs.
 */
#ifndef URVT_CORE_RVT_H
#define URVT_CORE_RVT_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/biaslock.h"
#include "base/compiler.h"
#include "base/timer.h"
#include "wire/hdr.h" /* URVT_DEFAULT_PKEY, URVT_GSI_QKEY, URVT_QPN_MASK */

struct rvt_dev_info;
struct rvt_qp;
struct rvt_cq;
struct rvt_srq;
struct rvt_pd;
struct rvt_mregion;
struct urvt_context;

/* ------------------------------------------------------------------ */
/* Device limits (reported by ibv_query_device and enforced)          */
/* ------------------------------------------------------------------ */
#define URVT_MAX_QP (1u << 17)          /* 131072: 100 000 QPs must fit */
#define URVT_MAX_QP_WR 16384
#define URVT_MAX_SGE 32
#define URVT_MAX_INLINE 512
#define URVT_MAX_CQ 65536
#define URVT_MAX_CQE ((1u << 20) - 1)
#define URVT_MAX_MR (1u << 18)
#define URVT_MAX_MR_SIZE (1ull << 40)
#define URVT_MAX_PD 65536
#define URVT_MAX_AH 65536
#define URVT_MAX_SRQ 16384
/* UD multicast (core/mcast.c): groups, and QPs attached to one group; each
 * group is a socket of the UDP link */
#define URVT_MAX_MCAST_GRP 64
#define URVT_MAX_MCAST_QP_ATTACH 56
#define URVT_MAX_SRQ_WR 16384
#define URVT_MAX_SRQ_SGE 32
#define URVT_MAX_RD_ATOMIC 16           /* rdmavt/hfi1 max_rdma_atomic */
#define URVT_MAX_MSG_SZ (1u << 31)     /* max_msg_sz: post, responder, query */
#define URVT_PORT_COUNT 1
#define URVT_PKEY_TABLE_LEN 1
#define URVT_VENDOR_ID 0xFFFFFF        /* rxe's (RXE_VENDOR_ID): a software device */

/* ------------------------------------------------------------------ */
/* Device and context                                                 */
/* ------------------------------------------------------------------ */

/* QPN allocator: qp-semantics §4.3 with start 1, incr 1, QPN 0/1 reserved
 * (QPN 1 is handed out only as the GSI QP, qp.c). */
struct rvt_qpn_table {
	pthread_mutex_t lock;
	uint32_t last;              /* last QPN handed out */
	uint32_t nmaps;             /* bitmap pages allocated */
	uint64_t *map[512];         /* 512 pages of 32768 bits, allocated lazily */
	/* -1: the whole 24-bit space; else QPNs are range << 16 | n, the
	 * range of the host registry's slot (docs/host-identity.md) */
	int range;
};

/*
 * QPN -> QP lookup for the receive and loopback paths. Two levels of pointer
 * pages indexed by QPN; pages are never freed while the device lives, and QP
 * structures are type-stable (recycled, not freed, see qp.c) so a lookup can
 * take a reference without a global lock.
 */
#define RVT_QPT_PAGE_SHIFT 12
#define RVT_QPT_PAGES (1u << (24 - RVT_QPT_PAGE_SHIFT))
struct rvt_qp_table {
	_Atomic(struct rvt_qp *) *page[RVT_QPT_PAGES];
	pthread_mutex_t lock;       /* page allocation, QP free list */
	struct rvt_qp *free_list;   /* destroyed QPs kept for reuse */
	pthread_mutex_t lb_lock;    /* loopback peer caches (qp.c lb_cache) */
	/* Every QP from create to destroy (all_next/all_prev), for the MR
	 * retirement barrier (qp_table.c rvt_direct_barrier). */
	pthread_mutex_t all_lock;
	struct rvt_qp *all_head;
};

/*
 * lkey/rkey table. A key is (slot index << RVT_LKEY_GEN_BITS) | generation;
 * the generation of a slot starts at a random value and moves on every
 * registration, so keys are not sequential and a key of a deregistered MR
 * never matches again (until 2^RVT_LKEY_GEN_BITS reuses of that slot).
 * Key 0 is never issued (it is the kernel's reserved DMA lkey).
 */
#define RVT_LKEY_GEN_BITS 14
#define RVT_LKEY_GEN_MASK ((1u << RVT_LKEY_GEN_BITS) - 1)
struct rvt_lkey_table {
	uint32_t max;                          /* slots */
	_Atomic(struct rvt_mregion *) *table;  /* published MRs by slot */
	uint32_t *gen;                         /* per slot: generations since the first (mr.c) */
	uint64_t seed;                         /* the first generations' (mr.c slot_gen0) */
	pthread_mutex_t lock;                  /* allocation/free (slow path) */
	uint32_t next;                         /* allocation cursor */
	struct rvt_mregion *free_list;         /* type-stable MR structs */
	/* moves whenever a published key stops granting what it did (an MR
	 * leaves the table, a LOCAL_INV): what post_direct remembers of a
	 * key is good while this stays (keys.h rvt_direct_key_ok); from 1,
	 * so a zeroed memo is no memo */
	_Atomic uint32_t memo_gen;
};

/* What post_direct last learnt of one key (keys.h rvt_direct_key_ok):
 * the MR's fields as of memo_gen gen. */
struct rvt_key_memo {
	uint32_t gen, key;
	int access;
	const struct rvt_pd *pd;
	uint8_t *vaddr;
	uint64_t iova, length;
};

struct urvt_progress;
struct urvt_transport_ops;

/*
 * XRC SRQ numbers -> SRQs, for the XRC target's responder (xrc.c). An SRQ
 * number is (generation << RVT_XSRQ_IDX_BITS) | slot, 24 bits, never 0. A
 * lookup announces itself in the slot's 'users' before it reads 'srq'; a
 * destroy clears 'srq', then waits for 'users' to drain (both sequentially
 * consistent, so one of the two always sees the other): no lock on the
 * packet path, no SRQ freed under a packet.
 */
#define RVT_XSRQ_IDX_BITS 14            /* URVT_MAX_SRQ slots */
struct rvt_xsrq_slot {
	_Atomic(struct rvt_srq *) srq;
	_Atomic uint32_t users;
	uint32_t gen;                       /* under rvt_xsrq_table.lock */
};
struct rvt_xsrq_table {
	pthread_mutex_t lock;               /* slot allocation (slow path) */
	_Atomic(struct rvt_xsrq_slot *) slot; /* URVT_MAX_SRQ, allocated on first use */
	uint32_t next;                      /* allocation cursor */
};

/* The process-wide device "urvt0" (rdmavt's struct rvt_dev_info). */
struct rvt_dev_info {
	struct ibv_device ibdev;          /* handed out by ibv_get_device_list */
	struct ibv_device_attr dattr;     /* limits, fixed at init */
	struct ibv_port_attr port_attr;   /* port 1 */
	/* The port as the transport's attach reported it (rvt_dev_set_port). */
	union ibv_gid gid;                /* GID index 0 (RoCEv2, IPv4-mapped or IPv6) */
	unsigned int ifindex;             /* interface holding the address */
	char ifname[32];
	uint64_t node_guid;

	pthread_mutex_t lock;             /* open/close and the lists below */
	int open_count;
	/* QPN 1 is taken: the GSI QP exists (create_qp_ex with
	 * IBV_QP_CREATE_SOURCE_QPN, source_qpn 1; used by librdmacm) */
	_Atomic bool gsi_busy;

	_Atomic int n_qps, n_cqs, n_srqs, n_mrs, n_pds, n_ahs;
	/* every PD by handle (ibv_import_pd), under lock */
	struct rvt_pd *pd_list;
	uint32_t pd_last_handle;

	struct rvt_qpn_table qpn_table;
	struct rvt_qp_table qp_table;
	struct rvt_lkey_table lkey_table;
	struct rvt_xsrq_table xsrq_table;

	/* UD multicast groups (core/mcast.c): attach/detach under mcast_mutex
	 * (they call the transport), the table also under mcast_lock (the
	 * receive path reads it) */
	pthread_mutex_t mcast_mutex;
	urvt_spinlock_t mcast_lock;
	uint32_t n_mcast_grps, n_mcast_attached;
	struct rvt_mcast {
		union ibv_gid mgid;
		uint32_t n;               /* 0: the slot is free */
		struct rvt_qp *qp[URVT_MAX_MCAST_QP_ATTACH];
	} mcast[URVT_MAX_MCAST_GRP];

	struct urvt_progress *progress;   /* timers + network + deferred work */
	const struct urvt_transport_ops *transport; /* NULL: loopback only */
	void *transport_priv;             /* the transport's device state */
	bool no_inproc;                   /* the transport carries even this process's
					     own peers (URVT_PATH=shm|udp; set at attach) */
	bool orphaned;                    /* a copy inherited across fork: no threads
					     (core/device.c fork_child) */
};

/*
 * One ibv_open_device(). verbs_context must come first: the header's inline
 * verbs find it at a fixed negative offset from struct ibv_context.
 */
struct urvt_evq;
struct urvt_context {
	struct verbs_context vctx;
	struct rvt_dev_info *rdi;
	struct urvt_evq *async_q;         /* its pipe read end is context.async_fd */
	/* ibv_import_device (verbs/device.c): contexts opened on one another's
	 * cmd_fd share objects; share_id names the group. */
	uint64_t share_id;
	uint64_t cmd_ino;                 /* inode of context.cmd_fd (a memfd) */
	struct urvt_context *next_ctx;    /* every open context, verbs/device.c */
	/* PDs, CQs, XRC domains and completion channels made on this context
	 * and not yet destroyed: their structures point at it (events, the
	 * device), so ibv_close_device refuses with EBUSY while any is left
	 * (docs/deviations.md). QPs, MRs, SRQs, AHs hold a PD or a CQ. */
	_Atomic int live_objs;
};

/* Is qpn in this process's range (a QP of this device may have it)? Other
 * processes sharing the GID own the other ranges, and range 0 (QP1 of each
 * of them: the host's CM forwards it); range 0xff is nobody's. */
static inline bool rvt_qpn_is_mine(const struct rvt_dev_info *rdi, uint32_t qpn)
{
	return rdi->qpn_table.range < 0 || (int)(qpn >> 16) == rdi->qpn_table.range ||
	       qpn >> 16 == 0xff;
}

static inline struct urvt_context *to_uctx(struct ibv_context *ibctx)
{
	return container_of(container_of(ibctx, struct verbs_context, context),
			    struct urvt_context, vctx);
}

static inline void urvt_ctx_hold(struct ibv_context *c)
{
	atomic_fetch_add(&to_uctx(c)->live_objs, 1);
}

static inline void urvt_ctx_drop(struct ibv_context *c)
{
	atomic_fetch_sub(&to_uctx(c)->live_objs, 1);
}

/* ------------------------------------------------------------------ */
/* PD, AH                                                             */
/* ------------------------------------------------------------------ */
/*
 * A parent domain (ibv_alloc_parent_domain): the application's allocators
 * for the rings of the QPs, SRQs and CQs made on it (rvt_buf_alloc), and a
 * thread domain, a hint urvt needs not (its locks stay).
 */
/*
 * The resource_type a parent domain's allocators are called with: the
 * provider's own numbers, (driver id << 32) | n. urvt has no kernel driver
 * id (0, RDMA_DRIVER_UNKNOWN) and numbers its rings as mlx5 does
 * (docs/abi.md).
 */
enum {
	RVT_RES_TYPE_QP = 1,              /* a QP's send and receive rings */
	RVT_RES_TYPE_SRQ = 4,
	RVT_RES_TYPE_CQ = 5,
};

struct rvt_parent {
	void *(*alloc)(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		       uint64_t resource_type);
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type);
	void *pd_context;
	struct ibv_td *td;
};

struct rvt_pd {
	struct ibv_pd ibpd;
	_Atomic int usecnt;               /* MRs, QPs, SRQs, AHs (CQs: a parent) using it */
	/* The PD itself; for one made by ibv_import_pd (another handle on a
	 * PD, for an importing context) or a parent domain, the protection
	 * domain it stands for. */
	struct rvt_pd *real;
	struct rvt_parent *parent;        /* a parent domain's, else NULL */
	struct rvt_pd *next, *prev;       /* rdi->pd_list (real PDs), under rdi->lock */
};

/* The protection domain an ibv_pd names (an imported PD or a parent domain
 * stands for another). */
static inline struct rvt_pd *ibpd_to_rvtpd(struct ibv_pd *ibpd)
{
	return container_of(ibpd, struct rvt_pd, ibpd)->real;
}

/* The ibv_pd as given: the domain whose allocators an object's rings use. */
static inline struct rvt_pd *ibpd_to_domain(struct ibv_pd *ibpd)
{
	return container_of(ibpd, struct rvt_pd, ibpd);
}

/*
 * Address vector: the ah_attr as given (destination GID, SGID index, hop
 * limit, traffic class, flow label in attr.grh) plus the UDP source port of
 * the path and whether it is this device. No link address: the transport
 * maps the GID to one (docs/architecture.md).
 */
struct urvt_av {
	struct ibv_ah_attr attr;
	uint16_t udp_sport;               /* RoCEv2 UDP source port of this path */
	bool loopback;                    /* destination GID is our own (and, when the
					     QPN is known, the QP is this process's) */
	uint32_t dqpn;                    /* the destination QPN the path is for, or
					     URVT_QPN_ANY (an AH: each WR names one) */
	uint32_t route;                   /* the transport's choice of link (av_resolve) */
	uint16_t route_slot;              /* the QPN slot (qpn >> 16) route is for, or
					     URVT_ROUTE_SLOT_ANY: any QPN (transport) */
};

/* urvt_av.dqpn of an AH */
#define URVT_QPN_ANY 0xffffffffu

struct rvt_ah {
	struct ibv_ah ibah;
	struct urvt_av av;
};

static inline struct rvt_ah *ibah_to_rvtah(struct ibv_ah *ibah)
{
	return container_of(ibah, struct rvt_ah, ibah);
}

/* A UD WR to qpn over av goes to a QP of this process (ruc.c ud_loopback),
 * not to the transport. */
static inline bool rvt_ud_to_self(const struct rvt_dev_info *rdi, const struct urvt_av *av,
				  uint32_t qpn)
{
	return av->loopback && rvt_qpn_is_mine(rdi, qpn);
}

/* ------------------------------------------------------------------ */
/* Memory regions (rdmavt_mr.h)                                       */
/* ------------------------------------------------------------------ */
struct rvt_mregion {
	struct ibv_mr ibmr;
	_Atomic uint32_t refcount;        /* 0 = free; owner holds 1 */
	uint32_t lkey;                    /* == rkey */
	uint8_t *vaddr;                   /* host address of byte 0 */
	uint64_t iova;                    /* remote address of byte 0 */
	uint64_t length;
	int access;                       /* IBV_ACCESS_* */
	struct rvt_pd *pd;
	_Atomic bool lkey_invalid;        /* LOCAL_INV / SEND_WITH_INV executed */
	struct rvt_mregion *next_free;
	_Atomic int num_mw;               /* MR: memory windows bound to it */
	/*
	 * A memory window (core/mw.c) is one of these too, in the same key
	 * table, with RVT_ACCESS_MW in access: its rkey is lkey, iova/length/
	 * access/vaddr are the window's while it is bound. Under mw_lock.
	 */
	struct ibv_mw ibmw;
	urvt_spinlock_t mw_lock;
	bool mw_bound;
	struct rvt_mregion *mw_mr;        /* the MR it is bound to (num_mw held) */
	uint32_t mw_qpn;                  /* type 2: the QP it is bound to */
};

/* access bit of a memory window (not an IBV_ACCESS_* bit) */
#define RVT_ACCESS_MW (1 << 30)

static inline bool rvt_mr_is_mw(const struct rvt_mregion *mr)
{
	return mr->access & RVT_ACCESS_MW;
}

static inline struct rvt_mregion *ibmw_to_rvtmw(struct ibv_mw *ibmw)
{
	return container_of(ibmw, struct rvt_mregion, ibmw);
}

static inline struct rvt_mregion *ibmr_to_rvtmr(struct ibv_mr *ibmr)
{
	return container_of(ibmr, struct rvt_mregion, ibmr);
}

/* One validated local segment (rdmavt struct rvt_sge). */
struct rvt_sge {
	struct rvt_mregion *mr;           /* referenced; NULL for inline data */
	uint8_t *vaddr;                   /* next byte to read or write */
	uint32_t length;                  /* bytes left in this segment */
	uint32_t sge_length;              /* bytes of the segment in total */
};

/* A cursor over an SGE list (rdmavt struct rvt_sge_state). */
struct rvt_sge_state {
	struct rvt_sge *sg_list;          /* segments after 'sge' */
	struct rvt_sge sge;               /* current segment */
	uint32_t total_len;
	uint8_t num_sge;                  /* segments left, including 'sge' */
};

/* ------------------------------------------------------------------ */
/* Completion queues (rdmavt_cq.h)                                    */
/* ------------------------------------------------------------------ */
struct urvt_evq;
struct urvt_comp_channel {
	struct ibv_comp_channel ibch;     /* fd = the queue pipe read end */
	struct urvt_evq *q;               /* one record per CQ notification */
};

enum rvt_cq_notify {
	RVT_CQ_NOTIFY_NONE = 0,
	RVT_CQ_NOTIFY_SOLICITED = 1,
	RVT_CQ_NOTIFY_NEXT = 2,
};

struct rvt_cq_ts {
	uint64_t clock;                   /* IBV_WC_EX_WITH_COMPLETION_TIMESTAMP */
	uint64_t wall;                    /* ..._WALLCLOCK */
};

/*
 * The CQ ring: producers (send/receive engines of any QP, on any thread)
 * serialise on p_lock, fill the entry, then publish 'head' with a release
 * store (CQ-P1); the consumer (poll_cq) reads 'head' with an acquire load
 * (CQ-C1) that pairs with CQ-P1, copies entries out, then publishes 'tail'
 * with a release store (CQ-C2) that pairs with the producer's acquire load
 * of 'tail' in the full check (CQ-P0). Indices run free; the ring size is a
 * power of two.
 */
struct rvt_cq {
	struct ibv_cq_ex ibcq;
	struct urvt_context *uctx;
	uint32_t ring_size;               /* power of two */
	uint32_t mask;
	uint32_t cqe;                     /* capacity reported to the user */
	struct ibv_wc *queue;
	/* Completion timestamps, only for a CQ that asked for them
	 * (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK)): per slot, the
	 * device clock (CLOCK_MONOTONIC ns, hca_core_clock 1 GHz) and the
	 * wall clock (CLOCK_REALTIME ns) when the entry was made; NULL if none. */
	struct rvt_cq_ts *ts;
	bool ts_clock, ts_wall;           /* which of the two to take */
	struct rvt_pd *domain;            /* a parent domain (IBV_CQ_INIT_ATTR_MASK_PD), or NULL */
	bool queue_custom;                /* queue came from its allocator */
	bool ex;                          /* created by ibv_create_cq_ex */
	uint64_t wc_flags;                /* cq_ex: requested read_* fields */

	struct {
		/* biased (base/biaslock.h): one thread receives for the CQ
		 * nearly always; its locked exchange per completion was a
		 * small message's share (docs/performance-history.md "MPI on
		 * one host") */
		struct urvt_biaslock p_lock;
		uint32_t head;            /* written under p_lock, release */
		_Atomic int notify;       /* enum rvt_cq_notify, one-shot */
		bool overflow;            /* IBV_EVENT_CQ_ERR raised once */
	} __cacheline_aligned;

	struct {
		struct urvt_biaslock c_lock; /* poll_cq callers may race (biased: one poller, a
					       dozen polls per message of a busy poller) */
		uint32_t tail;            /* written under c_lock, release */
		uint32_t ex_cur;          /* cq_ex: entry being read */
	} __cacheline_aligned;

	_Atomic int usecnt;               /* QPs using it */
	/* ... of those uses, as a UD QP's send CQ: a UD send completes when
	 * it leaves (rc-protocol §7), never on what arrives (rvt_cq_rx_fills) */
	_Atomic int ud_send_uses;
	struct urvt_comp_channel *channel;
	_Atomic int events_held;          /* events a receive batch holds (rvt_cq_events_hold) */
	_Atomic uint32_t comp_events_reported;
	_Atomic uint32_t async_events_reported;
};

static inline struct rvt_cq *ibcq_to_rvtcq(struct ibv_cq *ibcq)
{
	return container_of((struct ibv_cq_ex *)ibcq, struct rvt_cq, ibcq);
}

/* ------------------------------------------------------------------ */
/* Receive queues (QP RQ and SRQ share the ring)                      */
/* ------------------------------------------------------------------ */
struct rvt_rwqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
	struct ibv_sge sg_list[];         /* as posted; validated on consumption */
};

/*
 * Producer: post_recv under p_lock, publishes head with release (RQ-P1).
 * Consumer: the responder under c_lock, acquire of head (RQ-C1 pairs with
 * RQ-P1); tail published with release (RQ-C2), read by the producer's full
 * check (RQ-P0).
 */
struct rvt_rq {
	uint32_t size;                    /* slots, power of two */
	uint32_t mask;
	uint32_t max_sge;
	uint32_t stride;                  /* bytes per slot */
	uint8_t *wq;
	struct rvt_pd *wq_domain;         /* whose allocator made wq (rvt_buf_alloc) */
	uint32_t wq_type;                 /* its RVT_RES_TYPE_* */
	bool wq_custom;
	/* biased (base/biaslock.h): one thread posts receives, one takes
	 * them (the one that receives the QP's packets); control paths take
	 * them the plain way */
	struct {
		struct urvt_biaslock p_lock;
		uint32_t head;
	} __cacheline_aligned;
	struct {
		struct urvt_biaslock c_lock;
		uint32_t tail;
	} __cacheline_aligned;
};

static inline struct rvt_rwqe *rvt_get_rwqe_ptr(struct rvt_rq *rq, uint32_t n)
{
	return (struct rvt_rwqe *)(rq->wq + (size_t)(n & rq->mask) * rq->stride);
}

static inline uint32_t rvt_rq_count(struct rvt_rq *rq)
{
	return load_acquire(&rq->head) - load_acquire(&rq->tail);
}

/* An XRC domain (ibv_open_xrcd). Opening the same file twice gives two
 * handles of one domain: XRC rules compare domains (xrc.c). */
struct rvt_xrcd_dom;
struct rvt_xrcd {
	struct ibv_xrcd ibxrcd;
	struct urvt_context *uctx;
	struct rvt_xrcd_dom *dom;
	_Atomic int usecnt;               /* XRC SRQs and XRC_RECV QPs */
};

static inline struct rvt_xrcd *ibxrcd_to_rvtxrcd(struct ibv_xrcd *x)
{
	return container_of(x, struct rvt_xrcd, ibxrcd);
}

struct rvt_srq {
	struct ibv_srq ibsrq;
	struct urvt_context *uctx;
	struct rvt_pd *pd;
	/* XRC SRQs (IBV_SRQT_XRC): the domain, the CQ of its receive
	 * completions, its number; NULL / 0 for the others */
	struct rvt_xrcd *xrcd;
	struct rvt_cq *cq;
	uint32_t srq_num;
	struct rvt_rq rq;
	uint32_t max_wr;                  /* capacity reported */
	_Atomic uint32_t limit;           /* armed while non-zero */
	_Atomic int usecnt;               /* QPs attached */
	_Atomic uint32_t async_events_reported;
};

static inline struct rvt_srq *ibsrq_to_rvtsrq(struct ibv_srq *ibsrq)
{
	return container_of(ibsrq, struct rvt_srq, ibsrq);
}

/* ------------------------------------------------------------------ */
/* Queue pairs (rdmavt_qp.h)                                          */
/* ------------------------------------------------------------------ */

/* Per-state capability bits (qp-semantics §1, ib_rvt_state_ops). */
enum {
	RVT_POST_SEND_OK = 1 << 0,
	RVT_POST_RECV_OK = 1 << 1,
	RVT_PROCESS_RECV_OK = 1 << 2,
	RVT_PROCESS_SEND_OK = 1 << 3,
	RVT_PROCESS_NEXT_SEND_OK = 1 << 4,
	RVT_FLUSH_SEND = 1 << 5,
	RVT_FLUSH_RECV = 1 << 6,
	RVT_PROCESS_OR_FLUSH_SEND = RVT_PROCESS_SEND_OK | RVT_FLUSH_SEND,
};
extern const int ib_rvt_state_ops[IBV_QPS_ERR + 1];

/* Send WQE flags (internal). */
enum {
	RVT_SWQE_INLINE = 1 << 0,         /* data copied into the slot at post */
	RVT_SWQE_LOCAL_DONE = 1 << 1,     /* local op executed at post time */
	RVT_SWQE_ODP = 1 << 2,            /* a segment is of an ODP MR (core/odp.h) */
};

struct rvt_swqe {
	uint64_t wr_id;
	uint32_t opcode;                  /* enum ibv_wr_opcode */
	uint32_t send_flags;              /* IBV_SEND_* */
	union {
		__be32 imm_data;
		uint32_t invalidate_rkey;
		uint32_t bind_access;     /* IBV_WR_BIND_MW */
	} ex;
	uint32_t length;                  /* message bytes */
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr;
			uint64_t compare_add;
			uint64_t swap;
			uint32_t rkey;
		} atomic;
		struct {
			uint32_t remote_qpn;
			uint32_t remote_qkey;
		} ud;
		struct {                  /* IBV_WR_BIND_MW; access in ex */
			struct rvt_mregion *mw;
			uint64_t addr;
			uint64_t length;
			uint32_t rkey;    /* the window's new rkey */
			uint32_t mr_lkey;
		} bind;
	} wr;
	uint32_t ssn, psn, lpsn;
	uint32_t xrc_srqn;                /* XRC_SEND: the XRCETH's SRQ number */
	uint16_t num_sge;
	uint16_t wqe_flags;
	struct urvt_av *ud_av;            /* UD: points at the slot's snapshot */
	struct rvt_sge sg_list[];         /* num_sge segments; inline data follows */
};

/* Responder resource for READ/atomic replay (rdmavt s_ack_queue). */
struct rvt_ack_entry {
	uint32_t psn, lpsn;
	uint8_t opcode;
	uint8_t valid;
	uint64_t atomic_data;             /* original value (atomics) */
	uint64_t va;
	uint32_t rkey;
	uint32_t length;
};

/* r_flags */
enum {
	RVT_R_REUSE_SGE = 1 << 0,         /* the current receive WQE is kept */
};

/* s_flags: why the send engine is not running (rdmavt RVT_S_*). */
enum {
	RVT_S_WAIT_RNR = 1 << 0,
	RVT_S_WAIT_ACK = 1 << 1,
	RVT_S_WAIT_FENCE = 1 << 2,
	RVT_S_WAIT_RDMAR = 1 << 3,
	RVT_S_WAIT_PSN = 1 << 4,
	RVT_S_TIMER = 1 << 5,
};

struct rvt_qp {
	struct ibv_qp_ex ibqp_ex;         /* ibv_qp at offset 0 */

	/* ---- immutable after create ---- */
	struct rvt_dev_info *rdi;
	struct urvt_context *uctx;
	struct rvt_pd *pd;
	struct rvt_cq *send_cq, *recv_cq;
	struct rvt_srq *srq;
	uint32_t qpn;
	/* The engine type: RC, UC or UD. XRC_SEND and XRC_RECV QPs run the RC
	 * engines (type RC; ibqp_ex.qp_base.qp_type has the verbs type) and
	 * differ only by allowed_ops and xrcd. */
	enum ibv_qp_type type;
	uint8_t allowed_ops;              /* opcode transport prefix (qp-semantics §4.4; XRC 0xA0) */
	/* XRC_RECV (the XRC target): its domain. srq, pd and recv_cq are NULL
	 * except while the responder executes a packet: then, under r_lock,
	 * they are those of the SRQ its XRCETH names (transport/resp.c). */
	struct rvt_xrcd *xrcd;
	_Atomic int xrc_handles;          /* XRC_RECV: this + ibv_open_qp handles */
	bool sq_sig_all;
	uint32_t s_size, s_mask, s_stride;
	uint32_t max_send_wr;             /* capacity reported */
	uint32_t max_send_sge, max_recv_sge, max_inline;
	uint8_t *s_wq;                    /* send ring slots */
	struct rvt_pd *domain;            /* the ibv_pd as given (a parent domain's allocators) */
	bool s_wq_custom;                 /* s_wq came from them */
	struct urvt_av *s_ud_av;          /* UD: one AV snapshot per slot */
	uint32_t r_max_sge;               /* size of r_sg_list */
	void *wr_priv;                    /* ibv_wr_* state (verbs/qp_ex.c); NULL: plain QP */
	void *priv;                       /* the transport's per-QP state (qp_priv_alloc) */

	/* ---- attributes: written under state_lock, read by the engines ---- */
	pthread_mutex_t state_lock;       /* modify/destroy (slow path) */
	_Atomic int state;                /* enum ibv_qp_state */
	int s_state_ops, r_state_ops;
	uint32_t qkey;
	uint32_t remote_qpn;
	int qp_access_flags;
	uint16_t pkey_index;
	uint8_t port_num;
	struct urvt_av remote_av;
	uint32_t pmtu;                    /* bytes */
	enum ibv_mtu path_mtu;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
	uint8_t max_rd_atomic, max_dest_rd_atomic;
	uint8_t sq_draining;
	enum ibv_mig_state path_mig_state;
	bool comm_est;                    /* IBV_EVENT_COMM_EST already raised */
	uint64_t timeout_ns;              /* 4.096 us << timeout; 0 = none */
	struct ibv_qp_cap cap;            /* as reported by query */

	/* ---- posting side (post_send), under s_hlock ---- */
	struct {
		/* a spinlock whose one posting thread enters without
		 * the atomic exchange (base/biaslock.h) */
		struct urvt_biaslock s_hlock;
		/* the thread whose ibv_wr_* batch holds s_hlock (its
		 * rvt_batch_marker's address), 0 if none: the MR retirement
		 * barrier skips the QP for that thread (qp_table.c) */
		_Atomic uintptr_t s_batch_owner;
		uint32_t s_head;          /* next slot to fill; release */
		uint32_t s_ssn;
		uint32_t s_next_psn;      /* PSN of the next posted WR */
		uint32_t local_ops_pending;
		/* RC/UC to a QP of this process with room for one WR of one
		 * SGE: post_send may run it at once (post.c post_direct).
		 * Written by modify under s_hlock. */
		bool lb_direct;
		/* UD with a transport that sends at post time (post.c
		 * post_ud_direct). Written by modify under s_hlock. */
		bool ud_direct;
		/* The QP remote_qpn names, kept from modify on (qp.c
		 * lb_cache); no reference: its destroy clears this under
		 * s_hlock first. Written under qp_table.lb_lock and s_hlock. */
		struct rvt_qp *lb_peer;
		struct rvt_qp *lb_cachers; /* QPs whose lb_peer is this one */
		struct rvt_qp *lb_next;    /* next in lb_peer->lb_cachers */
		/* post_direct's last lkey and rkey, post_ud_direct's last
		 * lkey (under s_hlock) */
		struct rvt_key_memo lb_lkey_memo, lb_rkey_memo;
	} __cacheline_aligned;

	/*
	 * ---- send engine (requester + completer) ----
	 * Run by whoever takes the s_sched token (rvt_schedule_send): the
	 * posting thread inline, the progress thread for timers and packets.
	 */
	struct {
		_Atomic uint32_t s_sched;
		uint32_t s_last;          /* oldest unretired slot; release */
		uint32_t s_cur;           /* next slot to start */
		uint32_t s_acked;         /* oldest slot not yet acknowledged */
		uint32_t s_flags;
		uint32_t s_psn;           /* requester: next PSN to send */
		uint32_t s_sending_psn;
		uint32_t s_last_psn;      /* last PSN sent */
		uint32_t s_acked_psn;     /* completer: last acknowledged PSN */
		uint32_t s_retry, s_rnr_retry;
		uint32_t s_rd_atomic_outstanding;
		uint32_t s_pkts_since_ackreq;
		uint32_t s_offset;        /* bytes of s_cur already sent */
		struct urvt_timer s_timer;    /* retransmit */
		struct urvt_timer s_rnr_timer;
		_Atomic bool s_rnr_fired;     /* set by the RNR timer, taken by the engine */
	} __cacheline_aligned;

	/* ---- responder, under r_lock ---- */
	struct {
		/* biased (base/biaslock.h): the thread that receives takes it
		 * per packet; control paths take it the plain way
		 * (urvt_bias_lock), which revokes that owner */
		struct urvt_biaslock r_lock;
		uint32_t r_psn;           /* next expected PSN */
		uint32_t r_ack_psn;
		uint32_t r_msn;
		uint8_t r_state;          /* last opcode accepted */
		uint8_t r_flags;
		uint8_t r_nak_state;
		bool r_wrid_valid;        /* a receive WQE is in progress */
		uint64_t r_wr_id;
		uint32_t r_len;           /* receive buffer length */
		uint32_t r_rcv_len;       /* bytes placed so far */
		struct rvt_sge_state r_sge;
		struct rvt_sge *r_sg_list;
		/* RDMA WRITE in progress */
		struct rvt_sge r_rdma_sge;
		struct rvt_ack_entry *r_ack_queue; /* max_dest_rd_atomic + 1 */
		uint32_t r_head_ack, r_tail_ack;
		bool r_sent_nak;
		bool r_drop_msg;          /* UC: discarding a message */
		uint32_t r_xrc_srqn;      /* XRC_RECV: the SRQ of the message in progress */
	} __cacheline_aligned;

	struct rvt_rq rq;                 /* unused when srq != NULL */

	/* ---- lifetime ---- */
	struct urvt_work s_work;          /* run the send engine on the progress thread */
	_Atomic uint32_t async_events_reported;
	_Atomic uint32_t refcount;        /* 0 = free (type-stable memory) */
	struct rvt_qp *next_free;
	struct rvt_qp *all_next, *all_prev; /* qp_table.all_head, under all_lock */
};

static inline struct rvt_qp *ibqp_to_rvtqp(struct ibv_qp *ibqp)
{
	return container_of((struct ibv_qp_ex *)ibqp, struct rvt_qp, ibqp_ex);
}

/* A WQE that takes a responder resource and counts against max_rd_atomic
 * (qp-semantics §2.10 for ATOMIC_WRITE): the one list of them. */
static inline bool rvt_swqe_rd_atomic(const struct rvt_swqe *wqe)
{
	return wqe->opcode == IBV_WR_RDMA_READ || wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       wqe->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wqe->opcode == IBV_WR_ATOMIC_WRITE;
}

static inline struct rvt_swqe *rvt_get_swqe_ptr(struct rvt_qp *qp, uint32_t n)
{
	return (struct rvt_swqe *)(qp->s_wq + (size_t)(n & qp->s_mask) * qp->s_stride);
}

/* XRC_SEND or XRC_RECV */
static inline bool rvt_qp_is_xrc(const struct rvt_qp *qp)
{
	return qp->allowed_ops == URVT_OP_XRC_BASE;
}

static inline int rvt_qp_state(struct rvt_qp *qp)
{
	return atomic_load_explicit(&qp->state, memory_order_acquire);
}

/* Does a WR (or its WQE) with send_flags ask for a completion: its own
 * flag or the QP's sq_sig_all (qp-semantics §2.9)? */
static inline bool rvt_signaled(const struct rvt_qp *qp, unsigned int send_flags)
{
	return qp->sq_sig_all || (send_flags & IBV_SEND_SIGNALED);
}

#endif
