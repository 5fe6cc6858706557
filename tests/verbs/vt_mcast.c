/*
 * vt_mcast: UD multicast through the verbs (docs/multicast.md).
 *
 *   vt_mcast api               the attach/detach rules and limits, and one
 *                              process's QP receiving what its other QP
 *                              sends to the group (over the UDP link: the
 *                              group comes back to its members on this host)
 *   vt_mcast recv GROUP N      attach a UD QP to GROUP (an IPv4 multicast
 *                              address), print "ready", receive N datagrams
 *                              from the sender and check each one's bytes
 *   vt_mcast send GROUP N      send N datagrams to GROUP, one per 2 ms
 *
 * tests/verbs/mcast.sh runs a sender and two receivers as three processes,
 * on this host and across two network namespaces. Exit 0/1 (77: no device);
 * alarm-bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QKEY 0x01234567u
#define MSG 256
#define SLOTS 64
#define GRH 40

static int failures;

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);               \
			fprintf(stderr, __VA_ARGS__);                                      \
			fprintf(stderr, "\n");                                             \
			failures++;                                                        \
		}                                                                          \
	} while (0)

struct res {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq, *scq;          /* receives, sends */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

static void mgid_of(const char *group, union ibv_gid *g)
{
	struct in_addr a;

	if (inet_pton(AF_INET, group, &a) != 1) {
		fprintf(stderr, "vt_mcast: %s is no IPv4 address\n", group);
		exit(2);
	}
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff; /* IPv4-mapped, as rdma_cm maps it on RoCEv2 */
	memcpy(g->raw + 12, &a, 4);
}

static struct ibv_qp *ud_qp(struct res *r, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = { .send_cq = r->scq, .recv_cq = r->cq, .qp_type = type,
				       .cap = { .max_send_wr = SLOTS, .max_recv_wr = SLOTS,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	struct ibv_qp *qp = ibv_create_qp(r->pd, &ia);

	if (!qp)
		return NULL;
	if (type != IBV_QPT_UD)
		return qp;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return NULL;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return NULL;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return NULL;
	return qp;
}

static int res_open(struct res *r)
{
	struct ibv_device **l = ibv_get_device_list(NULL);

	memset(r, 0, sizeof(*r));
	if (!l || !l[0])
		return 77;
	r->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!r->ctx)
		return 1;
	r->pd = ibv_alloc_pd(r->ctx);
	r->cq = ibv_create_cq(r->ctx, 4 * SLOTS, NULL, NULL, 0);
	r->scq = ibv_create_cq(r->ctx, 4 * SLOTS, NULL, NULL, 0);
	r->buf = calloc(2 * SLOTS, GRH + MSG);
	if (!r->pd || !r->cq || !r->scq || !r->buf)
		return 1;
	r->mr = ibv_reg_mr(r->pd, r->buf, 2 * SLOTS * (GRH + MSG), IBV_ACCESS_LOCAL_WRITE);
	r->qp = ud_qp(r, IBV_QPT_UD);
	return r->mr && r->qp ? 0 : 1;
}

static uint8_t *slot(struct res *r, unsigned i)
{
	return r->buf + (size_t)i * (GRH + MSG);
}

static int post_recv(struct res *r, struct ibv_qp *qp, unsigned i)
{
	struct ibv_sge sge = { (uintptr_t)slot(r, i), GRH + MSG, r->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static void fill(uint8_t *p, uint32_t seq)
{
	for (unsigned k = 0; k < MSG; k++)
		p[k] = (uint8_t)(seq * 7 + k);
}

static int send_one(struct res *r, struct ibv_qp *qp, struct ibv_ah *ah, uint32_t seq)
{
	uint8_t *p = slot(r, SLOTS + seq % SLOTS);
	struct ibv_sge sge = { (uintptr_t)p, MSG, r->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1000 + seq, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = htonl(seq) },
			   *bad;
	struct ibv_wc wc;
	int n;

	fill(p, seq);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 0xffffff;
	wr.wr.ud.remote_qkey = QKEY;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	while ((n = ibv_poll_cq(r->scq, 1, &wc)) == 0)
		;
	return n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND ? 0 : -1;
}

static struct ibv_ah *group_ah(struct res *r, const union ibv_gid *mgid)
{
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };

	aa.grh.dgid = *mgid;
	aa.grh.hop_limit = 1;
	return ibv_create_ah(r->pd, &aa);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* One receive completion within the deadline, its datagram checked. */
static int recv_check(struct res *r, const union ibv_gid *mgid, struct ibv_wc *wc, double until)
{
	int n;

	do {
		n = ibv_poll_cq(r->cq, 1, wc);
	} while (n == 0 && now_s() < until);
	if (n != 1)
		return -1;
	if (wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV || !(wc->wc_flags & IBV_WC_WITH_IMM) ||
	    wc->byte_len != GRH + MSG) {
		fprintf(stderr, "vt_mcast: completion status %d opcode %d len %u\n", wc->status,
			wc->opcode, wc->byte_len);
		return -1;
	}
	{
		uint8_t want[MSG];
		uint8_t *p = slot(r, (unsigned)wc->wr_id);
		fill(want, ntohl(wc->imm_data));
		/* the GRH image names the group as its destination (IPv4: the
		 * IPv4 header in its last 20 bytes) */
		if (memcmp(p + GRH, want, MSG) || memcmp(p + 36, mgid->raw + 12, 4)) {
			fprintf(stderr, "vt_mcast: datagram %u damaged or not to the group\n",
				ntohl(wc->imm_data));
			return -1;
		}
	}
	return 0;
}

static int mode_recv(const char *group, unsigned n)
{
	union ibv_gid mgid;
	struct res r;
	int ret = res_open(&r);

	if (ret)
		return ret;
	mgid_of(group, &mgid);
	for (unsigned i = 0; i < SLOTS; i++)
		CHECK(!post_recv(&r, r.qp, i), "post_recv");
	CHECK(!ibv_attach_mcast(r.qp, &mgid, 0), "attach: %s", strerror(errno));
	printf("ready\n");
	fflush(stdout);
	for (unsigned got = 0; got < n && !failures; got++) {
		struct ibv_wc wc;
		if (recv_check(&r, &mgid, &wc, now_s() + 10)) {
			CHECK(0, "datagram %u of %u not received", got, n);
			break;
		}
		CHECK(ntohl(wc.imm_data) == got, "datagram %u where %u was due", ntohl(wc.imm_data),
		      got);
		CHECK(!post_recv(&r, r.qp, (unsigned)wc.wr_id), "post_recv");
	}
	CHECK(!ibv_detach_mcast(r.qp, &mgid, 0), "detach");
	CHECK(!ibv_destroy_qp(r.qp), "destroy");
	printf("%s: %u datagrams from the group\n", failures ? "FAIL" : "ok", n);
	return failures ? 1 : 0;
}

static int mode_send(const char *group, unsigned n)
{
	union ibv_gid mgid;
	struct ibv_ah *ah;
	struct res r;
	int ret = res_open(&r);

	if (ret)
		return ret;
	mgid_of(group, &mgid);
	ah = group_ah(&r, &mgid);
	CHECK(ah, "create_ah for the group");
	for (unsigned i = 0; ah && i < n && !failures; i++) {
		CHECK(!send_one(&r, r.qp, ah, i), "send %u", i);
		usleep(2000);
	}
	if (ah)
		CHECK(!ibv_destroy_ah(ah), "destroy_ah");
	printf("%s: %u datagrams sent\n", failures ? "FAIL" : "ok", n);
	return failures ? 1 : 0;
}

static int mode_api(void)
{
	union ibv_gid mgid, ucast, many;
	struct ibv_device_attr da;
	struct ibv_qp *rc, *reset, *tx;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	struct res r;
	int ret = res_open(&r);

	if (ret)
		return ret;
	CHECK(!ibv_query_device(r.ctx, &da), "query_device");
	CHECK(da.max_mcast_grp > 0 && da.max_mcast_qp_attach > 0 &&
		      da.max_total_mcast_qp_attach >= da.max_mcast_grp,
	      "limits %d %d %d", da.max_mcast_grp, da.max_mcast_qp_attach,
	      da.max_total_mcast_qp_attach);
	mgid_of("239.77.0.1", &mgid);
	mgid_of("127.0.0.1", &ucast);
	rc = ud_qp(&r, IBV_QPT_RC);
	reset = ud_qp(&r, IBV_QPT_UD);
	tx = ud_qp(&r, IBV_QPT_UD);
	CHECK(rc && reset && tx, "QPs");
	/* the verbs core's rules */
	CHECK(ibv_attach_mcast(rc, &mgid, 0) == EINVAL, "RC QP attached");
	CHECK(ibv_attach_mcast(r.qp, &ucast, 0) == EINVAL, "unicast GID attached");
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
		CHECK(!ibv_modify_qp(reset, &a, IBV_QP_STATE), "to RESET");
		CHECK(ibv_attach_mcast(reset, &mgid, 0) == EINVAL, "QP in RESET attached");
	}
	CHECK(ibv_detach_mcast(r.qp, &mgid, 0) == EINVAL, "detach from a group never joined");
	CHECK(!ibv_attach_mcast(r.qp, &mgid, 0), "attach");
	CHECK(!ibv_attach_mcast(r.qp, &mgid, 0), "attach again (rdmavt: 0)");
	CHECK(ibv_detach_mcast(tx, &mgid, 0) == EINVAL, "detach a QP not attached");
	CHECK(ibv_destroy_qp(r.qp) == EBUSY, "destroyed while attached");
	/* the group's datagrams reach a QP of the sending process */
	for (unsigned i = 0; i < SLOTS; i++)
		CHECK(!post_recv(&r, r.qp, i), "post_recv");
	ah = group_ah(&r, &mgid);
	CHECK(ah, "create_ah");
	for (uint32_t i = 0; ah && i < 5 && !failures; i++) {
		CHECK(!send_one(&r, tx, ah, i), "send %u", i);
		CHECK(!recv_check(&r, &mgid, &wc, now_s() + 5), "datagram %u not received", i);
	}
	/* limits: groups (a socket each) */
	for (int g = 1; g < da.max_mcast_grp; g++) {
		mgid_of("239.78.0.0", &many);
		many.raw[14] = (uint8_t)(g >> 8);
		many.raw[15] = (uint8_t)g;
		CHECK(!ibv_attach_mcast(r.qp, &many, 0), "group %d", g);
	}
	mgid_of("239.79.0.1", &many);
	CHECK(ibv_attach_mcast(r.qp, &many, 0) == ENOMEM, "more groups than max_mcast_grp");
	for (int g = 1; g < da.max_mcast_grp; g++) {
		mgid_of("239.78.0.0", &many);
		many.raw[14] = (uint8_t)(g >> 8);
		many.raw[15] = (uint8_t)g;
		CHECK(!ibv_detach_mcast(r.qp, &many, 0), "leave group %d", g);
	}
	CHECK(!ibv_detach_mcast(r.qp, &mgid, 0), "detach");
	CHECK(ibv_detach_mcast(r.qp, &mgid, 0) == EINVAL, "detach twice");
	/* left: nothing more comes */
	CHECK(ah && !send_one(&r, tx, ah, 99), "send after leaving");
	CHECK(recv_check(&r, &mgid, &wc, now_s() + 0.2), "received after leaving");
	/* and joined again, it does */
	CHECK(!ibv_attach_mcast(r.qp, &mgid, 0), "attach again");
	CHECK(ah && !send_one(&r, tx, ah, 5), "send");
	CHECK(!recv_check(&r, &mgid, &wc, now_s() + 5), "received after joining again");
	CHECK(!ibv_detach_mcast(r.qp, &mgid, 0), "detach");
	if (ah)
		ibv_destroy_ah(ah);
	CHECK(!ibv_destroy_qp(r.qp), "destroy after detach");
	ibv_destroy_qp(rc);
	ibv_destroy_qp(reset);
	ibv_destroy_qp(tx);
	printf("%s: multicast verbs\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	alarm(60);
	if (argc == 2 && !strcmp(argv[1], "api"))
		return mode_api();
	if (argc == 4 && !strcmp(argv[1], "recv"))
		return mode_recv(argv[2], (unsigned)atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "send"))
		return mode_send(argv[2], (unsigned)atoi(argv[3]));
	fprintf(stderr, "usage: vt_mcast api | recv GROUP N | send GROUP N\n");
	return 2;
}
