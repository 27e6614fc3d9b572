/* Generation: the KV cache against re-running the window (logits to 1e-5, the same tokens),
   across the window's slides, for each placement, with RoPE, grouped-query attention, the
   LLaMA preset, QK-norm, gated attention, attention sinks, softpick, the value residual, DyT
   and Derf, the logit soft cap; in bf16 precision; token sampling; the soft cap in the logits
   generation samples from. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* A small GPT with weights far from init, so the logits are far from uniform; json: more of its
   config (its keys as the checkpoint's) or NULL. */
static void build(mt_gpt *m, mt_placement pl, mt_norm_kind norm, int n_ctx, uint64_t seed,
                  const char *json) {
    mt_gpt_config c = mt_gpt_config_default();
    c.stack.n_layer = 2;
    c.stack.n_head = 2;
    c.stack.n_embd = 16;
    c.n_ctx = n_ctx;
    c.n_vocab = 11;
    c.stack.placement = pl;
    c.stack.norm = mt_norm_default(norm);
    mt_err e;
    CHECK(!json || mt_fields_from_json(mt_gpt_type.fields, json, &c, &e) == MT_OK, "%s", e.msg);
    CHECK(mt_gpt_build(m, &c, &e) == MT_OK, "build: %s", e.msg);
    mt_rng r;
    mt_rng_seed(&r, seed);
    for (int i = 0; i < m->P.n; i++) {
        float *w = m->P.data + m->P.p[i].offset;
        for (size_t j = 0; j < m->P.p[i].n; j++)
            w[j] = m->P.p[i].role == MT_ROLE_NORM ? 1 + 0.2f * mt_rng_normal(&r)
                                                  : 0.5f * mt_rng_normal(&r);
    }
}

static void test_cache(mt_placement pl, mt_norm_kind norm, const char *json) {
    mt_gpt m;
    int T = 12, V = 11;
    build(&m, pl, norm, T, 7, json);
    mt_kv_cache a, b;
    mt_err e;
    CHECK(mt_kv_init(&a, &m, false, &e) == MT_OK && mt_kv_init(&b, &m, true, &e) == MT_OK,
          "kv init: %s", e.msg);
    int prompt[5] = {1, 4, 2, 9, 3};
    mt_kv_feed(&a, prompt, 5);
    mt_kv_feed(&b, prompt, 5);
    mt_rng r;
    mt_rng_seed(&r, 3);
    mt_sampling s = {1.0f, 0, 1.0f};
    float ps[16];
    int is[16];
    double worst = 0;
    int slides = 0;
    for (int i = 0; i < 40; i++) { /* 45 tokens through a window of 12: several slides */
        double err = max_rel_err(a.logits, b.logits, (size_t)V);
        worst = err > worst ? err : worst;
        CHECK(a.len == b.len && memcmp(a.ids, b.ids, (size_t)a.len * sizeof(int)) == 0,
              "windows differ at token %d", i);
        mt_rng r2 = r;
        int t = mt_sample_token(a.logits, V, &s, &r, ps, is);
        CHECK(t == mt_sample_token(b.logits, V, &s, &r2, ps, is), "token %d differs", i);
        int before = a.len;
        mt_kv_feed(&a, &t, 1);
        mt_kv_feed(&b, &t, 1);
        if (a.len < before) {
            slides++;
            CHECK(a.len == T / 2 && a.ids[a.len - 1] == t, "a slide keeps n_ctx / 2 tokens");
        }
    }
    CHECK(worst <= 1e-5, "%s %s %s: cached logits differ by %.3g", mt_enum_name(&MT_PLACEMENTS, pl),
          mt_enum_name(&MT_NORMS, norm), json ? json : "", worst);
    CHECK(slides >= 3, "only %d slides", slides);
    /* a prompt longer than n_ctx keeps its last n_ctx tokens */
    int longp[20];
    for (int i = 0; i < 20; i++) longp[i] = i % V;
    mt_kv_feed(&a, longp, 20);
    mt_kv_feed(&b, longp, 20);
    CHECK(a.len == T && a.ids[0] == longp[8], "long prompt window");
    CHECK(max_rel_err(a.logits, b.logits, (size_t)V) <= 1e-5, "long prompt logits");
    mt_kv_free(&a);
    mt_kv_free(&b);
    mt_gpt_free(&m);
}

/* bf16 generation (./infer --precision bf16): the cache's one-row products in bf16 against the
   window re-run in bf16, and both against fp32, from which bf16 must differ (it is in effect)
   by little. Skipped where bf16 cannot run. */
static void test_bf16(void) {
    if (mt_bf16_check(NULL) != MT_OK) return;
    mt_gpt m;
    int V = 11;
    build(&m, MT_PLACE_PRE, MT_NORM_RMS, 12, 9, "{\"arch\": \"llama\", \"n_kv_head\": 1}");
    mt_err e;
    CHECK(mt_params_enable_bf16(&m.P, &e) == MT_OK, "bf16: %s", e.msg);
    mt_kv_cache kv[3]; /* cached bf16, re-run bf16, cached fp32 */
    for (int i = 0; i < 3; i++) {
        CHECK(mt_kv_init(&kv[i], &m, i == 1, &e) == MT_OK, "kv init: %s", e.msg);
        kv[i].ctx.precision = i < 2 ? MT_BF16 : MT_FP32;
    }
    int tok[9] = {1, 4, 2, 9, 3};
    double cache_err = 0, fp32_err = 0;
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 3; j++) mt_kv_feed(&kv[j], i ? &tok[4 + i] : tok, i ? 1 : 5);
        cache_err = worst_err(cache_err, max_rel_err(kv[0].logits, kv[1].logits, (size_t)V));
        fp32_err = worst_err(fp32_err, max_rel_err(kv[0].logits, kv[2].logits, (size_t)V));
        tok[5 + i] = (tok[4 + i] * 7 + 3) % V;
    }
    CHECK(cache_err < 2e-2, "bf16: cached logits differ from the re-run window's by %g", cache_err);
    CHECK(fp32_err > 0 && fp32_err < 0.1,
          "bf16: logits differ from fp32's by %g (0: bf16 not in effect)", fp32_err);
    for (int i = 0; i < 3; i++) mt_kv_free(&kv[i]);
    mt_gpt_free(&m);
}

/* --logit-softcap: the logits generation samples from (cached and re-run) are C tanh(z / C) of
   the uncapped model's z, the same weights; C = 1.5 bends them (some |z| is well above it). */
static void test_softcap(void) {
    const float C = 1.5f;
    int V = 11, prompt[5] = {1, 4, 2, 9, 3};
    mt_gpt m[2];
    build(&m[0], MT_PLACE_PRE, MT_NORM_LN, 12, 7, "{\"logit_softcap\": 1.5}");
    build(&m[1], MT_PLACE_PRE, MT_NORM_LN, 12, 7, NULL);
    mt_kv_cache kv[3];
    mt_err e;
    for (int k = 0; k < 3; k++) { /* capped cached, capped re-run, uncapped cached */
        CHECK(mt_kv_init(&kv[k], &m[k / 2], k == 1, &e) == MT_OK, "kv init: %s", e.msg);
        mt_kv_feed(&kv[k], prompt, 5);
    }
    double worst = 0, zmax = 0;
    for (int i = 0; i < V; i++) {
        float z = kv[2].logits[i], want = C * tanhf(z / C);
        zmax = fmax(zmax, fabsf(z));
        for (int k = 0; k < 2; k++) worst = fmax(worst, fabsf(kv[k].logits[i] - want));
    }
    CHECK(worst <= 1e-5 && zmax > 2 * C,
          "softcap: logits off C tanh(z / C) by %.3g (the uncapped logits reach %.3g)", worst,
          zmax);
    for (int k = 0; k < 3; k++) mt_kv_free(&kv[k]);
    mt_gpt_free(&m[0]), mt_gpt_free(&m[1]);
}

static void test_sampling(void) {
    enum { V = 6 };
    float logits[V] = {0.5f, 2.0f, -1.0f, 1.0f, 0.0f, 1.5f}, ps[V];
    int is[V];
    mt_rng r;
    mt_rng_seed(&r, 11);
    mt_sampling greedy = {0, 0, 1}, top1 = {1, 1, 1}, tiny_p = {1, 0, 1e-3f};
    for (int i = 0; i < 20; i++) {
        CHECK(mt_sample_token(logits, V, &greedy, &r, ps, is) == 1, "temperature 0 is argmax");
        CHECK(mt_sample_token(logits, V, &top1, &r, ps, is) == 1, "top-k 1 is argmax");
        CHECK(mt_sample_token(logits, V, &tiny_p, &r, ps, is) == 1, "a tiny top-p is argmax");
    }
    /* frequencies follow softmax(logits / temperature), restricted by top-k and top-p */
    struct {
        mt_sampling s;
        int allowed; /* tokens by rank that may appear */
    } cases[] = {{{1, 0, 1}, 6}, {{0.7f, 3, 1}, 3}, {{1, 0, 0.85f}, 4}};
    const int rank[V] = {3, 0, 5, 2, 4, 1};
    for (int c = 0; c < 3; c++) {
        const mt_sampling *s = &cases[c].s;
        double p[V], z = 0;
        for (int i = 0; i < V; i++) {
            p[i] = rank[i] < cases[c].allowed ? exp(logits[i] / s->temperature) : 0;
            z += p[i];
        }
        int count[V] = {0}, n = 60000;
        for (int k = 0; k < n; k++) count[mt_sample_token(logits, V, s, &r, ps, is)]++;
        for (int i = 0; i < V; i++) {
            double want = p[i] / z, got = (double)count[i] / n;
            CHECK(fabs(got - want) < 0.01, "case %d token %d: frequency %.4f, expected %.4f", c, i,
                  got, want);
        }
    }
    /* the same seed draws the same tokens */
    mt_rng a, b;
    mt_rng_seed(&a, 5);
    mt_rng_seed(&b, 5);
    mt_sampling s = {0.9f, 4, 0.9f};
    for (int i = 0; i < 100; i++)
        CHECK(mt_sample_token(logits, V, &s, &a, ps, is) ==
                  mt_sample_token(logits, V, &s, &b, ps, is),
              "same seed, other token");
}

int main(void) {
    mt_set_threads(2);
    test_cache(MT_PLACE_PRE, MT_NORM_LN, NULL);
    test_cache(MT_PLACE_POST, MT_NORM_RMS, NULL);
    test_cache(MT_PLACE_DEEPNORM, MT_NORM_LN, NULL);
    test_cache(MT_PLACE_SUBLN, MT_NORM_LN, NULL);
    test_cache(MT_PLACE_SUBLN, MT_NORM_RMS, NULL);
    test_cache(MT_PLACE_PERI, MT_NORM_LN, NULL);
    test_cache(MT_PLACE_PERI, MT_NORM_SCALE, NULL);
    test_cache(MT_PLACE_LNS, MT_NORM_LN, NULL); /* the cached blocks know their index */
    test_cache(MT_PLACE_REORDER, MT_NORM_RMS, NULL);
    test_cache(MT_PLACE_MIXLN, MT_NORM_LN, "{\"mixln_post\": 1}");
    test_cache(MT_PLACE_DSL, MT_NORM_RMS, "{\"dsl_k\": 0.5}");
    /* nGPT: the cache holds the unit keys rotated and times s_qk */
    test_cache(MT_PLACE_PRE, MT_NORM_NONE, "{\"arch\": \"ngpt\"}");
    /* RoPE: the cached keys rotated at their own positions, across the slides too */
    test_cache(MT_PLACE_PRE, MT_NORM_RMS, "{\"pos\": \"rope\"}");
    test_cache(MT_PLACE_POST, MT_NORM_LN, "{\"pos\": \"rope\", \"rope_theta\": 5}");
    /* grouped-query attention: the cache holds n_kv_head heads */
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"n_head\": 4, \"n_kv_head\": 2}");
    test_cache(MT_PLACE_PRE, MT_NORM_RMS, "{\"pos\": \"rope\", \"n_head\": 4, \"n_kv_head\": 1}");
    test_cache(MT_PLACE_SUBLN, MT_NORM_LN,
               "{\"arch\": \"llama\", \"n_head\": 4, \"n_kv_head\": 2}");
    test_cache(MT_PLACE_PERI, MT_NORM_LN, "{\"arch\": \"llama\", \"n_head\": 2, \"n_kv_head\": 1}");
    /* QK-norm: the cache holds normalised keys (rotated after the norm with RoPE) */
    test_cache(MT_PLACE_PRE, MT_NORM_RMS,
               "{\"qk_norm\": \"rms\", \"qk_norm_affine\": true, \"pos\": \"rope\"}");
    test_cache(MT_PLACE_POST, MT_NORM_LN,
               "{\"qk_norm\": \"ln\", \"qk_norm_scope\": \"all\", \"qk_norm_affine\": true}");
    test_cache(MT_PLACE_PRE, MT_NORM_LN,
               "{\"qk_norm\": \"l2\", \"qk_norm_affine\": true, \"pos\": \"rope\", "
               "\"n_head\": 4, \"n_kv_head\": 2}");
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"qk_norm\": \"rms\", \"qk_norm_scope\": \"all\"}");
    /* gated attention: the gate reads the new positions' inputs only */
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"attn_gate\": \"elementwise\"}");
    test_cache(MT_PLACE_SUBLN, MT_NORM_RMS,
               "{\"attn_gate\": \"headwise\", \"pos\": \"rope\", \"n_head\": 4, "
               "\"n_kv_head\": 2}");
    /* gpt-oss's sink logits in the cached softmax */
    test_cache(MT_PLACE_PRE, MT_NORM_RMS, "{\"attn_sink\": true, \"pos\": \"rope\"}");
    test_cache(MT_PLACE_PERI, MT_NORM_LN,
               "{\"attn_sink\": true, \"attn_gate\": \"elementwise\", \"n_head\": 4, "
               "\"n_kv_head\": 1}");
    /* the value residual: the first block's values of the new positions, mixed in by the later
       blocks, whose cache keeps the mixed values */
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"value_residual\": \"half\", \"n_layer\": 3}");
    test_cache(MT_PLACE_PERI, MT_NORM_RMS,
               "{\"value_residual\": \"learned\", \"n_layer\": 3, \"pos\": \"rope\", "
               "\"n_head\": 4, \"n_kv_head\": 2}");
    /* nanochat's lambdas and the U-net: x0 and the first half's outputs of the new positions */
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"layer_lambdas\": true, \"n_layer\": 4}");
    test_cache(MT_PLACE_SUBLN, MT_NORM_RMS,
               "{\"layer_lambdas\": true, \"unet\": true, \"n_layer\": 5, \"pos\": \"rope\"}");
    /* value embeddings: the new positions' table rows, added before the cache keeps the values */
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"value_embeds\": \"0,-1\", \"n_layer\": 3}");
    test_cache(MT_PLACE_SUBLN, MT_NORM_RMS,
               "{\"value_embeds\": \"1\", \"n_layer\": 3, \"pos\": \"rope\", "
               "\"n_head\": 4, \"n_kv_head\": 2}");
    test_cache(MT_PLACE_PRE, MT_NORM_RMS,
               "{\"value_embeds\": \"0,-1\", \"value_embeds_shared\": true, \"n_layer\": 3}");
    /* hyper-connections: the new positions' streams widened and summed around the cached
       blocks, dynamic and static */
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"residual\": \"hc\", \"hc_streams\": 3}");
    test_cache(MT_PLACE_PRE, MT_NORM_RMS,
               "{\"residual\": \"hc\", \"hc_streams\": 2, \"hc_dynamic\": false, "
               "\"pos\": \"rope\"}");
    test_cache(MT_PLACE_PRE, MT_NORM_RMS, "{\"residual\": \"mhc\", \"hc_streams\": 3}");
    test_cache(MT_PLACE_PRE, MT_NORM_LN,
               "{\"residual\": \"mhc\", \"hc_dynamic\": false, \"mhc_iters\": 4}");
    /* softpick in the cached attention */
    test_cache(MT_PLACE_PRE, MT_NORM_LN, "{\"softmax\": \"softpick\", \"pos\": \"rope\"}");
    test_cache(MT_PLACE_POST, MT_NORM_RMS,
               "{\"softmax\": \"softpick\", \"attn_gate\": \"headwise\", \"n_head\": 4, "
               "\"n_kv_head\": 2}");
    /* DyT and Derf with the embedding scale */
    test_cache(MT_PLACE_PRE, MT_NORM_DYT, "{\"emb_scale\": true}");
    test_cache(MT_PLACE_PERI, MT_NORM_DERF, "{\"emb_scale\": true, \"pos\": \"rope\"}");
    /* the soft cap after the head, cached and re-run alike */
    test_cache(MT_PLACE_POST, MT_NORM_RMS, "{\"logit_softcap\": 2, \"pos\": \"rope\"}");
    test_softcap();
    test_sampling();
    test_bf16();
    return check_finish("test_gpt_infer");
}
