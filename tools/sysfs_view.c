/*
 * liburvt-sysfs.so: a /sys/class/infiniband view for programs run by
 * urvt-run (docs/sysfs.md). Programs that find an RDMA device's network
 * interface, port state or GID type in sysfs (rdma-core's pyverbs tests,
 * UCX) see urvt0 there, without root and without touching the host.
 *
 * How: preloaded by urvt-run, it rewrites absolute paths under
 * /sys/class/infiniband in the libc calls that take a path (open, fopen,
 * opendir, the stat family, access, readlink, realpath, scandir) to a
 * small real directory tree, written on first use to
 * $TMPDIR/urvt-sysfs-<uid>/<interface>[-<address>]/ (shared by every
 * process that would write the same content: written once, atomically,
 * kept). Everything else passes through untouched.
 *
 * The content follows from the environment alone, so a process that never
 * opens urvt0 (the `ls` a test spawns) sees what its parent sees: the
 * interface is URVT_NETDEV, else the one holding URVT_ADDR, else lo (the
 * default device is on a loopback address).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#define SYS_IB "/sys/class/infiniband"

/* libc entry points the headers do not declare (fortify and pre-2.33 stat) */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dfd, const char *path, int flags);
int __openat64_2(int dfd, const char *path, int flags);
int __xstat(int ver, const char *path, struct stat *st);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);
int __fxstatat(int ver, int dfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dfd, const char *path, struct stat64 *st, int flags);
#define EXPORT __attribute__((visibility("default")))

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char root[PATH_MAX];      /* the view's "class/infiniband" directory; "" = off */

/* ------------------------------------------------------------------ */
/* Writing the view (raw system calls: nothing here is interposed)     */
/* ------------------------------------------------------------------ */

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
	return (int)syscall(SYS_mkdirat, AT_FDCWD, p, m);
}

static int put_file(const char *dir, const char *name, const char *content, ...)
	__attribute__((format(printf, 3, 4)));
static int put_file(const char *dir, const char *name, const char *content, ...)
{
	char path[PATH_MAX], tmp[PATH_MAX + 32], buf[256];
	va_list ap;
	int fd, n, ok;

	va_start(ap, content);
	n = vsnprintf(buf, sizeof(buf), content, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -1;
	if (!fmt(path, sizeof(path), "%s/%s", dir, name) ||
	    !fmt(tmp, sizeof(tmp), "%s.%d", path, (int)getpid()))
		return -1;
	fd = (int)syscall(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
	if (fd < 0)
		return -1;
	ok = write(fd, buf, (size_t)n) == n;
	close(fd);
	/* whole files only: a reader sees the old one or the new one */
	if (!ok || syscall(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, path)) {
		syscall(SYS_unlinkat, AT_FDCWD, tmp, 0);
		return -1;
	}
	return 0;
}

static int mkdirs(const char *base, const char *rel)
{
	char p[PATH_MAX];
	size_t bl = strlen(base);

	if (!fmt(p, sizeof(p), "%s/%s", base, rel))
		return -1;
	for (char *s = p + bl + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (sys_mkdir(p, 0755) && errno != EEXIST)
			return -1;
		*s = '/';
	}
	return sys_mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

/* The interface holding addr (v4 or v6 text), or NULL. */
static bool ifname_of(const char *addr, char out[IF_NAMESIZE])
{
	unsigned char want[16];
	int fam = strchr(addr, ':') ? AF_INET6 : AF_INET;
	struct ifaddrs *ifa, *i;
	bool found = false;

	if (inet_pton(fam, addr, want) != 1 || getifaddrs(&ifa))
		return false;
	for (i = ifa; i && !found; i = i->ifa_next) {
		const void *a;

		if (!i->ifa_addr || i->ifa_addr->sa_family != fam)
			continue;
		a = fam == AF_INET ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
				   : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
		if (!memcmp(a, want, fam == AF_INET ? 4 : 16)) {
			snprintf(out, IF_NAMESIZE, "%s", i->ifa_name);
			found = true;
		}
	}
	freeifaddrs(ifa);
	/* all of 127/8 is on lo, though only 127.0.0.1 is listed */
	if (!found && fam == AF_INET && want[0] == 127) {
		snprintf(out, IF_NAMESIZE, "lo");
		found = true;
	}
	return found;
}

/* "fe80:0000:...": a GID as sysfs prints it, for an IP address. */
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
	snprintf(out, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		 g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
		 g[13], g[14], g[15]);
	return true;
}

static void build_view(void)
{
	const char *off = getenv("URVT_SYSFS");
	const char *netdev = getenv("URVT_NETDEV"), *addr = getenv("URVT_ADDR");
	const char *tmpdir = getenv("TMPDIR");
	char ifname[IF_NAMESIZE] = "lo", base[PATH_MAX], top[PATH_MAX], dev[PATH_MAX], gid[64];
	struct stat st;

	if (off && !strcmp(off, "0"))
		return;
	if (netdev && *netdev)
		snprintf(ifname, sizeof(ifname), "%s", netdev);
	else if (addr && *addr && !ifname_of(addr, ifname))
		return; /* urvt0 will not open either */
	if (!tmpdir || *tmpdir != '/')
		tmpdir = "/tmp";
	/* our own directory, not one someone else planted */
	if (!fmt(top, sizeof(top), "%s/urvt-sysfs-%u", tmpdir, (unsigned int)getuid()))
		return;
	if (sys_mkdir(top, 0700) && errno != EEXIST)
		return;
	if (syscall(SYS_newfstatat, AT_FDCWD, top, &st, AT_SYMLINK_NOFOLLOW) ||
	    !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 022))
		return;
	if (addr && *addr && !(netdev && *netdev) ?
		    !fmt(base, sizeof(base), "%s/%s-%s", top, ifname, addr) :
		    !fmt(base, sizeof(base), "%s/%s", top, ifname))
		return;
	if (sys_mkdir(base, 0755) && errno != EEXIST)
		return;
	if (!fmt(dev, sizeof(dev), "%s/class/infiniband/urvt0", base))
		return;
	if (mkdirs(base, "class/infiniband/urvt0/device/net") ||
	    mkdirs(base, "class/infiniband/urvt0/ports/1/gids") ||
	    mkdirs(base, "class/infiniband/urvt0/ports/1/gid_attrs/types") ||
	    mkdirs(base, "class/infiniband/urvt0/ports/1/gid_attrs/ndevs"))
		return;
	{
		/* device/net/<if>: the interface's own sysfs directory */
		char link[PATH_MAX], target[PATH_MAX];

		if (!fmt(link, sizeof(link), "%s/device/net/%s", dev, ifname) ||
		    !fmt(target, sizeof(target), "/sys/class/net/%s", ifname))
			return;
		if (syscall(SYS_symlinkat, target, AT_FDCWD, link) && errno != EEXIST)
			return;
	}
	if (put_file(dev, "node_type", "1: CA\n") ||
	    put_file(dev, "ports/1/state", "4: ACTIVE\n") ||
	    put_file(dev, "ports/1/phys_state", "5: LinkUp\n") ||
	    put_file(dev, "ports/1/link_layer", "Ethernet\n") ||
	    put_file(dev, "ports/1/lid", "0x0\n") ||
	    put_file(dev, "ports/1/gid_attrs/types/0", "RoCE v2\n") ||
	    put_file(dev, "ports/1/gid_attrs/ndevs/0", "%s\n", ifname))
		return;
	if (addr && *addr && gid_text(addr, gid, sizeof(gid)) &&
	    put_file(dev, "ports/1/gids/0", "%s\n", gid))
		return;
	fmt(root, sizeof(root), "%s/class/infiniband", base);
}

static void init(void)
{
	build_view();
}

static long missing(void)
{
	errno = ENOSYS;
	return -1;
}

/* The next definition of name (libc's); the stat wrappers glibc 2.33 keeps
 * only as compat symbols need their version; a missing one fails cleanly. */
static void *next_sym(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);

	if (!f)
		f = dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5");
	return f ? f : (void *)missing;
}

/* path under /sys/class/infiniband -> the view (in buf), else path itself */
static const char *map(const char *path, char *buf, size_t len)
{
	size_t n = sizeof(SYS_IB) - 1;

	if (!path || strncmp(path, SYS_IB, n) || (path[n] && path[n] != '/'))
		return path;
	pthread_once(&once, init);
	if (!*root || !fmt(buf, len, "%s%s", root, path + n))
		return path;
	return buf;
}

#define REAL(ret, name, ...)                                                   \
	static ret (*real_##name)(__VA_ARGS__);                                \
	static void resolve_##name(void)                                       \
	{                                                                      \
		if (!real_##name)                                              \
			real_##name = (ret(*)(__VA_ARGS__))next_sym(#name);    \
	}

/* open() family: the mode argument only with O_CREAT / O_TMPFILE */
#define HAS_MODE(flags) (((flags) & O_CREAT) || ((flags) & __O_TMPFILE) == __O_TMPFILE)

#define OPEN_LIKE(name)                                                        \
	REAL(int, name, const char *, int, ...)                                \
	EXPORT int name(const char *path, int flags, ...)                      \
	{                                                                      \
		char b[PATH_MAX];                                              \
		mode_t mode = 0;                                               \
		if (HAS_MODE(flags)) {                                         \
			va_list ap;                                            \
			va_start(ap, flags);                                   \
			mode = (mode_t)va_arg(ap, int);                        \
			va_end(ap);                                            \
		}                                                              \
		resolve_##name();                                              \
		return real_##name(map(path, b, sizeof(b)), flags, mode);      \
	}
OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(name)                                                      \
	REAL(int, name, int, const char *, int, ...)                           \
	EXPORT int name(int dfd, const char *path, int flags, ...)             \
	{                                                                      \
		char b[PATH_MAX];                                              \
		mode_t mode = 0;                                               \
		if (HAS_MODE(flags)) {                                         \
			va_list ap;                                            \
			va_start(ap, flags);                                   \
			mode = (mode_t)va_arg(ap, int);                        \
			va_end(ap);                                            \
		}                                                              \
		resolve_##name();                                              \
		return real_##name(dfd, map(path, b, sizeof(b)), flags, mode); \
	}
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

#define OPEN2_LIKE(name)                                                       \
	REAL(int, name, const char *, int)                                     \
	EXPORT int name(const char *path, int flags)                           \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(map(path, b, sizeof(b)), flags);            \
	}
OPEN2_LIKE(__open_2)
OPEN2_LIKE(__open64_2)

#define OPENAT2_LIKE(name)                                                     \
	REAL(int, name, int, const char *, int)                                \
	EXPORT int name(int dfd, const char *path, int flags)                  \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(dfd, map(path, b, sizeof(b)), flags);       \
	}
OPENAT2_LIKE(__openat_2)
OPENAT2_LIKE(__openat64_2)

#define FOPEN_LIKE(name)                                                       \
	REAL(FILE *, name, const char *, const char *)                         \
	EXPORT FILE *name(const char *path, const char *mode)                  \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(map(path, b, sizeof(b)), mode);             \
	}
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)

REAL(DIR *, opendir, const char *)
EXPORT DIR *opendir(const char *path)
{
	char b[PATH_MAX];

	resolve_opendir();
	return real_opendir(map(path, b, sizeof(b)));
}

#define STAT_LIKE(name, st_t)                                                  \
	REAL(int, name, const char *, st_t *)                                  \
	EXPORT int name(const char *path, st_t *st)                            \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(map(path, b, sizeof(b)), st);               \
	}
STAT_LIKE(stat, struct stat)
STAT_LIKE(stat64, struct stat64)
STAT_LIKE(lstat, struct stat)
STAT_LIKE(lstat64, struct stat64)

#define FSTATAT_LIKE(name, st_t)                                               \
	REAL(int, name, int, const char *, st_t *, int)                        \
	EXPORT int name(int dfd, const char *path, st_t *st, int flags)        \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(dfd, map(path, b, sizeof(b)), st, flags);   \
	}
FSTATAT_LIKE(fstatat, struct stat)
FSTATAT_LIKE(fstatat64, struct stat64)

/* the versioned wrappers older binaries call */
#define XSTAT_LIKE(name, st_t)                                                 \
	REAL(int, name, int, const char *, st_t *)                             \
	EXPORT int name(int ver, const char *path, st_t *st)                   \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(ver, map(path, b, sizeof(b)), st);          \
	}
XSTAT_LIKE(__xstat, struct stat)
XSTAT_LIKE(__xstat64, struct stat64)
XSTAT_LIKE(__lxstat, struct stat)
XSTAT_LIKE(__lxstat64, struct stat64)

#define FXSTATAT_LIKE(name, st_t)                                              \
	REAL(int, name, int, int, const char *, st_t *, int)                   \
	EXPORT int name(int ver, int dfd, const char *path, st_t *st, int flags) \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(ver, dfd, map(path, b, sizeof(b)), st, flags); \
	}
FXSTATAT_LIKE(__fxstatat, struct stat)
FXSTATAT_LIKE(__fxstatat64, struct stat64)

REAL(int, statx, int, const char *, int, unsigned int, struct statx *)
EXPORT int statx(int dfd, const char *path, int flags, unsigned int mask, struct statx *st)
{
	char b[PATH_MAX];

	resolve_statx();
	return real_statx(dfd, map(path, b, sizeof(b)), flags, mask, st);
}

REAL(int, access, const char *, int)
EXPORT int access(const char *path, int mode)
{
	char b[PATH_MAX];

	resolve_access();
	return real_access(map(path, b, sizeof(b)), mode);
}

REAL(int, faccessat, int, const char *, int, int)
EXPORT int faccessat(int dfd, const char *path, int mode, int flags)
{
	char b[PATH_MAX];

	resolve_faccessat();
	return real_faccessat(dfd, map(path, b, sizeof(b)), mode, flags);
}

REAL(ssize_t, readlink, const char *, char *, size_t)
EXPORT ssize_t readlink(const char *path, char *out, size_t len)
{
	char b[PATH_MAX];

	resolve_readlink();
	return real_readlink(map(path, b, sizeof(b)), out, len);
}

REAL(ssize_t, readlinkat, int, const char *, char *, size_t)
EXPORT ssize_t readlinkat(int dfd, const char *path, char *out, size_t len)
{
	char b[PATH_MAX];

	resolve_readlinkat();
	return real_readlinkat(dfd, map(path, b, sizeof(b)), out, len);
}

REAL(char *, realpath, const char *, char *)
EXPORT char *realpath(const char *path, char *out)
{
	char b[PATH_MAX];

	resolve_realpath();
	return real_realpath(map(path, b, sizeof(b)), out);
}

typedef int (*scandir_filter)(const struct dirent *);
typedef int (*scandir_cmp)(const struct dirent **, const struct dirent **);
REAL(int, scandir, const char *, struct dirent ***, scandir_filter, scandir_cmp)
EXPORT int scandir(const char *path, struct dirent ***list, scandir_filter f, scandir_cmp c)
{
	char b[PATH_MAX];

	resolve_scandir();
	return real_scandir(map(path, b, sizeof(b)), list, f, c);
}

/* ls -l asks for ACLs and security labels */
#define GETXATTR_LIKE(name)                                                    \
	REAL(ssize_t, name, const char *, const char *, void *, size_t)        \
	EXPORT ssize_t name(const char *path, const char *key, void *v, size_t len) \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(map(path, b, sizeof(b)), key, v, len);      \
	}
GETXATTR_LIKE(getxattr)
GETXATTR_LIKE(lgetxattr)

#define LISTXATTR_LIKE(name)                                                   \
	REAL(ssize_t, name, const char *, char *, size_t)                      \
	EXPORT ssize_t name(const char *path, char *list, size_t len)          \
	{                                                                      \
		char b[PATH_MAX];                                              \
		resolve_##name();                                              \
		return real_##name(map(path, b, sizeof(b)), list, len);        \
	}
LISTXATTR_LIKE(listxattr)
LISTXATTR_LIKE(llistxattr)
