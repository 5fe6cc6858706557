/*
 * rsockets' data path (rsocket_priv.h; the protocol: rsocket.c): posting
 * writes and credits, completions and the flow control they drive,
 * rrecv/rsend and their variants, rpoll and rselect.
 */
#include "rdmacm/rsocket_priv.h"

#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

int rs_post_write(struct rsocket *rs, struct ibv_sge *sgl, int nsge, uint32_t msg,
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
int rs_stage(struct rsocket *rs, const void *buf, uint32_t len, struct ibv_sge *inl,
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
void rs_advance(struct rsocket *rs, int nsge, uint32_t len, int flags)
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
int rs_process_cq(struct rsocket *rs, bool nonblock, bool (*test)(const struct rsocket *))
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
			start = rs_now_us();
	} while (rs_now_us() - start <= RS_POLL_US);
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

static bool rs_have_rdata(const struct rsocket *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

static bool rs_conn_have_rdata(const struct rsocket *rs)
{
	return rs_have_rdata(rs) || !(rs->state & rs_readable);
}

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
int rs_wait_send(struct rsocket *rs, int flags)
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
uint32_t rs_next_chunk(struct rsocket *rs, uint32_t *olen, size_t left)
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
	uint64_t deadline = timeout > 0 ? rs_now_us() + (uint64_t)timeout * 1000 : 0;
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
			uint64_t now = rs_now_us();

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
		if (timeout == 0 || (timeout > 0 && rs_now_us() >= deadline)) {
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
