/* Transformer blocks: activation, the attention and FFN sublayers, the residual placement
   (Post-LN, Pre-LN, DeepNorm, Sub-LN, Peri-LN, LayerNorm Scaling, OLMo-2's reorder, Mix-LN,
   DeepScaleLM) and nGPT's residual, DeepNorm's constants and Sub-LN's gain.
   B T C as in nn.h, F the FFN width. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn.h"

/* ---- names ----------------------------------------------------------------------------------- */

static const mt_enum_item ACTS[] = {
    [MT_ACT_GELU] = {.name = "gelu", .help = "GELU, tanh form"},
    [MT_ACT_GELU_ERF] = {.name = "gelu_erf", .help = "GELU, exact erf form"},
    [MT_ACT_RELU] = {.name = "relu"},
    [MT_ACT_SILU] = {.name = "silu", .help = "x sigmoid(x)"},
    [MT_ACT_SWIGLU] = {.name = "swiglu", .help = "fc2(silu(fc1 x) * fc3 x), LLaMA's gated FFN"},
    [MT_ACT_RELU2] = {.name = "relu2", .help = "relu(x)^2, Primer's squared ReLU"},
};
static const mt_enum_item PLACEMENTS[] = {
    [MT_PLACE_PRE] = {.name = "pre", .help = "x + F(N(x)), final norm", .title = "Pre-LN"},
    [MT_PLACE_POST] = {.name = "post", .help = "N(x + F(x))", .title = "Post-LN"},
    [MT_PLACE_DEEPNORM] = {.name = "deepnorm", .help = "N(alpha x + F(x))", .title = "DeepNorm"},
    [MT_PLACE_SUBLN] = {.name = "subln",
                        .help = "x + F(N(x)), a norm inside F before its output projection, "
                                "final norm",
                        .title = "Sub-LN"},
    [MT_PLACE_PERI] = {.name = "peri", .help = "x + N(F(N(x))), final norm", .title = "Peri-LN"},
    [MT_PLACE_LNS] = {.name = "lns",
                      .help = "x + F(N(x) / sqrt(l + 1)) in block l from 0, final norm",
                      .title = "LNS"},
    [MT_PLACE_REORDER] = {.name = "reorder",
                          .help = "x + N(F(x)) (OLMo-2), final norm",
                          .title = "OLMo-2"},
    [MT_PLACE_MIXLN] = {.name = "mixln",
                        .help = "post in the first --mixln-post blocks, pre after, final norm",
                        .title = "Mix-LN"},
    [MT_PLACE_DSL] = {.name = "dsl",
                      .help = "lambda x + beta F(N(x)), beta^2 = dsl-k / n-layer (DeepScaleLM), "
                              "final norm",
                      .title = "DeepScaleLM"},
};
static const mt_enum_item HYPERS[] = {
    [MT_HYPER_NONE] = {.name = "sum", .help = "one stream, the placement's sum"},
    [MT_HYPER_HC] = {.name = "hc",
                     .help = "hyper-connections: --hc-streams streams mixed by learned (and, "
                             "dynamic, input-dependent) weights",
                     .title = "HC"},
    [MT_HYPER_MHC] = {.name = "mhc",
                      .help = "manifold-constrained hyper-connections: the mixing doubly "
                              "stochastic (Sinkhorn-Knopp), the other weights sigmoids",
                      .title = "mHC"},
};
const mt_enum MT_ACTS = MT_ENUM("activation", ACTS);
const mt_enum MT_HYPERS = MT_ENUM("residual", HYPERS);
const mt_enum MT_PLACEMENTS = MT_ENUM("placement", PLACEMENTS);

mt_tensor *mt_activation(mt_ctx *c, mt_act act, mt_tensor *x) {
    switch (act) {
    case MT_ACT_GELU: return mt_gelu(c, x);
    case MT_ACT_GELU_ERF: return mt_gelu_erf(c, x);
    case MT_ACT_RELU: return mt_relu(c, x);
    case MT_ACT_SILU: return mt_silu(c, x);
    case MT_ACT_RELU2: return mt_relu2(c, x);
    case MT_ACT_SWIGLU: break; /* two inputs: mt_swiglu */
    }
    MT_ASSERT(0, "activation: %d is not a unary activation", (int)act);
}

/* ---- DeepNorm -------------------------------------------------------------------------------- */

void mt_deepnorm_constants(mt_deepnorm_arch arch, int N, int M, float *alpha, float *beta) {
    double a = 0, b = 0;
    switch (arch) {
    case MT_DEEPNORM_ENCODER_ONLY: a = pow(2.0 * N, 0.25), b = pow(8.0 * N, -0.25); break;
    case MT_DEEPNORM_DECODER_ONLY: a = pow(2.0 * M, 0.25), b = pow(8.0 * M, -0.25); break;
    case MT_DEEPNORM_ENCDEC_ENCODER: {
        double nm = pow((double)N, 4) * M;
        a = 0.81 * pow(nm, 1.0 / 16), b = 0.87 * pow(nm, -1.0 / 16);
        break;
    }
    case MT_DEEPNORM_ENCDEC_DECODER: a = pow(3.0 * M, 0.25), b = pow(12.0 * M, -0.25); break;
    }
    *alpha = (float)a;
    *beta = (float)b;
}

/* ---- Sub-LN's gain --------------------------------------------------------------------------- */

float mt_subln_gain(mt_deepnorm_arch arch, int N, int M) {
    double g2 = 0;
    switch (arch) {
    case MT_DEEPNORM_ENCODER_ONLY: g2 = log(2.0 * N); break;
    case MT_DEEPNORM_DECODER_ONLY: g2 = log(2.0 * M); break;
    case MT_DEEPNORM_ENCDEC_ENCODER: g2 = log(3.0 * M) * log(2.0 * N) / 3; break;
    case MT_DEEPNORM_ENCDEC_DECODER: g2 = log(3.0 * M); break;
    }
    return (float)sqrt(g2);
}

/* ---- parameters ------------------------------------------------------------------------------ */

/* <prefix>.weight (out, in) ~ N(0, std^2) and, with bias, <prefix>.bias (out) = 0. */
static void add_linear(mt_params *P, const char *prefix, int out, int in, bool bias, float std,
                       int *w, int *b) {
    char name[192]; /* mt_params_add refuses names that do not fit its table */
    snprintf(name, sizeof name, "%s.weight", prefix);
    *w = mt_params_add(P, name, 2, (int[]){out, in}, MT_ROLE_MATRIX, MT_INIT_NORMAL, std);
    *b = -1;
    if (!bias) return;
    snprintf(name, sizeof name, "%s.bias", prefix);
    *b = mt_params_add(P, name, 1, &out, MT_ROLE_BIAS, MT_INIT_ZEROS, 0.0f);
}

/* nGPT (residual ngpt): every matrix's vectors along C on the unit sphere (rows of q, k, v, fc1,
   fc3 (out, C); columns of out_proj and fc2 (C, in), as the reference's normalize_matrices), and
   the block's learned vectors, each at its scale (mt_ngpt_cfg): <prefix>.attn_alpha,
   .attn.s_qk, .ffn_alpha (C), .ffn.s_u, .ffn.s_v (F). */
static void ngpt_add_params(mt_params *P, const char *prefix, const mt_block_cfg *cfg,
                            mt_block_params *bp) {
    mt_ngpt_params *g = &bp->ngpt;
    *g = (mt_ngpt_params){-1, -1, -1, -1, -1};
    if (cfg->residual != MT_RESIDUAL_NGPT) return;
    const mt_attn_params *a = &bp->attn;
    const mt_ffn_params *f = &bp->ffn;
    int rows[] = {a->q_w, a->k_w, a->v_w, f->fc1_w, f->fc3_w}, cols[] = {a->out_w, f->fc2_w};
    for (int i = 0; i < 5; i++) mt_params_set_unit(P, rows[i], MT_UNIT_ROWS);
    for (int i = 0; i < 2; i++) mt_params_set_unit(P, cols[i], MT_UNIT_COLS);
    const mt_ngpt_cfg *n = &cfg->ngpt;
    const struct {
        const char *name;
        int width;
        float scale;
        int *at;
    } vec[] = {{"attn_alpha", cfg->C, n->alpha_scale, &g->attn_alpha},
               {"attn.s_qk", cfg->C, n->sqk_scale, &g->s_qk},
               {"ffn_alpha", cfg->C, n->alpha_scale, &g->ffn_alpha},
               {"ffn.s_u", cfg->F, n->suv_scale, &g->s_u},
               {"ffn.s_v", cfg->F, n->suv_scale, &g->s_v}};
    for (int i = 0; i < 5; i++) {
        char name[192];
        snprintf(name, sizeof name, "%s.%s", prefix, vec[i].name);
        *vec[i].at = mt_params_add(P, name, 1, &vec[i].width, MT_ROLE_NORM, MT_INIT_CONST,
                                   vec[i].scale);
    }
}

/* mHC (residual hc, kind mhc): <prefix>.b_pre (N) one-hot at k mod N, .b_post (N) = 1, .b_res
   (N, N) = I (the public code's init, lucidrains' static_alpha and static_beta: the paper gives
   none); dynamic: the norm of the N C stream as the stack's, .phi_* = 0, .alpha_* = 0.01. */
static void mhc_add(mt_params *P, const char *prefix, const mt_block_cfg *cfg, int k,
                    mt_hyper_params *h) {
    int N = cfg->hc.streams, NC = N * cfg->C, one = 1;
    const char *part[3] = {"pre", "post", "res"};
    char name[192];
    for (int g = 0; g < 3; g++) {
        snprintf(name, sizeof name, "%s.b_%s", prefix, part[g]);
        h->b[g] = g == 2   ? mt_params_add(P, name, 2, (int[]){N, N}, MT_ROLE_NORM, MT_INIT_EYE, 0)
                  : g == 1 ? mt_params_add(P, name, 1, &N, MT_ROLE_NORM, MT_INIT_ONES, 0)
                           : mt_params_add(P, name, 1, &N, MT_ROLE_NORM, MT_INIT_ONE_HOT,
                                           (float)(k % N));
    }
    if (!cfg->hc.dynamic) return;
    mt_norm_cfg norm = mt_norm_at(&cfg->norm, MT_NORM_SITE_ATTN);
    snprintf(name, sizeof name, "%s.norm", prefix);
    mt_norm_add_params(P, name, &norm, NC, &h->norm);
    for (int g = 0; g < 3; g++) {
        snprintf(name, sizeof name, "%s.phi_%s", prefix, part[g]);
        h->phi[g] = mt_params_add(P, name, 2, (int[]){NC, g == 2 ? N * N : N}, MT_ROLE_NORM,
                                  MT_INIT_ZEROS, 0);
        snprintf(name, sizeof name, "%s.alpha_%s", prefix, part[g]);
        h->alpha[g] = mt_params_add(P, name, 1, &one, MT_ROLE_NORM, MT_INIT_CONST, 0.01f);
    }
}

/* Hyper-connections (residual hc): each sublayer's <prefix>.<site>_hc.*, site attn or ffn, layer
   k = 2 block + (ffn) of the paper's count (every sublayer a layer). The paper's init (its
   Algorithm 2, as lucidrains/hyper-connections): static_alpha (N, N+1) = (e_{k mod N} | I),
   static_beta (N) = 1; dynamic: the streams' norm as the stack's, dynamic_alpha_fn (C, N+1) and
   dynamic_beta_fn (C) = 0, dynamic_alpha_scale and dynamic_beta_scale = 0.01. */
static void hyper_add_one(mt_params *P, const char *prefix, const mt_block_cfg *cfg, int k,
                          mt_hyper_params *h) {
    *h = (mt_hyper_params){-1, -1,           -1,           -1,           -1,
                           -1, {-1, -1, -1}, {-1, -1, -1}, {-1, -1, -1}, MT_NORM_PARAMS_NONE};
    if (cfg->residual != MT_RESIDUAL_HC) return;
    if (cfg->hc.kind == MT_HYPER_MHC) {
        mhc_add(P, prefix, cfg, k, h);
        return;
    }
    int N = cfg->hc.streams, C = cfg->C;
    char name[192];
    snprintf(name, sizeof name, "%s.static_alpha", prefix);
    h->static_alpha = mt_params_add(P, name, 2, (int[]){N, N + 1}, MT_ROLE_NORM, MT_INIT_HC,
                                    (float)(k % N));
    snprintf(name, sizeof name, "%s.static_beta", prefix);
    h->static_beta = mt_params_add(P, name, 1, &N, MT_ROLE_NORM, MT_INIT_CONST, 1);
    if (!cfg->hc.dynamic) return;
    mt_norm_cfg norm = mt_norm_at(&cfg->norm, MT_NORM_SITE_ATTN);
    snprintf(name, sizeof name, "%s.norm", prefix);
    mt_norm_add_params(P, name, &norm, C, &h->norm);
    const struct {
        const char *name;
        int ndim, shape[2];
        float v;
        int *at;
    } dyn[] = {{"dynamic_alpha_fn", 2, {C, N + 1}, 0, &h->alpha_fn},
               {"dynamic_alpha_scale", 1, {1}, 0.01f, &h->alpha_scale},
               {"dynamic_beta_fn", 1, {C}, 0, &h->beta_fn},
               {"dynamic_beta_scale", 1, {1}, 0.01f, &h->beta_scale}};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, dyn[i].name);
        *dyn[i].at = mt_params_add(P, name, dyn[i].ndim, dyn[i].shape, MT_ROLE_NORM, MT_INIT_CONST,
                                   dyn[i].v);
    }
}

static void hyper_add_params(mt_params *P, const char *prefix, const mt_block_cfg *cfg,
                             mt_block_params *bp) {
    char name[160];
    snprintf(name, sizeof name, "%s.attn_hc", prefix);
    hyper_add_one(P, name, cfg, 2 * cfg->layer, &bp->attn_hc);
    snprintf(name, sizeof name, "%s.ffn_hc", prefix);
    hyper_add_one(P, name, cfg, 2 * cfg->layer + 1, &bp->ffn_hc);
}

void mt_block_add_params(mt_params *P, const char *prefix, const mt_block_cfg *cfg,
                         const mt_block_init *init, mt_block_params *bp) {
    char name[160];
    int C = cfg->C, F = cfg->F;
    bool bias = cfg->bias;
    mt_attn_params *a = &bp->attn;
    mt_ffn_params *f = &bp->ffn;
    /* the norms of each sublayer: their site's options (DyT's initial alpha) */
    mt_norm_cfg attn_norm = mt_norm_at(&cfg->norm, MT_NORM_SITE_ATTN),
                ffn_norm = mt_norm_at(&cfg->norm, MT_NORM_SITE_FFN);
    snprintf(name, sizeof name, "%s.attn_norm", prefix);
    mt_norm_add_params(P, name, &attn_norm, C, &bp->attn_norm);
    const struct {
        const char *name;
        float std;
        int *w, *b;
    } proj[] = {{"q_proj", init->q, &a->q_w, &a->q_b},
                {"k_proj", init->k, &a->k_w, &a->k_b},
                {"v_proj", init->v, &a->v_w, &a->v_b},
                {"out_proj", init->out, &a->out_w, &a->out_b}};
    int KC = C / cfg->n_head * (cfg->n_kv_head ? cfg->n_kv_head : cfg->n_head);
    for (int i = 0; i < 4; i++) { /* k_proj and v_proj: (KC, C) */
        snprintf(name, sizeof name, "%s.attn.%s", prefix, proj[i].name);
        add_linear(P, name, i == 1 || i == 2 ? KC : C, C, bias, proj[i].std, proj[i].w, proj[i].b);
    }
    snprintf(name, sizeof name, "%s.attn", prefix); /* QK-norm gains: .attn.q_norm, .k_norm */
    mt_qk_norm_add_params(P, name, &cfg->qk, C / cfg->n_head, C, KC, &a->q_norm, &a->k_norm);
    a->gate_w = a->gate_b = -1; /* gated attention: .attn.gate_proj (C or NH, C), q_proj's init */
    snprintf(name, sizeof name, "%s.attn.gate_proj", prefix);
    if (cfg->attn.gate != MT_ATTN_GATE_NONE)
        add_linear(P, name, cfg->attn.gate == MT_ATTN_GATE_HEADWISE ? cfg->n_head : C, C, bias,
                   init->q, &a->gate_w, &a->gate_b);
    a->sink = -1; /* gpt-oss's sink logits: .attn.sink (NH), N(0, q_proj's std) */
    snprintf(name, sizeof name, "%s.attn.sink", prefix);
    if (cfg->attn.sink)
        a->sink = mt_params_add(P, name, 1, &cfg->n_head, MT_ROLE_NORM, MT_INIT_NORMAL, init->q);
    a->lambda_v1 = a->lambda_v = -1; /* the learned value residual: .attn.lambda_v1, .lambda_v (1),
                                        1/2 each, in every block after the first */
    if (cfg->attn.value_residual == MT_VALUE_RESIDUAL_LEARNED && cfg->layer > 0) {
        int one = 1;
        snprintf(name, sizeof name, "%s.attn.lambda_v1", prefix);
        a->lambda_v1 = mt_params_add(P, name, 1, &one, MT_ROLE_NORM, MT_INIT_CONST, 0.5f);
        snprintf(name, sizeof name, "%s.attn.lambda_v", prefix);
        a->lambda_v = mt_params_add(P, name, 1, &one, MT_ROLE_NORM, MT_INIT_CONST, 0.5f);
    }
    bool inner = mt_placement_inner_norm(cfg->placement);
    bool out = mt_placement_out_norm(cfg->placement);
    bp->attn_inner = bp->ffn_inner = bp->attn_out = bp->ffn_out = MT_NORM_PARAMS_NONE;
    snprintf(name, sizeof name, "%s.attn.inner_norm", prefix);
    if (inner) mt_norm_add_params(P, name, &attn_norm, C, &bp->attn_inner);
    snprintf(name, sizeof name, "%s.attn_out_norm", prefix);
    if (out) mt_norm_add_params(P, name, &attn_norm, C, &bp->attn_out);
    bp->cross_norm = bp->cross_inner = bp->cross_out = MT_NORM_PARAMS_NONE;
    bp->cross = MT_ATTN_PARAMS_NONE;
    if (cfg->cross) { /* no grouped-query form: KC = C */
        MT_ASSERT(KC == C, "block: a cross-attention with %d key-value channels of %d", KC, C);
        mt_attn_params *x = &bp->cross;
        int *w[] = {&x->q_w, &x->k_w, &x->v_w, &x->out_w},
            *b[] = {&x->q_b, &x->k_b, &x->v_b, &x->out_b};
        snprintf(name, sizeof name, "%s.cross_attn_norm", prefix);
        mt_norm_add_params(P, name, &attn_norm, C, &bp->cross_norm);
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "%s.cross_attn.%s", prefix, proj[i].name);
            add_linear(P, name, C, C, bias, proj[i].std, w[i], b[i]);
        }
        snprintf(name, sizeof name, "%s.cross_attn", prefix);
        mt_qk_norm_add_params(P, name, &cfg->qk, C / cfg->n_head, C, C, &x->q_norm, &x->k_norm);
        snprintf(name, sizeof name, "%s.cross_attn.inner_norm", prefix);
        if (inner) mt_norm_add_params(P, name, &attn_norm, C, &bp->cross_inner);
        snprintf(name, sizeof name, "%s.cross_attn_out_norm", prefix);
        if (out) mt_norm_add_params(P, name, &attn_norm, C, &bp->cross_out);
    }
    snprintf(name, sizeof name, "%s.ffn_norm", prefix);
    mt_norm_add_params(P, name, &ffn_norm, C, &bp->ffn_norm);
    snprintf(name, sizeof name, "%s.ffn.fc1", prefix);
    add_linear(P, name, F, C, bias, init->fc1, &f->fc1_w, &f->fc1_b);
    f->fc3_w = f->fc3_b = -1;
    snprintf(name, sizeof name, "%s.ffn.fc3", prefix); /* SwiGLU's gated branch: fc1's init */
    if (cfg->act == MT_ACT_SWIGLU) add_linear(P, name, F, C, bias, init->fc1, &f->fc3_w, &f->fc3_b);
    snprintf(name, sizeof name, "%s.ffn.fc2", prefix);
    add_linear(P, name, C, F, bias, init->fc2, &f->fc2_w, &f->fc2_b);
    snprintf(name, sizeof name, "%s.ffn.inner_norm", prefix);
    if (inner) mt_norm_add_params(P, name, &ffn_norm, F, &bp->ffn_inner);
    snprintf(name, sizeof name, "%s.ffn_out_norm", prefix);
    if (out) mt_norm_add_params(P, name, &ffn_norm, C, &bp->ffn_out);
    ngpt_add_params(P, prefix, cfg, bp);
    hyper_add_params(P, prefix, cfg, bp);
}

/* ---- sublayers ------------------------------------------------------------------------------- */

mt_tensor *mt_param_linear(mt_ctx *c, mt_params *P, int w, int b, mt_tensor *x) {
    const mt_param *e = &P->p[w];
    mt_tensor *bias = b >= 0 ? &P->t[b] : NULL;
    if (!e->lora) return mt_linear(c, x, &P->t[w], bias);
    mt_tensor *xd = e->lora_dropout > 0 ? mt_dropout(c, x, e->lora_dropout) : x;
    return mt_linear_lora(c, x, &P->t[w], bias, &P->t[e->lora], &P->t[e->lora + 1], xd,
                          e->lora_scale);
}

/* The QK-norm of the block: nGPT's unit queries and keys per head (scaled after RoPE: ngpt_qk),
   else the configured one. */
static const mt_qk_norm_cfg *qk_of(const mt_block_cfg *cfg) {
    static const mt_qk_norm_cfg unit = {.kind = MT_QK_L2, .scope = MT_QK_HEAD};
    return cfg->residual == MT_RESIDUAL_NGPT ? &unit : &cfg->qk;
}

/* q_proj(x) after the QK-norm */
static mt_tensor *attn_query(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                             const mt_attn_params *a, mt_tensor *x) {
    mt_tensor *q = mt_param_linear(c, P, a->q_w, a->q_b, x);
    return mt_qk_norm(c, qk_of(cfg), cfg->C / cfg->n_head, P, a->q_norm, q);
}

mt_tensor *mt_attn_keys(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_attn_params *a,
                        mt_tensor *x) {
    mt_tensor *k = mt_param_linear(c, P, a->k_w, a->k_b, x);
    return mt_qk_norm(c, qk_of(cfg), cfg->C / cfg->n_head, P, a->k_norm, k);
}

/* nGPT: the unit (and rotated) q and k times s_qk; q also times HS, so that the attention's
   1 / sqrt(HS) makes the paper's softmax scale sqrt(HS). The KV cache stores such keys. */
static void ngpt_qk(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_block_params *bp,
                    mt_tensor **q, mt_tensor **k) {
    if (cfg->residual != MT_RESIDUAL_NGPT) return;
    float s = cfg->ngpt.sqk_init / cfg->ngpt.sqk_scale, HS = (float)(cfg->C / cfg->n_head);
    *q = mt_scale_channels(c, *q, &P->t[bp->ngpt.s_qk], s * HS);
    *k = mt_scale_channels(c, *k, &P->t[bp->ngpt.s_qk], s);
}

/* Gated attention: the heads' output y (B, T, C) times sigmoid(gate_proj(x)), x the sublayer's
   input (B, T, C); y without a gate. */
static mt_tensor *attn_gated(mt_ctx *c, mt_params *P, const mt_attn_params *a, mt_tensor *x,
                             mt_tensor *y) {
    return a->gate_w < 0 ? y
                         : mt_sigmoid_gate(c, y, mt_param_linear(c, P, a->gate_w, a->gate_b, x));
}

/* ResFormer's value residual: the first block run keeps its values v in *v1; a later block's
   become lambda_1 v1 + lambda_2 v (half: 1/2 each; learned: its two scalars). v without one. */
static mt_tensor *value_mixed(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                              const mt_attn_params *a, mt_tensor *v, mt_tensor **v1) {
    mt_value_residual kind = cfg->attn.value_residual;
    if (kind == MT_VALUE_RESIDUAL_NONE) return v;
    MT_ASSERT(v1, "attention: a value residual without the stack's first values");
    if (!*v1) return *v1 = v;
    if (kind == MT_VALUE_RESIDUAL_HALF) return mt_scale(c, mt_add(c, *v1, v), 0.5f);
    MT_ASSERT(a->lambda_v1 >= 0,
              "attention: block %d has no value-residual lambdas (block 0 has none)", cfg->layer);
    return mt_add(c, mt_scale_by(c, *v1, &P->t[a->lambda_v1]),
                  mt_scale_by(c, v, &P->t[a->lambda_v]));
}

/* A value embedding (mt_value_embed): lambda_v v + e; v without one. */
static mt_tensor *value_embedded(mt_ctx *c, mt_tensor *v, const mt_value_embed *ve) {
    return ve && ve->e ? mt_add(c, mt_scale_by(c, v, ve->lambda_v), ve->e) : v;
}

/* QK-Clip's probe (mt_ctx.qk_max): the slots of attention a's heads for the op that follows
   (-1: none); qk_done clears it after the op. */
static void qk_probe(mt_ctx *c, const mt_attn_params *a) {
    c->qk_at = c->qk_slot ? c->qk_slot[a->q_w] : -1;
}
static mt_tensor *qk_done(mt_ctx *c, mt_tensor *y) {
    c->qk_at = -1;
    return y;
}

mt_tensor *mt_attn_sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                            const mt_block_params *bp, mt_tensor *x, void *arg) {
    const mt_attn_params *a = &bp->attn;
    const mt_self_arg *self = arg;
    const int *kv_len = self ? self->kv_len : NULL;
    mt_tensor *q = attn_query(c, cfg, P, a, x), *k = mt_attn_keys(c, cfg, P, a, x);
    mt_tensor *v = value_mixed(c, cfg, P, a, mt_param_linear(c, P, a->v_w, a->v_b, x),
                               self ? self->v1 : NULL);
    v = value_embedded(c, v, self ? self->ve : NULL);
    if (cfg->rope) q = mt_rope_apply(c, cfg->rope, q, 0), k = mt_rope_apply(c, cfg->rope, k, 0);
    ngpt_qk(c, cfg, P, bp, &q, &k);
    mt_tensor *sink = a->sink >= 0 ? &P->t[a->sink] : NULL;
    bool softpick = cfg->attn.softmax == MT_SOFTPICK;
    mt_attn_mask mask = {.causal = cfg->causal,
                         .kv_len = kv_len,
                         .sink = sink,
                         .softpick = softpick};
    qk_probe(c, a);
    mt_tensor *y = qk_done(c, kv_len || sink || softpick
                                  ? mt_attention_ex(c, q, k, v, cfg->n_head, &mask)
                                  : mt_attention(c, q, k, v, cfg->n_head, cfg->causal));
    return mt_attn_output(c, cfg, P, bp, attn_gated(c, P, &bp->attn, x, y));
}

mt_tensor *mt_attn_sublayer_cached(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                   const mt_block_params *bp, mt_tensor *x, void *arg) {
    const mt_attn_params *a = &bp->attn;
    const mt_cache_arg *ca = arg;
    int pos0 = ca->kv->len; /* the new tokens' first position; the cached keys keep theirs */
    mt_tensor *q = attn_query(c, cfg, P, a, x), *k = mt_attn_keys(c, cfg, P, a, x);
    mt_tensor *v = value_mixed(c, cfg, P, a, mt_param_linear(c, P, a->v_w, a->v_b, x), ca->v1);
    v = value_embedded(c, v, ca->ve);
    if (cfg->rope)
        q = mt_rope_apply(c, cfg->rope, q, pos0), k = mt_rope_apply(c, cfg->rope, k, pos0);
    ngpt_qk(c, cfg, P, bp, &q, &k);
    mt_attn_mask softmax = {.sink = a->sink >= 0 ? &P->t[a->sink] : NULL,
                            .softpick = cfg->attn.softmax == MT_SOFTPICK};
    mt_tensor *y = mt_attention_cached(c, q, k, v, ca->kv, ca->layer, cfg->n_head, &softmax);
    return mt_attn_output(c, cfg, P, bp, attn_gated(c, P, &bp->attn, x, y));
}

/* out_proj(y), with Sub-LN out_proj(N_inner(y)): the cross-attention's output */
static mt_tensor *cross_output(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                               const mt_block_params *bp, mt_tensor *y) {
    if (mt_placement_inner_norm(cfg->placement))
        y = mt_norm_tokens(c, &cfg->norm, P, &bp->cross_inner, y);
    return mt_param_linear(c, P, bp->cross.out_w, bp->cross.out_b, y);
}

mt_tensor *mt_cross_attn_sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                  const mt_block_params *bp, mt_tensor *x, void *arg) {
    const mt_attn_params *a = &bp->cross;
    const mt_cross_mem *m = arg;
    mt_tensor *q = attn_query(c, cfg, P, a, x), *k = mt_attn_keys(c, cfg, P, a, m->mem);
    mt_tensor *v = mt_param_linear(c, P, a->v_w, a->v_b, m->mem);
    qk_probe(c, a);
    mt_tensor *y = qk_done(c, mt_attention_masked(c, q, k, v, cfg->n_head, false, m->mem_len));
    return cross_output(c, cfg, P, bp, y);
}

mt_tensor *mt_cross_attn_sublayer_cached(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                         const mt_block_params *bp, mt_tensor *x, void *arg) {
    const mt_cache_arg *ca = arg;
    mt_tensor *q = attn_query(c, cfg, P, &bp->cross, x), *k, *v;
    mt_attn_cache_layer(c, ca->kv, ca->layer, &k, &v);
    mt_tensor *y = mt_attention_masked(c, q, k, v, cfg->n_head, false, ca->kv_len);
    return cross_output(c, cfg, P, bp, y);
}

mt_tensor *mt_attn_output(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                          const mt_block_params *bp, mt_tensor *y) {
    if (mt_placement_inner_norm(cfg->placement))
        y = mt_norm_tokens(c, &cfg->norm, P, &bp->attn_inner, y);
    return mt_param_linear(c, P, bp->attn.out_w, bp->attn.out_b, y);
}

mt_tensor *mt_ffn_sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                           const mt_block_params *bp, mt_tensor *x, void *arg) {
    (void)arg;
    const mt_ffn_params *f = &bp->ffn;
    if (cfg->residual == MT_RESIDUAL_NGPT) { /* fc2(silu(fc1(x) s_v sqrt(C)) fc3(x) s_u) */
        float k = cfg->ngpt.suv_init / cfg->ngpt.suv_scale;
        mt_tensor *u = mt_param_linear(c, P, f->fc3_w, f->fc3_b, x);
        mt_tensor *v = mt_param_linear(c, P, f->fc1_w, f->fc1_b, x);
        u = mt_scale_channels(c, u, &P->t[bp->ngpt.s_u], k);
        v = mt_scale_channels(c, v, &P->t[bp->ngpt.s_v], k * sqrtf((float)cfg->C));
        return mt_param_linear(c, P, f->fc2_w, f->fc2_b, mt_swiglu(c, v, u));
    }
    bool inner = mt_placement_inner_norm(cfg->placement);
    bool lora = P->p[f->fc1_w].lora || P->p[f->fc2_w].lora ||
                (f->fc3_w >= 0 && P->p[f->fc3_w].lora);
    if (inner || lora) { /* a norm between act and fc2, or an adapter: unfused */
        mt_tensor *a = mt_param_linear(c, P, f->fc1_w, f->fc1_b, x);
        mt_tensor *h = cfg->act == MT_ACT_SWIGLU
                           ? mt_swiglu(c, a, mt_param_linear(c, P, f->fc3_w, f->fc3_b, x))
                           : mt_activation(c, cfg->act, a);
        if (inner) h = mt_norm_tokens(c, &cfg->norm, P, &bp->ffn_inner, h);
        return mt_param_linear(c, P, f->fc2_w, f->fc2_b, h);
    }
#define OPT(i) ((i) >= 0 ? &P->t[i] : NULL)
    return mt_ffn(c, x, &P->t[f->fc1_w], OPT(f->fc1_b), &P->t[f->fc2_w], OPT(f->fc2_b),
                  OPT(f->fc3_w), OPT(f->fc3_b), cfg->act);
#undef OPT
}

/* ---- the residual: the one place it is decided ----------------------------------------------- */

bool mt_placement_final_norm(mt_placement p) {
    return p != MT_PLACE_POST && p != MT_PLACE_DEEPNORM;
}
bool mt_placement_inner_norm(mt_placement p) { return p == MT_PLACE_SUBLN; }
bool mt_placement_out_norm(mt_placement p) { return p == MT_PLACE_PERI; }

/* f(x), then dropout when configured. */
static mt_tensor *sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                           const mt_block_params *bp, mt_sublayer f, void *arg, mt_tensor *x) {
    mt_tensor *y = f(c, cfg, P, bp, x, arg);
    return cfg->dropout > 0 ? mt_dropout(c, y, cfg->dropout) : y;
}

/* x + F(N(x) s): Pre-LN (s = 1; Sub-LN's F holds its inner norm) and LNS (s = 1/sqrt(l + 1)) */
static mt_tensor *pre_ln(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                         const mt_block_params *bp, const mt_norm_params *np, mt_tensor *x,
                         mt_sublayer f, void *arg, float s) {
    mt_tensor *h = mt_norm_tokens(c, &cfg->norm, P, np, x);
    if (s != 1) h = mt_scale(c, h, s);
    mt_tensor *y = sublayer(c, cfg, P, bp, f, arg, h);
    return mt_add(c, x, cfg->branch > 0 ? mt_scale(c, y, cfg->branch) : y);
}

/* x + N_out(F(N(x))) (Peri-LN, in N_in) or x + N_out(F(x)) (reorder, in NULL); dropout after
   N_out */
static mt_tensor *out_norm(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                           const mt_block_params *bp, const mt_norm_params *in,
                           const mt_norm_params *out, mt_tensor *x, mt_sublayer f, void *arg) {
    mt_tensor *y = f(c, cfg, P, bp, in ? mt_norm_tokens(c, &cfg->norm, P, in, x) : x, arg);
    y = mt_norm_tokens(c, &cfg->norm, P, out, y);
    return mt_add(c, x, cfg->dropout > 0 ? mt_dropout(c, y, cfg->dropout) : y);
}

/* mHC's coefficients a (N, N+1) and b (N), shared (static) or per token (B T, ...): the logits
   b_g, dynamic b_g + alpha_g Norm(H) phi_g with H flattened (N C), through mt_mhc_maps. */
static void mhc_coefs(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_hyper_params *h,
                      mt_tensor *H, mt_tensor **a, mt_tensor **b) {
    int N = cfg->hc.streams;
    mt_tensor *z[3], *Hn = NULL;
    if (cfg->hc.dynamic) Hn = mt_norm_tokens(c, &cfg->norm, P, &h->norm, H);
    for (int g = 0; g < 3; g++) {
        mt_tensor *bg = mt_reshape(c, &P->t[h->b[g]], 1, (int[]){(int)P->t[h->b[g]].n});
        z[g] = Hn ? mt_hc_dynamic(c, Hn, &P->t[h->phi[g]], &P->t[h->alpha[g]], bg, 1, false) : bg;
    }
    mt_tensor *parts[2], *maps = mt_mhc_maps(c, mt_concat(c, 3, z), N, cfg->hc.mhc_iters);
    mt_split(c, maps, 2, (int[]){N * (N + 1), N}, parts);
    *a = parts[0], *b = parts[1];
}

/* HC's coefficients a (N, N+1) and b (N): static_alpha and static_beta, shared, or dynamic
   (per token) static_alpha + s_a tanh(Norm(H_i) W_a) per stream i, b likewise. */
static void hc_coefs(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_hyper_params *h,
                     mt_tensor *H, mt_tensor **a, mt_tensor **b) {
    int N = cfg->hc.streams;
    *a = &P->t[h->static_alpha], *b = &P->t[h->static_beta];
    if (!cfg->hc.dynamic) return;
    mt_tensor *rows = mt_reshape(c, H, 3, (int[]){mt_rows(H), N, cfg->C}); /* (B T, N, C) */
    mt_tensor *Hn = mt_reshape(c, mt_norm_tokens(c, &cfg->norm, P, &h->norm, rows), 2,
                               (int[]){mt_rows(H) * N, cfg->C});
    *a = mt_hc_dynamic(c, Hn, &P->t[h->alpha_fn], &P->t[h->alpha_scale], *a, N, true);
    *b = mt_hc_dynamic(c, Hn, &P->t[h->beta_fn], &P->t[h->beta_scale], *b, N, true);
}

/* Hyper-connections on H (B, T, N C): h = width(H), H' = depth(H, F(N(h))), the coefficients
   HC's or mHC's. */
static mt_tensor *hyper(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_block_params *bp,
                        const mt_hyper_params *h, const mt_norm_params *np, mt_tensor *H,
                        mt_sublayer f, void *arg) {
    int N = cfg->hc.streams;
    mt_tensor *a, *b;
    if (cfg->hc.kind == MT_HYPER_MHC) mhc_coefs(c, cfg, P, h, H, &a, &b);
    else hc_coefs(c, cfg, P, h, H, &a, &b);
    if (c->hc_coefs) c->hc_coefs[c->hc_calls++] = a;
    mt_tensor *y = sublayer(c, cfg, P, bp, f, arg,
                            mt_norm_tokens(c, &cfg->norm, P, np, mt_hc_width(c, H, a, N)));
    return mt_hc_depth(c, H, a, y, b, N);
}

mt_tensor *mt_residual(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_block_params *bp,
                       mt_sub sub, mt_tensor *x, mt_sublayer f, void *arg) {
    const mt_norm_cfg *n = &cfg->norm;
    const mt_norm_params *np = sub == MT_SUB_ATTN    ? &bp->attn_norm
                               : sub == MT_SUB_CROSS ? &bp->cross_norm
                                                     : &bp->ffn_norm;
    if (cfg->residual == MT_RESIDUAL_NGPT) { /* Norm(x + alpha (Norm(F(x)) - x)), no norm layer */
        MT_ASSERT(sub != MT_SUB_CROSS, "residual: nGPT has no cross-attention");
        int alpha = sub == MT_SUB_ATTN ? bp->ngpt.attn_alpha : bp->ngpt.ffn_alpha;
        return mt_ngpt_residual(c, x, sublayer(c, cfg, P, bp, f, arg, x), &P->t[alpha],
                                cfg->ngpt.alpha_init / cfg->ngpt.alpha_scale);
    }
    if (cfg->residual == MT_RESIDUAL_HC) { /* H' = A_r^T H + B^T F(N(A_m^T H)) */
        MT_ASSERT(sub != MT_SUB_CROSS, "residual: hyper-connections have no cross-attention");
        return hyper(c, cfg, P, bp, sub == MT_SUB_ATTN ? &bp->attn_hc : &bp->ffn_hc, np, x, f, arg);
    }
    mt_placement p = cfg->placement;
    if (p == MT_PLACE_MIXLN) p = cfg->layer < cfg->mixln_post ? MT_PLACE_POST : MT_PLACE_PRE;
    switch (p) {
    case MT_PLACE_PRE:   /* x + F(N(x)) */
    case MT_PLACE_SUBLN: /* the same; F holds the inner norm (mt_attn_output, mt_ffn_sublayer) */
        return pre_ln(c, cfg, P, bp, np, x, f, arg, 1);
    case MT_PLACE_LNS: /* x + F(N(x) / sqrt(l + 1)) */
        return pre_ln(c, cfg, P, bp, np, x, f, arg, 1 / sqrtf((float)cfg->layer + 1));
    case MT_PLACE_PERI: /* x + N_out(F(N(x))) */
        return out_norm(c, cfg, P, bp, np,
                        sub == MT_SUB_ATTN    ? &bp->attn_out
                        : sub == MT_SUB_CROSS ? &bp->cross_out
                                              : &bp->ffn_out,
                        x, f, arg);
    case MT_PLACE_REORDER: /* x + N(F(x)): the sublayer's one norm on its output */
        return out_norm(c, cfg, P, bp, NULL, np, x, f, arg);
    case MT_PLACE_POST: /* N(x + F(x)) */
        return mt_norm_tokens(c, n, P, np, mt_add(c, x, sublayer(c, cfg, P, bp, f, arg, x)));
    case MT_PLACE_DEEPNORM: /* N(alpha x + F(x)) */
        return mt_norm_tokens(c, n, P, np,
                              mt_add(c, mt_scale(c, x, cfg->alpha),
                                     sublayer(c, cfg, P, bp, f, arg, x)));
    case MT_PLACE_DSL: { /* lambda x + beta F(N(x)) */
        mt_tensor *y = sublayer(c, cfg, P, bp, f, arg, mt_norm_tokens(c, n, P, np, x));
        return mt_add(c, mt_scale(c, x, cfg->dsl_lambda), mt_scale(c, y, cfg->dsl_beta));
    }
    case MT_PLACE_MIXLN: break; /* resolved above */
    }
    MT_ASSERT(0, "residual: unknown placement %d", (int)cfg->placement);
}

mt_tensor *mt_block_forward(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                            const mt_block_params *bp, mt_tensor *x) {
    return mt_block_forward_ex(c, cfg, P, bp, x, NULL, NULL);
}

mt_tensor *mt_block_forward_ex(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                               const mt_block_params *bp, mt_tensor *x, const mt_self_arg *self,
                               const mt_cross_mem *mem) {
    MT_ASSERT(!cfg->cross == !mem, "block: cross-attention %s, memory %s",
              cfg->cross ? "on" : "off", mem ? "given" : "none");
    x = mt_residual(c, cfg, P, bp, MT_SUB_ATTN, x, mt_attn_sublayer, (void *)self);
    if (cfg->cross)
        x = mt_residual(c, cfg, P, bp, MT_SUB_CROSS, x, mt_cross_attn_sublayer, (void *)mem);
    return mt_residual(c, cfg, P, bp, MT_SUB_FFN, x, mt_ffn_sublayer, NULL);
}
