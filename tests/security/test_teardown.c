/*
 * Teardown under traffic (docs/security.md; the rxe CVE-2021-1000501 class): a peer
 * process keeps sending WRITEs, SENDs and READ requests at the device's
 * QPs (and at QPNs that are half-built or gone) while this process
 * destroys QPs, deregisters MRs and destroys CQs under it. Every MR lives
 * between PROT_NONE pages and is made PROT_NONE itself the moment it is
 * deregistered, so any late access faults. Checked: no crash, destroy /
 * dereg succeed (CQ destroy refused while a QP uses it), packets for
 * destroyed or half-built QPs are dropped and counted (drop_no_qp,
 * drop_bad_qp_state), ASan clean (the ASan suite runs this too).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/rvt_api.h"
#include "transport/stats.h"
#include "transport/tp.h"
#include "ut.h"
#include "wire/hdr.h"
#include "wire/icrc.h"

#define NTGT 4
#define MR_LEN 16384
#define PAGE 4096
#define ROUNDS 32
#define PEER_QPN 0x777

struct target {
	uint32_t qpn, rkey;
	uint64_t va;
};

struct msg {
	uint32_t dev_addr; /* s_addr of the device */
	struct target t[NTGT];
};

static int ctl_pipe[2] = { -1, -1 };
static int addr_pipe[2] = { -1, -1 };
static pid_t child = -1;
static uint32_t peer_s_addr;

/* ------------------------------------------------------------------ */
/* The peer process: sends until the pipe closes (or 30 s)            */
/* ------------------------------------------------------------------ */
static void peer_send(int fd, const struct sockaddr_in *dst, uint32_t src, struct urvt_pkt *f,
		      uint32_t paylen)
{
	static uint8_t buf[2048];
	struct urvt_ipinfo ip;
	size_t h, n;

	urvt_ipinfo_v4(&ip, src, dst->sin_addr.s_addr, URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
	f->pkey = 0xffff;
	f->paylen = paylen;
	h = urvt_pkt_build_hdr(buf, sizeof(buf), f);
	if (!h)
		return;
	memset(buf + h, 0x5a, paylen);
	n = urvt_pkt_finish(buf, sizeof(buf), h + paylen, &ip);
	if (n)
		sendto(fd, buf, n, MSG_DONTWAIT, (const struct sockaddr *)dst, sizeof(*dst));
}

static void peer_main(int fd, uint32_t src)
{
	struct msg m = { 0 };
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(URVT_ROCE_UDP_PORT) };
	uint32_t psn[NTGT] = { 0 }, sent = 0;
	time_t end = time(NULL) + 30;
	uint8_t junk[2048];

	fcntl(ctl_pipe[0], F_SETFL, O_NONBLOCK);
	while (time(NULL) < end) {
		struct msg nm;
		ssize_t r = read(ctl_pipe[0], &nm, sizeof(nm));
		if (r == 0)
			break; /* parent done */
		if (r == (ssize_t)sizeof(nm)) {
			for (int i = 0; i < NTGT; i++)
				if (nm.t[i].qpn != m.t[i].qpn)
					psn[i] = 0;
			m = nm;
		}
		while (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
			;
		if (!m.dev_addr) {
			usleep(1000);
			continue;
		}
		dst.sin_addr.s_addr = m.dev_addr;
		for (int i = 0; i < NTGT; i++) {
			struct urvt_pkt f;
			if (!m.t[i].qpn)
				continue;
			memset(&f, 0, sizeof(f));
			f.dest_qpn = m.t[i].qpn;
			f.ackreq = true;
			switch (sent++ % 4) {
			case 0:
			case 1:
				f.opcode = URVT_OP_RC_RDMA_WRITE_ONLY;
				f.reth.va = m.t[i].va + (sent * 64) % (MR_LEN - 64);
				f.reth.rkey = m.t[i].rkey;
				f.reth.len = 64;
				f.psn = psn[i]++ & 0xffffff;
				peer_send(fd, &dst, src, &f, 64);
				break;
			case 2:
				f.opcode = URVT_OP_RC_SEND_ONLY;
				f.psn = psn[i]++ & 0xffffff;
				peer_send(fd, &dst, src, &f, 32);
				break;
			default:
				f.opcode = URVT_OP_RC_RDMA_READ_REQUEST;
				f.reth.va = m.t[i].va;
				f.reth.rkey = m.t[i].rkey;
				f.reth.len = 128;
				f.psn = psn[i]++ & 0xffffff;
				peer_send(fd, &dst, src, &f, 0);
				break;
			}
		}
		if (sent % 64 == 0)
			usleep(100);
	}
	_exit(0);
}

/* ------------------------------------------------------------------ */
/* This process                                                       */
/* ------------------------------------------------------------------ */
static struct ut_dev dev;
static struct rvt_pd *pd;
static struct msg cur;

static void publish(void)
{
	assert_int_equal(write(ctl_pipe[1], &cur, sizeof(cur)), (ssize_t)sizeof(cur));
}

static uint64_t ctr(enum urvt_ctr c)
{
	struct urvt_net *net = dev.rdi->transport_priv;
	return __atomic_load_n(&net->stats->dev.v[c], __ATOMIC_RELAXED);
}

static struct rvt_qp *rc_qp(struct rvt_cq *cq, int upto)
{
	struct rvt_qp *qp = ut_qp(&dev, pd, IBV_QPT_RC, cq, cq, NULL, NULL, false);
	const struct ut_path path = { .peer_s_addr = peer_s_addr, .dest_qpn = PEER_QPN,
				      .min_rnr_timer = 1, .timeout = 14, .retry_cnt = 7,
				      .rnr_retry = 7, .max_rd_atomic = 1 };

	if (upto == IBV_QPS_RESET)
		return qp;
	ut_to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 0);
	if (upto == IBV_QPS_INIT)
		return qp;
	ut_to_rtr_path(qp, &path);
	ut_to_rts_path(qp, &path);
	return qp;
}

/* MR_LEN bytes between PROT_NONE pages. */
static uint8_t *guarded(void)
{
	uint8_t *p = mmap(NULL, MR_LEN + 2 * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(mprotect(p, PAGE, PROT_NONE), 0);
	assert_int_equal(mprotect(p + PAGE + MR_LEN, PAGE, PROT_NONE), 0);
	return p + PAGE;
}

/* Deregister (retrying while a packet holds it) and make the memory fault. */
static void dereg_and_poison(struct rvt_mregion *mr, uint8_t *buf)
{
	int ret;
	for (int i = 0; i < 50 && (ret = rvt_dereg_mr(mr)) == -EBUSY; i++)
		;
	assert_int_equal(ret, 0);
	assert_int_equal(mprotect(buf, MR_LEN, PROT_NONE), 0);
}

static void drain_cq(struct rvt_cq *cq)
{
	struct ibv_wc wc[16];
	while (rvt_poll_cq(cq, 16, wc) > 0)
		;
}

static void test_teardown_under_traffic(void **state)
{
	uint64_t noqp0 = ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP);
	uint64_t state0 = ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_STATE);
	uint64_t rx0 = ctr(URVT_CTR_RX_PKTS);
	uint8_t *rbuf = guarded();
	struct rvt_mregion *rmr = ut_mr(pd, rbuf, MR_LEN, IBV_ACCESS_LOCAL_WRITE);

	memcpy(&cur.dev_addr, &dev.rdi->gid.raw[12], 4);
	for (int r = 0; r < ROUNDS; r++) {
		struct rvt_cq *cq = ut_cq(&dev, 64);
		uint8_t *buf = guarded();
		struct rvt_mregion *mr = ut_mr(pd, buf, MR_LEN,
					       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						       IBV_ACCESS_REMOTE_READ);
		struct rvt_qp *qp = rc_qp(cq, IBV_QPS_RTS);
		struct rvt_qp *half = rc_qp(cq, r % 2 ? IBV_QPS_INIT : IBV_QPS_RESET);
		uint32_t dead;

		for (int i = 0; i < 8; i++)
			ut_post_recv(qp, (uint64_t)i, rbuf + i * 1024, 1024, rmr->lkey);
		cur.t[0] = (struct target){ qp->qpn, mr->lkey, (uint64_t)(uintptr_t)buf };
		cur.t[1] = (struct target){ half->qpn, mr->lkey, (uint64_t)(uintptr_t)buf };
		publish();
		ut_sleep_ms(15); /* traffic flows */
		switch (r % 4) {
		case 0: /* QP first, then MR and CQ */
			dead = qp->qpn;
			assert_int_equal(rvt_destroy_qp(qp), 0);
			ut_sleep_ms(5);
			dereg_and_poison(mr, buf);
			break;
		case 1: /* MR first: later WRITEs are NAKed, never land */
			dereg_and_poison(mr, buf);
			ut_sleep_ms(10);
			dead = qp->qpn;
			assert_int_equal(rvt_destroy_qp(qp), 0);
			break;
		case 2: /* CQ refused while used; the QP errors under traffic */
			assert_int_equal(rvt_destroy_cq(cq), -EBUSY);
			ut_modify_state(qp, IBV_QPS_ERR);
			ut_sleep_ms(5);
			dead = qp->qpn;
			assert_int_equal(rvt_destroy_qp(qp), 0);
			dereg_and_poison(mr, buf);
			break;
		default: /* reset under traffic: half-built again, then gone */
			ut_modify_state(qp, IBV_QPS_RESET);
			ut_sleep_ms(5);
			ut_to_init(qp, IBV_ACCESS_REMOTE_WRITE, 0);
			ut_sleep_ms(5);
			dead = qp->qpn;
			assert_int_equal(rvt_destroy_qp(qp), 0);
			dereg_and_poison(mr, buf);
			break;
		}
		/* the peer keeps hitting the dead QPN for a moment */
		cur.t[2] = (struct target){ dead, 0, 0 };
		publish();
		ut_sleep_ms(5);
		assert_int_equal(rvt_destroy_qp(half), 0);
		drain_cq(cq);
		assert_int_equal(rvt_destroy_cq(cq), 0);
		ut_async_drain(&dev);
		munmap(buf - PAGE, MR_LEN + 2 * PAGE);
	}
	memset(&cur.t, 0, sizeof(cur.t));
	publish();
	printf("received %llu packets; dropped for no QP %llu, for the QP state %llu\n",
	       (unsigned long long)(ctr(URVT_CTR_RX_PKTS) - rx0),
	       (unsigned long long)(ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP) - noqp0),
	       (unsigned long long)(ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_STATE) - state0));
	assert_true(ctr(URVT_CTR_RX_PKTS) - rx0 > 1000);
	assert_true(ctr(URVT_CTR_DROP_BASE + URVT_DROP_NO_QP) > noqp0);
	assert_true(ctr(URVT_CTR_DROP_BASE + URVT_TDROP_BAD_STATE) > state0);
	assert_int_equal(rvt_dereg_mr(rmr), 0);
	munmap(rbuf - PAGE, MR_LEN + 2 * PAGE);
}

static int setup(void **state)
{
	uint32_t a;

	ut_open(&dev);
	pd = ut_pd(&dev);
	/* where the peer lives */
	assert_int_equal(read(addr_pipe[0], &a, sizeof(a)), (ssize_t)sizeof(a));
	peer_s_addr = a;
	return 0;
}

static int teardown(void **state)
{
	close(ctl_pipe[1]);
	if (child > 0)
		waitpid(child, NULL, 0);
	rvt_dealloc_pd(pd);
	ut_close(&dev);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_teardown_under_traffic),
	};

	/* the peer is forked before the device (and its threads) exist */
	if (pipe(ctl_pipe) || pipe(addr_pipe))
		return 1;
	child = fork();
	if (child == 0) {
		int fd = -1;
		uint32_t s = 0;
		close(ctl_pipe[1]);
		for (int host = 10; host < 250 && fd < 0; host++) {
			struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(URVT_ROCE_UDP_PORT) };
			fd = socket(AF_INET, SOCK_DGRAM, 0);
			a.sin_addr.s_addr = htonl(0x7f000000u | (216u << 16) | (uint32_t)host);
			if (bind(fd, (struct sockaddr *)&a, sizeof(a))) {
				close(fd);
				fd = -1;
			} else {
				s = a.sin_addr.s_addr;
			}
		}
		if (write(addr_pipe[1], &s, sizeof(s)) != (ssize_t)sizeof(s) || fd < 0)
			_exit(1);
		peer_main(fd, s);
	}
	close(ctl_pipe[0]);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
