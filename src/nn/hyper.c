/* Hyper-connections' ops (Zhu et al. 2024, arXiv 2409.19606, its Algorithm 2; lucidrains/
 * hyper-connections): the residual stream widened to N streams. R rows (B T), C channels, N
 * streams; H (R, N C) row r's streams H_i (C) side by side. The coefficients of a sublayer:
 * a (N, N+1), column 0 the width connection A_m, columns 1..N the residual mixing A_r, and b (N)
 * the depth connection B; shared by every row (static HC) or one per row ((R, N, N+1), (R, N):
 * dynamic HC, mt_hc_dynamic's output).
 *
 *   expand  H_i = x                                   dx += sum_i dH_i
 *   reduce  y = sum_i H_i                             dH_i += dy
 *   width   h = sum_i a[i][0] H_i                     dH_i += a[i][0] dh, da[i][0] += H_i . dh
 *   depth   H'_j = sum_i a[i][1+j] H_i + b[j] y       dH_i += sum_j a[i][1+j] g_j,
 *                                                     dy += sum_j b[j] g_j,
 *                                                     da[i][1+j] += H_i . g_j, db[j] += y . g_j
 *   dynamic out = S + s tanh(Hn W) (mHC: S + s Hn W)    (see dynamic_backward)
 *   mhc_maps mHC's sigmoids and Sinkhorn-Knopp         (see its section)
 *
 * A gradient of shared coefficients is a sum over the rows: each row's terms go to scratch and
 * are summed down the rows in order, in double (the same bits at any thread count). */
#include <math.h>
#include <string.h>

#include "nn.h"
#include "../tensor/gemm.h"
#include "../tensor/vmath.h"

/* dst[j] += sum_r x[r W + j], in order down the rows, in double */
static void add_column_sums(float *dst, const float *x, int R, int W) {
    for (int j = 0; j < W; j++) {
        double s = 0;
        for (int r = 0; r < R; r++) s += x[(size_t)r * W + j];
        dst[j] += (float)s;
    }
}

static double dot(const float *x, const float *y, int C) {
    double s = 0;
    for (int j = 0; j < C; j++) s += (double)x[j] * y[j];
    return s;
}

/* a's row-r coefficients: a shared tensor (every row the same) or one block per row */
static const float *coef_row(const mt_tensor *a, int r, int per) {
    return a->n == (size_t)per ? a->data : a->data + (size_t)r * per;
}

/* Where row r's gradient terms of a go: straight into a->grad when a is per row, else scratch
   (R, per) summed afterwards (coef_grad_done). NULL: a needs none. */
static float *coef_grad(mt_ctx *c, const mt_tensor *a, int R, int per) {
    if (!a->grad) return NULL;
    if (a->n != (size_t)per) return a->grad;
    float *s = mt_arena_floats(c, (size_t)R * per);
    memset(s, 0, (size_t)R * per * sizeof *s);
    return s;
}
static void coef_grad_done(const mt_tensor *a, const float *g, int R, int per) {
    if (g && a->n == (size_t)per) add_column_sums(a->grad, g, R, per);
}

/* ---- hc_expand: (R, C) -> (R, N C), i[0] = N ---- */
static void expand_forward(mt_node *n) {
    const float *x = n->in[0]->data;
    float *H = n->out->data;
    int R = mt_rows(n->in[0]), C = mt_cols(n->in[0]), N = n->i[0];
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        for (int i = 0; i < N; i++)
            memcpy(H + ((size_t)r * N + i) * C, x + (size_t)r * C, (size_t)C * sizeof *x);
    });
}

/* dx += sum_i dH_i */
static void expand_backward(mt_node *n) {
    const float *g = n->out->grad;
    float *dx = n->in[0]->grad;
    int R = mt_rows(n->in[0]), C = mt_cols(n->in[0]), N = n->i[0];
    if (!dx) return;
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        for (int i = 0; i < N; i++)
            for (int j = 0; j < C; j++) dx[(size_t)r * C + j] += g[((size_t)r * N + i) * C + j];
    });
}

static const mt_op OP_HC_EXPAND = {"hc_expand", expand_forward, expand_backward, true};

/* an (..., C) shape widened to (..., N C), or narrowed back */
static mt_tensor *resized(mt_ctx *c, const mt_tensor *x, int C) {
    int shape[4];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = C;
    return mt_tensor_new(c, x->ndim, shape);
}

mt_tensor *mt_hc_expand(mt_ctx *c, mt_tensor *x, int N) {
    MT_ASSERT(N >= 1, "hc_expand: %d streams", N);
    mt_tensor *out = resized(c, x, N * mt_cols(x));
    mt_node *n = mt_node_new(c, &OP_HC_EXPAND, out, 1, (mt_tensor *[]){x});
    n->i[0] = N;
    mt_node_run(c, n);
    return out;
}

/* ---- hc_reduce: (R, N C) -> (R, C), i[0] = N ---- */
static void reduce_forward(mt_node *n) {
    const float *H = n->in[0]->data;
    float *y = n->out->data;
    int R = mt_rows(n->out), C = mt_cols(n->out), N = n->i[0];
    MT_PARALLEL_FOR(n->in[0]->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        for (int j = 0; j < C; j++) {
            float s = 0;
            for (int i = 0; i < N; i++) s += H[((size_t)r * N + i) * C + j];
            y[(size_t)r * C + j] = s;
        }
    });
}

/* dH_i += dy */
static void reduce_backward(mt_node *n) {
    const float *g = n->out->grad;
    float *dH = n->in[0]->grad;
    int R = mt_rows(n->out), C = mt_cols(n->out), N = n->i[0];
    if (!dH) return;
    MT_PARALLEL_FOR(n->in[0]->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        for (int i = 0; i < N; i++)
            for (int j = 0; j < C; j++) dH[((size_t)r * N + i) * C + j] += g[(size_t)r * C + j];
    });
}

static const mt_op OP_HC_REDUCE = {"hc_reduce", reduce_forward, reduce_backward, true};

mt_tensor *mt_hc_reduce(mt_ctx *c, mt_tensor *H, int N) {
    MT_ASSERT(N >= 1 && mt_cols(H) % N == 0, "hc_reduce: %d channels in %d streams", mt_cols(H), N);
    mt_tensor *out = resized(c, H, mt_cols(H) / N);
    mt_node *n = mt_node_new(c, &OP_HC_REDUCE, out, 1, (mt_tensor *[]){H});
    n->i[0] = N;
    mt_node_run(c, n);
    return out;
}

/* ---- hc_width: h = sum_i a[i][0] H_i, in H (R, N C), a; out (R, C); i[0] = N ---- */
static void width_forward(mt_node *n) {
    const float *H = n->in[0]->data;
    float *h = n->out->data;
    int R = mt_rows(n->out), C = mt_cols(n->out), N = n->i[0], per = N * (N + 1);
    MT_PARALLEL_FOR(n->in[0]->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        const float *a = coef_row(n->in[1], r, per), *Hr = H + (size_t)r * N * C;
        float *hr = h + (size_t)r * C;
        for (int j = 0; j < C; j++) hr[j] = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < C; j++) hr[j] += a[i * (N + 1)] * Hr[(size_t)i * C + j];
    });
}

/* dH_i += a[i][0] dh, da[i][0] += H_i . dh */
static void width_backward(mt_node *n) {
    const float *H = n->in[0]->data, *g = n->out->grad;
    float *dH = n->in[0]->grad;
    int R = mt_rows(n->out), C = mt_cols(n->out), N = n->i[0], per = N * (N + 1);
    size_t mark = mt_arena_mark(n->ctx);
    float *da = coef_grad(n->ctx, n->in[1], R, per);
    MT_PARALLEL_FOR(n->in[0]->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        const float *a = coef_row(n->in[1], r, per), *Hr = H + (size_t)r * N * C;
        const float *gr = g + (size_t)r * C;
        for (int i = 0; i < N; i++) {
            float ai = a[i * (N + 1)];
            for (int j = 0; dH && j < C; j++) dH[((size_t)r * N + i) * C + j] += ai * gr[j];
            if (da) da[(size_t)r * per + i * (N + 1)] += (float)dot(Hr + (size_t)i * C, gr, C);
        }
    });
    coef_grad_done(n->in[1], da, R, per);
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_HC_WIDTH = {"hc_width", width_forward, width_backward, true};

/* a (N, N+1) shared or (R, N, N+1) per row of H (R, N C); b likewise (N) or (R, N) */
static void check_coefs(const char *op, const mt_tensor *H, const mt_tensor *a, int per, int N) {
    char sh[64], sa[64];
    size_t R = (size_t)mt_rows(H);
    MT_ASSERT(N >= 1 && mt_cols(H) % N == 0 && (a->n == (size_t)per || a->n == R * per),
              "%s: H %s, coefficients %s with %d streams", op, mt_shape_str(H, sh, 64),
              mt_shape_str(a, sa, 64), N);
}

mt_tensor *mt_hc_width(mt_ctx *c, mt_tensor *H, mt_tensor *a, int N) {
    check_coefs("hc_width", H, a, N * (N + 1), N);
    mt_tensor *out = resized(c, H, mt_cols(H) / N);
    mt_node *n = mt_node_new(c, &OP_HC_WIDTH, out, 2, (mt_tensor *[]){H, a});
    n->i[0] = N;
    mt_node_run(c, n);
    return out;
}

/* ---- hc_depth: H'_j = sum_i a[i][1+j] H_i + b[j] y, in H, a, y (R, C), b; i[0] = N ---- */
static void depth_forward(mt_node *n) {
    const float *H = n->in[0]->data, *y = n->in[2]->data;
    float *out = n->out->data;
    int R = mt_rows(n->in[2]), C = mt_cols(n->in[2]), N = n->i[0], per = N * (N + 1);
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        const float *a = coef_row(n->in[1], r, per), *b = coef_row(n->in[3], r, N);
        const float *Hr = H + (size_t)r * N * C, *yr = y + (size_t)r * C;
        for (int t = 0; t < N; t++) {
            float *o = out + ((size_t)r * N + t) * C;
            for (int j = 0; j < C; j++) o[j] = b[t] * yr[j];
            for (int i = 0; i < N; i++)
                for (int j = 0; j < C; j++) o[j] += a[i * (N + 1) + 1 + t] * Hr[(size_t)i * C + j];
        }
    });
}

/* g_t = dH'_t: dH_i += sum_t a[i][1+t] g_t, dy += sum_t b[t] g_t, da[i][1+t] += H_i . g_t,
   db[t] += y . g_t */
static void depth_backward(mt_node *n) {
    const float *H = n->in[0]->data, *y = n->in[2]->data, *g = n->out->grad;
    float *dH = n->in[0]->grad, *dy = n->in[2]->grad;
    int R = mt_rows(n->in[2]), C = mt_cols(n->in[2]), N = n->i[0], per = N * (N + 1);
    size_t mark = mt_arena_mark(n->ctx);
    float *da = coef_grad(n->ctx, n->in[1], R, per), *db = coef_grad(n->ctx, n->in[3], R, N);
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        const float *a = coef_row(n->in[1], r, per), *b = coef_row(n->in[3], r, N);
        const float *Hr = H + (size_t)r * N * C, *yr = y + (size_t)r * C;
        const float *gr = g + (size_t)r * N * C;
        for (int t = 0; t < N; t++) {
            const float *gt = gr + (size_t)t * C;
            for (int j = 0; dy && j < C; j++) dy[(size_t)r * C + j] += b[t] * gt[j];
            if (db) db[(size_t)r * N + t] += (float)dot(yr, gt, C);
            for (int i = 0; i < N; i++) {
                float ait = a[i * (N + 1) + 1 + t];
                float *dHi = dH ? dH + ((size_t)r * N + i) * C : NULL;
                for (int j = 0; dHi && j < C; j++) dHi[j] += ait * gt[j];
                if (da)
                    da[(size_t)r * per + i * (N + 1) + 1 + t] +=
                        (float)dot(Hr + (size_t)i * C, gt, C);
            }
        }
    });
    coef_grad_done(n->in[1], da, R, per);
    coef_grad_done(n->in[3], db, R, N);
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_HC_DEPTH = {"hc_depth", depth_forward, depth_backward, true};

mt_tensor *mt_hc_depth(mt_ctx *c, mt_tensor *H, mt_tensor *a, mt_tensor *y, mt_tensor *b, int N) {
    char sh[64], sy[64];
    check_coefs("hc_depth", H, a, N * (N + 1), N);
    check_coefs("hc_depth", H, b, N, N);
    MT_ASSERT(mt_rows(y) == mt_rows(H) && mt_cols(y) * N == mt_cols(H),
              "hc_depth: H %s, y %s with %d streams", mt_shape_str(H, sh, 64),
              mt_shape_str(y, sy, 64), N);
    mt_tensor *out = mt_tensor_like(c, H);
    mt_node *n = mt_node_new(c, &OP_HC_DEPTH, out, 4, (mt_tensor *[]){H, a, y, b});
    n->i[0] = N;
    mt_node_run(c, n);
    return out;
}

/* ---- hc_dynamic: out = S + s f(Hn W), f tanh (i[2] = 1, HC's) or the identity (mHC's),
   Hn (R N, C), W (C, K), s (1), S (N K); out (R, N K); saved t = f(Hn W) (R N, K); i[0] = N,
   i[1] = K ---- */
static void dynamic_forward(mt_node *n) {
    const float *X = n->in[0]->data, *W = n->in[1]->data, s = n->in[2]->data[0];
    const float *S = n->in[3]->data;
    float *out = n->out->data, *t = n->saved[0];
    int RN = mt_rows(n->in[0]), C = mt_cols(n->in[0]), N = n->i[0], K = n->i[1];
    mt_gemm(false, false, RN, K, C, X, W, 0, t, NULL); /* Hn W (RN, K) */
    MT_PARALLEL_FOR((size_t)RN * K >= MT_PAR_MIN, for (int q = 0; q < RN; q++) {
        for (int k = 0; k < K; k++) {
            float *tk = t + (size_t)q * K + k;
            if (n->i[2]) *tk = tanhf(*tk);
            out[(size_t)q * K + k] = S[(q % N) * K + k] + s * *tk;
        }
    });
}

/* g = dout, dz = g s f' (tanh: 1 - t^2): dS[n k] += sum_r g[r][n k], ds += sum g t,
   dW += Hn^T dz (C, K), dHn += dz W^T (RN, C) */
static void dynamic_backward(mt_node *n) {
    mt_tensor *Xt = n->in[0], *Wt = n->in[1], *st = n->in[2], *St = n->in[3];
    const float *X = Xt->data, *W = Wt->data, s = st->data[0], *g = n->out->grad;
    const float *t = n->saved[0];
    int RN = mt_rows(Xt), C = mt_cols(Xt), N = n->i[0], K = n->i[1];
    size_t mark = mt_arena_mark(n->ctx);
    float *dz = mt_arena_floats(n->ctx, (size_t)RN * K);
    for (size_t q = 0; q < (size_t)RN * K; q++) dz[q] = g[q] * s * (n->i[2] ? 1 - t[q] * t[q] : 1);
    if (St->grad) add_column_sums(St->grad, g, RN / N, N * K);
    if (st->grad) {
        double ds = 0;
        for (size_t q = 0; q < (size_t)RN * K; q++) ds += (double)g[q] * t[q];
        st->grad[0] += (float)ds;
    }
    if (Wt->grad) mt_gemm(true, false, C, K, RN, X, dz, 1, Wt->grad, NULL);
    if (Xt->grad) mt_gemm(false, true, RN, C, K, dz, W, 1, Xt->grad, NULL);
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_HC_DYNAMIC = {"hc_dynamic", dynamic_forward, dynamic_backward, true};

mt_tensor *mt_hc_dynamic(mt_ctx *c, mt_tensor *Hn, mt_tensor *W, mt_tensor *s, mt_tensor *S, int N,
                         bool use_tanh) {
    char sx[64], sw[64], ss[64];
    int C = mt_cols(Hn), RN = mt_rows(Hn), K = C > 0 ? (int)(W->n / (size_t)C) : 0;
    MT_ASSERT(N >= 1 && RN % N == 0 && K >= 1 && W->n == (size_t)C * K && s->n == 1 &&
                  S->n == (size_t)N * K,
              "hc_dynamic: Hn %s, W %s, S %s with %d streams", mt_shape_str(Hn, sx, 64),
              mt_shape_str(W, sw, 64), mt_shape_str(S, ss, 64), N);
    mt_tensor *out = mt_tensor_new(c, 2, (int[]){RN / N, N * K});
    mt_node *n = mt_node_new(c, &OP_HC_DYNAMIC, out, 4, (mt_tensor *[]){Hn, W, s, S});
    n->i[0] = N;
    n->i[1] = K;
    n->i[2] = use_tanh;
    n->saved[0] = mt_arena_floats(c, (size_t)RN * K);
    mt_node_run(c, n);
    return out;
}

/* ---- mhc_maps: mHC's constraints (Xie et al. 2025, arXiv 2512.24880, eq. 8) ----
   z (R, 2N + N^2) = [pre (N) | post (N) | res (N, N)], res[j][i] the logit of output stream j
   from input i; out (R, N (N+1) + N) the coefficients as hc_width and hc_depth read them:
     a[i][0] = sigmoid(pre_i),  a[i][1+j] = M[j][i],  b[j] = 2 sigmoid(post_j),
     M = Sinkhorn-Knopp(res): M_0 = exp(res - max res), then K times a normalisation of every
     column (each input's weights sum to 1), then of every row (each output's): T_r(T_c(M)).
   i[0] = N, i[1] = K. The backward runs back through the 2K normalisations (unrolled, as the
   paper's), recomputing the iterates of a row from z: Y = X / s (s the sums of X along the
   normalised direction) has dX = (dY - sum(dY Y)) / s along it; dres = dM_0 M_0. */

/* X (N, N) -> columns (col 1) or rows (col 0) of sum 1, into Y (may be X) */
static void sk_normalise(const float *X, float *Y, int N, bool col) {
    for (int u = 0; u < N; u++) {
        double s = 0;
        for (int v = 0; v < N; v++) s += X[col ? v * N + u : u * N + v];
        float inv = (float)(1 / s);
        for (int v = 0; v < N; v++) {
            int e = col ? v * N + u : u * N + v;
            Y[e] = X[e] * inv;
        }
    }
}

/* the iterates of row z's res: X[0] = exp(res - max), X[t] = T(X[t-1]) for t = 1..2K (odd t
   columns, even rows); X (2K + 1) N^2, or only the last when all is false (X N^2, in place) */
static void sk_iterates(const float *res, float *X, int N, int K, bool all) {
    int NN = N * N;
    float m = res[0];
    for (int e = 1; e < NN; e++) m = res[e] > m ? res[e] : m;
    for (int e = 0; e < NN; e++) X[e] = expf(res[e] - m);
    for (int t = 1; t <= 2 * K; t++) {
        float *prev = all ? X + (size_t)(t - 1) * NN : X, *next = all ? prev + NN : X;
        sk_normalise(prev, next, N, t % 2 == 1);
    }
}

static void mhc_maps_forward(mt_node *n) {
    const float *z = n->in[0]->data;
    float *out = n->out->data;
    int R = mt_rows(n->out), N = n->i[0], K = n->i[1], W = 2 * N + N * N, per = N * (N + 1);
    MT_PARALLEL_FOR((size_t)R * K * N * N >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        float X[MT_HC_MAX_STREAMS * MT_HC_MAX_STREAMS];
        const float *zr = z + (size_t)r * W;
        float *o = out + (size_t)r * (per + N);
        sk_iterates(zr + 2 * N, X, N, K, false);
        for (int i = 0; i < N; i++) {
            o[i * (N + 1)] = mt_vsigmoidf(zr[i]);
            o[per + i] = 2 * mt_vsigmoidf(zr[N + i]);
            for (int j = 0; j < N; j++) o[i * (N + 1) + 1 + j] = X[j * N + i];
        }
    });
}

/* dX[t-1] from dY = dX[t] (in place in d), Y = X[t], along the direction of step t */
static void sk_step_backward(const float *Xp, const float *Y, float *d, int N, bool col) {
    for (int u = 0; u < N; u++) {
        double s = 0, dy = 0;
        for (int v = 0; v < N; v++) {
            int e = col ? v * N + u : u * N + v;
            s += Xp[e];
            dy += (double)d[e] * Y[e];
        }
        for (int v = 0; v < N; v++) {
            int e = col ? v * N + u : u * N + v;
            d[e] = (float)((d[e] - dy) / s);
        }
    }
}

static void mhc_maps_backward(mt_node *n) {
    const float *z = n->in[0]->data, *g = n->out->grad, *out = n->out->data;
    float *dz = n->in[0]->grad;
    int R = mt_rows(n->out), N = n->i[0], K = n->i[1], W = 2 * N + N * N, per = N * (N + 1);
    int NN = N * N;
    if (!dz) return;
    size_t mark = mt_arena_mark(n->ctx);
    float *Xs = mt_arena_floats(n->ctx, (size_t)R * (2 * K + 1) * NN);
    MT_PARALLEL_FOR((size_t)R * K * NN >= MT_PAR_MIN, for (int r = 0; r < R; r++) {
        const float *zr = z + (size_t)r * W, *gr = g + (size_t)r * (per + N);
        const float *o = out + (size_t)r * (per + N);
        float *X = Xs + (size_t)r * (2 * K + 1) * NN, *dzr = dz + (size_t)r * W;
        float d[MT_HC_MAX_STREAMS * MT_HC_MAX_STREAMS];
        for (int i = 0; i < N; i++) { /* sigmoid' = s (1 - s); post's 2 s (1 - s) */
            float sp = o[i * (N + 1)], sq = o[per + i] / 2;
            dzr[i] += gr[i * (N + 1)] * sp * (1 - sp);
            dzr[N + i] += gr[per + i] * 2 * sq * (1 - sq);
            for (int j = 0; j < N; j++) d[j * N + i] = gr[i * (N + 1) + 1 + j];
        }
        sk_iterates(zr + 2 * N, X, N, K, true);
        for (int t = 2 * K; t >= 1; t--)
            sk_step_backward(X + (size_t)(t - 1) * NN, X + (size_t)t * NN, d, N, t % 2 == 1);
        for (int e = 0; e < NN; e++) dzr[2 * N + e] += d[e] * X[e];
    });
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_MHC_MAPS = {"mhc_maps", mhc_maps_forward, mhc_maps_backward, false};

mt_tensor *mt_mhc_maps(mt_ctx *c, mt_tensor *z, int N, int K) {
    char sz[64];
    MT_ASSERT(N >= 1 && N <= MT_HC_MAX_STREAMS && K >= 1 && mt_cols(z) == 2 * N + N * N,
              "mhc_maps: z %s with %d streams, %d iterations", mt_shape_str(z, sz, 64), N, K);
    mt_tensor *out = mt_tensor_new(c, 2, (int[]){mt_rows(z), N * (N + 1) + N});
    mt_node *n = mt_node_new(c, &OP_MHC_MAPS, out, 1, (mt_tensor *[]){z});
    n->i[0] = N;
    n->i[1] = K;
    mt_node_run(c, n);
    return out;
}

/* ---- the residual mixing's signal gains (mHC, arXiv 2512.24880, section 3.1) ----
 * Sublayer s's mixing of row r as a map of the streams, H_s (N, N), H_s[j][i] = a_s[i][1 + j]
 * (H'_j = sum_i H_s[j][i] H_i), and the composite M_s = H_{S-1} ... H_s. */

/* gain[0] = max_j |sum_i M[j][i]| (the forward signal's: largest absolute row sum), gain[1] =
   max_i |sum_j M[j][i]| (the backward gradient's: largest absolute column sum), max-accumulated */
static void amax_gains(const double *M, int N, double *gain) {
    for (int j = 0; j < N; j++) {
        double row = 0, col = 0;
        for (int i = 0; i < N; i++) row += M[j * N + i], col += M[i * N + j];
        gain[0] = fmax(gain[0], fabs(row)), gain[1] = fmax(gain[1], fabs(col));
    }
}

void mt_hc_gains(const mt_tensor *const *a, int S, int N, double *out) {
    int per = N * (N + 1), NN = N * N, R = 1;
    MT_ASSERT(N >= 1 && N <= MT_HC_MAX_STREAMS, "hc_gains: %d streams", N);
    for (int s = 0; s < S; s++) {
        MT_ASSERT(a[s]->n % (size_t)per == 0, "hc_gains: %zu coefficients", a[s]->n);
        int rows = (int)(a[s]->n / (size_t)per);
        MT_ASSERT(rows == 1 || R == 1 || rows == R, "hc_gains: %d rows and %d", rows, R);
        if (rows > R) R = rows;
    }
    for (int e = 0; e < 4 * S; e++) out[e] = 0;
    for (int r = 0; r < R; r++) {
        double M[MT_HC_MAX_STREAMS * MT_HC_MAX_STREAMS], P[MT_HC_MAX_STREAMS * MT_HC_MAX_STREAMS],
            H[MT_HC_MAX_STREAMS * MT_HC_MAX_STREAMS];
        for (int e = 0; e < NN; e++) M[e] = e % (N + 1) == 0; /* identity */
        for (int s = S - 1; s >= 0; s--) {
            const float *ar = coef_row(a[s], r, per);
            for (int j = 0; j < N; j++)
                for (int i = 0; i < N; i++) H[j * N + i] = ar[i * (N + 1) + 1 + j];
            for (int j = 0; j < N; j++) /* P = M H */
                for (int i = 0; i < N; i++) {
                    double v = 0;
                    for (int k = 0; k < N; k++) v += M[j * N + k] * H[k * N + i];
                    P[j * N + i] = v;
                }
            memcpy(M, P, (size_t)NN * sizeof *M);
            amax_gains(H, N, out + 4 * s);
            amax_gains(M, N, out + 4 * s + 2);
        }
    }
}
