/* This machine's sgemm peak: C (n, n) = A (n, n) B (n, n) through OpenBLAS on the pool's threads,
   the ceiling mt's MFU is measured against. Prints one JSON line with the median and the best
   GFLOP/s over the repetitions (2 n^3 flops each).
   usage: sgemm [n] [reps] [threads] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "mt.h"

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 15;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (n < 16 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: sgemm [n >= 16] [reps 1..1000] [threads]\n");
        return 2;
    }
    mt_set_threads(threads);
    size_t nn = (size_t)n * n;
    float *A = malloc(nn * sizeof *A), *B = malloc(nn * sizeof *B), *C = malloc(nn * sizeof *C);
    double *gf = malloc((size_t)reps * sizeof *gf);
    if (!A || !B || !C || !gf) {
        fprintf(stderr, "sgemm: out of memory for n = %d\n", n);
        return 1;
    }
    mt_rng r;
    mt_rng_seed(&r, 1);
    for (size_t i = 0; i < nn; i++) A[i] = mt_rng_uniform(&r) - 0.5f, B[i] = mt_rng_uniform(&r) - 0.5f;
    for (int i = -2; i < reps; i++) { /* two warm-ups */
        double t0 = mt_clock();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C,
                    n);
        double dt = mt_clock() - t0;
        if (i >= 0) gf[i] = 2.0 * n * nn / dt / 1e9;
    }
    qsort(gf, (size_t)reps, sizeof *gf, bench_cmp);
    printf("{\"prog\": \"sgemm\", \"n\": %d, \"threads\": %d, \"reps\": %d, \"gflops_median\": %.1f, "
           "\"gflops_best\": %.1f}\n",
           n, mt_threads(), reps, gf[reps / 2], gf[reps - 1]);
    free(A), free(B), free(C), free(gf);
    return 0;
}
