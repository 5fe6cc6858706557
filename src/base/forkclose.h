/*
 * Sockets whose names a forked child must not keep: an abstract unix
 * socket's name stays bound while any process holds it, so a child that
 * outlives its parent would keep the parent's names (the shm link's
 * listener, the forwarding socket: docs/host-identity.md) from the next
 * process that takes the parent's registry slot. In the child, each
 * registered fd is closed and set to -1 right after fork().
 */
#ifndef URVT_BASE_FORKCLOSE_H
#define URVT_BASE_FORKCLOSE_H

/* Close *fd in a forked child (0, or -ENOSPC: too many registered). */
int urvt_close_in_child(int *fd);
/* No longer (before *fd is closed or its memory freed). */
void urvt_close_in_child_del(int *fd);

#endif
