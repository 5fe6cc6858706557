/*
 * The RoCEv2/UDP transport as the composition root and the engines see it
 * (docs/architecture.md, docs/transport.md): attached to the core device
 * after its progress thread exists, detached before it goes.
 */
#ifndef URVT_TRANSPORT_NET_H
#define URVT_TRANSPORT_NET_H

#include <infiniband/verbs.h>
#include <stdbool.h>

struct rvt_dev_info;
struct rvt_cq;
struct urvt_link;

/* The composition root's one call (an urvt_transport_attach_fn, handed to
 * rvt_dev_get): open the link, report the port to the core, create the
 * engines' state, register the ops. 0 or a negative errno. */
int urvt_transport_attach(struct rvt_dev_info *rdi);
/* The address (a literal) the next urvt_transport_attach on this thread
 * binds unless URVT_ADDR / URVT_NETDEV name one; NULL: the default
 * selection. The verbs edge sets it around a device open that names an
 * address (verbs_open_device, verbs/open_at.h). */
void urvt_transport_want(const char *addr);

/* attach.c -> net.c: the engines' device state on the n links attach
 * opened, in link/links.h's order (rdi->transport_priv); 0 or a negative
 * errno (the caller still owns the links). From then on the transport
 * owns them: destroy closes them. */
int urvt_net_create(struct rvt_dev_info *rdi, struct urvt_link *const *links, unsigned n);
void urvt_net_destroy(struct rvt_dev_info *rdi);

/* Receive and process one batch inline if no other thread is receiving
 * (trylock); returns the packets read. */
int urvt_net_poll(struct rvt_dev_info *rdi);

/* urvt_net_poll from a post_send whose requester waits for ACKs: the
 * application is receiving (the socket-owner watchdog counts it). */
void urvt_net_poll_stalled(struct rvt_dev_info *rdi);

/* Receive everything waiting now unless another thread is receiving. */
void urvt_net_drain(struct rvt_dev_info *rdi);

/* ops->app_blocks: the application is about to block for a completion
 * event (req_notify_cq): the progress thread receives. */
void urvt_net_app_blocks(struct rvt_dev_info *rdi);

/* ops->wait_event: a thread blocks in ibv_get_cq_event on the channel's
 * fd; it receives while it waits (poll.c). */
int urvt_net_wait_event(struct rvt_dev_info *rdi, int fd, int *wait_fd);

/* ops->poll_cq: poll_cq that drives the network inline when the CQ is empty. */
int urvt_net_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc);

#endif
