/* src/nn layers: linear and attention against naive loops and by finite differences, the fused
   FFN by finite differences and against the unfused chain; DeepNorm's
   constants against the paper's table; one block of each placement against its formula. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- linear ---- */
static mt_tensor *build_linear(mt_ctx *c, mt_tensor **in, const void *arg) {
    return mt_linear(c, in[0], in[1], *(const bool *)arg ? in[2] : NULL);
}

static void test_linear(void) {
    mt_rng r;
    mt_rng_seed(&r, 11);
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    struct {
        int ndim, xs[3], O;
        bool bias;
    } cases[] = {{2, {1, 1}, 1, true},
                 {2, {5, 7}, 3, true},
                 {3, {2, 9, 17}, 70, true},
                 {3, {2, 3, 8}, 5, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int K = cases[k].xs[cases[k].ndim - 1], O = cases[k].O;
        mt_tensor *x = test_tensor(&r, cases[k].ndim, cases[k].xs, -1, 1, true);
        mt_tensor *w = test_tensor(&r, 2, (int[]){O, K}, -1, 1, true);
        mt_tensor *b = cases[k].bias ? test_tensor(&r, 1, &O, -1, 1, true) : NULL;
        mt_ctx_reset(&c);
        mt_tensor *y = mt_linear(&c, x, w, b);
        CHECK(y->ndim == x->ndim && mt_cols(y) == O && mt_rows(y) == mt_rows(x), "linear shape");
        float *ref = malloc(y->n * sizeof(float));
        for (int i = 0; i < mt_rows(x); i++)
            for (int o = 0; o < O; o++) {
                double s = b ? b->data[o] : 0.0;
                for (int j = 0; j < K; j++) s += (double)x->data[i * K + j] * w->data[o * K + j];
                ref[i * O + o] = (float)s;
            }
        CHECK(max_rel_err(y->data, ref, y->n) < 1e-5, "linear case %zu vs naive: %g", k,
              max_rel_err(y->data, ref, y->n));
        char name[32];
        snprintf(name, sizeof name, "linear[%zu]", k);
        gradcheck(name, build_linear, &cases[k].bias, b ? 3 : 2, (mt_tensor *[]){x, w, b}, 1e-2,
                  1e-3);
        free(ref);
        test_tensor_free(x);
        test_tensor_free(w);
        test_tensor_free(b);
    }
    mt_ctx_free(&c);
}

/* ---- fused FFN ---- */
typedef struct {
    mt_act act;
    bool bias;
} ffn_arg;

/* The inputs a case uses, of x, w1, b1, w2, b2, w3, b3 (in[0..6]): the biases only with bias,
   w3 and b3 only with SwiGLU. Returns how many, written into out. */
static int ffn_ins(const ffn_arg *a, mt_tensor **in, mt_tensor **out) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        bool b = i == 2 || i == 4 || i == 6, glu = i >= 5;
        if ((!b || a->bias) && (!glu || a->act == MT_ACT_SWIGLU)) out[n++] = in[i];
    }
    return n;
}

/* in: ffn_ins' selection, back in the places of x, w1, b1, w2, b2, w3, b3 (NULL where unused) */
static void ffn_unpack(const ffn_arg *a, mt_tensor **in, mt_tensor *t[7]) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        bool b = i == 2 || i == 4 || i == 6, glu = i >= 5;
        t[i] = (!b || a->bias) && (!glu || a->act == MT_ACT_SWIGLU) ? in[n++] : NULL;
    }
}

static mt_tensor *build_ffn(mt_ctx *c, mt_tensor **in, const void *arg) {
    const ffn_arg *a = arg;
    mt_tensor *t[7];
    ffn_unpack(a, in, t);
    return mt_ffn(c, t[0], t[1], t[2], t[3], t[4], t[5], t[6], a->act);
}

/* The same as separate ops: mt_linear, the activation op (SwiGLU: a second mt_linear and
   mt_swiglu), mt_linear. */
static mt_tensor *build_ffn_chain(mt_ctx *c, mt_tensor **in, const void *arg) {
    const ffn_arg *a = arg;
    mt_tensor *t[7];
    ffn_unpack(a, in, t);
    mt_tensor *h = mt_linear(c, t[0], t[1], t[2]);
    h = a->act == MT_ACT_SWIGLU ? mt_swiglu(c, h, mt_linear(c, t[0], t[5], t[6]))
                                : mt_activation(c, a->act, h);
    return mt_linear(c, h, t[3], t[4]);
}

/* x (B, T, C), w1 (F, C), b1 (F), w2 (C, F), b2 (C), w3 (F, C), b3 (F); weights scaled as an
   init would. Input i requires grad when bit i of grads is set. */
static void ffn_inputs(mt_rng *r, int B, int T, int C, int F, unsigned grads, mt_tensor *in[7]) {
    float s1 = 1.0f / sqrtf((float)C), s2 = 1.0f / sqrtf((float)F);
    in[0] = test_tensor(r, 3, (int[]){B, T, C}, -2, 2, grads & 1);
    in[1] = test_tensor(r, 2, (int[]){F, C}, -s1, s1, grads & 2);
    in[2] = test_tensor(r, 1, &F, -0.5f, 0.5f, grads & 4);
    in[3] = test_tensor(r, 2, (int[]){C, F}, -s2, s2, grads & 8);
    in[4] = test_tensor(r, 1, &C, -0.5f, 0.5f, grads & 16);
    in[5] = test_tensor(r, 2, (int[]){F, C}, -s1, s1, grads & 32);
    in[6] = test_tensor(r, 1, &F, -0.5f, 0.5f, grads & 64);
}

/* Forward and backward from a fixed dy on a fresh arena; returns the arena's peak in bytes, sets
   *kept to the bytes in use after the forward, and leaves y in y_out (n floats) and the input
   grads (zeroed first) in the tensors. */
static size_t ffn_run(gc_build build, const ffn_arg *a, mt_tensor **in, float *y_out,
                      size_t *kept) {
    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)64 << 20, 1, NULL) == MT_OK, "ffn test: no arena");
    mt_tensor *used[7];
    int n = ffn_ins(a, in, used);
    for (int i = 0; i < n; i++) memset(used[i]->grad, 0, used[i]->n * sizeof(float));
    mt_tensor *y = build(&c, used, a);
    *kept = c.arena.used;
    float *dy = mt_arena_floats(&c, y->n);
    for (size_t i = 0; i < y->n; i++) dy[i] = sinf(0.37f * (float)i);
    mt_backward_from(&c, y, dy);
    memcpy(y_out, y->data, y->n * sizeof(float));
    size_t peak = c.arena.peak;
    mt_ctx_free(&c);
    return peak;
}

static void test_ffn(void) {
    mt_rng r;
    mt_rng_seed(&r, 23);
    enum { NA = 6 };
    const mt_act acts[NA] = {MT_ACT_GELU, MT_ACT_GELU_ERF, MT_ACT_RELU,
                             MT_ACT_SILU, MT_ACT_SWIGLU,   MT_ACT_RELU2};
    mt_tensor *in[7], *used[7];

    /* Finite differences, every activation with and without biases; C and F not multiples of
       16. ReLU's kink (relu2's, in F''): a perturbation that moves some a = x W1^T + b1 across 0
       breaks the central difference, so its step is smaller (and the tolerance with it). */
    ffn_inputs(&r, 2, 5, 13, 21, 127, in);
    for (int k = 0; k < 2 * NA; k++) {
        ffn_arg a = {acts[k / 2], k % 2 == 0};
        char name[48];
        snprintf(name, sizeof name, "ffn[%s%s]", mt_enum_name(&MT_ACTS, a.act),
                 a.bias ? "" : ", no bias");
        bool relu = a.act == MT_ACT_RELU || a.act == MT_ACT_RELU2;
        int n = ffn_ins(&a, in, used);
        gradcheck(name, build_ffn, &a, n, used, relu ? 1e-3 : 1e-2, relu ? 1e-2 : 1e-3);
    }
    for (int i = 0; i < 7; i++) test_tensor_free(in[i]);

    /* N x F = 160 x 103 >= MT_PAR_MIN: the OpenMP paths of the activation (forward, recompute,
       derivative), fc1's bias and db1 loops, all on the way to b1's grad (SwiGLU: b3's too).
       Only the biases are perturbed: each element costs two forwards, and a loaded machine makes
       every parallel region slow. */
    ffn_inputs(&r, 2, 80, 5, 103, 4 | 64, in);
    for (int k = 0; k < 2; k++) {
        ffn_arg a = {k ? MT_ACT_SWIGLU : MT_ACT_GELU, true};
        int n = ffn_ins(&a, in, used);
        gradcheck(k ? "ffn[swiglu, N F >= MT_PAR_MIN]" : "ffn[gelu, N F >= MT_PAR_MIN]", build_ffn,
                  &a, n, used, 1e-2, 1e-3);
    }
    for (int i = 0; i < 7; i++) test_tensor_free(in[i]);

    /* Against the unfused chain: y and every gradient. Memory: the forward keeps N x F floats
       less (h), and the peak of forward + backward is 2 N x F lower (the chain holds h, dh and
       da at once, the fused op one N x F scratch buffer; SwiGLU: a, g and h against a and g
       kept, and dh, da, dg against two scratch buffers). */
    int B = 4, T = 64, C = 40, F = 100, N = B * T;
    ffn_inputs(&r, B, T, C, F, 127, in);
    float *y1 = malloc((size_t)N * C * sizeof(float)), *y2 = malloc((size_t)N * C * sizeof(float));
    float *g1[7];
    for (int i = 0; i < 7; i++) g1[i] = malloc(in[0]->n * sizeof(float)); /* x is the largest */
    for (int k = 0; k < 2 * NA; k++) {
        ffn_arg a = {acts[k / 2], k % 2 == 0};
        int n = ffn_ins(&a, in, used);
        size_t kept1, kept2, peak1 = ffn_run(build_ffn, &a, in, y1, &kept1);
        for (int i = 0; i < n; i++) memcpy(g1[i], used[i]->grad, used[i]->n * sizeof(float));
        size_t peak2 = ffn_run(build_ffn_chain, &a, in, y2, &kept2);
        const char *an = mt_enum_name(&MT_ACTS, a.act);
        CHECK(max_rel_err(y1, y2, (size_t)N * C) < 1e-6, "ffn %s bias %d: y vs the chain: %g", an,
              a.bias, max_rel_err(y1, y2, (size_t)N * C));
        for (int i = 0; i < n; i++) {
            double e = max_rel_err(g1[i], used[i]->grad, used[i]->n);
            CHECK(e < 1e-6, "ffn %s bias %d: grad of input %d vs the chain: %g", an, a.bias, i, e);
        }
        size_t nf = (size_t)N * F * sizeof(float);
        CHECK(kept2 >= kept1 + nf,
              "ffn %s bias %d: %zu bytes kept for backward, the chain %zu: "
              "expected at least %zu less",
              an, a.bias, kept1, kept2, nf);
        CHECK(peak2 >= peak1 + 2 * nf,
              "ffn %s bias %d: arena peak %zu bytes, the chain's %zu: "
              "expected at least %zu less",
              an, a.bias, peak1, peak2, 2 * nf);
    }
    free(y1);
    free(y2);
    for (int i = 0; i < 7; i++) {
        free(g1[i]);
        test_tensor_free(in[i]);
    }
}

/* ---- attention ---- */
typedef struct {
    int n_head;
    bool causal;
} attn_arg;

static mt_tensor *build_attention(mt_ctx *c, mt_tensor **in, const void *arg) {
    const attn_arg *a = arg;
    return mt_attention(c, in[0], in[1], in[2], a->n_head, a->causal);
}

/* The textbook loops, in double: out[b,t,h] = sum_s P_ts v[b,s,g], P = softmax_s(q.k / sqrt(HS)),
   k and v (B, T, KC) of KC / HS heads, head h reading key-value head g = h / (NH HS / KC);
   with dy, the gradients dq (B, T, C), dk, dv (B, T, KC) of sum(dy * out):
   dv_s = sum_t P_ts dy_t, dP_ts = dy_t . v_s, dS_ts = P_ts (dP_ts - sum_u P_tu dP_tu),
   dq_t = sum_s dS_ts k_s / sqrt(HS), dk_s = sum_t dS_ts q_t / sqrt(HS). */
static void ref_attention(const mt_tensor *q, const mt_tensor *k, const mt_tensor *v, int NH,
                          bool causal, float *out, const float *dy, float *dq, float *dk,
                          float *dv) {
    int B = q->shape[0], T = q->shape[1], C = q->shape[2], HS = C / NH, KC = k->shape[2];
    int G = NH / (KC / HS);
    double *p = malloc((size_t)T * T * sizeof(double)), *dp = malloc((size_t)T * sizeof(double));
    if (dy)
        memset(dq, 0, q->n * sizeof(float)), memset(dk, 0, k->n * sizeof(float)),
            memset(dv, 0, k->n * sizeof(float));
#define AT(x, t, i) ((x)[((size_t)b * T + (t)) * C + h * HS + (i)])
#define KV(x, t, i) ((x)[((size_t)b * T + (t)) * KC + h / G * HS + (i)])
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double *pt = p + (size_t)t * T, m = -INFINITY, sum = 0;
                for (int s = 0; s < T; s++) {
                    double dot = 0;
                    for (int i = 0; i < HS; i++)
                        dot += (double)AT(q->data, t, i) * KV(k->data, s, i);
                    pt[s] = (causal && s > t) ? -INFINITY : dot / sqrt((double)HS);
                    if (pt[s] > m) m = pt[s];
                }
                for (int s = 0; s < T; s++) sum += pt[s] = exp(pt[s] - m);
                for (int s = 0; s < T; s++) pt[s] /= sum;
                for (int i = 0; i < HS; i++) {
                    double o = 0;
                    for (int s = 0; s < T; s++) o += pt[s] * KV(v->data, s, i);
                    AT(out, t, i) = (float)o;
                }
                if (!dy) continue;
                double rowdot = 0;
                for (int s = 0; s < T; s++) {
                    dp[s] = 0;
                    for (int i = 0; i < HS; i++) dp[s] += (double)AT(dy, t, i) * KV(v->data, s, i);
                    rowdot += pt[s] * dp[s];
                }
                for (int s = 0; s < T; s++) {
                    double ds = pt[s] * (dp[s] - rowdot) / sqrt((double)HS);
                    for (int i = 0; i < HS; i++) {
                        KV(dv, s, i) += (float)(pt[s] * AT(dy, t, i));
                        AT(dq, t, i) += (float)(ds * KV(k->data, s, i));
                        KV(dk, s, i) += (float)(ds * AT(q->data, t, i));
                    }
                }
            }
#undef AT
#undef KV
    free(p);
    free(dp);
}

/* Both ways mt runs a head: register tiles (HS a multiple of 16, T <= 512) and strided sgemm
   (the rest), causal and not, T not a multiple of the tiles (8 rows, 16 or 32 keys), one head of
   one batch, against the loops above (output and gradients) and by finite differences; with
   grouped-query attention (NKV key-value heads of NH) on both paths. */
static void test_attention(void) {
    mt_rng r;
    mt_rng_seed(&r, 12);
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    struct {
        int B, T, C, NH;
        bool gradcheck;
        int NKV; /* 0: NH */
    } cases[] = {/* sgemm path: HS 2, 4, 4, 8, 2, 4; T 520 > 512 */
                 {1, 1, 4, 2, true, 0},
                 {2, 5, 8, 2, true, 0},
                 {2, 19, 12, 3, true, 0},
                 {1, 16, 8, 1, true, 0},
                 {1, 41, 4, 2, true, 0},
                 {3, 37, 16, 4, false, 0},
                 {1, 520, 32, 2, false, 0},
                 /* register tiles: HS 16, 32, 48, 16, 32, 32, 16 */
                 {1, 1, 16, 1, true, 0},
                 {2, 19, 32, 1, true, 0},
                 {1, 37, 48, 1, false, 0},
                 {4, 64, 64, 4, false, 0},
                 {2, 128, 64, 2, false, 0},
                 {3, 71, 96, 3, false, 0},
                 {1, 150, 32, 2, false, 0},
                 /* grouped-query: sgemm path (HS 2, 4, 4), register tiles (HS 16, 32) */
                 {2, 7, 8, 4, true, 2},
                 {1, 9, 16, 4, true, 1},
                 {3, 37, 24, 6, false, 2},
                 {2, 19, 64, 4, true, 2},
                 {2, 70, 128, 4, false, 1},
                 {1, 520, 32, 2, false, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int causal = 0; causal < 2; causal++) {
            int NH = cases[k].NH, NKV = cases[k].NKV ? cases[k].NKV : NH;
            int shape[] = {cases[k].B, cases[k].T, cases[k].C};
            int kvshape[] = {cases[k].B, cases[k].T, cases[k].C / NH * NKV};
            attn_arg a = {NH, causal};
            mt_tensor *q = test_tensor(&r, 3, shape, -2, 2, true);
            mt_tensor *kk = test_tensor(&r, 3, kvshape, -2, 2, true);
            mt_tensor *v = test_tensor(&r, 3, kvshape, -1, 1, true);
            mt_tensor *dy = test_tensor(&r, 3, shape, -1, 1, false);
            size_t n = q->n, nkv = kk->n;
            float *ref = malloc((2 * n + 2 * nkv) * sizeof(float));
            float *g[3] = {ref + n, ref + 2 * n, ref + 2 * n + nkv};
            ref_attention(q, kk, v, a.n_head, causal, ref, dy->data, g[0], g[1], g[2]);
            mt_ctx_reset(&c);
            mt_tensor *in[3] = {q, kk, v};
            for (int i = 0; i < 3; i++) memset(in[i]->grad, 0, in[i]->n * sizeof(float));
            c.grad_enabled = false; /* not recorded: the register-tile path keeps no exp(S - m) */
            mt_tensor *y = mt_attention(&c, q, kk, v, a.n_head, causal);
            c.grad_enabled = true;
            float *y0 = malloc(n * sizeof(float));
            memcpy(y0, y->data, n * sizeof(float));
            y = mt_attention(&c, q, kk, v, a.n_head, causal);
            CHECK(!memcmp(y0, y->data, n * sizeof(float)) && !c.tape->prev,
                  "attention case %zu causal %d: recorded and not, outputs differ", k, causal);
            free(y0);
            double e = max_rel_err(y->data, ref, n);
            CHECK(e < 1e-5, "attention case %zu causal %d vs naive: %g", k, causal, e);
            mt_backward_from(&c, y, dy->data);
            for (int i = 0; i < 3; i++) {
                e = max_rel_err(in[i]->grad, g[i], in[i]->n);
                CHECK(e < 1e-5, "attention case %zu causal %d: d%s vs naive: %g", k, causal,
                      (const char *[]){"q", "k", "v"}[i], e);
            }
            if (cases[k].gradcheck) {
                char name[48];
                snprintf(name, sizeof name, "attention[%zu]%s", k, causal ? " causal" : "");
                gradcheck(name, build_attention, &a, 3, (mt_tensor *[]){q, kk, v}, 1e-2, 2e-3);
            }
            free(ref);
            test_tensor_free(q);
            test_tensor_free(kk);
            test_tensor_free(v);
            test_tensor_free(dy);
        }
    /* a NaN in one key reaches the rows that see it, on both paths (the softmax must not turn its
       score into a 0 probability) */
    for (int HS = 16; HS >= 4; HS -= 12) {
        int shape[] = {1, 9, HS};
        mt_tensor *q = test_tensor(&r, 3, shape, -1, 1, false);
        mt_tensor *kk = test_tensor(&r, 3, shape, -1, 1, false);
        kk->data[HS + 1] = NAN; /* key 1 */
        mt_ctx_reset(&c);
        mt_tensor *y = mt_attention(&c, q, kk, q, 1, true);
        CHECK(isnan(y->data[8 * HS]) && !isnan(y->data[0]),
              "attention, HS %d: the last row "
              "(sees key 1) %g, row 0 %g",
              HS, y->data[8 * HS], y->data[0]);
        test_tensor_free(q);
        test_tensor_free(kk);
    }
    mt_ctx_free(&c);
}

/* ---- RoPE ---- */
typedef struct {
    const mt_rope *rope;
    int pos0;
} rope_arg;

static mt_tensor *build_rope(mt_ctx *c, mt_tensor **in, const void *arg) {
    const rope_arg *a = arg;
    return mt_rope_apply(c, a->rope, in[0], a->pos0);
}

/* The rotation against its formula in double (llama2.c's adjacent pairs) at positions from 0
   and beyond 1000, by finite differences, and the bad tables refused. */
static void test_rope(void) {
    mt_rng r;
    mt_rng_seed(&r, 21);
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    struct {
        int B, T, W, HS, pos0;
        float theta;
    } cases[] = {{2, 5, 12, 4, 0, 10000},
                 {1, 64, 16, 8, 1000, 10000},
                 {3, 9, 6, 6, 2, 3.5f},
                 {2, 300, 64, 32, 700, 500000}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        mt_rope rope;
        mt_err e;
        int T = cases[k].T, W = cases[k].W, HS = cases[k].HS, pos0 = cases[k].pos0;
        CHECK(mt_rope_init(&rope, pos0 + T, HS, cases[k].theta, &e) == MT_OK, "rope: %s", e.msg);
        mt_tensor *x = test_tensor(&r, 3, (int[]){cases[k].B, T, W}, -1, 1, true);
        mt_ctx_reset(&c);
        mt_tensor *y = mt_rope_apply(&c, &rope, x, pos0);
        float *ref = malloc(x->n * sizeof *ref);
        for (size_t row = 0; row < x->n / (size_t)W; row++)
            for (int j = 0; j < W; j += 2) {
                int i = j % HS / 2;
                double ang = (pos0 + (int)(row % (size_t)T)) *
                             pow((double)cases[k].theta, -2.0 * i / HS);
                double a = x->data[row * W + j], b = x->data[row * W + j + 1];
                ref[row * W + j] = (float)(a * cos(ang) - b * sin(ang));
                ref[row * W + j + 1] = (float)(a * sin(ang) + b * cos(ang));
            }
        double err = max_rel_err(y->data, ref, x->n);
        CHECK(err < 1e-6, "rope case %zu vs the formula: %g", k, err);
        if (x->n < 2000) {
            char name[32];
            snprintf(name, sizeof name, "rope[%zu]", k);
            gradcheck(name, build_rope, &(rope_arg){&rope, pos0}, 1, &x, 1e-2, 1e-3);
        }
        free(ref);
        test_tensor_free(x);
        mt_rope_free(&rope);
    }
    mt_rope bad;
    mt_err e;
    CHECK(mt_rope_init(&bad, 8, 5, 10000, &e) == MT_EINVAL && strstr(e.msg, "even"),
          "an odd head size is refused");
    CHECK(mt_rope_init(&bad, 8, 4, 0, &e) == MT_EINVAL, "theta 0 is refused");
    mt_ctx_free(&c);
}

/* ---- DeepNorm constants (docs/layers.md's table, DeepNet Table 1 / Figure 2) ---- */
static void test_deepnorm_constants(void) {
    float a, b;
    /* the two values docs/layers.md spells out, decoder-only */
    mt_deepnorm_constants(MT_DEEPNORM_DECODER_ONLY, 0, 100, &a, &b);
    CHECK(fabsf(a - 3.760603f) < 1e-5f && fabsf(b - 0.188030f) < 1e-6f, "M=100: %.6f %.6f", a, b);
    mt_deepnorm_constants(MT_DEEPNORM_DECODER_ONLY, 0, 1000, &a, &b);
    CHECK(fabsf(a - 6.687403f) < 1e-5f && fabsf(b - 0.105737f) < 1e-6f, "M=1000: %.6f %.6f", a, b);
    int layers[] = {1, 6, 18, 100};
    for (int i = 0; i < 4; i++) {
        double N = layers[i], M = layers[(i + 1) % 4];
        struct {
            mt_deepnorm_arch arch;
            double alpha, beta;
        } rows[] = {
            {MT_DEEPNORM_ENCODER_ONLY, pow(2 * N, 0.25), pow(8 * N, -0.25)},
            {MT_DEEPNORM_DECODER_ONLY, pow(2 * M, 0.25), pow(8 * M, -0.25)},
            {MT_DEEPNORM_ENCDEC_ENCODER, 0.81 * pow(N * N * N * N * M, 1.0 / 16),
             0.87 * pow(N * N * N * N * M, -1.0 / 16)},
            {MT_DEEPNORM_ENCDEC_DECODER, pow(3 * M, 0.25), pow(12 * M, -0.25)},
        };
        for (int r = 0; r < 4; r++) {
            mt_deepnorm_constants(rows[r].arch, (int)N, (int)M, &a, &b);
            CHECK(fabs(a - rows[r].alpha) < 1e-6 * rows[r].alpha &&
                      fabs(b - rows[r].beta) < 1e-6 * rows[r].beta,
                  "deepnorm row %d N=%g M=%g: alpha %g beta %g, want %g %g", r, N, M, a, b,
                  rows[r].alpha, rows[r].beta);
        }
    }
}

/* ---- one block of each placement against its formula, with LayerNorm written out here ---- */

/* y = LN(x) rows of C, biased variance, eps inside the sqrt, weight w and bias b. */
static void ref_layernorm(const float *x, const float *w, const float *b, int N, int C, float *y) {
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C;
        double m = 0, v = 0;
        for (int j = 0; j < C; j++) m += xr[j];
        m /= C;
        for (int j = 0; j < C; j++) v += (xr[j] - m) * (xr[j] - m);
        double rstd = 1 / sqrt(v / C + 1e-5);
        for (int j = 0; j < C; j++)
            y[(size_t)r * C + j] = (float)((xr[j] - m) * rstd * w[j] + b[j]);
    }
}

/* s = a x + f; out = LN_np(s) when norm, else s (n floats, rows of C). */
static void ref_combine(float a, const float *x, const float *f, bool norm, mt_params *P,
                        const mt_norm_params *np, int n, int C, float *out) {
    float *s = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) s[i] = a * x[i] + f[i];
    if (norm) ref_layernorm(s, P->t[np->weight].data, P->t[np->bias].data, n / C, C, out);
    else memcpy(out, s, (size_t)n * sizeof(float));
    free(s);
}

static mt_tensor *ptensor(mt_params *P, int i) { return i >= 0 ? &P->t[i] : NULL; }

/* LN(x) into the arena, x (..., K) rows of K; np the norm's parameters. */
static mt_tensor *ref_ln_tensor(mt_ctx *c, mt_params *P, const mt_norm_params *np, mt_tensor *x) {
    int K = x->shape[x->ndim - 1];
    float *y = malloc(x->n * sizeof(float));
    ref_layernorm(x->data, P->t[np->weight].data, P->t[np->bias].data, (int)(x->n / K), K, y);
    mt_tensor *t = mt_tensor_from(c, y, x->ndim, x->shape);
    free(y);
    return t;
}

/* Sub-LN's sublayers written out: out_proj(LN_inner(attention(q, k, v))) and
   fc2(LN_inner(gelu(fc1 x))), from the plain ops and the LayerNorm above. */
static mt_tensor *subln_attn_by_hand(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                     const mt_block_params *bp, mt_tensor *x, void *arg) {
    (void)arg;
    const mt_attn_params *a = &bp->attn;
    mt_tensor *q = mt_linear(c, x, &P->t[a->q_w], ptensor(P, a->q_b));
    mt_tensor *k = mt_linear(c, x, &P->t[a->k_w], ptensor(P, a->k_b));
    mt_tensor *v = mt_linear(c, x, &P->t[a->v_w], ptensor(P, a->v_b));
    mt_tensor *y = ref_ln_tensor(c, P, &bp->attn_inner,
                                 mt_attention(c, q, k, v, cfg->n_head, true));
    return mt_linear(c, y, &P->t[a->out_w], ptensor(P, a->out_b));
}

static mt_tensor *subln_ffn_by_hand(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                    const mt_block_params *bp, mt_tensor *x, void *arg) {
    (void)arg, (void)cfg;
    const mt_ffn_params *f = &bp->ffn;
    mt_tensor *h = mt_gelu(c, mt_linear(c, x, &P->t[f->fc1_w], ptensor(P, f->fc1_b)));
    CHECK(h->shape[2] == cfg->F, "the FFN's hidden width");
    return mt_linear(c, ref_ln_tensor(c, P, &bp->ffn_inner, h), &P->t[f->fc2_w],
                     ptensor(P, f->fc2_b));
}

/* One sublayer of a block at index cfg->layer by hand into out (n floats): F from the nn
   functions (Sub-LN's written out), every norm, scale and residual from the formula. */
static void ref_sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                         const mt_block_params *bp, int s, const float *in, float *out, int n) {
    const mt_norm_params *np = s ? &bp->ffn_norm : &bp->attn_norm;
    mt_sublayer f = s ? mt_ffn_sublayer : mt_attn_sublayer;
    int C = cfg->C, pl = cfg->placement;
    int shape[3] = {n / (5 * C), 5, C};
    float *tmp = malloc((size_t)n * sizeof(float));
    mt_tensor *xin = mt_tensor_from(c, in, 3, shape);
    if (pl == MT_PLACE_MIXLN) pl = cfg->layer < cfg->mixln_post ? MT_PLACE_POST : MT_PLACE_PRE;
    if (cfg->residual == MT_RESIDUAL_NGPT) { /* Norm(x + a (Norm(F(x)) - x)), a = k |alpha| */
        mt_tensor *fx = f(c, cfg, P, bp, xin, NULL);
        const float *al = P->t[s ? bp->ngpt.ffn_alpha : bp->ngpt.attn_alpha].data;
        double k = (double)cfg->ngpt.alpha_init / cfg->ngpt.alpha_scale;
        for (int r = 0; r < n / C; r++) {
            const float *x = in + r * C, *y = fx->data + r * C;
            double ny = 0, nz = 0, z[64];
            for (int j = 0; j < C; j++) ny += (double)y[j] * y[j];
            for (int j = 0; j < C; j++) {
                z[j] = x[j] + k * fabs((double)al[j]) * (y[j] / sqrt(ny) - x[j]);
                nz += z[j] * z[j];
            }
            for (int j = 0; j < C; j++) out[r * C + j] = (float)(z[j] / sqrt(nz));
        }
    } else if (pl == MT_PLACE_PRE || pl == MT_PLACE_SUBLN || pl == MT_PLACE_LNS ||
               pl == MT_PLACE_DSL) {
        /* x + F(LN(x) s), s = 1 / sqrt(l + 1) for LNS; DSL: lambda x + beta F(LN(x)) */
        if (pl == MT_PLACE_SUBLN) f = s ? subln_ffn_by_hand : subln_attn_by_hand;
        double scale = pl == MT_PLACE_LNS ? 1 / sqrt(cfg->layer + 1.0) : 1;
        ref_layernorm(in, P->t[np->weight].data, P->t[np->bias].data, n / C, C, tmp);
        for (int i = 0; i < n; i++) tmp[i] = (float)(tmp[i] * scale);
        mt_tensor *fx = f(c, cfg, P, bp, mt_tensor_from(c, tmp, 3, shape), NULL);
        bool dsl = pl == MT_PLACE_DSL;
        for (size_t i = 0; dsl && i < fx->n; i++) fx->data[i] *= cfg->dsl_beta;
        ref_combine(dsl ? cfg->dsl_lambda : 1.0f, in, fx->data, false, P, np, n, C, out);
    } else if (pl == MT_PLACE_PERI || pl == MT_PLACE_REORDER) {
        /* x + LN_out(F(LN_in(x))); reorder: x + LN(F(x)) */
        bool peri = pl == MT_PLACE_PERI;
        if (peri) ref_layernorm(in, P->t[np->weight].data, P->t[np->bias].data, n / C, C, tmp);
        mt_tensor *fx = f(c, cfg, P, bp, peri ? mt_tensor_from(c, tmp, 3, shape) : xin, NULL);
        const mt_norm_params *no = !peri ? np : s ? &bp->ffn_out : &bp->attn_out;
        ref_combine(1.0f, in, ref_ln_tensor(c, P, no, fx)->data, false, P, np, n, C, out);
    } else { /* LN(a x + F(x)), a = 1 (post) or alpha (deepnorm) */
        mt_tensor *fx = f(c, cfg, P, bp, xin, NULL);
        ref_combine(pl == MT_PLACE_DEEPNORM ? cfg->alpha : 1.0f, in, fx->data, true, P, np, n, C,
                    out);
    }
    free(tmp);
}

/* The block's parameters: Sub-LN's inner norms (C and F channels) and Peri-LN's output norms
   where the placement has them, and 16 others. */
static void check_block_params(const mt_params *P, const mt_block_cfg *cfg, int C, int F) {
    int pl = cfg->placement;
    if (cfg->residual == MT_RESIDUAL_NGPT) { /* no norm, no bias: 7 unit matrices and 5 vectors */
        const char *unit[] = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc3", "fc2"};
        for (int i = 0; i < 7; i++)
            CHECK(P->p[i].unit == (i == 3 || i == 6 ? MT_UNIT_COLS : MT_UNIT_ROWS) &&
                      strstr(P->p[i].name, unit[i]),
                  "ngpt: entry %d %s, unit %d", i, P->p[i].name, (int)P->p[i].unit);
        const char *vec[] = {"attn_alpha", "attn.s_qk", "ffn_alpha", "ffn.s_u", "ffn.s_v"};
        for (int i = 0; i < 5 && P->n == 12; i++)
            CHECK(strstr(P->p[7 + i].name, vec[i]) && P->p[7 + i].n == (size_t)(i < 3 ? C : F) &&
                      !P->p[7 + i].unit,
                  "ngpt: entry %d %s", 7 + i, P->p[7 + i].name);
        CHECK(P->n == 12 && P->n_unit == 7, "ngpt: %d parameters, %d unit", P->n, P->n_unit);
        return;
    }
    bool sub = pl == MT_PLACE_SUBLN, peri = pl == MT_PLACE_PERI;
    const struct {
        const char *name;
        int n;
        bool on;
    } extra[] = {{"blocks.0.attn.inner_norm.weight", C, sub},
                 {"blocks.0.attn.inner_norm.bias", C, sub},
                 {"blocks.0.ffn.inner_norm.weight", F, sub},
                 {"blocks.0.ffn.inner_norm.bias", F, sub},
                 {"blocks.0.attn_out_norm.weight", C, peri},
                 {"blocks.0.attn_out_norm.bias", C, peri},
                 {"blocks.0.ffn_out_norm.weight", C, peri},
                 {"blocks.0.ffn_out_norm.bias", C, peri}};
    for (int i = 0; i < 8; i++) {
        int at = -1;
        for (int j = 0; j < P->n; j++) at = strcmp(P->p[j].name, extra[i].name) ? at : j;
        CHECK(extra[i].on ? at >= 0 && P->p[at].n == (size_t)extra[i].n : at < 0,
              "placement %d: %s %s", pl, extra[i].name, extra[i].on ? "missing" : "present");
    }
    CHECK(P->n == 16 + 4 * (sub || peri), "placement %d: %d parameters", pl, P->n);
}

/* Every placement as block 2 (l = 2: LNS scales by 1/sqrt(3)); Mix-LN twice, block 2 Post-LN
   (mixln_post 3), then Pre-LN (mixln_post 2); DSL with lambda 0.6, beta 0.8; then nGPT's
   residual with its pieces (no norm, no bias, SwiGLU) and alpha acting at k |alpha|,
   k = 0.05 / 0.25. */
static void test_block_formula(void) {
    int B = 2, T = 5, C = 16, F = 24;
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    for (int k = 0; k <= MT_PLACEMENTS.n + 1; k++) {
        bool ngpt = k == MT_PLACEMENTS.n + 1;
        int pl = k < MT_PLACEMENTS.n ? k : ngpt ? MT_PLACE_PRE : MT_PLACE_MIXLN;
        mt_block_cfg cfg = {.C = C,
                            .F = F,
                            .n_head = 2,
                            .bias = !ngpt,
                            .causal = true,
                            .norm = mt_norm_default(ngpt ? MT_NORM_NONE : MT_NORM_LN),
                            .residual = ngpt ? MT_RESIDUAL_NGPT : MT_RESIDUAL_SUM,
                            .placement = (mt_placement)pl,
                            .alpha = 1.7f,
                            .act = ngpt ? MT_ACT_SWIGLU : MT_ACT_GELU,
                            .ngpt = {0.05f, 0.25f, 1, 0.25f, 1, 1, 1, 0.25f},
                            .layer = 2,
                            .mixln_post = k < MT_PLACEMENTS.n ? 3 : 2,
                            .dsl_lambda = 0.6f,
                            .dsl_beta = 0.8f};
        mt_block_init init = {0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f};
        mt_params P;
        mt_block_params bp;
        mt_params_init_table(&P);
        mt_block_add_params(&P, "blocks.0", &cfg, &init, &bp);
        CHECK(mt_params_alloc(&P, NULL) == MT_OK, "alloc");
        check_block_params(&P, &cfg, C, F);
        mt_rng r;
        mt_rng_seed(&r, 21);
        mt_params_initialize(&P, &r);
        for (size_t i = 0; i < P.total; i++) P.data[i] += 0.1f * mt_rng_normal(&r); /* norms too */
        mt_tensor *x = test_tensor(&r, 3, (int[]){B, T, C}, -1, 1, false);
        int n = B * T * C;
        mt_ctx_reset(&c);
        mt_tensor *y = mt_block_forward(&c, &cfg, &P, &bp, x);
        float *h1 = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
        ref_sublayer(&c, &cfg, &P, &bp, 0, x->data, h1, n);
        ref_sublayer(&c, &cfg, &P, &bp, 1, h1, ref, n);
        double e = max_rel_err(y->data, ref, n);
        CHECK(e < 1e-5, "block %s (mixln_post %d) vs its formula: %g",
              ngpt ? "ngpt" : mt_enum_name(&MT_PLACEMENTS, cfg.placement), cfg.mixln_post, e);
        free(h1);
        free(ref);
        test_tensor_free(x);
        mt_params_free(&P);
    }
    mt_ctx_free(&c);
}

/* ---- attention with a key-padding mask, queries and keys of different lengths ---- */
typedef struct {
    int n_head;
    bool causal;
    const int *len;
} masked_arg;

static mt_tensor *build_masked(mt_ctx *c, mt_tensor **in, const void *arg) {
    const masked_arg *a = arg;
    return mt_attention_masked(c, in[0], in[1], in[2], a->n_head, a->causal, a->len);
}

/* The loops of ref_attention with Tq queries on the first len[b] of Tk keys, in double. */
static void ref_masked(const mt_tensor *q, const mt_tensor *k, const mt_tensor *v, int NH,
                       bool causal, const int *len, float *out, const float *dy, float *dq,
                       float *dk, float *dv) {
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], C = q->shape[2], HS = C / NH;
    double *p = malloc((size_t)Tk * sizeof(double)), *dp = malloc((size_t)Tk * sizeof(double));
    memset(dq, 0, q->n * sizeof(float)), memset(dk, 0, k->n * sizeof(float)),
        memset(dv, 0, k->n * sizeof(float));
#define AQ(x, t, i) ((x)[((size_t)b * Tq + (t)) * C + h * HS + (i)])
#define AK(x, s, i) ((x)[((size_t)b * Tk + (s)) * C + h * HS + (i)])
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tq; t++) {
                int L = len ? len[b] : Tk;
                double m = -INFINITY, sum = 0, rowdot = 0;
                for (int s = 0; s < L; s++) {
                    double dot = 0;
                    for (int i = 0; i < HS; i++)
                        dot += (double)AQ(q->data, t, i) * AK(k->data, s, i);
                    p[s] = (causal && s > t) ? -INFINITY : dot / sqrt((double)HS);
                    if (p[s] > m) m = p[s];
                }
                for (int s = 0; s < L; s++) sum += p[s] = exp(p[s] - m);
                for (int s = 0; s < L; s++) p[s] /= sum;
                for (int i = 0; i < HS; i++) {
                    double o = 0;
                    for (int s = 0; s < L; s++) o += p[s] * AK(v->data, s, i);
                    AQ(out, t, i) = (float)o;
                }
                for (int s = 0; s < L; s++) {
                    dp[s] = 0;
                    for (int i = 0; i < HS; i++) dp[s] += (double)AQ(dy, t, i) * AK(v->data, s, i);
                    rowdot += p[s] * dp[s];
                }
                for (int s = 0; s < L; s++) {
                    double ds = p[s] * (dp[s] - rowdot) / sqrt((double)HS);
                    for (int i = 0; i < HS; i++) {
                        AK(dv, s, i) += (float)(p[s] * AQ(dy, t, i));
                        AQ(dq, t, i) += (float)(ds * AK(k->data, s, i));
                        AK(dk, s, i) += (float)(ds * AQ(q->data, t, i));
                    }
                }
            }
#undef AQ
#undef AK
    free(p);
    free(dp);
}

/* Cross-attention shapes (Tq != Tk), padded keys (some rows shorter, one of a single key),
   causal self-attention with padding, and a mask of full lengths (which takes mt_attention's
   paths): against the loops above and by finite differences; padded keys get no gradient. */
static void test_attention_masked(void) {
    mt_rng r;
    mt_rng_seed(&r, 13);
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    static const int L1[] = {3, 5}, L2[] = {1, 7, 4}, L3[] = {9, 9}, L4[] = {13, 2, 20, 17};
    struct {
        int B, Tq, Tk, C, NH;
        bool causal;
        const int *len;
        bool gradcheck;
    } cases[] = {{2, 4, 5, 8, 2, false, L1, true},     {3, 6, 7, 12, 3, false, L2, true},
                 {2, 9, 9, 8, 2, true, L3, true},      {3, 7, 7, 8, 1, true, L2, true},
                 {2, 3, 9, 16, 1, false, NULL, true},  {2, 9, 9, 16, 2, false, L3, false},
                 {4, 21, 20, 64, 4, false, L4, false}, {4, 20, 20, 64, 4, true, L4, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int qs[] = {cases[k].B, cases[k].Tq, cases[k].C},
            ks[] = {cases[k].B, cases[k].Tk, cases[k].C};
        masked_arg a = {cases[k].NH, cases[k].causal, cases[k].len};
        mt_tensor *q = test_tensor(&r, 3, qs, -2, 2, true),
                  *kk = test_tensor(&r, 3, ks, -2, 2, true);
        mt_tensor *v = test_tensor(&r, 3, ks, -1, 1, true),
                  *dy = test_tensor(&r, 3, qs, -1, 1, false);
        float *ref = malloc((2 * q->n + 2 * kk->n) * sizeof(float)),
              *g[3] = {ref + q->n, ref + 2 * q->n, ref + 2 * q->n + kk->n};
        ref_masked(q, kk, v, a.n_head, a.causal, a.len, ref, dy->data, g[0], g[1], g[2]);
        mt_ctx_reset(&c);
        mt_tensor *in[3] = {q, kk, v};
        for (int i = 0; i < 3; i++) memset(in[i]->grad, 0, in[i]->n * sizeof(float));
        mt_tensor *y = mt_attention_masked(&c, q, kk, v, a.n_head, a.causal, a.len);
        double e = max_rel_err(y->data, ref, q->n);
        CHECK(e < 1e-5, "masked attention case %zu vs naive: %g", k, e);
        mt_backward_from(&c, y, dy->data);
        for (int i = 0; i < 3; i++) {
            e = max_rel_err(in[i]->grad, g[i], in[i]->n);
            CHECK(e < 1e-5, "masked attention case %zu: d%s vs naive: %g", k,
                  (const char *[]){"q", "k", "v"}[i], e);
        }
        for (int b = 0; a.len && b < cases[k].B; b++) /* padded keys: exactly no gradient */
            for (size_t j = ((size_t)b * cases[k].Tk + a.len[b]) * cases[k].C;
                 j < (size_t)(b + 1) * cases[k].Tk * cases[k].C; j++)
                CHECK(kk->grad[j] == 0 && v->grad[j] == 0,
                      "case %zu: padded key %zu has a "
                      "gradient",
                      k, j);
        if (cases[k].gradcheck) {
            char name[48];
            snprintf(name, sizeof name, "masked attention[%zu]", k);
            gradcheck(name, build_masked, &a, 3, (mt_tensor *[]){q, kk, v}, 1e-2, 2e-3);
        }
        free(ref);
        test_tensor_free(q), test_tensor_free(kk), test_tensor_free(v), test_tensor_free(dy);
    }
    mt_ctx_free(&c);
}

/* gpt-oss's sink logits (mt_attn_mask.sink) and softpick (.softpick): by finite differences with
   q, k, v (causal and not, padded keys, grouped heads, positions of a cache), and by hand: one
   key gives the sink's P = exp(S) / (exp(z) + exp(S)) = sigmoid(S - z), out = sigmoid(S - z) v,
   and softpick's relu(exp(S) - 1) / (|exp(S) - 1| + 1e-8): v for S > 0, 0 for S <= 0. */
typedef struct {
    int n_head;
    mt_attn_mask mask;
} sink_arg;

static mt_tensor *build_sink(mt_ctx *c, mt_tensor **in, const void *arg) {
    const sink_arg *a = arg;
    mt_attn_mask m = a->mask;
    m.sink = m.softpick ? NULL : in[3];
    return mt_attention_ex(c, in[0], in[1], in[2], a->n_head, &m);
}

/* The smallest |q.k| / sqrt(HS) of any query and key of its key-value head: softpick's kink is
   at 0 (relu, |.|), where finite differences are off. */
static double smallest_score(const mt_tensor *q, const mt_tensor *k, int NH) {
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], C = q->shape[2], KC = k->shape[2];
    int HS = C / NH, G = NH / (KC / HS);
    double least = INFINITY;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tq; t++)
                for (int s = 0; s < Tk; s++) {
                    double dot = 0;
                    for (int i = 0; i < HS; i++)
                        dot += (double)q->data[((size_t)b * Tq + t) * C + h * HS + i] *
                               k->data[((size_t)b * Tk + s) * KC + h / G * HS + i];
                    least = fmin(least, fabs(dot) / sqrt((double)HS));
                }
    return least;
}

static void test_attention_sink(void) {
    mt_rng r;
    mt_rng_seed(&r, 17);
    static const int L1[] = {3, 5};
    struct {
        int B, Tq, Tk, C, KC, NH, pos0;
        bool causal;
        const int *len;
    } cases[] = {{2, 5, 5, 8, 8, 2, 0, true, NULL},
                 {2, 4, 5, 8, 8, 2, 0, false, L1},
                 {2, 6, 6, 16, 8, 4, 0, true, NULL},
                 {1, 2, 7, 8, 4, 2, 5, true, NULL},
                 {2, 9, 9, 16, 16, 1, 0, false, NULL}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int qs[] = {cases[k].B, cases[k].Tq, cases[k].C},
            ks[] = {cases[k].B, cases[k].Tk, cases[k].KC}, zs[] = {cases[k].NH};
        sink_arg a = {cases[k].NH,
                      {.causal = cases[k].causal, .pos0 = cases[k].pos0, .kv_len = cases[k].len}};
        mt_tensor *in[4] = {test_tensor(&r, 3, qs, -2, 2, true),
                            test_tensor(&r, 3, ks, -2, 2, true),
                            test_tensor(&r, 3, ks, -1, 1, true),
                            test_tensor(&r, 1, zs, -1, 2, true)};
        char name[48];
        snprintf(name, sizeof name, "attention sink[%zu]", k);
        gradcheck(name, build_sink, &a, 4, in, 1e-2, 2e-3);
        a.mask.softpick = true; /* softpick (no sink) on the same shapes, scores off its kink */
        while (smallest_score(in[0], in[1], cases[k].NH) < 0.02) {
            test_tensor_free(in[0]);
            in[0] = test_tensor(&r, 3, qs, -2, 2, true);
        }
        snprintf(name, sizeof name, "attention softpick[%zu]", k);
        gradcheck(name, build_sink, &a, 3, in, 2e-3, 2e-3);
        for (int i = 0; i < 4; i++) test_tensor_free(in[i]);
    }
    mt_ctx c;
    mt_ctx_init(&c, 1 << 20, 1, NULL);
    int shape[] = {1, 1, 4};
    float qd[] = {1, 0.5f, -1, 2}, kd[] = {0.5f, 1, 0.25f, 0.5f}, vd[] = {1, -2, 3, 0.5f},
          zd[] = {0.3f, -0.7f};
    mt_tensor q = mt_tensor_view(qd, NULL, 3, shape), kt = mt_tensor_view(kd, NULL, 3, shape),
              v = mt_tensor_view(vd, NULL, 3, shape), z = mt_tensor_view(zd, NULL, 1, (int[]){2});
    mt_tensor *y = mt_attention_ex(&c, &q, &kt, &v, 2, &(mt_attn_mask){.causal = true, .sink = &z});
    for (int h = 0; h < 2; h++) {
        double S = (qd[2 * h] * kd[2 * h] + qd[2 * h + 1] * kd[2 * h + 1]) / sqrt(2.0);
        for (int i = 0; i < 2; i++) {
            double want = vd[2 * h + i] / (1 + exp(zd[h] - S));
            CHECK(fabs(y->data[2 * h + i] - want) < 1e-6, "sink by hand: head %d: %g, want %g", h,
                  y->data[2 * h + i], want);
        }
    }
    y = mt_attention_ex(&c, &q, &kt, &v, 2, &(mt_attn_mask){.causal = true, .softpick = true});
    for (int h = 0; h < 2; h++) {
        double S = (qd[2 * h] * kd[2 * h] + qd[2 * h + 1] * kd[2 * h + 1]) / sqrt(2.0);
        double e = exp(S) - 1, p = (e > 0 ? e : 0) / (fabs(e) + 1e-8);
        for (int i = 0; i < 2; i++)
            CHECK(fabs(y->data[2 * h + i] - p * vd[2 * h + i]) < 1e-6,
                  "softpick by hand: head %d: %g, want %g", h, y->data[2 * h + i],
                  p * vd[2 * h + i]);
    }
    mt_ctx_free(&c);
}

/* The diagnostics' probe (mt_ctx.attn_max): each attention op reports its largest logit
   q.k / sqrt(HS) over the keys each query sees, against a loop in double: the fused op on its
   register-tile and sgemm paths, causal and not, grouped heads, and the masked op (padded keys,
   queries at pos0 of a longer sequence); nothing when off. */
static void test_attention_max_logit(void) {
    mt_rng r;
    mt_rng_seed(&r, 17);
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    static const int LEN[] = {5, 2, 9};
    struct {
        int B, Tq, Tk, C, NH, KC, pos0;
        bool causal;
        const int *len; /* NULL and Tq == Tk, pos0 0: mt_attention */
    } cases[] = {{2, 9, 9, 32, 2, 32, 0, true, NULL}, {2, 9, 9, 32, 2, 16, 0, false, NULL},
                 {2, 7, 7, 12, 3, 12, 0, true, NULL}, {3, 4, 9, 8, 2, 8, 0, false, LEN},
                 {3, 2, 9, 16, 2, 8, 7, true, NULL},  {3, 6, 9, 8, 2, 8, 0, false, NULL}};
    float got[2];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int B = cases[k].B, Tq = cases[k].Tq, Tk = cases[k].Tk, C = cases[k].C;
        int NH = cases[k].NH, KC = cases[k].KC, HS = C / NH, G = NH / (KC / HS);
        mt_tensor *q = test_tensor(&r, 3, (int[]){B, Tq, C}, -2, 2, false);
        mt_tensor *kk = test_tensor(&r, 3, (int[]){B, Tk, KC}, -2, 2, false);
        double want = -INFINITY;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < Tq; t++)
                    for (int s2 = 0; s2 < (cases[k].len ? cases[k].len[b] : Tk); s2++) {
                        if (cases[k].causal && s2 > cases[k].pos0 + t) continue;
                        double dot = 0;
                        for (int i = 0; i < HS; i++)
                            dot += (double)q->data[((size_t)b * Tq + t) * C + h * HS + i] *
                                   kk->data[((size_t)b * Tk + s2) * KC + h / G * HS + i];
                        want = fmax(want, dot / sqrt((double)HS));
                    }
        mt_ctx_reset(&c);
        c.attn_max = got, c.attn_calls = 0;
        mt_attn_mask mask = {.causal = cases[k].causal,
                             .pos0 = cases[k].pos0,
                             .kv_len = cases[k].len};
        mt_attention_ex(&c, q, kk, kk, NH, &mask); /* v = k: only the scores matter */
        CHECK(c.attn_calls == 1 && fabs(got[0] - want) <= 1e-5 * fabs(want),
              "max logit case %zu: %d calls, %.7g, want %.7g", k, c.attn_calls, got[0], want);
        c.attn_max = NULL, c.attn_calls = 0;
        mt_attention_ex(&c, q, kk, kk, NH, &mask);
        CHECK(c.attn_calls == 0, "max logit off: nothing recorded");
        test_tensor_free(q), test_tensor_free(kk);
    }
    mt_ctx_free(&c);
}

/* The sink-rate probe (mt_ctx.attn_sink): each attention op reports the share of (b, h, t) whose
   weight on key 0 exceeds MT_ATTN_SINK_EPS and the mean entropy of the weights, against the
   weights computed here in double from the formulas: softmax over the keys each query sees
   (a learned sink's logit in its denominator, its column dropped), softpick relu(e^S - 1) /
   (sum |e^S - 1| + eps) (arXiv 2504.20966); the fused op's two paths, causal or not, grouped
   heads, padded keys, queries at pos0, a sink, softpick; nothing when off. */
static void test_attention_sink_probe(void) {
    mt_rng r;
    mt_rng_seed(&r, 23);
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    static const int LEN[] = {5, 2, 9};
    struct {
        int B, Tq, Tk, C, NH, KC, pos0;
        bool causal, sink, softpick;
        const int *len;
        float scale; /* of q: large scores sink more often */
    } cases[] = {{2, 9, 9, 32, 2, 32, 0, true, false, false, NULL, 1},
                 {2, 9, 9, 32, 2, 16, 0, false, false, false, NULL, 3},
                 {2, 7, 7, 12, 3, 12, 0, true, false, false, NULL, 2},
                 {3, 4, 9, 8, 2, 8, 0, false, false, false, LEN, 1},
                 {3, 2, 9, 16, 2, 8, 7, true, false, false, NULL, 2},
                 {2, 9, 9, 16, 2, 8, 0, true, true, false, NULL, 1},
                 {2, 9, 9, 16, 2, 16, 0, true, false, true, NULL, 1},
                 {3, 4, 9, 8, 2, 8, 0, false, false, true, LEN, 2}};
    double got[2];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int B = cases[k].B, Tq = cases[k].Tq, Tk = cases[k].Tk, C = cases[k].C;
        int NH = cases[k].NH, KC = cases[k].KC, HS = C / NH, G = NH / (KC / HS);
        mt_tensor *q = test_tensor(&r, 3, (int[]){B, Tq, C}, -cases[k].scale, cases[k].scale,
                                   false);
        mt_tensor *kk = test_tensor(&r, 3, (int[]){B, Tk, KC}, -2, 2, false);
        mt_tensor *z = cases[k].sink ? test_tensor(&r, 1, (int[]){NH}, 0, 3, false) : NULL;
        double sunk = 0, ent = 0, p[16];
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < Tq; t++) {
                    int n = cases[k].len ? cases[k].len[b] : Tk;
                    if (cases[k].causal && cases[k].pos0 + t + 1 < n) n = cases[k].pos0 + t + 1;
                    double sum = z ? exp(z->data[h]) : cases[k].softpick ? 1e-8 : 0;
                    for (int s2 = 0; s2 < n; s2++) {
                        double dot = 0;
                        for (int i = 0; i < HS; i++)
                            dot += (double)q->data[((size_t)b * Tq + t) * C + h * HS + i] *
                                   kk->data[((size_t)b * Tk + s2) * KC + h / G * HS + i];
                        double e = exp(dot / sqrt((double)HS));
                        p[s2] = cases[k].softpick ? fmax(e - 1, 0) : e;
                        sum += cases[k].softpick ? fabs(e - 1) : e;
                    }
                    sunk += p[0] / sum > MT_ATTN_SINK_EPS;
                    for (int s2 = 0; s2 < n; s2++)
                        if (p[s2] > 0) ent -= p[s2] / sum * log(p[s2] / sum);
                }
        double rows = (double)B * NH * Tq, want[2] = {sunk / rows, ent / rows};
        mt_ctx_reset(&c);
        c.attn_sink = got, c.attn_sink_calls = 0;
        mt_attn_mask mask = {.causal = cases[k].causal,
                             .pos0 = cases[k].pos0,
                             .kv_len = cases[k].len,
                             .sink = z,
                             .softpick = cases[k].softpick};
        mt_attention_ex(&c, q, kk, kk, NH, &mask); /* v = k: only the weights matter */
        CHECK(c.attn_sink_calls == 1 && fabs(got[0] - want[0]) <= 1e-4 &&
                  fabs(got[1] - want[1]) <= 1e-4 * fmax(1, want[1]),
              "sink probe case %zu: %d calls, rate %.7g entropy %.7g, want %.7g %.7g", k,
              c.attn_sink_calls, got[0], got[1], want[0], want[1]);
        c.attn_sink = NULL, c.attn_sink_calls = 0;
        mt_attention_ex(&c, q, kk, kk, NH, &mask);
        CHECK(c.attn_sink_calls == 0, "sink probe off: nothing recorded");
        test_tensor_free(q), test_tensor_free(kk);
        if (z) test_tensor_free(z);
    }
    mt_ctx_free(&c);
}

/* Inside a parallel region (as in a replica) attention runs inline on its thread with scratch for
   one thread, whatever omp_get_thread_num() says there: on a pool of 1 thread, each of 2 threads
   runs forward and backward in an arena of exactly the peak a run outside needed and gets that
   run's bits. Scratch indexed by the thread number overruns thread 1's arena (a heap overflow
   under make asan). Register-tile and sgemm paths. */
static void test_attention_in_replica(void) {
    int cases[][4] = {{2, 64, 64, 2}, {2, 19, 12, 3}}; /* B, T, C, NH */
    for (int k = 0; k < 2; k++) {
        int shape[] = {cases[k][0], cases[k][1], cases[k][2]}, NH = cases[k][3];
        size_t peak = 0, n = (size_t)shape[0] * shape[1] * shape[2];
        float *want = NULL;
        for (int inside = 0; inside < 2; inside++) {
            if (inside) mt_set_threads(1);
#pragma omp parallel num_threads(2) if (inside)
            {
                mt_rng r;
                mt_rng_seed(&r, 5);
                mt_tensor *q = test_tensor(&r, 3, shape, -2, 2, true);
                mt_tensor *kk = test_tensor(&r, 3, shape, -2, 2, true);
                mt_tensor *v = test_tensor(&r, 3, shape, -1, 1, true);
                mt_tensor *dy = test_tensor(&r, 3, shape, -1, 1, false);
                mt_ctx c;
                mt_ctx_init(&c, inside ? peak : 64 << 20, 1, NULL);
                mt_tensor *y = mt_attention(&c, q, kk, v, NH, true);
                mt_backward_from(&c, y, dy->data);
                const float *got[] = {y->data, q->grad, kk->grad, v->grad};
                if (!inside) {
                    peak = c.arena.peak;
                    want = malloc(4 * n * sizeof(float));
                    for (int i = 0; i < 4; i++) memcpy(want + i * n, got[i], n * sizeof(float));
                }
                bool same = true;
                for (int i = 0; i < 4; i++)
                    same &= !memcmp(want + i * n, got[i], n * sizeof(float));
                CHECK(same,
                      "attention case %d, thread %d of a parallel region: not the bits of "
                      "the run outside",
                      k, omp_get_thread_num());
                mt_ctx_free(&c);
                test_tensor_free(q);
                test_tensor_free(kk);
                test_tensor_free(v);
                test_tensor_free(dy);
            }
        }
        mt_set_threads(0);
        free(want);
    }
}

/* x (B, T, W) positions [t0, t0 + n) -> (B, n, W), a copy in c's arena */
static mt_tensor *slice_time(mt_ctx *c, const mt_tensor *x, int t0, int n) {
    int B = x->shape[0], T = x->shape[1], W = x->shape[2];
    mt_tensor *y = mt_tensor_new(c, 3, (int[]){B, n, W});
    for (int b = 0; b < B; b++)
        memcpy(y->data + (size_t)b * n * W, x->data + ((size_t)b * T + t0) * W,
               (size_t)n * W * sizeof(float));
    return y;
}

/* Attention over a KV cache (mt_attention_cached, mt_attention_ex with pos0) against the whole
   sequence at once: causal self-attention with grouped heads, fed as a prompt of 3 positions and
   then one at a time into layer 1 of a two-layer cache, gives the full op's rows; cross-attention
   of one query at a time over keys stored once in a cache (masked to each row's length) gives
   the masked op's rows on all the queries; gather moves rows of every layer. Heads of 16 and 5
   channels (vector and scalar tails of the GEMM layer's one-row products). */
static void test_attention_cached(void) {
    mt_rng r;
    mt_rng_seed(&r, 17);
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    c.grad_enabled = false;
    int cases[][4] = {{2, 64, 4, 2}, {3, 20, 4, 4}}; /* B, C, NH, NKV */
    for (int k = 0; k < 2; k++) {
        int B = cases[k][0], C = cases[k][1], NH = cases[k][2], KC = C / NH * cases[k][3];
        int T = 11, S = 7, qs[] = {B, T, C}, ks[] = {B, T, KC}, ms[] = {B, S, C};
        const int len[] = {7, 2, 5};
        mt_tensor *q = test_tensor(&r, 3, qs, -2, 2, false);
        mt_tensor *kk = test_tensor(&r, 3, ks, -2, 2, false);
        mt_tensor *v = test_tensor(&r, 3, ks, -1, 1, false);
        mt_tensor *mk = test_tensor(&r, 3, ms, -2, 2, false);
        mt_tensor *mv = test_tensor(&r, 3, ms, -1, 1, false);
        mt_attn_cache kv, cross;
        CHECK(mt_attn_cache_alloc(&kv, 2, B, T + 2, KC, NULL) == MT_OK, "cache alloc");
        mt_attn_cache_arena(&c, &cross, 1, B, S, C);
        mt_attn_cache_put(&cross, 0, 0, mk, mv);
        cross.len = S;
        mt_tensor *full = mt_attention(&c, q, kk, v, NH, true);
        mt_tensor *xfull = mt_attention_masked(&c, q, mk, mv, NH, false, len);
        double worst = 0, xworst = 0;
        for (int t0 = 0; t0 < T;) {
            int n = t0 == 0 ? 3 : 1;
            size_t mark = mt_arena_mark(&c);
            mt_tensor *qt = slice_time(&c, q, t0, n), *kt = slice_time(&c, kk, t0, n);
            mt_tensor *vt = slice_time(&c, v, t0, n), *K, *V;
            mt_tensor *y = mt_attention_cached(&c, qt, kt, vt, &kv, 1, NH, &(mt_attn_mask){0});
            mt_attn_cache_layer(&c, &cross, 0, &K, &V);
            mt_tensor *xy = mt_attention_masked(&c, qt, K, V, NH, false, len);
            for (int b = 0; b < B; b++) {
                size_t at = ((size_t)b * T + t0) * C, m = (size_t)n * C;
                worst = worst_err(worst, max_rel_err(y->data + (size_t)b * m, full->data + at, m));
                xworst = worst_err(xworst,
                                   max_rel_err(xy->data + (size_t)b * m, xfull->data + at, m));
            }
            kv.len += n, t0 += n;
            mt_arena_release(&c, mark);
        }
        CHECK(worst < 1e-5, "case %d: cached self-attention vs the whole sequence: %g", k, worst);
        CHECK(xworst < 1e-5, "case %d: cross-attention over a cache vs uncached: %g", k, xworst);
        /* gather: row j takes row from[j] in both layers, positions [0, len) */
        int from[] = {B - 1, 0, 0};
        float *want = malloc((size_t)T * KC * sizeof(float));
        size_t row = (size_t)kv.cap * KC; /* floats a row of a layer */
        memcpy(want, kv.k + ((size_t)1 * B + from[0]) * row, (size_t)T * KC * sizeof(float));
        mt_attn_cache_gather(&c, &kv, from, B);
        CHECK(!memcmp(kv.k + (size_t)1 * B * kv.cap * KC, want, (size_t)T * KC * sizeof(float)),
              "case %d: gather", k);
        free(want);
        mt_attn_cache_free(&kv);
        CHECK(!kv.k && !kv.owned, "free empties the cache");
        test_tensor_free(q), test_tensor_free(kk), test_tensor_free(v);
        test_tensor_free(mk), test_tensor_free(mv);
        mt_ctx_reset(&c);
    }
    mt_ctx_free(&c);
}

/* An op that writes the threads it may use (mt_threads()) into its output */
static void threads_forward(mt_node *n) { n->out->data[0] = (float)mt_threads(); }
static const mt_op OP_THREADS = {.name = "threads", .forward = threads_forward, .backward = NULL};

/* The context's thread budget: its ops see at most c.threads threads (0: the pool's), and the
   pool is as it was after each op, for the context without a budget too. */
static void test_thread_budget(void) {
    int threads = mt_threads();
    mt_set_threads(2);
    mt_ctx a, b;
    mt_ctx_init(&a, 1 << 20, 1, NULL);
    mt_ctx_init(&b, 1 << 20, 1, NULL);
    a.threads = 1;
    int one[] = {1};
    for (int i = 0; i < 2; i++) {
        mt_ctx *c = i ? &b : &a;
        mt_tensor *y = mt_tensor_new(c, 1, one);
        mt_node_run(c, mt_node_new(c, &OP_THREADS, y, 0, NULL));
        CHECK(y->data[0] == (i ? 2 : 1), "ctx %s: an op saw %g threads",
              i ? "b (no budget)" : "a (budget 1)", y->data[0]);
        CHECK(mt_threads() == 2, "after an op of ctx %d the pool has %d threads", i, mt_threads());
    }
    mt_ctx_free(&a);
    mt_ctx_free(&b);
    mt_set_threads(threads);
}

int main(void) {
    test_linear();
    test_ffn();
    test_attention();
    test_attention_masked();
    test_attention_sink();
    test_attention_max_logit();
    test_attention_sink_probe();
    test_attention_in_replica();
    test_attention_cached();
    test_thread_budget();
    test_rope();
    test_deepnorm_constants();
    test_block_formula();
    return check_finish("test_nn");
}
