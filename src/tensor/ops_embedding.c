/* Embedding lookup: weight (V, C), ids (n) in [0, V) -> y (n, C), y[i] = weight[ids[i]]. */
#include <omp.h>
#include <stdio.h>

#include "tensor.h"

static void embedding_forward(mt_node *n) {
    const float *w = n->in[0]->data;
    float *y = n->out->data;
    long N = n->i[0];
    int C = n->i[1];
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (long i = 0; i < N; i++) {
        const float *wr = w + (size_t)n->ids[i] * C;
        _Pragma("omp simd")
        for (int j = 0; j < C; j++) y[i * C + j] = wr[j];
    });
}

/* dw[v] += sum_{i: ids[i] = v} dy[i], summed in order of i. Part t of P owns the rows
   [V t / P, V (t + 1) / P) and scans all ids: no two threads write a row, and the sum order (hence
   the bits) does not depend on the thread count. One part inline (small, or inside a replica). */
static void embedding_backward(mt_node *n) {
    const float *dy = n->out->grad;
    float *dw = n->in[0]->grad;
    long N = n->i[0];
    int C = n->i[1], V = n->in[0]->shape[0];
    if (!dw) return;
    int P = n->out->n >= MT_PAR_MIN && !omp_in_parallel() ? mt_threads() : 1;
    MT_PARALLEL_FOR(P > 1, for (int t = 0; t < P; t++) {
        int lo = (int)((long)V * t / P), hi = (int)((long)V * (t + 1) / P);
        for (long i = 0; i < N; i++) {
            int v = n->ids[i];
            if (v < lo || v >= hi) continue;
            _Pragma("omp simd")
            for (int j = 0; j < C; j++) dw[(size_t)v * C + j] += dy[i * C + j];
        }
    });
}

static const mt_op OP_EMBEDDING = {.name = "embedding",
                                   .forward = embedding_forward,
                                   .backward = embedding_backward};

mt_tensor *mt_embedding(mt_ctx *c, mt_tensor *weight, const int *ids, int n) {
    char sw[64];
    MT_ASSERT(weight->ndim == 2 && n >= 1, "embedding: weight %s must be (V, C) and n = %d >= 1",
              mt_shape_str(weight, sw, 64), n);
    int V = weight->shape[0], C = weight->shape[1];
    int *id = mt_arena_alloc(c, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        MT_ASSERT(ids[i] >= 0 && ids[i] < V, "embedding: id %d at position %d is outside [0, %d)",
                  ids[i], i, V);
        id[i] = ids[i];
    }
    mt_tensor *out = mt_tensor_new(c, 2, (int[]){n, C});
    mt_node *node = mt_node_new(c, &OP_EMBEDDING, out, 1, (mt_tensor *[]){weight});
    node->ids = id;
    node->i[0] = n;
    node->i[1] = C;
    mt_node_run(c, node);
    return out;
}
