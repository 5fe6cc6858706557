// SPDX-License-Identifier: MIT
/* Packet parser and header builder, both driven by urvt_opcode[] (roce-wire §2-§5). */
#include <string.h>

#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/ip.h"

const struct urvt_pkt urvt_pkt_zero;

/* The one payload an opcode without one may carry: a READ request that
 * asks for an answer by reference may say where to push (docs/wire.md
 * "Single copy"). */
static bool cma_push_payload(const uint8_t *bth, size_t paylen)
{
	uint8_t op = bth_opcode(bth);

	return bth_cma(bth) && paylen == sizeof(struct urvt_cma_push) &&
	       (op == URVT_OP_RC_RDMA_READ_REQUEST || op == URVT_OP_XRC_RDMA_READ_REQUEST);
}

static int pkt_parse(const uint8_t *p, size_t len, struct urvt_pkt *out, bool read_icrc)
{
	*out = urvt_pkt_zero;
	if (len < URVT_BTH_BYTES + URVT_ICRC_BYTES)
		return -URVT_DROP_TRUNCATED;

	uint8_t op = bth_opcode(p);
	const struct urvt_opcode_info *info = &urvt_opcode[op];

	/* rxe drops TVer != 0 (roce-wire §2) */
	if (bth_tver(p) != 0)
		return -URVT_DROP_BAD_TVER;
	if (!info->mask)
		return urvt_opcode_transport(op) == URVT_TRANSPORT_RD ? -URVT_DROP_UNSUP_OPCODE
								      : -URVT_DROP_BAD_OPCODE;
	if (len > 0xffff)
		return -URVT_DROP_BAD_LENGTH;
	if (len < (size_t)info->length + URVT_ICRC_BYTES)
		return -URVT_DROP_TRUNCATED;
	/* headers are whole words and payload + pad is too (roce-wire §5) */
	if (len & 3)
		return -URVT_DROP_BAD_LENGTH;

	uint32_t mask = info->mask;
	uint32_t data = (uint32_t)(len - info->length - URVT_ICRC_BYTES); /* payload + pad */
	uint8_t pad = bth_pad(p);

	if (!(mask & URVT_PAYLOAD_MASK)) {
		/* roce-wire §5: no-payload opcodes have PadCnt 0 */
		if (pad)
			return -URVT_DROP_BAD_PAD;
		if (data && !cma_push_payload(p, data))
			return -URVT_DROP_BAD_LENGTH;
	} else if (pad > data) {
		return -URVT_DROP_BAD_PAD;
	}

	out->pkey = bth_pkey(p);
	if (!urvt_pkey_valid(out->pkey))
		return -URVT_DROP_BAD_PKEY; /* roce-wire §7: low 15 bits zero is invalid */

	out->opcode = op;
	out->padcnt = pad;
	out->tver = 0;
	out->se = bth_se(p);
	out->mig = bth_mig(p);
	out->fecn = bth_fecn(p);
	out->becn = bth_becn(p);
	out->dest_qpn = bth_qpn(p);
	out->ackreq = bth_ackreq(p);
	out->psn = bth_psn(p);

	const uint8_t *o;
	if (mask & URVT_XRCETH_MASK)
		out->xrc_srqn = xrceth_srqn(p + info->offset[URVT_XRCETH]);
	if (mask & URVT_FETH_MASK)
		out->feth = feth_val(p + info->offset[URVT_FETH]);
	if (mask & URVT_DETH_MASK) {
		o = p + info->offset[URVT_DETH];
		out->deth.qkey = deth_qkey(o);
		out->deth.sqp = deth_sqp(o);
	}
	if (mask & URVT_RETH_MASK) {
		o = p + info->offset[URVT_RETH];
		out->reth.va = reth_va(o);
		out->reth.rkey = reth_rkey(o);
		out->reth.len = reth_len(o);
	}
	if (mask & URVT_ATMETH_MASK) {
		o = p + info->offset[URVT_ATMETH];
		out->atmeth.va = atmeth_va(o);
		out->atmeth.rkey = atmeth_rkey(o);
		out->atmeth.swap_add = atmeth_swap_add(o);
		out->atmeth.comp = atmeth_comp(o);
	}
	if (mask & URVT_AETH_MASK) {
		o = p + info->offset[URVT_AETH];
		out->aeth.syn = aeth_syn(o);
		out->aeth.msn = aeth_msn(o);
	}
	if (mask & URVT_ATMACK_MASK)
		out->atmack_orig = atmack_orig(p + info->offset[URVT_ATMACK]);
	if (mask & URVT_IMMDT_MASK)
		out->immdt = immdt_imm(p + info->offset[URVT_IMMDT]);
	if (mask & URVT_IETH_MASK)
		out->ieth_rkey = ieth_rkey(p + info->offset[URVT_IETH]);

	out->mask = mask;
	out->hdr_len = info->length;
	out->paylen = data - pad;
	out->len = (uint32_t)len;
	out->bth = p;
	out->payload = p + info->length;
	out->span_more = bth_span_more(p);
	out->cma = bth_cma(p);
	if (read_icrc)
		out->icrc = urvt_icrc_get(p + len - URVT_ICRC_BYTES);
	return 0;
}

int urvt_pkt_parse(const uint8_t *p, size_t len, struct urvt_pkt *out)
{
	return pkt_parse(p, len, out, true);
}

int urvt_pkt_parse_hdrs(const uint8_t *hdr, size_t len, struct urvt_pkt *out)
{
	/* every read below the ICRC's is inside the opcode's headers */
	return pkt_parse(hdr, len, out, false);
}

/* The BTH in one pass; reserved bits are sent as 0 (roce-wire §2): byte 1
 * (SE, M, PadCnt, TVer), then the words of bytes 4-7 and 8-11. */
static inline void bth_put(uint8_t *buf, uint8_t opcode, uint8_t b1, uint16_t pkey, uint32_t w1,
			   uint32_t w2)
{
	buf[0] = opcode;
	buf[1] = b1;
	urvt_put_be16(buf + 2, pkey);
	urvt_put_be32(buf + 4, w1);
	urvt_put_be32(buf + 8, w2);
}

/* Every BTH field f sets, with PadCnt pad. */
static inline void bth_put_all(uint8_t *buf, const struct urvt_pkt *f, uint8_t pad)
{
	bth_put(buf, f->opcode,
		(uint8_t)((f->se ? URVT_BTH_SE : 0) | (f->mig ? URVT_BTH_MIG : 0) |
			  pad << URVT_BTH_PAD_SHIFT | (f->tver & URVT_BTH_TVER_MASK)),
		f->pkey,
		(f->fecn ? 0x80000000u : 0) | (f->becn ? 0x40000000u : 0) |
			(f->cma ? (uint32_t)URVT_BTH_CMA << 24 : 0) | (f->dest_qpn & URVT_QPN_MASK),
		(f->ackreq ? 0x80000000u : 0) | (f->span_more & URVT_BTH_SPAN_MAX) << 24 |
			(f->psn & 0xffffffu));
}

size_t urvt_pkt_build_hdr(uint8_t *buf, size_t cap, const struct urvt_pkt *f)
{
	const struct urvt_opcode_info *info = &urvt_opcode[f->opcode];
	uint32_t mask = info->mask;

	if (!mask || cap < info->length)
		return 0;
	bth_put_all(buf, f, (mask & URVT_PAYLOAD_MASK) ? urvt_pad_for(f->paylen) : 0);

	uint8_t *o;
	if (mask & URVT_XRCETH_MASK)
		xrceth_set_srqn(buf + info->offset[URVT_XRCETH], f->xrc_srqn);
	if (mask & URVT_FETH_MASK)
		feth_set_val(buf + info->offset[URVT_FETH], f->feth);
	if (mask & URVT_DETH_MASK) {
		o = buf + info->offset[URVT_DETH];
		deth_set_qkey(o, f->deth.qkey);
		deth_set_sqp(o, f->deth.sqp);
	}
	if (mask & URVT_RETH_MASK) {
		o = buf + info->offset[URVT_RETH];
		reth_set_va(o, f->reth.va);
		reth_set_rkey(o, f->reth.rkey);
		reth_set_len(o, f->reth.len);
	}
	if (mask & URVT_ATMETH_MASK) {
		o = buf + info->offset[URVT_ATMETH];
		atmeth_set_va(o, f->atmeth.va);
		atmeth_set_rkey(o, f->atmeth.rkey);
		atmeth_set_swap_add(o, f->atmeth.swap_add);
		atmeth_set_comp(o, f->atmeth.comp);
	}
	if (mask & URVT_AETH_MASK) {
		o = buf + info->offset[URVT_AETH];
		aeth_set_syn(o, f->aeth.syn);
		aeth_set_msn(o, f->aeth.msn);
	}
	if (mask & URVT_ATMACK_MASK)
		atmack_set_orig(buf + info->offset[URVT_ATMACK], f->atmack_orig);
	if (mask & URVT_IMMDT_MASK)
		immdt_set_imm(buf + info->offset[URVT_IMMDT], f->immdt);
	if (mask & URVT_IETH_MASK)
		ieth_set_rkey(buf + info->offset[URVT_IETH], f->ieth_rkey);
	if (mask & URVT_CNPRSV_MASK) /* roce-wire §4.4 */
		memset(buf + info->offset[URVT_CNPRSV], 0, URVT_CNPRSV_BYTES);
	return info->length;
}

/* The pad and the final length of a packet whose headers and payload are
 * buf[0, len), or 0 if they do not agree or it would not fit. */
static size_t finish_layout(uint8_t *buf, size_t cap, size_t len, bool v4, uint8_t *pad_out)
{
	if (len < URVT_BTH_BYTES)
		return 0;
	const struct urvt_opcode_info *info = &urvt_opcode[bth_opcode(buf)];
	if (!info->mask || len < info->length)
		return 0;
	uint8_t pad = bth_pad(buf);
	size_t paylen = len - info->length;
	if (pad != urvt_pad_for((uint32_t)paylen) && (info->mask & URVT_PAYLOAD_MASK))
		return 0;
	if (!(info->mask & URVT_PAYLOAD_MASK) && (pad || (paylen && !cma_push_payload(buf, paylen))))
		return 0;
	size_t total = len + pad + URVT_ICRC_BYTES;
	/* the IPv4 total length / UDP length must fit 16 bits */
	size_t max = 0xffff - URVT_UDP_HDR_BYTES - (v4 ? URVT_IPV4_HDR_BYTES : 0);
	if (cap < total || total > max)
		return 0;
	memset(buf + len, 0, pad); /* pad bytes are zero and ICRC-covered (roce-wire §5) */
	*pad_out = pad;
	return total;
}

size_t urvt_pkt_finish(uint8_t *buf, size_t cap, size_t len, const struct urvt_ipinfo *ip)
{
	uint8_t pad;
	size_t total = finish_layout(buf, cap, len, urvt_ipinfo_is_v4(ip), &pad);

	if (total)
		urvt_icrc_put(buf + len + pad, urvt_icrc(ip, buf, len + pad));
	return total;
}

size_t urvt_pkt_finish_begin(uint8_t *buf, size_t cap, size_t hlen, size_t paylen,
			     const struct urvt_ipinfo *ip, uint32_t *crc)
{
	uint8_t pad;
	size_t total = finish_layout(buf, cap, hlen + paylen, urvt_ipinfo_is_v4(ip), &pad);

	if (total)
		*crc = urvt_icrc_start(ip, buf, hlen, hlen + paylen + pad);
	return total;
}

void urvt_pkt_finish_end(uint8_t *buf, size_t len, uint32_t crc)
{
	uint8_t pad = bth_pad(buf);

	/* most packets have no pad: no CRC call for nothing (~40 instructions) */
	urvt_icrc_put(buf + len + pad, pad ? urvt_crc32(crc, buf + len, pad) : crc);
}

size_t urvt_pkt_build_ud_send(uint8_t *buf, const struct urvt_pkt *f)
{
	const struct urvt_opcode_info *info = &urvt_opcode[f->opcode];

	bth_put(buf, f->opcode,
		(uint8_t)((f->se ? URVT_BTH_SE : 0) | urvt_pad_for(f->paylen) << URVT_BTH_PAD_SHIFT),
		f->pkey, f->dest_qpn & URVT_QPN_MASK,
		(f->ackreq ? 0x80000000u : 0) | (f->psn & 0xffffffu));
	deth_set_qkey(buf + info->offset[URVT_DETH], f->deth.qkey);
	deth_set_sqp(buf + info->offset[URVT_DETH], f->deth.sqp);
	if (f->opcode == URVT_OP_UD_SEND_ONLY_WITH_IMMEDIATE)
		immdt_set_imm(buf + info->offset[URVT_IMMDT], f->immdt);
	return info->length;
}

size_t urvt_pkt_build_ack(uint8_t *buf, const struct urvt_pkt *f)
{
	const struct urvt_opcode_info *info = &urvt_opcode[f->opcode];

	bth_put_all(buf, f, 0);
	aeth_set_syn(buf + info->offset[URVT_AETH], f->aeth.syn);
	aeth_set_msn(buf + info->offset[URVT_AETH], f->aeth.msn);
	if (info->mask & URVT_ATMACK_MASK)
		atmack_set_orig(buf + info->offset[URVT_ATMACK], f->atmack_orig);
	return info->length;
}

size_t urvt_pkt_pad_no_icrc(uint8_t *buf, size_t hlen, size_t paylen)
{
	uint8_t pad = urvt_pad_for((uint32_t)paylen);

	memset(buf + hlen + paylen, 0, pad + URVT_ICRC_BYTES);
	return hlen + paylen + pad + URVT_ICRC_BYTES;
}

size_t urvt_pkt_finish_no_icrc(uint8_t *buf, size_t cap, size_t len)
{
	uint8_t pad;
	size_t total = finish_layout(buf, cap, len, true, &pad);

	if (total)
		urvt_icrc_put(buf + len + pad, 0);
	return total;
}
