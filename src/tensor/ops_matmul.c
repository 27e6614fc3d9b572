/* Matrix multiply through OpenBLAS cblas_sgemm; transposes are sgemm flags, never copies. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "tensor.h"

/* Rows [r0, r1) of C: one single-threaded sgemm (OpenBLAS's OpenMP build runs one thread inside
   a parallel region), C's rows first set to bias when given. */
static void gemm_rows(bool ta, bool tb, int M, int N, int K, const float *A, const float *B,
                      float beta, float *C, const float *bias, int r0, int r1) {
    if (r1 <= r0) return;
    if (bias) { /* on the pool when called outside a parallel region (the unsplit product) */
        MT_PARALLEL_FOR((size_t)(r1 - r0) * N >= MT_PAR_MIN, for (int r = r0; r < r1; r++)
                            memcpy(C + (size_t)r * N, bias, (size_t)N * sizeof(float)););
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                r1 - r0, N, K, 1.0f, ta ? A + r0 : A + (size_t)r0 * K, ta ? M : K, B, tb ? K : N,
                beta, C + (size_t)r0 * N, N);
}

/* C's rows are split across the pool's threads in blocks of whole 16-row tiles, each block one
   single-threaded sgemm. For the narrow matrices of deep models this beats OpenBLAS's own split
   (bench/gemm.c, 2 threads: x (512, 64) W^T (64, 64) at 165 against 91 GFLOP/s), and it is one
   fork/join with the bias copy inside. Each thread packs all of B, so a B above 64K floats
   (256 KiB) is left to OpenBLAS, which shares its packed B (splitting small's 384 x 1536 products
   made its step ~3% slower); so are products below OpenBLAS's own threading threshold
   (M N K <= 4 * 65536) and C of fewer than two 16-row tiles. */
void mt_gemm(bool ta, bool tb, int M, int N, int K, const float *A, const float *B, float beta,
             float *C, const float *bias) {
    int nt = omp_in_parallel() ? 1 : mt_threads();
    bool split = nt >= 2 && M >= 32 && (double)N * K <= 65536 && (double)M * N * K > 4.0 * 65536;
    int per = split ? ((M + 15) / 16 + nt - 1) / nt * 16 : M; /* rows a block, one block a thread */
    MT_PARALLEL_FOR(split, for (int r0 = 0; r0 < M; r0 += per)
                        gemm_rows(ta, tb, M, N, K, A, B, beta, C, bias, r0,
                                  r0 + per < M ? r0 + per : M););
}

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

static const mt_op OP_MATMUL = {"matmul", matmul_forward, matmul_backward};

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
