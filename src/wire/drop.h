/* SPDX-License-Identifier: MIT */
/*
 * Why a received packet was dropped. The wire code returns these negated
 * (-URVT_DROP_x); the receive path uses the same enum for its own checks so
 * one table of per-device counters covers every reason.
 */
#ifndef URVT_WIRE_DROP_H
#define URVT_WIRE_DROP_H

enum urvt_wire_drop {
	URVT_DROP_NONE = 0,
	URVT_DROP_TRUNCATED,	  /* shorter than BTH + ICRC or the opcode's headers */
	URVT_DROP_BAD_TVER,	  /* BTH.TVer != 0 (roce-wire.md §2) */
	URVT_DROP_BAD_OPCODE,	  /* reserved / unknown opcode (§4.4) */
	URVT_DROP_UNSUP_OPCODE,	  /* known but unsupported class: RD (§4.4) */
	URVT_DROP_QPT_MISMATCH,	  /* opcode transport != QP type (§4.4) */
	URVT_DROP_BAD_LENGTH,	  /* not a multiple of 4, or data on a no-payload opcode */
	URVT_DROP_BAD_PAD,	  /* PadCnt on a no-payload opcode or larger than the data */
	URVT_DROP_BAD_PKEY,	  /* invalid P_Key or no match (§7) */
	URVT_DROP_BAD_ICRC,	  /* ICRC mismatch (§9) */
	URVT_DROP_BAD_IP,	  /* IP version, IHL/options, protocol, fragment (§1) */
	URVT_DROP_BAD_UDP,	  /* UDP length inconsistent with the IP length (§1) */
	URVT_DROP_BAD_QPN,	  /* QPN 0 (SMI) is not used on RoCE (§12) */
	URVT_DROP_BAD_QKEY,	  /* DETH Q_Key mismatch (§7) - receive path */
	URVT_DROP_NO_QP,	  /* no such QP - receive path */
	URVT_DROP_BAD_ADDR,	  /* addresses do not match the QP (§12) - receive path */
	URVT_DROP_NUM
};

/* Name table, designated initializers: urvt_wire_drop_name[URVT_DROP_BAD_ICRC] == "bad_icrc". */
extern const char *const urvt_wire_drop_name[URVT_DROP_NUM];

/* Accepts either sign (0, URVT_DROP_x or -URVT_DROP_x); "unknown" when out of range. */
const char *urvt_wire_drop_str(int reason);

#endif /* URVT_WIRE_DROP_H */
