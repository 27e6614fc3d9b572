/* GPT (Radford et al. 2019): token and learned position embeddings, n_layer causal blocks from
   src/nn with the configured norm and placement, a head tied to the token embedding by default;
   trained on tokens (models.h). B T C V as in nn.h; ids and targets are (B*T), row-major over
   (B, T). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_internal.h"

/* ---- config -------------------------------------------------------------------------------- */

static const mt_enum_item POS_KINDS[] = {
    [MT_POS_LEARNED] = {.name = "learned",
                        .help = "a learned position embedding added to the tokens"},
    [MT_POS_ROPE] = {.name = "rope",
                     .help = "rotary: q and k rotated by the position (llama2.c's pairs)"},
};
static const mt_enum_item ARCHS[] = {
    [MT_ARCH_GPT] = {.name = "gpt", .help = "the pieces as the other flags say"},
    [MT_ARCH_LLAMA] = {.name = "llama",
                       .help = "pos rope, act swiglu, norm rms, no bias (a flag given wins)"},
    [MT_ARCH_NGPT] = {.name = "ngpt",
                      .help = "the normalised Transformer (arXiv 2410.01131): llama's pieces with "
                              "norm none, its own residual, an untied head, unit vectors"},
};
const mt_enum MT_POS_KINDS = MT_ENUM("position encoding", POS_KINDS);
const mt_enum MT_GPT_ARCHS = MT_ENUM("arch", ARCHS);

mt_gpt_config mt_gpt_config_default(void) {
    return (mt_gpt_config){.stack = mt_stack_default(),
                           .n_ctx = 64,
                           .n_vocab = 256,
                           .tied = true,
                           .emb_std = MT_GPT2_STD,
                           .arch = MT_ARCH_GPT,
                           .pos = MT_POS_LEARNED,
                           .rope_theta = 10000.0f,
                           .ngpt = mt_ngpt_default()};
}

void mt_gpt_arch_fill(mt_gpt_config *cfg) {
    mt_stack_config *s = &cfg->stack;
    bool ngpt = cfg->arch == MT_ARCH_NGPT;
    if (cfg->arch == MT_ARCH_GPT) return;
    if (cfg->pos == MT_POS_LEARNED) cfg->pos = MT_POS_ROPE;
    if (s->act == MT_ACT_GELU) s->act = MT_ACT_SWIGLU;
    if (s->norm.kind == MT_NORM_LN) s->norm.kind = ngpt ? MT_NORM_NONE : MT_NORM_RMS;
    s->bias = false; /* true is the GPT's default */
    if (ngpt) cfg->tied = false;
}

/* arch ngpt: its residual (the stack checks the blocks' pieces), and the GPT's pieces that would
   leave the sphere. */
static mt_status ngpt_validate(mt_gpt_config *cfg, mt_err *err) {
    bool ngpt = cfg->arch == MT_ARCH_NGPT;
    cfg->stack.residual = ngpt ? MT_RESIDUAL_NGPT : MT_RESIDUAL_SUM;
    if (!ngpt) return MT_OK;
    if (cfg->emb_scale || cfg->pos != MT_POS_ROPE)
        return mt_errorf(err, MT_EINVAL,
                         "--arch ngpt with %s: refused: the embeddings are unit vectors that "
                         "enter the first block as they are (--pos rope, no --emb-scale)",
                         cfg->emb_scale ? "--emb-scale" : "--pos learned");
    if (cfg->tied)
        return mt_errorf(err, MT_EINVAL,
                         "--arch ngpt with a tied head (untie = false): refused: nGPT's head is "
                         "a matrix of its own, its rows unit vectors scaled by s_z (--untie, the "
                         "default with --arch ngpt)");
    return MT_OK;
}

#define MT_NGPT_SCALE_MIN 1e-6
#define MT_NGPT_SCALE_MAX 1e6

/* arch ngpt's scales 0 resolved to 1 / sqrt(n_embd) (a validated n_embd), every init > 0 and
   every scale in [MT_NGPT_SCALE_MIN, MT_NGPT_SCALE_MAX] */
static mt_status ngpt_resolve(mt_gpt_config *cfg, mt_err *err) {
    mt_ngpt_cfg *n = &cfg->ngpt;
    if (cfg->arch != MT_ARCH_NGPT) return MT_OK;
    float r = 1 / sqrtf((float)cfg->stack.n_embd);
    float *scales[] = {&n->alpha_scale, &n->sqk_scale, &n->suv_scale, &n->sz_scale};
    for (int i = 0; i < 4; i++)
        if (*scales[i] == 0) *scales[i] = r;
    /* a parameter is stored as init / scale and used times scale: a scale far from 1 stores
       values float cannot hold (1e-45: infinity) */
    const char *names[] = {"alpha", "sqk", "suv", "sz"};
    const float inits[] = {n->alpha_init, n->sqk_init, n->suv_init, n->sz_init};
    for (int i = 0; i < 4; i++) {
        float scale = *scales[i];
        if (!(inits[i] > 0 && isfinite(inits[i])))
            return mt_errorf(err, MT_EINVAL,
                             "config: --ngpt-%s-init is %g: an --ngpt-* init must be a finite "
                             "number > 0",
                             names[i], inits[i]);
        if (!(scale >= MT_NGPT_SCALE_MIN && scale <= MT_NGPT_SCALE_MAX))
            return mt_errorf(err, MT_EINVAL,
                             "config: --ngpt-%s-scale is %g: an --ngpt-* scale must be in [%g, "
                             "%g] (0: 1 / sqrt(n_embd)), or the stored init / scale is out of "
                             "float's reach",
                             names[i], scale, MT_NGPT_SCALE_MIN, MT_NGPT_SCALE_MAX);
    }
    return MT_OK;
}

/* --value-embeds: the list s ("0,1,-2,-1": each of -L..L-1 once, -1 the last) resolved into
   at (room for L): its blocks in its order, *n of them. */
static mt_status value_embeds_parse(const char *s, int L, int *at, int *n, mt_err *err) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long l = strtol(p, &end, 10);
        if (end == p || (*end && *end != ','))
            return mt_errorf(err, MT_EINVAL,
                             "--value-embeds %s: not a list of layers: give block indices "
                             "separated by commas, e.g. 0,1,-2,-1 (negative: from the last)",
                             s);
        if (l < -L || l >= L)
            return mt_errorf(err, MT_EINVAL,
                             "--value-embeds %s: layer %ld does not exist: %d blocks take "
                             "layers %d..%d (or -%d..-1 from the last)",
                             s, l, L, 0, L - 1, L);
        int b = (int)(l < 0 ? l + L : l);
        for (int k = 0; k < *n; k++)
            if (at[k] == b)
                return mt_errorf(err, MT_EINVAL,
                                 "--value-embeds %s: layer %d is named twice (each block reads "
                                 "one table)",
                                 s, b);
        at[(*n)++] = b;
        p = *end ? end + 1 : end;
    }
    return MT_OK;
}

/* The entry whose table entry k of n reads: its own, or with --value-embeds-shared in the list's
   second half the entry n / 2 before it (modded-nanogpt's 012 ... 012). */
static int value_embeds_owner(bool shared, int k, int n) {
    return shared && k >= n / 2 ? k - n / 2 : k;
}

/* cfg's list into *at (calloc'd, n_layer), *n entries; shared tables need an even list */
static mt_status value_embeds_list(const mt_gpt_config *cfg, int **at, int *n, mt_err *err) {
    int L = cfg->stack.n_layer;
    *at = calloc((size_t)L, sizeof **at), *n = 0;
    if (!*at) return mt_errorf(err, MT_ENOMEM, "out of memory");
    mt_status st = value_embeds_parse(cfg->value_embeds, L, *at, n, err);
    if (st == MT_OK && cfg->value_embeds_shared && *n % 2)
        return mt_errorf(err, MT_EINVAL,
                         "--value-embeds %s with --value-embeds-shared: %d layers: the list's "
                         "two halves share their tables in order (modded-nanogpt's 0,1,2,-3,-2,"
                         "-1): give an even number of layers",
                         cfg->value_embeds, *n);
    return st;
}

/* --value-embeds: a list of existing layers, and nothing else that remixes the values */
static mt_status value_embeds_validate(const mt_gpt_config *cfg, mt_err *err) {
    if (!cfg->value_embeds[0]) return MT_OK;
    if (cfg->arch == MT_ARCH_NGPT)
        return mt_errorf(err, MT_EINVAL,
                         "--value-embeds with --arch ngpt: refused: nGPT's recipe keeps its "
                         "embeddings and matrices on the unit sphere and has no rule for these "
                         "tables");
    if (cfg->stack.attn.value_residual != MT_VALUE_RESIDUAL_NONE)
        return mt_errorf(err, MT_EINVAL,
                         "--value-embeds with --value-residual %s: refused: both remix the "
                         "values and no paper or record orders the two (modded-nanogpt's value "
                         "embeddings came after its value residual, in its place); give one",
                         mt_enum_name(&MT_VALUE_RESIDUALS, cfg->stack.attn.value_residual));
    int *at, n;
    mt_status st = value_embeds_list(cfg, &at, &n, err);
    free(at);
    return st;
}

mt_status mt_gpt_config_validate(mt_gpt_config *cfg, mt_err *err) {
    if (cfg->n_ctx < 1 || cfg->n_vocab < 1)
        return mt_errorf(err, MT_EINVAL, "config: %s = %d, must be at least 1",
                         cfg->n_ctx < 1 ? "n_ctx" : "n_vocab",
                         cfg->n_ctx < 1 ? cfg->n_ctx : cfg->n_vocab);
    if (!(cfg->emb_std >= 0 && isfinite(cfg->emb_std)))
        return mt_errorf(err, MT_EINVAL, "config: emb_std = %g, must be a finite number >= 0",
                         cfg->emb_std);
    if ((int)cfg->arch < 0 || (int)cfg->arch >= MT_GPT_ARCHS.n || (int)cfg->pos < 0 ||
        (int)cfg->pos >= MT_POS_KINDS.n)
        return mt_errorf(err, MT_EINVAL, "config: arch %d or pos %d is not one of its values",
                         (int)cfg->arch, (int)cfg->pos);
    if (!(cfg->rope_theta > 0 && isfinite(cfg->rope_theta)))
        return mt_errorf(err, MT_EINVAL,
                         "config: rope_theta = %g, must be a finite number > 0 "
                         "(LLaMA's: 10000)",
                         cfg->rope_theta);
    if (!cfg->arch_applied) mt_gpt_arch_fill(cfg);
    cfg->arch_applied = true;
    mt_status st = ngpt_validate(cfg, err);
    if (st == MT_OK)
        st = mt_stack_validate(&cfg->stack, MT_DEEPNORM_DECODER_ONLY, 0, cfg->stack.n_layer, true,
                               err);
    if (st == MT_OK) st = ngpt_resolve(cfg, err);
    if (st == MT_OK) st = value_embeds_validate(cfg, err);
    if (st == MT_OK && cfg->pos == MT_POS_ROPE && (cfg->stack.n_embd / cfg->stack.n_head) % 2)
        return mt_errorf(err, MT_EINVAL,
                         "config: pos rope turns pairs of channels: the head size "
                         "n_embd / n_head = %d / %d = %d must be even",
                         cfg->stack.n_embd, cfg->stack.n_head,
                         cfg->stack.n_embd / cfg->stack.n_head);
    return st;
}

/* ---- build ----------------------------------------------------------------------------------- */

/* --value-embeds: the tables value_embeds.<l>.weight (V, KC), N(0, emb_std) as tok_emb, of the
   list's blocks (shared: of its first half's, which its second half's read), in its order; then
   each listed block's lambdas value_embeds.<l>.lambda_v, .lambda_e (1), init 1/2
   (modded-nanogpt's), in block order. */
static mt_status value_embeds_add(mt_gpt_layout *L, mt_params *P, const mt_gpt_config *g,
                                  float emb_std, mt_err *err) {
    const mt_stack_config *s = &g->stack;
    int KC = s->n_embd / s->n_head * s->n_kv_head, *at, n;
    if (!g->value_embeds[0]) return MT_OK;
    mt_status st = value_embeds_list(g, &at, &n, err);
    if (st == MT_OK && !(L->ve = malloc((size_t)s->n_layer * sizeof *L->ve)))
        st = mt_errorf(err, MT_ENOMEM, "out of memory for a model");
    char name[64];
    for (int l = 0; st == MT_OK && l < s->n_layer; l++)
        L->ve[l].emb = L->ve[l].lambda_v = L->ve[l].lambda_e = -1;
    for (int k = 0; st == MT_OK && k < n; k++) {
        int own = value_embeds_owner(g->value_embeds_shared, k, n);
        snprintf(name, sizeof name, "value_embeds.%d.weight", at[k]);
        L->ve[at[k]].emb = own < k ? L->ve[at[own]].emb
                                   : mt_params_add(P, name, 2, (int[]){g->n_vocab, KC},
                                                   MT_ROLE_EMBEDDING, MT_INIT_NORMAL, emb_std);
    }
    for (int l = 0; st == MT_OK && l < s->n_layer; l++) {
        if (L->ve[l].emb < 0) continue;
        snprintf(name, sizeof name, "value_embeds.%d.lambda_v", l);
        L->ve[l].lambda_v = mt_params_add(P, name, 1, (int[]){1}, MT_ROLE_NORM, MT_INIT_CONST,
                                          0.5f);
        snprintf(name, sizeof name, "value_embeds.%d.lambda_e", l);
        L->ve[l].lambda_e = mt_params_add(P, name, 1, (int[]){1}, MT_ROLE_NORM, MT_INIT_CONST,
                                          0.5f);
    }
    free(at);
    L->has_ve = st == MT_OK;
    return st;
}

mt_status mt_gpt_build_table(void *mp, const void *cfgp, mt_err *err) {
    mt_gpt *m = mp;
    const mt_gpt_config *cfg = cfgp;
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    mt_status st = mt_gpt_config_validate(&m->cfg, err);
    if (st != MT_OK) return st;
    m->base = (mt_model){.cfg = &m->cfg, .P = &m->P}; /* the type: mt_model_table's */
    mt_tok_init_byte(&m->tok);
    const mt_gpt_config *g = &m->cfg;
    int C = g->stack.n_embd, V = g->n_vocab;
    mt_gpt_layout *L = calloc(1, sizeof *L);
    if (!L) return mt_errorf(err, MT_ENOMEM, "out of memory for a model");
    m->layout = L;
    mt_params *P = &m->P;
    mt_params_init_table(P);
    /* DeepScaleLM's init: the embeddings' sum of variance 1 - p, (1 - p) / tables each, unit
       variance after the dropout (the authors' sqrt((1 - p) / 3) of BERT's three; emb_std
       unused) */
    bool learned = g->pos == MT_POS_LEARNED;
    float emb_std = g->stack.init == MT_SCHEME_DSL
                        ? sqrtf((1 - g->stack.dropout) / (learned ? 2.0f : 1.0f))
                        : g->emb_std;
    L->tok_emb = mt_params_add(P, "tok_emb.weight", 2, (int[]){V, C}, MT_ROLE_EMBEDDING,
                               MT_INIT_NORMAL, emb_std);
    mt_block_cfg block = mt_stack_block(&g->stack, true);
    block.ngpt = g->ngpt;
    L->pos_emb = -1;
    if (learned)
        L->pos_emb = mt_params_add(P, "pos_emb.weight", 2, (int[]){g->n_ctx, C}, MT_ROLE_EMBEDDING,
                                   MT_INIT_NORMAL, emb_std);
    else if ((st = mt_rope_init(&L->rope, g->n_ctx, C / g->stack.n_head, g->rope_theta, err)) !=
             MT_OK)
        return st;
    else block.rope = &L->rope;
    L->emb_scale = !g->emb_scale ? -1
                                 : mt_params_add(P, "emb_scale", 1, (int[]){1}, MT_ROLE_NORM,
                                                 MT_INIT_CONST, sqrtf((float)C));
    if ((st = mt_stack_build_blocks(&L->stack, &g->stack, &block, P, "blocks", "final_norm",
                                    err)) != MT_OK)
        return st;
    if ((st = value_embeds_add(L, P, g, emb_std, err)) != MT_OK) return st;
    L->lm_head = g->tied ? -1
                         : mt_params_add(P, "lm_head.weight", 2, (int[]){V, C}, MT_ROLE_HEAD,
                                         MT_INIT_NORMAL, mt_stack_other_std(&g->stack, C, V));
    L->s_z = -1;
    if (g->arch == MT_ARCH_NGPT) { /* the embedding's and the head's rows on the unit sphere */
        mt_params_set_unit(P, L->tok_emb, MT_UNIT_ROWS);
        mt_params_set_unit(P, L->lm_head, MT_UNIT_ROWS);
        L->s_z = mt_params_add(P, "s_z", 1, (int[]){V}, MT_ROLE_NORM, MT_INIT_CONST,
                               g->ngpt.sz_scale);
    }
    mt_stack_set_param_scales(&g->stack, P);
    return MT_OK;
}

void mt_gpt_free(mt_gpt *m) {
    if (m->layout) mt_stack_free(&m->layout->stack), mt_rope_free(&m->layout->rope);
    if (m->layout) free(m->layout->ve);
    free(m->layout);
    mt_params_free(&m->P);
    mt_tok_free(&m->tok);
    memset(m, 0, sizeof *m);
}

/* ---- forward --------------------------------------------------------------------------------- */

mt_tensor *mt_gpt_embed(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, int B, int T,
                        int pos0) {
    const mt_gpt_layout *L = m->layout;
    MT_ASSERT(B >= 1 && T >= 1 && pos0 >= 0 && pos0 + T <= m->cfg.n_ctx,
              "gpt: positions %d..%d do not fit n_ctx = %d", pos0, pos0 + T - 1, m->cfg.n_ctx);
    int n = B * T;
    mt_tensor *x = mt_embedding(c, &P->t[L->tok_emb], ids, n);
    if (L->pos_emb >= 0) {
        int *pos = mt_arena_alloc(c, (size_t)n * sizeof(int));
        for (int i = 0; i < n; i++) pos[i] = pos0 + i % T;
        x = mt_add(c, x, mt_embedding(c, &P->t[L->pos_emb], pos, n));
    }
    if (L->emb_scale >= 0) x = mt_scale_by(c, x, &P->t[L->emb_scale]);
    x = mt_reshape(c, x, 3, (int[]){B, T, m->cfg.stack.n_embd});
    return m->cfg.stack.dropout > 0 ? mt_dropout(c, x, m->cfg.stack.dropout) : x;
}

/* The head's logits before the soft cap: the loss caps them itself (mt_cross_entropy's fused
   softcap), everything else through mt_gpt_head. */
static mt_tensor *head_uncapped(mt_ctx *c, const mt_gpt *m, mt_params *P, mt_tensor *x) {
    const mt_gpt_layout *L = m->layout;
    x = mt_stack_final(c, &L->stack, P, x);
    if (L->s_z >= 0) /* nGPT: s_z z */
        return mt_scale_channels(c, mt_linear(c, x, &P->t[L->lm_head], NULL), &P->t[L->s_z],
                                 m->cfg.ngpt.sz_init / m->cfg.ngpt.sz_scale);
    /* --param mup, completep: the logits x C0 / C (mt_stack_param_scales) */
    float k = mt_stack_param_scales(&m->cfg.stack).logits;
    x = mt_linear(c, x, &P->t[L->lm_head >= 0 ? L->lm_head : L->tok_emb], NULL); /* tied: tok_emb */
    return k != 1 ? mt_scale(c, x, k) : x;
}

/* Gemma 2's soft cap (--logit-softcap C > 0): C tanh(logits / C) */
mt_tensor *mt_gpt_head(mt_ctx *c, const mt_gpt *m, mt_params *P, mt_tensor *x) {
    float cap = m->cfg.stack.logit_softcap;
    x = head_uncapped(c, m, P, x);
    return cap > 0 ? mt_softcap(c, x, cap) : x;
}

mt_value_embed *mt_gpt_value_embeds(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, int B,
                                    int T) {
    const mt_gpt_layout *L = m->layout;
    if (!L->has_ve) return NULL;
    int n = L->stack.n_layer;
    mt_value_embed *ve = mt_arena_alloc(c, (size_t)n * sizeof *ve);
    for (int l = 0; l < n; l++) {
        ve[l] = (mt_value_embed){0};
        if (L->ve[l].emb < 0) continue;
        mt_tensor *e = mt_embedding(c, &P->t[L->ve[l].emb], ids, B * T); /* (B T, KC) */
        e = mt_reshape(c, e, 3, (int[]){B, T, e->shape[1]});
        ve[l] = (mt_value_embed){.e = mt_scale_by(c, e, &P->t[L->ve[l].lambda_e]),
                                 .lambda_v = &P->t[L->ve[l].lambda_v]};
    }
    return ve;
}

mt_tensor *mt_gpt_blocks(mt_ctx *c, const mt_gpt *m, mt_params *P, mt_tensor *x, const int *ids,
                         double *resid) {
    mt_value_embed *ve = mt_gpt_value_embeds(c, m, P, ids, x->shape[0], x->shape[1]);
    return mt_stack_forward_ex(c, &m->layout->stack, P, x, NULL, NULL, ve, resid);
}

static mt_tensor *blocks(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, int B, int T) {
    return mt_gpt_blocks(c, m, P, mt_gpt_embed(c, m, P, ids, B, T, 0), ids, NULL);
}

mt_tensor *mt_gpt_forward(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, int B, int T) {
    return mt_gpt_head(c, m, P, blocks(c, m, P, ids, B, T));
}

/* The soft cap is the model's, not a term of the training loss: every loss has it (training's,
   validation's, scoring's), fused into the cross-entropy (no capped copy of the logits). */
mt_tensor *mt_gpt_loss(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, const int *targets,
                       int B, int T, mt_ce_opts ce) {
    ce.softcap = m->cfg.stack.logit_softcap;
    return mt_cross_entropy(c, head_uncapped(c, m, P, blocks(c, m, P, ids, B, T)), targets, -1, ce);
}

mt_tensor *mt_gpt_rows_loss(mt_ctx *c, mt_params *P, int lo, int n, void *batch) {
    const mt_gpt_batch *b = batch;
    size_t at = (size_t)lo * (size_t)b->T;
    return mt_gpt_loss(c, b->m, P, b->ids + at, b->targets + at, n, b->T,
                       mt_stack_ce(&b->m->cfg.stack));
}

double mt_gpt_activation_bytes(const void *cfgp, int B, bool training) {
    const mt_gpt_config *cfg = cfgp;
    const mt_stack_config *s = &cfg->stack;
    double N = (double)B * cfg->n_ctx, C = s->n_embd, T = cfg->n_ctx;
    double rope = cfg->pos == MT_POS_ROPE ? 2 * C * s->n_layer : 0; /* rotated q and k */
    /* value embeddings: per listed block (a validated list: one more than its commas) the row,
       lambda_e E, lambda_v V and their sum, KC each */
    double ve = 0, KC = C / s->n_head * (s->n_kv_head ? s->n_kv_head : s->n_head);
    for (const char *p = cfg->value_embeds; *p; p++) ve += *p == ',';
    if (cfg->value_embeds[0]) ve = (ve + 1) * 4 * KC;
    /* the blocks (mt_stack_token_floats), per-thread (T, T) attention scratch; then the logits;
       doubled for gradients */
    double floats = N * (mt_stack_token_floats(s) + rope + ve + 4 * C + 4.0 * cfg->n_vocab) +
                    s->n_layer * 4.0 * s->n_head * T * T;
    return (training ? 2 : 1) * floats * sizeof(float);
}
