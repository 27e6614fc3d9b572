/* Linear layer y = x W^T + b (torch.nn.Linear): one GEMM, W read through the transpose flag.
   N rows of x, K inputs, O outputs. And the FFN fc2(act(fc1(x))) as one op on the same two
   kernels, C channels, F FFN width. */
#include <string.h>

#include "../tensor/activation.h"
#include "nn.h"

/* In bf16 precision (ctx->precision, weights with a bf16 copy) the products take x, dy and W
   rounded to bf16 and accumulate in fp32 (mt_gemm_bf16); the bias, its gradient and everything
   written stay fp32. xb is x in bf16 (NULL: fp32), wb the weight's bf16 copy. */
static bool use_bf16(mt_ctx *c, const mt_tensor *w) {
    if (c->precision != MT_BF16) return false;
    char sw[64];
    MT_ASSERT(w->bf16, "linear: weight %s has no bf16 copy in bf16 precision (a parameter of a "
              "model whose parameters are not mt_params_enable_bf16'd?)", mt_shape_str(w, sw, 64));
    return true;
}

/* x (n floats) rounded to bf16 in the arena, kept for the backward; the linear layers of one
   input (q, k, v) share the copy of the first. */
static const mt_bf16 *bf16_input(mt_ctx *c, const float *x, size_t n) {
    if (c->bf16_input.of == x && c->bf16_input.n == n) return c->bf16_input.bf16;
    mt_bf16 *xb = mt_arena_alloc(c, n * sizeof *xb);
    mt_bf16_from_floats(xb, x, n);
    c->bf16_input.of = x, c->bf16_input.n = n, c->bf16_input.bf16 = xb;
    return xb;
}

/* y (N, O) = b (each row; 0 when NULL) + x (N, K) W^T, W (O, K). */
static void linear_kernel(float *y, const float *x, const mt_bf16 *xb, const float *w,
                          const mt_bf16 *wb, const float *b, int N, int K, int O) {
    if (xb) mt_gemm_bf16(false, true, N, O, K, xb, wb, 0.0f, y, b);
    else mt_gemm(false, true, N, O, K, x, w, 0.0f, y, b);
}

/* dW (O, K) += dy^T x;  db_o += sum_r dy_ro, rows summed in order within each column block,
   whatever the thread count (deterministic);  then dx (N, K) = dy W, added to dx when acc.
   dx comes last, so it may be x's own buffer (x is dead once dW has it). NULL grads are skipped.
   bf16 (xb given): dy is rounded into arena scratch, the products read xb and wb. */
static void linear_backward_kernel(mt_ctx *c, float *dx, float *dw, float *db, const float *dy,
                                   const float *x, const mt_bf16 *xb, const float *w,
                                   const mt_bf16 *wb, int N, int K, int O, bool acc) {
    size_t mark = mt_arena_mark(c);
    mt_bf16 *dyb = NULL;
    if (xb && (dw || dx)) {
        dyb = mt_arena_alloc(c, (size_t)N * O * sizeof *dyb);
        mt_bf16_from_floats(dyb, dy, (size_t)N * O);
    }
    if (dw && xb) mt_gemm_bf16(true, false, O, K, N, dyb, xb, 1.0f, dw, NULL);
    else if (dw) mt_gemm(true, false, O, K, N, dy, x, 1.0f, dw, NULL);
    if (db) {
        enum { BLK = 64 };
        MT_PARALLEL_FOR((size_t)N * O >= MT_PAR_MIN, for (int j0 = 0; j0 < O; j0 += BLK) {
            int j1 = j0 + BLK < O ? j0 + BLK : O;
            for (int r = 0; r < N; r++)
                _Pragma("omp simd") for (int j = j0; j < j1; j++) db[j] += dy[(size_t)r * O + j];
        });
    }
    if (dx && xb) mt_gemm_bf16(false, false, N, K, O, dyb, wb, acc ? 1.0f : 0.0f, dx, NULL);
    else if (dx) mt_gemm(false, false, N, K, O, dy, w, acc ? 1.0f : 0.0f, dx, NULL);
    mt_arena_release(c, mark);
}

/* ---- linear: in x, W, b (or NULL); i[0] N, i[1] K, i[2] O; p: x in bf16 (bf16 precision) -- */

static void linear_forward(mt_node *n) {
    const mt_tensor *x = n->in[0], *w = n->in[1];
    if (use_bf16(n->ctx, w)) n->p = (void *)bf16_input(n->ctx, x->data, x->n);
    linear_kernel(n->out->data, x->data, n->p, w->data, w->bf16, n->in[2] ? n->in[2]->data : NULL,
                  n->i[0], n->i[1], n->i[2]);
}

static void linear_backward(mt_node *n) {
    const mt_tensor *w = n->in[1];
    linear_backward_kernel(n->ctx, n->in[0]->grad, w->grad, n->in[2] ? n->in[2]->grad : NULL,
                           n->out->grad, n->in[0]->data, n->p, w->data, w->bf16, n->i[0],
                           n->i[1], n->i[2], true);
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
 * h lives in an arena scratch buffer (bf16: only its bf16 rounding), given back after fc2, and
 * backward recomputes it. i[0] N, i[1] C, i[2] F, i[3] act; p: x in bf16 (bf16 precision). */

/* h (N, F) = act(a), or silu(a) g, into h; bf16 (hb given): rounded into hb instead, in one pass
   through a float tile on the stack. grad (the backward's recompute): in the same pass, the saved
   a becomes act'(a) (SwiGLU: a becomes g silu'(a) and g becomes silu(a)), the factors of dh in
   the gradients; they are read by nothing after (a node's backward runs once). */
static void ffn_hidden(const mt_node *n, float *h, mt_bf16 *hb, bool grad) {
    size_t NF = (size_t)n->i[0] * n->i[2];
    mt_act act = (mt_act)n->i[3];
    float *a = n->saved[0], *g = n->saved[1];
    enum { TILE = 2048 };
    MT_PARALLEL_FOR(hb && NF >= MT_PAR_MIN, for (size_t i0 = 0; i0 < NF; i0 += hb ? TILE : NF) {
        float t[TILE], *y = hb ? t : h + i0;
        size_t m = !hb ? NF : NF - i0 < TILE ? NF - i0 : TILE;
        if (act == MT_ACT_SWIGLU && grad) mt_swiglu_forward_grad(y, a + i0, g + i0, m);
        else if (act == MT_ACT_SWIGLU) mt_swiglu_forward(y, a + i0, g + i0, m);
        else if (grad) mt_act_forward_grad(act, y, a + i0, a + i0, m);
        else mt_act_forward(act, y, a + i0, m);
        if (hb) mt_bf16_from_floats(hb + i0, t, m);
    });
}

static void ffn_forward(mt_node *n) {
    mt_ctx *c = n->ctx;
    int N = n->i[0], C = n->i[1], F = n->i[2];
    const mt_tensor *x = n->in[0], *w1 = n->in[1], *w2 = n->in[3], *w3 = n->in[5];
    bool bf16 = use_bf16(c, w1) && use_bf16(c, w2) && (!w3 || use_bf16(c, w3));
    if (bf16) n->p = (void *)bf16_input(c, x->data, x->n);
    linear_kernel(n->saved[0], x->data, n->p, w1->data, w1->bf16,
                  n->in[2] ? n->in[2]->data : NULL, N, C, F);
    if (w3)
        linear_kernel(n->saved[1], x->data, n->p, w3->data, w3->bf16,
                      n->in[6] ? n->in[6]->data : NULL, N, C, F);
    size_t mark = mt_arena_mark(c);
    float *h = NULL;
    mt_bf16 *hb = NULL;
    if (bf16) hb = mt_arena_alloc(c, (size_t)N * F * sizeof *hb);
    else h = mt_arena_floats(c, (size_t)N * F);
    ffn_hidden(n, h, hb, false);
    linear_kernel(n->out->data, h, hb, w2->data, w2->bf16, n->in[4] ? n->in[4]->data : NULL, N,
                  F, C);
    mt_arena_release(c, mark);
}

/* dW2 += dy^T h, db2 += colsum dy, dh = dy W2 (fc2's backward, dh over h in the one scratch
   buffer; bf16: h in a second one, bf16), with the saved a (and g) turned into dh's factors by
   the pass that recomputes h (ffn_hidden); da = dh act'(a) in place over dh (SwiGLU: dg = dh
   silu(a) over g first, then da = dh g silu'(a)); dW3 += dg^T x, db3 += colsum dg, dx += dg W3;
   dW1 += da^T x, db1 += colsum da, dx += da W1. */
static void ffn_backward(mt_node *n) {
    mt_ctx *c = n->ctx;
    int N = n->i[0], C = n->i[1], F = n->i[2];
    size_t NF = (size_t)N * F;
    const mt_tensor *x = n->in[0], *w1 = n->in[1], *w2 = n->in[3], *w3 = n->in[5];
    float *a = n->saved[0], *g = n->saved[1];
    size_t mark = mt_arena_mark(c);
    float *t = mt_arena_floats(c, NF);
    mt_bf16 *hb = n->p ? mt_arena_alloc(c, NF * sizeof *hb) : NULL;
    ffn_hidden(n, t, hb, true);
    linear_backward_kernel(c, t, w2->grad, n->in[4] ? n->in[4]->grad : NULL, n->out->grad, t, hb,
                           w2->data, w2->bf16, N, F, C, false);
    if (g) {
        MT_PARALLEL_FOR_SIMD(NF >= MT_PAR_MIN, for (size_t i = 0; i < NF; i++) {
            g[i] *= t[i];
            t[i] *= a[i];
        });
        linear_backward_kernel(c, x->grad, w3->grad, n->in[6] ? n->in[6]->grad : NULL, g,
                               x->data, n->p, w3->data, w3->bf16, N, C, F, true);
    } else {
        MT_PARALLEL_FOR_SIMD(NF >= MT_PAR_MIN, for (size_t i = 0; i < NF; i++) t[i] *= a[i];);
    }
    linear_backward_kernel(c, x->grad, w1->grad, n->in[2] ? n->in[2]->grad : NULL, t, x->data,
                           n->p, w1->data, w1->bf16, N, C, F, true);
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
