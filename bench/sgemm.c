/* This machine's fp32 GEMM peak: C (n, n) = A (n, n) B (n, n) through OpenBLAS (cblas_sgemm) and,
   in a build with oneDNN, through oneDNN's fp32 matmul (mt_gemm forced to it), on the pool's
   threads: the faster is the ceiling mt's MFU is measured against. Prints one JSON line with the
   median and best GFLOP/s (2 n^3 flops a product) of the fastest backend and of each.
   usage: sgemm [n] [reps] [threads] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "mt.h"

/* median and best GFLOP/s of reps products (after two warm-ups) on backend b */
static void measure(int b, int n, int reps, const float *A, const float *B, float *C, double *gf,
                    double out[2]) {
    size_t nn = (size_t)n * n;
    if (b) mt_gemm_set_backend(MT_GEMM_ONEDNN, NULL);
    for (int i = -2; i < reps; i++) {
        double t0 = mt_clock();
        if (b) mt_gemm(false, false, n, n, n, A, B, 0.0f, C, NULL);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f,
                        C, n);
        double dt = mt_clock() - t0;
        if (i >= 0) gf[i] = 2.0 * n * nn / dt / 1e9;
    }
    qsort(gf, (size_t)reps, sizeof *gf, bench_cmp);
    out[0] = gf[reps / 2], out[1] = gf[reps - 1];
}

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
    for (size_t i = 0; i < nn; i++)
        A[i] = mt_rng_uniform(&r) - 0.5f, B[i] = mt_rng_uniform(&r) - 0.5f;
    double g[2][2] = {{0}};
    int ways = mt_gemm_has_onednn() ? 2 : 1, best = 0;
    for (int b = 0; b < ways; b++) {
        measure(b, n, reps, A, B, C, gf, g[b]);
        if (g[b][0] > g[best][0]) best = b;
    }
    const char *name[2] = {"openblas", "onednn"};
    char onednn[32] = "null";
    if (ways > 1) snprintf(onednn, sizeof onednn, "%.1f", g[1][0]);
    printf("{\"prog\": \"sgemm\", \"n\": %d, \"threads\": %d, \"reps\": %d, \"backend\": \"%s\", "
           "\"gflops_median\": %.1f, \"gflops_best\": %.1f, \"openblas_median\": %.1f, "
           "\"onednn_median\": %s}\n",
           n, mt_threads(), reps, name[best], g[best][0], g[best][1], g[0][0], onednn);
    free(A), free(B), free(C), free(gf);
    return 0;
}
