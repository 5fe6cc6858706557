/*
 * riomap / riowrite (rsocket_priv.h): buffers mapped for the peer's
 * direct writes, announced into the peer's iomap table before our next
 * send, and riowrite() into the buffers the peer announced.
 */
#include "rdmacm/rsocket_priv.h"

#include <stdlib.h>
#include <sys/mman.h>

void rs_free_iomaps(struct rs_iomap_mr **list)
{
	while (*list) {
		struct rs_iomap_mr *m = *list;

		*list = m->next;
		if (m->mr)
			ibv_dereg_mr(m->mr);
		if (m->index < 0)
			free(m);
	}
}

/* Announce queued riomap()s: write each into the peer's iomap table. */
int rs_send_iomaps(struct rsocket *rs, int flags)
{
	int ret = 0;

	pthread_mutex_lock(&rs->map_lock);
	while (rs->iomap_queue) {
		struct rs_iomap_mr *m = rs->iomap_queue;
		struct rs_iomap iom;
		struct ibv_sge inl, *sgl;
		int nsge, f;

		ret = rs_wait_send(rs, flags);
		if (ret)
			break;
		iom.offset = m->offset;
		iom.sge.addr = (uintptr_t)m->mr->addr;
		iom.sge.length = (uint32_t)m->mr->length;
		iom.sge.key = m->mr->rkey;
		if (rs->swap) {
			iom.offset = __builtin_bswap64(iom.offset);
			iom.sge.addr = __builtin_bswap64(iom.sge.addr);
			iom.sge.length = __builtin_bswap32(iom.sge.length);
			iom.sge.key = __builtin_bswap32(iom.sge.key);
		}
		nsge = rs_stage(rs, &iom, sizeof(iom), &inl, &sgl, &f);
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= sizeof(iom);
		ret = rs_post_write(rs, sgl, nsge, rs_msg(RS_OP_IOMAP_SGL, (uint32_t)m->index), true, f,
				    rs->peer_iomap.addr + (uint64_t)m->index * sizeof(iom),
				    rs->peer_iomap.key);
		rs_advance(rs, nsge, sizeof(iom), f);
		rs->iomap_queue = m->next;
		m->next = rs->iomaps;
		rs->iomaps = m;
		m->announced = true;
		if (ret)
			break;
	}
	pthread_mutex_unlock(&rs->map_lock);
	return ret;
}

/*
 * Map buf for the peer's riowrite at offset (-1: at buf's address). With
 * PROT_WRITE it takes a slot of the peer's iomap table and is announced
 * before our next send; without, it is local only. Overlaps are not
 * checked (as in rdma-core).
 */
off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rsocket *rs = rs_lookup(s);
	struct rs_iomap_mr *m = NULL;
	int access = IBV_ACCESS_LOCAL_WRITE;

	(void)flags;
	if (!rs)
		return err_set(EBADF);
	if (!rs->cm_id->pd || (prot & ~(PROT_WRITE | PROT_NONE)))
		return err_set(EINVAL);
	pthread_mutex_lock(&rs->map_lock);
	if (prot & PROT_WRITE) {
		access |= IBV_ACCESS_REMOTE_WRITE;
		if (!rs->remote_slots && rs->peer_iomap.length) {
			rs->remote_slots = calloc(rs->peer_iomap.length, sizeof(*rs->remote_slots));
			for (uint32_t i = 0; rs->remote_slots && i < rs->peer_iomap.length; i++)
				rs->remote_slots[i].index = (int)i;
		}
		for (uint32_t i = 0; rs->remote_slots && i < rs->peer_iomap.length; i++)
			if (!rs->remote_slots[i].mr) {
				m = &rs->remote_slots[i];
				break;
			}
	} else {
		m = calloc(1, sizeof(*m));
		if (m)
			m->index = -1;
	}
	if (!m) {
		offset = err_set(ENOMEM);
		goto out;
	}
	m->mr = ibv_reg_mr(rs->cm_id->pd, buf, len, access);
	if (!m->mr) {
		if (m->index < 0)
			free(m);
		offset = -1;
		goto out;
	}
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	m->offset = (uint64_t)offset;
	m->announced = false;
	if (m->index >= 0) {
		/* announced in order: at the tail of the queue */
		struct rs_iomap_mr **t = &rs->iomap_queue;

		while (*t)
			t = &(*t)->next;
		m->next = NULL;
		*t = m;
	} else {
		m->next = rs->iomaps;
		rs->iomaps = m;
	}
out:
	pthread_mutex_unlock(&rs->map_lock);
	return offset;
}

static bool rs_unlink_iomap(struct rs_iomap_mr **list, void *buf, size_t len)
{
	for (struct rs_iomap_mr **p = list; *p; p = &(*p)->next) {
		struct rs_iomap_mr *m = *p;

		if (m->mr->addr == buf && m->mr->length == len) {
			*p = m->next;
			ibv_dereg_mr(m->mr);
			m->mr = NULL;
			if (m->index < 0)
				free(m);
			return true;
		}
	}
	return false;
}

int riounmap(int s, void *buf, size_t len)
{
	struct rsocket *rs = rs_lookup(s);
	bool found;

	if (!rs)
		return err_set(EBADF);
	pthread_mutex_lock(&rs->map_lock);
	found = rs_unlink_iomap(&rs->iomaps, buf, len) || rs_unlink_iomap(&rs->iomap_queue, buf, len);
	pthread_mutex_unlock(&rs->map_lock);
	return found ? 0 : err_set(EINVAL);
}

/* The peer's mapping covering offset, from the table it writes to us. */
static const struct rs_iomap *rs_find_iomap(const struct rsocket *rs, uint64_t offset)
{
	for (int i = 0; i < rs->target_iomap_size; i++) {
		const struct rs_iomap *m = &rs->tgt_iomap[i];

		if (offset >= m->offset && offset < m->offset + m->sge.length)
			return m;
	}
	return NULL;
}

size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsocket *rs = rs_lookup(s);
	const struct rs_iomap *iom = NULL;
	const uint8_t *in = buf;
	size_t left = count;
	uint32_t xfer, olen = RS_OLAP_START_SIZE;
	uint64_t off = (uint64_t)offset;
	int ret = 0;

	if (!rs)
		return (size_t)err_set(EBADF);
	ret = rs_send_begin(rs, flags);
	if (ret)
		goto out;
	for (; left; left -= xfer, in += xfer, off += xfer) {
		struct ibv_sge inl, *sgl;
		int nsge, f;

		if (!iom || off >= iom->offset + iom->sge.length) {
			iom = rs_find_iomap(rs, off);
			if (!iom)
				break;
		}
		ret = rs_wait_send(rs, flags);
		if (ret)
			break;
		xfer = rs_next_chunk(rs, &olen, left);
		if (xfer > iom->offset + iom->sge.length - off)
			xfer = (uint32_t)(iom->offset + iom->sge.length - off);
		nsge = rs_stage(rs, in, xfer, &inl, &sgl, &f);
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= xfer;
		ret = rs_post_write(rs, sgl, nsge, rs_msg(RS_OP_WRITE, xfer), false, f,
				    iom->sge.addr + off - iom->offset, iom->sge.key);
		rs_advance(rs, nsge, xfer, f);
		if (ret)
			break;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	return (ret && left == count) ? (size_t)ret : count - left;
}
