/* GPT (Radford et al. 2019): token and learned position embeddings, n_layer causal blocks from
   src/nn with the configured norm and placement, a head tied to the token embedding by default.
   B T C V as in nn.h; ids and targets are (B*T), row-major over (B, T). */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_json.h"
#include "gpt_internal.h"

/* ---- init schemes ------------------------------------------------------------------------------ */

static const char *const SCHEME_NAMES[] = {"gpt2", "xavier", "deepnorm", "auto"};

const char *mt_init_scheme_name(mt_init_scheme s) { return SCHEME_NAMES[s]; }

mt_status mt_init_scheme_parse(const char *name, mt_init_scheme *s, mt_err *err) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, SCHEME_NAMES[i]) == 0) return *s = (mt_init_scheme)i, MT_OK;
    return mt_errorf(err, MT_EINVAL,
                     "unknown init '%s' (accepted: gpt2, xavier, deepnorm, auto)", name);
}

mt_block_init mt_block_init_stds(mt_init_scheme s, int n_layer, float beta, int C, int F) {
    float sq = sqrtf(2.0f / (C + C)), sf = sqrtf(2.0f / (C + F)); /* Xavier, gain 1 */
    switch (s) {
    case MT_SCHEME_GPT2: {
        float r = 0.02f / sqrtf(2.0f * n_layer); /* residual output projections */
        return (mt_block_init){0.02f, 0.02f, 0.02f, r, 0.02f, r};
    }
    case MT_SCHEME_XAVIER: return (mt_block_init){sq, sq, sq, sq, sf, sf};
    case MT_SCHEME_DEEPNORM:
        return (mt_block_init){sq, sq, beta * sq, beta * sq, beta * sf, beta * sf};
    case MT_SCHEME_AUTO: break;
    }
    MT_ASSERT(0, "init scheme %d has no stds (AUTO is resolved by validate)", (int)s);
}

/* ---- config -------------------------------------------------------------------------------- */

mt_gpt_config mt_gpt_config_default(void) {
    return (mt_gpt_config){.n_layer = 4,
                           .n_head = 4,
                           .n_embd = 128,
                           .n_ctx = 128,
                           .n_vocab = 256,
                           .n_ff = 0,
                           .norm = mt_norm_default(MT_NORM_LN),
                           .placement = MT_PLACE_PRE,
                           .init = MT_SCHEME_AUTO,
                           .tied = true,
                           .bias = true,
                           .act = MT_ACT_GELU};
}

mt_status mt_blocks_config_check(int n_layer, int n_head, int n_embd, int *n_ff,
                                 mt_norm_cfg *norm, bool causal, mt_placement placement,
                                 mt_init_scheme *init, mt_act act, float dropout, float *alpha,
                                 float *beta, mt_err *err) {
    if (n_embd % n_head)
        return mt_errorf(err, MT_EINVAL,
                         "config: n_head = %d does not divide n_embd = %d (each head gets "
                         "n_embd / n_head channels)",
                         n_head, n_embd);
    if (*n_ff < 0)
        return mt_errorf(err, MT_EINVAL, "config: n_ff = %d, must be at least 1 (0: 4 n_embd)",
                         *n_ff);
    if ((unsigned)placement > MT_PLACE_DEEPNORM)
        return mt_errorf(err, MT_EINVAL, "config: placement %d (accepted: pre, post, deepnorm)",
                         (int)placement);
    if ((unsigned)*init > MT_SCHEME_AUTO)
        return mt_errorf(err, MT_EINVAL,
                         "config: init %d (accepted: gpt2, xavier, deepnorm, auto)", (int)*init);
    if ((unsigned)act > MT_ACT_SILU)
        return mt_errorf(err, MT_EINVAL, "config: act %d (accepted: gelu, gelu_erf, relu, silu)",
                         (int)act);
    if (!(dropout >= 0 && dropout < 1))
        return mt_errorf(err, MT_EINVAL, "config: dropout = %g, must be in [0, 1)", dropout);
    mt_status st = mt_norm_validate(norm, n_embd, causal, err);
    if (st != MT_OK) return st;
    if (*n_ff == 0 && n_embd > INT_MAX / 4)
        return mt_errorf(err, MT_EINVAL, "config: n_embd = %d: 4 n_embd (the default n_ff) "
                         "overflows an int; give n_ff", n_embd);
    if (*n_ff == 0) *n_ff = 4 * n_embd;
    float a, b;
    if (causal) mt_deepnorm_constants(MT_DEEPNORM_DECODER_ONLY, 0, n_layer, &a, &b);
    else mt_deepnorm_constants(MT_DEEPNORM_ENCODER_ONLY, n_layer, 0, &a, &b);
    if (!(*alpha > 0)) *alpha = a;
    if (!(*beta > 0)) *beta = b;
    if (*init == MT_SCHEME_AUTO)
        *init = placement == MT_PLACE_DEEPNORM ? MT_SCHEME_DEEPNORM : MT_SCHEME_GPT2;
    return MT_OK;
}

mt_status mt_gpt_config_validate(mt_gpt_config *cfg, mt_err *err) {
    const struct {
        const char *key;
        int v;
    } dims[] = {{"n_layer", cfg->n_layer}, {"n_head", cfg->n_head}, {"n_embd", cfg->n_embd},
                {"n_ctx", cfg->n_ctx}, {"n_vocab", cfg->n_vocab}};
    for (int i = 0; i < 5; i++)
        if (dims[i].v < 1)
            return mt_errorf(err, MT_EINVAL, "config: %s = %d, must be at least 1", dims[i].key,
                             dims[i].v);
    return mt_blocks_config_check(cfg->n_layer, cfg->n_head, cfg->n_embd, &cfg->n_ff, &cfg->norm,
                                  true, cfg->placement, &cfg->init, cfg->act, cfg->dropout,
                                  &cfg->deepnorm_alpha, &cfg->deepnorm_beta, err);
}

/* ---- config as JSON: one table of fields for both directions (config_json.h) ---------------- */

static const mt_cf_field FIELDS[] = {
    MT_CF_FIELD(mt_gpt_config, "n_ctx", INT, n_ctx),
    MT_CF_FIELD(mt_gpt_config, "n_vocab", INT, n_vocab),
    MT_CF_FIELD(mt_gpt_config, "tied", BOOL, tied),
    MT_CF_BLOCK_FIELDS(mt_gpt_config),
};
#define N_FIELDS (int)(sizeof FIELDS / sizeof FIELDS[0])

char *mt_gpt_config_to_json(const mt_gpt_config *cfg) {
    return mt_cf_to_json(FIELDS, N_FIELDS, cfg);
}

mt_status mt_gpt_config_from_json(const char *json, mt_gpt_config *cfg, mt_err *err) {
    *cfg = mt_gpt_config_default();
    mt_status st = mt_cf_from_json(FIELDS, N_FIELDS, json, cfg, err);
    return st == MT_OK ? mt_gpt_config_validate(cfg, err) : st;
}

/* ---- build and init ----------------------------------------------------------------------------- */

mt_status mt_gpt_build(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err) {
    mt_status st = mt_gpt_build_table(m, cfg, err);
    if (st == MT_OK && (st = mt_params_alloc(&m->P, err)) != MT_OK) mt_gpt_free(m);
    return st;
}

mt_status mt_gpt_build_table(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    mt_status st = mt_gpt_config_validate(&m->cfg, err);
    if (st != MT_OK) return st;
    const mt_gpt_config *g = &m->cfg;
    int C = g->n_embd, V = g->n_vocab;
    mt_gpt_layout *L = calloc(1, sizeof *L);
    if (L) L->blocks = calloc((size_t)g->n_layer, sizeof *L->blocks);
    if (!L || !L->blocks) {
        free(L);
        return mt_errorf(err, MT_ENOMEM, "cannot allocate the layout of %d blocks", g->n_layer);
    }
    m->layout = L;
    L->block = (mt_block_cfg){.C = C,
                              .F = g->n_ff,
                              .n_head = g->n_head,
                              .bias = g->bias,
                              .causal = true,
                              .norm = g->norm,
                              .placement = g->placement,
                              .alpha = g->deepnorm_alpha,
                              .act = g->act,
                              .dropout = g->dropout};
    mt_params *P = &m->P;
    mt_params_init_table(P);
    L->tok_emb = mt_params_add(P, "tok_emb.weight", 2, (int[]){V, C}, MT_ROLE_EMBEDDING,
                               MT_INIT_NORMAL, 0.02f);
    L->pos_emb = mt_params_add(P, "pos_emb.weight", 2, (int[]){g->n_ctx, C}, MT_ROLE_EMBEDDING,
                               MT_INIT_NORMAL, 0.02f);
    mt_block_init stds = mt_block_init_stds(g->init, g->n_layer, g->deepnorm_beta, C, g->n_ff);
    for (int i = 0; i < g->n_layer; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blocks.%d", i);
        mt_block_add_params(P, prefix, &L->block, &stds, &L->blocks[i]);
    }
    L->final_norm_on = mt_placement_final_norm(g->placement);
    L->final_norm = (mt_norm_params){-1, -1, -1, -1, -1};
    if (L->final_norm_on) mt_norm_add_params(P, "final_norm", &g->norm, C, &L->final_norm);
    L->lm_head = -1;
    if (!g->tied) /* gpt2: N(0, 0.02); xavier and deepnorm: Xavier-normal, gain 1 */
        L->lm_head = mt_params_add(P, "lm_head.weight", 2, (int[]){V, C}, MT_ROLE_MATRIX,
                                   MT_INIT_NORMAL,
                                   g->init == MT_SCHEME_GPT2 ? 0.02f : sqrtf(2.0f / (C + V)));
    return MT_OK;
}

void mt_gpt_init_weights(mt_gpt *m, mt_rng *r) { mt_params_initialize(&m->P, r); }

void mt_gpt_free(mt_gpt *m) {
    if (m->layout) free(m->layout->blocks);
    free(m->layout);
    mt_params_free(&m->P);
    memset(m, 0, sizeof *m);
}

/* ---- forward ------------------------------------------------------------------------------------ */

mt_tensor *mt_gpt_embed(mt_ctx *c, mt_gpt *m, const int *ids, int B, int T, int pos0) {
    const mt_gpt_layout *L = m->layout;
    MT_ASSERT(B >= 1 && T >= 1 && pos0 >= 0 && pos0 + T <= m->cfg.n_ctx,
              "gpt: positions %d..%d do not fit n_ctx = %d", pos0, pos0 + T - 1, m->cfg.n_ctx);
    int n = B * T, *pos = mt_arena_alloc(c, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) pos[i] = pos0 + i % T;
    mt_tensor *x = mt_add(c, mt_embedding(c, &m->P.t[L->tok_emb], ids, n),
                          mt_embedding(c, &m->P.t[L->pos_emb], pos, n));
    x = mt_reshape(c, x, 3, (int[]){B, T, m->cfg.n_embd});
    return m->cfg.dropout > 0 ? mt_dropout(c, x, m->cfg.dropout) : x;
}

mt_tensor *mt_gpt_head(mt_ctx *c, mt_gpt *m, mt_tensor *x) {
    const mt_gpt_layout *L = m->layout;
    if (L->final_norm_on) x = mt_norm_tokens(c, &m->cfg.norm, &m->P, &L->final_norm, x);
    if (L->lm_head >= 0) return mt_linear(c, x, &m->P.t[L->lm_head], NULL);
    return mt_matmul(c, x, &m->P.t[L->tok_emb], false, true); /* x tok_emb^T */
}

mt_tensor *mt_gpt_forward(mt_ctx *c, mt_gpt *m, const int *ids, int B, int T) {
    const mt_gpt_layout *L = m->layout;
    mt_tensor *x = mt_gpt_embed(c, m, ids, B, T, 0);
    for (int i = 0; i < m->cfg.n_layer; i++)
        x = mt_block_forward(c, &L->block, &m->P, &L->blocks[i], x);
    return mt_gpt_head(c, m, x);
}

mt_tensor *mt_gpt_loss(mt_ctx *c, mt_gpt *m, const int *ids, const int *targets, int B, int T) {
    return mt_cross_entropy(c, mt_gpt_forward(c, m, ids, B, T), targets, -1);
}
