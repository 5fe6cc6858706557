/* SPDX-License-Identifier: MIT */
/* AETH syndrome (roce-wire §8), credit and RNR timer tables (qp-semantics §9.1). */
#ifndef URVT_WIRE_AETH_H
#define URVT_WIRE_AETH_H

#include <stdint.h>

/* Syndrome bits 6..5 */
enum urvt_aeth_type {
	URVT_AETH_ACK = 0,
	URVT_AETH_RNR_NAK = 1,
	URVT_AETH_RESERVED = 2,
	URVT_AETH_NAK = 3,
};

enum urvt_nak_code {
	URVT_NAK_PSN_SEQ_ERR = 0,
	URVT_NAK_INVALID_REQUEST = 1,
	URVT_NAK_REMOTE_ACCESS = 2,
	URVT_NAK_REMOTE_OP = 3,
	URVT_NAK_INVALID_RD_REQUEST = 4,
};

#define URVT_AETH_CREDIT_INVALID 0x1f /* "unlimited"; what rxe always sends */
#define URVT_CREDITS_UNLIMITED UINT32_MAX
#define URVT_AETH_SYN_ACK_UNLIMITED 0x1f

static inline uint8_t urvt_aeth_syn_ack(uint8_t credit_code)
{
	return credit_code & 0x1f;
}

static inline uint8_t urvt_aeth_syn_rnr(uint8_t timer_code)
{
	return (uint8_t)(URVT_AETH_RNR_NAK << 5 | (timer_code & 0x1f));
}

static inline uint8_t urvt_aeth_syn_nak(enum urvt_nak_code code)
{
	return (uint8_t)(URVT_AETH_NAK << 5 | (code & 0x1f));
}

static inline enum urvt_aeth_type urvt_aeth_syn_type(uint8_t syn)
{
	return (enum urvt_aeth_type)((syn >> 5) & 3);
}

/* Credit code, RNR timer code or NAK code, per the type. */
static inline uint8_t urvt_aeth_syn_value(uint8_t syn)
{
	return syn & 0x1f;
}

/* The AETH as one 32-bit word (syndrome << 24 | MSN), as rvt_compute_aeth builds it. */
static inline uint32_t urvt_aeth_word(uint8_t syn, uint32_t msn)
{
	return (uint32_t)syn << 24 | (msn & 0xffffff);
}

/* Credit code -> receive credits; [0x1f] = URVT_CREDITS_UNLIMITED (roce-wire §8). */
extern const uint32_t urvt_credit_table[32];

/* RNR timer code -> microseconds; 0x00 = 655.36 ms, 0x19 = 61.44 ms (qp-semantics §9.1). */
extern const uint32_t urvt_rnr_timer_us[32];

/* RNR timer code -> nanoseconds, for a timer's deadline. */
static inline uint64_t urvt_rnr_timer_ns(uint8_t timer_code)
{
	return (uint64_t)urvt_rnr_timer_us[timer_code & 0x1f] * 1000;
}

/* Largest credit code whose count is <= n_rwqe (rvt_compute_aeth); never 0x1f. */
uint8_t urvt_credit_code(uint32_t n_rwqe);

#endif /* URVT_WIRE_AETH_H */
