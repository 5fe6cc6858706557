#include "base/progress.h"
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 8

/*
 * After a watched fd had something, the thread polls (epoll_wait with no
 * timeout, yielding in between) for SPIN_NS more before it sleeps, so a
 * stream of packets (the responder of a WRITE/READ stream, a ping-pong)
 * does not wake it per burst: a wakeup costs tens of us on this kind of VM,
 * a third of the receiver's CPU went to sleeping and waking. Only while the
 * rest of the process is nearly idle (its other threads used less than
 * 1/SPIN_IDLE_DIV of a CPU since the last look): a spinning application
 * thread on the same CPU would otherwise lose its CPU to us, and the
 * application is then the one that receives anyway. Bounded: an idle
 * device sleeps SPIN_NS after its last packet.
 */
#define SPIN_NS 50000
#define SPIN_IDLE_DIV 4
#define SPIN_WINDOW_NS 200000             /* shortest window the CPU use is judged over */

struct fd_watch {
	int fd;
	urvt_fd_cb cb;
	void *arg;
};

/* A binary min-heap of timers on expires_ns; under the progress lock. */
struct timer_heap {
	struct urvt_timer **t;
	uint32_t len, cap;
};

/* While a poller runs the pollable timers, the timerfd waits for them on
 * this grid: pushing a retransmit timer back re-arms it only when its
 * deadline crosses a grid line (every ~4 ms instead of every ~0.75 ms). */
#define POLLER_GRID_NS 4000000ull

struct urvt_progress {
	pthread_t thread;
	int epfd;
	int doorbell;                     /* eventfd */
	int tfd;                          /* timerfd armed at the earliest timer */
	bool stop;
	bool started;                     /* the thread is in its loop */

	pthread_mutex_t lock;             /* timers, work list, fd table */
	pthread_cond_t idle;              /* a handler finished */
	struct timer_heap strict;         /* timers the progress thread runs */
	struct timer_heap poll;           /* pollable timers */
	uint64_t armed_ns;                /* what tfd is set to (0 = disarmed) */
	_Atomic bool poller;              /* urvt_progress_set_poller */
	_Atomic uint64_t poll_next_ns;    /* earliest pollable timer, 0: none */
	struct urvt_work *work_head, *work_tail;
	struct fd_watch fds[MAX_FDS];

	/* spin before sleep (progress thread only) */
	uint64_t idle_wall_ns, idle_others_ns;
	bool others_idle;
	/* the owner's polling while spinning, and its last word before
	 * sleeping (urvt_progress_set_spin); set before fds are added */
	urvt_spin_fn spin_fn;
	urvt_sleep_fn sleep_fn;
	void *spin_arg;
};

void urvt_progress_set_spin(struct urvt_progress *p, urvt_spin_fn spin, urvt_sleep_fn sleep,
			    void *arg)
{
	pthread_mutex_lock(&p->lock);
	p->spin_fn = spin;
	p->sleep_fn = sleep;
	p->spin_arg = arg;
	pthread_mutex_unlock(&p->lock);
}

void urvt_timer_init(struct urvt_timer *t, urvt_timer_fn fn)
{
	memset(t, 0, sizeof(*t));
	t->fn = fn;
	t->heap_idx = -1;
}

void urvt_work_init(struct urvt_work *w, urvt_work_fn fn)
{
	memset(w, 0, sizeof(*w));
	w->fn = fn;
}

void urvt_timer_init_pollable(struct urvt_timer *t, urvt_timer_fn fn)
{
	urvt_timer_init(t, fn);
	t->pollable = true;
}

/* ---- binary min-heap on expires_ns; caller holds p->lock ---- */
static void heap_swap(struct timer_heap *h, uint32_t a, uint32_t b)
{
	struct urvt_timer *t = h->t[a];
	h->t[a] = h->t[b];
	h->t[b] = t;
	h->t[a]->heap_idx = (int32_t)a;
	h->t[b]->heap_idx = (int32_t)b;
}

static void heap_up(struct timer_heap *h, uint32_t i)
{
	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (h->t[parent]->expires_ns <= h->t[i]->expires_ns)
			break;
		heap_swap(h, i, parent);
		i = parent;
	}
}

static void heap_down(struct timer_heap *h, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < h->len && h->t[l]->expires_ns < h->t[m]->expires_ns)
			m = l;
		if (r < h->len && h->t[r]->expires_ns < h->t[m]->expires_ns)
			m = r;
		if (m == i)
			return;
		heap_swap(h, i, m);
		i = m;
	}
}

static void heap_remove(struct timer_heap *h, struct urvt_timer *t)
{
	uint32_t i = (uint32_t)t->heap_idx;

	h->len--;
	if (i != h->len) {
		heap_swap(h, i, h->len);
		heap_down(h, i);
		heap_up(h, i);
	}
	t->heap_idx = -1;
}

static struct timer_heap *heap_of(struct urvt_progress *p, const struct urvt_timer *t)
{
	return t->pollable ? &p->poll : &p->strict;
}

/* Point the timerfd at the earliest deadline (the pollable ones on the
 * grid while a poller runs them); caller holds p->lock. */
static void rearm(struct urvt_progress *p)
{
	uint64_t want = p->strict.len ? p->strict.t[0]->expires_ns : 0;
	struct itimerspec its = { 0 };

	atomic_store_explicit(&p->poll_next_ns, p->poll.len ? p->poll.t[0]->expires_ns : 0,
			      memory_order_relaxed);
	if (p->poll.len) {
		uint64_t w = p->poll.t[0]->expires_ns;
		if (atomic_load_explicit(&p->poller, memory_order_relaxed))
			w = (w + POLLER_GRID_NS - 1) / POLLER_GRID_NS * POLLER_GRID_NS;
		if (!want || w < want)
			want = w;
	}
	if (want == p->armed_ns)
		return;
	/* Later than the timerfd's time, or no timer left: leave it set. It
	 * fires early, run_timers finds nothing due and points it at the real
	 * deadline. A retransmit timer is pushed back at every send and
	 * deleted at every ACK: re-arming each time cost a timerfd_settime per
	 * message (two per round trip of ib_send_lat -e) on the sender's path,
	 * where an early firing costs one wake-up per timeout period. */
	if (p->armed_ns && (!want || want > p->armed_ns))
		return;
	p->armed_ns = want;
	if (want) {
		its.it_value.tv_sec = (time_t)(want / 1000000000ull);
		its.it_value.tv_nsec = (long)(want % 1000000000ull);
	}
	timerfd_settime(p->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

void urvt_timer_mod(struct urvt_progress *p, struct urvt_timer *t, uint64_t expires_ns)
{
	struct timer_heap *h;

	if (!expires_ns)
		expires_ns = 1;
	pthread_mutex_lock(&p->lock);
	h = heap_of(p, t);
	if (t->heap_idx >= 0) {
		t->expires_ns = expires_ns;
		heap_down(h, (uint32_t)t->heap_idx);
		heap_up(h, (uint32_t)t->heap_idx);
	} else {
		if (h->len == h->cap) {
			uint32_t cap = h->cap ? h->cap * 2 : 64;
			struct urvt_timer **n = realloc(h->t, cap * sizeof(*n));
			if (!n) {
				/* Timers are armed from engines that cannot fail;
				 * growing by doubling from 64 only fails when the
				 * process is out of memory. */
				abort();
			}
			h->t = n;
			h->cap = cap;
		}
		t->expires_ns = expires_ns;
		t->heap_idx = (int32_t)h->len;
		h->t[h->len++] = t;
		heap_up(h, (uint32_t)t->heap_idx);
	}
	rearm(p);
	pthread_mutex_unlock(&p->lock);
}

bool urvt_timer_del(struct urvt_progress *p, struct urvt_timer *t)
{
	bool was = false;

	pthread_mutex_lock(&p->lock);
	if (t->heap_idx >= 0) {
		heap_remove(heap_of(p, t), t);
		rearm(p);
		was = true;
	}
	pthread_mutex_unlock(&p->lock);
	return was;
}

void urvt_timer_del_sync(struct urvt_progress *p, struct urvt_timer *t)
{
	pthread_mutex_lock(&p->lock);
	/* a callback that re-arms itself (udp_share's reap_tick does) may do
	 * so while we wait for it: take it out again once it has returned, or
	 * it fires later on its freed owner (a 64-rank MPI job crashed so at
	 * exit, tests/mpi mpi_np64_alltoall_mem) */
	for (;;) {
		if (t->heap_idx >= 0) {
			heap_remove(heap_of(p, t), t);
			rearm(p);
		}
		if (!t->running)
			break;
		pthread_cond_wait(&p->idle, &p->lock);
	}
	pthread_mutex_unlock(&p->lock);
}

bool urvt_timer_pending(struct urvt_progress *p, struct urvt_timer *t)
{
	bool r;

	pthread_mutex_lock(&p->lock);
	r = t->heap_idx >= 0;
	pthread_mutex_unlock(&p->lock);
	return r;
}

void urvt_progress_queue_work(struct urvt_progress *p, struct urvt_work *w)
{
	uint64_t one = 1;
	bool ring = false;

	pthread_mutex_lock(&p->lock);
	if (!w->queued) {
		w->queued = true;
		w->next = NULL;
		if (p->work_tail)
			p->work_tail->next = w;
		else
			p->work_head = w;
		p->work_tail = w;
		ring = true;
	}
	pthread_mutex_unlock(&p->lock);
	if (ring && write(p->doorbell, &one, sizeof(one)) < 0) {
		/* eventfd counter saturated: the thread is awake anyway */
	}
}

void urvt_progress_cancel_work_sync(struct urvt_progress *p, struct urvt_work *w)
{
	pthread_mutex_lock(&p->lock);
	if (w->queued) {
		struct urvt_work **pp = &p->work_head, *prev = NULL;
		while (*pp && *pp != w) {
			prev = *pp;
			pp = &(*pp)->next;
		}
		if (*pp) {
			*pp = w->next;
			if (p->work_tail == w)
				p->work_tail = prev;
		}
		w->queued = false;
	}
	while (w->running)
		pthread_cond_wait(&p->idle, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

int urvt_progress_add_fd(struct urvt_progress *p, int fd, urvt_fd_cb cb, void *arg)
{
	return urvt_progress_add_fd_flags(p, fd, cb, arg, 0);
}

int urvt_progress_add_fd_flags(struct urvt_progress *p, int fd, urvt_fd_cb cb, void *arg,
			       uint32_t flags)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int slot = -1, ret;

	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < MAX_FDS; i++) {
		if (!p->fds[i].cb) {
			slot = i;
			break;
		}
	}
	if (slot < 0) {
		pthread_mutex_unlock(&p->lock);
		return -ENOSPC;
	}
	p->fds[slot] = (struct fd_watch){ .fd = fd, .cb = cb, .arg = arg };
	ev.data.u32 = (uint32_t)slot + 2;
	if (flags & URVT_FD_EXCLUSIVE)
		ev.events |= EPOLLEXCLUSIVE;
	ret = epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
	/* an epoll instance cannot be watched exclusively */
	if (ret == -EINVAL && (flags & URVT_FD_EXCLUSIVE)) {
		ev.events = EPOLLIN;
		ret = epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
	}
	if (ret)
		p->fds[slot].cb = NULL;
	pthread_mutex_unlock(&p->lock);
	return ret;
}

int urvt_progress_del_fd(struct urvt_progress *p, int fd)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < MAX_FDS; i++) {
		if (p->fds[i].cb && p->fds[i].fd == fd) {
			epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
			p->fds[i].cb = NULL;
			ret = 0;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

int urvt_progress_on_thread(struct urvt_progress *p)
{
	return pthread_equal(pthread_self(), p->thread);
}

/* Run h's due timers (p->lock held; dropped around each handler). */
static void run_heap(struct urvt_progress *p, struct timer_heap *h, uint64_t now)
{
	while (h->len && h->t[0]->expires_ns <= now) {
		struct urvt_timer *t = h->t[0];
		heap_remove(h, t);
		t->running = true;
		pthread_mutex_unlock(&p->lock);
		t->fn(t);
		pthread_mutex_lock(&p->lock);
		t->running = false;
		pthread_cond_broadcast(&p->idle);
	}
}

static void run_timers(struct urvt_progress *p)
{
	uint64_t now = urvt_now_ns();

	pthread_mutex_lock(&p->lock);
	run_heap(p, &p->strict, now);
	run_heap(p, &p->poll, now);
	/* past its time, the timerfd fired (or is about to): set it again.
	 * Before, it is still set; every wake-up of this thread re-armed it,
	 * a timerfd_settime each (two per round trip of ib_send_lat -e) */
	if (p->armed_ns && now >= p->armed_ns)
		p->armed_ns = 0;
	rearm(p);
	pthread_mutex_unlock(&p->lock);
}

void urvt_progress_set_poller(struct urvt_progress *p, bool on)
{
	pthread_mutex_lock(&p->lock);
	if (atomic_load_explicit(&p->poller, memory_order_relaxed) != on) {
		atomic_store_explicit(&p->poller, on, memory_order_relaxed);
		rearm(p);
	}
	pthread_mutex_unlock(&p->lock);
}

void urvt_progress_run_due(struct urvt_progress *p)
{
	uint64_t next = atomic_load_explicit(&p->poll_next_ns, memory_order_relaxed), now;

	if (!next || !atomic_load_explicit(&p->poller, memory_order_relaxed))
		return;
	now = urvt_now_ns();
	if (now < next)
		return;
	pthread_mutex_lock(&p->lock);
	run_heap(p, &p->poll, now);
	rearm(p);
	pthread_mutex_unlock(&p->lock);
}

static void run_work(struct urvt_progress *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->work_head) {
		struct urvt_work *w = p->work_head;
		p->work_head = w->next;
		if (!p->work_head)
			p->work_tail = NULL;
		w->queued = false;
		w->running = true;
		pthread_mutex_unlock(&p->lock);
		w->fn(w);
		pthread_mutex_lock(&p->lock);
		w->running = false;
		pthread_cond_broadcast(&p->idle);
	}
	pthread_mutex_unlock(&p->lock);
}

static uint64_t ts_ns(clockid_t c)
{
	struct timespec ts;

	if (clock_gettime(c, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Did the process's other threads use less than 1/SPIN_IDLE_DIV of a CPU
 * since the last look (at least SPIN_WINDOW_NS ago)? */
static bool others_idle(struct urvt_progress *p, uint64_t now)
{
	uint64_t others, wall = now - p->idle_wall_ns;

	if (wall < SPIN_WINDOW_NS)
		return p->others_idle;
	others = ts_ns(CLOCK_PROCESS_CPUTIME_ID) - ts_ns(CLOCK_THREAD_CPUTIME_ID);
	p->others_idle = (others - p->idle_others_ns) * SPIN_IDLE_DIV < wall;
	p->idle_wall_ns = now;
	p->idle_others_ns = others;
	return p->others_idle;
}

static void *progress_main(void *arg)
{
	struct urvt_progress *p = arg;
	struct epoll_event evs[MAX_FDS + 2];
	uint64_t spin_until = 0;

	pthread_mutex_lock(&p->lock);
	p->started = true;
	pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->lock);
	for (;;) {
		int timeout = -1, n;
		bool stop, fd_work = false;

		if (spin_until) {
			if (urvt_now_ns() < spin_until)
				timeout = 0;
			else
				spin_until = 0;
		}
		if (timeout) {
			/* about to sleep: the owner makes sure its fds fire */
			pthread_mutex_lock(&p->lock);
			urvt_sleep_fn sleep_fn = p->sleep_fn;
			void *sarg = p->spin_arg;
			pthread_mutex_unlock(&p->lock);
			if (sleep_fn)
				sleep_fn(sarg);
		}
		n = epoll_wait(p->epfd, evs, MAX_FDS + 2, timeout);
		if (n <= 0 && timeout == 0) {
			urvt_spin_fn spin_fn;
			void *sarg;
			pthread_mutex_lock(&p->lock);
			spin_fn = p->spin_fn;
			sarg = p->spin_arg;
			pthread_mutex_unlock(&p->lock);
			/* memory the owner can poll without a system call */
			if (spin_fn && spin_fn(sarg) > 0) {
				spin_until = urvt_now_ns() + SPIN_NS;
				continue;
			}
			/* spinning, nothing yet: let a thread we woke (a
			 * completion event) have the CPU */
			sched_yield();
			continue;
		}
		for (int i = 0; i < n; i++) {
			uint32_t tag = evs[i].data.u32;
			uint64_t v;
			if (tag == 0) {
				if (read(p->doorbell, &v, sizeof(v)) < 0) {
					/* spurious wakeup: nothing to drain */
				}
			} else if (tag == 1) {
				if (read(p->tfd, &v, sizeof(v)) < 0) {
					/* timer re-armed since it fired */
				}
			} else {
				struct fd_watch w;
				pthread_mutex_lock(&p->lock);
				w = p->fds[tag - 2];
				pthread_mutex_unlock(&p->lock);
				if (w.cb) {
					w.cb(w.arg);
					fd_work = true;
				}
			}
		}
		run_timers(p);
		run_work(p);
		pthread_mutex_lock(&p->lock);
		stop = p->stop;
		pthread_mutex_unlock(&p->lock);
		if (stop)
			return NULL;
		if (fd_work) {
			uint64_t now = urvt_now_ns();
			if (others_idle(p, now))
				spin_until = now + SPIN_NS;
		}
	}
}

struct urvt_progress *urvt_progress_create(int *err)
{
	struct urvt_progress *p = calloc(1, sizeof(*p));
	struct epoll_event ev = { .events = EPOLLIN };
	int ret;

	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->idle, NULL);
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	p->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	p->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (p->epfd < 0 || p->doorbell < 0 || p->tfd < 0) {
		ret = -errno;
		goto err;
	}
	ev.data.u32 = 0;
	epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->doorbell, &ev);
	ev.data.u32 = 1;
	epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->tfd, &ev);
	ret = -urvt_thread_start(&p->thread, progress_main, p);
	if (ret)
		goto err;
	/* A new thread's start-up may allocate (a sanitizer's runtime does,
	 * under its allocator's lock): a fork right after the device opened
	 * would hand the child that lock taken. Return once it is done. */
	pthread_mutex_lock(&p->lock);
	while (!p->started)
		pthread_cond_wait(&p->idle, &p->lock);
	pthread_mutex_unlock(&p->lock);
	return p;
err:
	if (p->epfd >= 0)
		close(p->epfd);
	if (p->doorbell >= 0)
		close(p->doorbell);
	if (p->tfd >= 0)
		close(p->tfd);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->idle);
	free(p);
	*err = ret;
	return NULL;
}

void urvt_progress_destroy(struct urvt_progress *p)
{
	uint64_t one = 1;

	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_mutex_unlock(&p->lock);
	if (write(p->doorbell, &one, sizeof(one)) < 0) {
		/* counter saturated: the thread wakes regardless */
	}
	pthread_join(p->thread, NULL);
	close(p->epfd);
	close(p->doorbell);
	close(p->tfd);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->idle);
	free(p->strict.t);
	free(p->poll.t);
	free(p);
}
