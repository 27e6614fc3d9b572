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

#include "nn.h"

typedef enum { ROW_LN, ROW_RMS, ROW_RMS_PAPER, ROW_SCALE } row_mode;

/* Fixed partition of the rows for the weight gradients: partial sums per part, then summed in
   part order, so the bits do not depend on the thread count. */
static int row_parts(int N) { return N < 64 ? 1 : 64; }

static void row_stats(const float *x, int C, int k, row_mode mode, float eps, float *st) {
    float mu = 0, s, q;
    if (mode == ROW_LN) { /* two passes over the row (in L1), the first shifted by x_0: the
                             mean of 1e3 + small noise keeps the noise's digits */
        float sum = 0, v = 0, x0 = x[0];
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < C; i++) sum += x[i] - x0;
        mu = x0 + sum / C;
#pragma omp simd reduction(+ : v)
        for (int i = 0; i < C; i++) v += (x[i] - mu) * (x[i] - mu);
        s = 1.0f / sqrtf(v / C + eps);
        q = s / C;
    } else {
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < k; i++) ss += x[i] * x[i];
        if (mode == ROW_RMS) {
            s = 1.0f / sqrtf(ss / k + eps);
            q = s / k;
        } else if (mode == ROW_RMS_PAPER) {
            float rms = sqrtf(ss / k);
            s = 1.0f / (rms + eps);
            q = rms > 0 ? 1.0f / (k * rms) : 0.0f;
        } else {
            float norm = sqrtf(ss);
            s = 1.0f / fmaxf(norm, eps);
            q = norm > eps ? s : 0.0f;
        }
    }
    st[0] = mu, st[1] = s, st[2] = q;
}

/* y (N, C), st (N, 3) = (mu, s, q) per row; x (N, C); w (C) (ones when there is no weight, g
   repeated for ScaleNorm); b (C) or NULL. */
static void rownorm_forward_kernel(float *y, float *st, const float *x, const float *w,
                                   const float *b, int N, int C, int k, row_mode mode, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= MT_PAR_MIN)
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C;
        float *yr = y + (size_t)r * C, *sr = st + 3 * (size_t)r;
        row_stats(xr, C, k, mode, eps, sr);
        float mu = sr[0], s = sr[1];
#pragma omp simd
        for (int i = 0; i < C; i++) yr[i] = (xr[i] - mu) * s * w[i] + (b ? b[i] : 0.0f);
    }
}

/* The derivative is in the file comment. dx (N, C), dw (C) or (1) when wscalar, db (C), each
   NULL when not needed, accumulate; w (C) as in the forward; part (row_parts(N), 2, C) is
   scratch for the weight gradients. */
static void rownorm_backward_kernel(float *dx, float *dw, float *db, float *part,
                                    const float *dy, const float *x, const float *w,
                                    bool wscalar, const float *st, int N, int C, int k,
                                    bool center) {
    int P = row_parts(N), rows = (N + P - 1) / P;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= MT_PAR_MIN)
    for (int p = 0; p < P; p++) {
        float *pw = part ? part + (size_t)p * 2 * C : NULL, *pb = pw ? pw + C : NULL;
        for (int i = 0; pw && i < 2 * C; i++) pw[i] = 0;
        int r1 = (p + 1) * rows < N ? (p + 1) * rows : N;
        for (int r = p * rows; r < r1; r++) {
            const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
            float mu = st[3 * r], s = st[3 * r + 1], q = st[3 * r + 2];
            if (dx) {
                float *dxr = dx + (size_t)r * C;
                float sg = 0, sgx = 0;
                if (center) {
#pragma omp simd reduction(+ : sg)
                    for (int i = 0; i < C; i++) sg += dyr[i] * w[i];
                }
#pragma omp simd reduction(+ : sgx)
                for (int i = 0; i < C; i++) sgx += dyr[i] * w[i] * (xr[i] - mu) * s;
                float c0 = s * sg / C, c1 = q * sgx;
#pragma omp simd
                for (int i = 0; i < k; i++)
                    dxr[i] += s * dyr[i] * w[i] - c0 - (xr[i] - mu) * s * c1;
#pragma omp simd
                for (int i = k; i < C; i++) dxr[i] += s * dyr[i] * w[i] - c0;
            }
            if (dw || db) {
#pragma omp simd
                for (int i = 0; i < C; i++) {
                    pw[i] += dyr[i] * (xr[i] - mu) * s;
                    pb[i] += dyr[i];
                }
            }
        }
    }
    if (!dw && !db) return;
    float tw = 0;
    for (int i = 0; i < C; i++) {
        float sw = 0, sb = 0;
        for (int p = 0; p < P; p++) {
            sw += part[(size_t)p * 2 * C + i];
            sb += part[(size_t)p * 2 * C + C + i];
        }
        if (dw && !wscalar) dw[i] += sw;
        tw += sw;
        if (db) db[i] += sb;
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
    float *part = dw || db ? mt_arena_floats(n->ctx, (size_t)row_parts(N) * 2 * C) : NULL;
    rownorm_backward_kernel(x->grad, dw, db, part, n->out->grad, x->data,
                            w && !n->i[4] ? w->data : n->saved[1], n->i[4], n->saved[0], N, C,
                            n->i[2], n->i[3] == ROW_LN);
}

static const mt_op OP_LAYERNORM = {"layernorm", rownorm_forward, rownorm_backward};
static const mt_op OP_RMSNORM = {"rmsnorm", rownorm_forward, rownorm_backward};
static const mt_op OP_PRMSNORM = {"prmsnorm", rownorm_forward, rownorm_backward};
static const mt_op OP_SCALENORM = {"scalenorm", rownorm_forward, rownorm_backward};

static mt_tensor *rownorm(mt_ctx *c, const mt_op *op, mt_tensor *x, mt_tensor *w, mt_tensor *b,
                          int k, row_mode mode, float eps) {
    char sx[64], sw[64];
    int C = mt_cols(x);
    bool wscalar = mode == ROW_SCALE;
    MT_ASSERT(!w || (w->ndim == 1 && w->shape[0] == (wscalar ? 1 : C)),
              "%s: weight %s for rows of %d; expected (%d)", op->name, mt_shape_str(w, sw, 64),
              C, wscalar ? 1 : C);
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
