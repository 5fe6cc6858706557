/*
 * IP address helpers of the rdma_cm: sockaddr <-> RoCEv2 GID, ports, the
 * kind of an address, and the local route to a destination (the source
 * address the kernel would use for it). Sockets are only opened to ask the
 * routing table; nothing is sent.
 */
#ifndef URVT_RDMACM_ADDR_H
#define URVT_RDMACM_ADDR_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* sizeof the sockaddr of a family we take (AF_INET, AF_INET6), else 0. */
socklen_t cma_addrlen(const struct sockaddr *sa);
bool cma_zero_addr(const struct sockaddr *sa);        /* 0.0.0.0 or :: */
bool cma_mcast_addr(const struct sockaddr *sa);       /* 224.0.0.0/4 or ff00::/8 */
bool cma_loopback_addr(const struct sockaddr *sa);    /* 127/8 or ::1 */
uint16_t cma_port(const struct sockaddr *sa);         /* host order */
void cma_set_port(struct sockaddr *sa, uint16_t port);
/* Same address (ports ignored)? */
bool cma_addr_eq(const struct sockaddr *a, const struct sockaddr *b);

/* RoCEv2 GID of an IP address (IPv4 mapped) and back. */
void cma_ip2gid(const struct sockaddr *sa, union ibv_gid *gid);
void cma_gid2ip(const union ibv_gid *gid, uint16_t port, struct sockaddr_storage *ss);
bool cma_gid_is_v4(const union ibv_gid *gid);

/* The source address of the route to dst (port 0); 0 or a negative errno
 * (-ENETUNREACH, ...). */
int cma_route_src(const struct sockaddr *dst, struct sockaddr_storage *src);

/* The first 127.0.0.x (x = 1..254) but avoid where no device is (RoCE's
 * UDP port free), port 0; 0 or a negative errno (-EADDRINUSE: none). */
int cma_free_loopback(const struct sockaddr *avoid, struct sockaddr_storage *out);

/* The IP local port range for ephemeral ports (net.ipv4.ip_local_port_range). */
void cma_local_port_range(int *low, int *high);

#endif
