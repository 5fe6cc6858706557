// SPDX-License-Identifier: MIT
/*
 * mpi_pingbw: the MPI rows of bench/run (docs/performance.md, "MPI on one
 * host"). Two ranks; every buffer comes from malloc, as an application's
 * would (no MPI_Alloc_mem, no registration hints).
 *
 *   mpi_pingbw lat [ITERS]        8 B ping-pong: one-way us = RTT / 2,
 *                                 averaged over ITERS round trips after
 *                                 1000 round trips of warm-up
 *   mpi_pingbw bw SIZE [WINDOWS]  windowed bandwidth: rank 0 keeps 16
 *                                 MPI_Isend of SIZE bytes in flight and
 *                                 waits for all of them, rank 1 posts 16
 *                                 MPI_Irecv, waits, and answers with a 4 B
 *                                 ack; GB/s (10^9 B/s) over WINDOWS windows
 *                                 after 4 of warm-up
 *   mpi_pingbw all                lat, then bw 65536 and bw 1048576
 *
 * The data are checked: the first window (warm-up) and one last window
 * after the timed ones carry a pattern that depends on the window, the
 * message and the offset; the receiver clears its buffers before each and
 * compares every byte after. The ping-pong's 8 B carry the iteration.
 * Rank 0 prints one line:
 *   RESULT mpi_pingbw lat8_us=... bw64k_gbs=... bw1m_gbs=... errors=N
 * (the keys of the modes run). Exit status 1 on any data error.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 16
#define WARM_WINDOWS 4
#define WARM_PINGS 1000

static int rank;
static long errors;

static uint8_t pattern(unsigned seed, int msg, size_t off)
{
	return (uint8_t)(seed * 131u + (unsigned)msg * 29u + (unsigned)(off * 7u + (off >> 8)));
}

static void fill(uint8_t *b, size_t size, unsigned seed, int msg)
{
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(seed, msg, i);
}

static void check(const uint8_t *b, size_t size, unsigned seed, int msg)
{
	for (size_t i = 0; i < size; i++) {
		if (b[i] != pattern(seed, msg, i)) {
			if (errors < 5)
				fprintf(stderr, "mpi_pingbw: window seed %u msg %d byte %zu: %u != %u\n",
					seed, msg, i, b[i], pattern(seed, msg, i));
			errors++;
			return;
		}
	}
}

static double lat8(long iters)
{
	uint64_t v = 0;
	double t0 = 0;

	MPI_Barrier(MPI_COMM_WORLD);
	for (long i = 0; i < WARM_PINGS + iters; i++) {
		if (i == WARM_PINGS)
			t0 = MPI_Wtime();
		if (rank == 0) {
			v = (uint64_t)i;
			MPI_Send(&v, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(&v, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (v != (uint64_t)i + 1 && errors++ < 5)
				fprintf(stderr, "mpi_pingbw: ping %ld came back as %llu\n", i,
					(unsigned long long)v);
		} else {
			MPI_Recv(&v, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			v++;
			MPI_Send(&v, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	return (MPI_Wtime() - t0) / (double)iters / 2 * 1e6;
}

/* One window: 16 messages of size bytes, then the ack. */
static void window(uint8_t **buf, size_t size)
{
	MPI_Request req[WINDOW];
	int ack = 0;

	for (int m = 0; m < WINDOW; m++) {
		if (rank == 0)
			MPI_Isend(buf[m], (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[m]);
		else
			MPI_Irecv(buf[m], (int)size, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[m]);
	}
	MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
	if (rank == 0)
		MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	else
		MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
}

/* A window whose data are checked: seed picks the pattern. */
static void checked_window(uint8_t **buf, size_t size, unsigned seed)
{
	for (int m = 0; m < WINDOW; m++) {
		if (rank == 0)
			fill(buf[m], size, seed, m);
		else
			memset(buf[m], 0, size);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	window(buf, size);
	if (rank == 1)
		for (int m = 0; m < WINDOW; m++)
			check(buf[m], size, seed, m);
}

static double bw(size_t size, long windows)
{
	uint8_t *buf[WINDOW];
	double t0, t;

	for (int m = 0; m < WINDOW; m++) {
		buf[m] = malloc(size);
		if (!buf[m]) {
			fprintf(stderr, "mpi_pingbw: malloc %zu\n", size);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	checked_window(buf, size, 1); /* the first window, warm-up too */
	for (int w = 1; w < WARM_WINDOWS; w++)
		window(buf, size);
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	for (long w = 0; w < windows; w++)
		window(buf, size);
	t = MPI_Wtime();
	checked_window(buf, size, 2); /* the last window */
	for (int m = 0; m < WINDOW; m++)
		free(buf[m]);
	return (double)size * WINDOW * (double)windows / (t - t0) / 1e9;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "all";
	char line[256] = "";
	int n = 0, np;
	long total;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	if (np != 2) {
		if (!rank)
			fprintf(stderr, "mpi_pingbw: needs exactly 2 ranks (%d)\n", np);
		MPI_Finalize();
		return 2;
	}
	if (!strcmp(mode, "lat") || !strcmp(mode, "all")) {
		long iters = !strcmp(mode, "lat") && argc > 2 ? atol(argv[2]) : 20000;
		double us = lat8(iters > 0 ? iters : 20000);
		n += snprintf(line + n, sizeof(line) - (size_t)n, " lat8_us=%.3f", us);
	}
	if (!strcmp(mode, "bw") && argc > 2) {
		size_t size = strtoul(argv[2], NULL, 0);
		long windows = argc > 3 ? atol(argv[3]) : (size >= (1 << 20) ? 200 : 2000);
		double g;

		if (size < 1 || size > (1u << 30) || windows < 1) {
			if (!rank)
				fprintf(stderr, "mpi_pingbw: bad size or windows\n");
			MPI_Finalize();
			return 2;
		}
		g = bw(size, windows);
		n += snprintf(line + n, sizeof(line) - (size_t)n, " bw_gbs=%.3f size=%zu", g, size);
	} else if (!strcmp(mode, "all")) {
		double g64 = bw(65536, 2000), g1m = bw(1 << 20, 200);
		n += snprintf(line + n, sizeof(line) - (size_t)n, " bw64k_gbs=%.3f bw1m_gbs=%.3f",
			      g64, g1m);
	} else if (strcmp(mode, "lat")) {
		if (!rank)
			fprintf(stderr, "usage: mpi_pingbw lat [ITERS] | bw SIZE [WINDOWS] | all\n");
		MPI_Finalize();
		return 2;
	}
	/* rank 1 found the bandwidth errors, rank 0 the ping-pong's */
	MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (!rank)
		printf("RESULT mpi_pingbw%s errors=%ld\n", line, total);
	MPI_Finalize();
	return rank == 0 && total ? 1 : 0;
}
