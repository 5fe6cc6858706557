/*
 * rsockets' options (rsocket_priv.h): rsetsockopt, rgetsockopt, rfcntl.
 * Socket and TCP options are recorded and reported, the SOL_RDMA ones size
 * the QP and its buffers before the connection is made.
 */
#include "rdmacm/rsocket_priv.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int rs_opt_int(const void *optval, socklen_t optlen)
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
		*on = rs_opt_int(optval, optlen);
		return ret;
	case SO_RCVBUF:
		if (!rs->rbuf)
			rs->rbuf_size = (uint32_t)rs_opt_int(optval, optlen) << 1;
		if (rs->rbuf_size < RS_SNDLOWAT << 1)
			rs->rbuf_size = RS_SNDLOWAT << 1;
		return 0;
	case SO_SNDBUF:
		if (!rs->sbuf)
			rs->sbuf_size = (uint32_t)rs_opt_int(optval, optlen) << 1;
		if (rs->sbuf_size < RS_SNDLOWAT)
			rs->sbuf_size = RS_SNDLOWAT << 1;
		return 0;
	case SO_LINGER:
		/* inverted, so that the zeroed default means on */
		*on = optlen >= sizeof(struct linger) && !((const struct linger *)optval)->l_onoff;
		return 0;
	case SO_KEEPALIVE:
	case SO_OOBINLINE:
		*on = rs_opt_int(optval, optlen);
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
		*on = rs_opt_int(optval, optlen);
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
	*on = rs_opt_int(optval, optlen);
	return rdma_set_option(rs->cm_id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, (void *)optval,
			       optlen);
}

/* The QP's sizes and the route: only before the connection is made. */
static int rs_set_rdma_opt(struct rsocket *rs, int optname, const void *optval,
			   socklen_t optlen)
{
	int value = rs_opt_int(optval, optlen);

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
			ret = rs_set_fd_flags(rs->accept_queue[0], arg);
		else if (!ret && rs->state < rs_connected)
			ret = rs_set_fd_flags(rs->cm_id->channel->fd, arg);
		if (!ret)
			rs->fd_flags = arg;
		return ret;
	default:
		return err_set(ENOSYS);
	}
}
