/*
 * tp_bulk: an RC transfer between two processes over urvt's network
 * transport (run through urvt-run). The process forks before opening the
 * device, so parent and child each get their own urvt device and address;
 * they exchange QP numbers over a socketpair.
 *
 *   tp_bulk [-b BYTES] [-s MSG] [-m send|write|read|rw] [-k] [-t TIMEOUT] [-w DEPTH]
 *           [-c COUNTER] [-C COUNTER]
 *
 * send:  the parent (requester) SENDs BYTES in MSG-sized messages; each
 *        carries its sequence number and a pattern; the child checks that
 *        every message arrives complete and in order.
 * write: RDMA WRITE WITH IMMEDIATE into a ring of slots at the child,
 *        imm = sequence number; the child checks slot contents.
 * read:  the parent RDMA READs BYTES from a patterned region of the child
 *        and checks what arrives.
 * rw:    as read, but each READ of a slot is followed at once, on the same
 *        QP, by an RDMA WRITE of the slot's next pattern: the READ must
 *        still see the old one (RC executes a QP's requests in order; with
 *        answers by reference, docs/shm.md "Single copy", the requester
 *        holds the WRITE back until the READ's bytes are in).
 * -c CTR: the requester's counter CTR (urvt-stat) must be above 0 at the
 *        end (that the path under test was taken); -C CTR: the responder's.
 * -k:    kill the child (SIGKILL) half-way; every outstanding WR of the
 *        parent must then complete, the first with IBV_WC_RETRY_EXC_ERR,
 *        within the retry budget ((retry_cnt + 1) x timeout, x2 slack).
 *
 * Prints the transport counters of both sides (/dev/shm/urvt.<pid>) and
 * exits 0 on success, 1 on failure, 77 when no urvt device is present.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING 64          /* receive slots / write slots */
#define PAT_MUL 0x9E3779B97F4A7C15ull

static uint64_t total = 1ull << 30;
static uint32_t msg = 1 << 20;
static const char *mode = "send";
static bool kill_mode;
static int timeout_code = 14;
static int depth = 16;
static int retry_cnt = 7;
static const char *need_ctr, *need_resp_ctr;

struct peer {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

struct ctx {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t len;
	struct peer me;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fill(uint8_t *p, uint32_t len, uint64_t seq)
{
	uint64_t *w = (uint64_t *)(void *)p;
	for (uint32_t i = 0; i < len / 8; i++)
		w[i] = (seq * PAT_MUL) ^ i;
	if (len >= 8)
		w[0] = seq;
}

static bool check(const uint8_t *p, uint32_t len, uint64_t seq)
{
	const uint64_t *w = (const uint64_t *)(const void *)p;
	if (len >= 8 && w[0] != seq)
		return false;
	for (uint32_t i = 1; i < len / 8; i++)
		if (w[i] != ((seq * PAT_MUL) ^ i))
			return false;
	return true;
}

static int setup(struct ctx *c, size_t len)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;

	if (!list || !list[0]) {
		fprintf(stderr, "no RDMA device\n");
		return 77;
	}
	c->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!c->ctx)
		return 1;
	c->pd = ibv_alloc_pd(c->ctx);
	c->cq = ibv_create_cq(c->ctx, 4 * RING + 2 * depth + 16, NULL, NULL, 0);
	c->len = len;
	c->buf = aligned_alloc(4096, len);
	if (!c->pd || !c->cq || !c->buf)
		return 1;
	memset(c->buf, 0, len);
	c->mr = ibv_reg_mr(c->pd, c->buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!c->mr)
		return 1;
	struct ibv_qp_init_attr ia = {
		.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = (uint32_t)depth + 4, .max_recv_wr = RING + 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	c->qp = ibv_create_qp(c->pd, &ia);
	if (!c->qp)
		return 1;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS))
		return 1;
	if (ibv_query_port(c->ctx, 1, &pa) || ibv_query_gid(c->ctx, 1, 0, &c->me.gid))
		return 1;
	c->me.qpn = c->qp->qp_num;
	c->me.psn = (uint32_t)(getpid() * 7919u) & 0xffffff;
	c->me.rkey = c->mr->rkey;
	c->me.addr = (uintptr_t)c->buf;
	return 0;
}

static int connect_qp(struct ctx *c, const struct peer *p)
{
	struct ibv_port_attr pa;
	struct ibv_qp_attr a;

	ibv_query_port(c->ctx, 1, &pa);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa.active_mtu;
	a.dest_qp_num = p->qpn;
	a.rq_psn = p->psn;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return 1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = (uint8_t)timeout_code;
	a.retry_cnt = (uint8_t)retry_cnt;
	a.rnr_retry = 7;
	a.sq_psn = c->me.psn;
	a.max_rd_atomic = 16;
	return ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
						IBV_QP_MAX_QP_RD_ATOMIC) ? 1 : 0;
}

static void print_counters(const char *who)
{
	char cmd[256];
	const char *stat = getenv("TP_BULK_STAT");

	if (!stat)
		return;
	printf("%s counters:\n", who);
	fflush(stdout);
	snprintf(cmd, sizeof(cmd), "%s -q %d", stat, (int)getpid());
	if (system(cmd)) {
		/* urvt-stat missing: not fatal */
	}
}

/* Is our counter name above 0 (urvt-stat -q)? */
static bool counter_positive(const char *name)
{
	char cmd[256], line[256], key[128];
	unsigned long long v;
	const char *stat = getenv("TP_BULK_STAT");
	bool found = false;
	FILE *f;

	if (!stat)
		return false;
	snprintf(cmd, sizeof(cmd), "%s -q %d", stat, (int)getpid());
	f = popen(cmd, "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%127s %llu", key, &v) == 2 && !strcmp(key, name) && v > 0)
			found = true;
	pclose(f);
	return found;
}

static int post_recv(struct ctx *c, int slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf + (size_t)slot * msg, .length = msg,
			       .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)slot, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(c->qp, &wr, &bad);
}

/* ---- the passive side (child) ---- */
static int run_responder(int sock)
{
	struct ctx c;
	struct peer p;
	uint64_t nmsg = total / msg, seq = 0;
	bool is_send = !strcmp(mode, "send"), is_write = !strcmp(mode, "write");
	size_t len = is_send || is_write ? (size_t)RING * msg : (size_t)64 << 20;
	int ret = setup(&c, len);

	if (ret)
		return ret;
	if (!is_send && !is_write) {
		/* read: a patterned region, read over and over */
		for (size_t off = 0; off < len; off += msg)
			fill(c.buf + off, msg, off / msg);
	}
	if (write(sock, &c.me, sizeof(c.me)) != sizeof(c.me) ||
	    read(sock, &p, sizeof(p)) != sizeof(p))
		return 1;
	if (connect_qp(&c, &p))
		return 1;
	if (is_send || is_write)
		for (int i = 0; i < RING; i++)
			if (post_recv(&c, i))
				return 1;
	if (write(sock, "R", 1) != 1)
		return 1;
	while ((is_send || is_write) && seq < nmsg) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(c.cq, 16, wc);
		for (int i = 0; i < n; i++) {
			const uint8_t *slot;
			uint64_t s;
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "responder: wc status %s at seq %" PRIu64 "\n",
					ibv_wc_status_str(wc[i].status), seq);
				return 1;
			}
			if (is_send) {
				slot = c.buf + wc[i].wr_id * msg;
				s = seq;
				if (wc[i].byte_len != msg) {
					fprintf(stderr, "responder: message %" PRIu64 " has %u bytes\n",
						seq, wc[i].byte_len);
					return 1;
				}
			} else {
				s = be32toh(wc[i].imm_data);
				slot = c.buf + (s % RING) * msg;
				if (s != (seq & 0xffffffff)) {
					fprintf(stderr, "responder: imm %" PRIu64 ", expected %" PRIu64 "\n",
						s, seq);
					return 1;
				}
				s = seq;
			}
			if (!check(slot, msg, s)) {
				fprintf(stderr, "responder: message %" PRIu64 " corrupt or out of order\n",
					seq);
				return 1;
			}
			seq++;
			if (post_recv(&c, (int)wc[i].wr_id))
				return 1;
			/* write mode: the data of later WRITEs lands before their
			 * immediate needs a receive, so the requester waits for
			 * this report before reusing a slot */
			if (is_write && !(seq % 8) &&
			    write(sock, &seq, sizeof(seq)) != sizeof(seq)) {
				/* the requester is done and gone: fine */
			}
		}
	}
	/* wait for the requester to finish (it reads our region in read mode) */
	{
		char b;
		if (read(sock, &b, 1) != 1) {
			/* peer gone */
		}
	}
	if (is_send || is_write)
		printf("responder: %" PRIu64 " messages of %u bytes complete and in order\n", seq, msg);
	print_counters("responder");
	if (need_resp_ctr && !counter_positive(need_resp_ctr)) {
		fprintf(stderr, "responder: counter %s is 0: the path under test was not taken\n",
			need_resp_ctr);
		return 1;
	}
	return 0;
}

/* ---- the active side (parent) ---- */
static int run_requester(int sock, pid_t child)
{
	struct ctx c;
	struct peer p;
	uint64_t nmsg = total / msg, posted = 0, done = 0, checked = 0;
	bool is_rw = !strcmp(mode, "rw"), is_read = is_rw || !strcmp(mode, "read");
	bool is_write = !strcmp(mode, "write");
	uint64_t nslots = (64u << 20) / msg;
	size_t len = (size_t)depth * msg;
	double t0, t_kill = 0;
	int ret = setup(&c, len), errors = 0;
	char r;

	if (ret)
		return ret;
	if (is_rw)
		nmsg *= 2; /* a READ and a WRITE per message */
	if (write(sock, &c.me, sizeof(c.me)) != sizeof(c.me) ||
	    read(sock, &p, sizeof(p)) != sizeof(p))
		return 1;
	if (connect_qp(&c, &p))
		return 1;
	if (read(sock, &r, 1) != 1)
		return 1;
	t0 = now_s();
	while (done < nmsg) {
		if (is_write) {
			uint64_t v;
			while (recv(sock, &v, sizeof(v), MSG_DONTWAIT) == sizeof(v))
				checked = v;
		}
		while (posted < nmsg && posted - done < (uint64_t)depth + (t_kill ? 1 : 0) &&
		       (!is_write || posted < checked + RING)) {
			int slot = (int)(posted % (uint64_t)depth);
			uint8_t *b = c.buf + (size_t)slot * msg;
			struct ibv_sge sge = { .addr = (uintptr_t)b, .length = msg, .lkey = c.mr->lkey };
			struct ibv_send_wr wr = { .wr_id = posted, .sg_list = &sge, .num_sge = 1,
						  .send_flags = IBV_SEND_SIGNALED }, *bad;
			if (is_rw && (posted & 1)) {
				/* the next pattern of the slot pair posted / 2 read */
				uint64_t k = posted / 2;
				fill(b, msg, k + nslots);
				wr.opcode = IBV_WR_RDMA_WRITE;
				wr.wr.rdma.remote_addr = p.addr + (k % nslots) * msg;
				wr.wr.rdma.rkey = p.rkey;
			} else if (is_read) {
				uint64_t rslot = (is_rw ? posted / 2 : posted) % nslots;
				wr.opcode = IBV_WR_RDMA_READ;
				wr.wr.rdma.remote_addr = p.addr + rslot * msg;
				wr.wr.rdma.rkey = p.rkey;
				memset(b, 0, 16);
			} else if (is_write) {
				fill(b, msg, posted);
				wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
				wr.imm_data = htobe32((uint32_t)posted);
				wr.wr.rdma.remote_addr = p.addr + (posted % RING) * msg;
				wr.wr.rdma.rkey = p.rkey;
			} else {
				fill(b, msg, posted);
				wr.opcode = IBV_WR_SEND;
			}
			if (ibv_post_send(c.qp, &wr, &bad)) {
				fprintf(stderr, "requester: post_send failed\n");
				return 1;
			}
			posted++;
		}
		if (kill_mode && !t_kill && done >= nmsg / 2) {
			siginfo_t si;
			kill(child, SIGKILL);
			t_kill = now_s();
			/* dead (not reaped: main does) before anything more is posted */
			waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT);
			printf("requester: peer killed after %" PRIu64 " messages, %" PRIu64
			       " outstanding\n", done, posted - done);
			fflush(stdout);
			/* everything posted must now complete. The outstanding WRs
			 * may all have been acknowledged before the kill landed (a
			 * fast link: MTU 4096 on lo), so one more is posted now that
			 * the peer is dead: it cannot succeed */
			nmsg = posted + 1;
		}
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(c.cq, 16, wc);
		for (int i = 0; i < n; i++, done++) {
			if (wc[i].wr_id != done) {
				fprintf(stderr, "requester: completion %" PRIu64 " out of order (%" PRIu64
					")\n", (uint64_t)wc[i].wr_id, done);
				return 1;
			}
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (!kill_mode) {
					fprintf(stderr, "requester: wc status %s at %" PRIu64 "\n",
						ibv_wc_status_str(wc[i].status), done);
					return 1;
				}
				if (!errors++) {
					double dt = now_s() - t_kill;
					double budget = (retry_cnt + 1) * 4.096e-6 *
							(double)(1ull << timeout_code);
					printf("requester: first error %s %.3f s after the kill "
					       "(budget %.3f s)\n", ibv_wc_status_str(wc[i].status), dt,
					       budget);
					if (wc[i].status != IBV_WC_RETRY_EXC_ERR || dt > 2 * budget + 0.2)
						return 1;
				} else if (wc[i].status != IBV_WC_WR_FLUSH_ERR) {
					fprintf(stderr, "requester: later status %s\n",
						ibv_wc_status_str(wc[i].status));
					return 1;
				}
				continue;
			}
			if (is_read && !(is_rw && (wc[i].wr_id & 1))) {
				/* rw: pair k reads the pattern k (slot k % nslots,
				 * written by pair k - nslots) */
				uint64_t rslot = is_rw ? wc[i].wr_id / 2 : wc[i].wr_id % nslots;
				if (!check(c.buf + (wc[i].wr_id % (uint64_t)depth) * msg, msg, rslot)) {
					fprintf(stderr, "requester: READ %" PRIu64 " data wrong\n",
						(uint64_t)wc[i].wr_id);
					return 1;
				}
			}
		}
		if (kill_mode && t_kill && now_s() - t_kill > 60) {
			fprintf(stderr, "requester: outstanding WRs did not complete after the kill\n");
			return 1;
		}
	}
	double dt = now_s() - t0;
	if (kill_mode) {
		printf("requester: %d WRs ended in error after the kill, nothing hung\n", errors);
		if (!errors)
			return 1;
	} else {
		printf("requester: %" PRIu64 " bytes (%s) in %.2f s = %.2f Gbit/s\n",
		       (uint64_t)nmsg * msg, mode, dt, (double)nmsg * msg * 8 / dt / 1e9);
	}
	print_counters("requester");
	if (need_ctr && !counter_positive(need_ctr)) {
		fprintf(stderr, "requester: counter %s is 0: the path under test was not taken\n",
			need_ctr);
		return 1;
	}
	if (write(sock, "D", 1) != 1) {
		/* the responder may be gone (kill mode) */
	}
	return 0;
}

/* 64K, 16M, 1G */
static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);
	switch (*end) {
	case 'k': case 'K': return v << 10;
	case 'm': case 'M': return v << 20;
	case 'g': case 'G': return v << 30;
	default: return v;
	}
}

int main(int argc, char **argv)
{
	int opt, sv[2], st, ret;
	pid_t child;

	while ((opt = getopt(argc, argv, "b:s:m:kt:w:r:c:C:")) != -1) {
		switch (opt) {
		case 'b': total = parse_size(optarg); break;
		case 's': msg = (uint32_t)parse_size(optarg); break;
		case 'm': mode = optarg; break;
		case 'k': kill_mode = true; break;
		case 'c': need_ctr = optarg; break;
		case 'C': need_resp_ctr = optarg; break;
		case 't': timeout_code = atoi(optarg); break;
		case 'w': depth = atoi(optarg); break;
		case 'r': retry_cnt = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: tp_bulk [-b bytes] [-s msg] [-m send|write|read|rw] "
					"[-k] [-t timeout] [-w depth] [-r retry_cnt] [-c counter] [-C counter]\n");
			return 2;
		}
	}
	if (msg < 16 || msg % 8 || total < msg) {
		fprintf(stderr, "tp_bulk: bad sizes\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	child = fork();
	if (child < 0)
		return 1;
	if (!child) {
		close(sv[0]);
		_exit(run_responder(sv[1]));
	}
	close(sv[1]);
	ret = run_requester(sv[0], child);
	if (ret && getenv("TP_BULK_HOLD"))
		sleep(60); /* debugging: leave both processes for a debugger */
	if (ret && !kill_mode)
		kill(child, SIGKILL);
	close(sv[0]);
	waitpid(child, &st, 0);
	if (!kill_mode && (!WIFEXITED(st) || WEXITSTATUS(st))) {
		fprintf(stderr, "tp_bulk: responder failed (%d)\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		return ret == 77 ? 77 : 1;
	}
	printf("tp_bulk: %s\n", ret ? "FAIL" : "PASS");
	return ret;
}
