/*
 * Device memory (ibv_alloc_dm, ibv_free_dm, ibv_memcpy_to/from_dm,
 * ibv_reg_dm_mr, ibv_import_dm). urvt's device is the CPU, so its memory
 * is host memory of the process: an allocation is an aligned buffer
 * counted against max_dm_size (one pool per process, as the device is),
 * the copies are memcpy with the bounds and 4-byte granularity a device
 * BAR imposes, and an MR on it is an ordinary zero-based MR over the buffer
 * (RDMA to and from it works as to any MR, in-process and over the wire).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/rvt_api.h"
#include "verbs/ops.h"

#define DM_GRANULE 4u                   /* copies: offset and length multiples of 4 */
#define DM_MAX_LOG_ALIGN 12             /* up to a page */

struct urvt_dm {
	struct ibv_dm ibdm;
	struct urvt_dm *real;           /* itself; for an imported one, the DM it names */
	uint8_t *buf;
	size_t length;
	_Atomic int usecnt;             /* MRs on it */
	struct urvt_dm *next;           /* dm_list (allocated ones), under dm_lock */
};

/* An MR registered on a DM (so that dereg lets the DM go). */
struct dm_mr {
	struct ibv_mr *mr;
	struct urvt_dm *dm;
	struct dm_mr *next;
};

static pthread_mutex_t dm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct urvt_dm *dm_list;
static struct dm_mr *dm_mrs;
static _Atomic int n_dm_mrs;
static size_t dm_used;                  /* bytes allocated, <= URVT_MAX_DM_SIZE */
static uint32_t dm_last_handle;

static inline struct urvt_dm *to_dm(struct ibv_dm *ibdm)
{
	return container_of(ibdm, struct urvt_dm, ibdm);
}

static int dm_range_ok(const struct urvt_dm *dm, uint64_t off, size_t len)
{
	if ((off | len) & (DM_GRANULE - 1))
		return EINVAL;
	if (off > dm->length || len > dm->length - off)
		return EINVAL;
	return 0;
}

static int dm_memcpy_to(struct ibv_dm *ibdm, uint64_t dm_offset, const void *host_addr,
			size_t length)
{
	struct urvt_dm *dm = to_dm(ibdm)->real;
	int ret = dm_range_ok(dm, dm_offset, length);

	if (ret)
		return ret;
	memcpy(dm->buf + dm_offset, host_addr, length);
	return 0;
}

static int dm_memcpy_from(void *host_addr, struct ibv_dm *ibdm, uint64_t dm_offset, size_t length)
{
	struct urvt_dm *dm = to_dm(ibdm)->real;
	int ret = dm_range_ok(dm, dm_offset, length);

	if (ret)
		return ret;
	memcpy(host_addr, dm->buf + dm_offset, length);
	return 0;
}

static void dm_init_ops(struct urvt_dm *dm, struct ibv_context *context, uint32_t handle)
{
	dm->ibdm.context = context;
	dm->ibdm.memcpy_to_dm = dm_memcpy_to;
	dm->ibdm.memcpy_from_dm = dm_memcpy_from;
	dm->ibdm.comp_mask = 0;
	dm->ibdm.handle = handle;
}

struct ibv_dm *urvt_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr)
{
	size_t align = (size_t)1 << (attr->log_align_req <= DM_MAX_LOG_ALIGN ?
				     attr->log_align_req : 0);
	struct urvt_dm *dm;
	void *buf;

	if (attr->comp_mask || attr->log_align_req > DM_MAX_LOG_ALIGN || !attr->length) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->length > URVT_MAX_DM_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	dm = calloc(1, sizeof(*dm));
	if (!dm || posix_memalign(&buf, align < 64 ? 64 : align, attr->length)) {
		free(dm);
		errno = ENOMEM;
		return NULL;
	}
	memset(buf, 0, attr->length);
	dm->real = dm;
	dm->buf = buf;
	dm->length = attr->length;
	pthread_mutex_lock(&dm_lock);
	if (attr->length > URVT_MAX_DM_SIZE - dm_used) {
		pthread_mutex_unlock(&dm_lock);
		free(buf);
		free(dm);
		errno = ENOMEM;
		return NULL;
	}
	dm_used += attr->length;
	if (!++dm_last_handle)
		++dm_last_handle;
	dm_init_ops(dm, context, dm_last_handle);
	dm->next = dm_list;
	dm_list = dm;
	pthread_mutex_unlock(&dm_lock);
	return &dm->ibdm;
}

/* An imported DM only goes itself (ibv_free_dm of it frees the memory, as
 * the kernel's shared object would go). */
int urvt_free_dm(struct ibv_dm *ibdm)
{
	struct urvt_dm *dm = to_dm(ibdm), *real = dm->real, **pp;

	if (atomic_load(&real->usecnt))
		return EBUSY;
	pthread_mutex_lock(&dm_lock);
	for (pp = &dm_list; *pp && *pp != real; pp = &(*pp)->next)
		;
	if (!*pp) {
		pthread_mutex_unlock(&dm_lock);
		return EINVAL; /* freed already (through another handle) */
	}
	*pp = real->next;
	dm_used -= real->length;
	pthread_mutex_unlock(&dm_lock);
	free(real->buf);
	if (dm != real)
		free(dm);
	free(real);
	return 0;
}

/*
 * ibv_reg_dm_mr: a zero-based MR over [dm_offset, dm_offset + length) of
 * the DM (IBV_ACCESS_ZERO_BASED is required, as rdma-core documents): its
 * addresses run from 0, its addr is NULL.
 */
struct ibv_mr *urvt_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *ibdm, uint64_t dm_offset,
			      size_t length, unsigned int access)
{
	struct urvt_dm *dm = to_dm(ibdm)->real;
	struct rvt_mregion *mr;
	struct dm_mr *link;
	int err = 0;

	if (!(access & IBV_ACCESS_ZERO_BASED) || dm_offset > dm->length ||
	    length > dm->length - dm_offset || (!length && dm_offset == dm->length)) {
		errno = EINVAL;
		return NULL;
	}
	link = calloc(1, sizeof(*link));
	if (!link) {
		errno = ENOMEM;
		return NULL;
	}
	/*
	 * A zero-length DM MR (mlx5 registers them) grants nothing: nothing
	 * checks the key of a zero-length access. It is made over one byte
	 * with local access only, then shrunk, before anyone has its key.
	 */
	mr = rvt_reg_mr(ibpd_to_rvtpd(pd), dm->buf + dm_offset, length ? length : 1, 0,
			length ? (int)(access & ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE) :
				 IBV_ACCESS_ZERO_BASED,
			&err);
	if (!mr) {
		free(link);
		errno = -err;
		return NULL;
	}
	if (!length) {
		WRITE_ONCE(mr->length, 0);
		mr->ibmr.length = 0;
	}
	mr->ibmr.handle = mr->lkey;
	mr->ibmr.pd = pd;
	mr->ibmr.addr = NULL;
	link->mr = &mr->ibmr;
	link->dm = dm;
	atomic_fetch_add(&dm->usecnt, 1);
	pthread_mutex_lock(&dm_lock);
	link->next = dm_mrs;
	dm_mrs = link;
	atomic_fetch_add(&n_dm_mrs, 1);
	pthread_mutex_unlock(&dm_lock);
	return &mr->ibmr;
}

void urvt_dm_mr_deregistered(struct ibv_mr *mr)
{
	struct dm_mr **pp, *link = NULL;

	if (!atomic_load(&n_dm_mrs))
		return;
	pthread_mutex_lock(&dm_lock);
	for (pp = &dm_mrs; *pp; pp = &(*pp)->next) {
		if ((*pp)->mr == mr) {
			link = *pp;
			*pp = link->next;
			atomic_fetch_sub(&n_dm_mrs, 1);
			break;
		}
	}
	pthread_mutex_unlock(&dm_lock);
	if (link) {
		atomic_fetch_sub(&link->dm->usecnt, 1);
		free(link);
	}
}

/* ibv_import_dm: another handle, for context, on the DM with this handle
 * of a context it shares objects with (ibv_import_device). */
struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	struct urvt_dm *real, *dm;

	pthread_mutex_lock(&dm_lock);
	for (real = dm_list; real && real->ibdm.handle != dm_handle; real = real->next)
		;
	pthread_mutex_unlock(&dm_lock);
	if (!real || to_uctx(real->ibdm.context)->share_id != to_uctx(context)->share_id) {
		errno = EINVAL;
		return NULL;
	}
	dm = calloc(1, sizeof(*dm));
	if (!dm) {
		errno = ENOMEM;
		return NULL;
	}
	dm->real = real;
	dm_init_ops(dm, context, dm_handle);
	return &dm->ibdm;
}

void ibv_unimport_dm(struct ibv_dm *ibdm)
{
	struct urvt_dm *dm = to_dm(ibdm);

	if (dm->real != dm)
		free(dm);
}
