/*
 * The shm link's protocol (docs/shm.md): the layout of the shared region
 * and of the two handshake messages. Both sides of a connection must agree
 * on every byte here; tests/link/test_shm.c plays a hostile peer with it.
 */
#ifndef URVT_LINK_SHM_PROTO_H
#define URVT_LINK_SHM_PROTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/compiler.h"

/* per direction, a power of two; 2 MiB: producer and consumer meet in
 * cache more often than with 4 MiB (30-40 % faster), and 64 QPs' windows
 * overflow it less than 1 MiB (docs/performance-history.md "Where the shm
 * link's bandwidth stops") */
#define SHM_RING_BYTES (2u << 20)
#define SHM_REC_HDR 8
#define SHM_REC_ALIGN 64
/* a span (docs/shm.md "Spans"): one record carries up to this much
 * payload of one request, several PMTUs, so per-packet costs are paid
 * once per span; the largest record is a span with headers, pad and ICRC */
#define SHM_SPAN_PAYLOAD (32u << 10)
#define SHM_PKT_MAX (SHM_SPAN_PAYLOAD + 128)
#define SHM_REC_WRAP 0xffffffffu          /* the rest of the ring is unused */
#define SHM_MAGIC 0x75727673u             /* "urvs" */
#define SHM_VERSION 8                     /* 2: 2 MiB rings; 3: ready marks;
					     4: peers are (GID, slot); 5: win;
					     6: spans; 7: cma_epoch, cma_busy;
					     8: urvt_cma_push.whole */

/* The producer's rewind (shm.c tx_rewind_due): not protocol (a consumer
 * follows a WRAP record from any offset but 0), here for the tests. Past
 * SHM_REWIND_AT (more than the largest record's room, so the WRAP fits), a
 * ring whose consumer is within SHM_REWIND_SLACK of head starts again at
 * 0, for packets of at most SHM_REWIND_MAX_PKT bytes; a look that finds
 * it busy is made again SHM_REWIND_EVERY bytes on. */
#define SHM_REWIND_AT (8u << 10)
#define SHM_REWIND_SLACK (4 * SHM_REC_ALIGN)
#define SHM_REWIND_MAX_PKT 256
#define SHM_REWIND_EVERY (64u << 10)

/* The consumer looks at head at the first empty look after connecting and
 * at every SHM_HEAD_LOOKS-th after (shm.c rx_peer): not protocol, here for
 * the tests. */
#define SHM_HEAD_LOOKS 64

/* The producer's window (shm.c tx_win_for): it wraps at or before win
 * bytes into the ring, so that a device with many peers touches few pages
 * of each ring (docs/shm.md "Memory"). Not protocol either: the consumer
 * follows the WRAP records; it reads win only to judge whether the
 * producer is stuck on a full window (peer_waits_on_us). */
#define SHM_WIN_BUDGET (3u << 20)         /* ring bytes per device, split over its peers */
#define SHM_WIN_MIN (16u << 10)

/* A span's payload in a window of win bytes: at most an eighth of it, so
 * that a window still holds a pipeline of them (with 64 peers, 48 KiB
 * windows, spans shorter than a PMTU 4096: none). Not protocol: a
 * consumer takes any record up to SHM_PKT_MAX. */
static inline uint32_t shm_span_for_win(uint32_t win)
{
	return win / 8 < SHM_SPAN_PAYLOAD ? win / 8 : SHM_SPAN_PAYLOAD;
}

/* The largest record a producer with window win writes: a span, or one
 * PMTU 4096 with its headers. */
static inline uint32_t shm_pkt_max_for_win(uint32_t win)
{
	uint32_t span = shm_span_for_win(win) + 128;

	return span > 4096 + 64 ? span : 4096 + 64;
}

struct shm_ctrl {
	_Atomic uint32_t head __cacheline_aligned;      /* producer */
	_Atomic uint32_t win;                           /* producer: 0 is SHM_RING_BYTES */
	_Atomic uint32_t tail __cacheline_aligned;      /* consumer */
	_Atomic uint32_t need_wake __cacheline_aligned; /* consumer sets, producer clears */
	/* pushes of READ data into the producer's memory (docs/shm.md "Single
	 * copy"): the producer's epoch, which a push must name; the pushes of
	 * the consumer under way */
	_Atomic uint32_t cma_epoch __cacheline_aligned; /* producer */
	_Atomic uint32_t cma_busy __cacheline_aligned;  /* consumer */
} __cacheline_aligned;

struct shm_rec {
	uint32_t len;                     /* packet bytes, or SHM_REC_WRAP */
	_Atomic uint32_t mark;            /* shm_rec_mark(pos) once the record at
					     ring position pos is complete */
	uint8_t data[];
};

struct shm_region {
	uint32_t magic, version, ring_bytes, pkt_max;
	uint8_t gid_a[16], gid_b[16];
	uint8_t slot_a, slot_b;           /* the host registry slots: a GID is shared */
	struct shm_ctrl ctrl[2] __cacheline_aligned;
	uint8_t ring[2][SHM_RING_BYTES] __attribute__((aligned(4096)));
};

/* The bytes a record of a len-byte packet takes. */
static inline uint32_t shm_rec_bytes(uint32_t len)
{
	return (SHM_REC_HDR + len + SHM_REC_ALIGN - 1) & ~(SHM_REC_ALIGN - 1);
}

/* The ready mark of a record at free-running position pos (a multiple of
 * SHM_REC_ALIGN): never 0, which a new ring holds and a producer writes
 * to clear a slot, and no other position's mark (modulo 2^32). */
static inline uint32_t shm_rec_mark(uint32_t pos)
{
	return pos | 1;
}

/* The bytes a producer needs free for a record of a len-byte packet: the
 * record, and the header of the record after it, whose mark it clears. */
static inline uint32_t shm_rec_room(uint32_t len)
{
	return shm_rec_bytes(len) + SHM_REC_ALIGN;
}

/* The handshake messages on the connection (SOCK_SEQPACKET). */
enum { SHM_MSG_HELLO = 1, SHM_MSG_HELLO_ACK = 2 };
struct shm_msg {
	uint32_t magic, version, type, ring_bytes, pkt_max;
	uint64_t region_bytes;
	uint8_t from_gid[16], to_gid[16];
	uint8_t from_slot, to_slot;       /* a peer is (GID, slot): docs/shm.md */
	uint8_t pad[6];                   /* zero: no stack bytes leave the process */
};

/* "\0urvt-shm-<uid>-<gid hex>-<slot>": the abstract name a device listens
 * on. Processes of one user share a GID (docs/host-identity.md); the slot
 * of the host registry (0: the process has none) tells them apart. */
static inline socklen_t shm_sock_name_slot(struct sockaddr_un *sun, uid_t uid,
					   const uint8_t gid[16], uint8_t slot)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "urvt-shm-%u-", (unsigned)uid);
	for (int i = 0; i < 16; i++)
		n += snprintf(sun->sun_path + 1 + n, sizeof(sun->sun_path) - 1 - (size_t)n, "%02x",
			      gid[i]);
	n += snprintf(sun->sun_path + 1 + n, sizeof(sun->sun_path) - 1 - (size_t)n, "-%u",
		      (unsigned)slot);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The name of a process without a registry slot. */
static inline socklen_t shm_sock_name(struct sockaddr_un *sun, uid_t uid, const uint8_t gid[16])
{
	return shm_sock_name_slot(sun, uid, gid, 0);
}

#endif
