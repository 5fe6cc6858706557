#include "base/thread.h"

#include <signal.h>

int urvt_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	sigset_t all, saved;
	int ret;

	/* a fault the thread itself raises must still reach it (and kill the
	 * process as usual): those stay open */
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	sigdelset(&all, SIGTRAP);
	sigdelset(&all, SIGABRT);
	pthread_sigmask(SIG_BLOCK, &all, &saved);
	/* the new thread inherits the mask in force now */
	ret = pthread_create(thread, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	return ret;
}
