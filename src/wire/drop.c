// SPDX-License-Identifier: MIT
#include "wire/drop.h"

const char *const urvt_wire_drop_name[URVT_DROP_NUM] = {
	[URVT_DROP_NONE] = "none",
	[URVT_DROP_TRUNCATED] = "truncated",
	[URVT_DROP_BAD_TVER] = "bad_tver",
	[URVT_DROP_BAD_OPCODE] = "bad_opcode",
	[URVT_DROP_UNSUP_OPCODE] = "unsupported_opcode",
	[URVT_DROP_QPT_MISMATCH] = "qp_type_mismatch",
	[URVT_DROP_BAD_LENGTH] = "bad_length",
	[URVT_DROP_BAD_PAD] = "bad_pad",
	[URVT_DROP_BAD_PKEY] = "bad_pkey",
	[URVT_DROP_BAD_ICRC] = "bad_icrc",
	[URVT_DROP_BAD_IP] = "bad_ip_header",
	[URVT_DROP_BAD_UDP] = "bad_udp_header",
	[URVT_DROP_BAD_QPN] = "bad_qpn",
	[URVT_DROP_BAD_QKEY] = "bad_qkey",
	[URVT_DROP_NO_QP] = "no_qp",
	[URVT_DROP_BAD_ADDR] = "bad_address",
};

const char *urvt_wire_drop_str(int reason)
{
	if (reason < 0)
		reason = -reason;
	if (reason >= URVT_DROP_NUM || !urvt_wire_drop_name[reason])
		return "unknown";
	return urvt_wire_drop_name[reason];
}
