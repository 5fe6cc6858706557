/*
 * shmem_check: an OpenSHMEM program whose every result is checked. Every PE
 * puts a pattern into its right neighbour's symmetric buffer (4 KiB, then
 * 1 MiB ten times: the RDMA WRITEs that make PE 0's and 1's counters
 * exceed 10 MB), gets it back from there, and all PEs hit PE 0's counter
 * with fetch-and-add and compare-and-swap; barriers between the phases.
 * PE 0 prints where every PE ran ("shmem_check: rank R netns INODE", the
 * network namespace, as mpi_check does) and "shmem_check: N PEs, E errors";
 * exits 1 if E > 0. Built with oshcc, run by tests/mpi/mpi.sh and
 * tests/mpi/mpi_netns.sh (MPI_FLAVOR=oshmem).
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BIG (1 << 20)
#define BIG_ROUNDS 10

static unsigned char pattern(int pe, int round, size_t i)
{
	return (unsigned char)(pe * 29 + round * 11 + i * 7 + (i >> 9));
}

/* Errors in a buffer of N bytes that PE FROM wrote in ROUND. */
static int check_from(const unsigned char *buf, size_t n, int from, int round)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pattern(from, round, i))
			return 1;
	return 0;
}

int main(void)
{
	shmem_init();
	int me = shmem_my_pe(), npes = shmem_n_pes();
	int right = (me + 1) % npes, left = (me + npes - 1) % npes;
	unsigned char *sym = shmem_malloc(BIG);
	long *counter = shmem_malloc(sizeof(long));
	long *swapped = shmem_malloc(sizeof(long));
	static long errors_at_0;
	static long netns_at_0[1024];
	unsigned char *local = malloc(BIG);
	long bad = 0;
	struct stat ns;

	if (!sym || !counter || !swapped || !local || npes > 1024) {
		fprintf(stderr, "shmem_check: out of memory\n");
		shmem_global_exit(2);
	}
	*counter = 0;
	*swapped = -1;
	shmem_barrier_all();

	/* small and large puts to the right neighbour; gets back from it */
	for (int round = 0; round <= BIG_ROUNDS; round++) {
		size_t n = round == 0 ? 4096 : BIG;

		for (size_t i = 0; i < n; i++)
			local[i] = pattern(me, round, i);
		shmem_putmem(sym, local, n, right);
		shmem_barrier_all();
		bad += check_from(sym, n, left, round);
		memset(local, 0, n);
		shmem_getmem(local, sym, n, right);
		bad += check_from(local, n, me, round);
		shmem_barrier_all();
	}

	/* atomics on PE 0: every PE adds me + 1, then one compare-and-swap wins */
	long before = shmem_long_atomic_fetch_add(counter, me + 1, 0);
	if (before < 0 || before > (long)npes * (npes + 1) / 2)
		bad++;
	shmem_barrier_all();
	if (shmem_long_atomic_fetch(counter, 0) != (long)npes * (npes + 1) / 2)
		bad++;
	long old = shmem_long_atomic_compare_swap(swapped, -1, me, 0);
	shmem_barrier_all();
	long winner = shmem_long_atomic_fetch(swapped, 0);
	if (winner < 0 || winner >= npes || (old == -1) != (winner == me))
		bad++;

	/* report to PE 0: errors summed there, network namespaces gathered */
	shmem_long_atomic_add(&errors_at_0, bad, 0);
	if (stat("/proc/self/ns/net", &ns) == 0)
		shmem_long_p(&netns_at_0[me], (long)ns.st_ino, 0);
	shmem_barrier_all();
	if (me == 0) {
		for (int pe = 0; pe < npes; pe++)
			printf("shmem_check: rank %d netns %ld\n", pe, netns_at_0[pe]);
		printf("shmem_check: %d PEs, %ld errors\n", npes, errors_at_0);
		fflush(stdout);
	}
	long total = shmem_long_atomic_fetch(&errors_at_0, 0);
	shmem_barrier_all();
	free(local);
	shmem_free(swapped);
	shmem_free(counter);
	shmem_free(sym);
	shmem_finalize();
	return total ? 1 : 0;
}
