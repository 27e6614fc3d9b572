/* Every norm (and the QK-norm): against naive double-precision loops, by finite differences
   (input, weight, bias), a large-mean input that must keep its variance, the dispatcher, and bad
   options. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- per-row norms ----------------------------------------------------------------------------
 */
typedef enum { K_LN, K_RMS, K_RMS_PAPER, K_PRMS, K_PRMS_PAPER, K_SCALE } row_kind;
static const char *const ROW_NAMES[] = {"layernorm", "rmsnorm",        "rmsnorm_paper",
                                        "prmsnorm",  "prmsnorm_paper", "scalenorm"};

typedef struct {
    row_kind kind;
    float eps, p;
    bool affine; /* in = {x, w, b (when the kind has one)}, or {x} */
} row_arg;

static mt_tensor *build_row(mt_ctx *c, mt_tensor **in, const void *arg) {
    const row_arg *a = arg;
    mt_tensor *x = in[0], *w = a->affine ? in[1] : NULL, *b = a->affine ? in[2] : NULL;
    switch (a->kind) {
    case K_LN: return mt_layernorm(c, x, w, b, a->eps);
    case K_RMS: return mt_rmsnorm(c, x, w, NULL, a->eps, MT_RMS_LLAMA);
    case K_RMS_PAPER: return mt_rmsnorm(c, x, w, b, a->eps, MT_RMS_PAPER);
    case K_PRMS: return mt_prmsnorm(c, x, w, NULL, a->p, a->eps, MT_RMS_LLAMA);
    case K_PRMS_PAPER: return mt_prmsnorm(c, x, w, b, a->p, a->eps, MT_RMS_PAPER);
    case K_SCALE: return mt_scalenorm(c, x, w, a->eps);
    }
    return NULL;
}

/* the formulas of docs/norms.md, in double */
static void ref_row(const row_arg *a, const float *x, const float *w, const float *b, int N, int C,
                    float *y) {
    int k = a->kind == K_PRMS || a->kind == K_PRMS_PAPER ? (int)floor((double)C * a->p) : C;
    if (k < 1) k = 1;
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C;
        double mu = 0, ss = 0, s;
        if (a->kind == K_LN) {
            for (int i = 0; i < C; i++) mu += xr[i];
            mu /= C;
        }
        for (int i = 0; i < k; i++) ss += (xr[i] - mu) * (xr[i] - mu);
        switch (a->kind) {
        case K_LN:
        case K_RMS:
        case K_PRMS: s = 1 / sqrt(ss / k + a->eps); break;
        case K_RMS_PAPER:
        case K_PRMS_PAPER: s = 1 / (sqrt(ss / k) + a->eps); break;
        default: s = 1 / fmax(sqrt(ss), a->eps); break;
        }
        for (int i = 0; i < C; i++) {
            double wi = !w ? 1 : a->kind == K_SCALE ? w[0] : w[i];
            y[(size_t)r * C + i] = (float)((xr[i] - mu) * s * wi + (b ? b[i] : 0));
        }
    }
}

static void test_row_norms(void) {
    mt_rng r;
    mt_rng_seed(&r, 11);
    int shapes[][3] = {{3, 1, 0}, {2, 3, 17}, {5, 40, 0}, {1, 2, 33}};
    int ndims[] = {2, 3, 2, 3};
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    for (int kind = K_LN; kind <= K_SCALE; kind++) {
        for (int s = 0; s < 4; s++) {
            int C = shapes[s][ndims[s] - 1];
            bool has_b = kind == K_LN || kind == K_RMS_PAPER || kind == K_PRMS_PAPER;
            int wshape = kind == K_SCALE ? 1 : C;
            row_arg a = {(row_kind)kind,
                         kind == K_RMS_PAPER || kind == K_PRMS_PAPER ? 1e-8f : 1e-5f,
                         s == 2 ? 0.0625f : 0.5f, true};
            mt_tensor *x = test_tensor(&r, ndims[s], shapes[s], -2, 2, true);
            mt_tensor *w = test_tensor(&r, 1, &wshape, 0.5f, 1.5f, true);
            mt_tensor *b = has_b ? test_tensor(&r, 1, &C, -1, 1, true) : NULL;
            mt_ctx_reset(&c);
            mt_tensor *y = build_row(&c, (mt_tensor *[]){x, w, b}, &a);
            float *ref = malloc(y->n * sizeof(float));
            ref_row(&a, x->data, w->data, b ? b->data : NULL, mt_rows(x), C, ref);
            double e = max_rel_err(y->data, ref, y->n);
            CHECK(e < 1e-5, "%s C=%d vs naive: %g", ROW_NAMES[kind], C, e);
            char name[64];
            snprintf(name, sizeof name, "%s[C=%d]", ROW_NAMES[kind], C);
            gradcheck(name, build_row, &a, has_b ? 3 : 2, (mt_tensor *[]){x, w, b}, 1e-3, 1e-2);
            a.affine = false;
            snprintf(name, sizeof name, "%s[C=%d, no affine]", ROW_NAMES[kind], C);
            if (kind != K_SCALE) gradcheck(name, build_row, &a, 1, &x, 1e-3, 1e-2);
            free(ref);
            test_tensor_free(x);
            test_tensor_free(w);
            test_tensor_free(b);
        }
    }
    mt_ctx_free(&c);
}

/* LayerNorm (and the RMS forms) of 1e3 + N(0, 1e-2^2) noise: the variance must survive. */
static void test_large_mean(void) {
    mt_rng r;
    mt_rng_seed(&r, 12);
    int N = 16, C = 768;
    float *x = malloc((size_t)N * C * sizeof(float)), *ref = malloc((size_t)N * C * sizeof(float));
    for (int i = 0; i < N * C; i++) x[i] = 1000.0f + 1e-2f * mt_rng_normal(&r);
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    mt_tensor *xt = mt_tensor_from(&c, x, 2, (int[]){N, C});
    mt_tensor *y = mt_layernorm(&c, xt, NULL, NULL, 0.0f);
    row_arg a = {K_LN, 0.0f, 1, false};
    ref_row(&a, x, NULL, NULL, N, C, ref);
    double e = max_rel_err(y->data, ref, y->n);
    /* float32 holds the mean 1e3 to 3e-5 (half an ulp), 3e-3 of the noise's std */
    CHECK(e < 2e-3, "layernorm of 1e3 + noise: %g relative to the double reference", e);
    double m2 = 0;
    for (int i = 0; i < N * C; i++) m2 += (double)y->data[i] * y->data[i];
    CHECK(fabs(m2 / (N * C) - 1) < 1e-4, "layernorm of 1e3 + noise: mean y^2 = %g, want 1",
          m2 / (N * C));
    mt_ctx_free(&c);
    free(x);
    free(ref);
}

/* Same inputs, 1 and 2 threads: the same bits (fixed partition of the weight-gradient sums). */
static void test_deterministic(void) {
    mt_rng r;
    mt_rng_seed(&r, 13);
    int shape[] = {300, 96}, C = 96;
    mt_tensor *x = test_tensor(&r, 2, shape, -1, 1, true);
    mt_tensor *w = test_tensor(&r, 1, &C, 0, 2, true), *b = test_tensor(&r, 1, &C, -1, 1, true);
    float *dy = malloc(x->n * sizeof(float)), *first = malloc(3 * C * sizeof(float));
    for (size_t i = 0; i < x->n; i++) dy[i] = mt_rng_uniform(&r) - 0.5f;
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    for (int t = 1; t <= 2; t++) {
        mt_set_threads(t);
        memset(w->grad, 0, C * sizeof(float));
        memset(b->grad, 0, C * sizeof(float));
        mt_ctx_reset(&c);
        mt_backward_from(&c, mt_layernorm(&c, x, w, b, 1e-5f), dy);
        if (t == 1) {
            memcpy(first, w->grad, C * sizeof(float));
            memcpy(first + C, b->grad, C * sizeof(float));
        } else {
            CHECK(memcmp(first, w->grad, C * sizeof(float)) == 0 &&
                      memcmp(first + C, b->grad, C * sizeof(float)) == 0,
                  "layernorm weight grads differ between 1 and 2 threads");
        }
    }
    mt_set_threads(0);
    mt_ctx_free(&c);
    free(dy);
    free(first);
    test_tensor_free(x);
    test_tensor_free(w);
    test_tensor_free(b);
}

/* ---- point-wise norms: DyT, Derf ---------------------------------------------------------------
 */
typedef struct {
    bool erf, affine; /* in = {x, alpha, s (Derf), w, b} or {x, alpha, s (Derf)} */
} point_arg;

static mt_tensor *build_point(mt_ctx *c, mt_tensor **in, const void *arg) {
    const point_arg *a = arg;
    int k = a->erf ? 3 : 2; /* where w and b start */
    mt_tensor *w = a->affine ? in[k] : NULL, *b = a->affine ? in[k + 1] : NULL;
    return a->erf ? mt_derf(c, in[0], in[1], in[2], w, b) : mt_dyt(c, in[0], in[1], w, b);
}

/* the formulas of docs/norms.md, in double */
static void ref_point(bool erf_fn, const float *x, double alpha, double s, const float *w,
                      const float *b, int N, int C, float *y) {
    for (int r = 0; r < N; r++)
        for (int i = 0; i < C; i++) {
            double u = alpha * x[(size_t)r * C + i] + s, t = erf_fn ? erf(u) : tanh(u);
            y[(size_t)r * C + i] = (float)((w ? w[i] : 1) * t + (b ? b[i] : 0));
        }
}

static void test_point_norms(void) {
    mt_rng r;
    mt_rng_seed(&r, 14);
    int shapes[][3] = {{3, 1, 0}, {2, 3, 17}, {5, 40, 0}, {300, 96, 0}};
    int ndims[] = {2, 3, 2, 2}, one = 1;
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    for (int fn = 0; fn < 2; fn++)
        for (int s = 0; s < 4; s++) {
            int C = shapes[s][ndims[s] - 1];
            mt_tensor *x = test_tensor(&r, ndims[s], shapes[s], -3, 3, true);
            mt_tensor *alpha = test_tensor(&r, 1, &one, 0.3f, 0.9f, true);
            mt_tensor *sh = test_tensor(&r, 1, &one, -0.4f, 0.4f, true);
            mt_tensor *w = test_tensor(&r, 1, &C, 0.5f, 1.5f, true);
            mt_tensor *b = test_tensor(&r, 1, &C, -1, 1, true);
            point_arg a = {fn == 1, true};
            mt_tensor *in[] = {x, alpha, a.erf ? sh : w, a.erf ? w : b, b};
            int n_in = a.erf ? 5 : 4;
            mt_ctx_reset(&c);
            mt_tensor *y = build_point(&c, in, &a);
            float *ref = malloc(y->n * sizeof(float));
            ref_point(a.erf, x->data, alpha->data[0], a.erf ? sh->data[0] : 0, w->data, b->data,
                      mt_rows(x), C, ref);
            const char *what = a.erf ? "derf" : "dyt";
            double e = max_rel_err(y->data, ref, y->n);
            CHECK(e < 2e-6, "%s C=%d vs naive: %g", what, C, e);
            char name[64];
            snprintf(name, sizeof name, "%s[C=%d]", what, C);
            if (s < 3) gradcheck(name, build_point, &a, n_in, in, 1e-3, 1e-2);
            a.affine = false;
            snprintf(name, sizeof name, "%s[C=%d, no affine]", what, C);
            if (s < 3) gradcheck(name, build_point, &a, n_in - 2, in, 1e-3, 1e-2);
            free(ref);
            mt_tensor *all[] = {x, alpha, sh, w, b};
            for (int i = 0; i < 5; i++) test_tensor_free(all[i]);
        }
    mt_ctx_free(&c);
}

/* DyT and Derf gradients, 1 and 2 threads: the same bits (fixed parts for the parameter sums). */
static void test_point_deterministic(void) {
    mt_rng r;
    mt_rng_seed(&r, 15);
    int shape[] = {4096, 48}, C = 48, one = 1;
    mt_tensor *in[] = {test_tensor(&r, 2, shape, -2, 2, true),
                       test_tensor(&r, 1, &one, 0.5f, 1, true),
                       test_tensor(&r, 1, &one, -0.2f, 0.2f, true),
                       test_tensor(&r, 1, &C, 0, 2, true), test_tensor(&r, 1, &C, -1, 1, true)};
    size_t total = 0, at;
    for (int i = 0; i < 5; i++) total += in[i]->n;
    float *dy = malloc(in[0]->n * sizeof(float)), *first = malloc(total * sizeof(float));
    for (size_t i = 0; i < in[0]->n; i++) dy[i] = mt_rng_uniform(&r) - 0.5f;
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    for (int fn = 0; fn < 2; fn++)
        for (int t = 1; t <= 2; t++) {
            mt_set_threads(t);
            for (int i = 0; i < 5; i++) memset(in[i]->grad, 0, in[i]->n * sizeof(float));
            mt_ctx_reset(&c);
            point_arg a = {fn == 1, true};
            mt_tensor *args[] = {in[0], in[1], fn ? in[2] : in[3], fn ? in[3] : in[4], in[4]};
            mt_backward_from(&c, build_point(&c, args, &a), dy);
            bool same = true;
            at = 0;
            for (int i = 0; i < 5; i++, at += in[i - 1]->n) {
                if (t == 1) memcpy(first + at, in[i]->grad, in[i]->n * sizeof(float));
                else same &= memcmp(first + at, in[i]->grad, in[i]->n * sizeof(float)) == 0;
            }
            CHECK(same, "%s gradients differ between 1 and 2 threads", fn ? "derf" : "dyt");
        }
    mt_set_threads(0);
    mt_ctx_free(&c);
    free(dy);
    free(first);
    for (int i = 0; i < 5; i++) test_tensor_free(in[i]);
}

/* ---- QK-norm ----------------------------------------------------------------------------------
 */
typedef struct {
    mt_qk_norm_cfg qk;
    int HS;
} qk_arg;

/* in = {x (B, T, W), gain}; the gain in a one-entry parameter table */
static mt_tensor *build_qk(mt_ctx *c, mt_tensor **in, const void *arg) {
    const qk_arg *a = arg;
    mt_params P = {.n = 1, .t = in[1]};
    return mt_qk_norm(c, &a->qk, a->HS, &P, a->qk.affine ? 0 : -1, in[0]);
}

/* the formulas of docs/layers.md, in double: per group of n channels (HS per head, else W) */
static void ref_qk(const qk_arg *a, const float *x, const float *g, size_t rows, int W, float *y) {
    int n = a->qk.scope == MT_QK_HEAD ? a->HS : W;
    for (size_t r = 0; r < rows * W / n; r++) {
        const float *xr = x + r * n;
        double mu = 0, ss = 0;
        for (int i = 0; i < n && a->qk.kind == MT_QK_LN; i++) mu += xr[i] / (double)n;
        for (int i = 0; i < n; i++) ss += (xr[i] - mu) * (xr[i] - mu);
        double s = a->qk.kind == MT_QK_RMS  ? 1 / sqrt(ss / n + 1e-6)
                   : a->qk.kind == MT_QK_LN ? 1 / sqrt(ss / n + 1e-5)
                                            : 1 / fmax(sqrt(ss), 1e-12);
        for (int i = 0; i < n; i++) {
            double w = !a->qk.affine ? 1 : a->qk.kind == MT_QK_L2 ? g[0] : g[i];
            y[r * n + i] = (float)((xr[i] - mu) * s * w);
        }
    }
}

static void test_qk_norm(void) {
    mt_rng r;
    mt_rng_seed(&r, 16);
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    int HS = 4, shape[] = {2, 3, 12}, W = 12; /* 3 heads of 4 */
    for (int kind = MT_QK_RMS; kind <= MT_QK_L2; kind++)
        for (int scope = MT_QK_HEAD; scope <= MT_QK_ALL; scope++)
            for (int affine = 0; affine < 2; affine++) {
                if (kind == MT_QK_L2 && !affine) continue; /* refused */
                qk_arg a = {{(mt_qk_norm_kind)kind, (mt_qk_norm_scope)scope, affine}, HS};
                int gw = kind == MT_QK_L2 ? 1 : scope == MT_QK_HEAD ? HS : W;
                mt_tensor *x = test_tensor(&r, 3, shape, -2, 2, true);
                mt_tensor *g = test_tensor(&r, 1, &gw, 0.5f, 1.5f, affine);
                mt_ctx_reset(&c);
                mt_tensor *y = build_qk(&c, (mt_tensor *[]){x, g}, &a);
                float ref[72];
                ref_qk(&a, x->data, g->data, 6, W, ref);
                char name[64];
                snprintf(name, sizeof name, "qk_norm[%s %s%s]", mt_enum_name(&MT_QK_NORMS, kind),
                         mt_enum_name(&MT_QK_SCOPES, scope), affine ? " affine" : "");
                CHECK(y->ndim == 3 && max_rel_err(y->data, ref, x->n) < 1e-5, "%s vs naive: %g",
                      name, max_rel_err(y->data, ref, x->n));
                gradcheck(name, build_qk, &a, affine ? 2 : 1, (mt_tensor *[]){x, g}, 1e-3, 1e-2);
                test_tensor_free(x);
                test_tensor_free(g);
            }
    mt_qk_norm_cfg none = {MT_QK_NONE, MT_QK_HEAD, false};
    mt_tensor *x = test_tensor(&r, 3, shape, -2, 2, false);
    CHECK(mt_qk_norm(&c, &none, HS, NULL, -1, x) == x, "qk_norm none is the identity");
    test_tensor_free(x);
    mt_ctx_free(&c);
    /* the gains: names, shapes, init (keys of KC = 8 channels: grouped-query attention) */
    struct {
        mt_qk_norm_cfg qk;
        const char *q, *k;
        int qn, kn;
        float qinit, kinit; /* l2's g: sqrt(width), each head's part then about sqrt(HS) long */
    } cases[] = {
        {{MT_QK_RMS, MT_QK_HEAD, true}, "a.q_norm.weight", "a.k_norm.weight", 4, 4, 1, 1},
        {{MT_QK_LN, MT_QK_ALL, true}, "a.q_norm.weight", "a.k_norm.weight", 12, 8, 1, 1},
        {{MT_QK_L2, MT_QK_ALL, true}, "a.q_norm.g", "a.k_norm.g", 1, 1, sqrtf(12), sqrtf(8)},
        {{MT_QK_L2, MT_QK_HEAD, true}, "a.q_norm.g", "a.k_norm.g", 1, 1, 2, 2},
        {{MT_QK_RMS, MT_QK_ALL, false}, NULL, NULL, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mt_params P;
        mt_params_init_table(&P);
        int q, k;
        mt_qk_norm_add_params(&P, "a", &cases[i].qk, HS, W, 8, &q, &k);
        if (!cases[i].q) {
            CHECK(P.n == 0 && q == -1 && k == -1, "qk_norm without affine adds no parameter");
            continue;
        }
        CHECK(P.n == 2 && !strcmp(P.p[q].name, cases[i].q) && !strcmp(P.p[k].name, cases[i].k) &&
                  P.p[q].n == (size_t)cases[i].qn && P.p[k].n == (size_t)cases[i].kn &&
                  P.p[q].role == MT_ROLE_NORM,
              "qk gains case %zu: %s (%zu), %s (%zu)", i, P.p[q].name, P.p[q].n, P.p[k].name,
              P.p[k].n);
        mt_params_alloc(&P, NULL);
        mt_rng_seed(&r, 1);
        mt_params_initialize(&P, &r);
        CHECK(P.t[q].data[0] == cases[i].qinit && P.t[k].data[0] == cases[i].kinit,
              "qk gains case %zu: init %g", i, P.t[q].data[0]);
        mt_params_free(&P);
    }
    /* refusals */
    mt_err err;
    const struct {
        mt_qk_norm_cfg qk;
        int HS;
        const char *a, *b;
    } bad[] = {
        {{MT_QK_NONE, MT_QK_ALL, false}, 4, "--qk-norm-scope all", "--qk-norm none"},
        {{MT_QK_NONE, MT_QK_HEAD, true}, 4, "--qk-norm-affine", "give --qk-norm rms"},
        {{MT_QK_L2, MT_QK_HEAD, false}, 16, "without --qk-norm-affine", "+-0.25"},
        {{MT_QK_LN, MT_QK_HEAD, true}, 1, "head size 1", "--qk-norm-scope all"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(mt_qk_norm_validate(&bad[i].qk, bad[i].HS, &err) == MT_EINVAL &&
                  strstr(err.msg, bad[i].a) && strstr(err.msg, bad[i].b),
              "qk refusal %zu: '%s'", i, err.msg);
    mt_qk_norm_cfg ok = {MT_QK_LN, MT_QK_ALL, false};
    CHECK(mt_qk_norm_validate(&ok, 1, &err) == MT_OK, "ln over the projection: %s", err.msg);
}

/* ---- BatchNorm, InstanceNorm, GroupNorm ------------------------------------------------------ */
typedef enum { K_BN, K_IN, K_GN } batch_kind;
static const char *const BATCH_NAMES[] = {"batchnorm", "instancenorm", "groupnorm"};

typedef struct {
    batch_kind kind;
    int G;
    bool channels_last, affine, training;
    mt_tensor *rm, *rv; /* BatchNorm's running statistics, or NULL */
} batch_arg;

/* in = {x, w, b} or {x} */
static mt_tensor *build_batch(mt_ctx *c, mt_tensor **in, const void *arg) {
    const batch_arg *a = arg;
    mt_tensor *w = a->affine ? in[1] : NULL, *b = a->affine ? in[2] : NULL;
    c->training = a->training;
    switch (a->kind) {
    case K_BN: return mt_batchnorm(c, in[0], w, b, a->rm, a->rv, 0.1f, 1e-5f, a->channels_last);
    case K_IN: return mt_instancenorm(c, in[0], w, b, 1e-5f, a->channels_last);
    case K_GN: return mt_groupnorm(c, in[0], a->G, w, b, 1e-5f, a->channels_last);
    }
    return NULL;
}

/* naive: statistic (m, g) over its elements in double; rm, rv updated as torch when training */
static void ref_batch(const batch_arg *a, const mt_tensor *x, const float *w, const float *b,
                      float *rm, float *rv, float *y) {
    bool cl = a->channels_last;
    int N = x->shape[0], C = cl ? x->shape[x->ndim - 1] : x->shape[1];
    int S = (int)(x->n / ((size_t)N * C));
    int G = a->kind == K_GN ? a->G : C, cpg = C / G, M = a->kind == K_BN ? 1 : N;
    for (int m = 0; m < M; m++)
        for (int g = 0; g < G; g++) {
            double s1 = 0, s2 = 0, K = 0, mu, var;
            for (int pass = 0; pass < 2; pass++)
                for (int n = (M == 1 ? 0 : m); n < (M == 1 ? N : m + 1); n++)
                    for (int ch = g * cpg; ch < (g + 1) * cpg; ch++)
                        for (int sp = 0; sp < S; sp++) {
                            double v = x->data[cl ? ((size_t)n * S + sp) * C + ch
                                                  : ((size_t)n * C + ch) * S + sp];
                            if (pass == 0) s1 += v, K++;
                            else s2 += (v - s1 / K) * (v - s1 / K);
                        }
            mu = s1 / K, var = s2 / K;
            if (a->kind == K_BN && !a->training) mu = rm[g], var = rv[g];
            else if (a->kind == K_BN && rm) {
                rm[g] = (float)(0.9 * rm[g] + 0.1 * mu);
                rv[g] = (float)(0.9 * rv[g] + 0.1 * s2 / (K - 1));
            }
            for (int n = (M == 1 ? 0 : m); n < (M == 1 ? N : m + 1); n++)
                for (int ch = g * cpg; ch < (g + 1) * cpg; ch++)
                    for (int sp = 0; sp < S; sp++) {
                        size_t i = cl ? ((size_t)n * S + sp) * C + ch
                                      : ((size_t)n * C + ch) * S + sp;
                        y[i] = (float)((x->data[i] - mu) / sqrt(var + 1e-5) * (w ? w[ch] : 1) +
                                       (b ? b[ch] : 0));
                    }
        }
}

static void test_batch_norms(void) {
    mt_rng r;
    mt_rng_seed(&r, 21);
    struct {
        batch_kind kind;
        int ndim, shape[4], G;
        bool cl;
    } cases[] = {
        /* channels-first (N, C), (N, C, L), (N, C, H, W); channels-last (N, T, C), (N, H, W, C);
           C = 1 where the statistics still have more than one element */
        {K_BN, 2, {5, 3}, 0, false},       {K_BN, 2, {6, 1}, 0, false},
        {K_BN, 3, {3, 4, 5}, 0, false},    {K_BN, 4, {2, 3, 2, 3}, 0, false},
        {K_BN, 3, {2, 5, 17}, 0, true},    {K_BN, 4, {2, 2, 3, 3}, 0, true},
        {K_IN, 3, {2, 3, 5}, 0, false},    {K_IN, 4, {2, 3, 2, 3}, 0, false},
        {K_IN, 3, {2, 1, 7}, 0, false},    {K_IN, 3, {2, 5, 17}, 0, true},
        {K_GN, 2, {4, 12}, 3, false},      {K_GN, 3, {2, 6, 5}, 2, false},
        {K_GN, 4, {2, 4, 2, 3}, 4, false}, {K_GN, 3, {2, 6, 4}, 1, false},
        {K_GN, 3, {3, 1, 4}, 1, false},    {K_GN, 3, {2, 5, 6}, 3, true},
        {K_GN, 3, {2, 17, 3}, 17, false},
    };
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int C = cases[k].cl ? cases[k].shape[cases[k].ndim - 1] : cases[k].shape[1];
        for (int mode = 0; mode < 3; mode++) { /* affine, no affine, BatchNorm eval */
            if (mode == 2 && cases[k].kind != K_BN) continue;
            mt_tensor *x = test_tensor(&r, cases[k].ndim, cases[k].shape, -2, 2, true);
            mt_tensor *w = test_tensor(&r, 1, &C, 0.5f, 1.5f, true);
            mt_tensor *b = test_tensor(&r, 1, &C, -1, 1, true);
            mt_tensor *rm = test_tensor(&r, 1, &C, -0.5f, 0.5f, false);
            mt_tensor *rv = test_tensor(&r, 1, &C, 0.5f, 2.0f, false);
            batch_arg a = {cases[k].kind,
                           cases[k].G,
                           cases[k].cl,
                           mode != 1,
                           mode != 2,
                           cases[k].kind == K_BN ? rm : NULL,
                           cases[k].kind == K_BN ? rv : NULL};
            float *ref = malloc(x->n * sizeof(float)), *rm2 = malloc(2 * C * sizeof(float));
            for (int i = 0; i < C; i++) rm2[i] = rm->data[i], rm2[C + i] = rv->data[i];
            mt_ctx_reset(&c);
            mt_tensor *y = build_batch(&c, (mt_tensor *[]){x, w, b}, &a);
            ref_batch(&a, x, a.affine ? w->data : NULL, a.affine ? b->data : NULL, rm2, rm2 + C,
                      ref);
            char name[96];
            snprintf(name, sizeof name, "%s[case %zu, %s]", BATCH_NAMES[cases[k].kind], k,
                     mode == 0   ? "affine"
                     : mode == 1 ? "no affine"
                                 : "eval");
            double e = max_rel_err(y->data, ref, y->n);
            CHECK(e < 1e-5, "%s vs naive: %g", name, e);
            if (cases[k].kind == K_BN)
                CHECK(max_rel_err(rm->data, rm2, C) < 1e-6 &&
                          max_rel_err(rv->data, rm2 + C, C) < 1e-6,
                      "%s: running statistics differ from the naive update", name);
            a.rm = a.rv = NULL; /* gradcheck runs it many times: keep the statistics fixed */
            if (mode == 2) a.rm = rm, a.rv = rv;
            gradcheck(name, build_batch, &a, a.affine ? 3 : 1, (mt_tensor *[]){x, w, b}, 1e-3,
                      1e-2);
            free(ref);
            free(rm2);
            test_tensor_free(x);
            test_tensor_free(w);
            test_tensor_free(b);
            test_tensor_free(rm);
            test_tensor_free(rv);
        }
    }
    c.training = true;
    mt_ctx_free(&c);
}

/* 1e3 + N(0, 1e-2^2) noise through BN, IN and GN (eps 1e-5, var 1e-4): the variance must survive:
   mean(y^2) = var / (var + eps). */
static void test_batch_large_mean(void) {
    mt_rng r;
    mt_rng_seed(&r, 22);
    int shape[] = {8, 48, 256};
    mt_tensor *x = test_tensor(&r, 3, shape, 0, 1, false);
    for (size_t i = 0; i < x->n; i++) x->data[i] = 1000.0f + 1e-2f * mt_rng_normal(&r);
    float *ref = malloc(x->n * sizeof(float));
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    for (int kind = K_BN; kind <= K_GN; kind++)
        for (int cl = 0; cl < 2; cl++) {
            batch_arg a = {(batch_kind)kind, 4, cl, false, true, NULL, NULL};
            mt_ctx_reset(&c);
            mt_tensor *y = build_batch(&c, &x, &a);
            ref_batch(&a, x, NULL, NULL, NULL, NULL, ref);
            double m2 = 0, rm2 = 0;
            for (size_t i = 0; i < x->n; i++) {
                m2 += (double)y->data[i] * y->data[i];
                rm2 += (double)ref[i] * ref[i];
            }
            CHECK(fabs(m2 / rm2 - 1) < 1e-3, "%s%s of 1e3 + noise: mean y^2 %g, naive %g",
                  BATCH_NAMES[kind], cl ? " channels-last" : "", m2 / x->n, rm2 / x->n);
            double e = max_rel_err(y->data, ref, x->n);
            CHECK(e < 2e-3, "%s%s of 1e3 + noise: %g relative to the naive loop", BATCH_NAMES[kind],
                  cl ? " channels-last" : "", e);
        }
    mt_ctx_free(&c);
    free(ref);
    test_tensor_free(x);
}

/* BatchNorm and GroupNorm gradients: the same bits with 1 and 2 threads. */
static void test_batch_deterministic(void) {
    mt_rng r;
    mt_rng_seed(&r, 23);
    int shape[] = {4096, 48}, C = 48;
    mt_tensor *x = test_tensor(&r, 2, shape, -1, 1, true);
    mt_tensor *w = test_tensor(&r, 1, &C, 0, 2, true), *b = test_tensor(&r, 1, &C, -1, 1, true);
    float *dy = malloc(x->n * sizeof(float)), *first = malloc((x->n + 2 * C) * sizeof(float));
    for (size_t i = 0; i < x->n; i++) dy[i] = mt_rng_uniform(&r) - 0.5f;
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    for (int kind = K_BN; kind <= K_GN; kind += 2)
        for (int t = 1; t <= 2; t++) {
            mt_set_threads(t);
            memset(x->grad, 0, x->n * sizeof(float));
            memset(w->grad, 0, C * sizeof(float));
            memset(b->grad, 0, C * sizeof(float));
            mt_ctx_reset(&c);
            batch_arg a = {(batch_kind)kind, 6, false, true, true, NULL, NULL};
            mt_backward_from(&c, build_batch(&c, (mt_tensor *[]){x, w, b}, &a), dy);
            if (t == 1) {
                memcpy(first, x->grad, x->n * sizeof(float));
                memcpy(first + x->n, w->grad, C * sizeof(float));
                memcpy(first + x->n + C, b->grad, C * sizeof(float));
            } else {
                CHECK(memcmp(first, x->grad, x->n * sizeof(float)) == 0 &&
                          memcmp(first + x->n, w->grad, C * sizeof(float)) == 0 &&
                          memcmp(first + x->n + C, b->grad, C * sizeof(float)) == 0,
                      "%s gradients differ between 1 and 2 threads", BATCH_NAMES[kind]);
            }
        }
    mt_set_threads(0);
    mt_ctx_free(&c);
    free(dy);
    free(first);
    test_tensor_free(x);
    test_tensor_free(w);
    test_tensor_free(b);
}

/* ---- the dispatcher ----------------------------------------------------------------------------
 */
static void expect_error(const mt_norm_cfg *cfg, int C, bool causal, const char *a, const char *b) {
    mt_err err = {0};
    mt_status st = mt_norm_validate(cfg, C, causal, &err);
    CHECK(st == MT_EINVAL && strstr(err.msg, a) && strstr(err.msg, b),
          "norm %s C=%d: expected an error naming '%s' and '%s', got '%s'",
          mt_enum_name(&MT_NORMS, cfg->kind), C, a, b, err.msg);
}

static void test_options(void) {
    mt_err err;
    int k;
    for (int i = MT_NORM_LN; i < MT_NORMS.n; i++) {
        CHECK(mt_enum_parse(&MT_NORMS, mt_enum_name(&MT_NORMS, i), &k, &err) == MT_OK && k == i,
              "parse(name(%d))", i);
        mt_norm_cfg cfg = mt_norm_default((mt_norm_kind)i);
        bool causal_ok = i != MT_NORM_BN && i != MT_NORM_IN;
        CHECK(mt_norm_validate(&cfg, 64, false, &err) == MT_OK, "default %s: %s",
              mt_enum_name(&MT_NORMS, (mt_norm_kind)i), err.msg);
        CHECK((mt_norm_validate(&cfg, 64, true, &err) == MT_OK) == causal_ok, "default %s, causal",
              mt_enum_name(&MT_NORMS, (mt_norm_kind)i));
    }
    CHECK(mt_enum_parse(&MT_NORMS, "layernorm", &k, &err) == MT_EINVAL &&
              strstr(err.msg, "layernorm") && strstr(err.msg, "ln") && strstr(err.msg, "scale") &&
              strstr(err.msg, "none"),
          "unknown name: %s", err.msg);
    mt_norm_cfg cfg = mt_norm_default(MT_NORM_PRMS);
    cfg.prms_p = 0;
    expect_error(&cfg, 64, false, "--prms-p", "(0, 1]");
    cfg.prms_p = 1.5f;
    expect_error(&cfg, 64, false, "1.5", "(0, 1]");
    cfg.prms_p = 1;
    CHECK(mt_norm_validate(&cfg, 64, false, &err) == MT_OK, "p = 1 is allowed");
    cfg = mt_norm_default(MT_NORM_GN);
    cfg.gn_groups = 5;
    expect_error(&cfg, 48, false, "5 groups", "48 channels");
    cfg = mt_norm_default(MT_NORM_LN);
    cfg.eps = -0.5f;
    expect_error(&cfg, 64, false, "--norm-eps", "-0.5");
    cfg.eps = NAN;
    expect_error(&cfg, 64, false, "--norm-eps", "nan");
    cfg = mt_norm_default(MT_NORM_BN);
    expect_error(&cfg, 64, true, "future", "--model vit");
    cfg = mt_norm_default(MT_NORM_IN);
    expect_error(&cfg, 64, true, "future", "InstanceNorm");
    /* DyT's and Derf's options: alphas > 0 (a site's 0: dyt_alpha), refused for other norms */
    cfg = mt_norm_default(MT_NORM_DYT);
    cfg.dyt_alpha = 0;
    expect_error(&cfg, 64, true, "--dyt-alpha", "> 0");
    cfg.dyt_alpha = NAN;
    expect_error(&cfg, 64, true, "--dyt-alpha", "nan");
    cfg = mt_norm_default(MT_NORM_DERF);
    cfg.dyt_alpha_ffn = -1;
    expect_error(&cfg, 64, true, "--dyt-alpha-ffn", "or 0");
    cfg = mt_norm_default(MT_NORM_DERF);
    cfg.derf_shift = INFINITY;
    expect_error(&cfg, 64, true, "--derf-shift", "finite");
    cfg = mt_norm_default(MT_NORM_DYT);
    cfg.derf_shift = 0.5f;
    expect_error(&cfg, 64, true, "--derf-shift 0.5", "only --norm derf does");
    cfg = mt_norm_default(MT_NORM_LN);
    cfg.dyt_alpha_attn = 0.8f;
    expect_error(&cfg, 64, true, "--dyt-alpha-attn 0.8", "only --norm dyt or derf does");
    cfg = mt_norm_default(MT_NORM_RMS);
    cfg.dyt_alpha = 0.7f;
    expect_error(&cfg, 64, true, "--dyt-alpha 0.7", "only --norm dyt or derf does");
    cfg = mt_norm_default(MT_NORM_DYT); /* the initial weight: > 0, refused for other norms */
    cfg.dyt_weight_init = 0;
    expect_error(&cfg, 64, true, "--dyt-weight-init", "> 0");
    cfg.dyt_weight_init = INFINITY;
    expect_error(&cfg, 64, true, "--dyt-weight-init", "finite");
    cfg = mt_norm_default(MT_NORM_LN);
    cfg.dyt_weight_init = 8;
    expect_error(&cfg, 64, true, "--dyt-weight-init 8", "only --norm dyt or derf does");
    cfg = mt_norm_default(MT_NORM_DERF);
    cfg.dyt_alpha_attn = 0.8f, cfg.dyt_alpha_final = 0.2f, cfg.derf_shift = -0.1f;
    cfg.dyt_weight_init = 8;
    CHECK(mt_norm_validate(&cfg, 64, true, &err) == MT_OK, "derf with site alphas: %s", err.msg);
    CHECK(mt_norm_at(&cfg, MT_NORM_SITE_ATTN).dyt_alpha == 0.8f &&
              mt_norm_at(&cfg, MT_NORM_SITE_FFN).dyt_alpha == 0.5f &&
              mt_norm_at(&cfg, MT_NORM_SITE_FINAL).dyt_alpha == 0.2f,
          "mt_norm_at: the site's alpha, else dyt_alpha");
    cfg = mt_norm_default(MT_NORM_RMS);
    CHECK(mt_norm_eps(&cfg) == 1e-5f, "LLaMA RMSNorm eps");
    cfg.rms_form = MT_RMS_PAPER;
    CHECK(mt_norm_eps(&cfg) == 1e-8f, "paper RMSNorm eps");
}

/* Parameter names, roles and initial values per kind; mt_norm_tokens equals the op. */
static void test_params_and_tokens(void) {
    struct {
        mt_norm_kind kind;
        const char *names; /* suffixes present, in table order */
    } cases[] = {
        {MT_NORM_LN, "weight bias"},
        {MT_NORM_RMS, "weight"},
        {MT_NORM_PRMS, "weight"},
        {MT_NORM_BN, "weight bias running_mean running_var"},
        {MT_NORM_IN, ""},
        {MT_NORM_GN, "weight bias"},
        {MT_NORM_SCALE, "g"},
        {MT_NORM_NONE, ""},
        {MT_NORM_DYT, "weight bias alpha"},
        {MT_NORM_DERF, "weight bias alpha shift"},
    };
    int C = 24;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mt_params P;
        mt_params_init_table(&P);
        mt_norm_cfg cfg = mt_norm_default(cases[i].kind);
        cfg.derf_shift = cases[i].kind == MT_NORM_DERF ? 0.25f : 0;
        cfg.dyt_weight_init = cases[i].kind == MT_NORM_DYT ? 8 : 1;
        mt_norm_params np;
        mt_norm_add_params(&P, "h.0.ln_1", &cfg, C, &np);
        char got[256] = "";
        for (int j = 0; j < P.n; j++) {
            strcat(got, j ? " " : "");
            strcat(got, P.p[j].name + strlen("h.0.ln_1."));
            bool buffer = strstr(P.p[j].name, "running") != NULL;
            CHECK(P.p[j].role == (buffer ? MT_ROLE_BUFFER : MT_ROLE_NORM) && !P.p[j].decay,
                  "%s: role", P.p[j].name);
        }
        CHECK(strcmp(got, cases[i].names) == 0, "norm %s params '%s', want '%s'",
              mt_enum_name(&MT_NORMS, cases[i].kind), got, cases[i].names);
        mt_params_alloc(&P, NULL);
        mt_rng r;
        mt_rng_seed(&r, 1);
        mt_params_initialize(&P, &r);
        if (np.g >= 0) CHECK(P.t[np.g].data[0] == sqrtf(C), "scale g = sqrt(C)");
        if (np.running_var >= 0) CHECK(P.t[np.running_var].data[3] == 1, "running_var = 1");
        if (np.weight >= 0)
            CHECK(P.t[np.weight].data[0] == cfg.dyt_weight_init &&
                      P.t[np.weight].data[C - 1] == cfg.dyt_weight_init,
                  "weight = 1 (DyT here: dyt_weight_init 8)");
        if (np.bias >= 0) CHECK(P.t[np.bias].data[C - 1] == 0, "bias = 0");
        if (np.alpha >= 0) CHECK(P.t[np.alpha].data[0] == 0.5f, "alpha = dyt_alpha (0.5)");
        if (np.shift >= 0) CHECK(P.t[np.shift].data[0] == 0.25f, "shift = derf_shift");
        mt_params_free(&P);
    }
    /* the dispatcher and the op agree */
    mt_params P;
    mt_params_init_table(&P);
    mt_norm_cfg cfg = mt_norm_default(MT_NORM_LN);
    mt_norm_params np;
    mt_norm_add_params(&P, "ln", &cfg, C, &np);
    mt_params_alloc(&P, NULL);
    mt_rng r;
    mt_rng_seed(&r, 2);
    mt_params_initialize(&P, &r);
    P.t[np.bias].data[1] = 0.25f;
    mt_tensor *x = test_tensor(&r, 3, (int[]){2, 3, C}, -1, 1, false);
    mt_ctx c;
    mt_ctx_init(&c, 1 << 20, 1, NULL);
    mt_tensor *a = mt_norm_tokens(&c, &cfg, &P, &np, x);
    mt_tensor *b = mt_layernorm(&c, x, &P.t[np.weight], &P.t[np.bias], 1e-5f);
    CHECK(memcmp(a->data, b->data, x->n * sizeof(float)) == 0, "norm_tokens(ln) = layernorm");
    cfg = mt_norm_default(MT_NORM_NONE);
    CHECK(mt_norm_tokens(&c, &cfg, &P, &np, x) == x, "none is the identity");
    /* bn over (B T) per channel, in over T per (b, c), gn per token */
    mt_tensor *x2 = test_tensor(&r, 2, (int[]){6, C}, -1, 1, false);
    memcpy(x2->data, x->data, x->n * sizeof(float));
    for (int kind = MT_NORM_BN; kind <= MT_NORM_GN; kind++) {
        cfg = mt_norm_default((mt_norm_kind)kind);
        cfg.gn_groups = 4;
        mt_tensor *t = mt_norm_tokens(&c, &cfg, &P, &np, x), *o;
        mt_tensor *rm = mt_tensor_zeros(&c, 1, &C), *rv = mt_tensor_zeros(&c, 1, &C);
        if (kind == MT_NORM_BN)
            o = mt_batchnorm(&c, x2, &P.t[np.weight], &P.t[np.bias], rm, rv, 0.1f, 1e-5f, false);
        else if (kind == MT_NORM_IN)
            o = mt_instancenorm(&c, mt_permute(&c, x, (int[]){0, 2, 1}), &P.t[np.weight],
                                &P.t[np.bias], 1e-5f, false);
        else o = mt_groupnorm(&c, x2, 4, &P.t[np.weight], &P.t[np.bias], 1e-5f, false);
        if (kind == MT_NORM_IN) o = mt_permute(&c, o, (int[]){0, 2, 1});
        CHECK(t->ndim == 3 && max_rel_err(t->data, o->data, x->n) < 1e-6,
              "norm_tokens(%s) differs from the op", mt_enum_name(&MT_NORMS, (mt_norm_kind)kind));
    }
    test_tensor_free(x2);
    mt_ctx_free(&c);
    test_tensor_free(x);
    mt_params_free(&P);
}

int main(void) {
    mt_set_threads(0);
    test_row_norms();
    test_large_mean();
    test_deterministic();
    test_point_norms();
    test_point_deterministic();
    test_qk_norm();
    test_batch_norms();
    test_batch_large_mean();
    test_batch_deterministic();
    test_options();
    test_params_and_tokens();
    return check_finish("test_norms");
}
