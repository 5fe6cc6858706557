/* SPDX-License-Identifier: MIT */
/* The environment's on/off knobs (docs/usage.md): "0" turns one off. */
#ifndef URVT_BASE_ENV_H
#define URVT_BASE_ENV_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static inline bool urvt_env_off(const char *name)
{
	const char *v = getenv(name);

	return v && !strcmp(v, "0");
}

#endif
