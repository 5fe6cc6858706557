/* The device's UDP endpoint: address selection and the RoCEv2 socket. */
#ifndef URVT_LINK_UDP_H
#define URVT_LINK_UDP_H

#include <netinet/in.h>

#define URVT_ROCE_PORT 4791

struct urvt_udp_addr {
	int family;                       /* AF_INET or AF_INET6 */
	struct in6_addr addr6;            /* IPv4 addresses stored v4-mapped */
	unsigned int ifindex;
	char ifname[32];
	int if_mtu;                       /* the interface's MTU; 0 if unknown */
};

/*
 * Pick the device address and bind the RoCEv2 port on it. Order:
 * URVT_ADDR (literal IPv4/IPv6), URVT_NETDEV (first address of that
 * interface), else the first address in 127.0.0.1-127.0.0.254 whose port
 * 4791 is free, so several processes on one host get distinct GIDs with no
 * configuration. Returns the bound socket (>= 0) or a negative errno.
 */
int urvt_udp_bind_device(struct urvt_udp_addr *out);
/*
 * Bind exactly want's address (family and addr6; NULL: as
 * urvt_udp_bind_device). -EADDRNOTAVAIL if URVT_ADDR / URVT_NETDEV name
 * another address; bind(2)'s errno otherwise (EADDRINUSE: another process
 * owns it, EADDRNOTAVAIL: not an address of this host).
 */
int urvt_udp_bind_device_at(const struct urvt_udp_addr *want, struct urvt_udp_addr *out);

#endif
