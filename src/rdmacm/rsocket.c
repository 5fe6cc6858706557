/*
 * rsockets (rsocket(7)): not implemented yet. Every call fails with
 * ENOSYS, so a program (or Debian's librspreload.so) sees a clean error.
 */
#include <errno.h>
#include <rdma/rsocket.h>
#include <stdarg.h>

#define NOSYS(ret)                 \
	do {                       \
		errno = ENOSYS;    \
		return ret;        \
	} while (0)

int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	NOSYS(-1);
}
int rbind(int s, const struct sockaddr *addr, socklen_t len)
{
	(void)s, (void)addr, (void)len;
	NOSYS(-1);
}
int rlisten(int s, int backlog)
{
	(void)s, (void)backlog;
	NOSYS(-1);
}
int raccept(int s, struct sockaddr *addr, socklen_t *len)
{
	(void)s, (void)addr, (void)len;
	NOSYS(-1);
}
int rconnect(int s, const struct sockaddr *addr, socklen_t len)
{
	(void)s, (void)addr, (void)len;
	NOSYS(-1);
}
int rshutdown(int s, int how)
{
	(void)s, (void)how;
	NOSYS(-1);
}
int rclose(int s)
{
	(void)s;
	NOSYS(-1);
}
ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	(void)s, (void)buf, (void)len, (void)flags;
	NOSYS(-1);
}
ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *alen)
{
	(void)s, (void)buf, (void)len, (void)flags, (void)src, (void)alen;
	NOSYS(-1);
}
ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	(void)s, (void)msg, (void)flags;
	NOSYS(-1);
}
ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	(void)s, (void)buf, (void)len, (void)flags;
	NOSYS(-1);
}
ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *to,
		socklen_t tolen)
{
	(void)s, (void)buf, (void)len, (void)flags, (void)to, (void)tolen;
	NOSYS(-1);
}
ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	(void)s, (void)msg, (void)flags;
	NOSYS(-1);
}
ssize_t rread(int s, void *buf, size_t count)
{
	(void)s, (void)buf, (void)count;
	NOSYS(-1);
}
ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	(void)s, (void)iov, (void)iovcnt;
	NOSYS(-1);
}
ssize_t rwrite(int s, const void *buf, size_t count)
{
	(void)s, (void)buf, (void)count;
	NOSYS(-1);
}
ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	(void)s, (void)iov, (void)iovcnt;
	NOSYS(-1);
}
int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	(void)fds, (void)nfds, (void)timeout;
	NOSYS(-1);
}
int rselect(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout)
{
	(void)nfds, (void)r, (void)w, (void)e, (void)timeout;
	NOSYS(-1);
}
int rgetpeername(int s, struct sockaddr *addr, socklen_t *len)
{
	(void)s, (void)addr, (void)len;
	NOSYS(-1);
}
int rgetsockname(int s, struct sockaddr *addr, socklen_t *len)
{
	(void)s, (void)addr, (void)len;
	NOSYS(-1);
}
int rsetsockopt(int s, int level, int optname, const void *optval, socklen_t optlen)
{
	(void)s, (void)level, (void)optname, (void)optval, (void)optlen;
	NOSYS(-1);
}
int rgetsockopt(int s, int level, int optname, void *optval, socklen_t *optlen)
{
	(void)s, (void)level, (void)optname, (void)optval, (void)optlen;
	NOSYS(-1);
}
int rfcntl(int s, int cmd, ...)
{
	(void)s, (void)cmd;
	NOSYS(-1);
}
off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)s, (void)buf, (void)len, (void)prot, (void)flags, (void)offset;
	NOSYS(-1);
}
int riounmap(int s, void *buf, size_t len)
{
	(void)s, (void)buf, (void)len;
	NOSYS(-1);
}
size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	(void)s, (void)buf, (void)count, (void)offset, (void)flags;
	errno = ENOSYS;
	return 0;
}
