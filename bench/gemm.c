/* mt_gemm against a plain cblas_sgemm (OpenBLAS's own threading) on the linear layers' products of
   the bench configs, on the pool's threads: forward y = x W^T, backward dx = dy W and dW = dy^T x,
   for x (N, K), W (O, K). Prints a Markdown table of GFLOP/s, median of the repetitions, the two
   alternating call by call. mt_gemm splits C's rows across the threads when B is at most 64K
   floats and otherwise is the plain call, so the large rows show the two equal.
   usage: gemm [reps] [threads] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "mt.h"

/* One product both ways; C (M, N) = op(A) op(B), median GFLOP/s of each into gf[0] (mt_gemm) and
   gf[1] (cblas_sgemm). */
static void measure(bool ta, bool tb, int M, int N, int K, const float *A, const float *B,
                    float *C, int reps, double *t, double gf[2]) {
    for (int way = 0; way < 2; way++) {
        for (int i = -3; i < reps; i++) {
            double t0 = mt_clock();
            if (way == 0)
                mt_gemm(ta, tb, M, N, K, A, B, 0.0f, C, NULL);
            else
                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                            tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, ta ? M : K, B,
                            tb ? K : N, 0.0f, C, N);
            if (i >= 0) t[i] = mt_clock() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, bench_cmp);
        gf[way] = 2.0 * M * N * K / t[reps / 2] / 1e9;
    }
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 200, threads = argc > 2 ? atoi(argv[2]) : 2;
    if (reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: gemm [reps 1..100000] [threads]\n");
        return 2;
    }
    mt_set_threads(threads);
    static const struct {
        const char *what;
        int N, K, O;
    } shapes[] = {
        {"deep100 attention projection", 512, 64, 64}, {"deep100 fc1", 512, 64, 256},
        {"deep100 fc2", 512, 256, 64},                 {"tiny attention projection", 2048, 128, 128},
        {"tiny fc1", 2048, 128, 512},                  {"small attention projection", 2048, 384, 384},
    };
    size_t most = (size_t)2048 * 512;
    float *x = malloc(most * sizeof *x), *w = malloc(most * sizeof *w);
    float *y = malloc(most * sizeof *y), *dw = malloc(most * sizeof *dw);
    float *dx = malloc(most * sizeof *dx);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!x || !w || !y || !dw || !dx || !t) {
        fprintf(stderr, "gemm: out of memory\n");
        return 1;
    }
    mt_rng r;
    mt_rng_seed(&r, 1);
    for (size_t i = 0; i < most; i++) x[i] = mt_rng_uniform(&r) - 0.5f, w[i] = mt_rng_uniform(&r) - 0.5f;
    printf("GFLOP/s, median of %d calls, %d threads: mt_gemm / cblas_sgemm (OpenBLAS's own "
           "threading)\n\n",
           reps, mt_threads());
    printf("| product | x (N, K), W (O, K) | forward x W^T | backward dy W | backward dy^T x |\n");
    printf("|---|---|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s].N, K = shapes[s].K, O = shapes[s].O;
        double fwd[2], bdx[2], bdw[2]; /* y stands in for dy */
        measure(false, true, N, O, K, x, w, y, reps, t, fwd);  /* y (N, O) = x W^T */
        measure(false, false, N, K, O, y, w, dx, reps, t, bdx); /* dx (N, K) = dy (N, O) W */
        measure(true, false, O, K, N, y, x, dw, reps, t, bdw);  /* dW (O, K) = dy^T x */
        printf("| %s | (%d, %d), (%d, %d) | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f |\n",
               shapes[s].what, N, K, O, K, fwd[0], fwd[1], bdx[0], bdx[1], bdw[0], bdw[1]);
    }
    free(x), free(w), free(y), free(dw), free(dx), free(t);
    return 0;
}
