/*
 * soak: many RC QP pairs (and a UD pair) between two processes over urvt's
 * network transport, mixed SEND / RDMA WRITE WITH IMM / RDMA READ / FETCH_ADD
 * with data verification, for a bounded time; meant to run under
 * URVT_FAULT (scripts/soak, docs/security.md). A verbs program: run it
 * through urvt-run.
 *
 *   soak [-d SECONDS] [-q QPS] [-w DEPTH] [-s MAXMSG] [-t TIMEOUT (14: 67 ms)]
 *
 * The default local ACK timeout is 14 (67 ms), perftest's choice. Before
 * the UDP link had congestion control (docs/transport.md), 64 QPs x 8 WRs
 * of up to 64 KiB outstanding under 4 % faults ran the responder's CPU
 * more than a timeout behind; every timeout resent a whole window, and
 * QPs ended in RETRY_EXC_ERR (docs/security.md, finding 4), so the soak
 * used 17 (0.54 s, what rdma_cm sets up on RoCE).
 *
 * The parent (A) is the requester of every RC pair, the child (B) the
 * responder. SENDs and WRITE WITH IMM carry one sequence number per QP: B
 * checks that each arrives once, in order, with its pattern. READs check
 * B's patterned region. Every FETCH_ADD adds 1: the returned values of a
 * QP must be exactly 0..n-1 and B's counter n at the end (executed once
 * under duplication). UD datagrams may be lost but never corrupted.
 * Errors (any failed completion, wrong data, order) must be 0: exit 0
 * then, 1 otherwise, 77 without a device.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/stats.h"

#define MAXQ 256
#define RING 16          /* receives per QP at B */
/* WRITE WITH IMM slots: FIRST/MIDDLE packets land before the LAST takes a
 * receive WQE, so message s + WSLOTS may only start once B has checked s:
 * with DEPTH < RING outstanding that holds for 2 * RING slots. */
#define WSLOTS (2 * RING)
#define READ_AREA 65536
#define PAT_MUL 0x9E3779B97F4A7C15ull

static int dur = 600, nq = 64, depth = 8, tmo = 14;
static uint32_t maxmsg = 8192;

struct qinfo {
	uint32_t qpn, rkey;
	uint64_t wr_area, rd_area, counter;
};
struct hello {
	union ibv_gid gid;
	uint32_t ud_qpn, nq;
	struct qinfo q[MAXQ];
};
struct result {
	uint64_t seq[MAXQ];   /* messages B accepted per QP */
	uint64_t counter[MAXQ];
	uint64_t ud_got, errors, retransmits, faults;
	long rss0, rss1;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp[MAXQ], *udqp;
static struct ibv_mr *mr;
static uint8_t *mem;
static size_t per_q; /* bytes of mem per QP */
static uint64_t errors;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long rss_kib(void)
{
	long a = 0, b = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &a, &b) != 2)
			b = 0;
		fclose(f);
	}
	return b * 4;
}

static void fill(uint8_t *p, uint32_t len, uint64_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)((seed * PAT_MUL + i * 0x9d) >> 24);
}

static bool check(const uint8_t *p, uint32_t len, uint64_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)((seed * PAT_MUL + i * 0x9d) >> 24))
			return false;
	return true;
}

/* This process's transport counters (the file urvt-stat reads). */
static uint64_t own_ctr(enum urvt_ctr c)
{
	static const struct urvt_stats_file *sh;
	if (!sh) {
		char path[64];
		int fd;
		snprintf(path, sizeof(path), "/dev/shm/urvt.%d", (int)getpid());
		fd = open(path, O_RDONLY);
		if (fd < 0)
			return 0;
		sh = mmap(NULL, sizeof(*sh), PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (sh == MAP_FAILED || sh->magic != URVT_STATS_MAGIC ||
		    sh->version != URVT_STATS_VERSION) {
			sh = NULL;
			return 0;
		}
	}
	return sh->dev.v[c];
}

static uint64_t faults(void)
{
	return own_ctr(URVT_CTR_FAULT_DROP) + own_ctr(URVT_CTR_FAULT_DUP) +
	       own_ctr(URVT_CTR_FAULT_REORDER) + own_ctr(URVT_CTR_FAULT_CORRUPT) +
	       own_ctr(URVT_CTR_FAULT_DELAY);
}

#define ERR(...)                                          \
	do {                                              \
		if (errors++ < 10)                        \
			fprintf(stderr, "soak: " __VA_ARGS__); \
	} while (0)

/* per QP layout: [recv ring RING*maxmsg][write ring RING*maxmsg][read area][counter 8][atomic results] */
static uint8_t *q_recv(int i) { return mem + (size_t)i * per_q; }
static uint8_t *q_wr(int i) { return q_recv(i) + (size_t)RING * maxmsg; }
static uint8_t *q_rd(int i) { return q_wr(i) + (size_t)WSLOTS * maxmsg; }
static uint64_t *q_ctr(int i) { return (uint64_t *)(void *)(q_rd(i) + READ_AREA); }
static uint8_t *q_scratch(int i) { return q_rd(i) + READ_AREA + 64; } /* READ / atomic targets at A */

static int open_dev(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return 77;
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!ctx)
		return 1;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, nq * (RING + depth) * 2 + 256, NULL, NULL, 0);
	per_q = (size_t)(RING + WSLOTS) * maxmsg + READ_AREA + 64 + (size_t)depth * (READ_AREA + 8) + 4096;
	per_q = (per_q + 4095) & ~(size_t)4095;
	mem = aligned_alloc(4096, per_q * (size_t)(nq + 1));
	if (!pd || !cq || !mem)
		return 1;
	memset(mem, 0, per_q * (size_t)(nq + 1));
	mr = ibv_reg_mr(pd, mem, per_q * (size_t)(nq + 1),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		return 1;
	for (int i = 0; i <= nq; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = i < nq ? IBV_QPT_RC : IBV_QPT_UD,
			.cap = { .max_send_wr = (uint32_t)depth + 2, .max_recv_wr = RING,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct ibv_qp *q = ibv_create_qp(pd, &ia);
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x1111,
					 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
							    IBV_ACCESS_REMOTE_READ |
							    IBV_ACCESS_REMOTE_ATOMIC };
		if (!q || ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						       (i < nq ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY)))
			return 1;
		if (i < nq)
			qp[i] = q;
		else
			udqp = q;
	}
	return 0;
}

static int connect_all(const struct hello *me, const struct hello *peer)
{
	for (int i = 0; i <= nq; i++) {
		bool ud = i == nq;
		struct ibv_qp *q = ud ? udqp : qp[i];
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
					 .dest_qp_num = ud ? 0 : peer->q[i].qpn, .rq_psn = 0,
					 .max_dest_rd_atomic = 4, .min_rnr_timer = 1 };
		a.ah_attr.is_global = 1;
		a.ah_attr.port_num = 1;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.dgid = peer->gid;
		if (ibv_modify_qp(q, &a, ud ? IBV_QP_STATE :
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER))
			return 1;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.timeout = (uint8_t)tmo;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		if (ibv_modify_qp(q, &a, ud ? IBV_QP_STATE | IBV_QP_SQ_PSN :
				  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
			return 1;
	}
	(void)me;
	return 0;
}

static void close_dev(void)
{
	for (int i = 0; i < nq; i++)
		if (qp[i])
			ibv_destroy_qp(qp[i]);
	if (udqp)
		ibv_destroy_qp(udqp);
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (ctx)
		ibv_close_device(ctx);
	free(mem);
}

static void hello_fill(struct hello *h)
{
	memset(h, 0, sizeof(*h));
	ibv_query_gid(ctx, 1, 0, &h->gid);
	h->nq = (uint32_t)nq;
	h->ud_qpn = udqp->qp_num;
	for (int i = 0; i < nq; i++)
		h->q[i] = (struct qinfo){ qp[i]->qp_num, mr->rkey, (uintptr_t)q_wr(i),
					  (uintptr_t)q_rd(i), (uintptr_t)q_ctr(i) };
}

static void post_recv(struct ibv_qp *q, uint8_t *buf, uint32_t len, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	if (ibv_post_recv(q, &w, &bad))
		ERR("post_recv failed\n");
}

/* ---- B: responder side ---- */
static int run_b(int sock)
{
	struct hello me, peer;
	struct result res;
	uint64_t expect[MAXQ] = { 0 };
	uint8_t *udbuf = q_recv(nq);

	hello_fill(&me);
	for (int i = 0; i < nq; i++) {
		fill(q_rd(i), READ_AREA, 1000 + (uint64_t)i);
		for (int k = 0; k < RING; k++)
			post_recv(qp[i], q_recv(i) + (size_t)k * maxmsg, maxmsg, (uint64_t)i << 32 | (uint64_t)k);
	}
	for (int k = 0; k < RING; k++)
		post_recv(udqp, udbuf + (size_t)k * 2048, 2048, (uint64_t)nq << 32 | (uint64_t)k);
	if (write(sock, &me, sizeof(me)) != sizeof(me) || read(sock, &peer, sizeof(peer)) != sizeof(peer))
		return 1;
	if (connect_all(&me, &peer))
		return 1;
	if (write(sock, "r", 1) != 1)
		return 1;
	memset(&res, 0, sizeof(res));
	res.rss0 = rss_kib();
	for (;;) {
		struct ibv_wc wc[32];
		int n = ibv_poll_cq(cq, 32, wc);
		char c;
		for (int j = 0; j < n; j++) {
			int i = (int)(wc[j].wr_id >> 32), k = (int)(wc[j].wr_id & 0xffffffff);
			if (wc[j].status != IBV_WC_SUCCESS) {
				ERR("B: qp %d completion status %s\n", i, ibv_wc_status_str(wc[j].status));
				continue;
			}
			if (i == nq) { /* UD: GRH + [seq][pattern] */
				uint8_t *p = udbuf + (size_t)k * 2048 + 40;
				uint64_t s;
				memcpy(&s, p, 8);
				if (!check(p + 8, wc[j].byte_len - 48, s))
					ERR("B: UD datagram corrupted\n");
				res.ud_got++;
				post_recv(udqp, udbuf + (size_t)k * 2048, 2048, wc[j].wr_id);
				continue;
			}
			uint64_t seq = expect[i]++;
			uint8_t *p;
			uint32_t len;
			if (wc[j].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				if (ntohl(wc[j].imm_data) != (uint32_t)seq)
					ERR("B: qp %d WRITE imm %u, expected %" PRIu64 "\n", i,
					    ntohl(wc[j].imm_data), seq);
				p = q_wr(i) + (seq % WSLOTS) * maxmsg;
				len = wc[j].byte_len;
			} else {
				p = q_recv(i) + (size_t)k * maxmsg;
				len = wc[j].byte_len;
				uint64_t s = UINT64_MAX;
				if (len >= 8)
					memcpy(&s, p, 8);
				if (s != seq)
					ERR("B: qp %d SEND seq %" PRIu64 ", expected %" PRIu64 "\n", i, s, seq);
			}
			if (len < 8 || !check(p + 8, len - 8, seq ^ ((uint64_t)i << 40))) {
				uint32_t o = 8;
				while (o < len && check(p + o, 1, 0) == check(p + o, 1, 0) &&
				       p[o] == (uint8_t)(((seq ^ ((uint64_t)i << 40)) * PAT_MUL +
							 (o - 8) * 0x9d) >> 24))
					o++;
				ERR("B: qp %d %s %" PRIu64 " corrupted (len %u, first bad byte %u)\n", i,
				    wc[j].opcode == IBV_WC_RECV ? "SEND" : "WRITE", seq, len, o);
			}
			post_recv(qp[i], q_recv(i) + (size_t)k * maxmsg, maxmsg, wc[j].wr_id);
		}
		if (n < 0)
			ERR("B: poll_cq\n");
		if (!n && recv(sock, &c, 1, MSG_DONTWAIT) == 1)
			break; /* A is done */
	}
	for (int i = 0; i < nq; i++) {
		res.seq[i] = expect[i];
		res.counter[i] = *q_ctr(i);
	}
	res.errors = errors;
	res.retransmits = own_ctr(URVT_CTR_RETRANSMITS);
	res.faults = faults();
	res.rss1 = rss_kib();
	if (write(sock, &res, sizeof(res)) != sizeof(res))
		return 1;
	return errors ? 1 : 0;
}

/* ---- A: requester side ---- */
struct qstate {
	uint64_t seq;         /* next SEND/WRITE sequence */
	uint64_t fadd, fadd_sum, fadd_done;
	int outstanding;
	bool dead;            /* an error completion: post nothing more */
	uint32_t rd_len[64];  /* per slot: READ length, offset */
	uint32_t rd_off[64];
};

int main(int argc, char **argv)
{
	int sv[2], opt, ret;
	pid_t pid;

	while ((opt = getopt(argc, argv, "d:q:w:s:t:")) != -1) {
		switch (opt) {
		case 'd': dur = atoi(optarg); break;
		case 'q': nq = atoi(optarg); break;
		case 'w': depth = atoi(optarg); break;
		case 's': maxmsg = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 't': tmo = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: soak [-d SECONDS] [-q QPS] [-w DEPTH] [-s MAXMSG] [-t TIMEOUT]\n");
			return 2;
		}
	}
	if (nq < 1 || nq > MAXQ || depth < 1 || depth >= RING || maxmsg < 64 || maxmsg % 8 || dur < 1)
		return 2;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		ret = open_dev();
		if (!ret)
			ret = run_b(sv[1]);
		close_dev();
		_exit(ret);
	}
	close(sv[1]);
	ret = open_dev();
	if (ret)
		return ret;

	struct hello me, peer;
	struct ibv_ah *ah;
	struct qstate *st = calloc((size_t)nq, sizeof(*st));
	uint64_t wrs = 0, bytes = 0, ud_sent = 0;
	bool ud_busy = false;
	long rss0, rss1;
	double t0, tend;
	char c;
	uint32_t seed = 12345;

	hello_fill(&me);
	if (read(sv[0], &peer, sizeof(peer)) != sizeof(peer) ||
	    write(sv[0], &me, sizeof(me)) != sizeof(me) || connect_all(&me, &peer) ||
	    read(sv[0], &c, 1) != 1 || !st)
		return 1;
	{
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
		aa.grh.dgid = peer.gid;
		aa.grh.hop_limit = 64;
		ah = ibv_create_ah(pd, &aa);
		if (!ah)
			return 1;
	}
	rss0 = rss_kib();
	t0 = now_s();
	tend = t0 + dur;
	for (;;) {
		bool stop = now_s() >= tend;
		int busy = 0;
		for (int i = 0; i < nq && !stop; i++) {
			struct qstate *s = &st[i];
			while (s->outstanding < depth && !s->dead) {
				struct ibv_sge sge = { .lkey = mr->lkey };
				struct ibv_send_wr w = { .sg_list = &sge, .num_sge = 1,
							 .send_flags = IBV_SEND_SIGNALED }, *bad;
				int slot = 0, kind;
				seed = seed * 1103515245u + 12345u;
				kind = (int)((seed >> 16) % 8);
				for (slot = 0; slot < depth; slot++)
					if (!s->rd_len[slot] && !(s->rd_off[slot] & 0x80000000u))
						break;
				if (kind < 3 || kind == 7) { /* SEND or WRITE WITH IMM, in sequence */
					uint32_t len = 8 + (seed >> 8) % (maxmsg - 8);
					uint8_t *p = q_scratch(i) + (size_t)slot * (READ_AREA + 8);
					memcpy(p, &s->seq, 8);
					fill(p + 8, len - 8, s->seq ^ ((uint64_t)i << 40));
					sge.addr = (uintptr_t)p;
					sge.length = len;
					if (kind == 7) {
						w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
						w.imm_data = htonl((uint32_t)s->seq);
						w.wr.rdma.remote_addr = peer.q[i].wr_area + (s->seq % WSLOTS) * maxmsg;
						w.wr.rdma.rkey = peer.q[i].rkey;
					} else {
						w.opcode = IBV_WR_SEND;
					}
					s->rd_off[slot] = 0x80000000u; /* busy, nothing to check */
					s->seq++;
					bytes += len;
				} else if (kind < 6) { /* READ a piece of the patterned area */
					uint32_t len = 1 + (seed >> 4) % READ_AREA;
					uint32_t off = (seed >> 12) % (READ_AREA - len + 1);
					sge.addr = (uintptr_t)(q_scratch(i) + (size_t)slot * (READ_AREA + 8));
					sge.length = len;
					w.opcode = IBV_WR_RDMA_READ;
					w.wr.rdma.remote_addr = peer.q[i].rd_area + off;
					w.wr.rdma.rkey = peer.q[i].rkey;
					s->rd_len[slot] = len;
					s->rd_off[slot] = off;
					bytes += len;
				} else { /* FETCH_ADD 1 */
					sge.addr = (uintptr_t)(q_scratch(i) + (size_t)slot * (READ_AREA + 8));
					sge.length = 8;
					w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
					w.wr.atomic.remote_addr = peer.q[i].counter;
					w.wr.atomic.rkey = peer.q[i].rkey;
					w.wr.atomic.compare_add = 1;
					s->rd_off[slot] = 0x40000000u | 0x80000000u;
					s->fadd++;
				}
				w.wr_id = (uint64_t)i << 32 | (uint64_t)slot;
				if (ibv_post_send(qp[i], &w, &bad)) {
					ERR("A: post_send qp %d failed\n", i);
					stop = true;
					break;
				}
				s->outstanding++;
				wrs++;
			}
		}
		/* a UD datagram now and then: may be lost, never corrupted */
		if (!stop && !ud_busy && (wrs & 63) == 0) {
			uint8_t *p = q_scratch(nq - 1) + (size_t)depth * (READ_AREA + 8);
			uint32_t len = 64 + (seed >> 20) % 900;
			struct ibv_sge sge = { (uintptr_t)p, len, mr->lkey };
			struct ibv_send_wr w = { .wr_id = UINT64_MAX, .sg_list = &sge, .num_sge = 1,
						 .opcode = IBV_WR_SEND }, *bad;
			memcpy(p, &ud_sent, 8);
			fill(p + 8, len - 8, ud_sent);
			w.wr.ud.ah = ah;
			w.wr.ud.remote_qpn = peer.ud_qpn;
			w.wr.ud.remote_qkey = 0x1111;
			w.send_flags = IBV_SEND_SIGNALED;
			if (!ibv_post_send(udqp, &w, &bad)) {
				ud_sent++;
				ud_busy = true;
			}
		}
		struct ibv_wc wc[64];
		int n = ibv_poll_cq(cq, 64, wc);
		for (int j = 0; j < n; j++) {
			if (wc[j].wr_id == UINT64_MAX) {
				ud_busy = false;
				if (wc[j].status != IBV_WC_SUCCESS)
					ERR("A: UD send status %s\n", ibv_wc_status_str(wc[j].status));
				continue;
			}
			int i = (int)(wc[j].wr_id >> 32), slot = (int)(wc[j].wr_id & 0xffffffff);
			struct qstate *s = &st[i];
			uint8_t *p = q_scratch(i) + (size_t)slot * (READ_AREA + 8);
			busy++;
			s->outstanding--;
			if (wc[j].status != IBV_WC_SUCCESS) {
				if (!s->dead || wc[j].status != IBV_WC_WR_FLUSH_ERR)
					ERR("A: qp %d opcode %d status %s\n", i, wc[j].opcode,
					    ibv_wc_status_str(wc[j].status));
				s->dead = true;
			} else if (wc[j].opcode == IBV_WC_RDMA_READ) {
				/* B's area i holds fill(.., 1000 + i); check the piece */
				for (uint32_t b = 0; b < s->rd_len[slot]; b++) {
					uint32_t o = s->rd_off[slot] + b;
					if (p[b] != (uint8_t)(((1000 + (uint64_t)i) * PAT_MUL + o * 0x9d) >> 24)) {
						ERR("A: qp %d READ data wrong at %u\n", i, o);
						break;
					}
				}
			} else if (wc[j].opcode == IBV_WC_FETCH_ADD) {
				uint64_t v;
				memcpy(&v, p, 8);
				s->fadd_sum += v;
				s->fadd_done++;
			}
			s->rd_len[slot] = 0;
			s->rd_off[slot] = 0;
		}
		if (n < 0)
			ERR("A: poll_cq\n");
		if (stop) {
			int left = 0;
			for (int i = 0; i < nq; i++)
				left += st[i].outstanding;
			if (!left)
				break;
			if (now_s() > tend + 120) {
				ERR("A: %d WRs still outstanding 120 s after the end\n", left);
				break;
			}
		}
		(void)busy;
	}
	t0 = now_s() - t0;
	rss1 = rss_kib();
	/* let B drain, then collect its view */
	usleep(200000);
	if (write(sv[0], "d", 1) != 1)
		return 1;
	struct result res;
	if (read(sv[0], &res, sizeof(res)) != sizeof(res)) {
		ERR("A: no result from B\n");
		memset(&res, 0, sizeof(res));
	}
	uint64_t fadds = 0;
	for (int i = 0; i < nq; i++) {
		struct qstate *s = &st[i];
		if (res.seq[i] != s->seq)
			ERR("qp %d: B accepted %" PRIu64 " messages, A sent %" PRIu64 "\n", i,
			    res.seq[i], s->seq);
		if (res.counter[i] != s->fadd || s->fadd_done != s->fadd ||
		    s->fadd_sum != s->fadd * (s->fadd - 1) / 2)
			ERR("qp %d: %" PRIu64 " FETCH_ADDs, counter %" PRIu64 ", results sum %" PRIu64
			    " (executed more or less than once)\n", i, s->fadd, res.counter[i], s->fadd_sum);
		fadds += s->fadd;
	}
	uint64_t my_retr = own_ctr(URVT_CTR_RETRANSMITS), my_to = own_ctr(URVT_CTR_TIMEOUTS),
		 my_probes = own_ctr(URVT_CTR_PROBES), my_faults = faults();
	waitpid(pid, &ret, 0);
	ibv_destroy_ah(ah);
	free(st);
	close_dev();
	printf("soak: local ACK timeout %d (%.0f ms), retry_cnt 7\n", tmo, 4.096e-3 * (double)(1u << tmo));
	printf("soak: %d RC QPs + 1 UD, %.0f s: %" PRIu64 " WRs, %.1f MiB moved, %" PRIu64
	       " FETCH_ADDs, UD %" PRIu64 "/%" PRIu64 " delivered\n"
	       "soak: errors %" PRIu64 " (A) + %" PRIu64 " (B); retransmitted packets %" PRIu64
	       " (A) + %" PRIu64 " (B), timeouts %" PRIu64 ", tail probes %" PRIu64
	       ", faults injected %" PRIu64 " (A) + %" PRIu64 " (B)\n"
	       "soak: RSS A %ld -> %ld KiB, B %ld -> %ld KiB\n",
	       nq, t0, wrs, (double)bytes / 1048576.0, fadds, res.ud_got, ud_sent, errors,
	       res.errors, my_retr, res.retransmits, my_to, my_probes, my_faults, res.faults, rss0,
	       rss1, res.rss0, res.rss1);
	return errors || res.errors || !WIFEXITED(ret) || WEXITSTATUS(ret) ? 1 : 0;
}
