/*
 * The progress engine: one thread per device that sleeps in epoll on the
 * network socket(s), a timerfd for the earliest one-shot timer, and an
 * eventfd doorbell for deferred work. Posting threads never wait for it:
 * they run the send engine inline and only hand it timers and work that
 * must not run nested (e.g. flushing a QP from inside another QP's engine).
 */
#ifndef URVT_CORE_PROGRESS_H
#define URVT_CORE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/timer.h"

struct urvt_progress;

struct urvt_progress *urvt_progress_create(int *err);
void urvt_progress_destroy(struct urvt_progress *p);

/* Queue w (once; a queued item is not queued twice) and ring the doorbell. */
void urvt_progress_queue_work(struct urvt_progress *p, struct urvt_work *w);
/* Remove w if queued and wait until it is not running. */
void urvt_progress_cancel_work_sync(struct urvt_progress *p, struct urvt_work *w);

/* Watch fd for EPOLLIN; cb runs on the progress thread. */
typedef void (*urvt_fd_cb)(void *arg);
int urvt_progress_add_fd(struct urvt_progress *p, int fd, urvt_fd_cb cb, void *arg);
int urvt_progress_del_fd(struct urvt_progress *p, int fd);
/* As urvt_progress_add_fd; URVT_FD_EXCLUSIVE: an exclusive watch
 * (EPOLLEXCLUSIVE), so that a thread sleeping in an exclusive watch of
 * its own that was added earlier takes the wake-up instead (poll.c
 * urvt_net_wait_event). Falls back to a plain watch where the kernel has
 * none (fd is an epoll instance). */
#define URVT_FD_EXCLUSIVE 1u
int urvt_progress_add_fd_flags(struct urvt_progress *p, int fd, urvt_fd_cb cb, void *arg,
			       uint32_t flags);

/* True when called on the progress thread itself. */
int urvt_progress_on_thread(struct urvt_progress *p);

/* An application thread polls busily and calls urvt_progress_run_due
 * often (its poll_cq): pollable timers are then run by it, on time, and
 * the timerfd is armed for them only on a coarse grid (a re-arm is a
 * system call that leaves the VM here: 7 us, docs/performance-history.md
 * "Suggestions, ranked" item 12), as a backstop for a poller that stops
 * without saying so. */
void urvt_progress_set_poller(struct urvt_progress *p, bool on);
/* Any thread, while a poller is set: run the pollable timers that are due. */
void urvt_progress_run_due(struct urvt_progress *p);

/* While the thread spins after activity (instead of sleeping at once), it
 * also calls spin(arg): polling that costs no system call (shared-memory
 * rings); > 0 means it found work. Before it sleeps in epoll it calls
 * sleep(arg), so that what spin would have found wakes it instead. */
typedef int (*urvt_spin_fn)(void *arg);
typedef void (*urvt_sleep_fn)(void *arg);
void urvt_progress_set_spin(struct urvt_progress *p, urvt_spin_fn spin, urvt_sleep_fn sleep,
			    void *arg);

#endif
