/* SPDX-License-Identifier: MIT */
#ifndef URVT_TEST_RXE_CHECK_H
#define URVT_TEST_RXE_CHECK_H

#define RXE_TOTAL_PACKETS 343 /* shared/vectors/rxe/README.md */

/*
 * Check every packet of the rxe captures in dir (README table): it parses,
 * has the expected opcodes, its ICRC verifies with the captured IP header,
 * the unknown-ID verifier accepts it and recovers the captured ID, and
 * rejects it after one payload byte is flipped. Prints each failure.
 * Returns the number of failures; *npackets gets the packets checked.
 */
int rxe_check_all(const char *dir, int *npackets);

#endif
