// SPDX-License-Identifier: MIT
/* The opcode table (roce-wire §4); header order per roce-wire §3. */
#include "wire/opcode.h"
#include "wire/drop.h"

/* Size of header H if the mask has it. */
#define HSZ(m, H) (((m) & URVT_##H##_MASK) ? URVT_##H##_BYTES : 0)

/* Where header H would start: after BTH and every present header before it. */
#define AT_FETH(m) URVT_BTH_BYTES
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

/* The SEND/WRITE family shared by RC and UC (roce-wire §4.1, §4.2). */
#define SEND_WRITE_OPS(base, pfx)                                                          \
	OP((base) + 0x00, pfx "_SEND_FIRST", SEND | P_FIRST),                              \
	OP((base) + 0x01, pfx "_SEND_MIDDLE", SEND | P_MIDDLE),                            \
	OP((base) + 0x02, pfx "_SEND_LAST", SEND | SEND_DONE | P_LAST),                    \
	OP((base) + 0x03, pfx "_SEND_LAST_WITH_IMMEDIATE",                                 \
	   SEND | SEND_DONE | URVT_IMMDT_MASK | P_LAST),                                   \
	OP((base) + 0x04, pfx "_SEND_ONLY", SEND | SEND_DONE | P_ONLY),                    \
	OP((base) + 0x05, pfx "_SEND_ONLY_WITH_IMMEDIATE",                                 \
	   SEND | SEND_DONE | URVT_IMMDT_MASK | P_ONLY),                                   \
	OP((base) + 0x06, pfx "_RDMA_WRITE_FIRST", WRITE | URVT_RETH_MASK | P_FIRST),      \
	OP((base) + 0x07, pfx "_RDMA_WRITE_MIDDLE", WRITE | P_MIDDLE),                     \
	OP((base) + 0x08, pfx "_RDMA_WRITE_LAST", WRITE | P_LAST),                         \
	OP((base) + 0x09, pfx "_RDMA_WRITE_LAST_WITH_IMMEDIATE",                           \
	   WRITE | WRITE_IMM_DONE | P_LAST),                                               \
	OP((base) + 0x0a, pfx "_RDMA_WRITE_ONLY", WRITE | URVT_RETH_MASK | P_ONLY),        \
	OP((base) + 0x0b, pfx "_RDMA_WRITE_ONLY_WITH_IMMEDIATE",                           \
	   WRITE | URVT_RETH_MASK | WRITE_IMM_DONE | P_ONLY)

const struct urvt_opcode_info urvt_opcode[256] = {
	/* RC, roce-wire §4.1 */
	SEND_WRITE_OPS(0x00, "RC"),
	OP(URVT_OP_RC_RDMA_READ_REQUEST, "RC_RDMA_READ_REQUEST",
	   URVT_REQ_MASK | URVT_READ_MASK | URVT_RETH_MASK | P_ONLY),
	OP(URVT_OP_RC_RDMA_READ_RESPONSE_FIRST, "RC_RDMA_READ_RESPONSE_FIRST",
	   READ_RESP | URVT_AETH_MASK | P_FIRST),
	OP(URVT_OP_RC_RDMA_READ_RESPONSE_MIDDLE, "RC_RDMA_READ_RESPONSE_MIDDLE",
	   READ_RESP | P_MIDDLE), /* MIDDLE carries no AETH (roce-wire §10) */
	OP(URVT_OP_RC_RDMA_READ_RESPONSE_LAST, "RC_RDMA_READ_RESPONSE_LAST",
	   READ_RESP | URVT_AETH_MASK | P_LAST),
	OP(URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, "RC_RDMA_READ_RESPONSE_ONLY",
	   READ_RESP | URVT_AETH_MASK | P_ONLY),
	OP(URVT_OP_RC_ACKNOWLEDGE, "RC_ACKNOWLEDGE", URVT_ACK_MASK | URVT_AETH_MASK | P_ONLY),
	OP(URVT_OP_RC_ATOMIC_ACKNOWLEDGE, "RC_ATOMIC_ACKNOWLEDGE",
	   URVT_ACK_MASK | URVT_AETH_MASK | URVT_ATMACK_MASK | P_ONLY),
	OP(URVT_OP_RC_COMPARE_SWAP, "RC_COMPARE_SWAP",
	   URVT_REQ_MASK | URVT_ATOMIC_MASK | URVT_ATMETH_MASK | P_ONLY),
	OP(URVT_OP_RC_FETCH_ADD, "RC_FETCH_ADD",
	   URVT_REQ_MASK | URVT_ATOMIC_MASK | URVT_ATMETH_MASK | P_ONLY),
	OP(URVT_OP_RC_SEND_LAST_WITH_INVALIDATE, "RC_SEND_LAST_WITH_INVALIDATE",
	   SEND | SEND_DONE | URVT_IETH_MASK | P_LAST),
	OP(URVT_OP_RC_SEND_ONLY_WITH_INVALIDATE, "RC_SEND_ONLY_WITH_INVALIDATE",
	   SEND | SEND_DONE | URVT_IETH_MASK | P_ONLY),
	/* IBTA 1.5 optional operations; rxe >= 6.2 (roce-wire §4.1) */
	OP(URVT_OP_RC_FLUSH, "RC_FLUSH",
	   URVT_REQ_MASK | URVT_FLUSH_MASK | URVT_FETH_MASK | URVT_RETH_MASK | P_ONLY),
	OP(URVT_OP_RC_ATOMIC_WRITE, "RC_ATOMIC_WRITE",
	   URVT_REQ_MASK | URVT_ATOMIC_WRITE_MASK | URVT_RETH_MASK | URVT_PAYLOAD_MASK | P_ONLY),

	/* UC, roce-wire §4.2: SEND and RDMA WRITE only */
	SEND_WRITE_OPS(0x20, "UC"),

	/* UD, roce-wire §4.3 */
	OP(URVT_OP_UD_SEND_ONLY, "UD_SEND_ONLY", SEND | SEND_DONE | URVT_DETH_MASK | P_ONLY),
	OP(URVT_OP_UD_SEND_ONLY_WITH_IMMEDIATE, "UD_SEND_ONLY_WITH_IMMEDIATE",
	   SEND | SEND_DONE | URVT_DETH_MASK | URVT_IMMDT_MASK | P_ONLY),

	/* roce-wire §4.4: BTH (BECN set) + 16 reserved bytes */
	OP(URVT_OP_CNP, "CNP", URVT_CNP_MASK | URVT_CNPRSV_MASK),
};

int urvt_opcode_chk_transport(uint8_t opcode, enum urvt_transport qp_transport)
{
	/* roce-wire §4.4: RC QPs take RC opcodes only, UC UC, UD/GSI UD. */
	if (urvt_opcode_transport(opcode) != qp_transport || !urvt_opcode_valid(opcode))
		return -URVT_DROP_QPT_MISMATCH;
	return 0;
}
