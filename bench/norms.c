/* Benchmark (not a test): forward + backward of every mt norm on a (8192, 768) float32 input, and
 * the machine's triad bandwidth (a[i] = b[i] + s c[i]) as the ceiling.
 *   build/bench/norms [reps] [threads] [cpu|wall] [N C [K]]   one JSON line per measurement
 * cpu: time with the process's CPU clock instead of the wall clock, which on a loaded machine
 * with 1 thread estimates the time the work would take alone.
 * Time: the op's builder (forward) plus its backward node on a given dy, the median of reps.
 * Effective GB/s counts the minimum traffic: forward reads x and writes y, backward reads x and
 * dy and writes dx: 5 N C 4 bytes (mt's backward accumulates into dx, one read more, not counted).
 * InstanceNorm runs on tokens (8, N / 8, C) channels-last, the same bytes.
 * A smaller (N, C), e.g. 256 64 (the rows of a deep100 replica, whose ops run on 1 thread), runs
 * as the norms of a training step do: K calls, each on the output of the one before (in cache),
 * into fresh arena outputs that span 96 MB (a deep100 replica's arena, beyond the caches), then
 * their backwards in reverse order (reading cold inputs, hot gradients); times are per call.
 * A given K (e.g. 4) keeps all of it in cache: the kernels' own speed. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/mt.h"
#include "bench.h"

enum { SPAN = 8192 * 768 }; /* the default input's floats */
static int N = 8192, C = 768;

static clockid_t clock_id = CLOCK_MONOTONIC;

/* Best of 5 runs of a[i] = b[i] + s c[i] on 3 arrays of 32M floats (3 x 128 MB, beyond the
   caches); bytes counted as STREAM does: 3 x 4 per element. */
static double triad_gbs(void) {
    size_t n = (size_t)32 << 20;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t = bench_now(clock_id);
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        t = bench_now(clock_id) - t;
        if (12.0 * n / t / 1e9 > best) best = 12.0 * n / t / 1e9;
    }
    if (a[n / 2] != 7.0f) fprintf(stderr, "triad: wrong result\n");
    free(a), free(b), free(c);
    return best;
}

typedef struct {
    const char *name;
    mt_norm_kind kind;
    mt_rms_form form;
} bench_case;
enum { MAX_CASES = 32 };

/* x is (N, C), or (8, N / 8, C) for InstanceNorm */
/* the parameters every norm takes its own from: weight, bias, ScaleNorm's g, BatchNorm's running
   statistics, DyT's and Derf's alpha and shift */
typedef struct {
    mt_tensor *w, *b, *g, *rm, *rv, *alpha, *shift;
} bench_params;

static mt_tensor *run(mt_ctx *c, const bench_case *k, mt_tensor *x, const bench_params *p) {
    mt_tensor *w = p->w, *b = p->b, *g = p->g, *rm = p->rm, *rv = p->rv;
    switch (k->kind) {
    case MT_NORM_LN: return mt_layernorm(c, x, w, b, 1e-5f);
    case MT_NORM_RMS: return mt_rmsnorm(c, x, w, NULL, 1e-5f, k->form);
    case MT_NORM_PRMS: return mt_prmsnorm(c, x, w, NULL, 0.0625f, 1e-5f, k->form);
    case MT_NORM_SCALE: return mt_scalenorm(c, x, g, 1e-5f);
    case MT_NORM_BN: return mt_batchnorm(c, x, w, b, rm, rv, 0.1f, 1e-5f, false);
    case MT_NORM_IN: return mt_instancenorm(c, x, w, b, 1e-5f, true);
    case MT_NORM_GN: return mt_groupnorm(c, x, 32, w, b, 1e-5f, false);
    case MT_NORM_DYT: return mt_dyt(c, x, p->alpha, w, b);
    case MT_NORM_DERF: return mt_derf(c, x, p->alpha, p->shift, w, b);
    case MT_NORM_NONE: break;
    }
    return x;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15, threads = argc > 2 ? atoi(argv[2]) : 0;
    if (argc > 3 && strcmp(argv[3], "cpu") == 0) clock_id = CLOCK_PROCESS_CPUTIME_ID;
    if (argc > 5) N = atoi(argv[4]), C = atoi(argv[5]);
    if (N < 8 || N % 8 || C < 32 || C % 32 || N * C > SPAN || SPAN % (N * C) ||
        (argc > 6 && (atoi(argv[6]) < 1 || (size_t)atoi(argv[6]) * N * C > 4u * SPAN))) {
        fprintf(stderr,
                "norms: N %d, C %d: need N a multiple of 8, C of 32, N C dividing %d, "
                "and K from 1 to 4 %d / (N C)\n",
                N, C, SPAN, SPAN);
        return 1;
    }
    int K = argc > 6 ? atoi(argv[6]) : N * C == SPAN ? 1 : 4 * SPAN / (N * C);
    mt_set_threads(threads);
    printf("{\"what\": \"triad\", \"impl\": \"machine\", \"threads\": %d, \"clock\": \"%s\", "
           "\"gbs\": %.2f}\n",
           mt_threads(), clock_id == CLOCK_MONOTONIC ? "wall" : "cpu", triad_gbs());
    fflush(stdout);

    mt_rng r;
    mt_rng_seed(&r, 1);
    size_t n = (size_t)N * C;
    /* the gradients of the outputs alternate between dy[0] and dy[1] (a call's backward reads
       one and accumulates into the other) */
    float *xd = malloc(n * 4), *dxd = calloc(n, 4), *dy[2] = {malloc(n * 4), malloc(n * 4)};
    for (size_t i = 0; i < n; i++)
        xd[i] = mt_rng_normal(&r), dy[0][i] = mt_rng_normal(&r), dy[1][i] = mt_rng_normal(&r);
    mt_params P;
    mt_params_init_table(&P);
    int iw = mt_params_add(&P, "w", 1, (int[]){C}, MT_ROLE_NORM, MT_INIT_ONES, 0);
    int ib = mt_params_add(&P, "b", 1, (int[]){C}, MT_ROLE_NORM, MT_INIT_ZEROS, 0);
    int ig = mt_params_add(&P, "g", 1, (int[]){1}, MT_ROLE_NORM, MT_INIT_CONST, sqrtf(C));
    int im = mt_params_add(&P, "rm", 1, (int[]){C}, MT_ROLE_BUFFER, MT_INIT_ZEROS, 0);
    int iv = mt_params_add(&P, "rv", 1, (int[]){C}, MT_ROLE_BUFFER, MT_INIT_ONES, 0);
    int ia = mt_params_add(&P, "alpha", 1, (int[]){1}, MT_ROLE_NORM, MT_INIT_CONST, 0.5f);
    int is = mt_params_add(&P, "shift", 1, (int[]){1}, MT_ROLE_NORM, MT_INIT_ZEROS, 0);
    mt_params_alloc(&P, NULL);
    mt_params_initialize(&P, &r);
    const bench_params bp = {.w = &P.t[iw],
                             .b = &P.t[ib],
                             .g = &P.t[ig],
                             .rm = &P.t[im],
                             .rv = &P.t[iv],
                             .alpha = &P.t[ia],
                             .shift = &P.t[is]};
    mt_tensor x = mt_tensor_view(xd, dxd, 2, (int[]){N, C});
    mt_tensor x3 = mt_tensor_view(xd, dxd, 3, (int[]){8, N / 8, C});
    mt_ctx c;
    mt_ctx_init(&c, (size_t)640 << 20, 1, NULL); /* K calls: ~100 MB of outputs, BatchNorm more */

    /* every norm of mt's table (MT_NORMS) but none, by its name, and RMSNorm in the paper's form */
    bench_case cases[MAX_CASES];
    int n_cases = 0;
    MT_ASSERT(MT_NORMS.n < MAX_CASES, "norms: more norms than MAX_CASES");
    for (int v = 0; v < MT_NORMS.n; v++)
        if (v != MT_NORM_NONE)
            cases[n_cases++] = (bench_case){MT_NORMS.items[v].name, v, MT_RMS_LLAMA};
    cases[n_cases++] = (bench_case){"rms/paper", MT_NORM_RMS, MT_RMS_PAPER};
    double *tf = malloc(reps * sizeof(double)), *tb = malloc(reps * sizeof(double)),
           *tt = malloc(reps * sizeof(double));
    for (int k = 0; k < n_cases; k++) {
        for (int i = -2; i < reps; i++) { /* two warm-up runs */
            mt_ctx_reset(&c);
            mt_tensor *y = cases[k].kind == MT_NORM_IN ? &x3 : &x;
            double t0 = bench_now(clock_id);
            for (int j = 0; j < K; j++) {
                y = run(&c, &cases[k], y, &bp);
                y->grad = dy[j % 2];
            }
            double t1 = bench_now(clock_id);
            for (mt_node *nd = c.tape; nd; nd = nd->prev) nd->op->backward(nd);
            double t2 = bench_now(clock_id);
            if (i >= 0) tf[i] = (t1 - t0) / K, tb[i] = (t2 - t1) / K, tt[i] = (t2 - t0) / K;
        }
        double f = bench_median(tf, reps), b = bench_median(tb, reps), tot = bench_median(tt, reps);
        printf("{\"what\": \"%s\", \"impl\": \"mt\", \"threads\": %d, \"clock\": \"%s\", "
               "\"N\": %d, \"C\": %d, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"ms\": %.4f, "
               "\"gbs\": %.2f}\n",
               cases[k].name, mt_threads(), clock_id == CLOCK_MONOTONIC ? "wall" : "cpu", N, C,
               1e3 * f, 1e3 * b, 1e3 * tot, 5.0 * n * 4 / tot / 1e9);
        fflush(stdout);
    }
    mt_ctx_free(&c);
    mt_params_free(&P);
    free(xd), free(dxd), free(dy[0]), free(dy[1]), free(tf), free(tb), free(tt);
    return 0;
}
