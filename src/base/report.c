/* urvt_report (report.h): start-up errors, one line each. */
#include "base/report.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static unsigned long nreports;

void urvt_report(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n = snprintf(line, sizeof(line), "urvt: ");

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;	/* truncated: still one line */
	line[n++] = '\n';
	__atomic_add_fetch(&nreports, 1, __ATOMIC_RELAXED);
	/* stderr is unbuffered, but a FILE may split a long line in pieces */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

unsigned long urvt_report_count(void)
{
	return __atomic_load_n(&nreports, __ATOMIC_RELAXED);
}
