// SPDX-License-Identifier: MIT
/*
 * ICRC (roce-wire §9): CRC-32 (IEEE, as zlib crc32) over
 *   8 x 0xFF | IP header (TOS/TTL/checksum or TC/FL/hop limit = 1s) |
 *   UDP header (checksum = 1s) | BTH (byte 4 = 0xFF) | rest, ICRC excluded.
 * The masked headers are copied to a small stack buffer; the rest of the
 * packet is fed to the CRC (wire/crc32.c) in place.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "wire/drop.h"
#include "wire/hdr.h"
#include "wire/icrc.h"

#define LRH_STANDIN 8 /* the 8 bytes of 0xFF for the masked LRH (roce-wire §9 step 1) */
#define PREFIX_MAX (LRH_STANDIN + URVT_IPV6_HDR_BYTES + URVT_UDP_HDR_BYTES + URVT_BTH_BYTES)

/* GF(2)[x] mod P, reflected representation (bit 31 = x^0) */
#define GF2_ONE 0x80000000u /* x^0 */
/* x^32 mod P is P's terms below x^32: P itself in the reflected form */
#define GF2_X32 URVT_CRC32_POLY_REFL
/* x^-1 = (P + 1) / x: the reflected P shifted up one degree, x^31 term set */
#define GF2_XINV ((URVT_CRC32_POLY_REFL << 1) | 1u)

/*
 * buf holds 8 x FF + the masked IP and UDP headers (hlen bytes in all).
 * Append the masked BTH and run the CRC over it and the packet's next
 * bytes: len bytes from the BTH on (all of them, or the headers of a
 * packet whose payload the caller CRCs next: urvt_icrc_start).
 */
static uint32_t icrc_finish(uint8_t *buf, size_t hlen, const uint8_t *bth, size_t len)
{
	size_t b = len < URVT_BTH_BYTES ? len : URVT_BTH_BYTES;

	memcpy(buf + hlen, bth, b);
	if (b > 4)
		buf[hlen + 4] = 0xff; /* FECN, BECN, resv6 (roce-wire §9 step 4) */
	uint32_t crc = urvt_crc32(0, buf, hlen + b);
	return urvt_crc32(crc, bth + b, len - b);
}

static void mask_udp(uint8_t *udp)
{
	udp[6] = 0xff; /* checksum (roce-wire §9 step 3) */
	udp[7] = 0xff;
}

uint32_t urvt_icrc_ip(const uint8_t *ip_pkt, size_t len)
{
	uint8_t buf[PREFIX_MAX];
	size_t hl;

	if (len < 1)
		return 0;
	if ((ip_pkt[0] >> 4) == 4) {
		hl = URVT_IPV4_HDR_BYTES;
	} else if ((ip_pkt[0] >> 4) == 6) {
		hl = URVT_IPV6_HDR_BYTES;
	} else {
		return 0;
	}
	if (len < hl + URVT_UDP_HDR_BYTES)
		return 0;
	memset(buf, 0xff, LRH_STANDIN);
	memcpy(buf + LRH_STANDIN, ip_pkt, hl + URVT_UDP_HDR_BYTES);
	uint8_t *iph = buf + LRH_STANDIN;
	if (hl == URVT_IPV4_HDR_BYTES) {
		iph[1] = 0xff; /* TOS */
		iph[8] = 0xff; /* TTL */
		iph[10] = 0xff; /* header checksum */
		iph[11] = 0xff;
	} else {
		iph[0] |= 0x0f; /* traffic class + flow label */
		iph[1] = 0xff;
		iph[2] = 0xff;
		iph[3] = 0xff;
		iph[7] = 0xff; /* hop limit */
	}
	mask_udp(iph + hl);
	size_t pre = LRH_STANDIN + hl + URVT_UDP_HDR_BYTES;
	return icrc_finish(buf, pre, ip_pkt + hl + URVT_UDP_HDR_BYTES,
			   len - hl - URVT_UDP_HDR_BYTES);
}

/* 8 x FF + masked UDP header at buf[off]. */
static size_t put_udp(uint8_t *buf, size_t off, uint16_t sport, uint16_t dport, size_t len)
{
	uint8_t *udp = buf + off;

	urvt_put_be16(udp, sport);
	urvt_put_be16(udp + 2, dport);
	/* UDP length covers the ICRC too (roce-wire §1) */
	urvt_put_be16(udp + 4, (uint16_t)(URVT_UDP_HDR_BYTES + len + URVT_ICRC_BYTES));
	mask_udp(udp);
	return off + URVT_UDP_HDR_BYTES;
}

static size_t put_v4_prefix(uint8_t *buf, uint32_t saddr_be, uint32_t daddr_be,
			    uint16_t ip_id, bool df, uint16_t sport, uint16_t dport, size_t len)
{
	uint8_t *ip = buf + LRH_STANDIN;

	memset(buf, 0xff, LRH_STANDIN);
	ip[0] = 0x45;
	ip[1] = 0xff; /* TOS, masked */
	urvt_put_be16(ip + 2, (uint16_t)(URVT_IPV4_HDR_BYTES + URVT_UDP_HDR_BYTES + len +
					 URVT_ICRC_BYTES));
	urvt_put_be16(ip + 4, ip_id);
	urvt_put_be16(ip + 6, df ? URVT_IPV4_DF : 0);
	ip[8] = 0xff; /* TTL, masked */
	ip[9] = 17;
	ip[10] = 0xff; /* checksum, masked */
	ip[11] = 0xff;
	memcpy(ip + 12, &saddr_be, 4);
	memcpy(ip + 16, &daddr_be, 4);
	return put_udp(buf, LRH_STANDIN + URVT_IPV4_HDR_BYTES, sport, dport, len);
}

uint32_t urvt_icrc_v4(uint32_t saddr_be, uint32_t daddr_be, uint16_t ip_id, bool df,
		      uint16_t sport, uint16_t dport, const uint8_t *bth, size_t len)
{
	uint8_t buf[PREFIX_MAX];
	size_t pre = put_v4_prefix(buf, saddr_be, daddr_be, ip_id, df, sport, dport, len);

	/* No memo of a received stream's prefix here, though it would halve
	 * the check (75.7 -> 31.0 ns at 1040 B): a receiver that takes its
	 * batches faster acknowledges in smaller ones, and between two
	 * namespaces at MTU 1500 the sender, whose CPU is the limit, got twice
	 * the ACKs and lost 9 of 10 pairs (docs/wire.md "CRC-32
	 * implementation"). */
	return icrc_finish(buf, pre, bth, len);
}

static size_t put_v6_prefix(uint8_t *buf, const uint8_t saddr[16], const uint8_t daddr[16],
			    uint16_t sport, uint16_t dport, size_t len)
{
	uint8_t *ip = buf + LRH_STANDIN;

	memset(buf, 0xff, LRH_STANDIN);
	/* version 6; traffic class and flow label masked to ones (roce-wire §9 step 2) */
	ip[0] = 0x6f;
	ip[1] = 0xff;
	ip[2] = 0xff;
	ip[3] = 0xff;
	urvt_put_be16(ip + 4, (uint16_t)(URVT_UDP_HDR_BYTES + len + URVT_ICRC_BYTES));
	ip[6] = 17;
	ip[7] = 0xff; /* hop limit, masked */
	memcpy(ip + 8, saddr, 16);
	memcpy(ip + 24, daddr, 16);
	return put_udp(buf, LRH_STANDIN + URVT_IPV6_HDR_BYTES, sport, dport, len);
}

uint32_t urvt_icrc_v6(const uint8_t saddr[16], const uint8_t daddr[16], uint16_t sport,
		      uint16_t dport, const uint8_t *bth, size_t len)
{
	uint8_t buf[PREFIX_MAX];
	size_t pre = put_v6_prefix(buf, saddr, daddr, sport, dport, len);

	return icrc_finish(buf, pre, bth, len);
}

/*
 * BTH bytes 8..11 (AckReq, PSN) of a packet whose headers are the BTH
 * alone are the last four bytes the CRC reads before the payload, and a
 * change d of the last four input bytes changes the register by
 * d x^32 mod P (docs/wire.md). w8_was: those bytes of the packet whose
 * register crc is.
 */
static uint32_t bth_tail_changed(uint32_t crc, uint32_t w8_was, const uint8_t *bth)
{
	return crc ^ urvt_gf2_mulmod(urvt_icrc_get(bth + 8) ^ w8_was, GF2_X32);
}

uint32_t urvt_icrc_start_next(uint32_t crc, const uint8_t *was, const uint8_t *bth)
{
	return bth_tail_changed(crc, urvt_icrc_get(was + 8), bth);
}

/*
 * A built packet's headers when they are the BTH alone (a SEND or WRITE
 * middle packet: most of a stream), kept per thread for the last one: the
 * next usually differs only in BTH bytes 8..11, so one product
 * (bth_tail_changed) instead of the prefix again.
 */
struct bth_only_memo {
	uint64_t addrs, id_ports, bth_lo;  /* saddr daddr; ID, ports; BTH 0..7 */
	size_t len;
	bool df, used;
	uint32_t w8;                       /* BTH bytes 8..11 of crc */
	uint32_t crc;
};
static __thread struct bth_only_memo bth_memo __attribute__((tls_model("initial-exec")));

uint32_t urvt_icrc_start(const struct urvt_ipinfo *ip, const uint8_t *bth, size_t hlen,
			 size_t len)
{
	uint8_t buf[PREFIX_MAX];
	size_t n = hlen < len ? hlen : len;
	bool v4 = urvt_ipinfo_is_v4(ip), memo = v4 && n == URVT_BTH_BYTES;
	struct bth_only_memo *m = &bth_memo;
	uint64_t addrs = 0, id_ports = 0, bth_lo = 0;

	if (memo) {
		addrs = (uint64_t)urvt_gid_to_v4(ip->sgid) << 32 | urvt_gid_to_v4(ip->dgid);
		id_ports = (uint64_t)ip->ip_id << 32 | (uint64_t)ip->sport << 16 | ip->dport;
		/* byte 4 as the ICRC sees it (roce-wire §9 step 4) */
		bth_lo = ((uint64_t)urvt_icrc_get(bth + 4) << 32 | urvt_icrc_get(bth)) | 0xffull << 32;
		if (m->used && m->addrs == addrs && m->id_ports == id_ports && m->bth_lo == bth_lo &&
		    m->len == len && m->df == ip->df)
			return bth_tail_changed(m->crc, m->w8, bth);
	}
	size_t pre = v4 ? put_v4_prefix(buf, urvt_gid_to_v4(ip->sgid), urvt_gid_to_v4(ip->dgid),
					ip->ip_id, ip->df, ip->sport, ip->dport, len) :
			  put_v6_prefix(buf, ip->sgid, ip->dgid, ip->sport, ip->dport, len);
	uint32_t crc = icrc_finish(buf, pre, bth, n);

	if (memo) {
		*m = (struct bth_only_memo){ .addrs = addrs, .id_ports = id_ports, .bth_lo = bth_lo,
					     .len = len, .df = ip->df, .used = true,
					     .w8 = urvt_icrc_get(bth + 8), .crc = crc };
	}
	return crc;
}

uint32_t urvt_icrc(const struct urvt_ipinfo *ip, const uint8_t *bth, size_t len)
{
	return urvt_icrc_start(ip, bth, len, len);
}

/* ---- GF(2)[x] mod P ---- */

/*
 * Powers x^(8n) or x^(-8n), n < 65536, in two products: a table of s^i and
 * one of s^(256i), i < 256, for the step s = x^8 or x^-8. A stream of one
 * packet size asks the same n for each packet: each thread keeps the last
 * n it asked of a table and its power (a memo), which it then has without
 * a product.
 */
struct gf2_pow8 {
	uint32_t lo[256], hi[256];
};

static void gf2_pow8_init(struct gf2_pow8 *t, uint32_t step)
{
	t->lo[0] = GF2_ONE;
	for (int i = 1; i < 256; i++)
		t->lo[i] = urvt_gf2_mulmod(t->lo[i - 1], step);
	uint32_t big = urvt_gf2_mulmod(t->lo[255], step); /* s^256 */
	t->hi[0] = GF2_ONE;
	for (int i = 1; i < 256; i++)
		t->hi[i] = urvt_gf2_mulmod(t->hi[i - 1], big);
}

static uint32_t gf2_pow8_get(const struct gf2_pow8 *t, uint32_t n)
{
	return urvt_gf2_mulmod(t->lo[n & 0xff], t->hi[(n >> 8) & 0xff]);
}

static struct gf2_pow8 xinv8, x8;
static pthread_once_t pow8_once = PTHREAD_ONCE_INIT;
static __thread uint64_t xinv8_last __attribute__((tls_model("initial-exec")));
static __thread uint64_t x8_last __attribute__((tls_model("initial-exec")));

static void pow8_init(void)
{
	uint32_t xinv = GF2_ONE;

	for (int i = 0; i < 8; i++)
		xinv = urvt_gf2_mulmod(xinv, GF2_XINV);
	gf2_pow8_init(&xinv8, xinv);
	gf2_pow8_init(&x8, GF2_ONE >> 8); /* x^8 in the reflected representation */
}

/* The memo: last is n << 32 | its power, 0 for none yet. */
static uint32_t gf2_pow8_memo(uint64_t *last, const struct gf2_pow8 *t, uint32_t n)
{
	uint32_t v;

	if (*last && (uint32_t)(*last >> 32) == n)
		return (uint32_t)*last;
	pthread_once(&pow8_once, pow8_init);
	v = gf2_pow8_get(t, n);
	*last = (uint64_t)n << 32 | v;
	return v;
}

uint32_t urvt_gf2_xinv8(uint32_t nbytes)
{
	pthread_once(&pow8_once, pow8_init);
	return gf2_pow8_get(&xinv8, nbytes);
}

/* x^(-8j) for the verifier (a received packet's ID) */
static uint32_t xinv8_cached(uint32_t j)
{
	return gf2_pow8_memo(&xinv8_last, &xinv8, j);
}

/* x^(8n) for the sender's GSO ID patch (urvt_icrc_v4_id_delta) */
static uint32_t x8_pow(uint32_t n)
{
	return gf2_pow8_memo(&x8_last, &x8, n);
}

/*
 * The forward direction of the verifier below: the ID bytes sit in a window
 * followed by j = k + 4 bytes' worth of x^8 factors, so changing ID 0 to id
 * changes the ICRC by W(id) * x^(8j) mod P.
 */
static uint32_t id_delta_factor(size_t len)
{
	enum { WIN_END = LRH_STANDIN + 7 };
	size_t n = LRH_STANDIN + URVT_IPV4_HDR_BYTES + URVT_UDP_HDR_BYTES + len;

	return x8_pow((uint32_t)(n - WIN_END + 4));
}

/* W(id): the ID's two bytes in the reflected window word */
static uint32_t id_window(uint16_t id)
{
	return (uint32_t)(id >> 8) << 8 | (uint32_t)(id & 0xff) << 16;
}

uint32_t urvt_icrc_v4_id_delta(size_t len, uint16_t id)
{
	if (!id)
		return 0;
	return urvt_gf2_mulmod(id_window(id), id_delta_factor(len));
}

/* W(id) and so the delta are linear in id's bits: one product for each
 * bit below n, then each delta is an earlier one XOR a product. No power
 * for ID 0 alone: a WRITE's first two packets are a run of their own
 * whose first length would evict the memo's (x8_pow) for the rest. */
void urvt_icrc_v4_id_deltas(size_t len, unsigned n, uint32_t *delta)
{
	uint32_t bit[16], k = n > 1 ? id_delta_factor(len) : 0;

	for (unsigned b = 0; b < 16 && (1u << b) < n; b++)
		bit[b] = urvt_gf2_mulmod(id_window((uint16_t)(1u << b)), k);
	for (unsigned id = 0; id < n; id++)
		delta[id] = id ? delta[id & (id - 1)] ^ bit[__builtin_ctz(id)] : 0;
}

/*
 * roce-wire §1.3. Let D = received ICRC ^ ICRC(ID=0, DF=1). For two
 * equal-length inputs the init/final XORs cancel, so D is the raw
 * (zero-init) CRC of the difference of the inputs, which is non-zero only in
 * the 3-byte window W = [ID hi, ID lo, flags hi] at CRC-input offset 12.
 * With k bytes after the window, raw CRC = W(x) * x^(8k+32) mod P, hence
 * W(x) = D * x^-(8k+32) mod P, a polynomial of degree < 24 iff the packet
 * is genuine. In the reflected word W's three bytes sit in bits 8..31 and
 * bits 0..7 must be zero; the flags byte must differ by nothing (DF set) or
 * exactly DF (DF clear). 16 (or 15) bits of protection remain.
 */
bool urvt_icrc_v4_verify_unknown_id(uint32_t saddr_be, uint32_t daddr_be, uint16_t sport,
				    uint16_t dport, const uint8_t *bth, size_t len_with_icrc,
				    unsigned flags, uint16_t *id_out, bool *df_out)
{
	enum { WIN_END = LRH_STANDIN + 7 }; /* input offset just past IPv4 byte 6 */

	if (len_with_icrc < URVT_BTH_BYTES + URVT_ICRC_BYTES ||
	    len_with_icrc > 0xffff - URVT_IPV4_HDR_BYTES - URVT_UDP_HDR_BYTES)
		return false;
	size_t len = len_with_icrc - URVT_ICRC_BYTES;
	uint32_t base = urvt_icrc_v4(saddr_be, daddr_be, 0, true, sport, dport, bth, len);
	uint32_t d = urvt_icrc_get(bth + len) ^ base;
	if (d == 0) {
		if (id_out)
			*id_out = 0;
		if (df_out)
			*df_out = true;
		return true;
	}
	size_t n = LRH_STANDIN + URVT_IPV4_HDR_BYTES + URVT_UDP_HDR_BYTES + len;
	size_t k = n - WIN_END; /* bytes after the window */
	uint32_t j = (uint32_t)(k + 4); /* x^-(8k+32) = x^-8j, j < 65536 by the length check */
	uint32_t w = urvt_gf2_mulmod(d, xinv8_cached(j));
	if (w & 0xff)
		return false;
	uint8_t flags_diff = (uint8_t)(w >> 24);
	if (flags_diff != 0 && !(flags_diff == (URVT_IPV4_DF >> 8) && (flags & URVT_ICRC_DF_ANY)))
		return false;
	if (id_out)
		*id_out = (uint16_t)(((w >> 8) & 0xff) << 8 | ((w >> 16) & 0xff));
	if (df_out)
		*df_out = flags_diff == 0;
	return true;
}

int urvt_icrc_check(struct urvt_ipinfo *ip, const uint8_t *bth, size_t len_with_icrc,
		    unsigned flags)
{
	if (len_with_icrc < URVT_BTH_BYTES + URVT_ICRC_BYTES)
		return -URVT_DROP_BAD_ICRC;
	size_t len = len_with_icrc - URVT_ICRC_BYTES;
	if (urvt_ipinfo_is_v4(ip) && (flags & URVT_ICRC_V4_ID_UNKNOWN)) {
		uint16_t id;
		bool df;
		if (!urvt_icrc_v4_verify_unknown_id(urvt_gid_to_v4(ip->sgid),
						    urvt_gid_to_v4(ip->dgid), ip->sport, ip->dport,
						    bth, len_with_icrc, flags & URVT_ICRC_DF_ANY,
						    &id, &df))
			return -URVT_DROP_BAD_ICRC;
		ip->ip_id = id;
		ip->df = df;
		return 0;
	}
	if (urvt_icrc(ip, bth, len) != urvt_icrc_get(bth + len))
		return -URVT_DROP_BAD_ICRC;
	return 0;
}
