/* One-shot timers run by the device's progress thread (RNR and retransmit
 * timers, rdmavt's hrtimer/timer_list). */
#ifndef URVT_CORE_TIMER_H
#define URVT_CORE_TIMER_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

struct urvt_progress;
struct urvt_timer;
typedef void (*urvt_timer_fn)(struct urvt_timer *t);

struct urvt_timer {
	uint64_t expires_ns;              /* CLOCK_MONOTONIC */
	urvt_timer_fn fn;
	int32_t heap_idx;                 /* -1 while not armed */
	bool running;                     /* handler executing now */
	bool pollable;                    /* fn may run on a polling thread
					     (urvt_progress_run_due) */
};

static inline uint64_t urvt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void urvt_timer_init(struct urvt_timer *t, urvt_timer_fn fn);
/* A timer whose fn may also run on an application thread that polls
 * (urvt_progress_run_due): fn takes no lock a poller may hold and only
 * hands work on (flags, the send engine). */
void urvt_timer_init_pollable(struct urvt_timer *t, urvt_timer_fn fn);
/* Arm (or re-arm) to fire at expires_ns. */
void urvt_timer_mod(struct urvt_progress *p, struct urvt_timer *t, uint64_t expires_ns);
/* Disarm; returns true if it was pending. Does not wait for a running handler. */
bool urvt_timer_del(struct urvt_progress *p, struct urvt_timer *t);
/* Disarm and wait until its handler is not running. Never call from the handler. */
void urvt_timer_del_sync(struct urvt_progress *p, struct urvt_timer *t);
bool urvt_timer_pending(struct urvt_progress *p, struct urvt_timer *t);



/* Deferred work run on the progress thread (rdmavt's workqueue items). */
struct urvt_work;
typedef void (*urvt_work_fn)(struct urvt_work *w);
struct urvt_work {
	urvt_work_fn fn;
	struct urvt_work *next;
	bool queued;                      /* under the progress lock */
	bool running;
};

void urvt_work_init(struct urvt_work *w, urvt_work_fn fn);

#endif
