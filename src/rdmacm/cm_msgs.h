/*
 * IB CM messages (IBTA vol. 1 chapter 12): the 256-byte MADs of management
 * class 0x07, class version 2, that the CM exchanges QP1 -> QP1. Pure code:
 * field layouts, the MAD header, the CMA header that rdma_cm puts at the
 * start of REQ / SIDR_REQ private data, service IDs. No state, no I/O.
 *
 * A field is named by where it sits in the message data (the 232 bytes
 * after the 24-byte MAD header): the byte it starts in, its first bit
 * counted from that byte's most significant bit, and its width, exactly as
 * IBTA's message tables (and the kernel's ibta_vol1_c12.h) give them.
 * Fields are big-endian, most significant bit first.
 */
#ifndef URVT_RDMACM_CM_MSGS_H
#define URVT_RDMACM_CM_MSGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CM_MAD_SIZE 256
#define CM_MAD_HDR_SIZE 24
#define CM_DATA_SIZE (CM_MAD_SIZE - CM_MAD_HDR_SIZE)

#define CM_BASE_VERSION 1
#define CM_MGMT_CLASS 0x07
#define CM_CLASS_VERSION 2
#define CM_METHOD_SEND 0x03

/* attribute IDs */
enum cm_attr_id {
	CM_REQ_ATTR_ID = 0x0010,
	CM_MRA_ATTR_ID = 0x0011,
	CM_REJ_ATTR_ID = 0x0012,
	CM_REP_ATTR_ID = 0x0013,
	CM_RTU_ATTR_ID = 0x0014,
	CM_DREQ_ATTR_ID = 0x0015,
	CM_DREP_ATTR_ID = 0x0016,
	CM_SIDR_REQ_ATTR_ID = 0x0017,
	CM_SIDR_REP_ATTR_ID = 0x0018,
	CM_LAP_ATTR_ID = 0x0019,
	CM_APR_ATTR_ID = 0x001A,
};

/* private data sizes (bytes) */
#define IB_CM_REQ_PRIVATE_DATA_SIZE 92
#define IB_CM_MRA_PRIVATE_DATA_SIZE 222
#define IB_CM_REJ_PRIVATE_DATA_SIZE 148
#define IB_CM_REP_PRIVATE_DATA_SIZE 196
#define IB_CM_RTU_PRIVATE_DATA_SIZE 224
#define IB_CM_DREQ_PRIVATE_DATA_SIZE 220
#define IB_CM_DREP_PRIVATE_DATA_SIZE 224
#define IB_CM_REJ_ARI_LENGTH 72
#define IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE 216
#define IB_CM_SIDR_REP_PRIVATE_DATA_SIZE 136
#define IB_CM_SIDR_REP_INFO_LENGTH 72

/* MRA "message MRAed" / REJ "message rejected" */
enum cm_msg_response {
	CM_MSG_RESPONSE_REQ = 0x0,
	CM_MSG_RESPONSE_REP = 0x1,
	CM_MSG_RESPONSE_OTHER = 0x2,
};

/* REJ reasons (the values of the kernel's enum ib_cm_rej_reason) */
enum ib_cm_rej_reason {
	IB_CM_REJ_NO_QP = 1,
	IB_CM_REJ_NO_EEC = 2,
	IB_CM_REJ_NO_RESOURCES = 3,
	IB_CM_REJ_TIMEOUT = 4,
	IB_CM_REJ_UNSUPPORTED = 5,
	IB_CM_REJ_INVALID_COMM_ID = 6,
	IB_CM_REJ_INVALID_COMM_INSTANCE = 7,
	IB_CM_REJ_INVALID_SERVICE_ID = 8,
	IB_CM_REJ_INVALID_TRANSPORT_TYPE = 9,
	IB_CM_REJ_STALE_CONN = 10,
	IB_CM_REJ_RDC_NOT_EXIST = 11,
	IB_CM_REJ_INVALID_GID = 12,
	IB_CM_REJ_INVALID_LID = 13,
	IB_CM_REJ_INVALID_SL = 14,
	IB_CM_REJ_INVALID_TRAFFIC_CLASS = 15,
	IB_CM_REJ_INVALID_HOP_LIMIT = 16,
	IB_CM_REJ_INVALID_PACKET_RATE = 17,
	IB_CM_REJ_INVALID_ALT_GID = 18,
	IB_CM_REJ_INVALID_ALT_LID = 19,
	IB_CM_REJ_INVALID_ALT_SL = 20,
	IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS = 21,
	IB_CM_REJ_INVALID_ALT_HOP_LIMIT = 22,
	IB_CM_REJ_INVALID_ALT_PACKET_RATE = 23,
	IB_CM_REJ_PORT_CM_REDIRECT = 24,
	IB_CM_REJ_PORT_REDIRECT = 25,
	IB_CM_REJ_INVALID_MTU = 26,
	IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES = 27,
	IB_CM_REJ_CONSUMER_DEFINED = 28,
	IB_CM_REJ_INVALID_RNR_RETRY = 29,
	IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID = 30,
	IB_CM_REJ_INVALID_CLASS_VERSION = 31,
	IB_CM_REJ_INVALID_FLOW_LABEL = 32,
	IB_CM_REJ_INVALID_ALT_FLOW_LABEL = 33,
	IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED = 35,
};

/* SIDR_REP status */
enum ib_cm_sidr_status {
	IB_SIDR_SUCCESS = 0,
	IB_SIDR_UNSUPPORTED = 1,
	IB_SIDR_REJECT = 2,
	IB_SIDR_NO_QP = 3,
	IB_SIDR_REDIRECT = 4,
	IB_SIDR_UNSUPPORTED_VERSION = 5,
};

/* REQ transport service type */
enum cm_transport {
	CM_TRANSPORT_RC = 0,
	CM_TRANSPORT_UC = 1,
	CM_TRANSPORT_RD = 2,
};

struct cm_field {
	uint16_t byte;                    /* in the message data, after the MAD header */
	uint8_t bit;                      /* first bit, 0 = the byte's MSB */
	uint8_t width;                    /* 1..64 */
};

#define CM_F(b, o, w) ((struct cm_field){ (b), (o), (w) })

/* REQ */
#define CM_REQ_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_REQ_VENDOR_ID CM_F(5, 0, 24)
#define CM_REQ_SERVICE_ID CM_F(8, 0, 64)
#define CM_REQ_LOCAL_CA_GUID CM_F(16, 0, 64)
#define CM_REQ_LOCAL_Q_KEY CM_F(28, 0, 32)
#define CM_REQ_LOCAL_QPN CM_F(32, 0, 24)
#define CM_REQ_RESPONDER_RESOURCES CM_F(35, 0, 8)
#define CM_REQ_LOCAL_EECN CM_F(36, 0, 24)
#define CM_REQ_INITIATOR_DEPTH CM_F(39, 0, 8)
#define CM_REQ_REMOTE_EECN CM_F(40, 0, 24)
#define CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT CM_F(43, 0, 5)
#define CM_REQ_TRANSPORT_SERVICE_TYPE CM_F(43, 5, 2)
#define CM_REQ_END_TO_END_FLOW_CONTROL CM_F(43, 7, 1)
#define CM_REQ_STARTING_PSN CM_F(44, 0, 24)
#define CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT CM_F(47, 0, 5)
#define CM_REQ_RETRY_COUNT CM_F(47, 5, 3)
#define CM_REQ_PARTITION_KEY CM_F(48, 0, 16)
#define CM_REQ_PATH_PACKET_PAYLOAD_MTU CM_F(50, 0, 4)
#define CM_REQ_RDC_EXISTS CM_F(50, 4, 1)
#define CM_REQ_RNR_RETRY_COUNT CM_F(50, 5, 3)
#define CM_REQ_MAX_CM_RETRIES CM_F(51, 0, 4)
#define CM_REQ_SRQ CM_F(51, 4, 1)
#define CM_REQ_EXTENDED_TRANSPORT_TYPE CM_F(51, 5, 3)
#define CM_REQ_PRIMARY_LOCAL_PORT_LID CM_F(52, 0, 16)
#define CM_REQ_PRIMARY_REMOTE_PORT_LID CM_F(54, 0, 16)
#define CM_REQ_PRIMARY_LOCAL_PORT_GID 56        /* 16 bytes */
#define CM_REQ_PRIMARY_REMOTE_PORT_GID 72       /* 16 bytes */
#define CM_REQ_PRIMARY_FLOW_LABEL CM_F(88, 0, 20)
#define CM_REQ_PRIMARY_PACKET_RATE CM_F(91, 2, 6)
#define CM_REQ_PRIMARY_TRAFFIC_CLASS CM_F(92, 0, 8)
#define CM_REQ_PRIMARY_HOP_LIMIT CM_F(93, 0, 8)
#define CM_REQ_PRIMARY_SL CM_F(94, 0, 4)
#define CM_REQ_PRIMARY_SUBNET_LOCAL CM_F(94, 4, 1)
#define CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT CM_F(95, 0, 5)
#define CM_REQ_ALTERNATE_LOCAL_PORT_LID CM_F(96, 0, 16)
#define CM_REQ_ALTERNATE_LOCAL_PORT_GID 100     /* 16 bytes */
#define CM_REQ_PRIVATE_DATA 140                 /* 92 bytes */

/* MRA */
#define CM_MRA_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_MRA_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_MRA_MESSAGE_MRAED CM_F(8, 0, 2)
#define CM_MRA_SERVICE_TIMEOUT CM_F(9, 0, 5)
#define CM_MRA_PRIVATE_DATA 10                  /* 222 bytes */

/* REJ */
#define CM_REJ_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_REJ_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_REJ_MESSAGE_REJECTED CM_F(8, 0, 2)
#define CM_REJ_REJECTED_INFO_LENGTH CM_F(9, 0, 7)
#define CM_REJ_REASON CM_F(10, 0, 16)
#define CM_REJ_ARI 12                           /* 72 bytes */
#define CM_REJ_PRIVATE_DATA 84                  /* 148 bytes */

/* REP */
#define CM_REP_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_REP_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_REP_LOCAL_Q_KEY CM_F(8, 0, 32)
#define CM_REP_LOCAL_QPN CM_F(12, 0, 24)
#define CM_REP_VENDOR_ID_H CM_F(15, 0, 8)
#define CM_REP_LOCAL_EE_CONTEXT_NUMBER CM_F(16, 0, 24)
#define CM_REP_VENDOR_ID_M CM_F(19, 0, 8)
#define CM_REP_STARTING_PSN CM_F(20, 0, 24)
#define CM_REP_VENDOR_ID_L CM_F(23, 0, 8)
#define CM_REP_RESPONDER_RESOURCES CM_F(24, 0, 8)
#define CM_REP_INITIATOR_DEPTH CM_F(25, 0, 8)
#define CM_REP_TARGET_ACK_DELAY CM_F(26, 0, 5)
#define CM_REP_FAILOVER_ACCEPTED CM_F(26, 5, 2)
#define CM_REP_END_TO_END_FLOW_CONTROL CM_F(26, 7, 1)
#define CM_REP_RNR_RETRY_COUNT CM_F(27, 0, 3)
#define CM_REP_SRQ CM_F(27, 3, 1)
#define CM_REP_LOCAL_CA_GUID CM_F(28, 0, 64)
#define CM_REP_PRIVATE_DATA 36                  /* 196 bytes */

/* RTU, DREQ, DREP */
#define CM_RTU_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_RTU_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_RTU_PRIVATE_DATA 8                   /* 224 bytes */
#define CM_DREQ_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_DREQ_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_DREQ_REMOTE_QPN_EECN CM_F(8, 0, 24)
#define CM_DREQ_PRIVATE_DATA 12                 /* 220 bytes */
#define CM_DREP_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_DREP_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_DREP_PRIVATE_DATA 8                  /* 224 bytes */

/* SIDR_REQ, SIDR_REP */
#define CM_SIDR_REQ_REQUESTID CM_F(0, 0, 32)
#define CM_SIDR_REQ_PARTITION_KEY CM_F(4, 0, 16)
#define CM_SIDR_REQ_SERVICEID CM_F(8, 0, 64)
#define CM_SIDR_REQ_PRIVATE_DATA 16             /* 216 bytes */
#define CM_SIDR_REP_REQUESTID CM_F(0, 0, 32)
#define CM_SIDR_REP_STATUS CM_F(4, 0, 8)
#define CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH CM_F(5, 0, 8)
#define CM_SIDR_REP_VENDOR_ID_H CM_F(6, 0, 16)
#define CM_SIDR_REP_QPN CM_F(8, 0, 24)
#define CM_SIDR_REP_VENDOR_ID_L CM_F(11, 0, 8)
#define CM_SIDR_REP_SERVICEID CM_F(12, 0, 64)
#define CM_SIDR_REP_Q_KEY CM_F(20, 0, 32)
#define CM_SIDR_REP_ADDITIONAL_INFORMATION 24   /* 72 bytes */
#define CM_SIDR_REP_PRIVATE_DATA 96             /* 136 bytes */

/* A CM MAD: header fields and the message data. */
struct cm_mad {
	uint8_t raw[CM_MAD_SIZE];
};

static inline uint8_t *cm_data(struct cm_mad *m)
{
	return m->raw + CM_MAD_HDR_SIZE;
}

static inline const uint8_t *cm_cdata(const struct cm_mad *m)
{
	return m->raw + CM_MAD_HDR_SIZE;
}

uint64_t cm_get(const struct cm_mad *m, struct cm_field f);
void cm_set(struct cm_mad *m, struct cm_field f, uint64_t v);

/* Zero m and write the header of a CM Send: attribute id, TID. */
void cm_mad_init(struct cm_mad *m, uint16_t attr_id, uint64_t tid);
uint16_t cm_mad_attr_id(const struct cm_mad *m);
uint64_t cm_mad_tid(const struct cm_mad *m);
uint32_t cm_mad_attr_mod(const struct cm_mad *m);
void cm_mad_set_attr_mod(struct cm_mad *m, uint32_t v);

/*
 * Is len bytes at buf a CM MAD this CM handles? Base version 1, class
 * 0x07, class version 2, method Send, status 0, a full 256 bytes. Returns
 * the attribute ID, or a negative errno: -EMSGSIZE (truncated),
 * -EPROTONOSUPPORT (another class or version), -EBADMSG (another method).
 */
int cm_mad_check(const void *buf, size_t len);

/* Service IDs of the rdma_cm port spaces: (ps << 16) + port. */
uint64_t cm_service_id(uint16_t ps, uint16_t port);
static inline uint16_t cm_service_ps(uint64_t sid)
{
	return (uint16_t)(sid >> 16);
}
static inline uint16_t cm_service_port(uint64_t sid)
{
	return (uint16_t)sid;
}
/* Is sid in the IP-based rdma_cm range (0x0000000001xxxxxx)? */
bool cm_service_is_ip(uint64_t sid);

/*
 * The CMA header: the first 36 bytes of REQ and SIDR_REQ private data when
 * rdma_cm connects by IP address. version 0; IP version in the high nibble
 * of byte 1; the source port; source and destination address, IPv4 in the
 * last 4 bytes of each 16 (the rest zero).
 */
#define CMA_HDR_SIZE 36
#define CMA_VERSION 0x00

struct cma_hdr {
	uint8_t ip_version;               /* 4 or 6 */
	uint16_t port;                    /* host order */
	uint8_t src[16], dst[16];         /* IPv4: first 12 bytes zero */
};

void cma_hdr_pack(uint8_t out[CMA_HDR_SIZE], const struct cma_hdr *h);
/* 0, or -EINVAL (version not 0) / -EAFNOSUPPORT (IP version not 4 or 6) */
int cma_hdr_unpack(const uint8_t in[CMA_HDR_SIZE], struct cma_hdr *h);

/* "approximate conversion to ms from 4.096us x 2^iba_time" */
static inline uint64_t cm_convert_to_ms(int iba_time)
{
	return 1ull << (iba_time > 8 ? iba_time - 8 : 0);
}

/*
 * Local ACK timeout advertised in a REQ: 4.096 us x 2^t covering the
 * target's ACK delay plus two packet lifetimes, as the kernel's CM rounds it.
 */
uint8_t cm_ack_timeout(uint8_t ca_ack_delay, uint8_t packet_life_time);

/* Names for logs: attribute and REJ reason. */
const char *cm_attr_str(uint16_t attr_id);
const char *cm_rej_reason_str(int reason);

#endif
