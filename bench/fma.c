/* This machine's FMA limit at the build's vector width (MT_VW floats, src/tensor/simd.h): CHAINS
   independent chains of fused multiply-adds in registers on each of the threads, 2 MT_VW flops
   an FMA. No fp32 kernel of this build can beat it: bench/run.sh gives the training step's
   GFLOP/s as a fraction of it beside the GEMM peak (bench/sgemm.c). Prints one JSON line with the
   median and best GFLOP/s of reps runs.
   usage: fma [reps] [threads] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "tensor/simd.h"

/* chains in flight: more than the FMA pipes (2) times their latency (4-5 cycles) */
enum { CHAINS = 12, ITERS = 4000000 / (MT_VW / 4) };

/* CHAINS x ITERS FMAs on the calling thread; the sum of the chains' first lanes (kept live) */
static float fma_run(void) {
    mt_vf a[CHAINS], b = (mt_vf){0} + 0.999999f, c = (mt_vf){0} + 1e-6f;
    for (int i = 0; i < CHAINS; i++) a[i] = (mt_vf){0} + (float)i;
    for (int n = 0; n < ITERS; n++)
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = mt_vf_madd(a[i], b, c);
    float s = 0;
    for (int i = 0; i < CHAINS; i++) s += a[i][0];
    return s;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50, threads = argc > 2 ? atoi(argv[2]) : 2;
    if (reps < 1 || reps > 10000 || threads < 1) {
        fprintf(stderr, "usage: fma [reps 1..10000] [threads >= 1]\n");
        return 2;
    }
    double *gf = malloc((size_t)reps * sizeof *gf);
    if (!gf) return 1;
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now(CLOCK_MONOTONIC);
        float s = 0;
#pragma omp parallel num_threads(threads) reduction(+ : s)
        s += fma_run();
        sink = s;
        gf[r] = 2.0 * MT_VW * CHAINS * ITERS * threads / (bench_now(CLOCK_MONOTONIC) - t0) / 1e9;
    }
    (void)sink;
    double med = bench_median(gf, reps); /* sorts gf */
    printf("{\"prog\": \"fma\", \"vector_floats\": %d, \"threads\": %d, \"reps\": %d, "
           "\"gflops_median\": %.1f, \"gflops_best\": %.1f}\n",
           MT_VW, threads, reps, med, gf[reps - 1]);
    free(gf);
    return 0;
}
