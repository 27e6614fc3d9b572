/* nGPT's ops (Loshchilov et al. 2024, arXiv 2410.01131; NVIDIA/ngpt model.py): the learned
 * per-channel scale of its scalings s_qk, s_u, s_v, s_z, and the residual update on the unit
 * sphere. x, h, y (N, C) viewed as rows of their last dim; s, alpha (C).
 *
 * Residual, per row, Norm(x) = x / ||x||, a_j = k |alpha_j|:
 *   u = Norm(y),  z = h + a (u - h),  out = Norm(z)
 * Backward, g = dout:
 *   dz = (g - out (out . g)) / ||z||          (Norm's Jacobian (I - o o^T) / ||z||)
 *   dh += dz (1 - a),  du = dz a,  dy += (du - u (u . du)) / ||y||
 *   dalpha_j += k sign(alpha_j) sum_rows dz_j (u_j - h_j)
 * The forward keeps 1 / ||y|| and 1 / ||z|| per row; the backward recomputes u and z from h and
 * y with the forward's expressions. Sums over rows run down the rows in order, per column: the
 * same bits at any thread count. */
#include <math.h>
#include <string.h>

#include "nn.h"

mt_ngpt_cfg mt_ngpt_default(void) {
    return (mt_ngpt_cfg){.alpha_init = 0.05f,
                         .sqk_init = 1,
                         .suv_init = 1,
                         .suv_scale = 1,
                         .sz_init = 1}; /* scales 0: 1/sqrt(C) */
}

enum { COLS = 16 }; /* columns summed down the rows together */

/* sum[j] += sum_r x[r W + c0 + j] (the columns [c0, c0 + COLS) below W), times k, in double. */
static void column_sums(float *sum, const float *x, int R, int W, int c0, float k) {
    int n = W - c0 < COLS ? W - c0 : COLS;
    double s[COLS] = {0};
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) s[j] += x[(size_t)r * W + c0 + j];
    for (int j = 0; j < n; j++) sum[c0 + j] += (float)(k * s[j]);
}

/* Column sums of x (R, W) into sum (W), column blocks across the threads. */
static void sum_columns(float *sum, const float *x, int R, int W, float k) {
    int blocks = (W + COLS - 1) / COLS;
    MT_PARALLEL_FOR((size_t)R * W >= MT_PAR_MIN,
                    for (int b = 0; b < blocks; b++) column_sums(sum, x, R, W, b * COLS, k););
}

/* ---- scale_channels: y = k s * x, f[0] = k ---- */

/* y = k s * x of a row of W */
static void scale_row(float *restrict y, const float *restrict x, const float *restrict s, float k,
                      int W) {
#pragma omp simd
    for (int j = 0; j < W; j++) y[j] = k * s[j] * x[j];
}

static void scale_channels_forward(mt_node *n) {
    const float *x = n->in[0]->data, *s = n->in[1]->data, k = n->f[0];
    float *y = n->out->data;
    int R = mt_rows(n->out), W = mt_cols(n->out);
    size_t cells = (size_t)R * W;
    MT_PARALLEL_FOR(cells >= MT_PAR_MIN, for (int r = 0; r < R; r++)
                        scale_row(y + (size_t)r * W, x + (size_t)r * W, s, k, W););
}

/* A row of the backward: dx += k s dy (dx NULL: none), t = dy x (t NULL: none) */
static void scale_channels_backward_row(float *dx, float *t, const float *dy, const float *x,
                                        const float *s, float k, int W) {
    if (dx)
#pragma omp simd
        for (int j = 0; j < W; j++) dx[j] += k * s[j] * dy[j];
    if (t)
#pragma omp simd
        for (int j = 0; j < W; j++) t[j] = dy[j] * x[j];
}

/* dx += k s dy;  ds += k sum_rows dy x (through scratch dy x, summed down the rows) */
static void scale_channels_backward(mt_node *n) {
    const float *x = n->in[0]->data, *s = n->in[1]->data, *dy = n->out->grad, k = n->f[0];
    float *dx = n->in[0]->grad, *ds = n->in[1]->grad;
    int R = mt_rows(n->out), W = mt_cols(n->out);
    size_t N = n->out->n, mark = mt_arena_mark(n->ctx);
    float *t = ds ? mt_arena_floats(n->ctx, N) : NULL;
    MT_PARALLEL_FOR((size_t)R * W >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        size_t o = (size_t)r * W;
        scale_channels_backward_row(dx ? dx + o : NULL, t ? t + o : NULL, dy + o, x + o, s, k, W);
    });
    if (t) sum_columns(ds, t, R, W, k);
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_SCALE_CHANNELS = {.name = "scale_channels",
                                        .forward = scale_channels_forward,
                                        .backward = scale_channels_backward,
                                        .backward_skips_out = true};

mt_tensor *mt_scale_channels(mt_ctx *c, mt_tensor *x, mt_tensor *s, float k) {
    char sx[64], ss[64];
    MT_ASSERT(s->ndim == 1 && s->shape[0] == mt_cols(x), "scale_channels: s %s for x %s",
              mt_shape_str(s, ss, 64), mt_shape_str(x, sx, 64));
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, &OP_SCALE_CHANNELS, out, 2, (mt_tensor *[]){x, s});
    n->f[0] = k;
    mt_node_run(c, n);
    return out;
}

/* ---- ngpt_residual: Norm(h + a (Norm(y) - h)), f[0] = k, saved 1/||y||, 1/||z|| ---- */

/* 1 / ||x|| of a row of C, in double */
static float inv_norm(const float *x, int C) {
    double s = 0;
    for (int j = 0; j < C; j++) s += (double)x[j] * x[j];
    return (float)(1 / sqrt(s));
}

/* z = h + a (y iy - h) of a row (the forward's and the backward's expression); a_j = k |al_j| */
static inline float ngpt_z(float h, float y, float iy, float al, float k) {
    return h + k * fabsf(al) * (y * iy - h);
}

static void ngpt_residual_forward(mt_node *n) {
    const float *h = n->in[0]->data, *y = n->in[1]->data, *al = n->in[2]->data, k = n->f[0];
    float *out = n->out->data, *iy = n->saved[0], *iz = n->saved[1];
    int N = mt_rows(n->out), C = mt_cols(n->out);
    MT_PARALLEL_FOR((size_t)N * C >= MT_PAR_MIN, for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        float *z = out + o;
        iy[r] = inv_norm(y + o, C);
        for (int j = 0; j < C; j++) z[j] = ngpt_z(h[o + j], y[o + j], iy[r], al[j], k);
        iz[r] = inv_norm(z, C);
        for (int j = 0; j < C; j++) z[j] *= iz[r];
    });
}

/* Row r of the backward (file comment); dz_j (u_j - h_j) into t (C) when t. The row's u and dz
   take scratch u, dz (C each). */
static void ngpt_residual_backward_row(const mt_node *n, int r, float *u, float *dz, float *t) {
    const float *h = n->in[0]->data, *y = n->in[1]->data, *al = n->in[2]->data, k = n->f[0];
    const float *g = n->out->grad, iy = n->saved[0][r], iz = n->saved[1][r];
    float *dh = n->in[0]->grad, *dy = n->in[1]->grad;
    int C = mt_cols(n->out);
    size_t o = (size_t)r * C;
    double og = 0, udu = 0;
    for (int j = 0; j < C; j++) {
        u[j] = y[o + j] * iy;
        dz[j] = ngpt_z(h[o + j], y[o + j], iy, al[j], k) * iz; /* out_j */
        og += (double)dz[j] * g[o + j];
    }
    for (int j = 0; j < C; j++) {
        dz[j] = (g[o + j] - dz[j] * (float)og) * iz;
        udu += (double)u[j] * dz[j] * k * fabsf(al[j]);
        if (t) t[o + j] = dz[j] * (u[j] - h[o + j]);
    }
    for (int j = 0; dh && j < C; j++) dh[o + j] += dz[j] * (1 - k * fabsf(al[j]));
    for (int j = 0; dy && j < C; j++)
        dy[o + j] += (dz[j] * k * fabsf(al[j]) - u[j] * (float)udu) * iy;
}

static void ngpt_residual_backward(mt_node *n) {
    mt_tensor *alpha = n->in[2];
    int N = mt_rows(n->out), C = mt_cols(n->out);
    size_t mark = mt_arena_mark(n->ctx);
    float *t = alpha->grad ? mt_arena_floats(n->ctx, n->out->n) : NULL;
    float *rows = mt_arena_floats(n->ctx, (size_t)N * 2 * C); /* u, dz of each row */
    MT_PARALLEL_FOR((size_t)N * C >= MT_PAR_MIN, for (int r = 0; r < N; r++) {
        float *u = rows + (size_t)r * 2 * C;
        ngpt_residual_backward_row(n, r, u, u + C, t);
    });
    if (t) { /* dalpha_j = k sign(alpha_j) sum_rows t_j */
        float *ds = mt_arena_floats(n->ctx, (size_t)C);
        memset(ds, 0, (size_t)C * sizeof *ds);
        sum_columns(ds, t, N, C, n->f[0]);
        for (int j = 0; j < C; j++)
            alpha->grad[j] += alpha->data[j] > 0 ? ds[j] : alpha->data[j] < 0 ? -ds[j] : 0.0f;
    }
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_NGPT_RESIDUAL = {.name = "ngpt_residual",
                                       .forward = ngpt_residual_forward,
                                       .backward = ngpt_residual_backward};

mt_tensor *mt_ngpt_residual(mt_ctx *c, mt_tensor *h, mt_tensor *y, mt_tensor *alpha, float k) {
    char sh[64], sy[64], sa[64];
    MT_ASSERT(mt_same_shape(h, y) && alpha->ndim == 1 && alpha->shape[0] == mt_cols(h),
              "ngpt_residual: h %s, y %s, alpha %s", mt_shape_str(h, sh, 64),
              mt_shape_str(y, sy, 64), mt_shape_str(alpha, sa, 64));
    mt_tensor *out = mt_tensor_like(c, h);
    mt_node *n = mt_node_new(c, &OP_NGPT_RESIDUAL, out, 3, (mt_tensor *[]){h, y, alpha});
    n->f[0] = k;
    n->saved[0] = mt_arena_floats(c, (size_t)mt_rows(h));
    n->saved[1] = mt_arena_floats(c, (size_t)mt_rows(h));
    mt_node_run(c, n);
    return out;
}
