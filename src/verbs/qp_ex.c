/*
 * The extended post API: struct ibv_qp_ex and the ibv_wr_* builders and
 * setters (ibv_wr_post(3)), on the core's own post path.
 *
 * A builder starts a struct ibv_send_wr in the QP's staging area, the
 * setters fill it in, and it is handed to rvt_post_batch_add - the checks
 * of ibv_post_send, qp-semantics §2.2 W1-W11 in their order - when the next
 * builder or ibv_wr_complete comes. That makes the setters order-free (UD
 * programs call set_ud_addr before or after the data setter) and keeps one
 * implementation of the checks. The staging area is allocated with the QP,
 * so nothing on this path allocates or makes a system call (the send engine
 * that wr_complete kicks is post_send's, unchanged).
 *
 * Errors: the builders and setters cannot report, so the first failure is
 * kept in the batch and returned by ibv_wr_complete, which then posts
 * nothing (ibv_wr_post(3): "the entire posting will be aborted").
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/rvt_api.h"
#include "verbs/ops.h"

struct urvt_wr_ctx {
	struct rvt_post_batch b;
	struct ibv_send_wr wr;            /* the WR being built */
	bool pending;                     /* wr not yet handed to the core */
	uint32_t n_sge;                   /* entries in sge[] (max_send_sge, at least 1) */
	uint32_t max_inline;              /* bytes at inl */
	uint8_t *inl;                     /* inline data, copied by the setter */
	uint8_t value[8];                 /* ATOMIC_WRITE's, copied by the builder */
	struct ibv_sge sge[];             /* then the inline bytes */
};

/* Supported send_ops_flags per QP type: the operation table of
 * qp-semantics §2.3 (no SEND_WITH_INV on UC: rdmavt refuses it). */
#define OPS_UD ((uint64_t)(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM))
#define OPS_UC (OPS_UD | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
		IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW)
#define OPS_RC (OPS_UC | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |  \
		IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV |       \
		IBV_QP_EX_WITH_ATOMIC_WRITE)

static inline struct rvt_qp *xqp(struct ibv_qp_ex *ibqpx)
{
	return container_of(ibqpx, struct rvt_qp, ibqp_ex);
}

static inline struct urvt_wr_ctx *xctx(struct ibv_qp_ex *ibqpx)
{
	return xqp(ibqpx)->wr_priv;
}

/* Hand the WR being built to the post_send checks. */
static inline void flush_wr(struct rvt_qp *qp, struct urvt_wr_ctx *c)
{
	if (c->pending) {
		c->pending = false;
		rvt_post_batch_add(qp, &c->b, &c->wr);
	}
}

/* Start a WR: wr_id and wr_flags are taken now (the man page's rule). */
static inline struct ibv_send_wr *start_wr(struct ibv_qp_ex *ibqpx, enum ibv_wr_opcode op)
{
	struct rvt_qp *qp = xqp(ibqpx);
	struct urvt_wr_ctx *c = qp->wr_priv;
	struct ibv_send_wr *wr = &c->wr;

	flush_wr(qp, c);
	wr->wr_id = ibqpx->wr_id;
	wr->opcode = op;
	/* Inline is chosen by the data setter here, not by the flag. */
	wr->send_flags = ibqpx->wr_flags & ~(unsigned int)IBV_SEND_INLINE;
	wr->sg_list = c->sge;
	wr->num_sge = 0;
	wr->imm_data = 0;
	/* No address carried over from the previous WR: a UD WR without
	 * set_ud_addr fails W7 as a NULL AH would in post_send. */
	memset(&wr->wr, 0, sizeof(wr->wr));
	wr->qp_type.xrc.remote_srqn = 0;
	c->pending = true;
	return wr;
}

/* The WR the setters apply to, or NULL (EINVAL kept) if none is open. */
static inline struct urvt_wr_ctx *setter_ctx(struct ibv_qp_ex *ibqpx)
{
	struct urvt_wr_ctx *c = xctx(ibqpx);

	if (unlikely(!c->pending)) {
		rvt_post_batch_fail(&c->b, -EINVAL);
		return NULL;
	}
	return c;
}

/* ---- batch ---- */
static void x_start(struct ibv_qp_ex *ibqpx)
{
	struct rvt_qp *qp = xqp(ibqpx);
	struct urvt_wr_ctx *c = qp->wr_priv;

	rvt_post_batch_start(qp, &c->b);
	c->pending = false;
}

static int x_complete(struct ibv_qp_ex *ibqpx)
{
	struct rvt_qp *qp = xqp(ibqpx);
	struct urvt_wr_ctx *c = qp->wr_priv;

	flush_wr(qp, c);
	return -rvt_post_batch_end(qp, &c->b, true);
}

static void x_abort(struct ibv_qp_ex *ibqpx)
{
	struct rvt_qp *qp = xqp(ibqpx);
	struct urvt_wr_ctx *c = qp->wr_priv;

	c->pending = false;
	rvt_post_batch_end(qp, &c->b, false);
}

/* ---- builders ---- */
static void x_send(struct ibv_qp_ex *ibqpx)
{
	start_wr(ibqpx, IBV_WR_SEND);
}

static void x_send_imm(struct ibv_qp_ex *ibqpx, __be32 imm_data)
{
	start_wr(ibqpx, IBV_WR_SEND_WITH_IMM)->imm_data = imm_data;
}

static void x_send_inv(struct ibv_qp_ex *ibqpx, uint32_t invalidate_rkey)
{
	start_wr(ibqpx, IBV_WR_SEND_WITH_INV)->invalidate_rkey = invalidate_rkey;
}

static void x_rdma(struct ibv_qp_ex *ibqpx, enum ibv_wr_opcode op, uint32_t rkey,
		   uint64_t remote_addr, __be32 imm_data)
{
	struct ibv_send_wr *wr = start_wr(ibqpx, op);

	wr->wr.rdma.remote_addr = remote_addr;
	wr->wr.rdma.rkey = rkey;
	wr->imm_data = imm_data;
}

static void x_rdma_write(struct ibv_qp_ex *ibqpx, uint32_t rkey, uint64_t remote_addr)
{
	x_rdma(ibqpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void x_rdma_write_imm(struct ibv_qp_ex *ibqpx, uint32_t rkey, uint64_t remote_addr,
			     __be32 imm_data)
{
	x_rdma(ibqpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm_data);
}

static void x_rdma_read(struct ibv_qp_ex *ibqpx, uint32_t rkey, uint64_t remote_addr)
{
	x_rdma(ibqpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void x_atomic(struct ibv_qp_ex *ibqpx, enum ibv_wr_opcode op, uint32_t rkey,
		     uint64_t remote_addr, uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr *wr = start_wr(ibqpx, op);

	wr->wr.atomic.remote_addr = remote_addr;
	wr->wr.atomic.compare_add = compare_add;
	wr->wr.atomic.swap = swap;
	wr->wr.atomic.rkey = rkey;
}

static void x_atomic_cmp_swp(struct ibv_qp_ex *ibqpx, uint32_t rkey, uint64_t remote_addr,
			     uint64_t compare, uint64_t swap)
{
	x_atomic(ibqpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr, compare, swap);
}

static void x_atomic_fetch_add(struct ibv_qp_ex *ibqpx, uint32_t rkey, uint64_t remote_addr,
			       uint64_t add)
{
	x_atomic(ibqpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr, add, 0);
}

static void x_local_inv(struct ibv_qp_ex *ibqpx, uint32_t invalidate_rkey)
{
	start_wr(ibqpx, IBV_WR_LOCAL_INV)->invalidate_rkey = invalidate_rkey;
}

/* ATOMIC_WRITE (qp-semantics §2.10): its 8 bytes go as one inline SGE,
 * copied into the WQE by post_send's checks. */
static void x_atomic_write(struct ibv_qp_ex *ibqpx, uint32_t rkey, uint64_t remote_addr,
			   const void *atomic_wr)
{
	struct ibv_send_wr *wr = start_wr(ibqpx, IBV_WR_ATOMIC_WRITE);
	struct urvt_wr_ctx *c = xctx(ibqpx);

	wr->wr.rdma.remote_addr = remote_addr;
	wr->wr.rdma.rkey = rkey;
	memcpy(c->value, atomic_wr, sizeof(c->value));
	c->sge[0] = (struct ibv_sge){ .addr = (uintptr_t)c->value, .length = sizeof(c->value) };
	wr->sg_list = c->sge;
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_INLINE;
}

/* A bind of a type 2 window (core/mw.c), or of a type 1 one as ibv_bind_mw does. */
static void x_bind_mw(struct ibv_qp_ex *ibqpx, struct ibv_mw *mw, uint32_t rkey,
		      const struct ibv_mw_bind_info *bind_info)
{
	struct ibv_send_wr *wr = start_wr(ibqpx, IBV_WR_BIND_MW);

	wr->bind_mw.mw = bind_info ? mw : NULL; /* no window: EINVAL (post.c) */
	wr->bind_mw.rkey = rkey;
	if (bind_info)
		wr->bind_mw.bind_info = *bind_info;
}

/*
 * Builders and setters for what urvt lacks (memory windows, TSO, XRC,
 * ATOMIC_WRITE). The header's inline wrappers call through without a NULL
 * check, so they exist and make wr_complete fail with EOPNOTSUPP. The WR
 * before them is checked first, so an earlier WR's error still wins.
 */
static void x_unsupported(struct ibv_qp_ex *ibqpx)
{
	struct rvt_qp *qp = xqp(ibqpx);
	struct urvt_wr_ctx *c = qp->wr_priv;

	flush_wr(qp, c);
	rvt_post_batch_fail(&c->b, -EOPNOTSUPP);
}


static void x_send_tso(struct ibv_qp_ex *ibqpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr;
	(void)hdr_sz;
	(void)mss;
	x_unsupported(ibqpx);
}


/* XRC_SEND: the SRQ of the target's domain (roce-wire §3.1); ignored on
 * the other types, as set_ud_addr on connected ones */
static void x_set_xrc_srqn(struct ibv_qp_ex *ibqpx, uint32_t remote_srqn)
{
	struct urvt_wr_ctx *c = setter_ctx(ibqpx);

	if (!c || !rvt_qp_is_xrc(xqp(ibqpx)))
		return;
	c->wr.qp_type.xrc.remote_srqn = remote_srqn;
}

/* ---- setters ---- */
static void x_set_ud_addr(struct ibv_qp_ex *ibqpx, struct ibv_ah *ah, uint32_t remote_qpn,
			  uint32_t remote_qkey)
{
	struct urvt_wr_ctx *c = setter_ctx(ibqpx);

	/* Connected QPs have no use for it, and wr.ud shares its storage with
	 * the RDMA/atomic fields: ignored there (rxe ignores it too). */
	if (!c || xqp(ibqpx)->type != IBV_QPT_UD)
		return;
	c->wr.wr.ud.ah = ah;
	c->wr.wr.ud.remote_qpn = remote_qpn;
	c->wr.wr.ud.remote_qkey = remote_qkey;
}

static void x_set_sge(struct ibv_qp_ex *ibqpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct urvt_wr_ctx *c = setter_ctx(ibqpx);

	if (!c)
		return;
	c->sge[0].addr = addr;
	c->sge[0].length = length;
	c->sge[0].lkey = lkey;
	c->wr.num_sge = 1;
	c->wr.send_flags &= ~(unsigned int)IBV_SEND_INLINE;
}

static void x_set_sge_list(struct ibv_qp_ex *ibqpx, size_t num_sge, const struct ibv_sge *sg_list)
{
	struct urvt_wr_ctx *c = setter_ctx(ibqpx);

	if (!c)
		return;
	/* More than the staging holds is more than max_send_sge: W1 rejects
	 * it before sg_list is looked at, so it is not copied. */
	if (num_sge <= c->n_sge && num_sge)
		memcpy(c->sge, sg_list, num_sge * sizeof(*sg_list));
	c->wr.num_sge = num_sge > INT_MAX ? INT_MAX : (int)num_sge;
	c->wr.send_flags &= ~(unsigned int)IBV_SEND_INLINE;
}

static void x_set_inline_data_list(struct ibv_qp_ex *ibqpx, size_t num_buf,
				   const struct ibv_data_buf *buf_list)
{
	struct urvt_wr_ctx *c = setter_ctx(ibqpx);
	size_t total = 0;

	if (!c)
		return;
	for (size_t i = 0; i < num_buf; i++)
		total = buf_list[i].length > SIZE_MAX - total ? SIZE_MAX : total + buf_list[i].length;
	/* Copied now: the caller may reuse its buffers as soon as we return.
	 * Too long: not copied, and post_send's inline check rejects the
	 * length (EINVAL) in its place among the checks. */
	if (total <= c->max_inline) {
		size_t off = 0;
		for (size_t i = 0; i < num_buf; i++) {
			if (buf_list[i].length)
				memcpy(c->inl + off, buf_list[i].addr, buf_list[i].length);
			off += buf_list[i].length;
		}
	}
	/* One SGE over the staged bytes, flagged inline: post_send copies it
	 * into the slot and checks no lkey, exactly as for IBV_SEND_INLINE. */
	c->sge[0].addr = (uintptr_t)c->inl;
	c->sge[0].length = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
	c->sge[0].lkey = 0;
	c->wr.num_sge = total ? 1 : 0;
	c->wr.send_flags |= IBV_SEND_INLINE;
}

static void x_set_inline_data(struct ibv_qp_ex *ibqpx, void *addr, size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	x_set_inline_data_list(ibqpx, 1, &buf);
}

/* ------------------------------------------------------------------ */
/* Creation                                                           */
/* ------------------------------------------------------------------ */

/*
 * send_ops_flags naming an operation urvt cannot post on this QP type
 * (unknown bits, TSO, ATOMIC_WRITE, FLUSH, or one that
 * qp-semantics §2.3 does not allow for the type, e.g. RDMA_READ on UC):
 * EOPNOTSUPP, as rxe answers both cases.
 */
int urvt_qp_ex_check(const struct ibv_qp_init_attr_ex *attr)
{
	uint64_t ok;

	switch (attr->qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_XRC_SEND: /* the RC operations (qp-semantics §16.3) */
		ok = OPS_RC;
		break;
	case IBV_QPT_UC:
		ok = OPS_UC;
		break;
	case IBV_QPT_UD:
		ok = OPS_UD;
		break;
	default:
		return -EOPNOTSUPP;
	}
	return (attr->send_ops_flags & ~ok) ? -EOPNOTSUPP : 0;
}

/*
 * Give a new QP its ibv_qp_ex: staging for one WR (max_send_sge SGEs and
 * max_inline bytes) and every function pointer, the unsupported ones
 * included. Builders of supported operations the QP did not ask for in
 * send_ops_flags work anyway: post_send's table decides what is legal.
 */
int urvt_qp_ex_init(struct rvt_qp *qp)
{
	struct ibv_qp_ex *x = &qp->ibqp_ex;
	uint32_t n_sge = qp->max_send_sge ? qp->max_send_sge : 1;
	struct urvt_wr_ctx *c;

	c = calloc(1, sizeof(*c) + n_sge * sizeof(struct ibv_sge) + qp->max_inline);
	if (!c)
		return -ENOMEM;
	c->n_sge = n_sge;
	c->max_inline = qp->max_inline;
	c->inl = (uint8_t *)&c->sge[n_sge];

	x->comp_mask = 0;
	x->wr_start = x_start;
	x->wr_complete = x_complete;
	x->wr_abort = x_abort;
	x->wr_send = x_send;
	x->wr_send_imm = x_send_imm;
	x->wr_send_inv = x_send_inv;
	x->wr_rdma_write = x_rdma_write;
	x->wr_rdma_write_imm = x_rdma_write_imm;
	x->wr_rdma_read = x_rdma_read;
	x->wr_atomic_cmp_swp = x_atomic_cmp_swp;
	x->wr_atomic_fetch_add = x_atomic_fetch_add;
	x->wr_local_inv = x_local_inv;
	x->wr_bind_mw = x_bind_mw;
	x->wr_send_tso = x_send_tso;
	x->wr_atomic_write = x_atomic_write;
	x->wr_set_ud_addr = x_set_ud_addr;
	x->wr_set_xrc_srqn = x_set_xrc_srqn;
	x->wr_set_inline_data = x_set_inline_data;
	x->wr_set_inline_data_list = x_set_inline_data_list;
	x->wr_set_sge = x_set_sge;
	x->wr_set_sge_list = x_set_sge_list;
	qp->wr_priv = c;
	return 0;
}

void urvt_qp_ex_fini(void *wr_priv)
{
	free(wr_priv);
}

/* rdma-core: the embedded ibv_qp_ex if the QP was created with
 * IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, else NULL (errno untouched). */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct rvt_qp *rqp = ibqp_to_rvtqp(qp);

	return rqp->wr_priv ? &rqp->ibqp_ex : NULL;
}
