/*
 * libFuzzer harness for the posting verbs and QP state machine:
 * post_send, post_recv, post_srq_recv, modify_qp and poll_cq driven by
 * arbitrary WR lists and attributes, on RC/UC/UD QPs connected to each other
 * in-process (the loopback path executes everything that is accepted).
 *
 * Every registered buffer sits between PROT_NONE guard pages, so any access
 * outside a registered region faults at once. Checked per call: the return
 * value is 0 or one of the errnos the spec allows, *bad_wr points into the
 * list given, and every completion carries a valid status and a wr_id that
 * was posted.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/rvt_api.h"
#include "fuzz_reader.h"
#include "transport/net.h"

#define NQP 4
#define NMR 3
#define MR_BYTES 65536
#define PAGE 4096

static struct rvt_dev_info *rdi;
static struct urvt_context uctx;
static struct rvt_pd *pd, *pd2;
static struct rvt_cq *cq;
static struct rvt_srq *srq;
static uint8_t *region[NMR];
static struct rvt_mregion *mr[NMR];
static uint32_t stale_key;

static void die(const char *why)
{
	fprintf(stderr, "fuzz_post_verbs: %s\n", why);
	abort();
}

/* A buffer with a guard page on each side. */
static uint8_t *guarded(size_t bytes)
{
	uint8_t *p = mmap(NULL, bytes + 2 * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	mprotect(p, PAGE, PROT_NONE);
	mprotect(p + PAGE + bytes, PAGE, PROT_NONE);
	return p + PAGE;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const int access[NMR] = {
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_LOCAL_WRITE,
		0,
	};
	int err = 0;

	(void)argc;
	(void)argv;
	setenv("URVT_ADDR", "127.0.77.1", 0);
	rdi = rvt_dev_get(urvt_transport_attach, &err);
	if (!rdi || urvt_context_init(&uctx, rdi))
		die("device");
	uctx.vctx.context.num_comp_vectors = 1;
	pd = rvt_alloc_pd(&uctx, &err);
	pd2 = rvt_alloc_pd(&uctx, &err);
	cq = rvt_create_cq(&uctx, 4096, NULL, 0, NULL, &err);
	if (!pd || !pd2 || !cq)
		die("objects");
	for (int i = 0; i < NMR; i++) {
		region[i] = guarded(MR_BYTES);
		mr[i] = rvt_reg_mr(i == 2 ? pd2 : pd, region[i], MR_BYTES,
				   (uint64_t)(uintptr_t)region[i], access[i], &err);
		if (!mr[i])
			die("reg_mr");
	}
	{
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 4 } };
		struct rvt_mregion *tmp = rvt_reg_mr(pd, region[0], 64, (uint64_t)(uintptr_t)region[0],
						     IBV_ACCESS_LOCAL_WRITE, &err);
		srq = rvt_create_srq(pd, &sa, &err);
		if (!tmp || !srq)
			die("srq/stale");
		stale_key = tmp->lkey;
		rvt_dereg_mr(tmp);
	}
	return 0;
}

/* Keys the fuzzer may use: live, 0, stale, other PD, no access, random. */
static uint32_t pick_key(struct reader *r)
{
	uint8_t s = u8(r);

	switch (s % 6) {
	case 0: return mr[0]->lkey;
	case 1: return mr[1]->lkey;
	case 2: return mr[2]->lkey;
	case 3: return stale_key;
	case 4: return 0;
	default: return u32(r);
	}
}

/* Addresses: inside an MR, at its edges, or anything. */
static uint64_t pick_addr(struct reader *r)
{
	uint8_t s = u8(r);
	uint8_t *base = region[s % NMR];
	uint32_t off = u32(r);

	switch ((s >> 2) % 4) {
	case 0: return (uint64_t)(uintptr_t)base + off % MR_BYTES;
	case 1: return (uint64_t)(uintptr_t)base + MR_BYTES - (off % 64);
	case 2: return (uint64_t)(uintptr_t)base - (off % 64);
	default: return ((uint64_t)u32(r) << 32) | off;
	}
}

static uint32_t pick_len(struct reader *r)
{
	uint8_t s = u8(r);

	switch (s % 4) {
	case 0: return s >> 2;
	case 1: return u32(r) % (MR_BYTES + 64);
	case 2: return 8;
	default: return u32(r);
	}
}

static struct rvt_qp *qp[NQP];
static struct rvt_ah *ah;
static uint64_t next_wrid;

static void make_qps(struct reader *r)
{
	static const enum ibv_qp_type types[NQP] = { IBV_QPT_RC, IBV_QPT_RC, IBV_QPT_UC,
						      IBV_QPT_UD };
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
	int err = 0;

	aha.grh.dgid = rdi->gid;
	ah = rvt_create_ah(pd, &aha, &err);
	for (int i = 0; i < NQP; i++) {
		struct ibv_qp_init_attr_ex a = {
			.send_cq = ibv_cq_ex_to_cq(&cq->ibcq),
			.recv_cq = ibv_cq_ex_to_cq(&cq->ibcq),
			.cap = { .max_send_wr = 1 + u8(r) % 16, .max_recv_wr = 1 + u8(r) % 16,
				 .max_send_sge = u8(r) % 5, .max_recv_sge = u8(r) % 5,
				 .max_inline_data = u8(r) % 80 },
			.qp_type = types[i],
			.sq_sig_all = u8(r) & 1,
			.comp_mask = IBV_QP_INIT_ATTR_PD,
			.pd = &pd->ibpd,
		};
		if (i == 1 && (u8(r) & 1))
			a.srq = &srq->ibsrq;
		qp[i] = rvt_create_qp(&uctx, &a, &err);
		if (!qp[i] && err != -EINVAL)
			die("create_qp errno");
	}
}

/* Bring a QP to RTS wired to its peer (0<->1 RC, 2<->2 UC, 3 UD). */
static void connect_qp(int i, struct reader *r)
{
	struct ibv_qp_attr a;
	int peer = i == 0 ? 1 : i == 1 ? 0 : i;

	if (!qp[i] || !qp[peer])
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = u8(r) & 0xf;
	a.qkey = 0x1234;
	rvt_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     (qp[i]->type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = 1 + u8(r) % 5;
	a.dest_qp_num = qp[peer]->qpn;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = rdi->gid;
	a.max_dest_rd_atomic = u8(r) % 4;
	a.min_rnr_timer = 1;
	if (qp[i]->type == IBV_QPT_UD)
		rvt_modify_qp(qp[i], &a, IBV_QP_STATE);
	else
		rvt_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     (qp[i]->type == IBV_QPT_RC ?
						      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 1;
	a.retry_cnt = u8(r) % 8;
	a.rnr_retry = u8(r) % 7; /* never infinite: inputs must end */
	a.max_rd_atomic = u8(r) % 4;
	rvt_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
				     (qp[i]->type == IBV_QPT_RC ?
					      IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						      IBV_QP_MAX_QP_RD_ATOMIC : 0));
}

static void do_post_send(struct reader *r)
{
	struct rvt_qp *q = qp[u8(r) % NQP];
	struct ibv_send_wr wrs[4], *bad = NULL;
	struct ibv_sge sges[4][6];
	int n = 1 + u8(r) % 4, ret;

	if (!q)
		return;
	memset(wrs, 0, sizeof(wrs));
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];
		w->wr_id = next_wrid++;
		w->opcode = (enum ibv_wr_opcode)(u8(r) % 16);
		w->send_flags = u8(r) & 0x1f;
		w->num_sge = u8(r) % 7;
		w->sg_list = sges[i];
		for (int j = 0; j < 6; j++) {
			sges[i][j].addr = pick_addr(r);
			sges[i][j].length = pick_len(r);
			sges[i][j].lkey = pick_key(r);
		}
		if (w->num_sge > 6)
			w->num_sge = 6;
		/* Inline data is read from the caller's pointers without a key
		 * (rxe semantics): like write(2)'s buffer it must be memory
		 * the caller owns, so keep those inside a region. */
		if (w->send_flags & IBV_SEND_INLINE) {
			for (int j = 0; j < 6; j++) {
				uint8_t *base = region[j % NMR];
				sges[i][j].addr = (uint64_t)(uintptr_t)base + sges[i][j].addr % MR_BYTES;
				if (sges[i][j].length > MR_BYTES - sges[i][j].addr % MR_BYTES)
					sges[i][j].length = 0;
				sges[i][j].length %= 600;
				if (sges[i][j].addr + sges[i][j].length > (uint64_t)(uintptr_t)base + MR_BYTES)
					sges[i][j].length = 0;
			}
		}
		w->imm_data = u32(r);
		if (q->type == IBV_QPT_UD) {
			w->wr.ud.ah = (u8(r) & 7) ? &ah->ibah : NULL;
			w->wr.ud.remote_qpn = (u8(r) & 1) ? qp[3]->qpn : u32(r);
			w->wr.ud.remote_qkey = (u8(r) & 1) ? 0x1234 : u32(r);
		} else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->wr.atomic.remote_addr = pick_addr(r);
			w->wr.atomic.rkey = pick_key(r);
			w->wr.atomic.compare_add = u32(r);
			w->wr.atomic.swap = u32(r);
		} else {
			w->wr.rdma.remote_addr = pick_addr(r);
			w->wr.rdma.rkey = pick_key(r);
		}
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	ret = rvt_post_send(q, wrs, &bad);
	if (ret && ret != -EINVAL && ret != -ENOMEM)
		die("post_send errno");
	if (ret && (bad < wrs || bad >= wrs + n))
		die("post_send bad_wr outside the list");
}

static void do_post_recv(struct reader *r)
{
	struct rvt_qp *q = qp[u8(r) % NQP];
	struct ibv_recv_wr wrs[3], *bad = NULL;
	struct ibv_sge sges[3][5];
	int n = 1 + u8(r) % 3, ret;
	bool to_srq = u8(r) & 1;

	memset(wrs, 0, sizeof(wrs));
	for (int i = 0; i < n; i++) {
		wrs[i].wr_id = next_wrid++;
		wrs[i].num_sge = u8(r) % 6;
		wrs[i].sg_list = sges[i];
		for (int j = 0; j < 5; j++) {
			sges[i][j].addr = pick_addr(r);
			sges[i][j].length = pick_len(r);
			sges[i][j].lkey = pick_key(r);
		}
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	if (to_srq)
		ret = rvt_post_srq_recv(srq, wrs, &bad);
	else if (q)
		ret = rvt_post_recv(q, wrs, &bad);
	else
		return;
	if (ret && ret != -EINVAL && ret != -ENOMEM)
		die("post_recv errno");
	if (ret && (bad < wrs || bad >= wrs + n))
		die("post_recv bad_wr outside the list");
}

static void do_modify(struct reader *r)
{
	struct rvt_qp *q = qp[u8(r) % NQP];
	struct ibv_qp_attr a;
	int mask, ret;

	if (!q)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)(u8(r) % 8);
	a.cur_qp_state = (enum ibv_qp_state)(u8(r) % 8);
	a.path_mtu = (enum ibv_mtu)(u8(r) % 7);
	a.qkey = u32(r);
	a.rq_psn = u32(r);
	a.sq_psn = u32(r);
	a.dest_qp_num = (u8(r) & 1) ? qp[u8(r) % NQP] ? qp[0]->qpn : 0 : u32(r);
	a.qp_access_flags = u8(r);
	a.pkey_index = u8(r) % 3;
	a.max_rd_atomic = u8(r) % 20;
	a.max_dest_rd_atomic = u8(r) % 20;
	a.min_rnr_timer = u8(r) % 40;
	a.port_num = u8(r) % 3;
	a.timeout = u8(r) % 40;
	a.retry_cnt = u8(r) % 9;
	a.rnr_retry = u8(r) % 7;
	a.ah_attr.is_global = u8(r) & 1;
	a.ah_attr.port_num = u8(r) % 3;
	a.ah_attr.grh.dgid = rdi->gid; /* never a foreign address: no stray packets */
	mask = (int)(u32(r) & ((1 << 21) - 1));
	if (u8(r) == 0xff)
		mask |= IBV_QP_RATE_LIMIT;
	ret = rvt_modify_qp(q, &a, mask);
	if (ret && ret != -EINVAL && ret != -EOPNOTSUPP)
		die("modify_qp errno");
}

static void drain(void)
{
	struct ibv_wc wc[64];
	int n;

	while ((n = rvt_poll_cq(cq, 64, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status > IBV_WC_GENERAL_ERR)
				die("completion status out of range");
			if (wc[i].wr_id >= next_wrid)
				die("completion for a wr_id never posted");
		}
	}
	if (n < 0)
		die("poll_cq");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reader r = { data, size };
	int ops = 0;

	make_qps(&r);
	for (int i = 0; i < NQP; i++)
		if (u8(&r) & 1)
			connect_qp(i, &r);
	while (r.n && ops++ < 64) {
		switch (u8(&r) % 5) {
		case 0:
		case 1: do_post_send(&r); break;
		case 2: do_post_recv(&r); break;
		case 3: do_modify(&r); break;
		default: drain(); break;
		}
	}
	for (int i = 0; i < NQP; i++)
		if (qp[i] && rvt_destroy_qp(qp[i]))
			die("destroy_qp");
	rvt_destroy_ah(ah);
	drain();
	return 0;
}
