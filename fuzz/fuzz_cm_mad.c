/*
 * libFuzzer harness for the IB CM (docs/rdmacm.md): MADs into cm_recv_mad, the
 * one entry point of everything the GSI QP receives, on a CM that has
 * connections in every state.
 *
 * Setup (per input, deterministic): two CM devices A (under test) and B
 * (its honest peer) in one process, joined by a queue instead of QP1, with
 * listeners on both and connections between them brought by real
 * exchanges into ESTABLISHED (both directions), REQ_SENT, MRA_REQ_SENT,
 * REQ_RCVD, REP_SENT, REP_RCVD, SIDR_REQ_SENT, DREQ_SENT, DREQ_RCVD and
 * TIMEWAIT. Timers are long enough (seconds) not to fire during a run.
 *
 * Then a sequence of records, each one of: raw bytes of any length (to A,
 * from the peer's GID, a stranger's or A's own); a well-formed message of
 * any CM type built for one of the connections (or with random IDs) with
 * byte mutations; a REQ flood; delivering what A and B sent each other;
 * a user call on one of A's ids; a message B sent earlier, again.
 *
 * Checked after every MAD: a forged one (from a stranger, or naming none
 * of A's connections by its comm IDs) changes no existing id's state or
 * remote ID and raises no event on it; A answers a MAD with at most one
 * MAD (two for a stale connection); A's cm_id count stays bounded (REQs
 * beyond the harness's backlog are dropped by the handler, as the
 * rdma_cm's listen backlog does). ASan/UBSan catch the rest; destroying
 * both devices frees everything (LeakSanitizer).
 *
 * Built with -DCM_FUZZ_STANDALONE it has a main() instead: the files named
 * on the command line, then a fixed number of pseudo-random inputs (the
 * rdmacm test cm_fuzz_replay, so the checks run in every build).
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/compiler.h"
#include "base/progress.h"
#include "fuzz_reader.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_msgs.h"

#define QMAX 512          /* MADs in flight between A and B */
#define NHID 192          /* ids the harness owns */
#define BACKLOG 48        /* new passive ids kept per input; more are dropped */
#define MAX_RECORDS 96
#define MAX_IDS 1024      /* bound on A's cm_id count */

enum { DEV_A, DEV_B, ELSEWHERE };

/* service IDs (rdma_cm TCP port space) and what the listener does */
#define SID(port) (((uint64_t)0x0106 << 16) + (port))
#define SID_AUTO SID(1)   /* REP at once */
#define SID_HOLD SID(2)   /* keep the REQ (A: MRA, delayed) */
#define SID_SIDR_HOLD SID(3)
#define SID_SIDR_AUTO SID(4)

struct hid {
	struct ib_cm_id *id;
	int dev;
	bool live;
	bool auto_rep, auto_rtu, auto_drep, mra; /* what to answer */
	bool listener;
	unsigned int gen;        /* the MAD during which it was made */
	union ibv_gid peer;      /* where its connection's MADs come from */
};

struct qmsg {
	int to;
	union ibv_gid from;
	struct cm_mad m;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct urvt_progress *prog;
static struct cm_device *dev[2];
static union ibv_gid gid[2], stranger;
static const uint64_t guid[2] = { 0x0200aafffe000001ull, 0x0200bbfffe000002ull };

static struct qmsg q[QMAX];
static unsigned int qn;
static struct cm_mad sent_by_b[16];     /* for replays */
static unsigned int n_sent_by_b;
static uint64_t a_sent;

static struct hid hids[NHID];
static unsigned int n_new_passive;
static unsigned int gen;
static unsigned int ev_old;             /* events on ids older than this MAD */
static unsigned int ev_other;           /* ... whose peer is not the MAD's sender */
static const union ibv_gid *cur_src;
static int last_ev = -1, last_state = -1; /* for the failure message */
static uint16_t last_attr;

static void die(const char *why)
{
	fprintf(stderr, "fuzz_cm_mad: %s (MAD 0x%04x; last event %d, id now %d)\n", why,
		last_attr, last_ev, last_state);
	abort();
}

static bool gid_eq(const union ibv_gid *a, const union ibv_gid *b)
{
	return !memcmp(a->raw, b->raw, sizeof(a->raw));
}

static void mkgid(union ibv_gid *g, uint8_t last)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	g->raw[12] = 10;
	g->raw[15] = last;
}

/* cm_dev_ops.send: under the CM lock (the caller's or a timer's) */
static int sink_send(void *ctx, const union ibv_gid *dgid, const struct cm_mad *m)
{
	int from = (int)(intptr_t)ctx;
	int to = gid_eq(dgid, &gid[DEV_A]) ? DEV_A : gid_eq(dgid, &gid[DEV_B]) ? DEV_B : ELSEWHERE;

	if (from == DEV_A)
		a_sent++;
	if (from == DEV_B) {
		sent_by_b[n_sent_by_b % 16] = *m;
		n_sent_by_b++;
	}
	if (to == ELSEWHERE || qn == QMAX)
		return 0; /* a lossy network */
	q[qn].to = to;
	q[qn].from = gid[from];
	q[qn].m = *m;
	qn++;
	return 0;
}

static const struct cm_dev_ops sink_ops = { .send = sink_send };

static struct hid *hid_new(int d)
{
	for (unsigned int i = 0; i < NHID; i++)
		if (!hids[i].live) {
			memset(&hids[i], 0, sizeof(hids[i]));
			hids[i].live = true;
			hids[i].dev = d;
			hids[i].gen = gen;
			return &hids[i];
		}
	return NULL;
}

/* The users of both CMs: answer as each id's flags say. Nonzero drops the id. */
static int handler(struct ib_cm_id *id, const struct ib_cm_event *ev)
{
	struct hid *h = id->context;

	/* (a new connection comes to its listener's context) */
	if (h->gen < gen && ev->event != IB_CM_REQ_RECEIVED &&
	    ev->event != IB_CM_SIDR_REQ_RECEIVED) {
		ev_old++;
		if (cur_src && !gid_eq(&h->peer, cur_src))
			ev_other++;
		last_ev = ev->event;
		last_state = id->state;
	}
	switch (ev->event) {
	case IB_CM_REQ_RECEIVED:
	case IB_CM_SIDR_REQ_RECEIVED: {
		struct hid *l = h, *n;

		if (n_new_passive >= BACKLOG || !(n = hid_new(l->dev)))
			return -ENOMEM; /* as a full listen backlog */
		n_new_passive++;
		n->id = id;
		n->auto_rep = id->service_id == SID_AUTO || id->service_id == SID_SIDR_AUTO;
		n->mra = l->mra;
		n->auto_drep = true;
		n->peer = ev->event == IB_CM_REQ_RECEIVED ? ev->param.req_rcvd.src_gid
							  : ev->param.sidr_req_rcvd.src_gid;
		id->context = n;
		if (ev->event == IB_CM_SIDR_REQ_RECEIVED) {
			if (n->auto_rep) {
				struct ib_cm_sidr_rep_param rp = { .qp_num = 0x99, .qkey = 0x1234 };
				ib_send_cm_sidr_rep(id, &rp);
			}
			return 0;
		}
		if (n->auto_rep) {
			struct ib_cm_rep_param rp = { .qp_num = 0x200 + (uint32_t)(n - hids),
						      .starting_psn = 7, .rnr_retry_count = 7 };
			ib_send_cm_rep(id, &rp);
		} else if (n->mra) {
			ib_send_cm_mra(id, IB_CM_MRA_FLAG_DELAY | 24, NULL, 0);
		}
		return 0;
	}
	case IB_CM_REP_RECEIVED:
		if (h->auto_rtu)
			ib_send_cm_rtu(id, NULL, 0);
		return 0;
	case IB_CM_DREQ_RECEIVED:
		if (h->auto_drep)
			ib_send_cm_drep(id, NULL, 0);
		return 0;
	default:
		return 0;
	}
}

/* ------------------------------------------------------------------ */
/* Delivery and checks                                                */
/* ------------------------------------------------------------------ */

struct snap {
	enum ib_cm_state state;
	uint32_t remote_id;
	bool live;
	union ibv_gid peer;
};

static void snapshot(struct snap *s)
{
	for (unsigned int i = 0; i < NHID; i++) {
		s[i].live = hids[i].live && hids[i].dev == DEV_A;
		if (s[i].live) {
			s[i].state = hids[i].id->state;
			s[i].remote_id = hids[i].id->remote_id;
			s[i].peer = hids[i].peer;
		}
	}
}

/* Has the peer told id its comm ID (passive ids at once, active ones by
 * the REP)? */
static bool remote_id_known(const struct ib_cm_id *id)
{
	switch (id->state) {
	case IB_CM_IDLE:
	case IB_CM_LISTEN:
	case IB_CM_REQ_SENT:
	case IB_CM_MRA_REQ_RCVD:
	case IB_CM_SIDR_REQ_SENT:
		return id->remote_id != 0;
	default:
		return true;
	}
}

/* Does the MAD name one of A's connections with src by its comm IDs?
 * Loose on purpose (either ID suffices): "forged" must never be a false
 * alarm. */
static bool names_a_connection(const uint8_t *buf, size_t len, const union ibv_gid *src)
{
	const struct cm_mad *m = (const void *)buf;
	uint32_t first, second;

	if (len < CM_MAD_SIZE)
		return false;
	first = (uint32_t)cm_get(m, CM_RTU_LOCAL_COMM_ID);
	second = (uint32_t)cm_get(m, CM_RTU_REMOTE_COMM_ID);
	for (unsigned int i = 0; i < NHID; i++) {
		struct ib_cm_id *id = hids[i].id;

		if (!hids[i].live || hids[i].dev != DEV_A || hids[i].listener ||
		    !gid_eq(&hids[i].peer, src))
			continue;
		/* SIDR_REP: the request ID comes first. A remote ID of 0 is
		 * a real one once the peer gave it (0 is a valid comm ID). */
		if (id->local_id == first || id->local_id == second ||
		    (remote_id_known(id) && id->remote_id == first))
			return true;
	}
	return false;
}

/*
 * One MAD into A, from src, with the checks: a MAD from src changes (and
 * raises events on) only src's connections; one that names none of them
 * (and makes none: not a REQ / SIDR_REQ) changes nothing at all.
 */
static void deliver_to_a(const uint8_t *buf, size_t len, const union ibv_gid *src)
{
	static struct snap before[NHID];
	uint16_t attr = len >= 18 ? (uint16_t)(buf[16] << 8 | buf[17]) : 0;
	bool creates = attr == CM_REQ_ATTR_ID || attr == CM_SIDR_REQ_ATTR_ID;
	/* a REQ or REP naming a connection of ours as stale: REJ and DREQ */
	bool stale = attr == CM_REQ_ATTR_ID || attr == CM_REP_ATTR_ID;
	bool forged;
	uint64_t sent0;

	pthread_mutex_lock(&lock);
	last_attr = attr;
	snapshot(before);
	forged = !creates && !names_a_connection(buf, len, src);
	gen++;
	ev_old = ev_other = 0;
	cur_src = src;
	sent0 = a_sent;
	cm_recv_mad(dev[DEV_A], buf, len, src);
	cur_src = NULL;
	if (a_sent - sent0 > (stale ? 2u : 1u))
		die("one MAD answered with more than one");
	if (ev_other || (forged && ev_old))
		die("a forged MAD raised an event on an existing id");
	for (unsigned int i = 0; i < NHID; i++) {
		if (!before[i].live || (!forged && gid_eq(&before[i].peer, src)))
			continue;
		if (!hids[i].live || hids[i].id->state != before[i].state ||
		    hids[i].id->remote_id != before[i].remote_id)
			die("a forged MAD changed an existing id");
	}
	if (cm_device_counters(dev[DEV_A])->ids > MAX_IDS)
		die("cm_id count unbounded");
	pthread_mutex_unlock(&lock);
}

/* Hand over what A and B sent each other (at most max MADs). */
static void pump(unsigned int max)
{
	pthread_mutex_lock(&lock);
	for (unsigned int n = 0; n < max && qn; n++) {
		struct qmsg m = q[0];

		memmove(&q[0], &q[1], (qn - 1) * sizeof(q[0]));
		qn--;
		gen++;
		cm_recv_mad(dev[m.to], m.m.raw, CM_MAD_SIZE, &m.from);
	}
	pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ */
/* Setup                                                              */
/* ------------------------------------------------------------------ */

static struct cm_path path_to(int d)
{
	struct cm_path p;

	memset(&p, 0, sizeof(p));
	p.sgid = gid[!d];
	p.dgid = gid[d];
	p.pkey = 0xffff;
	p.hop_limit = 64;
	p.mtu = IBV_MTU_1024;
	p.packet_life_time = 18;  /* timewait: 2^(19-8) ms */
	return p;
}

static struct hid *mkid(int d)
{
	struct hid *h = hid_new(d);
	int err;

	if (!h)
		die("hid table full in setup");
	h->id = ib_create_cm_id(dev[d], handler, h, &err);
	if (!h->id)
		die("ib_create_cm_id");
	return h;
}

static void listen_on(int d, uint64_t sid, bool mra)
{
	struct hid *h = mkid(d);

	h->listener = true;
	h->mra = mra;
	if (ib_cm_listen(h->id, sid))
		die("listen");
}

/* An active connection from d; returns its hid. */
static struct hid *connect_from(int d, uint64_t sid, bool auto_rtu, uint32_t qpn)
{
	struct hid *h = mkid(d);
	struct cm_path p = path_to(!d);
	struct ib_cm_req_param rq = {
		.primary_path = &p, .service_id = sid, .qp_num = qpn, .qp_type = IBV_QPT_RC,
		.starting_psn = 5, .responder_resources = 4, .initiator_depth = 4,
		.remote_cm_response_timeout = 20, .local_cm_response_timeout = 20,
		.retry_count = 7, .rnr_retry_count = 7, .max_cm_retries = 15,
	};

	h->auto_rtu = auto_rtu;
	h->auto_drep = true;
	h->peer = gid[!d];
	if (ib_send_cm_req(h->id, &rq))
		die("req");
	return h;
}

/* the passive id that answers active id a (on the other device) */
static struct hid *peer_of(struct hid *a)
{
	for (unsigned int i = 0; i < NHID; i++)
		if (hids[i].live && hids[i].dev != a->dev && !hids[i].listener &&
		    hids[i].id->remote_id == a->id->local_id)
			return &hids[i];
	return NULL;
}

/* The states setup() is there to make: if one is missing, the harness
 * has rotted and would fuzz less than it claims. */
static void check_setup(void)
{
	static const enum ib_cm_state want[] = {
		IB_CM_ESTABLISHED, IB_CM_REQ_SENT, IB_CM_MRA_REQ_SENT, IB_CM_REP_RCVD,
		IB_CM_REP_SENT, IB_CM_SIDR_REQ_SENT, IB_CM_DREQ_SENT, IB_CM_DREQ_RCVD,
		IB_CM_TIMEWAIT, IB_CM_LISTEN,
	};
	unsigned int n[IB_CM_NSTATES] = { 0 };

	for (unsigned int i = 0; i < NHID; i++)
		if (hids[i].live && hids[i].dev == DEV_A)
			n[hids[i].id->state]++;
	for (unsigned int i = 0; i < ARRAY_SIZE(want); i++)
		if (!n[want[i]]) {
			fprintf(stderr, "fuzz_cm_mad: no id of A in %s after setup\n",
				ib_cm_state_str[want[i]]);
			abort();
		}
	if (n[IB_CM_ESTABLISHED] < 2)
		die("setup: fewer than two established connections");
}

static void setup(void)
{
	struct hid *h, *p;
	int err;

	memset(hids, 0, sizeof(hids));
	qn = 0;
	n_sent_by_b = 0;
	n_new_passive = 0;
	for (int d = 0; d < 2; d++) {
		dev[d] = cm_device_create(&sink_ops, (void *)(intptr_t)d, prog, &lock, &gid[d],
					  guid[d], 15, &err);
		if (!dev[d])
			die("cm_device_create");
	}
	pthread_mutex_lock(&lock);
	listen_on(DEV_A, SID_AUTO, false);
	listen_on(DEV_A, SID_HOLD, true);
	listen_on(DEV_B, SID_AUTO, false);
	listen_on(DEV_B, SID_HOLD, false);
	listen_on(DEV_B, SID_SIDR_HOLD, false);
	listen_on(DEV_B, SID_SIDR_AUTO, false);

	connect_from(DEV_A, SID_AUTO, true, 0x101);          /* ESTABLISHED (A active) */
	connect_from(DEV_B, SID_AUTO, true, 0x102);          /* ESTABLISHED (A passive) */
	connect_from(DEV_A, SID_HOLD, true, 0x103);          /* A REQ_SENT */
	connect_from(DEV_B, SID_HOLD, true, 0x104);          /* A MRA_REQ_SENT */
	connect_from(DEV_A, SID_AUTO, false, 0x105);         /* A REP_RCVD */
	connect_from(DEV_B, SID_AUTO, false, 0x106);         /* A REP_SENT */
	h = connect_from(DEV_A, SID_AUTO, true, 0x107);      /* to DREQ_SENT */
	p = connect_from(DEV_B, SID_AUTO, true, 0x108);      /* to DREQ_RCVD */
	{
		struct hid *t = connect_from(DEV_A, SID_AUTO, true, 0x109); /* to TIMEWAIT */
		struct hid *s = mkid(DEV_A);                               /* SIDR_REQ_SENT */

		struct cm_path sp = path_to(DEV_B);
		struct ib_cm_sidr_req_param sr = { .path = &sp, .service_id = SID_SIDR_HOLD,
						   .timeout_ms = 5000, .max_cm_retries = 3 };

		s->peer = gid[DEV_B];
		if (ib_send_cm_sidr_req(s->id, &sr))
			die("sidr");
		pthread_mutex_unlock(&lock);
		pump(1000);
		pthread_mutex_lock(&lock);
		/* the passive sides of h, t hold nothing; of p: A holds the DREQ */
		peer_of(h)->auto_drep = false;
		for (unsigned int i = 0; i < NHID; i++)
			if (hids[i].live && hids[i].dev == DEV_A && !hids[i].listener &&
			    hids[i].id->remote_id == p->id->local_id)
				hids[i].auto_drep = false;
		if (ib_send_cm_dreq(h->id, NULL, 0) || ib_send_cm_dreq(p->id, NULL, 0) ||
		    ib_send_cm_dreq(t->id, NULL, 0))
			die("dreq");
	}
	pthread_mutex_unlock(&lock);
	pump(1000);
	n_new_passive = 0;
	check_setup();
}

static void teardown(void)
{
	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < NHID; i++)
		if (hids[i].live) {
			hids[i].live = false;
			ib_destroy_cm_id(hids[i].id);
		}
	qn = 0;
	pthread_mutex_unlock(&lock);
	for (int d = 0; d < 2; d++)
		cm_device_destroy(dev[d]);
	qn = 0;
}

/* ------------------------------------------------------------------ */
/* Records                                                            */
/* ------------------------------------------------------------------ */

static const union ibv_gid *pick_src(uint8_t c)
{
	switch (c % 4) {
	case 0:
	case 1:
		return &gid[DEV_B];
	case 2:
		return &stranger;
	default:
		return &gid[DEV_A];
	}
}

/* A's non-listener ids, for records that name a connection */
static struct hid *pick_a(uint8_t c)
{
	unsigned int n = 0, k;

	for (unsigned int i = 0; i < NHID; i++)
		n += hids[i].live && hids[i].dev == DEV_A && !hids[i].listener;
	if (!n)
		return NULL;
	k = c % n;
	for (unsigned int i = 0; i < NHID; i++)
		if (hids[i].live && hids[i].dev == DEV_A && !hids[i].listener && !k--)
			return &hids[i];
	return NULL;
}

static const uint16_t attrs[] = {
	CM_REQ_ATTR_ID, CM_MRA_ATTR_ID, CM_REJ_ATTR_ID, CM_REP_ATTR_ID, CM_RTU_ATTR_ID,
	CM_DREQ_ATTR_ID, CM_DREP_ATTR_ID, CM_SIDR_REQ_ATTR_ID, CM_SIDR_REP_ATTR_ID,
	CM_LAP_ATTR_ID, CM_APR_ATTR_ID,
};

/* A message of type attr as A's peer would send it for connection h
 * (h NULL: IDs from the input). */
static void build(struct cm_mad *m, uint16_t attr, struct hid *h, struct reader *r)
{
	uint32_t ours = h ? h->id->local_id : u32(r);
	uint32_t theirs = h ? h->id->remote_id : u32(r);
	uint8_t sel = u8(r);

	cm_mad_init(m, attr, (uint64_t)u32(r) << 32 | ours);
	switch (attr) {
	case CM_REQ_ATTR_ID: {
		struct cm_path p = path_to(DEV_A);

		cm_set(m, CM_REQ_LOCAL_COMM_ID, theirs ? theirs : u32(r));
		cm_set(m, CM_REQ_SERVICE_ID, sel & 1 ? SID_AUTO : sel & 2 ? SID_HOLD : SID(u16(r)));
		cm_set(m, CM_REQ_LOCAL_CA_GUID, sel & 4 ? guid[DEV_B] : u32(r));
		cm_set(m, CM_REQ_LOCAL_QPN, sel & 8 ? 0x101u + (sel >> 4u) : u32(r));
		cm_set(m, CM_REQ_TRANSPORT_SERVICE_TYPE, (sel >> 6) & 3);
		cm_set(m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, 20);
		cm_set(m, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT, 20);
		cm_set(m, CM_REQ_MAX_CM_RETRIES, 15);
		cm_set(m, CM_REQ_PATH_PACKET_PAYLOAD_MTU, IBV_MTU_1024);
		cm_set(m, CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT, 19);
		memcpy(cm_data(m) + CM_REQ_PRIMARY_LOCAL_PORT_GID, gid[DEV_B].raw, 16);
		memcpy(cm_data(m) + CM_REQ_PRIMARY_REMOTE_PORT_GID, p.dgid.raw, 16);
		break;
	}
	case CM_SIDR_REQ_ATTR_ID:
		cm_set(m, CM_SIDR_REQ_REQUESTID, u32(r));
		cm_set(m, CM_SIDR_REQ_SERVICEID, sel & 1 ? SID_SIDR_AUTO : SID(u16(r)));
		break;
	case CM_SIDR_REP_ATTR_ID:
		cm_set(m, CM_SIDR_REP_REQUESTID, ours);
		cm_set(m, CM_SIDR_REP_STATUS, sel % 6);
		cm_set(m, CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH, u8(r));
		cm_set(m, CM_SIDR_REP_QPN, u32(r));
		break;
	case CM_REP_ATTR_ID:
		cm_set(m, CM_REP_LOCAL_COMM_ID, theirs ? theirs : u32(r));
		cm_set(m, CM_REP_REMOTE_COMM_ID, ours);
		cm_set(m, CM_REP_LOCAL_QPN, sel & 1 ? 0x105 : u32(r));
		cm_set(m, CM_REP_LOCAL_CA_GUID, sel & 2 ? guid[DEV_B] : u32(r));
		cm_set(m, CM_REP_RESPONDER_RESOURCES, u8(r));
		cm_set(m, CM_REP_INITIATOR_DEPTH, u8(r));
		break;
	case CM_REJ_ATTR_ID:
		cm_set(m, CM_REJ_LOCAL_COMM_ID, theirs);
		cm_set(m, CM_REJ_REMOTE_COMM_ID, ours);
		cm_set(m, CM_REJ_MESSAGE_REJECTED, sel % 3);
		cm_set(m, CM_REJ_REASON, sel & 4 ? IB_CM_REJ_TIMEOUT : sel >> 3);
		cm_set(m, CM_REJ_REJECTED_INFO_LENGTH, u8(r));
		if (sel & 4) {
			uint64_t g = htobe64(guid[DEV_B]);
			memcpy(cm_data(m) + CM_REJ_ARI, &g, 8);
		}
		break;
	case CM_MRA_ATTR_ID:
		cm_set(m, CM_MRA_LOCAL_COMM_ID, theirs);
		cm_set(m, CM_MRA_REMOTE_COMM_ID, ours);
		cm_set(m, CM_MRA_MESSAGE_MRAED, sel % 4);
		cm_set(m, CM_MRA_SERVICE_TIMEOUT, u8(r));
		break;
	case CM_DREQ_ATTR_ID:
		cm_set(m, CM_DREQ_LOCAL_COMM_ID, theirs);
		cm_set(m, CM_DREQ_REMOTE_COMM_ID, ours);
		cm_set(m, CM_DREQ_REMOTE_QPN_EECN, sel & 1 ? u32(r) : 0x101u + (sel >> 1u) % 16u);
		break;
	default: /* RTU, DREP, LAP, APR: the IDs */
		cm_set(m, CM_RTU_LOCAL_COMM_ID, theirs);
		cm_set(m, CM_RTU_REMOTE_COMM_ID, ours);
		break;
	}
}

static void op_user(struct reader *r)
{
	struct hid *h;
	uint8_t what = u8(r);
	uint8_t which = u8(r);
	static const uint8_t pdata[224];

	pthread_mutex_lock(&lock);
	h = pick_a(which);
	if (!h)
		goto out;
	gen++;
	switch (what % 10) {
	case 0:
		h->live = false;
		ib_destroy_cm_id(h->id);
		break;
	case 1:
		ib_send_cm_dreq(h->id, pdata, u8(r));
		break;
	case 2:
		ib_send_cm_drep(h->id, pdata, u8(r));
		break;
	case 3:
		ib_send_cm_rej(h->id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, pdata, u8(r));
		break;
	case 4:
		ib_send_cm_mra(h->id, u8(r), pdata, u8(r));
		break;
	case 5: {
		struct ib_cm_rep_param rp = { .qp_num = u32(r), .starting_psn = u32(r),
					      .private_data = pdata, .private_data_len = u8(r) };
		ib_send_cm_rep(h->id, &rp);
		break;
	}
	case 6:
		ib_send_cm_rtu(h->id, pdata, u8(r));
		break;
	case 7:
		ib_cm_notify(h->id, u8(r) & 1 ? IBV_EVENT_COMM_EST : IBV_EVENT_PATH_MIG);
		break;
	case 8: {
		struct ibv_qp_attr a = { .qp_state = (enum ibv_qp_state)(u8(r) % 8) };
		int mask;
		ib_cm_init_qp_attr(h->id, &a, &mask);
		break;
	}
	default: {
		struct ib_cm_sidr_rep_param rp = { .status = (enum ib_cm_sidr_status)(u8(r) % 6),
						   .info = pdata, .info_length = u8(r) };
		ib_send_cm_sidr_rep(h->id, &rp);
		break;
	}
	}
out:
	pthread_mutex_unlock(&lock);
}

static void run(const uint8_t *data, size_t size)
{
	struct reader r = { data, size };
	uint8_t buf[CM_MAD_SIZE + 64];
	struct cm_mad m;

	setup();
	for (unsigned int rec = 0; rec < MAX_RECORDS && r.n; rec++) {
		uint8_t op = u8(&r);

		switch (op % 8) {
		case 0: { /* raw bytes, any length */
			size_t len = u16(&r) % sizeof(buf);

			memset(buf, 0, sizeof(buf));
			for (size_t i = 0; i < len && r.n; i++)
				buf[i] = u8(&r);
			deliver_to_a(buf, len, pick_src(u8(&r)));
			break;
		}
		case 1:
		case 2:
		case 3: { /* a well-formed message, mutated */
			uint16_t attr = attrs[u8(&r) % ARRAY_SIZE(attrs)];
			uint8_t c = u8(&r);
			unsigned int nmut;
			struct hid *h;

			pthread_mutex_lock(&lock);
			h = c & 0x80 ? NULL : pick_a(c);
			build(&m, attr, h, &r);
			pthread_mutex_unlock(&lock);
			nmut = u8(&r) % 6;
			for (unsigned int i = 0; i < nmut; i++) {
				uint8_t off = u8(&r);
				m.raw[off] ^= u8(&r);
			}
			deliver_to_a(m.raw, CM_MAD_SIZE, pick_src(u8(&r)));
			break;
		}
		case 4: { /* a REQ flood with fresh comm IDs */
			unsigned int n = u8(&r) % 160 + 1;
			const union ibv_gid *src = pick_src(u8(&r));
			uint32_t base = u32(&r);

			for (unsigned int i = 0; i < n; i++) {
				cm_mad_init(&m, CM_REQ_ATTR_ID, base + i);
				cm_set(&m, CM_REQ_LOCAL_COMM_ID, base + i);
				cm_set(&m, CM_REQ_SERVICE_ID, i & 1 ? SID_AUTO : SID_HOLD);
				cm_set(&m, CM_REQ_LOCAL_CA_GUID, guid[DEV_B] + i);
				cm_set(&m, CM_REQ_LOCAL_QPN, 0x1000 + i);
				cm_set(&m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, 20);
				cm_set(&m, CM_REQ_MAX_CM_RETRIES, 15);
				memcpy(cm_data(&m) + CM_REQ_PRIMARY_LOCAL_PORT_GID, src->raw, 16);
				memcpy(cm_data(&m) + CM_REQ_PRIMARY_REMOTE_PORT_GID, gid[DEV_A].raw, 16);
				deliver_to_a(m.raw, CM_MAD_SIZE, src);
			}
			break;
		}
		case 5:
			pump(u8(&r) % 64 + 1);
			break;
		case 6:
			op_user(&r);
			break;
		default: { /* something B sent, again */
			uint8_t k = u8(&r);

			pthread_mutex_lock(&lock);
			if (!n_sent_by_b) {
				pthread_mutex_unlock(&lock);
				break;
			}
			m = sent_by_b[k % (n_sent_by_b < 16 ? n_sent_by_b : 16)];
			pthread_mutex_unlock(&lock);
			deliver_to_a(m.raw, CM_MAD_SIZE, pick_src(u8(&r)));
			break;
		}
		}
	}
	teardown();
}

static void init_once(void)
{
	int err;

	if (prog)
		return;
	mkgid(&gid[DEV_A], 1);
	mkgid(&gid[DEV_B], 2);
	mkgid(&stranger, 66);
	prog = urvt_progress_create(&err);
	if (!prog)
		die("urvt_progress_create");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init_once();
	run(data, size);
	return 0;
}

#ifdef CM_FUZZ_STANDALONE
/* files first, then pseudo-random inputs from a fixed seed */
int main(int argc, char **argv)
{
	static uint8_t in[4096];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	unsigned int n = 400;

	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		size_t len;

		if (!f) {
			perror(argv[i]);
			return 1;
		}
		len = fread(in, 1, sizeof(in), f);
		fclose(f);
		LLVMFuzzerTestOneInput(in, len);
	}
	if (getenv("CM_FUZZ_N"))
		n = (unsigned int)strtoul(getenv("CM_FUZZ_N"), NULL, 0);
	for (unsigned int it = 0; it < n; it++) {
		size_t len;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		len = 1 + x % sizeof(in);
		for (size_t i = 0; i < len; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			in[i] = (uint8_t)(x >> 32);
		}
		LLVMFuzzerTestOneInput(in, len);
	}
	printf("fuzz_cm_mad: %d files, %u random inputs: no check failed\n", argc - 1, n);
	if (prog)
		urvt_progress_destroy(prog);
	return 0;
}
#endif
