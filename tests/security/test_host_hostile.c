/*
 * The host registry and the shared socket under attack
 * (docs/host-identity.md, docs/security.md):
 * - a registry file others can read, a symlink in its place, or one that
 *   is not ours: refused, the process runs unshared;
 * - a damaged table (bad magic, wild indexes, a slot naming a live process
 *   that is not ours): reset or reaped, never a crash;
 * - a forwarded datagram from another user's process: dropped (the
 *   credentials are checked); the same from our own user: delivered;
 * - a datagram whose QPN names a slot outside our address's group is never
 *   forwarded (our transport refuses the unknown QPN).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/hostreg.h"
#include "link/udp.h"
#include "link/udp_share.h"
#include "wire/hdr.h"
#include "wire/ip.h"

static char reg_path[128];

/* A registry file in a given state; returns what urvt_host_get says in a
 * child (a parent that already has a registry keeps it). */
static int get_in_child(void)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		int err = 0;
		struct urvt_host *h = urvt_host_get(&err);
		_exit(h ? 0 : (-err) & 0x7f);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return -WEXITSTATUS(st);
}

static void test_file_refused(void **state)
{
	(void)state;
	unlink(reg_path);
	/* readable by others: refused */
	int fd = open(reg_path, O_CREAT | O_RDWR, 0644);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, 0644), 0);
	close(fd);
	assert_int_equal(get_in_child(), -EPERM);
	unlink(reg_path);
	/* a symlink planted where the file goes: not followed */
	assert_int_equal(symlink("/tmp/urvt-test-elsewhere", reg_path), 0);
	assert_true(get_in_child() < 0);
	unlink(reg_path);
	unlink("/tmp/urvt-test-elsewhere");
	/* a directory: refused */
	assert_int_equal(mkdir(reg_path, 0700), 0);
	assert_true(get_in_child() < 0);
	rmdir(reg_path);
	/* fresh: fine */
	assert_int_equal(get_in_child(), 0);
}

static struct urvt_host_table *map_table(int *fd)
{
	void *m;

	*fd = open(reg_path, O_RDWR);
	assert_true(*fd >= 0);
	m = mmap(NULL, sizeof(struct urvt_host_table), PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	assert_true(m != MAP_FAILED);
	return m;
}

static void test_damaged_table(void **state)
{
	struct urvt_host_table *t;
	int fd;
	(void)state;

	unlink(reg_path);
	assert_int_equal(get_in_child(), 0);
	t = map_table(&fd);
	/* wrong magic: the next process starts the table afresh */
	t->magic = 0x4141414141414141ull;
	assert_int_equal(get_in_child(), 0);
	assert_int_not_equal(t->magic, 0x4141414141414141ull);
	/* wild entries: live pids that are not what the slot says, indexes
	 * and slots out of range, ports of nobody */
	for (unsigned s = 1; s < URVT_HOST_SLOTS; s++) {
		atomic_store(&t->slot[s].pid, s % 2 ? 1 : (int32_t)getpid());
		t->slot[s].start = 12345;
		t->slot[s].index = (int32_t)(s * 7919u);
		memset(t->slot[s].group, (int)s, 16);
	}
	for (unsigned i = 0; i < URVT_HOST_PORTS; i++)
		t->port[i] = (struct urvt_host_port){ .flags = 0xff, .slot = (uint8_t)i,
						      .ps = 0x106, .port = (uint16_t)i };
	/* every slot was taken by a dead or foreign entry: all reaped, one claimed */
	assert_int_equal(get_in_child(), 0);
	for (unsigned s = 2; s < URVT_HOST_SLOTS; s++)
		assert_int_equal(atomic_load(&t->slot[s].pid), 0);
	for (unsigned i = 0; i < URVT_HOST_PORTS; i++)
		assert_int_equal(t->port[i].flags, 0);
	munmap(t, sizeof(*t));
	close(fd);
}

/* A shared link on addr (a registry of its own in reg_path). */
static struct urvt_link *open_shared(const char *addr, uint64_t *ctrs)
{
	struct urvt_udp_cfg cfg = { .addr = addr };
	struct urvt_link *l;
	int err = 0;

	l = urvt_udp_open(&cfg, &err);
	assert_non_null(l);
	assert_true(l->info.slot >= 1);
	assert_non_null(l->ops->count_into);
	l->ops->count_into(l, ctrs);
	return l;
}

static int recv_some(struct urvt_link *l, struct urvt_link_rx *rx, unsigned max)
{
	int n = 0;

	for (int tries = 0; tries < 20 && !n; tries++) {
		struct pollfd pfd = { .fd = l->wake_fd, .events = POLLIN };
		poll(&pfd, 1, 10);
		n = urvt_link_recv(l, rx, max);
	}
	return n;
}

/* Forward pkt to the process in slot, as a member would (the name is
 * taken before a caller changes its uid). Returns 0 or -errno. */
static int send_forward(const struct sockaddr_un *sun, socklen_t len, const uint8_t *pkt,
			uint32_t n)
{
	struct urvt_udp_fwd_hdr h = { .magic = URVT_UDP_FWD_MAGIC };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)pkt, n } };
	struct msghdr m = { .msg_name = (void *)sun, .msg_namelen = len, .msg_iov = iov,
			    .msg_iovlen = 2 };
	int fd = socket(AF_UNIX, SOCK_DGRAM, 0), ret;

	if (fd < 0)
		return -errno;
	ret = sendmsg(fd, &m, 0) > 0 ? 0 : -errno;
	close(fd);
	return ret;
}

static void test_forwarding(void **state)
{
	uint64_t ctrs[3] = { 0 };
	struct urvt_link_rx rx[8];
	uint8_t pkt[64] = { 0 };
	struct urvt_link *l;
	struct urvt_host *h;
	int err = 0, sock;
	struct sockaddr_un sun;
	socklen_t sunlen;
	uint8_t slot;
	(void)state;

	unlink(reg_path);
	l = open_shared("127.0.0.78", ctrs);
	slot = l->info.slot;
	h = urvt_host_get(&err);
	assert_non_null(h);
	urvt_udp_fwd_name(&sun, &sunlen, h->ino, slot, (int32_t)getpid());
	assert_int_equal(h->my_slot, slot);

	/* a BTH (UD SEND ONLY) to one of our QPNs */
	pkt[0] = 0x64;
	pkt[5] = slot;
	pkt[7] = 5;
	/* another user forwards it to us: dropped, whatever it claims */
	if (geteuid() == 0) {
		pid_t pid = fork();
		int st;
		assert_true(pid >= 0);
		if (pid == 0) {
			if (setgid(65534) || setuid(65534))
				_exit(3);
			_exit(send_forward(&sun, sunlen, pkt, sizeof(pkt)) ? 4 : 0);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		atomic_fetch_add(&h->t->slot[slot].fwd_posted, 1);
		assert_int_equal(recv_some(l, rx, 8), 0);
		assert_int_equal(ctrs[1], 0);
	}
	/* the same from our own user: delivered, as sent */
	assert_int_equal(send_forward(&sun, sunlen, pkt, sizeof(pkt)), 0);
	atomic_fetch_add(&h->t->slot[slot].fwd_posted, 1);
	assert_int_equal(recv_some(l, rx, 8), 1);
	assert_int_equal(rx[0].len, sizeof(pkt));
	assert_memory_equal(rx[0].data, pkt, sizeof(pkt));
	assert_int_equal(ctrs[1], 1);

	/* a datagram to a QPN of a slot that is no member of our address's
	 * group: nobody to forward it to; ours to refuse (the transport drops
	 * an unknown QPN), never forwarded */
	sock = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(sock >= 0);
	{
		struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(4791) };
		inet_pton(AF_INET, "127.0.0.78", &to.sin_addr);
		pkt[5] = (uint8_t)(slot == URVT_HOST_LAST_SLOT ? 1 : slot + 1);
		assert_true(sendto(sock, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)) > 0);
		assert_int_equal(recv_some(l, rx, 8), 1);
		assert_int_equal(ctrs[0], 0);
		assert_int_equal(ctrs[2], 0);
		/* and one to our slot comes through the socket itself */
		pkt[5] = slot;
		assert_true(sendto(sock, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)) > 0);
		assert_int_equal(recv_some(l, rx, 8), 1);
	}
	close(sock);
	urvt_link_close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_file_refused),
		cmocka_unit_test(test_damaged_table),
		cmocka_unit_test(test_forwarding),
	};
	int ret;

	snprintf(reg_path, sizeof(reg_path), "/tmp/urvt-test-hostile-reg-%d", (int)getpid());
	setenv("URVT_REGISTRY", reg_path, 1);
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(reg_path);
	return ret;
}
