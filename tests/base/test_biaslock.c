/*
 * base/biaslock.h: a thread that takes the lock alone becomes its fast
 * owner; any other taker revokes it, and nobody is ever inside with
 * anybody else (a counter updated in the sections loses no increment).
 * A try (urvt_bias_try, the transport's rx_lock) never waits for an owner
 * inside its section, and excludes as well.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/biaslock.h"
#include "base/timer.h"

static bool is_owner(struct urvt_biaslock *b)
{
	bool fast = urvt_bias_enter(b);

	if (fast)
		urvt_bias_exit(b);
	return fast;
}

/* A take as post_send makes it: fast, or the lock and a note. */
static bool take_as_poster(struct urvt_biaslock *b)
{
	bool fast = urvt_bias_take(b);

	if (!fast)
		urvt_bias_note(b);
	return fast;
}

static void take_n(struct urvt_biaslock *b, int n)
{
	for (int i = 0; i < n; i++)
		urvt_bias_leave(b, take_as_poster(b));
}

static int setup(void **state)
{
	(void)state;
	return urvt_bias_available() ? 0 : -1; /* no membarrier: nothing to test */
}

/* 64 takes in a row make the owner; before that, nobody is. */
static void test_streak_makes_the_owner(void **state)
{
	struct urvt_biaslock b;
	(void)state;

	urvt_bias_init(&b);
	assert_false(is_owner(&b));
	take_n(&b, 63);
	assert_false(is_owner(&b));
	take_n(&b, 1);
	assert_true(is_owner(&b));
	/* the owner's own lock (its slow path) revokes nothing */
	urvt_bias_lock(&b);
	urvt_bias_unlock(&b);
	assert_true(is_owner(&b));
}

static void *lock_once(void *arg)
{
	struct urvt_biaslock *b = arg;

	urvt_bias_lock(b);
	urvt_bias_unlock(b);
	return NULL;
}

static void *post_once(void *arg)
{
	take_n(arg, 1);
	return NULL;
}

/* fn(b) on another thread, to its end. */
static void on_other_thread(void *(*fn)(void *), struct urvt_biaslock *b)
{
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, fn, b), 0);
	pthread_join(t, NULL);
}

/* Another thread's lock revokes the owner; the owner's streak starts
 * again. A take by another poster revokes too, and each change of posting
 * thread (there and back: two) doubles the streak a grant needs. */
static void test_other_taker_revokes(void **state)
{
	struct urvt_biaslock b;
	(void)state;

	urvt_bias_init(&b);
	take_n(&b, 64);
	assert_true(is_owner(&b));
	on_other_thread(lock_once, &b);
	assert_false(is_owner(&b));
	take_n(&b, 63);
	assert_false(is_owner(&b));
	take_n(&b, 1);
	assert_true(is_owner(&b));

	on_other_thread(post_once, &b);
	assert_false(is_owner(&b));
	take_n(&b, 255);
	assert_false(is_owner(&b));
	take_n(&b, 1);
	assert_true(is_owner(&b));
}

/* What another thread's try found: urvt_bias_try's answer, and the lock
 * left again when it got in. */
struct try_probe {
	struct urvt_biaslock *b;
	int got;
};

static void *try_once(void *arg)
{
	struct try_probe *p = arg;

	p->got = urvt_bias_try(p->b);
	if (p->got >= 0)
		urvt_bias_leave(p->b, p->got > 0);
	return NULL;
}

static int try_on_other_thread(struct urvt_biaslock *b)
{
	struct try_probe p = { .b = b };
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, try_once, &p), 0);
	pthread_join(t, NULL);
	return p.got;
}

/* A try never waits: while the owner is inside, another thread's try
 * fails and takes the bias away; a second try still fails (the owner is
 * inside yet, no longer owner), and once it is out the lock is free. The
 * owner's own tries go the fast way. */
static void test_try_fails_while_owner_inside(void **state)
{
	struct urvt_biaslock b;
	(void)state;

	urvt_bias_init(&b);
	take_n(&b, 64);
	assert_int_equal(urvt_bias_try(&b), 1);
	urvt_bias_leave(&b, true);
	assert_true(urvt_bias_enter(&b));
	assert_int_equal(try_on_other_thread(&b), -1);
	assert_int_equal(try_on_other_thread(&b), -1);
	urvt_bias_exit(&b);
	assert_false(is_owner(&b));
	assert_int_equal(try_on_other_thread(&b), 0);
	/* the lock held by another taker: a try fails, and gets in after */
	urvt_bias_lock(&b);
	assert_int_equal(try_on_other_thread(&b), -1);
	urvt_bias_unlock(&b);
	assert_int_equal(urvt_bias_try(&b), 0);
	urvt_bias_leave(&b, false);
}

/* Mutual exclusion: a poster that is mostly the owner, and a second thread
 * that takes the lock now and then (as modify, query or a dereg barrier do)
 * or posts itself. Each section reads the counter, waits, writes it back
 * plus one: any overlap loses an increment. Bounded in count and time. */
struct race {
	struct urvt_biaslock b;
	uint64_t counter;
	uint64_t done[2];
	uint64_t fast;
	bool second_posts;
	bool tries;                       /* both take by urvt_bias_try (a receive side) */
	uint64_t end_ns;                  /* urvt_now_ns() deadline */
};

static bool past(const struct race *r)
{
	return urvt_now_ns() >= r->end_ns;
}

static void section(struct race *r)
{
	uint64_t v = r->counter;

	for (int k = 0; k < 20; k++)
		urvt_cpu_relax();
	r->counter = v + 1;
}

static void *poster(void *arg)
{
	struct race *r = arg;

	for (int i = 0; i < 2000000 && !(i % 1024 == 0 && past(r)); i++) {
		bool fast;
		if (r->tries) {
			int got = urvt_bias_try(&r->b);
			if (got < 0)
				continue; /* the intruder is in: as a poll would */
			if (!got)
				urvt_bias_note(&r->b);
			fast = got > 0;
		} else {
			fast = take_as_poster(&r->b);
		}
		section(r);
		r->done[0]++;
		r->fast += fast;
		urvt_bias_leave(&r->b, fast);
		/* a poll turn has other work between its takes; and on a
		 * loaded machine (the suite) the intruder must get a CPU while
		 * we are outside, or its tries can all meet us inside */
		if (r->tries && i % 1024 == 1023)
			sched_yield();
	}
	return NULL;
}

static void *intruder(void *arg)
{
	struct race *r = arg;

	/* first let the poster become the owner, so that revokes happen */
	while (!atomic_load(&r->b.owner) && !past(r))
		urvt_cpu_relax();
	for (int i = 0; i < 20000 && !past(r); i++) {
		if (r->tries) {
			int got = urvt_bias_try(&r->b);
			if (got >= 0) {
				section(r);
				r->done[1]++;
				urvt_bias_leave(&r->b, got > 0);
			}
			for (int k = 0; k < 2000; k++)
				urvt_cpu_relax();
			continue;
		}
		if (r->second_posts) {
			urvt_bias_leave(&r->b, take_as_poster(&r->b));
		} else {
			urvt_bias_lock(&r->b);
			urvt_bias_unlock(&r->b);
		}
		urvt_bias_lock(&r->b);
		section(r);
		r->done[1]++;
		urvt_bias_unlock(&r->b);
		for (int k = 0; k < 2000; k++)
			urvt_cpu_relax();
	}
	return NULL;
}

static void run_race(bool second_posts, bool tries)
{
	static struct race r;
	pthread_t a, b;

	memset(&r, 0, sizeof(r));
	urvt_bias_init(&r.b);
	r.second_posts = second_posts;
	r.tries = tries;
	r.end_ns = urvt_now_ns() + 2000000000ull;
	assert_int_equal(pthread_create(&a, NULL, poster, &r), 0);
	assert_int_equal(pthread_create(&b, NULL, intruder, &r), 0);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	assert_int_equal(r.counter, r.done[0] + r.done[1]);
	assert_true(r.done[1] > 0);
	/* the poster did get the fast way in between the intrusions */
	assert_true(r.fast > 0);
}

static void test_owner_and_locker_exclude(void **state)
{
	(void)state;
	run_race(false, false);
}

static void test_two_posters_exclude(void **state)
{
	(void)state;
	run_race(true, false);
}

/* The receive side's way: the owner and an intruder both try, neither
 * waits, and still nobody is inside with the other. */
static void test_tries_exclude(void **state)
{
	(void)state;
	run_race(false, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_streak_makes_the_owner),
		cmocka_unit_test(test_other_taker_revokes),
		cmocka_unit_test(test_try_fails_while_owner_inside),
		cmocka_unit_test(test_owner_and_locker_exclude),
		cmocka_unit_test(test_two_posters_exclude),
		cmocka_unit_test(test_tries_exclude),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
