/*
 * Shared helpers of the core unit tests (tests/unit): open the device the
 * way the verbs edge does (rvt_dev_get + urvt_context_init), build objects,
 * connect loopback QPs, and wait for completions and async events with a
 * deadline. Every wait gives up after a bounded time so a hung core fails
 * the test instead of hanging ctest.
 *
 * Include after <setjmp.h>/<stdarg.h>/<stddef.h>/<cmocka.h>.
 */
#ifndef URVT_TESTS_UNIT_UT_H
#define URVT_TESTS_UNIT_UT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/rvt_api.h"

/* Default deadline of the waiting helpers. */
#define UT_TIMEOUT_MS 3000

struct ut_dev {
	struct rvt_dev_info *rdi;
	struct urvt_context *uctx;
};

/* Open the device and a context (num_comp_vectors = 1, as the verbs edge). */
void ut_open(struct ut_dev *d);
void ut_close(struct ut_dev *d);
/* Do this device's own QPs meet in-process (rvt_ruc_loopback, post_direct),
 * or over a link (URVT_PATH=shm|udp, docs/usage.md)? */
bool ut_inproc(const struct ut_dev *d);

struct rvt_pd *ut_pd(struct ut_dev *d);
struct rvt_cq *ut_cq(struct ut_dev *d, int cqe);
struct rvt_mregion *ut_mr(struct rvt_pd *pd, void *addr, size_t len, int access);

struct ut_qp_caps {
	uint32_t send_wr, recv_wr, send_sge, recv_sge, inline_data;
};

/* Create a QP; fails the test on error. caps NULL: 16 WRs, 4 SGEs each. */
struct rvt_qp *ut_qp(struct ut_dev *d, struct rvt_pd *pd, enum ibv_qp_type type,
		     struct rvt_cq *scq, struct rvt_cq *rcq, struct rvt_srq *srq,
		     const struct ut_qp_caps *caps, bool sq_sig_all);
/* Create a QP and return the negative errno (0 on success, QP destroyed). */
int ut_qp_try(struct ut_dev *d, struct ibv_qp_init_attr_ex *attr);

/* An address vector to this device (loopback). */
void ut_loopback_ah_attr(struct ut_dev *d, struct ibv_ah_attr *ah);

/* RESET -> INIT with the minimum mask (access flags for RC/UC, qkey for UD). */
void ut_to_init(struct rvt_qp *qp, int access, uint32_t qkey);
/* INIT -> RTR towards dest_qpn (RC/UC) with a loopback AV. */
void ut_to_rtr(struct ut_dev *d, struct rvt_qp *qp, uint32_t dest_qpn, uint8_t min_rnr_timer);
/* The same with an expected PSN (a link checks it; in-process nothing does). */
void ut_to_rtr_psn(struct ut_dev *d, struct rvt_qp *qp, uint32_t dest_qpn, uint32_t rq_psn,
		   uint8_t min_rnr_timer);
/* RTR -> RTS (RC: retry/rnr_retry, max_rd_atomic). */
void ut_to_rts(struct rvt_qp *qp, uint8_t retry_cnt, uint8_t rnr_retry, uint8_t max_rd_atomic);
/* A peer at an IPv4 address (a test's own socket) and the attributes of
 * the connection to it; ut_to_rtr_path / ut_to_rts_path apply them the way
 * ut_to_rtr / ut_to_rts do (UD and UC take what applies to them). */
struct ut_path {
	uint32_t peer_s_addr;             /* network byte order */
	uint32_t dest_qpn, rq_psn, sq_psn;
	uint8_t min_rnr_timer, timeout, retry_cnt, rnr_retry, max_rd_atomic;
};
void ut_to_rtr_path(struct rvt_qp *qp, const struct ut_path *p);
void ut_to_rts_path(struct rvt_qp *qp, const struct ut_path *p);
/* Receive one packet on a test's peer socket within ms and parse it
 * (asserting that it parses); false if none came. */
struct urvt_pkt;
bool ut_peer_recv(int fd, struct urvt_pkt *p, uint8_t *buf, size_t cap, int ms);
/* Bring qp to RTS connected to dest_qpn (RC/UC) or ready for UD. */
void ut_connect(struct ut_dev *d, struct rvt_qp *qp, uint32_t dest_qpn, int access);
void ut_modify_state(struct rvt_qp *qp, enum ibv_qp_state s);
int ut_state(struct rvt_qp *qp);

/* Poll until n entries arrived or timeout_ms passed; returns how many. */
int ut_poll(struct rvt_cq *cq, struct ibv_wc *wc, int n, int timeout_ms);
/* Poll exactly one entry (fails the test if none within the default timeout). */
void ut_poll1(struct rvt_cq *cq, struct ibv_wc *wc);
/* Assert that no entry shows up within ms. */
void ut_cq_empty(struct rvt_cq *cq, int ms);

/*
 * Wait for an async event; returns true if one arrived (copied to *ev).
 * Tests read (drain) events before destroying the objects they name: the
 * core counts an event on its object when it is read (event.c), so reading
 * one for a destroyed CQ/SRQ touches freed memory. (With the kernel, a
 * destroy drops the object's unread events; see the report on event.c.)
 */
bool ut_async_wait(struct ut_dev *d, struct ibv_async_event *ev, int timeout_ms);
/* Read and discard every pending async event; returns how many. */
int ut_async_drain(struct ut_dev *d);
/* Count pending events of a type on an object (drains the pipe). */
int ut_async_count(struct ut_dev *d, enum ibv_event_type type, const void *obj, int wait_ms);

uint64_t ut_now_ms(void);
void ut_sleep_ms(int ms);

/* Fill / check a buffer with a pattern derived from seed. */
void ut_fill(void *buf, size_t len, uint32_t seed);
bool ut_check(const void *buf, size_t len, uint32_t seed);

/* Post one WR / receive, asserting success. */
void ut_post_send(struct rvt_qp *qp, struct ibv_send_wr *wr);
void ut_post_recv(struct rvt_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey);

#endif
