/*
 * mpi_alltoall_mem [ITERS [BYTES [LIMIT_KIB]]]: MPI_Alltoall of BYTES
 * (64 KiB) per peer, ITERS (8) times, every byte checked; then each rank
 * measures urvt's shared memory while its device is still open: the Rss
 * and Pss of its urvt mappings in /proc/self/smaps (the shm link's memfds
 * "urvt-shm", the context's "urvt-context", the /dev/shm files: counters
 * and host registry). Rank 0 prints each rank's and the largest, then
 * "alltoall_mem: N ranks, E errors, R over"; exits 1 if E > 0 or a rank's
 * Rss exceeds LIMIT_KIB (0: no limit) or a rank has fewer shm link
 * regions than peers (errors count them too). docs/performance.md, "Same-host
 * memory per process"; run by tests/mpi/mpi_mem.sh.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int from, int to, size_t i, int it)
{
	return (unsigned char)(from * 31 + to * 7 + (int)(i % 251) + it * 13);
}

/* The mapping a smaps header line names is urvt's shared memory. */
static int is_urvt_map(const char *line)
{
	return strstr(line, "/memfd:urvt-") || strstr(line, "/dev/shm/urvt");
}

/* Rss and Pss (KiB) of this process's urvt mappings, and how many of
 * them are shm link regions (one per connected peer). */
static void urvt_mem(long *rss, long *pss, long *regions)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0;
	long v;

	*rss = *pss = *regions = 0;
	if (!f) {
		*rss = *pss = -1;
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		/* a mapping's header: "start-end perms offset dev inode [path]" */
		if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
			in = is_urvt_map(line);
			*regions += !!strstr(line, "/memfd:urvt-shm");
			continue;
		}
		if (in && sscanf(line, "Rss: %ld kB", &v) == 1)
			*rss += v;
		else if (in && sscanf(line, "Pss: %ld kB", &v) == 1)
			*pss += v;
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 8;
	size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 64 << 10;
	long limit = argc > 3 ? atol(argv[3]) : 0;
	int rank, np, bad = 0, allbad = 0, over = 0;
	long mem[3], *all = NULL;
	unsigned char *sb, *rb;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	sb = malloc(bytes * (size_t)np);
	rb = malloc(bytes * (size_t)np);
	if (!sb || !rb)
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (int it = 0; it < iters; it++) {
		for (int p = 0; p < np; p++)
			for (size_t i = 0; i < bytes; i++)
				sb[(size_t)p * bytes + i] = pattern(rank, p, i, it);
		memset(rb, 0, bytes * (size_t)np);
		MPI_Alltoall(sb, (int)bytes, MPI_BYTE, rb, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
		for (int p = 0; p < np; p++)
			for (size_t i = 0; i < bytes; i++)
				if (rb[(size_t)p * bytes + i] != pattern(p, rank, i, it)) {
					bad++;
					break;
				}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	urvt_mem(&mem[0], &mem[1], &mem[2]);
	if (!rank)
		all = malloc(sizeof(long) * 3 * (size_t)np);
	MPI_Gather(mem, 3, MPI_LONG, all, 3, MPI_LONG, 0, MPI_COMM_WORLD);
	MPI_Reduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
	if (!rank) {
		long max_rss = 0, max_pss = 0, sum_pss = 0, few = 0;
		for (int r = 0; r < np; r++) {
			long rss = all[3 * r], pss = all[3 * r + 1];
			printf("alltoall_mem: rank %d urvt rss %ld KiB pss %ld KiB shm regions %ld\n", r,
			       rss, pss, all[3 * r + 2]);
			/* every other rank reached over the shm link */
			few += all[3 * r + 2] < np - 1;
			max_rss = rss > max_rss ? rss : max_rss;
			max_pss = pss > max_pss ? pss : max_pss;
			sum_pss += pss;
			over += rss < 0 || (limit && rss > limit);
		}
		printf("alltoall_mem: %d iterations of %zu B per peer; largest urvt rss %ld KiB, "
		       "pss %ld KiB; pss of all ranks %ld KiB\n",
		       iters, bytes, max_rss, max_pss, sum_pss);
		printf("alltoall_mem: %ld ranks with shm regions to fewer than %d peers\n", few,
		       np - 1);
		printf("alltoall_mem: %d ranks, %d errors, %d over %ld KiB\n", np, allbad + (int)few,
		       over, limit);
		fflush(stdout);
	}
	MPI_Finalize();
	return !rank && (allbad || over) ? 1 : 0;
}
