/* The encoder-decoder Transformer (models.h), which transduces words into pronunciations
   (data.h's dictionaries; src/tasks/g2p.c trains it). B batch, S source length (letters), T
   target length (bos + phones, phones + eos), C n_embd, V vocabulary; ids row-major over (B, S)
   or (B, T), padded with MT_G2P_PAD past each row's length. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encdec_internal.h"

/* ---- config ---------------------------------------------------------------------------------- */

mt_encdec_config mt_encdec_config_default(void) {
    mt_encdec_config c = {.stack = mt_stack_default(),
                          .enc_layers = 4,
                          .dec_layers = 4,
                          .src_ctx = 32,
                          .tgt_ctx = 32,
                          .n_vocab = 128,
                          .tied = true,
                          .emb_std = MT_GPT2_STD};
    c.stack.n_layer = 1; /* unset: validate makes it enc_layers + dec_layers (at least 2) */
    return c;
}

mt_status mt_encdec_config_validate(mt_encdec_config *cfg, mt_err *err) {
    const struct {
        const char *key;
        int v, min;
    } dims[] = {{"enc_layers", cfg->enc_layers, 1},
                {"dec_layers", cfg->dec_layers, 1},
                {"src_ctx", cfg->src_ctx, 1},
                {"tgt_ctx", cfg->tgt_ctx, 2},
                {"n_vocab", cfg->n_vocab, MT_G2P_TOK_SPECIAL + 1}};
    for (int i = 0; i < 5; i++)
        if (dims[i].v < dims[i].min)
            return mt_errorf(err, MT_EINVAL, "config: %s = %d, must be at least %d", dims[i].key,
                             dims[i].v, dims[i].min);
    if (cfg->enc_layers > MT_ENCDEC_MAX_LAYERS || cfg->dec_layers > MT_ENCDEC_MAX_LAYERS ||
        cfg->src_ctx > MT_ENCDEC_MAX_CTX || cfg->tgt_ctx > MT_ENCDEC_MAX_CTX)
        return mt_errorf(err, MT_EINVAL,
                         "config: enc_layers %d, dec_layers %d (at most %d), "
                         "src_ctx %d, tgt_ctx %d (at most %d)",
                         cfg->enc_layers, cfg->dec_layers, MT_ENCDEC_MAX_LAYERS, cfg->src_ctx,
                         cfg->tgt_ctx, MT_ENCDEC_MAX_CTX);
    int total = cfg->enc_layers + cfg->dec_layers;
    if (cfg->stack.n_layer != 1 && cfg->stack.n_layer != total)
        return mt_errorf(err, MT_EINVAL,
                         "config: n_layer = %d; an encoder-decoder counts its "
                         "blocks with enc_layers (%d) and dec_layers (%d): give --enc-layers and "
                         "--dec-layers, not --n-layer",
                         cfg->stack.n_layer, cfg->enc_layers, cfg->dec_layers);
    if (!(cfg->emb_std >= 0 && isfinite(cfg->emb_std)) || !(cfg->dec_deepnorm_alpha >= 0) ||
        !(cfg->dec_deepnorm_beta >= 0))
        return mt_errorf(err, MT_EINVAL,
                         "config: emb_std = %g, dec_deepnorm_alpha = %g, "
                         "dec_deepnorm_beta = %g: each must be a finite number >= 0",
                         cfg->emb_std, cfg->dec_deepnorm_alpha, cfg->dec_deepnorm_beta);
    cfg->stack.n_layer = total;
    /* causal: BatchNorm's and InstanceNorm's statistics would cross time in the decoder and take
       in padding in the encoder; the stack's DeepNorm constants are the encoder's */
    mt_status st = mt_stack_validate(&cfg->stack, MT_DEEPNORM_ENCDEC_ENCODER, cfg->enc_layers,
                                     cfg->dec_layers, true, err);
    if (st != MT_OK) return st;
    mt_status ps = mt_stack_param_gpt_only(&cfg->stack, "the encoder-decoder", err);
    if (ps != MT_OK) return ps;
    if (cfg->stack.logit_softcap != 0)
        return mt_errorf(err, MT_EINVAL,
                         "config: logit_softcap = %g: the soft cap of the logits is the GPT's "
                         "(--model gpt); the encoder-decoder's head has none: give 0 (no "
                         "--logit-softcap)",
                         cfg->stack.logit_softcap);
    if (cfg->stack.placement == MT_PLACE_MIXLN || cfg->stack.placement == MT_PLACE_DSL)
        return mt_errorf(err, MT_EINVAL,
                         "config: placement %s counts the blocks of one stack (Mix-LN's first "
                         "blocks, DeepScaleLM's depth N); the encoder-decoder has two: use pre, "
                         "post, deepnorm, subln, peri, lns or reorder",
                         mt_enum_name(&MT_PLACEMENTS, cfg->stack.placement));
    if (cfg->stack.layer_lambdas || cfg->stack.unet)
        return mt_errorf(err, MT_EINVAL,
                         "--%s with the encoder-decoder: refused: its decoder's cached steps do "
                         "not carry the stream across its blocks; they are the GPT's (--model "
                         "gpt)",
                         cfg->stack.unet ? "unet" : "layer-lambdas");
    if (cfg->stack.hc.kind != MT_HYPER_NONE)
        return mt_errorf(err, MT_EINVAL,
                         "--residual %s with the encoder-decoder: refused: its streams are not "
                         "built for the decoder's cross-attention sublayer nor its encoder's "
                         "output; use --residual sum",
                         mt_enum_name(&MT_HYPERS, cfg->stack.hc.kind));
    if (cfg->stack.n_kv_head != cfg->stack.n_head)
        return mt_errorf(err, MT_EINVAL,
                         "config: n_kv_head = %d: the encoder-decoder's "
                         "attention has no grouped-query form; give n_kv_head = n_head = %d or 0",
                         cfg->stack.n_kv_head, cfg->stack.n_head);
    float a, b;
    mt_deepnorm_constants(MT_DEEPNORM_ENCDEC_DECODER, cfg->enc_layers, cfg->dec_layers, &a, &b);
    if (!(cfg->dec_deepnorm_alpha > 0)) cfg->dec_deepnorm_alpha = a;
    if (!(cfg->dec_deepnorm_beta > 0)) cfg->dec_deepnorm_beta = b;
    return MT_OK;
}

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(mt_encdec_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(enc_layers, INT, "enc_layers", "encoder blocks", .range = "1.."),
    F(dec_layers, INT, "dec_layers", "decoder blocks", .range = "1.."),
    F(dec_deepnorm_alpha, FLOAT, "dec_deepnorm_alpha",
      "the decoder's DeepNorm skip scale; 0: "
      "from the depths (--deepnorm-alpha: the encoder's)",
      .range = "0.."),
    F(dec_deepnorm_beta, FLOAT, "dec_deepnorm_beta",
      "the decoder's DeepNorm init gain; 0: from "
      "the depths (--deepnorm-beta: the encoder's)",
      .range = "0.."),
    F(src_ctx, INT, "src_ctx", NULL, .flags = MT_FIELD_NO_FLAG),
    F(tgt_ctx, INT, "tgt_ctx", NULL, .flags = MT_FIELD_NO_FLAG),
    F(n_vocab, INT, "n_vocab", NULL, .flags = MT_FIELD_NO_FLAG),
    F(tied, BOOL, "tied", "a separate output head instead of the token embedding", .flag = "untie"),
    F(emb_std, FLOAT, "emb_std", "std of the token and position embeddings' normal init",
      .range = "0.."),
    F(emb_scale, BOOL, "emb_scale",
      "a learned scalar emb_scale on the encoder's and the decoder's embeddings (tokens + "
      "positions), init sqrt(n-embd), as DyT's and Derf's LLaMA setting"),
    F(stack, TABLE, "stack", NULL, .of = &MT_STACK_FIELDS),
};
#undef F
static const mt_fields ENCDEC_FIELDS = MT_FIELDS_OF(FIELDS);

/* ---- build ----------------------------------------------------------------------------------- */

static mt_status build_table(void *mp, const void *cfgp, mt_err *err) {
    mt_encdec *m = mp;
    const mt_encdec_config *cfg = cfgp;
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    mt_status st = mt_encdec_config_validate(&m->cfg, err);
    if (st != MT_OK) return st;
    m->base = (mt_model){.type = &mt_encdec_type, .cfg = &m->cfg, .P = &m->P};
    const mt_encdec_config *g = &m->cfg;
    int C = g->stack.n_embd, V = g->n_vocab;
    mt_encdec_layout *L = calloc(1, sizeof *L);
    if (!L) return mt_errorf(err, MT_ENOMEM, "out of memory for a model");
    m->layout = L;
    /* each stack its depth and DeepNorm row; the decoder's blocks with cross-attention */
    L->enc_cfg = L->dec_cfg = g->stack;
    L->enc_cfg.n_layer = g->enc_layers;
    L->dec_cfg.n_layer = g->dec_layers;
    L->dec_cfg.deepnorm_alpha = g->dec_deepnorm_alpha;
    L->dec_cfg.deepnorm_beta = g->dec_deepnorm_beta;
    /* Sub-LN: the stack's subln_gain is the encoder's, the decoder's from its row */
    L->dec_cfg.subln_gain = mt_subln_gain(MT_DEEPNORM_ENCDEC_DECODER, g->enc_layers, g->dec_layers);
    mt_block_cfg enc_block = mt_stack_block(&L->enc_cfg, false),
                 dec_block = mt_stack_block(&L->dec_cfg, true);
    dec_block.cross = true;
    mt_params *P = &m->P;
    mt_params_init_table(P);
    L->tok_emb = mt_params_add(P, "tok_emb.weight", 2, (int[]){V, C}, MT_ROLE_EMBEDDING,
                               MT_INIT_NORMAL, g->emb_std);
    L->enc_pos = mt_params_add(P, "enc.pos_emb.weight", 2, (int[]){g->src_ctx, C},
                               MT_ROLE_EMBEDDING, MT_INIT_NORMAL, g->emb_std);
    L->dec_pos = mt_params_add(P, "dec.pos_emb.weight", 2, (int[]){g->tgt_ctx, C},
                               MT_ROLE_EMBEDDING, MT_INIT_NORMAL, g->emb_std);
    L->emb_scale = !g->emb_scale ? -1
                                 : mt_params_add(P, "emb_scale", 1, (int[]){1}, MT_ROLE_NORM,
                                                 MT_INIT_CONST, sqrtf((float)C));
    if ((st = mt_stack_build_blocks(&L->enc, &L->enc_cfg, &enc_block, P, "enc.blocks",
                                    "enc.final_norm", err)) != MT_OK ||
        (st = mt_stack_build_blocks(&L->dec, &L->dec_cfg, &dec_block, P, "dec.blocks",
                                    "dec.final_norm", err)) != MT_OK)
        return st;
    L->lm_head = g->tied ? -1
                         : mt_params_add(P, "lm_head.weight", 2, (int[]){V, C}, MT_ROLE_HEAD,
                                         MT_INIT_NORMAL, mt_stack_other_std(&g->stack, C, V));
    return MT_OK;
}

mt_status mt_encdec_build(mt_encdec *m, const mt_encdec_config *cfg, mt_err *err) {
    mt_status st = build_table(m, cfg, err);
    if (st == MT_OK) st = mt_params_alloc(&m->P, err);
    if (st != MT_OK) mt_encdec_free(m);
    return st;
}

void mt_encdec_free(mt_encdec *m) {
    if (m->layout) {
        mt_stack_free(&m->layout->enc);
        mt_stack_free(&m->layout->dec);
    }
    free(m->layout);
    mt_params_free(&m->P);
    memset(m, 0, sizeof *m);
}

mt_encdec *mt_encdec_of(mt_model *m) {
    return m && m->type == &mt_encdec_type ? (mt_encdec *)m : NULL;
}

/* activation_bytes of the type (model.h) */
static double activation_bytes(const void *cfgp, int B, bool training) {
    const mt_encdec_config *cfg = cfgp;
    const mt_stack_config *s = &cfg->stack;
    double S = cfg->src_ctx, T = cfg->tgt_ctx, C = s->n_embd, F = s->n_ff;
    /* per block about 16 (B, T, C) and 4 (B, T, F) tensors (a decoder block 24 and 4), the
       attention's (T, S) scratch per thread, the logits; doubled for gradients; the decoding
       caches (B, T + S, C) per decoder block */
    double floats = B * S * (cfg->enc_layers * (16 * C + 4 * F) + 4 * C) +
                    B * T * (cfg->dec_layers * (24 * C + 4 * F) + 4 * C + 4.0 * cfg->n_vocab) +
                    (cfg->enc_layers + cfg->dec_layers) * 4.0 * s->n_head * (S + T) * (S + T);
    return (training ? 2 : 1) * floats * sizeof(float) +
           4.0 * cfg->dec_layers * B * (S + T) * C * sizeof(float);
}

void mt_encdec_tally(mt_ctx *c, const mt_encdec *m, const mt_g2p_dict *d, const int *words, int n,
                     int beam, mt_g2p_tally t[2]) {
    size_t mark = mt_arena_mark(c);
    int *wp = mt_arena_alloc(c, 2 * (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) wp[2 * i] = words[i], wp[2 * i + 1] = d->pron_start[words[i]];
    mt_g2p_rows r = mt_g2p_rows_of(c, d, wp, n);
    int T = m->cfg.tgt_ctx, *out = mt_arena_alloc(c, (size_t)n * T * sizeof(int)),
        *len = mt_arena_alloc(c, (size_t)n * sizeof(int));
    if (beam > 1)
        for (int i = 0; i < n; i++)
            len[i] = mt_encdec_beam(c, m, r.src + (size_t)i * r.S, r.src_len[i], beam,
                                    out + (size_t)i * T);
    else mt_encdec_greedy(c, m, r.src, r.src_len, n, r.S, out, len);
    for (int i = 0; i < n; i++) mt_g2p_tally_add(d, words[i], out + (size_t)i * T, len[i], t);
    mt_arena_release(c, mark);
}

/* F (tokens, C): the decoder's final hidden state (what the head reads) at the target positions
   only (phones + eos of each row, no padding). resid gets the encoder's stream entering each of
   its blocks, then the decoder's entering each of its blocks and leaving the last:
   enc_layers + dec_layers + 1 values (the encoder's output is the decoder's memory, not its
   stream, so it has no entry). */
static mt_tensor *hidden(mt_ctx *c, const mt_model *mp, const mt_batch *b, double *resid) {
    const mt_encdec *m = (const mt_encdec *)mp;
    const mt_pair_rows *r = &b->pairs;
    const mt_encdec_layout *L = m->layout;
    mt_params *P = mp->P;
    int B = b->B;
    mt_tensor *x = mt_encdec_embed(c, m, P, L->enc_pos, r->src, B, r->S, 0);
    x = mt_stack_forward_ex(c, &L->enc, P, x, r->src_len, NULL, NULL, resid);
    mt_cross_mem mem = {.mem = mt_stack_final(c, &L->enc, P, x), .mem_len = r->src_len};
    mt_tensor *y = mt_encdec_embed(c, m, P, L->dec_pos, r->ids, B, r->T, 0);
    y = mt_stack_forward_ex(c, &L->dec, P, y, NULL, &mem, NULL,
                            resid ? resid + m->cfg.enc_layers : NULL);
    y = mt_stack_final(c, &L->dec, P, y);
    int *at = mt_arena_alloc(c, (size_t)B * r->T * sizeof(int)), n = 0;
    for (int i = 0; i < B * r->T; i++)
        if (r->targets[i] >= 0) at[n++] = i;
    return mt_embedding(c, mt_reshape(c, y, 2, (int[]){B * r->T, m->cfg.stack.n_embd}), at, n);
}

/* The block-effectiveness probe's skipped block: the encoder's first, then the decoder's. */
static void skip_block(mt_model *mp, int block) {
    mt_encdec_layout *L = ((mt_encdec *)mp)->layout;
    int N = L->enc.n_layer;
    L->enc.skip = block < N ? block : -1;
    L->dec.skip = block >= N ? block - N : -1;
}
static const mt_probe_ops PROBES = {.hidden = hidden, .skip_block = skip_block};

static mt_tensor *loss(mt_ctx *c, const mt_model *m, mt_params *P, const mt_batch *b,
                       mt_ce_opts ce) {
    MT_ASSERT(b->kind == MT_INPUT_PAIRS, "encdec: a batch of another kind of input");
    const mt_pair_rows *r = &b->pairs;
    return mt_encdec_loss(c, (const mt_encdec *)m, P, r->src, r->src_len, r->S, r->ids, r->targets,
                          b->B, r->T, ce);
}

/* ---- the type -------------------------------------------------------------------------------- */

static void config_default(void *cfg) { *(mt_encdec_config *)cfg = mt_encdec_config_default(); }
static mt_status config_validate(void *cfg, mt_err *err) {
    return mt_encdec_config_validate(cfg, err);
}

static void config_describe(const void *cfgp, char *buf, size_t len) {
    const mt_encdec_config *g = cfgp;
    const mt_stack_config *s = &g->stack;
    snprintf(buf, len,
             "encdec, %d+%d layers, %d heads, n_embd %d, n_ff %d, norm %s, placement "
             "%s, init %s",
             g->enc_layers, g->dec_layers, s->n_head, s->n_embd, s->n_ff,
             mt_enum_name(&MT_NORMS, s->norm.kind), mt_enum_name(&MT_PLACEMENTS, s->placement),
             mt_enum_name(&MT_INIT_SCHEMES, s->init));
}

static void type_free(mt_model *m) { mt_encdec_free((mt_encdec *)m); }

static char *meta_to_json(const mt_model *m) {
    return mt_g2p_vocab_to_json(&((const mt_encdec *)m)->vocab);
}

static mt_status meta_from_json(mt_model *mp, const char *json, mt_err *err) {
    mt_encdec *m = (mt_encdec *)mp;
    mt_g2p_vocab v;
    mt_status s = mt_g2p_vocab_from_json(json, &v, err);
    if (s != MT_OK) return s;
    if (mt_g2p_vocab_size(&v) != m->cfg.n_vocab)
        return mt_errorf(err, MT_EFORMAT, "the config has n_vocab %d, the vocabulary %d tokens",
                         m->cfg.n_vocab, mt_g2p_vocab_size(&v));
    m->vocab = v;
    return MT_OK;
}

static void meta_describe(const mt_model *mp, char *buf, size_t len) {
    const mt_g2p_vocab *v = &((const mt_encdec *)mp)->vocab;
    snprintf(buf, len, "%d letters \"%.*s\", %d phones", v->n_letters, v->n_letters, v->letters,
             v->n_phones);
}

/* ---- what ./infer does with it --------------------------------------------------------------- */

static const mt_g2p_vocab *g2p_vocab(const mt_model *m) { return &((const mt_encdec *)m)->vocab; }

static void g2p_limits(const mt_model *mp, int *src_ctx, int *tgt_ctx) {
    const mt_encdec *m = (const mt_encdec *)mp;
    *src_ctx = m->cfg.src_ctx;
    *tgt_ctx = m->cfg.tgt_ctx;
}

/* Beam search, or (K = 1) greedy decoding of the one word. */
static int g2p_transduce(mt_ctx *c, const mt_model *mp, const int *src, int S, int K, int *out) {
    const mt_encdec *m = (const mt_encdec *)mp;
    int len;
    if (K > 1) return mt_encdec_beam(c, m, src, S, K, out);
    mt_encdec_greedy(c, m, src, &S, 1, S, out, &len);
    return len;
}

static void g2p_tally(mt_ctx *c, const mt_model *m, const mt_g2p_dict *d, const int *words, int n,
                      int K, mt_g2p_tally t[2]) {
    mt_encdec_tally(c, (const mt_encdec *)m, d, words, n, K, t);
}

static const mt_g2p_ops G2P_OPS = {
    .vocab = g2p_vocab,
    .limits = g2p_limits,
    .transduce = g2p_transduce,
    .tally = g2p_tally,
};

static const mt_input INPUT = {.kind = MT_INPUT_PAIRS,
                               .n_vocab = offsetof(mt_encdec_config, n_vocab),
                               .src_ctx = offsetof(mt_encdec_config, src_ctx),
                               .tgt_ctx = offsetof(mt_encdec_config, tgt_ctx)};

const mt_model_type mt_encdec_type = {
    .name = "encdec",
    .about = "an encoder-decoder: grapheme-to-phoneme",
    .input = &INPUT,
    .meta_key = "g2p",
    .config_size = sizeof(mt_encdec_config),
    .fields = &ENCDEC_FIELDS,
    .config_default = config_default,
    .config_validate = config_validate,
    .config_describe = config_describe,
    .activation_bytes = activation_bytes,
    .size = sizeof(mt_encdec),
    .build_table = build_table,
    .free = type_free,
    .meta_to_json = meta_to_json,
    .meta_from_json = meta_from_json,
    .meta_describe = meta_describe,
    .loss = loss,
    .probes = &PROBES,
    .g2p = &G2P_OPS,
};
