/* SPDX-License-Identifier: MIT */
/*
 * The IP and UDP headers around a RoCEv2 packet (roce-wire §1, §12):
 * what a sender or receiver knows of them, and how to synthesise / parse
 * them for the ICRC, the UD GRH image and pcap traces.
 */
#ifndef URVT_WIRE_IP_H
#define URVT_WIRE_IP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define URVT_IPV4_HDR_BYTES 20
#define URVT_IPV6_HDR_BYTES 40
#define URVT_UDP_HDR_BYTES 8
#define URVT_IPV4_DF 0x4000 /* in the flags/fragment-offset word */

/*
 * Addressing of one packet. Addresses are RoCEv2 GIDs (16 bytes, network
 * order); IPv4 is the IPv4-mapped form ::ffff:a.b.c.d (roce-wire §12),
 * which selects IPv4 everywhere. Ports are host order.
 */
struct urvt_ipinfo {
	uint8_t sgid[16];
	uint8_t dgid[16];
	uint16_t sport;
	uint16_t dport;
	uint8_t tclass;	     /* IPv4 TOS / IPv6 traffic class; ICRC-masked */
	uint8_t hop_limit;   /* TTL / hop limit; ICRC-masked */
	uint32_t flow_label; /* IPv6 only; ICRC-masked */
	uint16_t ip_id;	     /* IPv4 only; covered by the ICRC (roce-wire §1.3) */
	bool df;	     /* IPv4 only; covered by the ICRC */
};

/* Do a and b describe the same IP and UDP headers? Field by field (the
 * padding between them is no one's). */
static inline bool urvt_ipinfo_same(const struct urvt_ipinfo *a, const struct urvt_ipinfo *b)
{
	return !memcmp(a->sgid, b->sgid, 16) && !memcmp(a->dgid, b->dgid, 16) &&
	       a->sport == b->sport && a->dport == b->dport && a->tclass == b->tclass &&
	       a->hop_limit == b->hop_limit && a->flow_label == b->flow_label &&
	       a->ip_id == b->ip_id && a->df == b->df;
}

/* ::ffff:a.b.c.d? Two word compares: every packet built or checked asks */
static inline bool urvt_gid_is_v4(const uint8_t gid[16])
{
	static const uint8_t pfx_hi[4] = { 0, 0, 0xff, 0xff };
	uint64_t lo;
	uint32_t hi, want;

	memcpy(&lo, gid, 8);
	memcpy(&hi, gid + 8, 4);
	memcpy(&want, pfx_hi, 4);
	return !lo && hi == want;
}

static inline bool urvt_ipinfo_is_v4(const struct urvt_ipinfo *ip)
{
	return urvt_gid_is_v4(ip->sgid);
}

/* a.b.c.d as s_addr (network order in memory) <-> ::ffff:a.b.c.d */
static inline void urvt_gid_from_v4(uint8_t gid[16], uint32_t addr_be)
{
	memset(gid, 0, 10);
	gid[10] = 0xff;
	gid[11] = 0xff;
	memcpy(gid + 12, &addr_be, 4);
}

static inline uint32_t urvt_gid_to_v4(const uint8_t gid[16])
{
	uint32_t a;

	memcpy(&a, gid + 12, 4);
	return a;
}

/*
 * Fill ip for IPv4 as urvt sends it: ID 0, DF set (docs/wire.md), TOS 0,
 * TTL 64. Addresses are s_addr values (network order).
 */
void urvt_ipinfo_v4(struct urvt_ipinfo *ip, uint32_t saddr_be, uint32_t daddr_be,
		    uint16_t sport, uint16_t dport);
void urvt_ipinfo_v6(struct urvt_ipinfo *ip, const uint8_t saddr[16], const uint8_t daddr[16],
		    uint16_t sport, uint16_t dport);

uint16_t urvt_ipv4_csum(const uint8_t hdr[URVT_IPV4_HDR_BYTES]);

/*
 * Write the IP header alone (20 or 40 bytes, correct IPv4 checksum) of a
 * UDP datagram of udp_len bytes (UDP header included). Returns the bytes
 * written, or 0 when the length does not fit the 16-bit length field.
 */
size_t urvt_ip_hdr_build(uint8_t *out, const struct urvt_ipinfo *ip, size_t udp_len);

/*
 * Write the IP header (20 or 40 bytes, correct IPv4 checksum) followed by
 * the UDP header (checksum 0, as rxe sends, roce-wire §1.2) for a UDP
 * payload of roce_len bytes. Returns the bytes written (28 or 48), or 0 when the
 * lengths do not fit the 16-bit length fields.
 */
size_t urvt_ip_udp_hdr_build(uint8_t *out, const struct urvt_ipinfo *ip, size_t roce_len);

/*
 * Parse an IP packet (IPv4 without options or IPv6 without extension
 * headers, UDP; roce-wire §1). Fills ip (including ID, DF, TOS, TTL, flow
 * label) and the UDP payload span. The UDP payload length is taken from the UDP header,
 * which must fit in the IP length. Does not require port 4791.
 * Returns 0 or -URVT_DROP_BAD_IP / -URVT_DROP_BAD_UDP / -URVT_DROP_TRUNCATED.
 */
int urvt_ip_parse(const uint8_t *pkt, size_t len, struct urvt_ipinfo *ip,
		  const uint8_t **udp_payload, size_t *udp_payload_len);

#endif /* URVT_WIRE_IP_H */
