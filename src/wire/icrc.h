/* SPDX-License-Identifier: MIT */
/*
 * Invariant CRC (roce-wire §9) and the IPv4 "unknown Identification"
 * verifier (roce-wire §1.3, docs/wire.md).
 *
 * Lengths: unless a name says "with_icrc", len covers the CRC input after
 * the IP/UDP headers, i.e. BTH .. pad, the 4 ICRC bytes EXCLUDED.
 * Results are CRC register values; on the wire they are stored
 * least-significant byte first (urvt_icrc_put / urvt_icrc_get).
 */
#ifndef URVT_WIRE_ICRC_H
#define URVT_WIRE_ICRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/crc32.h"
#include "wire/ip.h"

static inline void urvt_icrc_put(uint8_t *p, uint32_t crc)
{
	p[0] = (uint8_t)crc;
	p[1] = (uint8_t)(crc >> 8);
	p[2] = (uint8_t)(crc >> 16);
	p[3] = (uint8_t)(crc >> 24);
}

static inline uint32_t urvt_icrc_get(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * ICRC of a full IP packet (IPv4 IHL 5 or IPv6, then UDP, BTH ...): ip_pkt
 * points at the IP header, len covers IP header .. pad (ICRC excluded).
 * Header fields are used as they are in the packet (total length, ID, flags,
 * UDP length), masked per roce-wire §9. Returns 0 for an IP version other
 * than 4/6 or len shorter than the IP + UDP headers (never reads past len).
 */
uint32_t urvt_icrc_ip(const uint8_t *ip_pkt, size_t len);

/* Same, computed from the fields without materialising the IP header;
 * IP total / payload length and UDP length are derived from len. */
uint32_t urvt_icrc_v4(uint32_t saddr_be, uint32_t daddr_be, uint16_t ip_id, bool df,
		      uint16_t sport, uint16_t dport, const uint8_t *bth, size_t len);
uint32_t urvt_icrc_v6(const uint8_t saddr[16], const uint8_t daddr[16], uint16_t sport,
		      uint16_t dport, const uint8_t *bth, size_t len);

/* Dispatch on the address family of ip (uses ip->ip_id and ip->df for IPv4). */
uint32_t urvt_icrc(const struct urvt_ipinfo *ip, const uint8_t *bth, size_t len);

/* The ICRC of a packet of len bytes (BTH .. pad) computed in two steps:
 * this covers the masked IP/UDP headers and bth[0, hlen); urvt_crc32 over
 * the remaining len - hlen bytes, continued from the returned value, gives
 * the ICRC (so the payload can be CRCed while it is copied in). */
uint32_t urvt_icrc_start(const struct urvt_ipinfo *ip, const uint8_t *bth, size_t hlen,
			 size_t len);

/* urvt_icrc_start of a packet whose headers are the BTH alone, from that
 * of another (crc) that differs from it only in BTH bytes 8..11 (AckReq,
 * PSN): was and bth are the two BTHs. One product instead of the masked
 * prefix built and CRCed again: a message's middle packets. */
uint32_t urvt_icrc_start_next(uint32_t crc, const uint8_t *was, const uint8_t *bth);

/*
 * What to XOR into an IPv4 ICRC computed with IP ID 0 to get the ICRC of
 * the same packet (BTH .. pad, len bytes, len < 65507) carrying IP ID id.
 * Used for UDP GSO sends: the kernel (or the NIC) gives segment k the ID
 * base + k.
 */
uint32_t urvt_icrc_v4_id_delta(size_t len, uint16_t id);
/* urvt_icrc_v4_id_delta(len, id) for each id < n (n <= 65536) into
 * delta[id], for less than a product each: a GSO train's IDs 0 .. n-1 */
void urvt_icrc_v4_id_deltas(size_t len, unsigned n, uint32_t *delta);

/* urvt_icrc_v4_verify_unknown_id() flags */
enum {
	URVT_ICRC_DF_ANY = 1u << 0, /* also accept DF clear (costs 1 bit of the 16 left) */
};

/*
 * Verify an IPv4 packet whose IP Identification is unknown (a UDP socket
 * cannot see it). CRC-32 is affine: ICRC(ID=x) = ICRC(ID=0) ^ L(x) with L
 * linear and injective, so the packet is accepted iff the difference to the
 * received ICRC is L(x) for some 16-bit x, which also yields x. DF is
 * assumed set unless URVT_ICRC_DF_ANY. len_with_icrc: BTH .. ICRC, at most
 * 65507. On success stores the sender's ID (and DF) if the pointers are
 * non-NULL. About 2^-16 of random corruptions pass (2^-15 with DF_ANY).
 */
bool urvt_icrc_v4_verify_unknown_id(uint32_t saddr_be, uint32_t daddr_be, uint16_t sport,
				    uint16_t dport, const uint8_t *bth, size_t len_with_icrc,
				    unsigned flags, uint16_t *id_out, bool *df_out);

/* urvt_icrc_check() flags */
enum {
	URVT_ICRC_V4_ID_UNKNOWN = 1u << 8, /* IPv4: ip->ip_id/df unknown; recover them */
};

/*
 * Receive-side check of BTH .. ICRC (len_with_icrc bytes) against ip.
 * IPv6, or IPv4 with a known ID: exact compare. IPv4 with
 * URVT_ICRC_V4_ID_UNKNOWN: the unknown-ID verifier; on success ip->ip_id and
 * ip->df are set to the recovered values (URVT_ICRC_DF_ANY may be or'ed in).
 * Returns 0 or -URVT_DROP_BAD_ICRC (also for len_with_icrc < 16).
 */
int urvt_icrc_check(struct urvt_ipinfo *ip, const uint8_t *bth, size_t len_with_icrc,
		    unsigned flags);

/*
 * GF(2) helper behind the verifier (with urvt_gf2_mulmod, wire/crc32.h),
 * exposed for tests and the benchmark. Polynomials are in the reflected
 * CRC-32 representation (bit 31 = x^0).
 */
/* x^(-8 * nbytes) mod P, nbytes < 65536 */
uint32_t urvt_gf2_xinv8(uint32_t nbytes);

#endif /* URVT_WIRE_ICRC_H */
