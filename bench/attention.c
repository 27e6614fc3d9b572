/* mt_attention's forward and backward alone on the attention shapes of the bench configs,
 * causal, on one thread unless told:
 *   build/bench/attention [REPEATS [THREADS [CONFIG [SETS]]]]
 * prints per config (or the one named) the best and median ms of one forward (the builder) and of
 * one backward (the node's backward on a fixed dy) on the thread's CPU clock (on a loaded machine
 * it estimates the time the work would take alone). SETS (default 1) distinct q, k, v, dy run as
 * in a training step: the forwards of all the sets on q, k, v just read (as if just written by
 * their projections), then the backwards in reverse order, each on a dy just copied, y just read
 * and input grads just zeroed; with enough sets (deep100: 100, its layers; tiny: 8) the forward
 * writes its output to memory out of cache and the backward finds q, k, v out of cache, as in
 * the step, where 1 set keeps everything in L2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/mt.h"
#include "bench.h"

volatile float bench_sink;

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50, sets = argc > 4 ? atoi(argv[4]) : 1;
    mt_set_threads(argc > 2 ? atoi(argv[2]) : 1);
    struct {
        const char *name;
        int B, T, C, NH;
    } cfg[] = {{"deep100", 8, 64, 64, 2}, {"tiny", 16, 128, 128, 4}, {"small", 8, 256, 384, 6}};
    if (reps < 1 || sets < 1) {
        fprintf(stderr, "usage: attention [REPEATS >= 1 [THREADS [CONFIG [SETS >= 1]]]]\n");
        return 2;
    }
    mt_ctx c;
    mt_err err;
    if (mt_ctx_init(&c, (size_t)1 << 30, 1, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    mt_rng r;
    mt_rng_seed(&r, 1);
    size_t nt = (size_t)reps * sets;
    double *tf = malloc(nt * sizeof(double)), *tb = malloc(nt * sizeof(double));
    mt_tensor *x = malloc(3 * (size_t)sets * sizeof *x), **y = malloc(sets * sizeof *y);
    printf("config fwd_best fwd_median bwd_best bwd_median (ms, %d threads, %d sets)\n",
           mt_threads(), sets);
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        if (argc > 3 && strcmp(argv[3], cfg[k].name) != 0) continue;
        int shape[] = {cfg[k].B, cfg[k].T, cfg[k].C};
        size_t n = mt_shape_numel(3, shape);
        float *buf = mt_alloc_big(4 * n * sets * sizeof(float)); /* per set q, k, v, dy */
        if (!buf) {
            fprintf(stderr, "attention: out of memory for %d sets of %s\n", sets, cfg[k].name);
            return 1;
        }
        for (size_t i = 0; i < 4 * n * sets; i++) buf[i] = mt_rng_uniform(&r) - 0.5f;
        for (int s = 0; s < sets; s++)
            for (int i = 0; i < 3; i++) {
                x[3 * s + i] = mt_tensor_view(buf + 4 * n * s + i * n, NULL, 3, shape);
                x[3 * s + i].requires_grad = true;
            }
        for (int rep = -2; rep < reps; rep++) { /* two warm-up rounds */
            mt_ctx_reset(&c);
            for (int s = 0; s < sets; s++) {
                float sink = 0.0f; /* q, k, v read, as if their projections had just written them */
                for (int i = 0; i < 3; i++)
                    for (size_t j = 0; j < n; j += 16) sink += x[3 * s + i].data[j];
                bench_sink = sink;
                double t0 = bench_now(CLOCK_THREAD_CPUTIME_ID);
                y[s] = mt_attention(&c, &x[3 * s], &x[3 * s + 1], &x[3 * s + 2], cfg[k].NH, true);
                double t1 = bench_now(CLOCK_THREAD_CPUTIME_ID);
                if (rep >= 0) tf[(size_t)rep * sets + s] = 1e3 * (t1 - t0);
            }
            mt_node *node = c.tape; /* the last set's */
            for (int s = sets - 1; s >= 0; s--, node = node->prev) {
                float sink = 0.0f; /* y read, as the output projection's backward does */
                for (size_t i = 0; i < n; i += 16) sink += y[s]->data[i];
                bench_sink = sink;
                for (int i = 0; i < 3; i++) x[3 * s + i].grad = NULL, mt_grad(&c, &x[3 * s + i]);
                y[s]->grad = mt_arena_floats(&c, n);
                memcpy(y[s]->grad, buf + 4 * n * s + 3 * n, n * sizeof(float));
                double t0 = bench_now(CLOCK_THREAD_CPUTIME_ID);
                node->op->backward(node);
                double t1 = bench_now(CLOCK_THREAD_CPUTIME_ID);
                if (rep >= 0) tb[(size_t)rep * sets + s] = 1e3 * (t1 - t0);
            }
        }
        double fb = tf[0], bb = tb[0];
        for (size_t i = 1; i < nt; i++) fb = tf[i] < fb ? tf[i] : fb, bb = tb[i] < bb ? tb[i] : bb;
        printf("%s %.3f %.3f %.3f %.3f\n", cfg[k].name, fb, bench_median(tf, (int)nt), bb,
               bench_median(tb, (int)nt));
        free(buf);
    }
    mt_ctx_free(&c);
    free(tf);
    free(tb);
    free(x);
    free(y);
    return 0;
}
