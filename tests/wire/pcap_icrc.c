// SPDX-License-Identifier: MIT
/*
 * pcap_icrc FILE [MIN]: recompute the ICRC of every RoCEv2 packet (UDP port
 * 4791) in a capture from the captured IP header itself and compare it with
 * the 4 bytes on the wire. Prints the count per opcode; exits 0 if at least
 * MIN (default 1) packets were checked and all matched, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcapread.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

int main(int argc, char **argv)
{
	struct pcapr r;
	struct pcapr_pkt p;
	unsigned long per_op[256] = { 0 }, checked = 0, bad = 0;
	long min = argc > 2 ? atol(argv[2]) : 1;
	int rc;

	if (argc < 2 || pcapr_open(&r, argv[1]))
		return 1;
	while ((rc = pcapr_next(&r, &p)) == 1) {
		const uint8_t *ip = p.ip, *udp;
		size_t ihl, iplen;

		if (!ip || p.len < 20)
			continue;
		if ((ip[0] >> 4) == 4) {
			ihl = (size_t)(ip[0] & 15) * 4;
			iplen = (size_t)ip[2] << 8 | ip[3];
			if (ip[9] != 17)
				continue;
		} else if ((ip[0] >> 4) == 6 && p.len >= 40) {
			ihl = 40;
			iplen = 40 + ((size_t)ip[4] << 8 | ip[5]);
			if (ip[6] != 17)
				continue;
		} else {
			continue;
		}
		if (iplen > p.len || iplen < ihl + 8 + 16)
			continue;
		udp = ip + ihl;
		if ((udp[2] << 8 | udp[3]) != 4791 && (udp[0] << 8 | udp[1]) != 4791)
			continue;
		uint32_t want = urvt_icrc_get(ip + iplen - 4);
		uint32_t got = urvt_icrc_ip(ip, iplen - 4);
		checked++;
		per_op[udp[8]]++;
		if (want != got) {
			bad++;
			if (bad <= 10)
				fprintf(stderr, "packet %lu (opcode %#x, %zu bytes): ICRC on wire %#x, "
					"recomputed %#x\n", checked, udp[8], iplen, want, got);
		}
	}
	pcapr_close(&r);
	for (int op = 0; op < 256; op++)
		if (per_op[op])
			printf("  %-40s %lu\n", urvt_opcode[op].name ? urvt_opcode[op].name : "?",
			       per_op[op]);
	printf("%lu RoCEv2 packets, ICRC recomputed from the captured IP header: %lu match, "
	       "%lu differ\n", checked, checked - bad, bad);
	return rc < 0 || bad || (long)checked < min ? 1 : 0;
}
