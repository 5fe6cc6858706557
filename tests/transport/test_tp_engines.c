/*
 * The protocol engines against a scripted peer: the device's QPs talk to a
 * plain UDP socket in this test ("the peer", its own 127.x address, port
 * 4791) that sends hand-built packets (src/wire builders) and checks what
 * comes back, byte for byte where docs/reference/rc-protocol.md fixes it:
 * responder (RNR, PSN-sequence NAK once per gap, duplicates, ACK coalescing,
 * READ replay, atomic executed once, access NAK) and completer (coalesced
 * ACK, READ response data, NAKs, retry exhaustion), plus receive drops.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/rvt_api.h"
#include "transport/stats.h"
#include "transport/tp.h"
#include "ut.h"
#include "wire/aeth.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/psn.h"

#define PEER_QPN 0x123
#define PEER_PSN 0x100
#define MY_PSN 0x500

static struct ut_dev dev;
static struct rvt_pd *pd;
static int peer_fd = -1;
static struct sockaddr_in peer_addr, dev_addr;

/* The peer's socket on a free 127.0.x.y (not the device's). */
static void peer_open(void)
{
	for (int host = 10; host < 250; host++) {
		int fd = socket(AF_INET, SOCK_DGRAM, 0), v = IP_PMTUDISC_DO;
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(URVT_ROCE_UDP_PORT) };
		a.sin_addr.s_addr = htonl(0x7f000000u | (213u << 16) | (uint32_t)host);
		setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v));
		if (!bind(fd, (struct sockaddr *)&a, sizeof(a))) {
			peer_fd = fd;
			peer_addr = a;
			return;
		}
		close(fd);
	}
	fail_msg("no free address for the test peer");
}

static int setup(void **state)
{
	ut_open(&dev);
	pd = ut_pd(&dev);
	peer_open();
	memset(&dev_addr, 0, sizeof(dev_addr));
	dev_addr.sin_family = AF_INET;
	dev_addr.sin_port = htons(URVT_ROCE_UDP_PORT);
	memcpy(&dev_addr.sin_addr, &dev.rdi->gid.raw[12], 4);
	return 0;
}

static int teardown(void **state)
{
	close(peer_fd);
	ut_close(&dev);
	return 0;
}

static struct urvt_ipinfo peer_to_dev_ip(void)
{
	struct urvt_ipinfo ip;
	urvt_ipinfo_v4(&ip, peer_addr.sin_addr.s_addr, dev_addr.sin_addr.s_addr, URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
	return ip;
}

/* Send one packet from the peer: f's headers + payload. */
static void peer_send(struct urvt_pkt *f, const void *payload, uint32_t len)
{
	uint8_t buf[5000];
	struct urvt_ipinfo ip = peer_to_dev_ip();
	size_t h, n;

	f->pkey = 0xffff;
	f->paylen = len;
	h = urvt_pkt_build_hdr(buf, sizeof(buf), f);
	assert_true(h > 0);
	if (len)
		memcpy(buf + h, payload, len);
	n = urvt_pkt_finish(buf, sizeof(buf), h + len, &ip);
	assert_true(n > 0);
	assert_int_equal(sendto(peer_fd, buf, n, 0, (struct sockaddr *)&dev_addr, sizeof(dev_addr)),
			 (ssize_t)n);
}

static void peer_expect(struct urvt_pkt *p, uint8_t *buf, uint8_t opcode)
{
	assert_true(ut_peer_recv(peer_fd, p, buf, 5000, 2000));
	assert_int_equal(p->opcode, opcode);
	assert_int_equal(p->dest_qpn, PEER_QPN);
}

/* One packet from the device, its ICRC checked as a receiver checks it
 * (the IPv4 ID unknown: segment k of a GSO send carries ID k); tail-loss
 * probes of probe_psn (with AckReq) are passed over. */
static void peer_expect_icrc(struct urvt_pkt *p, uint8_t *buf, uint8_t opcode, uint32_t probe_psn)
{
	struct sockaddr_in from;
	socklen_t flen;
	struct pollfd pfd = { .fd = peer_fd, .events = POLLIN };
	struct urvt_ipinfo ip;
	ssize_t n;

	do {
		assert_int_equal(poll(&pfd, 1, 2000), 1);
		flen = sizeof(from);
		n = recvfrom(peer_fd, buf, 5000, 0, (struct sockaddr *)&from, &flen);
		assert_true(n > 0);
		assert_int_equal(urvt_pkt_parse(buf, (size_t)n, p), 0);
	} while (p->psn == probe_psn && p->ackreq && p->opcode != opcode);
	assert_int_equal(p->opcode, opcode);
	assert_int_equal(p->dest_qpn, PEER_QPN);
	urvt_ipinfo_v4(&ip, from.sin_addr.s_addr, peer_addr.sin_addr.s_addr, ntohs(from.sin_port),
		       URVT_ROCE_UDP_PORT);
	assert_int_equal(urvt_icrc_check(&ip, buf, (size_t)n, URVT_ICRC_V4_ID_UNKNOWN), 0);
}

/* Nothing for ms but, at most, tail-loss probes: the oldest unacknowledged
 * packet, psn, with AckReq (req.c; a probe may go out while the requester
 * waits for the answer to its resend after a NAK). */
static void peer_quiet_but_probes(int ms, uint32_t psn)
{
	struct urvt_pkt p;
	uint8_t buf[5000];
	uint64_t t0 = ut_now_ms();

	while (ut_now_ms() - t0 < (uint64_t)ms)
		if (ut_peer_recv(peer_fd, &p, buf, sizeof(buf), 5) && (p.psn != psn || !p.ackreq))
			fail_msg("unexpected packet opcode %#x psn %#x", p.opcode, p.psn);
}

static void peer_quiet(int ms)
{
	struct urvt_pkt p;
	uint8_t buf[5000];
	if (ut_peer_recv(peer_fd, &p, buf, sizeof(buf), ms))
		fail_msg("unexpected packet opcode %#x psn %#x", p.opcode, p.psn);
}

/* An RC QP connected to the peer (whose socket starts empty). */
static struct rvt_qp *rc_qp(struct rvt_cq *cq, uint8_t timeout, uint8_t retry)
{
	uint8_t junk[5000];
	while (recv(peer_fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	const struct ut_path path = { .peer_s_addr = peer_addr.sin_addr.s_addr,
				      .dest_qpn = PEER_QPN, .rq_psn = PEER_PSN, .sq_psn = MY_PSN,
				      .min_rnr_timer = 3, .timeout = timeout, .retry_cnt = retry,
				      .rnr_retry = 7, .max_rd_atomic = 4 };

	ut_to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		   0);
	ut_to_rtr_path(qp, &path);
	ut_to_rts_path(qp, &path);
	return qp;
}

static struct urvt_pkt req(uint32_t qpn, uint8_t op, uint32_t psn, bool ackreq)
{
	struct urvt_pkt f;
	memset(&f, 0, sizeof(f));
	f.opcode = op;
	f.dest_qpn = qpn;
	f.psn = psn;
	f.ackreq = ackreq;
	return f;
}

/* The peer acknowledges our request psn (MSN msn), so nothing is resent. */
static void peer_ack(struct rvt_qp *qp, uint32_t psn, uint32_t msn)
{
	struct urvt_pkt f = req(qp->qpn, URVT_OP_RC_ACKNOWLEDGE, psn, false);
	f.aeth.syn = URVT_AETH_SYN_ACK_UNLIMITED;
	f.aeth.msn = msn;
	peer_send(&f, NULL, 0);
}

static uint64_t dev_ctr(enum urvt_ctr c)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	return __atomic_load_n(&net->stats->dev.v[c], __ATOMIC_RELAXED);
}

/* ---- responder ---- */

static void test_resp_send_rnr_dup_gap(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 14, 7);
	static uint8_t rbuf[4096], data[3000];
	struct rvt_mregion *mr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	struct ibv_wc wc;

	ut_fill(data, sizeof(data), 7);
	/* SEND ONLY with no receive posted: RNR NAK, nothing else changes */
	f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN, true);
	peer_send(&f, data, 100);
	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, urvt_aeth_syn_rnr(3));
	assert_int_equal(p.psn, PEER_PSN);
	/* the first packet in RTR/RTS raised nothing: the QP is in RTS */
	ut_post_recv(qp, 1, rbuf, sizeof(rbuf), mr->lkey);
	peer_send(&f, data, 100);
	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, 0x1f);
	assert_int_equal(p.aeth.msn, 1);
	assert_int_equal(p.psn, PEER_PSN);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 100);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_memory_equal(rbuf, data, 100);

	/* duplicate: re-ACKed with ack_psn - 1, not executed again */
	peer_send(&f, data, 100);
	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, 0x1f);
	assert_int_equal(p.psn, PEER_PSN);
	ut_cq_empty(cq, 20);

	/* a gap: one PSN-sequence NAK with the expected PSN, then silence;
	 * the packet past the gap is held, not executed (resp.c "Past a gap") */
	ut_post_recv(qp, 2, rbuf, sizeof(rbuf), mr->lkey);
	f = req(qp->qpn, URVT_OP_RC_SEND_LAST_WITH_IMMEDIATE, PEER_PSN + 3, true);
	f.immdt = 0x11223344;
	peer_send(&f, data + 2048, 952);
	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR));
	assert_int_equal(p.psn, PEER_PSN + 1);
	peer_send(&f, data + 2048, 952); /* again: held once, no second NAK */
	peer_quiet(50);
	ut_cq_empty(cq, 5);
	assert_int_equal(dev_ctr(URVT_CTR_OOO_HELD), 1);

	/* the requester resends from the NAK's PSN: FIRST, MIDDLE; the held
	 * LAST runs right after them: one ACK, of the LAST */
	f = req(qp->qpn, URVT_OP_RC_SEND_FIRST, PEER_PSN + 1, false);
	peer_send(&f, data, 1024);
	f = req(qp->qpn, URVT_OP_RC_SEND_MIDDLE, PEER_PSN + 2, false);
	peer_send(&f, data + 1024, 1024);
	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.psn, PEER_PSN + 3);
	assert_int_equal(p.aeth.syn, 0x1f);
	assert_int_equal(p.aeth.msn, 2);
	assert_int_equal(dev_ctr(URVT_CTR_OOO_EXECUTED), 1);
	/* its own resend of the LAST is a duplicate now: re-ACKed, not run */
	f = req(qp->qpn, URVT_OP_RC_SEND_LAST_WITH_IMMEDIATE, PEER_PSN + 3, true);
	f.immdt = 0x11223344;
	peer_send(&f, data + 2048, 952);
	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.psn, PEER_PSN + 3);
	assert_int_equal(p.aeth.syn, 0x1f);
	peer_quiet(20);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 3000);
	assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(be32toh(wc.imm_data), 0x11223344);
	assert_memory_equal(rbuf, data, 3000);
	assert_true(dev_ctr(URVT_CTR_RNR_NAKS_SENT) >= 1);
	assert_true(dev_ctr(URVT_CTR_DUP_REQUESTS) >= 1);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/* Expect an ACKNOWLEDGE with syndrome syn for psn. */
static void expect_ack(uint8_t syn, uint32_t psn)
{
	struct urvt_pkt p;
	uint8_t buf[5000];

	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, syn);
	assert_int_equal(p.psn, psn & 0xffffff);
}

/* Requests held past two gaps run in PSN order as each gap fills, the
 * NAK of the next gap acknowledging what ran; an RNR among them drops
 * the rest (the requester resends from there). */
static void test_resp_held_past_gaps(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 14, 7);
	static uint8_t rbuf[8][64];
	struct rvt_mregion *mr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	const uint8_t ack = URVT_AETH_SYN_ACK_UNLIMITED, seq = urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR);
	uint64_t held0 = dev_ctr(URVT_CTR_OOO_HELD), ran0 = dev_ctr(URVT_CTR_OOO_EXECUTED);
	uint8_t data[8][16];
	struct urvt_pkt f;
	struct ibv_wc wc;
	(void)state;

	for (int i = 0; i < 5; i++) {
		memset(data[i], 'a' + i, sizeof(data[i]));
		ut_post_recv(qp, (uint64_t)i, rbuf[i], sizeof(rbuf[i]), mr->lkey);
	}
	/* P+1, P+2 and P+4 come first: one NAK for P, three held */
	static const int early[] = { 1, 2, 4 };
	for (int k = 0; k < 3; k++) {
		f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + early[k], true);
		peer_send(&f, data[early[k]], sizeof(data[0]));
	}
	expect_ack(seq, PEER_PSN);
	peer_quiet(30);
	ut_cq_empty(cq, 5);
	assert_int_equal(dev_ctr(URVT_CTR_OOO_HELD) - held0, 3);
	/* P: it and P+1, P+2 run; one answer, the NAK of the gap at P+3
	 * (it acknowledges P..P+2) */
	f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN, true);
	peer_send(&f, data[0], sizeof(data[0]));
	expect_ack(seq, PEER_PSN + 3);
	peer_quiet(20);
	/* P+3: it and P+4, one ACK of P+4 */
	f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + 3, true);
	peer_send(&f, data[3], sizeof(data[3]));
	expect_ack(ack, PEER_PSN + 4);
	peer_quiet(20);
	assert_int_equal(dev_ctr(URVT_CTR_OOO_EXECUTED) - ran0, 3);
	/* every message landed in its own receive, in PSN order */
	for (int i = 0; i < 5; i++) {
		ut_poll1(cq, &wc);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_int_equal(wc.wr_id, (uint64_t)i);
		assert_memory_equal(rbuf[i], data[i], sizeof(data[i]));
	}

	/* one receive for two messages: P+6 held, P+5 runs, P+6 meets RNR */
	memset(data[5], 'f', sizeof(data[5]));
	ut_post_recv(qp, 5, rbuf[5], sizeof(rbuf[5]), mr->lkey);
	f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + 6, true);
	peer_send(&f, data[5], sizeof(data[5]));
	expect_ack(seq, PEER_PSN + 5);
	f.psn = PEER_PSN + 5;
	peer_send(&f, data[5], sizeof(data[5]));
	expect_ack(urvt_aeth_syn_rnr(3), PEER_PSN + 6); /* it acknowledges P+5 */
	peer_quiet(20);
	assert_int_equal(qp_tp(qp)->ooo_n, 0);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 5);
	ut_cq_empty(cq, 5);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

static void test_resp_read_atomic_access(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 14, 7);
	static uint8_t mem[4096] __attribute__((aligned(8)));
	struct rvt_mregion *mr = ut_mr(pd, mem, sizeof(mem),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC);
	uint64_t va = (uintptr_t)mem;
	struct urvt_pkt f, p;
	uint8_t buf[5000];

	ut_fill(mem, sizeof(mem), 3);
	/* READ of 2500 bytes: FIRST (AETH), MIDDLE (none), LAST (AETH) */
	for (int round = 0; round < 2; round++) {
		f = req(qp->qpn, URVT_OP_RC_RDMA_READ_REQUEST, PEER_PSN, true);
		f.reth = (struct urvt_reth){ .va = va + 100, .rkey = mr->lkey, .len = 2500 };
		peer_send(&f, NULL, 0);
		peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_RESPONSE_FIRST);
		assert_int_equal(p.psn, PEER_PSN);
		assert_int_equal(p.paylen, 1024);
		assert_int_equal(p.aeth.msn, 1); /* counted once, also on the replay */
		assert_memory_equal(p.payload, mem + 100, 1024);
		peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE);
		assert_int_equal(p.psn, PEER_PSN + 1);
		assert_memory_equal(p.payload, mem + 1124, 1024);
		peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_RESPONSE_LAST);
		assert_int_equal(p.psn, PEER_PSN + 2);
		assert_int_equal(p.paylen, 452);
		assert_memory_equal(p.payload, mem + 2148, 452);
	}
	/* a replay from the middle continues with MIDDLE/LAST */
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_REQUEST, PEER_PSN + 1, true);
	f.reth = (struct urvt_reth){ .va = va + 1124, .rkey = mr->lkey, .len = 1476 };
	peer_send(&f, NULL, 0);
	peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE);
	assert_int_equal(p.psn, PEER_PSN + 1);
	peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_RESPONSE_LAST);

	/* FETCH_ADD: executed once, the duplicate gets the saved value */
	uint64_t *target = (uint64_t *)(void *)(mem + 8), before = *target;
	f = req(qp->qpn, URVT_OP_RC_FETCH_ADD, PEER_PSN + 3, true);
	f.atmeth = (struct urvt_atmeth){ .va = va + 8, .rkey = mr->lkey, .swap_add = 5 };
	for (int round = 0; round < 2; round++) {
		peer_send(&f, NULL, 0);
		peer_expect(&p, buf, URVT_OP_RC_ATOMIC_ACKNOWLEDGE);
		assert_int_equal(p.psn, PEER_PSN + 3);
		assert_int_equal(p.atmack_orig, before);
	}
	assert_int_equal(*target, before + 5);

	/* WRITE with a bad R_Key: NAK remote access error, responder -> ERR */
	f = req(qp->qpn, URVT_OP_RC_RDMA_WRITE_ONLY, PEER_PSN + 4, true);
	f.reth = (struct urvt_reth){ .va = va, .rkey = mr->lkey ^ 0x100, .len = 16 };
	peer_send(&f, mem, 16);
	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, urvt_aeth_syn_nak(URVT_NAK_REMOTE_ACCESS));
	assert_int_equal(p.psn, PEER_PSN + 4);
	assert_int_equal(ut_state(qp), IBV_QPS_ERR);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/*
 * UC (rc-protocol §6): a message the responder refuses (bad R_Key, a WRITE
 * WITH IMMEDIATE among them, or a SEND longer than the receive) is dropped
 * without a word; the QP stays in RTS and the receive it would have used
 * takes the next SEND.
 */
static void test_resp_uc_drop_keeps_receive(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_UC, cq, cq, NULL, NULL, false);
	const struct ut_path path = { .peer_s_addr = peer_addr.sin_addr.s_addr,
				      .dest_qpn = PEER_QPN, .rq_psn = PEER_PSN, .sq_psn = MY_PSN };
	static uint8_t mem[4096], data[100];
	struct rvt_mregion *mr = ut_mr(pd, mem, sizeof(mem),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	uint32_t psn = PEER_PSN;
	struct urvt_pkt f;
	struct ibv_wc wc;

	(void)state;
	ut_to_init(qp, IBV_ACCESS_REMOTE_WRITE, 0);
	ut_to_rtr_path(qp, &path);
	ut_to_rts_path(qp, &path);
	ut_post_recv(qp, 1, mem, 64, mr->lkey);
	for (int c = 0; c < 3; c++) {
		memset(mem, 0, sizeof(mem));
		ut_fill(data, sizeof(data), (uint32_t)c);
		if (c < 2) { /* WRITE ONLY with a bad R_Key, without and with imm */
			f = req(qp->qpn, c ? URVT_OP_UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE :
					     URVT_OP_UC_RDMA_WRITE_ONLY, psn++, false);
			f.reth = (struct urvt_reth){ .va = (uintptr_t)mem + 128,
						     .rkey = mr->lkey ^ 0x100, .len = 16 };
			f.immdt = 7;
			peer_send(&f, data, 16);
		} else {     /* 100 bytes into 64 */
			f = req(qp->qpn, URVT_OP_UC_SEND_ONLY, psn++, false);
			peer_send(&f, data, 100);
		}
		peer_quiet(20);
		ut_cq_empty(cq, 5);
		assert_int_equal(ut_state(qp), IBV_QPS_RTS);
		for (int i = 0; i < 256; i++)
			assert_int_equal(mem[i], 0);
		/* the next SEND takes the receive that was not used */
		f = req(qp->qpn, URVT_OP_UC_SEND_ONLY, psn++, false);
		peer_send(&f, data, 8);
		ut_poll1(cq, &wc);
		assert_int_equal(wc.wr_id, 1);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_int_equal(wc.byte_len, 8);
		assert_memory_equal(mem, data, 8);
		ut_post_recv(qp, 1, mem, 64, mr->lkey);
	}
	assert_true(dev_ctr(URVT_CTR_DROP_BASE + URVT_TDROP_RESP_SILENT) >= 3);
	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/*
 * Atomic on an MR whose iova and host address differ mod 8
 * (ibv_reg_mr_iova): the iova is aligned, the host word is not. NAK
 * invalid request, responder -> ERR, memory untouched; the in-process path
 * answers the same (tests/unit test_atomic_iova_misaligned_host).
 */
static void test_resp_atomic_iova(void **state)
{
	static const uint8_t ops[] = { URVT_OP_RC_FETCH_ADD, URVT_OP_RC_COMPARE_SWAP };
	static uint8_t mem[4096] __attribute__((aligned(8)));
	const uint64_t iova = 0x7000000;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		struct rvt_cq *cq = ut_cq(&dev, 64);
		struct rvt_qp *qp = rc_qp(cq, 14, 7);
		struct rvt_mregion *mr;
		struct urvt_pkt f, p;
		uint8_t buf[5000];
		int err = 0;

		memset(mem, 0, sizeof(mem));
		mr = rvt_reg_mr(pd, mem + 4, 1024, iova,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, &err);
		assert_non_null(mr);
		f = req(qp->qpn, ops[i], PEER_PSN, true);
		f.atmeth = (struct urvt_atmeth){ .va = iova + 16, .rkey = mr->lkey,
						 .swap_add = 5, .comp = 0 };
		peer_send(&f, NULL, 0);
		peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
		assert_int_equal(p.aeth.syn, urvt_aeth_syn_nak(URVT_NAK_INVALID_REQUEST));
		assert_int_equal(p.psn, PEER_PSN);
		assert_int_equal(ut_state(qp), IBV_QPS_ERR);
		for (size_t b = 0; b < 64; b++)
			assert_int_equal(mem[b], 0);
		rvt_destroy_qp(qp);
		assert_int_equal(rvt_dereg_mr(mr), 0);
		rvt_destroy_cq(cq);
	}
}

/* ---- receive drops ---- */

static void test_recv_drops(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_qp *qp = rc_qp(cq, 14, 7);
	uint64_t icrc = dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_ICRC);
	uint64_t noqp = dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP);
	uint8_t buf[200];
	struct urvt_ipinfo ip = peer_to_dev_ip();
	struct urvt_pkt f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN, true);
	size_t h, n;

	/* corrupt one byte after the ICRC was computed */
	f.pkey = 0xffff;
	f.paylen = 8;
	h = urvt_pkt_build_hdr(buf, sizeof(buf), &f);
	memset(buf + h, 0xab, 8);
	n = urvt_pkt_finish(buf, sizeof(buf), h + 8, &ip);
	buf[h + 3] ^= 0x10;
	sendto(peer_fd, buf, n, 0, (struct sockaddr *)&dev_addr, sizeof(dev_addr));
	/* a QP that does not exist */
	f = req(0x7777, URVT_OP_RC_SEND_ONLY, PEER_PSN, true);
	peer_send(&f, buf, 4);
	/* truncated garbage */
	sendto(peer_fd, "xyz", 3, 0, (struct sockaddr *)&dev_addr, sizeof(dev_addr));
	peer_quiet(100);
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_ICRC), icrc + 1);
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP), noqp + 1);
	rvt_destroy_qp(qp);
	rvt_destroy_cq(cq);
}

/* ---- requester + completer ---- */

/* After a PSN-sequence NAK the requester resends one GSO send's worth and
 * waits for an answer past the NAK'd PSN; an RNR NAK for that PSN is such
 * an answer: the resend comes at the RNR timer, not at the retransmit
 * timeout (1 s here) or the probe (timeout/16). */
static void test_comp_nak_then_rnr(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 18, 7);
	static uint8_t sbuf[4096];
	struct rvt_mregion *mr = ut_mr(pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = 3000, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct urvt_pkt p, f;
	uint8_t buf[5000];
	struct ibv_wc wc;
	(void)state;

	ut_fill(sbuf, sizeof(sbuf), 5);
	ut_post_send(qp, &wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_FIRST);
	peer_expect(&p, buf, URVT_OP_RC_SEND_MIDDLE);
	peer_expect(&p, buf, URVT_OP_RC_SEND_LAST);
	/* NAK for the MIDDLE: MIDDLE and LAST again, then the wait */
	f = req(qp->qpn, URVT_OP_RC_ACKNOWLEDGE, MY_PSN + 1, false);
	f.aeth.syn = urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR);
	peer_send(&f, NULL, 0);
	peer_expect(&p, buf, URVT_OP_RC_SEND_MIDDLE);
	assert_int_equal(p.psn, MY_PSN + 1);
	peer_expect(&p, buf, URVT_OP_RC_SEND_LAST);
	/* RNR NAK for the MIDDLE, timer 0.01 ms: the MIDDLE comes again long
	 * before the 1 s retransmit timeout (tail-loss probes may come too) */
	f.aeth.syn = urvt_aeth_syn_rnr(1);
	peer_send(&f, NULL, 0);
	uint64_t t0 = ut_now_ms();
	bool again = false;
	while (!again && ut_now_ms() - t0 < 300) {
		if (ut_peer_recv(peer_fd, &p, buf, sizeof(buf), 50))
			again = p.opcode == URVT_OP_RC_SEND_MIDDLE && p.psn == MY_PSN + 1;
	}
	assert_true(again);
	peer_ack(qp, MY_PSN + 2, 1);
	assert_int_equal(ut_poll(cq, &wc, 1, 300), 1);
	assert_true(ut_now_ms() - t0 < 600);
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

static void test_comp_send_coalesced_nak(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 18, 7); /* 1 s: no probe within the checks */
	static uint8_t sbuf[4096];
	struct rvt_mregion *mr = ut_mr(pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = 2000, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct urvt_pkt p, f;
	uint8_t buf[5000];
	struct ibv_wc wc[2];

	ut_fill(sbuf, sizeof(sbuf), 9);
	/* two messages: SEND FIRST + LAST (AckReq on LAST), then SEND ONLY */
	ut_post_send(qp, &wr);
	wr.wr_id = 2;
	sge.length = 100;
	ut_post_send(qp, &wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_FIRST);
	assert_int_equal(p.psn, MY_PSN);
	assert_false(p.ackreq);
	assert_memory_equal(p.payload, sbuf, 1024);
	peer_expect(&p, buf, URVT_OP_RC_SEND_LAST);
	assert_int_equal(p.psn, MY_PSN + 1);
	assert_true(p.ackreq);
	assert_int_equal(p.paylen, 976);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	assert_int_equal(p.psn, MY_PSN + 2);
	assert_true(p.ackreq);
	/* one coalesced ACK for the newest PSN completes both, in order */
	peer_ack(qp, MY_PSN + 2, 2);
	assert_int_equal(ut_poll(cq, wc, 2, 2000), 2);
	assert_int_equal(wc[0].wr_id, 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[0].opcode, IBV_WC_SEND);
	assert_int_equal(wc[1].wr_id, 2);

	/* NAK PSN sequence error: go back to the NAK'd PSN */
	wr.wr_id = 3;
	sge.length = 3000;
	ut_post_send(qp, &wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_FIRST);
	peer_expect(&p, buf, URVT_OP_RC_SEND_MIDDLE);
	peer_expect(&p, buf, URVT_OP_RC_SEND_LAST);
	f = req(qp->qpn, URVT_OP_RC_ACKNOWLEDGE, MY_PSN + 4, false);
	f.aeth.syn = urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR);
	peer_send(&f, NULL, 0);
	/* the NAK'd packet and the rest (one GSO send's worth, req.c),
	 * the last asking for an ACK, then the requester waits */
	peer_expect(&p, buf, URVT_OP_RC_SEND_MIDDLE);
	assert_int_equal(p.psn, MY_PSN + 4);
	assert_memory_equal(p.payload, sbuf + 1024, 1024);
	peer_expect(&p, buf, URVT_OP_RC_SEND_LAST);
	assert_int_equal(p.psn, MY_PSN + 5);
	assert_true(p.ackreq);
	peer_quiet_but_probes(30, MY_PSN + 4);
	/* the same NAK again (duplicated on the wire): no second rewind */
	peer_send(&f, NULL, 0);
	peer_quiet_but_probes(30, MY_PSN + 4);
	peer_ack(qp, MY_PSN + 5, 0);
	ut_poll1(cq, wc);
	assert_int_equal(wc[0].wr_id, 3);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);

	/* NAK invalid request: REM_INV_REQ_ERR, the QP goes to ERR */
	wr.wr_id = 4;
	sge.length = 10;
	ut_post_send(qp, &wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	f = req(qp->qpn, URVT_OP_RC_ACKNOWLEDGE, p.psn, false);
	f.aeth.syn = urvt_aeth_syn_nak(URVT_NAK_INVALID_REQUEST);
	peer_send(&f, NULL, 0);
	ut_poll1(cq, wc);
	assert_int_equal(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
	assert_int_equal(ut_state(qp), IBV_QPS_ERR);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/*
 * A long message's middle packets are built each from the one before
 * (req.c req_send_middles): on the wire they must be what the packet
 * builder makes. A WRITE of 41 packets gathered from two SGEs split inside
 * a packet, then a SEND of 5: opcodes, PSNs, AckReq every 32 packets and
 * on the last (rc-protocol §2.3), payload and ICRC of each.
 */
static void test_req_middles_built_alike(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 18, 7); /* 1 s: no probe within the checks */
	static uint8_t sbuf[48 << 10];
	struct rvt_mregion *mr = ut_mr(pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	const uint32_t split = 5000, wlen = 40 * 1024 + 100;
	struct ibv_sge sge[2] = {
		{ .addr = (uintptr_t)sbuf, .length = split, .lkey = mr->lkey },
		{ .addr = (uintptr_t)sbuf + split, .length = wlen - split, .lkey = mr->lkey },
	};
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = sge, .num_sge = 2,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	struct urvt_pkt p;
	uint8_t buf[5000];
	struct ibv_wc wc[2];

	ut_fill(sbuf, sizeof(sbuf), 11);
	wr.wr.rdma.remote_addr = 0x10000;
	wr.wr.rdma.rkey = 0x77;
	ut_post_send(qp, &wr);
	wr.wr_id = 2;
	wr.opcode = IBV_WR_SEND;
	wr.num_sge = 1;
	sge[0] = (struct ibv_sge){ .addr = (uintptr_t)sbuf + 7, .length = 5 * 1024,
				   .lkey = mr->lkey };
	ut_post_send(qp, &wr);
	for (uint32_t i = 0; i < 41; i++) {
		uint8_t op = i == 0 ? URVT_OP_RC_RDMA_WRITE_FIRST :
			     i == 40 ? URVT_OP_RC_RDMA_WRITE_LAST : URVT_OP_RC_RDMA_WRITE_MIDDLE;
		peer_expect_icrc(&p, buf, op, MY_PSN);
		assert_int_equal(p.psn, MY_PSN + i);
		assert_int_equal(p.ackreq, i == 31 || i == 40);
		assert_int_equal(p.paylen, i == 40 ? 100 : 1024);
		assert_memory_equal(p.payload, sbuf + i * 1024, p.paylen);
	}
	for (uint32_t i = 0; i < 5; i++) {
		uint8_t op = i == 0 ? URVT_OP_RC_SEND_FIRST :
			     i == 4 ? URVT_OP_RC_SEND_LAST : URVT_OP_RC_SEND_MIDDLE;
		peer_expect_icrc(&p, buf, op, MY_PSN);
		assert_int_equal(p.psn, MY_PSN + 41 + i);
		assert_int_equal(p.ackreq, i == 4);
		assert_int_equal(p.paylen, 1024);
		assert_memory_equal(p.payload, sbuf + 7 + i * 1024, 1024);
	}
	peer_quiet_but_probes(20, MY_PSN);
	peer_ack(qp, MY_PSN + 45, 2);
	assert_int_equal(ut_poll(cq, wc, 2, 2000), 2);
	assert_int_equal(wc[0].wr_id, 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[1].wr_id, 2);
	assert_int_equal(wc[1].status, IBV_WC_SUCCESS);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

static void test_comp_read_and_retry(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 8, 1); /* 1 ms timeout, one retry */
	static uint8_t lbuf[4096], remote[4096];
	struct rvt_mregion *mr = ut_mr(pd, lbuf, sizeof(lbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)lbuf, .length = 1500, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED };
	struct urvt_pkt p, f;
	uint8_t buf[5000];
	struct ibv_wc wc;
	int sent = 0;

	ut_fill(remote, sizeof(remote), 5);
	wr.wr.rdma.remote_addr = 0x10000;
	wr.wr.rdma.rkey = 0x4242;
	ut_post_send(qp, &wr);
	peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_REQUEST);
	assert_int_equal(p.reth.va, 0x10000);
	assert_int_equal(p.reth.len, 1500);
	assert_int_equal(p.reth.rkey, 0x4242);
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_RESPONSE_FIRST, p.psn, false);
	f.aeth.syn = 0x1f;
	peer_send(&f, remote, 1024);
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_RESPONSE_LAST, p.psn + 1, false);
	f.aeth.syn = 0x1f;
	peer_send(&f, remote + 1024, 476);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
	assert_memory_equal(lbuf, remote, 1500);

	/* no answer at all: probe, timeout and retry once, then RETRY_EXC_ERR */
	wr.opcode = IBV_WR_SEND;
	wr.wr_id = 8;
	sge.length = 10;
	ut_post_send(qp, &wr);
	while (ut_peer_recv(peer_fd, &p, buf, sizeof(buf), 300)) {
		/* a probe of the READ that left before its responses were
		 * taken in (a loaded machine: more than the 1 ms probe floor) */
		if (p.opcode == URVT_OP_RC_RDMA_READ_REQUEST)
			continue;
		assert_int_equal(p.opcode, URVT_OP_RC_SEND_ONLY);
		sent++;
	}
	assert_true(sent >= 2 && sent <= 4); /* original, probes, one retry */
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 8);
	assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
	assert_int_equal(ut_state(qp), IBV_QPS_ERR);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/* A packet from the peer as a link would hand it over with flags
 * (URVT_RX_SPANS: the same-host link) and the sender's process pid
 * readable (link.h cma_pid; 0: none). Here that process is this one. */
static void peer_inject_as(struct urvt_pkt *f, const void *payload, uint32_t len, unsigned flags,
			   int pid)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct urvt_ipinfo ip = peer_to_dev_ip();
	uint8_t buf[5000];
	size_t h, n;

	f->pkey = 0xffff;
	f->paylen = len;
	h = urvt_pkt_build_hdr(buf, sizeof(buf), f);
	assert_true(h > 0);
	memcpy(buf + h, payload, len);
	n = urvt_pkt_finish(buf, sizeof(buf), h + len, &ip);
	assert_true(n > 0);
	struct urvt_rx_hold held = urvt_rx_lock(net, false);
	assert_true(held.how >= 0);
	urvt_recv_pkt(net, buf, (uint32_t)n, &ip, flags, pid, NULL);
	{
		/* what the engines queued on this thread leaves now, as at the
		 * end of a receive batch */
		struct urvt_txq *q = urvt_txq_get();
		if (q)
			urvt_txq_flush(net, q);
	}
	urvt_rx_unlock(net, held);
}

static void peer_inject(struct urvt_pkt *f, const void *payload, uint32_t len, int pid)
{
	peer_inject_as(f, payload, len, URVT_RX_SPANS, pid);
}

/* A READ answer by reference to psn for len bytes at addr (docs/shm.md
 * "Single copy"), from process pid over the same-host link (or over UDP:
 * pid -1); it says it stands for the PSNs of npsn_len bytes. */
static void peer_ref_psns(struct rvt_qp *qp, uint32_t psn, const void *addr, uint32_t len,
			  uint32_t npsn_len, int pid)
{
	struct urvt_pkt f = req(qp->qpn, URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, psn, false);
	struct urvt_cma_ref ref = { .addr = (uintptr_t)addr, .len = len };

	f.aeth.syn = URVT_AETH_SYN_ACK_UNLIMITED;
	f.span_more = (npsn_len - 1) / 1024;
	f.cma = true;
	if (pid < 0)
		peer_inject_as(&f, &ref, sizeof(ref), 0, 0);
	else
		peer_inject(&f, &ref, sizeof(ref), pid);
}

static void peer_ref(struct rvt_qp *qp, uint32_t psn, const void *addr, uint32_t len, int pid)
{
	peer_ref_psns(qp, psn, addr, len, len, pid);
}

/* A signaled READ of len bytes from 0x20000 (rkey 0x77) into la (the
 * first cut bytes) and lb (the rest), each its own MR, on a new RC QP:
 * posted, its request taken into req (bytes in buf). */
struct read2 {
	struct rvt_cq *cq;
	struct rvt_qp *qp;
	struct rvt_mregion *ma, *mb;
	struct ibv_sge sge[2];
	struct ibv_send_wr wr;
};

static void read2_setup(struct read2 *r, uint8_t *la, uint8_t *lb, uint32_t len, uint32_t cut,
			struct urvt_pkt *req, uint8_t *buf)
{
	memset(r, 0, sizeof(*r));
	r->cq = ut_cq(&dev, 64);
	r->qp = rc_qp(r->cq, 18, 3); /* 1 s: no probe within the checks */
	r->ma = ut_mr(pd, la, len, IBV_ACCESS_LOCAL_WRITE);
	r->mb = ut_mr(pd, lb, len, IBV_ACCESS_LOCAL_WRITE);
	r->sge[0] = (struct ibv_sge){ .addr = (uintptr_t)la, .length = cut, .lkey = r->ma->lkey };
	r->sge[1] = (struct ibv_sge){ .addr = (uintptr_t)lb, .length = len - cut,
				      .lkey = r->mb->lkey };
	r->wr = (struct ibv_send_wr){ .wr_id = 1, .sg_list = r->sge, .num_sge = 2,
				      .opcode = IBV_WR_RDMA_READ,
				      .send_flags = IBV_SEND_SIGNALED };
	r->wr.wr.rdma.remote_addr = 0x20000;
	r->wr.wr.rdma.rkey = 0x77;
	ut_post_send(r->qp, &r->wr);
	peer_expect(req, buf, URVT_OP_RC_RDMA_READ_REQUEST);
}

static void read2_teardown(struct read2 *r)
{
	rvt_destroy_qp(r->qp);
	rvt_dereg_mr(r->ma);
	rvt_dereg_mr(r->mb);
	rvt_destroy_cq(r->cq);
}

/*
 * The completer takes a READ answer by reference (docs/shm.md "Single
 * copy"): the bytes are read from the responder's process (this one) into
 * the WQE's SGEs, split over two MRs, with one system call. A reference
 * that cannot be read costs a retry and turns the QP's references off,
 * the data then come as packets; a reference of the wrong length, or one
 * from UDP (the bit reserved: taken as 16 bytes of data), is dropped and
 * changes nothing.
 */
static void test_comp_read_by_ref(void **state)
{
	enum { LEN = 16384, CUT = 5000 };
	static uint8_t la[LEN], lb[LEN], remote[LEN];
	struct read2 r;
	uint64_t pulls = dev_ctr(URVT_CTR_CMA_PULLS), fails = dev_ctr(URVT_CTR_CMA_FAILS);
	uint64_t badlen = dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_LENGTH);
	uint64_t badresp = dev_ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_RESP);
	struct urvt_pkt p, f;
	uint8_t buf[5000];
	struct ibv_wc wc;
	void *gone;

	ut_fill(remote, sizeof(remote), 9);
	read2_setup(&r, la, lb, LEN, CUT, &p, buf);
	struct rvt_cq *cq = r.cq;
	struct rvt_qp *qp = r.qp;
	assert_false(p.cma); /* UDP cannot carry an answer by reference */
	/* hostile or broken: a length its PSNs cannot have; no readable peer */
	peer_ref_psns(qp, p.psn, remote, LEN - 2048, LEN, getpid());
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_LENGTH), badlen + 1);
	peer_ref(qp, p.psn, remote, LEN, -1); /* from UDP: an ONLY of 16 bytes */
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_RESP), badresp + 1);
	peer_ref(qp, p.psn, NULL, LEN, getpid()); /* "pushed", but nobody asked */
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_RESP), badresp + 2);
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_LENGTH), badlen + 1);
	assert_int_equal(rvt_poll_cq(cq, 1, &wc), 0);
	peer_ref(qp, p.psn, remote, LEN, getpid());
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
	assert_memory_equal(la, remote, CUT);
	assert_memory_equal(lb, remote + CUT, LEN - CUT);
	assert_int_equal(dev_ctr(URVT_CTR_CMA_PULLS), pulls + 1);
	assert_false(qp_tp(qp)->cma_off);

	/* a reference into memory that is gone: asked again, data as packets */
	gone = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(gone != MAP_FAILED);
	munmap(gone, LEN);
	memset(la, 0, sizeof(la));
	memset(lb, 0, sizeof(lb));
	r.wr.wr_id = 2;
	ut_post_send(qp, &r.wr);
	peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_REQUEST);
	peer_ref(qp, p.psn, gone, LEN, getpid());
	assert_int_equal(dev_ctr(URVT_CTR_CMA_FAILS), fails + 1);
	assert_true(qp_tp(qp)->cma_off);
	assert_int_equal(rvt_poll_cq(cq, 1, &wc), 0);
	peer_expect(&f, buf, URVT_OP_RC_RDMA_READ_REQUEST); /* the retry */
	assert_int_equal(f.psn, p.psn);
	assert_int_equal(f.reth.len, LEN);
	for (uint32_t i = 0; i < LEN / 1024; i++) {
		f = req(qp->qpn, i == 0 ? URVT_OP_RC_RDMA_READ_RESPONSE_FIRST :
				 i == LEN / 1024 - 1 ? URVT_OP_RC_RDMA_READ_RESPONSE_LAST :
						       URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE,
			p.psn + i, false);
		f.aeth.syn = URVT_AETH_SYN_ACK_UNLIMITED;
		peer_send(&f, remote + i * 1024, 1024);
	}
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 2);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_memory_equal(la, remote, CUT);
	assert_memory_equal(lb, remote + CUT, LEN - CUT);
	assert_int_equal(dev_ctr(URVT_CTR_CMA_PULLS), pulls + 1);

	read2_teardown(&r);
}

/*
 * A READ response span (docs/shm.md "Spans") of four PMTUs: its two MIDDLE
 * pieces are taken at once (comp.c comp_span_middles), the bytes land
 * across the SGEs' cut inside them as piece by piece, and the completion
 * follows the LAST. A span that claims more PSNs than its READ has is taken
 * piece by piece: the MIDDLE at the READ's last PSN is dropped (bad_resp),
 * nothing completes, and the right LAST then completes the READ.
 */
static void test_comp_read_span(void **state)
{
	enum { LEN = 4096, CUT = 1500 };
	static uint8_t la[LEN], lb[LEN], remote[LEN];
	uint64_t badresp = dev_ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_RESP);
	struct urvt_pkt p, f;
	uint8_t buf[5000];
	struct ibv_wc wc;
	struct read2 r;

	ut_fill(remote, sizeof(remote), 5);
	read2_setup(&r, la, lb, LEN, CUT, &p, buf);
	struct rvt_cq *cq = r.cq;
	struct rvt_qp *qp = r.qp;
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, p.psn, false);
	f.aeth.syn = URVT_AETH_SYN_ACK_UNLIMITED;
	f.span_more = LEN / 1024 - 1;
	peer_inject(&f, remote, LEN, 0);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, LEN);
	assert_memory_equal(la, remote, CUT);
	assert_memory_equal(lb, remote + CUT, LEN - CUT);
	assert_int_equal(qp_tp(qp)->comp_psn, urvt_psn_add(p.psn, LEN / 1024));

	/* half as long a READ, answered with the four PMTUs again */
	memset(la, 0, sizeof(la));
	memset(lb, 0, sizeof(lb));
	r.sge[1].length = LEN / 2 - CUT;
	r.wr.wr_id = 2;
	ut_post_send(qp, &r.wr);
	peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_REQUEST);
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, p.psn, false);
	f.aeth.syn = URVT_AETH_SYN_ACK_UNLIMITED;
	f.span_more = LEN / 1024 - 1;
	peer_inject(&f, remote, LEN, 0);
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_RESP), badresp + 1);
	assert_int_equal(rvt_poll_cq(cq, 1, &wc), 0);
	assert_int_equal(qp_tp(qp)->comp_psn, urvt_psn_add(p.psn, 1));
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_RESPONSE_LAST, urvt_psn_add(p.psn, 1), false);
	f.aeth.syn = URVT_AETH_SYN_ACK_UNLIMITED;
	peer_send(&f, remote + 1024, 1024);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 2);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_memory_equal(la, remote, CUT);
	assert_memory_equal(lb, remote + CUT, LEN / 2 - CUT);
	assert_false(lb[LEN / 2 - CUT]); /* nothing past the READ's bytes */

	read2_teardown(&r);
}

/*
 * A READ request that asks for an answer by reference and a push, from
 * UDP: the bit is BTH's reserved 0 and the push address a payload a READ
 * request must not have: dropped (bad_length), nothing answered. The same
 * request without the payload is answered with data, as any READ; so is
 * the request with it from a same-host peer, to a responder that does not
 * answer by reference.
 */
static void test_resp_read_push_from_udp(void **state)
{
	struct rvt_cq *cq = ut_cq(&dev, 16);
	struct rvt_qp *qp = rc_qp(cq, 14, 3);
	static uint8_t target[8192];
	struct rvt_mregion *mr = ut_mr(pd, target, sizeof(target),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	struct urvt_cma_push push = { .addr = 0x1000, .len = 4096, .epoch = 0 };
	struct urvt_pkt f = req(qp->qpn, URVT_OP_RC_RDMA_READ_REQUEST, PEER_PSN, true), p;
	uint64_t badlen = dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_LENGTH);
	uint8_t buf[5000];

	ut_fill(target, sizeof(target), 3);
	f.reth.va = (uintptr_t)target;
	f.reth.rkey = mr->lkey;
	f.reth.len = sizeof(target);
	f.cma = true;
	peer_send(&f, &push, sizeof(push));
	peer_quiet(100);
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_LENGTH), badlen + 1);
	f.cma = false;
	peer_send(&f, NULL, 0);
	/* the MIDDLEs after the first are built each from the one before
	 * (resp.c read_respond): ICRC and PSN of each */
	peer_expect_icrc(&p, buf, URVT_OP_RC_RDMA_READ_RESPONSE_FIRST, 0);
	assert_false(p.cma);
	assert_int_equal(p.paylen, 1024);
	assert_memory_equal(p.payload, target, 1024);
	for (int i = 1; i < 8; i++) {
		peer_expect_icrc(&p, buf,
				 i < 7 ? URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE
				       : URVT_OP_RC_RDMA_READ_RESPONSE_LAST, 0);
		assert_int_equal(p.psn, PEER_PSN + (uint32_t)i);
		assert_false(p.ackreq);
		assert_memory_equal(p.payload, target + i * 1024, 1024);
	}
	peer_quiet(50);
	/* the same request from a same-host peer whose process we cannot
	 * read, to a responder whose route carries no answers by reference
	 * (URVT_CMA=0 there): a plain READ, the push address unused */
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_REQUEST, PEER_PSN + 8, true);
	f.reth.va = (uintptr_t)target;
	f.reth.rkey = mr->lkey;
	f.reth.len = sizeof(target);
	f.cma = true;
	peer_inject_as(&f, &push, sizeof(push), URVT_RX_SPANS, 0);
	for (int i = 0; i < 8; i++) {
		peer_expect(&p, buf, i == 0 ? URVT_OP_RC_RDMA_READ_RESPONSE_FIRST :
				     i < 7  ? URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE :
					      URVT_OP_RC_RDMA_READ_RESPONSE_LAST);
		assert_false(p.cma);
		assert_int_equal(p.paylen, 1024);
		assert_memory_equal(p.payload, target + i * 1024, 1024);
	}
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_BAD_LENGTH), badlen + 1);
	peer_quiet(50);

	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/* ---- ACKs that wait for the application's next send (tx.c) ---- */

/* Poll as a busy application does (the transport's poll_cq, which
 * receives inline); the first completion within ms, or 0. */
static int app_poll(struct rvt_cq *cq, struct ibv_wc *wc, int ms)
{
	uint64_t end = ut_now_ms() + (uint64_t)ms;

	do {
		int r = rvt_app_poll_cq(cq, 1, wc);
		assert_true(r >= 0);
		if (r)
			return r;
	} while (ut_now_ms() < end);
	return 0;
}

static uint32_t acks_waiting(void)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	return atomic_load(&net->wait_n);
}

/* This test's verbs come slower than an application's: that must not make
 * it a "leaver" (poll.c), whose returning polls receive a batch. */
static void app_fresh(void)
{
	struct urvt_net *net = dev.rdi->transport_priv;

	atomic_store(&net->app_leave, 0);
	atomic_store(&net->app_ret_cyc, 0);
}

/* A busy application: it owns the socket (a run of empty polls), and is
 * not taken for one that waits elsewhere between its verbs (this test's
 * checks take longer than an application's would; poll.c). The watchdog
 * that gives the socket back 2 ms after the last poll waits 60 s here: a
 * loaded machine may stop this thread for longer between two checks. */
static void app_busy(struct rvt_cq *cq)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct ibv_wc wc;

	net->watchdog_ns = 60000000000ull;
	app_fresh();
	net->wait_score = URVT_WAIT_SCORE_START; /* nor for one that does not answer (tx.c) */
	for (int i = 0; i < 10000 && !atomic_load(&net->aside); i++)
		assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
	assert_true(atomic_load(&net->aside));
}

/* The application owns the socket; the peer sends SEND_ONLY psn (AckReq),
 * which lands in receive wr_id; then waiting ACKs are as many as said. */
static void busy_app_gets(struct rvt_cq *cq, uint32_t qpn, uint32_t psn, uint64_t wr_id,
			  uint32_t waiting)
{
	struct urvt_pkt f = req(qpn, URVT_OP_RC_SEND_ONLY, psn, true);
	uint8_t data[16];
	struct ibv_wc wc;

	memset(data, 'w', sizeof(data));
	app_busy(cq);
	peer_send(&f, data, sizeof(data));
	assert_int_equal(app_poll(cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, wr_id);
	assert_int_equal(acks_waiting(), waiting);
}

/* An application that owns the socket: the plain ACK of what its poll
 * received waits for its next send and leaves after it; a later ACK to
 * the QP replaces a waiting one; the next receive batch, a NAK, blocking
 * (req_notify_cq) and a reset each send what waits; with URVT_ACK_WAIT
 * off (ack_wait), or for an application that does not answer, nothing
 * waits. */
static void test_resp_ack_waits_for_send(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 18, 7); /* 1 s: no resend within the checks */
	static uint8_t rbuf[12][64], sbuf[64];
	struct rvt_mregion *mr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *smr = ut_mr(pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = 16, .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 100, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	const uint8_t ack = URVT_AETH_SYN_ACK_UNLIMITED;
	uint64_t waited0 = dev_ctr(URVT_CTR_ACKS_WAITED);
	uint64_t replaced0 = dev_ctr(URVT_CTR_ACKS_REPLACED);
	uint64_t coalesced0 = dev_ctr(URVT_CTR_ACKS_COALESCED);
	uint8_t data[16];
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	struct ibv_wc wc;
	(void)state;

	memset(data, 'w', sizeof(data));
	for (int i = 0; i < 12; i++)
		ut_post_recv(qp, (uint64_t)i, rbuf[i], sizeof(rbuf[i]), mr->lkey);

	/* a SEND: its ACK waits, then follows our reply */
	busy_app_gets(cq, qp->qpn, PEER_PSN, 0, 1);
	assert_int_equal(dev_ctr(URVT_CTR_ACKS_WAITED) - waited0, 1);
	ut_post_send(qp, &wr);
	assert_int_equal(acks_waiting(), 0);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	assert_int_equal(p.psn, MY_PSN);
	expect_ack(ack, PEER_PSN);
	peer_ack(qp, MY_PSN, 1);
	assert_int_equal(app_poll(cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, 100);
	/* the retransmit timer, pushed back lazily, fires once more and
	 * receives a batch (urvt_tp_retry_timeout), which sends what waits:
	 * the checks below begin after it */
	for (int i = 0; i < 2000 && urvt_timer_pending(qp->rdi->progress, &qp->s_timer); i++)
		usleep(1000);
	/* and its handler has returned (the lock orders what it wrote) */
	urvt_timer_del_sync(qp->rdi->progress, &qp->s_timer);
	assert_false(qp_tp(qp)->timer_armed);

	/* two SENDs in one batch: one ACK, of the second */
	app_busy(cq);
	f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + 1, true);
	peer_send(&f, data, sizeof(data));
	f.psn = PEER_PSN + 2;
	peer_send(&f, data, sizeof(data));
	usleep(300); /* both in the socket (well within the watchdog's 2 ms) */
	assert_int_equal(app_poll(cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, 1);
	assert_int_equal(acks_waiting(), 1);
	/* the first one's ACK was owed, never built (resp.c "ACKs of a batch") */
	assert_int_equal(dev_ctr(URVT_CTR_ACKS_COALESCED) - coalesced0, 1);
	assert_int_equal(dev_ctr(URVT_CTR_ACKS_REPLACED) - replaced0, 0);
	/* the CQ is not empty: that poll takes nothing from the socket */
	app_fresh();
	assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 1);
	assert_int_equal(wc.wr_id, 2);
	assert_int_equal(acks_waiting(), 1);
	/* the next poll finds the CQ empty and runs a batch: the ACK leaves */
	assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
	assert_int_equal(acks_waiting(), 0);
	expect_ack(ack, PEER_PSN + 2);
	peer_quiet(10);

	/* a gap: the NAK does not wait, and the ACK before it goes first */
	busy_app_gets(cq, qp->qpn, PEER_PSN + 3, 3, 1);
	f.psn = PEER_PSN + 5; /* held past the gap */
	peer_send(&f, data, sizeof(data));
	for (int i = 0; i < 1000 && acks_waiting(); i++)
		assert_int_equal(app_poll(cq, &wc, 1), 0);
	expect_ack(ack, PEER_PSN + 3);
	expect_ack(urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR), PEER_PSN + 4);

	/* the gap fills: one ACK, of the last, waits; req_notify_cq (the
	 * application will sleep) sends it */
	busy_app_gets(cq, qp->qpn, PEER_PSN + 4, 4, 1);
	rvt_req_notify_cq(cq, 0);
	assert_int_equal(acks_waiting(), 0);
	expect_ack(ack, PEER_PSN + 5);
	assert_int_equal(app_poll(cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, 5);

	/* URVT_ACK_WAIT=0: the ACK leaves at once */
	atomic_store(&net->ack_wait, false);
	busy_app_gets(cq, qp->qpn, PEER_PSN + 6, 6, 0);
	expect_ack(ack, PEER_PSN + 6);
	atomic_store(&net->ack_wait, true);

	/* an application that receives and does not answer: after two
	 * waits that a receive batch ended, ACKs leave at once */
	app_busy(cq);
	for (int k = 0; k < 3; k++) {
		app_fresh();
		f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + 7 + (uint32_t)k, true);
		peer_send(&f, data, sizeof(data));
		assert_int_equal(app_poll(cq, &wc, 2000), 1);
		assert_int_equal(wc.wr_id, 7 + (uint64_t)k);
		assert_int_equal(acks_waiting(), k < 2 ? 1 : 0);
		assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
		assert_int_equal(acks_waiting(), 0);
		expect_ack(ack, PEER_PSN + 7 + (uint32_t)k);
	}

	/* the last message before a reset: its ACK still leaves */
	busy_app_gets(cq, qp->qpn, PEER_PSN + 10, 10, 1);
	rvt_destroy_qp(qp);
	assert_int_equal(acks_waiting(), 0);
	expect_ack(ack, PEER_PSN + 10);

	rvt_req_notify_cq(cq, 0); /* the progress thread receives again */
	net->watchdog_ns = URVT_WATCHDOG_NS;
	rvt_dereg_mr(mr);
	rvt_dereg_mr(smr);
	rvt_destroy_cq(cq);
}

/* ACKs of a batch (resp.c): SENDs that came in one receive batch are
 * acknowledged once, by the newest, and an owed ACK leaves before any
 * other answer of the QP (a READ response, a NAK) with the MSN of its
 * time: the peer sees ACK 1 (MSN 2), the READ response (MSN 3), ACK 3,
 * the NAK of the gap at 4. */
static void test_resp_acks_of_a_batch(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 18, 7);
	static uint8_t rbuf[4][64], mem[64];
	struct rvt_mregion *mr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct rvt_mregion *rmr = ut_mr(pd, mem, sizeof(mem),
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	uint64_t coalesced0 = dev_ctr(URVT_CTR_ACKS_COALESCED);
	uint8_t data[16], buf[5000];
	struct urvt_pkt f, p;
	struct ibv_wc wc;
	(void)state;

	memset(data, 'b', sizeof(data));
	ut_fill(mem, sizeof(mem), 5);
	for (int i = 0; i < 4; i++)
		ut_post_recv(qp, (uint64_t)i, rbuf[i], sizeof(rbuf[i]), mr->lkey);
	app_busy(cq); /* the application receives: all of it in one batch */
	/* the UDP link offers as many slots as the last batches filled (a
	 * ping-pong: one): widen them with 64 packets to no QP */
	uint64_t noqp0 = dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP);
	f = req(0xfffff0, URVT_OP_RC_SEND_ONLY, 0, false);
	for (int i = 0; i < 64; i++)
		peer_send(&f, data, sizeof(data));
	for (int i = 0; i < 100000 && dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP) - noqp0 < 64; i++)
		assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
	assert_int_equal(dev_ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP) - noqp0, 64);
	app_fresh();
	for (uint32_t k = 0; k < 2; k++) {
		f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + k, true);
		peer_send(&f, data, sizeof(data));
	}
	f = req(qp->qpn, URVT_OP_RC_RDMA_READ_REQUEST, PEER_PSN + 2, true);
	f.reth = (struct urvt_reth){ .va = (uintptr_t)mem, .rkey = rmr->lkey, .len = 8 };
	peer_send(&f, NULL, 0);
	f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + 3, true);
	peer_send(&f, data, sizeof(data));
	f.psn = PEER_PSN + 5; /* past a gap: NAK, held */
	peer_send(&f, data, sizeof(data));
	usleep(300); /* all in the socket (well within the watchdog's time) */
	assert_int_equal(app_poll(cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, 0);

	peer_expect(&p, buf, URVT_OP_RC_ACKNOWLEDGE);
	assert_int_equal(p.aeth.syn, URVT_AETH_SYN_ACK_UNLIMITED);
	assert_int_equal(p.psn, PEER_PSN + 1);
	assert_int_equal(p.aeth.msn, 2);
	peer_expect(&p, buf, URVT_OP_RC_RDMA_READ_RESPONSE_ONLY);
	assert_int_equal(p.psn, PEER_PSN + 2);
	assert_int_equal(p.aeth.msn, 3);
	assert_memory_equal(p.payload, mem, 8);
	expect_ack(URVT_AETH_SYN_ACK_UNLIMITED, PEER_PSN + 3);
	expect_ack(urvt_aeth_syn_nak(URVT_NAK_PSN_SEQ_ERR), PEER_PSN + 4);
	peer_quiet(10);
	/* the first SEND's ACK was owed and covered: never built */
	assert_int_equal(dev_ctr(URVT_CTR_ACKS_COALESCED) - coalesced0, 1);

	rvt_destroy_qp(qp);
	rvt_req_notify_cq(cq, 0); /* the progress thread receives again */
	net->watchdog_ns = URVT_WATCHDOG_NS;
	rvt_dereg_mr(mr);
	rvt_dereg_mr(rmr);
	rvt_destroy_cq(cq);
}

/* An RC QP whose memory the peer WRITEs (a 64-byte target) and which
 * SENDs 16 bytes to the peer, for the tests of who receives (poll.c). */
struct memwait {
	struct rvt_cq *cq;
	struct rvt_qp *qp;
	struct rvt_mregion *mr, *smr;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	uint8_t target[64], sbuf[64];
	uint8_t data[16]; /* what the peer WRITEs */
};

/* ... owned by a busy application (app_busy), its ACKs leaving at once. */
static void memwait_open(struct memwait *m, uint8_t fill)
{
	struct urvt_net *net = dev.rdi->transport_priv;

	m->cq = ut_cq(&dev, 64);
	m->qp = rc_qp(m->cq, 18, 7); /* 1 s: no resend within the checks */
	m->mr = ut_mr(pd, m->target, sizeof(m->target),
		      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	m->smr = ut_mr(pd, m->sbuf, sizeof(m->sbuf), IBV_ACCESS_LOCAL_WRITE);
	m->sge = (struct ibv_sge){ .addr = (uintptr_t)m->sbuf, .length = 16, .lkey = m->smr->lkey };
	m->wr = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &m->sge, .num_sge = 1,
				      .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	memset(m->data, fill, sizeof(m->data));
	atomic_store(&net->ack_wait, false);
	app_busy(m->cq);
}

/* The peer's WRITE of m->data into the target. */
static void memwait_peer_write(struct memwait *m)
{
	struct urvt_pkt f = req(m->qp->qpn, URVT_OP_RC_RDMA_WRITE_ONLY, PEER_PSN, true);

	f.reth = (struct urvt_reth){ .va = (uintptr_t)m->target, .rkey = m->mr->lkey, .len = 16 };
	peer_send(&f, m->data, sizeof(m->data));
}

static void memwait_close(struct memwait *m)
{
	struct urvt_net *net = dev.rdi->transport_priv;

	atomic_store(&net->ack_wait, true);
	app_fresh();
	net->watchdog_ns = URVT_WATCHDOG_NS;
	rvt_destroy_qp(m->qp);
	rvt_dereg_mr(m->mr);
	rvt_dereg_mr(m->smr);
	rvt_destroy_cq(m->cq);
}

/* An application that waits on memory after its completions (a "leaver",
 * poll.c; ib_write_lat) and whose poll takes in the peer's ACK and the
 * peer's next WRITE in one batch does not linger for another WRITE: it
 * keeps the socket at once, its linger score up. A poll whose batch brought
 * only the ACK lingers, nothing comes, and it gives the socket back. */
static void test_linger_skips_a_write_in_the_batch(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct memwait m;
	uint64_t give0;
	struct urvt_pkt p;
	uint8_t buf[5000];
	struct ibv_wc wc;
	(void)state;

	memwait_open(&m, 'v');

	/* the ACK of our SEND and the peer's WRITE, together in the socket */
	ut_post_send(m.qp, &m.wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	atomic_store(&net->app_leave, 8);
	atomic_store(&net->app_ret_cyc, 0);
	atomic_store(&net->app_linger, 4);
	give0 = dev_ctr(URVT_CTR_RX_GIVE_LEAVER);
	peer_ack(m.qp, MY_PSN, 1);
	memwait_peer_write(&m);
	usleep(300); /* both in the socket (well within the watchdog's 60 s) */
	assert_int_equal(app_poll(m.cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, 1);
	assert_memory_equal(m.target, m.data, sizeof(m.data));
	assert_true(atomic_load(&net->aside));
	assert_int_equal(dev_ctr(URVT_CTR_RX_GIVE_LEAVER), give0);
	assert_int_equal(atomic_load(&net->app_linger), 5);
	expect_ack(URVT_AETH_SYN_ACK_UNLIMITED, PEER_PSN);

	/* the ACK alone: the linger waits for a WRITE that does not come */
	m.wr.wr_id = 2;
	ut_post_send(m.qp, &m.wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	atomic_store(&net->app_leave, 8);
	atomic_store(&net->app_ret_cyc, 0);
	atomic_store(&net->app_linger, 4);
	peer_ack(m.qp, MY_PSN + 1, 2);
	usleep(300);
	assert_int_equal(app_poll(m.cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, 2);
	assert_false(atomic_load(&net->aside));
	assert_int_equal(dev_ctr(URVT_CTR_RX_GIVE_LEAVER), give0 + 1);
	assert_int_equal(atomic_load(&net->app_linger), 2);
	/* a tail-loss probe of the SEND (timeout/16, ~60 ms) may have left
	 * before our ACK was taken in, on a slow sanitized run under load */
	peer_quiet_but_probes(10, MY_PSN + 1);
	memwait_close(&m);
}

/* SEND k (k = 1, 2, ...) of the application, then the peer's ACK of it
 * and the application's poll of its completion. */
static void memwait_send_acked(struct memwait *m, uint32_t k)
{
	struct urvt_pkt p;
	uint8_t buf[5000];
	struct ibv_wc wc;

	m->wr.wr_id = k;
	ut_post_send(m->qp, &m->wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	peer_ack(m->qp, MY_PSN + k - 1, k);
	assert_int_equal(app_poll(m->cq, &wc, 2000), 1);
	assert_int_equal(wc.wr_id, k);
}

/* A verb that comes late after its thread's completions counts as a leave
 * (poll.c app_back) only if a WRITE that completes nothing came in
 * meanwhile, which is what a thread that waits without verbs waits for;
 * a late verb without one (UCX answering, a rank kept off its core)
 * leaves the score alone and is counted. */
static void test_leave_needs_a_write(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct memwait m;
	uint64_t late0;
	(void)state;

	memwait_open(&m, 'w');
	late0 = dev_ctr(URVT_CTR_RX_LATE_NO_WRITE);

	/* completions, then a SEND 2 ms later with nothing in between */
	memwait_send_acked(&m, 1);
	assert_int_not_equal(atomic_load(&net->app_ret_cyc), 0);
	usleep(2000);
	memwait_send_acked(&m, 2); /* its post_send judged the gap */
	assert_int_equal(atomic_load(&net->app_leave), 0);
	assert_int_equal(dev_ctr(URVT_CTR_RX_LATE_NO_WRITE), late0 + 1);

	/* completions, a WRITE received for the thread (as the progress
	 * thread would), then the SEND late: a leave */
	memwait_peer_write(&m);
	for (int i = 0; i < 2000 && memcmp(m.target, m.data, sizeof(m.data)); i++) {
		struct urvt_rx_hold held = urvt_rx_lock(net, false);
		assert_true(held.how >= 0);
		urvt_net_rx_batch(net);
		urvt_rx_unlock(net, held);
		usleep(1000);
	}
	assert_memory_equal(m.target, m.data, sizeof(m.data));
	expect_ack(URVT_AETH_SYN_ACK_UNLIMITED, PEER_PSN);
	usleep(2000);
	memwait_send_acked(&m, 3);
	assert_int_equal(atomic_load(&net->app_leave), 2);
	assert_int_equal(dev_ctr(URVT_CTR_RX_LATE_NO_WRITE), late0 + 1);
	rvt_req_notify_cq(m.cq, 0); /* the progress thread receives again */
	memwait_close(&m);
}

/* A UD receive over UDP: its GRH shows the sender's IP traffic class and
 * hop limit, which the socket hands over only while a UD QP exists (the
 * ICRC masks them; an RC-only device's receives skip them). */
static void test_ud_grh_ip_facts(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	uint32_t ud0 = net->ud_qps;
	struct rvt_cq *cq = ut_cq(&dev, 8);
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_UD, cq, cq, NULL, NULL, false);
	static uint8_t rbuf[40 + 64];
	struct rvt_mregion *mr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	int tos = 0x20, ttl = 17, tos0 = 0, ttl0 = 64;
	uint8_t data[16];
	struct urvt_pkt f;
	struct ibv_wc wc;
	(void)state;

	assert_int_equal(net->ud_qps, ud0 + 1);
	ut_to_init(qp, 0, 0x1234);
	ut_to_rtr(&dev, qp, 0, 0);
	ut_post_recv(qp, 9, rbuf, sizeof(rbuf), mr->lkey);
	memset(data, 'u', sizeof(data));
	assert_int_equal(setsockopt(peer_fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)), 0);
	assert_int_equal(setsockopt(peer_fd, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl)), 0);
	f = req(qp->qpn, URVT_OP_UD_SEND_ONLY, 7, false);
	f.deth.qkey = 0x1234;
	f.deth.sqp = PEER_QPN;
	peer_send(&f, data, sizeof(data));
	setsockopt(peer_fd, IPPROTO_IP, IP_TOS, &tos0, sizeof(tos0));
	setsockopt(peer_fd, IPPROTO_IP, IP_TTL, &ttl0, sizeof(ttl0));
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_true(wc.wc_flags & IBV_WC_GRH);
	assert_int_equal(wc.byte_len, 40 + sizeof(data));
	/* RoCEv2 over IPv4: the IPv4 header in the GRH's last 20 bytes */
	assert_int_equal(rbuf[20 + 1], 0x20);
	assert_int_equal(rbuf[20 + 8], 17);
	assert_memory_equal(rbuf + 40, data, sizeof(data));

	rvt_destroy_qp(qp);
	assert_int_equal(net->ud_qps, ud0);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/* The exit handler: a waiting ACK leaves, and from then on nothing
 * received touches the application's memory (a SEND that comes after it
 * lands nowhere). Last: the device stops receiving (undone for teardown). */
static void test_exit_quiesce(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct rvt_cq *cq = ut_cq(&dev, 64);
	struct rvt_qp *qp = rc_qp(cq, 18, 7);
	static uint8_t rbuf[2][64];
	struct rvt_mregion *mr = ut_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct urvt_pkt f = req(qp->qpn, URVT_OP_RC_SEND_ONLY, PEER_PSN + 1, true);
	uint8_t data[16];
	struct ibv_wc wc;
	(void)state;

	memset(rbuf, 0, sizeof(rbuf));
	memset(data, 'x', sizeof(data));
	ut_post_recv(qp, 0, rbuf[0], sizeof(rbuf[0]), mr->lkey);
	ut_post_recv(qp, 1, rbuf[1], sizeof(rbuf[1]), mr->lkey);
	busy_app_gets(cq, qp->qpn, PEER_PSN, 0, 1);
	urvt_net_exit_quiesce();
	assert_true(atomic_load(&net->exiting));
	assert_int_equal(acks_waiting(), 0);
	expect_ack(URVT_AETH_SYN_ACK_UNLIMITED, PEER_PSN);
	peer_send(&f, data, sizeof(data));
	assert_int_equal(app_poll(cq, &wc, 100), 0);
	peer_quiet(50);
	for (size_t i = 0; i < sizeof(rbuf[1]); i++)
		assert_int_equal(rbuf[1][i], 0);

	atomic_store(&net->exiting, false);
	rvt_req_notify_cq(cq, 0);
	net->watchdog_ns = URVT_WATCHDOG_NS;
	rvt_destroy_qp(qp);
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/* ---- timers that wake the progress thread (comp.c, poll.c) ---- */

/* The retransmit timer is pushed back by progress in the last quarter of
 * its interval, from the thread that saw it, so it does not fire while the
 * QP moves; progress earlier leaves it where it was. Without congestion
 * control (no RTT floor) the probe interval is 1/16 of the timeout: 536 ms
 * at timeout 21, wide enough for a loaded machine. */
static void test_timer_pushed_by_late_progress(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	void *cc = net->cc;
	struct rvt_cq *cq;
	struct rvt_qp *qp;
	static uint8_t sbuf[64];
	struct rvt_mregion *mr = ut_mr(pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = 16, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	uint64_t first, pushed;
	struct urvt_pkt p;
	uint8_t buf[5000];
	struct ibv_wc wc;
	(void)state;

	net->cc = NULL; /* the QP gets no congestion-control peer (at its first send) */
	cq = ut_cq(&dev, 64);
	qp = rc_qp(cq, 21, 7);

	ut_post_send(qp, &wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	assert_true(qp_tp(qp)->timer_armed);
	first = qp_tp(qp)->timer_at_ns;
	peer_ack(qp, p.psn, 1);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	/* progress in the first three quarters: not pushed */
	assert_int_equal(qp_tp(qp)->timer_at_ns, first);

	/* into the last quarter (134 ms), 100 ms before it would fire */
	while (urvt_now_ns() < first - 100000000ull)
		usleep(1000);
	wr.wr_id = 2;
	ut_post_send(qp, &wr);
	peer_expect(&p, buf, URVT_OP_RC_SEND_ONLY);
	assert_int_equal(qp_tp(qp)->timer_at_ns, first); /* not fired, not re-armed */
	peer_ack(qp, p.psn, 2);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 2);
	pushed = qp_tp(qp)->timer_at_ns;
	/* a full interval from the ACK: well past where it was */
	assert_true(pushed > first + 300000000ull);
	assert_true(pushed <= urvt_now_ns() + 536870912ull);
	assert_true(qp_tp(qp)->timer_armed);
	assert_true(qp->s_timer.heap_idx >= 0);
	assert_true(qp->s_timer.expires_ns == pushed);

	rvt_destroy_qp(qp);
	net->cc = cc;
	rvt_dereg_mr(mr);
	rvt_destroy_cq(cq);
}

/* The watchdog of an application that owns the socket looks less often
 * while the application keeps polling (each look preempts a poller on a
 * busy CPU): 2 ms after the take, then doubling to 8 times that; a new
 * take starts again at 2 ms. An application that stops polling still
 * loses the socket to it. */
static void test_watchdog_backs_off(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct rvt_cq *cq = ut_cq(&dev, 64);
	const uint64_t base = URVT_WATCHDOG_NS, max = base * URVT_WATCHDOG_BACKOFF;
	uint64_t given, period = 0, end;
	struct ibv_wc wc;
	(void)state;

	net->watchdog_ns = base;
	for (int take = 0; take < 2; take++) {
		app_fresh();
		for (int i = 0; i < 10000 && !atomic_load(&net->aside); i++)
			assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
		assert_true(atomic_load(&net->aside));
		pthread_mutex_lock(&net->watch_lock);
		period = net->wd_period_ns;
		pthread_mutex_unlock(&net->watch_lock);
		assert_int_equal(period, base);
		/* polls without a pause: the looks back off to the maximum */
		end = ut_now_ms() + 3000;
		while (period < max && ut_now_ms() < end) {
			assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
			pthread_mutex_lock(&net->watch_lock);
			period = net->wd_period_ns;
			pthread_mutex_unlock(&net->watch_lock);
		}
		assert_int_equal(period, max);
		assert_true(atomic_load(&net->aside));
		/* it stops polling: the watchdog gives the socket back (once:
		 * a poller preempted for longer than a look above may have
		 * lost it and taken it again before) */
		given = dev_ctr(URVT_CTR_RX_GIVE_WATCHDOG);
		end = ut_now_ms() + 3000;
		while (atomic_load(&net->aside) && ut_now_ms() < end)
			usleep(1000);
		assert_false(atomic_load(&net->aside));
		assert_int_equal(dev_ctr(URVT_CTR_RX_GIVE_WATCHDOG) - given, 1);
	}
	rvt_destroy_cq(cq);
}

/* Polls of an empty CQ for at most max_polls or until n asks of the
 * socket were seen, each ask's spacing (polls until the next) into gap[];
 * returns the asks seen. */
static int watch_asks(struct rvt_cq *cq, int max_polls, uint32_t *gap, int n)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	uint32_t prev = atomic_load(&net->app_skip);
	struct ibv_wc wc;
	int asks = 0;

	for (int i = 0; i < max_polls && asks < n; i++) {
		uint32_t left;
		assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
		left = atomic_load(&net->app_skip);
		if (left > prev)
			gap[asks++] = left;
		prev = left;
	}
	return asks;
}

/* A busy poller beside a shm link (poll.c udp_backoff): with no traffic
 * on the socket for a while (here: in-process or shm traffic only), it
 * asks the socket less and less often; right after UDP traffic, with the
 * shm link idle, it asks every few polls. Backing off a socket in use made
 * a UDP ping-pong between two namespaces wait up to 256 polls for each
 * reply (3.3 -> 4.8 us one way). */
/* A CQ whose poller owns the socket, the socket quiet for longer than
 * APP_QUIET_NS, beside the device's shm link (the test is skipped without
 * one). */
static struct rvt_cq *busy_poller_beside_shm(void)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct rvt_cq *cq = ut_cq(&dev, 64);

	if (!urvt_net_link(net, "shm")) {
		rvt_destroy_cq(cq);
		skip();
	}
	app_busy(cq);
	usleep(3000);
	return cq;
}

static void test_udp_backoff_beside_a_shm_link(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct rvt_cq *cq = busy_poller_beside_shm();
	enum urvt_ctr udp_rx = URVT_CTR_LINK_RX(urvt_stats_link_slot("udp"));
	uint32_t gap[16], most = 0;
	uint64_t rx0, t0;
	struct urvt_pkt f;
	int asks;
	(void)state;

	asks = watch_asks(cq, 5000, gap, 16);
	for (int i = 0; i < asks; i++)
		most = gap[i] > most ? gap[i] : most;
	if (most < 64)
		fail_msg("a quiet socket asked every %u polls at most", most);
	/* a datagram (for no QP: dropped) is traffic on the socket */
	rx0 = dev_ctr(udp_rx);
	f = req(0xabcde, URVT_OP_RC_SEND_ONLY, 0, false);
	peer_send(&f, NULL, 0);
	t0 = ut_now_ms();
	while (dev_ctr(udp_rx) == rx0 && ut_now_ms() - t0 < 2000) {
		struct ibv_wc wc;
		assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
	}
	assert_true(dev_ctr(udp_rx) > rx0);
	asks = watch_asks(cq, 200, gap, 8);
	assert_true(asks >= 4);
	for (int i = 0; i < asks; i++)
		if (gap[i] > 8)
			fail_msg("ask %d after UDP traffic came %u polls after the last", i, gap[i]);
	assert_true(atomic_load(&net->aside));
	rvt_destroy_cq(cq);
}

/* Beside a shm link that carries traffic (its counter moves between asks)
 * and a quiet socket, the skip grows past APP_EMPTY_SKIP_MAX, and the asks
 * stay bounded in time all the same (poll.c APP_ASK_GAP_NS, 50 us): here a
 * poll every ~2 us, so 65536 polls without the time bound would be 130 ms
 * between asks. */
static void test_udp_asks_bounded_in_time_beside_busy_shm(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct rvt_cq *cq = busy_poller_beside_shm();
	enum urvt_ctr shm_rx = URVT_CTR_LINK_RX(urvt_stats_link_slot("shm"));
	uint32_t prev, most = 0;
	uint64_t last_ask = 0, longest = 0, end;
	int asks = 0;
	struct ibv_wc wc;
	(void)state;

	prev = atomic_load(&net->app_skip);
	end = ut_now_ms() + 1500;
	while (ut_now_ms() < end && asks < 200) {
		uint64_t t0 = urvt_now_ns();
		uint32_t left;

		/* shm "traffic": its delivery counter moves */
		__atomic_fetch_add(&net->stats->dev.v[shm_rx], 1, __ATOMIC_RELAXED);
		assert_int_equal(rvt_app_poll_cq(cq, 1, &wc), 0);
		left = atomic_load(&net->app_skip);
		if (left > prev) { /* an ask */
			uint64_t now = urvt_now_ns();
			if (last_ask && now - last_ask > longest)
				longest = now - last_ask;
			last_ask = now;
			most = left > most ? left : most;
			asks++;
		}
		prev = left;
		while (urvt_now_ns() - t0 < 2000)
			;
	}
	assert_true(asks >= 10);
	if (most <= 256)
		fail_msg("beside busy shm the skip grew to %u polls only", most);
	if (longest > 20000000)
		fail_msg("%llu us between two asks of the socket", (unsigned long long)longest / 1000);
	assert_true(atomic_load(&net->aside));
	rvt_destroy_cq(cq);
}

/* rx_lock (tp.h urvt_rx_trylock): a thread that holds it does not get it
 * again, however it holds it (the fast way, once it owns the bias after a
 * run of takes, would let it in), nor waits for itself; another device's
 * rx_lock held outside stays held after the inner one is left. */
static void test_rx_lock_not_nested(void **state)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	struct urvt_rx_hold h, in;
	(void)state;

	for (int i = 0; i < 256; i++) {
		h = urvt_rx_lock(net, true);
		assert_true(h.how >= 0);
		/* nested, as a send inside the batch that polls */
		in = urvt_rx_trylock(net, true);
		assert_int_equal(in.how, -1);
		in = urvt_rx_lock(net, true);
		assert_int_equal(in.how, -1);
		urvt_rx_unlock(net, h);
	}
	/* the run of takes made this thread the owner (where membarrier is
	 * there), and the fast way refuses the nested take as well */
	h = urvt_rx_lock(net, true);
	assert_true(h.how >= 0);
	assert_true(!urvt_bias_available() || h.how == 1);
	assert_int_equal(urvt_rx_trylock(net, true).how, -1);
	urvt_rx_unlock(net, h);
	assert_null(urvt_rx_holder);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rx_lock_not_nested),
		cmocka_unit_test(test_resp_send_rnr_dup_gap),
		cmocka_unit_test(test_resp_held_past_gaps),
		cmocka_unit_test(test_resp_ack_waits_for_send),
		cmocka_unit_test(test_resp_acks_of_a_batch),
		cmocka_unit_test(test_linger_skips_a_write_in_the_batch),
		cmocka_unit_test(test_leave_needs_a_write),
		cmocka_unit_test(test_resp_read_atomic_access),
		cmocka_unit_test(test_resp_atomic_iova),
		cmocka_unit_test(test_resp_uc_drop_keeps_receive),
		cmocka_unit_test(test_recv_drops),
		cmocka_unit_test(test_ud_grh_ip_facts),
		cmocka_unit_test(test_comp_send_coalesced_nak),
		cmocka_unit_test(test_req_middles_built_alike),
		cmocka_unit_test(test_comp_nak_then_rnr),
		cmocka_unit_test(test_comp_read_and_retry),
		cmocka_unit_test(test_comp_read_by_ref),
		cmocka_unit_test(test_comp_read_span),
		cmocka_unit_test(test_resp_read_push_from_udp),
		cmocka_unit_test(test_exit_quiesce),
		cmocka_unit_test(test_timer_pushed_by_late_progress),
		cmocka_unit_test(test_watchdog_backs_off),
		cmocka_unit_test(test_udp_backoff_beside_a_shm_link),
		cmocka_unit_test(test_udp_asks_bounded_in_time_beside_busy_shm),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
