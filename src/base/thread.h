#ifndef URVT_BASE_THREAD_H
#define URVT_BASE_THREAD_H

#include <pthread.h>

/*
 * Start one of urvt's own threads (the progress thread, rsocket's service
 * thread) with every asynchronous signal blocked. Applications route
 * process-directed signals to the threads that leave them unblocked: tgtd
 * blocks SIGUSR2 in its threads and reads it from a signalfd, so a library
 * thread that left it unblocked took the signal and its default action
 * killed the process (docs/ecosystem.md, "tgtd"). The caller's mask is
 * unchanged. Returns 0 or a positive errno, as pthread_create.
 */
int urvt_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

#endif
