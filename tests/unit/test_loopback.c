/*
 * Loopback execution (qp-semantics §7, §8, §10, §13, §5.4-§5.6): data
 * moved byte for byte by every RC/UC opcode and UD SEND between two QPs of
 * one context, the completion each side gets, every error outcome with the
 * status of both sides and their states, RNR timing and infinite retry,
 * the UD GRH image, and the reset/error flush rules.
 *
 * QP "a" is the requester, "b" the responder; each has its own CQ (send and
 * receive), so a's CQ shows requester completions and b's CQ responder ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ruc.h"
#include "transport/tp.h"
#include "ut.h"
#include "wire/aeth.h"

static struct ut_dev dev;

#define BUFSZ (128 * 1024)
#define ALL_REMOTE (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | ALL_REMOTE)

struct pair {
	enum ibv_qp_type type;
	struct rvt_pd *pd;
	struct rvt_cq *acq, *bcq;
	struct rvt_qp *a, *b;
	uint8_t *abuf, *bbuf;
	struct rvt_mregion *amr, *bmr;
	struct rvt_ah *ah;
};

struct pair_opts {
	int a_access, b_access;       /* QP access flags */
	uint8_t a_rnr_retry;
	uint8_t b_min_rnr_timer;
	uint8_t a_min_rnr_timer;
	bool sig_all;
	struct rvt_srq *b_srq;
	uint32_t sges;                /* max send/recv SGEs */
	int bcq_size;                 /* b's CQ (0: 1024) */
	uint32_t max_inline;          /* both QPs */
};

static const struct pair_opts defaults = {
	.a_access = ALL_REMOTE, .b_access = ALL_REMOTE, .a_rnr_retry = 7,
	.b_min_rnr_timer = 1, .a_min_rnr_timer = 1, .sges = 4,
};

static int setup(void **state)
{
	(void)state;
	ut_open(&dev);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ut_async_drain(&dev);
	ut_close(&dev);
	return 0;
}

static void bring_up(struct pair *p, struct rvt_qp *qp, uint32_t dest, int access,
		     uint8_t min_rnr, uint8_t rnr_retry)
{
	if (p->type == IBV_QPT_UD) {
		ut_to_init(qp, 0, 0x2222);
		ut_to_rtr(&dev, qp, 0, 0);
		ut_to_rts(qp, 0, 0, 0);
		return;
	}
	ut_to_init(qp, access, 0);
	ut_to_rtr(&dev, qp, dest, min_rnr);
	ut_to_rts(qp, 7, rnr_retry, 4);
}

static struct pair *pair_new_opts(enum ibv_qp_type type, const struct pair_opts *o,
				  struct rvt_pd *pd)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct ut_qp_caps caps = { 64, 64, o->sges, o->sges, o->max_inline };

	assert_non_null(p);
	p->type = type;
	p->pd = pd ? pd : ut_pd(&dev);
	p->acq = ut_cq(&dev, 1024);
	p->bcq = ut_cq(&dev, o->bcq_size ? o->bcq_size : 1024);
	p->a = ut_qp(&dev, p->pd, type, p->acq, p->acq, NULL, &caps, o->sig_all);
	p->b = ut_qp(&dev, p->pd, type, p->bcq, p->bcq, o->b_srq, &caps, o->sig_all);
	p->abuf = aligned_alloc(64, BUFSZ);
	p->bbuf = aligned_alloc(64, BUFSZ);
	assert_non_null(p->abuf);
	assert_non_null(p->bbuf);
	memset(p->abuf, 0, BUFSZ);
	memset(p->bbuf, 0, BUFSZ);
	p->amr = ut_mr(p->pd, p->abuf, BUFSZ, ALL_ACCESS);
	p->bmr = ut_mr(p->pd, p->bbuf, BUFSZ, ALL_ACCESS);
	bring_up(p, p->a, p->b->qpn, o->a_access, o->a_min_rnr_timer, o->a_rnr_retry);
	bring_up(p, p->b, p->a->qpn, o->b_access, o->b_min_rnr_timer, 7);
	if (type == IBV_QPT_UD) {
		struct ibv_ah_attr aha;
		int err = 0;
		ut_loopback_ah_attr(&dev, &aha);
		p->ah = rvt_create_ah(p->pd, &aha, &err);
		assert_non_null(p->ah);
	}
	return p;
}

static struct pair *pair_new(enum ibv_qp_type type)
{
	return pair_new_opts(type, &defaults, NULL);
}

static void pair_free(struct pair *p, bool free_pd)
{
	ut_async_drain(&dev); /* before the objects they name go (ut.h) */
	assert_int_equal(rvt_destroy_qp(p->a), 0);
	assert_int_equal(rvt_destroy_qp(p->b), 0);
	if (p->ah)
		assert_int_equal(rvt_destroy_ah(p->ah), 0);
	assert_int_equal(atomic_load(&p->amr->refcount), 1);
	assert_int_equal(atomic_load(&p->bmr->refcount), 1);
	assert_int_equal(rvt_dereg_mr(p->amr), 0);
	assert_int_equal(rvt_dereg_mr(p->bmr), 0);
	assert_int_equal(rvt_destroy_cq(p->acq), 0);
	assert_int_equal(rvt_destroy_cq(p->bcq), 0);
	if (free_pd)
		assert_int_equal(rvt_dealloc_pd(p->pd), 0);
	free(p->abuf);
	free(p->bbuf);
	free(p);
	ut_async_drain(&dev);
}

static uint64_t wr1_id(int opcode)
{
	return 0xa000 + (uint64_t)opcode;
}

/* A one-SGE WR from a's buffer. */
static void wr1(struct pair *p, struct ibv_send_wr *wr, struct ibv_sge *sge, int opcode,
		uint32_t off, uint32_t len, uint64_t raddr)
{
	memset(wr, 0, sizeof(*wr));
	*sge = (struct ibv_sge){ .addr = (uintptr_t)p->abuf + off, .length = len,
				 .lkey = p->amr->ibmr.lkey };
	wr->wr_id = wr1_id(opcode);
	wr->opcode = (enum ibv_wr_opcode)opcode;
	wr->send_flags = IBV_SEND_SIGNALED;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->wr.rdma.remote_addr = raddr;
	wr->wr.rdma.rkey = p->bmr->ibmr.rkey;
	if (p->type == IBV_QPT_UD) {
		wr->wr.ud.ah = &p->ah->ibah;
		wr->wr.ud.remote_qpn = p->b->qpn;
		wr->wr.ud.remote_qkey = 0x2222;
	}
}

static void brecv(struct pair *p, uint64_t wr_id, uint32_t off, uint32_t len)
{
	ut_post_recv(p->b, wr_id, p->bbuf + off, len, p->bmr->ibmr.lkey);
}

static struct ibv_wc expect_wc(struct rvt_cq *cq, uint64_t wr_id, enum ibv_wc_status st)
{
	struct ibv_wc wc;

	ut_poll1(cq, &wc);
	if (wc.wr_id != wr_id || wc.status != st)
		fail_msg("completion wr_id %#llx status %d, expected %#llx status %d",
			 (unsigned long long)wc.wr_id, wc.status, (unsigned long long)wr_id, st);
	return wc;
}

static uint64_t baddr(struct pair *p, uint32_t off)
{
	return (uintptr_t)p->bbuf + off;
}

/*
 * Over a link, UC messages land after the sender's completion, in order:
 * once an empty SEND behind them has been received, they are there.
 */
static void uc_landed(struct pair *p)
{
	struct ibv_send_wr wr = { .wr_id = 0xfe, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };

	ut_post_recv(p->b, 0xfe, NULL, 0, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, 0xfe, IBV_WC_SUCCESS);
	expect_wc(p->bcq, 0xfe, IBV_WC_SUCCESS);
}

/*
 * UC over a link (rc-protocol §6): a message the responder refuses is
 * dropped; the responder stays in RTS with its receives posted, and the
 * next SEND lands in the first of them (wr_id 1, at bbuf). In-process the
 * responder goes to ERR instead (qp-semantics §10; docs/deviations.md).
 */
static void uc_still_receives(struct pair *p)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;

	assert_int_equal(ut_state(p->b), IBV_QPS_RTS);
	ut_fill(p->abuf + 1024, 8, 61);
	wr1(p, &wr, &sge, IBV_WR_SEND, 1024, 8, 0);
	wr.wr_id = 0xfd;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, 0xfd, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 8);
	assert_true(ut_check(p->bbuf, 8, 61));
}

/* ---------------------------------------------------------------- */
/* Data movement                                                     */
/* ---------------------------------------------------------------- */
static void send_sizes(enum ibv_qp_type type)
{
	static const uint32_t sizes[] = { 0, 1, 7, 8, 9, 255, 1023, 1024, 1025, 4096, 4097, 65536 };
	struct pair *p = pair_new(type);
	uint32_t max = type == IBV_QPT_UD ? (128u << dev.rdi->port_attr.active_mtu) : BUFSZ / 2;

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i], grh = type == IBV_QPT_UD ? 40 : 0;
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		struct ibv_wc wc;
		bool imm = i & 1;

		if (len > max)
			continue;
		ut_fill(p->abuf, len, (uint32_t)i + 100);
		memset(p->bbuf, 0xee, len + grh + 16);
		brecv(p, 7000 + i, 0, len + grh + 16);
		wr1(p, &wr, &sge, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, 0, len, 0);
		wr.imm_data = htonl(0xc0de0000u + (uint32_t)i);
		ut_post_send(p->a, &wr);
		wc = expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
		assert_int_equal(wc.opcode, IBV_WC_SEND);
		assert_int_equal(wc.byte_len, len);
		assert_int_equal(wc.qp_num, p->a->qpn);
		wc = expect_wc(p->bcq, 7000 + i, IBV_WC_SUCCESS);
		assert_int_equal(wc.opcode, IBV_WC_RECV);
		assert_int_equal(wc.byte_len, len + grh);
		assert_int_equal(wc.qp_num, p->b->qpn);
		assert_int_equal(wc.src_qp, p->a->qpn);
		assert_int_equal(wc.wc_flags & IBV_WC_WITH_IMM, imm ? IBV_WC_WITH_IMM : 0);
		assert_int_equal(wc.wc_flags & IBV_WC_GRH, grh ? IBV_WC_GRH : 0);
		if (imm)
			assert_int_equal(wc.imm_data, htonl(0xc0de0000u + (uint32_t)i));
		assert_true(ut_check(p->bbuf + grh, len, (uint32_t)i + 100));
		/* nothing past the message */
		for (uint32_t j = len + grh; j < len + grh + 16; j++)
			assert_int_equal(p->bbuf[j], 0xee);
	}
	ut_cq_empty(p->acq, 5);
	ut_cq_empty(p->bcq, 5);
	pair_free(p, true);
}

static void test_send_rc(void **state)
{
	(void)state;
	send_sizes(IBV_QPT_RC);
}

static void test_send_uc(void **state)
{
	(void)state;
	send_sizes(IBV_QPT_UC);
}

static void test_send_ud(void **state)
{
	(void)state;
	send_sizes(IBV_QPT_UD);
}

static void rdma_write(enum ibv_qp_type type)
{
	static const uint32_t sizes[] = { 1, 5, 8, 9, 16, 17, 4096, 33333 };
	struct pair *p = pair_new(type);

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i], off = 64 + (uint32_t)i * 3;
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		struct ibv_wc wc;
		bool imm = i & 1;

		ut_fill(p->abuf + 8, len, (uint32_t)i);
		memset(p->bbuf, 0x5a, BUFSZ);
		if (imm)
			brecv(p, 300 + i, 0, 0);
		wr1(p, &wr, &sge, imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, 8, len,
		    baddr(p, off));
		wr.imm_data = htonl(0x1234 + (uint32_t)i);
		ut_post_send(p->a, &wr);
		wc = expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
		assert_int_equal(wc.opcode, IBV_WC_RDMA_WRITE);
		assert_int_equal(wc.byte_len, len);
		if (imm) {
			wc = expect_wc(p->bcq, 300 + i, IBV_WC_SUCCESS);
			assert_int_equal(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			assert_int_equal(wc.byte_len, len);
			assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
			assert_int_equal(wc.imm_data, htonl(0x1234 + (uint32_t)i));
			assert_int_equal(wc.src_qp, p->a->qpn);
		} else if (type == IBV_QPT_UC && !ut_inproc(&dev)) {
			/* over a link a UC WRITE lands after its send completion */
			uc_landed(p);
		}
		/* RC: the data is there at the ACK; in-process at once */
		assert_true(ut_check(p->bbuf + off, len, (uint32_t)i));
		assert_int_equal(p->bbuf[off - 1], 0x5a);
		assert_int_equal(p->bbuf[off + len], 0x5a);
		ut_cq_empty(p->bcq, 2);
	}
	pair_free(p, true);
}

static void test_write_rc(void **state)
{
	(void)state;
	rdma_write(IBV_QPT_RC);
}

static void test_write_uc(void **state)
{
	(void)state;
	rdma_write(IBV_QPT_UC);
}

static void test_read(void **state)
{
	static const uint32_t sizes[] = { 1, 8, 100, 1024, 4097, 65536 };
	struct pair *p = pair_new(IBV_QPT_RC);

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i];
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		struct ibv_wc wc;

		ut_fill(p->bbuf + 100, len, 40 + (uint32_t)i);
		memset(p->abuf, 0, BUFSZ);
		wr1(p, &wr, &sge, IBV_WR_RDMA_READ, 3, len, baddr(p, 100));
		ut_post_send(p->a, &wr);
		wc = expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
		assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
		assert_int_equal(wc.byte_len, len);
		assert_true(ut_check(p->abuf + 3, len, 40 + (uint32_t)i));
		assert_int_equal(p->abuf[2], 0);
		assert_int_equal(p->abuf[3 + len], 0);
	}
	ut_cq_empty(p->bcq, 2);
	pair_free(p, true);
}

static uint64_t atomic_op(struct pair *p, int op, uint32_t roff, uint64_t cmp_add, uint64_t swap)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	uint64_t r;

	memset(p->abuf + 64, 0xcc, 16);
	wr1(p, &wr, &sge, op, 64, 8, 0);
	wr.wr.atomic.remote_addr = baddr(p, roff);
	wr.wr.atomic.rkey = p->bmr->ibmr.rkey;
	wr.wr.atomic.compare_add = cmp_add;
	wr.wr.atomic.swap = swap;
	ut_post_send(p->a, &wr);
	wc = expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, op == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP
								    : IBV_WC_FETCH_ADD);
	assert_int_equal(wc.byte_len, 8);
	assert_int_equal(p->abuf[72], 0xcc); /* only 8 bytes written back */
	memcpy(&r, p->abuf + 64, 8);
	return r;
}

static void test_atomics(void **state)
{
	struct pair *p = pair_new(IBV_QPT_RC);
	uint64_t v = 0x0123456789abcdefull, m;

	(void)state;
	memcpy(p->bbuf + 512, &v, 8);
	/* FETCH_AND_ADD returns the original, adds (wrapping) */
	assert_int_equal(atomic_op(p, IBV_WR_ATOMIC_FETCH_AND_ADD, 512, 5, 0), v);
	memcpy(&m, p->bbuf + 512, 8);
	assert_int_equal(m, v + 5);
	assert_int_equal(atomic_op(p, IBV_WR_ATOMIC_FETCH_AND_ADD, 512, UINT64_MAX, 0), v + 5);
	memcpy(&m, p->bbuf + 512, 8);
	assert_int_equal(m, v + 4);
	/* CMP_AND_SWP: swaps when equal, returns the original either way */
	assert_int_equal(atomic_op(p, IBV_WR_ATOMIC_CMP_AND_SWP, 512, v, 42), v + 4);
	memcpy(&m, p->bbuf + 512, 8);
	assert_int_equal(m, v + 4);
	assert_int_equal(atomic_op(p, IBV_WR_ATOMIC_CMP_AND_SWP, 512, v + 4, 42), v + 4);
	memcpy(&m, p->bbuf + 512, 8);
	assert_int_equal(m, 42);
	/* neighbours untouched */
	for (int i = 504; i < 512; i++)
		assert_int_equal(p->bbuf[i], 0);
	for (int i = 520; i < 528; i++)
		assert_int_equal(p->bbuf[i], 0);
	ut_cq_empty(p->bcq, 2);
	pair_free(p, true);
}

/* rvt_copy_sge across many SGEs on both sides, odd sizes, merged and not. */
static void test_multi_sge(void **state)
{
	struct pair_opts o = defaults;
	struct pair *p;
	static const uint32_t ssz[] = { 3, 100, 1, 500, 0, 77, 4096, 13 };
	static const uint32_t rsz[] = { 50, 1, 300, 7, 0, 1000, 2, 3500, 1000 };
	struct ibv_sge s[32], r[32];
	struct ibv_send_wr wr;
	struct ibv_recv_wr rwr = { 0 }, *rbad;
	struct ibv_wc wc;
	uint32_t total = 0, rtotal = 0, off, n;
	uint8_t *expect;

	(void)state;
	o.sges = 32;
	p = pair_new_opts(IBV_QPT_RC, &o, NULL);
	expect = malloc(BUFSZ);
	assert_non_null(expect);
	ut_fill(p->abuf, BUFSZ, 3);

	/* SEND: 8 gather SGEs (spread out, one adjacent pair) -> 9 scatter SGEs */
	off = 0;
	for (size_t i = 0; i < ARRAY_SIZE(ssz); i++) {
		s[i] = (struct ibv_sge){ .addr = (uintptr_t)p->abuf + off, .length = ssz[i],
					 .lkey = p->amr->ibmr.lkey };
		memcpy(expect + total, p->abuf + off, ssz[i]);
		total += ssz[i];
		off += ssz[i] + (i == 2 ? 0 : 17); /* SGEs 2 and 3 adjacent */
	}
	off = 0;
	for (size_t i = 0; i < ARRAY_SIZE(rsz); i++) {
		r[i] = (struct ibv_sge){ .addr = (uintptr_t)p->bbuf + off, .length = rsz[i],
					 .lkey = p->bmr->ibmr.lkey };
		rtotal += rsz[i];
		off += rsz[i] + 11;
	}
	assert_true(rtotal >= total);
	memset(p->bbuf, 0, BUFSZ);
	rwr.wr_id = 1;
	rwr.sg_list = r;
	rwr.num_sge = ARRAY_SIZE(rsz);
	assert_int_equal(rvt_post_recv(p->b, &rwr, &rbad), 0);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 2;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = s;
	wr.num_sge = ARRAY_SIZE(ssz);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, 2, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, total);
	n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(rsz) && n < total; i++) {
		uint32_t take = rsz[i] < total - n ? rsz[i] : total - n;
		assert_memory_equal((void *)(uintptr_t)r[i].addr, expect + n, take);
		/* the gap after each segment is untouched */
		assert_int_equal(((uint8_t *)(uintptr_t)r[i].addr)[rsz[i]], 0);
		n += take;
	}
	assert_int_equal(n, total);

	/* 32 x 32 SGEs, all of different small sizes, through SEND, WRITE, READ */
	off = 0;
	total = 0;
	for (int i = 0; i < 32; i++) {
		s[i] = (struct ibv_sge){ .addr = (uintptr_t)p->abuf + off, .length = 1 + (uint32_t)i * 7,
					 .lkey = p->amr->ibmr.lkey };
		memcpy(expect + total, p->abuf + off, s[i].length);
		total += s[i].length;
		off += s[i].length + 1;
	}
	off = 0;
	for (int i = 0; i < 32; i++) {
		r[i] = (struct ibv_sge){ .addr = (uintptr_t)p->bbuf + off,
					 .length = 1 + (uint32_t)(31 - i) * 7,
					 .lkey = p->bmr->ibmr.lkey };
		off += r[i].length + 1;
	}
	memset(p->bbuf, 0, BUFSZ);
	rwr.wr_id = 3;
	rwr.num_sge = 32;
	assert_int_equal(rvt_post_recv(p->b, &rwr, &rbad), 0);
	wr.wr_id = 4;
	wr.num_sge = 32;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, 4, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 3, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, total);
	n = 0;
	for (int i = 0; i < 32; i++) {
		assert_memory_equal((void *)(uintptr_t)r[i].addr, expect + n, r[i].length);
		n += r[i].length;
	}
	/* WRITE gathers 32 SGEs into one contiguous remote range */
	memset(p->bbuf, 0, BUFSZ);
	wr.wr_id = 5;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = baddr(p, 1000);
	wr.wr.rdma.rkey = p->bmr->ibmr.rkey;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, 5, IBV_WC_SUCCESS);
	assert_memory_equal(p->bbuf + 1000, expect, total);
	/* READ scatters one remote range into 32 SGEs */
	ut_fill(p->bbuf + 2000, total, 99);
	memset(p->abuf, 0, BUFSZ);
	wr.wr_id = 6;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = baddr(p, 2000);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, 6, IBV_WC_SUCCESS);
	n = 0;
	for (int i = 0; i < 32; i++) {
		memcpy(expect + n, (void *)(uintptr_t)s[i].addr, s[i].length);
		assert_int_equal(((uint8_t *)(uintptr_t)s[i].addr)[s[i].length], 0);
		n += s[i].length;
	}
	assert_true(ut_check(expect, total, 99));
	free(expect);
	pair_free(p, true);
}

/* rvt_copy_sge directly: a cursor over segments, copy_last, release. */
static void test_copy_sge_direct(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	static uint8_t dst[300], src[300];
	struct rvt_mregion *mr = ut_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_sge list[5];
	struct rvt_sge_state ss;
	static const uint32_t seg[5] = { 1, 9, 100, 7, 150 };
	uint32_t off = 0;

	(void)state;
	for (int i = 0; i < 5; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)dst + off, .length = seg[i],
				     .lkey = mr->ibmr.lkey };
		assert_int_equal(rvt_lkey_ok(&dev.rdi->lkey_table, pd, &list[i], NULL, &s,
					     IBV_ACCESS_LOCAL_WRITE), 1);
		off += seg[i] + 4;
	}
	assert_int_equal(atomic_load(&mr->refcount), 6);
	ut_fill(src, sizeof(src), 8);
	memset(dst, 0, sizeof(dst));
	rvt_sge_state_init(&ss, list, 5, 267);
	/* in pieces that do not line up with the segments, last one copy_last */
	rvt_copy_sge(&ss, src, 5, true, false);
	rvt_copy_sge(&ss, src + 5, 200, true, false);
	assert_int_equal(atomic_load(&mr->refcount), 2); /* segments 0-3 done */
	rvt_copy_sge(&ss, src + 205, 62, true, true);
	assert_int_equal(atomic_load(&mr->refcount), 1);
	off = 0;
	{
		uint32_t n = 0;
		for (int i = 0; i < 5; i++) {
			assert_memory_equal(dst + off, src + n, seg[i]);
			if (i < 4)
				assert_int_equal(dst[off + seg[i]], 0);
			n += seg[i];
			off += seg[i] + 4;
		}
	}
	assert_int_equal(rvt_dereg_mr(mr), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* Zero-length operations: no data, rkeys not even looked at. */
static void test_zero_length(void **state)
{
	struct pair *p = pair_new(IBV_QPT_RC);
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;

	(void)state;
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 0, 12345);
	wr.wr.rdma.rkey = 0xdeadbeef;
	ut_post_send(p->a, &wr);
	wc = expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 0);
	wr1(p, &wr, &sge, IBV_WR_RDMA_READ, 0, 0, 12345);
	wr.wr.rdma.rkey = 0;
	wr.num_sge = 0;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	brecv(p, 9, 0, 0);
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0, 0);
	wr.wr.rdma.rkey = 0;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 9, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	assert_int_equal(wc.byte_len, 0);
	/* SEND 0 bytes into a receive without SGEs */
	ut_post_recv(p->b, 10, NULL, 0, 0);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 0, 0);
	wr.num_sge = 0;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 10, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 0);
	assert_int_equal(ut_state(p->a), IBV_QPS_RTS);
	assert_int_equal(ut_state(p->b), IBV_QPS_RTS);
	pair_free(p, true);
}

/* qp-semantics §2.9: signaled WRs complete; unsignaled only with sq_sig_all. */
static void test_signaling(void **state)
{
	(void)state;
	for (int all = 0; all < 2; all++) {
		struct pair_opts o = defaults;
		struct pair *p;
		struct ibv_send_wr wr[6];
		struct ibv_sge sge[6];
		struct ibv_wc wc;

		o.sig_all = all;
		p = pair_new_opts(IBV_QPT_RC, &o, NULL);
		for (int i = 0; i < 6; i++) {
			wr1(p, &wr[i], &sge[i], IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 64u * (uint32_t)i));
			wr[i].wr_id = (uint64_t)i;
			wr[i].send_flags = (i % 3 == 0) ? IBV_SEND_SIGNALED : 0;
			wr[i].next = i < 5 ? &wr[i + 1] : NULL;
		}
		ut_post_send(p->a, wr);
		for (int i = 0; i < 6; i++) {
			if (!all && i % 3)
				continue;
			ut_poll1(p->acq, &wc);
			assert_int_equal(wc.wr_id, (uint64_t)i);
			assert_int_equal(wc.status, IBV_WC_SUCCESS);
		}
		ut_cq_empty(p->acq, 10);
		/* every WQE was retired, signaled or not */
		assert_int_equal(p->a->s_last, p->a->s_head);
		pair_free(p, true);
	}
}

/* ---------------------------------------------------------------- */
/* Error outcomes (qp-semantics §10, §13)                           */
/* ---------------------------------------------------------------- */

/* Post [bad, good, good(unsignaled)] on a; check a's CQEs and states. */
static void expect_requester_error(struct pair *p, struct ibv_send_wr *bad, enum ibv_wc_status st,
				   bool a_err)
{
	struct ibv_send_wr more[2];
	struct ibv_sge sge[2];
	struct ibv_wc wc;

	wr1(p, &more[0], &sge[0], IBV_WR_RDMA_WRITE, 0, 4, baddr(p, 0));
	wr1(p, &more[1], &sge[1], IBV_WR_RDMA_WRITE, 0, 4, baddr(p, 0));
	more[0].wr_id = 0xb1;
	more[1].wr_id = 0xb2;
	more[1].send_flags = 0;
	more[0].next = &more[1];
	bad->next = &more[0];
	ut_post_send(p->a, bad);
	wc = expect_wc(p->acq, bad->wr_id, st);
	assert_int_equal(wc.qp_num, p->a->qpn);
	if (a_err) {
		/* the rest are flushed, the unsignaled one too */
		expect_wc(p->acq, 0xb1, IBV_WC_WR_FLUSH_ERR);
		expect_wc(p->acq, 0xb2, IBV_WC_WR_FLUSH_ERR);
		assert_int_equal(ut_state(p->a), IBV_QPS_ERR);
	} else {
		expect_wc(p->acq, 0xb1, IBV_WC_SUCCESS);
		assert_int_equal(ut_state(p->a), IBV_QPS_RTS);
	}
	ut_cq_empty(p->acq, 5);
}

/* b's CQ: first the given statuses (wr_ids 1..), then nothing. */
static void expect_responder(struct pair *p, const enum ibv_wc_status *st, int n, int b_state)
{
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc = expect_wc(p->bcq, 1 + (uint64_t)i, st[i]);
		assert_int_equal(wc.opcode, IBV_WC_RECV);
		assert_int_equal(wc.qp_num, p->b->qpn);
	}
	ut_cq_empty(p->bcq, 5);
	assert_int_equal(ut_state(p->b), b_state);
}

static void test_rem_access_err(void **state)
{
	static const enum ibv_wc_status flush2[] = { IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR };
	static const enum ibv_wc_status prot[] = { IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR };
	enum { BAD_RKEY, NO_RW_MR, OUT_OF_RANGE, READ_NO_RR, ATOMIC_NO_RA, IMM_BAD_RKEY, NCASE };

	(void)state;
	for (int c = 0; c < NCASE; c++) {
		for (int uc = 0; uc < 2; uc++) {
			struct pair *p;
			struct rvt_mregion *ro;
			struct ibv_send_wr wr;
			struct ibv_sge sge;

			if (uc && (c == READ_NO_RR || c == ATOMIC_NO_RA))
				continue;
			p = pair_new(uc ? IBV_QPT_UC : IBV_QPT_RC);
			/* an MR with only local write */
			ro = ut_mr(p->pd, p->bbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
			brecv(p, 1, 0, 64);
			brecv(p, 2, 0, 64);
			wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 16, baddr(p, 0));
			switch (c) {
			case BAD_RKEY: wr.wr.rdma.rkey ^= 0x10; break;
			case NO_RW_MR: wr.wr.rdma.rkey = ro->ibmr.rkey; break;
			case OUT_OF_RANGE: wr.wr.rdma.remote_addr = baddr(p, BUFSZ - 8); break;
			case READ_NO_RR:
				wr.opcode = IBV_WR_RDMA_READ;
				wr.wr.rdma.rkey = ro->ibmr.rkey;
				break;
			case ATOMIC_NO_RA:
				wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
				sge.length = 8;
				wr.wr.atomic.remote_addr = baddr(p, 0);
				wr.wr.atomic.rkey = ro->ibmr.rkey;
				break;
			case IMM_BAD_RKEY:
				wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
				wr.wr.rdma.rkey = 0;
				break;
			}
			if (uc && !ut_inproc(&dev)) {
				/* UC over a link: dropped, nobody is told; the
				 * good WRITE behind it lands 4 bytes at bbuf, the
				 * probe SEND 8, the bad one would have put 16 */
				ut_fill(p->abuf, 16, 77);
				expect_requester_error(p, &wr, IBV_WC_SUCCESS, false);
				uc_still_receives(p);
				expect_responder(p, NULL, 0, IBV_QPS_RTS);
				for (int i = 8; i < 16; i++)
					assert_int_equal(p->bbuf[i], 0);
				assert_int_not_equal(memcmp(p->abuf + 8, p->bbuf + 8, 8), 0);
				assert_int_equal(rvt_dereg_mr(ro), 0);
				pair_free(p, true);
				continue;
			}
			/* RC: both sides to ERR. UC: REM_ACCESS_ERR for the sender
			 * but no sender error state (as coded, qp-semantics §10). */
			expect_requester_error(p, &wr, IBV_WC_REM_ACCESS_ERR, !uc);
			/* responder: the WQE in progress (WRITE_WITH_IMM) gets
			 * LOC_PROT_ERR, the rest are flushed */
			expect_responder(p, c == IMM_BAD_RKEY ? prot : flush2, 2, IBV_QPS_ERR);
			for (int i = 0; i < 16; i++)
				assert_int_equal(p->bbuf[i], 0);
			assert_int_equal(rvt_dereg_mr(ro), 0);
			pair_free(p, true);
		}
	}
}

/* The responder's QP access flags lack the operation: REM_INV_REQ_ERR. */
static void test_rem_inv_req_err(void **state)
{
	static const enum ibv_wc_status flush2[] = { IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR };
	static const int ops[] = { IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
				   IBV_WR_ATOMIC_CMP_AND_SWP };
	static const int lacks[] = { IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE,
				     IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC };

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		for (int uc = 0; uc < 2; uc++) {
			struct pair_opts o = defaults;
			struct pair *p;
			struct ibv_send_wr wr;
			struct ibv_sge sge;

			if (uc && i >= 2)
				continue;
			o.b_access = ALL_REMOTE & ~lacks[i];
			p = pair_new_opts(uc ? IBV_QPT_UC : IBV_QPT_RC, &o, NULL);
			brecv(p, 1, 0, 64);
			brecv(p, 2, 0, 64);
			wr1(p, &wr, &sge, ops[i], 0, 8, baddr(p, 0));
			wr.wr.atomic.remote_addr = baddr(p, 0);
			wr.wr.atomic.rkey = p->bmr->ibmr.rkey;
			if (ops[i] == IBV_WR_ATOMIC_CMP_AND_SWP)
				wr.wr.atomic.rkey = p->bmr->ibmr.rkey;
			/* UC: the sender sees success (qp-semantics §10 "invalid", UC) */
			if (uc) {
				ut_post_send(p->a, &wr);
				expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
				assert_int_equal(ut_state(p->a), IBV_QPS_RTS);
			} else {
				expect_requester_error(p, &wr, IBV_WC_REM_INV_REQ_ERR, true);
			}
			if (uc && !ut_inproc(&dev)) {
				/* UC over a link: dropped (rc-protocol §3.3) */
				uc_still_receives(p);
				expect_responder(p, NULL, 0, IBV_QPS_RTS);
			} else {
				/* responder ERR; no receive was in progress: flushes only */
				expect_responder(p, flush2, 2, IBV_QPS_ERR);
			}
			pair_free(p, true);
		}
	}
}

/* Oversized SEND: requester REM_INV_REQ_ERR, responder LOC_LEN_ERR (decision). */
static void test_oversized_send(void **state)
{
	static const enum ibv_wc_status st[] = { IBV_WC_LOC_LEN_ERR, IBV_WC_WR_FLUSH_ERR };

	(void)state;
	for (int uc = 0; uc < 2; uc++) {
		struct pair *p = pair_new(uc ? IBV_QPT_UC : IBV_QPT_RC);
		struct ibv_send_wr wr;
		struct ibv_sge sge;

		brecv(p, 1, 0, 64);
		brecv(p, 2, 0, 64);
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, 65, 0);
		ut_fill(p->abuf, 65, 13);
		if (uc) {
			ut_post_send(p->a, &wr);
			expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
		} else {
			expect_requester_error(p, &wr, IBV_WC_REM_INV_REQ_ERR, true);
		}
		if (uc && !ut_inproc(&dev)) {
			/* UC over a link: dropped, the receive stays (rc-protocol §6) */
			uc_still_receives(p);
			expect_responder(p, NULL, 0, IBV_QPS_RTS);
			for (int i = 8; i < 64; i++)
				assert_int_equal(p->bbuf[i], 0);
			pair_free(p, true);
			continue;
		}
		expect_responder(p, st, 2, IBV_QPS_ERR);
		for (int i = 0; i < 64; i++)
			assert_int_equal(p->bbuf[i], 0);
		pair_free(p, true);
	}
}

/* A bad receive SGE: REM_OP_ERR / LOC_PROT_ERR, both to ERR (RC). */
static void test_bad_recv_sge(void **state)
{
	static const enum ibv_wc_status st[] = { IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR };
	enum { BAD_LKEY, NO_LOCAL_WRITE, OUT_OF_RANGE, OTHER_PD, NCASE };

	(void)state;
	for (int c = 0; c < NCASE; c++) {
		struct pair *p = pair_new(IBV_QPT_RC);
		struct rvt_pd *pd2 = ut_pd(&dev);
		struct rvt_mregion *ro = ut_mr(p->pd, p->bbuf, 4096, IBV_ACCESS_REMOTE_READ);
		struct rvt_mregion *o = ut_mr(pd2, p->bbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		uint32_t key = c == BAD_LKEY ? p->bmr->ibmr.lkey ^ 4 :
			       c == NO_LOCAL_WRITE ? ro->ibmr.lkey :
			       c == OTHER_PD ? o->ibmr.lkey : p->bmr->ibmr.lkey;
		uint8_t *addr = c == OUT_OF_RANGE ? p->bbuf + BUFSZ - 10 : p->bbuf;

		ut_post_recv(p->b, 1, addr, 64, key);
		brecv(p, 2, 0, 64);
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
		expect_requester_error(p, &wr, IBV_WC_REM_OP_ERR, true);
		expect_responder(p, st, 2, IBV_QPS_ERR);
		assert_int_equal(atomic_load(&ro->refcount), 1);
		assert_int_equal(atomic_load(&o->refcount), 1);
		assert_int_equal(rvt_dereg_mr(ro), 0);
		assert_int_equal(rvt_dereg_mr(o), 0);
		assert_int_equal(rvt_dealloc_pd(pd2), 0);
		pair_free(p, true);
	}
}

/* RNR with rnr_retry N: RNR_RETRY_EXC_ERR after N timer periods of the
 * responder's min_rnr_timer (the requester's own value is irrelevant). */
static void test_rnr_retry_exceeded(void **state)
{
	static const struct {
		uint8_t retries, code;
	} cases[] = { { 0, 0x17 }, { 1, 0x17 }, { 3, 0x12 }, { 3, 0x17 }, { 6, 0x0e } };

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct pair_opts o = defaults;
		struct pair *p;
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		uint64_t t0, dt_us, want_us;

		o.a_rnr_retry = cases[i].retries;
		o.b_min_rnr_timer = cases[i].code;
		o.a_min_rnr_timer = 0x1f; /* 491 ms: would show if used */
		p = pair_new_opts(IBV_QPT_RC, &o, NULL);
		want_us = (uint64_t)cases[i].retries * urvt_rnr_timer_us[cases[i].code];
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
		t0 = ut_now_ms();
		expect_requester_error(p, &wr, IBV_WC_RNR_RETRY_EXC_ERR, true);
		dt_us = (ut_now_ms() - t0) * 1000;
		if (dt_us + 1000 < want_us || dt_us > want_us + 400000)
			fail_msg("retries %u code %#x: %llu us, expected about %llu us",
				 cases[i].retries, cases[i].code, (unsigned long long)dt_us,
				 (unsigned long long)want_us);
		/* the responder is not affected */
		assert_int_equal(ut_state(p->b), IBV_QPS_RTS);
		ut_cq_empty(p->bcq, 5);
		pair_free(p, true);
	}
	/* the table itself: tests/wire test_wire_psn */
}

/* rnr_retry 7 = retry forever: a receive posted late still gets the SEND. */
static void test_rnr_infinite(void **state)
{
	struct pair_opts o = defaults;
	struct pair *p;
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;

	(void)state;
	o.a_rnr_retry = 7;
	o.b_min_rnr_timer = 0x0a; /* 0.32 ms: many retries in the wait below */
	p = pair_new_opts(IBV_QPT_RC, &o, NULL);
	ut_fill(p->abuf, 100, 17);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 100, 0);
	ut_post_send(p->a, &wr);
	ut_cq_empty(p->acq, 200);
	ut_cq_empty(p->bcq, 1);
	assert_int_equal(ut_state(p->a), IBV_QPS_RTS);
	brecv(p, 5, 0, 128);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 5, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 100);
	assert_true(ut_check(p->bbuf, 100, 17));
	/* the retry counter is reloaded after a success: once more */
	wr.wr_id = 77;
	ut_post_send(p->a, &wr);
	ut_cq_empty(p->acq, 50);
	brecv(p, 6, 0, 128);
	expect_wc(p->acq, 77, IBV_WC_SUCCESS);
	expect_wc(p->bcq, 6, IBV_WC_SUCCESS);
	pair_free(p, true);
}

/* A finite retry count is reloaded after each success. */
static void test_rnr_counter_reload(void **state)
{
	struct pair_opts o = defaults;
	struct pair *p;
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	(void)state;
	o.a_rnr_retry = 2;
	o.b_min_rnr_timer = 0x17; /* 30.72 ms */
	p = pair_new_opts(IBV_QPT_RC, &o, NULL);
	for (int round = 0; round < 3; round++) {
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, 4, 0);
		wr.wr_id = (uint64_t)round;
		ut_post_send(p->a, &wr);
		/* after the first RNR (one retry used), post the receive */
		ut_sleep_ms(5);
		brecv(p, 10 + (uint64_t)round, 0, 16);
		expect_wc(p->acq, (uint64_t)round, IBV_WC_SUCCESS);
		expect_wc(p->bcq, 10 + (uint64_t)round, IBV_WC_SUCCESS);
	}
	assert_int_equal(ut_state(p->a), IBV_QPS_RTS);
	pair_free(p, true);
}

/* Packets the device received (0 on the in-process path, which has none). */
static uint64_t dev_rx_packets(void)
{
	struct urvt_net *net = dev.rdi->transport_priv;

	return net ? __atomic_load_n(&net->stats->dev.v[URVT_CTR_RX_PKTS], __ATOMIC_RELAXED) : 0;
}

/* UC: no receive means the message is silently dropped. */
static void test_uc_rnr_drop(void **state)
{
	struct pair *p = pair_new(IBV_QPT_UC);
	const char *path = getenv("URVT_PATH");
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	uint64_t rx0 = dev_rx_packets();

	(void)state;
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	/* over a link the drop happens when the packet is received, which a
	 * loaded machine may put off: wait for it (bounded), not for a time */
	if (path && (!strcmp(path, "shm") || !strcmp(path, "udp")))
		for (int i = 0; i < 2000 && dev_rx_packets() == rx0; i++)
			ut_sleep_ms(1);
	ut_cq_empty(p->bcq, 10);
	/* and the next message goes into the next receive */
	ut_fill(p->abuf, 8, 4);
	brecv(p, 3, 0, 8);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 3, IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf, 8, 4));
	(void)wc;
	assert_int_equal(ut_state(p->b), IBV_QPS_RTS);
	pair_free(p, true);
}

/* Peer QP missing (destroyed, or not ready to receive): RC RETRY_EXC_ERR. */
static void test_peer_missing(void **state)
{
	(void)state;
	for (int c = 0; c < 3; c++) {
		for (int uc = 0; uc < 2; uc++) {
			struct pair *p = pair_new(uc ? IBV_QPT_UC : IBV_QPT_RC);
			struct ibv_send_wr wr;
			struct ibv_sge sge;

			if (c == 0) {        /* destroyed: nothing at that QPN */
				assert_int_equal(rvt_destroy_qp(p->b), 0);
				p->b = ut_qp(&dev, p->pd, p->type, p->bcq, p->bcq, NULL, NULL, false);
			} else if (c == 1) { /* INIT: no PROCESS_RECV */
				ut_modify_state(p->b, IBV_QPS_RESET);
				ut_to_init(p->b, ALL_REMOTE, 0);
				brecv(p, 1, 0, 64);
			} else {             /* ERR */
				ut_modify_state(p->b, IBV_QPS_ERR);
			}
			wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
			if (uc) {
				ut_post_send(p->a, &wr);
				expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
				assert_int_equal(ut_state(p->a), IBV_QPS_RTS);
			} else {
				expect_requester_error(p, &wr, IBV_WC_RETRY_EXC_ERR, true);
			}
			if (c == 1)
				assert_int_equal(rvt_rq_count(&p->b->rq), 1);
			ut_async_drain(&dev);
			pair_free(p, true);
		}
	}
}

/* A QP of a different type at the destination QPN drops the packet. */
static void test_peer_wrong_type(void **state)
{
	struct pair *p = pair_new(IBV_QPT_RC);
	struct rvt_qp *uc = ut_qp(&dev, p->pd, IBV_QPT_UC, p->bcq, p->bcq, NULL, NULL, false);
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	(void)state;
	ut_to_init(uc, ALL_REMOTE, 0);
	ut_to_rtr(&dev, uc, p->a->qpn, 1);
	ut_post_recv(uc, 1, p->bbuf, 64, p->bmr->ibmr.lkey);
	/* repoint a at the UC QP (DEST_QPN is set by INIT -> RTR only) */
	ut_modify_state(p->a, IBV_QPS_RESET);
	ut_to_init(p->a, ALL_REMOTE, 0);
	ut_to_rtr(&dev, p->a, uc->qpn, 1);
	ut_to_rts(p->a, 7, 7, 4);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	expect_requester_error(p, &wr, IBV_WC_RETRY_EXC_ERR, true);
	assert_int_equal(rvt_rq_count(&uc->rq), 1);
	assert_int_equal(rvt_destroy_qp(uc), 0);
	pair_free(p, true);
}

/* SEND_WITH_INV invalidates the rkey at the responder. */
static void test_send_with_inv(void **state)
{
	struct pair *p = pair_new(IBV_QPT_RC);
	struct rvt_pd *pd;
	uint32_t gone;
	struct rvt_mregion *victim = ut_mr(p->pd, p->bbuf + 4096, 4096, ALL_ACCESS);
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct rvt_sge s = { 0 };

	(void)state;
	brecv(p, 1, 0, 64);
	wr1(p, &wr, &sge, IBV_WR_SEND_WITH_INV, 0, 8, 0);
	wr.invalidate_rkey = victim->ibmr.rkey;
	ut_post_send(p->a, &wr);
	wc = expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_SEND);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_true(wc.wc_flags & IBV_WC_WITH_INV);
	assert_int_equal(wc.invalidated_rkey, victim->ibmr.rkey);
	assert_false(rvt_rkey_ok(p->b, &s, 8, (uintptr_t)p->bbuf + 4096, victim->ibmr.rkey,
				 IBV_ACCESS_REMOTE_WRITE));
	/* an RDMA WRITE with the invalidated key now fails */
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, (uintptr_t)p->bbuf + 4096);
	wr.wr.rdma.rkey = victim->ibmr.rkey;
	expect_requester_error(p, &wr, IBV_WC_REM_ACCESS_ERR, true);
	expect_responder(p, NULL, 0, IBV_QPS_ERR);
	gone = victim->ibmr.rkey;
	assert_int_equal(rvt_dereg_mr(victim), 0);
	pd = p->pd;
	pair_free(p, false);

	/* a key that cannot be invalidated (deregistered) */
	p = pair_new_opts(IBV_QPT_RC, &defaults, pd);
	brecv(p, 1, 0, 64);
	wr1(p, &wr, &sge, IBV_WR_SEND_WITH_INV, 0, 8, 0);
	wr.invalidate_rkey = gone;
	wr.wr_id = 99;
	if (ut_inproc(&dev)) {
		/* rvt_ruc_loopback ignores it: no WITH_INV flag */
		ut_post_send(p->a, &wr);
		expect_wc(p->acq, 99, IBV_WC_SUCCESS);
		wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
		assert_false(wc.wc_flags & IBV_WC_WITH_INV);
		assert_int_equal(ut_state(p->b), IBV_QPS_RTS);
	} else {
		/* over a link, rxe's class J (rc-protocol §3.7): the receive
		 * fails, the responder goes to ERR without a NAK, the requester
		 * times out (docs/deviations.md) */
		expect_requester_error(p, &wr, IBV_WC_RETRY_EXC_ERR, true);
		expect_wc(p->bcq, 1, IBV_WC_REM_INV_REQ_ERR);
		expect_responder(p, NULL, 0, IBV_QPS_ERR);
	}
	pair_free(p, true);
}

/* COMM_EST: the first request reaching a responder in RTR (qp-semantics §5.6). */
static void test_comm_est(void **state)
{
	struct pair *p = pair_new(IBV_QPT_RC);
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	(void)state;
	ut_async_drain(&dev);
	/* b back to RTR */
	ut_modify_state(p->b, IBV_QPS_RESET);
	ut_to_init(p->b, ALL_REMOTE, 0);
	ut_to_rtr(&dev, p->b, p->a->qpn, 1);
	brecv(p, 1, 0, 64);
	brecv(p, 2, 0, 64);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_COMM_EST, p->b, 20), 1);
	/* once */
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	expect_wc(p->bcq, 2, IBV_WC_SUCCESS);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_COMM_EST, p->b, 20), 0);
	assert_int_equal(ut_state(p->b), IBV_QPS_RTR);
	ut_to_rts(p->b, 7, 7, 4);
	pair_free(p, true);
}

/* ---------------------------------------------------------------- */
/* UD                                                                 */
/* ---------------------------------------------------------------- */
static uint16_t ip_csum(const uint8_t *h)
{
	uint32_t s = 0;

	for (int i = 0; i < 20; i += 2)
		s += (uint32_t)(h[i] << 8 | h[i + 1]);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

static void test_ud_grh(void **state)
{
	struct pair *p = pair_new(IBV_QPT_UD);
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	const uint8_t *g = p->bbuf, *ip = p->bbuf + 20;
	const uint8_t *me = dev.rdi->gid.raw + 12;

	(void)state;
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };

	if (memcmp(dev.rdi->gid.raw, v4mapped, 12)) /* an IPv6 GID */
		skip();
	memset(p->bbuf, 0xee, 256);
	brecv(p, 1, 0, 256);
	ut_fill(p->abuf, 50, 6);
	wr1(p, &wr, &sge, IBV_WR_SEND_WITH_IMM, 0, 50, 0);
	wr.imm_data = htonl(0xfeed);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 50 + 40);
	assert_true(wc.wc_flags & IBV_WC_GRH);
	assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(wc.imm_data, htonl(0xfeed));
	assert_int_equal(wc.src_qp, p->a->qpn);
	assert_int_equal(wc.qp_num, p->b->qpn);
	for (int i = 0; i < 20; i++)
		assert_int_equal(g[i], 0);
	assert_int_equal(ip[0], 0x45);
	assert_int_equal(ip[9], 17);
	assert_memory_equal(ip + 12, me, 4);
	assert_memory_equal(ip + 16, me, 4);
	/* total length: IP + UDP + BTH + DETH + ImmDt + payload(padded) + ICRC */
	assert_int_equal(ip[2] << 8 | ip[3], 20 + 8 + 12 + 8 + 4 + 52 + 4);
	assert_int_equal(ip_csum(ip), 0xffff);
	assert_true(ut_check(p->bbuf + 40, 50, 6));
	assert_int_equal(p->bbuf[90], 0xee);
	/* the QP keeps its last image (resp.c ud_grh): the next datagram, of
	 * another length and without ImmDt, gets its own, then the first
	 * length again its first image */
	for (int k = 0; k < 2; k++) {
		uint32_t len = k ? 50 : 7;

		memset(p->bbuf, 0xee, 256);
		brecv(p, 2, 0, 256);
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, len, 0);
		ut_post_send(p->a, &wr);
		expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
		wc = expect_wc(p->bcq, 2, IBV_WC_SUCCESS);
		assert_int_equal(wc.byte_len, len + 40);
		assert_int_equal(ip[0], 0x45);
		assert_int_equal(ip[2] << 8 | ip[3], 20 + 8 + 12 + 8 + ((len + 3) & ~3u) + 4);
		assert_int_equal(ip_csum(ip), 0xffff);
		assert_memory_equal(ip + 12, me, 4);
	}
	pair_free(p, true);
}

/* The GRH image and a small payload leave in one copy (resp.c ud_rcv):
 * scattered over three SGEs that cut both, every byte lands where the
 * SGEs say and nothing past them. */
static void test_ud_grh_split_sges(void **state)
{
	struct pair *p = pair_new(IBV_QPT_UD);
	struct ibv_recv_wr rwr, *bad;
	struct ibv_sge rs[3];
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	uint8_t img[40 + 30];
	const uint32_t len[3] = { 25, 30, 64 }, off[3] = { 0, 100, 200 };

	(void)state;
	memset(p->bbuf, 0xee, 512);
	for (int i = 0; i < 3; i++)
		rs[i] = (struct ibv_sge){ .addr = (uintptr_t)p->bbuf + off[i], .length = len[i],
					  .lkey = p->bmr->ibmr.lkey };
	rwr = (struct ibv_recv_wr){ .wr_id = 9, .sg_list = rs, .num_sge = 3 };
	assert_int_equal(rvt_post_recv(p->b, &rwr, &bad), 0);
	ut_fill(p->abuf, 30, 3);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 30, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 9, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 40 + 30);
	/* the image and payload, read back through the three pieces */
	memcpy(img, p->bbuf, 25);
	memcpy(img + 25, p->bbuf + 100, 30);
	memcpy(img + 55, p->bbuf + 200, 15);
	for (int i = 0; i < 20; i++)
		assert_int_equal(img[i], 0);
	assert_int_equal(img[20], 0x45);
	assert_int_equal(ip_csum(img + 20), 0xffff);
	assert_true(ut_check(img + 40, 30, 3));
	/* nothing past each piece's share */
	assert_int_equal(p->bbuf[25], 0xee);
	assert_int_equal(p->bbuf[130], 0xee);
	assert_int_equal(p->bbuf[215], 0xee);
	pair_free(p, true);
}

static void test_ud_qkey(void **state)
{
	struct pair *p = pair_new(IBV_QPT_UD);
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;

	(void)state;
	brecv(p, 1, 0, 256);
	/* wrong Q_Key: dropped silently, the sender completes */
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	wr.wr.ud.remote_qkey = 0x2223;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	ut_cq_empty(p->bcq, 10);
	/* bit 31 set: the sender's own Q_Key (0x2222 here, same as b's) */
	wr.wr.ud.remote_qkey = 0x80000000u;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 48);
	/* to a QPN that does not exist: sender success, nothing else */
	wr.wr.ud.remote_qpn = 0xfffffe;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	ut_cq_empty(p->bcq, 10);
	pair_free(p, true);
}

/* A receive too small for GRH + payload: packet dropped, WQE kept for the
 * next packet. */
static void test_ud_small_recv(void **state)
{
	struct pair *p = pair_new(IBV_QPT_UD);
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;

	(void)state;
	brecv(p, 1, 0, 40 + 10);
	brecv(p, 2, 100, 40 + 100);
	ut_fill(p->abuf, 20, 1);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 11, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	ut_cq_empty(p->bcq, 10);
	sge.length = 10;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 50);
	assert_true(ut_check(p->bbuf + 40, 10, 1));
	sge.length = 20;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 2, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 60);
	assert_true(ut_check(p->bbuf + 140, 20, 1));
	/* a kept WQE is completed (flushed) when the QP goes to ERR, then
	 * the rest, in order */
	brecv(p, 3, 0, 45);
	brecv(p, 4, 0, 45);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	ut_cq_empty(p->bcq, 5);
	ut_modify_state(p->b, IBV_QPS_ERR);
	expect_wc(p->bcq, 3, IBV_WC_WR_FLUSH_ERR);
	expect_wc(p->bcq, 4, IBV_WC_WR_FLUSH_ERR);
	ut_cq_empty(p->bcq, 5);
	assert_int_equal(atomic_load(&p->bmr->refcount), 1);
	pair_free(p, true);
}

/* ---------------------------------------------------------------- */
/* Reset and error flush rules (qp-semantics §5.4, §5.5)            */
/* ---------------------------------------------------------------- */
static void test_reset_discards(void **state)
{
	struct pair *p = pair_new(IBV_QPT_RC);
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	(void)state;
	brecv(p, 1, 0, 64);
	brecv(p, 2, 0, 64);
	ut_modify_state(p->b, IBV_QPS_RESET);
	ut_cq_empty(p->bcq, 20);
	assert_int_equal(atomic_load(&p->bmr->refcount), 1);
	/* b comes back empty: a SEND now meets RNR (a: rnr_retry 0 here) */
	ut_to_init(p->b, ALL_REMOTE, 0);
	ut_to_rtr(&dev, p->b, p->a->qpn, 1);
	ut_to_rts(p->b, 7, 7, 4);
	assert_int_equal(rvt_rq_count(&p->b->rq), 0);
	ut_modify_state(p->a, IBV_QPS_RESET);
	ut_to_init(p->a, ALL_REMOTE, 0);
	ut_to_rtr(&dev, p->a, p->b->qpn, 1);
	ut_to_rts(p->a, 7, 0, 4);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_RNR_RETRY_EXC_ERR);
	ut_cq_empty(p->bcq, 5);
	pair_free(p, true);
}

static void test_err_flushes_recv(void **state)
{
	struct pair *p = pair_new(IBV_QPT_UC);

	(void)state;
	for (int i = 0; i < 5; i++)
		brecv(p, 100 + (uint64_t)i, 0, 64);
	ut_modify_state(p->b, IBV_QPS_ERR);
	for (int i = 0; i < 5; i++) {
		struct ibv_wc wc = expect_wc(p->bcq, 100 + (uint64_t)i, IBV_WC_WR_FLUSH_ERR);
		assert_int_equal(wc.opcode, IBV_WC_RECV);
		assert_int_equal(wc.qp_num, p->b->qpn);
	}
	ut_cq_empty(p->bcq, 5);
	/* ERR -> ERR: nothing more */
	ut_modify_state(p->b, IBV_QPS_ERR);
	ut_cq_empty(p->bcq, 5);
	pair_free(p, true);
}

/* A QP on an SRQ entering ERR: LAST_WQE_REACHED, the SRQ is not flushed. */
static void test_srq_last_wqe(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct rvt_srq *srq;
	struct pair_opts o = defaults;
	struct pair *p;
	struct ibv_recv_wr rw[3], *bad;
	struct ibv_sge rs;
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	static uint8_t rbuf[64];
	struct rvt_mregion *rmr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	int err = 0;

	(void)state;
	srq = rvt_create_srq(pd, &sa, &err);
	assert_non_null(srq);
	o.b_srq = srq;
	p = pair_new_opts(IBV_QPT_RC, &o, pd);
	ut_async_drain(&dev);
	/* the SRQ's buffers outlive the pairs */
	rs = (struct ibv_sge){ .addr = (uintptr_t)rbuf, .length = 64, .lkey = rmr->ibmr.lkey };
	for (int i = 0; i < 3; i++)
		rw[i] = (struct ibv_recv_wr){ .wr_id = 40 + (uint64_t)i, .sg_list = &rs, .num_sge = 1,
					      .next = i < 2 ? &rw[i + 1] : NULL };
	assert_int_equal(rvt_post_srq_recv(srq, rw, &bad), 0);
	/* one goes through the SRQ */
	ut_fill(p->abuf, 8, 2);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 40, IBV_WC_SUCCESS);
	assert_true(ut_check(rbuf, 8, 2));
	(void)wc;
	ut_modify_state(p->b, IBV_QPS_ERR);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_QP_LAST_WQE_REACHED, p->b, 20), 1);
	ut_cq_empty(p->bcq, 10);
	assert_int_equal(rvt_rq_count(&srq->rq), 2);
	/* an error on the responder side raises it too */
	pair_free(p, false);
	o.b_srq = srq;
	p = pair_new_opts(IBV_QPT_RC, &o, pd);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 100, 0); /* larger than 64: oversized */
	expect_requester_error(p, &wr, IBV_WC_REM_INV_REQ_ERR, true);
	wc = expect_wc(p->bcq, 41, IBV_WC_LOC_LEN_ERR);
	ut_cq_empty(p->bcq, 5);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_QP_LAST_WQE_REACHED, p->b, 20), 1);
	assert_int_equal(rvt_rq_count(&srq->rq), 1);
	pair_free(p, false);
	assert_int_equal(rvt_destroy_srq(srq), 0);
	assert_int_equal(rvt_dereg_mr(rmr), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/* A remote atomic address that is not 8-byte aligned: invalid request. */
static void test_misaligned_remote_atomic(void **state)
{
	static const enum ibv_wc_status flush1[] = { IBV_WC_WR_FLUSH_ERR };
	struct pair *p = pair_new(IBV_QPT_RC);
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	(void)state;
	brecv(p, 1, 0, 64);
	wr1(p, &wr, &sge, IBV_WR_ATOMIC_FETCH_AND_ADD, 64, 8, 0);
	wr.wr.atomic.remote_addr = baddr(p, 4);
	wr.wr.atomic.rkey = p->bmr->ibmr.rkey;
	wr.wr.atomic.compare_add = 1;
	expect_requester_error(p, &wr, IBV_WC_REM_INV_REQ_ERR, true);
	expect_responder(p, flush1, 1, IBV_QPS_ERR);
	for (int i = 0; i < 16; i++)
		assert_int_equal(p->bbuf[i], 0);
	pair_free(p, true);
}

/*
 * An MR whose iova and host address differ mod 8 (ibv_reg_mr_iova): an
 * 8-aligned iova names a misaligned host word. The target must be aligned
 * in memory, not only on the wire (rc-protocol §3, the responder
 * table): invalid request, as the UDP responder answers
 * (tests/transport test_resp_atomic_iova), never a misaligned __atomic.
 */
static void test_atomic_iova_misaligned_host(void **state)
{
	static const enum ibv_wc_status flush1[] = { IBV_WC_WR_FLUSH_ERR };
	static const int ops[] = { IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP };

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		struct pair *p = pair_new(IBV_QPT_RC);
		const uint64_t iova = 0x7000000; /* 8-aligned; host address bbuf + 4 */
		struct rvt_mregion *mr;
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		int err = 0;

		mr = rvt_reg_mr(p->pd, p->bbuf + 4, 4096, iova,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, &err);
		assert_non_null(mr);
		brecv(p, 1, 0, 64);
		wr1(p, &wr, &sge, ops[i], 64, 8, 0);
		wr.wr.atomic.remote_addr = iova + 16;
		wr.wr.atomic.rkey = mr->ibmr.rkey;
		wr.wr.atomic.compare_add = 0;
		wr.wr.atomic.swap = 0x1111111111111111ull;
		expect_requester_error(p, &wr, IBV_WC_REM_INV_REQ_ERR, true);
		expect_responder(p, flush1, 1, IBV_QPS_ERR);
		for (int b = 0; b < 64; b++)
			assert_int_equal(p->bbuf[b], 0);
		assert_int_equal(atomic_load(&mr->refcount), 1);
		assert_int_equal(rvt_dereg_mr(mr), 0);
		pair_free(p, true);
	}
}

/* UD: the AH is snapshotted at post time (qp-semantics §2.2): destroying it
 * after posting does not affect the queued WR. */
static void test_ud_ah_snapshot(void **state)
{
	struct pair *p = pair_new(IBV_QPT_UD);
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_wc wc;

	(void)state;
	brecv(p, 1, 0, 128);
	ut_modify_state(p->a, IBV_QPS_SQD);
	ut_fill(p->abuf, 30, 12);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 30, 0);
	ut_post_send(p->a, &wr);
	assert_int_equal(rvt_destroy_ah(p->ah), 0);
	p->ah = NULL;
	ut_cq_empty(p->bcq, 10);
	ut_modify_state(p->a, IBV_QPS_RTS);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 70);
	assert_true(ut_check(p->bbuf + 40, 30, 12));
	pair_free(p, true);
}

/* The responder's CQ overflows: CQ_ERR once, the responder goes to ERR. */
static void test_responder_cq_overflow(void **state)
{
	struct pair_opts o = defaults;
	struct pair *p;
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	int cap;

	(void)state;
	o.bcq_size = 2;
	p = pair_new_opts(IBV_QPT_RC, &o, NULL);
	cap = p->bcq->ibcq.cqe;
	ut_async_drain(&dev);
	for (int i = 0; i < cap + 2; i++)
		brecv(p, 1 + (uint64_t)i, 0, 64);
	for (int i = 0; i <= cap; i++) {
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
		wr.wr_id = 100 + (uint64_t)i;
		ut_post_send(p->a, &wr);
		/* the requester's side was fine each time */
		expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	}
	assert_int_equal(ut_state(p->b), IBV_QPS_ERR);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_CQ_ERR, p->bcq, 20), 1);
	for (int i = 0; i < cap; i++)
		expect_wc(p->bcq, 1 + (uint64_t)i, IBV_WC_SUCCESS);
	ut_cq_empty(p->bcq, 5);
	/* b no longer receives: RC requester times out */
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	expect_requester_error(p, &wr, IBV_WC_RETRY_EXC_ERR, true);
	pair_free(p, true);
}

/* A responder that goes to ERR flushes its own send queue (asynchronously,
 * qp-semantics §5.5 step 3), also a WQE waiting on an RNR timer. */
static void test_error_flushes_responder_sq(void **state)
{
	struct pair_opts o = defaults;
	struct pair *p;
	struct ibv_send_wr wr;
	struct ibv_sge sge[2];

	(void)state;
	o.a_min_rnr_timer = 0x0e; /* b's SENDs to a (no receives) retry every 1.28 ms */
	p = pair_new_opts(IBV_QPT_RC, &o, NULL);
	memset(&wr, 0, sizeof(wr));
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)p->bbuf, .length = 8, .lkey = p->bmr->ibmr.lkey };
	wr = (struct ibv_send_wr){ .wr_id = 0xbb, .sg_list = &sge[0], .num_sge = 1,
				   .opcode = IBV_WR_SEND };
	ut_post_send(p->b, &wr);
	wr.wr_id = 0xbc;
	ut_post_send(p->b, &wr);
	ut_cq_empty(p->bcq, 20);
	/* a bad WRITE from a puts b in ERR */
	wr1(p, &wr, &sge[1], IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 0));
	wr.wr.rdma.rkey = 0;
	expect_requester_error(p, &wr, IBV_WC_REM_ACCESS_ERR, true);
	expect_wc(p->bcq, 0xbb, IBV_WC_WR_FLUSH_ERR);
	expect_wc(p->bcq, 0xbc, IBV_WC_WR_FLUSH_ERR);
	ut_cq_empty(p->bcq, 10);
	assert_int_equal(ut_state(p->b), IBV_QPS_ERR);
	pair_free(p, true);
}

/* Moving to ERR or destroying a QP whose WQE waits on RNR retries. */
static void test_rnr_then_err_or_destroy(void **state)
{
	(void)state;
	for (int destroy = 0; destroy < 2; destroy++) {
		struct pair_opts o = defaults;
		struct pair *p;
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		uint64_t t0;

		o.b_min_rnr_timer = 0x01; /* 10 us: retrying all the time */
		p = pair_new_opts(IBV_QPT_RC, &o, NULL);
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
		ut_post_send(p->a, &wr);
		wr.wr_id = 2;
		ut_post_send(p->a, &wr);
		ut_sleep_ms(30);
		assert_int_equal(atomic_load(&p->amr->refcount), 3);
		t0 = ut_now_ms();
		if (destroy) {
			assert_int_equal(rvt_destroy_qp(p->a), 0);
			p->a = ut_qp(&dev, p->pd, IBV_QPT_RC, p->acq, p->acq, NULL, NULL, false);
			ut_cq_empty(p->acq, 20);
		} else {
			ut_modify_state(p->a, IBV_QPS_ERR);
			expect_wc(p->acq, wr1_id(IBV_WR_SEND), IBV_WC_WR_FLUSH_ERR);
			expect_wc(p->acq, 2, IBV_WC_WR_FLUSH_ERR);
			ut_cq_empty(p->acq, 20);
		}
		assert_true(ut_now_ms() - t0 < 1000);
		assert_int_equal(atomic_load(&p->amr->refcount), 1);
		ut_cq_empty(p->bcq, 5);
		pair_free(p, true);
	}
}

/* The same with the responder on an SRQ: ERR from a CQ overflow raises
 * LAST_WQE_REACHED like any other way into ERR (qp-semantics §5.5 step 7, §13). */
static void test_responder_cq_overflow_srq(void **state)
{
	struct rvt_pd *pd = ut_pd(&dev);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	static uint8_t rbuf[64];
	struct rvt_mregion *rmr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rs = { .addr = (uintptr_t)rbuf, .length = 64, .lkey = rmr->ibmr.lkey };
	struct ibv_recv_wr rw = { .sg_list = &rs, .num_sge = 1 }, *bad;
	struct pair_opts o = defaults;
	struct rvt_srq *srq;
	struct pair *p;
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	int cap, err = 0;

	(void)state;
	srq = rvt_create_srq(pd, &sa, &err);
	assert_non_null(srq);
	o.b_srq = srq;
	o.bcq_size = 2;
	p = pair_new_opts(IBV_QPT_RC, &o, pd);
	cap = p->bcq->ibcq.cqe;
	ut_async_drain(&dev);
	for (int i = 0; i < cap + 2; i++) {
		rw.wr_id = 1 + (uint64_t)i;
		assert_int_equal(rvt_post_srq_recv(srq, &rw, &bad), 0);
	}
	for (int i = 0; i <= cap; i++) {
		wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
		ut_post_send(p->a, &wr);
		expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	}
	assert_int_equal(ut_state(p->b), IBV_QPS_ERR);
	{
		int cq_err = 0, last_wqe = 0;
		struct ibv_async_event ev;
		ut_sleep_ms(20);
		while (ut_async_wait(&dev, &ev, 0)) {
			if (ev.event_type == IBV_EVENT_CQ_ERR &&
			    ev.element.cq == ibv_cq_ex_to_cq(&p->bcq->ibcq))
				cq_err++;
			if (ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
			    ev.element.qp == &p->b->ibqp_ex.qp_base)
				last_wqe++;
		}
		assert_int_equal(cq_err, 1);
		assert_int_equal(last_wqe, 1);
	}
	pair_free(p, false);
	assert_int_equal(rvt_destroy_srq(srq), 0);
	assert_int_equal(rvt_dereg_mr(rmr), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
}

/*
 * An async event still unread when its QP is destroyed is dropped (as the
 * kernel drops it): it must not be counted on, or name, whatever QP later
 * occupies the recycled structure, and the async fd must not stay readable.
 */
static void test_event_after_destroy(void **state)
{
	struct pair *p;
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	struct ibv_async_event ev;
	struct rvt_qp *old, *n;

	(void)state;
	p = pair_new(IBV_QPT_RC);
	ut_async_drain(&dev);
	ut_modify_state(p->b, IBV_QPS_RESET);
	ut_to_init(p->b, ALL_REMOTE, 0);
	ut_to_rtr(&dev, p->b, p->a->qpn, 1);
	brecv(p, 1, 0, 64);
	wr1(p, &wr, &sge, IBV_WR_SEND, 0, 8, 0);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	/* COMM_EST for b is in the pipe, unread: destroy b, make another QP */
	old = p->b;
	assert_int_equal(rvt_destroy_qp(p->b), 0);
	n = ut_qp(&dev, p->pd, IBV_QPT_RC, p->bcq, p->bcq, NULL, NULL, false);
	p->b = n;
	/* the destroyed QP's event is gone: nothing to read at all */
	assert_false(ut_async_wait(&dev, &ev, 100));
	(void)old;
	assert_int_equal(atomic_load(&n->async_events_reported), 0);
	pair_free(p, true);
}

/* a caches b for post_direct where b is in this process: a went to RTR
 * before b was in the QPN table (pair_new), and a modify looks again. */
static void direct_peer(struct pair *p)
{
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTS };

	assert_int_equal(rvt_modify_qp(p->a, &qa, IBV_QP_STATE), 0);
	assert_ptr_equal(p->a->lb_peer, ut_inproc(&dev) ? p->b : NULL);
}

/*
 * post_send runs a lone RDMA WRITE on an idle queue at once (post.c
 * post_direct). Whatever it does must be what the engine would have done:
 * WQEs already queued go first, the PSNs move as for a queued WR, the
 * responder in RTR raises COMM_EST once, inline data and sq_sig_all work.
 */
static void test_direct_write(void **state)
{
	struct pair_opts o = defaults;
	struct ibv_qp_attr qa;
	struct ibv_send_wr wr, send;
	struct ibv_sge sge, ssge;
	struct ibv_wc wc;
	struct pair *p;
	uint32_t pmtu, psn;

	(void)state;
	o.b_min_rnr_timer = 0x0a; /* 0.32 ms */
	o.max_inline = 64;
	p = pair_new_opts(IBV_QPT_RC, &o, NULL);
	direct_peer(p);

	/* 1. behind a SEND waiting for a receive (RNR): not before it */
	ut_fill(p->abuf, 64, 3);
	wr1(p, &send, &ssge, IBV_WR_SEND, 0, 16, 0);
	ut_post_send(p->a, &send);
	memset(p->bbuf, 0x5a, 256);
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 16, 8, baddr(p, 128));
	ut_post_send(p->a, &wr);
	ut_cq_empty(p->acq, 20);
	assert_int_equal(p->bbuf[128], 0x5a);
	brecv(p, 1, 0, 64);
	expect_wc(p->acq, send.wr_id, IBV_WC_SUCCESS);
	wc = expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RDMA_WRITE);
	assert_int_equal(wc.byte_len, 8);
	assert_int_equal(wc.qp_num, p->a->qpn);
	assert_memory_equal(p->bbuf + 128, p->abuf + 16, 8);
	expect_wc(p->bcq, 1, IBV_WC_SUCCESS);

	/* 2. PSNs: one per MTU, as a queued WR takes them */
	assert_int_equal(rvt_query_qp(p->a, &qa, 0, NULL), 0);
	psn = qa.sq_psn;
	pmtu = 128u << qa.path_mtu;
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 4096, baddr(p, 4096));
	ut_fill(p->abuf, 4096, 9);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 4096, 4096, 9));
	assert_int_equal(rvt_query_qp(p->a, &qa, 0, NULL), 0);
	assert_int_equal(qa.sq_psn, (psn + (4096 + pmtu - 1) / pmtu) & 0xffffff);

	/* 3. unsignaled: no completion; the next signaled one comes alone */
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 0));
	wr.send_flags = 0;
	for (int i = 0; i < 5; i++)
		ut_post_send(p->a, &wr);
	ut_cq_empty(p->acq, 2);
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr_id = 55;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, 55, IBV_WC_SUCCESS);
	ut_cq_empty(p->acq, 2);

	/* 4. inline: the bytes of the SGE, no lkey needed */
	{
		uint8_t data[40];
		ut_fill(data, sizeof(data), 77);
		wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, sizeof(data), baddr(p, 1000));
		sge.addr = (uintptr_t)data;
		sge.lkey = 0;
		wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ut_post_send(p->a, &wr);
		memset(data, 0, sizeof(data));
		expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
		assert_true(ut_check(p->bbuf + 1000, sizeof(data), 77));
	}

	/* 5. a responder in RTR: COMM_EST once, as for a SEND (expecting
	 * a's next PSN: a link checks it) */
	ut_async_drain(&dev);
	ut_modify_state(p->b, IBV_QPS_RESET);
	ut_to_init(p->b, ALL_REMOTE, 0);
	assert_int_equal(rvt_query_qp(p->a, &qa, 0, NULL), 0);
	ut_to_rtr_psn(&dev, p->b, p->a->qpn, qa.sq_psn, 1);
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 0));
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_COMM_EST, p->b, 20), 1);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_COMM_EST, p->b, 20), 0);
	/* 5b. unsignaled, 8 bytes (the plain case's shape): COMM_EST too */
	ut_modify_state(p->b, IBV_QPS_RESET);
	ut_to_init(p->b, ALL_REMOTE, 0);
	assert_int_equal(rvt_query_qp(p->a, &qa, 0, NULL), 0);
	ut_to_rtr_psn(&dev, p->b, p->a->qpn, qa.sq_psn, 1);
	ut_fill(p->abuf, 8, 21);
	wr.send_flags = 0;
	ut_post_send(p->a, &wr);
	assert_int_equal(ut_async_count(&dev, IBV_EVENT_COMM_EST, p->b, 20), 1);
	assert_true(ut_check(p->bbuf, 8, 21));
	ut_cq_empty(p->acq, 2);
	wr.send_flags = IBV_SEND_SIGNALED;
	ut_to_rts(p->b, 7, 7, 4);

	/* 6. no peer cached (it was not there when a went to RTR): the
	 * engine looks it up per WR, as always (over a link: nothing cached) */
	{
		bool inproc = ut_inproc(&dev);
		struct rvt_qp *c = ut_qp(&dev, p->pd, IBV_QPT_RC, p->bcq, p->bcq, NULL, NULL, false);
		struct rvt_qp *d = ut_qp(&dev, p->pd, IBV_QPT_RC, p->acq, p->acq, NULL, NULL, false);
		ut_to_init(d, ALL_REMOTE, 0);
		ut_to_rtr(&dev, d, c->qpn, 1);
		ut_to_rts(d, 7, 7, 4);
		assert_null(d->lb_peer);
		ut_to_init(c, ALL_REMOTE, 0);
		ut_to_rtr(&dev, c, d->qpn, 1);
		ut_to_rts(c, 7, 7, 4);
		assert_ptr_equal(c->lb_peer, inproc ? d : NULL);
		memset(p->bbuf, 0, 64);
		ut_fill(p->abuf, 8, 21);
		wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 32));
		wr.wr_id = 66;
		ut_post_send(d, &wr);
		expect_wc(p->acq, 66, IBV_WC_SUCCESS);
		assert_true(ut_check(p->bbuf + 32, 8, 21));
		assert_int_equal(rvt_destroy_qp(d), 0);
		assert_null(c->lb_peer); /* evicted */
		assert_int_equal(rvt_destroy_qp(c), 0);
	}

	/* 7. a bad rkey still ends as before (the engine reports it) */
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 0));
	wr.wr.rdma.rkey ^= 1;
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(ut_state(p->a), IBV_QPS_ERR);
	ut_cq_empty(p->acq, 2);
	pair_free(p, true);
}

static bool all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* An 8 B WRITE from a's buffer at off to b's at roff that succeeds. */
static void direct_ok(struct pair *p, uint32_t off, uint32_t roff, int seed)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	ut_fill(p->abuf + off, 8, seed);
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, off, 8, baddr(p, roff));
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + roff, 8, seed));
}

/* A pair whose a has written to b once by post_direct (seed): a
 * remembers both keys. */
static struct pair *memo_pair(int seed)
{
	struct pair *p = pair_new(IBV_QPT_RC);

	direct_peer(p);
	direct_ok(p, 0, 64, seed);
	return p;
}

/* a's next WRITE with b's rkey ends in an access error; b's memory stays
 * untouched. Frees the pair. */
static void expect_rkey_refused(struct pair *p)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	memset(p->bbuf, 0, 256);
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 64));
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_REM_ACCESS_ERR);
	assert_true(all_zero(p->bbuf, 256));
	pair_free(p, true);
}

/*
 * post_direct remembers the last lkey and rkey that passed (keys.h
 * rvt_direct_key_ok). Each change that takes a key's grant away must
 * reach the next WRITE after a remembered one: a stale memo would let
 * each of these through.
 */
static void test_direct_key_memo(void **state)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	struct rvt_mregion *mr;
	struct pair *p;
	uint8_t *old;
	int err;

	(void)state;
	/* 1. rkey: its MR loses REMOTE_WRITE (rereg) */
	p = memo_pair(1);
	assert_int_equal(rvt_rereg_mr(p->bmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
			 0);
	expect_rkey_refused(p);

	/* 2. rkey: LOCAL_INV takes it */
	p = memo_pair(2);
	assert_int_equal(rvt_invalidate_rkey(p->b, p->bmr->ibmr.rkey), 0);
	expect_rkey_refused(p);

	/* 3. lkey: its MR moves to other memory (rereg): the old range is
	 * not the MR's any more (W10, at post time) */
	p = memo_pair(3);
	old = p->abuf;
	p->abuf = aligned_alloc(64, BUFSZ);
	assert_non_null(p->abuf);
	assert_int_equal(rvt_rereg_mr(p->amr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, p->abuf,
				      BUFSZ, 0),
			 0);
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 64));
	sge.addr = (uintptr_t)old;
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	assert_ptr_equal(bad, &wr);
	direct_ok(p, 0, 128, 4); /* the new memory, through the same lkey */
	free(old);
	pair_free(p, true);

	/* 4. lkey: its MR is deregistered and another takes the memory */
	p = memo_pair(5);
	wr1(p, &wr, &sge, IBV_WR_RDMA_WRITE, 0, 8, baddr(p, 64));
	assert_int_equal(rvt_dereg_mr(p->amr), 0);
	mr = rvt_reg_mr(p->pd, p->abuf, BUFSZ, (uintptr_t)p->abuf, ALL_ACCESS, &err);
	assert_non_null(mr);
	p->amr = mr;
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	direct_ok(p, 0, 128, 6);
	pair_free(p, true);
}

/* Does a's UD packet to b go into a link's memory (the shm link)? */
static bool ud_in_place(const struct pair *p)
{
	const struct urvt_net *net = dev.rdi->transport_priv;

	return !ut_inproc(&dev) && p->ah->av.route &&
	       net->links[urvt_route_link(p->ah->av.route)]->builds_in_place;
}

/* UD direct (post.c post_ud_direct): to a peer of the shm link, a UD SEND
 * posted to an idle send queue leaves at post time without taking a slot;
 * over UDP and in-process it takes the engine. Either way each side sees
 * what the queued path gives: inline data gathered from several SGEs,
 * immediate data, no completion for an unsignaled WR, a key that left the
 * table and what the plain case does not take refused at post time. */
static void test_ud_direct(void **state)
{
	struct pair_opts o = defaults;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sg[3];
	struct rvt_mregion *mr;
	struct ibv_wc wc;
	struct pair *p;
	uint32_t head;
	uint8_t *buf;

	(void)state;
	o.max_inline = 64;
	p = pair_new_opts(IBV_QPT_UD, &o, NULL);

	/* 1. inline, three SGEs (one empty), immediate data, signaled */
	ut_fill(p->abuf, 64, 21);
	sg[0] = (struct ibv_sge){ .addr = (uintptr_t)p->abuf, .length = 5 };
	sg[1] = (struct ibv_sge){ .addr = (uintptr_t)p->abuf + 5, .length = 0 };
	sg[2] = (struct ibv_sge){ .addr = (uintptr_t)p->abuf + 5, .length = 20 };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0xd1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_SOLICITED;
	wr.imm_data = htonl(0x12345678);
	wr.sg_list = sg;
	wr.num_sge = 3;
	wr.wr.ud.ah = &p->ah->ibah;
	wr.wr.ud.remote_qpn = p->b->qpn;
	wr.wr.ud.remote_qkey = 0x2222;
	brecv(p, 1, 0, 40 + 64);
	head = p->a->s_head;
	ut_post_send(p->a, &wr);
	assert_int_equal(p->a->s_head == head, ud_in_place(p));
	memset(p->abuf, 0, 64); /* inline: the bytes were taken at post time */
	wc = expect_wc(p->acq, 0xd1, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_SEND);
	assert_int_equal(wc.byte_len, 25);
	assert_int_equal(wc.qp_num, p->a->qpn);
	wc = expect_wc(p->bcq, 1, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, 40 + 25);
	assert_int_equal(wc.src_qp, p->a->qpn);
	assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(ntohl(wc.imm_data), 0x12345678);
	assert_true(ut_check(p->bbuf + 40, 25, 21));

	/* 2. by lkey, unsignaled: the receiver gets it, the sender's CQ nothing */
	ut_fill(p->abuf + 64, 100, 22);
	wr1(p, &wr, &sg[0], IBV_WR_SEND, 64, 100, 0);
	wr.send_flags = 0;
	brecv(p, 2, 0, 40 + 128);
	ut_post_send(p->a, &wr);
	wc = expect_wc(p->bcq, 2, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 40 + 100);
	assert_true(ut_check(p->bbuf + 40, 100, 22));
	ut_cq_empty(p->acq, 5);

	/* 3. a key that left the table (deregistered after a send through it) */
	buf = aligned_alloc(64, 4096);
	assert_non_null(buf);
	ut_fill(buf, 8, 23);
	mr = ut_mr(p->pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	wr1(p, &wr, &sg[0], IBV_WR_SEND, 0, 8, 0);
	sg[0].addr = (uintptr_t)buf;
	sg[0].lkey = mr->ibmr.lkey;
	brecv(p, 3, 0, 40 + 8);
	ut_post_send(p->a, &wr);
	expect_wc(p->acq, wr.wr_id, IBV_WC_SUCCESS);
	expect_wc(p->bcq, 3, IBV_WC_SUCCESS);
	assert_true(ut_check(p->bbuf + 40, 8, 23));
	assert_int_equal(rvt_dereg_mr(mr), 0);
	bad = NULL;
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	assert_ptr_equal(bad, &wr);
	free(buf);

	/* 4. what the plain case does not take fails as it always did: more
	 * than a PMTU (W11), inline data over max_inline, more SGEs than the
	 * QP has (W1); nothing reaches the receiver */
	wr1(p, &wr, &sg[0], IBV_WR_SEND, 0, p->a->pmtu + 1, 0);
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	wr1(p, &wr, &sg[0], IBV_WR_SEND, 0, 65, 0);
	wr.send_flags |= IBV_SEND_INLINE;
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	wr1(p, &wr, &sg[0], IBV_WR_SEND, 0, 8, 0);
	wr.num_sge = 5;
	assert_int_equal(rvt_post_send(p->a, &wr, &bad), -EINVAL);
	assert_ptr_equal(bad, &wr);
	brecv(p, 4, 0, 40 + 8);
	ut_cq_empty(p->bcq, 5);
	ut_cq_empty(p->acq, 5);
	pair_free(p, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_send_rc),
		cmocka_unit_test(test_send_uc),
		cmocka_unit_test(test_send_ud),
		cmocka_unit_test(test_write_rc),
		cmocka_unit_test(test_write_uc),
		cmocka_unit_test(test_read),
		cmocka_unit_test(test_atomics),
		cmocka_unit_test(test_multi_sge),
		cmocka_unit_test(test_copy_sge_direct),
		cmocka_unit_test(test_zero_length),
		cmocka_unit_test(test_signaling),
		cmocka_unit_test(test_rem_access_err),
		cmocka_unit_test(test_rem_inv_req_err),
		cmocka_unit_test(test_oversized_send),
		cmocka_unit_test(test_bad_recv_sge),
		cmocka_unit_test(test_rnr_retry_exceeded),
		cmocka_unit_test(test_rnr_infinite),
		cmocka_unit_test(test_rnr_counter_reload),
		cmocka_unit_test(test_uc_rnr_drop),
		cmocka_unit_test(test_peer_missing),
		cmocka_unit_test(test_peer_wrong_type),
		cmocka_unit_test(test_send_with_inv),
		cmocka_unit_test(test_comm_est),
		cmocka_unit_test(test_ud_grh),
		cmocka_unit_test(test_ud_grh_split_sges),
		cmocka_unit_test(test_ud_qkey),
		cmocka_unit_test(test_ud_small_recv),
		cmocka_unit_test(test_reset_discards),
		cmocka_unit_test(test_err_flushes_recv),
		cmocka_unit_test(test_srq_last_wqe),
		cmocka_unit_test(test_misaligned_remote_atomic),
		cmocka_unit_test(test_atomic_iova_misaligned_host),
		cmocka_unit_test(test_ud_ah_snapshot),
		cmocka_unit_test(test_responder_cq_overflow),
		cmocka_unit_test(test_responder_cq_overflow_srq),
		cmocka_unit_test(test_error_flushes_responder_sq),
		cmocka_unit_test(test_rnr_then_err_or_destroy),
		cmocka_unit_test(test_event_after_destroy),
		cmocka_unit_test(test_direct_write),
		cmocka_unit_test(test_direct_key_memo),
		cmocka_unit_test(test_ud_direct),
	};

	cmocka_set_test_filter(getenv("UT_FILTER")); /* e.g. UT_FILTER=test_read */
	return cmocka_run_group_tests(tests, setup, teardown);
}
