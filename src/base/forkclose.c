/* Sockets a forked child closes (base/forkclose.h). */
#include "base/forkclose.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#define FORKCLOSE_MAX 16

static pthread_mutex_t fc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fc_once = PTHREAD_ONCE_INIT;
static int *fc_fds[FORKCLOSE_MAX];

static void fc_prepare(void)
{
	pthread_mutex_lock(&fc_lock);
}

static void fc_parent(void)
{
	pthread_mutex_unlock(&fc_lock);
}

static void fc_child(void)
{
	for (unsigned i = 0; i < FORKCLOSE_MAX; i++)
		if (fc_fds[i] && *fc_fds[i] >= 0) {
			close(*fc_fds[i]);
			*fc_fds[i] = -1;
		}
	pthread_mutex_unlock(&fc_lock);
}

static void fc_init(void)
{
	pthread_atfork(fc_prepare, fc_parent, fc_child);
}

int urvt_close_in_child(int *fd)
{
	int ret = -ENOSPC;

	pthread_once(&fc_once, fc_init);
	pthread_mutex_lock(&fc_lock);
	for (unsigned i = 0; i < FORKCLOSE_MAX; i++)
		if (!fc_fds[i]) {
			fc_fds[i] = fd;
			ret = 0;
			break;
		}
	pthread_mutex_unlock(&fc_lock);
	return ret;
}

void urvt_close_in_child_del(int *fd)
{
	pthread_mutex_lock(&fc_lock);
	for (unsigned i = 0; i < FORKCLOSE_MAX; i++)
		if (fc_fds[i] == fd)
			fc_fds[i] = NULL;
	pthread_mutex_unlock(&fc_lock);
}
