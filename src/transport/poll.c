/*
 * Who receives: which thread reads the link when (docs/transport.md
 * "Who receives"), the application's poll_cq (transport->poll_cq) and the
 * progress thread's watch on the link's wake-up fd.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/cycles.h"
#include "base/progress.h"
#include "core/rvt_api.h"
#include "transport/net.h"
#include "transport/tp.h"

/*
 * Who receives. A thread polling an empty CQ receives inline (trylock:
 * lowest latency, no wakeup); the progress thread receives for everyone
 * else: blocking applications (-e), applications that poll memory
 * (ib_write_lat spins on the target of the peer's WRITE), applications that
 * do not wait at all (a WRITE target). Both at it on one CPU take the CPU
 * from each other: every wakeup of the progress thread, even a timer that
 * only looks, costs a busy poller on this kind of VM tens of us. So the
 * socket has one owner at a time:
 *
 *  - an application thread takes it (the progress thread stops watching)
 *    after APP_RUN empty polls within APP_RUN_NS: it polls busily;
 *  - it goes back to the progress thread when the application says it will
 *    block (req_notify_cq); when a poll returns completions and the
 *    application has been seen to leave after its completions (its next
 *    verb came more than APP_LEAVE_NS later, after a WRITE into its
 *    memory, repeatedly: it waits on memory; app_back) -- it takes the
 *    socket again at its next empty poll --; or when the watchdog saw no
 *    poll_cq for its period: URVT_WATCHDOG_NS after the take, doubling at
 *    each look that finds the application still polling, up to
 *    URVT_WATCHDOG_BACKOFF times that (a look wakes the progress thread,
 *    which on a busy CPU preempts the poller: 500 a second at 2 ms were
 *    most of ib_send_lat's wakeups).
 *
 * No clock read per poll: a run is timed once per APP_RUN polls, the gap
 * after a poll that returned completions once. (Until 8f743b5 the
 * progress thread stepped aside itself and a 200 us watchdog took the
 * socket back after 20 us without a poll: its wakeups alone doubled
 * ib_send_lat, and a poller preempted for 20 us lost the socket.)
 */
#define APP_RUN 16                /* empty polls ... */
#define APP_RUN_NS (16 * 50000ull) /* ... within this: a busy poller */
#define APP_LEAVE_NS 5000         /* next verb later than this: it left (urvt_cycles) */
/* ... unless that verb is poll_cq: a thread that comes back to its CQ
 * within this was busy with what it took (UCX copies a batch of received
 * fragments out in 5-20 us), not waiting on memory; taken for a leaver,
 * every poll of an MPI receiver handed the link to the progress thread
 * (docs/performance-history.md "MPI on one host") */
#define APP_LEAVE_POLL_NS 50000
#define APP_LEAVE_MAX 8           /* leave score: +2 per leave, -1 per stay ... */
#define APP_LEAVER 4              /* ... a leaver from here */
#define APP_EMPTY_SKIP 4          /* after an empty recvmmsg, skip this many polls */
/* ... with a cheap_poll link beside it (the shared-memory link), polled
 * every time in between: a socket that stays empty is asked less and less
 * often, up to every APP_EMPTY_SKIP_MAX polls */
#define APP_EMPTY_SKIP_MAX 256
/* ... unless the socket delivered within this and the links beside did not:
 * backing off a socket in use beside an idle shared-memory link cost a UDP
 * ping-pong between two namespaces 45 % (3.3 -> 4.8 us one way) */
#define APP_QUIET_NS 1000000
/* ... while a link beside does carry traffic (within APP_QUIET_NS), the skip
 * grows past APP_EMPTY_SKIP_MAX, up to APP_EMPTY_SKIP_BESIDE_MAX polls, and a
 * long skip also ends APP_ASK_GAP_NS after the last ask (a cycle counter
 * read every APP_ASK_CLOCK_EVERY polls): an ask is a recvmmsg of ~1.5 us on
 * these VMs, and at one per 256 polls (~10 us) a shared-memory ping-pong met them
 * often enough to cost ~0.1 us a message on average (8 B one way
 * 1.08-1.10 -> 0.99-1.01 us with asks ~150 us apart). A datagram that
 * comes meanwhile waits up to about APP_ASK_GAP_NS for the application. */
#define APP_EMPTY_SKIP_BESIDE_MAX 65536
#define APP_ASK_GAP_NS 50000
#define APP_ASK_CLOCK_EVERY 8
#define APP_LINGER_NS 50000       /* a leaver's poll receives this much longer */
#define APP_LINGER_MAX 8
#define APP_LINGER_REST 256
/* with a cheap_poll link beside a linger costs no system call, and a peer
 * that stopped lingering makes ours miss: try again soon */
#define APP_LINGER_REST_BESIDE 8

static void net_rx_cb(void *arg);

/* Before the progress thread sleeps on the links: each makes sure its
 * wake-up fd fires for what comes next. */
static void links_arm(struct urvt_net *net)
{
	for (int k = 0; k < URVT_LINKS; k++)
		if (net->links[k])
			urvt_link_arm(net->links[k]);
}

/* The progress thread watches the links' wake-up fds. */
static int watch_add(struct urvt_net *net)
{
	for (int k = 0; k < URVT_LINKS; k++) {
		struct urvt_link *l = net->links[k];
		int ret;
		if (!l || l->wake_fd < 0)
			continue;
		/* exclusive once a thread waits in urvt_net_wait_event: it
		 * takes the wake-up. Only then: with the exclusive watch and no
		 * such thread, UCX ud_verbs' tag_lat over shm (a busy poller
		 * that hands the links back and forth) took 15-30 us instead of
		 * 0.8 in half the runs (not understood; 4 of 4 runs fine
		 * without it) */
		ret = urvt_progress_add_fd_flags(net->rdi->progress, l->wake_fd, net_rx_cb,
						 &net->wake[k],
						 atomic_load(&net->wait_excl) ? URVT_FD_EXCLUSIVE : 0);
		if (ret) {
			while (--k >= 0)
				if (net->links[k] && net->links[k]->wake_fd >= 0)
					urvt_progress_del_fd(net->rdi->progress, net->links[k]->wake_fd);
			return ret;
		}
	}
	links_arm(net);
	return 0;
}

static void watch_del(struct urvt_net *net)
{
	for (int k = 0; k < URVT_LINKS; k++)
		if (net->links[k] && net->links[k]->wake_fd >= 0)
			urvt_progress_del_fd(net->rdi->progress, net->links[k]->wake_fd);
}

/* Any thread: the application owns the socket, the progress thread stops
 * watching it (a watchdog checks that it keeps polling). */
static void rx_take(struct urvt_net *net)
{
	bool arm = false;

	pthread_mutex_lock(&net->watch_lock);
	if (!atomic_load_explicit(&net->aside, memory_order_relaxed)) {
		watch_del(net);
		atomic_store_explicit(&net->aside, true, memory_order_relaxed);
		atomic_store_explicit(&net->taker, urvt_self(), memory_order_relaxed);
		/* a full period from this take: a watchdog still pending from
		 * an earlier one would look at wd_polls (set just now) soon and
		 * give the socket back before the application polled again */
		arm = true;
		/* the QPs' timers go with it: no re-arm per push (poll.c
		 * urvt_net_poll_cq runs them) */
		urvt_progress_set_poller(net->rdi->progress, true);
		net->wd_armed = true;
		net->wd_polls = atomic_load_explicit(&net->app_polls, memory_order_relaxed);
		net->wd_period_ns = atomic_load_explicit(&net->watchdog_ns, memory_order_relaxed);
		tp_count(net, NULL, URVT_CTR_RX_APP_TAKES, 1);
		URVT_DBG("rx: application polls, progress thread steps aside");
	}
	pthread_mutex_unlock(&net->watch_lock);
	if (arm)
		urvt_timer_mod(net->rdi->progress, &net->watchdog, urvt_now_ns() +
							     atomic_load_explicit(&net->watchdog_ns, memory_order_relaxed));
}

/* Any thread: the progress thread watches the socket again (why: a
 * URVT_CTR_RX_GIVE_* counter). */
static void rx_watch(struct urvt_net *net, enum urvt_ctr why)
{
	pthread_mutex_lock(&net->watch_lock);
	if (atomic_load_explicit(&net->aside, memory_order_relaxed)) {
		if (!watch_add(net)) {
			atomic_store_explicit(&net->aside, false, memory_order_relaxed);
			/* no thread has it: every poller looks first again */
			atomic_store_explicit(&net->taker, 0, memory_order_relaxed);
			urvt_progress_set_poller(net->rdi->progress, false);
		}
		tp_count(net, NULL, why, 1);
		URVT_DBG("rx: progress thread receives again");
	}
	pthread_mutex_unlock(&net->watch_lock);
}

/* Who received n datagrams (rx_lock held: the only writers of these two
 * counters), as the device's receive counters are kept (rx.c): a plain
 * add; a locked one waited for the stores of the packet just received. */
static void rx_count(struct urvt_net *net, enum urvt_ctr who, int n)
{
	if (n > 0)
		urvt_ctr_add_rx(&net->stats->dev, who, (uint64_t)n);
}

URVT_TLS struct urvt_net *urvt_rx_holder;

struct urvt_rx_hold urvt_rx_lock(struct urvt_net *net, bool note)
{
	struct urvt_rx_hold h;

	/* a holder that waited for itself would wait for ever: -1. The
	 * holder may be off its CPU, this one's: a spin of pauses here cost
	 * perftest -e on one CPU 5.2 -> 8.5 us a round trip */
	while ((h = urvt_rx_trylock(net, note)).how < 0 && h.outer != net)
		sched_yield();
	return h;
}

/* Receive what the links hold (all of them, or the cheap ones), waiting
 * for whoever is at it (wait: a receiver's take, which counts towards
 * owning rx_lock), or not if someone is; the packets count as ctr's (who
 * received). */
static int net_rx_drain(struct urvt_net *net, bool all, bool wait, enum urvt_ctr ctr)
{
	struct urvt_rx_hold h = wait ? urvt_rx_lock(net, true) : urvt_rx_trylock(net, false);
	int n = 0;

	if (h.how >= 0) {
		n = urvt_net_rx_drain_links(net, all);
		rx_count(net, ctr, n);
		urvt_rx_unlock(net, h);
	}
	return n;
}

/*
 * Progress thread: links[k]'s wake-up fd fired. A cheap_poll link's (the
 * shared-memory rings) drains the cheap links only: asking the UDP socket
 * as well cost a recvmmsg returning EAGAIN per wake-up, ahead of the rings
 * (links[0] is read first), on the path of every shm message an
 * event-driven application (-e) waits for. The socket's own fd fires when
 * it has data (level-triggered), so nothing there waits.
 */
static void net_rx_cb(void *arg)
{
	struct urvt_net_wake *w = arg;
	struct urvt_net *net = w->net;
	struct urvt_link *l = net->links[w->k];

	/* this link's wake-up only, as a waiter does (urvt_net_wait_event):
	 * acking every link read the idle rings' doorbell, a system call
	 * returning EAGAIN, at each wake-up for the socket (a WRITE stream
	 * between two namespaces). A doorbell rung meanwhile fires its own
	 * callback, in this round or the next. */
	if (l->ops->ack_wake)
		l->ops->ack_wake(l);
	net_rx_drain(net, !l->cheap_poll, true, URVT_CTR_RX_BY_PROGRESS);
	/* armed again by net_sleep, when the thread stops spinning */
}

/* Progress thread, spinning after activity: the links that cost no system
 * call to look at (a cheap_poll link, the shared-memory rings), while it is the one receiving. */
static int net_spin(void *arg)
{
	struct urvt_net *net = arg;
	struct urvt_rx_hold h;
	int n;

	if (atomic_load_explicit(&net->aside, memory_order_relaxed) || !urvt_net_rx_pending(net))
		return 0;
	h = urvt_rx_trylock(net, true);
	if (h.how < 0)
		return 0;
	n = urvt_net_rx_links(net, false, false);
	rx_count(net, URVT_CTR_RX_BY_PROGRESS, n);
	urvt_rx_unlock(net, h);
	return n;
}

/* Progress thread, about to sleep: what it would have found spinning must
 * ring its wake-up fds instead. */
static void net_sleep(void *arg)
{
	struct urvt_net *net = arg;

	if (!atomic_load_explicit(&net->aside, memory_order_relaxed))
		links_arm(net);
}

/* Progress thread: a link's control fd fired (peers come and go). */
static void net_ctl_cb(void *arg)
{
	struct urvt_link *l = arg;

	l->ops->service(l);
}

static void watchdog_fn(struct urvt_timer *t)
{
	struct urvt_net *net = container_of(t, struct urvt_net, watchdog);
	uint32_t polls = atomic_load_explicit(&net->app_polls, memory_order_relaxed);
	bool give;

	pthread_mutex_lock(&net->watch_lock);
	give = atomic_load_explicit(&net->aside, memory_order_relaxed) && polls == net->wd_polls;
	if (atomic_load_explicit(&net->aside, memory_order_relaxed) && !give) {
		/* still polling: look again later, and less often while it
		 * keeps polling (each look preempts a poller on a busy CPU) */
		uint64_t max = atomic_load_explicit(&net->watchdog_ns, memory_order_relaxed) *
			       URVT_WATCHDOG_BACKOFF;
		net->wd_polls = polls;
		net->wd_period_ns = net->wd_period_ns * 2 > max ? max : net->wd_period_ns * 2;
		urvt_timer_mod(net->rdi->progress, &net->watchdog, urvt_now_ns() + net->wd_period_ns);
	} else {
		net->wd_armed = false;
	}
	pthread_mutex_unlock(&net->watch_lock);
	if (give) {
		atomic_store_explicit(&net->app_run, 0, memory_order_relaxed);
		rx_watch(net, URVT_CTR_RX_GIVE_WATCHDOG);
		net_rx_drain(net, true, true, URVT_CTR_RX_BY_PROGRESS);
	}
}

void urvt_net_drain(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;

	/* not if someone is receiving right now */
	if (net)
		net_rx_drain(net, true, false,
			     urvt_progress_on_thread(rdi->progress) ? URVT_CTR_RX_BY_PROGRESS
								    : URVT_CTR_RX_BY_APP);
}

/* A device counter (a link's <name>_rx_packets: what it delivered). */
static uint64_t dev_count(struct urvt_net *net, enum urvt_ctr c)
{
	return __atomic_load_n(&net->stats->dev.v[c], __ATOMIC_RELAXED);
}

/* What the cheap_poll links beside links[0] delivered. */
static uint64_t beside_rx_count(struct urvt_net *net)
{
	uint64_t n = 0;

	for (unsigned k = 1; k < net->nlinks; k++)
		if (net->links[k]->cheap_poll)
			n += dev_count(net, net->link_ctr[k] + 1);
	return n;
}

/* After the UDP socket (links[0]) was asked (rx_lock held): how many polls
 * until it is asked again. Alone, an empty socket is skipped APP_EMPTY_SKIP
 * polls. Beside a cheap_poll link (polled every time in between), one that
 * stays empty is skipped twice as long each time, up to APP_EMPTY_SKIP_MAX,
 * so that shared-memory or in-process traffic does not wait out a recvmmsg
 * returning EAGAIN every few polls; but not while the socket carries
 * traffic and the links beside do not (within APP_QUIET_NS, as far as the
 * asks saw: a clock read per ask, which is a system call anyway). */
static void udp_backoff(struct urvt_net *net, int n)
{
	uint64_t seen = dev_count(net, net->link_ctr[URVT_LINK_ANY] + 1), beside_seen, now;
	uint32_t next;

	if (!net->cheap_beside) {
		next = n ? 0 : APP_EMPTY_SKIP;
		goto out;
	}
	now = urvt_cycles();
	beside_seen = beside_rx_count(net);
	if (beside_seen != net->beside_rx_seen) {
		net->beside_rx_seen = beside_seen;
		net->beside_rx_cyc = now;
	}
	if (seen != net->udp_rx_seen) {
		net->udp_rx_cyc = now;
		net->udp_idle = 0; /* UDP traffic: ask at every poll */
		next = 0;
	} else if (now - net->udp_rx_cyc < net->quiet_cyc &&
		   now - net->beside_rx_cyc >= net->quiet_cyc) {
		net->udp_idle = 0;
		next = APP_EMPTY_SKIP;
	} else {
		uint32_t cap = now - net->beside_rx_cyc < net->quiet_cyc ?
				       APP_EMPTY_SKIP_BESIDE_MAX :
				       APP_EMPTY_SKIP_MAX;
		uint32_t idle = net->udp_idle;

		net->udp_idle = !idle ? APP_EMPTY_SKIP : idle < cap / 2 ? 2 * idle : cap;
		next = net->udp_idle;
	}
	atomic_store_explicit(&net->udp_ask_cyc, now, memory_order_relaxed);
out:
	net->udp_rx_seen = seen;
	atomic_store_explicit(&net->app_skip, next, memory_order_relaxed);
}

int urvt_net_poll(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;
	struct urvt_rx_hold h;
	uint32_t skip;
	int n;

	if (!net)
		return 0;
	/* the socket was empty a moment ago: a busy poller otherwise spends
	 * most of its time in recvmmsg returning EAGAIN */
	skip = atomic_load_explicit(&net->app_skip, memory_order_relaxed);
	/* ACKs that wait leave at the next batch: no skipping it */
	if (skip && !atomic_load_explicit(&net->wait_n, memory_order_relaxed)) {
		uint32_t left = skip - 1;
		/* a skip past APP_EMPTY_SKIP_MAX is bounded in time too */
		if (left > APP_EMPTY_SKIP_MAX && !(left % APP_ASK_CLOCK_EVERY) &&
		    urvt_cycles() - atomic_load_explicit(&net->udp_ask_cyc, memory_order_relaxed) >
			    net->ask_gap_cyc)
			left = 0;
		atomic_store_explicit(&net->app_skip, left, memory_order_relaxed);
		/* the rings cost nothing to look at: only the socket waits.
		 * Another thread looks before it locks: an idle device's
		 * polls from several threads would pass the lock's line
		 * around. The thread that took the socket locks and reads the
		 * rings under it: a look first cost its ping-pong's messages
		 * ~0.05 us one way (Open MPI 8 B, 17 of 22 pairs won,
		 * docs/performance-history.md "MPI on one host") */
		if (!net->cheap_beside ||
		    (atomic_load_explicit(&net->taker, memory_order_relaxed) != urvt_self() &&
		     !urvt_net_rx_pending(net)))
			return 0;
	}
	h = urvt_rx_trylock(net, true);
	if (h.how < 0)
		return 0;
	n = urvt_net_rx_links(net, !skip, true);
	rx_count(net, URVT_CTR_RX_BY_APP, n);
	if (!skip)
		udp_backoff(net, n);
	urvt_rx_unlock(net, h);
	return n;
}

/* The application polled: the watchdog sees it (one writer at a time
 * does not matter: it only looks for a change). */
static inline void app_polled(struct urvt_net *net)
{
	atomic_store_explicit(&net->app_polls,
			      atomic_load_explicit(&net->app_polls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

void urvt_net_poll_stalled(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;

	if (!net)
		return;
	/* receiving in post_send is polling to the watchdog: a sender whose
	 * post_send keeps its stream going on the ACKs it takes in lost the
	 * socket every 2 ms without this (urvt-stat rx_given_back_watchdog) */
	app_polled(net);
	urvt_net_poll(rdi);
}

/* The application called a verb again after a poll that returned
 * completions at t (gap: what counts as a leave for that verb): did it
 * wait elsewhere in between? Only a late verb after a WRITE that completes
 * nothing came in says so: such a WRITE is what a thread that waits
 * without a verb waits for (it polls the memory). A late verb without one
 * is a thread busy with what it took (UCX's answers, an MPI rank's
 * matching) or kept off its CPU, by our progress thread too (both bound
 * to one core: MPI ranks); taken for leaves, they handed the link to the
 * progress thread at every few messages, which took the rank's core at
 * every packet (docs/transport.md "Who receives"). No evidence either
 * way: the score stays. */
static void app_back(struct urvt_net *net, uint64_t t, uint64_t now, uint64_t gap)
{
	uint32_t s = atomic_load_explicit(&net->app_leave, memory_order_relaxed);

	atomic_store_explicit(&net->app_ret_cyc, 0, memory_order_relaxed);
	if (now - t > gap) {
		if (atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed) !=
		    atomic_load_explicit(&net->app_ret_writes, memory_order_relaxed))
			s = s + 2 > APP_LEAVE_MAX ? APP_LEAVE_MAX : s + 2;
		else
			tp_count(net, NULL, URVT_CTR_RX_LATE_NO_WRITE, 1);
	} else if (s) {
		s--;
	}
	atomic_store_explicit(&net->app_leave, s, memory_order_relaxed);
}

/* A poll returned completions at c: the application's next verb judges
 * the gap (app_back). */
static void app_ret_mark(struct urvt_net *net, uint64_t c)
{
	atomic_store_explicit(&net->app_ret_writes,
			      atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&net->app_ret_cyc, c, memory_order_relaxed);
}

void urvt_net_app_active(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;
	uint64_t t;

	if (!net)
		return;
	t = atomic_load_explicit(&net->app_ret_cyc, memory_order_relaxed);
	if (t)
		app_back(net, t, urvt_cycles(), net->app_leave_cyc);
}

void urvt_net_app_blocks(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;

	if (!net)
		return;
	atomic_store_explicit(&net->app_run, 0, memory_order_relaxed);
	/* it will sleep: what waits for its next send goes now */
	urvt_net_acks_flush(net, false);
	if (atomic_load_explicit(&net->aside, memory_order_relaxed))
		rx_watch(net, URVT_CTR_RX_GIVE_BLOCKS);
}

/*
 * A thread blocks in ibv_get_cq_event with its channel empty. Left to the
 * progress thread, what ends the wait takes two wake-ups in turn: the
 * progress thread's, which receives the packet and writes the channel, then
 * this thread's; tens of us each across CPUs on this kind of VM, where a
 * blocking TCP reader is woken once. So this thread sleeps on the links'
 * wake-up fds beside the channel and receives itself. Nothing moves between
 * the two: both watch the links exclusively (EPOLLEXCLUSIVE), this
 * channel's watch queued ahead of the progress thread's (re-added behind it
 * when the channel's epoll instance is made), and the kernel wakes the
 * first of them that sleeps: this thread while it waits here, the progress
 * thread otherwise. rx_lock keeps one receiving at a time. A socket link
 * whose wake-up fd is an epoll instance cannot be watched exclusively:
 * both wake for it, in parallel rather than in turn. Not while a busy
 * poller owns the links (aside): it receives for everyone.
 */
static int wait_setup(struct urvt_net *net, int fd, int *wait_fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 0 };
	int epfd = epoll_create1(EPOLL_CLOEXEC), ret = 0;

	if (epfd < 0)
		return -errno;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev))
		goto fail;
	for (int k = 0; k < URVT_LINKS; k++) {
		struct urvt_link *l = net->links[k];
		if (!l || l->wake_fd < 0)
			continue;
		ev = (struct epoll_event){ .events = EPOLLIN | EPOLLEXCLUSIVE,
					   .data.u32 = (uint32_t)k + 1 };
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, l->wake_fd, &ev)) {
			ev.events = EPOLLIN;
			if (errno != EINVAL || epoll_ctl(epfd, EPOLL_CTL_ADD, l->wake_fd, &ev))
				goto fail;
		}
	}
	pthread_mutex_lock(&net->watch_lock);
	atomic_store(&net->wait_excl, true);
	if (!atomic_load_explicit(&net->aside, memory_order_relaxed)) {
		/* the progress thread's watch goes behind ours, exclusive */
		watch_del(net);
		ret = watch_add(net);
		if (ret) {
			/* cannot happen: the slots were just freed */
			atomic_store_explicit(&net->aside, true, memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&net->watch_lock);
	*wait_fd = epfd;
	return ret;
fail:
	ret = -errno;
	close(epfd);
	return ret;
}

/*
 * epoll_wait failed with EINTR: a signal handler ran (epoll_wait is never
 * restarted, whatever SA_RESTART says), or the process was stopped and
 * continued, or traced (a debugger; LeakSanitizer's stop of every thread
 * at exit), which a blocking read would not notice at all. The read this
 * wait replaces was restarted after a handler with SA_RESTART and failed
 * with EINTR after one without (qperf's timed tests end on SIGALRM so).
 * Which it was is not known here: the wait goes on unless a handler that
 * an asynchronous signal can run lacks SA_RESTART. Handlers of the
 * signals a fault raises (a sanitizer's) do not count: they do not
 * interrupt a sleeping thread.
 */
static bool signal_restarts(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS ||
		    sig == SIGFPE || sig == SIGILL || sig == SIGTRAP || sig == SIGSYS ||
		    sigaction(sig, NULL, &sa))
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN &&
		    !(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

int urvt_net_wait_event(struct rvt_dev_info *rdi, int fd, int *wait_fd)
{
	struct urvt_net *net = rdi->transport_priv;
	struct epoll_event evs[1 + URVT_LINKS];
	bool all = false;
	int n, ret;

	if (!net || atomic_load_explicit(&net->aside, memory_order_relaxed))
		return -EBUSY;
	if (*wait_fd < 0) {
		ret = wait_setup(net, fd, wait_fd);
		if (ret)
			return ret;
	}
	/* what came may be the event waited for: the caller looks (an
	 * event this thread enters skips the pipe, event.c) */
	/* waits for rx_lock: spinning on a trylock starved its holder when
	 * both shared one CPU */
	if (net_rx_drain(net, false, true, URVT_CTR_RX_BY_WAITER))
		return 0;
	/* as the progress thread before it sleeps (net_sleep): what comes
	 * from here on, or came since the drain, rings */
	links_arm(net);
	n = epoll_wait(*wait_fd, evs, 1 + URVT_LINKS, -1);
	if (n < 0)
		return errno == EINTR && signal_restarts() ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		uint32_t k = evs[i].data.u32;
		struct urvt_link *l = k ? net->links[k - 1] : NULL;
		if (!l)
			continue;
		if (l->ops->ack_wake)
			l->ops->ack_wake(l);
		all = all || !l->cheap_poll;
	}
	net_rx_drain(net, all, true, URVT_CTR_RX_BY_WAITER);
	/* leaving: what comes next rings whoever sleeps then (the progress
	 * thread, or this thread back here) */
	links_arm(net);
	tp_count(net, NULL, URVT_CTR_RX_WAITS, 1);
	return 0;
}

/* An empty poll: count the run; a busy poller takes the socket. */
static void app_empty_poll(struct urvt_net *net)
{
	uint32_t r;

	if (atomic_load_explicit(&net->aside, memory_order_relaxed))
		return;
	if (atomic_load_explicit(&net->take_next, memory_order_relaxed)) {
		/* a leaver is back and waits for its next completion */
		atomic_store_explicit(&net->take_next, false, memory_order_relaxed);
		rx_take(net);
		return;
	}
	r = atomic_load_explicit(&net->app_run, memory_order_relaxed);
	if (!r)
		atomic_store_explicit(&net->app_run_ns, urvt_now_ns(), memory_order_relaxed);
	if (++r < APP_RUN) {
		atomic_store_explicit(&net->app_run, r, memory_order_relaxed);
		return;
	}
	atomic_store_explicit(&net->app_run, 0, memory_order_relaxed);
	if (urvt_now_ns() - atomic_load_explicit(&net->app_run_ns, memory_order_relaxed) < APP_RUN_NS)
		rx_take(net);
}

/*
 * A leaver's poll returns completions: before it goes to wait on memory,
 * receive inline a little longer. What it waits for (the peer's WRITE)
 * usually comes within a round trip, and delivering it from the progress
 * thread costs a wakeup (tens of us here: ib_write_lat ~70 us instead of
 * ~7). Stops at the first batch received (unless it holds only the first
 * packets of a WRITE) or after APP_LINGER_NS. Scored so that an
 * application that computes between completions is not held up: a linger
 * that catches a WRITE gains 1, one that times out costs 2; at 0 lingering
 * is tried again only once per APP_LINGER_REST returns. Returns true if it
 * caught the end of a WRITE.
 *
 * Not when a WRITE's end came in since the application came back for these
 * completions (writes: the count at its first poll_cq after its last
 * ones; the completion may come polls after the packets, when another
 * thread held the QP's engine): in a ping-pong the peer's ACK and its next WRITE
 * often arrive together, the ACK completing the send; a linger then waited
 * for a WRITE that comes only after the application answers this one, and
 * timed out (ib_write_lat over the shared-memory link: a timeout in 5 returns, which in turn
 * made the peer's lingers miss; typical 15 us one way, 2 us without).
 */
static bool app_linger(struct urvt_net *net, uint32_t writes)
{
	uint32_t s = atomic_load_explicit(&net->app_linger, memory_order_relaxed);
	uint64_t end;

	if (atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed) != writes) {
		if (s < APP_LINGER_MAX)
			atomic_store_explicit(&net->app_linger, s + 1, memory_order_relaxed);
		return true;
	}
	if (!s) {
		uint32_t r = atomic_load_explicit(&net->app_linger_rest, memory_order_relaxed) + 1;
		uint32_t rest = net->cheap_beside ? APP_LINGER_REST_BESIDE : APP_LINGER_REST;
		atomic_store_explicit(&net->app_linger_rest, r < rest ? r : 0, memory_order_relaxed);
		if (r < rest)
			return false;
		s = 1;
	}
	end = urvt_now_ns() + APP_LINGER_NS;
	/* bounded by the clock; the count only guards against a stuck one */
	for (uint32_t i = 0; i < (1u << 20); i++) {
		struct urvt_rx_hold h = urvt_rx_trylock(net, true);
		if (h.how >= 0) {
			uint32_t w = atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed);
			uint32_t p = atomic_load_explicit(&net->rx_mem_pkts, memory_order_relaxed);
			int n = urvt_net_rx_batch(net);
			rx_count(net, URVT_CTR_RX_BY_APP, n);
			bool caught = atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed) != w;
			bool partial = atomic_load_explicit(&net->rx_mem_pkts, memory_order_relaxed) != p;
			urvt_rx_unlock(net, h);
			/* the first packets of a WRITE: wait for its last one */
			if (n > 0 && (caught || !partial)) {
				if (caught && s < APP_LINGER_MAX)
					s++;
				atomic_store_explicit(&net->app_linger, s, memory_order_relaxed);
				return caught;
			}
		}
		if (urvt_now_ns() >= end)
			break;
	}
	atomic_store_explicit(&net->app_linger, s > 2 ? s - 2 : 0, memory_order_relaxed);
	return false;
}

/* A poll returns completions: the application may wait elsewhere next
 * (writes: as app_linger says). */
static void app_returns(struct urvt_net *net, uint64_t now, uint32_t writes)
{
	uint32_t leave = atomic_load_explicit(&net->app_leave, memory_order_relaxed);

	if (leave < APP_LEAVER) {
		app_ret_mark(net, now);
		return;
	}
	if (app_linger(net, writes)) {
		/* it got what it would have waited for: count that as a leave
		 * (its next verb comes at once) and let it keep the socket */
		leave = leave + 2 > APP_LEAVE_MAX ? APP_LEAVE_MAX : leave + 2;
		atomic_store_explicit(&net->app_leave, leave, memory_order_relaxed);
		return;
	}
	app_ret_mark(net, urvt_cycles());
	if (atomic_load_explicit(&net->aside, memory_order_relaxed)) {
		rx_watch(net, URVT_CTR_RX_GIVE_LEAVER);
		atomic_store_explicit(&net->take_next, true, memory_order_relaxed);
	}
}

/* rx_mem_writes since the application came back after its last completions. */
static uint32_t app_writes_since_back(struct urvt_net *net)
{
	if (atomic_load_explicit(&net->app_writes_fresh, memory_order_relaxed)) {
		atomic_store_explicit(&net->app_writes_fresh, false, memory_order_relaxed);
		atomic_store_explicit(&net->app_writes,
				      atomic_load_explicit(&net->rx_mem_writes, memory_order_relaxed),
				      memory_order_relaxed);
	}
	return atomic_load_explicit(&net->app_writes, memory_order_relaxed);
}

int urvt_net_poll_cq(struct rvt_cq *cq, int num_entries, struct ibv_wc *wc)
{
	struct urvt_net *net = cq->uctx->rdi->transport_priv;
	int n = rvt_poll_cq(cq, num_entries, wc);
	uint64_t t, now = 0;
	uint32_t writes;

	if (!net || num_entries <= 0)
		return n;
	/* nothing that arrives completes here (UCX's UD send CQ, polled
	 * after its receive CQ at each turn): receiving inline put what came
	 * meanwhile into the other CQ, which the application looks at only
	 * at its next turn; nor is this a poll that keeps the socket */
	if (!n && !rvt_cq_rx_fills(cq))
		return 0;
	writes = app_writes_since_back(net);
	app_polled(net);
	/* the QPs' timers that are due, while we own the socket (rx_take):
	 * a clock read every 8 polls */
	if (!(atomic_load_explicit(&net->app_polls, memory_order_relaxed) & 7))
		urvt_progress_run_due(cq->uctx->rdi->progress);
	t = atomic_load_explicit(&net->app_ret_cyc, memory_order_relaxed);
	if (unlikely(t)) {
		now = urvt_cycles();
		app_back(net, t, now, net->app_leave_poll_cyc);
	}
	if (n == 0) {
		app_empty_poll(net);
		/* An empty CQ: receive inline (uncontended) before saying so. */
		if (urvt_net_poll(cq->uctx->rdi) <= 0)
			return 0;
		n = rvt_poll_cq(cq, num_entries, wc);
		if (n <= 0)
			return n;
		now = 0;
	}
	app_returns(net, now ? now : urvt_cycles(), writes);
	atomic_store_explicit(&net->app_writes_fresh, true, memory_order_relaxed);
	return n;
}

int urvt_net_watch_start(struct urvt_net *net)
{
	int ret;

	urvt_timer_init(&net->watchdog, watchdog_fn);
	urvt_cycles_init();
	net->app_leave_cyc = urvt_cycles_from_ns(APP_LEAVE_NS);
	net->app_leave_poll_cyc = urvt_cycles_from_ns(APP_LEAVE_POLL_NS);
	net->quiet_cyc = urvt_cycles_from_ns(APP_QUIET_NS);
	net->ask_gap_cyc = urvt_cycles_from_ns(APP_ASK_GAP_NS);
	urvt_progress_set_spin(net->rdi->progress, net_spin, net_sleep, net);
	/* what each link's wake-up callback is told (watch_add) */
	for (int k = 0; k < URVT_LINKS; k++)
		net->wake[k] = (struct urvt_net_wake){ .net = net, .k = (unsigned)k };
	/* control fds are watched always, whoever receives */
	for (int k = 0; k < URVT_LINKS; k++) {
		struct urvt_link *l = net->links[k];
		if (!l || l->ctl_fd < 0)
			continue;
		ret = urvt_progress_add_fd(net->rdi->progress, l->ctl_fd, net_ctl_cb, l);
		if (ret)
			return ret;
	}
	return watch_add(net);
}

void urvt_net_watch_stop(struct urvt_net *net)
{
	urvt_progress_set_spin(net->rdi->progress, NULL, NULL, NULL);
	urvt_timer_del_sync(net->rdi->progress, &net->watchdog);
	pthread_mutex_lock(&net->watch_lock);
	if (!atomic_load(&net->aside))
		watch_del(net);
	atomic_store(&net->aside, true);
	urvt_progress_set_poller(net->rdi->progress, false);
	for (int k = 0; k < URVT_LINKS; k++)
		if (net->links[k] && net->links[k]->ctl_fd >= 0)
			urvt_progress_del_fd(net->rdi->progress, net->links[k]->ctl_fd);
	pthread_mutex_unlock(&net->watch_lock);
}
