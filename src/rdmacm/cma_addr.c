/*
 * The rdma_cm's addresses (cma_priv.h; the kernel's cma.c): port spaces
 * and their ports, binding, address resolution (which device, which
 * source address) and the route, built locally as the kernel builds a
 * RoCE route. Called with cma_lock held.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/hostreg.h"
#include "rdmacm/addr.h"
#include "rdmacm/cma_priv.h"

#define CMA_IBOE_PACKET_LIFETIME 18
#define CMA_IBOE_HOP_LIMIT 64

static struct cma_bind_list *bind_lists;

static bool cma_env_set(const char *name)
{
	const char *v = getenv(name);

	return v && *v;
}

/* The device's address is given (docs/usage.md): not the default selection. */
static bool cma_addr_configured(void)
{
	return cma_env_set("URVT_ADDR") || cma_env_set("URVT_NETDEV");
}

/* ------------------------------------------------------------------ */
/* The host-wide port table (base/hostreg.h, docs/host-identity.md)   */
/* ------------------------------------------------------------------ */
/*
 * The other urvt processes of this user and network namespace take their
 * ports from the same table, as the kernel's ids share one port space.
 * Each id holding a port has an entry of its own there (its flags, REUSE
 * and LISTEN, are its own); entries of our slot are checked in-process
 * (bind_lists), those of other slots here, by cma_check_port's rules.
 */
struct cma_host_want {
	uint16_t ps, port, family;
	uint8_t addr[16];                 /* v4-mapped or IPv6; zero: a wildcard */
	bool afonly, reuseaddr;
};

/* The process the registry could not be had in (asked once per process). */
static pid_t cma_no_host_pid;

static struct urvt_host *cma_host(void)
{
	struct urvt_host *h;
	int err;

	if (cma_no_host_pid == getpid())
		return NULL;
	h = urvt_host_get(&err);
	if (!h)
		cma_no_host_pid = getpid();
	return h;
}

/* Does this process share the host's identity (a registry)? Then its
 * default device is the host's 127.0.0.1 (docs/host-identity.md). */
static bool cma_host_shared(void)
{
	return cma_host() != NULL;
}

/* The registry, locked, with the ports of dead processes freed; or NULL. */
static struct urvt_host *cma_host_hold(void)
{
	struct urvt_host *h = cma_host();

	if (h) {
		urvt_host_lock(h);
		urvt_host_reap(h);
	}
	return h;
}

static bool cma_host_wildcard(const uint8_t addr[16])
{
	static const uint8_t zero[16];

	return !memcmp(addr, zero, sizeof(zero));
}

static void cma_host_want_of(struct rdma_id_private *p, uint16_t ps, const struct sockaddr *sa,
			     bool reuseaddr, struct cma_host_want *w)
{
	memset(w, 0, sizeof(*w));
	w->ps = ps;
	w->port = cma_port(sa);
	w->family = sa->sa_family;
	w->afonly = p->afonly;
	w->reuseaddr = reuseaddr;
	if (cma_zero_addr(sa))
		return;
	if (sa->sa_family == AF_INET) {
		w->addr[10] = w->addr[11] = 0xff;
		memcpy(w->addr + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else {
		memcpy(w->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

/* May w be bound next to the other processes' ports? 0 or the errno. */
static int cma_host_conflict(const struct urvt_host *h, const struct cma_host_want *w)
{
	for (unsigned i = 0; i < URVT_HOST_PORTS; i++) {
		const struct urvt_host_port *e = &h->t->port[i];

		if (!(e->flags & URVT_HOST_PORT_USED) || e->slot == h->my_slot ||
		    e->ps != w->ps || e->port != w->port)
			continue;
		if (!(e->flags & URVT_HOST_PORT_LISTEN) && w->reuseaddr &&
		    (e->flags & URVT_HOST_PORT_REUSE))
			continue;
		if (w->afonly && (e->flags & URVT_HOST_PORT_AFONLY) && w->family != e->family)
			continue;
		if (cma_host_wildcard(w->addr) || cma_host_wildcard(e->addr))
			return -EADDRNOTAVAIL;
		if (w->family == e->family && !memcmp(w->addr, e->addr, 16))
			return -EADDRINUSE;
	}
	return 0;
}

static uint8_t cma_host_option_flags(const struct rdma_id_private *p)
{
	return (uint8_t)((p->afonly ? URVT_HOST_PORT_AFONLY : 0) |
			 (p->reuseaddr ? URVT_HOST_PORT_REUSE : 0));
}

/* An entry for p; -ENOSPC when the table is full. */
static int cma_host_record(struct urvt_host *h, struct rdma_id_private *p,
			   const struct cma_host_want *w)
{
	for (unsigned i = 0; i < URVT_HOST_PORTS; i++) {
		struct urvt_host_port *e = &h->t->port[i];

		if (e->flags)
			continue;
		e->slot = h->my_slot;
		e->ps = w->ps;
		e->port = w->port;
		e->family = w->family;
		memcpy(e->addr, w->addr, 16);
		/* the link layer reads entries without the lock: flags last */
		atomic_thread_fence(memory_order_release);
		e->flags = (uint8_t)(URVT_HOST_PORT_USED | cma_host_option_flags(p));
		p->host_port = (int)i + 1;
		p->host_pid = (int32_t)getpid();
		return 0;
	}
	return -ENOSPC;
}

/* p's entry, if it still is (the table may have been reset meanwhile). */
static struct urvt_host_port *cma_host_entry(struct urvt_host *h, struct rdma_id_private *p)
{
	struct urvt_host_port *e;

	if (!p->host_port || p->host_pid != (int32_t)getpid())
		return NULL;
	e = &h->t->port[p->host_port - 1];
	if (!(e->flags & URVT_HOST_PORT_USED) || e->slot != h->my_slot ||
	    e->ps != (uint16_t)p->id.ps || e->port != cma_port(cma_src_addr(p)))
		return NULL;
	return e;
}

static void cma_host_release(struct rdma_id_private *p)
{
	struct urvt_host *h;

	if (!p->host_port)
		return;
	/* a forked child's copy of an id: the entry is its parent's */
	if (p->host_pid == (int32_t)getpid() && (h = cma_host())) {
		struct urvt_host_port *e;

		urvt_host_lock(h);
		e = cma_host_entry(h, p);
		if (e) {
			e->flags = 0;
			atomic_thread_fence(memory_order_release);
			memset(e, 0, sizeof(*e));
		}
		urvt_host_unlock(h);
	}
	p->host_port = 0;
}

/* Claim the bound port of p in the table (0 or the errno). */
static int cma_host_claim(struct rdma_id_private *p, uint16_t ps)
{
	struct cma_host_want w;
	struct urvt_host *h = cma_host_hold();
	int ret;

	if (!h)
		return 0;
	cma_host_want_of(p, ps, cma_src_addr(p), p->reuseaddr, &w);
	ret = cma_host_conflict(h, &w);
	if (!ret)
		ret = cma_host_record(h, p, &w);
	urvt_host_unlock(h);
	return ret == -ENOSPC ? -EADDRNOTAVAIL : ret;
}

/* What binding addr would meet among other processes' ports (0 or the errno). */
static int cma_host_busy(struct rdma_id_private *p, const struct sockaddr *addr)
{
	struct cma_host_want w;
	struct urvt_host *h;
	int ret;

	if (!cma_port(addr) || !(h = cma_host_hold()))
		return 0;
	cma_host_want_of(p, (uint16_t)p->id.ps, addr, p->reuseaddr, &w);
	ret = cma_host_conflict(h, &w);
	urvt_host_unlock(h);
	return ret;
}

int cma_host_port_listen(struct rdma_id_private *p)
{
	struct urvt_host_port *e;
	struct urvt_host *h;
	int ret = 0;

	if (!p->host_port || !(h = cma_host_hold()))
		return 0;
	e = cma_host_entry(h, p);
	if (e) {
		/* a reuseaddr bind let others share; a listener may not */
		if (p->reuseaddr) {
			struct cma_host_want w;

			cma_host_want_of(p, e->ps, cma_src_addr(p), false, &w);
			ret = cma_host_conflict(h, &w);
		}
		if (!ret)
			e->flags |= URVT_HOST_PORT_LISTEN;
	}
	urvt_host_unlock(h);
	return ret;
}

void cma_host_port_flags(struct rdma_id_private *p)
{
	struct urvt_host_port *e;
	struct urvt_host *h;

	if (!p->host_port || p->host_pid != (int32_t)getpid() || !(h = cma_host()))
		return;
	urvt_host_lock(h);
	e = cma_host_entry(h, p);
	if (e)
		e->flags = (uint8_t)((e->flags & (URVT_HOST_PORT_USED | URVT_HOST_PORT_LISTEN)) |
				     cma_host_option_flags(p));
	urvt_host_unlock(h);
}

/* ------------------------------------------------------------------ */
/* Port spaces (the kernel's cma_get_port and friends)                */
/* ------------------------------------------------------------------ */
struct cma_bind_list *cma_ps_find(uint16_t ps, uint16_t port)
{
	for (struct cma_bind_list *b = bind_lists; b; b = b->next)
		if (b->ps == ps && b->port == port)
			return b;
	return NULL;
}

static void cma_bind_port(struct cma_bind_list *b, struct rdma_id_private *p)
{
	cma_set_port(cma_src_addr(p), b->port);
	p->bind_list = b;
	p->bind_next = b->owners;
	b->owners = p;
}

static int cma_alloc_port(uint16_t ps, struct rdma_id_private *p, uint16_t port)
{
	struct cma_bind_list *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->ps = ps;
	b->port = port;
	b->next = bind_lists;
	bind_lists = b;
	cma_bind_port(b, p);
	return 0;
}

void cma_release_port(struct rdma_id_private *p)
{
	struct cma_bind_list *b = p->bind_list, **pp;
	struct rdma_id_private **op;

	cma_host_release(p);
	if (!b)
		return;
	for (op = &b->owners; *op && *op != p; op = &(*op)->bind_next)
		;
	if (*op)
		*op = p->bind_next;
	p->bind_list = NULL;
	p->bind_next = NULL;
	if (b->owners)
		return;
	for (pp = &bind_lists; *pp && *pp != b; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = b->next;
	free(b);
}

/* An ephemeral port's owners must differ from p in some part of the 4-tuple. */
static int cma_port_is_unique(struct cma_bind_list *b, struct rdma_id_private *p)
{
	struct sockaddr *daddr = cma_dst_addr(p), *saddr = cma_src_addr(p);
	uint16_t dport = cma_port(daddr);

	for (struct rdma_id_private *cur = b->owners; cur; cur = cur->bind_next) {
		struct sockaddr *cd = cma_dst_addr(cur), *cs = cma_src_addr(cur);

		if (cur == p)
			continue;
		if (cma_port(cd) && dport != cma_port(cd))
			continue;
		if (!cma_zero_addr(saddr) && !cma_zero_addr(cs) && !cma_addr_eq(saddr, cs))
			continue;
		if (!cma_zero_addr(cd) && cd->sa_family && !cma_addr_eq(daddr, cd))
			continue;
		return -EADDRNOTAVAIL;
	}
	return 0;
}

/* Mark in held the ports of ps that other processes hold. */
static void cma_host_held_ports(const struct urvt_host *h, uint16_t ps, uint8_t *held)
{
	for (unsigned i = 0; i < URVT_HOST_PORTS; i++) {
		const struct urvt_host_port *e = &h->t->port[i];

		if ((e->flags & URVT_HOST_PORT_USED) && e->slot != h->my_slot && e->ps == ps)
			held[e->port / 8] |= (uint8_t)(1u << (e->port % 8));
	}
}

static int cma_alloc_any_port(uint16_t ps, struct rdma_id_private *p)
{
	static unsigned int last_used_port;
	static uint8_t held[65536 / 8]; /* cma_lock guards it */
	struct urvt_host *h = cma_host_hold();
	int low, high, remaining, ret = -EADDRNOTAVAIL;
	unsigned int rover;

	memset(held, 0, sizeof(held));
	if (h)
		cma_host_held_ports(h, ps, held);
	cma_local_port_range(&low, &high);
	remaining = high - low + 1;
	rover = cma_random() % (unsigned int)remaining + (unsigned int)low;
	for (; remaining; remaining--) {
		/* another process's port is never shared: its ids are not
		 * here for cma_port_is_unique to compare with */
		if (rover != last_used_port && !(held[rover / 8] & (1u << (rover % 8)))) {
			struct cma_bind_list *b = cma_ps_find(ps, (uint16_t)rover);

			if (!b) {
				ret = cma_alloc_port(ps, p, (uint16_t)rover);
			} else {
				ret = cma_port_is_unique(b, p);
				if (!ret)
					cma_bind_port(b, p);
			}
			if (!ret && h) {
				struct cma_host_want w;

				cma_host_want_of(p, ps, cma_src_addr(p), p->reuseaddr, &w);
				ret = cma_host_record(h, p, &w);
				if (ret) {
					cma_release_port(p);
					ret = -EADDRNOTAVAIL; /* the table is full */
					break;
				}
			}
			if (!ret)
				last_used_port = rover;
			if (ret != -EADDRNOTAVAIL)
				break;
		}
		if (++rover > (unsigned int)high)
			rover = (unsigned int)low;
		ret = -EADDRNOTAVAIL;
	}
	if (h)
		urvt_host_unlock(h);
	return ret;
}

/* May p use its port next to the port's other owners? */
int cma_check_port(struct cma_bind_list *b, struct rdma_id_private *p, bool reuseaddr)
{
	struct sockaddr *addr = cma_src_addr(p);

	for (struct rdma_id_private *cur = b->owners; cur; cur = cur->bind_next) {
		struct sockaddr *ca = cma_src_addr(cur);

		if (cur == p)
			continue;
		if (cur->state != RDMA_CM_LISTEN && reuseaddr && cur->reuseaddr)
			continue;
		if (p->afonly && cur->afonly && addr->sa_family != ca->sa_family)
			continue;
		if (cma_zero_addr(addr) || cma_zero_addr(ca))
			return -EADDRNOTAVAIL;
		if (cma_addr_eq(addr, ca))
			return -EADDRINUSE;
	}
	return 0;
}

static int cma_use_port(uint16_t ps, struct rdma_id_private *p)
{
	uint16_t port = cma_port(cma_src_addr(p));
	struct cma_bind_list *b;
	int ret;

	if (port < 1024 && geteuid() != 0)
		return -EACCES;
	b = cma_ps_find(ps, port);
	ret = b ? cma_check_port(b, p, p->reuseaddr) : 0;
	if (!ret)
		ret = cma_host_claim(p, ps);
	if (ret)
		return ret;
	if (b) {
		cma_bind_port(b, p);
		return 0;
	}
	ret = cma_alloc_port(ps, p, port);
	if (ret)
		cma_host_release(p);
	return ret;
}

static int cma_get_port(struct rdma_id_private *p)
{
	switch (p->id.ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
	case RDMA_PS_IB:
		break;
	default:
		return -EPROTONOSUPPORT;
	}
	if (!cma_port(cma_src_addr(p)))
		return cma_alloc_any_port((uint16_t)p->id.ps, p);
	return cma_use_port((uint16_t)p->id.ps, p);
}

/* ------------------------------------------------------------------ */
/* Binding, address and route                                         */
/* ------------------------------------------------------------------ */
static bool cma_bindv6only(void)
{
	FILE *f = fopen("/proc/sys/net/ipv6/cma_bindv6only", "re");
	int v = 0;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v != 0;
}

int cma_bind_addr(struct rdma_id_private *p, const struct sockaddr *addr_in)
{
	struct sockaddr_storage copy; /* addr_in may be the id's own */
	const struct sockaddr *addr = (struct sockaddr *)&copy;
	struct cma_device *dev;
	int ret;

	if (addr_in->sa_family != AF_INET && addr_in->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	memcpy(&copy, addr_in, cma_addrlen(addr_in));
	if (p->state != RDMA_CM_IDLE)
		return -EINVAL;
	if (addr->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)addr)->sin6_addr) &&
	    !((const struct sockaddr_in6 *)addr)->sin6_scope_id)
		return -EINVAL;
	p->state = RDMA_CM_ADDR_BOUND;
	memset(&p->id.route.addr.src_storage, 0, sizeof(p->id.route.addr.src_storage));
	memcpy(cma_src_addr(p), addr, cma_addrlen(addr));
	if (!cma_zero_addr(addr)) {
		/* a specific address: the device must be (or become) it */
		ret = cma_get_device(addr, &dev);
		if (ret)
			goto err;
		cma_attach_to_dev(p, dev);
	}
	if (!p->afonly_set)
		p->afonly = addr->sa_family == AF_INET ? true : cma_bindv6only();
	ret = cma_get_port(p);
	if (ret)
		goto err_dev;
	cma_dst_addr(p)->sa_family = addr->sa_family;
	return 0;
err_dev:
	p->cma_dev = NULL;
	p->id.verbs = NULL;
	p->id.pd = NULL;
err:
	p->state = RDMA_CM_IDLE;
	return ret;
}

int cma_bind_host(struct rdma_id_private *p, const struct sockaddr *addr)
{
	struct sockaddr_storage any = { .ss_family = addr->sa_family };
	struct cma_device *dev;
	int ret = cma_bind_addr(p, addr);

	if (!cma_loopback_addr(addr) || (ret != -EADDRNOTAVAIL && ret != -EADDRINUSE))
		return ret;
	cma_set_port((struct sockaddr *)&any, cma_port(addr));
	/* that failing too, the address's own answer (a port in use), or
	 * another process's port on the address itself, as the kernel sees
	 * the host's one port space */
	if (cma_bind_addr(p, (struct sockaddr *)&any)) {
		int busy = cma_host_busy(p, addr);

		return busy == -EADDRINUSE ? busy : ret;
	}
	/* and on the process's device when that is a loopback one too, as a
	 * bound address is (id->verbs: pyverbs' bind_addr takes the id's
	 * context at once); a device on another interface stays unbound
	 * here, as libfabric's verbs provider expects in a namespace */
	dev = cma_device_if_open();
	if (dev ? cma_loopback_addr((struct sockaddr *)&dev->addr) : !cma_addr_configured()) {
		if (!cma_get_device(NULL, &dev))
			cma_attach_to_dev(p, dev);
	}
	return 0;
}

/*
 * The device for reaching dst when no source address was given: the
 * existing one; else, with no address configured, the one at the source of
 * the route to dst (a loopback dst: the default selection, so that each
 * process on the host gets its own 127.0.0.x).
 */
static int cma_dev_for_dst(const struct sockaddr *dst, struct cma_device **dev)
{
	struct sockaddr_storage src;
	int ret;

	/* a multicast group: the process's device, wherever it is (the
	 * route to a group names no device of ours) */
	if (cma_device_if_open() || cma_addr_configured() || cma_mcast_addr(dst))
		return cma_get_device(NULL, dev);
	/* the host's one shared identity (docs/host-identity.md): the default */
	if (cma_loopback_addr(dst) && dst->sa_family == AF_INET && cma_host_shared())
		return cma_get_device(NULL, dev);
	if (cma_loopback_addr(dst) && dst->sa_family == AF_INET) {
		/* a free 127.0.0.x, never dst itself: a client started before
		 * its server must not take the address the server will bind */
		for (int tries = 0; tries < 8; tries++) {
			ret = cma_free_loopback(dst, &src);
			if (!ret)
				ret = cma_get_device((struct sockaddr *)&src, dev);
			if (ret != -EADDRINUSE)
				return ret;
		}
		return ret;
	}
	if (cma_loopback_addr(dst))
		return cma_get_device(NULL, dev);
	ret = cma_route_src(dst, &src);
	if (ret)
		return ret;
	return cma_get_device((struct sockaddr *)&src, dev);
}

int cma_resolve_addr(struct rdma_id_private *p, const struct sockaddr *src_in,
		     const struct sockaddr *dst_in)
{
	socklen_t dlen = cma_addrlen(dst_in), slen = src_in ? cma_addrlen(src_in) : 0;
	struct cma_device *dev = p->cma_dev;
	/* copies: the caller may pass the id's own route addresses (rsockets do) */
	struct sockaddr_storage dst_copy, src_copy;
	const struct sockaddr *dst = (struct sockaddr *)&dst_copy, *src = NULL;
	uint16_t port;
	int ret;

	if (!dlen)
		return -EINVAL;
	memcpy(&dst_copy, dst_in, dlen);
	if (src_in && src_in->sa_family) {
		if (!slen)
			return -EINVAL;
		memcpy(&src_copy, src_in, slen);
		src = (struct sockaddr *)&src_copy;
	}
	memset(&p->id.route.addr.dst_storage, 0, sizeof(p->id.route.addr.dst_storage));
	memcpy(cma_dst_addr(p), dst, dlen);
	if (p->state == RDMA_CM_IDLE) {
		struct sockaddr_storage any = { .ss_family = dst->sa_family };
		const struct sockaddr *b = src && src->sa_family ? src : (struct sockaddr *)&any;
		/* a loopback source to a loopback destination names this
		 * host (cma_bind_host); when it is dst itself and no device
		 * is open yet, the device takes any address */
		bool lo_hint = b == src && cma_loopback_addr(src) && cma_loopback_addr(dst);

		if (lo_hint && cma_addr_eq(src, dst) && !cma_device_if_open()) {
			any.ss_family = src->sa_family;
			cma_set_port((struct sockaddr *)&any, cma_port(src));
			b = (struct sockaddr *)&any;
		}
		ret = lo_hint && b == src ? cma_bind_host(p, src) : cma_bind_addr(p, b);
		if (ret) {
			memset(cma_dst_addr(p), 0, dlen);
			return ret;
		}
		memcpy(cma_dst_addr(p), dst, dlen);
		dev = p->cma_dev;
	}
	if (cma_family(p) != dst->sa_family) {
		memset(cma_dst_addr(p), 0, dlen);
		return -EINVAL;
	}
	if (p->state != RDMA_CM_ADDR_BOUND) {
		memset(cma_dst_addr(p), 0, dlen);
		return -EINVAL;
	}
	p->state = RDMA_CM_ADDR_QUERY;
	/* what the kernel learns asynchronously (route, ARP, device) is known
	 * here at once; failures still come as ADDR_ERROR events */
	ret = 0;
	if (!dev) {
		ret = cma_dev_for_dst(dst, &dev);
		if (!ret && dev->addr.ss_family != dst->sa_family)
			ret = -EAFNOSUPPORT;
		if (!ret) {
			port = cma_port(cma_src_addr(p));
			memcpy(cma_src_addr(p), &dev->addr, cma_addrlen((struct sockaddr *)&dev->addr));
			cma_set_port(cma_src_addr(p), port);
			cma_attach_to_dev(p, dev);
		}
	}
	if (ret) {
		p->state = RDMA_CM_ADDR_BOUND;
		return cma_queue(p, p, RDMA_CM_EVENT_ADDR_ERROR, ret, NULL);
	}
	cma_ip2gid(dst, &p->id.route.addr.addr.ibaddr.dgid);
	p->state = RDMA_CM_ADDR_RESOLVED;
	ret = cma_queue(p, p, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL);
	if (ret)
		p->state = RDMA_CM_ADDR_BOUND;
	return ret;
}

/* The RoCE flow label of a connection, from its ports (the kernel's
 * cma_get_roce_udp_flow_label); the RC QP's UDP source port follows it. */
static uint32_t cma_flow_label(struct rdma_id_private *p)
{
	struct sockaddr *src = cma_src_addr(p);

	if (src->sa_family == AF_INET6) {
		uint32_t fl = be32toh(((struct sockaddr_in6 *)src)->sin6_flowinfo) & 0xfffff;
		if (fl)
			return fl;
	}
	return ((uint32_t)cma_port(src) * 31 + cma_port(cma_dst_addr(p))) & 0xfffff;
}

/* sa_path_rec of the path, as the kernel's cma_resolve_iboe_route fills it */
void cma_fill_path(struct rdma_id_private *p)
{
	struct ibv_sa_path_rec *r = &p->path_rec;

	memset(r, 0, sizeof(*r));
	r->sgid = p->cma_dev->gid;
	cma_ip2gid(cma_dst_addr(p), &r->dgid);
	r->flow_label = htobe32(cma_flow_label(p));
	r->hop_limit = CMA_IBOE_HOP_LIMIT;
	r->traffic_class = p->tos_set ? p->tos : 0;
	r->reversible = 1;
	r->numb_path = 1;
	r->pkey = htobe16(0xffff);
	r->sl = 0;
	r->mtu_selector = 2;
	r->mtu = (uint8_t)p->cma_dev->active_mtu;
	r->rate_selector = 2;
	r->rate = 0;
	r->packet_life_time_selector = 2;
	r->packet_life_time = CMA_IBOE_PACKET_LIFETIME;
	p->id.route.path_rec = r;
	p->id.route.num_paths = 1;
	p->id.route.addr.addr.ibaddr.dgid = r->dgid;
}

int cma_resolve_route(struct rdma_id_private *p)
{
	int ret;

	if (p->state != RDMA_CM_ADDR_RESOLVED)
		return -EINVAL;
	p->state = RDMA_CM_ROUTE_QUERY;
	cma_fill_path(p);
	p->state = RDMA_CM_ROUTE_RESOLVED;
	ret = cma_queue(p, p, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL);
	if (ret)
		p->state = RDMA_CM_ADDR_RESOLVED;
	return ret;
}

/* RDMA_OPTION_IB_PATH: a route the application got elsewhere (ibacm).
 * Takes the first struct ibv_path_data; ROUTE_RESOLVED follows, as from
 * the kernel's ucma_set_ib_path. */
int cma_set_ib_path(struct rdma_id_private *p, const void *paths, size_t len)
{
	const struct ibv_path_data *pd = paths;
	struct ibv_sa_path_rec *r = &p->path_rec;
	uint32_t fl_hop;

	if (!len || len % sizeof(*pd))
		return -EINVAL;
	if (p->state != RDMA_CM_ADDR_RESOLVED)
		return -EINVAL;
	cma_fill_path(p);
	r->dgid = pd->path.dgid;
	r->sgid = pd->path.sgid;
	fl_hop = be32toh(pd->path.flowlabel_hoplimit);
	r->flow_label = htobe32(fl_hop >> 8);
	r->hop_limit = (uint8_t)fl_hop;
	r->traffic_class = pd->path.tclass;
	r->pkey = pd->path.pkey;
	r->sl = be16toh(pd->path.qosclass_sl) & 0xf;
	r->mtu = pd->path.mtu & 0x1f;
	r->rate = pd->path.rate & 0x1f;
	r->packet_life_time = pd->path.packetlifetime & 0x1f;
	p->id.route.addr.addr.ibaddr.dgid = r->dgid;
	p->state = RDMA_CM_ROUTE_RESOLVED;
	return cma_queue(p, p, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL);
}

/* cm_path of an id's route */
void cma_cm_path(struct rdma_id_private *p, struct cm_path *c)
{
	const struct ibv_sa_path_rec *r = &p->path_rec;

	memset(c, 0, sizeof(*c));
	c->sgid = r->sgid;
	c->dgid = r->dgid;
	c->flow_label = be32toh(r->flow_label) & 0xfffff;
	c->pkey = be16toh(r->pkey);
	c->hop_limit = r->hop_limit;
	c->traffic_class = r->traffic_class;
	c->sl = r->sl;
	c->mtu = r->mtu;
	c->rate = r->rate;
	c->packet_life_time = r->packet_life_time;
}
