/* Per-row norms: LayerNorm, RMSNorm (LLaMA and paper form), pRMSNorm, ScaleNorm.
 * x (N, C) viewed as rows of its last dim; y the same shape.
 *
 * All four are one kernel: y_i = w_i xhat_i + b_i with xhat_i = (x_i - mu) s, where per row
 *   LayerNorm      mu = mean(x), s = 1/sqrt(var(x) + eps)              (biased var, torch)
 *   RMSNorm LLaMA  mu = 0,       s = 1/sqrt(ms + eps),  ms = mean_{j<k} x_j^2
 *   RMSNorm paper  mu = 0,       s = 1/(sqrt(ms) + eps)                 (Zhang & Sennrich 2019)
 *   ScaleNorm      mu = 0,       s = 1/max(||x||, eps), w = the scalar g (Nguyen & Salazar 2019)
 * with k = C except for pRMSNorm (k = floor(C p), at least 1: the RMS of the first k channels).
 *
 * Backward, with gw_i = dy_i w_i. For LayerNorm (dmu/dx_j = 1/C, ds/dx_j = -s^3 (x_j - mu)/C):
 *   dx_i = s (gw_i - mean(gw) - xhat_i mean(gw xhat))
 * For the RMS forms only channels j < k enter ms: ds/dx_j = -s' x_j/k with s' = s^3 (LLaMA) or
 * s^2/rms (paper: s = 1/(rms + eps), drms/dx_j = x_j/(k rms)); for ScaleNorm ds/dx_j = -s^3 x_j
 * while ||x|| > eps, else 0. All of them fit
 *   dx_i = s gw_i - [center] s mean(gw) - [i < k] xhat_i q sum_j gw_j xhat_j
 * with q = s/C (LN), s/k (LLaMA), 1/(k rms) (paper; 0 for a zero row), s or 0 (ScaleNorm).
 *   dw_i += sum_rows dy_i xhat_i (the scalar g: summed over i too),  db_i += sum_rows dy_i.
 * The statistics (mu, s, q) are saved per row; backward recomputes xhat from x. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../tensor/simd.h"
#include "nn.h"

typedef enum { ROW_LN, ROW_RMS, ROW_RMS_PAPER, ROW_SCALE } row_mode;

/* Fixed partition of the rows for the weight gradients, parts of at least 64 rows: partial sums
   per part, then summed in part order, so the bits do not depend on the thread count. */
static int row_parts(int N) { return N < 128 ? 1 : N < 64 * 64 ? N / 64 : 64; }

/* The kernels take the rows in blocks of up to 8, each row in vectors of 8 floats. A block's row
   sums are up to 8 vector accumulators reduced together by one transposing tree (mt_v8_sum_lanes:
   lane r = row r, 7 shuffle pairs), so the statistics, their square roots and divisions are vector
   operations across the rows. (A per-row `omp simd` reduction ends, in GCC, in 16 dependent scalar
   adds: with the per-row scalar work that was most of the time on rows of 64 floats.) The rows
   themselves are read one after another, as the hardware prefetcher expects. Rows longer than 128
   floats go one at a time, their sums as GCC's `omp simd` reduction (its 16 adds are small against
   a long row): there, blocks of rows measured slower in the models' steps and from memory
   (bench/norms), whether of 2 rows or 8. */
enum { RB = 8 }; /* rows of a block: the lanes of an mt_v8 */

static int block_rows(int C) { return C <= 128 ? RB : 1; }

/* A block of nr rows: its rows of x, dy and y (dx in the backward; NULL when absent), and per
   row (lane) mu, s, q and the backward's dx_i = s gw_i - c0 - [i < k] xhat_i c1. */
typedef struct {
    int nr;
    const float *x[RB], *dy[RB];
    float *y[RB];
    mt_v8 mu, s, q, c0, c1;
} row_block;

/* b = rows [r0, min(r0 + nb, r1)) of (N, C) x, dy, y; mu, s, q from st when given */
static inline void block_at(row_block *b, int r0, int r1, int nb, int C, const float *x,
                            const float *dy, float *y, const float *st) {
    b->nr = r1 - r0 < nb ? r1 - r0 : nb;
    b->mu = b->s = b->q = b->c0 = b->c1 = (mt_v8){0};
    for (int r = 0; r < b->nr; r++) {
        size_t row = (size_t)(r0 + r);
        b->x[r] = x + row * C;
        b->dy[r] = dy ? dy + row * C : NULL;
        b->y[r] = y ? y + row * C : NULL;
        if (st) b->mu[r] = st[3 * row], b->s[r] = st[3 * row + 1], b->q[r] = st[3 * row + 2];
    }
}

/* lane r: sum_{i < n} d_i, d_i = x_ri - (*m)_r, or sum d_i^2 when sq; 4 accumulators a row, or
   a lone row (block_rows) as an `omp simd` reduction */
MT_VINLINE mt_v8 block_sums(const row_block *b, int n, const mt_v8 *m, bool sq) {
    mt_v8 a[RB] = {0};
    float t[RB] = {0};
    for (int r = 0; r < b->nr; r++) {
        const float *x = b->x[r];
        if (b->nr == 1) {
            float s = 0, mr = (*m)[r];
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < n; i++) s += sq ? (x[i] - mr) * (x[i] - mr) : x[i] - mr;
            t[r] = s;
            continue;
        }
        mt_v8 acc[4] = {0};
        int i = 0;
        for (; i + 32 <= n; i += 32)
            for (int u = 0; u < 4; u++) {
                mt_v8 d = mt_v8_load(x + i + 8 * u) - (*m)[r];
                acc[u] += sq ? d * d : d;
            }
        for (; i + 8 <= n; i += 8) {
            mt_v8 d = mt_v8_load(x + i) - (*m)[r];
            acc[0] += sq ? d * d : d;
        }
        a[r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (; i < n; i++) t[r] += sq ? (x[i] - (*m)[r]) * (x[i] - (*m)[r]) : x[i] - (*m)[r];
    }
    return mt_v8_sum_lanes(a) + mt_v8_load(t);
}

/* lane r: sg = sum_i gw_i, sgx = sum_i gw_i (x_ri - mu_r), gw_i = dy_ri w_i: one pass */
static inline void block_dots(const row_block *b, const float *w, int C, mt_v8 *sg, mt_v8 *sgx) {
    mt_v8 a[RB] = {0}, ax[RB] = {0};
    float t[RB] = {0}, tx[RB] = {0};
    for (int r = 0; r < b->nr; r++) {
        const float *x = b->x[r], *dy = b->dy[r], mu = b->mu[r];
        mt_v8 acc[2] = {0}, accx[2] = {0};
        int i = 0;
        for (; i + 16 <= C; i += 16)
            for (int u = 0; u < 2; u++) {
                mt_v8 g = mt_v8_load(dy + i + 8 * u) * mt_v8_load(w + i + 8 * u);
                acc[u] += g, accx[u] += g * (mt_v8_load(x + i + 8 * u) - mu);
            }
        for (; i + 8 <= C; i += 8) {
            mt_v8 g = mt_v8_load(dy + i) * mt_v8_load(w + i);
            acc[0] += g, accx[0] += g * (mt_v8_load(x + i) - mu);
        }
        a[r] = acc[0] + acc[1], ax[r] = accx[0] + accx[1];
        for (; i < C; i++) t[r] += dy[i] * w[i], tx[r] += dy[i] * w[i] * (x[i] - mu);
    }
    *sg = mt_v8_sum_lanes(a) + mt_v8_load(t), *sgx = mt_v8_sum_lanes(ax) + mt_v8_load(tx);
}

/* b->mu, s, q of the block's rows */
static inline void block_stats(row_block *b, int C, int k, row_mode mode, float eps) {
    if (mode == ROW_LN) { /* two passes over the rows (in L1), the first shifted by x_0: the
                             mean of 1e3 + small noise keeps the noise's digits */
        mt_v8 x0 = {0};
        for (int r = 0; r < b->nr; r++) x0[r] = b->x[r][0];
        b->mu = x0 + block_sums(b, C, &x0, false) / (float)C;
    }
    mt_v8 ss = block_sums(b, mode == ROW_LN ? C : k, &b->mu, true);
    float s[RB], q[RB];
#pragma omp simd
    for (int r = 0; r < RB; r++) {
        if (mode == ROW_LN) {
            s[r] = 1.0f / sqrtf(ss[r] / C + eps);
            q[r] = s[r] / C;
        } else if (mode == ROW_RMS) {
            s[r] = 1.0f / sqrtf(ss[r] / k + eps);
            q[r] = s[r] / k;
        } else if (mode == ROW_RMS_PAPER) {
            float rms = sqrtf(ss[r] / k);
            s[r] = 1.0f / (rms + eps);
            q[r] = rms > 0 ? 1.0f / (k * rms) : 0.0f;
        } else {
            float norm = sqrtf(ss[r]);
            s[r] = 1.0f / fmaxf(norm, eps);
            q[r] = norm > eps ? s[r] : 0.0f;
        }
    }
    memcpy(&b->s, s, sizeof s);
    memcpy(&b->q, q, sizeof q);
}

/* Row r of a block, forward: y = (x - mu) s w + bias (bias NULL: none); sr = (mu, s, q). */
static inline void row_forward(const row_block *b, int r, const float *w, const float *bias, int C,
                               float *sr) {
    const float *x = b->x[r], mu = b->mu[r], s = b->s[r];
    float *y = b->y[r];
    sr[0] = mu, sr[1] = s, sr[2] = b->q[r];
    if (bias) {
#pragma omp simd
        for (int i = 0; i < C; i++) y[i] = (x[i] - mu) * s * w[i] + bias[i];
    } else {
#pragma omp simd
        for (int i = 0; i < C; i++) y[i] = (x[i] - mu) * s * w[i];
    }
}

/* y (N, C), st (N, 3) = (mu, s, q) per row; x (N, C); w (C) (ones when there is no weight, g
   repeated for ScaleNorm); bias (C) or NULL. */
static void rownorm_forward_kernel(float *y, float *st, const float *x, const float *w,
                                   const float *bias, int N, int C, int k, row_mode mode,
                                   float eps) {
    int nb = block_rows(C);
    MT_PARALLEL_FOR((size_t)N * C >= MT_PAR_MIN, for (int r0 = 0; r0 < N; r0 += nb) {
        row_block b;
        block_at(&b, r0, N, nb, C, x, NULL, y, NULL);
        block_stats(&b, C, k, mode, eps);
        for (int r = 0; r < b.nr; r++) row_forward(&b, r, w, bias, C, st + 3 * (size_t)(r0 + r));
    });
}

/* Columns [i0, i1) of a block's backward: dx += s gw - c0 - [xterm] xhat c1 for each row (dx:
   the block's y, or scratch when NULL), pw += sum_rows dy xhat, pb += sum_rows dy. The rows are
   in L1 (block_dots read them); the weight gradients are summed over the block in registers
   (row by row they were a load-add-store chain through memory, 40% of the samples). */
static inline void block_backward(const row_block *b, const float *w, float *scratch, float *pw,
                                  float *pb, int i0, int i1, bool xterm) {
    mt_v8 c1 = xterm ? b->c1 : (mt_v8){0};
    int i = i0;
    for (; i + 8 <= i1; i += 8) {
        mt_v8 wv = mt_v8_load(w + i), aw = {0}, ab = {0};
        for (int r = 0; r < b->nr; r++) {
            float *dx = b->y[r] ? b->y[r] : scratch;
            mt_v8 dyv = mt_v8_load(b->dy[r] + i);
            mt_v8 xh = (mt_v8_load(b->x[r] + i) - b->mu[r]) * b->s[r];
            MT_VSTORE(dx + i, mt_v8_load(dx + i) + b->s[r] * dyv * wv - b->c0[r] - xh * c1[r]);
            aw += dyv * xh, ab += dyv;
        }
        MT_VSTORE(pw + i, mt_v8_load(pw + i) + aw);
        MT_VSTORE(pb + i, mt_v8_load(pb + i) + ab);
    }
    for (; i < i1; i++) {
        float aw = 0, ab = 0;
        for (int r = 0; r < b->nr; r++) {
            float *dx = b->y[r] ? b->y[r] : scratch;
            float dyv = b->dy[r][i], xh = (b->x[r][i] - b->mu[r]) * b->s[r];
            dx[i] += b->s[r] * dyv * w[i] - b->c0[r] - xh * c1[r];
            aw += dyv * xh, ab += dyv;
        }
        pw[i] += aw, pb[i] += ab;
    }
}

/* The derivative is in the file comment. dx (N, C), dw (C) or (1) when wscalar, db (C), each
   NULL when not needed, accumulate; w (C) as in the forward; part (row_parts(N), 3, C) is
   scratch: the weight gradients' partial sums, and a row that takes dx when there is none (one
   loop computes all three). */
static void rownorm_backward_kernel(float *dx, float *dw, float *db, float *part, const float *dy,
                                    const float *x, const float *w, bool wscalar, const float *st,
                                    int N, int C, int k, bool center) {
    int P = row_parts(N), rows = (N + P - 1) / P, nb = block_rows(C);
    MT_PARALLEL_FOR((size_t)N * C >= MT_PAR_MIN, for (int p = 0; p < P; p++) {
        float *pw = part + (size_t)p * 3 * C, *pb = pw + C;
        memset(pw, 0, 2 * C * sizeof(float));
        int r1 = (p + 1) * rows < N ? (p + 1) * rows : N;
        for (int r0 = p * rows; r0 < r1; r0 += nb) {
            row_block b;
            block_at(&b, r0, r1, nb, C, x, dy, dx, st);
            if (dx) {
                mt_v8 sg, sgx;
                block_dots(&b, w, C, &sg, &sgx);
                b.c0 = center ? b.s * sg / (float)C : (mt_v8){0};
                b.c1 = b.q * b.s * sgx;
            }
            block_backward(&b, w, pb + C, pw, pb, 0, k, true);
            block_backward(&b, w, pb + C, pw, pb, k, C, false);
        }
    });
    if (!dw && !db) return;
    for (int p = 1; p < P; p++) /* part 0 += part p, in part order */
#pragma omp simd
        for (int i = 0; i < 2 * C; i++) part[i] += part[(size_t)p * 3 * C + i];
    float tw = 0;
    for (int i = 0; i < C; i++) {
        if (dw && !wscalar) dw[i] += part[i];
        tw += part[i];
        if (db) db[i] += part[C + i];
    }
    if (dw && wscalar) dw[0] += tw;
}

/* node: in = {x, w, b}; i[0] N, i[1] C, i[2] k, i[3] mode, i[4] w is a scalar; f[0] eps;
   saved[0] the row statistics (N, 3), saved[1] the weight as (C) when it is not. */
static void rownorm_forward(mt_node *n) {
    const mt_tensor *w = n->in[1], *b = n->in[2];
    int C = n->i[1];
    const float *wc = w && !n->i[4] ? w->data : n->saved[1];
    for (int i = 0; wc == n->saved[1] && i < C; i++) n->saved[1][i] = w ? w->data[0] : 1.0f;
    rownorm_forward_kernel(n->out->data, n->saved[0], n->in[0]->data, wc, b ? b->data : NULL,
                           n->i[0], C, n->i[2], (row_mode)n->i[3], n->f[0]);
}

static void rownorm_backward(mt_node *n) {
    mt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    int N = n->i[0], C = n->i[1];
    float *dw = w ? w->grad : NULL, *db = b ? b->grad : NULL;
    float *part = mt_arena_floats(n->ctx, (size_t)row_parts(N) * 3 * C);
    rownorm_backward_kernel(x->grad, dw, db, part, n->out->grad, x->data,
                            w && !n->i[4] ? w->data : n->saved[1], n->i[4], n->saved[0], N, C,
                            n->i[2], n->i[3] == ROW_LN);
}

static const mt_op OP_LAYERNORM = {.name = "layernorm",
                                   .forward = rownorm_forward,
                                   .backward = rownorm_backward};
static const mt_op OP_RMSNORM = {.name = "rmsnorm",
                                 .forward = rownorm_forward,
                                 .backward = rownorm_backward};
static const mt_op OP_PRMSNORM = {.name = "prmsnorm",
                                  .forward = rownorm_forward,
                                  .backward = rownorm_backward};
static const mt_op OP_SCALENORM = {.name = "scalenorm",
                                   .forward = rownorm_forward,
                                   .backward = rownorm_backward};

static mt_tensor *rownorm(mt_ctx *c, const mt_op *op, mt_tensor *x, mt_tensor *w, mt_tensor *b,
                          int k, row_mode mode, float eps) {
    char sx[64], sw[64];
    int C = mt_cols(x);
    bool wscalar = mode == ROW_SCALE;
    MT_ASSERT(!w || (w->ndim == 1 && w->shape[0] == (wscalar ? 1 : C)),
              "%s: weight %s for rows of %d; expected (%d)", op->name, mt_shape_str(w, sw, 64), C,
              wscalar ? 1 : C);
    MT_ASSERT(!b || (b->ndim == 1 && b->shape[0] == C), "%s: bias %s for x %s", op->name,
              mt_shape_str(b, sw, 64), mt_shape_str(x, sx, 64));
    MT_ASSERT(eps >= 0, "%s: eps %g < 0", op->name, eps);
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, op, out, 3, (mt_tensor *[]){x, w, b});
    int args[] = {mt_rows(x), C, k, mode, wscalar};
    for (int i = 0; i < 5; i++) n->i[i] = args[i];
    n->f[0] = eps;
    n->saved[0] = mt_arena_floats(c, 3 * (size_t)mt_rows(x));
    n->saved[1] = w && !wscalar ? NULL : mt_arena_floats(c, (size_t)C);
    mt_node_run(c, n);
    return out;
}

mt_tensor *mt_layernorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float eps) {
    return rownorm(c, &OP_LAYERNORM, x, w, b, mt_cols(x), ROW_LN, eps);
}

mt_tensor *mt_rmsnorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float eps,
                      mt_rms_form form) {
    return rownorm(c, &OP_RMSNORM, x, w, b, mt_cols(x),
                   form == MT_RMS_PAPER ? ROW_RMS_PAPER : ROW_RMS, eps);
}

int mt_prms_k(int C, float p) {
    int k = (int)floor((double)C * p);
    return k < 1 ? 1 : k > C ? C : k;
}

mt_tensor *mt_prmsnorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float p, float eps,
                       mt_rms_form form) {
    MT_ASSERT(p > 0 && p <= 1, "prmsnorm: p = %g outside (0, 1]", p);
    return rownorm(c, &OP_PRMSNORM, x, w, b, mt_prms_k(mt_cols(x), p),
                   form == MT_RMS_PAPER ? ROW_RMS_PAPER : ROW_RMS, eps);
}

mt_tensor *mt_scalenorm(mt_ctx *c, mt_tensor *x, mt_tensor *g, float eps) {
    return rownorm(c, &OP_SCALENORM, x, g, NULL, mt_cols(x), ROW_SCALE, eps);
}
