/* The host registry (base/hostreg.h, docs/host-identity.md). */
#include "base/hostreg.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOST_MAGIC 0x7572767448535431ull /* "urvtHST1" */
#define HOST_VERSION 1

static pthread_mutex_t host_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct urvt_host the_host = { .fd = -1 };

/* Field 22 of /proc/PID/stat (start time in clock ticks), or 0 if gone. */
static uint64_t proc_start(int32_t pid)
{
	char path[64], buf[1024], *p;
	uint64_t start = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* the command name may hold spaces and parentheses: count after the last ')' */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* a zombie has closed its sockets: gone as far as we care */
	if (p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'))
		return 0;
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (p)
		start = strtoull(p + 1, NULL, 10);
	return start ? start : 1;
}

bool urvt_host_slot_alive(const struct urvt_host_slot *s)
{
	int32_t pid = atomic_load_explicit(&s->pid, memory_order_relaxed);

	return pid > 0 && proc_start(pid) == s->start;
}

static int host_path(char *buf, size_t len)
{
	const char *env = getenv("URVT_REGISTRY");
	struct stat st;

	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return 0;
	}
	/* abstract sockets and addresses are per network namespace: so is the table */
	if (stat("/proc/self/ns/net", &st))
		st.st_ino = 0;
	snprintf(buf, len, "/dev/shm/urvt-host-%u-%llu", (unsigned)geteuid(),
		 (unsigned long long)st.st_ino);
	return 0;
}

void urvt_host_lock(struct urvt_host *h)
{
	pthread_mutex_lock(&host_mutex);
	while (flock(h->fd, LOCK_EX) && errno == EINTR)
		;
}

void urvt_host_unlock(struct urvt_host *h)
{
	(void)flock(h->fd, LOCK_UN);
	pthread_mutex_unlock(&host_mutex);
}

/* Map the file, checking that it is ours and nobody else's to read. */
static int host_map(struct urvt_host *h)
{
	char path[256];
	struct stat st;
	void *m;
	int fd;

	host_path(path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077)) {
		close(fd);
		return -EPERM;
	}
	if (st.st_size < (off_t)sizeof(struct urvt_host_table) &&
	    ftruncate(fd, sizeof(struct urvt_host_table))) {
		int e = -errno;
		close(fd);
		return e;
	}
	m = mmap(NULL, sizeof(struct urvt_host_table), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		int e = -errno;
		close(fd);
		return e;
	}
	h->fd = fd;
	h->t = m;
	h->ino = (uint64_t)st.st_ino;
	return 0;
}

static void slot_clear(struct urvt_host_slot *s)
{
	urvt_host_group_set(s, (const uint8_t[16]){ 0 });
	s->index = URVT_HOST_NO_INDEX;
	s->start = 0;
	atomic_store(&s->pid, 0);
}

static void ports_release(struct urvt_host *h, uint8_t slot)
{
	for (unsigned i = 0; i < URVT_HOST_PORTS; i++)
		if (h->t->port[i].flags && h->t->port[i].slot == slot)
			memset(&h->t->port[i], 0, sizeof(h->t->port[i]));
}

unsigned urvt_host_reap(struct urvt_host *h)
{
	unsigned n = 0;

	for (unsigned s = 1; s < URVT_HOST_SLOTS; s++) {
		struct urvt_host_slot *sl = &h->t->slot[s];
		if (!atomic_load(&sl->pid) || urvt_host_slot_alive(sl))
			continue;
		urvt_host_group_leave(h, (uint8_t)s);
		ports_release(h, (uint8_t)s);
		slot_clear(sl);
		n++;
	}
	/* entries of no process (a damaged table) */
	for (unsigned i = 0; i < URVT_HOST_PORTS; i++)
		if (h->t->port[i].flags && !atomic_load(&h->t->slot[h->t->port[i].slot].pid))
			memset(&h->t->port[i], 0, sizeof(h->t->port[i]));
	return n;
}

static bool key_zero(const uint8_t k[16])
{
	static const uint8_t zero[16];

	return !memcmp(k, zero, 16);
}

int urvt_host_group_size(struct urvt_host *h, const uint8_t key[16])
{
	int n = 0;

	for (unsigned s = 1; s < URVT_HOST_SLOTS; s++) {
		const struct urvt_host_slot *sl = &h->t->slot[s];
		if (atomic_load(&sl->pid) && urvt_host_group_is(sl, key))
			n++;
	}
	return n;
}

void urvt_host_group_join(struct urvt_host *h, const uint8_t key[16], int32_t index)
{
	struct urvt_host_slot *me = &h->t->slot[h->my_slot];

	urvt_host_group_set(me, key);
	me->index = index;
	atomic_fetch_add(&h->t->gen, 1);
}

void urvt_host_group_leave(struct urvt_host *h, uint8_t slot)
{
	struct urvt_host_slot *gone = &h->t->slot[slot];
	uint8_t gone_key[16];
	int32_t last = -1;
	unsigned last_slot = 0;

	if (urvt_host_group_is(gone, (const uint8_t[16]){ 0 }))
		goto out;
	memcpy(gone_key, gone->group, 16); /* under the lock: no writer */
	if (gone->index < 0) {
		/* where its hole is nobody knows: every member learns again */
		atomic_fetch_add(&h->t->probe_gen, 1);
		goto out;
	}
	/* the kernel moves the member with the highest index into the hole */
	for (unsigned s = 1; s < URVT_HOST_SLOTS; s++) {
		struct urvt_host_slot *sl = &h->t->slot[s];
		if (s == slot || !atomic_load(&sl->pid) || sl->index < 0 ||
		    !urvt_host_group_is(sl, gone_key))
			continue;
		if (sl->index > last) {
			last = sl->index;
			last_slot = s;
		}
	}
	if (last_slot && last > gone->index)
		h->t->slot[last_slot].index = gone->index;
out:
	gone->index = URVT_HOST_NO_INDEX;
	urvt_host_group_set(gone, (const uint8_t[16]){ 0 });
	atomic_fetch_add(&h->t->gen, 1);
}

void urvt_host_release(struct urvt_host *h)
{
	urvt_host_group_leave(h, h->my_slot);
	ports_release(h, h->my_slot);
}

static int claim_slot(struct urvt_host *h)
{
	struct urvt_host_table *t = h->t;
	int32_t pid = (int32_t)getpid();
	int ret = -EUSERS;

	urvt_host_lock(h);
	if (t->magic != HOST_MAGIC || t->version != HOST_VERSION ||
	    t->size != sizeof(*t)) {
		/* new, or of another version, or damaged: start afresh (the
		 * processes that used it still own their sockets and QPNs;
		 * their packets may be forwarded once or lost meanwhile) */
		memset(t, 0, sizeof(*t));
		for (unsigned s = 0; s < URVT_HOST_SLOTS; s++)
			t->slot[s].index = URVT_HOST_NO_INDEX;
		t->magic = HOST_MAGIC;
		t->version = HOST_VERSION;
		t->size = sizeof(*t);
	}
	urvt_host_reap(h);
	/* this process may hold one already: libibverbs and librdmacm each
	 * carry a copy of this code, and the process is one slot */
	for (unsigned s = 1; s < URVT_HOST_LAST_SLOT + 1; s++) {
		struct urvt_host_slot *sl = &t->slot[s];
		if (atomic_load(&sl->pid) == pid && urvt_host_slot_alive(sl)) {
			h->my_slot = (uint8_t)s;
			h->pid = pid;
			urvt_host_unlock(h);
			return 0;
		}
	}
	for (unsigned s = 1; s < URVT_HOST_LAST_SLOT + 1; s++) {
		struct urvt_host_slot *sl = &t->slot[s];
		if (atomic_load(&sl->pid))
			continue;
		slot_clear(sl);
		sl->start = proc_start(pid);
		atomic_store(&sl->pid, pid);
		h->my_slot = (uint8_t)s;
		h->pid = pid;
		ret = 0;
		break;
	}
	urvt_host_unlock(h);
	return ret;
}

struct urvt_host *urvt_host_get(int *err)
{
	struct urvt_host *h = &the_host;
	const char *share = getenv("URVT_SHARE");
	int ret = 0;

	if (share && !strcmp(share, "0")) {
		*err = -EOPNOTSUPP;
		return NULL;
	}
	pthread_mutex_lock(&host_mutex);
	if (h->t && h->pid == (int32_t)getpid()) {
		pthread_mutex_unlock(&host_mutex);
		return h;
	}
	/* first use, or a forked child: its parent's slot is not its own */
	if (!h->t)
		ret = host_map(h);
	pthread_mutex_unlock(&host_mutex);
	if (!ret)
		ret = claim_slot(h);
	if (ret) {
		*err = ret;
		return NULL;
	}
	return h;
}

uint8_t urvt_host_port_owner(struct urvt_host *h, uint16_t ps, uint16_t port,
			     const uint8_t addr[16])
{
	static const uint8_t v4any[16] = { [10] = 0xff, [11] = 0xff };
	uint8_t wild = 0;
	bool v4 = !memcmp(addr, v4any, 12);

	for (unsigned i = 0; i < URVT_HOST_PORTS; i++) {
		const struct urvt_host_port *p = &h->t->port[i];
		uint8_t f = p->flags;

		if (!(f & URVT_HOST_PORT_LISTEN) || p->ps != ps || p->port != port ||
		    !atomic_load_explicit(&h->t->slot[p->slot].pid, memory_order_relaxed))
			continue;
		if (!memcmp(p->addr, addr, 16))
			return p->slot;
		if (key_zero(p->addr) || (p->family == AF_INET && !memcmp(p->addr, v4any, 16))) {
			/* a wildcard: its family, or IPv6's unless AFONLY */
			bool fam_v4 = p->family == AF_INET;
			if (fam_v4 == v4 || (!fam_v4 && !(f & URVT_HOST_PORT_AFONLY)))
				wild = p->slot;
		}
	}
	return wild;
}
