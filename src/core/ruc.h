/*
 * The send engine and the shared receive-side helpers (rdmavt's rc.c/ruc
 * code): scheduling, WQE retirement, receive WQE consumption, SGE copies
 * and the in-process loopback path.
 */
#ifndef URVT_CORE_RUC_H
#define URVT_CORE_RUC_H

#include "core/rvt.h"

/*
 * Run the QP's send engine now if no other thread is running it; if one is,
 * it will run the engine again before it lets go (the s_sched token), so
 * posting never waits.
 */
void rvt_schedule_send(struct rvt_qp *qp);
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

/* Scatter length bytes into ss. The caller has checked they fit (§8). */
void rvt_copy_sge(struct rvt_sge_state *ss, const void *data, uint32_t length,
		  bool release, bool copy_last);
/* Gather length bytes from ss into buf, advancing ss. */
void rvt_copy_from_sge(void *buf, struct rvt_sge_state *ss, uint32_t length);
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

/* RNR NAK timer code -> microseconds (qp-semantics.md §9.1). */
extern const uint32_t ib_rvt_rnr_table[32];

#endif
