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
    [MT_POS_LEARNED] = {"learned", "a learned position embedding added to the tokens"},
    [MT_POS_ROPE] = {"rope", "rotary: q and k rotated by the position (llama2.c's pairs)"},
};
static const mt_enum_item ARCHS[] = {
    [MT_ARCH_GPT] = {"gpt", "the pieces as the other flags say"},
    [MT_ARCH_LLAMA] = {"llama", "pos rope, act swiglu, norm rms, no bias (a flag given another "
                                "value keeps it)"},
};
const mt_enum MT_POS_KINDS = MT_ENUM("position encoding", POS_KINDS);
const mt_enum MT_GPT_ARCHS = MT_ENUM("arch", ARCHS);

mt_gpt_config mt_gpt_config_default(void) {
    return (mt_gpt_config){.stack = mt_stack_default(), .n_ctx = 64, .n_vocab = 256,
                           .tied = true, .emb_std = 0.02f, .arch = MT_ARCH_GPT,
                           .pos = MT_POS_LEARNED, .rope_theta = 10000.0f};
}

/* arch llama: each piece of the preset where the field still holds the GPT default (a flag
   given another value keeps it); idempotent, so a validated config validates to itself. */
static void apply_arch(mt_gpt_config *cfg) {
    if (cfg->arch != MT_ARCH_LLAMA) return;
    mt_stack_config *s = &cfg->stack;
    if (cfg->pos == MT_POS_LEARNED) cfg->pos = MT_POS_ROPE;
    if (s->act == MT_ACT_GELU) s->act = MT_ACT_SWIGLU;
    if (s->norm.kind == MT_NORM_LN) s->norm.kind = MT_NORM_RMS; /* rms_form llama by default */
    s->bias = false; /* true is the GPT's default */
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
        return mt_errorf(err, MT_EINVAL, "config: rope_theta = %g, must be a finite number > 0 "
                         "(LLaMA's: 10000)", cfg->rope_theta);
    apply_arch(cfg);
    mt_status st = mt_stack_validate(&cfg->stack, MT_DEEPNORM_DECODER_ONLY, 0,
                                     cfg->stack.n_layer, true, err);
    if (st == MT_OK && cfg->pos == MT_POS_ROPE && (cfg->stack.n_embd / cfg->stack.n_head) % 2)
        return mt_errorf(err, MT_EINVAL, "config: pos rope turns pairs of channels: the head size "
                         "n_embd / n_head = %d / %d = %d must be even", cfg->stack.n_embd,
                         cfg->stack.n_head, cfg->stack.n_embd / cfg->stack.n_head);
    return st;
}

#define F(member, TYPE, key, help, ...) \
    MT_FIELD(mt_gpt_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(n_ctx, INT, "n_ctx", "context length (tokens)", .range = "1.."),
    F(n_vocab, INT, "n_vocab", NULL, .flags = MT_FIELD_NO_FLAG),
    F(tied, BOOL, "tied", "a separate output head instead of the token embedding",
      .flag = "untie"),
    F(emb_std, FLOAT, "emb_std", "std of the token and position embeddings' normal init",
      .range = "0.."),
    F(arch, ENUM, "arch", "llama: --pos rope --act swiglu --norm rms --no-bias where those hold "
      "the GPT's defaults", .of = &MT_GPT_ARCHS),
    F(pos, ENUM, "pos", "position encoding", .of = &MT_POS_KINDS),
    F(rope_theta, FLOAT, "rope_theta", "RoPE's base: pair i of a head turns by position x "
      "theta^(-2i/head size)"),
    F(stack, TABLE, "stack", NULL, .of = &MT_STACK_FIELDS),
};
#undef F
static const mt_fields GPT_FIELDS = MT_FIELDS_OF(FIELDS);

/* ---- build ----------------------------------------------------------------------------------- */

static mt_status build_table(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    mt_status st = mt_gpt_config_validate(&m->cfg, err);
    if (st != MT_OK) return st;
    m->base = (mt_model){&mt_gpt_type, &m->cfg, &m->P};
    mt_tok_init_byte(&m->tok);
    const mt_gpt_config *g = &m->cfg;
    int C = g->stack.n_embd, V = g->n_vocab;
    mt_gpt_layout *L = calloc(1, sizeof *L);
    if (!L) return mt_errorf(err, MT_ENOMEM, "out of memory for a model");
    m->layout = L;
    mt_params *P = &m->P;
    mt_params_init_table(P);
    L->tok_emb = mt_params_add(P, "tok_emb.weight", 2, (int[]){V, C}, MT_ROLE_EMBEDDING,
                               MT_INIT_NORMAL, g->emb_std);
    mt_block_cfg block = mt_stack_block(&g->stack, true);
    L->pos_emb = -1;
    if (g->pos == MT_POS_LEARNED)
        L->pos_emb = mt_params_add(P, "pos_emb.weight", 2, (int[]){g->n_ctx, C},
                                   MT_ROLE_EMBEDDING, MT_INIT_NORMAL, g->emb_std);
    else if ((st = mt_rope_init(&L->rope, g->n_ctx, C / g->stack.n_head, g->rope_theta, err)) !=
             MT_OK)
        return st;
    else
        block.rope = &L->rope;
    if ((st = mt_stack_build_blocks(&L->stack, &g->stack, &block, P, "blocks", "final_norm",
                                    err)) != MT_OK)
        return st;
    L->lm_head = g->tied ? -1
                         : mt_params_add(P, "lm_head.weight", 2, (int[]){V, C}, MT_ROLE_MATRIX,
                                         MT_INIT_NORMAL, mt_stack_other_std(&g->stack, C, V));
    return MT_OK;
}

mt_status mt_gpt_build(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err) {
    mt_status st = build_table(m, cfg, err);
    if (st == MT_OK) st = mt_params_alloc(&m->P, err);
    if (st != MT_OK) mt_gpt_free(m);
    return st;
}

void mt_gpt_free(mt_gpt *m) {
    if (m->layout) mt_stack_free(&m->layout->stack), mt_rope_free(&m->layout->rope);
    free(m->layout);
    mt_params_free(&m->P);
    mt_tok_free(&m->tok);
    memset(m, 0, sizeof *m);
}

mt_gpt *mt_gpt_of(mt_model *m) { return m && m->type == &mt_gpt_type ? (mt_gpt *)m : NULL; }

/* ---- forward --------------------------------------------------------------------------------- */

mt_tensor *mt_gpt_embed(mt_ctx *c, mt_gpt *m, const int *ids, int B, int T, int pos0) {
    const mt_gpt_layout *L = m->layout;
    MT_ASSERT(B >= 1 && T >= 1 && pos0 >= 0 && pos0 + T <= m->cfg.n_ctx,
              "gpt: positions %d..%d do not fit n_ctx = %d", pos0, pos0 + T - 1, m->cfg.n_ctx);
    int n = B * T;
    mt_tensor *x = mt_embedding(c, &m->P.t[L->tok_emb], ids, n);
    if (L->pos_emb >= 0) {
        int *pos = mt_arena_alloc(c, (size_t)n * sizeof(int));
        for (int i = 0; i < n; i++) pos[i] = pos0 + i % T;
        x = mt_add(c, x, mt_embedding(c, &m->P.t[L->pos_emb], pos, n));
    }
    x = mt_reshape(c, x, 3, (int[]){B, T, m->cfg.stack.n_embd});
    return m->cfg.stack.dropout > 0 ? mt_dropout(c, x, m->cfg.stack.dropout) : x;
}

mt_tensor *mt_gpt_head(mt_ctx *c, mt_gpt *m, mt_tensor *x) {
    const mt_gpt_layout *L = m->layout;
    x = mt_stack_final(c, &L->stack, &m->P, x);
    if (L->lm_head >= 0) return mt_linear(c, x, &m->P.t[L->lm_head], NULL);
    return mt_linear(c, x, &m->P.t[L->tok_emb], NULL); /* x tok_emb^T: the tied head */
}

mt_tensor *mt_gpt_forward(mt_ctx *c, mt_gpt *m, const int *ids, int B, int T) {
    mt_tensor *x = mt_gpt_embed(c, m, ids, B, T, 0);
    return mt_gpt_head(c, m, mt_stack_forward(c, &m->layout->stack, &m->P, x, NULL));
}

mt_tensor *mt_gpt_loss(mt_ctx *c, mt_gpt *m, const int *ids, const int *targets, int B, int T,
                       float label_smoothing) {
    return mt_cross_entropy(c, mt_gpt_forward(c, m, ids, B, T), targets, -1, label_smoothing);
}

mt_tensor *mt_gpt_rows_loss(mt_ctx *c, mt_params *P, int lo, int n, void *batch) {
    const mt_gpt_batch *b = batch;
    mt_gpt m = *b->m;
    m.P = *P;
    size_t at = (size_t)lo * (size_t)b->T;
    return mt_gpt_loss(c, &m, b->ids + at, b->targets + at, n, b->T, m.cfg.stack.label_smoothing);
}

double mt_gpt_activation_bytes(const mt_gpt_config *cfg, int B, bool training) {
    const mt_stack_config *s = &cfg->stack;
    double N = (double)B * cfg->n_ctx, C = s->n_embd, T = cfg->n_ctx;
    double rope = cfg->pos == MT_POS_ROPE ? 2 * C * s->n_layer : 0; /* rotated q and k */
    /* the blocks (mt_stack_token_floats), per-thread (T, T) attention scratch; then the logits;
       doubled for gradients */
    double floats = N * (mt_stack_token_floats(s) + rope + 4 * C + 4.0 * cfg->n_vocab) +
                    s->n_layer * 4.0 * s->n_head * T * T;
    return (training ? 2 : 1) * floats * sizeof(float);
}

/* ---- training on tokens ---------------------------------------------------------------------- */

#define SEED_EVAL 0x4556414c5549414eULL /* the validation windows */

typedef struct {
    mt_task base;
    mt_tokenizer tok;
    mt_tokens all, train, val;
    int B, T, eval_batches;
    uint64_t seed;
    int *x, *y;        /* (B, T) the drawn batch: inputs and next tokens */
    mt_sampler eval;   /* the validation windows' draws */
    int *probe, probe_B; /* (probe_B, T) the diagnostics' fixed windows */
} gpt_task;

static mt_status task_load(mt_task **tp, const mt_data_cfg *d, void *cfgp, mt_err *err) {
    mt_gpt_config *cfg = cfgp;
    gpt_task *t = calloc(1, sizeof *t);
    if (!t) return mt_errorf(err, MT_ENOMEM, "out of memory");
    *tp = &t->base;
    t->base.type = &mt_gpt_type;
    t->B = d->batch;
    t->T = cfg->n_ctx;
    t->eval_batches = d->eval_batches;
    t->seed = d->seed;
    mt_text_cfg tc = {d->tokenizer, d->vocab_size, d->val_fraction};
    mt_status s = mt_data_load(d->path, &tc, &t->tok, &t->all, err);
    if (s != MT_OK) return s;
    cfg->n_vocab = t->tok.n_vocab;
    if ((s = mt_gpt_config_validate(cfg, err)) != MT_OK ||
        (s = mt_tokens_split(&t->all, cfg->n_ctx, &t->train, &t->val, err)) != MT_OK)
        return s;
    size_t n = (size_t)d->batch * (size_t)cfg->n_ctx; /* the whole batch: every rank draws it */
    t->x = malloc(n * sizeof *t->x);
    t->y = malloc(n * sizeof *t->y);
    if (!t->x || !t->y)
        return mt_errorf(err, MT_ENOMEM, "out of memory for a batch of %zu tokens", n);
    return MT_OK;
}

static void task_free(mt_task *tp) {
    gpt_task *t = (gpt_task *)tp;
    if (!t) return;
    mt_tok_free(&t->tok);
    mt_tokens_free(&t->all);
    free(t->x);
    free(t->y);
    free(t->probe);
    free(t);
}

static void task_describe(const mt_task *tp, char *buf, size_t len) {
    const gpt_task *t = (const gpt_task *)tp;
    snprintf(buf, len, "%zu tokens (%s tokenizer, vocabulary %d), train %zu, val %zu", t->all.n,
             mt_enum_name(&MT_TOKENIZERS, t->tok.kind), t->tok.n_vocab, t->train.n, t->val.n);
}

static char *task_meta(const mt_task *tp) { return mt_tok_to_json(&((const gpt_task *)tp)->tok); }

static void draw_batch(mt_task *tp, mt_rng *r, int lo, int n) {
    gpt_task *t = (gpt_task *)tp;
    (void)lo, (void)n; /* every row of the batch is drawn */
    mt_sampler s = {*r};
    mt_sampler_next(&s, &t->train, t->B, t->T, t->x, t->y);
    *r = s.rng;
}

static mt_tensor *rows_loss(mt_ctx *c, const mt_model *m, mt_params *P, mt_task *tp, int lo,
                            int n) {
    gpt_task *t = (gpt_task *)tp;
    mt_gpt_batch b = {(const mt_gpt *)m, t->x, t->y, t->T};
    return mt_gpt_rows_loss(c, P, lo, n, &b);
}

static int eval_count(const mt_task *tp) {
    const gpt_task *t = (const gpt_task *)tp;
    return t->val.n ? t->eval_batches : 0;
}

static int eval_draw(mt_task *tp, int i) {
    gpt_task *t = (gpt_task *)tp;
    if (i == 0) mt_sampler_init(&t->eval, t->seed ^ SEED_EVAL); /* the same windows every time */
    mt_sampler_next(&t->eval, &t->val, t->B, t->T, t->x, t->y);
    return t->B;
}

static void eval_rows(mt_ctx *c, mt_model *m, mt_task *tp, int lo, int n, double sums[2]) {
    gpt_task *t = (gpt_task *)tp;
    size_t at = (size_t)lo * t->T;
    /* the plain cross-entropy, without the training's label smoothing */
    sums[0] += (double)mt_gpt_loss(c, (mt_gpt *)m, t->x + at, t->y + at, n, t->T, 0)->data[0] * n;
}

static mt_tensor *probe(mt_ctx *c, mt_model *mp, mt_task *tp, uint64_t seed, int B,
                        double *resid) {
    gpt_task *t = (gpt_task *)tp;
    mt_gpt *m = (mt_gpt *)mp;
    if (t->probe_B != B) { /* once, when the diagnostics open */
        free(t->probe);
        t->probe = malloc(2 * (size_t)B * t->T * sizeof *t->probe);
        MT_ASSERT(t->probe, "gpt: out of memory for %d probe windows", B);
        const mt_tokens *src = t->val.n > (size_t)t->T ? &t->val : &t->train;
        mt_sampler s;
        mt_sampler_init(&s, seed);
        mt_sampler_next(&s, src, B, t->T, t->probe, t->probe + (size_t)B * t->T);
        t->probe_B = B;
    }
    mt_tensor *x = mt_gpt_embed(c, m, t->probe, B, t->T, 0);
    x = mt_stack_forward(c, &m->layout->stack, &m->P, x, resid);
    return mt_stack_final(c, &m->layout->stack, &m->P, x);
}

/* ---- the type -------------------------------------------------------------------------------- */

static void config_default(void *cfg) { *(mt_gpt_config *)cfg = mt_gpt_config_default(); }
static mt_status config_validate(void *cfg, mt_err *err) {
    return mt_gpt_config_validate(cfg, err);
}

static void config_describe(const void *cfgp, char *buf, size_t len) {
    const mt_gpt_config *g = cfgp;
    const mt_stack_config *s = &g->stack;
    char kv[32] = "";
    if (s->n_kv_head != s->n_head) snprintf(kv, sizeof kv, " (%d key-value)", s->n_kv_head);
    snprintf(buf, len, "%s, %d layers, %d heads%s, n_embd %d, n_ff %d, n_ctx %d, norm %s, "
             "placement %s, init %s, pos %s, act %s%s", mt_enum_name(&MT_GPT_ARCHS, g->arch),
             s->n_layer, s->n_head, kv, s->n_embd, s->n_ff, g->n_ctx,
             mt_enum_name(&MT_NORMS, s->norm.kind), mt_enum_name(&MT_PLACEMENTS, s->placement),
             mt_enum_name(&MT_INIT_SCHEMES, s->init), mt_enum_name(&MT_POS_KINDS, g->pos),
             mt_enum_name(&MT_ACTS, s->act), s->bias ? "" : ", no bias");
}

static double activation_bytes(const void *cfg, int B, bool training) {
    return mt_gpt_activation_bytes(cfg, B, training);
}

static int row_units(const void *cfg) { return ((const mt_gpt_config *)cfg)->n_ctx; }

static mt_status type_build_table(void *m, const void *cfg, mt_err *err) {
    return build_table(m, cfg, err);
}

static void type_free(mt_model *m) { mt_gpt_free((mt_gpt *)m); }

static char *meta_to_json(const mt_model *m) { return mt_tok_to_json(&((const mt_gpt *)m)->tok); }

static mt_status meta_from_json(mt_model *mp, const char *json, mt_err *err) {
    mt_gpt *m = (mt_gpt *)mp;
    mt_tokenizer tok;
    mt_status s = mt_tok_from_json(json, &tok, err);
    if (s != MT_OK) return s;
    if (tok.n_vocab != m->cfg.n_vocab) {
        s = mt_errorf(err, MT_EFORMAT, "the config has n_vocab %d, the tokenizer %d tokens",
                      m->cfg.n_vocab, tok.n_vocab);
        mt_tok_free(&tok);
        return s;
    }
    mt_tok_free(&m->tok);
    m->tok = tok;
    return MT_OK;
}

static void meta_describe(const mt_model *mp, char *buf, size_t len) {
    const mt_tokenizer *t = &((const mt_gpt *)mp)->tok;
    snprintf(buf, len, "%s, vocabulary %d", mt_enum_name(&MT_TOKENIZERS, t->kind), t->n_vocab);
}

const mt_model_type mt_gpt_type = {
    .name = "gpt",
    .about = "a language model",
    .data = "a text or token file",
    .data_file = true,
    .meta_key = "tokenizer",
    .units = "tokens",
    .unit = "tok",
    .config_size = sizeof(mt_gpt_config),
    .fields = &GPT_FIELDS,
    .config_default = config_default,
    .config_validate = config_validate,
    .config_describe = config_describe,
    .activation_bytes = activation_bytes,
    .row_units = row_units,
    .size = sizeof(mt_gpt),
    .build_table = type_build_table,
    .free = type_free,
    .meta_to_json = meta_to_json,
    .meta_from_json = meta_from_json,
    .meta_describe = meta_describe,
    .task_load = task_load,
    .task_free = task_free,
    .task_describe = task_describe,
    .task_meta = task_meta,
    .draw_batch = draw_batch,
    .rows_loss = rows_loss,
    .eval_count = eval_count,
    .eval_draw = eval_draw,
    .eval_rows = eval_rows,
    .eval_concurrent = true,
    .accuracy = false,
    .probe = probe,
};
