/* The GPT's type (model.h): its field table, what the trainer, the checkpoints and the programs
   call through it, and its public constructor. Above gpt.c (the model), gpt_infer.c (scoring,
   generation), and gpt_export.c, which know nothing of this file. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_internal.h"

/* ---- config fields ------------------------------------------------------------------------- */

/* What reads an option (mt_field.read), on a validated config. */
static bool emb_std_read(const void *g) {
    return ((const mt_gpt_config *)g)->stack.init != MT_SCHEME_DSL;
}
static bool rope(const void *g) { return ((const mt_gpt_config *)g)->pos == MT_POS_ROPE; }
static bool value_embeds(const void *g) { return ((const mt_gpt_config *)g)->value_embeds[0]; }
static bool ngpt(const void *g) { return ((const mt_gpt_config *)g)->arch == MT_ARCH_NGPT; }

#define NGPT .read = ngpt, .read_by = "--arch ngpt"
#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(mt_gpt_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(n_ctx, INT, "n_ctx", "context length (tokens)", .range = "1.."),
    F(n_vocab, INT, "n_vocab", NULL, .flags = MT_FIELD_NO_FLAG),
    F(tied, BOOL, "tied", "a separate output head instead of the token embedding", .flag = "untie"),
    F(emb_std, FLOAT, "emb_std",
      "std of the token and position embeddings' normal init (init dsl: 1 / sqrt(tables))",
      .range = "0..", .read = emb_std_read,
      .read_by = "an --init other than dsl (dsl's embeddings have the std of its derivation)"),
    F(arch, ENUM, "arch",
      "llama: --pos rope --act swiglu --norm rms --no-bias unless given (a flag wins); ngpt: the "
      "same with --norm none, nGPT's residual (no placement), untied, unit vectors "
      "(docs/layers.md: what "
      "it cannot take is refused)",
      .of = &MT_GPT_ARCHS),
    F(pos, ENUM, "pos", "position encoding", .of = &MT_POS_KINDS),
    F(rope_theta, FLOAT, "rope_theta",
      "RoPE's base: pair i of a head turns by position x "
      "theta^(-2i/head size)",
      .read = rope, .read_by = "--pos rope"),
    F(emb_scale, BOOL, "emb_scale",
      "a learned scalar emb_scale on the embeddings (tokens + positions), init sqrt(n-embd), as "
      "DyT's and Derf's LLaMA setting"),
    F(ngpt.alpha_init, FLOAT, "ngpt_alpha_init",
      "arch ngpt: the eigen learning rates' initial value (attention and FFN, per channel)",
      .range = "0..", NGPT),
    F(ngpt.alpha_scale, FLOAT, "ngpt_alpha_scale",
      "arch ngpt: alpha is stored at this scale, times ngpt-alpha-init / it; 0: 1 / sqrt(n-embd)",
      .range = "0..", NGPT),
    F(ngpt.sqk_init, FLOAT, "ngpt_sqk_init", "arch ngpt: s_qk's initial value (unit q and k)",
      .range = "0..", NGPT),
    F(ngpt.sqk_scale, FLOAT, "ngpt_sqk_scale", "arch ngpt: s_qk's scale; 0: 1 / sqrt(n-embd)",
      .range = "0..", NGPT),
    F(ngpt.suv_init, FLOAT, "ngpt_suv_init",
      "arch ngpt: s_u's and s_v's initial value (SwiGLU's branches; s_v also times sqrt(n-embd))",
      .range = "0..", NGPT),
    F(ngpt.suv_scale, FLOAT, "ngpt_suv_scale", "arch ngpt: s_u's and s_v's scale", .range = "0..",
      NGPT),
    F(ngpt.sz_init, FLOAT, "ngpt_sz_init", "arch ngpt: s_z's initial value (on the logits)",
      .range = "0..", NGPT),
    F(ngpt.sz_scale, FLOAT, "ngpt_sz_scale", "arch ngpt: s_z's scale; 0: 1 / sqrt(n-embd)",
      .range = "0..", NGPT),
    F(value_embeds, STR, "value_embeds",
      "value embeddings (modded-nanogpt's): each listed block's values become lambda_v V + "
      "lambda_e E[token], E a token table of its own (e.g. 0,1,-2,-1; -1 the last block)"),
    F(value_embeds_shared, BOOL, "value_embeds_shared",
      "the list's second half reads its first half's tables, in order (modded-nanogpt's "
      "0,1,2,-3,-2,-1: blocks 0 and L-3 share one); an even list",
      .read = value_embeds, .read_by = "--value-embeds"),
    F(stack, TABLE, "stack", NULL, .of = &MT_STACK_FIELDS),
    F(arch_applied, BOOL, "arch_applied", NULL, .flags = MT_FIELD_NO_FLAG),
};
#undef F
#undef NGPT
static const mt_fields GPT_FIELDS = MT_FIELDS_OF(FIELDS);

/* ---- build --------------------------------------------------------------------------------- */

mt_status mt_gpt_build(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err) {
    mt_status st = mt_gpt_build_table(m, cfg, err);
    m->base.type = &mt_gpt_type;
    if (st == MT_OK) st = mt_params_alloc(&m->P, err);
    if (st != MT_OK) mt_gpt_free(m);
    return st;
}

mt_gpt *mt_gpt_of(mt_model *m) { return m && m->type == &mt_gpt_type ? (mt_gpt *)m : NULL; }

/* ---- the model on a batch -------------------------------------------------------------------- */

static mt_tensor *loss(mt_ctx *c, const mt_model *m, mt_params *P, const mt_batch *b,
                       mt_ce_opts ce) {
    MT_ASSERT(b->kind == MT_INPUT_TOKENS, "gpt: a batch of another kind of input");
    return mt_gpt_loss(c, (const mt_gpt *)m, P, b->tokens.ids, b->tokens.targets, b->B, b->tokens.T,
                       ce);
}

/* The probe's hidden state: the blocks' output after the final norm, what the head reads. */
static mt_tensor *hidden(mt_ctx *c, const mt_model *mp, const mt_batch *b, double *resid) {
    const mt_gpt *m = (const mt_gpt *)mp;
    mt_tensor *x = mt_gpt_embed(c, m, mp->P, b->tokens.ids, b->B, b->tokens.T, 0);
    x = mt_gpt_blocks(c, m, mp->P, x, b->tokens.ids, resid);
    return mt_stack_final(c, &m->layout->stack, mp->P, x);
}

/* The diagnostics' logits (B T, V) and block to skip. */
static mt_tensor *logits(mt_ctx *c, const mt_model *mp, const mt_batch *b) {
    mt_tensor *y = mt_gpt_forward(c, (const mt_gpt *)mp, mp->P, b->tokens.ids, b->B, b->tokens.T);
    return mt_reshape(c, y, 2, (int[]){b->B * b->tokens.T, y->shape[2]});
}
static void skip_block(mt_model *m, int block) { ((mt_gpt *)m)->layout->stack.skip = block; }
static const mt_probe_ops PROBES = {.hidden = hidden, .logits = logits, .skip_block = skip_block};

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
    char placement[48] = "residual ngpt"; /* nGPT's reads no placement */
    if (s->residual == MT_RESIDUAL_SUM)
        snprintf(placement, sizeof placement, "placement %s",
                 mt_enum_name(&MT_PLACEMENTS, s->placement));
    if (s->residual == MT_RESIDUAL_HC) /* Pre-LN within */
        snprintf(placement, sizeof placement, "residual %s, %d streams, %s",
                 mt_enum_name(&MT_HYPERS, s->hc.kind), s->hc.streams,
                 s->hc.dynamic ? "dynamic" : "static");
    snprintf(buf, len,
             "%s, %d layers, %d heads%s, n_embd %d, n_ff %d, n_ctx %d, norm %s, "
             "%s, init %s, pos %s, act %s%s",
             mt_enum_name(&MT_GPT_ARCHS, g->arch), s->n_layer, s->n_head, kv, s->n_embd, s->n_ff,
             g->n_ctx, mt_enum_name(&MT_NORMS, s->norm.kind), placement,
             mt_enum_name(&MT_INIT_SCHEMES, s->init), mt_enum_name(&MT_POS_KINDS, g->pos),
             mt_enum_name(&MT_ACTS, s->act), s->bias ? "" : ", no bias");
}

static void type_free(mt_model *m) { mt_gpt_free((mt_gpt *)m); }

/* An arch's pieces as config lines (those of mt_gpt_arch_fill on the defaults that differ from
   the defaults'), and nGPT's training without weight decay and warmup (the paper's section 2.6,
   NVIDIA/ngpt train.py); cfg is marked as holding the pieces (./train layers the lines under the
   given options). */
static const char *option_defaults(void *cfgp) {
    static char lines[3][512];
    mt_gpt_config *cfg = cfgp, d = mt_gpt_config_default(), p = d;
    cfg->arch_applied = true;
    if (cfg->arch == MT_ARCH_GPT || (unsigned)cfg->arch >= sizeof lines / sizeof lines[0])
        return NULL;
    char *out = lines[cfg->arch];
    if (*out) return out;
    p.arch = cfg->arch;
    mt_gpt_arch_fill(&p);
    char *a = mt_fieldset_to_ini(&(mt_fieldset){&GPT_FIELDS, &d}, 1, NULL),
         *b = mt_fieldset_to_ini(&(mt_fieldset){&GPT_FIELDS, &p}, 1, NULL);
    size_t len = 0;
    for (const char *x = a, *y = b; *x && *y;) { /* the same keys, line by line */
        size_t lx = strcspn(x, "\n") + 1, ly = strcspn(y, "\n") + 1;
        if ((lx != ly || memcmp(x, y, lx) != 0) && len + ly < sizeof lines[0])
            memcpy(out + len, y, ly), len += ly;
        x += lx, y += ly;
    }
    if (cfg->arch == MT_ARCH_NGPT)
        snprintf(out + len, sizeof lines[0] - len, "weight_decay = 0\nwarmup = 0\n");
    free(a), free(b);
    return out;
}

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

/* ---- what ./infer and ./export do with it ---------------------------------------------------- */

static const mt_tokenizer *text_tokenizer(const mt_model *m) { return &((const mt_gpt *)m)->tok; }

static mt_status text_score(const mt_model *m, const uint16_t *tok, size_t n, int precision,
                            double *nll, long *count, long *bytes, mt_err *err) {
    return mt_gpt_score((mt_gpt *)m, tok, n, precision, nll, count, bytes, err);
}

static mt_status gen_open(mt_model *m, bool no_cache, int precision, void **state, mt_err *err) {
    mt_kv_cache *kv = malloc(sizeof *kv);
    mt_status s = kv ? mt_kv_init(kv, (mt_gpt *)m, no_cache, err)
                     : mt_errorf(err, MT_ENOMEM, "out of memory for a KV cache");
    if (s != MT_OK) {
        free(kv);
        return s;
    }
    kv->ctx.precision = precision;
    *state = kv;
    return MT_OK;
}

static const float *gen_feed(void *state, const int *ids, int n) {
    mt_kv_cache *kv = state;
    mt_kv_feed(kv, ids, n);
    return kv->logits;
}

static void gen_close(void *state) {
    if (state) mt_kv_free(state);
    free(state);
}

static const mt_text_ops TEXT_OPS = {
    .tokenizer = text_tokenizer,
    .score = text_score,
    .gen_open = gen_open,
    .gen_feed = gen_feed,
    .gen_close = gen_close,
};

static mt_status export(const mt_model *m, const mt_export_opts *opts, mt_err *err) {
    return mt_gpt_export((const mt_gpt *)m, opts, err);
}

static const mt_input INPUT = {.kind = MT_INPUT_TOKENS,
                               .n_ctx = offsetof(mt_gpt_config, n_ctx),
                               .n_vocab = offsetof(mt_gpt_config, n_vocab)};

const mt_model_type mt_gpt_type = {
    .name = "gpt",
    .about = "a language model",
    .input = &INPUT,
    .meta_key = "tokenizer",
    .config_size = sizeof(mt_gpt_config),
    .fields = &GPT_FIELDS,
    .config_default = config_default,
    .config_validate = config_validate,
    .config_describe = config_describe,
    .option_defaults = option_defaults,
    .activation_bytes = mt_gpt_activation_bytes,
    .size = sizeof(mt_gpt),
    .build_table = mt_gpt_build_table,
    .free = type_free,
    .meta_to_json = meta_to_json,
    .meta_from_json = meta_from_json,
    .meta_describe = meta_describe,
    .loss = loss,
    .probes = &PROBES,
    .text = &TEXT_OPS,
    .export = export,
    .import = mt_gpt_import,
};
