/*
 * rdma_cm behaviour an application relies on, checked through urvt-run
 * with the system <rdma/rdma_cma.h> and -lrdmacm (urvt's library is loaded
 * instead). Two processes: this one is the server (it binds SERVER, which
 * makes its device there), a forked child the client (URVT_ADDR=CLIENT).
 *
 *   cm_semantics connect    REQ/REP/RTU with private data at their limits,
 *                           rdma_init_qp_attr, data over the QP both ways,
 *                           DREQ/DREP (DISCONNECTED on both sides),
 *                           TIMEWAIT_EXIT, event-fd poll and O_NONBLOCK
 *   cm_semantics reject     consumer REJ (status 28, its private data),
 *                           no listener (status 8), too much private data
 *   cm_semantics establish  a client without QP: CONNECT_RESPONSE, then
 *                           rdma_establish
 *   cm_semantics ud         SIDR: UD connect/accept with private data and
 *                           the Q_Key, a reject (UNREACHABLE, status 2)
 *   cm_semantics unreach    nobody at the address: UNREACHABLE -ETIMEDOUT
 *                           (URVT_CM_RESPONSE_TIMEOUT / URVT_CM_RETRIES make
 *                           it quick)
 *   cm_semantics misc       options, multicast joins, ports, a second
 *                           address EADDRNOTAVAIL, getaddrinfo, migrate_id,
 *                           a channel destroyed under a thread blocked in
 *                           rdma_get_cm_event (it stays blocked)
 *
 * Exit 0 pass, 1 fail (the failed check is printed). Every wait is bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* each mode has its own addresses (127.41.<90 + mode>.x): ctest runs them
 * in parallel */
static char SERVER[32], CLIENT[32], NOBODY[32], OTHER[32];
#define PORT 7999
#define WAIT_MS 15000

static const char *who = "server";

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "%s: FAIL %s:%d: %s (errno %d %s)\n", who, \
				__FILE__, __LINE__, #c, errno, strerror(errno));   \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

/* The next event, within WAIT_MS; it must be `want`. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	CHECK(poll(&p, 1, WAIT_MS) == 1);
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != want)
		fprintf(stderr, "%s: got %s status %d, want %s\n", who, rdma_event_str(ev->event),
			ev->status, rdma_event_str(want));
	CHECK(ev->event == want);
	return ev;
}

/* Pipes between the two sides: the server tells the client to go. */
static int go_fd[2], done_fd[2];

static void go(void)
{
	CHECK(write(go_fd[1], "g", 1) == 1);
}

static void wait_go(void)
{
	char c;
	struct pollfd p = { .fd = go_fd[0], .events = POLLIN };

	CHECK(poll(&p, 1, WAIT_MS) == 1 && read(go_fd[0], &c, 1) == 1);
}

static pid_t fork_client(void (*fn)(void))
{
	pid_t pid;

	CHECK(pipe(go_fd) == 0 && pipe(done_fd) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		who = "client";
		setenv("URVT_ADDR", CLIENT, 1);
		alarm(60);
		fn();
		_exit(0);
	}
	return pid;
}

static void reap(pid_t pid)
{
	int st = 0;

	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A listener on SERVER:port (the bind makes the device there). */
static struct rdma_cm_id *listen_on(struct rdma_event_channel *ch, enum rdma_port_space ps,
				    int port)
{
	struct sockaddr_in s = sin_of(SERVER, port);
	struct rdma_cm_id *l;

	CHECK(rdma_create_id(ch, &l, NULL, ps) == 0);
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&s) == 0);
	CHECK(l->verbs != NULL); /* a specific address: the device is there */
	CHECK(rdma_listen(l, 4) == 0);
	CHECK(ntohs(rdma_get_src_port(l)) == port);
	return l;
}

/* Client: resolve SERVER:port on a new id. */
static struct rdma_cm_id *resolve(struct rdma_event_channel *ch, enum rdma_port_space ps, int port)
{
	struct sockaddr_in d = sin_of(SERVER, port);
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(ch, &id, NULL, ps) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(id->verbs != NULL && id->pd != NULL);
	CHECK(rdma_resolve_route(id, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(id->route.num_paths == 1 && id->route.path_rec);
	CHECK(ntohs(rdma_get_dst_port(id)) == port);
	return id;
}

static struct ibv_qp_init_attr qp_attr(enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.qp_type = t,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};
	return a;
}

static void fill(uint8_t *b, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed + i * 7);
}

static int same(const uint8_t *b, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (uint8_t)(seed + i * 7))
			return 0;
	return 1;
}

/* One completion on cq within WAIT_MS, successful. */
static void poll1(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (int i = 0; i < WAIT_MS; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0);
		if (n == 1) {
			CHECK(wc->status == IBV_WC_SUCCESS);
			return;
		}
		usleep(1000);
	}
	CHECK(!"completion");
}

/* ------------------------------------------------------------------ */
/* connect                                                            */
/* ------------------------------------------------------------------ */
static uint8_t cbuf[64], sbuf[64];

static void connect_client(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	uint8_t pd[57], ack = 14;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct ibv_qp_attr a;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int mask, fl;

	CHECK(ch);
	wait_go();
	id = resolve(ch, RDMA_PS_TCP, PORT);
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, 1) == 0);
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	CHECK(id->qp && id->send_cq && id->recv_cq);
	/* 56 bytes of user data fit a REQ beside the CMA header, 57 do not */
	fill(pd, sizeof(pd), 3);
	cp.private_data = pd;
	cp.private_data_len = 57;
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL);
	cp.private_data_len = 56;
	mr = ibv_reg_mr(id->pd, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	CHECK(rdma_post_recv(id, NULL, cbuf, sizeof(cbuf), mr) == 0);
	CHECK(rdma_connect(id, &cp) == 0);
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	/* the REP's private data: all 196 bytes, ours first */
	CHECK(ev->param.conn.private_data_len == 196);
	CHECK(same(ev->param.conn.private_data, 196, 9));
	CHECK(ev->param.conn.responder_resources == 1 && ev->param.conn.initiator_depth == 1);
	rdma_ack_cm_event(ev);

	/* what librdmacm moved the QP through */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	CHECK(rdma_init_qp_attr(id, &a, &mask) == 0);
	CHECK(mask & IBV_QP_AV && mask & IBV_QP_DEST_QPN && mask & IBV_QP_RQ_PSN &&
	      mask & IBV_QP_PATH_MTU && mask & IBV_QP_MAX_DEST_RD_ATOMIC);
	CHECK(a.ah_attr.is_global == 1 && a.ah_attr.port_num == 1);
	CHECK(a.ah_attr.grh.dgid.raw[10] == 0xff && a.ah_attr.grh.dgid.raw[15] == 1);
	CHECK(a.max_dest_rd_atomic == 1);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	CHECK(rdma_init_qp_attr(id, &a, &mask) == 0);
	CHECK(mask & IBV_QP_TIMEOUT && a.timeout == ack); /* RDMA_OPTION_ID_ACK_TIMEOUT */
	/* retry count: ours; RNR retry: what the REP said (the server's 5) */
	CHECK(a.retry_cnt == 7 && a.rnr_retry == 5 && a.max_rd_atomic == 1);
	{
		struct ibv_qp_attr q;
		struct ibv_qp_init_attr qi;
		CHECK(ibv_query_qp(id->qp, &q, IBV_QP_STATE, &qi) == 0);
		CHECK(q.qp_state == IBV_QPS_RTS && q.timeout == ack);
	}

	/* data both ways */
	fill(cbuf + 32, 32, 77);
	CHECK(rdma_post_send(id, NULL, cbuf + 32, 32, mr, 0) == 0);
	poll1(id->send_cq, &wc);
	poll1(id->recv_cq, &wc);
	CHECK(wc.byte_len == 32 && same(cbuf, 32, 55));

	/* the channel fd: readable only with an event queued; O_NONBLOCK -> EAGAIN */
	fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN);
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0);

	/* we disconnect: DISCONNECTED here when the DREP comes */
	CHECK(rdma_disconnect(id) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT));
	rdma_destroy_qp(id);
	ibv_dereg_mr(mr);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
}

static void test_connect(void)
{
	struct rdma_event_channel *ch;
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	uint8_t rep[196];
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 5, .private_data = rep };
	struct pollfd p;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	pid_t pid;

	pid = fork_client(connect_client);
	/* after the fork: the library's thread does not survive one */
	ch = rdma_create_event_channel();
	CHECK(ch);
	l = listen_on(ch, RDMA_PS_TCP, PORT);
	/* nothing queued: the fd is not readable */
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0);
	go();
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == l && ev->id != l && ev->id->verbs && ev->id->pd);
	CHECK(ev->id->context == l->context && ev->id->channel == ch);
	/* 92 - 36 bytes of the CMA header: what the client sent */
	CHECK(ev->param.conn.private_data_len == 56);
	CHECK(same(ev->param.conn.private_data, 56, 3));
	CHECK(ev->param.conn.responder_resources == 1 && ev->param.conn.initiator_depth == 1);
	CHECK(ev->param.conn.qp_num > 1);
	id = ev->id;
	{
		struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(id);
		struct sockaddr_in *dst = (struct sockaddr_in *)rdma_get_peer_addr(id);
		char b[32];
		CHECK(src->sin_family == AF_INET && ntohs(src->sin_port) == PORT);
		CHECK(!strcmp(inet_ntop(AF_INET, &src->sin_addr, b, sizeof(b)), SERVER));
		CHECK(!strcmp(inet_ntop(AF_INET, &dst->sin_addr, b, sizeof(b)), CLIENT));
		CHECK(ntohs(dst->sin_port) != 0);
	}
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	mr = ibv_reg_mr(id->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && rdma_post_recv(id, NULL, sbuf, sizeof(sbuf), mr) == 0);
	fill(rep, sizeof(rep), 9);
	cp.private_data_len = 196;
	CHECK(rdma_accept(id, &cp) == 0);
	rdma_ack_cm_event(ev);
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == id && ev->param.conn.private_data_len == 0);
	rdma_ack_cm_event(ev);
	poll1(id->recv_cq, &wc);
	CHECK(wc.byte_len == 32 && same(sbuf, 32, 77));
	fill(sbuf + 32, 32, 55);
	CHECK(rdma_post_send(id, NULL, sbuf + 32, 32, mr, 0) == 0);
	poll1(id->send_cq, &wc);
	/* the client disconnects: DISCONNECTED here on its DREQ */
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_disconnect(id) == 0); /* answers with the DREP */
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT));
	reap(pid);
	rdma_destroy_qp(id);
	ibv_dereg_mr(mr);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(ch);
}

/* ------------------------------------------------------------------ */
/* reject                                                             */
/* ------------------------------------------------------------------ */
static void reject_client(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	wait_go();
	for (int round = 0; round < 3; round++) {
		/* round 2: nobody listens on PORT + 1 */
		id = resolve(ch, RDMA_PS_TCP, round == 2 ? PORT + 1 : PORT);
		qa = qp_attr(IBV_QPT_RC);
		CHECK(rdma_create_qp(id, NULL, &qa) == 0);
		CHECK(rdma_connect(id, &cp) == 0);
		ev = expect(ch, RDMA_CM_EVENT_REJECTED);
		if (round == 0) {
			/* consumer defined, the REJ's whole private data field */
			CHECK(ev->status == 28);
			CHECK(ev->param.conn.private_data_len == 148);
			CHECK(same(ev->param.conn.private_data, 20, 41));
		} else if (round == 1) {
			/* a failed rdma_accept rejects the request */
			CHECK(ev->status == 28);
		} else {
			/* "invalid service ID" */
			CHECK(ev->status == 8);
		}
		rdma_ack_cm_event(ev);
		rdma_destroy_qp(id);
		CHECK(rdma_destroy_id(id) == 0);
	}
	rdma_destroy_event_channel(ch);
}

static void test_reject(void)
{
	struct rdma_event_channel *ch;
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	uint8_t pd[197];
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .private_data = pd, .private_data_len = 197 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	pid_t pid;

	pid = fork_client(reject_client);
	/* after the fork: the library's thread does not survive one */
	ch = rdma_create_event_channel();
	CHECK(ch);
	l = listen_on(ch, RDMA_PS_TCP, PORT);
	go();
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	fill(pd, sizeof(pd), 41);
	errno = 0;
	CHECK(rdma_reject(id, pd, 149) == -1 && errno == EINVAL);
	CHECK(rdma_reject(id, pd, 20) == 0);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(id) == 0);

	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	/* 196 bytes fit a REP, 197 do not */
	errno = 0;
	CHECK(rdma_accept(id, &cp) == -1 && errno == EINVAL);
	rdma_ack_cm_event(ev);
	reap(pid);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(ch);
}

/* ------------------------------------------------------------------ */
/* establish: no QP on the client                                     */
/* ------------------------------------------------------------------ */
static void establish_client(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_attr a;
	int mask;

	wait_go();
	id = resolve(ch, RDMA_PS_TCP, PORT);
	/* our own QP, moved by rdma_init_qp_attr (as UCX does) */
	cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	qa.send_cq = qa.recv_cq = cq;
	qp = ibv_create_qp(id->pd, &qa);
	CHECK(cq && qp);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(id, &a, &mask) == 0 && ibv_modify_qp(qp, &a, mask) == 0);
	cp.qp_num = qp->qp_num;
	errno = 0;
	CHECK(rdma_establish(id) == -1 && errno == EINVAL); /* nothing to establish yet */
	CHECK(rdma_connect(id, &cp) == 0);
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(ev->param.conn.private_data_len == 196);
	rdma_ack_cm_event(ev);
	for (enum ibv_qp_state s = IBV_QPS_INIT; s <= IBV_QPS_RTS; s++) {
		memset(&a, 0, sizeof(a));
		a.qp_state = s;
		CHECK(rdma_init_qp_attr(id, &a, &mask) == 0);
		CHECK(ibv_modify_qp(qp, &a, mask) == 0);
	}
	CHECK(rdma_establish(id) == 0);
	CHECK(rdma_disconnect(id) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
}

static void test_establish(void)
{
	struct rdma_event_channel *ch;
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	pid_t pid;

	pid = fork_client(establish_client);
	/* after the fork: the library's thread does not survive one */
	ch = rdma_create_event_channel();
	CHECK(ch);
	l = listen_on(ch, RDMA_PS_TCP, PORT);
	go();
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	CHECK(rdma_accept(id, &cp) == 0);
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_disconnect(id) == 0); /* the DREP the client waits for */
	reap(pid);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(ch);
}

/* ------------------------------------------------------------------ */
/* ud: SIDR                                                           */
/* ------------------------------------------------------------------ */
static void ud_client(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_UD);
	uint8_t pd[181];
	struct rdma_conn_param cp = { .private_data = pd };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	wait_go();
	id = resolve(ch, RDMA_PS_UDP, PORT);
	CHECK(id->qp_type == IBV_QPT_UD);
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	fill(pd, sizeof(pd), 5);
	cp.private_data_len = 181;
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL);
	cp.private_data_len = 180;
	CHECK(rdma_connect(id, &cp) == 0);
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->param.ud.qkey == RDMA_UDP_QKEY);
	CHECK(ev->param.ud.qp_num > 1);
	CHECK(ev->param.ud.ah_attr.is_global == 1);
	CHECK(ev->param.ud.private_data_len == 136 && same(ev->param.ud.private_data, 136, 6));
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);

	/* the second one is rejected */
	id = resolve(ch, RDMA_PS_UDP, PORT);
	qa = qp_attr(IBV_QPT_UD);
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	CHECK(rdma_connect(id, &cp) == 0);
	ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK(ev->status == 2); /* IB_SIDR_REJECT */
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
}

static void test_ud(void)
{
	struct rdma_event_channel *ch;
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_UD);
	uint8_t rep[136];
	struct rdma_conn_param cp = { .private_data = rep, .private_data_len = 136 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	pid_t pid;

	pid = fork_client(ud_client);
	/* after the fork: the library's thread does not survive one */
	ch = rdma_create_event_channel();
	CHECK(ch);
	l = listen_on(ch, RDMA_PS_UDP, PORT);
	go();
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->id->qp_type == IBV_QPT_UD);
	CHECK(ev->param.ud.private_data_len == 180 && same(ev->param.ud.private_data, 180, 5));
	id = ev->id;
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	fill(rep, sizeof(rep), 6);
	CHECK(rdma_accept(id, &cp) == 0);
	rdma_ack_cm_event(ev);
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	{
		struct rdma_cm_id *rid = ev->id;

		CHECK(rdma_reject(rid, NULL, 0) == 0);
		rdma_ack_cm_event(ev);
		reap(pid);
		CHECK(rdma_destroy_id(rid) == 0);
	}
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(ch);
}

/* ------------------------------------------------------------------ */
/* unreach                                                            */
/* ------------------------------------------------------------------ */
static void test_unreach(void)
{
	struct rdma_event_channel *ch;
	struct sockaddr_in d = sin_of(NOBODY, PORT);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct timespec t0, t1;

	/* 2 x 1024 + 16 ms per try, 2 tries: about 4 s */
	setenv("URVT_CM_RESPONSE_TIMEOUT", "12", 1);
	setenv("URVT_CM_RETRIES", "1", 1);
	setenv("URVT_ADDR", CLIENT, 1);
	ch = rdma_create_event_channel();
	CHECK(ch);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(id, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(rdma_connect(id, &cp) == 0);
	ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(ev->status == -ETIMEDOUT);
	CHECK(t1.tv_sec - t0.tv_sec >= 3 && t1.tv_sec - t0.tv_sec <= 10);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
}

/* ------------------------------------------------------------------ */
/* misc                                                               */
/* ------------------------------------------------------------------ */
static volatile pid_t waiter_tid;

static void *blocked_get(void *arg)
{
	struct rdma_cm_event *ev;

	waiter_tid = (pid_t)syscall(SYS_gettid);
	if (rdma_get_cm_event(arg, &ev) == 0)
		rdma_ack_cm_event(ev);
	return arg;
}

/* Wait (up to 2 s) until thread tid sleeps: in rdma_get_cm_event's poll. */
static void wait_asleep(pid_t tid)
{
	struct timespec nap = { .tv_nsec = 1000 * 1000 };
	char path[64], buf[256], *p;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f)
			fclose(f);
		buf[n] = 0;
		p = strrchr(buf, ')'); /* "tid (comm) S ..." */
		if (p && p[1] == ' ' && p[2] == 'S')
			return;
		nanosleep(&nap, NULL);
	}
	CHECK(!"the waiting thread went to sleep");
}

/*
 * rping of rdma-core 44 destroys its cm_id and event channel at exit while
 * its CM thread is in rdma_get_cm_event on that channel; on the kernel's
 * file that read stays blocked. Here the thread may have been woken by the
 * id's last event and wait for the library's lock while both are
 * destroyed: it must not touch the freed channel (rping crashed 1 run in
 * ~150; under ASan a use after free). Each round: a thread asleep in the
 * get, an event for a new id queued, the id and the channel destroyed at
 * once. The thread either took the event or stays blocked for good.
 */
static void check_destroy_under_waiter(void)
{
	struct sockaddr_in s = sin_of(SERVER, 0);

	for (int round = 0; round < 40; round++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *id;
		pthread_t t;

		CHECK(ch);
		CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
		waiter_tid = 0;
		CHECK(pthread_create(&t, NULL, blocked_get, ch) == 0);
		for (int i = 0; i < 2000 && !waiter_tid; i++)
			nanosleep(&(struct timespec){ .tv_nsec = 1000 * 1000 }, NULL);
		CHECK(waiter_tid);
		wait_asleep(waiter_tid);
		CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&s, 2000) == 0);
		CHECK(rdma_destroy_id(id) == 0);
		rdma_destroy_event_channel(ch);
		pthread_detach(t); /* done, or blocked until the process exits */
	}
}

static void test_misc(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel(), *ch2;
	struct sockaddr_in s = sin_of(SERVER, PORT), other = sin_of(OTHER, PORT);
	struct rdma_addrinfo hints = { 0 }, *res;
	struct rdma_cm_id *id, *id2;
	struct ibv_context **devs;
	uint8_t tos = 32;
	int one = 1, n = 0;

	CHECK(ch);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	/* options: sizes checked, unknown names ENOSYS */
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0);
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4) == -1 &&
	      errno == EINVAL);
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) ==
	      0);
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)) == 0);
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, 99, &one, sizeof(one)) == -1 && errno == ENOSYS);
	errno = 0;
	CHECK(rdma_set_option(id, 99, 0, &one, sizeof(one)) == -1 && errno == ENOSYS);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&s) == 0);
	errno = 0;
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&s) == -1 && errno == EINVAL);
	/* the process's device is at SERVER now: another address is not ours */
	CHECK(rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP) == 0);
	errno = 0;
	CHECK(rdma_bind_addr(id2, (struct sockaddr *)&other) == -1 && errno == EADDRNOTAVAIL);
	/* the same port twice: in use */
	errno = 0;
	CHECK(rdma_bind_addr(id2, (struct sockaddr *)&s) == -1 && errno == EADDRINUSE);
	/* multicast (docs/multicast.md): UD ids only, group addresses only */
	{
		struct sockaddr_in grp = sin_of("239.41.99.1", 0);
		struct rdma_cm_id *ud;
		struct rdma_cm_event *ev;
		int ctx;

		errno = 0;
		CHECK(rdma_join_multicast(id, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL);
		CHECK(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0);
		errno = 0;
		/* not bound yet */
		CHECK(rdma_join_multicast(ud, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL);
		s.sin_port = htons(PORT + 1);
		CHECK(rdma_bind_addr(ud, (struct sockaddr *)&s) == 0);
		s.sin_port = htons(PORT);
		errno = 0;
		CHECK(rdma_join_multicast(ud, (struct sockaddr *)&other, NULL) == -1 && errno == EINVAL);
		CHECK(rdma_join_multicast(ud, (struct sockaddr *)&grp, &ctx) == 0);
		ev = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
		CHECK(ev->status == 0 && ev->param.ud.qp_num == 0xffffff &&
		      ev->param.ud.qkey == RDMA_UDP_QKEY && ev->param.ud.private_data == &ctx &&
		      ev->param.ud.ah_attr.is_global &&
		      ev->param.ud.ah_attr.grh.dgid.raw[10] == 0xff &&
		      !memcmp(ev->param.ud.ah_attr.grh.dgid.raw + 12, &grp.sin_addr, 4));
		rdma_ack_cm_event(ev);
		CHECK(rdma_leave_multicast(ud, (struct sockaddr *)&grp) == 0);
		errno = 0;
		CHECK(rdma_leave_multicast(ud, (struct sockaddr *)&grp) == -1 &&
		      errno == EADDRNOTAVAIL);
		CHECK(rdma_destroy_id(ud) == 0);
	}
	errno = 0;
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&other) == -1 && errno == EADDRNOTAVAIL);
	/* the device list is the one device, with our GID */
	devs = rdma_get_devices(&n);
	CHECK(devs && n == 1 && devs[0] == id->verbs && !devs[1]);
	rdma_free_devices(devs);
	/* migrate to another channel */
	ch2 = rdma_create_event_channel();
	CHECK(ch2 && rdma_migrate_id(id, ch2) == 0 && id->channel == ch2);
	CHECK(rdma_destroy_id(id2) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);

	/* rdma_getaddrinfo: passive and active, port space from the hints */
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(SERVER, "7471", &hints, &res) == 0);
	CHECK(res->ai_flags & RAI_PASSIVE && res->ai_src_addr && res->ai_qp_type == IBV_QPT_RC);
	CHECK(((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7471));
	rdma_freeaddrinfo(res);
	hints.ai_flags = 0;
	hints.ai_port_space = RDMA_PS_UDP;
	CHECK(rdma_getaddrinfo(SERVER, "7471", &hints, &res) == 0);
	CHECK(res->ai_dst_addr && !res->ai_src_addr && res->ai_port_space == RDMA_PS_UDP);
	rdma_freeaddrinfo(res);
	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT"));
	CHECK(!strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT"));
	check_destroy_under_waiter();
}

int main(int argc, char **argv)
{
	static const char *const modes[] = { "connect", "reject", "establish",
					     "ud", "unreach", "misc" };
	const char *mode = argc > 1 ? argv[1] : "connect";
	int m = 0;

	while (m < 6 && strcmp(modes[m], mode))
		m++;
	snprintf(SERVER, sizeof(SERVER), "127.41.%d.1", 90 + m);
	snprintf(CLIENT, sizeof(CLIENT), "127.41.%d.2", 90 + m);
	snprintf(NOBODY, sizeof(NOBODY), "127.41.%d.9", 90 + m);
	snprintf(OTHER, sizeof(OTHER), "127.41.%d.7", 90 + m);
	signal(SIGPIPE, SIG_IGN);
	alarm(90);
	if (!strcmp(mode, "connect"))
		test_connect();
	else if (!strcmp(mode, "reject"))
		test_reject();
	else if (!strcmp(mode, "establish"))
		test_establish();
	else if (!strcmp(mode, "ud"))
		test_ud();
	else if (!strcmp(mode, "unreach"))
		test_unreach();
	else if (!strcmp(mode, "misc"))
		test_misc();
	else
		return 2;
	printf("PASS %s\n", mode);
	return 0;
}
