/*
 * liburvt-sysfs.so: the RDMA part of /sys and /dev as urvt's device would
 * have it (docs/ecosystem.md). urvt-run preloads it (unless URVT_SYSFS=0).
 *
 * Libraries that run over verbs also look at the kernel's files: UCX takes
 * a device only if /dev/infiniband/<dev_name> is a character device it may
 * open, and reads the GID type from
 * /sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index> (no file:
 * RoCE v1, and its UD transport then drops every RoCE v2 packet). urvt has
 * no kernel device, so those files do not exist. This library answers
 * path lookups under
 *
 *   /sys/class/infiniband, /sys/class/infiniband_verbs,
 *   /sys/class/infiniband_mad, /dev/infiniband
 *
 * from a small read-only tree installed next to it (<its dir>/sysfs/, made
 * by tools/CMakeLists.txt), so the program sees urvt0 and only urvt0 there,
 * exactly as libibverbs shows it; every other path goes to the kernel
 * untouched. Two entries are not plain files of the tree:
 *
 *   /dev/infiniband/uverbs-urvt0   stat/access: a character device (that
 *       of /dev/null); opening it fails with ENXIO: there is no kernel
 *       command channel behind it (urvt's libibverbs never opens it);
 *   .../urvt0/ports/1/gid_attrs/ndevs/0   the interface urvt binds, chosen
 *       as udp_addr.c chooses it (URVT_ADDR's interface, else URVT_NETDEV,
 *       else lo), made on each open;
 *   .../urvt0/device/net/ and .../urvt0/ports/1/gids/   a small directory
 *       made on first use under $TMPDIR/urvt-sysfs-<uid>/ (0700, ours): a
 *       symlink net/<ifname> -> /sys/class/net/<ifname> (how rdma-core's
 *       tests find the device's IP address) and, with URVT_ADDR, gids/0.
 *
 * The wrapped calls are those glibc exports for path lookups (open*, fopen*,
 * stat family incl. the pre-2.33 __xstat entry points, statx, access
 * family, opendir, scandir, readlink*, realpath, the xattr reads ls -l makes). A path that does not
 * contain "infiniband" costs one strstr. Limits: static binaries and raw
 * system calls see the real /sys (docs/ecosystem.md).
 *
 * It must not use urvt's libraries (it is loaded into every program
 * urvt-run starts) and is built without sanitizers (a sanitizer runtime must
 * come first among the preloaded libraries).
 */
#undef _FORTIFY_SOURCE /* we define open() and friends ourselves */

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* What a path is to the view. */
enum view { V_PASS, V_TREE, V_NDEV, V_UVERBS };

static const char *const view_prefixes[] = {
	"/sys/class/infiniband_verbs", "/sys/class/infiniband_mad", "/sys/class/infiniband",
	"/dev/infiniband",
};
#define NDEV_PATH "/sys/class/infiniband/urvt0/ports/1/gid_attrs/ndevs/0"
#define NET_PATH "/sys/class/infiniband/urvt0/device/net"
#define GIDS_PATH "/sys/class/infiniband/urvt0/ports/1/gids"
#define UVERBS_PATH "/dev/infiniband/uverbs-urvt0"

/* ---- the real functions ---- */

static void *real(const char *name, void **slot)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}
/* The pre-2.33 stat entry points exist only as compat versions. */
static void *real_v(const char *name, const char *ver, void **slot)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (!f) {
		f = dlvsym(RTLD_NEXT, name, ver);
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}
#define REAL(type, name)                                                                  \
	({                                                                                 \
		static void *slot_;                                                        \
		(type)real(#name, &slot_);                                                 \
	})
#define REAL_V(type, name, ver)                                                           \
	({                                                                                 \
		static void *slot_;                                                        \
		(type)real_v(#name, ver, &slot_);                                          \
	})

/* ---- the tree ---- */

static char view_root[PATH_MAX];
static pthread_once_t root_once = PTHREAD_ONCE_INIT;

static void find_root(void)
{
	Dl_info info;
	char *slash;

	if (!dladdr((void *)find_root, &info) || !info.dli_fname)
		return;
	if (snprintf(view_root, sizeof(view_root), "%s", info.dli_fname) >= (int)sizeof(view_root))
		goto none;
	slash = strrchr(view_root, '/');
	if (!slash)
		goto none;
	/* <dir>/liburvt-sysfs.so -> <dir>/sysfs */
	if (snprintf(slash, sizeof(view_root) - (size_t)(slash - view_root), "/sysfs") >=
	    (int)(sizeof(view_root) - (size_t)(slash - view_root)))
		goto none;
	return;
none:
	view_root[0] = 0;
}

/* The directory DIRFD names (AT_FDCWD: the working directory), or false. */
static bool dir_path(int dirfd, char *out, size_t len)
{
	char link[64];
	ssize_t n;

	if (dirfd == AT_FDCWD)
		return getcwd(out, len) != NULL;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
	n = REAL(ssize_t (*)(const char *, char *, size_t), readlink)(link, out, len - 1);
	if (n <= 0)
		return false;
	out[n] = 0;
	return true;
}

/* The interface of URVT_ADDR's address, else URVT_NETDEV, else lo: the
 * device's interface as link/udp_addr.c picks it (the zero-configuration
 * addresses are all 127.x, on lo). */
static void ndev_name(char *out, size_t len)
{
	const char *addr = getenv("URVT_ADDR"), *dev = getenv("URVT_NETDEV");
	unsigned char want[16];
	struct ifaddrs *ifa, *i;
	int family = 0;

	snprintf(out, len, "lo");
	if (!addr || !*addr) {
		if (dev && *dev)
			snprintf(out, len, "%s", dev);
		return;
	}
	if (inet_pton(AF_INET, addr, want) == 1)
		family = AF_INET;
	else if (inet_pton(AF_INET6, addr, want) == 1)
		family = AF_INET6;
	if (!family || (family == AF_INET && want[0] == 127) || getifaddrs(&ifa))
		return;
	for (i = ifa; i; i = i->ifa_next) {
		const void *a;
		if (!i->ifa_addr || i->ifa_addr->sa_family != family)
			continue;
		a = family == AF_INET ? (const void *)&((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr
				      : (const void *)&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
		if (!memcmp(a, want, family == AF_INET ? 4 : 16)) {
			snprintf(out, len, "%s", i->ifa_name);
			break;
		}
	}
	freeifaddrs(ifa);
}

/* ---- the part that depends on the environment: device/net, gids ---- */

/* snprintf that says whether all of it fit */
static bool fmt(char *out, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
static bool fmt(char *out, size_t len, const char *f, ...)
{
	va_list ap;
	int n;

	va_start(ap, f);
	n = vsnprintf(out, len, f, ap);
	va_end(ap);
	return n >= 0 && (size_t)n < len;
}

static int sys_mkdir(const char *p, mode_t m)
{
	int r = (int)syscall(SYS_mkdirat, AT_FDCWD, p, m);

	return r && errno == EEXIST ? 0 : r;
}

/* "0000:...:ffff:7f00:0001": a GID as sysfs prints it, for an IP address. */
static bool gid_text(const char *addr, char *out, size_t len)
{
	unsigned char g[16] = { 0 };

	if (strchr(addr, ':')) {
		if (inet_pton(AF_INET6, addr, g) != 1)
			return false;
	} else {
		g[10] = g[11] = 0xff;
		if (inet_pton(AF_INET, addr, g + 12) != 1)
			return false;
	}
	return fmt(out, len,
		   "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0],
		   g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
		   g[14], g[15]);
}

/* A whole file, or none: written under a temporary name, then renamed. */
static int put_file(const char *path, const char *text)
{
	char tmp[PATH_MAX + 32];
	size_t n = strlen(text);
	int fd;
	bool ok;

	if (!fmt(tmp, sizeof(tmp), "%s.%d", path, (int)getpid()))
		return -1;
	fd = (int)syscall(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
	if (fd < 0)
		return -1;
	ok = write(fd, text, n) == (ssize_t)n;
	close(fd);
	if (!ok || syscall(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, path)) {
		syscall(SYS_unlinkat, AT_FDCWD, tmp, 0);
		return -1;
	}
	return 0;
}

static char dyn_root[PATH_MAX];
static pthread_once_t dyn_once = PTHREAD_ONCE_INIT;

/*
 * $TMPDIR/urvt-sysfs-<uid>/<ifname>[-<URVT_ADDR>]/ with net/<ifname> and
 * gids/0: computed from the environment alone (a child that never opens
 * urvt0, the `ls` a test runs, sees what its parent sees), shared by the
 * processes that would write the same, kept. Raw system calls: nothing
 * here goes through the functions this library defines.
 */
static void make_dyn(void)
{
	const char *tmpdir = getenv("TMPDIR"), *addr = getenv("URVT_ADDR");
	char ifname[64], top[PATH_MAX], base[PATH_MAX], p[PATH_MAX], target[PATH_MAX], gid[64];
	struct stat st;

	ndev_name(ifname, sizeof(ifname));
	if (!tmpdir || *tmpdir != '/')
		tmpdir = "/tmp";
	if (!fmt(top, sizeof(top), "%s/urvt-sysfs-%u", tmpdir, (unsigned int)getuid()) ||
	    sys_mkdir(top, 0700))
		return;
	/* our own directory, not one another user planted */
	if (syscall(SYS_newfstatat, AT_FDCWD, top, &st, AT_SYMLINK_NOFOLLOW) ||
	    !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 022))
		return;
	if (!(addr && *addr ? fmt(base, sizeof(base), "%s/%s-%s", top, ifname, addr)
			    : fmt(base, sizeof(base), "%s/%s", top, ifname)) ||
	    strchr(base + strlen(top) + 1, '/') || sys_mkdir(base, 0755))
		return;
	if (!fmt(p, sizeof(p), "%s/net", base) || sys_mkdir(p, 0755) ||
	    !fmt(p, sizeof(p), "%s/net/%s", base, ifname) ||
	    !fmt(target, sizeof(target), "/sys/class/net/%s", ifname) ||
	    (syscall(SYS_symlinkat, target, AT_FDCWD, p) && errno != EEXIST))
		return;
	if (!fmt(p, sizeof(p), "%s/gids", base) || sys_mkdir(p, 0755))
		return;
	if (addr && *addr && gid_text(addr, gid, sizeof(gid) - 1)) {
		strcat(gid, "\n");
		if (!fmt(p, sizeof(p), "%s/gids/0", base) || put_file(p, gid))
			return;
	}
	fmt(dyn_root, sizeof(dyn_root), "%s", base);
}

/* P under prefix PRE (NET_PATH, GIDS_PATH): OUT = <dyn>/<leaf>/<rest>. */
static bool dyn_map(const char *p, const char *pre, const char *leaf, char *out, size_t len)
{
	size_t n = strlen(pre);

	if (strncmp(p, pre, n) || (p[n] && p[n] != '/'))
		return false;
	pthread_once(&dyn_once, make_dyn);
	/* no directory we may use: the installed tree's empty one */
	if (!dyn_root[0])
		return false;
	return fmt(out, len, "%s/%s%s", dyn_root, leaf, p + n);
}

/*
 * Classify PATH (relative to DIRFD). For V_TREE, OUT holds the path in the
 * tree to use instead.
 */
static enum view view_map(int dirfd, const char *path, char *out, size_t len)
{
	char abs[PATH_MAX];
	const char *p = path;
	size_t n;

	if (!path || !strstr(path, "infiniband"))
		return V_PASS;
	if (path[0] != '/') {
		char base[PATH_MAX];
		if (!dir_path(dirfd, base, sizeof(base)) ||
		    snprintf(abs, sizeof(abs), "%s/%s", strcmp(base, "/") ? base : "", path) >=
			    (int)sizeof(abs))
			return V_PASS;
		p = abs;
	}
	for (size_t i = 0; i < sizeof(view_prefixes) / sizeof(view_prefixes[0]); i++) {
		n = strlen(view_prefixes[i]);
		if (!strncmp(p, view_prefixes[i], n) && (p[n] == 0 || p[n] == '/'))
			goto ours;
	}
	return V_PASS;
ours:
	if (!strcmp(p, UVERBS_PATH))
		return V_UVERBS;
	if (!strcmp(p, NDEV_PATH))
		return V_NDEV;
	if (dyn_map(p, NET_PATH, "net", out, len) || dyn_map(p, GIDS_PATH, "gids", out, len))
		return V_TREE;
	pthread_once(&root_once, find_root);
	if (!view_root[0] || snprintf(out, len, "%s%s", view_root, p) >= (int)len)
		return V_PASS;
	return V_TREE;
}

/* A read-only file holding the ndev name, as sysfs would show it. */
static int ndev_open(int flags)
{
	char name[64], line[80];
	int fd, n;

	if ((flags & O_ACCMODE) != O_RDONLY) {
		errno = EACCES;
		return -1;
	}
	ndev_name(name, sizeof(name));
	n = snprintf(line, sizeof(line), "%s\n", name);
	fd = memfd_create("urvt-sysfs", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd < 0)
		return -1;
	if (write(fd, line, (size_t)n) != n || lseek(fd, 0, SEEK_SET)) {
		close(fd);
		errno = EIO;
		return -1;
	}
	return fd;
}

/* ---- open ---- */

typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*fstatat_fn)(int, const char *, struct stat *, int);

static int view_openat(int dirfd, const char *path, int flags, mode_t mode,
		       int (*next)(int, const char *, int, ...))
{
	char buf[PATH_MAX];

	switch (view_map(dirfd, path, buf, sizeof(buf))) {
	case V_TREE:
		/* read-only, like those sysfs files: never write the installed
		 * tree; what is not there is not there (librdmacm takes ENOENT
		 * for "no rdma_cm", EACCES for a refusal) */
		if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC | O_TMPFILE))) {
			struct stat st;
			if (!(flags & (O_CREAT | O_TMPFILE)) &&
			    REAL(fstatat_fn, fstatat)(AT_FDCWD, buf, &st, 0)) {
				errno = ENOENT;
				return -1;
			}
			errno = EACCES;
			return -1;
		}
		return next(AT_FDCWD, buf, flags, mode);
	case V_NDEV:
		return ndev_open(flags);
	case V_UVERBS:
		errno = ENXIO;
		return -1;
	default:
		return next(dirfd, path, flags, mode);
	}
}

static mode_t open_mode(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

EXPORT int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	return view_openat(AT_FDCWD, path, flags, mode, REAL(openat_fn, openat));
}

EXPORT int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	return view_openat(AT_FDCWD, path, flags, mode, REAL(openat_fn, openat64));
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	return view_openat(dirfd, path, flags, mode, REAL(openat_fn, openat));
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	return view_openat(dirfd, path, flags, mode, REAL(openat_fn, openat64));
}

/* _FORTIFY_SOURCE's entry points (no mode: they refuse O_CREAT). */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
EXPORT int __open_2(const char *path, int flags)
{
	return view_openat(AT_FDCWD, path, flags, 0, REAL(openat_fn, openat));
}
EXPORT int __open64_2(const char *path, int flags)
{
	return view_openat(AT_FDCWD, path, flags, 0, REAL(openat_fn, openat64));
}
EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	return view_openat(dirfd, path, flags, 0, REAL(openat_fn, openat));
}
EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	return view_openat(dirfd, path, flags, 0, REAL(openat_fn, openat64));
}

static FILE *view_fopen(const char *path, const char *mode, FILE *(*next)(const char *, const char *))
{
	char buf[PATH_MAX];
	int fd;
	FILE *f;

	enum view v = view_map(AT_FDCWD, path, buf, sizeof(buf));

	if ((v == V_TREE || v == V_NDEV) && (mode[0] != 'r' || strchr(mode, '+'))) {
		errno = EACCES;
		return NULL;
	}
	switch (v) {
	case V_TREE:
		return next(buf, mode);
	case V_NDEV:
		fd = ndev_open(O_RDONLY | (strchr(mode, 'e') ? O_CLOEXEC : 0));
		if (fd < 0)
			return NULL;
		f = fdopen(fd, mode);
		if (!f)
			close(fd);
		return f;
	case V_UVERBS:
		errno = ENXIO;
		return NULL;
	default:
		return next(path, mode);
	}
}

typedef FILE *(*fopen_fn)(const char *, const char *);
EXPORT FILE *fopen(const char *path, const char *mode)
{
	return view_fopen(path, mode, REAL(fopen_fn, fopen));
}
EXPORT FILE *fopen64(const char *path, const char *mode)
{
	return view_fopen(path, mode, REAL(fopen_fn, fopen64));
}

/* ---- stat ---- */

/* The path a stat-like call should look at instead of PATH (PATH itself
 * when it is not ours). BUF holds it when it is not PATH. */
static const char *stat_target(int *dirfd, const char *path, char *buf, size_t len)
{
	switch (view_map(*dirfd, path, buf, len)) {
	case V_NDEV: /* the tree's placeholder: a regular file */
		pthread_once(&root_once, find_root);
		if (!view_root[0] || snprintf(buf, len, "%s%s", view_root, NDEV_PATH) >= (int)len)
			return path;
		/* fall through */
	case V_TREE:
		*dirfd = AT_FDCWD;
		return buf;
	case V_UVERBS:
		*dirfd = AT_FDCWD;
		return "/dev/null"; /* a character device anyone may open */
	default:
		return path;
	}
}

typedef int (*fstatat64_fn)(int, const char *, struct stat64 *, int);

EXPORT int stat(const char *restrict path, struct stat *restrict st)
{
	char buf[PATH_MAX];
	int fd = AT_FDCWD;
	const char *p = stat_target(&fd, path, buf, sizeof(buf));

	return REAL(fstatat_fn, fstatat)(fd, p, st, 0);
}
EXPORT int stat64(const char *restrict path, struct stat64 *restrict st)
{
	char buf[PATH_MAX];
	int fd = AT_FDCWD;
	const char *p = stat_target(&fd, path, buf, sizeof(buf));

	return REAL(fstatat64_fn, fstatat64)(fd, p, st, 0);
}
EXPORT int lstat(const char *restrict path, struct stat *restrict st)
{
	char buf[PATH_MAX];
	int fd = AT_FDCWD;
	const char *p = stat_target(&fd, path, buf, sizeof(buf));

	return REAL(fstatat_fn, fstatat)(fd, p, st, AT_SYMLINK_NOFOLLOW);
}
EXPORT int lstat64(const char *restrict path, struct stat64 *restrict st)
{
	char buf[PATH_MAX];
	int fd = AT_FDCWD;
	const char *p = stat_target(&fd, path, buf, sizeof(buf));

	return REAL(fstatat64_fn, fstatat64)(fd, p, st, AT_SYMLINK_NOFOLLOW);
}
EXPORT int fstatat(int dirfd, const char *restrict path, struct stat *restrict st, int flags)
{
	char buf[PATH_MAX];
	const char *p = stat_target(&dirfd, path, buf, sizeof(buf));

	return REAL(fstatat_fn, fstatat)(dirfd, p, st, flags);
}
EXPORT int fstatat64(int dirfd, const char *restrict path, struct stat64 *restrict st, int flags)
{
	char buf[PATH_MAX];
	const char *p = stat_target(&dirfd, path, buf, sizeof(buf));

	return REAL(fstatat64_fn, fstatat64)(dirfd, p, st, flags);
}
typedef int (*statx_fn)(int, const char *, int, unsigned int, struct statx *);
EXPORT int statx(int dirfd, const char *restrict path, int flags, unsigned int mask,
		 struct statx *restrict st)
{
	char buf[PATH_MAX];
	const char *p = stat_target(&dirfd, path, buf, sizeof(buf));

	return REAL(statx_fn, statx)(dirfd, p, flags, mask, st);
}

/* Binaries built against glibc < 2.33 call these instead. */
int __xstat(int ver, const char *path, struct stat *st);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);
typedef int (*xstat_fn)(int, const char *, void *);
typedef int (*fxstatat_fn)(int, int, const char *, void *, int);
#define XSTAT(name, type)                                                                 \
	EXPORT int name(int ver, const char *path, type *st)                              \
	{                                                                                  \
		char buf[PATH_MAX];                                                        \
		int fd = AT_FDCWD;                                                         \
		const char *p = stat_target(&fd, path, buf, sizeof(buf));                  \
		xstat_fn f = REAL_V(xstat_fn, name, "GLIBC_2.2.5");                        \
		if (!f) {                                                                  \
			errno = ENOSYS;                                                    \
			return -1;                                                         \
		}                                                                          \
		return f(ver, p, st);                                                      \
	}
XSTAT(__xstat, struct stat)
XSTAT(__xstat64, struct stat64)
XSTAT(__lxstat, struct stat)
XSTAT(__lxstat64, struct stat64)
#define FXSTATAT(name, type)                                                              \
	EXPORT int name(int ver, int dirfd, const char *path, type *st, int flags)        \
	{                                                                                  \
		char buf[PATH_MAX];                                                        \
		const char *p = stat_target(&dirfd, path, buf, sizeof(buf));               \
		fxstatat_fn f = REAL_V(fxstatat_fn, name, "GLIBC_2.4");                    \
		if (!f) {                                                                  \
			errno = ENOSYS;                                                    \
			return -1;                                                         \
		}                                                                          \
		return f(ver, dirfd, p, st, flags);                                        \
	}
FXSTATAT(__fxstatat, struct stat)
FXSTATAT(__fxstatat64, struct stat64)

/* ---- access ---- */

typedef int (*faccessat_fn)(int, const char *, int, int);
EXPORT int access(const char *path, int mode)
{
	char buf[PATH_MAX];
	int fd = AT_FDCWD;
	const char *p = stat_target(&fd, path, buf, sizeof(buf));

	return REAL(faccessat_fn, faccessat)(fd, p, mode, 0);
}
EXPORT int faccessat(int dirfd, const char *path, int mode, int flags)
{
	char buf[PATH_MAX];
	const char *p = stat_target(&dirfd, path, buf, sizeof(buf));

	return REAL(faccessat_fn, faccessat)(dirfd, p, mode, flags);
}
EXPORT int euidaccess(const char *path, int mode)
{
	char buf[PATH_MAX];
	int fd = AT_FDCWD;
	const char *p = stat_target(&fd, path, buf, sizeof(buf));

	return REAL(faccessat_fn, faccessat)(fd, p, mode, AT_EACCESS);
}
EXPORT int eaccess(const char *path, int mode)
{
	return euidaccess(path, mode);
}

/* ---- directories and links ---- */

typedef DIR *(*opendir_fn)(const char *);
EXPORT DIR *opendir(const char *path)
{
	char buf[PATH_MAX];

	switch (view_map(AT_FDCWD, path, buf, sizeof(buf))) {
	case V_TREE:
		return REAL(opendir_fn, opendir)(buf);
	case V_PASS:
		return REAL(opendir_fn, opendir)(path);
	default:
		errno = ENOTDIR;
		return NULL;
	}
}

typedef int (*scandir_fn)(const char *, struct dirent ***, int (*)(const struct dirent *),
			  int (*)(const struct dirent **, const struct dirent **));
EXPORT int scandir(const char *restrict path, struct dirent ***restrict list,
		   int (*sel)(const struct dirent *),
		   int (*cmp)(const struct dirent **, const struct dirent **))
{
	char buf[PATH_MAX];
	enum view v = view_map(AT_FDCWD, path, buf, sizeof(buf));

	if (v == V_NDEV || v == V_UVERBS) {
		errno = ENOTDIR;
		return -1;
	}
	return REAL(scandir_fn, scandir)(v == V_TREE ? buf : path, list, sel, cmp);
}
typedef int (*scandir64_fn)(const char *, struct dirent64 ***, int (*)(const struct dirent64 *),
			    int (*)(const struct dirent64 **, const struct dirent64 **));
EXPORT int scandir64(const char *restrict path, struct dirent64 ***restrict list,
		     int (*sel)(const struct dirent64 *),
		     int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	char buf[PATH_MAX];
	enum view v = view_map(AT_FDCWD, path, buf, sizeof(buf));

	if (v == V_NDEV || v == V_UVERBS) {
		errno = ENOTDIR;
		return -1;
	}
	return REAL(scandir64_fn, scandir64)(v == V_TREE ? buf : path, list, sel, cmp);
}

typedef ssize_t (*readlinkat_fn)(int, const char *, char *, size_t);
EXPORT ssize_t readlink(const char *restrict path, char *restrict out, size_t len)
{
	char buf[PATH_MAX];
	int fd = AT_FDCWD;
	const char *p = stat_target(&fd, path, buf, sizeof(buf));

	return REAL(readlinkat_fn, readlinkat)(fd, p, out, len);
}
EXPORT ssize_t readlinkat(int dirfd, const char *restrict path, char *restrict out, size_t len)
{
	char buf[PATH_MAX];
	const char *p = stat_target(&dirfd, path, buf, sizeof(buf));

	return REAL(readlinkat_fn, readlinkat)(dirfd, p, out, len);
}

/* The view's paths resolve to themselves: they have no links to follow. */
typedef char *(*realpath_fn)(const char *, char *);
EXPORT char *realpath(const char *restrict path, char *restrict out)
{
	char buf[PATH_MAX];
	struct stat st;

	if (view_map(AT_FDCWD, path, buf, sizeof(buf)) == V_PASS)
		return REAL(realpath_fn, realpath)(path, out);
	if (path[0] != '/' || stat(path, &st))
		return REAL(realpath_fn, realpath)(path, out); /* relative: rare; ENOENT */
	if (!out) {
		out = malloc(PATH_MAX);
		if (!out)
			return NULL;
	}
	snprintf(out, PATH_MAX, "%s", path);
	return out;
}

/* ---- extended attributes (ls -l asks for them) ---- */

typedef ssize_t (*getxattr_fn)(const char *, const char *, void *, size_t);
typedef ssize_t (*listxattr_fn)(const char *, char *, size_t);
#define GETXATTR(name)                                                                    \
	EXPORT ssize_t name(const char *path, const char *attr, void *val, size_t len)    \
	{                                                                                  \
		char buf[PATH_MAX];                                                        \
		int fd = AT_FDCWD;                                                         \
		const char *p = stat_target(&fd, path, buf, sizeof(buf));                  \
		return REAL(getxattr_fn, name)(p, attr, val, len);                         \
	}
GETXATTR(getxattr)
GETXATTR(lgetxattr)
#define LISTXATTR(name)                                                                   \
	EXPORT ssize_t name(const char *path, char *list, size_t len)                     \
	{                                                                                  \
		char buf[PATH_MAX];                                                        \
		int fd = AT_FDCWD;                                                         \
		const char *p = stat_target(&fd, path, buf, sizeof(buf));                  \
		return REAL(listxattr_fn, name)(p, list, len);                             \
	}
LISTXATTR(listxattr)
LISTXATTR(llistxattr)
