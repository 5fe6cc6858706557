// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <string.h>

#include "pcapread.h"
#include "rxe_check.h"
#include "wire/aeth.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/ip.h"

struct rxe_file {
	const char *name;
	int total;
	int count[256]; /* expected packets per opcode */
};

/* shared/vectors/rxe/README.md, opcodes in decimal */
static const struct rxe_file files[] = {
	{ "rc.pcap", 20, { [4] = 10, [17] = 10 } },
	{ "ud.pcap", 10, { [100] = 10 } },
	{ "uc.pcap", 10, { [36] = 10 } },
	{ "srq.pcap", 24, { [4] = 12, [17] = 12 } },
	{ "send_bw.pcap", 10, { [4] = 5, [17] = 5 } },
	{ "write_bw.pcap", 10, { [10] = 5, [17] = 5 } },
	{ "write_lat.pcap", 20, { [10] = 10, [17] = 10 } },
	{ "read_bw.pcap", 10, { [12] = 5, [16] = 5 } },
	{ "atomic_bw.pcap", 10, { [20] = 5, [18] = 5 } },
	{ "cmpswap.pcap", 10, { [19] = 5, [18] = 5 } },
	{ "rc_big.pcap", 16, { [0] = 4, [1] = 4, [2] = 4, [17] = 4 } },
	{ "write_big.pcap", 20, { [6] = 5, [7] = 5, [8] = 5, [17] = 5 } },
	{ "read_big.pcap", 20, { [12] = 5, [13] = 5, [14] = 5, [15] = 5 } },
	{ "uc_write_bw.pcap", 5, { [42] = 5 } },
	{ "ud_send_bw.pcap", 5, { [100] = 5 } },
	{ "rnr.pcap", 92, { [4] = 64, [17] = 28 } },
	{ "rping.pcap", 41, { [100] = 5, [4] = 12, [10] = 3, [12] = 3, [16] = 3, [17] = 15 } },
	{ "interop_ud_host_peer.pcap", 10, { [100] = 10 } },
};

#define FAIL(...)                                                                          \
	do {                                                                               \
		fprintf(stderr, __VA_ARGS__);                                              \
		fails++;                                                                   \
	} while (0)

static int check_packet(const char *fname, int idx, const uint8_t *ipkt, size_t len,
			struct urvt_pkt *p, int *nonzero_id)
{
	struct urvt_ipinfo ip;
	const uint8_t *roce;
	size_t rlen;
	int fails = 0, rc;
	uint8_t copy[9000];

	rc = urvt_ip_parse(ipkt, len, &ip, &roce, &rlen);
	if (rc) {
		FAIL("%s #%d: IP parse: %s\n", fname, idx, urvt_wire_drop_str(rc));
		return fails;
	}
	if (ip.dport != URVT_ROCE_UDP_PORT || !urvt_ipinfo_is_v4(&ip))
		FAIL("%s #%d: dport %u\n", fname, idx, ip.dport);
	rc = urvt_pkt_parse(roce, rlen, p);
	if (rc) {
		FAIL("%s #%d: parse: %s\n", fname, idx, urvt_wire_drop_str(rc));
		return fails;
	}
	/* ICRC with the full header as captured (roce-wire §9) */
	size_t iplen = (size_t)(roce - ipkt) + rlen;
	if (urvt_icrc_ip(ipkt, iplen - 4) != p->icrc)
		FAIL("%s #%d: ICRC (captured header) mismatch\n", fname, idx);
	if (urvt_icrc_check(&ip, roce, rlen, 0))
		FAIL("%s #%d: ICRC (known ID) mismatch\n", fname, idx);

	/* as a UDP socket sees it: ID unknown */
	uint16_t true_id = ip.ip_id;
	bool true_df = ip.df;
	*nonzero_id += true_id != 0;
	ip.ip_id = 0;
	if (urvt_icrc_check(&ip, roce, rlen, URVT_ICRC_V4_ID_UNKNOWN))
		FAIL("%s #%d: unknown-ID verifier rejected a good packet\n", fname, idx);
	else if (ip.ip_id != true_id || ip.df != true_df)
		FAIL("%s #%d: recovered ID %#x DF %d, captured %#x DF %d\n", fname, idx, ip.ip_id,
		     ip.df, true_id, true_df);

	/* one payload byte flipped (a header byte if there is no payload) */
	if (rlen > sizeof(copy))
		return fails + 1;
	memcpy(copy, roce, rlen);
	size_t off = p->paylen ? p->hdr_len + p->paylen / 2 : 11;
	copy[off] ^= 0x5a;
	if (urvt_icrc_v4_verify_unknown_id(urvt_gid_to_v4(ip.sgid), urvt_gid_to_v4(ip.dgid),
					   ip.sport, ip.dport, copy, rlen, 0, NULL, NULL))
		FAIL("%s #%d: unknown-ID verifier accepted a corrupted packet\n", fname, idx);
	return fails;
}

int rxe_check_all(const char *dir, int *npackets)
{
	int fails = 0, total = 0, nonzero_id = 0;
	int syn_rnr = 0, syn_nak_seq = 0, syn_ack = 0, gsi = 0;

	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		char path[4096];
		struct pcapr r;
		struct pcapr_pkt pp;
		int seen[256] = { 0 }, n = 0, rc;

		snprintf(path, sizeof(path), "%s/%s", dir, files[f].name);
		if (pcapr_open(&r, path)) {
			FAIL("%s: cannot open\n", path);
			continue;
		}
		while ((rc = pcapr_next(&r, &pp)) == 1) {
			struct urvt_pkt p;
			memset(&p, 0, sizeof(p));
			if (!pp.ip) {
				FAIL("%s #%d: not IP\n", files[f].name, n);
				n++;
				continue;
			}
			fails += check_packet(files[f].name, n, pp.ip, pp.len, &p, &nonzero_id);
			seen[p.opcode]++;
			n++;
			if (p.opcode == URVT_OP_RC_ACKNOWLEDGE && !strcmp(files[f].name, "rnr.pcap")) {
				syn_rnr += p.aeth.syn == 0x2c;
				syn_nak_seq += p.aeth.syn == 0x60;
				syn_ack += urvt_aeth_syn_type(p.aeth.syn) == URVT_AETH_ACK;
			}
			if (!strcmp(files[f].name, "rping.pcap") && p.opcode == URVT_OP_UD_SEND_ONLY)
				gsi += p.dest_qpn == 1 && p.deth.qkey == URVT_GSI_QKEY;
		}
		if (rc < 0)
			FAIL("%s: malformed pcap\n", files[f].name);
		pcapr_close(&r);
		if (n != files[f].total)
			FAIL("%s: %d packets, README says %d\n", files[f].name, n, files[f].total);
		for (int op = 0; op < 256; op++)
			if (seen[op] != files[f].count[op])
				FAIL("%s: opcode %d seen %d times, README says %d\n", files[f].name, op,
				     seen[op], files[f].count[op]);
		total += n;
	}
	if (syn_rnr != 6 || syn_nak_seq != 6 || syn_ack != 16)
		FAIL("rnr.pcap: AETH RNR %d NAK-seq %d ACK %d, README says 6/6/16\n", syn_rnr,
		     syn_nak_seq, syn_ack);
	if (gsi != 5)
		FAIL("rping.pcap: %d UD sends to QP1 with the GSI Q_Key, README says 5\n", gsi);
	/* rxe writes non-zero IDs (README); the recovery must have had work to do */
	if (nonzero_id < total / 2)
		FAIL("only %d of %d packets have a non-zero IPv4 ID\n", nonzero_id, total);
	*npackets = total;
	return fails;
}
