/*
 * The send engine and the shared receive-side helpers (rdmavt's rc.c/ruc
 * code): scheduling, WQE retirement, receive WQE consumption, SGE copies
 * and the in-process loopback path.
 */
#ifndef URVT_CORE_RUC_H
#define URVT_CORE_RUC_H

#include <string.h>

#include "core/rvt.h"

/*
 * Run the QP's send engine now if no other thread is running it; if one is,
 * it will run the engine again before it lets go (the s_sched token), so
 * posting never waits.
 */
void rvt_schedule_send(struct rvt_qp *qp);
/* The caller holds the token (moved s_sched from 0 itself): run the engine
 * until no mark is left, then let go of the token. */
void rvt_schedule_send_held(struct rvt_qp *qp);
/* From contexts that must not run the engine nested: the progress thread runs it. */
void rvt_schedule_send_async(struct rvt_qp *qp);
void rvt_send_work_fn(struct urvt_work *w);
void rvt_retry_timer_fn(struct urvt_timer *t);
void rvt_rnr_timer_fn(struct urvt_timer *t);

/* Retire the oldest WQE (s_last) with a status (rvt_send_complete). */
void rvt_send_complete(struct rvt_qp *qp, struct rvt_swqe *wqe, enum ibv_wc_status status);
void rvt_put_swqe(struct rvt_swqe *wqe);

/* Caller holds r_lock. 1 = WQE taken, 0 = none, -1 = bad WQE (completed LOC_PROT_ERR). */
int rvt_get_rwqe(struct rvt_qp *qp, bool wr_id_only);
void rvt_release_rsge(struct rvt_qp *qp);
bool rvt_error_qp_locked(struct rvt_qp *qp, enum ibv_wc_status err);
/* mr is being deregistered: the QP goes to ERR if it holds it (qp.c). */
void rvt_qp_mr_clean(struct rvt_qp *qp, const struct rvt_mregion *mr);

/* Scatter length bytes into ss. The caller has checked they fit (qp-semantics §8). */
void rvt_copy_sge(struct rvt_sge_state *ss, const void *data, uint32_t length,
		  bool release, bool copy_last);
/* Gather length bytes from ss into buf, advancing ss. */
void rvt_copy_from_sge(void *buf, struct rvt_sge_state *ss, uint32_t length);
/* The same, returning the CRC-32 (wire/crc32.h) of the bytes continued
 * from crc: a packet's ICRC computed while its payload is gathered. */
uint32_t rvt_copy_from_sge_crc(void *buf, struct rvt_sge_state *ss, uint32_t length,
			       uint32_t crc);
static inline void rvt_sge_state_init(struct rvt_sge_state *ss, struct rvt_sge *list,
				      uint32_t num_sge, uint32_t total_len)
{
	ss->num_sge = (uint8_t)num_sge;
	ss->total_len = total_len;
	ss->sg_list = num_sge ? list + 1 : list;
	if (num_sge)
		ss->sge = list[0];
	else
		ss->sge = (struct rvt_sge){ 0 };
}

#if defined(__SANITIZE_THREAD__)
#define URVT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define URVT_TSAN 1
#endif
#endif

/*
 * The last bytes of an RDMA WRITE land after everything before them, so a
 * peer polling the last byte sees the rest (rdmavt's copy_last). A release
 * fence orders them after the earlier stores (on x86 it costs nothing);
 * TSan cannot model fences, so there each byte is a release store.
 * memmove: a loopback WRITE/READ may name overlapping ranges of one MR.
 */
static inline void rvt_copy_tail(uint8_t *d, const uint8_t *s, uint32_t n)
{
#ifdef URVT_TSAN
	for (uint32_t i = 0; i < n; i++)
		__atomic_store_n(&d[i], s[i], __ATOMIC_RELEASE);
#else
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memmove(d, s, n);
#endif
}

/* One flat region: everything but the last 8 bytes, then those (copy_last). */
static inline void rvt_copy_last(uint8_t *d, const uint8_t *s, uint32_t len)
{
	uint32_t head;

#ifndef URVT_TSAN
	if (len == 8) { /* the common small WRITE: one load, fence, one store */
		uint64_t v;
		memcpy(&v, s, 8);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		memcpy(d, &v, 8);
		return;
	}
#endif
	head = len > 8 ? len - 8 : 0;
	if (head)
		memmove(d, s, head);
	rvt_copy_tail(d + head, s + head, len - head);
}

/*
 * Wait out an RNR NAK with timer code `code` (rdmavt rvt_add_rnr_timer):
 * one retry used (rnr_retry 7 is infinite), the send engine holds off
 * (RVT_S_WAIT_RNR) until the timer fires. Engine context, s_rnr_retry > 0.
 */
void rvt_add_rnr_timer(struct rvt_qp *qp, uint8_t code);

#endif
