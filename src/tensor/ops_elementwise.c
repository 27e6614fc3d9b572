/* Elementwise ops. Loops are OpenMP-parallel above MT_PAR_MIN elements and vectorise. */
#include <stdio.h>
#include <string.h>

#include "tensor.h"

/* ---- add: y = a + b, b the same shape as a or one row (C,) broadcast over a's rows ---------- */

static void add_forward(mt_node *n) {
    const float *a = n->in[0]->data, *b = n->in[1]->data;
    float *y = n->out->data;
    size_t N = n->out->n, C = (size_t)n->i[0]; /* C = 0: same shape */
    if (!C) {
#pragma omp parallel for simd if (N >= MT_PAR_MIN)
        for (size_t i = 0; i < N; i++) y[i] = a[i] + b[i];
    } else {
        long R = (long)(N / C);
#pragma omp parallel for if (N >= MT_PAR_MIN)
        for (long r = 0; r < R; r++)
#pragma omp simd
            for (size_t j = 0; j < C; j++) y[r * C + j] = a[r * C + j] + b[j];
    }
}

/* da += dy;  db += dy, or for a broadcast row db_j += sum_r dy_rj (rows summed in order). */
static void add_backward(mt_node *n) {
    const float *dy = n->out->grad;
    float *da = n->in[0]->grad, *db = n->in[1]->grad;
    size_t N = n->out->n, C = (size_t)n->i[0];
    if (da) {
#pragma omp parallel for simd if (N >= MT_PAR_MIN)
        for (size_t i = 0; i < N; i++) da[i] += dy[i];
    }
    if (db && !C) {
#pragma omp parallel for simd if (N >= MT_PAR_MIN)
        for (size_t i = 0; i < N; i++) db[i] += dy[i];
    } else if (db) {
        for (size_t r = 0; r < N / C; r++)
#pragma omp simd
            for (size_t j = 0; j < C; j++) db[j] += dy[r * C + j];
    }
}

static const mt_op OP_ADD = {"add", add_forward, add_backward};

mt_tensor *mt_add(mt_ctx *c, mt_tensor *a, mt_tensor *b) {
    char sa[64], sb[64];
    bool row = !mt_same_shape(a, b);
    MT_ASSERT(!row || (b->ndim == 1 && b->shape[0] == mt_cols(a)),
              "add: %s and %s: b must have a's shape or be one row of %d", mt_shape_str(a, sa, 64),
              mt_shape_str(b, sb, 64), mt_cols(a));
    mt_tensor *out = mt_tensor_like(c, a);
    mt_node *n = mt_node_new(c, &OP_ADD, out, 2, (mt_tensor *[]){a, b});
    n->i[0] = row ? mt_cols(a) : 0;
    mt_node_run(c, n);
    return out;
}
