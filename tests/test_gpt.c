/* The GPT: init of every matrix against its formula per scheme, a finite-difference gradient
   check of the whole model, the config's JSON round trip and the errors of bad configs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* DeepScaleLM's v_proj and out_proj std in block `layer`, docs/layers.md's recurrence written
   sublayer by sublayer: the stream's correlation r (from r0 (1 - p)) and variance v; a sublayer
   adds a branch of variance beta^2 and correlation c (attention: 1 - p; FFN: (1 - p) times ReLU's
   (sqrt(1 - r^2) + (pi - acos r) r) / pi) to a skip of variance lambda^2 v. */
static double dsl_vo_std(const mt_stack_config *s, int layer) {
    double p = s->dropout, r = s->dsl_r0 * (1 - p), v = 1, l2 = 1, b2 = 1;
    if (s->placement == MT_PLACE_DSL) b2 = s->dsl_k / s->n_layer, l2 = 1 - b2;
    for (int i = 0; i < 2 * layer; i++) {
        double c = i % 2 == 0 ? 1 - p : (1 - p) * (sqrt(1 - r * r) + (M_PI - acos(r)) * r) / M_PI;
        double cov = l2 * v * r + b2 * c;
        v = l2 * v + b2;
        r = cov / v;
    }
    return sqrt(sqrt((1 - p) / r) / s->n_embd);
}

/* The std a matrix must have, from docs/layers.md's formulas (not from the model's table). */
static double expected_std(const mt_gpt_config *g, const char *name, int fan_out, int fan_in) {
    double xavier = sqrt(2.0 / (fan_in + fan_out)), p = g->stack.dropout;
    bool resid = strstr(name, "out_proj") || strstr(name, "fc2");
    bool beta = resid || strstr(name, "v_proj") || strstr(name, "fc1") || strstr(name, "fc3");
    if (strstr(name, "_emb.")) /* DSL: the tables' sum of variance 1 - p */
        return g->stack.init == MT_SCHEME_DSL ? sqrt((1 - p) / 2) : g->emb_std;
    switch (g->stack.init) {
    case MT_SCHEME_GPT2: return resid ? 0.02 / sqrt(2.0 * g->stack.n_layer) : 0.02;
    case MT_SCHEME_XAVIER: return xavier;
    case MT_SCHEME_DEEPNORM:
        if (strstr(name, "lm_head")) return xavier;
        return beta ? xavier * pow(8.0 * g->stack.n_layer, -0.25) : xavier;
    case MT_SCHEME_DSL: /* DeepScaleLM: q, k fan-in, v and out by the recurrence, FFN variance
                           sqrt(2 (1 - p) / (C F)) */
        if (strstr(name, "lm_head")) return xavier;
        if (strstr(name, "v_proj") || strstr(name, "out_proj"))
            return dsl_vo_std(&g->stack, atoi(strstr(name, "blocks.") + 7));
        if (strstr(name, "attn.")) return 1 / sqrt(fan_in);
        return pow(2.0 * (1 - p) / ((double)fan_in * fan_out), 0.25);
    case MT_SCHEME_SUBLN: /* Magneto: gain gamma = sqrt(log 2N) on v, out, fc1, fc2 */
        if (strstr(name, "lm_head")) return xavier;
        return beta ? xavier * sqrt(log(2.0 * g->stack.n_layer)) : xavier;
    default: return -1;
    }
}

static void test_init(void) {
    struct {
        mt_placement placement;
        mt_init_scheme init;
        mt_init_scheme want; /* what the init resolves to */
    } cases[] = {{MT_PLACE_PRE, MT_SCHEME_GPT2, MT_SCHEME_GPT2},
                 {MT_PLACE_POST, MT_SCHEME_XAVIER, MT_SCHEME_XAVIER},
                 {MT_PLACE_DEEPNORM, MT_SCHEME_AUTO, MT_SCHEME_DEEPNORM},
                 {MT_PLACE_PRE, MT_SCHEME_DEEPNORM, MT_SCHEME_DEEPNORM},
                 {MT_PLACE_SUBLN, MT_SCHEME_AUTO, MT_SCHEME_SUBLN},
                 {MT_PLACE_PERI, MT_SCHEME_AUTO, MT_SCHEME_GPT2},
                 {MT_PLACE_SUBLN, MT_SCHEME_GPT2, MT_SCHEME_GPT2},
                 {MT_PLACE_PRE, MT_SCHEME_SUBLN, MT_SCHEME_SUBLN},
                 /* with SwiGLU's fc3 (fc1's std) and 1 or 2 key-value heads of 4 (k_proj and
                    v_proj of fan_out 16 or 32): */
                 {MT_PLACE_DEEPNORM, MT_SCHEME_AUTO, MT_SCHEME_DEEPNORM},
                 {MT_PLACE_SUBLN, MT_SCHEME_AUTO, MT_SCHEME_SUBLN},
                 {MT_PLACE_POST, MT_SCHEME_XAVIER, MT_SCHEME_XAVIER},
                 {MT_PLACE_PRE, MT_SCHEME_GPT2, MT_SCHEME_GPT2},
                 /* DeepScaleLM's init, also with another placement */
                 {MT_PLACE_DSL, MT_SCHEME_AUTO, MT_SCHEME_DSL},
                 {MT_PLACE_LNS, MT_SCHEME_DSL, MT_SCHEME_DSL},
                 {MT_PLACE_LNS, MT_SCHEME_AUTO, MT_SCHEME_GPT2},
                 {MT_PLACE_REORDER, MT_SCHEME_AUTO, MT_SCHEME_GPT2},
                 {MT_PLACE_MIXLN, MT_SCHEME_AUTO, MT_SCHEME_GPT2},
                 /* DSL with dropout 0.1, k = 1, r0 0.05 (the recurrence's every term) */
                 {MT_PLACE_DSL, MT_SCHEME_AUTO, MT_SCHEME_DSL}};
    for (int k = 0; k < 18; k++) {
        mt_gpt_config g = mt_gpt_config_default();
        g.stack.n_layer = 3, g.stack.n_head = 4, g.stack.n_embd = 64, g.n_ctx = 64, g.n_vocab = 300;
        g.stack.placement = cases[k].placement, g.stack.init = cases[k].init, g.tied = false;
        if (k == 1) g.emb_std = 1.0f; /* the pilot's embeddings */
        if (k >= 8 && k < 12) g.stack.act = MT_ACT_SWIGLU, g.stack.n_kv_head = 1 + k % 2;
        if (k == 17) g.stack.dropout = 0.1f, g.stack.dsl_k = 1, g.stack.dsl_r0 = 0.05f;
        mt_gpt m;
        mt_err err;
        CHECK(mt_gpt_build(&m, &g, &err) == MT_OK, "build: %s", err.msg);
        CHECK(m.cfg.stack.init == cases[k].want, "%s placement, init %s: resolved to %s",
              mt_enum_name(&MT_PLACEMENTS, cases[k].placement),
              mt_enum_name(&MT_INIT_SCHEMES, cases[k].init),
              mt_enum_name(&MT_INIT_SCHEMES, m.cfg.stack.init));
        CHECK(fabs(m.cfg.stack.subln_gain - sqrt(log(6.0))) < 1e-6, "subln gain %g for 3 layers",
              m.cfg.stack.subln_gain);
        mt_rng r;
        mt_rng_seed(&r, 100 + k);
        mt_params_initialize(&m.P, &r);
        int matrices = 0;
        for (int i = 0; i < m.P.n; i++) {
            const mt_param *e = &m.P.p[i];
            const float *w = m.P.data + e->offset;
            double s = 0, s2 = 0;
            for (size_t j = 0; j < e->n; j++) s += w[j], s2 += (double)w[j] * w[j];
            double mean = s / e->n, std = sqrt(s2 / e->n - mean * mean);
            if (e->ndim == 2) {
                double want = expected_std(&m.cfg, e->name, e->shape[0], e->shape[1]);
                CHECK(fabs(std / want - 1) < 0.05 && fabs(mean) < 0.1 * want,
                      "%s %s: std %.5f (mean %.2g), want %.5f",
                      mt_enum_name(&MT_INIT_SCHEMES, m.cfg.stack.init), e->name, std, mean, want);
                matrices++;
            } else if (ends_with(e->name, "norm.weight")) {
                CHECK(mean == 1 && std == 0, "%s: norm weights must start at 1", e->name);
            } else {
                CHECK(mean == 0 && std == 0, "%s: biases must start at 0", e->name);
            }
        }
        int per_block = g.stack.act == MT_ACT_SWIGLU ? 7 : 6;
        CHECK(matrices == 3 + per_block * g.stack.n_layer, "%d matrices checked", matrices);
        if (k >= 8 && k < 12) {
            int kp = mt_params_find(&m.P, "blocks.0.attn.k_proj.weight");
            CHECK(kp >= 0 && m.P.p[kp].shape[0] == 16 * g.stack.n_kv_head &&
                      m.P.p[kp].shape[1] == 64 && mt_params_find(&m.P, "pos_emb.weight") >= 0,
                  "k_proj (n_kv_head HS, C) with %d key-value heads", g.stack.n_kv_head);
        }
        mt_gpt_free(&m);
    }
}

/* --param's table per entry (docs/optimizers.md), m_N = C / C0, m_L = L / L0: the blocks'
   matrices N(0, (0.02 / sqrt(m_N))^2) (out_proj and fc2 too), lr x 1 / m_N, weight decay x m_N
   (completep), every entry's eps x 1 / (m_N m_L) (completep); the embeddings', head's, norms' and
   biases' lr and decay x 1; each branch x 1 / m_L (completep; 0: none) and the logits x 1 / m_N. */
static void test_param_table(void) {
    const struct {
        mt_param_kind kind;
        int L, L0, C, C0;
        float std, lr, wd, eps, branch, logits;
    } cases[] = {{MT_PARAM_COMPLETEP, 4, 2, 64, 16, 0.01f, 0.25f, 4, 0.125f, 0.5f, 0.25f},
                 {MT_PARAM_COMPLETEP, 3, 3, 32, 0, 0.02f, 1, 1, 1, 1, 1},
                 {MT_PARAM_MUP, 2, 0, 64, 32, 0.02f / sqrtf(2), 0.5f, 1, 1, 0, 0.5f},
                 {MT_PARAM_SP, 2, 0, 64, 0, 0.02f, 1, 1, 1, 0, 1}};
    for (int k = 0; k < 4; k++) {
        mt_gpt_config g = mt_gpt_config_default();
        g.stack.n_layer = cases[k].L, g.stack.n_head = 4, g.stack.n_embd = cases[k].C;
        g.stack.param = cases[k].kind, g.stack.base_depth = cases[k].L0;
        g.stack.base_width = cases[k].C0, g.n_ctx = 16, g.n_vocab = 50, g.tied = false;
        mt_gpt m;
        mt_err err;
        CHECK(mt_gpt_build(&m, &g, &err) == MT_OK, "build: %s", err.msg);
        mt_param_scales ps = mt_stack_param_scales(&m.cfg.stack);
        CHECK(ps.branch == cases[k].branch && ps.logits == cases[k].logits &&
                  mt_stack_block(&m.cfg.stack, true).branch == cases[k].branch,
              "case %d: branch %g, logits %g", k, ps.branch, ps.logits);
        int hidden = 0;
        for (int i = 0; i < m.P.n; i++) {
            const mt_param *e = &m.P.p[i];
            bool h = e->role == MT_ROLE_MATRIX;
            hidden += h;
            float std = h ? cases[k].std : e->init_value, lr = h ? cases[k].lr : 1;
            float wd = h ? cases[k].wd : 1;
            if (h && k == 3 && (strstr(e->name, "out_proj") || strstr(e->name, "fc2")))
                std = MT_GPT2_STD / sqrtf(2.0f * cases[k].L); /* sp: gpt2's residual outputs */
            CHECK(fabsf(e->init_value - std) < 1e-7f && e->lr_scale == lr && e->wd_scale == wd &&
                      e->eps_scale == cases[k].eps,
                  "case %d, %s: std %g lr x %g wd x %g eps x %g", k, e->name, e->init_value,
                  e->lr_scale, e->wd_scale, e->eps_scale);
            if (!h && e->role != MT_ROLE_NORM && e->role != MT_ROLE_BIAS)
                CHECK(e->init_value == MT_GPT2_STD, "%s: std %g", e->name, e->init_value);
        }
        CHECK(hidden == 6 * cases[k].L, "case %d: %d hidden matrices", k, hidden);
        mt_gpt_free(&m);
    }
}

/* DeepScaleLM's stds exactly, block by block, where the std estimates above are too coarse: 12
   blocks, dropout 0.1, both placements' lambda and beta (dsl: k = 2; lns: 1 and 1). */
static void test_dsl_stds(void) {
    mt_placement placements[] = {MT_PLACE_DSL, MT_PLACE_LNS};
    for (int k = 0; k < 2; k++) {
        mt_stack_config s = mt_stack_default();
        s.n_layer = 12, s.n_embd = 48, s.n_head = 4, s.dropout = 0.1f, s.dsl_r0 = 0.08f;
        s.placement = placements[k], s.init = MT_SCHEME_DSL;
        mt_err err;
        CHECK(mt_stack_validate(&s, MT_DEEPNORM_DECODER_ONLY, 0, 12, true, &err) == MT_OK, "%s",
              err.msg);
        double ffn = pow(2.0 * 0.9 / (48.0 * 192), 0.25);
        for (int l = 0; l < 12; l++) {
            mt_block_init b = mt_stack_init_stds(&s, l);
            double vo = dsl_vo_std(&s, l);
            CHECK(fabs(b.v / vo - 1) < 1e-6 && fabs(b.out / vo - 1) < 1e-6 &&
                      fabs(b.fc1 / ffn - 1) < 1e-6 && fabs(b.fc2 / ffn - 1) < 1e-6 &&
                      fabs(b.q * sqrt(48.0) - 1) < 1e-6 && b.k == b.q,
                  "%s block %d: v %g out %g (want %g), fc1 %g fc2 %g (want %g), q %g k %g",
                  mt_enum_name(&MT_PLACEMENTS, s.placement), l, b.v, b.out, vo, b.fc1, b.fc2, ffn,
                  b.q, b.k);
        }
    }
}

/* ---- the whole model by finite differences ---- */
typedef struct {
    mt_gpt *m;
    const int *ids, *targets;
    int B, T;
} gpt_arg;

static mt_tensor *build_gpt_loss(mt_ctx *c, mt_tensor **in, const void *arg) {
    (void)in; /* the inputs are the model's own parameter views */
    const gpt_arg *a = arg;
    return mt_gpt_loss(c, a->m, &a->m->P, a->ids, a->targets, a->B, a->T, MT_CE_PLAIN);
}

static void test_gradcheck(void) {
    int B = 2, T = 5, ids[10], targets[10];
    mt_rng r;
    mt_rng_seed(&r, 7);
    for (int i = 0; i < B * T; i++) ids[i] = (int)mt_rng_below(&r, 7), targets[i] = (i * 3) % 7;
    targets[4] = -1;               /* ignored */
    for (int k = 0; k < 13; k++) { /* k >= 9: lns, reorder, mixln (block 0 Post-LN), dsl */
        mt_gpt_config g = mt_gpt_config_default();
        g.stack.n_layer = 2, g.stack.n_head = 2, g.stack.n_embd = 8, g.n_ctx = 6, g.n_vocab = 7,
        g.stack.n_ff = 12;
        g.stack.placement = (mt_placement)(k < 9 ? k % 5 : MT_PLACE_LNS + k - 9);
        g.stack.init = MT_SCHEME_XAVIER;
        if (g.stack.placement == MT_PLACE_MIXLN) g.stack.mixln_post = 1;
        if (g.stack.placement == MT_PLACE_DSL) g.stack.dsl_k = 1;
        g.tied = k != 3, g.stack.bias = k != 3;
        if (k >= 6) /* the LLaMA pieces: RoPE, SwiGLU, one key-value head of 2 */
            g.arch = MT_ARCH_LLAMA, g.stack.n_kv_head = 1, g.rope_theta = k == 8 ? 3.0f : 1e4f;
        mt_gpt m;
        mt_err err;
        CHECK(mt_gpt_build(&m, &g, &err) == MT_OK, "build: %s", err.msg);
        mt_params_initialize(&m.P, &r);
        for (size_t i = 0; i < m.P.total; i++) m.P.data[i] += 0.2f * mt_rng_normal(&r);
        mt_tensor **in = malloc((size_t)m.P.n * sizeof *in);
        for (int i = 0; i < m.P.n; i++) in[i] = &m.P.t[i];
        gpt_arg a = {&m, ids, targets, B, T};
        char name[64];
        snprintf(name, sizeof name, "gpt %s%s%s", mt_enum_name(&MT_PLACEMENTS, g.stack.placement),
                 k == 3 ? " untied no-bias" : "", k >= 6 ? " llama gqa" : "");
        /* RMSNorm and SwiGLU curve more: a smaller step */
        gradcheck(name, build_gpt_loss, &a, m.P.n, in, k >= 6 ? 3e-3 : 1e-2, 5e-3);
        free(in);
        mt_gpt_free(&m);
    }
}

/* ---- same inputs and thread count, same bits (sizes where attention and the ops go parallel) - */
static void test_deterministic(void) {
    mt_gpt_config g = mt_gpt_config_default();
    g.stack.n_layer = 2, g.n_ctx = 64, g.stack.n_embd = 64, g.stack.n_head = 4,
    g.stack.placement = MT_PLACE_DEEPNORM;
    mt_gpt m;
    mt_err err;
    CHECK(mt_gpt_build(&m, &g, &err) == MT_OK, "build: %s", err.msg);
    mt_rng r;
    mt_rng_seed(&r, 5);
    mt_params_initialize(&m.P, &r);
    int B = 8, T = 64, *ids = malloc(B * T * sizeof(int)), *targets = malloc(B * T * sizeof(int));
    for (int i = 0; i < B * T; i++)
        ids[i] = (int)mt_rng_below(&r, 256), targets[i] = (int)mt_rng_below(&r, 256);
    float *first = malloc(m.P.total * sizeof(float)), loss0 = 0;
    mt_ctx c;
    mt_ctx_init(&c, (size_t)256 << 20, 1, NULL);
    for (int run = 0; run < 2; run++) {
        mt_ctx_reset(&c);
        mt_params_zero_grad(&m.P);
        mt_tensor *loss = mt_gpt_loss(&c, &m, &m.P, ids, targets, B, T, MT_CE_PLAIN);
        mt_backward(&c, loss);
        if (run == 0) {
            loss0 = loss->data[0];
            memcpy(first, m.P.grad, m.P.total * sizeof(float));
        } else {
            CHECK(loss->data[0] == loss0 && !memcmp(first, m.P.grad, m.P.total * sizeof(float)),
                  "two identical steps differ (%d threads)", mt_threads());
        }
    }
    mt_ctx_free(&c);
    free(first);
    free(ids);
    free(targets);
    mt_gpt_free(&m);
}

/* ---- a training step that frees its activations in backward (free_activations): the same loss
   and gradients as one that keeps them, in a smaller arena, for every placement, LLaMA's preset
   and dropout ---- */
static void test_free_activations(void) {
    struct {
        mt_placement place;
        mt_gpt_arch arch;
        float dropout;
    } cases[] = {{MT_PLACE_PRE, MT_ARCH_GPT, 0},      {MT_PLACE_POST, MT_ARCH_GPT, 0},
                 {MT_PLACE_DEEPNORM, MT_ARCH_GPT, 0}, {MT_PLACE_SUBLN, MT_ARCH_GPT, 0},
                 {MT_PLACE_PERI, MT_ARCH_GPT, 0},     {MT_PLACE_PRE, MT_ARCH_LLAMA, 0},
                 {MT_PLACE_PRE, MT_ARCH_GPT, 0.1f}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        mt_gpt_config g = mt_gpt_config_default();
        g.stack.n_layer = 2, g.n_ctx = 32, g.stack.n_embd = 32, g.stack.n_head = 2;
        g.stack.placement = cases[k].place, g.arch = cases[k].arch,
        g.stack.dropout = cases[k].dropout;
        mt_gpt m;
        mt_err err;
        CHECK(mt_gpt_build(&m, &g, &err) == MT_OK, "build: %s", err.msg);
        mt_rng r;
        mt_rng_seed(&r, 7);
        mt_params_initialize(&m.P, &r);
        int B = 3, T = 32, *ids = malloc(B * T * sizeof(int)),
            *targets = malloc(B * T * sizeof(int));
        for (int i = 0; i < B * T; i++)
            ids[i] = (int)mt_rng_below(&r, 256), targets[i] = (int)mt_rng_below(&r, 256);
        float *kept = malloc(m.P.total * sizeof(float)), loss_kept = 0;
        size_t peak[2];
        for (int freed = 0; freed < 2; freed++) {
            mt_ctx c;
            mt_ctx_init(&c, (size_t)64 << 20, 1, NULL);
            c.free_activations = freed;
            mt_params_zero_grad(&m.P);
            mt_tensor *loss = mt_gpt_loss(&c, &m, &m.P, ids, targets, B, T, MT_CE_PLAIN);
            mt_backward(&c, loss);
            peak[freed] = c.arena.peak;
            if (!freed) {
                loss_kept = loss->data[0];
                memcpy(kept, m.P.grad, m.P.total * sizeof(float));
            } else {
                CHECK(loss->data[0] == loss_kept &&
                          !memcmp(kept, m.P.grad, m.P.total * sizeof(float)),
                      "case %zu: freeing the activations changed the gradients", k);
            }
            mt_ctx_free(&c);
        }
        CHECK(peak[1] < peak[0], "case %zu: freeing the activations left the arena peak at %zu", k,
              peak[1]);
        free(kept);
        free(ids);
        free(targets);
        mt_gpt_free(&m);
    }
}

/* ---- config ---- */
static void test_json(void) {
    mt_gpt_config g = mt_gpt_config_default();
    g.stack.n_layer = 7, g.stack.n_head = 3, g.stack.n_embd = 48, g.n_ctx = 33, g.n_vocab = 1000,
    g.stack.n_ff = 100;
    g.stack.norm.kind = MT_NORM_RMS, g.stack.norm.eps = 1e-7f, g.stack.norm.prms_p = 0.125f,
    g.stack.norm.gn_groups = 4;
    g.stack.norm.rms_form = MT_RMS_PAPER, g.stack.norm.rms_bias = true,
    g.stack.norm.in_affine = true;
    g.stack.placement = MT_PLACE_DEEPNORM, g.stack.deepnorm_alpha = 1.25f,
    g.stack.deepnorm_beta = 0.3f;
    g.stack.subln_gain = 1.5f;
    g.stack.init = MT_SCHEME_XAVIER, g.tied = false, g.stack.bias = false,
    g.stack.act = MT_ACT_SILU;
    g.stack.dropout = 0.1f;
    g.arch = MT_ARCH_LLAMA, g.pos = MT_POS_ROPE, g.rope_theta = 5e5f, g.stack.n_kv_head = 1;
    g.stack.ff_multiple = 64;
    char *json = mt_fields_to_json(mt_gpt_type.fields, &g);
    const char *keys[] = {"n_layer",        "n_head",        "n_embd",     "n_ctx",
                          "n_vocab",        "n_ff",          "norm",       "placement",
                          "norm_eps",       "prms_p",        "gn_groups",  "rms_form",
                          "deepnorm_alpha", "deepnorm_beta", "subln_gain", "init",
                          "tied",           "bias",          "act",        "dropout",
                          "arch",           "pos",           "rope_theta", "n_kv_head",
                          "ff_multiple"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char q[64];
        snprintf(q, sizeof q, "\"%s\":", keys[i]);
        CHECK(strstr(json, q), "JSON lacks %s: %s", keys[i], json);
    }
    mt_gpt_config h;
    mt_err err;
    CHECK(mt_model_config_from_json(&mt_gpt_type, json, &h, &err) == MT_OK, "from_json: %s",
          err.msg);
    CHECK(h.stack.n_layer == 7 && h.stack.n_head == 3 && h.stack.n_embd == 48 && h.n_ctx == 33 &&
              h.n_vocab == 1000 && h.stack.n_ff == 100,
          "dims round trip");
    CHECK(h.stack.norm.kind == MT_NORM_RMS && h.stack.norm.eps == 1e-7f &&
              h.stack.norm.prms_p == 0.125f && h.stack.norm.gn_groups == 4 &&
              h.stack.norm.rms_form == MT_RMS_PAPER && h.stack.norm.rms_bias &&
              h.stack.norm.in_affine,
          "norm round trip");
    CHECK(h.stack.placement == MT_PLACE_DEEPNORM && h.stack.deepnorm_alpha == 1.25f &&
              h.stack.deepnorm_beta == 0.3f && h.stack.subln_gain == 1.5f &&
              h.stack.init == MT_SCHEME_XAVIER && !h.tied && !h.stack.bias &&
              h.stack.act == MT_ACT_SILU && h.stack.dropout == 0.1f,
          "placement, init, head, act, dropout round trip");
    CHECK(h.arch == MT_ARCH_LLAMA && h.pos == MT_POS_ROPE && h.rope_theta == 5e5f &&
              h.stack.n_kv_head == 1 && h.stack.ff_multiple == 64,
          "arch, pos, rope_theta, n_kv_head, ff_multiple round trip");
    free(json);
}

/* cfg changed by one field must fail with a message holding want. */
static void expect_error(const mt_gpt_config *g, const char *want) {
    mt_gpt_config h = *g;
    mt_err err = {0};
    mt_status st = mt_gpt_config_validate(&h, &err);
    CHECK(st == MT_EINVAL && strstr(err.msg, want), "expected an error naming '%s', got %d '%s'",
          want, (int)st, err.msg);
}

static void expect_json_error(const char *json, const char *want) {
    mt_gpt_config h;
    mt_err err = {0};
    CHECK(mt_model_config_from_json(&mt_gpt_type, json, &h, &err) != MT_OK && strstr(err.msg, want),
          "JSON %s: expected an error naming '%s', got '%s'", json, want, err.msg);
}

static void test_bad_config(void) {
    mt_gpt_config g = mt_gpt_config_default(), h;
    mt_err err;
    h = g;
    CHECK(mt_gpt_config_validate(&h, &err) == MT_OK && h.stack.n_ff == 4 * h.stack.n_embd &&
              h.stack.init == MT_SCHEME_GPT2,
          "defaults validate: n_ff %d", h.stack.n_ff);
    float a, b;
    mt_deepnorm_constants(MT_DEEPNORM_DECODER_ONLY, 0, h.stack.n_layer, &a, &b);
    CHECK(h.stack.deepnorm_alpha == a && h.stack.deepnorm_beta == b, "DeepNorm constants filled");
    h = g, h.stack.n_head = 3;
    expect_error(&h, "n_head");
    h = g, h.stack.n_layer = 0;
    expect_error(&h, "n_layer");
    h = g, h.stack.n_ff = -1;
    expect_error(&h, "n_ff");
    h = g, h.stack.dropout = 1.5f;
    expect_error(&h, "dropout");
    h = g, h.stack.norm = mt_norm_default(MT_NORM_BN);
    mt_err e2 = {0};
    CHECK(mt_gpt_config_validate(&h, &e2) == MT_EINVAL && e2.msg[0], "BatchNorm refused: '%s'",
          e2.msg);
    h = g, h.stack.norm = mt_norm_default(MT_NORM_IN);
    e2.msg[0] = 0;
    CHECK(mt_gpt_config_validate(&h, &e2) == MT_EINVAL && e2.msg[0], "InstanceNorm refused");
    mt_gpt m;
    h = g, h.stack.n_head = 5;
    CHECK(mt_gpt_build(&m, &h, &err) == MT_EINVAL && strstr(err.msg, "n_head"), "build refuses");
    expect_json_error("{\"n_layer\": 2, \"n_heads\": 4}", "n_heads");
    expect_json_error("{\"placement\": \"sandwich\"}", "pre, post, deepnorm, subln, peri");
    expect_json_error("{\"init\": \"kaiming\"}", "gpt2, xavier, deepnorm, subln, dsl, auto");
    /* Sub-LN's FFN inner norm sees n_ff channels: GroupNorm's groups must divide them too */
    h = g, h.stack.norm = mt_norm_default(MT_NORM_GN), h.stack.norm.gn_groups = 8;
    h.stack.n_embd = 64, h.stack.n_ff = 100;
    CHECK(mt_gpt_config_validate(&h, &err) == MT_OK, "gn 8 groups of pre over 64 channels");
    h = g, h.stack.norm = mt_norm_default(MT_NORM_GN), h.stack.norm.gn_groups = 8;
    h.stack.n_embd = 64, h.stack.n_ff = 100, h.stack.placement = MT_PLACE_SUBLN;
    expect_error(&h, "n_ff = 100");
    h = g, h.stack.subln_gain = -1;
    expect_error(&h, "subln_gain");
    expect_json_error("{\"act\": \"tanh\"}", "gelu");
    expect_json_error("{\"n_layer\": \"two\"}", "n_layer");
    expect_json_error("{\"n_layer\": 2.5}", "n_layer");
    expect_json_error("{\"tied\": 1}", "tied");
    expect_json_error("[1, 2]", "JSON object");
    expect_json_error("{\"n_embd\": 30, \"n_head\": 4}", "n_head");
    /* the LLaMA pieces' bad values */
    h = g, h.stack.n_kv_head = 3;
    expect_error(&h, "n_kv_head = 3 does not divide n_head = 4");
    h = g, h.stack.n_kv_head = -1;
    expect_error(&h, "n_kv_head = -1");
    h = g, h.stack.ff_multiple = 0;
    expect_error(&h, "ff_multiple = 0, must be at least 1");
    h = g, h.rope_theta = 0;
    expect_error(&h, "rope_theta = 0, must be a finite number > 0");
    h = g, h.pos = MT_POS_ROPE, h.stack.n_embd = 12, h.stack.n_head = 4;
    expect_error(&h, "head size n_embd / n_head = 12 / 4 = 3 must be even");
    expect_json_error("{\"arch\": \"mistral\"}", "gpt, llama");
    expect_json_error("{\"pos\": \"alibi\"}", "learned, rope");
}

/* arch llama resolves in validation into the fields the checkpoint stores; a piece given another
   value than the GPT's default keeps it; the resolved config validates to itself; n_ff by
   LLaMA's rule; n_kv_head 0 is n_head. */
static void test_arch(void) {
    mt_gpt_config g = mt_gpt_config_default(), h;
    mt_err err;
    g.arch = MT_ARCH_LLAMA;
    h = g;
    CHECK(mt_gpt_config_validate(&h, &err) == MT_OK, "llama: %s", err.msg);
    CHECK(h.pos == MT_POS_ROPE && h.stack.act == MT_ACT_SWIGLU &&
              h.stack.norm.kind == MT_NORM_RMS && h.stack.norm.rms_form == MT_RMS_LLAMA &&
              h.stack.norm.eps == 1e-5f && !h.stack.bias && h.tied && h.rope_theta == 10000.0f &&
              h.stack.n_kv_head == h.stack.n_head,
          "llama resolves to rope, swiglu, rms (llama form, eps 1e-5), no bias, tied");
    /* n_embd 64: int(2 * 256 / 3) = 170, up to a multiple of 32: 192 */
    CHECK(h.stack.n_ff == 192, "llama n_ff %d, want 192", h.stack.n_ff);
    mt_gpt_config again = h;
    CHECK(mt_gpt_config_validate(&again, &err) == MT_OK && !memcmp(&again, &h, sizeof h),
          "a resolved llama config validates to itself");
    h = g, h.stack.ff_multiple = 256, h.stack.n_embd = 4096, h.stack.n_head = 32;
    CHECK(mt_gpt_config_validate(&h, &err) == MT_OK && h.stack.n_ff == 11008,
          "LLaMA-7B's n_ff: %d, want 11008", h.stack.n_ff);
    /* explicit pieces other than the GPT's defaults stay */
    h = g, h.stack.norm.kind = MT_NORM_SCALE, h.stack.act = MT_ACT_SILU, h.stack.n_ff = 100;
    h.tied = false;
    CHECK(mt_gpt_config_validate(&h, &err) == MT_OK && h.stack.norm.kind == MT_NORM_SCALE &&
              h.stack.act == MT_ACT_SILU && h.stack.n_ff == 100 && !h.tied &&
              h.pos == MT_POS_ROPE && !h.stack.bias,
          "llama with --norm scale --act silu --n-ff 100 --untie keeps them");
    /* arch gpt: nothing changes */
    h = mt_gpt_config_default();
    CHECK(mt_gpt_config_validate(&h, &err) == MT_OK && h.pos == MT_POS_LEARNED &&
              h.stack.act == MT_ACT_GELU && h.stack.norm.kind == MT_NORM_LN && h.stack.bias,
          "gpt keeps learned positions, GELU, LayerNorm, biases");
    /* the model: no pos_emb with RoPE, fc3 with SwiGLU, no biases */
    mt_gpt m;
    h = g, h.stack.n_kv_head = 2;
    CHECK(mt_gpt_build(&m, &h, &err) == MT_OK, "build llama: %s", err.msg);
    CHECK(mt_params_find(&m.P, "pos_emb.weight") < 0 &&
              mt_params_find(&m.P, "blocks.3.ffn.fc3.weight") >= 0 &&
              mt_params_find(&m.P, "blocks.0.attn.q_proj.bias") < 0 &&
              m.P.p[mt_params_find(&m.P, "blocks.1.attn.v_proj.weight")].shape[0] == 32,
          "llama's tensors: no pos_emb, fc3, no biases, v_proj (2 x 16, 64)");
    mt_gpt_free(&m);
}

int main(void) {
    test_init();
    test_dsl_stds();
    test_param_table();
    test_gradcheck();
    test_deterministic();
    test_free_activations();
    test_json();
    test_bad_config();
    test_arch();
    return check_finish("test_gpt");
}
