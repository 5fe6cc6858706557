#include "rdmacm/cm_msgs.h"

#include <errno.h>
#include <string.h>

/* Bits [start, start + width) of the message data, MSB first. */
uint64_t cm_get(const struct cm_mad *m, struct cm_field f)
{
	const uint8_t *d = cm_cdata(m);
	unsigned int start = (unsigned int)f.byte * 8 + f.bit, end = start + f.width;
	uint64_t v = 0;

	if (!f.width || end > CM_DATA_SIZE * 8)
		return 0;
	for (unsigned int b = start / 8; b * 8 < end; b++)
		v = (v << 8) | d[b];
	/* drop the bits after the field in its last byte, then mask */
	v >>= (8 - end % 8) % 8;
	return f.width == 64 ? v : v & ((1ull << f.width) - 1);
}

void cm_set(struct cm_mad *m, struct cm_field f, uint64_t v)
{
	uint8_t *d = cm_data(m);
	unsigned int start = (unsigned int)f.byte * 8 + f.bit, end = start + f.width;

	if (!f.width || end > CM_DATA_SIZE * 8)
		return;
	/* from the last bit backwards: one byte (or part of one) at a time */
	for (unsigned int pos = end; pos > start;) {
		unsigned int b = (pos - 1) / 8, lo = b * 8 > start ? b * 8 : start;
		unsigned int n = pos - lo, shift = (b + 1) * 8 - pos;
		uint8_t mask = (uint8_t)(((1u << n) - 1) << shift);

		d[b] = (uint8_t)((d[b] & ~mask) | ((v << shift) & mask));
		v >>= n;
		pos = lo;
	}
}

static void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	put_be16(p, (uint16_t)(v >> 16));
	put_be16(p + 2, (uint16_t)v);
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* MAD header: base version, class, class version, method, status (2),
 * class specific (2), TID (8), attribute ID (2), reserved (2), modifier (4). */
void cm_mad_init(struct cm_mad *m, uint16_t attr_id, uint64_t tid)
{
	memset(m, 0, sizeof(*m));
	m->raw[0] = CM_BASE_VERSION;
	m->raw[1] = CM_MGMT_CLASS;
	m->raw[2] = CM_CLASS_VERSION;
	m->raw[3] = CM_METHOD_SEND;
	put_be32(m->raw + 8, (uint32_t)(tid >> 32));
	put_be32(m->raw + 12, (uint32_t)tid);
	put_be16(m->raw + 16, attr_id);
}

uint16_t cm_mad_attr_id(const struct cm_mad *m)
{
	return (uint16_t)(m->raw[16] << 8 | m->raw[17]);
}

uint64_t cm_mad_tid(const struct cm_mad *m)
{
	return (uint64_t)get_be32(m->raw + 8) << 32 | get_be32(m->raw + 12);
}

uint32_t cm_mad_attr_mod(const struct cm_mad *m)
{
	return get_be32(m->raw + 20);
}

void cm_mad_set_attr_mod(struct cm_mad *m, uint32_t v)
{
	put_be32(m->raw + 20, v);
}

int cm_mad_check(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (len < CM_MAD_SIZE)
		return -EMSGSIZE;
	if (p[0] != CM_BASE_VERSION || p[1] != CM_MGMT_CLASS || p[2] != CM_CLASS_VERSION)
		return -EPROTONOSUPPORT;
	/* the CM sends everything with method Send; no status on a request */
	if (p[3] != CM_METHOD_SEND || p[4] || p[5])
		return -EBADMSG;
	return p[16] << 8 | p[17];
}

uint64_t cm_service_id(uint16_t ps, uint16_t port)
{
	return ((uint64_t)ps << 16) + port;
}

bool cm_service_is_ip(uint64_t sid)
{
	/* RDMA_IB_IP_PS_MASK 0xFFFFFFFFFFFF0000 over 0x0000000001xx0000 */
	return (sid >> 24) == 0x01;
}

void cma_hdr_pack(uint8_t out[CMA_HDR_SIZE], const struct cma_hdr *h)
{
	memset(out, 0, CMA_HDR_SIZE);
	out[0] = CMA_VERSION;
	out[1] = (uint8_t)(h->ip_version << 4);
	put_be16(out + 2, h->port);
	memcpy(out + 4, h->src, 16);
	memcpy(out + 20, h->dst, 16);
}

int cma_hdr_unpack(const uint8_t in[CMA_HDR_SIZE], struct cma_hdr *h)
{
	if (in[0] != CMA_VERSION)
		return -EINVAL;
	h->ip_version = in[1] >> 4;
	if (h->ip_version != 4 && h->ip_version != 6)
		return -EAFNOSUPPORT;
	h->port = (uint16_t)(in[2] << 8 | in[3]);
	memcpy(h->src, in + 4, 16);
	memcpy(h->dst, in + 20, 16);
	if (h->ip_version == 4) {
		/* only the last 4 bytes carry the address */
		memset(h->src, 0, 12);
		memset(h->dst, 0, 12);
	}
	return 0;
}

/*
 * 4.096 us x 2^t must cover the ACK delay and twice the packet lifetime.
 * Adding one doubles it, so take the larger of ack delay and lifetime + 1
 * and add one more only when the other is within a factor of two.
 */
uint8_t cm_ack_timeout(uint8_t ca_ack_delay, uint8_t packet_life_time)
{
	int t = packet_life_time + 1;

	if (t >= ca_ack_delay)
		t += ca_ack_delay >= t - 1;
	else
		t = ca_ack_delay + (t >= ca_ack_delay - 1);
	return (uint8_t)(t > 31 ? 31 : t);
}

const char *cm_attr_str(uint16_t attr_id)
{
	static const char *const names[] = {
		[CM_REQ_ATTR_ID - 0x10] = "REQ", [CM_MRA_ATTR_ID - 0x10] = "MRA",
		[CM_REJ_ATTR_ID - 0x10] = "REJ", [CM_REP_ATTR_ID - 0x10] = "REP",
		[CM_RTU_ATTR_ID - 0x10] = "RTU", [CM_DREQ_ATTR_ID - 0x10] = "DREQ",
		[CM_DREP_ATTR_ID - 0x10] = "DREP", [CM_SIDR_REQ_ATTR_ID - 0x10] = "SIDR_REQ",
		[CM_SIDR_REP_ATTR_ID - 0x10] = "SIDR_REP", [CM_LAP_ATTR_ID - 0x10] = "LAP",
		[CM_APR_ATTR_ID - 0x10] = "APR",
	};

	if (attr_id < 0x10 || attr_id - 0x10u >= sizeof(names) / sizeof(names[0]))
		return "unknown";
	return names[attr_id - 0x10];
}

const char *cm_rej_reason_str(int reason)
{
	static const char *const names[] = {
		[IB_CM_REJ_NO_QP] = "no QP",
		[IB_CM_REJ_NO_EEC] = "no EEC",
		[IB_CM_REJ_NO_RESOURCES] = "no resources",
		[IB_CM_REJ_TIMEOUT] = "timeout",
		[IB_CM_REJ_UNSUPPORTED] = "unsupported",
		[IB_CM_REJ_INVALID_COMM_ID] = "invalid comm ID",
		[IB_CM_REJ_INVALID_COMM_INSTANCE] = "invalid comm instance",
		[IB_CM_REJ_INVALID_SERVICE_ID] = "invalid service ID",
		[IB_CM_REJ_INVALID_TRANSPORT_TYPE] = "invalid transport type",
		[IB_CM_REJ_STALE_CONN] = "stale conn",
		[IB_CM_REJ_RDC_NOT_EXIST] = "RDC not exist",
		[IB_CM_REJ_INVALID_GID] = "invalid GID",
		[IB_CM_REJ_INVALID_LID] = "invalid LID",
		[IB_CM_REJ_INVALID_SL] = "invalid SL",
		[IB_CM_REJ_INVALID_TRAFFIC_CLASS] = "invalid traffic class",
		[IB_CM_REJ_INVALID_HOP_LIMIT] = "invalid hop limit",
		[IB_CM_REJ_INVALID_PACKET_RATE] = "invalid packet rate",
		[IB_CM_REJ_INVALID_ALT_GID] = "invalid alt GID",
		[IB_CM_REJ_INVALID_ALT_LID] = "invalid alt LID",
		[IB_CM_REJ_INVALID_ALT_SL] = "invalid alt SL",
		[IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS] = "invalid alt traffic class",
		[IB_CM_REJ_INVALID_ALT_HOP_LIMIT] = "invalid alt hop limit",
		[IB_CM_REJ_INVALID_ALT_PACKET_RATE] = "invalid alt packet rate",
		[IB_CM_REJ_PORT_CM_REDIRECT] = "port CM redirect",
		[IB_CM_REJ_PORT_REDIRECT] = "port redirect",
		[IB_CM_REJ_INVALID_MTU] = "invalid MTU",
		[IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES] = "insufficient resp resources",
		[IB_CM_REJ_CONSUMER_DEFINED] = "consumer defined",
		[IB_CM_REJ_INVALID_RNR_RETRY] = "invalid RNR retry",
		[IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID] = "duplicate local comm ID",
		[IB_CM_REJ_INVALID_CLASS_VERSION] = "invalid class version",
		[IB_CM_REJ_INVALID_FLOW_LABEL] = "invalid flow label",
		[IB_CM_REJ_INVALID_ALT_FLOW_LABEL] = "invalid alt flow label",
		[IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED] = "vendor option not supported",
	};

	if (reason < 0 || (size_t)reason >= sizeof(names) / sizeof(names[0]) || !names[reason])
		return "unrecognized reason";
	return names[reason];
}
