/* SPDX-License-Identifier: MIT */
/*
 * RoCEv2 / IB transport opcode table (roce-wire §4).
 *
 * One table, indexed by the BTH opcode byte, drives both the packet builder
 * and the parser: which extended headers follow the BTH and at which offset,
 * whether a payload follows, and what kind of packet it is.
 */
#ifndef URVT_WIRE_OPCODE_H
#define URVT_WIRE_OPCODE_H

#include <stdbool.h>
#include <stdint.h>

/* Header types, in wire order (roce-wire §3: BTH, XRCETH, DETH, RETH,
 * AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, payload; FLUSH puts FETH
 * before RETH). */
enum urvt_hdr_type {
	URVT_BTH,
	URVT_XRCETH,
	URVT_FETH,
	URVT_DETH,
	URVT_RETH,
	URVT_ATMETH,
	URVT_AETH,
	URVT_ATMACK,
	URVT_IMMDT,
	URVT_IETH,
	URVT_CNPRSV, /* the 16 reserved bytes of a CNP */
	URVT_PAYLOAD,
	URVT_NUM_HDR_TYPES
};

/* Header sizes in bytes (roce-wire §2, §3, §4.4). */
enum {
	URVT_BTH_BYTES = 12,
	URVT_XRCETH_BYTES = 4,
	URVT_FETH_BYTES = 4,
	URVT_DETH_BYTES = 8,
	URVT_RETH_BYTES = 16,
	URVT_ATMETH_BYTES = 28,
	URVT_AETH_BYTES = 4,
	URVT_ATMACK_BYTES = 8,
	URVT_IMMDT_BYTES = 4,
	URVT_IETH_BYTES = 4,
	URVT_CNPRSV_BYTES = 16,
	URVT_ICRC_BYTES = 4,
	URVT_MAX_HDR_BYTES = 44, /* XRC COMPARE_SWAP / FETCH_ADD */
};

/* Opcode mask bits. The low bits mirror enum urvt_hdr_type. */
enum urvt_op_mask {
	URVT_BTH_MASK = 1u << URVT_BTH,
	URVT_XRCETH_MASK = 1u << URVT_XRCETH,
	URVT_FETH_MASK = 1u << URVT_FETH,
	URVT_DETH_MASK = 1u << URVT_DETH,
	URVT_RETH_MASK = 1u << URVT_RETH,
	URVT_ATMETH_MASK = 1u << URVT_ATMETH,
	URVT_AETH_MASK = 1u << URVT_AETH,
	URVT_ATMACK_MASK = 1u << URVT_ATMACK,
	URVT_IMMDT_MASK = 1u << URVT_IMMDT,
	URVT_IETH_MASK = 1u << URVT_IETH,
	URVT_CNPRSV_MASK = 1u << URVT_CNPRSV,
	URVT_PAYLOAD_MASK = 1u << URVT_PAYLOAD, /* may carry data */

	URVT_REQ_MASK = 1u << 12,	/* requester -> responder */
	URVT_ACK_MASK = 1u << 13,	/* responder -> requester (ACK, read resp, atomic ack) */
	URVT_SEND_MASK = 1u << 14,
	URVT_WRITE_MASK = 1u << 15,
	URVT_READ_MASK = 1u << 16,	/* read request and read responses */
	URVT_ATOMIC_MASK = 1u << 17,	/* COMPARE_SWAP, FETCH_ADD */
	URVT_RWR_MASK = 1u << 18,	/* consumes/needs a receive WQE */
	URVT_COMP_MASK = 1u << 19,	/* completes a receive WQE at the responder */
	URVT_FIRST_MASK = 1u << 20,	/* *_FIRST opcode */
	URVT_MIDDLE_MASK = 1u << 21,	/* *_MIDDLE opcode */
	URVT_LAST_MASK = 1u << 22,	/* *_LAST opcode */
	URVT_ONLY_MASK = 1u << 23,	/* *_ONLY and single-packet ops */
	URVT_START_MASK = 1u << 24,	/* first packet of a message: FIRST or ONLY */
	URVT_END_MASK = 1u << 25,	/* last packet of a message: LAST or ONLY */
	URVT_FLUSH_MASK = 1u << 26,	/* IBTA 1.5 FLUSH */
	URVT_ATOMIC_WRITE_MASK = 1u << 27, /* IBTA 1.5 ATOMIC_WRITE */
	URVT_CNP_MASK = 1u << 28,
	URVT_SE_OK_MASK = 1u << 29,	/* SE may be set (roce-wire §2, §10) */
};

/* Transport class = top three opcode bits (roce-wire §2). */
enum urvt_transport {
	URVT_TRANSPORT_RC = 0,
	URVT_TRANSPORT_UC = 1,
	URVT_TRANSPORT_RD = 2,
	URVT_TRANSPORT_UD = 3,
	URVT_TRANSPORT_CNP = 4,
	URVT_TRANSPORT_XRC = 5,
};

/* Opcode values (roce-wire §4). */
enum urvt_opcode {
	URVT_OP_RC_SEND_FIRST = 0x00,
	URVT_OP_RC_SEND_MIDDLE = 0x01,
	URVT_OP_RC_SEND_LAST = 0x02,
	URVT_OP_RC_SEND_LAST_WITH_IMMEDIATE = 0x03,
	URVT_OP_RC_SEND_ONLY = 0x04,
	URVT_OP_RC_SEND_ONLY_WITH_IMMEDIATE = 0x05,
	URVT_OP_RC_RDMA_WRITE_FIRST = 0x06,
	URVT_OP_RC_RDMA_WRITE_MIDDLE = 0x07,
	URVT_OP_RC_RDMA_WRITE_LAST = 0x08,
	URVT_OP_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09,
	URVT_OP_RC_RDMA_WRITE_ONLY = 0x0a,
	URVT_OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b,
	URVT_OP_RC_RDMA_READ_REQUEST = 0x0c,
	URVT_OP_RC_RDMA_READ_RESPONSE_FIRST = 0x0d,
	URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e,
	URVT_OP_RC_RDMA_READ_RESPONSE_LAST = 0x0f,
	URVT_OP_RC_RDMA_READ_RESPONSE_ONLY = 0x10,
	URVT_OP_RC_ACKNOWLEDGE = 0x11,
	URVT_OP_RC_ATOMIC_ACKNOWLEDGE = 0x12,
	URVT_OP_RC_COMPARE_SWAP = 0x13,
	URVT_OP_RC_FETCH_ADD = 0x14,
	URVT_OP_RC_SEND_LAST_WITH_INVALIDATE = 0x16,
	URVT_OP_RC_SEND_ONLY_WITH_INVALIDATE = 0x17,
	URVT_OP_RC_FLUSH = 0x1c,
	URVT_OP_RC_ATOMIC_WRITE = 0x1d,

	URVT_OP_UC_SEND_FIRST = 0x20,
	URVT_OP_UC_SEND_MIDDLE = 0x21,
	URVT_OP_UC_SEND_LAST = 0x22,
	URVT_OP_UC_SEND_LAST_WITH_IMMEDIATE = 0x23,
	URVT_OP_UC_SEND_ONLY = 0x24,
	URVT_OP_UC_SEND_ONLY_WITH_IMMEDIATE = 0x25,
	URVT_OP_UC_RDMA_WRITE_FIRST = 0x26,
	URVT_OP_UC_RDMA_WRITE_MIDDLE = 0x27,
	URVT_OP_UC_RDMA_WRITE_LAST = 0x28,
	URVT_OP_UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29,
	URVT_OP_UC_RDMA_WRITE_ONLY = 0x2a,
	URVT_OP_UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b,

	URVT_OP_UD_SEND_ONLY = 0x64,
	URVT_OP_UD_SEND_ONLY_WITH_IMMEDIATE = 0x65,

	URVT_OP_CNP = 0x81,

	/* XRC (roce-wire §4.5): the RC operations at 0xA0 + the RC opcode */
	URVT_OP_XRC_BASE = 0xa0,
	URVT_OP_XRC_SEND_FIRST = 0xa0,
	URVT_OP_XRC_SEND_ONLY = 0xa4,
	URVT_OP_XRC_RDMA_WRITE_ONLY = 0xaa,
	URVT_OP_XRC_RDMA_READ_REQUEST = 0xac,
	URVT_OP_XRC_RDMA_READ_RESPONSE_ONLY = 0xb0,
	URVT_OP_XRC_ACKNOWLEDGE = 0xb1,
	URVT_OP_XRC_ATOMIC_ACKNOWLEDGE = 0xb2,
	URVT_OP_XRC_COMPARE_SWAP = 0xb3,
	URVT_OP_XRC_FETCH_ADD = 0xb4,
	URVT_OP_XRC_SEND_ONLY_WITH_INVALIDATE = 0xb7,
};

struct urvt_opcode_info {
	const char *name;	/* "RC_SEND_FIRST"; NULL for unused opcodes */
	uint32_t mask;		/* enum urvt_op_mask bits; 0 for unused opcodes */
	uint8_t length;		/* BTH + extended headers, bytes */
	uint8_t offset[URVT_NUM_HDR_TYPES]; /* from BTH start; [URVT_PAYLOAD] == length */
};

extern const struct urvt_opcode_info urvt_opcode[256];

static inline enum urvt_transport urvt_opcode_transport(uint8_t opcode)
{
	return (enum urvt_transport)(opcode >> 5);
}

static inline bool urvt_opcode_valid(uint8_t opcode)
{
	return urvt_opcode[opcode].mask != 0;
}

/*
 * Receive-path check (roce-wire §4.4): the opcode's transport must match
 * the QP's (RC QPs accept 0x00-0x1F, UC 0x20-0x3F, UD/GSI 0x60-0x7F,
 * XRC 0xA0-0xBF).
 * Returns 0 or -URVT_DROP_QPT_MISMATCH (enum urvt_wire_drop in wire/hdr.h).
 */
int urvt_opcode_chk_transport(uint8_t opcode, enum urvt_transport qp_transport);

#endif /* URVT_WIRE_OPCODE_H */
