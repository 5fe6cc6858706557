/*
 * Modify QP (qp-semantics §5): the whole state-transition table of
 * qp-semantics §5.2 for RC, UC and UD, driven from a table written here from
 * the reference (not from the core's): first against rvt_modify_qp_is_ok for
 * every (cur, next, type, bit), then through rvt_modify_qp on real QPs in
 * every reachable state. Then the extra value checks of qp-semantics §5.1
 * step 5, RATE_LIMIT, the CUR_STATE rule, and what query_qp reports back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ut.h"

static struct ut_dev dev;
static struct rvt_pd *pd;
static struct rvt_cq *cq;

static int setup(void **state)
{
	(void)state;
	ut_open(&dev);
	pd = ut_pd(&dev);
	cq = ut_cq(&dev, 64);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(rvt_destroy_cq(cq), 0);
	assert_int_equal(rvt_dealloc_pd(pd), 0);
	ut_async_drain(&dev);
	ut_close(&dev);
	return 0;
}

/* ---------------------------------------------------------------- */
/* The expected table, from qp-semantics §5.2                       */
/* ---------------------------------------------------------------- */
#define STATE IBV_QP_STATE
#define CUR IBV_QP_CUR_STATE
#define SQDN IBV_QP_EN_SQD_ASYNC_NOTIFY
#define ACC IBV_QP_ACCESS_FLAGS
#define PKEY IBV_QP_PKEY_INDEX
#define PORT IBV_QP_PORT
#define QKEY IBV_QP_QKEY
#define AV IBV_QP_AV
#define MTU IBV_QP_PATH_MTU
#define TMO IBV_QP_TIMEOUT
#define RETRY IBV_QP_RETRY_CNT
#define RNR IBV_QP_RNR_RETRY
#define RQPSN IBV_QP_RQ_PSN
#define MAXRD IBV_QP_MAX_QP_RD_ATOMIC
#define ALT IBV_QP_ALT_PATH
#define MINRNR IBV_QP_MIN_RNR_TIMER
#define SQPSN IBV_QP_SQ_PSN
#define MAXDEST IBV_QP_MAX_DEST_RD_ATOMIC
#define MIG IBV_QP_PATH_MIG_STATE
#define CAP IBV_QP_CAP
#define DQPN IBV_QP_DEST_QPN
#define NBITS 21 /* mask bits 0..20 are the ones the state table knows */

enum { RC, UC, UD, NT };
static const enum ibv_qp_type qp_types[NT] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
static const char *const type_name[NT] = { "RC", "UC", "UD" };
/* indexed by enum ibv_qp_state; 7 (IBV_QPS_UNKNOWN) is the out-of-range case below */
static const char *const st_name[] = { "RESET", "INIT", "RTR", "RTS",
					"SQD",   "SQE",  "ERR", "UNKNOWN" };

struct tr {
	bool valid;
	int req[NT], opt[NT];
};

#define ANY { .valid = true }
#define R_ IBV_QPS_RESET
#define I_ IBV_QPS_INIT
#define RTR_ IBV_QPS_RTR
#define RTS_ IBV_QPS_RTS
#define SQD_ IBV_QPS_SQD
#define SQE_ IBV_QPS_SQE
#define E_ IBV_QPS_ERR

static const struct tr expect[7][7] = {
	[R_][R_] = ANY,
	[R_][I_] = { true, { PKEY | PORT | ACC, PKEY | PORT | ACC, PKEY | PORT | QKEY }, { 0, 0, 0 } },
	[I_][R_] = ANY,
	[I_][E_] = ANY,
	[I_][I_] = { true, { 0, 0, 0 }, { PKEY | PORT | ACC, PKEY | PORT | ACC, PKEY | PORT | QKEY } },
	[I_][RTR_] = { true,
		       { AV | MTU | DQPN | RQPSN | MAXDEST | MINRNR, AV | MTU | DQPN | RQPSN, 0 },
		       { ALT | ACC | PKEY, ALT | ACC | PKEY, PKEY | QKEY } },
	[RTR_][R_] = ANY,
	[RTR_][E_] = ANY,
	[RTR_][RTS_] = { true, { TMO | RETRY | RNR | SQPSN | MAXRD, SQPSN, SQPSN },
			 { CUR | ALT | ACC | MINRNR | MIG, CUR | ALT | ACC | MIG, CUR | QKEY } },
	[RTS_][R_] = ANY,
	[RTS_][E_] = ANY,
	[RTS_][RTS_] = { true, { 0, 0, 0 },
			 { CUR | ACC | ALT | MIG | MINRNR, CUR | ACC | ALT | MIG, CUR | QKEY } },
	[RTS_][SQD_] = { true, { 0, 0, 0 }, { SQDN, SQDN, SQDN } },
	[SQD_][R_] = ANY,
	[SQD_][E_] = ANY,
	[SQD_][RTS_] = { true, { 0, 0, 0 },
			 { CUR | ALT | ACC | MINRNR | MIG, CUR | ALT | ACC | MIG, CUR | QKEY } },
	[SQD_][SQD_] = { true, { 0, 0, 0 },
			 { PORT | AV | TMO | RETRY | RNR | MAXRD | MAXDEST | ALT | ACC | PKEY |
				   MINRNR | MIG,
			   AV | ALT | ACC | PKEY | MIG, PKEY | QKEY } },
	[SQE_][R_] = ANY,
	[SQE_][E_] = ANY,
	[SQE_][RTS_] = { true, { 0, 0, 0 }, { 0, CUR | ACC, CUR | QKEY } },
	[E_][R_] = ANY,
	[E_][E_] = ANY,
};

static void bits_name(int mask, char *out, size_t n)
{
	static const char *const nm[NBITS] = { "STATE", "CUR", "SQDN", "ACC", "PKEY", "PORT",
					       "QKEY", "AV", "MTU", "TMO", "RETRY", "RNR",
					       "RQPSN", "MAXRD", "ALT", "MINRNR", "SQPSN",
					       "MAXDEST", "MIG", "CAP", "DQPN" };
	size_t len = 0;

	out[0] = 0;
	for (int b = 0; b < NBITS && len + 10 < n; b++)
		if (mask & (1 << b))
			len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "|" : "",
						nm[b]);
}

/* ---------------------------------------------------------------- */
/* 1. rvt_modify_qp_is_ok against the expected table                 */
/* ---------------------------------------------------------------- */
static void check_is_ok(int cur, int next, int t, int mask, bool want)
{
	bool got = rvt_modify_qp_is_ok(cur, next, qp_types[t], mask);

	if (got != want) {
		char b[256];
		bits_name(mask, b, sizeof(b));
		fail_msg("%s %s->%s mask %s: is_ok %d, expected %d", type_name[t], st_name[cur],
			 st_name[next], b, got, want);
	}
}

static void test_table_is_ok(void **state)
{
	(void)state;
	for (int t = 0; t < NT; t++) {
		for (int cur = 0; cur <= IBV_QPS_ERR; cur++) {
			for (int next = 0; next <= IBV_QPS_ERR; next++) {
				const struct tr *e = &expect[cur][next];
				int req = e->req[t], opt = e->opt[t];

				if (!e->valid) {
					check_is_ok(cur, next, t, STATE, false);
					for (int b = 1; b < NBITS; b++)
						check_is_ok(cur, next, t, STATE | (1 << b), false);
					for (int u = 0; u < NT; u++)
						check_is_ok(cur, next, t, STATE | expect[1][2].req[u],
							    false);
					continue;
				}
				check_is_ok(cur, next, t, STATE | req, true);
				check_is_ok(cur, next, t, STATE | req | opt, true);
				for (int b = 1; b < NBITS; b++) {
					int bit = 1 << b;
					if (req & bit)
						check_is_ok(cur, next, t, STATE | (req & ~bit), false);
					else if (opt & bit)
						check_is_ok(cur, next, t, STATE | req | bit, true);
					else
						check_is_ok(cur, next, t, STATE | req | opt | bit, false);
				}
				/* without STATE the pair is (cur, cur) */
				if (cur == next)
					check_is_ok(cur, cur, t, req, true);
			}
		}
		/* CUR_STATE: only RTR, RTS, SQD, SQE may be named as current */
		for (int cur = 0; cur <= IBV_QPS_ERR; cur++)
			for (int next = 0; next <= IBV_QPS_ERR; next++)
				if (cur != IBV_QPS_RTR && cur != IBV_QPS_RTS &&
				    cur != IBV_QPS_SQD && cur != IBV_QPS_SQE)
					check_is_ok(cur, next, t,
						    STATE | CUR | expect[cur][next].req[t] |
							    expect[cur][next].opt[t],
						    false);
		/* states out of range */
		check_is_ok(0, 7, t, STATE, false);
		assert_false(rvt_modify_qp_is_ok(7, 0, qp_types[t], STATE));
		assert_false(rvt_modify_qp_is_ok(-1, 0, qp_types[t], STATE));
	}
}

/* ---------------------------------------------------------------- */
/* 2. The same table through rvt_modify_qp on real QPs               */
/* ---------------------------------------------------------------- */

/* Valid values for every attribute a mask bit may carry. */
static void fill_attr(struct ibv_qp_attr *a, int cur, int next)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ibv_qp_state)next;
	a->cur_qp_state = (enum ibv_qp_state)cur;
	a->en_sqd_async_notify = 1;
	a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qkey = 0x1234;
	ut_loopback_ah_attr(&dev, &a->ah_attr);
	ut_loopback_ah_attr(&dev, &a->alt_ah_attr);
	a->alt_port_num = 1;
	a->path_mtu = IBV_MTU_1024;
	a->timeout = 14;
	a->retry_cnt = 7;
	a->rnr_retry = 7;
	a->rq_psn = 100;
	a->max_rd_atomic = 4;
	a->min_rnr_timer = 12;
	a->sq_psn = 200;
	a->max_dest_rd_atomic = 4;
	a->path_mig_state = IBV_MIG_MIGRATED;
	a->dest_qp_num = 0x42;
	a->cap.max_send_wr = 4;
}

static struct rvt_qp *qp_new(int t)
{
	return ut_qp(&dev, pd, qp_types[t], cq, cq, NULL, NULL, false);
}

/* Drive a fresh QP to state s along RESET-INIT-RTR-RTS(-SQD), or ERR. */
static struct rvt_qp *qp_in(int t, int s)
{
	struct rvt_qp *qp = qp_new(t);
	struct ibv_qp_attr a;
	static const int path[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD };

	if (s == IBV_QPS_RESET)
		return qp;
	for (size_t i = 0; i < ARRAY_SIZE(path); i++) {
		int from = i ? path[i - 1] : IBV_QPS_RESET, to = path[i];
		fill_attr(&a, from, to);
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[from][to].req[t]), 0);
		if (to == s || (s == IBV_QPS_ERR && to == IBV_QPS_RTS))
			break;
	}
	if (s == IBV_QPS_ERR)
		ut_modify_state(qp, IBV_QPS_ERR);
	assert_int_equal(ut_state(qp), s);
	return qp;
}

static void try_modify(struct rvt_qp *qp, int t, int cur, int next, int mask, int want)
{
	struct ibv_qp_attr a;
	int ret;

	fill_attr(&a, cur, next);
	ret = rvt_modify_qp(qp, &a, mask);
	if (ret != want) {
		char b[256];
		bits_name(mask, b, sizeof(b));
		fail_msg("%s %s->%s mask %s: %d, expected %d", type_name[t], st_name[cur],
			 st_name[next], b, ret, want);
	}
	if (ret)
		assert_int_equal(ut_state(qp), cur);
	else
		assert_int_equal(ut_state(qp), (mask & STATE) ? next : cur);
}

static void table_real(int t)
{
	static const int reachable[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
					 IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR };

	for (size_t c = 0; c < ARRAY_SIZE(reachable); c++) {
		int cur = reachable[c];
		/* one QP collects every failing attempt (state unchanged) */
		struct rvt_qp *qp = qp_in(t, cur);

		for (int next = 0; next <= IBV_QPS_ERR; next++) {
			const struct tr *e = &expect[cur][next];
			int req = e->req[t], opt = e->opt[t];

			if (!e->valid) {
				try_modify(qp, t, cur, next, STATE, -EINVAL);
				try_modify(qp, t, cur, next, STATE | expect[1][2].req[t], -EINVAL);
				continue;
			}
			for (int b = 1; b < NBITS; b++) {
				int bit = 1 << b;
				if (req & bit)
					try_modify(qp, t, cur, next, STATE | (req & ~bit), -EINVAL);
				else if (!(opt & bit))
					try_modify(qp, t, cur, next, STATE | req | bit, -EINVAL);
			}
			/* valid: exactly the required mask, each optional bit, all
			 * of them (ALT_PATH is refused on a RoCE port: EINVAL) */
			{
				struct rvt_qp *q = qp_in(t, cur);
				try_modify(q, t, cur, next, STATE | req, 0);
				assert_int_equal(rvt_destroy_qp(q), 0);
			}
			for (int b = 1; b < NBITS; b++) {
				int bit = 1 << b;
				struct rvt_qp *q;
				if (!(opt & bit))
					continue;
				if (bit == ALT) {
					try_modify(qp, t, cur, next, STATE | req | bit, -EINVAL);
					continue;
				}
				q = qp_in(t, cur);
				try_modify(q, t, cur, next, STATE | req | bit, 0);
				assert_int_equal(rvt_destroy_qp(q), 0);
			}
			if (opt & ~ALT) {
				struct rvt_qp *q = qp_in(t, cur);
				try_modify(q, t, cur, next, STATE | req | (opt & ~ALT), 0);
				assert_int_equal(rvt_destroy_qp(q), 0);
			}
		}
		/* no STATE bit: the pair is (cur, cur) */
		if (expect[cur][cur].valid && !expect[cur][cur].req[t])
			try_modify(qp, t, cur, cur, 0, 0);
		else
			try_modify(qp, t, cur, cur, 0, -EINVAL);
		assert_int_equal(rvt_destroy_qp(qp), 0);
	}
}

static void test_table_rc(void **state)
{
	(void)state;
	table_real(RC);
}

static void test_table_uc(void **state)
{
	(void)state;
	table_real(UC);
}

static void test_table_ud(void **state)
{
	(void)state;
	table_real(UD);
}

/* CUR_STATE names the current state for the table lookup. */
static void test_cur_state_rule(void **state)
{
	struct rvt_qp *qp;
	struct ibv_qp_attr a;

	(void)state;
	for (int t = 0; t < NT; t++) {
		qp = qp_in(t, IBV_QPS_RTS);
		/* INIT may not be named as the current state */
		fill_attr(&a, IBV_QPS_INIT, IBV_QPS_INIT);
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | CUR), -EINVAL);
		/* SQE -> RTS with CUR: UC and UD yes, RC has no such option */
		fill_attr(&a, IBV_QPS_SQE, IBV_QPS_RTS);
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | CUR), t == RC ? -EINVAL : 0);
		/* RTS -> RTS naming RTS */
		fill_attr(&a, IBV_QPS_RTS, IBV_QPS_RTS);
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | CUR), 0);
		assert_int_equal(ut_state(qp), IBV_QPS_RTS);
		assert_int_equal(rvt_destroy_qp(qp), 0);
	}
}

/* ---------------------------------------------------------------- */
/* 3. qp-semantics §5.1 step 5: value checks                        */
/* ---------------------------------------------------------------- */
enum { FLD_MINRNR, FLD_RETRY, FLD_RNR, FLD_MTU, FLD_PKEY, FLD_PORT, FLD_DQPN, FLD_MAXDEST,
       FLD_MAXRD, FLD_AV_NOGRH, FLD_AV_PORT, FLD_AV_MCAST, FLD_AV_SGID, FLD_ALT, FLD_ACC,
       FLD_MIG };

struct vcase {
	const char *name;
	int from, to;         /* transition that carries the bit */
	int field;
	long val;
	int want;
};

static void set_field(struct ibv_qp_attr *a, int field, long v)
{
	switch (field) {
	case FLD_MINRNR: a->min_rnr_timer = (uint8_t)v; break;
	case FLD_RETRY: a->retry_cnt = (uint8_t)v; break;
	case FLD_RNR: a->rnr_retry = (uint8_t)v; break;
	case FLD_MTU: a->path_mtu = (enum ibv_mtu)v; break;
	case FLD_PKEY: a->pkey_index = (uint16_t)v; break;
	case FLD_PORT: a->port_num = (uint8_t)v; break;
	case FLD_DQPN: a->dest_qp_num = (uint32_t)v; break;
	case FLD_MAXDEST: a->max_dest_rd_atomic = (uint8_t)v; break;
	case FLD_MAXRD: a->max_rd_atomic = (uint8_t)v; break;
	case FLD_AV_NOGRH: a->ah_attr.is_global = (uint8_t)v; break;
	case FLD_AV_PORT: a->ah_attr.port_num = (uint8_t)v; break;
	case FLD_AV_MCAST: a->ah_attr.dlid = (uint16_t)v; break;
	case FLD_AV_SGID: a->ah_attr.grh.sgid_index = (uint8_t)v; break;
	case FLD_ALT: break;
	case FLD_ACC: a->qp_access_flags = (unsigned int)v; break;
	case FLD_MIG: a->path_mig_state = (enum ibv_mig_state)v; break;
	}
}

static void test_value_checks(void **state)
{
	int dmax = dev.rdi->dattr.max_qp_rd_atom, imax = dev.rdi->dattr.max_qp_init_rd_atom;
	const struct vcase cases[] = {
		{ "min_rnr_timer 31", I_, RTR_, FLD_MINRNR, 31, 0 },
		{ "min_rnr_timer 32", I_, RTR_, FLD_MINRNR, 32, -EINVAL },
		{ "min_rnr_timer 255", I_, RTR_, FLD_MINRNR, 255, -EINVAL },
		{ "retry_cnt 7", RTR_, RTS_, FLD_RETRY, 7, 0 },
		{ "retry_cnt 8", RTR_, RTS_, FLD_RETRY, 8, -EINVAL },
		{ "rnr_retry 7", RTR_, RTS_, FLD_RNR, 7, 0 },
		{ "rnr_retry 8", RTR_, RTS_, FLD_RNR, 8, -EINVAL },
		{ "path_mtu 0", I_, RTR_, FLD_MTU, 0, -EINVAL },
		{ "path_mtu 1", I_, RTR_, FLD_MTU, IBV_MTU_256, 0 },
		{ "path_mtu 5", I_, RTR_, FLD_MTU, IBV_MTU_4096, 0 },
		{ "path_mtu 6", I_, RTR_, FLD_MTU, 6, -EINVAL },
		{ "pkey_index 1", R_, I_, FLD_PKEY, 1, -EINVAL },
		{ "pkey_index 0xffff", R_, I_, FLD_PKEY, 0xffff, -EINVAL },
		{ "port 0", R_, I_, FLD_PORT, 0, -EINVAL },
		{ "port 2", R_, I_, FLD_PORT, 2, -EINVAL },
		{ "dest_qpn 0xffffff", I_, RTR_, FLD_DQPN, 0xffffff, 0 },
		{ "dest_qpn 0x1000000", I_, RTR_, FLD_DQPN, 0x1000000, -EINVAL },
		{ "max_dest_rd_atomic max", I_, RTR_, FLD_MAXDEST, dmax, 0 },
		{ "max_dest_rd_atomic max+1", I_, RTR_, FLD_MAXDEST, dmax + 1, -EINVAL },
		{ "max_rd_atomic max", RTR_, RTS_, FLD_MAXRD, imax, 0 },
		{ "max_rd_atomic max+1", RTR_, RTS_, FLD_MAXRD, imax + 1, -EINVAL },
		{ "AV without GRH", I_, RTR_, FLD_AV_NOGRH, 0, -EINVAL },
		{ "AV port 0", I_, RTR_, FLD_AV_PORT, 0, -EINVAL },
		{ "AV port 2", I_, RTR_, FLD_AV_PORT, 2, -EINVAL },
		{ "AV multicast dlid", I_, RTR_, FLD_AV_MCAST, 0xc000, -EINVAL },
		{ "AV sgid_index 1", I_, RTR_, FLD_AV_SGID, 1, -EINVAL },
		{ "ALT_PATH on RoCE", I_, RTR_, FLD_ALT, 0, -EINVAL },
		{ "path_mig_state ARMED", RTR_, RTS_, FLD_MIG, IBV_MIG_ARMED, -EINVAL },
		{ "path_mig_state REARM", RTR_, RTS_, FLD_MIG, IBV_MIG_REARM, 0 },
		{ "path_mig_state 7", RTR_, RTS_, FLD_MIG, 7, -EINVAL },
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct vcase *c = &cases[i];
		struct rvt_qp *qp = qp_in(RC, c->from);
		struct ibv_qp_attr a, before, after;
		int mask = STATE | expect[c->from][c->to].req[RC], ret;

		if (c->field == FLD_ALT)
			mask |= ALT;
		if (c->field == FLD_MIG)
			mask |= MIG;
		if (c->field == FLD_PKEY)
			mask |= PKEY;
		assert_int_equal(rvt_query_qp(qp, &before, 0, NULL), 0);
		fill_attr(&a, c->from, c->to);
		set_field(&a, c->field, c->val);
		ret = rvt_modify_qp(qp, &a, mask);
		if (ret != c->want)
			fail_msg("%s: %d, expected %d", c->name, ret, c->want);
		assert_int_equal(rvt_query_qp(qp, &after, 0, NULL), 0);
		if (ret) {
			/* nothing changed */
			assert_int_equal(after.qp_state, c->from);
			assert_int_equal(after.min_rnr_timer, before.min_rnr_timer);
			assert_int_equal(after.dest_qp_num, before.dest_qp_num);
			assert_int_equal(after.rq_psn, before.rq_psn);
			assert_int_equal(after.sq_psn, before.sq_psn);
			assert_int_equal(after.retry_cnt, before.retry_cnt);
			assert_int_equal(after.qp_access_flags, before.qp_access_flags);
		} else {
			assert_int_equal(after.qp_state, c->to);
		}
		assert_int_equal(rvt_destroy_qp(qp), 0);
	}
	/* UD: the port and P_Key checks apply to RESET -> INIT as well */
	{
		struct rvt_qp *qp = qp_new(UD);
		struct ibv_qp_attr a;
		fill_attr(&a, R_, I_);
		a.port_num = 2;
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | PKEY | PORT | QKEY), -EINVAL);
		a.port_num = 1;
		a.pkey_index = 1;
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | PKEY | PORT | QKEY), -EINVAL);
		a.pkey_index = 0;
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | PKEY | PORT | QKEY), 0);
		assert_int_equal(rvt_destroy_qp(qp), 0);
	}
}

/* Mask bits past DEST_QPN (RATE_LIMIT and others): EOPNOTSUPP, first. */
static void test_rate_limit(void **state)
{
	struct ibv_qp_attr a;

	(void)state;
	for (int t = 0; t < NT; t++) {
		struct rvt_qp *qp = qp_in(t, IBV_QPS_RTS);
		fill_attr(&a, IBV_QPS_RTS, IBV_QPS_RTS);
		a.rate_limit = 1000;
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | IBV_QP_RATE_LIMIT), -EOPNOTSUPP);
		assert_int_equal(rvt_modify_qp(qp, &a, IBV_QP_RATE_LIMIT), -EOPNOTSUPP);
		/* even where the table would say EINVAL */
		fill_attr(&a, IBV_QPS_RTS, IBV_QPS_INIT);
		assert_int_equal(rvt_modify_qp(qp, &a, STATE | IBV_QP_RATE_LIMIT), -EOPNOTSUPP);
		for (int b = NBITS; b < 31; b++)
			assert_int_equal(rvt_modify_qp(qp, &a, STATE | (1 << b)), -EOPNOTSUPP);
		assert_int_equal(ut_state(qp), IBV_QPS_RTS);
		assert_int_equal(rvt_destroy_qp(qp), 0);
	}
}

/* ---------------------------------------------------------------- */
/* 4. query_qp returns what was set                                  */
/* ---------------------------------------------------------------- */
static void test_query_after_modify(void **state)
{
	struct rvt_qp *qp = qp_new(RC);
	struct ibv_qp_attr a, q;
	int active = dev.rdi->port_attr.active_mtu;

	(void)state;
	fill_attr(&a, R_, I_);
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[R_][I_].req[RC]), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.qp_state, IBV_QPS_INIT);
	assert_int_equal(q.qp_access_flags, IBV_ACCESS_REMOTE_READ);
	assert_int_equal(q.port_num, 1);
	/* qp-semantics §5.1: rdmavt stores access flags as given, unknown bits
	 * included */
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ | 0x4000;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | IBV_QP_ACCESS_FLAGS), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.qp_access_flags, IBV_ACCESS_REMOTE_READ | 0x4000);
	assert_int_equal(q.pkey_index, 0);

	fill_attr(&a, I_, RTR_);
	a.path_mtu = IBV_MTU_4096;
	a.rq_psn = 0x7abcdef1;
	a.dest_qp_num = 0xfedcba;
	a.max_dest_rd_atomic = 3;
	a.min_rnr_timer = 19;
	a.ah_attr.grh.hop_limit = 7;
	a.ah_attr.grh.traffic_class = 0x20;
	a.ah_attr.sl = 2;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[I_][RTR_].req[RC]), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.qp_state, IBV_QPS_RTR);
	/* path MTU = min(requested, port active) */
	assert_int_equal(q.path_mtu, IBV_MTU_4096 < active ? IBV_MTU_4096 : active);
	assert_int_equal(q.rq_psn, 0xbcdef1);
	assert_int_equal(q.dest_qp_num, 0xfedcba);
	assert_int_equal(q.max_dest_rd_atomic, 3);
	assert_int_equal(q.min_rnr_timer, 19);
	assert_int_equal(q.ah_attr.is_global, 1);
	assert_int_equal(q.ah_attr.port_num, 1);
	assert_int_equal(q.ah_attr.grh.hop_limit, 7);
	assert_int_equal(q.ah_attr.grh.traffic_class, 0x20);
	assert_int_equal(q.ah_attr.sl, 2);
	assert_memory_equal(q.ah_attr.grh.dgid.raw, dev.rdi->gid.raw, 16);

	fill_attr(&a, RTR_, RTS_);
	a.sq_psn = 0xff123456;
	a.timeout = 18;
	a.retry_cnt = 5;
	a.rnr_retry = 6;
	a.max_rd_atomic = 2;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[RTR_][RTS_].req[RC] | ACC), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.qp_state, IBV_QPS_RTS);
	assert_int_equal(q.sq_psn, 0x123456);
	assert_int_equal(q.timeout, 18);
	assert_int_equal(q.retry_cnt, 5);
	assert_int_equal(q.rnr_retry, 6);
	assert_int_equal(q.max_rd_atomic, 2);
	assert_int_equal(q.qp_access_flags, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	assert_int_equal(q.rq_psn, 0xbcdef1);
	assert_int_equal(q.min_rnr_timer, 19);

	/* a smaller MTU than the port's is kept as requested (SQD -> SQD) */
	ut_modify_state(qp, IBV_QPS_SQD);
	fill_attr(&a, SQD_, SQD_);
	a.min_rnr_timer = 3;
	a.timeout = 9;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | MINRNR | TMO), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.qp_state, IBV_QPS_SQD);
	assert_int_equal(q.min_rnr_timer, 3);
	assert_int_equal(q.timeout, 9);
	/* TIMEOUT is not validated (qp-semantics §5.1): above 31 it is accepted,
	 * clamped for the timer only, and query reports the configured value
	 * (qp-semantics §6.2) */
	a.timeout = 40;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | TMO), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.timeout, 40);
	assert_int_equal(qp->timeout_ns, 4096ull << 31);
	a.timeout = 0; /* 0: no retransmit timer (IBTA/rxe decision) */
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | TMO), 0);
	assert_int_equal(qp->timeout_ns, 0);

	/* RESET puts the qp-semantics §4.2 values back */
	ut_modify_state(qp, IBV_QPS_RESET);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.qp_state, IBV_QPS_RESET);
	assert_int_equal(q.dest_qp_num, 0);
	assert_int_equal(q.qkey, 0);
	assert_int_equal(q.qp_access_flags, 0);
	assert_int_equal(q.sq_psn, 0);
	assert_int_equal(q.rq_psn, 0);
	assert_int_equal(rvt_destroy_qp(qp), 0);

	/* UD: qkey; path MTU below the port's */
	qp = qp_new(UD);
	fill_attr(&a, R_, I_);
	a.qkey = 0x80000001u;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[R_][I_].req[UD]), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.qkey, 0x80000001u);
	assert_int_equal(rvt_destroy_qp(qp), 0);

	qp = qp_new(UC);
	fill_attr(&a, R_, I_);
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[R_][I_].req[UC]), 0);
	fill_attr(&a, I_, RTR_);
	a.path_mtu = IBV_MTU_256;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[I_][RTR_].req[UC]), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.path_mtu, IBV_MTU_256);
	assert_int_equal(rvt_destroy_qp(qp), 0);
}

/* sq_psn reports the PSN the next posted WR will get (qp-semantics §6.2). */
static void test_query_sq_psn_after_post(void **state)
{
	struct rvt_qp *qp = qp_new(UC);
	static uint8_t buf[4096];
	struct rvt_mregion *mr = ut_mr(pd, buf, sizeof(buf), 0);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .lkey = mr->ibmr.lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND };
	struct ibv_qp_attr a, q;
	struct ibv_wc wc[4];
	uint32_t pmtu;

	(void)state;
	fill_attr(&a, R_, I_);
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[R_][I_].req[UC]), 0);
	fill_attr(&a, I_, RTR_);
	a.dest_qp_num = qp->qpn;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[I_][RTR_].req[UC]), 0);
	fill_attr(&a, RTR_, RTS_);
	a.sq_psn = 0xfffffe;
	assert_int_equal(rvt_modify_qp(qp, &a, STATE | expect[RTR_][RTS_].req[UC]), 0);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.sq_psn, 0xfffffe);
	pmtu = 128u << q.path_mtu;
	/* 0 bytes: one PSN; pmtu+1 bytes: two PSNs (wraps past 2^24) */
	sge.length = 0;
	ut_post_send(qp, &wr);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.sq_psn, 0xffffff);
	sge.length = pmtu + 1;
	ut_post_send(qp, &wr);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.sq_psn, 1);
	sge.length = 3 * pmtu;
	ut_post_send(qp, &wr);
	assert_int_equal(rvt_query_qp(qp, &q, 0, NULL), 0);
	assert_int_equal(q.sq_psn, 4);
	ut_poll(cq, wc, 4, 50);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	assert_int_equal(rvt_dereg_mr(mr), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_is_ok),
		cmocka_unit_test(test_table_rc),
		cmocka_unit_test(test_table_uc),
		cmocka_unit_test(test_table_ud),
		cmocka_unit_test(test_cur_state_rule),
		cmocka_unit_test(test_value_checks),
		cmocka_unit_test(test_rate_limit),
		cmocka_unit_test(test_query_after_modify),
		cmocka_unit_test(test_query_sq_psn_after_post),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
