// SPDX-License-Identifier: MIT
/* The opcode table (roce-wire §4); header order per roce-wire §3. */
#include "wire/opcode.h"
#include "wire/drop.h"

/* Size of header H if the mask has it. */
#define HSZ(m, H) (((m) & URVT_##H##_MASK) ? URVT_##H##_BYTES : 0)

/* Where header H would start: after BTH and every present header before it. */
#define AT_XRCETH(m) URVT_BTH_BYTES
#define AT_FETH(m) (AT_XRCETH(m) + HSZ(m, XRCETH))
#define AT_DETH(m) (AT_FETH(m) + HSZ(m, FETH))
#define AT_RETH(m) (AT_DETH(m) + HSZ(m, DETH))
#define AT_ATMETH(m) (AT_RETH(m) + HSZ(m, RETH))
#define AT_AETH(m) (AT_ATMETH(m) + HSZ(m, ATMETH))
#define AT_ATMACK(m) (AT_AETH(m) + HSZ(m, AETH))
#define AT_IMMDT(m) (AT_ATMACK(m) + HSZ(m, ATMACK))
#define AT_IETH(m) (AT_IMMDT(m) + HSZ(m, IMMDT))
#define AT_CNPRSV(m) (AT_IETH(m) + HSZ(m, IETH))
#define AT_PAYLOAD(m) (AT_CNPRSV(m) + HSZ(m, CNPRSV))

/* Offset of a present header, 0 for an absent one. */
#define OFF(m, H) (((m) & URVT_##H##_MASK) ? AT_##H(m) : 0)

#define OP(val, nm, m)                                                                 \
	[val] = {                                                                      \
		.name = nm,                                                            \
		.mask = (m) | URVT_BTH_MASK,                                           \
		.length = AT_PAYLOAD(m),                                               \
		.offset = {                                                            \
			[URVT_BTH] = 0,                                                \
			[URVT_XRCETH] = OFF(m, XRCETH),                                \
			[URVT_FETH] = OFF(m, FETH),                                    \
			[URVT_DETH] = OFF(m, DETH),                                    \
			[URVT_RETH] = OFF(m, RETH),                                    \
			[URVT_ATMETH] = OFF(m, ATMETH),                                \
			[URVT_AETH] = OFF(m, AETH),                                    \
			[URVT_ATMACK] = OFF(m, ATMACK),                                \
			[URVT_IMMDT] = OFF(m, IMMDT),                                  \
			[URVT_IETH] = OFF(m, IETH),                                    \
			[URVT_CNPRSV] = OFF(m, CNPRSV),                                \
			[URVT_PAYLOAD] = AT_PAYLOAD(m),                                \
		},                                                                     \
	}

/* Shorthands for the packet-position bits. */
#define P_FIRST (URVT_FIRST_MASK | URVT_START_MASK)
#define P_MIDDLE URVT_MIDDLE_MASK
#define P_LAST (URVT_LAST_MASK | URVT_END_MASK)
#define P_ONLY (URVT_ONLY_MASK | URVT_START_MASK | URVT_END_MASK)

#define SEND (URVT_REQ_MASK | URVT_SEND_MASK | URVT_PAYLOAD_MASK | URVT_RWR_MASK)
#define SEND_DONE (URVT_COMP_MASK | URVT_SE_OK_MASK) /* ends the message at the responder */
#define WRITE (URVT_REQ_MASK | URVT_WRITE_MASK | URVT_PAYLOAD_MASK)
/* WRITE WITH IMMEDIATE consumes a receive WQE on its last packet only. */
#define WRITE_IMM_DONE (URVT_IMMDT_MASK | URVT_RWR_MASK | URVT_COMP_MASK | URVT_SE_OK_MASK)
#define READ_RESP (URVT_ACK_MASK | URVT_PAYLOAD_MASK)

/* The SEND/WRITE family shared by RC, UC and XRC (roce-wire §4.1, §4.2,
 * §4.5); x: the headers every request of the class carries (XRCETH). */
#define SEND_WRITE_OPS(base, pfx, x)                                                       \
	OP((base) + 0x00, pfx "_SEND_FIRST", (x) | SEND | P_FIRST),                        \
	OP((base) + 0x01, pfx "_SEND_MIDDLE", (x) | SEND | P_MIDDLE),                      \
	OP((base) + 0x02, pfx "_SEND_LAST", (x) | SEND | SEND_DONE | P_LAST),              \
	OP((base) + 0x03, pfx "_SEND_LAST_WITH_IMMEDIATE",                                 \
	   (x) | SEND | SEND_DONE | URVT_IMMDT_MASK | P_LAST),                             \
	OP((base) + 0x04, pfx "_SEND_ONLY", (x) | SEND | SEND_DONE | P_ONLY),              \
	OP((base) + 0x05, pfx "_SEND_ONLY_WITH_IMMEDIATE",                                 \
	   (x) | SEND | SEND_DONE | URVT_IMMDT_MASK | P_ONLY),                             \
	OP((base) + 0x06, pfx "_RDMA_WRITE_FIRST", (x) | WRITE | URVT_RETH_MASK | P_FIRST), \
	OP((base) + 0x07, pfx "_RDMA_WRITE_MIDDLE", (x) | WRITE | P_MIDDLE),               \
	OP((base) + 0x08, pfx "_RDMA_WRITE_LAST", (x) | WRITE | P_LAST),                   \
	OP((base) + 0x09, pfx "_RDMA_WRITE_LAST_WITH_IMMEDIATE",                           \
	   (x) | WRITE | WRITE_IMM_DONE | P_LAST),                                         \
	OP((base) + 0x0a, pfx "_RDMA_WRITE_ONLY", (x) | WRITE | URVT_RETH_MASK | P_ONLY),  \
	OP((base) + 0x0b, pfx "_RDMA_WRITE_ONLY_WITH_IMMEDIATE",                           \
	   (x) | WRITE | URVT_RETH_MASK | WRITE_IMM_DONE | P_ONLY)

/* READ, its responses, ACK, atomics and SEND WITH INVALIDATE: RC and XRC
 * (roce-wire §4.1, §4.5). Responses carry no XRCETH. */
#define RD_ATOMIC_OPS(base, pfx, x)                                                        \
	OP((base) + 0x0c, pfx "_RDMA_READ_REQUEST",                                        \
	   (x) | URVT_REQ_MASK | URVT_READ_MASK | URVT_RETH_MASK | P_ONLY),                \
	OP((base) + 0x0d, pfx "_RDMA_READ_RESPONSE_FIRST", READ_RESP | URVT_AETH_MASK | P_FIRST), \
	/* MIDDLE carries no AETH (roce-wire §10) */                                       \
	OP((base) + 0x0e, pfx "_RDMA_READ_RESPONSE_MIDDLE", READ_RESP | P_MIDDLE),         \
	OP((base) + 0x0f, pfx "_RDMA_READ_RESPONSE_LAST", READ_RESP | URVT_AETH_MASK | P_LAST), \
	OP((base) + 0x10, pfx "_RDMA_READ_RESPONSE_ONLY", READ_RESP | URVT_AETH_MASK | P_ONLY), \
	OP((base) + 0x11, pfx "_ACKNOWLEDGE", URVT_ACK_MASK | URVT_AETH_MASK | P_ONLY),    \
	OP((base) + 0x12, pfx "_ATOMIC_ACKNOWLEDGE",                                       \
	   URVT_ACK_MASK | URVT_AETH_MASK | URVT_ATMACK_MASK | P_ONLY),                    \
	OP((base) + 0x13, pfx "_COMPARE_SWAP",                                             \
	   (x) | URVT_REQ_MASK | URVT_ATOMIC_MASK | URVT_ATMETH_MASK | P_ONLY),            \
	OP((base) + 0x14, pfx "_FETCH_ADD",                                                \
	   (x) | URVT_REQ_MASK | URVT_ATOMIC_MASK | URVT_ATMETH_MASK | P_ONLY),            \
	OP((base) + 0x16, pfx "_SEND_LAST_WITH_INVALIDATE",                                \
	   (x) | SEND | SEND_DONE | URVT_IETH_MASK | P_LAST),                              \
	OP((base) + 0x17, pfx "_SEND_ONLY_WITH_INVALIDATE",                                \
	   (x) | SEND | SEND_DONE | URVT_IETH_MASK | P_ONLY)

const struct urvt_opcode_info urvt_opcode[256] = {
	/* RC, roce-wire §4.1 */
	SEND_WRITE_OPS(0x00, "RC", 0),
	RD_ATOMIC_OPS(0x00, "RC", 0),
	/* IBTA 1.5 optional operations; rxe >= 6.2 (roce-wire §4.1) */
	OP(URVT_OP_RC_FLUSH, "RC_FLUSH",
	   URVT_REQ_MASK | URVT_FLUSH_MASK | URVT_FETH_MASK | URVT_RETH_MASK | P_ONLY),
	OP(URVT_OP_RC_ATOMIC_WRITE, "RC_ATOMIC_WRITE",
	   URVT_REQ_MASK | URVT_ATOMIC_WRITE_MASK | URVT_RETH_MASK | URVT_PAYLOAD_MASK | P_ONLY),

	/* UC, roce-wire §4.2: SEND and RDMA WRITE only */
	SEND_WRITE_OPS(0x20, "UC", 0),

	/* UD, roce-wire §4.3 */
	OP(URVT_OP_UD_SEND_ONLY, "UD_SEND_ONLY", SEND | SEND_DONE | URVT_DETH_MASK | P_ONLY),
	OP(URVT_OP_UD_SEND_ONLY_WITH_IMMEDIATE, "UD_SEND_ONLY_WITH_IMMEDIATE",
	   SEND | SEND_DONE | URVT_DETH_MASK | URVT_IMMDT_MASK | P_ONLY),

	/* XRC, roce-wire §4.5: the RC operations, requests with an XRCETH */
	SEND_WRITE_OPS(URVT_OP_XRC_BASE, "XRC", URVT_XRCETH_MASK),
	RD_ATOMIC_OPS(URVT_OP_XRC_BASE, "XRC", URVT_XRCETH_MASK),
	OP(URVT_OP_XRC_BASE + URVT_OP_RC_ATOMIC_WRITE, "XRC_ATOMIC_WRITE",
	   URVT_XRCETH_MASK | URVT_REQ_MASK | URVT_ATOMIC_WRITE_MASK | URVT_RETH_MASK |
		   URVT_PAYLOAD_MASK | P_ONLY),

	/* roce-wire §4.4: BTH (BECN set) + 16 reserved bytes */
	OP(URVT_OP_CNP, "CNP", URVT_CNP_MASK | URVT_CNPRSV_MASK),
};

int urvt_opcode_chk_transport(uint8_t opcode, enum urvt_transport qp_transport)
{
	/* roce-wire §4.4: RC QPs take RC opcodes only, UC UC, UD/GSI UD, XRC XRC. */
	if (urvt_opcode_transport(opcode) != qp_transport || !urvt_opcode_valid(opcode))
		return -URVT_DROP_QPT_MISMATCH;
	return 0;
}
