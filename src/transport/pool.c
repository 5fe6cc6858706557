/*
 * The packet-buffer pool: POOL_BUFS buffers mapped once at device
 * creation, a free stack under one spinlock. A response the receive path
 * hands to a QP's completer lives in one of them; exhaustion drops the
 * packet (counted by the caller), it never allocates.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "transport/tp.h"

#define POOL_BUFS 4096

/* A buffer while more than keep are free, else NULL. */
static struct urvt_pktbuf *pkt_alloc_keep(struct urvt_net *net, uint32_t keep)
{
	struct urvt_pktbuf *b = NULL;

	urvt_spin_lock(&net->pool_lock);
	if (net->pool_n > keep)
		b = net->pool_free[--net->pool_n];
	urvt_spin_unlock(&net->pool_lock);
	return b;
}

struct urvt_pktbuf *urvt_pkt_alloc(struct urvt_net *net)
{
	return pkt_alloc_keep(net, 0);
}

struct urvt_pktbuf *urvt_pkt_alloc_spare(struct urvt_net *net)
{
	return pkt_alloc_keep(net, POOL_BUFS / 2);
}

void urvt_pkt_free(struct urvt_net *net, struct urvt_pktbuf *b)
{
	urvt_spin_lock(&net->pool_lock);
	net->pool_free[net->pool_n++] = b;
	urvt_spin_unlock(&net->pool_lock);
}

void urvt_pkt_free_list(struct urvt_net *net, struct urvt_pktbuf *b)
{
	if (!b)
		return;
	urvt_spin_lock(&net->pool_lock);
	while (b) {
		struct urvt_pktbuf *n = b->next;
		net->pool_free[net->pool_n++] = b;
		b = n;
	}
	urvt_spin_unlock(&net->pool_lock);
}

int urvt_pool_init(struct urvt_net *net)
{
	size_t sz = (size_t)POOL_BUFS * sizeof(struct urvt_pktbuf);

	net->pool_mem = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (net->pool_mem == MAP_FAILED) {
		net->pool_mem = NULL;
		return -ENOMEM;
	}
	net->pool_free = calloc(POOL_BUFS, sizeof(*net->pool_free));
	if (!net->pool_free)
		return -ENOMEM;
	net->pool_cap = POOL_BUFS;
	for (uint32_t i = 0; i < POOL_BUFS; i++)
		net->pool_free[net->pool_n++] = &net->pool_mem[POOL_BUFS - 1 - i];
	return 0;
}

void urvt_pool_fini(struct urvt_net *net)
{
	if (net->pool_mem)
		munmap(net->pool_mem, (size_t)POOL_BUFS * sizeof(struct urvt_pktbuf));
	free(net->pool_free);
	net->pool_mem = NULL;
	net->pool_free = NULL;
}
