/* Linear layer y = x W^T + b (torch.nn.Linear): one GEMM, W read through the transpose flag.
   N rows of x, K inputs, O outputs. And the FFN fc2(act(fc1(x))) as one op on the same two
   kernels, C channels, F FFN width. */
#include <string.h>

#include "../tensor/activation.h"
#include "../tensor/gemm.h"
#include "nn.h"

/* In bf16 precision (ctx->precision, weights with a bf16 copy) the products take x, dy and W
   rounded to bf16 and accumulate in fp32 (mt_gemm_bf16); the bias, its gradient and everything
   written stay fp32. xb is x in bf16 (NULL: fp32; mt_ctx_bf16, whose copy the q, k and v
   projections of one input share), wb the weight's bf16 copy. */
static bool use_bf16(mt_ctx *c, const mt_tensor *w) {
    if (c->precision != MT_BF16) return false;
    char sw[64];
    MT_ASSERT(w->bf16,
              "linear: weight %s has no bf16 copy in bf16 precision (a parameter of a "
              "model whose parameters are not mt_params_enable_bf16'd?)",
              mt_shape_str(w, sw, 64));
    return true;
}

/* y (N, O) = b (each row; 0 when NULL) + x (N, K) W^T, W (O, K). */
static void linear_kernel(float *y, const float *x, const mt_bf16 *xb, const float *w,
                          const mt_bf16 *wb, const float *b, int N, int K, int O) {
    if (xb) mt_gemm_bf16(false, true, N, O, K, xb, wb, 0.0f, y, b);
    else mt_gemm(false, true, N, O, K, x, w, 0.0f, y, b);
}

/* One pass over dy (N, O): each value v = dy times its factor, s (fp32) or sb (bf16) when given
   (the FFN's way back through its activation: act'(a)), is summed down the columns into db when
   given, and rounded into dyb when given. Only fp32's v (s, no dyb) is written back over dy; with
   dyb or sb dy is left as it was (SwiGLU's dh serves two factors). Row by row, so that the reads
   stream (the factor is cold: the forward wrote it); on the pool, each thread takes a block of
   columns. Every column is summed over the rows in order, whatever the threads: deterministic. */
static void dy_pass(float *dy, const float *s, const mt_bf16 *sb, mt_bf16 *dyb, float *db, int N,
                    int O) {
    if (!s && !sb && !dyb && !db) return;
    int nb = (size_t)N * O >= MT_PAR_MIN && !omp_in_parallel() ? mt_threads() : 1;
    int per = (O + nb - 1) / nb;
    per = (per + 15) / 16 * 16; /* whole vectors per block */
    enum { SUB = 2048 };        /* a piece of the block; scaled for bf16 into v on the stack */
    MT_PARALLEL_FOR(nb > 1, for (int j0 = 0; j0 < O; j0 += per) {
        int j1 = j0 + per < O ? j0 + per : O;
        /* whole rows are contiguous: a piece then takes as many as fit */
        int rows = j1 - j0 == O && O <= SUB ? SUB / O : 1;
        float v[SUB];
        for (int r0 = 0; r0 < N; r0 += rows)
            for (int k0 = j0; k0 < j1; k0 += SUB) {
                int nr = N - r0 < rows ? N - r0 : rows, w = j1 - k0 < SUB ? j1 - k0 : SUB;
                int m = rows > 1 ? nr * O : w;
                size_t o = (size_t)r0 * O + (size_t)k0;
                float *y = dy + o, *u = (s && dyb) || sb ? v : y; /* the scaled piece */
                if (s) _Pragma("omp simd") for (int j = 0; j < m; j++) u[j] = y[j] * s[o + j];
                else if (sb) _Pragma("omp simd") for (int j = 0; j < m; j++)
                    u[j] = y[j] * mt_bf16_to_float(sb[o + j]);
                if (db)
                    for (int i = 0; i < (rows > 1 ? nr : 1); i++)
                        _Pragma("omp simd") for (int j = 0; j < w; j++) db[k0 + j] += u[i * w + j];
                if (dyb) _Pragma("omp simd") for (int j = 0; j < m; j++)
                    dyb[o + j] = mt_bf16_from_float(u[j]);
            }
    });
}

/* dW (O, K) += dy^T x;  db_o += sum_r dy_ro;  then dx (N, K) = dy W, added to dx when acc; where
   dy is the given one times s or sb (dy_pass) when either is given. dx comes last, so it may be
   x's own buffer (x is dead once dW has it). NULL grads are skipped. fp32: dy is scaled in place
   by s. bf16 (xb given): dy, scaled, is rounded into arena scratch by the same pass (dy itself is
   left as it was), and the products read it, xb and wb. */
static void linear_backward_kernel(mt_ctx *c, float *dx, float *dw, float *db, float *dy,
                                   const float *s, const mt_bf16 *sb, const float *x,
                                   const mt_bf16 *xb, const float *w, const mt_bf16 *wb, int N,
                                   int K, int O, bool acc) {
    size_t mark = mt_arena_mark(c);
    mt_bf16 *dyb = xb && (dw || dx) ? mt_arena_alloc(c, (size_t)N * O * sizeof *dyb) : NULL;
    dy_pass(dy, s, sb, dyb, db, N, O);
    if (dw && xb) mt_gemm_bf16(true, false, O, K, N, dyb, xb, 1.0f, dw, NULL);
    else if (dw) mt_gemm(true, false, O, K, N, dy, x, 1.0f, dw, NULL);
    if (dx && xb) mt_gemm_bf16(false, false, N, K, O, dyb, wb, acc ? 1.0f : 0.0f, dx, NULL);
    else if (dx) mt_gemm(false, false, N, K, O, dy, w, acc ? 1.0f : 0.0f, dx, NULL);
    mt_arena_release(c, mark);
}

/* ---- linear: in x, W, b (or NULL); i[0] N, i[1] K, i[2] O; p: x in bf16 (bf16 precision) -- */

static void linear_forward(mt_node *n) {
    const mt_tensor *x = n->in[0], *w = n->in[1];
    if (use_bf16(n->ctx, w)) n->p = (void *)mt_ctx_bf16(n->ctx, x->data, x->n);
    linear_kernel(n->out->data, x->data, n->p, w->data, w->bf16, n->in[2] ? n->in[2]->data : NULL,
                  n->i[0], n->i[1], n->i[2]);
}

static void linear_backward(mt_node *n) {
    const mt_tensor *w = n->in[1];
    linear_backward_kernel(n->ctx, n->in[0]->grad, w->grad, n->in[2] ? n->in[2]->grad : NULL,
                           n->out->grad, NULL, NULL, n->in[0]->data, n->p, w->data, w->bf16,
                           n->i[0], n->i[1], n->i[2], true);
}

static const mt_op OP_LINEAR = {.name = "linear",
                                .forward = linear_forward,
                                .backward = linear_backward,
                                .backward_skips_out = true};

mt_tensor *mt_linear(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b) {
    char sx[64], sw[64];
    int K = mt_cols(x);
    MT_ASSERT(w->ndim == 2 && w->shape[1] == K,
              "linear: input %s, weight %s: weight must be (O, %d)", mt_shape_str(x, sx, 64),
              mt_shape_str(w, sw, 64), K);
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

/* ---- LoRA: y = x W^T + b + s (xd A^T) B^T, xd = dropout(x) (or x itself) ---------------------
 * in x (N, K), W (O, K), b (O) or NULL, A (r, K), B (O, r), xd (N, K); f[0] s = alpha / r;
 * i[0] N, i[1] K, i[2] O, i[3] r; saved[0] u = s xd A^T (N, r). The base as mt_linear (bf16 with
 * its copy); the adapter's products in fp32 (r is small). */
static void lora_forward(mt_node *n) {
    const mt_tensor *x = n->in[0], *w = n->in[1], *A = n->in[3], *B = n->in[4], *xd = n->in[5];
    int N = n->i[0], K = n->i[1], O = n->i[2], r = n->i[3];
    if (use_bf16(n->ctx, w)) n->p = (void *)mt_ctx_bf16(n->ctx, x->data, x->n);
    linear_kernel(n->out->data, x->data, n->p, w->data, w->bf16, n->in[2] ? n->in[2]->data : NULL,
                  N, K, O);
    float *u = n->saved[0], s = n->f[0];
    mt_gemm(false, true, N, r, K, xd->data, A->data, 0.0f, u, NULL);
    for (size_t i = 0; i < (size_t)N * r; i++) u[i] *= s;
    mt_gemm(false, true, N, O, r, u, B->data, 1.0f, n->out->data, NULL);
}

/* dB += dy^T u; du = s dy B (N, r); dA += du^T xd; dxd += du A; then the base's: dW += dy^T x
   (skipped when W is frozen: no gradient), db += colsum dy, dx += dy W. */
static void lora_backward(mt_node *n) {
    mt_ctx *c = n->ctx;
    mt_tensor *x = n->in[0], *w = n->in[1], *A = n->in[3], *B = n->in[4], *xd = n->in[5];
    int N = n->i[0], K = n->i[1], O = n->i[2], r = n->i[3];
    float *dy = n->out->grad, s = n->f[0];
    if (B->grad) mt_gemm(true, false, O, r, N, dy, n->saved[0], 1.0f, B->grad, NULL);
    if (A->grad || xd->grad) {
        size_t mark = mt_arena_mark(c);
        float *du = mt_arena_floats(c, (size_t)N * r);
        mt_gemm(false, false, N, r, O, dy, B->data, 0.0f, du, NULL);
        for (size_t i = 0; i < (size_t)N * r; i++) du[i] *= s;
        if (A->grad) mt_gemm(true, false, r, K, N, du, xd->data, 1.0f, A->grad, NULL);
        if (xd->grad) mt_gemm(false, false, N, K, r, du, A->data, 1.0f, xd->grad, NULL);
        mt_arena_release(c, mark);
    }
    linear_backward_kernel(c, x->grad, w->grad, n->in[2] ? n->in[2]->grad : NULL, dy, NULL, NULL,
                           x->data, n->p, w->data, w->bf16, N, K, O, true);
}

static const mt_op OP_LORA = {.name = "lora", .forward = lora_forward, .backward = lora_backward};

mt_tensor *mt_linear_lora(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, mt_tensor *A,
                          mt_tensor *B, mt_tensor *xd, float s) {
    char sx[64], sa[64], sb[64];
    int K = mt_cols(x), O = w->shape[0], r = A->shape[0];
    MT_ASSERT(w->ndim == 2 && w->shape[1] == K && A->ndim == 2 && A->shape[1] == K &&
                  B->ndim == 2 && B->shape[0] == O && B->shape[1] == r && mt_same_shape(x, xd),
              "lora: input %s, A %s, B %s for a weight (%d, %d)", mt_shape_str(x, sx, 64),
              mt_shape_str(A, sa, 64), mt_shape_str(B, sb, 64), w->shape[0], w->shape[1]);
    MT_ASSERT(!b || (b->ndim == 1 && b->shape[0] == O), "lora: bias %s for %d outputs",
              mt_shape_str(b, sx, 64), O);
    int shape[MT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = O;
    mt_tensor *out = mt_tensor_new(c, x->ndim, shape);
    mt_node *n = mt_node_new(c, &OP_LORA, out, 6, (mt_tensor *[]){x, w, b, A, B, xd});
    n->saved[0] = mt_arena_floats(c, (size_t)mt_rows(x) * r);
    n->f[0] = s;
    n->i[0] = mt_rows(x);
    n->i[1] = K;
    n->i[2] = O;
    n->i[3] = r;
    mt_node_run(c, n);
    return out;
}

/* ---- FFN: y = h W2^T + b2, h = act(a), a = x W1^T + b1; SwiGLU: h = silu(a) g, g = x W3^T + b3 --
 * in x (N, C), W1 (F, C), b1 (F) or NULL, W2 (C, F), b2 (C) or NULL, (SwiGLU) W3 (F, C), b3 (F)
 * or NULL. i[0] N, i[1] C, i[2] F, i[3] act, i[4] 1 when bf16 and recorded; p: x in bf16.
 * fp32, or not recorded: saved[0] a (N, F), (SwiGLU) saved[1] g; h lives in arena scratch, given
 * back after fc2, and backward recomputes it with act'(a) in one pass (ffn_hidden).
 * bf16, recorded: a and g are scratch; the forward's pass over them keeps, all in bf16, dh's
 * factors act'(a) in saved[0] (SwiGLU: g silu'(a) in saved[0], silu(a) in saved[1]) and h in
 * saved[2]. The backward then evaluates no activation, and reads half the bytes: the factors
 * scale dh on its way into the bf16 products, which round it to bf16 anyway (db1, in fp32, sees
 * the factor's rounding too). */
static mt_bf16 *saved_bf16(const mt_node *n, int i) { return (mt_bf16 *)n->saved[i]; }

/* h (N, F) = act(a), or silu(a) g, into h; bf16 (hb given): rounded into hb instead, in one pass
   through a float tile on the stack. grad: in the same pass, a becomes act'(a) (SwiGLU: a becomes
   g silu'(a) and g becomes silu(a)), the factors of dh in the gradients, and when ab is given
   they are rounded into ab (and gb) too. */
static void ffn_hidden(const mt_node *n, float *a, float *g, float *h, mt_bf16 *hb, bool grad,
                       mt_bf16 *ab, mt_bf16 *gb) {
    size_t NF = (size_t)n->i[0] * n->i[2];
    mt_act act = (mt_act)n->i[3];
    enum { TILE = 2048 };
    MT_PARALLEL_FOR(hb && NF >= MT_PAR_MIN, for (size_t i0 = 0; i0 < NF; i0 += hb ? TILE : NF) {
        float t[TILE], *y = hb ? t : h + i0;
        size_t m = !hb ? NF : NF - i0 < TILE ? NF - i0 : TILE;
        if (act == MT_ACT_SWIGLU && grad) mt_swiglu_forward_grad(y, a + i0, g + i0, m);
        else if (act == MT_ACT_SWIGLU) mt_swiglu_forward(y, a + i0, g + i0, m);
        else if (grad) mt_act_forward_grad(act, y, a + i0, a + i0, m);
        else mt_act_forward(act, y, a + i0, m);
        if (hb) mt_bf16_from_floats(hb + i0, t, m);
        if (ab) mt_bf16_from_floats(ab + i0, a + i0, m);
        if (gb) mt_bf16_from_floats(gb + i0, g + i0, m);
    });
}

static void ffn_forward(mt_node *n) {
    mt_ctx *c = n->ctx;
    int N = n->i[0], C = n->i[1], F = n->i[2];
    size_t NF = (size_t)N * F;
    const mt_tensor *x = n->in[0], *w1 = n->in[1], *w2 = n->in[3], *w3 = n->in[5];
    bool bf16 = use_bf16(c, w1) && use_bf16(c, w2) && (!w3 || use_bf16(c, w3)), keep = n->i[4];
    if (bf16) n->p = (void *)mt_ctx_bf16(c, x->data, x->n);
    size_t mark = mt_arena_mark(c);
    float *a = keep ? mt_arena_floats(c, NF) : n->saved[0];
    float *g = !w3 ? NULL : keep ? mt_arena_floats(c, NF) : n->saved[1];
    linear_kernel(a, x->data, n->p, w1->data, w1->bf16, n->in[2] ? n->in[2]->data : NULL, N, C, F);
    if (w3)
        linear_kernel(g, x->data, n->p, w3->data, w3->bf16, n->in[6] ? n->in[6]->data : NULL, N, C,
                      F);
    float *h = bf16 ? NULL : mt_arena_floats(c, NF);
    mt_bf16 *hb = keep ? saved_bf16(n, 2) : bf16 ? mt_arena_alloc(c, NF * sizeof *hb) : NULL;
    ffn_hidden(n, a, g, h, hb, keep, keep ? saved_bf16(n, 0) : NULL,
               keep && w3 ? saved_bf16(n, 1) : NULL);
    linear_kernel(n->out->data, h, hb, w2->data, w2->bf16, n->in[4] ? n->in[4]->data : NULL, N, F,
                  C);
    mt_arena_release(c, mark);
}

/* dW2 += dy^T h, db2 += colsum dy, dh = dy W2: fc2's backward, dh written over h's fp32 scratch
   (fp32: h is recomputed there first, with the saved a (and g) turned into dh's factors in the
   same pass). Then each of the next products scales dh by its factor in its pass over dh:
   da = dh act'(a) (SwiGLU: dg = dh silu(a) first, then da = dh g silu'(a)); dW3 += dg^T x,
   db3 += colsum dg, dx += dg W3; dW1 += da^T x, db1 += colsum da, dx += da W1. */
static void ffn_backward(mt_node *n) {
    mt_ctx *c = n->ctx;
    int N = n->i[0], C = n->i[1], F = n->i[2];
    const mt_tensor *x = n->in[0], *w1 = n->in[1], *w2 = n->in[3], *w3 = n->in[5];
    bool keep = n->i[4];
    size_t mark = mt_arena_mark(c);
    float *t = mt_arena_floats(c, (size_t)N * F);
    if (!keep) ffn_hidden(n, n->saved[0], n->saved[1], t, NULL, true, NULL, NULL);
    linear_backward_kernel(c, t, w2->grad, n->in[4] ? n->in[4]->grad : NULL, n->out->grad, NULL,
                           NULL, t, keep ? saved_bf16(n, 2) : NULL, w2->data, w2->bf16, N, F, C,
                           false);
    float *b3g = n->in[6] ? n->in[6]->grad : NULL, *dx = x->grad;
    if (w3 && keep) /* dh stays: a pass with a bf16 factor leaves it */
        linear_backward_kernel(c, dx, w3->grad, b3g, t, NULL, saved_bf16(n, 1), x->data, n->p,
                               w3->data, w3->bf16, N, C, F, true);
    else if (w3) /* dg = silu(a) dh in place over g */
        linear_backward_kernel(c, dx, w3->grad, b3g, n->saved[1], t, NULL, x->data, n->p, w3->data,
                               w3->bf16, N, C, F, true);
    linear_backward_kernel(c, dx, w1->grad, n->in[2] ? n->in[2]->grad : NULL, t,
                           keep ? NULL : n->saved[0], keep ? saved_bf16(n, 0) : NULL, x->data, n->p,
                           w1->data, w1->bf16, N, C, F, true);
    mt_arena_release(c, mark);
}

static const mt_op OP_FFN = {.name = "ffn", .forward = ffn_forward, .backward = ffn_backward};

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
    bool recorded = false; /* as mt_node_run will decide */
    for (int i = 0; i < n->n_in; i++) recorded |= n->in[i] && n->in[i]->requires_grad;
    bool keep = recorded && c->grad_enabled && c->precision == MT_BF16;
    size_t NF = (size_t)mt_rows(x) * F, bytes = NF * (keep ? sizeof(mt_bf16) : sizeof(float));
    for (int i = 0; i < (glu ? 2 : 1); i++) n->saved[i] = mt_arena_alloc(c, bytes);
    if (keep) n->saved[2] = mt_arena_alloc(c, bytes);
    n->i[0] = mt_rows(x);
    n->i[1] = C;
    n->i[2] = F;
    n->i[3] = (int)act;
    n->i[4] = keep;
    mt_node_run(c, n);
    return out;
}
