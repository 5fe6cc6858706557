/*
 * urvt-stat: print the transport counters of running urvt processes (the
 * shared-memory tables /dev/shm/urvt.<pid>, src/transport/stats.h).
 *
 *   urvt-stat            every urvt process: device counters
 *   urvt-stat PID...     those processes, with per-QP counters
 *   -a                   include zero counters     -q  no per-QP tables
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "transport/stats.h"

static bool show_all, no_qps;

static void print_ctrs(const char *indent, const struct urvt_ctrs *c)
{
	for (int i = 0; i < URVT_CTR_NUM; i++) {
		uint64_t v = __atomic_load_n(&c->v[i], __ATOMIC_RELAXED);
		if (!v && !show_all)
			continue;
		if (!urvt_ctr_name[i])
			continue;
		printf("%s%-32s %" PRIu64 "\n", indent, urvt_ctr_name[i], v);
	}
}

static const char *qpt_name(uint32_t t)
{
	return t == 2 ? "RC" : t == 3 ? "UC" : t == 4 ? "UD" : "?";
}

static int show(const char *path, bool qps)
{
	struct urvt_stats_file *s;
	char addr[INET6_ADDRSTRLEN] = "?";
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool alive;

	if (fd < 0) {
		fprintf(stderr, "urvt-stat: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (fstat(fd, &st) || (size_t)st.st_size < sizeof(*s)) {
		fprintf(stderr, "urvt-stat: %s: not a urvt counter file\n", path);
		close(fd);
		return 1;
	}
	s = mmap(NULL, sizeof(*s), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (s == MAP_FAILED) {
		fprintf(stderr, "urvt-stat: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != URVT_STATS_MAGIC ||
	    s->version != URVT_STATS_VERSION || s->ncounters != URVT_CTR_NUM) {
		fprintf(stderr, "urvt-stat: %s: unknown format (version %u)\n", path, s->version);
		munmap(s, sizeof(*s));
		return 1;
	}
	if (s->family == AF_INET)
		inet_ntop(AF_INET, s->gid + 12, addr, sizeof(addr));
	else
		inet_ntop(AF_INET6, s->gid, addr, sizeof(addr));
	alive = !kill((pid_t)s->pid, 0) || errno == EPERM;
	printf("pid %u%s  urvt0  %s (%s)\n", s->pid, alive ? "" : " (exited)", addr, s->ifname);
	print_ctrs("  ", &s->dev);
	if (qps) {
		for (uint32_t i = 0; i < s->nslots && i < URVT_STATS_QP_SLOTS; i++) {
			const struct urvt_stats_qp *q = &s->qp[i];
			if (!__atomic_load_n(&q->qpn, __ATOMIC_ACQUIRE))
				continue;
			printf("  qp %u (%s)%s\n", q->qpn, qpt_name(q->type),
			       q->in_use ? "" : " (destroyed)");
			print_ctrs("    ", &q->c);
		}
	}
	munmap(s, sizeof(*s));
	return 0;
}

int main(int argc, char **argv)
{
	int opt, ret = 0, n = 0;

	while ((opt = getopt(argc, argv, "aqh")) != -1) {
		switch (opt) {
		case 'a':
			show_all = true;
			break;
		case 'q':
			no_qps = true;
			break;
		default:
			fprintf(stderr, "usage: urvt-stat [-a] [-q] [PID|FILE...]\n"
					"  counters of urvt processes (/dev/shm/urvt.<pid>)\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (optind < argc) {
		for (int i = optind; i < argc; i++) {
			char path[PATH_MAX];
			if (strchr(argv[i], '/'))
				snprintf(path, sizeof(path), "%s", argv[i]);
			else
				snprintf(path, sizeof(path), "/dev/shm/urvt.%s", argv[i]);
			ret |= show(path, !no_qps);
		}
		return ret;
	}
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	if (!d) {
		perror("urvt-stat: /dev/shm");
		return 1;
	}
	while ((e = readdir(d))) {
		char path[PATH_MAX];
		if (strncmp(e->d_name, "urvt.", 5))
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		ret |= show(path, false);
		n++;
	}
	closedir(d);
	if (!n)
		printf("no urvt processes (no /dev/shm/urvt.*)\n");
	return ret;
}
