/* SPDX-License-Identifier: MIT */
/*
 * BTH and extended transport headers: big-endian field accessors, a parsed
 * packet view, the parser and the header builder (roce-wire §2-§5).
 *
 * "Packet" here is the UDP payload: BTH .. payload, pad, ICRC.
 */
#ifndef URVT_WIRE_HDR_H
#define URVT_WIRE_HDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/drop.h"
#include "wire/opcode.h"

#define URVT_ROCE_UDP_PORT 4791 /* roce-wire §1.2 */
#define URVT_DEFAULT_PKEY 0xffff /* roce-wire §7 */
#define URVT_GSI_QPN 1u /* IBTA: QP1 is the General Services Interface QP */
#define URVT_GSI_QKEY 0x80010000u /* its well-known Q_Key */
#define URVT_QPN_MASK 0xffffffu
#define URVT_MULTICAST_QPN 0xffffffu

/* ---- big-endian byte access (no alignment assumptions) ---- */

static inline uint16_t urvt_get_be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t urvt_get_be24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static inline uint32_t urvt_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t urvt_get_be64(const uint8_t *p)
{
	return (uint64_t)urvt_get_be32(p) << 32 | urvt_get_be32(p + 4);
}

static inline void urvt_put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void urvt_put_be24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)v;
}

static inline void urvt_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void urvt_put_be64(uint8_t *p, uint64_t v)
{
	urvt_put_be32(p, (uint32_t)(v >> 32));
	urvt_put_be32(p + 4, (uint32_t)v);
}

/* ---- BTH, roce-wire §2 ---- */

#define URVT_BTH_SE 0x80
#define URVT_BTH_MIG 0x40
#define URVT_BTH_PAD_SHIFT 4
#define URVT_BTH_PAD_MASK 0x30
#define URVT_BTH_TVER_MASK 0x0f
#define URVT_BTH_FECN 0x80
#define URVT_BTH_BECN 0x40
#define URVT_BTH_ACKREQ 0x80

static inline uint8_t bth_opcode(const uint8_t *bth) { return bth[0]; }
static inline bool bth_se(const uint8_t *bth) { return bth[1] & URVT_BTH_SE; }
static inline bool bth_mig(const uint8_t *bth) { return bth[1] & URVT_BTH_MIG; }
static inline uint8_t bth_pad(const uint8_t *bth) { return (bth[1] & URVT_BTH_PAD_MASK) >> URVT_BTH_PAD_SHIFT; }
static inline uint8_t bth_tver(const uint8_t *bth) { return bth[1] & URVT_BTH_TVER_MASK; }
static inline uint16_t bth_pkey(const uint8_t *bth) { return urvt_get_be16(bth + 2); }
static inline bool bth_fecn(const uint8_t *bth) { return bth[4] & URVT_BTH_FECN; }
static inline bool bth_becn(const uint8_t *bth) { return bth[4] & URVT_BTH_BECN; }
static inline uint32_t bth_qpn(const uint8_t *bth) { return urvt_get_be24(bth + 5); }
static inline bool bth_ackreq(const uint8_t *bth) { return bth[8] & URVT_BTH_ACKREQ; }
/* The 7 reserved bits after AckReq (resv7, sent as 0 on the wire): on
 * urvt's same-host link only, a span's PSNs past its first (docs/wire.md
 * "Spans"); receivers from any other link ignore them. */
#define URVT_BTH_SPAN_MAX 0x7fu
static inline uint32_t bth_span_more(const uint8_t *bth) { return bth[8] & URVT_BTH_SPAN_MAX; }
/* The top bit of the 6 reserved bits after BECN (resv6, sent as 0 on the
 * wire): on urvt's same-host link only, a READ request that may be
 * answered by reference and the answer by reference (docs/wire.md
 * "Single copy"); receivers from any other link ignore it. */
#define URVT_BTH_CMA 0x20
static inline bool bth_cma(const uint8_t *bth) { return bth[4] & URVT_BTH_CMA; }
/* The payload of an answer by reference: where the responder's process
 * holds the bytes the answer stands for (one host: host byte order); addr
 * 0: the responder wrote them into the requester's buffers already (a push). */
struct urvt_cma_ref {
	uint64_t addr;
	uint32_t len;
	uint32_t zero;
};
/* The payload a READ request that asks for an answer by reference may
 * carry: where the responder may write the request's last len bytes in
 * the requester's process, if the requester's epoch is still epoch;
 * whole: where all the request's bytes are, when they lie in one buffer
 * there (the responder may then write them all), else 0. */
struct urvt_cma_push {
	uint64_t addr;
	uint32_t len;
	uint32_t epoch;
	uint64_t whole;
};
static inline uint32_t bth_psn(const uint8_t *bth) { return urvt_get_be24(bth + 9); }

static inline void bth_set_opcode(uint8_t *bth, uint8_t op) { bth[0] = op; }

static inline void bth_set_tver(uint8_t *bth, uint8_t tver)
{
	bth[1] = (uint8_t)((bth[1] & ~URVT_BTH_TVER_MASK) | (tver & URVT_BTH_TVER_MASK));
}

static inline void bth_set_pkey(uint8_t *bth, uint16_t pkey) { urvt_put_be16(bth + 2, pkey); }

static inline void bth_set_qpn(uint8_t *bth, uint32_t qpn) { urvt_put_be24(bth + 5, qpn); }

static inline void bth_set_psn(uint8_t *bth, uint32_t psn) { urvt_put_be24(bth + 9, psn); }

/* ---- extended headers, roce-wire §3; p points at the header itself ---- */

static inline uint64_t reth_va(const uint8_t *p) { return urvt_get_be64(p); }
static inline uint32_t reth_rkey(const uint8_t *p) { return urvt_get_be32(p + 8); }
static inline uint32_t reth_len(const uint8_t *p) { return urvt_get_be32(p + 12); }
static inline void reth_set_va(uint8_t *p, uint64_t va) { urvt_put_be64(p, va); }
static inline void reth_set_rkey(uint8_t *p, uint32_t rkey) { urvt_put_be32(p + 8, rkey); }
static inline void reth_set_len(uint8_t *p, uint32_t len) { urvt_put_be32(p + 12, len); }

static inline uint64_t atmeth_va(const uint8_t *p) { return urvt_get_be64(p); }
static inline uint32_t atmeth_rkey(const uint8_t *p) { return urvt_get_be32(p + 8); }
static inline uint64_t atmeth_swap_add(const uint8_t *p) { return urvt_get_be64(p + 12); }
static inline uint64_t atmeth_comp(const uint8_t *p) { return urvt_get_be64(p + 20); }
static inline void atmeth_set_va(uint8_t *p, uint64_t va) { urvt_put_be64(p, va); }
static inline void atmeth_set_rkey(uint8_t *p, uint32_t rkey) { urvt_put_be32(p + 8, rkey); }
static inline void atmeth_set_swap_add(uint8_t *p, uint64_t v) { urvt_put_be64(p + 12, v); }
static inline void atmeth_set_comp(uint8_t *p, uint64_t v) { urvt_put_be64(p + 20, v); }

static inline uint8_t aeth_syn(const uint8_t *p) { return p[0]; }
static inline uint32_t aeth_msn(const uint8_t *p) { return urvt_get_be24(p + 1); }
static inline void aeth_set_syn(uint8_t *p, uint8_t syn) { p[0] = syn; }
static inline void aeth_set_msn(uint8_t *p, uint32_t msn) { urvt_put_be24(p + 1, msn); }

static inline uint64_t atmack_orig(const uint8_t *p) { return urvt_get_be64(p); }
static inline void atmack_set_orig(uint8_t *p, uint64_t v) { urvt_put_be64(p, v); }

static inline uint32_t deth_qkey(const uint8_t *p) { return urvt_get_be32(p); }
static inline uint32_t deth_sqp(const uint8_t *p) { return urvt_get_be24(p + 5); }
static inline void deth_set_qkey(uint8_t *p, uint32_t qkey) { urvt_put_be32(p, qkey); }
/* Also clears the reserved byte. */
static inline void deth_set_sqp(uint8_t *p, uint32_t qpn)
{
	p[4] = 0;
	urvt_put_be24(p + 5, qpn);
}

/* ImmDt is opaque; we carry it as the big-endian number on the wire, so
 * ibv imm_data (__be32) == htobe32(immdt) (roce-wire §3). */
static inline uint32_t immdt_imm(const uint8_t *p) { return urvt_get_be32(p); }
static inline void immdt_set_imm(uint8_t *p, uint32_t imm) { urvt_put_be32(p, imm); }

/* XRCETH (roce-wire §3.1): 8 reserved bits, the 24-bit XRC SRQ number. */
static inline uint32_t xrceth_srqn(const uint8_t *p) { return urvt_get_be24(p + 1); }
static inline void xrceth_set_srqn(uint8_t *p, uint32_t srqn)
{
	p[0] = 0;
	urvt_put_be24(p + 1, srqn);
}

static inline uint32_t ieth_rkey(const uint8_t *p) { return urvt_get_be32(p); }
static inline void ieth_set_rkey(uint8_t *p, uint32_t rkey) { urvt_put_be32(p, rkey); }

static inline uint32_t feth_val(const uint8_t *p) { return urvt_get_be32(p); }
static inline void feth_set_val(uint8_t *p, uint32_t v) { urvt_put_be32(p, v); }

/* PadCnt for a payload length (roce-wire §5). */
static inline uint8_t urvt_pad_for(uint32_t paylen)
{
	return (uint8_t)(-paylen & 3u);
}

/* ---- P_Key, roce-wire §7 ---- */

/* A key whose low 15 bits are zero is invalid. */
static inline bool urvt_pkey_valid(uint16_t pkey)
{
	return (pkey & 0x7fff) != 0;
}

/* Low 15 bits equal, at least one full member, neither invalid. */
static inline bool urvt_pkey_match(uint16_t a, uint16_t b)
{
	return urvt_pkey_valid(a) && urvt_pkey_valid(b) && ((a ^ b) & 0x7fff) == 0 &&
	       ((a | b) & 0x8000);
}

/* ---- parsed view / builder input ---- */

struct urvt_reth {
	uint64_t va;
	uint32_t rkey;
	uint32_t len; /* DMA length of the whole message */
};

struct urvt_atmeth {
	uint64_t va;
	uint32_t rkey;
	uint64_t swap_add;
	uint64_t comp;
};

struct urvt_aeth {
	uint8_t syn;  /* see wire/aeth.h */
	uint32_t msn; /* 24 bits */
};

struct urvt_deth {
	uint32_t qkey;
	uint32_t sqp; /* 24 bits */
};

/*
 * Parsed packet. urvt_pkt_parse() fills every field; only the extended
 * header fields whose URVT_*_MASK bit is in .mask are meaningful (the others
 * are zeroed). urvt_pkt_build_hdr() takes the same struct as input and reads
 * the BTH fields, paylen (for PadCnt) and the extended headers the opcode has.
 */
struct urvt_pkt {
	/* BTH */
	uint8_t opcode;
	uint8_t padcnt;
	uint8_t tver;
	bool se;
	bool mig;
	bool fecn;
	bool becn;
	bool ackreq;
	uint16_t pkey;
	uint32_t dest_qpn;
	uint32_t psn;

	/* extended headers */
	uint32_t xrc_srqn; /* XRCETH, 24 bits */
	struct urvt_reth reth;
	struct urvt_atmeth atmeth;
	struct urvt_aeth aeth;
	uint64_t atmack_orig;
	struct urvt_deth deth;
	uint32_t immdt; /* host-order value of the wire bytes, see immdt_imm() */
	uint32_t ieth_rkey;
	uint32_t feth;

	/* layout (filled by the parser; paylen is also a builder input) */
	uint32_t mask;		/* urvt_opcode[opcode].mask */
	uint32_t hdr_len;	/* BTH + extended headers */
	uint32_t paylen;	/* payload bytes, pad excluded */
	uint32_t len;		/* whole UDP payload including pad and ICRC */
	const uint8_t *bth;	/* start of the packet */
	const uint8_t *payload; /* bth + hdr_len */
	uint32_t icrc;		/* ICRC value as received (LE on the wire, roce-wire §9) */
	/* PSNs the packet takes past its first: 0 on the wire; a span, a
	 * request of several PMTUs that urvt's same-host link carries as one
	 * packet, says how many more in BTH resv7 (bth_span_more) */
	uint32_t span_more;
	/* BTH resv6's top bit (bth_cma): 0 on the wire; on urvt's same-host
	 * link a READ request that may be answered by reference, or an answer
	 * whose payload is a reference (struct urvt_cma_ref) */
	bool cma;
};

/*
 * An all-zero packet to start from by copy: GCC makes a memset or a
 * compound literal of this struct a `rep stos`, whose start-up was 40-45 %
 * of the requester's and the parser's samples on a 64 KiB WRITE over shm
 * (docs/performance-history.md "Results against the targets"); a copy is
 * plain vector moves.
 */
extern const struct urvt_pkt urvt_pkt_zero;

/*
 * Start a packet to build: the BTH fields every packet a QP sends sets
 * (the default P_Key, roce-wire §7), everything else zero for the caller to fill.
 */
static inline void urvt_pkt_init(struct urvt_pkt *f, uint8_t opcode, uint32_t dest_qpn,
				 uint32_t psn)
{
	*f = urvt_pkt_zero;
	f->opcode = opcode;
	f->pkey = URVT_DEFAULT_PKEY;
	f->dest_qpn = dest_qpn;
	f->psn = psn;
}

/*
 * Parse a UDP payload (BTH .. ICRC) of len bytes. Returns 0, or a negative
 * enum urvt_wire_drop. Bounds-checked: never reads outside [p, p + len).
 * Does NOT check the ICRC (wire/icrc.h), the P_Key against a QP
 * (urvt_pkey_match) or the opcode against a QP type
 * (urvt_opcode_chk_transport). It does reject invalid P_Keys (roce-wire §7).
 */
int urvt_pkt_parse(const uint8_t *p, size_t len, struct urvt_pkt *out);

/*
 * The same for a packet of len bytes of which only the headers are at hdr
 * (at least min(len, URVT_HDR_MAX) bytes): nothing past the opcode's
 * headers is read, out->icrc is 0 and out->payload is hdr + hdr_len, for
 * the caller to point at the real payload.
 */
int urvt_pkt_parse_hdrs(const uint8_t *hdr, size_t len, struct urvt_pkt *out);

/*
 * Write BTH + the extended headers of f->opcode into buf. PadCnt comes from
 * f->paylen. Returns the header length (urvt_opcode[op].length), or 0 when
 * the opcode is unknown or cap is too small. No payload, pad or ICRC.
 */
size_t urvt_pkt_build_hdr(uint8_t *buf, size_t cap, const struct urvt_pkt *f);

/* No opcode's BTH + extended headers are longer (BTH + XRCETH + AtomicETH: 44). */
#define URVT_HDR_MAX 64

struct urvt_ipinfo; /* wire/ip.h */

/*
 * Finish a packet whose BTH, headers and payload occupy buf[0, len): write
 * the PadCnt zero bytes and the ICRC for the IP/UDP headers described by ip
 * (roce-wire §5, §9). PadCnt is read from the BTH. Returns the final UDP
 * payload length (len + pad + 4) or 0 when cap is too small or the BTH PadCnt
 * does not match the payload length implied by len.
 */
size_t urvt_pkt_finish(uint8_t *buf, size_t cap, size_t len, const struct urvt_ipinfo *ip);

/*
 * urvt_pkt_finish in two steps around the payload, for a sender that CRCs
 * the payload while it copies it in: begin, with the headers in buf[0,
 * hlen) and the payload to come at buf + hlen, checks the layout as
 * urvt_pkt_finish does, writes the pad, returns the final length (or 0)
 * and in *crc the ICRC so far; the caller continues *crc over the paylen
 * payload bytes as it places them (urvt_crc32_copy); end (len = hlen +
 * paylen) adds the pad and writes the ICRC.
 */
size_t urvt_pkt_finish_begin(uint8_t *buf, size_t cap, size_t hlen, size_t paylen,
			     const struct urvt_ipinfo *ip, uint32_t *crc);
void urvt_pkt_finish_end(uint8_t *buf, size_t len, uint32_t crc);

/* The same for a lossless link that carries no ICRC check (link/link.h):
 * pad as above, the ICRC field zero. */
size_t urvt_pkt_finish_no_icrc(uint8_t *buf, size_t cap, size_t len);

/*
 * The headers of a UD SEND Only (with Immediate) that f describes, as
 * urvt_pkt_build_hdr writes them, without its checks and its look at every
 * other header (a same-host UD send's way, transport/tx.c
 * urvt_build_ud_now): f->opcode is one of those two, buf has room for
 * their headers. The BTH fields a UD SEND sets: SE, PadCnt of f->paylen,
 * P_Key, destination QP, AckReq, PSN. Returns the header length.
 */
size_t urvt_pkt_build_ud_send(uint8_t *buf, const struct urvt_pkt *f);
/*
 * The headers of an ACKNOWLEDGE or ATOMIC ACKNOWLEDGE (RC or XRC: BTH, AETH,
 * AtomicAckETH for the atomic's), the bytes urvt_pkt_build_hdr writes for
 * them, without its look at every other header (a same-host ACK's way,
 * transport/tx.c urvt_build_hdr_now): f->opcode is one of those, buf has
 * room for their headers. Returns the header length.
 */
size_t urvt_pkt_build_ack(uint8_t *buf, const struct urvt_pkt *f);
/* After hlen header and paylen payload bytes: the PadCnt zero bytes and a
 * zero ICRC field (a lossless link, as urvt_pkt_finish_no_icrc). Returns
 * the packet's length. */
size_t urvt_pkt_pad_no_icrc(uint8_t *buf, size_t hlen, size_t paylen);

#endif /* URVT_WIRE_HDR_H */
