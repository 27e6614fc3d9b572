/* mt_attention's forward and backward alone on the attention shapes of the bench configs (issue 8),
 * causal, on one thread unless told:
 *   build/bench/attention [REPEATS [THREADS [CONFIG]]]
 * prints per config (or the one named) the best and median ms of the forward (the builder) and of
 * the backward (the node's backward on a fixed dy) on the thread's CPU clock (on a loaded machine
 * it estimates the time the work would take alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/mt.h"
#include "bench.h"

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    mt_set_threads(argc > 2 ? atoi(argv[2]) : 1);
    struct {
        const char *name;
        int B, T, C, NH;
    } cfg[] = {{"deep100", 8, 64, 64, 2}, {"tiny", 16, 128, 128, 4}, {"small", 8, 256, 384, 6}};
    if (reps < 1) {
        fprintf(stderr, "usage: attention [REPEATS >= 1 [THREADS [CONFIG]]]\n");
        return 2;
    }
    mt_ctx c;
    mt_err err;
    if (mt_ctx_init(&c, (size_t)256 << 20, 1, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    mt_rng r;
    mt_rng_seed(&r, 1);
    double *tf = malloc(reps * sizeof(double)), *tb = malloc(reps * sizeof(double));
    printf("config fwd_best fwd_median bwd_best bwd_median (ms, %d threads)\n", mt_threads());
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        if (argc > 3 && strcmp(argv[3], cfg[k].name) != 0) continue;
        int shape[] = {cfg[k].B, cfg[k].T, cfg[k].C};
        size_t n = mt_shape_numel(3, shape);
        float *buf = malloc(8 * n * sizeof(float)); /* q, k, v, their grads, dy */
        for (size_t i = 0; i < 8 * n; i++) buf[i] = mt_rng_uniform(&r) - 0.5f;
        mt_tensor x[3];
        for (int i = 0; i < 3; i++) x[i] = mt_tensor_view(buf + i * n, buf + (3 + i) * n, 3, shape);
        for (int i = 0; i < 3; i++) x[i].requires_grad = true;
        for (int rep = -2; rep < reps; rep++) { /* two warm-up calls */
            mt_ctx_reset(&c);
            double t0 = bench_now(CLOCK_THREAD_CPUTIME_ID);
            mt_tensor *y = mt_attention(&c, &x[0], &x[1], &x[2], cfg[k].NH, true);
            double t1 = bench_now(CLOCK_THREAD_CPUTIME_ID);
            y->grad = buf + 6 * n;
            c.tape->op->backward(c.tape);
            double t2 = bench_now(CLOCK_THREAD_CPUTIME_ID);
            if (rep >= 0) tf[rep] = 1e3 * (t1 - t0), tb[rep] = 1e3 * (t2 - t1);
        }
        double fb = tf[0], bb = tb[0];
        for (int i = 1; i < reps; i++) fb = tf[i] < fb ? tf[i] : fb, bb = tb[i] < bb ? tb[i] : bb;
        printf("%s %.3f %.3f %.3f %.3f\n", cfg[k].name, fb, bench_median(tf, reps), bb,
               bench_median(tb, reps));
        free(buf);
    }
    mt_ctx_free(&c);
    free(tf);
    free(tb);
    return 0;
}
