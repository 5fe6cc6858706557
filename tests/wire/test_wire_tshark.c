// SPDX-License-Identifier: MIT
/*
 * Wireshark's dissector as an independent decoder: write a pcap (with the
 * urvt_pcap writer) of urvt-built packets of every opcode in the table,
 * IPv4 and IPv6, both directions, run tshark over it and compare every
 * field it prints with what we built. Skips (77) without tshark.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testlib.h"
#include "wire/icrc.h"
#include "wire/pcap.h"

#define MAX_PKTS 160

struct sent {
	struct urvt_pkt f;
	struct urvt_ipinfo ip;
	enum urvt_pcap_dir dir;
	uint32_t icrc;
	uint8_t after_bth[4]; /* the 4 bytes that follow the BTH */
};

static struct sent sent[MAX_PKTS];
static int nsent;
static char path[] = "/tmp/urvt-wire-tshark-XXXXXX";

/* tshark 4.0 does not dissect FLUSH, ATOMIC_WRITE or CNP beyond the BTH;
 * XRC opcodes it names and shows the 4 bytes after the BTH (the XRCETH of a
 * request, the AETH of a response) as raw "vendor" bytes (docs/wire.md). */
static bool tshark_knows(uint8_t op)
{
	return op != URVT_OP_RC_FLUSH && op != URVT_OP_RC_ATOMIC_WRITE && op != URVT_OP_CNP &&
	       urvt_opcode_transport(op) != URVT_TRANSPORT_XRC;
}

static int write_pcap(void)
{
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	close(fd);
	struct urvt_pcap *pc = urvt_pcap_open(path);
	if (!pc)
		return -1;
	for (int op = 0; op < 256; op++) {
		if (!urvt_opcode[op].mask)
			continue;
		for (int v6 = 0; v6 < 2; v6++) {
			struct sent *s = &sent[nsent++];
			uint8_t buf[256];

			tl_ipinfo(&s->ip, v6);
			/* received IPv4 packets carry the recovered ID */
			s->dir = (op + v6) & 1 ? URVT_PCAP_IN : URVT_PCAP_OUT;
			if (s->dir == URVT_PCAP_IN && !v6)
				s->ip.ip_id = (uint16_t)(0x1200 + op);
			tl_fields(&s->f, (uint8_t)op, 10u + (uint32_t)op % 7, (uint64_t)op * 2 + v6);
			size_t n = tl_build(buf, sizeof(buf), &s->f, &s->ip);
			if (!n)
				return -1;
			s->icrc = urvt_icrc_get(buf + n - 4);
			memcpy(s->after_bth, buf + URVT_BTH_BYTES, sizeof(s->after_bth));
			if (urvt_pcap_write(pc, s->dir, &s->ip, buf, n))
				return -1;
		}
	}
	return urvt_pcap_close(pc);
}

static const char *fields[] = {
	"sll.pkttype",
	"ip.id",
	"ip.flags.df",
	"ipv6.plen",
	"udp.dstport",
	"infiniband.bth.opcode",
	"infiniband.bth.destqp",
	"infiniband.bth.psn",
	"infiniband.bth.se",
	"infiniband.bth.padcnt",
	"infiniband.bth.p_key",
	"infiniband.bth.a",
	"infiniband.reth.va", /* also the AtomicETH VA and R_Key */
	"infiniband.reth.r_key",
	"infiniband.reth.dmalen",
	"infiniband.aeth.syndrome",
	"infiniband.aeth.msn",
	"infiniband.atomiceth.swapdt",
	"infiniband.atomiceth.cmpdt",
	"infiniband.atomicacketh.origremdt",
	"infiniband.deth.q_key",
	"infiniband.deth.srcqp",
	"infiniband.immdt",
	"infiniband.ieth",
	"data.len",
	"infiniband.invariant.crc",
	"infiniband.vendor",
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static void expect(int pkt, const char *name, const char *got, const char *want)
{
	if (strcmp(got, want))
		fail_msg("packet %d (opcode %#x) %s: tshark says \"%s\", built \"%s\"", pkt,
			 sent[pkt].f.opcode, name, got, want);
}

static void check_line(int i, char **col)
{
	const struct sent *s = &sent[i];
	const struct urvt_pkt *f = &s->f;
	uint32_t m = urvt_opcode[f->opcode].mask;
	bool v4 = urvt_ipinfo_is_v4(&s->ip), known = tshark_knows(f->opcode);
	char w[64];
	int c = 0;

#define E(...)                                                                             \
	do {                                                                               \
		snprintf(w, sizeof(w), __VA_ARGS__);                                       \
		expect(i, fields[c], col[c], w);                                           \
		c++;                                                                       \
	} while (0)
#define EIF(cond, ...)                                                                     \
	do {                                                                               \
		if (cond)                                                                  \
			E(__VA_ARGS__);                                                    \
		else                                                                       \
			E("%s", "");                                                       \
	} while (0)

	E("%d", s->dir == URVT_PCAP_OUT ? 4 : 0);
	EIF(v4, "0x%04x", s->ip.ip_id);
	EIF(v4, "1");
	EIF(!v4, "%u", 8 + urvt_opcode[f->opcode].length + f->paylen + urvt_pad_for(f->paylen) + 4);
	E("4791");
	E("%u", f->opcode);
	E("0x%06x", f->dest_qpn);
	E("%u", f->psn);
	E("%d", f->se);
	E("%u", urvt_pad_for(f->paylen) * !!(m & URVT_PAYLOAD_MASK));
	E("%u", f->pkey);
	E("%d", f->ackreq);
	if (!known) {
		/* only the BTH; nothing else may show up either */
		for (; c < (int)NFIELDS - 2; c++)
			expect(i, fields[c], col[c], "");
		c++;
		/* the first 4 bytes after it as raw bytes: for XRC the XRCETH
		 * (requests) or the AETH (responses) */
		{
			const uint8_t *a = s->after_bth;
			if (m & URVT_XRCETH_MASK)
				assert_int_equal(urvt_get_be24(a + 1), f->xrc_srqn);
			E("%02x%02x%02x%02x", a[0], a[1], a[2], a[3]);
		}
		return;
	}
	if (m & URVT_ATMETH_MASK) {
		E("0x%016llx", (unsigned long long)f->atmeth.va);
		E("0x%08x", f->atmeth.rkey);
	} else {
		EIF(m & URVT_RETH_MASK, "0x%016llx", (unsigned long long)f->reth.va);
		EIF(m & URVT_RETH_MASK, "0x%08x", f->reth.rkey);
	}
	EIF(m & URVT_RETH_MASK, "%u", f->reth.len);
	EIF(m & URVT_AETH_MASK, "%u", f->aeth.syn);
	EIF(m & URVT_AETH_MASK, "%u", f->aeth.msn);
	EIF(m & URVT_ATMETH_MASK, "%llu", (unsigned long long)f->atmeth.swap_add);
	EIF(m & URVT_ATMETH_MASK, "%llu", (unsigned long long)f->atmeth.comp);
	EIF(m & URVT_ATMACK_MASK, "%llu", (unsigned long long)f->atmack_orig);
	EIF(m & URVT_DETH_MASK, "0x%016llx", (unsigned long long)f->deth.qkey);
	EIF(m & URVT_DETH_MASK, "0x%08x", f->deth.sqp);
	EIF(m & URVT_IMMDT_MASK, "%08x", f->immdt);
	EIF(m & URVT_IETH_MASK, "%08x", f->ieth_rkey);
	/* tshark's Data length includes the pad bytes (roce-wire §5) */
	EIF(m & URVT_PAYLOAD_MASK, "%u", f->paylen + urvt_pad_for(f->paylen));
	/* it shows the 4 ICRC wire bytes read big-endian (roce-wire §9) */
	E("0x%08x", __builtin_bswap32(s->icrc));
	E("%s", "");
#undef E
#undef EIF
}

static void test_tshark_decode(void **state)
{
	(void)state;
	char cmd[4096];
	int len = snprintf(cmd, sizeof(cmd),
			   "tshark -r %s -T fields -E separator='|' -E occurrence=f"
			   /* heuristic payload dissectors would eat our test payloads */
			   " --disable-protocol rpcordma --disable-protocol infiniband.eoib"
			   " --disable-protocol infiniband_sdp --disable-protocol smb_direct"
			   " --disable-protocol iser --disable-protocol nvme-rdma"
			   " --disable-protocol lnet --disable-protocol fcoib --disable-protocol smc",
			   path);
	for (size_t i = 0; i < NFIELDS; i++)
		len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " -e %s", fields[i]);
	snprintf(cmd + len, sizeof(cmd) - (size_t)len, " 2>/dev/null");

	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	char line[2048];
	int i = 0;
	while (fgets(line, sizeof(line), p)) {
		char *col[NFIELDS];
		size_t n = 0;
		char *save = line;
		line[strcspn(line, "\n")] = 0;
		for (char *tok = strsep(&save, "|"); tok && n < NFIELDS; tok = strsep(&save, "|"))
			col[n++] = tok;
		assert_int_equal(n, NFIELDS);
		assert_true(i < nsent);
		check_line(i, col);
		i++;
	}
	assert_int_equal(pclose(p), 0);
	assert_int_equal(i, nsent);
}

int main(void)
{
	if (system("command -v tshark >/dev/null 2>&1")) {
		fprintf(stderr, "tshark not found: skipping\n");
		return 77;
	}
	if (write_pcap()) {
		perror("writing the pcap");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tshark_decode),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (!rc)
		unlink(path);
	else
		fprintf(stderr, "kept %s\n", path);
	return rc;
}
