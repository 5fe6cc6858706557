/*
 * Which links a device runs on, and in which order (docs/shm.md,
 * docs/usage.md URVT_PATH and URVT_SHM): the choice lives here, below the
 * transport, so that a new link changes this file and not the engines.
 */
#ifndef URVT_LINK_LINKS_H
#define URVT_LINK_LINKS_H

#include <stdbool.h>

#include "link/link.h"

struct urvt_progress;

#define URVT_LINKS_MAX 4

struct urvt_links {
	/* l[0] reaches any GID (reaches_any); l[1..n) reach some peers only
	 * and are tried first, in this order (they cost less) */
	struct urvt_link *l[URVT_LINKS_MAX];
	unsigned n;
	/* URVT_PATH named a link: the process's own peers go over it, not
	 * the core's in-process path */
	bool self_by_link;
};

/* Open the device's links. addr: the address to bind unless URVT_ADDR or
 * URVT_NETDEV name one (NULL: the default selection); progress runs the
 * links' timers. 0, or a negative errno (reported) and nothing open. */
int urvt_links_open(const char *addr, struct urvt_progress *progress, struct urvt_links *out);
/* Close them all (an error path before the transport owns them). */
void urvt_links_close(struct urvt_links *ls);

#endif
