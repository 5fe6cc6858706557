/*
 * The progress engine on its own (base/progress.h, base/timer.h): timers
 * fire once, not early, in deadline order; re-arming moves them; deleting
 * stops them; del_sync waits out a running handler; deferred work runs
 * once per queueing; fd callbacks run on the progress thread; a signal the
 * application blocks in its threads and reads from a signalfd is not taken
 * by the progress thread.
 */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/compiler.h"
#include "base/progress.h"

#define MS 1000000ull

struct rec_timer {
	struct urvt_timer t;
	_Atomic int fired;
	_Atomic uint64_t at_ns;
	_Atomic int *order;               /* shared sequence counter */
	_Atomic int seq;                  /* this timer's place in it */
	uint64_t hold_ns;                 /* the handler runs this long */
	_Atomic bool on_thread;
	struct urvt_progress *p;
};

static void rec_fn(struct urvt_timer *t)
{
	struct rec_timer *r = container_of(t, struct rec_timer, t);

	atomic_store(&r->at_ns, urvt_now_ns());
	atomic_store(&r->on_thread, urvt_progress_on_thread(r->p) != 0);
	if (r->order)
		atomic_store(&r->seq, atomic_fetch_add(r->order, 1));
	if (r->hold_ns) {
		uint64_t end = urvt_now_ns() + r->hold_ns;
		while (urvt_now_ns() < end)
			;
	}
	atomic_fetch_add(&r->fired, 1);
}

/* Wait (bounded) until cond holds. */
#define WAIT_FOR(cond, ms)                                                 \
	do {                                                               \
		for (int w_ = 0; w_ < (ms) && !(cond); w_++)               \
			usleep(1000);                                      \
	} while (0)

static void test_timer_fires_once_not_early(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	struct rec_timer r = { .p = p };
	uint64_t due;

	(void)state;
	assert_non_null(p);
	urvt_timer_init(&r.t, rec_fn);
	assert_false(urvt_timer_pending(p, &r.t));
	due = urvt_now_ns() + 20 * MS;
	urvt_timer_mod(p, &r.t, due);
	assert_true(urvt_timer_pending(p, &r.t));
	WAIT_FOR(atomic_load(&r.fired), 2000);
	assert_int_equal(atomic_load(&r.fired), 1);
	assert_true(atomic_load(&r.at_ns) >= due);
	assert_true(atomic_load(&r.on_thread));
	assert_false(urvt_timer_pending(p, &r.t));
	usleep(30000);
	assert_int_equal(atomic_load(&r.fired), 1); /* one-shot */
	urvt_progress_destroy(p);
}

static void test_timer_order_and_rearm(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	_Atomic int order = 0;
	struct rec_timer r[4];
	uint64_t now = urvt_now_ns();
	/* armed out of order; r[3] first far out, then pulled in before all */
	static const uint64_t due_ms[4] = { 30, 10, 20, 500 };

	(void)state;
	assert_non_null(p);
	for (int i = 0; i < 4; i++) {
		r[i] = (struct rec_timer){ .p = p, .order = &order };
		urvt_timer_init(&r[i].t, rec_fn);
		urvt_timer_mod(p, &r[i].t, now + due_ms[i] * MS);
	}
	urvt_timer_mod(p, &r[3].t, now + 5 * MS);
	WAIT_FOR(atomic_load(&order) == 4, 2000);
	assert_int_equal(atomic_load(&order), 4);
	assert_int_equal(atomic_load(&r[3].seq), 0);
	assert_int_equal(atomic_load(&r[1].seq), 1);
	assert_int_equal(atomic_load(&r[2].seq), 2);
	assert_int_equal(atomic_load(&r[0].seq), 3);
	for (int i = 0; i < 4; i++)
		assert_int_equal(atomic_load(&r[i].fired), 1);
	urvt_progress_destroy(p);
}

static void test_timer_del(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	struct rec_timer r = { .p = p };

	(void)state;
	assert_non_null(p);
	urvt_timer_init(&r.t, rec_fn);
	urvt_timer_mod(p, &r.t, urvt_now_ns() + 20 * MS);
	assert_true(urvt_timer_del(p, &r.t));
	assert_false(urvt_timer_del(p, &r.t)); /* no longer pending */
	usleep(50000);
	assert_int_equal(atomic_load(&r.fired), 0);
	urvt_progress_destroy(p);
}

/* del_sync returns only after a handler that is running has finished. */
static void test_timer_del_sync_waits(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	struct rec_timer r = { .p = p, .hold_ns = 50 * MS };

	(void)state;
	assert_non_null(p);
	urvt_timer_init(&r.t, rec_fn);
	urvt_timer_mod(p, &r.t, urvt_now_ns());
	WAIT_FOR(atomic_load(&r.at_ns) != 0, 2000);
	assert_true(atomic_load(&r.at_ns) != 0); /* the handler has started */
	urvt_timer_del_sync(p, &r.t);
	assert_int_equal(atomic_load(&r.fired), 1); /* ... and finished */
	urvt_progress_destroy(p);
}

struct rec_work {
	struct urvt_work w;
	_Atomic int ran;
};

static void work_fn(struct urvt_work *w)
{
	atomic_fetch_add(&container_of(w, struct rec_work, w)->ran, 1);
}

static void test_work_runs_once_per_queue(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	struct rec_work w = { 0 };

	(void)state;
	assert_non_null(p);
	urvt_work_init(&w.w, work_fn);
	urvt_progress_queue_work(p, &w.w);
	WAIT_FOR(atomic_load(&w.ran), 2000);
	assert_int_equal(atomic_load(&w.ran), 1);
	urvt_progress_queue_work(p, &w.w);
	WAIT_FOR(atomic_load(&w.ran) == 2, 2000);
	assert_int_equal(atomic_load(&w.ran), 2);
	urvt_progress_cancel_work_sync(p, &w.w);
	usleep(10000);
	assert_int_equal(atomic_load(&w.ran), 2);
	urvt_progress_destroy(p);
}

struct fd_rec {
	int fd;
	_Atomic int calls;
	_Atomic bool on_thread;
	struct urvt_progress *p;
};

static void fd_cb(void *arg)
{
	struct fd_rec *f = arg;
	uint64_t v;

	atomic_store(&f->on_thread, urvt_progress_on_thread(f->p) != 0);
	if (read(f->fd, &v, sizeof(v)) == sizeof(v))
		atomic_fetch_add(&f->calls, 1);
}

static void test_fd_callback(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	struct fd_rec f = { .fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), .p = p };
	uint64_t one = 1;

	(void)state;
	assert_non_null(p);
	assert_true(f.fd >= 0);
	assert_int_equal(urvt_progress_add_fd(p, f.fd, fd_cb, &f), 0);
	assert_int_equal(write(f.fd, &one, sizeof(one)), sizeof(one));
	WAIT_FOR(atomic_load(&f.calls), 2000);
	assert_int_equal(atomic_load(&f.calls), 1);
	assert_true(atomic_load(&f.on_thread));
	assert_false(urvt_progress_on_thread(p));
	/* not watched any more: no callback */
	assert_int_equal(urvt_progress_del_fd(p, f.fd), 0);
	assert_int_equal(write(f.fd, &one, sizeof(one)), sizeof(one));
	usleep(20000);
	assert_int_equal(atomic_load(&f.calls), 1);
	urvt_progress_destroy(p);
	close(f.fd);
}

/* Pollable timers (urvt_progress_set_poller): without a poller they run on
 * the progress thread like any other; with one, on the thread that calls
 * urvt_progress_run_due, not early; a poller that stops calling leaves
 * them to the progress thread's backstop (a 4 ms grid), still not early;
 * one overdue when the poller is unset runs at once. */
static void test_pollable_timers(void **state)
{
	int err = 0;
	struct urvt_progress *p = urvt_progress_create(&err);
	struct rec_timer r = { .p = p };
	const uint64_t grid = 4 * MS;
	uint64_t due, end;

	(void)state;
	assert_non_null(p);
	urvt_timer_init_pollable(&r.t, rec_fn);
	due = urvt_now_ns() + 5 * MS;
	urvt_timer_mod(p, &r.t, due);
	WAIT_FOR(atomic_load(&r.fired), 2000);
	assert_int_equal(atomic_load(&r.fired), 1);
	assert_true(atomic_load(&r.at_ns) >= due);
	assert_true(atomic_load(&r.on_thread));

	/* a poller runs it: due 1 ms past a grid line, the backstop 3 ms
	 * later (a poller preempted for that long loses it to the backstop:
	 * up to five tries, one must go to the poller) */
	urvt_progress_set_poller(p, true);
	for (int tries = 0;; tries++) {
		int before = atomic_load(&r.fired);
		due = (urvt_now_ns() / grid + 2) * grid + MS;
		urvt_timer_mod(p, &r.t, due);
		end = urvt_now_ns() + 2000 * MS;
		while (atomic_load(&r.fired) == before) {
			urvt_progress_run_due(p);
			if (urvt_now_ns() > end)
				fail_msg("the timer never ran");
		}
		assert_int_equal(atomic_load(&r.fired), before + 1);
		assert_true(atomic_load(&r.at_ns) >= due);
		assert_false(urvt_timer_pending(p, &r.t));
		if (!atomic_load(&r.on_thread))
			break;
		if (tries == 4)
			fail_msg("the progress thread ran the timer five times, never the poller");
	}
	atomic_store(&r.fired, 2);

	/* nobody calls run_due: the backstop, not early */
	due = urvt_now_ns() + 2 * MS;
	urvt_timer_mod(p, &r.t, due);
	WAIT_FOR(atomic_load(&r.fired) == 3, 2000);
	assert_int_equal(atomic_load(&r.fired), 3);
	assert_true(atomic_load(&r.at_ns) >= due);
	assert_true(atomic_load(&r.on_thread));

	/* overdue when the poller goes, 3.8 ms before the grid line the
	 * backstop waits for: it runs at once, not at that line */
	for (int tries = 0;; tries++) {
		int before = atomic_load(&r.fired);
		bool early;
		urvt_progress_set_poller(p, true);
		due = (urvt_now_ns() / grid + 2) * grid + MS / 5;
		urvt_timer_mod(p, &r.t, due);
		while (urvt_now_ns() < due + MS / 10)
			;
		/* this thread preempted past the grid line: the backstop ran */
		early = atomic_load(&r.fired) != before;
		urvt_progress_set_poller(p, false);
		WAIT_FOR(atomic_load(&r.fired) == before + 1, 2000);
		assert_int_equal(atomic_load(&r.fired), before + 1);
		assert_true(atomic_load(&r.on_thread));
		assert_true(atomic_load(&r.at_ns) >= due);
		/* a progress thread preempted for 3.5 ms: try again */
		if (!early && atomic_load(&r.at_ns) < due + grid - MS / 5)
			break;
		if (tries == 4)
			fail_msg("the overdue timer waited for the grid five times");
	}
	urvt_progress_destroy(p);
}

/*
 * tgtd's pattern: its threads block SIGUSR2 and its main loop reads it from
 * a signalfd; a worker sends it to the process. The progress thread, started
 * while SIGUSR2 was still open, must not take it (its default action ends
 * the process, and this test with it).
 */
static void test_signals_stay_with_the_application(void **state)
{
	(void)state;
	int err;
	sigset_t usr2, saved;
	struct signalfd_siginfo si;
	struct pollfd pfd;

	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	pthread_sigmask(SIG_UNBLOCK, &usr2, &saved);
	struct urvt_progress *p = urvt_progress_create(&err);
	assert_non_null(p);
	pthread_sigmask(SIG_BLOCK, &usr2, NULL);
	pfd.fd = signalfd(-1, &usr2, SFD_CLOEXEC);
	pfd.events = POLLIN;
	assert_true(pfd.fd >= 0);
	assert_int_equal(kill(getpid(), SIGUSR2), 0);
	assert_int_equal(poll(&pfd, 1, 2000), 1);
	assert_int_equal(read(pfd.fd, &si, sizeof(si)), (ssize_t)sizeof(si));
	assert_int_equal(si.ssi_signo, SIGUSR2);
	close(pfd.fd);
	urvt_progress_destroy(p);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timer_fires_once_not_early),
		cmocka_unit_test(test_timer_order_and_rearm),
		cmocka_unit_test(test_timer_del),
		cmocka_unit_test(test_timer_del_sync_waits),
		cmocka_unit_test(test_work_runs_once_per_queue),
		cmocka_unit_test(test_fd_callback),
		cmocka_unit_test(test_pollable_timers),
		cmocka_unit_test(test_signals_stay_with_the_application),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
