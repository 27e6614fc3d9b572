/* The ViT: config checks and JSON, the parameter table (names, shapes, DeepNorm's encoder-only
   constants and per-matrix init), the patch layout and pooling against naive loops, and a few
   Adam steps that must learn a toy task. Logits and gradients are checked against torch in
   tests/parity/test_vit.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static mt_vit_config tiny(void) {
    mt_vit_config g = mt_vit_config_default();
    g.image_h = 8, g.image_w = 12, g.channels = 2, g.patch = 4, g.n_classes = 3;
    g.stack.n_layer = 2, g.stack.n_head = 2, g.stack.n_embd = 8;
    return g;
}

static void expect_invalid(mt_vit_config g, const char *want) {
    mt_err e = {0};
    CHECK(mt_vit_config_validate(&g, &e) == MT_EINVAL && strstr(e.msg, want),
          "want an error containing '%s', got '%s'", want, e.msg);
}

static void test_config(void) {
    mt_vit_config g = tiny();
    mt_err e;
    CHECK(mt_vit_config_validate(&g, &e) == MT_OK, "tiny: %s", e.msg);
    CHECK(g.stack.n_ff == 32 && g.stack.init == MT_SCHEME_GPT2, "derived n_ff %d init %d",
          g.stack.n_ff, g.stack.init);
    CHECK(mt_vit_tokens(&g) == 7, "2 x 3 patches + cls: %d", mt_vit_tokens(&g));
    g.pool = MT_VIT_POOL_MEAN;
    CHECK(mt_vit_tokens(&g) == 6, "mean pooling has no cls token");
    g = tiny(), g.patch = 3;
    expect_invalid(g, "patch = 3 does not divide the image size 8x12");
    g = tiny(), g.stack.n_head = 3;
    expect_invalid(g, "n_head = 3 does not divide n_embd = 8");
    g = tiny(), g.channels = 5;
    expect_invalid(g, "channels = 5, must be 1 to 4");
    g = tiny(), g.n_classes = 0;
    expect_invalid(g, "n_classes = 0");
    g = tiny(), g.stack.dropout = 1;
    expect_invalid(g, "dropout");
    g = tiny(), g.stack.norm = mt_norm_default(MT_NORM_IN), g.pool = MT_VIT_POOL_MEAN;
    expect_invalid(g, "norm in with pool mean");
    g.pool = MT_VIT_POOL_CLS;
    CHECK(mt_vit_config_validate(&g, &e) == MT_OK, "in with cls: %s", e.msg);
    g = tiny(), g.stack.norm = mt_norm_default(MT_NORM_BN);
    CHECK(mt_vit_config_validate(&g, &e) == MT_OK, "bn is fine in an encoder: %s", e.msg);

    /* DeepNorm, encoder-only row: alpha = (2N)^(1/4), beta = (8N)^(-1/4), init deepnorm */
    g = tiny(), g.stack.n_layer = 6, g.stack.placement = MT_PLACE_DEEPNORM;
    CHECK(mt_vit_config_validate(&g, &e) == MT_OK, "deepnorm: %s", e.msg);
    CHECK(fabsf(g.stack.deepnorm_alpha - powf(12, 0.25f)) < 1e-6f &&
              fabsf(g.stack.deepnorm_beta - powf(48, -0.25f)) < 1e-6f &&
              g.stack.init == MT_SCHEME_DEEPNORM,
          "deepnorm constants %g %g", g.stack.deepnorm_alpha, g.stack.deepnorm_beta);
    /* Sub-LN, encoder-only: gain sqrt(log 2N), init subln; Peri-LN keeps gpt2 */
    g = tiny(), g.stack.n_layer = 6, g.stack.placement = MT_PLACE_SUBLN;
    CHECK(mt_vit_config_validate(&g, &e) == MT_OK, "subln: %s", e.msg);
    CHECK(fabsf(g.stack.subln_gain - sqrtf(logf(12))) < 1e-6f && g.stack.init == MT_SCHEME_SUBLN,
          "subln gain %g, init %d", g.stack.subln_gain, (int)g.stack.init);
    g = tiny(), g.stack.placement = MT_PLACE_PERI;
    CHECK(mt_vit_config_validate(&g, &e) == MT_OK && g.stack.init == MT_SCHEME_GPT2, "peri: %s",
          e.msg);

    /* JSON both ways */
    g = tiny(), g.pool = MT_VIT_POOL_MEAN, g.stack.norm = mt_norm_default(MT_NORM_RMS),
    g.stack.bias = false;
    CHECK(mt_vit_config_validate(&g, &e) == MT_OK, "rms: %s", e.msg);
    char *json = mt_fields_to_json(mt_vit_type.fields, &g);
    mt_vit_config h;
    CHECK(mt_model_config_from_json(&mt_vit_type, json, &h, &e) == MT_OK, "from_json: %s", e.msg);
    char *again = mt_fields_to_json(mt_vit_type.fields, &h);
    CHECK(strcmp(json, again) == 0, "round trip:\n%s\n%s", json, again);
    CHECK(strstr(json, "\"pool\":\"mean\"") && strstr(json, "\"image_w\":12"), "json: %s", json);
    free(json);
    free(again);
    CHECK(mt_model_config_from_json(&mt_vit_type, "{\"pool\":\"max\"}", &h, &e) == MT_EINVAL &&
              strstr(e.msg, "accepted: cls, mean"),
          "bad pool: %s", e.msg);
    CHECK(mt_model_config_from_json(&mt_vit_type, "{\"n_vocab\":3}", &h, &e) == MT_EINVAL &&
              strstr(e.msg, "unknown key 'n_vocab'") && strstr(e.msg, "patch"),
          "bad key: %s", e.msg);
    CHECK(mt_model_config_from_json(&mt_vit_type,
                                    "{\"image_h\":65536,\"image_w\":65536,"
                                    "\"patch\":65536}",
                                    &h, &e) == MT_EINVAL &&
              strstr(e.msg, "4294967296 inputs a patch"),
          "huge patch: %s", e.msg);
    CHECK(mt_model_config_from_json(&mt_vit_type,
                                    "{\"image_h\":4096,\"image_w\":4096,"
                                    "\"patch\":1}",
                                    &h, &e) == MT_EINVAL &&
              strstr(e.msg, "16777217 tokens"),
          "too many tokens: %s", e.msg);
}

static void test_params(void) {
    mt_vit_config g = tiny();
    mt_vit m;
    mt_err e;
    CHECK(mt_vit_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    const struct {
        const char *name;
        int d0, d1;
    } want[] = {{"patch_embed.weight", 8, 32},
                {"patch_embed.bias", 8, 0},
                {"cls_token", 1, 8},
                {"pos_emb.weight", 7, 8},
                {"blocks.1.attn.v_proj.weight", 8, 8},
                {"blocks.1.ffn.fc2.weight", 8, 32},
                {"final_norm.weight", 8, 0},
                {"head.weight", 3, 8},
                {"head.bias", 3, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int k = mt_params_find(&m.P, want[i].name);
        CHECK(k >= 0 && m.P.p[k].shape[0] == want[i].d0 &&
                  (want[i].d1 == 0 || m.P.p[k].shape[1] == want[i].d1),
              "%s missing or of the wrong shape", want[i].name);
    }
    mt_vit_free(&m);
    g.pool = MT_VIT_POOL_MEAN, g.stack.placement = MT_PLACE_POST;
    CHECK(mt_vit_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    CHECK(mt_params_find(&m.P, "cls_token") < 0 && mt_params_find(&m.P, "final_norm.weight") < 0,
          "mean pooling: no cls token; post: no final norm");
    CHECK(m.P.p[mt_params_find(&m.P, "pos_emb.weight")].shape[0] == 6, "6 positions");
    mt_vit_free(&m);

    /* DeepNorm init per matrix: v_proj and fc1 scaled by beta, q_proj not (docs/layers.md) */
    g = tiny(), g.stack.n_embd = 64, g.stack.n_head = 4, g.stack.n_layer = 3;
    g.stack.placement = MT_PLACE_DEEPNORM;
    CHECK(mt_vit_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    mt_rng r;
    mt_rng_seed(&r, 3);
    mt_params_initialize(&m.P, &r);
    const struct {
        const char *name;
        double std;
    } inits[] = {{"blocks.2.attn.q_proj.weight", sqrt(2.0 / 128)},
                 {"blocks.2.attn.v_proj.weight", m.cfg.stack.deepnorm_beta * sqrt(2.0 / 128)},
                 {"blocks.2.ffn.fc1.weight", m.cfg.stack.deepnorm_beta * sqrt(2.0 / 320)},
                 {"patch_embed.weight", sqrt(2.0 / (64 + 32))}};
    for (int i = 0; i < 4; i++) {
        const mt_param *p = &m.P.p[mt_params_find(&m.P, inits[i].name)];
        double s2 = 0;
        for (size_t j = 0; j < p->n; j++)
            s2 += (double)m.P.data[p->offset + j] * m.P.data[p->offset + j];
        double std = sqrt(s2 / p->n);
        CHECK(fabs(std / inits[i].std - 1) < 0.1, "%s: std %g, want %g", inits[i].name, std,
              inits[i].std);
    }
    mt_vit_free(&m);
}

/* With zero blocks' worth of effect (every matrix of the blocks 0 and norm none, post), the ViT
   is head(pool(patch_embed(patches) [+ cls] + pos)): checked against naive loops, which pins the
   patch layout (models.h) and both poolings. */
static void test_patches_and_pooling(void) {
    for (int pool = 0; pool < 2; pool++) {
        mt_vit_config g = tiny();
        g.pool = (mt_vit_pool)pool, g.stack.placement = MT_PLACE_POST,
        g.stack.norm = mt_norm_default(MT_NORM_NONE);
        mt_vit m;
        mt_err e;
        CHECK(mt_vit_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
        mt_rng r;
        mt_rng_seed(&r, 5);
        mt_params_initialize(&m.P, &r);
        for (int i = 0; i < m.P.n; i++) {
            bool block = strncmp(m.P.p[i].name, "blocks.", 7) == 0;
            for (size_t j = 0; j < m.P.p[i].n; j++) {
                float *v = &m.P.data[m.P.p[i].offset + j];
                *v = block ? 0 : mt_rng_normal(&r);
            }
        }
        int B = 2, CH = 2, H = 8, W = 12, P = 4, C = 8, K = 3, T = mt_vit_tokens(&m.cfg);
        float img[2 * 2 * 8 * 12];
        for (int i = 0; i < B * CH * H * W; i++) img[i] = mt_rng_normal(&r);
        mt_ctx c;
        MT_ASSERT(mt_ctx_init(&c, 1 << 22, 1, NULL) == MT_OK, "ctx");
        mt_tensor *logits = mt_vit_forward(&c, &m, &m.P, img, B);
        const float *pw = m.P.data + m.P.p[mt_params_find(&m.P, "patch_embed.weight")].offset;
        const float *pb = m.P.data + m.P.p[mt_params_find(&m.P, "patch_embed.bias")].offset;
        const float *pos = m.P.data + m.P.p[mt_params_find(&m.P, "pos_emb.weight")].offset;
        const float *hw = m.P.data + m.P.p[mt_params_find(&m.P, "head.weight")].offset;
        const float *hb = m.P.data + m.P.p[mt_params_find(&m.P, "head.bias")].offset;
        int cls = mt_params_find(&m.P, "cls_token");
        double maxerr = 0;
        for (int b = 0; b < B; b++) {
            double pooled[8] = {0};
            for (int t = 0; t < T; t++) {
                int np = t - (cls >= 0); /* patch index, -1: the class token */
                for (int o = 0; o < C; o++) {
                    double v = pos[t * C + o];
                    if (np < 0) v += m.P.data[m.P.p[cls].offset + o];
                    else {
                        int i = np / (W / P), j = np % (W / P);
                        v += pb[o];
                        for (int ch = 0; ch < CH; ch++)
                            for (int y = 0; y < P; y++)
                                for (int x = 0; x < P; x++)
                                    v += (double)pw[o * CH * P * P + (ch * P + y) * P + x] *
                                         img[((b * CH + ch) * H + i * P + y) * W + j * P + x];
                    }
                    if (pool == MT_VIT_POOL_MEAN) pooled[o] += v / T;
                    else if (t == 0) pooled[o] = v;
                }
            }
            for (int k = 0; k < K; k++) {
                double z = hb[k];
                for (int o = 0; o < C; o++) z += hw[k * C + o] * pooled[o];
                maxerr = worst_err(maxerr, fabs(z - logits->data[b * K + k]) / (1 + fabs(z)));
            }
        }
        CHECK(maxerr < 1e-5, "pool %s: logits differ from the naive ViT by %g",
              mt_enum_name(&MT_VIT_POOLS, (mt_vit_pool)pool), maxerr);
        mt_ctx_free(&c);
        mt_vit_free(&m);
    }
}

/* Which half of a 1-channel 8x8 image is bright: a few Adam steps must learn it. */
static void test_learns(void) {
    mt_vit_config g = mt_vit_config_default();
    g.image_h = g.image_w = 8, g.patch = 4, g.n_classes = 2, g.stack.n_layer = 2,
    g.stack.n_head = 2;
    g.stack.n_embd = 16;
    mt_vit m;
    mt_err e;
    CHECK(mt_vit_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    mt_rng r;
    mt_rng_seed(&r, 1);
    mt_params_initialize(&m.P, &r);
    mt_optim_config oc = mt_optim_defaults();
    oc.sched.lr = 3e-3;
    mt_optim o;
    CHECK(mt_optim_init(&o, &oc, &m.P, &e) == MT_OK, "optim: %s", e.msg);
    enum { B = 16 };
    mt_ctx c;
    size_t arena = mt_model_arena_bytes(&mt_vit_type, &m.cfg, B, true);
    MT_ASSERT(mt_ctx_init(&c, arena, 1, NULL) == MT_OK, "ctx");
    c.training = true;
    float img[B * 64];
    int y[B];
    float first = 0, last = 0;
    for (int step = 0; step < 60; step++) {
        for (int b = 0; b < B; b++) {
            y[b] = (int)mt_rng_below(&r, 2);
            for (int q = 0; q < 64; q++)
                img[b * 64 + q] = 0.3f * mt_rng_normal(&r) + ((q % 8 < 4) == (y[b] == 0) ? 1 : 0);
        }
        mt_ctx_reset(&c);
        mt_params_zero_grad(&m.P);
        mt_tensor *loss = mt_vit_loss(&c, &m, &m.P, img, y, B, MT_CE_PLAIN);
        mt_backward(&c, loss);
        mt_optim_step(&o, &m.P, oc.sched.lr);
        if (step == 0) first = loss->data[0];
        last = loss->data[0];
    }
    CHECK(first > 0.5f && last < 0.1f, "loss %g -> %g after 60 steps", first, last);
    /* the estimate covers a step, without the 64 MiB it adds to spare */
    CHECK(c.arena.peak < arena - ((size_t)64 << 20), "arena peak %zu, estimate %zu", c.arena.peak,
          arena);
    mt_ctx_free(&c);
    mt_optim_free(&o);
    mt_vit_free(&m);
}

int main(void) {
    test_config();
    test_params();
    test_patches_and_pooling();
    test_learns();
    return check_finish("test_vit");
}
