/*
 * One line to the user, on stderr, when the device cannot start (a bad
 * variable, an address that is taken): "urvt: WHAT: WHAT TO DO". The
 * verbs layer counts them so that a failed open that nobody explained gets
 * a generic line of its own: every failure to start says something, once.
 */
#ifndef URVT_BASE_REPORT_H
#define URVT_BASE_REPORT_H

/* Prints "urvt: " fmt "\n" with one write(2), so that lines of two threads
 * or processes sharing stderr do not interleave. */
void urvt_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* How many lines urvt_report has printed in this process. */
unsigned long urvt_report_count(void);

#endif
