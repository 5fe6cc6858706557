/* Sockets a forked child closes (base/forkclose.h). */
#include "base/forkclose.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <unistd.h>

#define FORKCLOSE_MAX 16

/* Lock-free: a lock taken in a fork handler would order itself against
 * every lock its callers hold (a device is made under the device lock,
 * whose own fork handler takes it: TSan saw the cycle). */
static pthread_once_t fc_once = PTHREAD_ONCE_INIT;
static _Atomic(int *) fc_fds[FORKCLOSE_MAX];

static void fc_child(void)
{
	for (unsigned i = 0; i < FORKCLOSE_MAX; i++) {
		int *fd = atomic_load_explicit(&fc_fds[i], memory_order_acquire);
		if (fd && *fd >= 0) {
			close(*fd);
			*fd = -1;
		}
	}
}

static void fc_init(void)
{
	pthread_atfork(NULL, NULL, fc_child);
}

int urvt_close_in_child(int *fd)
{
	pthread_once(&fc_once, fc_init);
	for (unsigned i = 0; i < FORKCLOSE_MAX; i++) {
		int *none = NULL;
		if (atomic_compare_exchange_strong(&fc_fds[i], &none, fd))
			return 0;
	}
	return -ENOSPC;
}

void urvt_close_in_child_del(int *fd)
{
	for (unsigned i = 0; i < FORKCLOSE_MAX; i++) {
		int *cur = fd;
		atomic_compare_exchange_strong(&fc_fds[i], &cur, NULL);
	}
}
