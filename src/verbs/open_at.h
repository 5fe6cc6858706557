/*
 * urvt's private device open, for urvt's own librdmacm (docs/rdmacm.md):
 * the address a device binds is chosen when the process's device is made,
 * and rdma_bind_addr / rdma_resolve_addr know it before anything else does.
 * It goes through rdma-core's existing private entry point
 * verbs_open_device(device, private_data) (IBVERBS_PRIVATE_34), so the
 * exported symbol set stays rdma-core's (docs/abi.md):
 *
 *	struct urvt_open_attr a = { .magic = URVT_OPEN_ATTR_MAGIC };
 *	memcpy(&a.addr, sin, sizeof(*sin));
 *	ctx = verbs_open_device(urvt0, &a);
 *
 * opens a context whose device has that address: it binds it if the
 * process's device does not exist yet; it fails with EADDRNOTAVAIL if the
 * device exists with another address or URVT_ADDR / URVT_NETDEV name
 * another one, EADDRINUSE if another process owns the address. AF_UNSPEC:
 * the default selection, as ibv_open_device. private_data without the
 * magic (a provider's attributes) fails with EOPNOTSUPP as before.
 */
#ifndef URVT_VERBS_OPEN_AT_H
#define URVT_VERBS_OPEN_AT_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/socket.h>

#define URVT_OPEN_ATTR_MAGIC 0x7572767461646472ull /* "urvtaddr" */

struct urvt_open_attr {
	uint64_t magic;
	struct sockaddr_storage addr;     /* AF_INET, AF_INET6 (port ignored) or AF_UNSPEC */
};

/* rdma-core's private provider entry point (IBVERBS_PRIVATE_34, no public
 * header declares it) */
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);

#endif
