/*
 * The device's links (link/links.h): the UDP link always, the same-host
 * shared-memory link in front of it unless the environment turns it off.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/report.h"
#include "link/links.h"
#include "link/shm.h"
#include "link/udp.h"

/*
 * URVT_PATH (docs/usage.md): which link carries this process's own peers.
 * auto (and inproc): the in-process path; shm: the shared-memory link to
 * ourselves; udp: UDP to our own address (and no shm link at all).
 */
enum path { PATH_AUTO, PATH_SHM, PATH_UDP };

static int parse_path(enum path *out)
{
	const char *env = getenv("URVT_PATH");

	*out = PATH_AUTO;
	if (!env || !*env || !strcmp(env, "auto") || !strcmp(env, "inproc"))
		return 0;
	if (!strcmp(env, "shm"))
		*out = PATH_SHM;
	else if (!strcmp(env, "udp"))
		*out = PATH_UDP;
	else {
		urvt_report("URVT_PATH=%s is not a path: use auto, inproc, shm or udp, or unset it",
			    env);
		return -EINVAL;
	}
	return 0;
}

/* URVT_SHM=0 turns the same-host shared-memory link off (docs/usage.md);
 * if it cannot open, the device runs on UDP alone, unless URVT_PATH=shm
 * asked for it. */
static int open_shm(const struct in6_addr *gid, uint8_t slot, enum path path,
		    struct urvt_link **out)
{
	int err = 0;

	*out = NULL;
	if (path == PATH_UDP || urvt_env_off("URVT_SHM")) {
		if (path != PATH_SHM)
			return 0;
		urvt_report("URVT_PATH=shm needs the shm link, which URVT_SHM=0 turns off: unset "
			    "one of them");
		return -EINVAL;
	}
	*out = urvt_shm_open_slot(gid, slot, path == PATH_SHM, &err);
	if (*out)
		return 0;
	if (path == PATH_SHM) {
		urvt_report("URVT_PATH=shm: the shm link does not open (%s): use URVT_PATH=udp "
			    "or unset it", strerror(-err));
		return err;
	}
	const char *debug = getenv("URVT_DEBUG");
	if (debug && *debug && strcmp(debug, "0"))
		urvt_report("shm link: %s: UDP only", strerror(-err));
	return 0;
}

int urvt_links_open(const char *addr, struct urvt_progress *progress, struct urvt_links *out)
{
	struct urvt_udp_cfg cfg;
	struct urvt_link *udp, *shm;
	enum path path;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = parse_path(&path);
	if (ret)
		return ret;
	urvt_udp_cfg_from_env(&cfg, progress);
	/* URVT_ADDR / URVT_NETDEV win; the opener sees the mismatch */
	if (addr && (!cfg.addr || !*cfg.addr) && (!cfg.netdev || !*cfg.netdev)) {
		cfg.addr = addr;
		cfg.netdev = NULL;
	}
	udp = urvt_udp_open(&cfg, &ret);
	if (!udp)
		return ret;
	/* the shm link's name is the device's GID and, when other processes
	 * share that address, its slot (docs/shm.md) */
	ret = open_shm(&udp->info.addr6, udp->info.slot, path, &shm);
	if (ret) {
		urvt_link_close(udp);
		return ret;
	}
	out->l[out->n++] = udp;
	if (shm)
		out->l[out->n++] = shm;
	out->self_by_link = path != PATH_AUTO;
	return 0;
}

void urvt_links_close(struct urvt_links *ls)
{
	for (unsigned k = 0; k < ls->n; k++)
		urvt_link_close(ls->l[k]);
	ls->n = 0;
}
