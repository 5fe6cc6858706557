/*
 * The process's device as the rdma_cm sees it. urvt has one device per
 * process, bound to one IP address (docs/usage.md); the rdma_cm opens it
 * when an id first needs it, on the address that id names:
 *
 *   rdma_bind_addr(A)          the device is made at A (URVT_ADDR /
 *                              URVT_NETDEV, if set, must say A);
 *   rdma_resolve_addr(-, D)    at the source of the route to D, or for a
 *                              loopback D (or with URVT_ADDR / URVT_NETDEV)
 *                              by urvt's default selection;
 *   rdma_listen on a wildcard, rdma_get_devices: the default selection.
 *
 * Once made it stays for the life of the process; an address other than its
 * own is EADDRNOTAVAIL. Opening goes through verbs_open_device with urvt's
 * private open request (verbs/open_at.h): no symbol beyond rdma-core's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/hostreg.h"
#include "base/progress.h"
#include "rdmacm/addr.h"
#include "rdmacm/cma_priv.h"
#include "rdmacm/mad.h"
#include "verbs/open_at.h"

pthread_mutex_t cma_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_err;
static struct urvt_progress *progress;
static struct cma_device *the_dev;
static uint8_t response_timeout = 20;  /* CMA_CM_RESPONSE_TIMEOUT */
static uint8_t max_cm_retries = 15;    /* CMA_MAX_CM_RETRIES */

static uint8_t env_u8(const char *name, uint8_t def, uint8_t max)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	v = strtol(s, &end, 0);
	return *end || v < 0 || v > max ? def : (uint8_t)v;
}

static void do_init(void)
{
	int err = 0;

	response_timeout = env_u8("URVT_CM_RESPONSE_TIMEOUT", 20, 31);
	max_cm_retries = env_u8("URVT_CM_RETRIES", 15, 15);
	progress = urvt_progress_create(&err);
	init_err = progress ? 0 : err;
}

int cma_init(void)
{
	pthread_once(&init_once, do_init);
	return init_err;
}

struct urvt_progress *cma_progress(void)
{
	return progress;
}

uint8_t cma_response_timeout(void)
{
	return response_timeout;
}

uint8_t cma_max_cm_retries(void)
{
	return max_cm_retries;
}

struct cma_device *cma_device_if_open(void)
{
	return the_dev;
}

static void port_recv(void *arg, const void *mad, size_t len, const union ibv_gid *sgid)
{
	struct cma_device *dev = arg;

	cm_recv_mad(dev->cm, mad, len, sgid);
}

static const struct cm_dev_ops port_ops = { .send = cm_port_send };

/* Open the device (at want, or the default selection). Caller holds the lock. */
static int device_open(const struct sockaddr *want, struct cma_device **out)
{
	struct urvt_open_attr oa = { .magic = URVT_OPEN_ATTR_MAGIC };
	struct ibv_device **list;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct cma_device *dev;
	struct urvt_host *host;
	int ret, host_err;

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	if (want)
		memcpy(&oa.addr, want, cma_addrlen(want));
	list = ibv_get_device_list(NULL);
	if (!list || !list[0]) {
		ret = -ENODEV;
		goto err_free;
	}
	dev->verbs = verbs_open_device(list[0], &oa);
	ret = dev->verbs ? 0 : -errno;
	ibv_free_device_list(list);
	if (ret)
		goto err_free;
	if (ibv_query_device(dev->verbs, &da) || ibv_query_port(dev->verbs, 1, &pa) ||
	    ibv_query_gid(dev->verbs, 1, 0, &dev->gid)) {
		ret = -ENODEV;
		goto err_close;
	}
	dev->node_guid = da.node_guid;
	dev->max_qpsize = da.max_qp_wr;
	dev->max_initiator_depth = (uint8_t)da.max_qp_init_rd_atom;
	dev->max_responder_resources = (uint8_t)da.max_qp_rd_atom;
	dev->ack_delay = da.local_ca_ack_delay;
	dev->active_mtu = pa.active_mtu;
	cma_gid2ip(&dev->gid, 0, &dev->addr);
	dev->pd = ibv_alloc_pd(dev->verbs);
	if (!dev->pd) {
		ret = -ENOMEM;
		goto err_close;
	}
	/* receives start now but wait for the lock we hold: dev->cm is set
	 * before any MAD reaches it */
	dev->port = cm_port_open(dev->verbs, progress, &cma_lock, port_recv, dev, &ret);
	if (!dev->port)
		goto err_pd;
	dev->cm = cm_device_create(&port_ops, dev->port, progress, &cma_lock, &dev->gid,
				   dev->node_guid, dev->ack_delay, &ret);
	if (!dev->cm)
		goto err_port;
	/* the slot, once: no registry (URVT_SHARE=0) keeps IDs all random */
	host = urvt_host_get(&host_err);
	if (host)
		cm_device_set_id_slot(dev->cm, host->my_slot);
	*out = dev;
	return 0;

err_port:
	pthread_mutex_unlock(&cma_lock);
	cm_port_close(dev->port);
	pthread_mutex_lock(&cma_lock);
err_pd:
	ibv_dealloc_pd(dev->pd);
err_close:
	ibv_close_device(dev->verbs);
err_free:
	free(dev);
	return ret;
}

int cma_get_device(const struct sockaddr *want, struct cma_device **out)
{
	int ret;

	if (want && cma_zero_addr(want))
		want = NULL;
	if (the_dev) {
		if (want && !cma_addr_eq(want, (struct sockaddr *)&the_dev->addr))
			return -EADDRNOTAVAIL;
		*out = the_dev;
		return 0;
	}
	ret = device_open(want, &the_dev);
	if (ret)
		return ret;
	*out = the_dev;
	return 0;
}

/* ------------------------------------------------------------------ */
/* rdma_get_devices                                                   */
/* ------------------------------------------------------------------ */
struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list = NULL;
	struct cma_device *dev;
	int ret = cma_init();

	if (!ret) {
		pthread_mutex_lock(&cma_lock);
		ret = cma_get_device(NULL, &dev);
		pthread_mutex_unlock(&cma_lock);
	}
	if (!ret) {
		list = calloc(2, sizeof(*list));
		if (list)
			list[0] = dev->verbs;
		else
			ret = -ENOMEM;
	}
	if (num_devices)
		*num_devices = list ? 1 : 0;
	if (ret)
		errno = -ret;
	return list;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}
