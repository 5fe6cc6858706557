/*
 * The UDP link's address: which IP address (and so which GID) the device
 * takes, and the bound RoCEv2 socket on it (docs/usage.md: URVT_ADDR,
 * URVT_NETDEV, or the first free loopback address).
 */
#include "link/udp.h"
#include "link/udp_share.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/report.h"
#include "wire/hdr.h"

static void v4_to_mapped(struct in6_addr *a6, struct in_addr a4)
{
	memset(a6, 0, sizeof(*a6));
	a6->s6_addr[10] = 0xff;
	a6->s6_addr[11] = 0xff;
	memcpy(&a6->s6_addr[12], &a4, 4);
}

int urvt_udp_bind_port(int family, const struct in6_addr *addr6, bool reuseport)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int err, on = 1;

	if (fd < 0)
		return -errno;
	/* the host's other urvt processes of this user bind it too */
	if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on))) {
		err = -errno;
		close(fd);
		return err;
	}
	if (family == AF_INET) {
		struct sockaddr_in sin = { .sin_family = AF_INET,
					   .sin_port = htons(URVT_ROCE_UDP_PORT) };
		memcpy(&sin.sin_addr, &addr6->s6_addr[12], 4);
		err = bind(fd, (struct sockaddr *)&sin, sizeof(sin));
	} else {
		struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6,
					     .sin6_port = htons(URVT_ROCE_UDP_PORT),
					     .sin6_addr = *addr6 };
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
		err = bind(fd, (struct sockaddr *)&sin6, sizeof(sin6));
	}
	if (err) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

static void set_ifname(struct urvt_link_info *out)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa))
		return;
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET && out->family == AF_INET) {
			const struct sockaddr_in *s = (const void *)i->ifa_addr;
			struct in6_addr m;
			v4_to_mapped(&m, s->sin_addr);
			/* 127/8 is all on lo although only 127.0.0.1 is listed */
			if (!memcmp(&m, &out->addr6, 16) ||
			    (out->addr6.s6_addr[12] == 127 && !strcmp(i->ifa_name, "lo")))
				break;
		} else if (i->ifa_addr->sa_family == AF_INET6 && out->family == AF_INET6) {
			const struct sockaddr_in6 *s = (const void *)i->ifa_addr;
			if (!memcmp(&s->sin6_addr, &out->addr6, 16))
				break;
		}
	}
	if (i) {
		struct ifreq ifr;
		int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		snprintf(out->ifname, sizeof(out->ifname), "%s", i->ifa_name);
		out->ifindex = if_nametoindex(i->ifa_name);
		memset(&ifr, 0, sizeof(ifr));
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", i->ifa_name);
		if (fd >= 0 && !ioctl(fd, SIOCGIFMTU, &ifr))
			out->if_mtu = ifr.ifr_mtu;
		if (fd >= 0)
			close(fd);
	}
	freeifaddrs(ifa);
}

static int from_netdev(const char *dev, struct urvt_link_info *out)
{
	struct ifaddrs *ifa, *i;
	int ret = -EADDRNOTAVAIL;

	if (getifaddrs(&ifa))
		return -errno;
	/* Prefer IPv4, then a non-link-local IPv6 address. */
	for (int pass = 0; pass < 2 && ret; pass++) {
		for (i = ifa; i; i = i->ifa_next) {
			if (!i->ifa_addr || strcmp(i->ifa_name, dev))
				continue;
			if (pass == 0 && i->ifa_addr->sa_family == AF_INET) {
				out->family = AF_INET;
				v4_to_mapped(&out->addr6,
					     ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr);
				ret = 0;
				break;
			}
			if (pass == 1 && i->ifa_addr->sa_family == AF_INET6) {
				const struct sockaddr_in6 *s = (const void *)i->ifa_addr;
				if (IN6_IS_ADDR_LINKLOCAL(&s->sin6_addr))
					continue;
				out->family = AF_INET6;
				out->addr6 = s->sin6_addr;
				ret = 0;
				break;
			}
		}
	}
	freeifaddrs(ifa);
	return ret;
}

/* Why a bind of port 4791 on the address WHO names ("URVT_ADDR=x",
 * "URVT_NETDEV=eth0 (10.0.0.1)") failed, and what to do about it: one
 * line (base/report.h). */
static void report_bind(const char *who, int err)
{
	if (err == -EADDRINUSE)
		urvt_report("%s: UDP port %d is in use (rxe, RoCE software, or urvt of another "
			    "user or with URVT_SHARE=0): choose another address, or unset "
			    "URVT_ADDR and URVT_NETDEV to take a free loopback one", who,
			    URVT_ROCE_UDP_PORT);
	else if (err == -EADDRNOTAVAIL)
		urvt_report("%s is not an address of this host (or network namespace): use one "
			    "that 'ip addr' lists, or URVT_NETDEV=<interface>", who);
	else
		urvt_report("%s: cannot bind UDP port %d: %s", who, URVT_ROCE_UDP_PORT,
			    strerror(-err));
}

int urvt_udp_bind(const char *env_addr, const char *env_dev, struct urvt_link_info *out,
		  struct urvt_udp_share **share)
{
	char who[128], text[INET6_ADDRSTRLEN];
	int fd;

	memset(out, 0, sizeof(*out));
	*share = NULL;
	if (env_addr && *env_addr) {
		struct in_addr a4;
		if (inet_pton(AF_INET, env_addr, &a4) == 1) {
			out->family = AF_INET;
			v4_to_mapped(&out->addr6, a4);
		} else if (inet_pton(AF_INET6, env_addr, &out->addr6) == 1) {
			out->family = AF_INET6;
			if (IN6_IS_ADDR_V4MAPPED(&out->addr6))
				out->family = AF_INET;
		} else {
			urvt_report("URVT_ADDR=%s is not an IPv4 or IPv6 address: set it to an "
				    "address of this host (e.g. 127.0.0.5), or unset it", env_addr);
			return -EINVAL;
		}
		fd = urvt_udp_share_bind(out->family, &out->addr6, share);
		if (fd < 0) {
			snprintf(who, sizeof(who), "URVT_ADDR=%.80s", env_addr);
			report_bind(who, fd);
		} else {
			set_ifname(out);
		}
		return fd;
	}
	if (env_dev && *env_dev) {
		int ret = from_netdev(env_dev, out);
		if (ret) {
			if (!if_nametoindex(env_dev))
				urvt_report("URVT_NETDEV=%s: no such network interface: name one that "
					    "'ip link' lists, or use URVT_ADDR=<address>", env_dev);
			else
				urvt_report("URVT_NETDEV=%s has no IPv4 or global IPv6 address: add "
					    "one (ip addr add) or choose another interface", env_dev);
			return ret;
		}
		fd = urvt_udp_share_bind(out->family, &out->addr6, share);
		if (fd < 0) {
			if (out->family == AF_INET)
				inet_ntop(AF_INET, &out->addr6.s6_addr[12], text, sizeof(text));
			else
				inet_ntop(AF_INET6, &out->addr6, text, sizeof(text));
			snprintf(who, sizeof(who), "URVT_NETDEV=%.40s (%s)", env_dev, text);
			report_bind(who, fd);
		} else {
			set_ifname(out);
		}
		return fd;
	}
	/*
	 * Zero configuration: the host's loopback identity, 127.0.0.1, shared
	 * by every urvt process of the user here (docs/host-identity.md), as
	 * rxe on lo would be.
	 */
	out->family = AF_INET;
	{
		struct in_addr lo = { .s_addr = htonl(INADDR_LOOPBACK) };
		v4_to_mapped(&out->addr6, lo);
		fd = urvt_udp_share_bind(AF_INET, &out->addr6, share);
		if (fd >= 0 && *share) {
			set_ifname(out);
			return fd;
		}
		if (fd >= 0)
			close(fd); /* no registry: not shared, so not 127.0.0.1 (below) */
	}
	/*
	 * Without a registry (URVT_SHARE=0), or when 127.0.0.1's port is
	 * another user's or rxe's: the first free loopback address from
	 * 127.0.0.2 on, 127.0.0.1 last. 127.0.0.1 is the one programs name ("localhost",
	 * rdma_bind_addr(127.0.0.1), rdma-core's tests): a process that did
	 * not ask for an address leaves it to one that does. (A process that
	 * opened the device and then forks keeps its address; the child that
	 * binds 127.0.0.1 must find it free.)
	 */
	out->family = AF_INET;
	for (int i = 0; i < 254; i++) {
		int host = i < 253 ? i + 2 : 1;
		struct in_addr a4 = { .s_addr = htonl(0x7f000000u | (uint32_t)host) };
		v4_to_mapped(&out->addr6, a4);
		fd = urvt_udp_bind_port(AF_INET, &out->addr6, false);
		if (fd >= 0) {
			set_ifname(out);
			return fd;
		}
		if (fd != -EADDRINUSE) {
			inet_ntop(AF_INET, &a4, text, sizeof(text));
			report_bind(text, fd);
			return fd;
		}
	}
	urvt_report("no free address: UDP port %d is in use on every address from 127.0.0.1 "
		    "to 127.0.0.254: end some urvt processes, or give this one "
		    "URVT_ADDR=<another address>", URVT_ROCE_UDP_PORT);
	return -EADDRINUSE;
}
