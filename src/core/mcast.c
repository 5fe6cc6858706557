/*
 * UD multicast groups (rdmavt's mcast.c): which QPs a multicast GID
 * delivers to. The transport joins a group on the link when its first QP
 * attaches and leaves it when the last one goes (docs/multicast.md).
 */
#include <errno.h>
#include <string.h>

#include "core/rvt_api.h"
#include "core/transport.h"

/* A multicast GID: ff00::/8, or IPv4-mapped 224.0.0.0/4 (an IPv4 GID is
 * IPv4-mapped: roce-wire §12). */
bool rvt_gid_is_mcast(const uint8_t gid[16])
{
	static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (gid[0] == 0xff)
		return true;
	return !memcmp(gid, v4map, sizeof(v4map)) && (gid[12] & 0xf0) == 0xe0;
}

/* The checks of attach (the kernel's verbs core, then rdmavt's; see
 * docs/multicast.md): a UD QP past RESET, not QP0/1, a multicast GID. The
 * LID means nothing on RoCE. Detach asks the same but RESET. */
static int mcast_check(struct rvt_qp *qp, const union ibv_gid *gid, bool attach)
{
	if (qp->type != IBV_QPT_UD || qp->qpn <= 1 || !rvt_gid_is_mcast(gid->raw))
		return -EINVAL;
	/* a QP in RESET may still leave a group, not join one */
	if (attach && rvt_qp_state(qp) == IBV_QPS_RESET)
		return -EINVAL;
	return 0;
}

static struct rvt_mcast *mcast_find(struct rvt_dev_info *rdi, const uint8_t gid[16])
{
	for (unsigned i = 0; i < URVT_MAX_MCAST_GRP; i++)
		if (rdi->mcast[i].n && !memcmp(rdi->mcast[i].mgid.raw, gid, 16))
			return &rdi->mcast[i];
	return NULL;
}

static int mcast_qp_index(const struct rvt_mcast *m, const struct rvt_qp *qp)
{
	for (uint32_t i = 0; i < m->n; i++)
		if (m->qp[i] == qp)
			return (int)i;
	return -1;
}

int rvt_attach_mcast(struct rvt_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	struct rvt_dev_info *rdi = qp->rdi;
	struct rvt_mcast *m;
	int ret = mcast_check(qp, gid, true);

	(void)lid;
	if (ret)
		return ret;
	pthread_mutex_lock(&rdi->mcast_mutex);
	m = mcast_find(rdi, gid->raw);
	if (m && mcast_qp_index(m, qp) >= 0)
		goto out; /* attached already: rdmavt says 0 */
	ret = -ENOMEM;
	if (rdi->n_mcast_attached == URVT_MAX_MCAST_GRP * URVT_MAX_MCAST_QP_ATTACH ||
	    (m && m->n == URVT_MAX_MCAST_QP_ATTACH))
		goto out;
	if (!m) {
		for (unsigned i = 0; i < URVT_MAX_MCAST_GRP && !m; i++)
			if (!rdi->mcast[i].n)
				m = &rdi->mcast[i];
		if (!m)
			goto out;
		/* the first QP of a group: the link joins it */
		ret = rdi->transport && rdi->transport->mcast_join ?
			      rdi->transport->mcast_join(rdi, gid) : -EOPNOTSUPP;
		if (ret)
			goto out;
		m->mgid = *gid;
		rdi->n_mcast_grps++;
	}
	urvt_spin_lock(&rdi->mcast_lock);
	m->qp[m->n++] = qp;
	urvt_spin_unlock(&rdi->mcast_lock);
	rdi->n_mcast_attached++;
	ret = 0;
out:
	pthread_mutex_unlock(&rdi->mcast_mutex);
	return ret;
}

/* Take qp off group m (mcast_mutex held); the last one leaves the group. */
static void mcast_del(struct rvt_dev_info *rdi, struct rvt_mcast *m, int i)
{
	union ibv_gid gid = m->mgid;

	urvt_spin_lock(&rdi->mcast_lock);
	m->qp[i] = m->qp[--m->n];
	urvt_spin_unlock(&rdi->mcast_lock);
	rdi->n_mcast_attached--;
	if (!m->n) {
		rdi->n_mcast_grps--;
		if (rdi->transport && rdi->transport->mcast_leave)
			rdi->transport->mcast_leave(rdi, &gid);
	}
}

int rvt_detach_mcast(struct rvt_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	struct rvt_dev_info *rdi = qp->rdi;
	struct rvt_mcast *m;
	int i, ret = mcast_check(qp, gid, false);

	(void)lid;
	if (ret)
		return ret;
	pthread_mutex_lock(&rdi->mcast_mutex);
	m = mcast_find(rdi, gid->raw);
	i = m ? mcast_qp_index(m, qp) : -1;
	ret = i < 0 ? -EINVAL : 0; /* no such group, or qp not in it */
	if (!ret)
		mcast_del(rdi, m, i);
	pthread_mutex_unlock(&rdi->mcast_mutex);
	return ret;
}

unsigned rvt_mcast_groups_of(struct rvt_qp *qp)
{
	struct rvt_dev_info *rdi = qp->rdi;
	unsigned n = 0;

	pthread_mutex_lock(&rdi->mcast_mutex);
	for (unsigned g = 0; g < URVT_MAX_MCAST_GRP; g++)
		n += rdi->mcast[g].n && mcast_qp_index(&rdi->mcast[g], qp) >= 0;
	pthread_mutex_unlock(&rdi->mcast_mutex);
	return n;
}

void rvt_mcast_detach_all(struct rvt_qp *qp)
{
	struct rvt_dev_info *rdi = qp->rdi;

	if (qp->type != IBV_QPT_UD)
		return;
	pthread_mutex_lock(&rdi->mcast_mutex);
	for (unsigned g = 0; g < URVT_MAX_MCAST_GRP; g++) {
		struct rvt_mcast *m = &rdi->mcast[g];
		int i = m->n ? mcast_qp_index(m, qp) : -1;
		if (i >= 0)
			mcast_del(rdi, m, i);
	}
	pthread_mutex_unlock(&rdi->mcast_mutex);
}

unsigned rvt_mcast_qps(struct rvt_dev_info *rdi, const uint8_t gid[16], struct rvt_qp **out,
		       unsigned max)
{
	struct rvt_mcast *m;
	unsigned n = 0;

	urvt_spin_lock(&rdi->mcast_lock);
	m = mcast_find(rdi, gid);
	/* a QP in the table is alive: rvt_destroy_qp detaches it before it
	 * waits out its references */
	for (uint32_t i = 0; m && i < m->n && n < max; i++) {
		atomic_fetch_add_explicit(&m->qp[i]->refcount, 1, memory_order_acquire);
		out[n++] = m->qp[i];
	}
	urvt_spin_unlock(&rdi->mcast_lock);
	return n;
}

void rvt_mcast_init(struct rvt_dev_info *rdi)
{
	pthread_mutex_init(&rdi->mcast_mutex, NULL);
	urvt_spin_init(&rdi->mcast_lock);
}

void rvt_mcast_fini(struct rvt_dev_info *rdi)
{
	urvt_spin_destroy(&rdi->mcast_lock);
	pthread_mutex_destroy(&rdi->mcast_mutex);
}
