/*
 * The RoCEv2/UDP transport as the core and the verbs edge see it
 * (docs/transport.md): created with the device after its progress thread,
 * destroyed before it.
 */
#ifndef URVT_TRANSPORT_NET_H
#define URVT_TRANSPORT_NET_H

#include <infiniband/verbs.h>

struct rvt_dev_info;
struct rvt_cq;

/* Sets rdi->transport / rdi->transport_priv; 0 or a negative errno. */
int urvt_transport_create(struct rvt_dev_info *rdi);
void urvt_transport_destroy(struct rvt_dev_info *rdi);

/* Receive and process one batch inline if no other thread is receiving
 * (trylock); returns the packets read. */
int urvt_net_poll(struct rvt_dev_info *rdi);

/* Receive everything waiting now unless another thread is receiving. */
void urvt_net_drain(struct rvt_dev_info *rdi);

/* An application thread calls a verb (post_send): it is not waiting elsewhere. */
void urvt_net_app_active(struct rvt_dev_info *rdi);
/* The application is about to block for a completion event (req_notify_cq):
 * the progress thread receives. */
void urvt_net_app_blocks(struct rvt_dev_info *rdi);

/* poll_cq that drives the network inline when the CQ is empty. */
int urvt_net_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc);

#endif
