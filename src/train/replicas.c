/* Data parallelism across the threads of one process (train.h). */
#include <stdlib.h>
#include <string.h>

#include "train.h"

mt_status mt_replicas_init(mt_replicas *R, int n, const mt_params *P, size_t arena_bytes,
                           uint64_t seed, mt_err *err) {
    memset(R, 0, sizeof *R);
    R->n = R->ran = 1;
    if (n < 1) n = 1;
    R->grad = calloc((size_t)n, sizeof *R->grad);
    R->loss = calloc((size_t)n, sizeof *R->loss);
    if (!R->grad || !R->loss) {
        mt_replicas_free(R);
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %d replicas", n);
    }
    R->grad[0] = P->grad;
    if (n == 1) return MT_OK;
    R->ctx = calloc((size_t)n - 1, sizeof *R->ctx);
    R->P = calloc((size_t)n - 1, sizeof *R->P);
    if (!R->ctx || !R->P) {
        mt_replicas_free(R);
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %d replicas", n);
    }
    for (int r = 1; r < n; r++) {
        mt_status s = mt_ctx_init(&R->ctx[r - 1], arena_bytes, seed ^ (uint64_t)r, err);
        R->ctx[r - 1].free_activations = true; /* a replica's caller reads its loss only */
        if (s == MT_OK) s = mt_params_view(P, &R->P[r - 1], err);
        R->n = r + 1; /* what to free */
        R->grad[r] = R->P[r - 1].grad;
        if (s != MT_OK) {
            mt_replicas_free(R);
            return s;
        }
    }
    return MT_OK;
}

/* Replica r of n: its slice of rows [lo, lo + rows), forward and backward; its weighted loss. */
static double replica_backward(mt_replicas *R, mt_ctx *c, mt_params *P, int r, int n, int lo,
                               int rows, int B, mt_rows_loss loss, void *arg) {
    int r0 = (int)((long)r * rows / n), r1 = (int)((long)(r + 1) * rows / n);
    mt_ctx *cr = r ? &R->ctx[r - 1] : c;
    mt_ctx_reset(cr);
    mt_tensor *l = loss(cr, r ? &R->P[r - 1] : P, lo + r0, r1 - r0, arg);
    float w = (float)(r1 - r0) / (float)B;
    mt_backward_from(cr, l, &w);
    return (double)l->data[0] * w;
}

double mt_replicas_backward(mt_replicas *R, mt_ctx *c, mt_params *P, int lo, int rows, int B,
                            mt_rows_loss loss, void *arg) {
    int n = R->n < rows ? R->n : rows;
    MT_ASSERT(P->grad == R->grad[0], "replicas: P is not the parameters they were made for");
    if (n > R->ran) R->ran = n;
    /* one replica: no parallel region, whose (inactive) team would make every op's own
       parallel region a nested one, with threads created afresh each time */
    if (n <= 1) return replica_backward(R, c, P, 0, 1, lo, rows, B, loss, arg);
    for (int r = 1; r < n; r++) {
        mt_ctx *cr = &R->ctx[r - 1];
        cr->training = c->training;
        cr->grad_enabled = c->grad_enabled;
        mt_rng_seed(&cr->rng, mt_rng_u64(&c->rng) ^ (uint64_t)r);
    }
    /* a replica a thread; with fewer threads than replicas a thread runs several in turn (they
       share nothing). The losses are summed in replica order: the same bits on every run. */
#pragma omp parallel for num_threads(n) schedule(static, 1)
    for (int r = 0; r < n; r++)
        R->loss[r] = replica_backward(R, c, P, r, n, lo, rows, B, loss, arg);
    double sum = 0;
    for (int r = 0; r < n; r++) sum += R->loss[r];
    return sum;
}

void mt_replicas_run(mt_replicas *R, mt_ctx *c, int k, void (*fn)(mt_ctx *c, int s, void *arg),
                     void *arg) {
    MT_ASSERT(k >= 1 && k <= R->n, "replicas: %d parts for %d replicas", k, R->n);
    if (k == 1) { /* no region: the ops split across the threads as outside replicas */
        fn(c, 0, arg);
        return;
    }
    for (int s = 1; s < k; s++) {
        R->ctx[s - 1].training = c->training;
        R->ctx[s - 1].grad_enabled = c->grad_enabled;
    }
#pragma omp parallel for num_threads(k) schedule(static, 1)
    for (int s = 0; s < k; s++) fn(s ? &R->ctx[s - 1] : c, s, arg);
}

mt_grads mt_replicas_grads(const mt_replicas *R) { return (mt_grads){.g = R->grad, .n = R->ran}; }

void mt_replicas_free(mt_replicas *R) {
    for (int r = 1; r < R->n; r++) {
        if (R->ctx) mt_ctx_free(&R->ctx[r - 1]);
        if (R->P) mt_params_view_free(&R->P[r - 1]);
    }
    free(R->ctx);
    free(R->P);
    free(R->grad);
    free(R->loss);
    memset(R, 0, sizeof *R);
}
