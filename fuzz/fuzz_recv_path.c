/*
 * libFuzzer harness for the whole receive path (docs/security.md): a device with
 * registered MRs and QPs of every type in every state is fed arbitrary
 * packets through urvt_recv_pkt, the single entry point of a received
 * datagram (classification, ICRC, responder, completer).
 *
 * Setup (once): MRs with different access rights, each between PROT_NONE
 * guard pages; one small MR in the middle of a page with canary bytes
 * around it; an MR of another PD; a deregistered key; two XRC domains.
 * Per input: QPs (RC, RC on an SRQ, RC, UC, UC on the SRQ, UD, and an XRC
 * target of domain A and an XRC initiator) brought to a state the input
 * chooses (RESET/INIT/RTR/RTS/SQD/ERR) with attributes from the input, an
 * XRC SRQ in each domain, receives and sends posted, then a sequence of
 * packets and operations. An XRC request's XRCETH is fixed up to name the
 * SRQ of A, of B, or a random number (roce-wire §3.1).
 *
 * A packet record chooses the destination QPN (live, destroyed, random,
 * 0, 1, multicast), the source address (the QPs' peer, a stranger, IPv6),
 * fixes up header fields the fuzzer cannot know (R_Key of an MR, addresses
 * near an MR's edges, the expected PSN, P_Key/TVer/Q_Key) and the ICRC (left
 * wrong in a quarter of them). Everything the transport sends goes to a
 * test link (sink_link, urvt_net_swap_link) instead of a socket.
 *
 * Checked: no access outside a registered region (guard pages, ASan on the
 * exact-size packet copy), canaries around the sub-page MR, regions no
 * remote peer may change (local-write-only, remote-read-only, other PD,
 * deregistered) unchanged, every packet sent parses and carries a correct
 * ICRC and goes only to the QPs' peer, completions carry valid statuses
 * and posted wr_ids, destroy succeeds.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "core/rvt_api.h"
#include "fuzz_reader.h"
#include "transport/net.h"
#include "transport/tp.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

#define PAGE 4096
#define NQP 6
#define PEER_QPN_BASE 0x4200
#define UD_QKEY 0x11223344u

enum { MR_ALL, MR_LOCAL, MR_RREAD, MR_OTHER_PD, MR_SMALL, MR_STALE, MR_ZBASED, NMR };
static const size_t mr_bytes[NMR] = { 65536, 16384, 16384, 16384, 100, 4096, 8192 };
#define SMALL_OFF 1000 /* MR_SMALL starts here inside its page */

static struct rvt_dev_info *rdi;
static struct urvt_net *net;
static struct urvt_context uctx;
static struct rvt_pd *pd, *pd2;
static uint8_t *region[NMR];      /* host address of each MR's first byte */
static uint8_t *snapshot[NMR];    /* contents of the immutable regions */
static struct rvt_mregion *mr[NMR];
static uint32_t key[NMR];
static uint64_t iova[NMR];
static uint32_t peer_v4, stranger_v4, dev_v4;

static struct rvt_cq *cq, *small_cq;
static struct rvt_srq *srq;
static struct rvt_qp *qp[NQP];
static struct rvt_xrcd *xrcd_a, *xrcd_b;
static struct rvt_srq *xsrq_a, *xsrq_b;  /* per input, in domain A and B */
static struct rvt_qp *xqp[2];             /* XRC target (domain A), XRC initiator */
static struct rvt_ah *ah;
static uint32_t dead_qpn[8];
static unsigned n_dead;
static uint64_t next_wrid;

static void die(const char *why)
{
	fprintf(stderr, "fuzz_recv_path: %s\n", why);
	abort();
}

/* bytes rounded up to pages, a PROT_NONE page on each side; returns the first usable page */
static uint8_t *guarded(size_t bytes)
{
	size_t sz = (bytes + PAGE - 1) & ~(size_t)(PAGE - 1);
	uint8_t *p = mmap(NULL, sz + 2 * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	if (mprotect(p, PAGE, PROT_NONE) || mprotect(p + PAGE + sz, PAGE, PROT_NONE))
		die("mprotect");
	return p + PAGE;
}

static bool immutable(int i)
{
	return i == MR_LOCAL || i == MR_RREAD || i == MR_OTHER_PD || i == MR_STALE;
}

/* ------------------------------------------------------------------ */
/* What the transport sends                                           */
/* ------------------------------------------------------------------ */
static _Atomic unsigned long sent;

static void check_sent(const uint8_t *buf, uint32_t len, const union urvt_link_addr *dst)
{
	struct urvt_pkt p;
	struct urvt_ipinfo ip;
	uint8_t *copy;

	sent++;
	/* only ever to the QPs' peer: never to the (forged) source of a packet */
	if (dst->sa.sa_family != AF_INET || dst->in4.sin_addr.s_addr != peer_v4 ||
	    dst->in4.sin_port != htons(URVT_ROCE_UDP_PORT))
		die("packet sent to an address no QP is connected to");
	copy = malloc(len ? len : 1);
	if (!copy)
		die("malloc");
	memcpy(copy, buf, len);
	if (urvt_pkt_parse(copy, len, &p))
		die("transport sent a packet its own parser rejects");
	urvt_ipinfo_v4(&ip, dev_v4, peer_v4, URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
	if (urvt_icrc(&ip, copy, len - 4) != urvt_icrc_get(copy + len - 4))
		die("transport sent a packet with a wrong ICRC");
	free(copy);
}

/* The fuzzer's link: checks every packet, delivers none, receives none. */
static unsigned sink_send(struct urvt_link *l, struct urvt_link_tx *p, unsigned n)
{
	(void)l;
	for (unsigned i = 0; i < n; i++) {
		p[i].ip_id = 0;
		p[i].fault = 0;
		check_sent(p[i].buf, p[i].len, p[i].dst);
	}
	return 0;
}

static int sink_recv(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max)
{
	(void)l;
	(void)rx;
	(void)max;
	return 0;
}

static void sink_close(struct urvt_link *l)
{
	(void)l;
}

static const struct urvt_link_ops sink_ops = {
	.name = "fuzz-sink",
	.send_batch = sink_send,
	.recv_batch = sink_recv,
	.close = sink_close,
};
static struct urvt_link sink_link = { .ops = &sink_ops, .wake_fd = -1 };
static struct urvt_link *udp_link; /* set aside, open until exit */

/* ------------------------------------------------------------------ */
/* Setup                                                              */
/* ------------------------------------------------------------------ */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const int access[NMR] = {
		[MR_ALL] = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		[MR_LOCAL] = IBV_ACCESS_LOCAL_WRITE,
		[MR_RREAD] = IBV_ACCESS_REMOTE_READ,
		[MR_OTHER_PD] = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		[MR_SMALL] = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		[MR_STALE] = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		[MR_ZBASED] = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED,
	};
	int err = 0;

	(void)argc;
	(void)argv;
	setenv("URVT_ADDR", "127.0.78.1", 0);
	setenv("URVT_STATS", "0", 0);
	inet_pton(AF_INET, "127.0.78.1", &dev_v4);
	inet_pton(AF_INET, "127.0.78.2", &peer_v4);
	inet_pton(AF_INET, "127.0.78.3", &stranger_v4);
	rdi = rvt_dev_get(urvt_transport_attach, &err);
	if (!rdi || urvt_context_init(&uctx, rdi))
		die("device (is 127.0.78.1:4791 free?)");
	net = rdi->transport_priv;
	if (!net)
		die("no transport");
	memcpy(&dev_v4, &rdi->gid.raw[12], 4);
	sink_link.info = net->links[URVT_LINK_ANY]->info;
	sink_link.ctl_fd = -1;
	/* the UDP link stays open (its address keeps the GID) but unused */
	udp_link = urvt_net_swap_link(net, &sink_link);
	uctx.vctx.context.num_comp_vectors = 1;
	fcntl(uctx.vctx.context.async_fd, F_SETFL,
	      fcntl(uctx.vctx.context.async_fd, F_GETFL) | O_NONBLOCK);
	pd = rvt_alloc_pd(&uctx, &err);
	pd2 = rvt_alloc_pd(&uctx, &err);
	if (!pd || !pd2)
		die("pd");
	for (int i = 0; i < NMR; i++) {
		uint8_t *page = guarded(i == MR_SMALL ? PAGE : mr_bytes[i]);
		region[i] = i == MR_SMALL ? page + SMALL_OFF : page;
		/* the small MR's page: canary bytes on both sides */
		if (i == MR_SMALL)
			memset(page, 0xc5, PAGE);
		for (size_t j = 0; j < mr_bytes[i]; j++)
			region[i][j] = (uint8_t)(j * 7 + (size_t)i);
		mr[i] = rvt_reg_mr(i == MR_OTHER_PD ? pd2 : pd, region[i], mr_bytes[i],
				   (uint64_t)(uintptr_t)region[i], access[i], &err);
		if (!mr[i])
			die("reg_mr");
		key[i] = mr[i]->lkey;
		iova[i] = mr[i]->iova;
		if (immutable(i)) {
			snapshot[i] = malloc(mr_bytes[i]);
			if (!snapshot[i])
				die("malloc");
			memcpy(snapshot[i], region[i], mr_bytes[i]);
		}
	}
	/* a key that was valid once: it must never match again */
	if (rvt_dereg_mr(mr[MR_STALE]))
		die("dereg");
	mr[MR_STALE] = NULL;
	{
		struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
							      IBV_XRCD_INIT_ATTR_OFLAGS,
						 .fd = -1, .oflags = O_CREAT };
		xrcd_a = rvt_open_xrcd(&uctx, &xa, &err);
		xrcd_b = rvt_open_xrcd(&uctx, &xa, &err);
		if (!xrcd_a || !xrcd_b)
			die("xrcd");
	}
	{
		struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1 };
		urvt_gid_from_v4(aha.grh.dgid.raw, peer_v4);
		ah = rvt_create_ah(pd, &aha, &err);
		if (!ah)
			die("ah");
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Per-input objects                                                  */
/* ------------------------------------------------------------------ */
/* Receive SGE keys: receive targets, plus keys that must be refused. */
static void recv_sge(struct reader *r, struct ibv_sge *s)
{
	static const int tgt[] = { MR_ALL, MR_SMALL, MR_ZBASED };
	uint8_t sel = u8(r);
	int m = tgt[sel % 3];

	s->addr = iova[m] + u16(r) % (mr_bytes[m] + 1);
	s->length = (uint32_t)(mr_bytes[m] - (s->addr - iova[m]));
	if (sel & 0x10)
		s->length = u16(r) % (s->length + 1);
	s->lkey = key[m];
	switch ((sel >> 5) & 7) {
	case 5: s->lkey = key[MR_OTHER_PD]; break; /* other PD */
	case 6: s->lkey = key[MR_RREAD]; break;    /* no LOCAL_WRITE */
	case 7: s->lkey = key[MR_STALE]; break;    /* deregistered */
	default: break;
	}
}

static void post_recvs(struct reader *r, struct rvt_qp *q, struct rvt_srq *to_srq, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sg[3];
		struct ibv_recv_wr wr = { .wr_id = next_wrid++, .sg_list = sg,
					  .num_sge = u8(r) % 4 };
		struct ibv_recv_wr *bad;
		for (int j = 0; j < 3; j++)
			recv_sge(r, &sg[j]);
		if (to_srq)
			rvt_post_srq_recv(to_srq, &wr, &bad);
		else if (q)
			rvt_post_recv(q, &wr, &bad);
	}
}

/* Sends whose responses the completer will see: local SGEs in MR_ALL. */
static void post_sends(struct reader *r, struct rvt_qp *q, int n)
{
	static const enum ibv_wr_opcode ops[] = {
		IBV_WR_SEND, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD,
		IBV_WR_RDMA_WRITE, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_SEND_WITH_IMM,
	};

	if (!q)
		return;
	for (int i = 0; i < n; i++) {
		struct ibv_sge sg = { .lkey = key[MR_ALL] };
		struct ibv_send_wr wr = { .wr_id = next_wrid++, .sg_list = &sg, .num_sge = 1 };
		struct ibv_send_wr *bad;
		uint8_t sel = u8(r);

		wr.opcode = ops[sel % 6];
		wr.send_flags = (sel & 0x40) ? IBV_SEND_SIGNALED : 0;
		if (q->type == IBV_QPT_UC && (wr.opcode == IBV_WR_RDMA_READ ||
					      wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
					      wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP))
			wr.opcode = IBV_WR_SEND;
		if (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
		    wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			sg.addr = iova[MR_ALL] + (u16(r) & ~7u) % mr_bytes[MR_ALL];
			sg.length = 8;
			wr.wr.atomic.remote_addr = u32(r);
			wr.wr.atomic.rkey = u32(r);
		} else {
			sg.addr = iova[MR_ALL] + u16(r) % 4096;
			sg.length = u16(r) % 9000;
			wr.wr.rdma.remote_addr = u32(r);
			wr.wr.rdma.rkey = u32(r);
		}
		/* XRC initiator: A's SRQ or any number (the peer is fake) */
		if (rvt_qp_is_xrc(q))
			wr.qp_type.xrc.remote_srqn = (sel & 0x80) ? xsrq_a->srq_num : u32(r);
		if (q->type == IBV_QPT_UD) {
			wr.wr.ud.ah = &ah->ibah;
			wr.wr.ud.remote_qpn = PEER_QPN_BASE;
			wr.wr.ud.remote_qkey = UD_QKEY;
			if (sg.length > q->pmtu)
				sg.length = q->pmtu;
		}
		rvt_post_send(q, &wr, &bad);
	}
}

static int modify(struct rvt_qp *q, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };
	return rvt_modify_qp(q, &a, IBV_QP_STATE);
}

/* RESET -> state, with attributes from the input; the peer is
 * PEER_QPN_BASE + i. The masks are those of the IB state table for the
 * verbs type (XRC: qp-semantics §16.3). */
static void bring_up_qp(struct reader *r, struct rvt_qp *q, int i, int state)
{
	enum ibv_qp_type vt = q->ibqp_ex.qp_base.qp_type;
	struct ibv_qp_attr a;
	uint8_t f = u8(r);

	if (state == IBV_QPS_RESET)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = (f & 1 ? IBV_ACCESS_REMOTE_WRITE : 0) |
			    (f & 2 ? IBV_ACCESS_REMOTE_READ : 0) |
			    (f & 4 ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	if (!(f & 0x80))
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_ATOMIC;
	a.qkey = UD_QKEY;
	if (rvt_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 (q->type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS)))
		die("-> INIT");
	if (state == IBV_QPS_INIT)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)(1 + (f >> 3) % 5);
	a.dest_qp_num = PEER_QPN_BASE + (uint32_t)i;
	a.rq_psn = (f & 0x40) ? 0xfffff0u + (u8(r) & 0xf) : u8(r);
	a.max_dest_rd_atomic = u8(r) % 5;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	urvt_gid_from_v4(a.ah_attr.grh.dgid.raw, peer_v4);
	if (rvt_modify_qp(q, &a, q->type == IBV_QPT_UD ? IBV_QP_STATE :
				 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN |
					 (q->type == IBV_QPT_RC && vt != IBV_QPT_XRC_SEND ?
						  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0)))
		die("-> RTR");
	if (state == IBV_QPS_RTR)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 0; /* no retransmit timer: inputs stay deterministic */
	a.retry_cnt = u8(r) % 8;
	a.rnr_retry = u8(r) % 7;
	a.max_rd_atomic = u8(r) % 5;
	a.sq_psn = (f & 0x40) ? 0xfffffeu : u8(r);
	if (rvt_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
					 (vt == IBV_QPT_XRC_RECV ? IBV_QP_TIMEOUT :
					  q->type == IBV_QPT_RC ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
									 IBV_QP_RNR_RETRY |
									 IBV_QP_MAX_QP_RD_ATOMIC : 0)))
		die("-> RTS");
	if (state == IBV_QPS_SQD && modify(q, IBV_QPS_SQD))
		die("-> SQD");
	if (state == IBV_QPS_ERR && modify(q, IBV_QPS_ERR))
		die("-> ERR");
}

static void bring_up(struct reader *r, int i, int state)
{
	bring_up_qp(r, qp[i], i, state);
}

static void make_objects(struct reader *r)
{
	static const enum ibv_qp_type types[NQP] = { IBV_QPT_RC, IBV_QPT_RC, IBV_QPT_RC,
						      IBV_QPT_UC, IBV_QPT_UC, IBV_QPT_UD };
	static const int states[6] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
				       IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 32, .max_sge = 3 } };
	int err = 0;

	cq = rvt_create_cq(&uctx, 256, NULL, 0, NULL, &err);
	small_cq = rvt_create_cq(&uctx, 2, NULL, 0, NULL, &err);
	srq = rvt_create_srq(pd, &sa, &err);
	if (!cq || !small_cq || !srq)
		die("cq/srq");
	for (int i = 0; i < NQP; i++) {
		struct ibv_qp_init_attr_ex a = {
			.send_cq = ibv_cq_ex_to_cq(&cq->ibcq),
			.recv_cq = ibv_cq_ex_to_cq(i == 2 ? &small_cq->ibcq : &cq->ibcq),
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
				 .max_recv_sge = 3, .max_inline_data = 0 },
			.qp_type = types[i],
			.comp_mask = IBV_QP_INIT_ATTR_PD,
			.pd = &pd->ibpd,
		};
		if (i == 1 || i == 4)
			a.srq = &srq->ibsrq;
		qp[i] = rvt_create_qp(&uctx, &a, &err);
		if (!qp[i])
			die("create_qp");
	}
	for (int i = 0; i < NQP; i++) {
		int st = states[u8(r) % 6];
		bring_up(r, i, st);
		if (st != IBV_QPS_RESET && !qp[i]->srq)
			post_recvs(r, qp[i], NULL, u8(r) % 4);
		if (st == IBV_QPS_RTS)
			post_sends(r, qp[i], u8(r) % 4);
	}
	post_recvs(r, NULL, srq, u8(r) % 6);
	/* XRC: an SRQ in each domain, a target of A and an initiator */
	xsrq_a = rvt_create_xsrq(pd, xrcd_a, cq, &sa, &err);
	xsrq_b = rvt_create_xsrq(pd, xrcd_b, cq, &sa, &err);
	if (!xsrq_a || !xsrq_b)
		die("xrc srq");
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr_ex a = {
			.send_cq = ibv_cq_ex_to_cq(&cq->ibcq),
			.cap = { .max_send_wr = 8, .max_send_sge = 1 },
			.qp_type = i ? IBV_QPT_XRC_SEND : IBV_QPT_XRC_RECV,
			.comp_mask = i ? IBV_QP_INIT_ATTR_PD : IBV_QP_INIT_ATTR_XRCD,
			.pd = &pd->ibpd,
			.xrcd = &xrcd_a->ibxrcd,
		};
		int st = states[u8(r) % 6];

		xqp[i] = rvt_create_qp(&uctx, &a, &err);
		if (!xqp[i])
			die("create xrc qp");
		bring_up_qp(r, xqp[i], NQP + i, st);
		if (i && st == IBV_QPS_RTS)
			post_sends(r, xqp[i], u8(r) % 4);
	}
	post_recvs(r, NULL, xsrq_a, u8(r) % 6);
	post_recvs(r, NULL, xsrq_b, u8(r) % 6);
}

static void destroy_qp(int i)
{
	if (!qp[i])
		return;
	if (n_dead < 8)
		dead_qpn[n_dead++] = qp[i]->qpn;
	else
		dead_qpn[qp[i]->qpn % 8] = qp[i]->qpn;
	if (rvt_destroy_qp(qp[i]))
		die("destroy_qp");
	qp[i] = NULL;
}

static void drain(struct rvt_cq *c)
{
	struct ibv_wc wc[32];
	int n;

	while ((n = rvt_poll_cq(c, 32, wc)) > 0)
		for (int i = 0; i < n; i++) {
			if (wc[i].status > IBV_WC_GENERAL_ERR)
				die("completion status out of range");
			if (wc[i].wr_id >= next_wrid)
				die("completion for a wr_id never posted");
		}
	if (n < 0)
		die("poll_cq");
}

/* ------------------------------------------------------------------ */
/* Packets                                                            */
/* ------------------------------------------------------------------ */
static uint32_t pick_qpn(struct reader *r, uint8_t ctl, struct rvt_qp **target)
{
	uint8_t t = ctl & 7;

	*target = NULL;
	if (t < NQP) {
		*target = qp[t];
		return qp[t] ? qp[t]->qpn : (n_dead ? dead_qpn[0] : 0x7777);
	}
	if (t == 6) {
		uint8_t s = u8(r);
		/* odd: an XRC QP (target or initiator), even: a destroyed one */
		if (s & 1) {
			*target = xqp[(s >> 1) & 1];
			return *target ? (*target)->qpn : 0x7777;
		}
		return n_dead ? dead_qpn[(s >> 1) % n_dead] : 0x7777;
	}
	switch (u8(r) % 4) {
	case 0: return 0;
	case 1: return 1;
	case 2: return URVT_MULTICAST_QPN;
	default: return u32(r) & 0xffffff;
	}
}

/* Header fix-ups the fuzzer cannot know: keys, addresses near MR edges, PSN, P_Key. */
static void fixup(struct reader *r, uint8_t *b, uint32_t len, uint8_t ctl2, struct rvt_qp *t)
{
	struct urvt_pkt p;
	uint8_t *eth;
	int m = -1;
	uint32_t k = 0;

	if (len < 12)
		return;
	if (ctl2 & 0x80) {
		bth_set_pkey(b, 0xffff);
		bth_set_tver(b, 0);
	}
	if ((ctl2 & 0x40) && t) {
		bool req = urvt_opcode[b[0]].mask & URVT_REQ_MASK;
		uint32_t psn = req ? t->r_psn : qp_tp(t)->comp_psn;
		bth_set_psn(b, (psn + (uint32_t)(int8_t)u8(r)) & 0xffffff);
	}
	if (urvt_pkt_parse(b, len, &p))
		return;
	if ((p.mask & URVT_DETH_MASK) && (ctl2 & 0x80) && len >= 20)
		deth_set_qkey(b + 12, UD_QKEY);
	if (p.mask & URVT_XRCETH_MASK) {
		uint8_t x = u8(r);
		uint8_t *xe = b + urvt_opcode[p.opcode].offset[URVT_XRCETH];
		switch (x % 4) {
		case 0: xrceth_set_srqn(xe, xsrq_a->srq_num); break;
		case 1: xrceth_set_srqn(xe, xsrq_b->srq_num); break; /* another domain */
		case 2: xrceth_set_srqn(xe, u32(r)); break;
		default: break;
		}
	}
	if (p.mask & URVT_RETH_MASK)
		eth = b + urvt_opcode[p.opcode].offset[URVT_RETH];
	else if (p.mask & URVT_ATMETH_MASK)
		eth = b + urvt_opcode[p.opcode].offset[URVT_ATMETH];
	else if (p.mask & URVT_IETH_MASK)
		eth = b + p.hdr_len - 4;
	else
		return;
	switch (ctl2 & 0xf) {
	case 0: return;
	case 8: k = key[MR_STALE]; break;
	case 9: k = 0; break;
	case 10: k = key[MR_ALL] ^ 1; break;               /* a neighbouring generation */
	case 11: k = key[MR_ALL] + (1u << RVT_LKEY_GEN_BITS); break; /* next slot */
	default:
		if ((ctl2 & 0xf) <= NMR) {
			m = (ctl2 & 0xf) - 1;
			k = key[m];
		} else {
			k = u32(r);
		}
		break;
	}
	if (p.mask & URVT_IETH_MASK) {
		ieth_set_rkey(eth, k);
		return;
	}
	reth_set_rkey(eth, k); /* same offset in the AtomicETH */
	if (m >= 0) {
		uint64_t va = reth_va(eth), base = iova[m], sz = mr_bytes[m];
		switch ((ctl2 >> 4) & 3) {
		case 1: va = base + (va & 0xffff) % (sz + 1); break;
		case 2: va = base + sz - (va & 0xff); break;
		case 3: va = base - (va & 0xff); break;
		default: break;
		}
		reth_set_va(eth, va);
	}
}

static void inject(struct reader *r)
{
	uint8_t ctl = u8(r), ctl2 = u8(r);
	uint32_t len = u16(r) % 4400, qpn;
	struct urvt_ipinfo ip;
	struct rvt_qp *t;
	uint8_t *b;

	qpn = pick_qpn(r, ctl, &t);
	if (len > r->n)
		len = (uint32_t)r->n;
	/* an exact-size copy: ASan sees any read past the datagram */
	b = malloc(len ? len : 1);
	if (!b)
		die("malloc");
	memcpy(b, r->p, len);
	r->p += len;
	r->n -= len;
	if (len >= 12 && (ctl & 0x80))
		bth_set_qpn(b, qpn);
	fixup(r, b, len, ctl2, t);
	switch ((ctl >> 3) & 3) {
	case 2:
		urvt_ipinfo_v4(&ip, stranger_v4, dev_v4, URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
		break;
	case 3: {
		uint8_t s6[16] = { 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2 };
		urvt_ipinfo_v6(&ip, s6, rdi->gid.raw, URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
		break;
	}
	default:
		urvt_ipinfo_v4(&ip, peer_v4, dev_v4, (ctl & 8) ? 49152 : URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
		break;
	}
	/* three in four get a correct ICRC */
	if (((ctl >> 5) & 3) && len >= 16)
		urvt_icrc_put(b + len - 4, urvt_icrc(&ip, b, len - 4));
	/* with BTH's CMA bit, from the peer's address: as a same-host peer
	 * would send it, spans kept and its memory readable, here this
	 * process's (docs/shm.md "Single copy": answers by reference read from
	 * wherever they say) */
	bool same_host = len >= 12 && bth_cma(b) && ((ctl >> 3) & 3) < 2;
	struct urvt_rx_hold held = urvt_rx_lock(net, false);
	if (held.how < 0)
		abort(); /* this thread held it already: a harness bug */
	urvt_recv_pkt(net, b, len, &ip, same_host ? URVT_RX_SPANS : 0, same_host ? getpid() : 0,
		      NULL);
	{
		struct urvt_txq *q = urvt_txq_get();
		if (q)
			urvt_txq_flush(net, q);
	}
	urvt_rx_unlock(net, held);
	free(b);
}

static void operation(struct reader *r)
{
	uint8_t op = u8(r);
	int i = (op >> 4) % NQP;

	switch (op % 8) {
	case 0: post_recvs(r, qp[i], qp[i] ? qp[i]->srq : NULL, 1); break;
	case 1: post_sends(r, qp[i], 1); break;
	case 2: if (qp[i]) modify(qp[i], IBV_QPS_ERR); break;
	case 3: if (qp[i]) modify(qp[i], IBV_QPS_RESET); break;
	case 4: if (qp[i]) modify(qp[i], IBV_QPS_SQD); break;
	case 5: destroy_qp(i); break;
	default: drain(cq); drain(small_cq); break;
	}
}

static void check_memory(void)
{
	const uint8_t *page = region[MR_SMALL] - SMALL_OFF;

	for (int i = 0; i < NMR; i++)
		if (immutable(i) && memcmp(snapshot[i], region[i], mr_bytes[i])) {
			fprintf(stderr, "region %d changed\n", i);
			die("a region no peer may write was written");
		}
	for (size_t j = 0; j < PAGE; j++)
		if ((j < SMALL_OFF || j >= SMALL_OFF + mr_bytes[MR_SMALL]) && page[j] != 0xc5)
			die("canary next to the small MR overwritten");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reader r = { data, size };
	int steps = 0;

	make_objects(&r);
	while (r.n && steps++ < 48) {
		if ((r.p[0] & 0x07) == 0x07 && (r.p[0] & 0x60) == 0) {
			r.p++;
			r.n--;
			operation(&r);
		} else {
			inject(&r);
		}
	}
	for (int i = 0; i < NQP; i++)
		destroy_qp(i);
	for (int i = 0; i < 2; i++) {
		if (rvt_destroy_qp(xqp[i]))
			die("destroy xrc qp");
		xqp[i] = NULL;
	}
	drain(cq);
	drain(small_cq);
	if (rvt_destroy_srq(xsrq_a) || rvt_destroy_srq(xsrq_b))
		die("destroy xrc srq");
	if (rvt_destroy_srq(srq) || rvt_destroy_cq(cq) || rvt_destroy_cq(small_cq))
		die("destroy srq/cq");
	{
		/* every object is gone: its unread events went with it */
		struct ibv_async_event ev;
		if (!urvt_get_async_event(&uctx, &ev))
			die("an async event outlived its object");
	}
	check_memory();
	return 0;
}
