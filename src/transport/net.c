/*
 * The device's transport state (rdi->transport_priv): made on the link the
 * attach opened, with its packet pool, counters file, trace and receive
 * slots; torn down after the progress thread has let go of it. The debug
 * log lives here too. The parts: pool.c, counters.c, tx.c, rx.c, poll.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/progress.h"
#include "base/report.h"
#include "transport/net.h"
#include "transport/tp.h"
#include "wire/pcap.h"

int urvt_debug;

void urvt_dbg_printf(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "urvt[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

struct barrier_work {
	struct urvt_work w;
	struct urvt_net *net;
};

static void barrier_fn(struct urvt_work *w)
{
	struct urvt_net *net = container_of(w, struct barrier_work, w)->net;

	pthread_mutex_lock(&net->bar_lock);
	net->bar_done = true;
	pthread_cond_broadcast(&net->bar_cond);
	pthread_mutex_unlock(&net->bar_lock);
}

/* Wait until the progress thread has finished any callback it was in. */
static void progress_barrier(struct urvt_net *net)
{
	struct barrier_work bw = { .net = net };

	urvt_work_init(&bw.w, barrier_fn);
	net->bar_done = false;
	urvt_progress_queue_work(net->rdi->progress, &bw.w);
	pthread_mutex_lock(&net->bar_lock);
	while (!net->bar_done)
		pthread_cond_wait(&net->bar_cond, &net->bar_lock);
	pthread_mutex_unlock(&net->bar_lock);
	urvt_progress_cancel_work_sync(net->rdi->progress, &bw.w);
}

/* URVT_PCAP: "%p" in the name becomes the pid (one file per process).
 * A trace that was asked for and cannot be written fails the open. */
static int pcap_open(struct urvt_net *net, const char *env)
{
	char path[512];
	const char *pp = strstr(env, "%p");

	if (pp)
		snprintf(path, sizeof(path), "%.*s%d%s", (int)(pp - env), env, (int)getpid(),
			 pp + 2);
	else
		snprintf(path, sizeof(path), "%s", env);
	net->pcap = urvt_pcap_open(path);
	if (net->pcap)
		return 0;
	urvt_report("URVT_PCAP=%s: cannot create the trace (%s): name a file in a writable "
		    "directory, or unset it", path, strerror(errno));
	return -EINVAL;
}

static void net_free(struct urvt_net *net)
{
	urvt_pcap_close(net->pcap);
	free(net->rx);
	urvt_stats_fini(net);
	urvt_pool_fini(net);
	urvt_cc_fini(net);
	pthread_mutex_destroy(&net->watch_lock);
	pthread_mutex_destroy(&net->facts_lock);
	pthread_mutex_destroy(&net->bar_lock);
	pthread_cond_destroy(&net->bar_cond);
	free(net);
}

/*
 * The process exits (exit(), main returns) with devices open: their
 * progress threads would go on receiving into the application's memory
 * while the exit unmaps it (a library destructor freeing its pools: an MPI
 * rank crashed so, writing a peer's UD datagram into a posted receive).
 * The kernel tears a process's QPs down before its memory; urvt's atexit
 * handler does the nearest: ACKs that wait leave, and from then on no
 * receive batch runs. Registered at the first device's creation, so it
 * runs before the library destructors (_dl_fini is registered first).
 */
static pthread_mutex_t nets_lock = PTHREAD_MUTEX_INITIALIZER;
static struct urvt_net *nets_head;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

void urvt_net_exit_quiesce(void)
{
	pthread_mutex_lock(&nets_lock);
	for (struct urvt_net *n = nets_head; n; n = n->next_net) {
		/* bounded: a thread that exits from inside a batch holds it */
		struct urvt_rx_hold h = { .how = -1 };
		for (int i = 0; i < 100000 && h.how < 0; i++)
			h = urvt_rx_trylock(n, false);
		if (h.how >= 0)
			urvt_txq_batch_end(n, false);
		atomic_store(&n->exiting, true);
		if (h.how >= 0)
			urvt_rx_unlock(n, h);
	}
	pthread_mutex_unlock(&nets_lock);
}

static void exit_handler_register(void)
{
	atexit(urvt_net_exit_quiesce);
}

static void nets_add(struct urvt_net *net)
{
	pthread_once(&exit_once, exit_handler_register);
	pthread_mutex_lock(&nets_lock);
	net->next_net = nets_head;
	nets_head = net;
	pthread_mutex_unlock(&nets_lock);
}

static void nets_remove(struct urvt_net *net)
{
	pthread_mutex_lock(&nets_lock);
	for (struct urvt_net **pp = &nets_head; *pp; pp = &(*pp)->next_net)
		if (*pp == net) {
			*pp = net->next_net;
			break;
		}
	pthread_mutex_unlock(&nets_lock);
}

int urvt_net_create(struct rvt_dev_info *rdi, struct urvt_link *const *links, unsigned n)
{
	struct urvt_net *net = calloc(1, sizeof(*net));
	const char *env;
	int ret;

	if (!net)
		return -ENOMEM;
	env = getenv("URVT_DEBUG");
	urvt_debug = env && *env && strcmp(env, "0");
	net->rdi = rdi;
	if (!n || n > URVT_LINKS || !links[URVT_LINK_ANY]->reaches_any) {
		free(net);
		return -EINVAL;
	}
	for (unsigned k = 0; k < n; k++) {
		/* each link's counters, by its name (stats.h) */
		int slot = urvt_stats_link_slot(links[k]->ops->name);
		if (slot < 0) {
			urvt_report("the counters file has no slot for the %s link "
				    "(transport/stats.c)", links[k]->ops->name);
			free(net);
			return -EINVAL;
		}
		net->links[k] = links[k];
		net->link_ctr[k] = URVT_CTR_LINK_TX(slot);
		net->cheap_beside |= k > 0 && links[k]->cheap_poll;
	}
	net->nlinks = n;
	urvt_bias_init(&net->rx_lock);
	pthread_mutex_init(&net->watch_lock, NULL);
	pthread_mutex_init(&net->facts_lock, NULL);
	pthread_mutex_init(&net->bar_lock, NULL);
	pthread_cond_init(&net->bar_cond, NULL);

	/* our side of every packet: source GID, port 4791 both ways (we send
	 * from the bound socket; rxe accepts any source port), ID 0 + DF */
	memcpy(net->ip_tmpl.sgid, rdi->gid.raw, 16);
	net->ip_tmpl.sport = URVT_ROCE_UDP_PORT;
	net->ip_tmpl.dport = URVT_ROCE_UDP_PORT;
	net->ip_tmpl.hop_limit = 64;
	net->ip_tmpl.df = true;
	atomic_init(&net->ack_wait, !urvt_env_off("URVT_ACK_WAIT"));
	atomic_init(&net->app_writes_fresh, true);
	net->wait_score = URVT_WAIT_SCORE_START;
	atomic_init(&net->watchdog_ns, URVT_WATCHDOG_NS);

	net->rx = calloc(URVT_RX_BATCH, sizeof(*net->rx));
	ret = -ENOMEM;
	if (!net->rx)
		goto err;
	ret = urvt_pool_init(net);
	if (ret)
		goto err;
	ret = -ENOMEM;
	if (urvt_cc_init(net))
		goto err;
	ret = urvt_stats_init(net);
	if (ret)
		goto err;
	/* a shared address counts what it forwards among the host's processes */
	if (links[URVT_LINK_ANY]->ops->count_into)
		links[URVT_LINK_ANY]->ops->count_into(links[URVT_LINK_ANY],
						       &net->stats->dev.v[URVT_CTR_FWD_OUT]);
	env = getenv("URVT_PCAP");
	if (env && *env) {
		ret = pcap_open(net, env);
		if (ret)
			goto err;
	}
	/* a trace shows every datagram's real traffic class and hop limit */
	if (net->pcap && links[URVT_LINK_ANY]->ops->ip_facts)
		links[URVT_LINK_ANY]->ops->ip_facts(links[URVT_LINK_ANY], true);
	rdi->transport_priv = net;
	atomic_store(&net->app_linger, 2);
	ret = urvt_net_watch_start(net);
	if (ret) {
		rdi->transport_priv = NULL;
		goto err;
	}
	nets_add(net);
	return 0;
err:
	net_free(net);
	return ret;
}

void urvt_net_destroy(struct rvt_dev_info *rdi)
{
	struct urvt_net *net = rdi->transport_priv;
	struct urvt_txq *q;

	if (!net)
		return;
	nets_remove(net);
	urvt_net_watch_stop(net);
	progress_barrier(net);
	urvt_timer_del_sync(rdi->progress, &net->watchdog);
	/* anything this thread still has queued, and ACKs that wait */
	q = urvt_txq_peek();
	if (q)
		urvt_txq_flush(net, q);
	urvt_net_acks_flush(net, true);
	rdi->transport = NULL;
	rdi->transport_priv = NULL;
	for (unsigned k = 0; k < net->nlinks; k++)
		urvt_link_close(net->links[k]);
	net_free(net);
}

void urvt_net_ud_qps(struct urvt_net *net, int delta)
{
	struct urvt_link *l;
	uint32_t before;

	pthread_mutex_lock(&net->facts_lock);
	l = net->links[URVT_LINK_ANY];
	before = net->ud_qps;
	net->ud_qps = (uint32_t)((int)net->ud_qps + delta);
	if (l && l->ops->ip_facts && !net->pcap && !before != !net->ud_qps)
		l->ops->ip_facts(l, net->ud_qps != 0);
	pthread_mutex_unlock(&net->facts_lock);
}

struct urvt_link *urvt_net_swap_link(struct urvt_net *net, struct urvt_link *link)
{
	struct urvt_link *old;

	urvt_net_watch_stop(net);
	progress_barrier(net);
	struct urvt_rx_hold h = urvt_rx_lock(net, false);
	old = net->links[URVT_LINK_ANY];
	net->links[URVT_LINK_ANY] = link;
	if (h.how >= 0) /* a control path: never inside a batch */
		urvt_rx_unlock(net, h);
	atomic_store(&net->aside, false);
	urvt_net_watch_start(net);
	return old;
}
