/* This machine's GEMM peaks: C (n, n) = A (n, n) B (n, n) through OpenBLAS (cblas_sgemm) and,
   in a build with oneDNN, through oneDNN's fp32 matmul (mt_gemm forced to it), on the pool's
   threads: the faster is the fp32 ceiling mt's MFU is measured against. Where bf16 runs
   (mt_bf16_check), the same product on bf16 copies of A and B (mt_gemm_bf16) is the ceiling of
   --precision bf16. Prints one JSON line with the median and best GFLOP/s (2 n^3 flops a
   product) of the fastest fp32 backend and the median of each backend.
   usage: sgemm [n] [reps] [threads] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "mt.h"

enum { OPENBLAS, ONEDNN, BF16, BACKENDS };

/* C = A B on backend b; Ab, Bb: A and B in bf16 (BF16 only) */
static void product(int b, int n, const float *A, const float *B, const mt_bf16 *Ab,
                    const mt_bf16 *Bb, float *C) {
    switch (b) {
    case OPENBLAS:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C,
                    n);
        break;
    case ONEDNN: mt_gemm(false, false, n, n, n, A, B, 0.0f, C, NULL); break;
    default: mt_gemm_bf16(false, false, n, n, n, Ab, Bb, 0.0f, C, NULL);
    }
}

/* median and best GFLOP/s of reps products (after two warm-ups) on backend b */
static void measure(int b, int n, int reps, const float *A, const float *B, const mt_bf16 *Ab,
                    const mt_bf16 *Bb, float *C, double *gf, double out[2]) {
    size_t nn = (size_t)n * n;
    if (b == ONEDNN) mt_gemm_set_backend(MT_GEMM_ONEDNN, NULL);
    for (int i = -2; i < reps; i++) {
        double t0 = mt_clock();
        product(b, n, A, B, Ab, Bb, C);
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
    mt_bf16 *Ab = malloc(nn * sizeof *Ab), *Bb = malloc(nn * sizeof *Bb);
    double *gf = malloc((size_t)reps * sizeof *gf);
    if (!A || !B || !C || !Ab || !Bb || !gf) {
        fprintf(stderr, "sgemm: out of memory for n = %d\n", n);
        return 1;
    }
    mt_rng r;
    mt_rng_seed(&r, 1);
    for (size_t i = 0; i < nn; i++)
        A[i] = mt_rng_uniform(&r) - 0.5f, B[i] = mt_rng_uniform(&r) - 0.5f;
    mt_bf16_from_floats(Ab, A, nn);
    mt_bf16_from_floats(Bb, B, nn);
    mt_err err;
    bool on[BACKENDS] = {true, mt_gemm_has_onednn(), mt_bf16_check(&err) == MT_OK};
    double g[BACKENDS][2] = {{0}};
    int best = OPENBLAS; // the fastest fp32 backend
    char median[BACKENDS][32];
    for (int b = 0; b < BACKENDS; b++) {
        snprintf(median[b], sizeof median[b], "null");
        if (!on[b]) continue;
        measure(b, n, reps, A, B, Ab, Bb, C, gf, g[b]);
        snprintf(median[b], sizeof median[b], "%.1f", g[b][0]);
        if (b != BF16 && g[b][0] > g[best][0]) best = b;
    }
    const char *name[BACKENDS] = {"openblas", "onednn"};
    printf("{\"prog\": \"sgemm\", \"n\": %d, \"threads\": %d, \"reps\": %d, \"backend\": \"%s\", "
           "\"gflops_median\": %.1f, \"gflops_best\": %.1f, \"openblas_median\": %s, "
           "\"onednn_median\": %s, \"bf16_median\": %s, \"cpu\": \"%s\", \"blas_core\": \"%s\"}\n",
           n, mt_threads(), reps, name[best], g[best][0], g[best][1], median[OPENBLAS],
           median[ONEDNN], median[BF16], bench_cpu(), openblas_get_corename());
    free(Ab), free(Bb);
    free(A), free(B), free(C), free(gf);
    return 0;
}
