/*
 * The UDP link's socket shared by the processes of a host
 * (docs/host-identity.md): every urvt process of the user that binds the
 * same address joins one SO_REUSEPORT group on port 4791; a classic BPF
 * program steers each datagram to the member whose registry slot is the
 * top byte of the BTH destination QPN. What reaches the wrong member (QP1's
 * MADs, datagrams during a membership change, segments of a GRO train) is
 * forwarded to the right process over a unix datagram socket.
 */
#ifndef URVT_LINK_UDP_SHARE_H
#define URVT_LINK_UDP_SHARE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "link/link.h"

struct urvt_progress;
struct urvt_udp_share;
struct sockaddr_un;

/* A forwarded datagram (one unix datagram): this header, then the
 * datagram as the kernel handed it to the wrong member. */
#define URVT_UDP_FWD_MAGIC 0x75667731u    /* "ufw1" */
struct urvt_udp_fwd_hdr {
	uint32_t magic;
	uint32_t seg;                     /* a GRO train's segment size, or 0 */
	struct urvt_ipinfo ip;            /* what the receiving socket saw */
};
/* The abstract socket the process pid in slot of registry file inode ino
 * receives forwards on (the pid: a forked child of a slot's last owner
 * may still hold that owner's socket). */
void urvt_udp_fwd_name(struct sockaddr_un *sun, socklen_t *len, uint64_t ino, uint8_t slot,
		       int32_t pid);

/* Bind port 4791 on addr6 (family) as a member of the host's group for
 * that address. Returns the socket, or a negative errno; *out is the
 * sharing state, or NULL when the process has no registry (then the
 * socket is an ordinary one, bound alone). */
int urvt_udp_share_bind(int family, const struct in6_addr *addr6, struct urvt_udp_share **out);

/* The process's slot (QPN top byte) in the group. */
uint8_t urvt_udp_share_slot(const struct urvt_udp_share *s);

/* After the socket is set up: steer, open the forwarding socket (added to
 * epfd, the link's wake fd), look for dead members every 200 ms on p. */
int urvt_udp_share_start(struct urvt_udp_share *s, int fd, int epfd, struct urvt_progress *p);

/* Forward what in rx[0..n) is another process's; returns how many stay
 * (rx compacted in order; a GRO train may lose some segments). */
unsigned urvt_udp_share_filter(struct urvt_udp_share *s, struct urvt_link_rx *rx, unsigned n);

/* Were datagrams forwarded to us since we last looked? No system call. */
bool urvt_udp_share_fwd_pending(struct urvt_udp_share *s);
/* Receive one forwarded datagram into buf (cap bytes) and describe it in
 * *r; false when there is none. */
bool urvt_udp_share_fwd_recv(struct urvt_udp_share *s, uint8_t *buf, uint32_t cap,
			     struct urvt_link_rx *r);

/* Leave the group (the steering program moves on), close fd, free s. */
void urvt_udp_share_close(struct urvt_udp_share *s, int fd);

/* Count datagrams forwarded to others, received forwarded, lost on the
 * way (no such process, its socket full) into ctrs[0..2]. */
void urvt_udp_share_count_into(struct urvt_udp_share *s, uint64_t *ctrs);

#endif
