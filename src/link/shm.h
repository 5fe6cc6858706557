/*
 * The same-host shared-memory link (docs/shm.md): packets between urvt
 * devices of processes of one user in one network namespace travel through
 * rings in a shared memfd instead of the kernel's UDP stack.
 *
 * Each device listens on an abstract unix socket named after its uid, GID
 * and host registry slot (abstract names are per network namespace, so
 * namespaces stay apart, as hosts do). The first time a device resolves a
 * GID and a QPN's slot it connects there;
 * if a urvt device of the same uid answers, it creates a memfd with one
 * ring per direction, seals it and hands it over with its doorbell eventfd
 * (SCM_RIGHTS); the peer answers with its own doorbell. Anything else
 * (no listener, another uid, rxe, another host or namespace) and the
 * resolve fails: the transport sends over UDP. The link is lossless: no
 * ICRC is computed or checked on it; every other check of the transport
 * stays. Nothing a peer writes into the rings is trusted: lengths and
 * indices are bounded, packets are copied out before they are parsed.
 */
#ifndef URVT_LINK_SHM_H
#define URVT_LINK_SHM_H

#include "link/link.h"

/* Open the shm link of the device whose GID is gid (its UDP link's
 * address) in host registry slot slot (its QPNs are slot << 16 | n; 0: the
 * process has no slot and owns every QPN of its GID). A peer is (GID,
 * slot): docs/shm.md "Rendezvous and handshake". to_self: resolving our
 * own GID and slot connects to ourselves (a ring to the same process,
 * URVT_PATH=shm); otherwise it fails, for the in-process path. NULL and
 * *err (a negative errno) if the name is taken or a system call fails;
 * the device then runs on UDP alone. */
struct urvt_link *urvt_shm_open_slot(const struct in6_addr *gid, uint8_t slot, bool to_self,
				     int *err);
/* The same in slot 0, as a process without a registry slot. */
struct urvt_link *urvt_shm_open(const struct in6_addr *gid, bool to_self, int *err);

/* What the link has seen, for urvt-stat and tests. */
struct urvt_shm_stats {
	uint32_t peers_up;                /* connected */
	uint32_t peers_gone;              /* closed by the peer (it exited) */
	uint32_t peers_dead;              /* dropped: it broke the protocol */
	uint32_t refused;                 /* connections not taken (other uid, bad hello) */
};
void urvt_shm_get_stats(struct urvt_link *l, struct urvt_shm_stats *st);

#endif
