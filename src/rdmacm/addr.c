#include "rdmacm/addr.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wire/ip.h"

socklen_t cma_addrlen(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

bool cma_mcast_addr(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return IN_MULTICAST(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_MULTICAST(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

bool cma_zero_addr(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	case AF_INET6:
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	default:
		return false;
	}
}

bool cma_loopback_addr(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	case AF_INET6:
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	default:
		return false;
	}
}

uint16_t cma_port(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	case AF_INET6:
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	default:
		return 0;
	}
}

void cma_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

bool cma_addr_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return false;
}

void cma_ip2gid(const struct sockaddr *sa, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa_family == AF_INET) {
		urvt_gid_from_v4(gid->raw, ((const struct sockaddr_in *)sa)->sin_addr.s_addr);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

bool cma_gid_is_v4(const union ibv_gid *gid)
{
	return urvt_gid_is_v4(gid->raw);
}

void cma_gid2ip(const union ibv_gid *gid, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (cma_gid_is_v4(gid)) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, &gid->raw[12], 4);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, gid->raw, 16);
	}
}

int cma_route_src(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	struct sockaddr_storage d;
	socklen_t len = cma_addrlen(dst), slen = sizeof(*src);
	int fd, ret = 0;

	if (!len)
		return -EAFNOSUPPORT;
	/* connect(2) on a UDP socket only picks the route: no packet goes out */
	memcpy(&d, dst, len);
	if (!cma_port((struct sockaddr *)&d))
		cma_set_port((struct sockaddr *)&d, 4791);
	fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&d, len) || getsockname(fd, (struct sockaddr *)src, &slen))
		ret = -errno;
	close(fd);
	if (!ret)
		cma_set_port((struct sockaddr *)src, 0);
	return ret;
}

int cma_free_loopback(const struct sockaddr *avoid, struct sockaddr_storage *out)
{
	for (uint32_t host = 1; host <= 254; host++) {
		struct sockaddr_in *a = (struct sockaddr_in *)out;
		int fd, ret;

		memset(out, 0, sizeof(*out));
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(0x7f000000u | host);
		if (avoid && cma_addr_eq(avoid, (struct sockaddr *)out))
			continue;
		/* free if RoCE's port binds there (a device holds it otherwise) */
		a->sin_port = htons(4791);
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		ret = bind(fd, (struct sockaddr *)a, sizeof(*a)) ? -errno : 0;
		close(fd);
		a->sin_port = 0;
		if (!ret)
			return 0;
		if (ret != -EADDRINUSE)
			return ret;
	}
	return -EADDRINUSE;
}

void cma_local_port_range(int *low, int *high)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");

	*low = 32768;
	*high = 60999;
	if (f) {
		int l, h;
		if (fscanf(f, "%d %d", &l, &h) == 2 && l > 0 && h >= l && h < 65536) {
			*low = l;
			*high = h;
		}
		fclose(f);
	}
}
