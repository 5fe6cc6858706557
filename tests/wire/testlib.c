// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <string.h>

#include "testlib.h"
#include "wire/aeth.h"

void tl_fields(struct urvt_pkt *f, uint8_t opcode, uint32_t paylen, uint64_t seed)
{
	uint64_t s = seed | 1;

	memset(f, 0, sizeof(*f));
	f->opcode = opcode;
	f->pkey = URVT_DEFAULT_PKEY;
	f->dest_qpn = (uint32_t)tl_rand(&s) & 0xffffff;
	if (!f->dest_qpn)
		f->dest_qpn = 0x12;
	f->psn = (uint32_t)tl_rand(&s) & 0xffffff;
	f->ackreq = (urvt_opcode[opcode].mask & URVT_END_MASK) != 0;
	f->se = (urvt_opcode[opcode].mask & URVT_SE_OK_MASK) && (tl_rand(&s) & 1);
	f->becn = opcode == URVT_OP_CNP;
	f->paylen = (urvt_opcode[opcode].mask & URVT_PAYLOAD_MASK) ? paylen : 0;
	f->reth = (struct urvt_reth){ tl_rand(&s), (uint32_t)tl_rand(&s), (uint32_t)tl_rand(&s) };
	f->atmeth = (struct urvt_atmeth){ tl_rand(&s), (uint32_t)tl_rand(&s), tl_rand(&s),
					  tl_rand(&s) };
	f->aeth = (struct urvt_aeth){ (uint8_t)(tl_rand(&s) & 0x7f),
				      (uint32_t)tl_rand(&s) & 0xffffff };
	f->atmack_orig = tl_rand(&s);
	f->deth = (struct urvt_deth){ (uint32_t)tl_rand(&s), (uint32_t)tl_rand(&s) & 0xffffff };
	f->immdt = (uint32_t)tl_rand(&s);
	f->ieth_rkey = (uint32_t)tl_rand(&s);
	f->feth = (uint32_t)tl_rand(&s) & 0x3f;
	f->xrc_srqn = (uint32_t)tl_rand(&s) & 0xffffff;
}

size_t tl_build(uint8_t *buf, size_t cap, const struct urvt_pkt *f, const struct urvt_ipinfo *ip)
{
	size_t h = urvt_pkt_build_hdr(buf, cap, f);

	if (!h || cap < h + f->paylen)
		return 0;
	for (uint32_t i = 0; i < f->paylen; i++)
		buf[h + i] = (uint8_t)(i * 7 + f->psn);
	return urvt_pkt_finish(buf, cap, h + f->paylen, ip);
}

void tl_ipinfo(struct urvt_ipinfo *ip, int v6)
{
	if (v6) {
		struct in6_addr s, d;
		inet_pton(AF_INET6, "2001:db8::1", &s);
		inet_pton(AF_INET6, "2001:db8::2", &d);
		urvt_ipinfo_v6(ip, s.s6_addr, d.s6_addr, 0xc132, URVT_ROCE_UDP_PORT);
	} else {
		urvt_ipinfo_v4(ip, inet_addr("127.0.0.1"), inet_addr("127.0.0.2"), 0xc132,
			       URVT_ROCE_UDP_PORT);
	}
}
