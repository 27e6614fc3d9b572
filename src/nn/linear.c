/* Linear layer y = x W^T + b (torch.nn.Linear): one sgemm, W read through the transpose flag.
   N rows of x, K inputs, O outputs. And the FFN fc2(act(fc1(x))) as one op on the same two
   kernels, C channels, F FFN width. */
#include <string.h>

#include "../tensor/activation.h"
#include "nn.h"

/* y (N, O) = b (each row; 0 when NULL) + x (N, K) W^T, W (O, K). */
static void linear_kernel(float *y, const float *x, const float *w, const float *b, int N, int K,
                          int O) {
    mt_gemm(false, true, N, O, K, x, w, 0.0f, y, b);
}

/* dW (O, K) += dy^T x;  db_o += sum_r dy_ro, rows summed in order within each column block,
   whatever the thread count (deterministic);  then dx (N, K) = dy W, added to dx when acc.
   dx comes last, so it may be x's own buffer (x is dead once dW has it). NULL grads are skipped. */
static void linear_backward_kernel(float *dx, float *dw, float *db, const float *dy,
                                   const float *x, const float *w, int N, int K, int O, bool acc) {
    if (dw) mt_gemm(true, false, O, K, N, dy, x, 1.0f, dw, NULL);
    if (db) {
        enum { BLK = 64 };
        MT_PARALLEL_FOR((size_t)N * O >= MT_PAR_MIN, for (int j0 = 0; j0 < O; j0 += BLK) {
            int j1 = j0 + BLK < O ? j0 + BLK : O;
            for (int r = 0; r < N; r++)
                _Pragma("omp simd") for (int j = j0; j < j1; j++) db[j] += dy[(size_t)r * O + j];
        });
    }
    if (dx) mt_gemm(false, false, N, K, O, dy, w, acc ? 1.0f : 0.0f, dx, NULL);
}

/* ---- linear: in x, W, b (or NULL); i[0] N, i[1] K, i[2] O ----------------------------------- */

static void linear_forward(mt_node *n) {
    linear_kernel(n->out->data, n->in[0]->data, n->in[1]->data,
                  n->in[2] ? n->in[2]->data : NULL, n->i[0], n->i[1], n->i[2]);
}

static void linear_backward(mt_node *n) {
    linear_backward_kernel(n->in[0]->grad, n->in[1]->grad, n->in[2] ? n->in[2]->grad : NULL,
                           n->out->grad, n->in[0]->data, n->in[1]->data, n->i[0], n->i[1],
                           n->i[2], true);
}

static const mt_op OP_LINEAR = {"linear", linear_forward, linear_backward};

mt_tensor *mt_linear(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b) {
    char sx[64], sw[64];
    int K = mt_cols(x);
    MT_ASSERT(w->ndim == 2 && w->shape[1] == K, "linear: input %s, weight %s: weight must be (O, %d)",
              mt_shape_str(x, sx, 64), mt_shape_str(w, sw, 64), K);
    int O = w->shape[0];
    MT_ASSERT(!b || (b->ndim == 1 && b->shape[0] == O), "linear: bias %s for %d outputs",
              mt_shape_str(b, sx, 64), O);
    int shape[MT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = O;
    mt_tensor *out = mt_tensor_new(c, x->ndim, shape);
    mt_node *n = mt_node_new(c, &OP_LINEAR, out, 3, (mt_tensor *[]){x, w, b});
    n->i[0] = mt_rows(x);
    n->i[1] = K;
    n->i[2] = O;
    mt_node_run(c, n);
    return out;
}

/* ---- FFN: y = h W2^T + b2, h = act(a), a = x W1^T + b1; SwiGLU: h = silu(a) g, g = x W3^T + b3 --
 * in x (N, C), W1 (F, C), b1 (F) or NULL, W2 (C, F), b2 (C) or NULL, (SwiGLU) W3 (F, C), b3 (F)
 * or NULL; saved[0] a (N, F), (SwiGLU) saved[1] g (N, F): the N x F buffers kept for backward;
 * h lives in an arena scratch buffer, given back after fc2, and backward recomputes it.
 * i[0] N, i[1] C, i[2] F, i[3] act. */

/* h (N, F) = act(a), or silu(a) g */
static void ffn_hidden(const mt_node *n, float *h) {
    size_t NF = (size_t)n->i[0] * n->i[2];
    if ((mt_act)n->i[3] == MT_ACT_SWIGLU) mt_swiglu_forward(h, n->saved[0], n->saved[1], NF);
    else mt_act_forward((mt_act)n->i[3], h, n->saved[0], NF);
}

static void ffn_forward(mt_node *n) {
    mt_ctx *c = n->ctx;
    int N = n->i[0], C = n->i[1], F = n->i[2];
    const float *x = n->in[0]->data;
    linear_kernel(n->saved[0], x, n->in[1]->data, n->in[2] ? n->in[2]->data : NULL, N, C, F);
    if (n->in[5])
        linear_kernel(n->saved[1], x, n->in[5]->data, n->in[6] ? n->in[6]->data : NULL, N, C, F);
    size_t mark = mt_arena_mark(c);
    float *h = mt_arena_floats(c, (size_t)N * F);
    ffn_hidden(n, h);
    linear_kernel(n->out->data, h, n->in[3]->data, n->in[4] ? n->in[4]->data : NULL, N, F, C);
    mt_arena_release(c, mark);
}

/* dW2 += dy^T h, db2 += colsum dy, dh = dy W2 (fc2's backward, dh over h in the one scratch
   buffer); da = dh * act'(a) in place (SwiGLU: da = dh g silu'(a) in place, dg = dh silu(a) in a
   second buffer); dW1 += da^T x, db1 += colsum da, dx += da W1 (and dW3, db3, dx from dg). */
static void ffn_backward(mt_node *n) {
    mt_ctx *c = n->ctx;
    int N = n->i[0], C = n->i[1], F = n->i[2];
    size_t NF = (size_t)N * F;
    mt_act act = (mt_act)n->i[3];
    const float *a = n->saved[0], *x = n->in[0]->data;
    size_t mark = mt_arena_mark(c);
    float *t = mt_arena_floats(c, NF);
    ffn_hidden(n, t);
    linear_backward_kernel(t, n->in[3]->grad, n->in[4] ? n->in[4]->grad : NULL, n->out->grad, t,
                           n->in[3]->data, N, F, C, false);
    if (act == MT_ACT_SWIGLU) {
        float *dg = mt_arena_floats(c, NF);
        mt_swiglu_backward(t, dg, t, a, n->saved[1], NF, false);
        linear_backward_kernel(n->in[0]->grad, n->in[5]->grad, n->in[6] ? n->in[6]->grad : NULL,
                               dg, x, n->in[5]->data, N, C, F, true);
    } else {
        mt_act_backward(act, t, t, a, NF, false);
    }
    linear_backward_kernel(n->in[0]->grad, n->in[1]->grad, n->in[2] ? n->in[2]->grad : NULL, t,
                           x, n->in[1]->data, N, C, F, true);
    mt_arena_release(c, mark);
}

static const mt_op OP_FFN = {"ffn", ffn_forward, ffn_backward};

mt_tensor *mt_ffn(mt_ctx *c, mt_tensor *x, mt_tensor *w1, mt_tensor *b1, mt_tensor *w2,
                  mt_tensor *b2, mt_tensor *w3, mt_tensor *b3, mt_act act) {
    char sx[64], s1[64], s2[64];
    int C = mt_cols(x), F = w1->ndim == 2 ? w1->shape[0] : -1;
    MT_ASSERT(w1->ndim == 2 && w1->shape[1] == C && w2->ndim == 2 && w2->shape[0] == C &&
                  w2->shape[1] == F,
              "ffn: input %s, fc1 weight %s, fc2 weight %s: the weights must be (F, %d), (%d, F)",
              mt_shape_str(x, sx, 64), mt_shape_str(w1, s1, 64), mt_shape_str(w2, s2, 64), C, C);
    MT_ASSERT(!b1 || (b1->ndim == 1 && b1->shape[0] == F), "ffn: fc1 bias %s for %d outputs",
              mt_shape_str(b1, sx, 64), F);
    MT_ASSERT(!b2 || (b2->ndim == 1 && b2->shape[0] == C), "ffn: fc2 bias %s for %d outputs",
              mt_shape_str(b2, sx, 64), C);
    bool glu = act == MT_ACT_SWIGLU;
    MT_ASSERT(glu == (w3 != NULL) && (glu || !b3), "ffn: fc3 %s with activation %d (SwiGLU's only)",
              w3 ? "given" : "missing", (int)act);
    MT_ASSERT(!w3 || mt_same_shape(w1, w3), "ffn: fc3 weight %s, fc1's %s",
              mt_shape_str(w3, s2, 64), mt_shape_str(w1, s1, 64));
    MT_ASSERT(!b3 || (b3->ndim == 1 && b3->shape[0] == F), "ffn: fc3 bias %s for %d outputs",
              mt_shape_str(b3, sx, 64), F);
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, &OP_FFN, out, 7, (mt_tensor *[]){x, w1, b1, w2, b2, w3, b3});
    n->saved[0] = mt_arena_floats(c, (size_t)mt_rows(x) * F);
    if (glu) n->saved[1] = mt_arena_floats(c, (size_t)mt_rows(x) * F);
    n->i[0] = mt_rows(x);
    n->i[1] = C;
    n->i[2] = F;
    n->i[3] = (int)act;
    mt_node_run(c, n);
    return out;
}
