/*
 * base/hostreg.h: the host registry hands out distinct slots (a forked
 * child gets its own), reaps the slots of processes that are gone with the
 * kernel's SO_REUSEPORT rule (the last member takes the hole), frees their
 * ports, and finds a listener's slot by exact address, then wildcard.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/hostreg.h"

static const uint8_t lo[16] = { [10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1 };
static const uint8_t other[16] = { [10] = 0xff, [11] = 0xff, [12] = 10, [15] = 7 };

/* A child that claims a slot, joins group lo, then waits to be killed. */
static pid_t child_in_group(int *slot_out)
{
	int p[2];
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int err;
		struct urvt_host *h = urvt_host_get(&err);
		uint8_t s = 0;
		if (h) {
			urvt_host_lock(h);
			urvt_host_group_join(h, lo, urvt_host_group_size(h, lo));
			urvt_host_unlock(h);
			s = h->my_slot;
		}
		if (write(p[1], &s, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	uint8_t s = 0;
	assert_int_equal(read(p[0], &s, 1), 1);
	close(p[0]);
	*slot_out = s;
	return pid;
}

static void test_slots_and_reap(void **state)
{
	struct urvt_host *h;
	int err = 0, s1, s2, s3;
	(void)state;

	h = urvt_host_get(&err);
	assert_non_null(h);
	assert_true(h->my_slot >= 1 && h->my_slot <= URVT_HOST_LAST_SLOT);
	assert_ptr_equal(urvt_host_get(&err), h); /* once per process */

	pid_t c1 = child_in_group(&s1), c2 = child_in_group(&s2), c3 = child_in_group(&s3);
	assert_true(s1 && s2 && s3);
	assert_true(s1 != s2 && s2 != s3 && s1 != s3 && s1 != h->my_slot);
	urvt_host_lock(h);
	assert_int_equal(urvt_host_group_size(h, lo), 3);
	assert_int_equal(h->t->slot[s1].index, 0);
	assert_int_equal(h->t->slot[s3].index, 2);
	urvt_host_unlock(h);

	/* kill -9 the first member: the last one takes its index */
	kill(c1, SIGKILL);
	waitpid(c1, NULL, 0);
	urvt_host_lock(h);
	assert_int_equal(urvt_host_reap(h), 1);
	assert_int_equal(atomic_load(&h->t->slot[s1].pid), 0);
	assert_int_equal(h->t->slot[s3].index, 0);
	assert_int_equal(h->t->slot[s2].index, 1);
	assert_int_equal(urvt_host_group_size(h, lo), 2);
	assert_int_equal(urvt_host_reap(h), 0);
	urvt_host_unlock(h);
	kill(c2, SIGKILL);
	kill(c3, SIGKILL);
	waitpid(c2, NULL, 0);
	waitpid(c3, NULL, 0);
	urvt_host_lock(h);
	assert_int_equal(urvt_host_reap(h), 2);
	assert_int_equal(urvt_host_group_size(h, lo), 0);
	urvt_host_unlock(h);
}

static void test_port_owner(void **state)
{
	struct urvt_host *h;
	int err = 0;
	(void)state;

	h = urvt_host_get(&err);
	assert_non_null(h);
	urvt_host_lock(h);
	/* listeners count only while their slot is some process's */
	atomic_store(&h->t->slot[7].pid, (int32_t)getpid());
	atomic_store(&h->t->slot[9].pid, (int32_t)getpid());
	h->t->port[0] = (struct urvt_host_port){ .flags = URVT_HOST_PORT_USED | URVT_HOST_PORT_LISTEN,
						 .slot = 7, .ps = 0x106, .port = 7000,
						 .family = AF_INET };
	h->t->port[1] = (struct urvt_host_port){ .flags = URVT_HOST_PORT_USED | URVT_HOST_PORT_LISTEN,
						 .slot = 9, .ps = 0x106, .port = 7000,
						 .family = AF_INET };
	memcpy(h->t->port[1].addr, other, 16);
	h->t->port[2] = (struct urvt_host_port){ .flags = URVT_HOST_PORT_USED,
						 .slot = 11, .ps = 0x106, .port = 7001,
						 .family = AF_INET };
	urvt_host_unlock(h);
	assert_int_equal(urvt_host_port_owner(h, 0x106, 7000, other), 9);  /* exact */
	assert_int_equal(urvt_host_port_owner(h, 0x106, 7000, lo), 7);     /* wildcard */
	assert_int_equal(urvt_host_port_owner(h, 0x111, 7000, lo), 0);     /* other ps */
	assert_int_equal(urvt_host_port_owner(h, 0x106, 7001, lo), 0);     /* not listening */
	atomic_store(&h->t->slot[9].pid, 0);
	assert_int_equal(urvt_host_port_owner(h, 0x106, 7000, other), 7); /* 9 is gone */
	memset(h->t->port, 0, 3 * sizeof(h->t->port[0]));
	atomic_store(&h->t->slot[7].pid, 0);
}

int main(void)
{
	char path[64];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_and_reap),
		cmocka_unit_test(test_port_owner),
	};
	int ret;

	snprintf(path, sizeof(path), "/tmp/urvt-test-hostreg-%d", (int)getpid());
	setenv("URVT_REGISTRY", path, 1);
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(path);
	return ret;
}
