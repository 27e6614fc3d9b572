/* Reductions: sum, mean, softmax over the last dim, fused cross-entropy.
   N rows, V (or C) the last dim. Every reduction has a fixed order whatever the thread count:
   blocks of a fixed size summed in block order, one row per thread. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tensor.h"
#include "vmath.h"

/* ---- sum and mean of all elements: y = f * sum_i x_i, f = 1 (sum) or 1/n (mean) ------------ */

#define SUM_BLOCK 4096

/* sum_i x_i in double: blocks of SUM_BLOCK in parallel into part[], then the parts in order. */
static double sum_kernel(const float *x, size_t n, double *part) {
    long nb = (long)((n + SUM_BLOCK - 1) / SUM_BLOCK);
    MT_PARALLEL_FOR(n >= MT_PAR_MIN, for (long b = 0; b < nb; b++) {
        size_t lo = (size_t)b * SUM_BLOCK, hi = lo + SUM_BLOCK < n ? lo + SUM_BLOCK : n;
        double s = 0;
        _Pragma("omp simd reduction(+ : s)")
        for (size_t i = lo; i < hi; i++) s += x[i];
        part[b] = s;
    });
    double s = 0;
    for (long b = 0; b < nb; b++) s += part[b];
    return s;
}

static void sum_forward(mt_node *n) {
    n->out->data[0] = (float)(n->f[0] * sum_kernel(n->in[0]->data, n->in[0]->n, n->p));
}

/* dx_i += f * dy */
static void sum_backward(mt_node *n) {
    float *dx = n->in[0]->grad, g = n->f[0] * n->out->grad[0];
    size_t N = n->in[0]->n;
    if (!dx) return;
    MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) dx[i] += g;);
}

static const mt_op OP_SUM = {.name = "sum", .forward = sum_forward, .backward = sum_backward};
static const mt_op OP_MEAN = {.name = "mean", .forward = sum_forward, .backward = sum_backward};

static mt_tensor *reduce_all(mt_ctx *c, const mt_op *op, mt_tensor *x, float f) {
    mt_tensor *out = mt_tensor_new(c, 1, (int[]){1});
    mt_node *n = mt_node_new(c, op, out, 1, (mt_tensor *[]){x});
    n->f[0] = f;
    n->p = mt_arena_alloc(c, (x->n + SUM_BLOCK - 1) / SUM_BLOCK * sizeof(double));
    mt_node_run(c, n);
    return out;
}

mt_tensor *mt_sum(mt_ctx *c, mt_tensor *x) { return reduce_all(c, &OP_SUM, x, 1.0f); }
mt_tensor *mt_mean(mt_ctx *c, mt_tensor *x) { return reduce_all(c, &OP_MEAN, x, 1.0f / x->n); }

/* ---- softmax over the last dim: y_j = exp(x_j - max x) / sum_k exp(x_k - max x) ------------ */

static void softmax_forward(mt_node *n) {
    const float *x = n->in[0]->data;
    float *y = n->out->data;
    long N = mt_rows(n->out);
    int C = mt_cols(n->out);
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (long r = 0; r < N; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C, mx = mt_vmaxf(xr, C), s = 0;
        _Pragma("omp simd reduction(+ : s)")
        for (int j = 0; j < C; j++) s += yr[j] = mt_vexpf(xr[j] - mx);
        float inv = 1.0f / s;
        _Pragma("omp simd")
        for (int j = 0; j < C; j++) yr[j] *= inv;
    });
}

/* dx_j += y_j (dy_j - sum_k dy_k y_k) */
static void softmax_backward(mt_node *n) {
    const float *y = n->out->data, *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    long N = mt_rows(n->out);
    int C = mt_cols(n->out);
    if (!dx) return;
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (long r = 0; r < N; r++) {
        const float *yr = y + r * C, *dyr = dy + r * C;
        float *dxr = dx + r * C, d = 0;
        _Pragma("omp simd reduction(+ : d)")
        for (int j = 0; j < C; j++) d += dyr[j] * yr[j];
        _Pragma("omp simd")
        for (int j = 0; j < C; j++) dxr[j] += yr[j] * (dyr[j] - d);
    });
}

static const mt_op OP_SOFTMAX = {.name = "softmax",
                                 .forward = softmax_forward,
                                 .backward = softmax_backward};

mt_tensor *mt_softmax(mt_ctx *c, mt_tensor *x) {
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node_run(c, mt_node_new(c, &OP_SOFTMAX, out, 1, (mt_tensor *[]){x}));
    return out;
}

/* ---- cross-entropy: fused log-softmax + NLL with label smoothing, mean over the rows whose
 * target is not ignored (torch's F.cross_entropy(x, t, ignore_index, label_smoothing=eps)) ----
 * Row r's target distribution is (1 - eps) onehot(t_r) + eps / V, so its loss is
 *   l_r = (1 - eps) nll_r + eps smooth_r,   nll_r = lse_r - x_{r,t_r},
 *   smooth_r = (1/V) sum_j (lse_r - x_rj) = log s_r - (1/V) sum_j (x_rj - max_r),
 *   lse_r = max_r + log s_r,  s_r = sum_j exp(x_rj - max_r)
 * (smooth_r from the shifted logits: no cancellation of lse_r against the logits' mean),
 * loss = (1/M) sum_{r: t_r != ignore} l_r, M the number of such rows (M = 0 gives 0/0 = NaN, as
 * torch). eps = 0 is the plain cross-entropy to the bit (1 nll_r + 0 smooth_r, smooth_r = 0 then).
 * The z-loss z (PaLM, Chowdhery et al. 2022) adds z lse_r^2 to l_r (z = 0: nothing computed).
 * A soft cap c > 0 (Gemma 2, arXiv 2408.00118) puts y = c tanh(x / c) for x in all of the above,
 * computed where each logit is read (loops of their own: c = 0 runs the loops it ran before);
 * max_r of y is c tanh(max_r x / c), tanh being increasing.
 * ids = targets (N), i[0] = ignore_index, f[0] = M, f[1] = eps, f[2] = z, f[3] = c, saved[0] =
 * lse (N), saved[1] = row losses. */

/* s = sum_j exp(y_j - mx) and, when eps > 0, shifted = sum_j (y_j - mx) of a row, y = x or
   capped */
static float row_sums(const float *xr, int V, float mx, float eps, float cap, float *shifted) {
    float s = 0, sh = 0;
    if (cap > 0) {
#pragma omp simd reduction(+ : s, sh)
        for (int j = 0; j < V; j++) {
            float v = mt_softcapf(xr[j], cap) - mx;
            s += mt_vexpf(v), sh += v;
        }
    } else {
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < V; j++) s += mt_vexpf(xr[j] - mx);
        if (eps > 0) { /* eps = 0 pays nothing for it */
#pragma omp simd reduction(+ : sh)
            for (int j = 0; j < V; j++) sh += xr[j] - mx;
        }
    }
    *shifted = sh;
    return s;
}

static void cross_entropy_forward(mt_node *n) {
    const float *x = n->in[0]->data;
    float *lse = n->saved[0], *loss = n->saved[1];
    const int *t = n->ids;
    long N = mt_rows(n->in[0]);
    int V = mt_cols(n->in[0]), ignore = n->i[0];
    float eps = n->f[1], keep = 1.0f - eps, z = n->f[2], cap = n->f[3];
    MT_PARALLEL_FOR(n->in[0]->n >= MT_PAR_MIN, for (long r = 0; r < N; r++) {
        const float *xr = x + r * V;
        float mx = mt_vmaxf(xr, V), shifted, smooth = 0;
        if (cap > 0) mx = mt_softcapf(mx, cap);
        float s = row_sums(xr, V, mx, eps, cap, &shifted);
        lse[r] = mx + logf(s);
        if (eps > 0) smooth = logf(s) - shifted / (float)V;
        if (t[r] == ignore) {
            loss[r] = 0.0f;
            continue;
        }
        float xt = cap > 0 ? mt_softcapf(xr[t[r]], cap) : xr[t[r]];
        loss[r] = keep * (lse[r] - xt) + eps * smooth;
        if (z > 0) loss[r] += z * lse[r] * lse[r];
    });
    double s = 0;
    for (long r = 0; r < N; r++) s += loss[r];
    n->out->data[0] = (float)(s / n->f[0]);
}

/* The soft cap's row: dl_r/dy_rj as below times dy_rj/dx_rj = 1 - tanh(x_rj / c)^2, one pass
   (the target's factor taken before it: in place, x_rt is gone after it). */
static void capped_row_backward(const float *xr, float *dxr, int V, int t, float l, float g,
                                float uniform, float z, float cap, bool in_place) {
    float dt, gp = g * (1 + 2 * z * l);
    mt_softcap_fd(xr[t], cap, &dt);
    if (in_place) {
#pragma omp simd
        for (int j = 0; j < V; j++) {
            float d, y = mt_softcap_fd(xr[j], cap, &d);
            dxr[j] = (gp * mt_vexpf(y - l) - uniform) * d;
        }
    } else {
#pragma omp simd
        for (int j = 0; j < V; j++) {
            float d, y = mt_softcap_fd(xr[j], cap, &d);
            dxr[j] += (gp * mt_vexpf(y - l) - uniform) * d;
        }
    }
    dxr[t] -= (g - uniform * (float)V) * dt;
}

/* dl_r/dx_rj = softmax(x_r)_j - (1 - eps) [j == t_r] - eps / V + 2 z lse_r softmax(x_r)_j,
   softmax = exp(x - lse) (d lse_r / dx_rj = softmax_j): dx_rj += (dy / M) dl_r/dx_rj for the rows
   not ignored. In place (grad_in_place: dx is x; z = 0 only) each row is written instead:
   the bits of a sum onto zeros. With the soft cap: capped_row_backward. */
static void cross_entropy_backward(mt_node *n) {
    const float *x = n->in[0]->data, *lse = n->saved[0];
    float *dx = n->in[0]->grad, g = n->out->grad[0] / n->f[0];
    const int *t = n->ids;
    long N = mt_rows(n->in[0]);
    int V = mt_cols(n->in[0]), ignore = n->i[0];
    float eps = n->f[1], uniform = g * (eps / (float)V), z = n->f[2], cap = n->f[3];
    bool in_place = dx == x;
    if (!dx) return;
    MT_PARALLEL_FOR(n->in[0]->n >= MT_PAR_MIN, for (long r = 0; r < N; r++) {
        const float *xr = x + r * V;
        float *dxr = dx + r * V, l = lse[r];
        if (t[r] == ignore) {
            if (in_place) memset(dxr, 0, (size_t)V * sizeof *dxr);
            continue;
        }
        if (cap > 0) {
            capped_row_backward(xr, dxr, V, t[r], l, g, uniform, z, cap, in_place);
            continue;
        }
        if (in_place) {
            _Pragma("omp simd")
            for (int j = 0; j < V; j++) dxr[j] = g * mt_vexpf(xr[j] - l);
        } else {
            _Pragma("omp simd")
            for (int j = 0; j < V; j++) dxr[j] += g * mt_vexpf(xr[j] - l);
        }
        if (eps > 0) { /* a pass of its own: the loop above stays as fast at eps = 0 */
            _Pragma("omp simd")
            for (int j = 0; j < V; j++) dxr[j] -= uniform;
        }
        /* g (1 - eps) as g - V uniform: the row sums to 0 as closely as it can (V = 1: exactly
           0, as torch) */
        dxr[t[r]] -= g - uniform * (float)V;
        if (z > 0) { /* after the target's -g: softmax - onehot first, as exact as without z */
            float gz = g * 2 * z * l;
            _Pragma("omp simd")
            for (int j = 0; j < V; j++) dxr[j] += gz * mt_vexpf(xr[j] - l);
        }
    });
}

static const mt_op OP_CROSS_ENTROPY = {.name = "cross_entropy",
                                       .forward = cross_entropy_forward,
                                       .backward = cross_entropy_backward};

mt_tensor *mt_cross_entropy(mt_ctx *c, mt_tensor *logits, const int *targets, int ignore_index,
                            mt_ce_opts opts) {
    int N = mt_rows(logits), V = mt_cols(logits), M = 0;
    MT_ASSERT(opts.label_smoothing >= 0 && opts.label_smoothing <= 1 && opts.z_loss >= 0 &&
                  opts.softcap >= 0 && isfinite(opts.softcap),
              "cross_entropy: label smoothing %g is outside [0, 1], z-loss %g < 0 or soft cap %g "
              "not a finite number >= 0",
              opts.label_smoothing, opts.z_loss, opts.softcap);
    int *t = mt_arena_alloc(c, (size_t)N * sizeof(int));
    for (int r = 0; r < N; r++) {
        MT_ASSERT(targets[r] == ignore_index || (targets[r] >= 0 && targets[r] < V),
                  "cross_entropy: target %d of row %d is outside [0, %d) and is not the ignore "
                  "index %d",
                  targets[r], r, V, ignore_index);
        t[r] = targets[r];
        M += t[r] != ignore_index;
    }
    mt_tensor *out = mt_tensor_new(c, 1, (int[]){1});
    mt_node *n = mt_node_new(c, &OP_CROSS_ENTROPY, out, 1, (mt_tensor *[]){logits});
    n->ids = t;
    n->i[0] = ignore_index;
    n->f[0] = (float)M;
    n->f[1] = opts.label_smoothing;
    n->f[2] = opts.z_loss;
    n->f[3] = opts.softcap;
    n->saved[0] = mt_arena_floats(c, (size_t)N);
    n->saved[1] = mt_arena_floats(c, (size_t)N);
    /* the logits' gradient over the logits, when nothing else reads them in the backward (the
       z-loss term reads them after the rest of the row is written) */
    n->grad_in_place = opts.z_loss == 0 && c->tape && c->tape->out == logits &&
                       c->tape->op->backward_skips_out;
    mt_node_run(c, n);
    return out;
}
