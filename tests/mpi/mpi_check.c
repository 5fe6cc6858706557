/*
 * mpi_check: an MPI program whose every message is checked: ping-pong
 * between ranks 0 and 1 (8 B to 1 MiB, each answer the request plus one),
 * an allreduce and an alltoall. Prints "mpi_check: N ranks, E errors";
 * exits 1 if E > 0. Built with the system MPI, run by tests/mpi/mpi.sh.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv)
{
	static const int sizes[] = { 8, 4096, 65536, 1 << 20 };
	int rank, size, bad = 0, allbad = 0, cnt = 4096;
	long v, sum = 0;
	int *sb, *rb;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int s = 0; s < 4; s++)
		bad += pingpong(rank, sizes[s], s);

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
