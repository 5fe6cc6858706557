/*
 * The host-wide rdma_cm port space and the slot in CM IDs (docs/rdmacm.md,
 * docs/host-identity.md), between processes of one host registry: a test
 * registry file (URVT_REGISTRY, a fresh temporary directory), forked
 * children each with a slot of its own. Linked with urvt_rdmacm itself to
 * look inside an id. The parent only directs; A and B are children:
 *
 *   (a) A binds ADDR_A:PORT and listens: the registry names A's slot as the
 *       port's listener; B's bind of ADDR_A:PORT fails EADDRINUSE, of
 *       0.0.0.0:PORT and [::]:PORT EADDRNOTAVAIL (the kernel's
 *       cma_check_port between two ids); A's listener's CM ID has A's slot
 *       as its top byte, B's IDs B's
 *   (b) A destroys its id: B binds ADDR_A:PORT, then listens on
 *       0.0.0.0:PORT, and A's bind of ADDR_A:PORT fails EADDRNOTAVAIL
 *   (c) A listens again and is killed (SIGKILL): B binds the port (reaped)
 *   (d) ephemeral ports: a new A and B bind NEPH ids each on port 0, all
 *       held: no port of one is the other's
 *
 * Exit 0 pass, 1 fail (the failed check printed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/hostreg.h"
#include "rdmacm/cm.h"
#include "rdmacm/cma_priv.h"

#define ADDR_A "127.43.7.1"
#define ADDR_B "127.43.7.2"
#define PORT 7001
#define NEPH 300

static const char *who = "parent";

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "%s: FAIL %s:%d: %s (errno %d %s)\n", who, \
				__FILE__, __LINE__, #c, errno, strerror(errno));   \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

struct child {
	pid_t pid;
	int cmd, reply; /* parent's ends */
};

/* The child's ends of its pipes. */
static int cmd_in = -1, reply_out = -1;

static void put(int fd, const void *buf, size_t len)
{
	CHECK(write(fd, buf, len) == (ssize_t)len);
}

static void get(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		CHECK(n > 0);
		got += (size_t)n;
	}
}

static struct sockaddr_storage addr_of(const char *ip, int port)
{
	struct sockaddr_storage ss = { 0 };

	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		CHECK(inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		CHECK(inet_pton(AF_INET, ip, &s4->sin_addr) == 1);
	}
	return ss;
}

static struct rdma_cm_id *new_id(void)
{
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	return id;
}

/* rdma_bind_addr's errno (0: bound). */
static int bind_errno(struct rdma_cm_id *id, const char *ip, int port)
{
	struct sockaddr_storage ss = addr_of(ip, port);

	errno = 0;
	return rdma_bind_addr(id, (struct sockaddr *)&ss) ? errno : 0;
}

static struct urvt_host *my_host(void)
{
	int err = 0;
	struct urvt_host *h = urvt_host_get(&err);

	if (!h)
		errno = -err;
	CHECK(h);
	return h;
}

/* The registry's listener for ip:port (what the link layer forwards by). */
static uint8_t listener_slot(const char *ip, int port)
{
	uint8_t a16[16] = { [10] = 0xff, [11] = 0xff };

	CHECK(inet_pton(AF_INET, ip, a16 + 12) == 1);
	return urvt_host_port_owner(my_host(), RDMA_PS_TCP, (uint16_t)port, a16);
}

/* A listener's CM ID has the process's slot as its top byte. */
static void check_cm_id_slot(struct rdma_cm_id *id)
{
	struct rdma_id_private *p = to_id_priv(id);

	CHECK(p->cm_id);
	if (p->cm_id->local_id >> 24 != my_host()->my_slot)
		fprintf(stderr, "%s: CM ID %#x, slot %u\n", who, p->cm_id->local_id,
			my_host()->my_slot);
	CHECK(p->cm_id->local_id >> 24 == my_host()->my_slot);
}

static struct rdma_cm_id *listen_on(const char *ip, int port)
{
	struct rdma_cm_id *id = new_id();

	CHECK(bind_errno(id, ip, port) == 0);
	CHECK(rdma_listen(id, 4) == 0);
	check_cm_id_slot(id);
	return id;
}

/* NEPH ephemeral ports on ip, held, sent to the parent. */
static void ephemeral(const char *ip)
{
	uint16_t ports[NEPH];

	for (int i = 0; i < NEPH; i++) {
		struct rdma_cm_id *id = new_id();

		CHECK(bind_errno(id, ip, 0) == 0);
		ports[i] = ntohs(rdma_get_src_port(id));
		CHECK(ports[i] != 0);
	}
	put(reply_out, ports, sizeof(ports));
}

/* ---- process A: serves ADDR_A (its device is there) ---- */
static void run_a(void)
{
	struct rdma_cm_id *l = NULL;
	uint8_t slot = my_host()->my_slot;
	char c;

	put(reply_out, &slot, 1);
	for (;;) {
		get(cmd_in, &c, 1);
		switch (c) {
		case 'L': /* listen on ADDR_A:PORT */
			l = listen_on(ADDR_A, PORT);
			CHECK(listener_slot(ADDR_A, PORT) == slot);
			/* an exact listener: no other address of the port */
			CHECK(listener_slot(ADDR_B, PORT) == 0);
			break;
		case 'D': /* destroy the listener */
			CHECK(l && rdma_destroy_id(l) == 0);
			l = NULL;
			CHECK(listener_slot(ADDR_A, PORT) == 0);
			break;
		case 'W': { /* B holds 0.0.0.0:PORT: ours is refused */
			struct rdma_cm_id *id = new_id();

			CHECK(bind_errno(id, ADDR_A, PORT) == EADDRNOTAVAIL);
			CHECK(rdma_destroy_id(id) == 0);
			break;
		}
		case 'E':
			ephemeral(ADDR_A);
			break;
		default:
			exit(c == 'Q' ? 0 : 1);
		}
		put(reply_out, &c, 1);
	}
}

/* ---- process B: another process of the group (URVT_ADDR=ADDR_B) ---- */
static void run_b(void)
{
	struct rdma_cm_id *l = NULL;
	uint8_t slot = my_host()->my_slot, slot_a;
	char c;

	put(reply_out, &slot, 1);
	for (;;) {
		get(cmd_in, &c, 1);
		switch (c) {
		case 'a': { /* A listens on ADDR_A:PORT */
			struct rdma_cm_id *id = new_id(), *own;

			get(cmd_in, &slot_a, 1);
			CHECK(listener_slot(ADDR_A, PORT) == slot_a);
			CHECK(bind_errno(id, ADDR_A, PORT) == EADDRINUSE);
			CHECK(bind_errno(id, "0.0.0.0", PORT) == EADDRNOTAVAIL);
			CHECK(bind_errno(id, "::", PORT) == EADDRNOTAVAIL);
			CHECK(rdma_destroy_id(id) == 0);
			/* our own CM IDs carry our slot */
			own = listen_on(ADDR_B, PORT + 1);
			CHECK(rdma_destroy_id(own) == 0);
			break;
		}
		case 'b': { /* A destroyed its listener */
			struct rdma_cm_id *id = new_id();

			CHECK(bind_errno(id, ADDR_A, PORT) == 0);
			CHECK(rdma_destroy_id(id) == 0);
			l = listen_on("0.0.0.0", PORT);
			CHECK(listener_slot(ADDR_A, PORT) == slot);
			break;
		}
		case 'u': /* give the wildcard listener up */
			CHECK(l && rdma_destroy_id(l) == 0);
			l = NULL;
			break;
		case 'c': { /* A listened again and was killed */
			struct rdma_cm_id *id = new_id();

			CHECK(bind_errno(id, ADDR_A, PORT) == 0);
			CHECK(listener_slot(ADDR_A, PORT) == 0);
			CHECK(rdma_destroy_id(id) == 0);
			break;
		}
		case 'E':
			ephemeral(ADDR_A);
			break;
		default:
			exit(c == 'Q' ? 0 : 1);
		}
		put(reply_out, &c, 1);
	}
}

static struct child spawn(const char *name, const char *urvt_addr, void (*run)(void))
{
	int to[2], from[2];
	struct child ch;

	CHECK(pipe(to) == 0 && pipe(from) == 0);
	ch.pid = fork();
	CHECK(ch.pid >= 0);
	if (!ch.pid) {
		who = name;
		close(to[1]);
		close(from[0]);
		cmd_in = to[0];
		reply_out = from[1];
		CHECK(setenv("URVT_ADDR", urvt_addr, 1) == 0);
		run();
		exit(0);
	}
	close(to[0]);
	close(from[1]);
	ch.cmd = to[1];
	ch.reply = from[0];
	return ch;
}

/* Send command c (and extra bytes) to ch, wait for its acknowledgement. */
static void order(struct child *ch, char c, const void *extra, size_t len)
{
	char ack;

	put(ch->cmd, &c, 1);
	if (len)
		put(ch->cmd, extra, len);
	get(ch->reply, &ack, 1);
	CHECK(ack == c);
}

/* The NEPH ephemeral ports ch binds (and holds). */
static void ask_ports(struct child *ch, uint16_t *ports)
{
	char ack;

	put(ch->cmd, "E", 1);
	get(ch->reply, ports, NEPH * sizeof(*ports));
	get(ch->reply, &ack, 1);
	CHECK(ack == 'E');
}

static void finish(struct child *ch)
{
	int status;

	put(ch->cmd, "Q", 1);
	CHECK(waitpid(ch->pid, &status, 0) == ch->pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int cmp_port(const void *a, const void *b)
{
	return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

int main(void)
{
	char dir[] = "/tmp/urvt-cm-hostports-XXXXXX", reg[64];
	uint16_t ports_a[NEPH], ports_b[NEPH];
	uint8_t slot_a, slot_b;
	struct child a, b;
	int status;

	signal(SIGPIPE, SIG_IGN);
	CHECK(mkdtemp(dir));
	snprintf(reg, sizeof(reg), "%s/registry", dir);
	CHECK(setenv("URVT_REGISTRY", reg, 1) == 0);
	unsetenv("URVT_SHARE");

	a = spawn("A", "", run_a);
	get(a.reply, &slot_a, 1);
	b = spawn("B", ADDR_B, run_b);
	get(b.reply, &slot_b, 1);
	CHECK(slot_a && slot_b && slot_a != slot_b);

	/* (a), (e) */
	order(&a, 'L', NULL, 0);
	order(&b, 'a', &slot_a, 1);
	/* (b) */
	order(&a, 'D', NULL, 0);
	order(&b, 'b', NULL, 0);
	order(&a, 'W', NULL, 0);
	order(&b, 'u', NULL, 0);
	/* (c) */
	order(&a, 'L', NULL, 0);
	CHECK(kill(a.pid, SIGKILL) == 0);
	CHECK(waitpid(a.pid, &status, 0) == a.pid);
	order(&b, 'c', NULL, 0);
	/* (d): a new A, its device on ADDR_A again */
	a = spawn("A2", "", run_a);
	get(a.reply, &slot_a, 1);
	CHECK(slot_a && slot_a != slot_b);
	ask_ports(&a, ports_a);
	ask_ports(&b, ports_b);
	qsort(ports_a, NEPH, sizeof(ports_a[0]), cmp_port);
	qsort(ports_b, NEPH, sizeof(ports_b[0]), cmp_port);
	for (int i = 0, j = 0; i < NEPH && j < NEPH;) {
		if (ports_a[i] == ports_b[j])
			fprintf(stderr, "port %u is both A's and B's\n", ports_a[i]);
		CHECK(ports_a[i] != ports_b[j]);
		if (ports_a[i] < ports_b[j])
			i++;
		else
			j++;
	}
	finish(&a);
	finish(&b);
	unlink(reg);
	rmdir(dir);
	printf("cm_hostports: slots %u and %u, all checks passed\n", slot_a, slot_b);
	return 0;
}
