// SPDX-License-Identifier: MIT
#include <string.h>

#include "wire/grh.h"

int urvt_grh_fill(uint8_t grh[URVT_GRH_BYTES], const struct urvt_ipinfo *ip, size_t roce_len)
{
	/* the IP header built in place: every UD receive makes one */
	if (urvt_ipinfo_is_v4(ip)) {
		memset(grh, 0, URVT_GRH_BYTES - URVT_IPV4_HDR_BYTES);
		if (urvt_ip_hdr_build(grh + URVT_GRH_BYTES - URVT_IPV4_HDR_BYTES, ip,
				      URVT_UDP_HDR_BYTES + roce_len))
			return 0;
	} else if (urvt_ip_hdr_build(grh, ip, URVT_UDP_HDR_BYTES + roce_len)) {
		return 0;
	}
	memset(grh, 0, URVT_GRH_BYTES);
	return -1;
}
