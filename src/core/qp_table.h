/* QPN allocation (rdmavt alloc_qpn/free_qpn) and QPN -> QP lookup. */
#ifndef URVT_CORE_QP_TABLE_H
#define URVT_CORE_QP_TABLE_H

#include "core/rvt.h"

int rvt_qpn_table_init(struct rvt_qpn_table *t);
void rvt_qpn_table_fini(struct rvt_qpn_table *t);
/* Next free QPN after the last one handed out (never 0 or 1); -ENOMEM when full. */
int rvt_alloc_qpn(struct rvt_qpn_table *t, uint32_t *qpn);
void rvt_free_qpn(struct rvt_qpn_table *t, uint32_t qpn);

int rvt_qp_table_init(struct rvt_qp_table *t);
void rvt_qp_table_fini(struct rvt_qp_table *t);
/* Publish / withdraw a QP for lookups by QPN. */
int rvt_qp_table_insert(struct rvt_qp_table *t, struct rvt_qp *qp);
void rvt_qp_table_remove(struct rvt_qp_table *t, struct rvt_qp *qp);
bool rvt_qp_table_contains(struct rvt_qp_table *t, struct rvt_qp *qp);
/* Type-stable QP structures: recycled through the table's free list. */
struct rvt_qp *rvt_qp_struct_alloc(struct rvt_qp_table *t);
void rvt_qp_struct_free(struct rvt_qp_table *t, struct rvt_qp *qp);

#endif
