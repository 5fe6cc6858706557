// SPDX-License-Identifier: MIT
/*
 * poll_turn: what one empty turn of a polling loop costs, the turn UCX's
 * ud_verbs makes between two messages (ibv_poll_cq on its receive CQ, then
 * on its send CQ) with nothing arriving. A message waits on average half a
 * turn to be seen (docs/performance.md "MPI on one host"). An ordinary
 * libibverbs program: compiled against the system <infiniband/verbs.h>,
 * linked with the system -libverbs, run with urvt-run.
 *
 *   urvt-run poll_turn [-n TURNS]
 *
 * One UD QP in RTS with a receive CQ and a send CQ; TURNS turns (default
 * 5 000 000) after 100 000 to warm up. Prints one line:
 *   RESULT poll_turn turns=N ns_per_turn=T
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "poll_turn: %s failed\n", what);
	exit(1);
}

/* One turn: both CQs looked at; a completion found is an error here. */
static void turn(struct ibv_cq *rcq, struct ibv_cq *scq)
{
	struct ibv_wc wc[16];

	if (ibv_poll_cq(rcq, 16, wc) != 0 || ibv_poll_cq(scq, 16, wc) != 0)
		die("an empty poll");
}

int main(int argc, char **argv)
{
	long turns = 5000000;
	int opt, n = 0;

	while ((opt = getopt(argc, argv, "n:")) != -1) {
		if (opt != 'n' || (turns = atol(optarg)) <= 0) {
			fprintf(stderr, "usage: poll_turn [-n TURNS]\n");
			return 2;
		}
	}
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || !n)
		die("ibv_get_device_list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	struct ibv_cq *scq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!pd || !rcq || !scq)
		die("ibv_alloc_pd / ibv_create_cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("modify to INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("modify to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify to RTS");

	for (long i = 0; i < 100000; i++)
		turn(rcq, scq);
	double t0 = now_s();
	for (long i = 0; i < turns; i++)
		turn(rcq, scq);
	double t = now_s() - t0;
	printf("RESULT poll_turn turns=%ld ns_per_turn=%.1f\n", turns, t / (double)turns * 1e9);

	ibv_destroy_qp(qp);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
