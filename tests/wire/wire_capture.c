// SPDX-License-Identifier: MIT
/*
 * Proof from a capture that the ICRC urvt puts on IPv4 packets is right for
 * the IP header the kernel really writes (docs/wire.md, roce-wire §1.3):
 * packets of every opcode are built with the encoder, sent from an
 * UNCONNECTED UDP socket with IP_PMTUDISC_DO on 127.0.0.1 while dumpcap
 * captures lo; each captured packet must have ID 0 + DF, its ICRC recomputed
 * from the captured IP header must equal the one sent, and the receive-side
 * unknown-ID verifier must accept what the receiving socket got and recover
 * ID 0. Then the rxe captures are checked the same way (rxe_check.c).
 *
 * Only 127.0.0.0/8 is used. Exit 0 pass, 1 fail, 77 skip (not root, no dumpcap).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pcapread.h"
#include "rxe_check.h"
#include "testlib.h"
#include "wire/hdr.h"
#include "wire/icrc.h"

#define MAXPKT 128

static const uint32_t paylens[] = { 0, 1, 13, 256, 1024, 4096 };

struct sent {
	uint8_t buf[4200];
	size_t len;
};

static struct sent sent[MAXPKT * 6];
static int nsent, fails;

#define FAIL(...)                                                                          \
	do {                                                                               \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                                     \
		fails++;                                                                   \
	} while (0)

static int udp_socket(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int on = 1, pmtu = IP_PMTUDISC_DO;

	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(s, (struct sockaddr *)&a, &al))
		return -1;
	/* DF on every datagram; with an unconnected socket Linux then writes ID 0 */
	setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
	setsockopt(s, IPPROTO_IP, IP_PKTINFO, &on, sizeof(on));
	*port = ntohs(a.sin_port);
	return s;
}

static pid_t start_dumpcap(uint16_t port, const char *file, const char *log)
{
	char filter[64];

	snprintf(filter, sizeof(filter), "udp port %u", port);
	pid_t pid = fork();
	if (pid == 0) {
		/* stderr to a file, not a pipe: dumpcap must be able to report at exit */
		int lfd = open(log, O_WRONLY | O_TRUNC);
		if (lfd < 0)
			_exit(127);
		dup2(lfd, 2);
		execlp("dumpcap", "dumpcap", "-q", "-i", "lo", "-f", filter, "-P", "-w", file,
		       (char *)NULL);
		_exit(127);
	}
	/* dumpcap reports "Capturing on ..." once the filter is installed */
	char buf[4096] = "";
	for (int i = 0; i < 200; i++) {
		FILE *f = fopen(log, "r");
		size_t got = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f)
			fclose(f);
		buf[got] = 0;
		if (strstr(buf, "Capturing on"))
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			break;
		usleep(50 * 1000);
	}
	fprintf(stderr, "dumpcap did not start: %s\n", buf);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return -1;
}

static void receive_and_verify(int rs, int expect)
{
	for (int i = nsent - 1; i < nsent - 1 + expect; i++) {
		uint8_t buf[9000], cbuf[256];
		struct sockaddr_in from;
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov,
				     .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		struct pollfd p = { .fd = rs, .events = POLLIN };

		if (poll(&p, 1, 2000) <= 0) {
			FAIL("receiver did not get datagram %d\n", i);
			return;
		}
		ssize_t n = recvmsg(rs, &mh, 0);
		struct in_addr dst = { 0 };
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO)
				dst = ((struct in_pktinfo *)CMSG_DATA(c))->ipi_addr;
		struct urvt_ipinfo ip;
		struct sockaddr_in me;
		socklen_t ml = sizeof(me);
		getsockname(rs, (struct sockaddr *)&me, &ml);
		/* what a UDP socket knows: addresses, ports, length; not the ID */
		urvt_ipinfo_v4(&ip, from.sin_addr.s_addr, dst.s_addr, ntohs(from.sin_port),
			       ntohs(me.sin_port));
		ip.ip_id = 0xffff;
		ip.df = false;
		int rc = urvt_icrc_check(&ip, buf, (size_t)n, URVT_ICRC_V4_ID_UNKNOWN | URVT_ICRC_DF_ANY);
		if (rc)
			FAIL("received datagram %d: %s\n", i, urvt_wire_drop_str(rc));
		else if (ip.ip_id != 0 || !ip.df)
			FAIL("received datagram %d: recovered ID %#x DF %d, expected 0 / DF\n", i,
			     ip.ip_id, ip.df);
	}
}

int main(void)
{
	if (geteuid() != 0 || system("command -v dumpcap >/dev/null 2>&1")) {
		fprintf(stderr, "capture needs root and dumpcap: skipping\n");
		return 77;
	}
	uint16_t sport, dport;
	int ss = udp_socket(&sport), rs = udp_socket(&dport);
	if (ss < 0 || rs < 0) {
		perror("socket");
		return 1;
	}
	char file[] = "/tmp/urvt-wire-capture-XXXXXX";
	char log[] = "/tmp/urvt-wire-dumpcap-XXXXXX";
	int fd = mkstemp(file), lfd = mkstemp(log);
	if (fd < 0 || lfd < 0)
		return 1;
	close(fd);
	close(lfd);
	pid_t dc = start_dumpcap(dport, file, log);
	unlink(log);
	if (dc < 0)
		return 77; /* capture impossible here (no lo capture permission, ...) */

	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(dport),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct urvt_ipinfo ip;
	urvt_ipinfo_v4(&ip, htonl(INADDR_LOOPBACK), htonl(INADDR_LOOPBACK), sport, dport);
	for (int op = 0; op < 256; op++) {
		if (!urvt_opcode[op].mask)
			continue;
		for (size_t k = 0; k < sizeof(paylens) / sizeof(paylens[0]); k++) {
			struct urvt_pkt f;
			struct sent *s = &sent[nsent];
			tl_fields(&f, (uint8_t)op, paylens[k], (uint64_t)op * 7 + k);
			s->len = tl_build(s->buf, sizeof(s->buf), &f, &ip);
			if (!s->len) {
				FAIL("build opcode %#x\n", op);
				continue;
			}
			if (sendto(ss, s->buf, s->len, 0, (struct sockaddr *)&to, sizeof(to)) !=
			    (ssize_t)s->len)
				FAIL("sendto: %s\n", strerror(errno));
			nsent++;
			receive_and_verify(rs, 1);
			if (!(urvt_opcode[op].mask & URVT_PAYLOAD_MASK))
				break;
		}
	}
	usleep(300 * 1000);
	kill(dc, SIGINT);
	waitpid(dc, NULL, 0);

	struct pcapr r;
	struct pcapr_pkt pp;
	int n = 0, rc;
	if (pcapr_open(&r, file))
		return 1;
	while ((rc = pcapr_next(&r, &pp)) == 1) {
		struct urvt_ipinfo cip;
		const uint8_t *roce;
		size_t rlen;
		if (!pp.ip || urvt_ip_parse(pp.ip, pp.len, &cip, &roce, &rlen)) {
			FAIL("captured frame %d is not IPv4/UDP\n", n);
			n++;
			continue;
		}
		if (n >= nsent || rlen != sent[n].len || memcmp(roce, sent[n].buf, rlen)) {
			FAIL("captured frame %d is not the datagram sent\n", n);
			n++;
			continue;
		}
		if (cip.ip_id != 0 || !cip.df)
			FAIL("frame %d: kernel wrote ID %#x DF %d (need ID 0 + DF)\n", n, cip.ip_id,
			     cip.df);
		/* ICRC recomputed from the IP header as captured */
		size_t iplen = (size_t)(roce - pp.ip) + rlen;
		if (urvt_icrc_ip(pp.ip, iplen - 4) != urvt_icrc_get(roce + rlen - 4))
			FAIL("frame %d: ICRC does not match the captured IP header\n", n);
		n++;
	}
	pcapr_close(&r);
	if (rc < 0)
		FAIL("malformed capture\n");
	if (n != nsent)
		FAIL("captured %d of %d packets\n", n, nsent);
	printf("captured %d/%d urvt packets: IPv4 ID 0 + DF, ICRC matches the wire header\n", n,
	       nsent);

	int nrxe = 0;
	int rf = rxe_check_all(URVT_RXE_DIR, &nrxe);
	if (rf || nrxe != RXE_TOTAL_PACKETS)
		FAIL("rxe captures: %d failures, %d packets\n", rf, nrxe);
	else
		printf("rxe: %d packets accepted with unknown ID, IDs recovered, flips rejected\n",
		       nrxe);
	if (!fails)
		unlink(file);
	else
		fprintf(stderr, "kept %s\n", file);
	return fails ? 1 : 0;
}
