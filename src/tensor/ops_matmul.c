/* Matrix multiply through the GEMM layer (mt_gemm); transposes are flags, never copies. */
#include <stdio.h>

#include "gemm.h"
#include "tensor.h"

/* Z (r x s) = op(X) op(Y) + beta * Z: mt_gemm without a bias. */
static void gemm(bool tx, bool ty, int r, int s, int k, const float *X, const float *Y, float *Z,
                 float beta) {
    mt_gemm(tx, ty, r, s, k, X, Y, beta, Z, NULL);
}

/* i[0] batches, i[1] M, i[2] N, i[3] K, i[4] ta, i[5] tb, i[6] b is shared by all batches. */
static void matmul_forward(mt_node *n) {
    int nb = n->i[0], M = n->i[1], N = n->i[2], K = n->i[3];
    bool ta = n->i[4], tb = n->i[5], shared = n->i[6];
    const float *A = n->in[0]->data, *B = n->in[1]->data;
    for (int b = 0; b < nb; b++)
        gemm(ta, tb, M, N, K, A + (size_t)b * M * K, B + (shared ? 0 : (size_t)b * K * N),
             n->out->data + (size_t)b * M * N, 0.0f);
}

/* C = op(A) op(B), per batch.  dop(A) = dC op(B)^T,  dop(B) = op(A)^T dC.
   Stored: dA (M,K) = dC op(B)^T            or, when ta, dA (K,M) = op(B) dC^T;
           dB (K,N) = op(A)^T dC            or, when tb, dB (N,K) = dC^T op(A).
   A shared B accumulates the sum over batches (beta = 1 in batch order: deterministic). */
static void matmul_backward(mt_node *n) {
    int nb = n->i[0], M = n->i[1], N = n->i[2], K = n->i[3];
    bool ta = n->i[4], tb = n->i[5], shared = n->i[6];
    const float *A = n->in[0]->data, *B = n->in[1]->data, *dC = n->out->grad;
    float *dA = n->in[0]->grad, *dB = n->in[1]->grad;
    for (int b = 0; b < nb; b++) {
        size_t oa = (size_t)b * M * K, ob = shared ? 0 : (size_t)b * K * N, oc = (size_t)b * M * N;
        if (dA && !ta) gemm(false, !tb, M, K, N, dC + oc, B + ob, dA + oa, 1.0f);
        if (dA && ta) gemm(tb, true, K, M, N, B + ob, dC + oc, dA + oa, 1.0f);
        if (dB && !tb) gemm(!ta, false, K, N, M, A + oa, dC + oc, dB + ob, 1.0f);
        if (dB && tb) gemm(true, ta, N, K, M, dC + oc, A + oa, dB + ob, 1.0f);
    }
}

static const mt_op OP_MATMUL = {.name = "matmul",
                                .forward = matmul_forward,
                                .backward = matmul_backward,
                                .backward_skips_out = true};

mt_tensor *mt_matmul(mt_ctx *c, mt_tensor *a, mt_tensor *b, bool ta, bool tb) {
    char sa[64], sb[64];
    MT_ASSERT(a->ndim >= 2 && b->ndim >= 2, "matmul: operands %s and %s need 2 or more dims",
              mt_shape_str(a, sa, 64), mt_shape_str(b, sb, 64));
    bool shared = b->ndim == 2;
    MT_ASSERT(shared || b->ndim == a->ndim, "matmul: %s and %s: b must be 2-D or match a's dims",
              mt_shape_str(a, sa, 64), mt_shape_str(b, sb, 64));
    for (int i = 0; !shared && i < a->ndim - 2; i++)
        MT_ASSERT(a->shape[i] == b->shape[i], "matmul: batch dims differ in %s and %s",
                  mt_shape_str(a, sa, 64), mt_shape_str(b, sb, 64));
    int ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    int M = ta ? ac : ar, K = ta ? ar : ac, Kb = tb ? bc : br, N = tb ? br : bc;
    MT_ASSERT(K == Kb, "matmul: inner dims differ: %s%s x %s%s", mt_shape_str(a, sa, 64),
              ta ? "^T" : "", mt_shape_str(b, sb, 64), tb ? "^T" : "");
    int nb = (int)(a->n / ((size_t)ar * ac));
    int shape[MT_MAX_DIMS];
    for (int i = 0; i < a->ndim - 2; i++) shape[i] = a->shape[i];
    shape[a->ndim - 2] = M;
    shape[a->ndim - 1] = N;
    mt_tensor *out = mt_tensor_new(c, a->ndim, shape);
    mt_node *n = mt_node_new(c, &OP_MATMUL, out, 2, (mt_tensor *[]){a, b});
    if (shared && !ta) { /* (nb, M, K) x (K, N): one sgemm over nb * M rows */
        M *= nb;
        nb = 1;
    }
    int args[] = {nb, M, N, K, ta, tb, shared};
    for (int i = 0; i < 7; i++) n->i[i] = args[i];
    mt_node_run(c, n);
    return out;
}
