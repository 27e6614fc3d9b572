/* MPI_Allreduce bandwidth: sums of N floats (in place, MPI_SUM) between the job's ranks, the
   median of 30 after 5 warm-ups. Prints "N floats (X MiB): T ms, algbw Y GB/s" from rank 0, with
   algbw = N * 4 bytes / T (what a gradient sum of N floats costs per step).
   Usage: mpirun -np 2 build-mpi/bench/allreduce N... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int a = 1; a < argc; a++) {
        long n = atol(argv[a]);
        float *x = malloc((size_t)n * sizeof *x);
        for (long i = 0; i < n; i++) x[i] = 1e-3f * (float)(i % 1000);
        double t[35];
        for (int k = 0; k < 35; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[k] = MPI_Wtime() - t0;
        }
        qsort(t + 5, 30, sizeof *t, cmp);
        double med = 0.5 * (t[5 + 14] + t[5 + 15]);
        if (rank == 0)
            printf("%ld floats (%.2f MiB): %.3f ms, algbw %.2f GB/s\n", n, n * 4 / 1048576.0,
                   1e3 * med, n * 4 / med / 1e9);
        free(x);
    }
    MPI_Finalize();
    return 0;
}
