/*
 * The host registry: one shared table per user and network namespace that
 * every urvt process of that user there maps (docs/host-identity.md). It
 * hands each process a slot (1..255), which names the process's QPN range
 * and CM IDs, records which socket group each slot's device joined and at
 * which member index (the kernel's SO_REUSEPORT order), and holds the
 * host-wide rdma_cm port table. Knows nothing of RDMA beyond those words.
 *
 * The file is /dev/shm/urvt-host-<uid>-<netns inode>, mode 0600 (or
 * URVT_REGISTRY, for tests). A writer holds the lock (an flock on the file,
 * which the kernel releases when a holder dies, plus a mutex between this
 * process's threads). The table only ever decides where a datagram is
 * steered or forwarded first: the process that receives it checks its own
 * QPs, so a corrupted table costs forwarding or losses (which RC recovers),
 * never a delivery to the wrong QP.
 */
#ifndef URVT_BASE_HOSTREG_H
#define URVT_BASE_HOSTREG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define URVT_HOST_SLOTS 256
/* slots handed out: 1..254 (QPN top byte 0 holds QP0/QP1, 0xff the
 * multicast QPN 0xffffff) */
#define URVT_HOST_LAST_SLOT 254
#define URVT_HOST_PORTS 1024
#define URVT_HOST_NO_INDEX (-1)

struct urvt_host_slot {
	_Atomic int32_t pid;              /* 0: free */
	uint64_t start;                   /* the process's start time (/proc/PID/stat) */
	uint8_t group[16] __attribute__((aligned(8))); /* the address its socket joined
					     (urvt_host_group_set / _is) */
	int32_t index;                    /* its member index there, or URVT_HOST_NO_INDEX */
	_Atomic uint32_t fwd_posted;      /* datagrams forwarded to it (a hint to look) */
	uint32_t pad[7];
};

#define URVT_HOST_PORT_USED 1u
#define URVT_HOST_PORT_LISTEN 2u
#define URVT_HOST_PORT_AFONLY 4u
#define URVT_HOST_PORT_REUSE 8u

struct urvt_host_port {
	uint8_t flags;                    /* URVT_HOST_PORT_*; 0: free */
	uint8_t slot;                     /* its owner */
	uint16_t ps;                      /* rdma_cm port space */
	uint16_t port;
	uint16_t family;                  /* AF_INET / AF_INET6 of the bound address */
	uint8_t addr[16];                 /* v4-mapped or IPv6; all zero: a wildcard */
};

struct urvt_host_table {
	uint64_t magic;
	uint32_t version, size;
	_Atomic uint32_t gen;             /* bumped on every group change */
	_Atomic uint32_t probe_gen;       /* bumped: every member, learn your index again */
	uint32_t pad[2];
	struct urvt_host_slot slot[URVT_HOST_SLOTS];
	struct urvt_host_port port[URVT_HOST_PORTS];
};

struct urvt_host {
	struct urvt_host_table *t;
	int fd;
	int32_t pid;                      /* the process that claimed my_slot */
	uint64_t ino;                     /* the file's inode: names that must not meet
					     another registry's (tests' URVT_REGISTRY) */
	uint8_t my_slot;
};

/* A slot's group is read without the lock on the receive path while this
 * process's other threads (and other processes) write it under the lock:
 * two relaxed 64-bit atomics, so a reader sees each half whole. */
static inline void urvt_host_group_set(struct urvt_host_slot *sl, const uint8_t key[16])
{
	uint64_t w[2];

	memcpy(w, key, 16);
	__atomic_store_n((uint64_t *)(void *)sl->group, w[0], __ATOMIC_RELAXED);
	__atomic_store_n((uint64_t *)(void *)(sl->group + 8), w[1], __ATOMIC_RELAXED);
}

static inline bool urvt_host_group_is(const struct urvt_host_slot *sl, const uint8_t key[16])
{
	uint64_t w[2] = { __atomic_load_n((const uint64_t *)(const void *)sl->group, __ATOMIC_RELAXED),
			  __atomic_load_n((const uint64_t *)(const void *)(sl->group + 8),
					  __ATOMIC_RELAXED) };

	return !memcmp(w, key, 16);
}

/* This process's registry, opened and a slot claimed on first use; NULL
 * and *err (negative errno) when there is none to be had (URVT_SHARE=0,
 * no /dev/shm, a file that is not ours, all slots taken). A forked child
 * gets a new slot of its own. */
struct urvt_host *urvt_host_get(int *err);

/* Hold the registry (blocks; the flock and the process's mutex). */
void urvt_host_lock(struct urvt_host *h);
void urvt_host_unlock(struct urvt_host *h);

/* With the lock held: */

/* Reclaim the slots of processes that are gone (killed): their group
 * membership leaves as the kernel's does, their ports are freed. Returns
 * how many. */
unsigned urvt_host_reap(struct urvt_host *h);
/* Members of group key (an address), whether their index is known or not. */
int urvt_host_group_size(struct urvt_host *h, const uint8_t key[16]);
/* My slot joined group key at index. */
void urvt_host_group_join(struct urvt_host *h, const uint8_t key[16], int32_t index);
/* slot's socket left its group: the last member takes its index, as the
 * kernel moves it (docs/host-identity.md). */
void urvt_host_group_leave(struct urvt_host *h, uint8_t slot);
/* Give up my slot (device closed for good): group, ports, the slot. */
void urvt_host_release(struct urvt_host *h);

/* Without the lock (a hint, read racily on the receive path): */

/* The slot that owns a listener for (ps, port) matching local address
 * addr (an exact address first, then a wildcard of its family or an
 * IPv6 wildcard without AFONLY), or 0. */
uint8_t urvt_host_port_owner(struct urvt_host *h, uint16_t ps, uint16_t port,
			     const uint8_t addr[16]);

/* Is the process in slot s alive (its pid runs and started when recorded)? */
bool urvt_host_slot_alive(const struct urvt_host_slot *s);

#endif
