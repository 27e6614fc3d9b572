/* Optimizers, clipping, schedules, state files and configuration errors. Parity with
   torch.optim step by step is tests/parity/test_optim.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static bool near(double got, double want) { return fabs(got - want) <= 1e-9 * fabs(want) + 1e-15; }

/* The kinds every generic test runs. */
static const mt_optim_kind KINDS[] = {MT_OPTIM_SGD, MT_OPTIM_ADAM, MT_OPTIM_ADAMW, MT_OPTIM_MUON,
                                      MT_OPTIM_LION};
enum { N_KINDS = sizeof KINDS / sizeof KINDS[0] };

/* ---- schedules: lr 1e-3, warmup 10 from 1e-4, 110 steps, min_lr 1e-5 ------------------------ */

static void test_schedules(void) {
    /* steps 0, warmup - 1, warmup, the last step (steps - 1), and steps */
    const long at[5] = {0, 9, 10, 109, 110};
    struct {
        mt_sched_kind kind;
        double init, min, want[5];
    } cases[] = {
        /* warmup: 1e-4 + 9e-4 * s / 10, so 1e-4 at 0 and 9.1e-4 at 9 */
        {MT_SCHED_CONST, 1e-4, 0, {1e-4, 9.1e-4, 1e-3, 1e-3, 1e-3}},
        /* step 109: 1e-5 + 9.9e-4 * (1 + cos(0.99 pi)) / 2 = 1e-5 + 9.9e-4 * 2.4671981713e-4 */
        {MT_SCHED_COSINE, 1e-4, 1e-5, {1e-4, 9.1e-4, 1e-3, 1.02442526190e-5, 1e-5}},
        /* step 109: 1e-3 - 9.9e-4 * 99/100 */
        {MT_SCHED_LINEAR, 1e-4, 1e-5, {1e-4, 9.1e-4, 1e-3, 1.99e-5, 1e-5}},
        /* lr * min(s/10, sqrt(10/s)): 0, 9e-4, 1e-3, 1e-3 * sqrt(10/109), 1e-3 * sqrt(10/110) */
        {MT_SCHED_INVSQRT, 0, 0, {0, 9e-4, 1e-3, 3.0289126641e-4, 3.0151134458e-4}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mt_optim_config cfg = mt_optim_defaults();
        cfg.sched = (mt_schedule){cases[c].kind, 1e-3, cases[c].min, cases[c].init, 10, 110, 0};
        mt_err err;
        CHECK(mt_optim_validate(&cfg, &err) == MT_OK, "schedule %zu: %s", c, err.msg);
        for (int i = 0; i < 5; i++) {
            double got = mt_optim_lr_at(&cfg.sched, at[i]);
            bool ok = fabs(got - cases[c].want[i]) <= 1e-9 * fabs(cases[c].want[i]) + 1e-15;
            CHECK(ok, "%s at step %ld: %.12g, want %.12g",
                  mt_enum_name(&MT_SCHEDULES, cases[c].kind), at[i], got, cases[c].want[i]);
        }
    }
    /* wsd over the last 0.2 of 110 steps (22): lr up to step 88, then linear to min_lr at 110 */
    mt_schedule w = {MT_SCHED_WSD, 1e-3, 1e-5, 1e-4, 10, 110, 0.2};
    const long wat[8] = {0, 9, 10, 87, 88, 89, 109, 110};
    const double wwant[8] =
        {1e-4, 9.1e-4, 1e-3, 1e-3, 1e-3, 1e-5 + 9.9e-4 * 21 / 22, 1e-5 + 9.9e-4 / 22, 1e-5};
    for (int i = 0; i < 8; i++)
        CHECK(near(mt_optim_lr_at(&w, wat[i]), wwant[i]), "wsd at step %ld: %.12g, want %.12g",
              wat[i], mt_optim_lr_at(&w, wat[i]), wwant[i]);
    /* the decay's length rounds half to even, as Python's round: 2.5 -> 2, 7.5 -> 8 */
    w = (mt_schedule){MT_SCHED_WSD, 1e-3, 0, 0, 0, 10, 0.25};
    CHECK(mt_optim_lr_at(&w, 8) == 1e-3 && near(mt_optim_lr_at(&w, 9), 5e-4), "wsd 2.5 steps");
    w.decay_frac = 0.75;
    CHECK(mt_optim_lr_at(&w, 2) == 1e-3 && near(mt_optim_lr_at(&w, 3), 1e-3 * 7 / 8),
          "wsd 7.5 steps: %g", mt_optim_lr_at(&w, 3));
    w.decay_frac = 0; /* no decay: lr to the end */
    CHECK(mt_optim_lr_at(&w, 9) == 1e-3 && mt_optim_lr_at(&w, 10) == 0, "wsd without decay");

    /* no warmup: step 0 is already at lr */
    mt_schedule s = {MT_SCHED_COSINE, 1e-3, 0, 0, 0, 100, 0};
    CHECK(mt_optim_lr_at(&s, 0) == 1e-3, "cosine without warmup at 0: %g", mt_optim_lr_at(&s, 0));
    CHECK(near(mt_optim_lr_at(&s, 50), 5e-4), "cosine halfway: %g", mt_optim_lr_at(&s, 50));
}

/* ---- clipping ------------------------------------------------------------------------------- */

/* A table with a matrix, a bias, a norm weight, an embedding and a buffer (sizes not multiples
   of 16, so padding sits between them); data and grads uniform in [-1, 1). */
static void make_params(mt_params *P, int scale, uint64_t seed) {
    mt_params_init_table(P);
    mt_params_add(P, "wte", 2, (int[]){7 * scale, 5}, MT_ROLE_EMBEDDING, MT_INIT_NORMAL, 1);
    mt_params_add(P, "ln.weight", 1, (int[]){5}, MT_ROLE_NORM, MT_INIT_ONES, 0);
    mt_params_add(P, "fc.weight", 2, (int[]){9 * scale, 5}, MT_ROLE_MATRIX, MT_INIT_NORMAL, 1);
    mt_params_add(P, "fc.bias", 1, (int[]){9}, MT_ROLE_BIAS, MT_INIT_NORMAL, 1);
    mt_params_add(P, "bn.running_mean", 1, (int[]){3}, MT_ROLE_BUFFER, MT_INIT_NORMAL, 1);
    mt_params_add(P, "head.weight", 2, (int[]){3, 11 * scale}, MT_ROLE_MATRIX, MT_INIT_NORMAL, 1);
    MT_ASSERT(mt_params_alloc(P, NULL) == MT_OK, "alloc");
    mt_rng r;
    mt_rng_seed(&r, seed);
    mt_params_initialize(P, &r);
    for (int i = 0; i < P->n; i++)
        if (P->t[i].grad)
            for (size_t j = 0; j < P->t[i].n; j++) P->t[i].grad[j] = 2 * mt_rng_uniform(&r) - 1;
}

static void test_clip(void) {
    mt_params P;
    mt_params_init_table(&P);
    int a = mt_params_add(&P, "a", 1, (int[]){2}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    int b = mt_params_add(&P, "b", 1, (int[]){1}, MT_ROLE_BIAS, MT_INIT_ZEROS, 0);
    MT_ASSERT(mt_params_alloc(&P, NULL) == MT_OK, "alloc");
    P.t[a].grad[0] = 3, P.t[a].grad[1] = 4, P.t[b].grad[0] = 12; /* norm 13 */
    CHECK(mt_optim_grad_norm(&P) == 13, "norm %g, want 13", mt_optim_grad_norm(&P));
    double n = mt_optim_clip(&P, 20); /* above the norm: untouched */
    CHECK(n == 13 && P.t[a].grad[0] == 3 && P.t[b].grad[0] == 12, "clip 20 changed the grads");
    n = mt_optim_clip(&P, 0); /* 0: off */
    CHECK(n == 13 && P.t[a].grad[1] == 4, "clip 0 changed the grads");
    n = mt_optim_clip(&P, 6.5); /* scaled by 6.5 / (13 + 1e-6), the pre-clip norm reported */
    float f = (float)(6.5 / (13 + 1e-6));
    CHECK(n == 13, "clip reported %g, want the pre-clip 13", n);
    CHECK(P.t[a].grad[0] == 3 * f && P.t[a].grad[1] == 4 * f && P.t[b].grad[0] == 12 * f,
          "clipped grads %g %g %g, want %g %g %g", P.t[a].grad[0], P.t[a].grad[1], P.t[b].grad[0],
          3 * f, 4 * f, 12 * f);
    CHECK(fabs(mt_optim_grad_norm(&P) - 6.5) < 1e-5, "norm after clip %g", mt_optim_grad_norm(&P));
    mt_params_free(&P);

    /* a large table: the parallel norm equals a double loop, and the same bits every time */
    make_params(&P, 3000, 3);
    double want = 0;
    for (size_t i = 0; i < P.total; i++) want += (double)P.grad[i] * P.grad[i];
    want = sqrt(want);
    double got = mt_optim_grad_norm(&P);
    CHECK(fabs(got - want) <= 1e-12 * want, "parallel norm %.17g, serial %.17g", got, want);
    CHECK(mt_optim_grad_norm(&P) == got, "norm not deterministic");
    mt_params_free(&P);
}

/* ---- the update ------------------------------------------------------------------------------ */

static mt_optim_config config(mt_optim_kind kind) {
    mt_optim_config c = mt_optim_defaults();
    c.kind = kind;
    c.weight_decay = 0.1;
    if (kind == MT_OPTIM_SGD) c.momentum = 0.9, c.nesterov = true;
    return c;
}

/* Decay reaches the flagged entries only, buffers never move, the scope widens the flags. */
static void test_decay_and_buffers(void) {
    mt_params P;
    make_params(&P, 1, 1);
    mt_params_zero_grad(&P);
    float *before = malloc(P.total * sizeof(float));
    memcpy(before, P.data, P.total * sizeof(float));
    mt_optim o;
    mt_optim_config c = config(MT_OPTIM_ADAMW);
    CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
    mt_optim_step(&o, &P, 0.5); /* zero grads: only the decoupled decay moves anything */
    float keep = (float)(1 - 0.5 * 0.1);
    for (int i = 0; i < P.n; i++) {
        const mt_param *e = &P.p[i];
        bool ok = true;
        for (size_t j = 0; j < e->n; j++) {
            float b = before[e->offset + j];
            ok &= P.data[e->offset + j] == (e->decay ? b * keep : b);
        }
        CHECK(ok, "%s (decay %d) after a zero-grad AdamW step", e->name, e->decay);
    }
    CHECK(P.p[2].decay && P.p[5].decay && !P.p[0].decay && !P.p[1].decay && !P.p[3].decay,
          "default decay: matrices only");
    mt_optim_free(&o);

    c.decay_scope = MT_DECAY_EMBEDDINGS;
    CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
    CHECK(P.p[0].decay && !P.p[1].decay && !P.p[3].decay && !P.p[4].decay, "embeddings scope");
    mt_optim_free(&o);
    c.decay_scope = MT_DECAY_ALL;
    c.kind = MT_OPTIM_SGD; /* L2 decay moves every trainable entry, and still no buffer */
    CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
    CHECK(P.p[0].decay && P.p[1].decay && P.p[3].decay && !P.p[4].decay, "all scope");
    memcpy(before, P.data, P.total * sizeof(float));
    const mt_param *buf = &P.p[4];
    P.grad[buf->offset] = 1; /* whatever a buffer's grad slot holds, the buffer must not move */
    mt_optim_step(&o, &P, 0.5);
    CHECK(memcmp(P.data + buf->offset, before + buf->offset, buf->n * sizeof(float)) == 0,
          "a buffer was updated");
    CHECK(P.data[P.p[1].offset] != before[P.p[1].offset], "the norm weight was not decayed");
    mt_optim_free(&o);
    free(before);
    mt_params_free(&P);
}

/* Entry e's lr, weight-decay and eps scales (--param's, mt_param) in the scaled runs below. */
static void scale_entries(mt_params *P) {
    for (int e = 0; e < P->n; e++)
        P->p[e].lr_scale = 0.5f + 0.25f * e, P->p[e].wd_scale = 1.0f + e,
        P->p[e].eps_scale = 1.0f / (e + 1);
}

/* Each element against a naive loop written from torch's formulas (Lion: lion-pytorch's), in
   double, over 3 steps; Adam and AdamW again with per-entry scales (torch's param groups' lr,
   weight_decay and eps, as --param mup and completep set them) and an eps that matters. */
static void test_against_formula(void) {
    const mt_optim_kind kinds[] = {MT_OPTIM_SGD,  MT_OPTIM_ADAM, MT_OPTIM_ADAMW,
                                   MT_OPTIM_LION, MT_OPTIM_ADAM, MT_OPTIM_ADAMW};
    for (int ki = 0; ki < 6; ki++) {
        mt_optim_kind kind = kinds[ki];
        bool scaled = ki >= 4;
        mt_params P;
        make_params(&P, 1, 2);
        if (scaled) scale_entries(&P);
        mt_optim o;
        mt_optim_config c = config(kind);
        if (scaled) c.eps = 1e-2;
        CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
        size_t N = P.total;
        double *p = calloc(N, sizeof(double)), *m = calloc(N, sizeof(double)),
               *v = calloc(N, sizeof(double));
        for (size_t i = 0; i < N; i++) p[i] = P.data[i];
        double lr[3] = {0.1, 0.05, 0.02}, err = 0;
        for (int t = 1; t <= 3; t++) {
            for (int e = 0; e < P.n; e++) {
                if (P.p[e].role == MT_ROLE_BUFFER) continue;
                const mt_param *x = &P.p[e];
                double wd = x->decay ? c.weight_decay * x->wd_scale : 0, eta = lr[t - 1];
                double eps = c.eps * x->eps_scale;
                if (scaled) eta *= x->lr_scale;
                for (size_t j = P.p[e].offset; j < P.p[e].offset + P.p[e].n; j++) {
                    double g = P.grad[j];
                    if (kind == MT_OPTIM_SGD) {
                        double d = g + wd * p[j];
                        m[j] = t == 1 ? d : c.momentum * m[j] + d;
                        p[j] -= lr[t - 1] * (d + c.momentum * m[j]);
                        continue;
                    }
                    if (kind == MT_OPTIM_LION) {
                        double u = c.lion_beta1 * m[j] + (1 - c.lion_beta1) * g;
                        p[j] = p[j] * (1 - lr[t - 1] * wd) - lr[t - 1] * ((u > 0) - (u < 0));
                        m[j] = c.lion_beta2 * m[j] + (1 - c.lion_beta2) * g;
                        continue;
                    }
                    if (kind == MT_OPTIM_ADAM) g += wd * p[j];
                    else p[j] *= 1 - eta * wd;
                    m[j] = c.beta1 * m[j] + (1 - c.beta1) * g;
                    v[j] = c.beta2 * v[j] + (1 - c.beta2) * g * g;
                    double mh = m[j] / (1 - pow(c.beta1, t)), vh = v[j] / (1 - pow(c.beta2, t));
                    p[j] -= eta * mh / (sqrt(vh) + eps);
                }
            }
            mt_optim_step(&o, &P, lr[t - 1]);
            for (size_t i = 0; i < N; i++) err = worst_err(err, fabs(P.data[i] - p[i]));
        }
        CHECK(err < 2e-6, "%s%s vs the formula: max error %g", mt_enum_name(&MT_OPTIMS, c.kind),
              scaled ? " (scaled entries)" : "", err);
        CHECK(o.t == 3, "step count %ld", o.t);
        free(p), free(m), free(v);
        mt_optim_free(&o);
        mt_params_free(&P);
    }
}

/* ---- Muon against muon.py's formulas in double --------------------------------------------- */

/* zeropower_via_newtonschulz5 in double, as muon.py writes it: X (r, k) normalised, transposed
   when r > k, iterated, transposed back, into out. */
static void ns_double(const double *G, int r, int k, const mt_optim_config *c, double *out) {
    bool tall = r > k;
    int R = tall ? k : r, K = tall ? r : k; /* X is (R, K), R <= K */
    double *X = malloc((size_t)R * K * sizeof *X), *Y = malloc((size_t)R * K * sizeof *Y),
           *A = malloc((size_t)R * R * sizeof *A), *B = malloc((size_t)R * R * sizeof *B);
    double nrm = 0;
    for (int i = 0; i < r * k; i++) nrm += G[i] * G[i];
    nrm = sqrt(nrm) + c->ns_eps;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < K; j++) X[i * K + j] = (tall ? G[j * k + i] : G[i * k + j]) / nrm;
    for (int s = 0; s < c->ns_steps; s++) {
        for (int i = 0; i < R; i++) /* A = X X^T */
            for (int j = 0; j < R; j++) {
                A[i * R + j] = 0;
                for (int l = 0; l < K; l++) A[i * R + j] += X[i * K + l] * X[j * K + l];
            }
        for (int i = 0; i < R; i++) /* B = b A + c A A */
            for (int j = 0; j < R; j++) {
                double aa = 0;
                for (int l = 0; l < R; l++) aa += A[i * R + l] * A[l * R + j];
                B[i * R + j] = c->ns_b * A[i * R + j] + c->ns_c * aa;
            }
        for (int i = 0; i < R; i++) /* X = a X + B X */
            for (int j = 0; j < K; j++) {
                double bx = 0;
                for (int l = 0; l < R; l++) bx += B[i * R + l] * X[l * K + j];
                Y[i * K + j] = c->ns_a * X[i * K + j] + bx;
            }
        memcpy(X, Y, (size_t)R * K * sizeof *X);
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < K; j++) *(tall ? &out[j * k + i] : &out[i * k + j]) = X[i * K + j];
    free(X), free(Y), free(A), free(B);
}

/* One Muon step of hidden matrix e in double: p, m (its offsets), the gradient g. */
static void muon_double(const mt_param *e, double *p, double *m, const float *g, double lr,
                        const mt_optim_config *c) {
    int r = e->shape[0], k = e->shape[1];
    double *u = malloc(e->n * sizeof *u), *X = malloc(e->n * sizeof *X);
    double beta = c->muon_momentum, wd = c->muon_wd < 0 ? c->weight_decay : c->muon_wd;
    for (size_t j = 0; j < e->n; j++) {
        m[j] = beta * m[j] + (1 - beta) * g[j];
        u[j] = c->muon_nesterov ? (1 - beta) * g[j] + beta * m[j] : m[j];
    }
    ns_double(u, r, k, c, X);
    double s = c->muon_scale == MT_MUON_SCALE_REFERENCE ? sqrt(fmax(1, (double)r / k))
                                                        : c->muon_rms * sqrt(fmax(r, k));
    for (size_t j = 0; j < e->n; j++) p[j] = p[j] * (1 - lr * (e->decay ? wd : 0)) - lr * s * X[j];
    free(u), free(X);
}

/* Muon's hidden matrices (fc.weight tall, head.weight wide in this table) against the double
   loop; AdamW for the rest at adam_lr; three configs: the defaults, the plain momentum with
   Moonlight's scale and 3 iterations, each group at its own rate. */
/* The scales are AdamW's rules: every other kind refuses an entry that has them. */
static void test_scales_refused(void) {
    const mt_optim_kind kinds[] = {MT_OPTIM_SGD, MT_OPTIM_LION, MT_OPTIM_MUON};
    for (int ki = 0; ki < 3; ki++) {
        mt_params P;
        make_params(&P, 1, 2);
        scale_entries(&P);
        mt_optim o;
        mt_optim_config c = config(kinds[ki]);
        mt_err err;
        CHECK(mt_optim_init(&o, &c, &P, &err) == MT_EINVAL && strstr(err.msg, "--param") &&
                  strstr(err.msg, "--optim adamw"),
              "%s with scaled entries: %s", mt_enum_name(&MT_OPTIMS, c.kind), err.msg);
        mt_params_free(&P);
    }
}

static void test_muon_formula(void) {
    for (int variant = 0; variant < 3; variant++) {
        mt_params P;
        make_params(&P, 1, 2);
        mt_optim_config c = config(MT_OPTIM_MUON);
        c.sched.lr = 0.1;
        if (variant == 1)
            c.muon_nesterov = false, c.muon_scale = MT_MUON_SCALE_MATCH_ADAMW, c.ns_steps = 3;
        if (variant == 2) c.muon_lr = 0.05, c.adam_lr = 0.01, c.muon_wd = 0.3;
        mt_optim o;
        CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
        size_t N = P.total;
        double *p = calloc(N, sizeof(double)), *m = calloc(N, sizeof(double)),
               *v = calloc(N, sizeof(double));
        for (size_t i = 0; i < N; i++) p[i] = P.data[i];
        double lr[3] = {0.1, 0.05, 0.02}, err = 0;
        mt_rng r;
        mt_rng_seed(&r, 3);
        for (int t = 1; t <= 3; t++) {
            for (size_t i = 0; t > 1 && i < N; i++) /* a new direction: momentum matters */
                P.grad[i] = P.grad[i] != 0 ? 2 * mt_rng_uniform(&r) - 1 : 0;
            double f = lr[t - 1] / c.sched.lr;
            double mlr = c.muon_lr < 0 ? lr[t - 1] : c.muon_lr * f;
            double alr = c.adam_lr < 0 ? lr[t - 1] : c.adam_lr * f;
            for (int e = 0; e < P.n; e++) {
                const mt_param *x = &P.p[e];
                if (x->role == MT_ROLE_BUFFER) continue;
                if (x->role == MT_ROLE_MATRIX && x->ndim == 2) {
                    muon_double(x, p + x->offset, m + x->offset, P.grad + x->offset, mlr, &c);
                    continue;
                }
                double wd = x->decay ? c.weight_decay : 0;
                for (size_t j = x->offset; j < x->offset + x->n; j++) {
                    double g = P.grad[j];
                    p[j] *= 1 - alr * wd;
                    m[j] = c.beta1 * m[j] + (1 - c.beta1) * g;
                    v[j] = c.beta2 * v[j] + (1 - c.beta2) * g * g;
                    double mh = m[j] / (1 - pow(c.beta1, t)), vh = v[j] / (1 - pow(c.beta2, t));
                    p[j] -= alr * mh / (sqrt(vh) + c.eps);
                }
            }
            mt_optim_step(&o, &P, lr[t - 1]);
            for (size_t i = 0; i < N; i++) err = worst_err(err, fabs(P.data[i] - p[i]));
        }
        CHECK(o.n_whole == 2 && err < 2e-6, "muon variant %d vs the formula: max error %g", variant,
              err);
        free(p), free(m), free(v);
        mt_optim_free(&o);
        mt_params_free(&P);
    }
    /* a table without a hidden matrix is refused, naming the optimizer */
    mt_params P;
    mt_params_init_table(&P);
    mt_params_add(&P, "wte", 2, (int[]){7, 5}, MT_ROLE_EMBEDDING, MT_INIT_NORMAL, 1);
    mt_params_add(&P, "head", 2, (int[]){7, 5}, MT_ROLE_HEAD, MT_INIT_NORMAL, 1);
    MT_ASSERT(mt_params_alloc(&P, NULL) == MT_OK, "alloc");
    mt_optim o;
    mt_optim_config c = config(MT_OPTIM_MUON);
    mt_err err;
    CHECK(mt_optim_init(&o, &c, &P, &err) == MT_EINVAL && strstr(err.msg, "--optim muon") &&
              strstr(err.msg, "none"),
          "muon without a hidden matrix: %s", err.msg);
    mt_params_free(&P);
}

/* Many threads, many entries: the same bits as one thread (the partition is elementwise). */
static void test_threads(void) {
    mt_params P1, P2;
    make_params(&P1, 2000, 4);
    make_params(&P2, 2000, 4);
    for (int kind = 0; kind < N_KINDS; kind++) {
        mt_optim o1, o2;
        mt_optim_config c = config(KINDS[kind]);
        CHECK(mt_optim_init(&o1, &c, &P1, NULL) == MT_OK &&
                  mt_optim_init(&o2, &c, &P2, NULL) == MT_OK,
              "init");
        int threads = mt_threads();
        for (int s = 0; s < 3; s++) {
            mt_set_threads(1);
            mt_optim_step(&o1, &P1, 1e-2);
            mt_set_threads(threads > 1 ? threads : 4);
            mt_optim_step(&o2, &P2, 1e-2);
        }
        mt_set_threads(threads);
        CHECK(memcmp(P1.data, P2.data, P1.total * sizeof(float)) == 0,
              "%s: threads changed the result", mt_enum_name(&MT_OPTIMS, c.kind));
        mt_optim_free(&o1);
        mt_optim_free(&o2);
    }
    mt_params_free(&P1);
    mt_params_free(&P2);
}

/* bf16 precision: after each update every weight's bf16 copy is its new value rounded (the
   update writes the copy; nothing else refreshes it), at both sizes (one chunk, many; threads). */
static void test_bf16_copy(void) {
    for (int scale = 1; scale <= 2000; scale += 1999)
        for (int muon = 0; muon < 2 && (!muon || mt_bf16_check(NULL) == MT_OK); muon++) {
            mt_params P;
            make_params(&P, scale, 4);
            MT_ASSERT(mt_params_enable_bf16(&P, NULL) == MT_OK, "bf16");
            mt_bf16 *want = malloc(P.total * sizeof *want);
            mt_optim o;
            mt_optim_config c = config(muon ? MT_OPTIM_MUON : MT_OPTIM_ADAMW);
            CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
            for (int step = 0; step < 2; step++) {
                mt_optim_update(&o, &P, &(mt_grads){&P.grad, 1}, 0.1, 1.0f, true);
                mt_bf16_from_floats(want, P.data, P.total);
                size_t bad = 0;
                for (size_t i = 0; i < P.total; i++) bad += P.bf16[i] != want[i];
                CHECK(bad == 0,
                      "%s, scale %d, update %d: %zu of %zu bf16 weights are not the new "
                      "weights rounded",
                      o.type->name, scale, step + 1, bad, P.total);
            }
            mt_optim_free(&o);
            free(want);
            mt_params_free(&P);
        }
}

/* ---- the fused step: gradient in several buffers, clipping and zeroing in the update -------- */

/* mt_optim_update on a gradient in n buffers (1, 2, 3: a step's replicas), clipped or not, kept
   or consumed, against the unfused sequence on a copy (the buffers summed in order into P->grad,
   mt_optim_clip, mt_optim_step): the same norm, parameters and state to the bit, the buffers
   zeroed (or g[0] = the clipped sum when kept); mt_grads_sum gives the sum. Large tables run the
   parallel paths, small ones the short tails. */
static void test_fused(void) {
    const mt_optim_kind kinds[] = {MT_OPTIM_SGD,   MT_OPTIM_SGD,  MT_OPTIM_ADAM,
                                   MT_OPTIM_ADAMW, MT_OPTIM_MUON, MT_OPTIM_LION};
    for (int scale = 1; scale <= 2000; scale += 1999)
        for (int k = 0; k < 6; k++)
            for (int n = 1; n <= 3; n++)
                for (int clip = 0; clip < 2; clip++) {
                    bool keep = (k + n + clip) % 2;
                    mt_params P, Q; /* fused, unfused */
                    make_params(&P, scale, 9);
                    make_params(&Q, scale, 9);
                    size_t N = P.total;
                    mt_optim_config c = config(kinds[k]);
                    if (k == 0) c.momentum = 0, c.nesterov = false; /* plain SGD */
                    c.clip = clip ? 0.5 : 0; /* every step's norm is above 0.5 */
                    mt_optim o, q;
                    CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK &&
                              mt_optim_init(&q, &c, &Q, NULL) == MT_OK,
                          "init");
                    float *buf[3] = {P.grad, malloc(N * sizeof(float)), malloc(N * sizeof(float))};
                    mt_grads G = {buf, n};
                    mt_rng r;
                    mt_rng_seed(&r, 10);
                    bool same = true;
                    for (int s = 0; s < 3; s++) {
                        /* the buffers: random where P has gradients, zero elsewhere */
                        for (int b = 0; b < n; b++) {
                            memset(buf[b], 0, N * sizeof(float));
                            for (int i = 0; i < P.n; i++)
                                if (P.t[i].grad)
                                    for (size_t j = 0; j < P.p[i].n; j++)
                                        buf[b][P.p[i].offset + j] = 2 * mt_rng_uniform(&r) - 1;
                        }
                        for (size_t i = 0; i < N; i++) {
                            float g = buf[0][i];
                            for (int b = 1; b < n; b++) g += buf[b][i];
                            Q.grad[i] = g;
                        }
                        double want = mt_optim_clip(&Q, c.clip);
                        mt_optim_step(&q, &Q, 0.01);
                        double norm = mt_grads_norm(&G, N);
                        CHECK(norm == want, "norm %.17g, unfused %.17g", norm, want);
                        mt_optim_update(&o, &P, &G, 0.01, mt_optim_clip_coef(norm, c.clip), keep);
                        same &= memcmp(P.data, Q.data, N * sizeof(float)) == 0;
                        for (int k = 0; k < o.n_slots; k++)
                            same &= memcmp(o.slot[k], q.slot[k], N * sizeof(float)) == 0;
                        for (int b = 0; b < n; b++)
                            for (size_t i = 0; i < N; i++)
                                same &= buf[b][i] == (keep && b == 0 ? Q.grad[i] : 0.0f);
                    }
                    CHECK(same,
                          "%s%s, %d gradient buffers, clip %g, %s, %zu floats: the fused update "
                          "differs from sum, clip, step",
                          mt_enum_name(&MT_OPTIMS, c.kind), k == 0 ? " (plain)" : "", n, c.clip,
                          keep ? "kept" : "consumed", N);
                    /* mt_grads_sum: the sum in g[0], the others zeroed */
                    for (int b = 0; b < n; b++)
                        for (size_t i = 0; i < N; i++) buf[b][i] = (float)(b + 1) * (float)i;
                    mt_grads_sum(&G, N);
                    bool summed = true;
                    for (size_t i = 0; i < N; i++) {
                        float g = 0;
                        for (int b = 0; b < n; b++) g += (float)(b + 1) * (float)i;
                        summed &= buf[0][i] == g;
                        for (int b = 1; b < n; b++) summed &= buf[b][i] == 0;
                    }
                    CHECK(summed, "mt_grads_sum of %d buffers", n);
                    free(buf[1]);
                    free(buf[2]);
                    mt_optim_free(&o);
                    mt_optim_free(&q);
                    mt_params_free(&P);
                    mt_params_free(&Q);
                }
}

/* ---- state: save after 3 steps, load into a fresh optimizer, the 4th step is the same -------- */

static void test_state(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    for (int kind = 0; kind < N_KINDS; kind++) {
        mt_params P, Q;
        make_params(&P, 1, 5);
        make_params(&Q, 1, 5);
        mt_optim o, q;
        mt_optim_config c = config(KINDS[kind]);
        mt_err err;
        CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
        for (int s = 0; s < 3; s++) mt_optim_step(&o, &P, 0.01 * (s + 1));
        CHECK(mt_optim_save(&o, &P, path, &err) == MT_OK, "save: %s", err.msg);
        memcpy(Q.data, P.data, P.total * sizeof(float));
        CHECK(mt_optim_init(&q, &c, &Q, NULL) == MT_OK, "init");
        CHECK(mt_optim_load(&q, &Q, path, &err) == MT_OK, "load: %s", err.msg);
        CHECK(q.t == 3, "loaded step %ld", q.t);
        for (int k = 0; k < o.n_slots; k++)
            CHECK(memcmp(o.slot[k], q.slot[k], P.total * sizeof(float)) == 0,
                  "%s differs after load", o.type->slot_names[k]);
        mt_optim_step(&o, &P, 0.04);
        mt_optim_step(&q, &Q, 0.04);
        CHECK(memcmp(P.data, Q.data, P.total * sizeof(float)) == 0,
              "%s: the step after a resume differs", mt_enum_name(&MT_OPTIMS, c.kind));
        mt_optim_free(&q);

        /* a state file of another optimizer or another model is refused, the state untouched */
        mt_optim_config other = config(KINDS[(kind + 1) % N_KINDS]);
        CHECK(mt_optim_init(&q, &other, &Q, NULL) == MT_OK, "init");
        CHECK(mt_optim_load(&q, &Q, path, &err) == MT_EFORMAT && strstr(err.msg, "--optim") &&
                  q.t == 0,
              "another optimizer's state: %s", err.msg);
        mt_optim_free(&q);
        mt_params R;
        make_params(&R, 2, 5); /* other shapes */
        CHECK(mt_optim_init(&q, &c, &R, NULL) == MT_OK, "init");
        CHECK(mt_optim_load(&q, &R, path, &err) == MT_EFORMAT && strstr(err.msg, "shape") &&
                  strstr(err.msg, "wte"),
              "another model's state: %s", err.msg);
        mt_optim_free(&q);
        mt_params_free(&R);
        mt_params_init_table(&R); /* missing parameters: the file has an extra tensor */
        mt_params_add(&R, "wte", 2, (int[]){7, 5}, MT_ROLE_EMBEDDING, MT_INIT_ZEROS, 0);
        mt_params_add(&R, "fc.weight", 2, (int[]){9, 5}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
        MT_ASSERT(mt_params_alloc(&R, NULL) == MT_OK, "alloc");
        CHECK(mt_optim_init(&q, &c, &R, NULL) == MT_OK, "init");
        CHECK(mt_optim_load(&q, &R, path, &err) == MT_EFORMAT && strstr(err.msg, "ln.weight"),
              "an extra tensor: %s", err.msg);
        mt_optim_free(&q);
        mt_params_free(&R);

        mt_optim_free(&o);
        mt_params_free(&P);
        mt_params_free(&Q);
    }
    /* a parameter the file lacks */
    mt_params P, R;
    make_params(&P, 1, 5);
    mt_optim o;
    mt_optim_config c = config(MT_OPTIM_ADAM);
    mt_err err;
    CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
    CHECK(mt_optim_save(&o, &P, path, &err) == MT_OK, "save: %s", err.msg);
    mt_optim_free(&o);
    mt_params_init_table(&R);
    for (int i = 0; i < P.n; i++)
        mt_params_add(&R, P.p[i].name, P.p[i].ndim, P.p[i].shape, P.p[i].role, MT_INIT_ZEROS, 0);
    mt_params_add(&R, "new.bias", 1, (int[]){4}, MT_ROLE_BIAS, MT_INIT_ZEROS, 0);
    MT_ASSERT(mt_params_alloc(&R, NULL) == MT_OK, "alloc");
    CHECK(mt_optim_init(&o, &c, &R, NULL) == MT_OK, "init");
    CHECK(mt_optim_load(&o, &R, path, &err) == MT_EFORMAT && strstr(err.msg, "m.new.bias") &&
              strstr(err.msg, "missing"),
          "a missing tensor: %s", err.msg);
    mt_optim_free(&o);
    mt_params_free(&R);
    mt_params_free(&P);
    unlink(path);
}

/* ---- the kind interface: registry, slots, the walk, whole tensors, old state files -------- */

/* Every registered kind: its type's name is its --optim name, and its slots are those it says. */
static void test_registry(void) {
    for (int k = 0; k < MT_OPTIMS.n; k++) {
        const mt_optim_type *ty = mt_optim_types[k];
        CHECK(ty && strcmp(ty->name, mt_enum_name(&MT_OPTIMS, k)) == 0,
              "kind %d: type '%s', --optim name '%s'", k, ty ? ty->name : "(none)",
              mt_enum_name(&MT_OPTIMS, k));
    }
    struct {
        mt_optim_kind kind;
        double momentum;
        int slots;
        const char *names; /* the slots' names, joined */
    } cases[] = {{MT_OPTIM_SGD, 0, 0, ""},    {MT_OPTIM_SGD, 0.9, 1, "m"},
                 {MT_OPTIM_ADAM, 0, 2, "mv"}, {MT_OPTIM_ADAMW, 0, 2, "mv"},
                 {MT_OPTIM_MUON, 0, 2, "mv"}, {MT_OPTIM_LION, 0, 1, "m"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mt_optim_config c = mt_optim_defaults();
        c.kind = cases[i].kind, c.momentum = cases[i].momentum;
        mt_params P;
        make_params(&P, 1, 1);
        mt_optim o;
        CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
        char names[16] = "";
        for (int k = 0; k < o.n_slots; k++) strcat(names, o.type->slot_names[k]);
        bool allocated = true;
        for (int k = 0; k < MT_OPTIM_MAX_SLOTS; k++)
            allocated &= (o.slot[k] != NULL) == (k < o.n_slots);
        CHECK(mt_optim_state_slots(&c) == cases[i].slots && o.n_slots == cases[i].slots &&
                  strcmp(names, cases[i].names) == 0 && allocated,
              "%s, momentum %g: %d slots '%s' (state_slots %d), want %d '%s'",
              mt_enum_name(&MT_OPTIMS, c.kind), c.momentum, o.n_slots, names,
              mt_optim_state_slots(&c), cases[i].slots, cases[i].names);
        mt_optim_free(&o);
        mt_params_free(&P);
    }
}

/* A probe kind whose step records what it sees: slot 0 counts the visits of each float, slot 1
   holds the index of the entry that visited it, and the data becomes the gradient it was given.
   whole_matrices: 2-D matrices are stepped whole, with scratch of their size. */
static const mt_params *probe_P;
static bool probe_whole_matrices;
static int probe_bad; /* steps that saw something they should not have */

static int probe_slots(const mt_optim_config *c) {
    (void)c;
    return 2;
}
static void probe_scalars(const mt_optim_config *c, long t, double lr, void *k) {
    (void)c, (void)lr;
    memcpy(k, &t, sizeof t);
}
static bool probe_whole(const mt_optim_config *c, const mt_param *e) {
    (void)c;
    return probe_whole_matrices && e->role == MT_ROLE_MATRIX && e->ndim == 2;
}
static size_t probe_scratch(const mt_optim_config *c, const mt_param *e) {
    (void)c;
    return (size_t)e->shape[0] * (size_t)e->shape[1];
}
static void probe_step(const mt_optim_tensor *x, const void *k) {
    const mt_params *P = probe_P;
    const mt_param *e = x->e;
    long t;
    memcpy(&t, k, sizeof t);
    bool whole = probe_whole(NULL, e);
    size_t off = e->offset + x->lo;
    bool ok = e >= P->p && e < P->p + P->n && e->role != MT_ROLE_BUFFER && t >= 1 &&
              x->p == P->data + off && x->s[2] == NULL && x->lo + x->n <= (e->n + 15) / 16 * 16 &&
              (whole ? x->lo == 0 && x->n == e->n && x->scratch : !x->scratch && x->n <= 1024);
    if (!ok) {
#pragma omp atomic
        probe_bad++;
        return;
    }
    for (size_t i = 0; i < x->n; i++) {
        x->s[0][i] += 1;
        x->s[1][i] = (float)(e - P->p);
        x->p[i] = x->g[i];
    }
    if (whole) memset(x->scratch, 0xff, probe_scratch(NULL, e) * sizeof(float));
}
static mt_status probe_validate(const mt_optim_config *c, mt_err *err) {
    return c->weight_decay > 1 ? mt_errorf(err, MT_EINVAL, "probe: --weight-decay > 1") : MT_OK;
}
static const mt_optim_type probe_type = {
    .name = "probe",
    .slot_names = {"count", "entry"},
    .slots = probe_slots,
    .scalars = probe_scalars,
    .step = probe_step,
    .whole = probe_whole,
    .scratch = probe_scratch,
    .validate = probe_validate,
};

/* One update of the probe from 2 gradient buffers, scaled by 0.5, kept or consumed: every float
   of every trainable entry is visited once (stepped whole: its n elements, the padding never;
   else its padded span) by its own entry, never a buffer's; the data is the gradient read; the
   buffers are left as promised. Small and large tables, 1 and 4 threads. */
static void probe_update(int scale, int threads, bool whole, bool keep) {
    mt_params P;
    make_params(&P, scale, 11);
    probe_P = &P, probe_whole_matrices = whole, probe_bad = 0;
    mt_optim o;
    mt_optim_config c = mt_optim_defaults();
    CHECK(mt_optim_init_type(&o, &probe_type, &c, &P, NULL) == MT_OK, "probe init");
    size_t N = P.total;
    float *g1 = malloc(N * sizeof(float)), *buf[2] = {P.grad, g1};
    float *want = malloc(N * sizeof *want);
    for (size_t i = 0; i < N; i++) g1[i] = P.grad[i] * 3;
    for (size_t i = 0; i < N; i++) want[i] = (P.grad[i] + g1[i]) * 0.5f;
    int was = mt_threads();
    mt_set_threads(threads);
    mt_optim_update(&o, &P, &(mt_grads){buf, 2}, 0.1, 0.5f, keep);
    mt_set_threads(was);
    size_t bad = 0, left = 0;
    for (int i = 0; i < P.n; i++) {
        const mt_param *e = &P.p[i];
        bool trained = e->role != MT_ROLE_BUFFER, stepped_whole = trained && probe_whole(NULL, e);
        size_t span = (e->n + 15) / 16 * 16;
        for (size_t j = 0; j < span; j++) {
            size_t f = e->offset + j;
            bool visited = trained && (j < e->n || !stepped_whole);
            bad += o.slot[0][f] != (visited ? 1.0f : 0.0f) ||
                   o.slot[1][f] != (visited ? (float)i : 0.0f) ||
                   (visited && j < e->n && P.data[f] != want[f]);
            left += g1[f] != 0 || P.grad[f] != (keep && trained ? want[f] : 0.0f);
        }
    }
    CHECK(probe_bad == 0 && bad == 0 && left == 0,
          "probe, scale %d, %d threads, matrices %s, %s: %d steps saw a wrong view, %zu floats "
          "visited wrongly, %zu gradient floats left wrong",
          scale, threads, whole ? "whole" : "in pieces", keep ? "kept" : "consumed", probe_bad, bad,
          left);
    size_t largest = 0; /* the largest matrix: fc.weight (9 scale, 5) */
    for (int i = 0; i < P.n; i++)
        if (probe_whole(NULL, &P.p[i]) && P.p[i].n > largest) largest = P.p[i].n;
    CHECK(!whole || (o.scratch && o.scratch_floats == largest && largest == (size_t)45 * scale),
          "whole: scratch %zu floats a thread, want the largest matrix's %zu", o.scratch_floats,
          largest);
    mt_optim_free(&o);
    free(g1), free(want);
    mt_params_free(&P);
}

static void test_walk(void) {
    for (int scale = 1; scale <= 2000; scale += 1999)
        for (int threads = 1; threads <= 4; threads += 3)
            for (int whole = 0; whole < 2; whole++) probe_update(scale, threads, whole, whole);
    /* the kind's own validation runs at init */
    mt_params P;
    make_params(&P, 1, 1);
    mt_optim o;
    mt_optim_config c = mt_optim_defaults();
    c.weight_decay = 2;
    mt_err err;
    CHECK(mt_optim_init_type(&o, &probe_type, &c, &P, &err) == MT_EINVAL &&
              strstr(err.msg, "probe"),
          "the kind's validate was not called");
    mt_params_free(&P);
}

/* A state file as written before optimizer kinds were tables (state.c's format then: "m.<name>"
   and "v.<name>" for every trainable entry, metadata "optim" and "step"), built here tensor by
   tensor, loads into today's AdamW: its moments and step, to the bit. */
static void test_old_state(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/old.safetensors", dir);
    mt_params P;
    make_params(&P, 1, 6);
    mt_rng r;
    mt_rng_seed(&r, 12);
    float *mv[2] = {malloc(P.total * sizeof(float)), malloc(P.total * sizeof(float))};
    for (size_t i = 0; i < P.total; i++)
        mv[0][i] = mt_rng_uniform(&r), mv[1][i] = mt_rng_uniform(&r);
    mt_st_item items[32];
    char names[32][128];
    int n = 0;
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < P.n; i++) {
            const mt_param *e = &P.p[i];
            if (e->role == MT_ROLE_BUFFER) continue;
            snprintf(names[n], sizeof names[n], "%s.%s", b ? "v" : "m", e->name);
            items[n] = (mt_st_item){names[n], e->ndim, e->shape, mv[b] + e->offset};
            n++;
        }
    const char *keys[] = {"optim", "step"}, *vals[] = {"adamw", "7"};
    mt_err err;
    CHECK(mt_st_save(path, n, items, 2, keys, vals, &err) == MT_OK, "save: %s", err.msg);
    mt_optim o;
    mt_optim_config c = mt_optim_defaults();
    CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
    CHECK(mt_optim_load(&o, &P, path, &err) == MT_OK, "an old state file: %s", err.msg);
    size_t bad = 0;
    for (int i = 0; i < P.n; i++) {
        const mt_param *e = &P.p[i];
        if (e->role == MT_ROLE_BUFFER) continue;
        for (int b = 0; b < 2; b++)
            bad += memcmp(o.slot[b] + e->offset, mv[b] + e->offset, e->n * sizeof(float)) != 0;
    }
    CHECK(bad == 0 && o.t == 7, "an old state file: %zu moments differ, step %ld", bad, o.t);
    /* and today's save writes it back tensor for tensor */
    char again[512];
    snprintf(again, sizeof again, "%s/again.safetensors", dir);
    CHECK(mt_optim_save(&o, &P, again, &err) == MT_OK, "save: %s", err.msg);
    mt_safetensors st;
    CHECK(mt_st_load(again, &st, &err) == MT_OK, "load: %s", err.msg);
    bool same = st.n == n && strcmp(mt_st_meta(&st, "optim"), "adamw") == 0 &&
                strcmp(mt_st_meta(&st, "step"), "7") == 0;
    for (int j = 0; j < n && same; j++) {
        const mt_st_entry *x = mt_st_find(&st, names[j]);
        same = x && memcmp(x->data, items[j].data, x->n * sizeof(float)) == 0;
    }
    CHECK(same, "the state saved again differs from the old file");
    mt_st_free(&st);
    mt_optim_free(&o);
    free(mv[0]), free(mv[1]);
    mt_params_free(&P);
    unlink(path), unlink(again);
}

/* ---- bad values ------------------------------------------------------------------------------ */

/* The message of validating c contains every needle (the flag and what is accepted). */
static void expect_error(const mt_optim_config *c, const char *n1, const char *n2, int line) {
    mt_err err = {0};
    mt_status s = mt_optim_validate(c, &err);
    CHECK(s == MT_EINVAL && strstr(err.msg, n1) && strstr(err.msg, n2),
          "line %d: status %d, message '%s', want '%s' and '%s'", line, s, err.msg, n1, n2);
    mt_params P;
    make_params(&P, 1, 1);
    mt_optim o;
    CHECK(mt_optim_init(&o, c, &P, NULL) == MT_EINVAL, "line %d: init accepted a bad config", line);
    mt_params_free(&P);
}

#define BAD(edit, n1, n2)                                                                          \
    do {                                                                                           \
        mt_optim_config c = good;                                                                  \
        edit;                                                                                      \
        expect_error(&c, n1, n2, __LINE__);                                                        \
    } while (0)

static void test_errors(void) {
    mt_optim_config good = mt_optim_defaults();
    good.sched = (mt_schedule){MT_SCHED_COSINE, 1e-3, 1e-5, 0, 100, 1000, 0};
    CHECK(mt_optim_validate(&good, NULL) == MT_OK, "the good config");
    BAD(c.sched.lr = -1e-3, "--lr", ">= 0");
    BAD(c.sched.lr = NAN, "--lr", ">= 0");
    BAD(c.sched.min_lr = -1, "--min-lr", ">= 0");
    BAD(c.sched.warmup_init_lr = -1, "--warmup-init-lr", ">= 0");
    BAD(c.eps = -1e-8, "--eps", ">= 0");
    BAD(c.weight_decay = -0.1, "--weight-decay", ">= 0");
    BAD(c.clip = -1, "--clip", ">= 0");
    BAD(c.beta1 = 1, "--beta1", "[0, 1)");
    BAD(c.beta2 = -0.1, "--beta2", "[0, 1)");
    BAD((c.kind = MT_OPTIM_SGD, c.momentum = 1.5), "--momentum", "[0, 1)");
    BAD((c.kind = MT_OPTIM_SGD, c.nesterov = true), "--nesterov", "--momentum > 0");
    BAD(c.momentum = 0.9, "--momentum 0.9", "only --optim sgd does");
    BAD(c.sched.warmup = 1001, "--warmup 1001", "warmup <= steps");
    BAD(c.sched.steps = 0, "--schedule cosine", "number of steps");
    BAD(c.sched.min_lr = 1e-2, "--min-lr", "larger than --lr");
    BAD(c.sched.kind = MT_SCHED_CONST, "--min-lr", "only --schedule cosine, linear or wsd");
    BAD((c.sched.kind = MT_SCHED_INVSQRT, c.sched.min_lr = 0, c.sched.warmup = 0), "invsqrt",
        "--warmup >= 1");
    BAD(c.sched.warmup = -1, "--warmup", ">= 0");
    /* WSD, Muon, Lion */
    BAD(c.sched.decay_frac = 1.5, "--decay-frac", "[0, 1]");
    BAD(c.sched.decay_frac = -0.1, "--decay-frac", "[0, 1]");
    BAD(c.sched.decay_frac = NAN, "--decay-frac", "[0, 1]");
    BAD((c.sched.kind = MT_SCHED_WSD, c.sched.decay_frac = 0.95), "inside the --warmup",
        "warmup <= 50");
    BAD((c.kind = MT_OPTIM_MUON, c.ns_steps = 0), "--ns-steps", "at least 1");
    BAD((c.kind = MT_OPTIM_MUON, c.muon_momentum = 1), "--muon-momentum", "[0, 1)");
    BAD((c.kind = MT_OPTIM_MUON, c.muon_momentum = -0.5), "--muon-momentum", "[0, 1)");
    BAD((c.kind = MT_OPTIM_MUON, c.muon_lr = -2), "--muon-lr", "-1 (the default) or >= 0");
    BAD((c.kind = MT_OPTIM_MUON, c.adam_lr = 1e-3, c.sched.lr = 0, c.sched.min_lr = 0), "--adam-lr",
        "--lr > 0");
    BAD((c.kind = MT_OPTIM_MUON, c.ns_eps = 0), "--ns-eps", "> 0");
    BAD((c.kind = MT_OPTIM_LION, c.lion_beta2 = 1), "--lion-beta2", "[0, 1)");
    BAD(c.muon_lr = 0.02, "--muon-lr 0.02", "only --optim muon does");
    BAD(c.muon_nesterov = false, "--no-nesterov", "only --optim muon does");
    BAD((c.kind = MT_OPTIM_MUON, c.lion_beta1 = 0.5), "--lion-beta1 0.5", "only --optim lion does");
    /* meaningful where it looks odd: const and invsqrt need no step count, SGD ignores betas */
    mt_optim_config ok = good;
    ok.sched = (mt_schedule){MT_SCHED_INVSQRT, 1e-3, 0, 0, 4000, 0, 0};
    CHECK(mt_optim_validate(&ok, NULL) == MT_OK, "invsqrt without steps");
    ok.sched.kind = MT_SCHED_CONST;
    ok.sched.warmup = 0;
    CHECK(mt_optim_validate(&ok, NULL) == MT_OK, "const without steps");

    mt_err err;
    int v;
    CHECK(mt_enum_parse(&MT_OPTIMS, "adamw", &v, &err) == MT_OK && v == MT_OPTIM_ADAMW, "adamw");
    CHECK(mt_enum_parse(&MT_OPTIMS, "sgd", &v, &err) == MT_OK && v == MT_OPTIM_SGD, "sgd");
    CHECK(mt_enum_parse(&MT_OPTIMS, "lamb", &v, &err) == MT_EINVAL && strstr(err.msg, "'lamb'") &&
              strstr(err.msg, "optimizer") && strstr(err.msg, "sgd, adam, adamw"),
          "unknown optimizer: %s", err.msg);
    CHECK(mt_enum_parse(&MT_SCHEDULES, "invsqrt", &v, &err) == MT_OK && v == MT_SCHED_INVSQRT,
          "sched");
    CHECK(mt_enum_parse(&MT_SCHEDULES, "step", &v, &err) == MT_EINVAL &&
              strstr(err.msg, "const, cosine, linear, invsqrt") && strstr(err.msg, "schedule"),
          "unknown schedule: %s", err.msg);
    CHECK(mt_enum_parse(&MT_DECAY_SCOPES, "all", &v, &err) == MT_OK && v == MT_DECAY_ALL, "scope");
    CHECK(mt_enum_parse(&MT_DECAY_SCOPES, NULL, &v, &err) == MT_EINVAL &&
              strstr(err.msg, "matrices, embeddings, all"),
          "unknown scope: %s", err.msg);
    char buf[64];
    CHECK(strcmp(mt_enum_choices(&MT_SCHEDULES, buf, sizeof buf),
                 "const|cosine|linear|invsqrt|wsd") == 0 &&
              strcmp(mt_enum_name(&MT_OPTIMS, MT_OPTIM_ADAM), "adam") == 0 &&
              strcmp(mt_enum_name(&MT_OPTIMS, 7), "?") == 0,
          "choices %s", buf);
}

/* ZeRO-1's shards (src/train/zero.c): the optimizers of runs of entries that tile the table, each
   stepping its own entries, give the bits of one optimizer of the whole table (Muon too, with a
   shard that holds no matrix), and each loads its part of a whole state file; mt_zero_plan tiles
   the table with each run within the largest entry of 1/N of the floats. */
static void test_shards(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/shards.safetensors", dir);
    for (int kind = 0; kind < N_KINDS; kind++) {
        mt_params P, Q;
        make_params(&P, 300, 6);
        make_params(&Q, 300, 6);
        mt_optim_config c = config(KINDS[kind]);
        int first[4];
        mt_zero_plan(&P, 3, first); /* wte and ln; fc, its bias and the buffer; head */
        mt_optim o, q[3];
        mt_err err;
        CHECK(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
        for (int r = 0; r < 3; r++)
            CHECK(mt_optim_init_shard(&q[r], &c, &Q, first[r], first[r + 1], &err) == MT_OK,
                  "shard %d [%d, %d): %s", r, first[r], first[r + 1], err.msg);
        for (int s = 0; s < 3; s++) {
            mt_optim_step(&o, &P, 0.01 * (s + 1));
            for (int r = 0; r < 3; r++) mt_optim_step(&q[r], &Q, 0.01 * (s + 1));
        }
        const char *name = mt_enum_name(&MT_OPTIMS, c.kind);
        CHECK(memcmp(P.data, Q.data, P.total * sizeof(float)) == 0, "%s: the shards' steps differ",
              name);
        CHECK(mt_optim_save(&o, &P, path, &err) == MT_OK, "save: %s", err.msg);
        for (int r = 0; r < 3; r++) {
            size_t floats = (q[r].hi - q[r].lo) * sizeof(float);
            for (int k = 0; k < o.n_slots; k++)
                CHECK(memcmp(q[r].slot[k], o.slot[k] + q[r].lo, floats) == 0,
                      "%s: shard %d's %s differs", name, r, o.type->slot_names[k]);
            mt_optim_free(&q[r]);
            CHECK(mt_optim_init_shard(&q[r], &c, &Q, first[r], first[r + 1], NULL) == MT_OK &&
                      mt_optim_load(&q[r], &Q, path, &err) == MT_OK && q[r].t == 3,
                  "%s: shard %d's load: %s", name, r, err.msg);
            for (int k = 0; k < o.n_slots; k++)
                CHECK(memcmp(q[r].slot[k], o.slot[k] + q[r].lo, floats) == 0,
                      "%s: shard %d's loaded %s differs", name, r, o.type->slot_names[k]);
            mt_optim_free(&q[r]);
        }
        mt_optim_free(&o);
        mt_params_free(&P);
        mt_params_free(&Q);
    }
    mt_params P;
    make_params(&P, 40, 7);
    size_t largest = 0;
    for (int i = 0; i < P.n; i++) {
        size_t end = i + 1 < P.n ? P.p[i + 1].offset : P.total;
        largest = end - P.p[i].offset > largest ? end - P.p[i].offset : largest;
    }
    for (int N = 1; N <= 8; N++) {
        int first[9];
        mt_zero_plan(&P, N, first);
        bool ok = first[0] == 0 && first[N] == P.n;
        for (int r = 0; r < N; r++) {
            size_t lo = first[r] < P.n ? P.p[first[r]].offset : P.total;
            size_t hi = first[r + 1] < P.n ? P.p[first[r + 1]].offset : P.total;
            ok &= first[r] <= first[r + 1] && hi - lo <= P.total / N + largest;
        }
        CHECK(ok, "mt_zero_plan for %d ranks", N);
    }
    mt_params_free(&P);
}

int main(void) {
    char dir[] = "/tmp/mt_test_optim_XXXXXX";
    MT_ASSERT(mkdtemp(dir), "mkdtemp");
    test_schedules();
    test_clip();
    test_decay_and_buffers();
    test_against_formula();
    test_scales_refused();
    test_muon_formula();
    test_threads();
    test_fused();
    test_bf16_copy();
    test_state(dir);
    test_shards(dir);
    test_registry();
    test_walk();
    test_old_state(dir);
    test_errors();
    rmdir(dir);
    return check_finish("test_optim");
}
