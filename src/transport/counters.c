/*
 * The counters file: /dev/shm/urvt.<pid> (tools/urvt-stat reads it), one
 * block for the device and one slot per QP, claimed on the QP's first
 * count. Counting is a relaxed add; nothing here is on a lock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/report.h"
#include "transport/tp.h"

struct urvt_stats_qp urvt_stats_overflow; /* QPs without a slot count here too */

/* Counter files of processes that died without closing the device. */
static void stats_reap_stale(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[300], *end;
		long pid;
		if (strncmp(e->d_name, "urvt.", 5))
			continue;
		pid = strtol(e->d_name + 5, &end, 10);
		if (*end || pid <= 0 || pid == getpid())
			continue;
		if (kill((pid_t)pid, 0) && errno == ESRCH) {
			snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
			unlink(path);
		}
	}
	closedir(d);
}

int urvt_stats_init(struct urvt_net *net)
{
	struct urvt_stats_file *s = NULL;

	if (!urvt_env_off("URVT_STATS")) {
		const char *file = getenv("URVT_STATS_FILE");
		int fd;
		if (file && *file) {
			/* a file of the caller's choosing, kept at exit; "%p": the pid */
			const char *pp = strstr(file, "%p");
			if (pp)
				snprintf(net->stats_path, sizeof(net->stats_path), "%.*s%d%s",
					 (int)(pp - file), file, (int)getpid(), pp + 2);
			else
				snprintf(net->stats_path, sizeof(net->stats_path), "%s", file);
			net->stats_keep = true;
		} else {
			stats_reap_stale();
			snprintf(net->stats_path, sizeof(net->stats_path), "/dev/shm/urvt.%d",
				 (int)getpid());
		}
		fd = open(net->stats_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 && net->stats_keep) {
			/* the caller asked for this file: without it, fail the open */
			urvt_report("URVT_STATS_FILE=%s: cannot create it (%s): name a file in a "
				    "writable directory, or unset it",
				    net->stats_path, strerror(errno));
			return -EINVAL;
		}
		if (fd >= 0) {
			/* counters live in a regular file; anything else (a
			 * device such as /dev/null) is neither mapped nor, at
			 * the failure's end, unlinked */
			struct stat st;
			if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
				close(fd);
				if (net->stats_keep) {
					urvt_report("URVT_STATS_FILE=%s: not a regular file: name a "
						    "file, or set URVT_STATS=0 for no counters",
						    net->stats_path);
					return -EINVAL;
				}
				fd = -1;
			}
		}
		if (fd >= 0) {
			if (!ftruncate(fd, sizeof(*s))) {
				s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
				if (s == MAP_FAILED)
					s = NULL;
			}
			close(fd);
			if (!s && !net->stats_keep)
				unlink(net->stats_path); /* ours (/dev/shm/urvt.PID) */
		}
		net->stats_mapped = s != NULL;
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
		net->stats_path[0] = 0;
	}
	s->version = URVT_STATS_VERSION;
	s->ncounters = URVT_CTR_NUM;
	s->nslots = URVT_STATS_QP_SLOTS;
	s->pid = (uint32_t)getpid();
	s->family = (uint32_t)net->links[URVT_LINK_ANY]->info.family;
	memcpy(s->gid, net->rdi->gid.raw, 16);
	memcpy(s->ifname, net->rdi->ifname, sizeof(s->ifname));
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		s->start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	/* readers check the magic last */
	__atomic_store_n(&s->magic, URVT_STATS_MAGIC, __ATOMIC_RELEASE);
	net->stats = s;
	return 0;
}

void urvt_stats_fini(struct urvt_net *net)
{
	const char *keep = getenv("URVT_STATS_KEEP");

	if (!net->stats)
		return;
	if (net->stats_mapped) {
		munmap(net->stats, sizeof(*net->stats));
		if (!net->stats_keep && !(keep && !strcmp(keep, "1")))
			unlink(net->stats_path);
	} else {
		free(net->stats);
	}
}

/* Slow path of urvt_qp_stats: claim a slot (qpn % slots, then 7 more). */
static struct urvt_stats_qp *stats_claim(struct rvt_qp *qp)
{
	struct urvt_net *net = qp_net(qp);
	struct urvt_stats_qp *slot = &urvt_stats_overflow, *want = NULL;

	for (uint32_t i = 0; i < 8; i++) {
		struct urvt_stats_qp *s = &net->stats->qp[(qp->qpn + i) % URVT_STATS_QP_SLOTS];
		uint32_t zero = 0;
		if (__atomic_compare_exchange_n(&s->in_use, &zero, 1, false, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			memset(&s->c, 0, sizeof(s->c));
			s->type = qp->type;
			__atomic_store_n(&s->qpn, qp->qpn, __ATOMIC_RELEASE);
			slot = s;
			break;
		}
	}
	if (!atomic_compare_exchange_strong(&qp_tp(qp)->stats, &want, slot)) {
		if (slot != &urvt_stats_overflow)
			__atomic_store_n(&slot->in_use, 0, __ATOMIC_RELEASE);
		return want;
	}
	return slot;
}

struct urvt_stats_qp *urvt_qp_stats(struct rvt_qp *qp)
{
	struct urvt_stats_qp *s = atomic_load_explicit(&qp_tp(qp)->stats, memory_order_acquire);

	if (likely(s))
		return s;
	return stats_claim(qp);
}

void urvt_stats_release(struct urvt_net *net, struct rvt_qp *qp)
{
	struct urvt_stats_qp *s = atomic_exchange(&qp_tp(qp)->stats, NULL);

	if (s && s != &urvt_stats_overflow)
		__atomic_store_n(&s->in_use, 0, __ATOMIC_RELEASE);
}
