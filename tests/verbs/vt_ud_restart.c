/*
 * vt_ud_restart: one UD QP and one AH (to the host's shared address) send
 * to a receiver process, which exits; the next receiver takes its place,
 * its slot and so the same QPN range (docs/host-identity.md), and the same
 * QP and AH must reach it with every datagram. The sender's QP remembers
 * the route its last WR of that slot took (transport/req.c ud_route): a
 * route to the departed process must be noticed and looked up again, not
 * lose the datagram. Three receivers in turn, each checks that it got
 * every datagram, in order. Exit 0/1, 77: no device; alarm-bounded.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define QKEY 0x2222u
#define MSGS 16
#define ROUNDS 3
#define LEN 64
#define GRH 40

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[(MSGS + 1) * (GRH + LEN)];
};

__attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "vt_ud_restart[%d]: ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The device, a UD QP in RTS, the buffer registered. */
static void dev_up(struct dev *d)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };

	if (!list || !list[0])
		exit(77);
	d->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!d->ctx)
		die("open device");
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = d->pd ? ibv_create_cq(d->ctx, 2 * MSGS + 2, NULL, NULL, 0) : NULL;
	d->mr = d->cq ? ibv_reg_mr(d->pd, d->buf, sizeof(d->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!d->mr)
		die("pd, cq or mr");
	ia.send_cq = ia.recv_cq = d->cq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = MSGS + 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	d->qp = ibv_create_qp(d->pd, &ia);
	if (!d->qp)
		die("create qp");
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = QKEY;
	if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE))
		die("RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("RTS");
}

/* A receiver: its QPN on stdout, then MSGS datagrams of round r, in order,
 * within 10 s. */
static int receiver(int r)
{
	static struct dev d;
	struct ibv_wc wc;
	int got = 0;
	double end;

	dev_up(&d);
	for (int i = 0; i < MSGS; i++) {
		struct ibv_sge sge = { (uintptr_t)d.buf + (size_t)i * (GRH + LEN), GRH + LEN,
				       d.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(d.qp, &wr, &bad))
			die("post_recv");
	}
	printf("%u\n", d.qp->qp_num);
	fflush(stdout);
	end = now_s() + 10;
	while (got < MSGS && now_s() < end) {
		int n = ibv_poll_cq(d.cq, 1, &wc);
		uint32_t v;
		if (n < 0)
			die("poll");
		if (!n)
			continue;
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV ||
		    wc.byte_len != GRH + LEN)
			die("round %d: completion %d status %d byte_len %u", r, got, wc.status,
			    wc.byte_len);
		memcpy(&v, d.buf + wc.wr_id * (GRH + LEN) + GRH, sizeof(v));
		if (v != (uint32_t)(r * 1000 + got))
			die("round %d: datagram %d holds %u", r, got, v);
		got++;
	}
	if (got != MSGS)
		die("round %d: %d of %d datagrams", r, got, MSGS);
	return 0;
}

int main(int argc, char **argv)
{
	static struct dev d;
	union ibv_gid gid;
	struct ibv_ah_attr aa = { 0 };
	struct ibv_ah *ah;
	uint32_t slot_seen = 0;
	int same_slot = 0;

	alarm(100);
	if (argc == 3 && !strcmp(argv[1], "--receiver"))
		return receiver(atoi(argv[2]));
	/* an address of this test's own: its processes share it and nobody else */
	setenv("URVT_ADDR", "127.44.9.1", 1);
	dev_up(&d);
	if (ibv_query_gid(d.ctx, 1, 0, &gid))
		die("query gid");
	aa.is_global = 1;
	aa.grh.dgid = gid;
	aa.grh.hop_limit = 64;
	aa.port_num = 1;
	ah = ibv_create_ah(d.pd, &aa);
	if (!ah)
		die("create ah");
	for (int r = 1; r <= ROUNDS; r++) {
		char arg[16], line[32] = "";
		int pfd[2], st = 0;
		uint32_t qpn;
		FILE *in;
		pid_t pid;

		snprintf(arg, sizeof(arg), "%d", r);
		if (pipe(pfd))
			die("pipe");
		pid = fork();
		if (pid < 0)
			die("fork");
		if (!pid) {
			dup2(pfd[1], 1);
			close(pfd[0]);
			execl("/proc/self/exe", argv[0], "--receiver", arg, (char *)NULL);
			_exit(127);
		}
		close(pfd[1]);
		in = fdopen(pfd[0], "r");
		if (!in || !fgets(line, sizeof(line), in))
			die("round %d: no QPN from the receiver", r);
		qpn = (uint32_t)strtoul(line, NULL, 10);
		same_slot += r > 1 && qpn >> 16 == slot_seen;
		slot_seen = qpn >> 16;
		for (int i = 0; i < MSGS; i++) {
			uint32_t v = (uint32_t)(r * 1000 + i);
			struct ibv_sge sge = { (uintptr_t)d.buf, LEN, d.mr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED },
					   *bad;
			struct ibv_wc wc;
			double end = now_s() + 5;
			int n = 0;

			memcpy(d.buf, &v, sizeof(v));
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = qpn;
			wr.wr.ud.remote_qkey = QKEY;
			if (ibv_post_send(d.qp, &wr, &bad))
				die("round %d: post_send %d", r, i);
			while (!n && now_s() < end)
				n = ibv_poll_cq(d.cq, 1, &wc);
			if (n != 1 || wc.status != IBV_WC_SUCCESS)
				die("round %d: send %d completion", r, i);
			/* the first datagram to a new peer goes over UDP while
			 * the shm link connects to it: the rest go over shm */
			if (!i)
				usleep(100000);
		}
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			die("round %d: receiver exit status %#x", r, st);
		fclose(in);
		/* the receiver's departure reaches this process's link before
		 * the next one starts (its connection's hang-up) */
		usleep(200000);
	}
	ibv_destroy_ah(ah);
	printf("ok  %d receivers in turn, %d in the slot of the one before, %d datagrams each "
	       "through one QP and one AH\n",
	       ROUNDS, same_slot, MSGS);
	return 0;
}
