/*
 * What the rsocket files share: the protocol's constants and wire
 * structures, struct rsocket, and the helpers one file calls in another.
 *
 *   rsocket.c        the protocol (its comment), rsocket numbers,
 *                    allocation, the endpoint, connect/listen/accept,
 *                    shutdown and close, names;
 *   rsocket_io.c     posting, completions, rrecv/rsend, rpoll/rselect;
 *   rsocket_opts.c   rsetsockopt, rgetsockopt, rfcntl;
 *   rsocket_iomap.c  riomap, riounmap, riowrite.
 */
#ifndef URVT_RDMACM_RSOCKET_PRIV_H
#define URVT_RDMACM_RSOCKET_PRIV_H

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

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

static inline int err_set(int e)
{
	errno = e;
	return -1;
}

static inline uint16_t u16min(uint32_t a, uint32_t b)
{
	return (uint16_t)(a < b ? a : b);
}

/* rdma-core's 8-bit scale for table sizes (the iomap size in conn data) */
static inline int rs_value_to_scale(int value, int bits)
{
	return value <= (1 << (bits - 1)) ? value : (1 << (bits - 1)) | (value >> bits);
}

static inline int rs_scale_to_value(int value, int bits)
{
	return value <= (1 << (bits - 1)) ? value : (value & ~(1 << (bits - 1))) << bits;
}

static inline uint64_t rs_now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* rsocket.c */
struct rsocket *rs_lookup(int s);
int rs_set_fd_flags(int fd, int flags);
int rs_do_connect(struct rsocket *rs);

/* rsocket_io.c */
int rs_post_write(struct rsocket *rs, struct ibv_sge *sgl, int nsge, uint32_t msg,
		  bool with_imm, int flags, uint64_t addr, uint32_t rkey);
int rs_stage(struct rsocket *rs, const void *buf, uint32_t len, struct ibv_sge *inl,
	     struct ibv_sge **sgl, int *flags);
void rs_advance(struct rsocket *rs, int nsge, uint32_t len, int flags);
int rs_process_cq(struct rsocket *rs, bool nonblock, bool (*test)(const struct rsocket *));
int rs_wait_send(struct rsocket *rs, int flags);
uint32_t rs_next_chunk(struct rsocket *rs, uint32_t *olen, size_t left);

/* rsocket_iomap.c */
void rs_free_iomaps(struct rs_iomap_mr **list);
int rs_send_iomaps(struct rsocket *rs, int flags);

static inline int rs_post_recv(struct rsocket *rs)
{
	/* no buffer: the data lands by RDMA write, the WQE takes the immediate */
	struct ibv_recv_wr wr = { .wr_id = WR_RECV }, *bad;

	return ibv_post_recv(rs->cm_id->qp, &wr, &bad) ? err_set(ENOMEM) : 0;
}

/* A message that is only an immediate (credits, control). */
static inline int rs_post_msg(struct rsocket *rs, uint32_t msg)
{
	struct ibv_send_wr wr = { .wr_id = msg, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .imm_data = htobe32(msg) }, *bad;

	return ibv_post_send(rs->cm_id->qp, &wr, &bad) ? err_set(ENOMEM) : 0;
}

static inline bool rs_ctrl_avail(const struct rsocket *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max_seqno;
}

static inline bool rs_conn_can_send_ctrl(const struct rsocket *rs)
{
	return rs_ctrl_avail(rs) || !(rs->state & rs_connected);
}

static inline bool rs_conn_all_sends_done(const struct rsocket *rs)
{
	return ((int)rs->ctrl_max_seqno - (int)rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size ||
	       !(rs->state & rs_connected);
}

/* The opening of every send (rsend, riowrite): the send lock taken and
 * queued riomap()s announced first, so the peer knows of them before the
 * data that may name them; nonzero: the send fails, the lock still held. */
static inline int rs_send_begin(struct rsocket *rs, int flags)
{
	pthread_mutex_lock(&rs->slock);
	return rs->iomap_queue ? rs_send_iomaps(rs, flags) : 0;
}

#endif
