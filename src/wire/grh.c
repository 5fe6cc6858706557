// SPDX-License-Identifier: MIT
#include <string.h>

#include "wire/grh.h"

int urvt_grh_fill(uint8_t grh[URVT_GRH_BYTES], const struct urvt_ipinfo *ip, size_t roce_len)
{
	uint8_t hdr[URVT_IPV6_HDR_BYTES + URVT_UDP_HDR_BYTES];

	memset(grh, 0, URVT_GRH_BYTES);
	if (!urvt_ip_udp_hdr_build(hdr, ip, roce_len))
		return -1;
	if (urvt_ipinfo_is_v4(ip))
		memcpy(grh + URVT_GRH_BYTES - URVT_IPV4_HDR_BYTES, hdr, URVT_IPV4_HDR_BYTES);
	else
		memcpy(grh, hdr, URVT_IPV6_HDR_BYTES);
	return 0;
}
