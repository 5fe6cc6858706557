/*
 * Hostile packets (issue 6): the device's QPs face an attacker, a plain UDP
 * socket on its own 127.x address (port 4791) that sends hand-built
 * RoCEv2 packets, and a stranger on another address. Every MR sits in a
 * mapping between PROT_NONE pages with canary bytes just outside it in the
 * same pages; regions no remote peer may change are compared with a
 * snapshot after every attack.
 *
 * Table-driven: each row builds one packet for a fresh victim QP (RC, UC
 * or UD, in the state the row names, one receive posted) and asserts
 * exactly what the reference gives (rc-protocol §3, §3.11, roce-wire §7,
 * §12): the packet on the wire (opcode, AETH syndrome, PSN) or nothing, the
 * victim's first receive completion (or none), its QP state, the counter
 * that moved (read through the counters file /dev/shm/urvt.<pid>, as
 * urvt-stat does) and the canaries. Multi-packet attacks (duplicate atomic
 * replay, responses injected into a requester, SEND_WITH_INV of a key of
 * another PD, ...) are separate tests below the table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/rvt_api.h"
#include "transport/stats.h"
#include "transport/tp.h"
#include "ut.h"
#include "wire/aeth.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/psn.h"

#define PEER_QPN 0x321
#define PEER_PSN 0x1000
#define MY_PSN 0x2000
#define UD_QKEY 0x5150
#define PAGE 4096
#define CANARY 0xA5
#define GAP 256 /* canary bytes before and after each MR inside its mapping */

static struct ut_dev dev;
static struct rvt_pd *pd, *pd2;
static int peer_fd = -1, stranger_fd = -1;
static struct sockaddr_in peer_addr, stranger_addr, dev_addr;
static const struct urvt_stats_shm *stats; /* the counters file, read-only */

/* ------------------------------------------------------------------ */
/* Memory: every MR between PROT_NONE pages, canaries around it       */
/* ------------------------------------------------------------------ */
enum { M_RW, M_RO, M_LOCAL, M_OTHER, M_STALE, M_RECV, NMR };
static const char *const mr_name[NMR] = { "rw", "remote-read-only", "local-only",
					  "other-pd", "deregistered", "recv" };
#define MR_LEN 8192

struct region {
	uint8_t *map;   /* first usable page (after the PROT_NONE page) */
	size_t map_len; /* usable bytes */
	uint8_t *buf;   /* the MR: map + GAP */
	uint8_t snap[MR_LEN];
	struct rvt_mregion *mr;
	uint32_t key;
};
static struct region R[NMR];

static void region_init(struct region *r, struct rvt_pd *p, int access, uint8_t seed)
{
	size_t usable = (GAP + MR_LEN + GAP + PAGE - 1) & ~(size_t)(PAGE - 1);
	uint8_t *m = mmap(NULL, usable + 2 * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(m != MAP_FAILED);
	assert_int_equal(mprotect(m, PAGE, PROT_NONE), 0);
	assert_int_equal(mprotect(m + PAGE + usable, PAGE, PROT_NONE), 0);
	r->map = m + PAGE;
	r->map_len = usable;
	r->buf = r->map + GAP;
	memset(r->map, CANARY, usable);
	ut_fill(r->buf, MR_LEN, seed);
	memcpy(r->snap, r->buf, MR_LEN);
	r->mr = ut_mr(p, r->buf, MR_LEN, access);
	r->key = r->mr->lkey;
}

static uint64_t va_of(int m, uint64_t off)
{
	return (uint64_t)(uintptr_t)R[m].buf + off;
}

/* Canaries intact everywhere; MRs that must not change did not. */
static void check_memory(const char *when, bool rw_may_change)
{
	for (int i = 0; i < NMR; i++) {
		struct region *r = &R[i];
		for (size_t j = 0; j < r->map_len; j++)
			if ((j < GAP || j >= GAP + MR_LEN) && r->map[j] != CANARY)
				fail_msg("%s: canary of MR %s at %+ld overwritten", when, mr_name[i],
					 (long)j - GAP);
		if (i == M_RECV || (i == M_RW && rw_may_change))
			continue;
		if (memcmp(r->snap, r->buf, MR_LEN))
			fail_msg("%s: MR %s changed", when, mr_name[i]);
	}
}

/* ------------------------------------------------------------------ */
/* The attacker                                                       */
/* ------------------------------------------------------------------ */
static int open_sock(int first_host, struct sockaddr_in *out)
{
	for (int host = first_host; host < first_host + 100; host++) {
		int fd = socket(AF_INET, SOCK_DGRAM, 0), v = IP_PMTUDISC_DO;
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(URVT_ROCE_UDP_PORT) };
		a.sin_addr.s_addr = htonl(0x7f000000u | (214u << 16) | (uint32_t)host);
		setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v));
		if (!bind(fd, (struct sockaddr *)&a, sizeof(a))) {
			*out = a;
			return fd;
		}
		close(fd);
	}
	fail_msg("no free address for the attacker");
	return -1;
}

static void map_stats(void)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/dev/shm/urvt.%d", (int)getpid());
	fd = open(path, O_RDONLY);
	if (fd < 0)
		fail_msg("no counters file %s (URVT_STATS=0?)", path);
	stats = mmap(NULL, sizeof(*stats), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(stats != MAP_FAILED);
	assert_int_equal(stats->magic, URVT_STATS_MAGIC);
	assert_int_equal(stats->ncounters, URVT_CTR_NUM);
}

static uint64_t ctr(enum urvt_ctr c)
{
	return __atomic_load_n(&stats->dev.v[c], __ATOMIC_RELAXED);
}

static int setup(void **state)
{
	ut_open(&dev);
	pd = ut_pd(&dev);
	pd2 = ut_pd(&dev);
	map_stats();
	peer_fd = open_sock(10, &peer_addr);
	stranger_fd = open_sock(120, &stranger_addr);
	memset(&dev_addr, 0, sizeof(dev_addr));
	dev_addr.sin_family = AF_INET;
	dev_addr.sin_port = htons(URVT_ROCE_UDP_PORT);
	memcpy(&dev_addr.sin_addr, &dev.rdi->gid.raw[12], 4);

	region_init(&R[M_RW], pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 1);
	region_init(&R[M_RO], pd, IBV_ACCESS_REMOTE_READ, 2);
	region_init(&R[M_LOCAL], pd, IBV_ACCESS_LOCAL_WRITE, 3);
	region_init(&R[M_OTHER], pd2, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 4);
	region_init(&R[M_STALE], pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 5);
	region_init(&R[M_RECV], pd, IBV_ACCESS_LOCAL_WRITE, 6);
	/* a key that was valid once; its memory stays mapped and watched */
	assert_int_equal(rvt_dereg_mr(R[M_STALE].mr), 0);
	R[M_STALE].mr = NULL;
	return 0;
}

static int teardown(void **state)
{
	close(peer_fd);
	close(stranger_fd);
	for (int i = 0; i < NMR; i++)
		if (R[i].mr)
			rvt_dereg_mr(R[i].mr);
	ut_close(&dev);
	return 0;
}

/* Send from fd: headers of f + payload + pad, a correct ICRC for the sender's
 * address. pre: mutate before the ICRC is computed (the result still has a
 * valid ICRC); post: after. Unknown opcodes get a bare BTH. */
typedef void (*mut_fn)(uint8_t *buf, size_t *len);
static void send_pkt(int fd, const struct sockaddr_in *from, struct urvt_pkt *f,
		     const void *payload, uint32_t len, mut_fn pre, mut_fn post)
{
	uint8_t buf[5000];
	struct urvt_ipinfo ip;
	size_t h, n;
	uint8_t pad;

	urvt_ipinfo_v4(&ip, from->sin_addr.s_addr, dev_addr.sin_addr.s_addr, URVT_ROCE_UDP_PORT, URVT_ROCE_UDP_PORT);
	if (!f->pkey)
		f->pkey = 0xffff;
	f->paylen = len;
	h = urvt_pkt_build_hdr(buf, sizeof(buf), f);
	if (!h) {
		memset(buf, 0, URVT_BTH_BYTES);
		bth_set_opcode(buf, f->opcode);
		bth_set_pkey(buf, f->pkey);
		bth_set_qpn(buf, f->dest_qpn);
		bth_set_psn(buf, f->psn);
		h = URVT_BTH_BYTES;
	}
	if (len)
		memcpy(buf + h, payload, len);
	n = h + len;
	pad = bth_pad(buf);
	memset(buf + n, 0, pad);
	n += pad;
	if (pre)
		pre(buf, &n);
	urvt_icrc_put(buf + n, urvt_icrc(&ip, buf, n));
	n += URVT_ICRC_BYTES;
	if (post)
		post(buf, &n);
	assert_int_equal(sendto(fd, buf, n, 0, (struct sockaddr *)&dev_addr, sizeof(dev_addr)),
			 (ssize_t)n);
}

static void flush_socks(void)
{
	uint8_t junk[5000];
	while (recv(peer_fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	while (recv(stranger_fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
}

/* ------------------------------------------------------------------ */
/* Victims                                                            */
/* ------------------------------------------------------------------ */
static struct rvt_cq *cq;

static struct rvt_qp *victim(enum ibv_qp_type t, int st, int access)
{
	struct rvt_qp *qp = ut_qp(&dev, pd, t, cq, cq, NULL, NULL, false);
	const struct ut_path path = { .peer_s_addr = peer_addr.sin_addr.s_addr,
				      .dest_qpn = PEER_QPN, .rq_psn = PEER_PSN, .sq_psn = MY_PSN,
				      .min_rnr_timer = 3, .timeout = 18, .retry_cnt = 7,
				      .rnr_retry = 7, .max_rd_atomic = 4 };

	flush_socks();
	if (st == IBV_QPS_RESET)
		return qp;
	ut_to_init(qp, access, UD_QKEY);
	ut_post_recv(qp, 0xabc, R[M_RECV].buf, 512, R[M_RECV].key);
	if (st == IBV_QPS_INIT)
		return qp;
	ut_to_rtr_path(qp, &path);
	if (st == IBV_QPS_RTR)
		return qp;
	ut_to_rts_path(qp, &path);
	if (st == IBV_QPS_ERR)
		ut_modify_state(qp, IBV_QPS_ERR);
	return qp;
}

/* ------------------------------------------------------------------ */
/* The table                                                          */
/* ------------------------------------------------------------------ */
enum qsel { Q_VICTIM, Q_NONE, Q_ZERO, Q_ONE, Q_MCAST };
enum ksel { K_NONE, K_RW, K_RO, K_LOCAL, K_OTHER, K_STALE, K_GUESS, K_NEXT, K_ZERO };
enum vsel { V_OFF, V_END, V_BEFORE, V_RAW };
#define NONE (-1)
#define ALL_RIGHTS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static void pre_tver1(uint8_t *b, size_t *n) { bth_set_tver(b, 1); }
static void post_flip(uint8_t *b, size_t *n) { b[14] ^= 0x40; }
static void post_trunc3(uint8_t *b, size_t *n) { *n = 3; }
static void pre_cut_reth(uint8_t *b, size_t *n) { *n = 12 + 8; } /* BTH + half a RETH */
static void pre_odd_len(uint8_t *b, size_t *n) { *n -= 1; } /* not a multiple of 4 after ICRC */

struct attack {
	const char *name;
	enum ibv_qp_type qpt;
	int state;        /* victim's state */
	int access;       /* victim's qp_access_flags (0: all remote rights) */
	uint8_t op;
	enum qsel qsel;
	int psn_off;      /* PSN = PEER_PSN + psn_off */
	enum ksel key;
	enum vsel vsel;
	int64_t va_off;   /* offset into the MR (V_OFF), back from its end (V_END) ... */
	uint64_t va_raw;
	uint32_t dmalen;  /* RETH DMA length */
	uint32_t paylen;
	uint16_t pkey;    /* 0: 0xffff */
	uint32_t qkey;    /* UD: 0 means the victim's */
	bool stranger;    /* sent from another address */
	mut_fn pre, post;
	/* expected */
	int resp_op;      /* NONE: nothing on the wire */
	int resp_syn;
	int resp_psn_off;
	int wc;           /* first completion on the CQ: status or NONE */
	int state_after;
	enum urvt_ctr c;
	bool rw_changes;  /* the (legitimate) control rows write M_RW */
};

#define DROP(x) (URVT_CTR_DROP_BASE + (x))
#define NAK_INV 0x61 /* roce-wire §8 */
#define NAK_ACC 0x62
#define NAK_SEQ 0x60
#define RC IBV_QPT_RC
#define UC IBV_QPT_UC
#define UD IBV_QPT_UD
#define RTS IBV_QPS_RTS
#define ERR IBV_QPS_ERR
#define FL IBV_WC_WR_FLUSH_ERR
#define W_ONLY URVT_OP_RC_RDMA_WRITE_ONLY
#define R_REQ URVT_OP_RC_RDMA_READ_REQUEST
#define FADD URVT_OP_RC_FETCH_ADD
#define ACK URVT_OP_RC_ACKNOWLEDGE
#define S_ONLY URVT_OP_RC_SEND_ONLY

static const struct attack attacks[] = {
	/* controls: the legitimate operations work (and prove the harness) */
	{ "control: WRITE into an MR with REMOTE_WRITE", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF,
	  64, 0, 64, 64, .resp_op = ACK, .resp_syn = 0x1f, .resp_psn_off = 0, .wc = NONE,
	  .state_after = RTS, .c = URVT_CTR_ACKS_SENT, .rw_changes = true },
	{ "control: READ from an MR with REMOTE_READ", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RO, V_OFF,
	  0, 0, 100, 0, .resp_op = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, .resp_syn = 0x1f,
	  .resp_psn_off = 0, .wc = NONE, .state_after = RTS, .c = URVT_CTR_TX_PKTS },

	/* addressing: forged QPN, QPN 0 / 1 / multicast, wrong source, half-built QP */
	{ "forged QPN (no such QP)", RC, RTS, 0, W_ONLY, Q_NONE, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_NO_QP) },
	{ "QPN 0 (SMI)", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_ZERO, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_QPN) },
	{ "UD to QP1 (GSI, none here)", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_ONE, 0, K_NONE, V_OFF,
	  0, 0, 0, 16, .qkey = URVT_GSI_QKEY, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_NO_QP) },
	{ "multicast QPN", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_MCAST, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_TDROP_MCAST) },
	{ "WRITE from a stranger's address", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16,
	  16, .stranger = true, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_ADDR) },
	{ "UC WRITE from a stranger's address", UC, RTS, 0, URVT_OP_UC_RDMA_WRITE_ONLY, Q_VICTIM, 0,
	  K_RW, V_OFF, 0, 0, 16, 16, .stranger = true, .resp_op = NONE, .wc = NONE,
	  .state_after = RTS, .c = DROP(URVT_DROP_BAD_ADDR) },
	{ "WRITE to a QP in RESET", RC, IBV_QPS_RESET, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0,
	  16, 16, .resp_op = NONE, .wc = NONE, .state_after = IBV_QPS_RESET,
	  .c = DROP(URVT_DROP_NO_QP) },
	{ "WRITE to a QP in INIT", RC, IBV_QPS_INIT, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16,
	  16, .resp_op = NONE, .wc = NONE, .state_after = IBV_QPS_INIT,
	  .c = DROP(URVT_TDROP_BAD_STATE) },
	{ "WRITE to a QP in ERR", RC, ERR, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .resp_op = NONE, .wc = FL, .state_after = ERR, .c = DROP(URVT_TDROP_BAD_STATE) },

	/* keys: stale, guessed, next slot, other PD, 0, missing rights */
	{ "WRITE with a deregistered R_Key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_STALE, V_OFF, 0, 0,
	  16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with a guessed R_Key (other generation)", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_GUESS,
	  V_OFF, 0, 0, 16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with the next slot's key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_NEXT, V_OFF, 0, 0, 16,
	  16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with R_Key 0", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_ZERO, V_RAW, 0, 0x1000, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with the key of another PD's MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_OTHER, V_OFF,
	  0, 0, 16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE into a remote-read-only MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RO, V_OFF, 0, 0, 16,
	  16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE into a local-only MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_LOCAL, V_OFF, 0, 0, 16,
	  16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE to a QP without REMOTE_WRITE", RC, RTS, IBV_ACCESS_REMOTE_READ, W_ONLY, Q_VICTIM, 0,
	  K_RW, V_OFF, 0, 0, 16, 16, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0,
	  .wc = FL, .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "WRITE_WITH_IMM with a stale key (receive in progress)", RC, RTS, 0,
	  URVT_OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Q_VICTIM, 0, K_STALE, V_OFF, 0, 0, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = IBV_WC_LOC_PROT_ERR,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "UC WRITE with a stale key (dropped)", UC, RTS, 0, URVT_OP_UC_RDMA_WRITE_ONLY, Q_VICTIM, 0,
	  K_STALE, V_OFF, 0, 0, 16, 16, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_TDROP_RESP_SILENT) },

	/* ranges: beyond the end, before the start, wrap, 2^31+ */
	{ "WRITE past the end of the MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_END, 8, 0, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE before the start of the MR", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_BEFORE, 8, 0,
	  16, 16, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with addr+len wrapping 2^64", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_RAW, 0,
	  0xffffffffffffff00ull, 0x200, 0x200, .resp_op = ACK, .resp_syn = NAK_ACC,
	  .resp_psn_off = 0, .wc = FL, .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "WRITE with RETH length 2^31+1", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0,
	  0x80000001u, 16, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "WRITE with more payload than RETH length", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF,
	  0, 0, 8, 64, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "READ beyond the MR", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RW, V_END, 16, 0, 32, 0,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "READ of 2^31+1 bytes", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 0x80000001u, 0,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_INV },
	{ "READ from a local-only MR", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_LOCAL, V_OFF, 0, 0, 16, 0,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "READ with a deregistered key", RC, RTS, 0, R_REQ, Q_VICTIM, 0, K_STALE, V_OFF, 0, 0, 16,
	  0, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "zero-length READ with a bad key (no key check, rc-protocol §3.6)", RC, RTS, 0, R_REQ,
	  Q_VICTIM, 0, K_ZERO, V_RAW, 0, 0xdead0000, 0, 0,
	  .resp_op = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY, .resp_syn = 0x1f, .resp_psn_off = 0,
	  .wc = NONE, .state_after = RTS,
	  .c = URVT_CTR_TX_PKTS },
	{ "zero-length WRITE with a bad key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_STALE, V_RAW, 0,
	  0xdead0000, 0, 0, .resp_op = ACK, .resp_syn = 0x1f, .resp_psn_off = 0, .wc = NONE,
	  .state_after = RTS, .c = URVT_CTR_ACKS_SENT },

	/* atomics */
	{ "misaligned atomic", RC, RTS, 0, FADD, Q_VICTIM, 0, K_RW, V_OFF, 12, 0, 0, 0,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_INV },
	{ "atomic on an MR without REMOTE_ATOMIC", RC, RTS, 0, FADD, Q_VICTIM, 0, K_RO, V_OFF, 16, 0,
	  0, 0, .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "atomic at the MR's end", RC, RTS, 0, FADD, Q_VICTIM, 0, K_RW, V_END, 0, 0, 0, 0,
	  .resp_op = ACK, .resp_syn = NAK_ACC, .resp_psn_off = 0, .wc = FL, .state_after = ERR,
	  .c = URVT_CTR_NAK_SENT_ACCESS },
	{ "atomic to a QP without REMOTE_ATOMIC", RC, RTS, IBV_ACCESS_REMOTE_WRITE, FADD, Q_VICTIM,
	  0, K_RW, V_OFF, 16, 0, 0, 0, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0,
	  .wc = FL, .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },

	/* PSN */
	{ "PSN far ahead (+2^22)", RC, RTS, 0, W_ONLY, Q_VICTIM, 0x400000, K_RW, V_OFF, 0, 0, 16, 16,
	  .resp_op = ACK, .resp_syn = NAK_SEQ, .resp_psn_off = 0, .wc = NONE, .state_after = RTS,
	  .c = URVT_CTR_SEQ_ERRORS },
	{ "PSN far behind (-2^22): a duplicate, re-ACKed, not executed", RC, RTS, 0, W_ONLY,
	  Q_VICTIM, -0x400000, K_RW, V_OFF, 0, 0, 16, 16, .resp_op = ACK, .resp_syn = 0x1f,
	  .resp_psn_off = -1, .wc = NONE, .state_after = RTS, .c = URVT_CTR_DUP_REQUESTS },

	/* P_Key, Q_Key, TVer, ICRC, truncation */
	{ "wrong P_Key", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16, .pkey = 0x1234,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_PKEY) },
	{ "invalid P_Key 0x8000", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .pkey = 0x8000, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_PKEY) },
	{ "wrong Q_Key", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .qkey = 0x999, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_QKEY) },
	{ "TVer 1", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16, .pre = pre_tver1,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_TVER) },
	{ "bad ICRC", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16, .post = post_flip,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_ICRC) },
	{ "truncated to 3 bytes", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 16,
	  .post = post_trunc3, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_TRUNCATED) },
	{ "WRITE cut inside the RETH (valid ICRC)", RC, RTS, 0, W_ONLY, Q_VICTIM, 0, K_RW, V_OFF, 0,
	  0, 16, 0, .pre = pre_cut_reth, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_TRUNCATED) },
	{ "length not a multiple of 4", RC, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .pre = pre_odd_len, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_BAD_LENGTH) },

	/* opcodes of the wrong transport, reserved, RD, CNP */
	{ "UC opcode to an RC QP", RC, RTS, 0, URVT_OP_UC_SEND_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0,
	  0, 0, 16, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "UD opcode to an RC QP", RC, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0,
	  0, 0, 16, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "RC READ request to a UC QP", UC, RTS, 0, R_REQ, Q_VICTIM, 0, K_RW, V_OFF, 0, 0, 16, 0,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "RC SEND to a UD QP", UD, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 16,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_QPT_MISMATCH) },
	{ "reserved opcode 0x15", RC, RTS, 0, 0x15, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 0,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_BAD_OPCODE) },
	{ "CNP to an RC QP", RC, RTS, 0, URVT_OP_CNP, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 0,
	  .resp_op = NONE, .wc = NONE, .state_after = RTS, .c = DROP(URVT_DROP_QPT_MISMATCH) },

	/* lengths and sequence */
	{ "SEND larger than the PMTU", RC, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0, 0, 2048,
	  .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = IBV_WC_LOC_QP_OP_ERR,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "SEND larger than the receive buffer", RC, RTS, 0, S_ONLY, Q_VICTIM, 0, K_NONE, V_OFF, 0, 0,
	  0, 1000, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0,
	  .wc = IBV_WC_LOC_LEN_ERR, .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "WRITE_MIDDLE without FIRST", RC, RTS, 0, URVT_OP_RC_RDMA_WRITE_MIDDLE, Q_VICTIM, 0, K_NONE,
	  V_OFF, 0, 0, 0, 1024, .resp_op = ACK, .resp_syn = NAK_INV, .resp_psn_off = 0, .wc = FL,
	  .state_after = ERR, .c = URVT_CTR_NAK_SENT_INV },
	{ "UD SEND larger than the receive buffer", UD, RTS, 0, URVT_OP_UD_SEND_ONLY, Q_VICTIM, 0,
	  K_NONE, V_OFF, 0, 0, 0, 1000, .resp_op = NONE, .wc = NONE, .state_after = RTS,
	  .c = DROP(URVT_TDROP_RESP_SILENT) },
};

static void build(const struct attack *a, struct rvt_qp *qp, struct urvt_pkt *f)
{
	static const int kmr[] = { [K_RW] = M_RW, [K_RO] = M_RO, [K_LOCAL] = M_LOCAL,
				   [K_OTHER] = M_OTHER, [K_STALE] = M_STALE, [K_GUESS] = M_RW,
				   [K_NEXT] = M_RW, [K_ZERO] = M_RW };
	uint32_t key = 0;
	uint64_t va;
	int m = a->key == K_NONE ? M_RW : kmr[a->key];

	memset(f, 0, sizeof(*f));
	f->opcode = a->op;
	f->psn = (uint32_t)(PEER_PSN + a->psn_off) & 0xffffff;
	f->ackreq = true;
	f->pkey = a->pkey;
	switch (a->qsel) {
	case Q_VICTIM: f->dest_qpn = qp->qpn; break;
	case Q_NONE: f->dest_qpn = 0xabcdef; break;
	case Q_ZERO: f->dest_qpn = 0; break;
	case Q_ONE: f->dest_qpn = 1; break;
	case Q_MCAST: f->dest_qpn = URVT_MULTICAST_QPN; break;
	}
	switch (a->key) {
	case K_NONE: break;
	case K_GUESS: key = R[M_RW].key ^ 1; break;
	case K_NEXT: key = R[M_RW].key + (1u << RVT_LKEY_GEN_BITS); break;
	case K_ZERO: key = 0; break;
	default: key = R[m].key; break;
	}
	switch (a->vsel) {
	case V_OFF: va = va_of(m, (uint64_t)a->va_off); break;
	case V_END: va = va_of(m, MR_LEN - (uint64_t)a->va_off); break;
	case V_BEFORE: va = va_of(m, 0) - (uint64_t)a->va_off; break;
	default: va = a->va_raw; break;
	}
	f->reth = (struct urvt_reth){ .va = va, .rkey = key, .len = a->dmalen };
	f->atmeth = (struct urvt_atmeth){ .va = va, .rkey = key, .swap_add = 1 };
	f->deth = (struct urvt_deth){ .qkey = a->qkey ? a->qkey : UD_QKEY, .sqp = PEER_QPN };
}

static void run_attack(const struct attack *a)
{
	struct rvt_qp *qp = victim(a->qpt, a->state, a->access ? a->access : ALL_RIGHTS);
	static uint8_t payload[4096];
	uint64_t before = ctr(a->c), deadline;
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	struct ibv_wc wc;

	ut_fill(payload, sizeof(payload), 99);
	build(a, qp, &f);
	send_pkt(a->stranger ? stranger_fd : peer_fd, a->stranger ? &stranger_addr : &peer_addr, &f,
		 payload, a->paylen, a->pre, a->post);
	if (a->resp_op != NONE) {
		if (!ut_peer_recv(peer_fd, &p, buf, sizeof(buf), 2000))
			fail_msg("%s: no response", a->name);
		if (p.opcode != a->resp_op)
			fail_msg("%s: response opcode %#x, expected %#x", a->name, p.opcode,
				 a->resp_op);
		if (p.dest_qpn != PEER_QPN)
			fail_msg("%s: response to QPN %#x", a->name, p.dest_qpn);
		if ((p.mask & URVT_AETH_MASK) && p.aeth.syn != a->resp_syn)
			fail_msg("%s: syndrome %#x, expected %#x", a->name, p.aeth.syn, a->resp_syn);
		if (p.psn != ((uint32_t)(PEER_PSN + a->resp_psn_off) & 0xffffff))
			fail_msg("%s: response PSN %#x", a->name, p.psn);
	}
	/* the counter moves (bounded wait: the progress thread may receive) */
	deadline = ut_now_ms() + 2000;
	while (ctr(a->c) == before && ut_now_ms() < deadline)
		ut_sleep_ms(1);
	if (ctr(a->c) == before)
		fail_msg("%s: counter %s did not move", a->name, urvt_ctr_name[a->c]);
	/* nothing (else) on the wire, to the attacker or the stranger */
	{
		struct pollfd pfd[2] = { { .fd = peer_fd, .events = POLLIN },
					 { .fd = stranger_fd, .events = POLLIN } };
		if (poll(pfd, 2, 30) > 0) {
			if (pfd[0].revents && ut_peer_recv(peer_fd, &p, buf, sizeof(buf), 0))
				fail_msg("%s: unexpected packet opcode %#x syn %#x psn %#x", a->name,
					 p.opcode, p.aeth.syn, p.psn);
			fail_msg("%s: a packet went to the stranger", a->name);
		}
	}
	if (a->wc != NONE) {
		if (ut_poll(cq, &wc, 1, 2000) != 1)
			fail_msg("%s: no completion", a->name);
		if ((int)wc.status != a->wc)
			fail_msg("%s: completion status %d, expected %d", a->name,
				 (int)wc.status, a->wc);
		if (wc.wr_id != 0xabc || wc.qp_num != qp->qpn)
			fail_msg("%s: completion for wr %#llx qp %u", a->name,
				 (unsigned long long)wc.wr_id, wc.qp_num);
	} else {
		if (ut_poll(cq, &wc, 1, 10) != 0)
			fail_msg("%s: unexpected completion status %d", a->name,
				 (int)wc.status);
	}
	if (ut_state(qp) != a->state_after)
		fail_msg("%s: QP state %d, expected %d", a->name, ut_state(qp), a->state_after);
	check_memory(a->name, a->rw_changes);
	assert_int_equal(rvt_destroy_qp(qp), 0);
	while (ut_poll(cq, &wc, 1, 0) == 1)
		;
	ut_async_drain(&dev);
	if (a->rw_changes) {
		memcpy(R[M_RW].buf, R[M_RW].snap, MR_LEN); /* restore for the next rows */
	}
	printf("  ok  %s\n", a->name);
}

static void test_table(void **state)
{
	cq = ut_cq(&dev, 256);
	for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
		run_attack(&attacks[i]);
	rvt_destroy_cq(cq);
	cq = NULL;
}

/* ------------------------------------------------------------------ */
/* Multi-packet attacks                                               */
/* ------------------------------------------------------------------ */
static void expect(struct urvt_pkt *p, uint8_t *buf, uint8_t op)
{
	assert_true(ut_peer_recv(peer_fd, p, buf, 5000, 2000));
	assert_int_equal(p->opcode, op);
	assert_int_equal(p->dest_qpn, PEER_QPN);
}

static void quiet(int ms)
{
	struct urvt_pkt p;
	uint8_t buf[5000];
	if (ut_peer_recv(peer_fd, &p, buf, sizeof(buf), ms))
		fail_msg("unexpected packet opcode %#x psn %#x", p.opcode, p.psn);
}

/* A replayed atomic is answered from the saved result, never executed twice;
 * a PSN gap is NAKed once however many packets follow. */
static void test_replay_and_gap(void **state)
{
	struct rvt_qp *qp;
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	uint64_t *target = (uint64_t *)(void *)(R[M_RW].buf + 64), before = *target;
	uint64_t seq = ctr(URVT_CTR_NAK_SENT_SEQ);

	cq = ut_cq(&dev, 64);
	qp = victim(RC, RTS, ALL_RIGHTS);
	memset(&f, 0, sizeof(f));
	f.opcode = FADD;
	f.dest_qpn = qp->qpn;
	f.psn = PEER_PSN;
	f.ackreq = true;
	f.atmeth = (struct urvt_atmeth){ .va = va_of(M_RW, 64), .rkey = R[M_RW].key, .swap_add = 7 };
	for (int i = 0; i < 5; i++) {
		send_pkt(peer_fd, &peer_addr, &f, NULL, 0, NULL, NULL);
		expect(&p, buf, URVT_OP_RC_ATOMIC_ACKNOWLEDGE);
		assert_int_equal(p.atmack_orig, before);
		assert_int_equal(p.psn, PEER_PSN);
	}
	assert_int_equal(*target, before + 7);
	/* the replay with another key/address is still the old result */
	f.atmeth.rkey = R[M_OTHER].key;
	send_pkt(peer_fd, &peer_addr, &f, NULL, 0, NULL, NULL);
	expect(&p, buf, URVT_OP_RC_ATOMIC_ACKNOWLEDGE);
	assert_int_equal(p.atmack_orig, before);
	assert_int_equal(*target, before + 7);
	/* a gap: one NAK for many packets */
	memset(&f, 0, sizeof(f));
	f.opcode = S_ONLY;
	f.dest_qpn = qp->qpn;
	f.ackreq = true;
	for (int i = 0; i < 20; i++) {
		f.psn = PEER_PSN + 5 + (uint32_t)i;
		send_pkt(peer_fd, &peer_addr, &f, buf, 8, NULL, NULL);
	}
	expect(&p, buf, ACK);
	assert_int_equal(p.aeth.syn, NAK_SEQ);
	assert_int_equal(p.psn, PEER_PSN + 1);
	quiet(50);
	assert_int_equal(ctr(URVT_CTR_NAK_SENT_SEQ), seq + 1);
	assert_int_equal(ut_state(qp), RTS);
	ut_cq_empty(cq, 10);
	*target = before;
	check_memory("replay", false);
	rvt_destroy_qp(qp);
	rvt_destroy_cq(cq);
}

/* SEND_WITH_INV naming a key of another PD (or a dead key): the receive
 * completes with REM_INV_REQ_ERR, the QP goes to ERR (class J), and the
 * other PD's MR stays valid. */
static void test_send_with_inv_foreign_key(void **state)
{
	for (int round = 0; round < 2; round++) {
		struct rvt_qp *qp;
		struct urvt_pkt f, p;
		uint8_t buf[5000];
		struct ibv_wc wc;
		struct rvt_sge sge;

		cq = ut_cq(&dev, 64);
		qp = victim(RC, RTS, ALL_RIGHTS);
		memset(&f, 0, sizeof(f));
		f.opcode = URVT_OP_RC_SEND_ONLY_WITH_INVALIDATE;
		f.dest_qpn = qp->qpn;
		f.psn = PEER_PSN;
		f.ackreq = true;
		f.ieth_rkey = round ? R[M_STALE].key : R[M_OTHER].key;
		send_pkt(peer_fd, &peer_addr, &f, buf, 8, NULL, NULL);
		ut_poll1(cq, &wc);
		assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR);
		assert_int_equal(wc.wr_id, 0xabc);
		assert_int_equal(ut_state(qp), ERR);
		quiet(30); /* class J: no NAK of its own */
		/* the other PD's MR is still usable by a QP of its PD */
		{
			struct rvt_qp *q2 = ut_qp(&dev, pd2, RC, cq, cq, NULL, NULL, false);
			memset(&sge, 0, sizeof(sge));
			assert_true(rvt_rkey_ok(q2, &sge, 8, va_of(M_OTHER, 0), R[M_OTHER].key,
						IBV_ACCESS_REMOTE_WRITE));
			rvt_put_sge(&sge);
			rvt_destroy_qp(q2);
		}
		(void)p;
		check_memory("send_with_inv", false);
		rvt_destroy_qp(qp);
		ut_async_drain(&dev);
		rvt_destroy_cq(cq);
	}
}

/* Responses injected into a requester: READ response with no READ
 * outstanding, ACK for a PSN never sent, a READ response for a SEND. */
static void test_response_injection(void **state)
{
	struct rvt_qp *qp;
	struct urvt_pkt f, p;
	uint8_t buf[5000];
	struct ibv_wc wc;
	uint64_t stale = ctr(DROP(URVT_TDROP_STALE_RESP)), bad = ctr(DROP(URVT_TDROP_BAD_RESP));
	static uint8_t junk[1024];
	struct ibv_sge sge;
	struct ibv_send_wr wr;

	cq = ut_cq(&dev, 64);
	qp = victim(RC, RTS, ALL_RIGHTS);
	ut_fill(junk, sizeof(junk), 77);
	/* nothing outstanding: READ response dropped as stale, nothing written */
	memset(&f, 0, sizeof(f));
	f.opcode = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
	f.dest_qpn = qp->qpn;
	f.psn = MY_PSN;
	f.aeth.syn = 0x1f;
	send_pkt(peer_fd, &peer_addr, &f, junk, 512, NULL, NULL);
	/* ACK for a PSN never sent */
	f.opcode = ACK;
	f.psn = MY_PSN + 100;
	send_pkt(peer_fd, &peer_addr, &f, NULL, 0, NULL, NULL);
	ut_sleep_ms(50);
	assert_true(ctr(DROP(URVT_TDROP_STALE_RESP)) + ctr(DROP(URVT_TDROP_BAD_RESP)) >= stale + bad + 2);
	assert_int_equal(ut_state(qp), RTS);
	ut_cq_empty(cq, 10);

	/* a READ outstanding into M_LOCAL... a forged ACK (not a READ response)
	 * cannot complete it, a response longer than the READ is dropped */
	memset(&sge, 0, sizeof(sge));
	sge.addr = va_of(M_RECV, 1024);
	sge.length = 100;
	sge.lkey = R[M_RECV].key;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 5;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = 0x1000;
	wr.wr.rdma.rkey = 0x77;
	ut_post_send(qp, &wr);
	expect(&p, buf, R_REQ);
	f.opcode = ACK;
	f.psn = MY_PSN;
	send_pkt(peer_fd, &peer_addr, &f, NULL, 0, NULL, NULL);
	f.opcode = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
	send_pkt(peer_fd, &peer_addr, &f, junk, 1024, NULL, NULL); /* 1024 > 100 */
	ut_cq_empty(cq, 50);
	check_memory("read response too long", false);
	/* the right one completes it */
	send_pkt(peer_fd, &peer_addr, &f, junk, 100, NULL, NULL);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 5);
	assert_memory_equal(R[M_RECV].buf + 1024, junk, 100);

	/* a READ response for a SEND: the WQE fails FATAL_ERR (rc-protocol §4
	 * step 5), the QP errors */
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 6;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	ut_post_send(qp, &wr);
	expect(&p, buf, S_ONLY);
	f.psn = p.psn;
	f.opcode = URVT_OP_RC_RDMA_READ_RESPONSE_ONLY;
	send_pkt(peer_fd, &peer_addr, &f, junk, 0, NULL, NULL);
	ut_poll1(cq, &wc);
	assert_int_equal(wc.wr_id, 6);
	assert_int_equal(wc.status, IBV_WC_FATAL_ERR);
	ut_poll1(cq, &wc); /* the posted receive, flushed */
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(ut_state(qp), ERR);
	check_memory("response injection", false);
	rvt_destroy_qp(qp);
	ut_async_drain(&dev);
	rvt_destroy_cq(cq);
}

/* CQ overrun over the network (class G): SENDs completing into a full CQ
 * raise IBV_EVENT_CQ_ERR (once) and take the QP to ERR; nothing is
 * written outside the receive buffers. */
static void test_cq_overrun(void **state)
{
	struct rvt_qp *qp;
	struct urvt_pkt f;
	uint8_t data[64];
	int n, events;

	cq = ut_cq(&dev, 1);
	n = (int)cq->cqe; /* capacity as reported */
	qp = victim(RC, RTS, ALL_RIGHTS);
	for (int i = 1; i < n + 2; i++)
		ut_post_recv(qp, 0xabc + (uint64_t)i, R[M_RECV].buf + 512 * i, 512, R[M_RECV].key);
	memset(&f, 0, sizeof(f));
	f.opcode = S_ONLY;
	f.dest_qpn = qp->qpn;
	f.ackreq = true;
	for (int i = 0; i < n + 2; i++) {
		f.psn = PEER_PSN + (uint32_t)i;
		send_pkt(peer_fd, &peer_addr, &f, data, sizeof(data), NULL, NULL);
	}
	events = ut_async_count(&dev, IBV_EVENT_CQ_ERR, cq, 2000);
	assert_int_equal(events, 1);
	assert_int_equal(ut_state(qp), ERR);
	check_memory("cq overrun", false);
	rvt_destroy_qp(qp);
	ut_async_drain(&dev);
	rvt_destroy_cq(cq);
	cq = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_replay_and_gap),
		cmocka_unit_test(test_send_with_inv_foreign_key),
		cmocka_unit_test(test_response_injection),
		cmocka_unit_test(test_cq_overrun),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
