/* Point-wise norms, no statistics: Dynamic Tanh (DyT) and Dynamic erf (Derf).
 * x (N, C) viewed as rows of its last dim; y the same shape; alpha and s learned scalars (1).
 *
 *   DyT   y_i = w_i tanh(alpha x_i) + b_i        (Zhu et al. 2025, arXiv 2503.10622)
 *   Derf  y_i = w_i erf(alpha x_i + s) + b_i     (Chen et al. 2025, arXiv 2512.10938)
 *
 * One kernel: y_i = w_i f(u_i) + b_i, u_i = alpha x_i + s (s = 0 for DyT), with
 *   f' = 1 - f^2 (tanh),  f'(u) = 2/sqrt(pi) exp(-u^2) (erf).
 * Backward, with g_i = dy_i w_i f'(u_i):
 *   dx_i = alpha g_i,  dalpha = sum g_i x_i,  ds = sum g_i,  dw_i = sum_rows dy_i f(u_i),
 *   db_i = sum_rows dy_i
 * (the scalar sums over every element). Backward recomputes u and f from x. The sums over rows
 * are taken per fixed part of the rows, then over the parts in order: the same bits for any
 * thread count. */
#include <math.h>
#include <string.h>

#include "../tensor/simd.h"
#include "../tensor/vmath.h"
#include "nn.h"

typedef enum { POINT_TANH, POINT_ERF } point_fn;

/* tanh(u) = 2 sigmoid(2u) - 1 (absolute error < 1e-6; +-1 beyond |u| = 40) */
static inline float point_f(point_fn fn, float u) {
    return fn == POINT_TANH ? 2.0f * mt_vsigmoidf(2.0f * u) - 1.0f : 1.0f - mt_verfcf(u);
}

/* f'(u), given t = f(u) */
static inline float point_df(point_fn fn, float u, float t) {
    return fn == POINT_TANH ? 1.0f - t * t : 1.12837916709551257f * mt_vexpf_below88(-u * u);
}

/* Fixed partition of the rows for the parameter gradients: parts of at least 64 rows. */
static int point_parts(int N) { return N < 128 ? 1 : N < 64 * 64 ? N / 64 : 64; }

/* One row: y = w f(a x + s) + b (w, b NULL: 1, 0); inlined per function (a loop computing both
   functions and selecting one ran at a third of the speed). */
MT_VINLINE void point_forward_row_fn(point_fn fn, float *y, const float *x, float a, float s,
                                     const float *w, const float *b, int C) {
#pragma omp simd
    for (int i = 0; i < C; i++)
        y[i] = (w ? w[i] : 1.0f) * point_f(fn, a * x[i] + s) + (b ? b[i] : 0.0f);
}

static void point_forward_row(point_fn fn, float *y, const float *x, float a, float s,
                              const float *w, const float *b, int C) {
    if (fn == POINT_TANH) point_forward_row_fn(POINT_TANH, y, x, a, s, w, b, C);
    else point_forward_row_fn(POINT_ERF, y, x, a, s, w, b, C);
}

/* node: in = {x, alpha, s, w, b} (s, w, b may be NULL); i[0] N, i[1] C, i[2] the function. */
static void point_forward(mt_node *n) {
    const float *x = n->in[0]->data, a = n->in[1]->data[0];
    const float s = n->in[2] ? n->in[2]->data[0] : 0.0f;
    const float *w = n->in[3] ? n->in[3]->data : NULL, *b = n->in[4] ? n->in[4]->data : NULL;
    float *y = n->out->data;
    int N = n->i[0], C = n->i[1];
    point_fn fn = (point_fn)n->i[2];
    MT_PARALLEL_FOR((size_t)N * C >= MT_PAR_MIN, for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        point_forward_row(fn, y + o, x + o, a, s, w, b, C);
    });
}

/* One row of the backward (derivative in the file comment): dx accumulates (NULL: not needed),
   pw and pb (C) and ps[0] (dalpha), ps[1] (ds) add the row's sums; inlined per function. */
MT_VINLINE void point_backward_row_fn(point_fn fn, float *dx, float *pw, float *pb, double *ps,
                                      const float *x, const float *dy, float a, float s,
                                      const float *w, int C) {
    double sa = 0, ss = 0; /* the scalars' sums cancel: in double */
#pragma omp simd reduction(+ : sa, ss)
    for (int i = 0; i < C; i++) {
        float u = a * x[i] + s, t = point_f(fn, u);
        float g = dy[i] * (w ? w[i] : 1.0f) * point_df(fn, u, t);
        if (dx) dx[i] += a * g;
        pw[i] += dy[i] * t, pb[i] += dy[i];
        sa += (double)g * x[i], ss += g;
    }
    ps[0] += sa, ps[1] += ss;
}

/* Rows [r0, r1) of the backward into the part's sums pw, pb (C) and ps (2). */
static void point_backward_rows(const mt_node *n, int r0, int r1, float *pw, float *pb,
                                double *ps) {
    const float *x = n->in[0]->data, *dy = n->out->grad, a = n->in[1]->data[0];
    const float s = n->in[2] ? n->in[2]->data[0] : 0.0f;
    const float *w = n->in[3] ? n->in[3]->data : NULL;
    float *dx = n->in[0]->grad;
    int C = n->i[1];
    for (int r = r0; r < r1; r++) {
        size_t o = (size_t)r * C;
        if (n->i[2] == POINT_TANH)
            point_backward_row_fn(POINT_TANH, dx ? dx + o : NULL, pw, pb, ps, x + o, dy + o, a, s,
                                  w, C);
        else
            point_backward_row_fn(POINT_ERF, dx ? dx + o : NULL, pw, pb, ps, x + o, dy + o, a, s, w,
                                  C);
    }
}

static void point_backward(mt_node *n) {
    mt_tensor *alpha = n->in[1], *s = n->in[2], *w = n->in[3], *b = n->in[4];
    int N = n->i[0], C = n->i[1], P = point_parts(N), rows = (N + P - 1) / P;
    float *part = mt_arena_floats(n->ctx, (size_t)P * 2 * C);            /* per part: dw, db */
    double *ps = mt_arena_alloc(n->ctx, (size_t)P * 2 * sizeof(double)); /* dalpha, ds */
    MT_PARALLEL_FOR((size_t)N * C >= MT_PAR_MIN, for (int p = 0; p < P; p++) {
        float *pw = part + (size_t)p * 2 * C;
        memset(pw, 0, 2 * (size_t)C * sizeof(float));
        ps[2 * p] = ps[2 * p + 1] = 0;
        int r1 = (p + 1) * rows < N ? (p + 1) * rows : N;
        point_backward_rows(n, p * rows, r1, pw, pw + C, ps + 2 * p);
    });
    for (int p = 1; p < P; p++) { /* part 0 += part p, in part order */
#pragma omp simd
        for (int i = 0; i < 2 * C; i++) part[i] += part[(size_t)p * 2 * C + i];
        ps[0] += ps[2 * p], ps[1] += ps[2 * p + 1];
    }
    for (int i = 0; i < C; i++) {
        if (w && w->grad) w->grad[i] += part[i];
        if (b && b->grad) b->grad[i] += part[C + i];
    }
    if (alpha->grad) alpha->grad[0] += (float)ps[0];
    if (s && s->grad) s->grad[0] += (float)ps[1];
}

static const mt_op OP_DYT = {.name = "dyt", .forward = point_forward, .backward = point_backward};
static const mt_op OP_DERF = {.name = "derf", .forward = point_forward, .backward = point_backward};

static mt_tensor *pointnorm(mt_ctx *c, const mt_op *op, point_fn fn, mt_tensor *x, mt_tensor *alpha,
                            mt_tensor *s, mt_tensor *w, mt_tensor *b) {
    char sx[64], sp[64];
    int C = mt_cols(x);
    MT_ASSERT(alpha && alpha->n == 1, "%s: alpha %s, expected (1)", op->name,
              mt_shape_str(alpha, sp, 64));
    MT_ASSERT(!s || s->n == 1, "%s: shift %s, expected (1)", op->name, mt_shape_str(s, sp, 64));
    MT_ASSERT(!w || (w->ndim == 1 && w->shape[0] == C), "%s: weight %s for x %s", op->name,
              mt_shape_str(w, sp, 64), mt_shape_str(x, sx, 64));
    MT_ASSERT(!b || (b->ndim == 1 && b->shape[0] == C), "%s: bias %s for x %s", op->name,
              mt_shape_str(b, sp, 64), mt_shape_str(x, sx, 64));
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, op, out, 5, (mt_tensor *[]){x, alpha, s, w, b});
    n->i[0] = mt_rows(x), n->i[1] = C, n->i[2] = fn;
    mt_node_run(c, n);
    return out;
}

mt_tensor *mt_dyt(mt_ctx *c, mt_tensor *x, mt_tensor *alpha, mt_tensor *w, mt_tensor *b) {
    return pointnorm(c, &OP_DYT, POINT_TANH, x, alpha, NULL, w, b);
}

mt_tensor *mt_derf(mt_ctx *c, mt_tensor *x, mt_tensor *alpha, mt_tensor *s, mt_tensor *w,
                   mt_tensor *b) {
    return pointnorm(c, &OP_DERF, POINT_ERF, x, alpha, s, w, b);
}
