/*
 * mpi_check: an MPI program whose every message is checked: ping-pong
 * between ranks 0 and 1 (8 B to 1 MiB, each answer the request plus one),
 * every pair of ranks exchanging 4 KiB and 256 KiB both ways (a pattern of
 * sender, receiver and offset), an allreduce and an alltoall. Rank 0 prints
 * where every rank ran ("mpi_check: rank R netns INODE": the network
 * namespace, for the tests that spread ranks over namespaces), then
 * "mpi_check: N ranks, E errors"; exits 1 if E > 0. Built with the system
 * MPI, run by tests/mpi/mpi.sh and tests/mpi/mpi_netns.sh.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define ITERS 10

static unsigned char pattern(int i, int it, int s)
{
	return (unsigned char)(i * 7 + it * 13 + s);
}

/* Errors seen by this rank in the ping-pong of N bytes. */
static int pingpong(int rank, int n, int s)
{
	unsigned char *buf = malloc((size_t)n);
	int bad = 0;

	if (!buf)
		return 1;
	for (int it = 0; it < ITERS; it++) {
		if (rank == 0) {
			for (int i = 0; i < n; i++)
				buf[i] = pattern(i, it, s);
			MPI_Send(buf, n, MPI_BYTE, 1, it, MPI_COMM_WORLD);
			MPI_Recv(buf, n, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int i = 0; i < n; i++)
				if (buf[i] != (unsigned char)(pattern(i, it, s) + 1)) {
					bad++;
					break;
				}
		} else if (rank == 1) {
			MPI_Recv(buf, n, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int i = 0; i < n; i++) {
				if (buf[i] != pattern(i, it, s))
					bad++;
				buf[i]++;
			}
			bad = bad ? 1 : 0;
			MPI_Send(buf, n, MPI_BYTE, 0, it, MPI_COMM_WORLD);
		}
	}
	free(buf);
	return bad;
}

static unsigned char pair_pattern(int from, int to, int i)
{
	return (unsigned char)(from * 31 + to * 17 + i * 7 + (i >> 8));
}

/* Errors seen by this rank when every pair exchanges N bytes both ways:
 * in round r (1..size-1) rank p sends to p + r and receives from p - r. */
static int allpairs(int rank, int size, int n)
{
	unsigned char *sb = malloc((size_t)n), *rb = malloc((size_t)n);
	int bad = 0;

	if (!sb || !rb) {
		free(sb);
		free(rb);
		return 1;
	}
	for (int r = 1; r < size; r++) {
		int to = (rank + r) % size, from = (rank - r + size) % size;

		for (int i = 0; i < n; i++)
			sb[i] = pair_pattern(rank, to, i);
		MPI_Sendrecv(sb, n, MPI_BYTE, to, 100 + r, rb, n, MPI_BYTE, from, 100 + r,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (int i = 0; i < n; i++)
			if (rb[i] != pair_pattern(from, rank, i)) {
				bad++;
				break;
			}
	}
	free(sb);
	free(rb);
	return bad;
}

int main(int argc, char **argv)
{
	static const int sizes[] = { 8, 4096, 65536, 1 << 20 };
	int rank, size, bad = 0, allbad = 0, cnt = 4096;
	long v, sum = 0;
	int *sb, *rb;
	struct stat ns;
	unsigned long ino, *inos = NULL;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	ino = stat("/proc/self/ns/net", &ns) == 0 ? (unsigned long)ns.st_ino : 0;
	if (rank == 0 && !(inos = malloc(sizeof(*inos) * (size_t)size)))
		MPI_Abort(MPI_COMM_WORLD, 2);
	MPI_Gather(&ino, 1, MPI_UNSIGNED_LONG, inos, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		for (int p = 0; p < size; p++)
			printf("mpi_check: rank %d netns %lu\n", p, inos[p]);
		fflush(stdout);
		free(inos);
	}
	for (int s = 0; s < 4; s++)
		bad += pingpong(rank, sizes[s], s);
	bad += allpairs(rank, size, 4096);
	bad += allpairs(rank, size, 256 << 10);

	v = rank + 1;
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != (long)size * (size + 1) / 2)
		bad++;

	sb = malloc(sizeof(int) * (size_t)cnt * (size_t)size);
	rb = malloc(sizeof(int) * (size_t)cnt * (size_t)size);
	if (!sb || !rb)
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (int p = 0; p < size; p++)
		for (int i = 0; i < cnt; i++)
			sb[p * cnt + i] = rank * 1000000 + p * 10000 + i;
	MPI_Alltoall(sb, cnt, MPI_INT, rb, cnt, MPI_INT, MPI_COMM_WORLD);
	for (int p = 0; p < size; p++)
		for (int i = 0; i < cnt; i++)
			if (rb[p * cnt + i] != p * 1000000 + rank * 10000 + i) {
				bad++;
				p = size;
				break;
			}
	free(sb);
	free(rb);

	MPI_Reduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: %d ranks, %d errors\n", size, allbad);
	MPI_Bcast(&allbad, 1, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Finalize();
	return allbad ? 1 : 0;
}
