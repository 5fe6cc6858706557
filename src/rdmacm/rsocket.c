/*
 * rsockets (rsocket(7)): stream sockets over an RC QP that the rdma_cm
 * connects, speaking rdma-core's rsocket protocol, so urvt's rsockets and
 * Linux's talk to each other (docs/rdmacm.md, "rsockets"):
 *
 *  - connect and accept carry struct rs_conn_data as private data: version
 *    1, flags (byte order, iomap support), the receive queue size (the
 *    peer's first credits), the size of the iomap table, where the peer
 *    may write buffer grants (its target SGL: 2 entries, then the iomap
 *    table) and the first half of its receive ring;
 *  - data is an RDMA WRITE WITH IMMEDIATE into space the receiver granted,
 *    the immediate saying DATA and the length (op in bits 31..29);
 *  - the receiver hands out the other half of its ring as it drains, and
 *    receive credits, by an RDMA WRITE WITH IMMEDIATE of the grant into
 *    the sender's target SGL (op SGL, data: the new sequence limit), or by
 *    a zero-length one when there is only credit to give;
 *  - shutdown and close send a control message (CTRL: SHUTDOWN,
 *    DISCONNECT); riomap() announces a buffer by writing its description
 *    into the peer's iomap table (IOMAP_SGL), riowrite() writes into the
 *    peer's announced buffers directly.
 *
 * An rsocket's number is the file descriptor of its rdma_cm id's own
 * event channel (synchronous ids), as in rdma-core. A listener's
 * connections are accepted in the background by one service thread, as
 * rdma-core's are, so rconnect() returns before the peer calls raccept().
 * Not provided: SOCK_DGRAM rsockets (EOPNOTSUPP: librspreload then makes a
 * normal socket), keepalive messages (SO_KEEPALIVE is recorded), the
 * /etc/rdma/rsocket configuration files (the built-in defaults apply).
 *
 * This file holds the sockets' life: numbers, allocation, the endpoint,
 * connect/listen/accept, shutdown and close; the data path, the options
 * and riomap are beside it (rsocket_priv.h lists the files).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/thread.h"
#include "rdmacm/rsocket_priv.h"

static uint16_t def_inline = 64, def_sqsize = 384, def_rqsize = 384;
static uint32_t def_mem = 1 << 17, def_wmem = 1 << 17;

/* ------------------------------------------------------------------ */
/* rsocket numbers: a two-level table indexed by fd, pages never freed  */
/* ------------------------------------------------------------------ */
#define IDX_PAGE 1024
#define IDX_PAGES 1024
static struct rsocket **idx_pages[IDX_PAGES];
static pthread_mutex_t idx_lock = PTHREAD_MUTEX_INITIALIZER;

struct rsocket *rs_lookup(int s)
{
	struct rsocket **page;

	if (s < 0 || s >= IDX_PAGE * IDX_PAGES)
		return NULL;
	page = __atomic_load_n(&idx_pages[s / IDX_PAGE], __ATOMIC_ACQUIRE);
	return page ? __atomic_load_n(&page[s % IDX_PAGE], __ATOMIC_ACQUIRE) : NULL;
}

static int rs_insert(struct rsocket *rs, int s)
{
	struct rsocket **page;
	int ret = 0;

	if (s < 0 || s >= IDX_PAGE * IDX_PAGES)
		return err_set(EMFILE);
	pthread_mutex_lock(&idx_lock);
	page = idx_pages[s / IDX_PAGE];
	if (!page) {
		page = calloc(IDX_PAGE, sizeof(*page));
		if (page)
			__atomic_store_n(&idx_pages[s / IDX_PAGE], page, __ATOMIC_RELEASE);
	}
	if (page) {
		CM_DBG("rsocket %d: new", s);
		rs->index = s;
		__atomic_store_n(&page[s % IDX_PAGE], rs, __ATOMIC_RELEASE);
	} else {
		ret = err_set(ENOMEM);
	}
	pthread_mutex_unlock(&idx_lock);
	return ret;
}

static void rs_remove(struct rsocket *rs)
{
	if (rs->index < 0)
		return;
	CM_DBG("rsocket %d: gone", rs->index);
	pthread_mutex_lock(&idx_lock);
	__atomic_store_n(&idx_pages[rs->index / IDX_PAGE][rs->index % IDX_PAGE], NULL,
			 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&idx_lock);
	rs->index = -1;
}

/* ------------------------------------------------------------------ */
/* Allocation                                                         */
/* ------------------------------------------------------------------ */
static struct rsocket *rs_alloc(const struct rsocket *parent)
{
	struct rsocket *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->index = -1;
	rs->accept_queue[0] = rs->accept_queue[1] = -1;
	if (parent) {
		rs->sbuf_size = parent->sbuf_size;
		rs->rbuf_size = parent->rbuf_size;
		rs->sq_inline = parent->sq_inline;
		rs->sq_size = parent->sq_size;
		rs->rq_size = parent->rq_size;
		rs->ctrl_max_seqno = parent->ctrl_max_seqno;
		rs->target_iomap_size = parent->target_iomap_size;
	} else {
		rs->sbuf_size = def_wmem;
		rs->rbuf_size = def_mem;
		rs->sq_inline = def_inline;
		rs->sq_size = def_sqsize;
		rs->rq_size = def_rqsize;
		rs->ctrl_max_seqno = RS_QP_CTRL_SIZE;
	}
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->cq_lock, NULL);
	pthread_mutex_init(&rs->cq_wait_lock, NULL);
	pthread_mutex_init(&rs->map_lock, NULL);
	return rs;
}

static void rs_free(struct rsocket *rs)
{
	struct rdma_cm_id *id = rs->cm_id;

	rs_remove(rs);
	if (id && id->qp) {
		/* the QP first: no more writes land in the buffers freed below;
		 * it takes our CQ and its channel along (librdmacm's), which
		 * waits for every CQ event to be acked */
		if (rs->unack_cqe)
			ibv_ack_cq_events(id->recv_cq, (unsigned int)rs->unack_cqe);
		rs->unack_cqe = 0;
		rdma_destroy_qp(id);
	}
	rs_free_iomaps(&rs->iomaps);
	rs_free_iomaps(&rs->iomap_queue);
	free(rs->remote_slots);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->tgt_mr)
		ibv_dereg_mr(rs->tgt_mr);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->tgt);
	free(rs->rmsg);
	if (id) {
		if (id->recv_cq) {
			if (rs->unack_cqe)
				ibv_ack_cq_events(id->recv_cq, (unsigned int)rs->unack_cqe);
			ibv_destroy_cq(id->recv_cq);
			id->recv_cq = id->send_cq = NULL;
		}
		if (id->recv_cq_channel) {
			ibv_destroy_comp_channel(id->recv_cq_channel);
			id->recv_cq_channel = id->send_cq_channel = NULL;
		}
		rdma_destroy_id(id);
	}
	if (rs->accept_queue[0] >= 0)
		close(rs->accept_queue[0]);
	if (rs->accept_queue[1] >= 0)
		close(rs->accept_queue[1]);
	free(rs->route);
	pthread_mutex_destroy(&rs->slock);
	pthread_mutex_destroy(&rs->rlock);
	pthread_mutex_destroy(&rs->cq_lock);
	pthread_mutex_destroy(&rs->cq_wait_lock);
	pthread_mutex_destroy(&rs->map_lock);
	free(rs);
}

/* ------------------------------------------------------------------ */
/* The endpoint: CQ, QP, buffers                                      */
/* ------------------------------------------------------------------ */
int rs_set_fd_flags(int fd, int flags)
{
	int old = fcntl(fd, F_GETFL);

	if (old < 0)
		return -1;
	return fcntl(fd, F_SETFL, (old & ~O_NONBLOCK) | (flags & O_NONBLOCK));
}

static int rs_create_ep(struct rsocket *rs)
{
	struct rdma_cm_id *id = rs->cm_id;
	struct ibv_qp_init_attr qa;
	size_t tlen;

	if (rs->sq_size > RS_QP_MAX_SIZE)
		rs->sq_size = RS_QP_MAX_SIZE;
	if (rs->sq_size < RS_QP_MIN_SIZE)
		rs->sq_size = RS_QP_MIN_SIZE;
	if (rs->rq_size > RS_QP_MAX_SIZE)
		rs->rq_size = RS_QP_MAX_SIZE;
	if (rs->rq_size < RS_QP_MIN_SIZE)
		rs->rq_size = RS_QP_MIN_SIZE;
	id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
	if (!id->recv_cq_channel)
		return -1;
	id->send_cq_channel = id->recv_cq_channel;
	id->recv_cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, id, id->recv_cq_channel,
				    0);
	if (!id->recv_cq)
		return -1;
	id->send_cq = id->recv_cq;
	/* never blocks: a thread that means to sleep polls it first */
	if (rs_set_fd_flags(id->recv_cq_channel->fd, O_NONBLOCK))
		return -1;
	ibv_req_notify_cq(id->recv_cq, 0);
	rs->cq_armed = 1;

	memset(&qa, 0, sizeof(qa));
	qa.qp_context = rs;
	qa.send_cq = qa.recv_cq = id->recv_cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = rs->sq_size;
	qa.cap.max_recv_wr = rs->rq_size;
	qa.cap.max_send_sge = 2;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(id, NULL, &qa))
		return -1;
	rs->sq_inline = (uint16_t)qa.cap.max_inline_data;

	rs->rmsg = calloc((size_t)rs->rq_size + 1, sizeof(*rs->rmsg));
	/* the send buffer, then room for control messages sent from memory */
	rs->sbuf = malloc(rs->sbuf_size + sizeof(struct rs_sge) * RS_QP_CTRL_SIZE);
	tlen = sizeof(struct rs_sge) * RS_SGL_SIZE +
	       sizeof(struct rs_iomap) * (size_t)rs->target_iomap_size;
	rs->tgt = calloc(1, tlen);
	rs->rbuf = malloc(rs->rbuf_size);
	if (!rs->rmsg || !rs->sbuf || !rs->tgt || !rs->rbuf)
		return err_set(ENOMEM);
	rs->smr = rdma_reg_msgs(id, rs->sbuf, rs->sbuf_size + sizeof(struct rs_sge) * RS_QP_CTRL_SIZE);
	rs->tgt_mr = rdma_reg_write(id, rs->tgt, tlen);
	rs->rmr = rdma_reg_write(id, rs->rbuf, rs->rbuf_size);
	if (!rs->smr || !rs->tgt_mr || !rs->rmr)
		return -1;
	rs->grant = rs->tgt;
	if (rs->target_iomap_size)
		rs->tgt_iomap = (struct rs_iomap *)((struct rs_sge *)rs->tgt + RS_SGL_SIZE);

	rs->ssgl[0].addr = rs->ssgl[1].addr = (uintptr_t)rs->sbuf;
	rs->ssgl[0].lkey = rs->ssgl[1].lkey = rs->smr->lkey;
	rs->sbuf_bytes_avail = rs->sbuf_size;
	/* the first half of the ring is granted in the conn data */
	rs->rbuf_free_offset = rs->rbuf_size >> 1;
	rs->rbuf_bytes_avail = rs->rbuf_size >> 1;
	rs->sqe_avail = rs->sq_size - (int)rs->ctrl_max_seqno;
	rs->rseq_comp = rs->rq_size >> 1;
	for (int i = 0; i < rs->rq_size; i++)
		if (rs_post_recv(rs))
			return -1;
	return 0;
}

static void rs_format_conn_data(const struct rsocket *rs, struct rs_conn_data *c)
{
	memset(c, 0, sizeof(*c));
	c->version = 1;
	c->flags = RS_CONN_FLAG_IOMAP | (__BYTE_ORDER == __BIG_ENDIAN ? RS_CONN_FLAG_NET : 0);
	c->credits = htobe16(rs->rq_size);
	c->target_iomap_size = (uint8_t)rs_value_to_scale(rs->target_iomap_size, 8);
	c->target_sgl.addr = htobe64((uintptr_t)rs->tgt);
	c->target_sgl.length = htobe32(RS_SGL_SIZE);
	c->target_sgl.key = htobe32(rs->tgt_mr->rkey);
	c->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	c->data_buf.length = htobe32(rs->rbuf_size >> 1);
	c->data_buf.key = htobe32(rs->rmr->rkey);
}

static void rs_save_conn_data(struct rsocket *rs, const struct rs_conn_data *c)
{
	bool net = __BYTE_ORDER == __BIG_ENDIAN;

	rs->peer_sgl.addr = be64toh(c->target_sgl.addr);
	rs->peer_sgl.length = be32toh(c->target_sgl.length);
	rs->peer_sgl.key = be32toh(c->target_sgl.key);
	/* slot 0 of the peer's grant table is the data_buf below */
	rs->peer_sge = 1 % (rs->peer_sgl.length ? (int)rs->peer_sgl.length : 1);
	rs->swap = net != !!(c->flags & RS_CONN_FLAG_NET);
	if (c->flags & RS_CONN_FLAG_IOMAP) {
		rs->peer_iomap.addr = rs->peer_sgl.addr + sizeof(struct rs_sge) * rs->peer_sgl.length;
		rs->peer_iomap.length = (uint32_t)rs_scale_to_value(c->target_iomap_size, 8);
		rs->peer_iomap.key = rs->peer_sgl.key;
	}
	rs->grant[0].addr = be64toh(c->data_buf.addr);
	rs->grant[0].length = be32toh(c->data_buf.length);
	rs->grant[0].key = be32toh(c->data_buf.key);
	rs->sseq_comp = be16toh(c->credits);
}

/* ------------------------------------------------------------------ */
/* Sockets                                                            */
/* ------------------------------------------------------------------ */
int rsocket(int domain, int type, int protocol)
{
	struct rsocket *rs;
	int ret;

	if (domain != AF_INET && domain != AF_INET6)
		return err_set(EAFNOSUPPORT);
	if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM)
		return err_set(EOPNOTSUPP); /* no datagram rsockets */
	if (protocol && protocol != IPPROTO_TCP)
		return err_set(EPROTONOSUPPORT);
	rs = rs_alloc(NULL);
	if (!rs)
		return err_set(ENOMEM);
	if (rdma_create_id(NULL, &rs->cm_id, rs, RDMA_PS_TCP)) {
		CM_DBG("rsocket: rdma_create_id: %s", strerror(errno));
		goto err;
	}
	ret = rs_insert(rs, rs->cm_id->channel->fd);
	if (ret) {
		CM_DBG("rsocket: fd %d: %s", rs->cm_id->channel->fd, strerror(errno));
		goto err;
	}
	if (type & SOCK_NONBLOCK)
		rfcntl(rs->index, F_SETFL, O_NONBLOCK);
	return rs->index;
err:
	ret = errno;
	rs_free(rs);
	return err_set(ret);
}

int rbind(int s, const struct sockaddr *addr, socklen_t len)
{
	struct rsocket *rs = rs_lookup(s);

	(void)len;
	if (!rs)
		return err_set(EBADF);
	if (rdma_bind_addr(rs->cm_id, (struct sockaddr *)addr))
		return -1;
	rs->state = rs_bound;
	return 0;
}

/* The service thread: accepts every listener's connections as they come
 * (rdma-core's listen_svc). Listeners join and leave through a pipe. */
static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t svc_cond = PTHREAD_COND_INITIALIZER;
static int svc_pipe[2] = { -1, -1 };
static pthread_t svc_thread;
static uint64_t svc_sent, svc_done;       /* requests written / handled */

struct svc_msg {
	struct rsocket *rs;
	bool add;
};

static void rs_accept(struct rsocket *l)
{
	struct rdma_cm_id *id;
	struct rsocket *rs;
	struct rdma_conn_param param;
	struct rs_conn_data resp;
	const struct rs_conn_data *req;

	if (rdma_get_request(l->cm_id, &id))
		return;
	rs = rs_alloc(l);
	if (!rs)
		goto reject;
	rs->cm_id = id;
	id->context = rs;
	if (rs_insert(rs, id->channel->fd))
		goto reject;
	req = id->event->param.conn.private_data;
	if (id->event->param.conn.private_data_len < sizeof(*req) || req->version != 1)
		goto reject;
	if (rs_create_ep(rs))
		goto reject;
	rs_save_conn_data(rs, req);
	param = id->event->param.conn;
	rs_format_conn_data(rs, &resp);
	param.private_data = &resp;
	param.private_data_len = sizeof(resp);
	/* do not wait here for the RTU: the socket finishes on first use */
	rs_set_fd_flags(id->channel->fd, O_NONBLOCK);
	if (!rdma_accept(id, &param))
		rs->state = rs_connect_rdwr;
	else if (errno == EAGAIN || errno == EWOULDBLOCK)
		rs->state = rs_accepting;
	else
		goto reject;
	if (write(l->accept_queue[1], &rs, sizeof(rs)) != (ssize_t)sizeof(rs))
		goto reject;
	return;
reject:
	CM_DBG("rsocket %d: accept failed: %s", l->index, strerror(errno));
	rdma_reject(id, NULL, 0);
	if (rs)
		rs_free(rs);
	else
		rdma_destroy_id(id);
}

static void *svc_run(void *arg)
{
	struct rsocket **ls = NULL;
	struct pollfd *fds = NULL;
	int n = 0;

	(void)arg;
	for (;;) {
		struct pollfd *f = realloc(fds, sizeof(*fds) * (size_t)(n + 1));

		if (!f)
			break;
		fds = f;
		fds[0].fd = svc_pipe[0];
		fds[0].events = POLLIN;
		for (int i = 0; i < n; i++) {
			fds[i + 1].fd = ls[i]->cm_id->channel->fd;
			fds[i + 1].events = POLLIN;
		}
		if (poll(fds, (nfds_t)n + 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[0].revents) {
			struct svc_msg m;

			if (read(svc_pipe[0], &m, sizeof(m)) != (ssize_t)sizeof(m))
				break;
			if (m.add) {
				struct rsocket **g = realloc(ls, sizeof(*ls) * (size_t)(n + 1));

				if (g) {
					ls = g;
					ls[n++] = m.rs;
				}
			} else {
				for (int i = 0; i < n; i++)
					if (ls[i] == m.rs) {
						ls[i] = ls[--n];
						break;
					}
			}
			/* svc_notify waits for this (a removed listener may go) */
			pthread_mutex_lock(&svc_lock);
			svc_done++;
			pthread_cond_broadcast(&svc_cond);
			pthread_mutex_unlock(&svc_lock);
			continue;
		}
		for (int i = 0; i < n; i++)
			if (fds[i + 1].revents)
				rs_accept(ls[i]);
	}
	free(fds);
	free(ls);
	return NULL;
}

static int svc_notify(struct rsocket *rs, bool add)
{
	struct svc_msg m = { rs, add };
	int ret = 0;

	pthread_mutex_lock(&svc_lock);
	if (svc_pipe[0] < 0) {
		if (pipe2(svc_pipe, O_CLOEXEC)) {
			ret = -1;
			goto out;
		}
		if (urvt_thread_start(&svc_thread, svc_run, NULL)) {
			close(svc_pipe[0]);
			close(svc_pipe[1]);
			svc_pipe[0] = svc_pipe[1] = -1;
			ret = err_set(ENOMEM);
			goto out;
		}
		pthread_detach(svc_thread);
	}
	if (write(svc_pipe[1], &m, sizeof(m)) != (ssize_t)sizeof(m)) {
		ret = -1;
		goto out;
	}
	/* handled before we return: after a removal, rs is ours alone */
	{
		uint64_t ticket = ++svc_sent;

		while (svc_done < ticket)
			pthread_cond_wait(&svc_cond, &svc_lock);
	}
out:
	pthread_mutex_unlock(&svc_lock);
	return ret;
}

int rlisten(int s, int backlog)
{
	struct rsocket *rs = rs_lookup(s);

	if (!rs)
		return err_set(EBADF);
	if (rs->state == rs_listening)
		return 0;
	if (rdma_listen(rs->cm_id, backlog))
		return -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rs->accept_queue))
		return -1;
	if (rs->fd_flags & O_NONBLOCK)
		rs_set_fd_flags(rs->accept_queue[0], O_NONBLOCK);
	rs->state = rs_listening;
	return svc_notify(rs, true);
}

int raccept(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsocket *rs = rs_lookup(s), *n;
	ssize_t r;

	if (!rs)
		return err_set(EBADF);
	if (rs->state != rs_listening)
		return err_set(EBADF);
	r = read(rs->accept_queue[0], &n, sizeof(n));
	if (r != (ssize_t)sizeof(n))
		return r < 0 ? -1 : err_set(EIO);
	if (addr && addrlen)
		rgetpeername(n->index, addr, addrlen);
	return n->index;
}

/* Drive a connection forward: connect, or finish an accept. */
int rs_do_connect(struct rsocket *rs)
{
	struct rdma_conn_param param;
	struct rs_conn_data req;
	const struct rs_conn_data *resp;
	int ret = 0;

	pthread_mutex_lock(&rs->slock);
	switch (rs->state) {
	case rs_init:
	case rs_bound:
		ret = rdma_resolve_addr(rs->cm_id, NULL, &rs->cm_id->route.addr.dst_addr, 2000);
		if (ret)
			break;
		if (rs->route) {
			ret = rdma_set_option(rs->cm_id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, rs->route,
					      rs->route_len);
			free(rs->route);
			rs->route = NULL;
		} else {
			ret = rdma_resolve_route(rs->cm_id, 2000);
		}
		if (ret)
			break;
		ret = rs_create_ep(rs);
		if (ret)
			break;
		memset(&param, 0, sizeof(param));
		rs_format_conn_data(rs, &req);
		param.private_data = &req;
		param.private_data_len = sizeof(req);
		param.flow_control = 1;
		param.retry_count = 7;
		param.rnr_retry_count = 7;
		ret = rdma_connect(rs->cm_id, &param);
		if (!ret)
			goto connected;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			rs->state = rs_connecting;
		break;
	case rs_connecting:
		ret = ucma_complete(rs->cm_id);
		if (ret)
			break;
connected:
		resp = rs->cm_id->event->param.conn.private_data;
		if (rs->cm_id->event->param.conn.private_data_len < sizeof(*resp) ||
		    resp->version != 1) {
			ret = err_set(ENOTSUP);
			break;
		}
		rs_save_conn_data(rs, resp);
		rs->state = rs_connect_rdwr;
		break;
	case rs_accepting:
		if (!(rs->fd_flags & O_NONBLOCK))
			rs_set_fd_flags(rs->cm_id->channel->fd, 0);
		ret = ucma_complete(rs->cm_id);
		if (!(rs->fd_flags & O_NONBLOCK))
			rs_set_fd_flags(rs->cm_id->channel->fd, O_NONBLOCK);
		if (ret)
			break;
		rs->state = rs_connect_rdwr;
		break;
	case rs_connect_error:
	case rs_disconnected:
	case rs_error:
		ret = err_set(ENOTCONN);
		goto unlock;
	default:
		ret = (rs->state & rs_connected) ? 0 : err_set(EINVAL);
		goto unlock;
	}
	if (ret) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			errno = EINPROGRESS;
		} else {
			CM_DBG("rsocket %d: connecting: %s", rs->index, strerror(errno));
			rs->state = rs_connect_error;
			rs->err = errno;
		}
	}
unlock:
	pthread_mutex_unlock(&rs->slock);
	return ret;
}

int rconnect(int s, const struct sockaddr *addr, socklen_t len)
{
	struct rsocket *rs = rs_lookup(s);

	if (!rs)
		return err_set(EBADF);
	if (rs->state == rs_init || rs->state == rs_bound) {
		if (!len || len > sizeof(rs->cm_id->route.addr.dst_storage))
			return err_set(EINVAL);
		memcpy(&rs->cm_id->route.addr.dst_addr, addr, len);
	}
	return rs_do_connect(rs);
}

/* ------------------------------------------------------------------ */
/* Shutdown and close                                                 */
/* ------------------------------------------------------------------ */
int rshutdown(int s, int how)
{
	struct rsocket *rs = rs_lookup(s);
	int ctrl, ret = 0;

	if (!rs)
		return err_set(EBADF);
	if (rs->fd_flags & O_NONBLOCK)
		rfcntl(s, F_SETFL, 0);
	if (rs->state & rs_connected) {
		if (how == SHUT_RDWR) {
			ctrl = RS_CTRL_DISCONNECT;
			rs->state &= ~(rs_readable | rs_writable);
		} else if (how == SHUT_WR) {
			rs->state &= ~rs_writable;
			ctrl = (rs->state & rs_readable) ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
		} else {
			rs->state &= ~rs_readable;
			if (rs->state & rs_writable)
				goto out;
			ctrl = RS_CTRL_DISCONNECT;
		}
		if (!rs_ctrl_avail(rs)) {
			ret = rs_process_cq(rs, false, rs_conn_can_send_ctrl);
			if (ret)
				goto out;
		}
		if ((rs->state & rs_connected) && rs_ctrl_avail(rs)) {
			rs->ctrl_seqno++;
			ret = rs_post_msg(rs, rs_msg(RS_OP_CTRL, (uint32_t)ctrl));
		}
	}
	if (rs->state & rs_connected)
		rs_process_cq(rs, false, rs_conn_all_sends_done);
out:
	if ((rs->fd_flags & O_NONBLOCK) && (rs->state & rs_connected))
		rfcntl(s, F_SETFL, rs->fd_flags);
	if (rs->state & rs_disconnected) {
		/* the flushed receives wake a thread in rpoll; the DREQ goes
		 * when the id is destroyed (rdma-core's ucma_shutdown) */
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		ibv_req_notify_cq(rs->cm_id->recv_cq, 0);
		ibv_modify_qp(rs->cm_id->qp, &a, IBV_QP_STATE);
	}
	return ret;
}

int rclose(int s)
{
	struct rsocket *rs = rs_lookup(s);

	if (!rs)
		return EBADF; /* rdma-core returns the errno itself here */
	if (rs->state & rs_connected)
		rshutdown(s, SHUT_RDWR);
	if (rs->state == rs_listening) {
		struct rsocket *n;

		svc_notify(rs, false);
		/* connections accepted but never taken by raccept go too */
		rs_set_fd_flags(rs->accept_queue[0], O_NONBLOCK);
		while (read(rs->accept_queue[0], &n, sizeof(n)) == (ssize_t)sizeof(n))
			rs_free(n);
	}
	rs_free(rs);
	return 0;
}

static void rs_copy_addr(struct sockaddr *dst, const struct sockaddr *src, socklen_t *len)
{
	socklen_t size = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						    : sizeof(struct sockaddr_in);

	memcpy(dst, src, size < *len ? size : *len);
	*len = size;
}

int rgetpeername(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsocket *rs = rs_lookup(s);

	if (!rs)
		return err_set(EBADF);
	if (!(rs->state & rs_connected) && rs->state != rs_accepting &&
	    rs->state != rs_connecting)
		return err_set(ENOTCONN);
	rs_copy_addr(addr, rdma_get_peer_addr(rs->cm_id), addrlen);
	return 0;
}

int rgetsockname(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsocket *rs = rs_lookup(s);

	if (!rs)
		return err_set(EBADF);
	rs_copy_addr(addr, rdma_get_local_addr(rs->cm_id), addrlen);
	return 0;
}
