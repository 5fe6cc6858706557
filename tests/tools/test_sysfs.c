/*
 * liburvt-sysfs.so (tools/urvt-sysfs.c) as a program sees it through
 * urvt-run: urvt0 under /sys/class/infiniband and /dev/infiniband through
 * every wrapped call, the GID type UCX reads, the ndev of URVT_ADDR /
 * URVT_NETDEV, and every other path untouched.
 *
 *   test_sysfs [NDEV]   NDEV: the interface ndevs/0 must name (default lo)
 *   test_sysfs off      URVT_SYSFS=0: none of it is there
 *
 * Exit 0 pass, 1 fail.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static int failures;

#define CHECK(c)                                                                          \
	do {                                                                               \
		if (!(c)) {                                                                \
			fprintf(stderr, "%s:%d: CHECK(%s) failed (errno %d)\n", __FILE__,  \
				__LINE__, #c, errno);                                      \
			failures++;                                                        \
		}                                                                          \
	} while (0)

#define IB "/sys/class/infiniband"
#define PORT IB "/urvt0/ports/1"
#define TYPE0 PORT "/gid_attrs/types/0"
#define NDEV0 PORT "/gid_attrs/ndevs/0"
#define UVERBS "/dev/infiniband/uverbs-urvt0"

/* The first line of PATH read with open(2), or "" */
static const char *read_open(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	buf[0] = 0;
	if (fd < 0)
		return buf;
	n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return buf;
}

/* ... with fopen(3), as ucs_read_file does not but hwloc and others do */
static const char *read_fopen(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");

	buf[0] = 0;
	if (!f)
		return buf;
	if (!fgets(buf, (int)len, f))
		buf[0] = 0;
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return buf;
}

static void test_on(const char *ndev)
{
	char buf[256], path[PATH_MAX];
	struct stat st;
	struct dirent *e;
	DIR *d;
	int n = 0, fd, root;

	/* UCX's uct_ib_device_is_accessible */
	CHECK(stat(UVERBS, &st) == 0 && S_ISCHR(st.st_mode));
	CHECK(access(UVERBS, R_OK | W_OK) == 0);
	CHECK(faccessat(AT_FDCWD, UVERBS, R_OK | W_OK, 0) == 0);
	/* nothing to talk to behind it */
	errno = 0;
	CHECK(open(UVERBS, O_RDWR) < 0 && errno == ENXIO);
	CHECK(stat("/dev/infiniband/rdma_cm", &st) < 0 && errno == ENOENT);
	errno = 0;
	CHECK(open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC) < 0 && errno == ENOENT);

	/* the GID type and its netdev, through open and fopen */
	CHECK(!strcmp(read_open(TYPE0, buf, sizeof(buf)), "RoCE v2"));
	CHECK(!strcmp(read_fopen(TYPE0, buf, sizeof(buf)), "RoCE v2"));
	CHECK(!strcmp(read_open(NDEV0, buf, sizeof(buf)), ndev));
	CHECK(!strcmp(read_fopen(NDEV0, buf, sizeof(buf)), ndev));
	errno = 0;
	CHECK(open(NDEV0, O_WRONLY) < 0 && errno == EACCES);
	/* the installed tree is never written, not even by root */
	errno = 0;
	CHECK(open(TYPE0, O_WRONLY | O_TRUNC) < 0 && errno == EACCES);
	errno = 0;
	CHECK(open(IB "/urvt0/new", O_WRONLY | O_CREAT, 0644) < 0 && errno == EACCES);
	errno = 0;
	CHECK(fopen(TYPE0, "a") == NULL && errno == EACCES);
	CHECK(!strcmp(read_open(PORT "/link_layer", buf, sizeof(buf)), "Ethernet"));
	CHECK(!strcmp(read_open(PORT "/state", buf, sizeof(buf)), "4: ACTIVE"));
	CHECK(!strcmp(read_open("/sys/class/infiniband_verbs/uverbs-urvt0/ibdev", buf,
				sizeof(buf)), "urvt0"));
	CHECK(stat(NDEV0, &st) == 0 && S_ISREG(st.st_mode));
	CHECK(lstat(TYPE0, &st) == 0 && S_ISREG(st.st_mode));
	/* gids/0 only when URVT_ADDR says which address (here an IPv4 one) */
	const char *addr = getenv("URVT_ADDR");
	if (addr) {
		unsigned char a[4] = { 0 };
		char want[64];
		CHECK(inet_pton(AF_INET, addr, a) == 1);
		snprintf(want, sizeof(want), "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", a[0],
			 a[1], a[2], a[3]);
		CHECK(!strcmp(read_open(PORT "/gids/0", buf, sizeof(buf)), want));
	} else {
		errno = 0;
		CHECK(stat(PORT "/gids/0", &st) < 0 && errno == ENOENT);
	}
	/* device/net/<ndev>: the interface's own sysfs directory */
	char net[PATH_MAX], ifindex[PATH_MAX], real_ifindex[64];
	snprintf(net, sizeof(net), IB "/urvt0/device/net/%s", ndev);
	snprintf(ifindex, sizeof(ifindex), "/sys/class/net/%s/ifindex", ndev);
	CHECK(lstat(net, &st) == 0 && S_ISLNK(st.st_mode));
	if (read_open(ifindex, real_ifindex, sizeof(real_ifindex))[0]) {
		snprintf(net, sizeof(net), IB "/urvt0/device/net/%s/ifindex", ndev);
		CHECK(!strcmp(read_open(net, buf, sizeof(buf)), real_ifindex));
	}
	n = 0;
	d = opendir(IB "/urvt0/device/net");
	CHECK(d != NULL);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			CHECK(!strcmp(e->d_name, ndev));
			n++;
		}
	if (d)
		closedir(d);
	CHECK(n == 1);
	n = 0;

	/* the class lists urvt0 and nothing else */
	d = opendir(IB);
	CHECK(d != NULL);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			CHECK(!strcmp(e->d_name, "urvt0"));
			n++;
		}
	if (d)
		closedir(d);
	CHECK(n == 1);

	/* relative to a directory fd, as hwloc looks (openat on its fs root) */
	root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(root >= 0);
	fd = openat(root, "sys/class/infiniband/urvt0/ports/1/gid_attrs/types/0", O_RDONLY);
	CHECK(fd >= 0);
	if (fd >= 0) {
		ssize_t r = read(fd, buf, sizeof(buf));
		CHECK(r == 8 && !memcmp(buf, "RoCE v2\n", 8));
		close(fd);
	}
	CHECK(fstatat(root, "dev/infiniband/uverbs-urvt0", &st, 0) == 0 && S_ISCHR(st.st_mode));
	close(root);

	/* the view's paths resolve to themselves */
	CHECK(realpath(IB "/urvt0", path) && !strcmp(path, IB "/urvt0"));
	errno = 0;
	CHECK(readlink(IB "/urvt0", buf, sizeof(buf)) < 0 && errno == EINVAL);
	CHECK(lgetxattr(TYPE0, "user.none", buf, sizeof(buf)) < 0 && errno != ENOENT);
}

static void test_off(void)
{
	struct stat st;

	errno = 0;
	CHECK(stat(UVERBS, &st) < 0 && errno == ENOENT);
	CHECK(access(TYPE0, R_OK) < 0);
	CHECK(opendir(IB) == NULL || access("/sys/class/infiniband/urvt0", F_OK) < 0);
}

int main(int argc, char **argv)
{
	char buf[64];
	struct stat st;

	if (argc > 1 && !strcmp(argv[1], "off"))
		test_off();
	else
		test_on(argc > 1 ? argv[1] : "lo");
	/* everything else is the real thing */
	CHECK(stat("/proc/self/status", &st) == 0 && S_ISREG(st.st_mode));
	CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
	CHECK(strlen(read_open("/proc/sys/kernel/ostype", buf, sizeof(buf))) > 0);
	CHECK(!strcmp(read_fopen("/proc/sys/kernel/ostype", buf, sizeof(buf)), "Linux"));
	CHECK(access("/sys/class/net/lo", F_OK) == 0);
	printf("%s: %d failure(s)\n", argv[0], failures);
	return failures ? 1 : 0;
}
