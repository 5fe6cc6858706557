/*
 * The UDP link: the device's RoCEv2 socket (port 4791 on one address) and
 * every system call made on it: sendmmsg with UDP GSO out, recvmmsg with
 * UDP GRO in, the socket options the ICRC and the UD GRH depend on, and
 * URVT_FAULT injection on the way out (link/fault.h).
 */
#ifndef URVT_LINK_UDP_H
#define URVT_LINK_UDP_H

#include <stdbool.h>
#include <string.h>

#include "link/link.h"
#include "wire/hdr.h"

struct urvt_progress;

struct urvt_udp_cfg {
	const char *addr;                 /* literal IPv4/IPv6 address, or NULL */
	const char *netdev;               /* else the first address of this interface */
	bool gso, gro;                    /* UDP GSO on send, GRO on receive */
	const char *fault;                /* URVT_FAULT spec, or NULL */
	struct urvt_progress *progress;   /* runs the fault injector's timer */
};

/* The configuration the environment asks for (docs/usage.md): URVT_ADDR,
 * URVT_NETDEV, URVT_GSO, URVT_GRO, URVT_FAULT. */
void urvt_udp_cfg_from_env(struct urvt_udp_cfg *cfg, struct urvt_progress *p);

/*
 * Pick the device address and bind the RoCEv2 port on it. Order: addr,
 * netdev, else the first address in 127.0.0.2-127.0.0.254 (127.0.0.1
 * last) whose port 4791 is free, so several processes on one host get
 * distinct GIDs with no configuration. A given address or interface is
 * shared with the host's other urvt processes of this user (*share; NULL
 * without a registry: link/udp_share.h). Returns the bound socket (>= 0)
 * or a negative errno.
 */
struct urvt_udp_share;
int urvt_udp_bind(const char *addr, const char *netdev, struct urvt_link_info *out,
		  struct urvt_udp_share **share);

/* Bind port 4791 on addr6 alone, or (reuseport) as one of a group. */
int urvt_udp_bind_port(int family, const struct in6_addr *addr6, bool reuseport);

/* Bind, set the socket up, start fault injection. NULL and *err (a
 * negative errno) on failure. */
struct urvt_link *urvt_udp_open(const struct urvt_udp_cfg *cfg, int *err);

#endif
