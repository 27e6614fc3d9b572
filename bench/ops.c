/* mt side of bench/ops.py: forward and backward time of the primitive ops on Transformer-sized
 * activations, (8192, 768) float32 unless the table says otherwise.
 *   build/bench/ops REPEATS THREADS [cpu]      prints "name fwd_best fwd_median bwd_best
 *   bwd_median" lines in ms; cpu: the thread's CPU clock instead of the wall clock (with 1 thread
 *   on a loaded machine it estimates the time the work would take alone).
 * Forward: the op's builder. Backward: its node's backward on a fixed dy (input grads accumulate).
 * */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/mt.h"
#include "bench.h"

enum { N = 8192, C = 768 };

static clockid_t clock_id = CLOCK_MONOTONIC;
static int ids[N];

typedef mt_tensor *(*build_fn)(mt_ctx *c, mt_tensor **x);
static mt_tensor *b_mul(mt_ctx *c, mt_tensor **x) { return mt_mul(c, x[0], x[1]); }
static mt_tensor *b_scale(mt_ctx *c, mt_tensor **x) { return mt_scale(c, x[0], 0.5f); }
static mt_tensor *b_sum(mt_ctx *c, mt_tensor **x) { return mt_sum(c, x[0]); }
static mt_tensor *b_gelu(mt_ctx *c, mt_tensor **x) { return mt_gelu(c, x[0]); }
static mt_tensor *b_gelu_erf(mt_ctx *c, mt_tensor **x) { return mt_gelu_erf(c, x[0]); }
static mt_tensor *b_relu(mt_ctx *c, mt_tensor **x) { return mt_relu(c, x[0]); }
static mt_tensor *b_silu(mt_ctx *c, mt_tensor **x) { return mt_silu(c, x[0]); }
static mt_tensor *b_softmax(mt_ctx *c, mt_tensor **x) { return mt_softmax(c, x[0]); }
static mt_tensor *b_ce(mt_ctx *c, mt_tensor **x) {
    return mt_cross_entropy(c, x[0], ids, -100, MT_CE_PLAIN);
}
static mt_tensor *b_ce_ls(mt_ctx *c, mt_tensor **x) {
    return mt_cross_entropy(c, x[0], ids, -100, (mt_ce_opts){.label_smoothing = 0.1f});
}
static mt_tensor *b_embedding(mt_ctx *c, mt_tensor **x) { return mt_embedding(c, x[0], ids, N); }
static mt_tensor *b_dropout(mt_ctx *c, mt_tensor **x) { return mt_dropout(c, x[0], 0.1f); }
static mt_tensor *b_transpose(mt_ctx *c, mt_tensor **x) { return mt_transpose(c, x[0], 1, 2); }
static mt_tensor *b_concat(mt_ctx *c, mt_tensor **x) { return mt_concat(c, 2, x); }
static mt_tensor *b_slice(mt_ctx *c, mt_tensor **x) { return mt_slice(c, x[0], 256, 256); }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s REPEATS THREADS [cpu]\n", argv[0]);
        return 2;
    }
    int reps = atoi(argv[1]);
    mt_set_threads(atoi(argv[2]));
    if (argc > 3 && strcmp(argv[3], "cpu") == 0) clock_id = CLOCK_THREAD_CPUTIME_ID;
    mt_rng r;
    mt_rng_seed(&r, 1);
    for (int i = 0; i < N; i++) ids[i] = (int)mt_rng_below(&r, C);
    /* name, build, inputs and their shapes (3-D as (8, 1024, 768) for the transpose) */
    struct {
        const char *name;
        build_fn build;
        int n_in, ndim, shape[2][3];
    } ops[] = {
        {"mul", b_mul, 2, 2, {{N, C}, {N, C}}},
        {"scale", b_scale, 1, 2, {{N, C}}},
        {"sum", b_sum, 1, 2, {{N, C}}},
        {"gelu", b_gelu, 1, 2, {{N, C}}},
        {"gelu_erf", b_gelu_erf, 1, 2, {{N, C}}},
        {"relu", b_relu, 1, 2, {{N, C}}},
        {"silu", b_silu, 1, 2, {{N, C}}},
        {"softmax", b_softmax, 1, 2, {{N, C}}},
        {"cross_entropy", b_ce, 1, 2, {{N, C}}},
        {"cross_entropy_ls", b_ce_ls, 1, 2, {{N, C}}},
        {"embedding", b_embedding, 1, 2, {{C, C}}},
        {"dropout", b_dropout, 1, 2, {{N, C}}},
        {"transpose", b_transpose, 1, 3, {{8, N / 8, C}}},
        {"concat", b_concat, 2, 2, {{N, C / 2}, {N, C / 2}}},
        {"slice", b_slice, 1, 2, {{N, C}}},
    };
    mt_ctx c;
    mt_err err;
    if (mt_ctx_init(&c, (size_t)1 << 30, 1, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    float *data[2], *grad[2], *dy = malloc((size_t)N * C * sizeof(float));
    for (int k = 0; k < 2; k++) {
        data[k] = malloc((size_t)N * C * sizeof(float));
        grad[k] = calloc((size_t)N * C, sizeof(float));
        for (size_t i = 0; i < (size_t)N * C; i++) data[k][i] = 4 * mt_rng_uniform(&r) - 2;
    }
    for (size_t i = 0; i < (size_t)N * C; i++) dy[i] = mt_rng_uniform(&r) - 0.5f;
    double *tf = malloc(reps * sizeof(double)), *tb = malloc(reps * sizeof(double));
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        mt_tensor x[2], *xp[2];
        for (int k = 0; k < ops[o].n_in; k++) {
            x[k] = mt_tensor_view(data[k], grad[k], ops[o].ndim, ops[o].shape[k]);
            xp[k] = &x[k];
        }
        for (int rep = -2; rep < reps; rep++) { /* two warm-up calls */
            mt_ctx_reset(&c);
            double t0 = bench_now(clock_id);
            mt_tensor *y = ops[o].build(&c, xp);
            double t1 = bench_now(clock_id);
            y->grad = dy; /* the op's backward alone: no zeroing of y's grad */
            c.tape->op->backward(c.tape);
            double t2 = bench_now(clock_id);
            if (rep >= 0) tf[rep] = 1e3 * (t1 - t0), tb[rep] = 1e3 * (t2 - t1);
        }
        qsort(tf, reps, sizeof *tf, bench_cmp);
        qsort(tb, reps, sizeof *tb, bench_cmp);
        printf("%s %.3f %.3f %.3f %.3f\n", ops[o].name, tf[0], tf[reps / 2], tb[0], tb[reps / 2]);
    }
    mt_ctx_free(&c);
    return 0;
}
