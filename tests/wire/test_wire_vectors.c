// SPDX-License-Identifier: MIT
/* Known-answer tests against the 18 independent vectors (test-vectors §4) and
 * the XRC ones (tests/wire/make_xrc_vectors.py, roce-wire §4.5). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "roce_vectors.h"
#include "wire/grh.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/ip.h"

static void vec_ipinfo(const struct rv_vector *v, struct urvt_ipinfo *ip)
{
	memset(ip, 0, sizeof(*ip));
	memcpy(ip->sgid, v->sgid, 16);
	memcpy(ip->dgid, v->dgid, 16);
	ip->sport = v->sport;
	ip->dport = v->dport;
	ip->tclass = v->tclass;
	ip->hop_limit = v->hop_limit;
	ip->flow_label = v->flow_label;
	ip->ip_id = v->ip_id;
	ip->df = v->df;
}

static void vec_fields(const struct rv_vector *v, struct urvt_pkt *f)
{
	memset(f, 0, sizeof(*f));
	f->opcode = v->opcode;
	f->se = v->se;
	f->mig = v->m;
	f->tver = v->tver;
	f->fecn = v->byte4 & 0x80;
	f->becn = v->byte4 & 0x40;
	f->pkey = v->pkey;
	f->dest_qpn = v->dest_qpn;
	f->ackreq = v->ackreq;
	f->psn = v->psn;
	f->paylen = v->payload_len;
	f->reth = (struct urvt_reth){ v->reth_va, v->reth_rkey, v->reth_len };
	f->aeth = (struct urvt_aeth){ v->aeth_syn, v->aeth_msn };
	f->atmeth = (struct urvt_atmeth){ v->atm_va, v->atm_rkey, v->atm_swap_add, v->atm_comp };
	f->atmack_orig = v->atmack_orig;
	f->deth = (struct urvt_deth){ v->deth_qkey, v->deth_sqp };
	f->immdt = v->immdt;
	f->ieth_rkey = v->ieth_rkey;
	f->xrc_srqn = v->xrc_srqn;
}

static size_t ip_hl(const struct rv_vector *v)
{
	return v->ip_version == 4 ? URVT_IPV4_HDR_BYTES : URVT_IPV6_HDR_BYTES;
}

/* Encoder: decoded fields -> exact bytes (test-vectors §3 use 1). */
static void test_encode(void **state)
{
	(void)state;
	for (int i = 0; i < RV_NUM_VECTORS; i++) {
		const struct rv_vector *v = &rv_vectors[i];
		struct urvt_ipinfo ip;
		struct urvt_pkt f;
		uint8_t pkt[2048];

		vec_ipinfo(v, &ip);
		vec_fields(v, &f);
		size_t hl = urvt_ip_udp_hdr_build(pkt, &ip, v->udp_len - URVT_UDP_HDR_BYTES);
		assert_int_equal(hl, ip_hl(v) + URVT_UDP_HDR_BYTES);
		uint8_t *roce = pkt + hl;
		size_t h = urvt_pkt_build_hdr(roce, sizeof(pkt) - hl, &f);
		assert_int_equal(h, urvt_opcode[v->opcode].length);
		memcpy(roce + h, v->payload, v->payload_len);
		size_t n = urvt_pkt_finish(roce, sizeof(pkt) - hl, h + v->payload_len, &ip);
		assert_int_equal(n, v->udp_len - URVT_UDP_HDR_BYTES);
		assert_int_equal(hl + n, v->ip_packet_len);
		if (memcmp(pkt, v->ip_packet, v->ip_packet_len))
			fail_msg("%s: encoded bytes differ", v->name);
	}
}

/* Decoder: bytes -> exact fields (use 2). */
static void test_decode(void **state)
{
	(void)state;
	for (int i = 0; i < RV_NUM_VECTORS; i++) {
		const struct rv_vector *v = &rv_vectors[i];
		struct urvt_ipinfo ip;
		const uint8_t *roce;
		size_t rlen;
		struct urvt_pkt p;

		assert_int_equal(urvt_ip_parse(v->ip_packet, v->ip_packet_len, &ip, &roce, &rlen), 0);
		assert_int_equal(urvt_ipinfo_is_v4(&ip), v->ip_version == 4);
		assert_memory_equal(ip.sgid, v->sgid, 16);
		assert_memory_equal(ip.dgid, v->dgid, 16);
		assert_int_equal(ip.sport, v->sport);
		assert_int_equal(ip.dport, v->dport);
		assert_int_equal(ip.tclass, v->tclass);
		assert_int_equal(ip.hop_limit, v->hop_limit);
		assert_int_equal(ip.flow_label, v->flow_label);
		assert_int_equal(ip.ip_id, v->ip_id);
		assert_int_equal(ip.df, v->df);
		assert_int_equal(rlen, v->udp_len - URVT_UDP_HDR_BYTES);

		int rc = urvt_pkt_parse(roce, rlen, &p);
		if (rc)
			fail_msg("%s: parse failed: %s", v->name, urvt_wire_drop_str(rc));
		assert_int_equal(p.opcode, v->opcode);
		assert_int_equal(p.se, v->se);
		assert_int_equal(p.mig, v->m);
		assert_int_equal(p.padcnt, v->padcnt);
		assert_int_equal(p.tver, v->tver);
		assert_int_equal(p.fecn, !!(v->byte4 & 0x80));
		assert_int_equal(p.becn, !!(v->byte4 & 0x40));
		assert_int_equal(p.pkey, v->pkey);
		assert_int_equal(p.dest_qpn, v->dest_qpn);
		assert_int_equal(p.ackreq, v->ackreq);
		assert_int_equal(p.psn, v->psn);
		assert_int_equal(!!(p.mask & URVT_RETH_MASK), v->has_reth);
		assert_int_equal(!!(p.mask & URVT_AETH_MASK), v->has_aeth);
		assert_int_equal(!!(p.mask & URVT_ATMETH_MASK), v->has_atmeth);
		assert_int_equal(!!(p.mask & URVT_ATMACK_MASK), v->has_atmack);
		assert_int_equal(!!(p.mask & URVT_DETH_MASK), v->has_deth);
		assert_int_equal(!!(p.mask & URVT_IMMDT_MASK), v->has_immdt);
		assert_int_equal(!!(p.mask & URVT_IETH_MASK), v->has_ieth);
		assert_int_equal(!!(p.mask & URVT_XRCETH_MASK), v->has_xrceth);
		if (v->has_xrceth)
			assert_int_equal(p.xrc_srqn, v->xrc_srqn);
		assert_true(p.reth.va == v->reth_va);
		assert_int_equal(p.reth.rkey, v->reth_rkey);
		assert_int_equal(p.reth.len, v->reth_len);
		assert_int_equal(p.aeth.syn, v->aeth_syn);
		assert_int_equal(p.aeth.msn, v->aeth_msn);
		assert_true(p.atmeth.va == v->atm_va);
		assert_int_equal(p.atmeth.rkey, v->atm_rkey);
		assert_true(p.atmeth.swap_add == v->atm_swap_add);
		assert_true(p.atmeth.comp == v->atm_comp);
		assert_true(p.atmack_orig == v->atmack_orig);
		assert_int_equal(p.deth.qkey, v->deth_qkey);
		assert_int_equal(p.deth.sqp, v->deth_sqp);
		assert_int_equal(p.immdt, v->immdt);
		assert_int_equal(p.ieth_rkey, v->ieth_rkey);
		assert_int_equal(p.paylen, v->payload_len);
		assert_memory_equal(p.payload, v->payload, v->payload_len);
		assert_int_equal(p.icrc, v->icrc_value);
		assert_int_equal(p.hdr_len + p.paylen + p.padcnt + URVT_ICRC_BYTES, rlen);
	}
}

/* ICRC of each vector, every way we can compute it (use 3). */
static void test_icrc(void **state)
{
	(void)state;
	for (int i = 0; i < RV_NUM_VECTORS; i++) {
		const struct rv_vector *v = &rv_vectors[i];
		size_t n = v->ip_packet_len - URVT_ICRC_BYTES;
		struct urvt_ipinfo ip;
		const uint8_t *roce;
		size_t rlen;

		/* the vector's own CRC input really has this CRC (sanity of the data) */
		assert_int_equal(crc32(0, v->icrc_input, (uInt)v->icrc_input_len), v->icrc_value);
		assert_int_equal(urvt_icrc_ip(v->ip_packet, n), v->icrc_value);
		assert_memory_equal(v->ip_packet + n, v->icrc_wire, 4);
		assert_int_equal(urvt_icrc_get(v->icrc_wire), v->icrc_value);

		assert_int_equal(urvt_ip_parse(v->ip_packet, v->ip_packet_len, &ip, &roce, &rlen), 0);
		assert_int_equal(urvt_icrc(&ip, roce, rlen - 4), v->icrc_value);
		if (v->ip_version == 4) {
			uint32_t s, d;
			memcpy(&s, v->sgid + 12, 4);
			memcpy(&d, v->dgid + 12, 4);
			assert_int_equal(urvt_icrc_v4(s, d, v->ip_id, v->df, v->sport, v->dport, roce,
						      rlen - 4),
					 v->icrc_value);
		} else {
			assert_int_equal(urvt_icrc_v6(v->sgid, v->dgid, v->sport, v->dport, roce,
						      rlen - 4),
					 v->icrc_value);
		}
		assert_int_equal(urvt_icrc_check(&ip, roce, rlen, 0), 0);
	}
}

static const struct rv_vector *vec_by_name(const char *name)
{
	for (int i = 0; i < RV_NUM_VECTORS; i++)
		if (!strcmp(rv_vectors[i].name, name))
			return &rv_vectors[i];
	fail_msg("no vector %s", name);
	return NULL;
}

/* Masking invariance (test-vectors §3 use 4): V18 vs V1, V15 vs the same
 * packet with TC/FL/hop zeroed. */
static void test_masking(void **state)
{
	(void)state;
	const struct rv_vector *v1 = vec_by_name("rc_send_only_ipv4");
	const struct rv_vector *v18 = vec_by_name("rc_send_only_ipv4_masked_variant");
	const struct rv_vector *v15 = vec_by_name("rc_send_only_ipv6_tc_fl");

	assert_int_equal(v1->ip_packet_len, v18->ip_packet_len);
	assert_memory_not_equal(v1->ip_packet, v18->ip_packet, v1->ip_packet_len);
	assert_int_equal(urvt_icrc_ip(v18->ip_packet, v18->ip_packet_len - 4),
			 urvt_icrc_ip(v1->ip_packet, v1->ip_packet_len - 4));
	assert_int_equal(v18->icrc_value, v1->icrc_value);

	uint8_t pkt[256];
	memcpy(pkt, v15->ip_packet, v15->ip_packet_len);
	assert_true(pkt[0] != 0x60 || pkt[1] || pkt[2] || pkt[3]);
	pkt[0] = 0x60; /* TC, flow label 0, different hop limit */
	pkt[1] = pkt[2] = pkt[3] = 0;
	pkt[7] = 64;
	assert_int_equal(urvt_icrc_ip(pkt, v15->ip_packet_len - 4), v15->icrc_value);
}

static bool masked_byte(int ipver, size_t off)
{
	if (ipver == 4)
		return off == 1 || off == 8 || off == 10 || off == 11 || off == 26 || off == 27 ||
		       off == 28 + 4;
	return off <= 3 || off == 7 || off == 46 || off == 47 || off == 48 + 4;
}

/* Every single-bit flip of an unmasked byte changes the ICRC; masked bytes do not (use 5). */
static void test_flips(void **state)
{
	(void)state;
	for (int i = 0; i < RV_NUM_VECTORS; i++) {
		const struct rv_vector *v = &rv_vectors[i];
		size_t n = v->ip_packet_len - URVT_ICRC_BYTES;
		uint8_t pkt[2048];

		memcpy(pkt, v->ip_packet, v->ip_packet_len);
		for (size_t off = 0; off < n; off++) {
			/* the IPv6 version nibble is covered; its low nibble (TC) is masked */
			uint8_t bit = (v->ip_version == 6 && off == 0) ? 0x10 : 0x01;
			bool masked = masked_byte(v->ip_version, off) &&
				      !(v->ip_version == 6 && off == 0);
			pkt[off] ^= bit;
			uint32_t c = urvt_icrc_ip(pkt, n);
			if (masked && c != v->icrc_value)
				fail_msg("%s: masked byte %zu changed the ICRC", v->name, off);
			if (!masked && c == v->icrc_value)
				fail_msg("%s: byte %zu not covered by the ICRC", v->name, off);
			pkt[off] ^= bit;
		}
		/* and through the receive check, with the parsed addressing */
		struct urvt_ipinfo ip;
		const uint8_t *roce;
		size_t rlen;
		assert_int_equal(urvt_ip_parse(pkt, v->ip_packet_len, &ip, &roce, &rlen), 0);
		size_t last = (size_t)(roce - pkt) + rlen - 5;
		pkt[last] ^= 0x80;
		assert_int_equal(urvt_icrc_check(&ip, roce, rlen, 0), -URVT_DROP_BAD_ICRC);
		pkt[last] ^= 0x80;
		ip.ip_id ^= 1;
		assert_int_equal(urvt_icrc_check(&ip, roce, rlen, 0),
				 v->ip_version == 4 ? -URVT_DROP_BAD_ICRC : 0);
	}
}

/* The receive-side unknown-ID verifier recovers 0x1234 from every IPv4 vector. */
static void test_unknown_id(void **state)
{
	(void)state;
	int n4 = 0;
	for (int i = 0; i < RV_NUM_VECTORS; i++) {
		const struct rv_vector *v = &rv_vectors[i];
		struct urvt_ipinfo ip;
		const uint8_t *roce;
		size_t rlen;

		if (v->ip_version != 4)
			continue;
		n4++;
		assert_int_equal(urvt_ip_parse(v->ip_packet, v->ip_packet_len, &ip, &roce, &rlen), 0);
		ip.ip_id = 0xbeef; /* unknown to a UDP socket */
		ip.df = false;
		assert_int_equal(urvt_icrc_check(&ip, roce, rlen, URVT_ICRC_V4_ID_UNKNOWN), 0);
		assert_int_equal(ip.ip_id, v->ip_id);
		assert_true(ip.df);
	}
	assert_int_equal(n4, 16 + 6); /* 6 of the XRC vectors are IPv4 */
}

/* UD receive GRH image (roce-wire §11) from the UD vectors. */
static void test_grh(void **state)
{
	(void)state;
	const struct rv_vector *v4 = vec_by_name("ud_send_only_imm_ipv4");
	const struct rv_vector *v6 = vec_by_name("ud_send_only_imm_ipv6");
	uint8_t grh[URVT_GRH_BYTES], zero[20] = { 0 };
	struct urvt_ipinfo ip;

	vec_ipinfo(v4, &ip);
	assert_int_equal(urvt_grh_fill(grh, &ip, v4->udp_len - 8), 0);
	assert_memory_equal(grh, zero, 20);
	assert_memory_equal(grh + 20, v4->ip_packet, 20);

	vec_ipinfo(v6, &ip);
	assert_int_equal(urvt_grh_fill(grh, &ip, v6->udp_len - 8), 0);
	assert_memory_equal(grh, v6->ip_packet, 40);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode),	 cmocka_unit_test(test_decode),
		cmocka_unit_test(test_icrc),	 cmocka_unit_test(test_masking),
		cmocka_unit_test(test_flips),	 cmocka_unit_test(test_unknown_id),
		cmocka_unit_test(test_grh),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
