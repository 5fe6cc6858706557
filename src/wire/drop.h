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
	URVT_DROP_BAD_TVER,	  /* BTH.TVer != 0 (roce-wire §2) */
	URVT_DROP_BAD_OPCODE,	  /* reserved / unknown opcode (roce-wire §4.4) */
	URVT_DROP_UNSUP_OPCODE,	  /* known but unsupported class: RD (roce-wire §4.4) */
	URVT_DROP_QPT_MISMATCH,	  /* opcode transport != QP type (roce-wire §4.4) */
	URVT_DROP_BAD_LENGTH,	  /* not a multiple of 4, or data on a no-payload opcode */
	URVT_DROP_BAD_PAD,	  /* PadCnt on a no-payload opcode or larger than the data */
	URVT_DROP_BAD_PKEY,	  /* invalid P_Key or no match (roce-wire §7) */
	URVT_DROP_BAD_ICRC,	  /* ICRC mismatch (roce-wire §9) */
	URVT_DROP_BAD_IP,	  /* IP version, IHL/options, protocol, fragment (roce-wire §1) */
	URVT_DROP_BAD_UDP,	  /* UDP length inconsistent with the IP length (roce-wire §1) */
	URVT_DROP_BAD_QPN,	  /* QPN 0 (SMI) is not used on RoCE (roce-wire §12) */
	URVT_DROP_BAD_QKEY,	  /* DETH Q_Key mismatch (roce-wire §7) - receive path */
	URVT_DROP_NO_QP,	  /* no such QP - receive path */
	URVT_DROP_BAD_ADDR,	  /* addresses not the QP's (roce-wire §12) - receive path */
	URVT_DROP_NUM
};

/* Name table, designated initializers: urvt_wire_drop_name[URVT_DROP_BAD_ICRC] == "bad_icrc". */
extern const char *const urvt_wire_drop_name[URVT_DROP_NUM];

/* Accepts either sign (0, URVT_DROP_x or -URVT_DROP_x); "unknown" when out of range. */
const char *urvt_wire_drop_str(int reason);

#endif /* URVT_WIRE_DROP_H */
