/* Norms whose statistics cross other axes than the channels: BatchNorm, InstanceNorm, GroupNorm.
 * x is (N, C, *spatial) channels-first, as torch's BatchNorm1d/2d, InstanceNorm1d/2d and
 * GroupNorm take it, or (N, *spatial, C) channels-last (tokens (B, T, C)); S = prod(spatial),
 * possibly 1. One kernel reads both through the strides of sample, channel and spatial index:
 *   x[n, c, s] = x[n sN + c sC + s sS],  channels-first sN = C S, sC = S, sS = 1;
 *                                        channels-last  sN = S C, sC = 1, sS = C.
 * Statistics (biased variance, eps inside the sqrt):
 *   BatchNorm     per channel over (n, s): batch statistics in training, and running_mean,
 *                 running_var updated with momentum (r = (1 - m) r + m batch, var UNBIASED);
 *                 the running statistics in eval (torch, BatchNorm1d)
 *   InstanceNorm  per (n, c) over s (torch, InstanceNorm1d; no running statistics)
 *   GroupNorm     per (n, g) over (c in group g, s); G groups of C/G channels (Wu & He 2018)
 * InstanceNorm is GroupNorm with G = C; BatchNorm has G = C and takes the statistics over the
 * whole batch. Either way y = (x - mu) rstd w_c + b_c.
 *
 * Numerics: the statistics of a block (a sample; for BatchNorm a run of samples of about 256 KB)
 * are two passes over it while it is in cache, the first shifted by the block's first element
 * of the group, so 1e3 + small noise keeps its variance; BatchNorm merges the blocks in order
 * (Chan et al.: n, mean, M2 per block), so no reduction depends on the thread count. */
#include <math.h>
#include <stdio.h>

#include "../tensor/simd.h"
#include "nn.h"

typedef struct {
    int N, C, S, G;  /* samples, channels, spatial size, groups */
    long sN, sC, sS; /* strides */
    bool batch;      /* BatchNorm: statistics over the whole batch */
} layout;

/* Parts: fixed runs of samples, one per task, so partial sums merge in the same order whatever
   the thread count. For BatchNorm a part is also the block of the statistics. */
static int part_len(const layout *L) {
    long sample = (long)L->C * L->S;
    if (L->batch) return sample >= 65536 ? 1 : (int)(65536 / sample);
    return (L->N + 63) / 64;
}
static int n_parts(const layout *L) { return (L->N + part_len(L) - 1) / part_len(L); }

/* ---- per-sample helpers over channels; the loop order follows the unit stride --------------- */

/* sum_i (x_i - m)^p, p = 1 or 2, and sum_i a_i b_i (b NULL: ones): in the 8 lanes of a vector,
   then the tail and the lanes in order. Vectorised without reassociation and fast for the short
   runs of a group (OpenMP simd reductions spill their lanes for a short tail). */
static float lane_sum(const float *x, int n, float m, int p) {
    mt_v8 acc = {0};
    float s = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        mt_v8 d = mt_v8_load(x + i) - m;
        acc += p == 1 ? d : d * d;
    }
    for (; i < n; i++) s += p == 1 ? x[i] - m : (x[i] - m) * (x[i] - m);
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

static float lane_dot(const float *a, const float *b, int n) {
    if (!b) return lane_sum(a, n, 0.0f, 1);
    mt_v8 acc = {0};
    float s = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8) acc += mt_v8_load(a + i) * mt_v8_load(b + i);
    for (; i < n; i++) s += a[i] * b[i];
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

/* acc[c] += sum_s (x - m[c]), or sum_s (x - m[c])^2 when sq; x at one sample. */
static void chan_sums(float *acc, const float *x, const float *m, bool sq, const layout *L) {
    int C = L->C, S = L->S;
    if (L->sC == 1) {
        for (int s = 0; s < S; s++) {
            const float *xs = x + s * L->sS;
            if (sq) {
#pragma omp simd
                for (int c = 0; c < C; c++) acc[c] += (xs[c] - m[c]) * (xs[c] - m[c]);
            } else {
#pragma omp simd
                for (int c = 0; c < C; c++) acc[c] += xs[c] - m[c];
            }
        }
    } else {
        for (int c = 0; c < C; c++) {
            const float *xc = x + c * L->sC;
            float a = 0, mc = m[c];
            if (sq) {
#pragma omp simd reduction(+ : a)
                for (int s = 0; s < S; s++) a += (xc[s] - mc) * (xc[s] - mc);
            } else {
#pragma omp simd reduction(+ : a)
                for (int s = 0; s < S; s++) a += xc[s] - mc;
            }
            acc[c] += a;
        }
    }
}

/* y = (x - mu[c]) a[c] + b[c] (b may be NULL), one sample. */
static void chan_apply(float *y, const float *x, const float *mu, const float *a, const float *b,
                       const layout *L) {
    int C = L->C, S = L->S;
    if (L->sC == 1) {
        for (int s = 0; s < S; s++) {
            const float *xs = x + s * L->sS;
            float *ys = y + s * L->sS;
#pragma omp simd
            for (int c = 0; c < C; c++) ys[c] = (xs[c] - mu[c]) * a[c] + (b ? b[c] : 0.0f);
        }
    } else {
        for (int c = 0; c < C; c++) {
            const float *xc = x + c * L->sC;
            float *yc = y + c * L->sC, mc = mu[c], ac = a[c], bc = b ? b[c] : 0.0f;
#pragma omp simd
            for (int s = 0; s < S; s++) yc[s] = (xc[s] - mc) * ac + bc;
        }
    }
}

/* d1[c] += sum_s dy,  d2[c] += sum_s dy (x - mu[c]) r[c], one sample. */
static void chan_grad_sums(float *d1, float *d2, const float *x, const float *dy, const float *mu,
                           const float *r, const layout *L) {
    int C = L->C, S = L->S;
    if (L->sC == 1) {
        for (int s = 0; s < S; s++) {
            const float *xs = x + s * L->sS, *ds = dy + s * L->sS;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                d1[c] += ds[c];
                d2[c] += ds[c] * (xs[c] - mu[c]) * r[c];
            }
        }
    } else {
        for (int c = 0; c < C; c++) {
            const float *xc = x + c * L->sC, *dc = dy + c * L->sC;
            float a = 0, b = 0, mc = mu[c], rc = r[c];
#pragma omp simd reduction(+ : a, b)
            for (int s = 0; s < S; s++) {
                a += dc[s];
                b += dc[s] * (xc[s] - mc) * rc;
            }
            d1[c] += a;
            d2[c] += b;
        }
    }
}

/* dx += al[c] dy + be[c] (x - mu[c]) + ga[c], one sample. */
static void chan_dx(float *dx, const float *x, const float *dy, const float *mu, const float *al,
                    const float *be, const float *ga, const layout *L) {
    int C = L->C, S = L->S;
    if (L->sC == 1) {
        for (int s = 0; s < S; s++) {
            const float *xs = x + s * L->sS, *ds = dy + s * L->sS;
            float *dxs = dx + s * L->sS;
#pragma omp simd
            for (int c = 0; c < C; c++) dxs[c] += al[c] * ds[c] + be[c] * (xs[c] - mu[c]) + ga[c];
        }
    } else {
        for (int c = 0; c < C; c++) {
            const float *xc = x + c * L->sC, *dc = dy + c * L->sC;
            float *dxc = dx + c * L->sC, a = al[c], b = be[c], g = ga[c], mc = mu[c];
#pragma omp simd
            for (int s = 0; s < S; s++) dxc[s] += a * dc[s] + b * (xc[s] - mc) + g;
        }
    }
}

/* dst[c] = a[g] for the channels c of group g: a per-group value per channel */
static void expand(float *dst, const float *a, int G, int cpg) {
    for (int g = 0; g < G; g++) {
        float v = a[g];
#pragma omp simd
        for (int c = g * cpg; c < (g + 1) * cpg; c++) dst[c] = v;
    }
}

/* Group statistics of nb consecutive samples from x: mean[g] and M2[g] = sum (x - mean)^2,
   two passes, the first shifted by the group's first element. acc, m: (C) scratch. A group of
   one channels-first sample is contiguous and reduced directly; otherwise per-channel sums in
   the order of the unit stride are added up per group. */
static void block_stats(float *mean, float *m2, float *acc, float *m, const float *x, int nb,
                        const layout *L) {
    int C = L->C, cpg = C / L->G;
    float cnt = (float)nb * cpg * L->S;
    if (nb == 1 && L->sS == 1) { /* channels-first: a group of one sample is one run */
        for (int g = 0; g < L->G; g++) {
            const float *xg = x + (long)g * cpg * L->S;
            mean[g] = xg[0] + lane_sum(xg, cpg * L->S, xg[0], 1) / cnt;
            m2[g] = lane_sum(xg, cpg * L->S, mean[g], 2);
        }
        return;
    }
    for (int g = 0; g < L->G; g++)
        for (int c = g * cpg; c < (g + 1) * cpg; c++) m[c] = x[g * cpg * L->sC], acc[c] = 0;
    for (int n = 0; n < nb; n++) chan_sums(acc, x + n * L->sN, m, false, L);
    for (int g = 0; g < L->G; g++)
        mean[g] = m[g * cpg] + lane_sum(acc + g * cpg, cpg, 0.0f, 1) / cnt;
    expand(m, mean, L->G, cpg);
    for (int c = 0; c < C; c++) acc[c] = 0;
    for (int n = 0; n < nb; n++) chan_sums(acc, x + n * L->sN, m, true, L);
    for (int g = 0; g < L->G; g++) m2[g] = lane_sum(acc + g * cpg, cpg, 0.0f, 1);
}

/* ---- forward --------------------------------------------------------------------------------
 * y (x's shape); mean, rstd: (N, G) per sample, (C) for BatchNorm; x; w, b (C) or NULL;
 * rm, rv: running statistics (C) or NULL; training: batch statistics (else rm, rv);
 * scratch: (n_parts, 4, C). */
static void batchnorm_like_forward_kernel(float *y, float *mean, float *rstd, const float *x,
                                          const float *w, const float *b, float *rm, float *rv,
                                          bool training, float momentum, float eps, float *scratch,
                                          const layout *L) {
    int C = L->C, G = L->G, cpg = C / G, P = n_parts(L), len = part_len(L);
    size_t total = (size_t)L->N * C * L->S;
    if (L->batch && training) { /* block statistics, merged in order in double */
        MT_PARALLEL_FOR(total >= MT_PAR_MIN, for (int p = 0; p < P; p++) {
            float *s = scratch + (size_t)p * 4 * C;
            int nb = (p + 1) * len < L->N ? len : L->N - p * len;
            block_stats(s, s + C, s + 2 * C, s + 3 * C, x + (size_t)p * len * L->sN, nb, L);
        });
        double K = (double)L->N * L->S;
        for (int c = 0; c < C; c++) {
            double n = 0, mu = 0, m2 = 0;
            for (int p = 0; p < P; p++) {
                const float *s = scratch + (size_t)p * 4 * C;
                double nb = (double)((p + 1) * len < L->N ? len : L->N - p * len) * L->S;
                double d = s[c] - mu;
                mu += d * nb / (n + nb);
                m2 += s[C + c] + d * d * n * nb / (n + nb);
                n += nb;
            }
            mean[c] = (float)mu;
            rstd[c] = (float)(1.0 / sqrt(m2 / K + eps));
            if (rm) rm[c] = (float)((1 - momentum) * rm[c] + momentum * mu);
            if (rv) rv[c] = (float)((1 - momentum) * rv[c] + momentum * m2 / (K - 1));
        }
    } else if (L->batch) {
        for (int c = 0; c < C; c++) mean[c] = rm[c], rstd[c] = 1.0f / sqrtf(rv[c] + eps);
    }
    MT_PARALLEL_FOR(total >= MT_PAR_MIN, for (int p = 0; p < P; p++) {
        float *mc = scratch + (size_t)p * 4 * C, *ac = mc + C, *acc = mc + 2 * C, *mm = mc + 3 * C;
        int n1 = (p + 1) * len < L->N ? (p + 1) * len : L->N;
        for (int n = p * len; n < n1; n++) {
            const float *xn = x + n * L->sN;
            if (!L->batch) {
                float *mg = mean + (size_t)n * G, *rg = rstd + (size_t)n * G;
                block_stats(mg, rg, acc, mm, xn, 1, L);
                for (int g = 0; g < G; g++) rg[g] = 1.0f / sqrtf(rg[g] / ((float)cpg * L->S) + eps);
            }
            if (!L->batch || n == p * len) {
                size_t i = L->batch ? 0 : (size_t)n * G;
                expand(mc, mean + i, L->batch ? C : G, L->batch ? 1 : cpg);
                expand(ac, rstd + i, L->batch ? C : G, L->batch ? 1 : cpg);
                for (int c = 0; w && c < C; c++) ac[c] *= w[c];
            }
            chan_apply(y + n * L->sN, xn, mc, ac, b, L);
        }
    });
}

/* ---- backward -------------------------------------------------------------------------------
 * With xhat = (x - mu) rstd, gw = dy w_c and K elements per statistic, batch statistics give
 *   dx = rstd (gw - mean_K(gw) - xhat mean_K(gw xhat))
 * (d mu/dx = 1/K, d rstd/dx = -rstd^3 (x - mu)/K), the mean over the statistic's group:
 *   mean_K(gw) = sum_{c in g} w_c d1_c / K,  mean_K(gw xhat) = sum_{c in g} w_c d2_c / K,
 *   d1_c = sum dy,  d2_c = sum dy xhat  over the statistic's (n, s);
 * so per channel dx = al dy + be (x - mu) + ga with al = rstd w_c, be = -rstd^2 mean_K(gw xhat),
 * ga = -rstd mean_K(gw). With running statistics (eval) mu and rstd are constants: be = ga = 0.
 *   dw_c += sum over everything of dy xhat (the sum of d2_c),  db_c += sum of dy (of d1_c). */

/* al, be, ga (C) from one statistic's per-channel sums d1, d2 (C), w (C) or NULL, and rstd per
   group r_g (G); inv_k = 1/K. */
static void coefficients(float *al, float *be, float *ga, const float *d1, const float *d2,
                         const float *w, const float *r_g, bool training, float inv_k,
                         const layout *L) {
    int cpg = L->C / L->G;
    for (int g = 0; g < L->G; g++) {
        float r = r_g[g], s1 = lane_dot(d1 + g * cpg, w ? w + g * cpg : NULL, cpg),
              s2 = lane_dot(d2 + g * cpg, w ? w + g * cpg : NULL, cpg);
        float bg = training ? -r * r * s2 * inv_k : 0.0f, gg = training ? -r * s1 * inv_k : 0.0f;
#pragma omp simd
        for (int c = g * cpg; c < (g + 1) * cpg; c++) {
            al[c] = r * (w ? w[c] : 1.0f);
            be[c] = bg;
            ga[c] = gg;
        }
    }
}

/* dx (x's shape), dw, db (C) accumulate, each NULL when not needed; mean, rstd as the forward
   saved them; scratch: (n_parts, 9, C). */
static void batchnorm_like_backward_kernel(float *dx, float *dw, float *db, const float *dy,
                                           const float *x, const float *w, const float *mean,
                                           const float *rstd, bool training, float *scratch,
                                           const layout *L) {
    int C = L->C, G = L->G, P = n_parts(L), len = part_len(L);
    size_t total = (size_t)L->N * C * L->S;
    float inv_k = (float)(1.0 / ((double)(L->batch ? L->N : 1) * (C / G) * L->S));
    MT_PARALLEL_FOR(total >= MT_PAR_MIN, for (int p = 0; p < P; p++) {
        float *pd1 = scratch + (size_t)p * 9 * C, *pd2 = pd1 + C, *d1 = pd1 + 2 * C,
              *d2 = pd1 + 3 * C, *mc = pd1 + 4 * C, *rc = pd1 + 5 * C, *al = pd1 + 6 * C,
              *be = pd1 + 7 * C, *ga = pd1 + 8 * C;
        int n1 = (p + 1) * len < L->N ? (p + 1) * len : L->N;
        for (int c = 0; c < C; c++) pd1[c] = pd2[c] = 0;
        if (L->batch)
            for (int c = 0; c < C; c++) mc[c] = mean[c], rc[c] = rstd[c];
        for (int n = p * len; n < n1; n++) {
            const float *xn = x + n * L->sN, *dyn = dy + n * L->sN;
            if (L->batch) {
                chan_grad_sums(pd1, pd2, xn, dyn, mc, rc, L);
                continue;
            }
            expand(mc, mean + (size_t)n * G, G, C / G);
            expand(rc, rstd + (size_t)n * G, G, C / G);
            for (int c = 0; c < C; c++) d1[c] = d2[c] = 0;
            chan_grad_sums(d1, d2, xn, dyn, mc, rc, L);
            for (int c = 0; c < C; c++) pd1[c] += d1[c], pd2[c] += d2[c];
            if (dx) {
                coefficients(al, be, ga, d1, d2, w, rstd + (size_t)n * G, true, inv_k, L);
                chan_dx(dx + n * L->sN, xn, dyn, mc, al, be, ga, L);
            }
        }
    });
    /* the parts' sums in order: the weight gradients, and BatchNorm's d1, d2 */
    float *s1 = scratch + 2 * C, *s2 = scratch + 3 * C; /* part 0's per-sample scratch */
    for (int c = 0; c < C; c++) {
        float a = 0, b = 0;
        for (int p = 0; p < P; p++) {
            a += scratch[(size_t)p * 9 * C + c];
            b += scratch[(size_t)p * 9 * C + C + c];
        }
        s1[c] = a, s2[c] = b;
        if (db) db[c] += a;
        if (dw) dw[c] += b;
    }
    if (!L->batch || !dx) return;
    float *mc = scratch + 4 * C, *al = mc + 2 * C, *be = mc + 3 * C, *ga = mc + 4 * C;
    coefficients(al, be, ga, s1, s2, w, rstd, training, inv_k, L); /* mc: mean, from part 0 */
    MT_PARALLEL_FOR(total >= MT_PAR_MIN, for (int n = 0; n < L->N; n++)
                        chan_dx(dx + n * L->sN, x + n * L->sN, dy + n * L->sN, mc, al, be, ga, L););
}

/* ---- nodes, op records and builders -----------------------------------------------------------
 * in = {x, w, b, running_mean, running_var}; i[0..3] N C S G, i[4] channels_last, i[5] batch,
 * i[6] training; f[0] eps, f[1] momentum; saved[0] mean, saved[1] rstd. */
static layout node_layout(const mt_node *n) {
    layout L = {n->i[0], n->i[1], n->i[2], n->i[3], 0, 0, 0, n->i[5]};
    L.sN = (long)L.C * L.S;
    L.sC = n->i[4] ? 1 : L.S;
    L.sS = n->i[4] ? L.C : 1;
    return L;
}

static float *data_or_null(mt_tensor *t) { return t ? t->data : NULL; }

static void batchnorm_like_forward(mt_node *n) {
    layout L = node_layout(n);
    float *scratch = mt_arena_floats(n->ctx, (size_t)n_parts(&L) * 4 * L.C);
    /* a recomputation (mt_recompute) does not update the running statistics again */
    bool update = !(n->i[6] && n->ctx->replaying);
    batchnorm_like_forward_kernel(n->out->data, n->saved[0], n->saved[1], n->in[0]->data,
                                  data_or_null(n->in[1]), data_or_null(n->in[2]),
                                  update ? data_or_null(n->in[3]) : NULL,
                                  update ? data_or_null(n->in[4]) : NULL, n->i[6], n->f[1], n->f[0],
                                  scratch, &L);
}

static void batchnorm_like_backward(mt_node *n) {
    layout L = node_layout(n);
    mt_tensor *w = n->in[1], *b = n->in[2];
    float *scratch = mt_arena_floats(n->ctx, (size_t)n_parts(&L) * 9 * L.C);
    batchnorm_like_backward_kernel(n->in[0]->grad, w ? w->grad : NULL, b ? b->grad : NULL,
                                   n->out->grad, n->in[0]->data, data_or_null(w), n->saved[0],
                                   n->saved[1], n->i[6], scratch, &L);
}

static const mt_op OP_BATCHNORM = {.name = "batchnorm",
                                   .forward = batchnorm_like_forward,
                                   .backward = batchnorm_like_backward};
static const mt_op OP_INSTANCENORM = {.name = "instancenorm",
                                      .forward = batchnorm_like_forward,
                                      .backward = batchnorm_like_backward};
static const mt_op OP_GROUPNORM = {.name = "groupnorm",
                                   .forward = batchnorm_like_forward,
                                   .backward = batchnorm_like_backward};

static mt_tensor *batchnorm_like(mt_ctx *c, const mt_op *op, mt_tensor *x, mt_tensor *w,
                                 mt_tensor *b, mt_tensor *rm, mt_tensor *rv, int G, bool batch,
                                 bool training, float momentum, float eps, bool channels_last) {
    char sx[64], sw[64];
    MT_ASSERT(x->ndim >= 2, "%s: x %s needs a sample and a channel dim", op->name,
              mt_shape_str(x, sx, 64));
    int N = x->shape[0], C = channels_last ? x->shape[x->ndim - 1] : x->shape[1];
    int S = (int)(x->n / ((size_t)N * C));
    if (batch && channels_last)
        N *= S, S = 1; /* BatchNorm does not tell samples from positions:
                                                  rows of C, split in parts of any size */
    if (G == 0) G = C;
    MT_ASSERT(G >= 1 && C % G == 0, "%s: %d groups do not divide %d channels", op->name, G, C);
    mt_tensor *ps[] = {w, b, rm, rv};
    for (int i = 0; i < 4; i++)
        MT_ASSERT(!ps[i] || (ps[i]->ndim == 1 && ps[i]->shape[0] == C),
                  "%s: parameter %s for %d channels of x %s", op->name, mt_shape_str(ps[i], sw, 64),
                  C, mt_shape_str(x, sx, 64));
    MT_ASSERT(eps >= 0, "%s: eps %g < 0", op->name, eps);
    MT_ASSERT(!batch || training || (rm && rv), "%s: eval mode needs running statistics", op->name);
    MT_ASSERT(!batch || !training || (size_t)N * S > 1,
              "%s: x %s has 1 value per channel; training needs more", op->name,
              mt_shape_str(x, sx, 64));
    MT_ASSERT(op != &OP_INSTANCENORM || S > 1,
              "instancenorm: x %s has 1 spatial element per channel; it needs more (as torch)",
              mt_shape_str(x, sx, 64));
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, op, out, 5, (mt_tensor *[]){x, w, b, rm, rv});
    int args[] = {N, C, S, G, channels_last, batch, training};
    for (int i = 0; i < 7; i++) n->i[i] = args[i];
    n->f[0] = eps;
    n->f[1] = momentum;
    size_t nstat = batch ? (size_t)C : (size_t)N * G;
    n->saved[0] = mt_arena_floats(c, nstat);
    n->saved[1] = mt_arena_floats(c, nstat);
    mt_node_run(c, n);
    return out;
}

mt_tensor *mt_batchnorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b,
                        mt_tensor *running_mean, mt_tensor *running_var, float momentum, float eps,
                        bool channels_last) {
    return batchnorm_like(c, &OP_BATCHNORM, x, w, b, running_mean, running_var, 0, true,
                          c->training || !running_mean, momentum, eps, channels_last);
}

mt_tensor *mt_instancenorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float eps,
                           bool channels_last) {
    char sx[64];
    MT_ASSERT(x->ndim >= 3, "instancenorm: x %s needs (N, C, L...) or (N, L..., C)",
              mt_shape_str(x, sx, 64));
    return batchnorm_like(c, &OP_INSTANCENORM, x, w, b, NULL, NULL, 0, false, true, 0, eps,
                          channels_last);
}

mt_tensor *mt_groupnorm(mt_ctx *c, mt_tensor *x, int G, mt_tensor *w, mt_tensor *b, float eps,
                        bool channels_last) {
    MT_ASSERT(G >= 1, "groupnorm: %d groups", G);
    return batchnorm_like(c, &OP_GROUPNORM, x, w, b, NULL, NULL, G, false, true, 0, eps,
                          channels_last);
}
