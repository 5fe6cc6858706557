// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the wire decoder: the input is tried as a UDP
 * payload (BTH .. ICRC) and as a whole IP packet. Parsed packets are
 * rebuilt and re-parsed (same fields), and every ICRC routine runs over the
 * bytes. ASan/UBSan catch any read out of bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/ip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roce(const uint8_t *data, size_t size, const struct urvt_ipinfo *ip)
{
	struct urvt_pkt p, q;
	static uint8_t buf[70000];

	if (urvt_pkt_parse(data, size, &p) == 0) {
		if (p.hdr_len + p.paylen + p.padcnt + 4u != size || p.payload != data + p.hdr_len)
			abort();
		size_t h = urvt_pkt_build_hdr(buf, sizeof(buf), &p);
		if (h != p.hdr_len)
			abort();
		memcpy(buf + h, p.payload, p.paylen);
		size_t n = urvt_pkt_finish(buf, sizeof(buf), h + p.paylen, ip);
		if (n != size || urvt_pkt_parse(buf, n, &q) != 0)
			abort();
		if (q.opcode != p.opcode || q.psn != p.psn || q.dest_qpn != p.dest_qpn ||
		    q.paylen != p.paylen || q.reth.va != p.reth.va || q.aeth.msn != p.aeth.msn ||
		    q.deth.qkey != p.deth.qkey || q.immdt != p.immdt || q.atmeth.comp != p.atmeth.comp ||
		    q.xrc_srqn != p.xrc_srqn || !!(q.mask & URVT_XRCETH_MASK) != (p.opcode >> 5 == 5 &&
									   (p.mask & URVT_REQ_MASK)))
			abort();
		if (urvt_icrc_check((struct urvt_ipinfo *)ip, buf, n, 0) != 0)
			abort();
	}
	struct urvt_ipinfo cp = *ip;
	(void)urvt_icrc_check(&cp, data, size, URVT_ICRC_V4_ID_UNKNOWN | URVT_ICRC_DF_ANY);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct urvt_ipinfo ip;
	const uint8_t *udp;
	size_t ulen;

	urvt_ipinfo_v4(&ip, 0x0100000a, 0x0200000a, 0xc000, URVT_ROCE_UDP_PORT);
	roce(data, size, &ip);
	if (urvt_ip_parse(data, size, &ip, &udp, &ulen) == 0) {
		if (udp < data || udp + ulen > data + size)
			abort();
		(void)urvt_icrc_ip(data, (size_t)(udp - data) + ulen);
		roce(udp, ulen, &ip);
	}
	return 0;
}
