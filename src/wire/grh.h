/* SPDX-License-Identifier: MIT */
/* The 40-byte GRH image placed before the payload of UD receives (roce-wire §11). */
#ifndef URVT_WIRE_GRH_H
#define URVT_WIRE_GRH_H

#include <stddef.h>
#include <stdint.h>

#include "wire/ip.h"

#define URVT_GRH_BYTES 40

/*
 * IPv6: the IPv6 header verbatim. IPv4: 20 zero bytes, then the IPv4 header
 * (0x45, TOS = tclass, total length, ID, DF, TTL = hop_limit, protocol 17,
 * correct header checksum, addresses). roce_len is the UDP payload length
 * (BTH .. ICRC) the header described. Returns 0, or -1 if roce_len is too
 * large for the IP length fields (grh then zeroed).
 */
int urvt_grh_fill(uint8_t grh[URVT_GRH_BYTES], const struct urvt_ipinfo *ip, size_t roce_len);

#endif /* URVT_WIRE_GRH_H */
