/* GPT (Radford et al. 2019): token and learned position embeddings, n_layer causal blocks from
   src/nn with the configured norm and placement, a head tied to the token embedding by default.
   B T C V as in nn.h; ids and targets are (B*T), row-major over (B, T). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (cfg->n_embd % cfg->n_head)
        return mt_errorf(err, MT_EINVAL,
                         "config: n_head = %d does not divide n_embd = %d (each head gets "
                         "n_embd / n_head channels)",
                         cfg->n_head, cfg->n_embd);
    if (cfg->n_ff < 0)
        return mt_errorf(err, MT_EINVAL, "config: n_ff = %d, must be at least 1 (0: 4 n_embd)",
                         cfg->n_ff);
    if ((unsigned)cfg->placement > MT_PLACE_DEEPNORM)
        return mt_errorf(err, MT_EINVAL, "config: placement %d (accepted: pre, post, deepnorm)",
                         (int)cfg->placement);
    if ((unsigned)cfg->init > MT_SCHEME_AUTO)
        return mt_errorf(err, MT_EINVAL,
                         "config: init %d (accepted: gpt2, xavier, deepnorm, auto)", (int)cfg->init);
    if ((unsigned)cfg->act > MT_ACT_SILU)
        return mt_errorf(err, MT_EINVAL, "config: act %d (accepted: gelu, gelu_erf, relu, silu)",
                         (int)cfg->act);
    if (!(cfg->dropout >= 0 && cfg->dropout < 1))
        return mt_errorf(err, MT_EINVAL, "config: dropout = %g, must be in [0, 1)",
                         cfg->dropout);
    mt_status st = mt_norm_validate(&cfg->norm, cfg->n_embd, true, err);
    if (st != MT_OK) return st;
    if (cfg->n_ff == 0) cfg->n_ff = 4 * cfg->n_embd;
    float alpha, beta;
    mt_deepnorm_constants(MT_DEEPNORM_DECODER_ONLY, 0, cfg->n_layer, &alpha, &beta);
    if (!(cfg->deepnorm_alpha > 0)) cfg->deepnorm_alpha = alpha;
    if (!(cfg->deepnorm_beta > 0)) cfg->deepnorm_beta = beta;
    if (cfg->init == MT_SCHEME_AUTO)
        cfg->init = cfg->placement == MT_PLACE_DEEPNORM ? MT_SCHEME_DEEPNORM : MT_SCHEME_GPT2;
    return MT_OK;
}

/* ---- config as JSON: one table of fields for both directions ---------------------------------- */

typedef enum { F_INT, F_FLOAT, F_BOOL, F_NORM, F_RMS_FORM, F_PLACE, F_INIT, F_ACT } field_type;

static const struct {
    const char *key;
    field_type type;
    size_t off;
} FIELDS[] = {
    {"n_layer", F_INT, offsetof(mt_gpt_config, n_layer)},
    {"n_head", F_INT, offsetof(mt_gpt_config, n_head)},
    {"n_embd", F_INT, offsetof(mt_gpt_config, n_embd)},
    {"n_ctx", F_INT, offsetof(mt_gpt_config, n_ctx)},
    {"n_vocab", F_INT, offsetof(mt_gpt_config, n_vocab)},
    {"n_ff", F_INT, offsetof(mt_gpt_config, n_ff)},
    {"norm", F_NORM, offsetof(mt_gpt_config, norm.kind)},
    {"placement", F_PLACE, offsetof(mt_gpt_config, placement)},
    {"norm_eps", F_FLOAT, offsetof(mt_gpt_config, norm.eps)},
    {"prms_p", F_FLOAT, offsetof(mt_gpt_config, norm.prms_p)},
    {"gn_groups", F_INT, offsetof(mt_gpt_config, norm.gn_groups)},
    {"rms_form", F_RMS_FORM, offsetof(mt_gpt_config, norm.rms_form)},
    {"rms_bias", F_BOOL, offsetof(mt_gpt_config, norm.rms_bias)},
    {"in_affine", F_BOOL, offsetof(mt_gpt_config, norm.in_affine)},
    {"deepnorm_alpha", F_FLOAT, offsetof(mt_gpt_config, deepnorm_alpha)},
    {"deepnorm_beta", F_FLOAT, offsetof(mt_gpt_config, deepnorm_beta)},
    {"init", F_INIT, offsetof(mt_gpt_config, init)},
    {"tied", F_BOOL, offsetof(mt_gpt_config, tied)},
    {"bias", F_BOOL, offsetof(mt_gpt_config, bias)},
    {"act", F_ACT, offsetof(mt_gpt_config, act)},
    {"dropout", F_FLOAT, offsetof(mt_gpt_config, dropout)},
};
#define N_FIELDS (int)(sizeof FIELDS / sizeof FIELDS[0])

static const char *rms_form_name(mt_rms_form f) { return f == MT_RMS_PAPER ? "paper" : "llama"; }

char *mt_gpt_config_to_json(const mt_gpt_config *cfg) {
    cJSON *o = cJSON_CreateObject();
    MT_ASSERT(o, "config: out of memory for JSON");
    for (int i = 0; i < N_FIELDS; i++) {
        const void *p = (const char *)cfg + FIELDS[i].off;
        const char *k = FIELDS[i].key, *s = NULL;
        int e = *(const int *)p; /* the enums are int-sized */
        switch (FIELDS[i].type) {
        case F_INT: cJSON_AddNumberToObject(o, k, *(const int *)p); break;
        case F_FLOAT: cJSON_AddNumberToObject(o, k, *(const float *)p); break;
        case F_BOOL: cJSON_AddBoolToObject(o, k, *(const bool *)p); break;
        case F_NORM: s = mt_norm_name((mt_norm_kind)e); break;
        case F_RMS_FORM: s = rms_form_name((mt_rms_form)e); break;
        case F_PLACE: s = mt_placement_name((mt_placement)e); break;
        case F_INIT: s = mt_init_scheme_name((mt_init_scheme)e); break;
        case F_ACT: s = mt_act_name((mt_act)e); break;
        }
        if (s) cJSON_AddStringToObject(o, k, s);
    }
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(json, "config: out of memory for JSON");
    return json;
}

/* Sets one field from a JSON value, checking its type. */
static mt_status set_field(mt_gpt_config *cfg, int i, const cJSON *v, mt_err *err) {
    void *p = (char *)cfg + FIELDS[i].off;
    const char *k = FIELDS[i].key;
    field_type t = FIELDS[i].type;
    if (t == F_INT || t == F_FLOAT) {
        if (!cJSON_IsNumber(v))
            return mt_errorf(err, MT_EINVAL, "config: %s must be a number", k);
        double d = v->valuedouble;
        if (t == F_FLOAT) return *(float *)p = (float)d, MT_OK;
        if (d != floor(d) || fabs(d) > 1e9)
            return mt_errorf(err, MT_EINVAL, "config: %s = %g, must be a whole number", k, d);
        return *(int *)p = (int)d, MT_OK;
    }
    if (t == F_BOOL) {
        if (!cJSON_IsBool(v))
            return mt_errorf(err, MT_EINVAL, "config: %s must be true or false", k);
        return *(bool *)p = cJSON_IsTrue(v), MT_OK;
    }
    if (!cJSON_IsString(v)) return mt_errorf(err, MT_EINVAL, "config: %s must be a string", k);
    const char *s = v->valuestring;
    switch (t) {
    case F_NORM: return mt_norm_parse(s, (mt_norm_kind *)p, err);
    case F_PLACE: return mt_placement_parse(s, (mt_placement *)p, err);
    case F_INIT: return mt_init_scheme_parse(s, (mt_init_scheme *)p, err);
    case F_ACT: return mt_act_parse(s, (mt_act *)p, err);
    case F_RMS_FORM:
        if (strcmp(s, "llama") && strcmp(s, "paper"))
            return mt_errorf(err, MT_EINVAL, "config: rms_form '%s' (accepted: llama, paper)", s);
        return *(mt_rms_form *)p = strcmp(s, "paper") ? MT_RMS_LLAMA : MT_RMS_PAPER, MT_OK;
    default: break;
    }
    MT_ASSERT(0, "config: field type %d", (int)t);
}

mt_status mt_gpt_config_from_json(const char *json, mt_gpt_config *cfg, mt_err *err) {
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return mt_errorf(err, MT_EFORMAT, "config: not a JSON object: %.80s", json);
    }
    *cfg = mt_gpt_config_default();
    mt_status st = MT_OK;
    for (const cJSON *v = o->child; v && st == MT_OK; v = v->next) {
        int i = 0;
        while (i < N_FIELDS && strcmp(FIELDS[i].key, v->string)) i++;
        if (i == N_FIELDS) {
            char keys[512] = "";
            for (int j = 0; j < N_FIELDS; j++)
                snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", j ? ", " : "",
                         FIELDS[j].key);
            st = mt_errorf(err, MT_EINVAL, "config: unknown key '%s' (accepted: %s)", v->string,
                           keys);
        } else {
            st = set_field(cfg, i, v, err);
        }
    }
    cJSON_Delete(o);
    return st == MT_OK ? mt_gpt_config_validate(cfg, err) : st;
}

/* ---- build and init ----------------------------------------------------------------------------- */

mt_status mt_gpt_build(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err) {
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
    st = mt_params_alloc(P, err);
    if (st != MT_OK) mt_gpt_free(m);
    return st;
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
