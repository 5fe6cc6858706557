// SPDX-License-Identifier: MIT
/* IP/UDP header synthesis and parsing around RoCEv2 (roce-wire §1, §12). */
#include <string.h>

#include "wire/drop.h"
#include "wire/hdr.h"
#include "wire/ip.h"

void urvt_ipinfo_v4(struct urvt_ipinfo *ip, uint32_t saddr_be, uint32_t daddr_be,
		    uint16_t sport, uint16_t dport)
{
	memset(ip, 0, sizeof(*ip));
	urvt_gid_from_v4(ip->sgid, saddr_be);
	urvt_gid_from_v4(ip->dgid, daddr_be);
	ip->sport = sport;
	ip->dport = dport;
	ip->hop_limit = 64;
	ip->ip_id = 0; /* unconnected socket + IP_PMTUDISC_DO, docs/wire.md */
	ip->df = true;
}

void urvt_ipinfo_v6(struct urvt_ipinfo *ip, const uint8_t saddr[16], const uint8_t daddr[16],
		    uint16_t sport, uint16_t dport)
{
	memset(ip, 0, sizeof(*ip));
	memcpy(ip->sgid, saddr, 16);
	memcpy(ip->dgid, daddr, 16);
	ip->sport = sport;
	ip->dport = dport;
	ip->hop_limit = 64;
}

/* The ones' complement sum in the host's byte order, four bytes at a time:
 * the sum of byte-swapped 16-bit words is the byte-swapped sum (RFC 1071's
 * byte-order independence), so one swap at the end gives the big-endian
 * value. Every UD receive builds one (its GRH image, roce-wire §11): the
 * 16-bit loop was ~100 instructions of it. */
uint16_t urvt_ipv4_csum(const uint8_t hdr[URVT_IPV4_HDR_BYTES])
{
	uint64_t sum = 0;
	uint16_t field, folded;

	for (int i = 0; i < URVT_IPV4_HDR_BYTES; i += 4) {
		uint32_t w;
		memcpy(&w, hdr + i, sizeof(w));
		sum += w;
	}
	/* the checksum field itself counts as zero: take back what it added
	 * (bytes 10-11, the high half of the third word) */
	memcpy(&field, hdr + 10, sizeof(field));
	sum -= (uint64_t)field << 16;
	sum = (sum & 0xffffffffu) + (sum >> 32);
	sum = (sum & 0xffffffffu) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	folded = (uint16_t)~sum;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	folded = __builtin_bswap16(folded);
#endif
	return folded;
}

size_t urvt_ip_hdr_build(uint8_t *out, const struct urvt_ipinfo *ip, size_t udp_len)
{
	if (urvt_ipinfo_is_v4(ip)) {
		if (URVT_IPV4_HDR_BYTES + udp_len > 0xffff)
			return 0;
		out[0] = 0x45; /* version 4, IHL 5: no options (roce-wire §1) */
		out[1] = ip->tclass;
		urvt_put_be16(out + 2, (uint16_t)(URVT_IPV4_HDR_BYTES + udp_len));
		urvt_put_be16(out + 4, ip->ip_id);
		urvt_put_be16(out + 6, ip->df ? URVT_IPV4_DF : 0);
		out[8] = ip->hop_limit;
		out[9] = 17; /* UDP */
		memcpy(out + 12, ip->sgid + 12, 4);
		memcpy(out + 16, ip->dgid + 12, 4);
		/* every byte written before the sum: a GRH image is built
		 * on the stack, whose old bytes memcheck calls undefined */
		urvt_put_be16(out + 10, 0);
		urvt_put_be16(out + 10, urvt_ipv4_csum(out));
		return URVT_IPV4_HDR_BYTES;
	}
	if (udp_len > 0xffff)
		return 0;
	urvt_put_be32(out, 6u << 28 | (uint32_t)ip->tclass << 20 | (ip->flow_label & 0xfffff));
	urvt_put_be16(out + 4, (uint16_t)udp_len);
	out[6] = 17; /* next header UDP, no extension headers (roce-wire §1) */
	out[7] = ip->hop_limit;
	memcpy(out + 8, ip->sgid, 16);
	memcpy(out + 24, ip->dgid, 16);
	return URVT_IPV6_HDR_BYTES;
}

size_t urvt_ip_udp_hdr_build(uint8_t *out, const struct urvt_ipinfo *ip, size_t roce_len)
{
	size_t udp_len = URVT_UDP_HDR_BYTES + roce_len;
	size_t hl = urvt_ip_hdr_build(out, ip, udp_len);

	if (!hl)
		return 0;
	urvt_put_be16(out + hl, ip->sport);
	urvt_put_be16(out + hl + 2, ip->dport);
	urvt_put_be16(out + hl + 4, (uint16_t)udp_len);
	urvt_put_be16(out + hl + 6, 0); /* rxe sends 0 (roce-wire §1.2) */
	return hl + URVT_UDP_HDR_BYTES;
}

int urvt_ip_parse(const uint8_t *pkt, size_t len, struct urvt_ipinfo *ip,
		  const uint8_t **udp_payload, size_t *udp_payload_len)
{
	size_t hl, ip_payload;
	uint32_t a;

	if (len < 1)
		return -URVT_DROP_TRUNCATED;
	memset(ip, 0, sizeof(*ip));
	switch (pkt[0] >> 4) {
	case 4: {
		if (len < URVT_IPV4_HDR_BYTES)
			return -URVT_DROP_TRUNCATED;
		if (pkt[0] != 0x45 || pkt[9] != 17) /* options, not UDP (roce-wire §1) */
			return -URVT_DROP_BAD_IP;
		uint16_t frag = urvt_get_be16(pkt + 6);
		if (frag & 0x3fff) /* MF or an offset: a fragment */
			return -URVT_DROP_BAD_IP;
		size_t tot = urvt_get_be16(pkt + 2);
		if (tot < URVT_IPV4_HDR_BYTES || tot > len)
			return tot > len ? -URVT_DROP_TRUNCATED : -URVT_DROP_BAD_IP;
		hl = URVT_IPV4_HDR_BYTES;
		ip_payload = tot - hl;
		memcpy(&a, pkt + 12, 4);
		urvt_gid_from_v4(ip->sgid, a);
		memcpy(&a, pkt + 16, 4);
		urvt_gid_from_v4(ip->dgid, a);
		ip->tclass = pkt[1];
		ip->hop_limit = pkt[8];
		ip->ip_id = urvt_get_be16(pkt + 4);
		ip->df = frag & URVT_IPV4_DF;
		break;
	}
	case 6:
		if (len < URVT_IPV6_HDR_BYTES)
			return -URVT_DROP_TRUNCATED;
		if (pkt[6] != 17)
			return -URVT_DROP_BAD_IP;
		hl = URVT_IPV6_HDR_BYTES;
		ip_payload = urvt_get_be16(pkt + 4);
		if (ip_payload > len - hl)
			return -URVT_DROP_TRUNCATED;
		ip->tclass = (uint8_t)(urvt_get_be16(pkt) >> 4);
		ip->flow_label = urvt_get_be24(pkt + 1) & 0xfffff;
		ip->hop_limit = pkt[7];
		memcpy(ip->sgid, pkt + 8, 16);
		memcpy(ip->dgid, pkt + 24, 16);
		break;
	default:
		return -URVT_DROP_BAD_IP;
	}
	if (ip_payload < URVT_UDP_HDR_BYTES)
		return -URVT_DROP_TRUNCATED;
	const uint8_t *udp = pkt + hl;
	size_t ulen = urvt_get_be16(udp + 4);
	if (ulen < URVT_UDP_HDR_BYTES || ulen > ip_payload)
		return -URVT_DROP_BAD_UDP;
	ip->sport = urvt_get_be16(udp);
	ip->dport = urvt_get_be16(udp + 2);
	*udp_payload = udp + URVT_UDP_HDR_BYTES;
	*udp_payload_len = ulen - URVT_UDP_HDR_BYTES;
	return 0;
}
