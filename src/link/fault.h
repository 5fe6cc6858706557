/*
 * Fault injection on the send path (URVT_FAULT="drop=P,dup=P,reorder=P,
 * corrupt=P,delay_us=N,seed=S"; docs/usage.md). Each packet handed to the
 * network is, independently and in this order: dropped with probability
 * drop; corrupted (one byte flipped, so the receiver's ICRC check drops it)
 * with probability corrupt; duplicated with probability dup; held back for
 * a random 20..500 us with probability reorder (later packets overtake it);
 * and delayed by delay_us. Held packets sit in a bounded queue released by a
 * progress-thread timer and by later sends (a full queue lets its earliest
 * packet go early).
 */
#ifndef URVT_LINK_FAULT_H
#define URVT_LINK_FAULT_H

#include <stdbool.h>
#include <stdint.h>

struct urvt_progress;
struct urvt_fault;

struct urvt_fault_cfg {
	double drop, dup, reorder, corrupt;
	uint32_t delay_us;
	uint64_t seed;
};

/* Parse the URVT_FAULT string; 0 or -EINVAL (message on stderr). */
int urvt_fault_parse(const char *spec, struct urvt_fault_cfg *cfg);
bool urvt_fault_active(const struct urvt_fault_cfg *cfg);

/* send: how held packets leave (called on the progress thread). */
typedef void (*urvt_fault_send_fn)(void *arg, const uint8_t *buf, uint32_t len,
				   const void *dst, uint32_t dstlen);
struct urvt_fault *urvt_fault_create(const struct urvt_fault_cfg *cfg, struct urvt_progress *p,
				     urvt_fault_send_fn send, void *arg);
/* Sends whatever is still held, stops the timer, frees. */
void urvt_fault_destroy(struct urvt_fault *f);

enum urvt_fault_verdict {
	URVT_FAULT_PASS = 0,   /* send it (buf may have been corrupted) */
	URVT_FAULT_DROP,       /* do not send */
	URVT_FAULT_HELD,       /* copied; the fault queue sends it later */
	URVT_FAULT_DUP,        /* send it twice */
};

/* Decide the fate of one packet; flags get URVT_FAULT_F_* for the counters. */
enum {
	URVT_FAULT_F_DROP = 1 << 0,
	URVT_FAULT_F_CORRUPT = 1 << 1,
	URVT_FAULT_F_DUP = 1 << 2,
	URVT_FAULT_F_REORDER = 1 << 3,
	URVT_FAULT_F_DELAY = 1 << 4,
};
enum urvt_fault_verdict urvt_fault_apply(struct urvt_fault *f, uint8_t *buf, uint32_t len,
					 const void *dst, uint32_t dstlen, unsigned *flags);

#endif
