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

#include "rdmacm/cma_priv.h"

#define RS_OLAP_START_SIZE 2048    /* first chunk of a send; doubles up to: */
#define RS_MAX_TRANSFER 65536
#define RS_SNDLOWAT 2048           /* send room below which we wait */
#define RS_QP_MIN_SIZE 16
#define RS_QP_MAX_SIZE 0xfffe
#define RS_QP_CTRL_SIZE 4          /* send queue entries kept for control */
#define RS_SGL_SIZE 2              /* grant slots: the two halves of a ring */
#define RS_POLL_US 10              /* spin this long before sleeping */

/* the immediate data: op in bits 31..29, the rest its argument */
enum {
	RS_OP_DATA = 0,
	RS_OP_WRITE = 2,           /* riowrite: local only, never sent */
	RS_OP_SGL = 4,
	RS_OP_IOMAP_SGL = 6,
	RS_OP_CTRL = 7,
};
enum { RS_CTRL_DISCONNECT, RS_CTRL_KEEPALIVE, RS_CTRL_SHUTDOWN };

static inline uint32_t rs_msg(uint32_t op, uint32_t data)
{
	return op << 29 | data;
}
#define MSG_OP(m) ((m) >> 29)
#define MSG_DATA(m) ((m)&0x1fffffff)
#define WR_RECV (1ull << 63)

/* On the wire (and in the grant / iomap tables the peer writes). */
struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

struct rs_iomap {
	uint64_t offset;
	struct rs_sge sge;
};

#define RS_CONN_FLAG_NET 1         /* the sender is big-endian */
#define RS_CONN_FLAG_IOMAP 2
struct rs_conn_data {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;          /* big-endian, like every field below */
	uint8_t reserved[3];
	uint8_t target_iomap_size; /* scaled: rs_scale_to_value */
	struct rs_sge target_sgl;
	struct rs_sge data_buf;
};

/* states, ordered passive < connecting < connected < disconnected */
enum {
	rs_init = 0,
	rs_bound = 0x0001,
	rs_listening = 0x0002,
	rs_opening = 0x0004,
	rs_connecting = rs_opening | 0x0040,
	rs_accepting = rs_opening | 0x0080,
	rs_connected = 0x0100,
	rs_writable = 0x0200,
	rs_readable = 0x0400,
	rs_connect_rdwr = rs_connected | rs_readable | rs_writable,
	rs_connect_error = 0x0800,
	rs_disconnected = 0x1000,
	rs_error = 0x2000,
};

struct rs_iomap_mr {
	struct rs_iomap_mr *next;
	struct ibv_mr *mr;
	uint64_t offset;
	int index;                 /* slot in the peer's table; -1: local only */
	bool announced;
};

struct rsocket {
	int index;
	struct rdma_cm_id *cm_id;
	int state, err, fd_flags;
	pthread_mutex_t slock, rlock, cq_lock, cq_wait_lock, map_lock;

	/* options (fixed once the QP exists) */
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	int target_iomap_size;
	uint64_t so_opts, tcp_opts, ipv6_opts;
	void *route;
	size_t route_len;

	/* sending */
	uint16_t sseq_no, sseq_comp;       /* data messages sent / allowed */
	unsigned int ctrl_seqno, ctrl_max_seqno;
	int sqe_avail;
	uint32_t sbuf_bytes_avail;
	uint8_t *sbuf;
	struct ibv_mr *smr;
	struct ibv_sge ssgl[2];
	struct rs_sge peer_sgl;            /* the peer's grant table */
	struct rs_sge peer_iomap;          /* the peer's iomap table */
	int peer_sge;                      /* our next grant goes to this slot */
	bool swap;                         /* the peer's byte order differs */

	/* what the peer wrote to us: grants, then its iomap entries */
	void *tgt;
	struct ibv_mr *tgt_mr;
	volatile struct rs_sge *grant;
	struct rs_iomap *tgt_iomap;
	int grant_idx;

	/* receiving */
	uint16_t rseq_no, rseq_comp;
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	uint32_t rbuf_bytes_avail, rbuf_free_offset, rbuf_offset;
	struct {
		uint32_t op, data;
	} *rmsg;
	int rmsg_head, rmsg_tail;
	int cq_armed, unack_cqe;

	/* riomap: announced to the peer, being announced, local only */
	struct rs_iomap_mr *iomaps, *iomap_queue;
	struct rs_iomap_mr *remote_slots;  /* peer_iomap.length of them */

	/* listener */
	int accept_queue[2];               /* the service thread -> raccept */
};

static uint16_t def_inline = 64, def_sqsize = 384, def_rqsize = 384;
static uint32_t def_mem = 1 << 17, def_wmem = 1 << 17;

static int err_set(int e)
{
	errno = e;
	return -1;
}

static uint16_t u16min(uint32_t a, uint32_t b)
{
	return (uint16_t)(a < b ? a : b);
}

/* rdma-core's 8-bit scale for table sizes (the iomap size in conn data) */
static int rs_value_to_scale(int value, int bits)
{
	return value <= (1 << (bits - 1)) ? value : (1 << (bits - 1)) | (value >> bits);
}

static int rs_scale_to_value(int value, int bits)
{
	return value <= (1 << (bits - 1)) ? value : (value & ~(1 << (bits - 1))) << bits;
}

static uint64_t now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* ------------------------------------------------------------------ */
/* rsocket numbers: a two-level table indexed by fd, pages never freed  */
/* ------------------------------------------------------------------ */
#define IDX_PAGE 1024
#define IDX_PAGES 1024
static struct rsocket **idx_pages[IDX_PAGES];
static pthread_mutex_t idx_lock = PTHREAD_MUTEX_INITIALIZER;

static struct rsocket *rs_lookup(int s)
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

static void rs_free_iomaps(struct rs_iomap_mr **list)
{
	while (*list) {
		struct rs_iomap_mr *m = *list;

		*list = m->next;
		if (m->mr)
			ibv_dereg_mr(m->mr);
		if (m->index < 0)
			free(m);
	}
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
static int set_fd_flags(int fd, int flags)
{
	int old = fcntl(fd, F_GETFL);

	if (old < 0)
		return -1;
	return fcntl(fd, F_SETFL, (old & ~O_NONBLOCK) | (flags & O_NONBLOCK));
}

static int rs_post_recv(struct rsocket *rs)
{
	/* no buffer: the data lands by RDMA write, the WQE takes the immediate */
	struct ibv_recv_wr wr = { .wr_id = WR_RECV }, *bad;

	return ibv_post_recv(rs->cm_id->qp, &wr, &bad) ? err_set(ENOMEM) : 0;
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
	if (set_fd_flags(id->recv_cq_channel->fd, O_NONBLOCK))
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
/* Posting                                                            */
/* ------------------------------------------------------------------ */

/* A message that is only an immediate (credits, control). */
static int rs_post_msg(struct rsocket *rs, uint32_t msg)
{
	struct ibv_send_wr wr = { .wr_id = msg, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .imm_data = htobe32(msg) }, *bad;

	return ibv_post_send(rs->cm_id->qp, &wr, &bad) ? err_set(ENOMEM) : 0;
}

static int rs_post_write(struct rsocket *rs, struct ibv_sge *sgl, int nsge, uint32_t msg,
			 bool with_imm, int flags, uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr = { .wr_id = msg, .sg_list = sgl, .num_sge = nsge,
				  .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
				  .send_flags = (unsigned int)flags }, *bad;

	if (with_imm)
		wr.imm_data = htobe32(msg);
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(rs->cm_id->qp, &wr, &bad) ? err_set(ENOMEM) : 0;
}

/* The grant slot is used up before the write is posted: the peer may
 * refill it as soon as the data lands. */
static int rs_write_data(struct rsocket *rs, struct ibv_sge *sgl, int nsge, uint32_t len,
			 int flags)
{
	volatile struct rs_sge *g = &rs->grant[rs->grant_idx];
	uint64_t addr = g->addr;
	uint32_t rkey = g->key;

	rs->sseq_no++;
	rs->sqe_avail--;
	rs->sbuf_bytes_avail -= len;
	g->addr += len;
	g->length -= len;
	if (!g->length)
		rs->grant_idx = (rs->grant_idx + 1) % RS_SGL_SIZE;
	return rs_post_write(rs, sgl, nsge, rs_msg(RS_OP_DATA, len), true, flags, addr, rkey);
}

static uint32_t rs_sbuf_left(const struct rsocket *rs)
{
	return (uint32_t)((uintptr_t)(rs->sbuf + rs->sbuf_size) - rs->ssgl[0].addr);
}

/* Stage len bytes of buf for sending: inline, or copied into the send
 * ring in one or two pieces; returns the SGE count for *sgl. */
static int rs_stage(struct rsocket *rs, const void *buf, uint32_t len, struct ibv_sge *inl,
		    struct ibv_sge **sgl, int *flags)
{
	uint32_t left = rs_sbuf_left(rs);

	if (len <= rs->sq_inline) {
		inl->addr = (uintptr_t)buf;
		inl->length = len;
		inl->lkey = 0;
		*sgl = inl;
		*flags = IBV_SEND_INLINE;
		return 1;
	}
	*sgl = rs->ssgl;
	*flags = 0;
	if (len <= left) {
		memcpy((void *)(uintptr_t)rs->ssgl[0].addr, buf, len);
		rs->ssgl[0].length = len;
		return 1;
	}
	memcpy((void *)(uintptr_t)rs->ssgl[0].addr, buf, left);
	rs->ssgl[0].length = left;
	rs->ssgl[1].length = len - left;
	memcpy(rs->sbuf, (const uint8_t *)buf + left, rs->ssgl[1].length);
	return 2;
}

/* Once posted: where the next copy into the send ring starts. */
static void rs_advance(struct rsocket *rs, int nsge, uint32_t len, int flags)
{
	if (flags & IBV_SEND_INLINE)
		return;
	if (nsge == 2)
		rs->ssgl[0].addr = (uintptr_t)rs->sbuf + rs->ssgl[1].length;
	else if (len < rs_sbuf_left(rs))
		rs->ssgl[0].addr += len;
	else
		rs->ssgl[0].addr = (uintptr_t)rs->sbuf;
}

static void rs_send_credits(struct rsocket *rs)
{
	uint32_t msg = rs_msg(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));

	rs->ctrl_seqno++;
	rs->rseq_comp = (uint16_t)(rs->rseq_no + (rs->rq_size >> 1));
	if (rs->rbuf_bytes_avail >= (rs->rbuf_size >> 1)) {
		struct rs_sge sge;
		struct ibv_sge isge;
		int flags;

		sge.addr = (uintptr_t)&rs->rbuf[rs->rbuf_free_offset];
		sge.key = rs->rmr->rkey;
		sge.length = rs->rbuf_size >> 1;
		if (rs->swap) {
			sge.addr = __builtin_bswap64(sge.addr);
			sge.key = __builtin_bswap32(sge.key);
			sge.length = __builtin_bswap32(sge.length);
		}
		if (rs->sq_inline >= sizeof(sge)) {
			isge.addr = (uintptr_t)&sge;
			isge.lkey = 0;
			flags = IBV_SEND_INLINE;
		} else {
			void *slot = rs->sbuf + rs->sbuf_size +
				     sizeof(sge) * (rs->ctrl_seqno & (RS_QP_CTRL_SIZE - 1));

			memcpy(slot, &sge, sizeof(sge));
			isge.addr = (uintptr_t)slot;
			isge.lkey = rs->smr->lkey;
			flags = 0;
		}
		isge.length = sizeof(sge);
		rs_post_write(rs, &isge, 1, msg, true, flags,
			      rs->peer_sgl.addr + (uint64_t)rs->peer_sge * sizeof(struct rs_sge),
			      rs->peer_sgl.key);
		rs->rbuf_bytes_avail -= rs->rbuf_size >> 1;
		rs->rbuf_free_offset += rs->rbuf_size >> 1;
		if (rs->rbuf_free_offset >= rs->rbuf_size)
			rs->rbuf_free_offset = 0;
		if (++rs->peer_sge == (int)rs->peer_sgl.length)
			rs->peer_sge = 0;
	} else {
		rs_post_msg(rs, msg);
	}
}

static bool rs_ctrl_avail(const struct rsocket *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max_seqno;
}

static bool rs_give_credits(const struct rsocket *rs)
{
	return (rs->rbuf_bytes_avail >= (rs->rbuf_size >> 1) ||
		(int16_t)(rs->rseq_no - rs->rseq_comp) >= 0) &&
	       rs_ctrl_avail(rs) && (rs->state & rs_connected);
}

static void rs_update_credits(struct rsocket *rs)
{
	if (rs_give_credits(rs))
		rs_send_credits(rs);
}

/* ------------------------------------------------------------------ */
/* Completions                                                        */
/* ------------------------------------------------------------------ */
static int rs_poll_cq(struct rsocket *rs)
{
	struct ibv_wc wc;
	int ret, rcnt = 0;

	while ((ret = ibv_poll_cq(rs->cm_id->recv_cq, 1, &wc)) > 0) {
		if (wc.wr_id & WR_RECV) {
			uint32_t msg;

			if (wc.status != IBV_WC_SUCCESS)
				continue;
			rcnt++;
			msg = be32toh(wc.imm_data);
			switch (MSG_OP(msg)) {
			case RS_OP_SGL:
				rs->sseq_comp = (uint16_t)MSG_DATA(msg);
				break;
			case RS_OP_IOMAP_SGL:
				break; /* the entry is in our table already */
			case RS_OP_CTRL:
				if (MSG_DATA(msg) == RS_CTRL_DISCONNECT) {
					rs->state = rs_disconnected;
					return 0;
				}
				if (MSG_DATA(msg) == RS_CTRL_SHUTDOWN) {
					if (rs->state & rs_writable) {
						rs->state &= ~rs_readable;
					} else {
						rs->state = rs_disconnected;
						return 0;
					}
				}
				break;
			case RS_OP_WRITE:
				break;
			default:
				rs->rmsg[rs->rmsg_tail].op = MSG_OP(msg);
				rs->rmsg[rs->rmsg_tail].data = MSG_DATA(msg);
				if (++rs->rmsg_tail == rs->rq_size + 1)
					rs->rmsg_tail = 0;
				break;
			}
		} else {
			uint32_t msg = (uint32_t)wc.wr_id;

			switch (MSG_OP(msg)) {
			case RS_OP_SGL:
				rs->ctrl_max_seqno++;
				break;
			case RS_OP_CTRL:
				rs->ctrl_max_seqno++;
				if (MSG_DATA(msg) == RS_CTRL_DISCONNECT)
					rs->state = rs_disconnected;
				break;
			case RS_OP_IOMAP_SGL:
				rs->sqe_avail++;
				rs->sbuf_bytes_avail += sizeof(struct rs_iomap);
				break;
			default:
				rs->sqe_avail++;
				rs->sbuf_bytes_avail += MSG_DATA(msg);
				break;
			}
			if (wc.status != IBV_WC_SUCCESS && (rs->state & rs_connected)) {
				rs->state = rs_error;
				rs->err = EIO;
			}
		}
	}
	if (rs->state & rs_connected) {
		while (!ret && rcnt--)
			ret = rs_post_recv(rs);
		if (ret) {
			rs->state = rs_error;
			rs->err = errno;
		}
	}
	return ret;
}

/* Take the CQ's event (waiting for it with wait); another thread taking
 * it first is no error. */
static int rs_get_cq_event(struct rsocket *rs, bool wait)
{
	struct pollfd p = { .fd = rs->cm_id->recv_cq_channel->fd, .events = POLLIN };
	struct ibv_cq *cq;
	void *ctx;
	int ret;

	if (!rs->cq_armed)
		return 0;
	while (wait && poll(&p, 1, -1) < 0)
		if (errno != EINTR)
			return -1;
	ret = ibv_get_cq_event(rs->cm_id->recv_cq_channel, &cq, &ctx);
	if (ret && errno == EAGAIN)
		return 0;
	if (!ret) {
		if (++rs->unack_cqe >= rs->sq_size + rs->rq_size) {
			ibv_ack_cq_events(rs->cm_id->recv_cq, (unsigned int)rs->unack_cqe);
			rs->unack_cqe = 0;
		}
		rs->cq_armed = 0;
	} else if (errno != EAGAIN && errno != EINTR) {
		rs->state = rs_error;
	}
	return ret;
}

/*
 * Poll and handle completions until test() holds. rsend and rrecv may run
 * at once in two threads and both need completions: cq_lock covers
 * polling, cq_wait_lock lets one of them sleep on the channel while the
 * other keeps polling.
 */
static int rs_process_cq(struct rsocket *rs, bool nonblock, bool (*test)(const struct rsocket *))
{
	int ret;

	pthread_mutex_lock(&rs->cq_lock);
	do {
		rs_update_credits(rs);
		ret = rs_poll_cq(rs);
		if (test(rs)) {
			ret = 0;
			break;
		} else if (ret) {
			break;
		} else if (nonblock) {
			ret = err_set(EWOULDBLOCK);
		} else if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->cm_id->recv_cq, 0);
			rs->cq_armed = 1;
		} else {
			rs_update_credits(rs);
			pthread_mutex_lock(&rs->cq_wait_lock);
			pthread_mutex_unlock(&rs->cq_lock);
			ret = rs_get_cq_event(rs, true);
			pthread_mutex_unlock(&rs->cq_wait_lock);
			pthread_mutex_lock(&rs->cq_lock);
		}
	} while (!ret);
	rs_update_credits(rs);
	pthread_mutex_unlock(&rs->cq_lock);
	return ret;
}

static int rs_get_comp(struct rsocket *rs, bool nonblock, bool (*test)(const struct rsocket *))
{
	uint64_t start = 0;
	int ret;

	do {
		ret = rs_process_cq(rs, true, test);
		if (!ret || nonblock || errno != EWOULDBLOCK)
			return ret;
		if (!start)
			start = now_us();
	} while (now_us() - start <= RS_POLL_US);
	return rs_process_cq(rs, false, test);
}

static bool rs_nonblocking(const struct rsocket *rs, int flags)
{
	return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

static bool rs_is_cq_armed(const struct rsocket *rs)
{
	return rs->cq_armed;
}

static bool rs_poll_all(const struct rsocket *rs)
{
	(void)rs;
	return true;
}

/* Flow control in the QP prevents overrunning the peer's receive queue;
 * the grant and credit checks keep its ring and message queue safe. */
static bool rs_can_send(const struct rsocket *rs)
{
	return rs->sqe_avail && rs->sbuf_bytes_avail >= RS_SNDLOWAT &&
	       rs->sseq_no != rs->sseq_comp && rs->grant[rs->grant_idx].length != 0;
}

static bool rs_conn_can_send(const struct rsocket *rs)
{
	return rs_can_send(rs) || !(rs->state & rs_writable);
}

static bool rs_conn_can_send_ctrl(const struct rsocket *rs)
{
	return rs_ctrl_avail(rs) || !(rs->state & rs_connected);
}

static bool rs_have_rdata(const struct rsocket *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

static bool rs_conn_have_rdata(const struct rsocket *rs)
{
	return rs_have_rdata(rs) || !(rs->state & rs_readable);
}

static bool rs_conn_all_sends_done(const struct rsocket *rs)
{
	return ((int)rs->ctrl_max_seqno - (int)rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size ||
	       !(rs->state & rs_connected);
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
	set_fd_flags(id->channel->fd, O_NONBLOCK);
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
		if (pthread_create(&svc_thread, NULL, svc_run, NULL)) {
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
		set_fd_flags(rs->accept_queue[0], O_NONBLOCK);
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
static int rs_do_connect(struct rsocket *rs)
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
			set_fd_flags(rs->cm_id->channel->fd, 0);
		ret = ucma_complete(rs->cm_id);
		if (!(rs->fd_flags & O_NONBLOCK))
			set_fd_flags(rs->cm_id->channel->fd, O_NONBLOCK);
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
/* Receiving                                                          */
/* ------------------------------------------------------------------ */

/* Copy up to len bytes of received data out, without consuming it. */
static size_t rs_peek(const struct rsocket *rs, uint8_t *buf, size_t len)
{
	size_t left = len;
	int head = rs->rmsg_head;
	uint32_t off = rs->rbuf_offset;

	while (left && head != rs->rmsg_tail) {
		uint32_t n = rs->rmsg[head].data, end;

		if (left < n)
			n = (uint32_t)left;
		else if (++head == rs->rq_size + 1)
			head = 0;
		left -= n;
		end = rs->rbuf_size - off;
		if (n > end) {
			memcpy(buf, &rs->rbuf[off], end);
			buf += end;
			n -= end;
			off = 0;
		}
		memcpy(buf, &rs->rbuf[off], n);
		buf += n;
		off += n;
	}
	return len - left;
}

/*
 * The opening rrecv and rsend share: the rsocket behind s, its connection
 * driven forward first while it is still opening; NULL with errno set
 * (EAGAIN while a nonblocking connect is under way, as for a socket).
 */
static struct rsocket *rs_io_begin(int s)
{
	struct rsocket *rs = rs_lookup(s);

	if (!rs) {
		errno = EBADF;
		return NULL;
	}
	if ((rs->state & rs_opening) && rs_do_connect(rs)) {
		if (errno == EINPROGRESS)
			errno = EAGAIN;
		return NULL;
	}
	return rs;
}

ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	struct rsocket *rs = rs_io_begin(s);
	uint8_t *out = buf;
	size_t left = len;
	int ret = 0;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->rlock);
	do {
		if (!rs_have_rdata(rs)) {
			ret = rs_get_comp(rs, rs_nonblocking(rs, flags), rs_conn_have_rdata);
			if (ret)
				break;
		}
		if (flags & MSG_PEEK) {
			left -= rs_peek(rs, out, left);
			break;
		}
		while (left && rs_have_rdata(rs)) {
			uint32_t n = rs->rmsg[rs->rmsg_head].data, end;

			if (left < n) {
				n = (uint32_t)left;
				rs->rmsg[rs->rmsg_head].data -= n;
			} else {
				rs->rseq_no++;
				if (++rs->rmsg_head == rs->rq_size + 1)
					rs->rmsg_head = 0;
			}
			left -= n;
			end = rs->rbuf_size - rs->rbuf_offset;
			if (n > end) {
				memcpy(out, &rs->rbuf[rs->rbuf_offset], end);
				rs->rbuf_offset = 0;
				out += end;
				n -= end;
				rs->rbuf_bytes_avail += end;
			}
			memcpy(out, &rs->rbuf[rs->rbuf_offset], n);
			rs->rbuf_offset += n;
			out += n;
			rs->rbuf_bytes_avail += n;
		}
	} while (left && (flags & MSG_WAITALL) && (rs->state & rs_readable));
	pthread_mutex_unlock(&rs->rlock);
	return (ret && left == len) ? ret : (ssize_t)(len - left);
}

ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *alen)
{
	ssize_t ret = rrecv(s, buf, len, flags);

	if (ret > 0 && src)
		rgetpeername(s, src, alen);
	return ret;
}

/* The first buffer only, as rdma-core does. */
ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return err_set(ENOTSUP);
	if (!msg->msg_iovlen)
		return 0;
	return rrecv(s, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags);
}

ssize_t rread(int s, void *buf, size_t count)
{
	return rrecv(s, buf, count, 0);
}

ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	if (iovcnt <= 0)
		return 0;
	return rrecv(s, iov[0].iov_base, iov[0].iov_len, 0);
}

/* Until a send may be posted (or at once, nonblocking): 0, or -1 with errno. */
static int rs_wait_send(struct rsocket *rs, int flags)
{
	int ret;

	if (rs_can_send(rs))
		return 0;
	ret = rs_get_comp(rs, rs_nonblocking(rs, flags), rs_conn_can_send);
	if (ret)
		return ret;
	return rs->state & rs_writable ? 0 : err_set(ECONNRESET);
}

/* The next chunk of a send with left bytes to go: chunks double up to
 * RS_MAX_TRANSFER, so a long send overlaps its first completions; never
 * more than the send buffer has. */
static uint32_t rs_next_chunk(struct rsocket *rs, uint32_t *olen, size_t left)
{
	uint32_t xfer;

	if (*olen < left) {
		xfer = *olen;
		if (*olen < RS_MAX_TRANSFER)
			*olen <<= 1;
	} else {
		xfer = (uint32_t)left;
	}
	return xfer < rs->sbuf_bytes_avail ? xfer : rs->sbuf_bytes_avail;
}


/* ------------------------------------------------------------------ */
/* Sending                                                            */
/* ------------------------------------------------------------------ */

/* Announce queued riomap()s: write each into the peer's iomap table. */
static int rs_send_iomaps(struct rsocket *rs, int flags)
{
	int ret = 0;

	pthread_mutex_lock(&rs->map_lock);
	while (rs->iomap_queue) {
		struct rs_iomap_mr *m = rs->iomap_queue;
		struct rs_iomap iom;
		struct ibv_sge inl, *sgl;
		int nsge, f;

		ret = rs_wait_send(rs, flags);
		if (ret)
			break;
		iom.offset = m->offset;
		iom.sge.addr = (uintptr_t)m->mr->addr;
		iom.sge.length = (uint32_t)m->mr->length;
		iom.sge.key = m->mr->rkey;
		if (rs->swap) {
			iom.offset = __builtin_bswap64(iom.offset);
			iom.sge.addr = __builtin_bswap64(iom.sge.addr);
			iom.sge.length = __builtin_bswap32(iom.sge.length);
			iom.sge.key = __builtin_bswap32(iom.sge.key);
		}
		nsge = rs_stage(rs, &iom, sizeof(iom), &inl, &sgl, &f);
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= sizeof(iom);
		ret = rs_post_write(rs, sgl, nsge, rs_msg(RS_OP_IOMAP_SGL, (uint32_t)m->index), true, f,
				    rs->peer_iomap.addr + (uint64_t)m->index * sizeof(iom),
				    rs->peer_iomap.key);
		rs_advance(rs, nsge, sizeof(iom), f);
		rs->iomap_queue = m->next;
		m->next = rs->iomaps;
		rs->iomaps = m;
		m->announced = true;
		if (ret)
			break;
	}
	pthread_mutex_unlock(&rs->map_lock);
	return ret;
}

/* The opening of every send (rsend, riowrite): the send lock taken and
 * queued riomap()s announced first, so the peer knows of them before the
 * data that may name them; nonzero: the send fails, the lock still held. */
static int rs_send_begin(struct rsocket *rs, int flags)
{
	pthread_mutex_lock(&rs->slock);
	return rs->iomap_queue ? rs_send_iomaps(rs, flags) : 0;
}

ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	struct rsocket *rs = rs_io_begin(s);
	const uint8_t *in = buf;
	size_t left = len;
	uint32_t xfer, olen = RS_OLAP_START_SIZE;
	int ret;

	if (!rs)
		return -1;
	ret = rs_send_begin(rs, flags);
	if (ret)
		goto out;
	for (; left; left -= xfer, in += xfer) {
		struct ibv_sge inl, *sgl;
		int nsge, f;

		ret = rs_wait_send(rs, flags);
		if (ret)
			break;
		xfer = rs_next_chunk(rs, &olen, left);
		if (xfer > rs->grant[rs->grant_idx].length)
			xfer = rs->grant[rs->grant_idx].length;
		nsge = rs_stage(rs, in, xfer, &inl, &sgl, &f);
		ret = rs_write_data(rs, sgl, nsge, xfer, f);
		rs_advance(rs, nsge, xfer, f);
		if (ret)
			break;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	return (ret && left == len) ? ret : (ssize_t)(len - left);
}

ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *dst,
		socklen_t alen)
{
	(void)alen;
	if (dst)
		return err_set(EISCONN);
	return rsend(s, buf, len, flags);
}

/* Gather the vectors, one rsend per vector run (rdma-core copies them
 * into its send buffer the same way). */
static ssize_t rsendv(int s, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0;

	for (int i = 0; i < iovcnt; i++) {
		ssize_t r;

		if (!iov[i].iov_len)
			continue;
		r = rsend(s, iov[i].iov_base, iov[i].iov_len, flags);
		if (r < 0)
			return total ? total : r;
		total += r;
		if ((size_t)r < iov[i].iov_len)
			break;
	}
	return total;
}

ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return err_set(ENOTSUP);
	return rsendv(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rwrite(int s, const void *buf, size_t count)
{
	return rsend(s, buf, count, 0);
}

ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	return rsendv(s, iov, iovcnt, 0);
}

/* ------------------------------------------------------------------ */
/* rpoll / rselect                                                    */
/* ------------------------------------------------------------------ */

/* What is ready on rs now; nonblocking CQ work only. */
static short rs_poll_rs(struct rsocket *rs, short events, bool nonblock,
			bool (*test)(const struct rsocket *))
{
	struct pollfd fds;

check_cq:
	if ((rs->state & rs_connected) || rs->state == rs_disconnected || (rs->state & rs_error)) {
		short revents = 0;

		rs_process_cq(rs, nonblock, test);
		if ((events & POLLIN) && rs_conn_have_rdata(rs))
			revents |= POLLIN;
		if ((events & POLLOUT) && rs_can_send(rs))
			revents |= POLLOUT;
		/* like TCP (and unlike rdma-core): no hang-up while received
		 * data is still to be read, so poll-driven readers get it all */
		if (!(rs->state & rs_connected) && !(rs->state == rs_disconnected && rs_have_rdata(rs)))
			revents |= rs->state == rs_disconnected ? POLLHUP : POLLERR;
		return revents;
	}
	if (rs->state == rs_listening) {
		fds.fd = rs->accept_queue[0];
		fds.events = events;
		fds.revents = 0;
		poll(&fds, 1, 0);
		return fds.revents;
	}
	if (rs->state & rs_opening) {
		if (rs_do_connect(rs) && errno == EINPROGRESS)
			errno = 0;
		else
			goto check_cq;
	}
	if (rs->state == rs_connect_error)
		return (short)((events & (POLLIN | POLLOUT)) | POLLERR);
	return 0;
}

/* The file descriptor that wakes up when rs may have changed. */
static int rs_wait_fd(const struct rsocket *rs)
{
	if (rs->state == rs_listening)
		return rs->accept_queue[0];
	if (rs->state >= rs_connected && rs->cm_id->recv_cq_channel)
		return rs->cm_id->recv_cq_channel->fd;
	return rs->cm_id->channel->fd;
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	uint64_t deadline = timeout > 0 ? now_us() + (uint64_t)timeout * 1000 : 0;
	struct pollfd *rfds;
	int ret;

	rfds = calloc(nfds ? nfds : 1, sizeof(*rfds));
	if (!rfds)
		return err_set(ENOMEM);
	for (;;) {
		int cnt = 0, wait_ms = timeout < 0 ? -1 : 0;

		/* what is ready now, each CQ armed so that a completion wakes us */
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsocket *rs = rs_lookup(fds[i].fd);

			fds[i].revents = 0;
			if (rs) {
				fds[i].revents = rs_poll_rs(rs, fds[i].events, false, rs_is_cq_armed);
				rfds[i].fd = rs_wait_fd(rs);
				rfds[i].events = POLLIN;
				cnt += !!fds[i].revents;
			} else {
				rfds[i].fd = fds[i].fd;
				rfds[i].events = fds[i].events;
			}
			rfds[i].revents = 0;
		}
		if (timeout > 0) {
			uint64_t now = now_us();

			wait_ms = now >= deadline ? 0 : (int)((deadline - now + 999) / 1000);
		}
		ret = poll(rfds, nfds, cnt ? 0 : wait_ms);
		if (ret < 0)
			break;
		for (nfds_t i = 0; i < nfds; i++)
			if (!rs_lookup(fds[i].fd)) {
				fds[i].revents = rfds[i].revents;
				cnt += !!fds[i].revents;
			}
		if (cnt || !ret) {
			ret = cnt;
			break;
		}
		/* an rsocket's fd fired: take its event, look again */
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsocket *rs = rs_lookup(fds[i].fd);

			if (!rs || !rfds[i].revents)
				continue;
			if (rs->state >= rs_connected && rs->cm_id->recv_cq_channel) {
				pthread_mutex_lock(&rs->cq_wait_lock);
				rs_get_cq_event(rs, false);
				pthread_mutex_unlock(&rs->cq_wait_lock);
			}
			fds[i].revents = rs_poll_rs(rs, fds[i].events, true, rs_poll_all);
			cnt += !!fds[i].revents;
		}
		if (cnt) {
			ret = cnt;
			break;
		}
		if (timeout == 0 || (timeout > 0 && now_us() >= deadline)) {
			ret = 0;
			break;
		}
	}
	free(rfds);
	return ret;
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
	    struct timeval *timeout)
{
	struct pollfd *fds;
	int n = 0, ret, to;

	fds = calloc((size_t)(nfds > 0 ? nfds : 1), sizeof(*fds));
	if (!fds)
		return err_set(ENOMEM);
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (ev || (exceptfds && FD_ISSET(fd, exceptfds))) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	to = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
	ret = rpoll(fds, (nfds_t)n, to);
	if (ret < 0) {
		free(fds);
		return ret;
	}
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	ret = 0;
	for (int i = 0; i < n; i++) {
		bool any = false;

		if (readfds && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(fds[i].fd, readfds);
			any = true;
		}
		if (writefds && (fds[i].revents & (POLLOUT | POLLERR))) {
			FD_SET(fds[i].fd, writefds);
			any = true;
		}
		if (exceptfds && (fds[i].revents & POLLERR)) {
			FD_SET(fds[i].fd, exceptfds);
			any = true;
		}
		ret += any;
	}
	free(fds);
	return ret;
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
		set_fd_flags(rs->accept_queue[0], O_NONBLOCK);
		while (read(rs->accept_queue[0], &n, sizeof(n)) == (ssize_t)sizeof(n))
			rs_free(n);
	}
	rs_free(rs);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Names and options                                                  */
/* ------------------------------------------------------------------ */
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

static int opt_int(const void *optval, socklen_t optlen)
{
	return optval && optlen >= sizeof(int) ? *(const int *)optval : 0;
}

/*
 * rsetsockopt's levels. Each answers 0 (set), -1 with errno set, or -1
 * with errno 0 for an option it does not know (ENOTSUP); *on is what the
 * level's option bits record for optname.
 */
static int rs_set_socket_opt(struct rsocket *rs, int optname, const void *optval,
			     socklen_t optlen, int *on)
{
	int ret;

	switch (optname) {
	case SO_REUSEADDR:
		ret = rdma_set_option(rs->cm_id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
				      (void *)optval, optlen);
		if (ret && rs->state != rs_init)
			ret = 0; /* bound already: as rdma-core on IB */
		*on = opt_int(optval, optlen);
		return ret;
	case SO_RCVBUF:
		if (!rs->rbuf)
			rs->rbuf_size = (uint32_t)opt_int(optval, optlen) << 1;
		if (rs->rbuf_size < RS_SNDLOWAT << 1)
			rs->rbuf_size = RS_SNDLOWAT << 1;
		return 0;
	case SO_SNDBUF:
		if (!rs->sbuf)
			rs->sbuf_size = (uint32_t)opt_int(optval, optlen) << 1;
		if (rs->sbuf_size < RS_SNDLOWAT)
			rs->sbuf_size = RS_SNDLOWAT << 1;
		return 0;
	case SO_LINGER:
		/* inverted, so that the zeroed default means on */
		*on = optlen >= sizeof(struct linger) && !((const struct linger *)optval)->l_onoff;
		return 0;
	case SO_KEEPALIVE:
	case SO_OOBINLINE:
		*on = opt_int(optval, optlen);
		return 0;
	default:
		return -1;
	}
}

static int rs_set_tcp_opt(int optname, const void *optval, socklen_t optlen, int *on)
{
	switch (optname) {
	case TCP_KEEPCNT:
	case TCP_KEEPINTVL:
	case TCP_KEEPIDLE:
	case TCP_MAXSEG:
		return 0;
	case TCP_NODELAY:
		*on = opt_int(optval, optlen);
		return 0;
	default:
		return -1;
	}
}

static int rs_set_ipv6_opt(struct rsocket *rs, int optname, const void *optval,
			   socklen_t optlen, int *on)
{
	if (optname != IPV6_V6ONLY)
		return -1;
	*on = opt_int(optval, optlen);
	return rdma_set_option(rs->cm_id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, (void *)optval,
			       optlen);
}

/* The QP's sizes and the route: only before the connection is made. */
static int rs_set_rdma_opt(struct rsocket *rs, int optname, const void *optval,
			   socklen_t optlen)
{
	int value = opt_int(optval, optlen);

	if (rs->state >= rs_opening)
		return err_set(EINVAL);
	switch (optname) {
	case RDMA_SQSIZE:
		rs->sq_size = u16min((uint32_t)value, RS_QP_MAX_SIZE);
		return 0;
	case RDMA_RQSIZE:
		rs->rq_size = u16min((uint32_t)value, RS_QP_MAX_SIZE);
		return 0;
	case RDMA_INLINE:
		rs->sq_inline = u16min((uint32_t)value, RS_QP_MAX_SIZE);
		return 0;
	case RDMA_IOMAPSIZE:
		rs->target_iomap_size =
			rs_scale_to_value((uint8_t)rs_value_to_scale(value, 8), 8);
		return 0;
	case RDMA_ROUTE:
		free(rs->route);
		rs->route = malloc(optlen);
		if (!rs->route)
			return err_set(ENOMEM);
		memcpy(rs->route, optval, optlen);
		rs->route_len = optlen;
		return 0;
	default:
		return -1;
	}
}

int rsetsockopt(int s, int level, int optname, const void *optval, socklen_t optlen)
{
	struct rsocket *rs = rs_lookup(s);
	uint64_t *opts = NULL;
	int ret, on = 0;

	if (!rs)
		return err_set(EBADF);
	if (!optval || optlen < sizeof(int))
		return err_set(EINVAL);
	errno = 0;
	switch (level) {
	case SOL_SOCKET:
		opts = &rs->so_opts;
		ret = rs_set_socket_opt(rs, optname, optval, optlen, &on);
		break;
	case IPPROTO_TCP:
		opts = &rs->tcp_opts;
		ret = rs_set_tcp_opt(optname, optval, optlen, &on);
		break;
	case IPPROTO_IPV6:
		opts = &rs->ipv6_opts;
		ret = rs_set_ipv6_opt(rs, optname, optval, optlen, &on);
		break;
	case SOL_RDMA:
		ret = rs_set_rdma_opt(rs, optname, optval, optlen);
		break;
	default:
		ret = -1;
		break;
	}
	if (ret == -1 && errno == 0)
		errno = ENOTSUP;
	if (!ret && opts && optname < 64) {
		if (on)
			*opts |= 1ull << optname;
		else
			*opts &= ~(1ull << optname);
	}
	return ret;
}

int rgetsockopt(int s, int level, int optname, void *optval, socklen_t *optlen)
{
	struct rsocket *rs = rs_lookup(s);
	int *v = optval;

	if (!rs)
		return err_set(EBADF);
	if (!optval || !optlen || *optlen < sizeof(int))
		return err_set(EINVAL);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			*v = !!(rs->so_opts & (1ull << optname));
			break;
		case SO_RCVBUF:
			*v = (int)rs->rbuf_size;
			break;
		case SO_SNDBUF:
			*v = (int)rs->sbuf_size;
			break;
		case SO_LINGER:
			if (*optlen < sizeof(struct linger))
				return err_set(EINVAL);
			((struct linger *)optval)->l_onoff = !(rs->so_opts & (1ull << SO_LINGER));
			((struct linger *)optval)->l_linger = 0;
			*optlen = sizeof(struct linger);
			return 0;
		case SO_ERROR:
			*v = rs->err;
			rs->err = 0;
			break;
		default:
			return err_set(ENOTSUP);
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
			*v = 1;
			break;
		case TCP_KEEPIDLE:
			*v = 0;
			break;
		case TCP_NODELAY:
			*v = !!(rs->tcp_opts & (1ull << TCP_NODELAY));
			break;
		case TCP_MAXSEG:
			*v = 2048; /* RoCE's usual path MTU */
			break;
		default:
			return err_set(ENOTSUP);
		}
		break;
	case IPPROTO_IPV6:
		if (optname != IPV6_V6ONLY)
			return err_set(ENOTSUP);
		*v = !!(rs->ipv6_opts & (1ull << IPV6_V6ONLY));
		break;
	case SOL_RDMA:
		switch (optname) {
		case RDMA_SQSIZE:
			*v = rs->sq_size;
			break;
		case RDMA_RQSIZE:
			*v = rs->rq_size;
			break;
		case RDMA_INLINE:
			*v = rs->sq_inline;
			break;
		case RDMA_IOMAPSIZE:
			*v = rs->target_iomap_size;
			break;
		default:
			return err_set(ENOTSUP);
		}
		break;
	default:
		return err_set(ENOTSUP);
	}
	*optlen = sizeof(int);
	return 0;
}

int rfcntl(int s, int cmd, ...)
{
	struct rsocket *rs = rs_lookup(s);
	va_list ap;
	int arg, ret = 0;

	if (!rs)
		return err_set(EBADF);
	switch (cmd) {
	case F_GETFL:
		return rs->fd_flags;
	case F_SETFL:
		va_start(ap, cmd);
		arg = va_arg(ap, int);
		va_end(ap);
		if (rs->state == rs_listening)
			ret = set_fd_flags(rs->accept_queue[0], arg);
		else if (!ret && rs->state < rs_connected)
			ret = set_fd_flags(rs->cm_id->channel->fd, arg);
		if (!ret)
			rs->fd_flags = arg;
		return ret;
	default:
		return err_set(ENOSYS);
	}
}

/* ------------------------------------------------------------------ */
/* riomap / riowrite                                                  */
/* ------------------------------------------------------------------ */

/*
 * Map buf for the peer's riowrite at offset (-1: at buf's address). With
 * PROT_WRITE it takes a slot of the peer's iomap table and is announced
 * before our next send; without, it is local only. Overlaps are not
 * checked (as in rdma-core).
 */
off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rsocket *rs = rs_lookup(s);
	struct rs_iomap_mr *m = NULL;
	int access = IBV_ACCESS_LOCAL_WRITE;

	(void)flags;
	if (!rs)
		return err_set(EBADF);
	if (!rs->cm_id->pd || (prot & ~(PROT_WRITE | PROT_NONE)))
		return err_set(EINVAL);
	pthread_mutex_lock(&rs->map_lock);
	if (prot & PROT_WRITE) {
		access |= IBV_ACCESS_REMOTE_WRITE;
		if (!rs->remote_slots && rs->peer_iomap.length) {
			rs->remote_slots = calloc(rs->peer_iomap.length, sizeof(*rs->remote_slots));
			for (uint32_t i = 0; rs->remote_slots && i < rs->peer_iomap.length; i++)
				rs->remote_slots[i].index = (int)i;
		}
		for (uint32_t i = 0; rs->remote_slots && i < rs->peer_iomap.length; i++)
			if (!rs->remote_slots[i].mr) {
				m = &rs->remote_slots[i];
				break;
			}
	} else {
		m = calloc(1, sizeof(*m));
		if (m)
			m->index = -1;
	}
	if (!m) {
		offset = err_set(ENOMEM);
		goto out;
	}
	m->mr = ibv_reg_mr(rs->cm_id->pd, buf, len, access);
	if (!m->mr) {
		if (m->index < 0)
			free(m);
		offset = -1;
		goto out;
	}
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	m->offset = (uint64_t)offset;
	m->announced = false;
	if (m->index >= 0) {
		/* announced in order: at the tail of the queue */
		struct rs_iomap_mr **t = &rs->iomap_queue;

		while (*t)
			t = &(*t)->next;
		m->next = NULL;
		*t = m;
	} else {
		m->next = rs->iomaps;
		rs->iomaps = m;
	}
out:
	pthread_mutex_unlock(&rs->map_lock);
	return offset;
}

static bool unlink_iomap(struct rs_iomap_mr **list, void *buf, size_t len)
{
	for (struct rs_iomap_mr **p = list; *p; p = &(*p)->next) {
		struct rs_iomap_mr *m = *p;

		if (m->mr->addr == buf && m->mr->length == len) {
			*p = m->next;
			ibv_dereg_mr(m->mr);
			m->mr = NULL;
			if (m->index < 0)
				free(m);
			return true;
		}
	}
	return false;
}

int riounmap(int s, void *buf, size_t len)
{
	struct rsocket *rs = rs_lookup(s);
	bool found;

	if (!rs)
		return err_set(EBADF);
	pthread_mutex_lock(&rs->map_lock);
	found = unlink_iomap(&rs->iomaps, buf, len) || unlink_iomap(&rs->iomap_queue, buf, len);
	pthread_mutex_unlock(&rs->map_lock);
	return found ? 0 : err_set(EINVAL);
}

/* The peer's mapping covering offset, from the table it writes to us. */
static const struct rs_iomap *rs_find_iomap(const struct rsocket *rs, uint64_t offset)
{
	for (int i = 0; i < rs->target_iomap_size; i++) {
		const struct rs_iomap *m = &rs->tgt_iomap[i];

		if (offset >= m->offset && offset < m->offset + m->sge.length)
			return m;
	}
	return NULL;
}

size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsocket *rs = rs_lookup(s);
	const struct rs_iomap *iom = NULL;
	const uint8_t *in = buf;
	size_t left = count;
	uint32_t xfer, olen = RS_OLAP_START_SIZE;
	uint64_t off = (uint64_t)offset;
	int ret = 0;

	if (!rs)
		return (size_t)err_set(EBADF);
	ret = rs_send_begin(rs, flags);
	if (ret)
		goto out;
	for (; left; left -= xfer, in += xfer, off += xfer) {
		struct ibv_sge inl, *sgl;
		int nsge, f;

		if (!iom || off >= iom->offset + iom->sge.length) {
			iom = rs_find_iomap(rs, off);
			if (!iom)
				break;
		}
		ret = rs_wait_send(rs, flags);
		if (ret)
			break;
		xfer = rs_next_chunk(rs, &olen, left);
		if (xfer > iom->offset + iom->sge.length - off)
			xfer = (uint32_t)(iom->offset + iom->sge.length - off);
		nsge = rs_stage(rs, in, xfer, &inl, &sgl, &f);
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= xfer;
		ret = rs_post_write(rs, sgl, nsge, rs_msg(RS_OP_WRITE, xfer), false, f,
				    iom->sge.addr + off - iom->offset, iom->sge.key);
		rs_advance(rs, nsge, xfer, f);
		if (ret)
			break;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	return (ret && left == count) ? (size_t)ret : count - left;
}
