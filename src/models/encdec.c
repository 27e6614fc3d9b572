/* The encoder-decoder Transformer (models.h) and its task, grapheme-to-phoneme on a
   pronunciation dictionary (data.h). B batch, S source length (letters), T target length
   (bos + phones, phones + eos), C n_embd, V vocabulary; ids row-major over (B, S) or (B, T),
   padded with MT_G2P_PAD past each row's length. */
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
    if (cfg->stack.placement == MT_PLACE_NGPT)
        return mt_errorf(err, MT_EINVAL,
                         "--placement ngpt: nGPT is the GPT's (--model gpt --arch ngpt), which "
                         "has no cross-attention; the encoder-decoder takes pre, post, deepnorm, "
                         "subln, peri, lns or reorder");
    mt_status st = mt_stack_validate(&cfg->stack, MT_DEEPNORM_ENCDEC_ENCODER, cfg->enc_layers,
                                     cfg->dec_layers, true, err);
    if (st != MT_OK) return st;
    if (cfg->stack.placement == MT_PLACE_MIXLN || cfg->stack.placement == MT_PLACE_DSL)
        return mt_errorf(err, MT_EINVAL,
                         "config: placement %s counts the blocks of one stack (Mix-LN's first "
                         "blocks, DeepScaleLM's depth N); the encoder-decoder has two: use pre, "
                         "post, deepnorm, subln, peri, lns or reorder",
                         mt_enum_name(&MT_PLACEMENTS, cfg->stack.placement));
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

/* ---- training on a pronunciation dictionary -------------------------------------------------- */

static const char *const METRICS[] = {"wer", "per", "wer_nostress", "per_nostress", NULL};

typedef struct {
    mt_task base;
    mt_g2p_dict dict;
    int *split, n_part[MT_G2P_PARTS]; /* word indices: train, valid, test (mt_g2p_split) */
    int *ex, n_ex;         /* training examples: (word, pronunciation) pairs, 2 ints each,
                              sorted by the word's length */
    int *bucket, n_bucket; /* (n_bucket + 1) starts in ex of the length buckets */
    int B, max_len;        /* rows of a batch; the longest pronunciation + 1 */
    int eval_batches;      /* the most validation batches an evaluation reads */
    int *drawn;            /* (B) the drawn batch's examples */
    double drawn_tokens;   /* target tokens (phones + eos) in the whole drawn batch */
    double val_tokens;     /* per validation word: the mean target tokens of its first
                              pronunciation */
    int eval_at;           /* the first validation word of the evaluation batch drawn */
} encdec_task;

/* Rows of (word w, pronunciation p) pairs ready for the model, in c's arena: src (n, S) with
   S the longest word, tgt (n, T) bos + phones, targets (n, T) phones + eos (-1 past it). */
typedef struct {
    int *src, *src_len, *tgt, *targets;
    int S, T, tokens;
} rows_ids;

static rows_ids make_rows(mt_ctx *c, const mt_g2p_dict *d, const int *wp, int n) {
    rows_ids r = {0};
    const mt_g2p_vocab *v = &d->vocab;
    int off = MT_G2P_TOK_SPECIAL + v->n_letters;
    for (int i = 0; i < n; i++) {
        int w = wp[2 * i], p = wp[2 * i + 1], ls = (int)strlen(d->words[w]),
            lt = d->phone_start[p + 1] - d->phone_start[p] + 1;
        r.S = ls > r.S ? ls : r.S;
        r.T = lt > r.T ? lt : r.T;
    }
    r.src = mt_arena_alloc(c, (size_t)n * r.S * sizeof(int));
    r.src_len = mt_arena_alloc(c, (size_t)n * sizeof(int));
    r.tgt = mt_arena_alloc(c, (size_t)n * r.T * sizeof(int));
    r.targets = mt_arena_alloc(c, (size_t)n * r.T * sizeof(int));
    for (int i = 0; i < n; i++) {
        const char *word = d->words[wp[2 * i]];
        int p = wp[2 * i + 1], np = d->phone_start[p + 1] - d->phone_start[p];
        const int *ph = d->phones + d->phone_start[p];
        int *s = r.src + (size_t)i * r.S, *t = r.tgt + (size_t)i * r.T,
            *y = r.targets + (size_t)i * r.T;
        r.src_len[i] = (int)strlen(word);
        for (int j = 0; j < r.S; j++)
            s[j] = j < r.src_len[i] ? mt_g2p_letter_id(v, word[j]) : MT_G2P_PAD;
        for (int j = 0; j < r.T; j++) {
            t[j] = j == 0 ? MT_G2P_BOS : j <= np ? off + ph[j - 1] : MT_G2P_PAD;
            y[j] = j < np ? off + ph[j] : j == np ? MT_G2P_EOS : -1;
        }
        r.tokens += np + 1;
    }
    return r;
}

static int by_key(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Length buckets: the training examples sorted by the word's length and cut where it changes
   once a bucket holds at least B examples (the last joins the one before when smaller). A batch
   drawn from one bucket has no padded letters, where B words of all lengths are padded to the
   longest (64 words: ~45% of the letters). The phones stay mixed: buckets by letters and phones
   both made batches whose targets all end at one position, and those trained far worse a step
   (validation loss 0.65 against 0.52 after 800 steps of 64 words; by letters: 0.54). */
static mt_status make_buckets(encdec_task *t, mt_err *err) {
    const mt_g2p_dict *d = &t->dict;
    /* key: the word's letters (bits 32+), the example's index (ties keep the split's seeded
       order) */
    uint64_t *key = malloc((size_t)t->n_ex * sizeof *key);
    int *ex = malloc(2 * (size_t)t->n_ex * sizeof *ex);
    if (!key || !ex) return free(key), free(ex), mt_errorf(err, MT_ENOMEM, "out of memory");
    for (int e = 0; e < t->n_ex; e++)
        key[e] = (uint64_t)strlen(d->words[t->ex[2 * e]]) << 32 | (uint64_t)e;
    qsort(key, (size_t)t->n_ex, sizeof *key, by_key);
    for (int e = 0; e < t->n_ex; e++)
        memcpy(ex + 2 * e, t->ex + 2 * (key[e] & 0xffffffffu), 2 * sizeof(int));
    memcpy(t->ex, ex, 2 * (size_t)t->n_ex * sizeof *ex);
    t->n_bucket = 0;
    t->bucket[0] = 0;
    for (int e = 1; e <= t->n_ex; e++)
        if (e == t->n_ex ||
            (e - t->bucket[t->n_bucket] >= t->B && key[e] >> 32 != key[e - 1] >> 32))
            t->bucket[++t->n_bucket] = e;
    if (t->n_bucket > 1 && t->bucket[t->n_bucket] - t->bucket[t->n_bucket - 1] < t->B)
        t->bucket[--t->n_bucket] = t->n_ex;
    free(key), free(ex);
    return MT_OK;
}

static mt_status task_load(mt_task **tp, const mt_data_cfg *dc, void *cfgp, mt_err *err) {
    mt_encdec_config *cfg = cfgp;
    encdec_task *t = calloc(1, sizeof *t);
    if (!t) return mt_errorf(err, MT_ENOMEM, "out of memory");
    *tp = &t->base;
    t->base.type = &mt_g2p_task;
    t->B = dc->batch;
    t->eval_batches = dc->eval_batches;
    mt_g2p_dict *d = &t->dict;
    mt_status s = mt_g2p_load(dc->path, NULL, d, err);
    if (s != MT_OK) return s;
    if (d->n_words < 3)
        return mt_errorf(err, MT_EINVAL, "%s: %d words; the split by word needs at least 3",
                         dc->path, d->n_words);
    t->split = malloc((size_t)d->n_words * sizeof *t->split);
    t->ex = malloc(2 * (size_t)d->n_prons * sizeof *t->ex);
    t->drawn = malloc((size_t)dc->batch * sizeof *t->drawn);
    t->bucket = malloc(((size_t)d->n_prons + 1) * sizeof *t->bucket);
    if (!t->split || !t->ex || !t->drawn || !t->bucket)
        return mt_errorf(err, MT_ENOMEM, "out of memory");
    mt_g2p_split(d, t->split, t->n_part);
    for (int i = 0; i < t->n_part[MT_G2P_TRAIN]; i++) {
        int w = t->split[i];
        for (int p = d->pron_start[w]; p < d->pron_start[w + 1]; p++)
            t->ex[2 * t->n_ex] = w, t->ex[2 * t->n_ex + 1] = p, t->n_ex++;
    }
    s = make_buckets(t, err);
    if (s != MT_OK) return s;
    int src = 1, tgt = 2;
    for (int w = 0; w < d->n_words; w++) {
        int ls = (int)strlen(d->words[w]);
        src = ls > src ? ls : src;
        for (int p = d->pron_start[w]; p < d->pron_start[w + 1]; p++) {
            int lt = d->phone_start[p + 1] - d->phone_start[p] + 1;
            tgt = lt > tgt ? lt : tgt;
        }
    }
    double vt = 0;
    for (int i = 0; i < t->n_part[MT_G2P_VALID]; i++) {
        int p = d->pron_start[t->split[t->n_part[MT_G2P_TRAIN] + i]];
        vt += d->phone_start[p + 1] - d->phone_start[p] + 1;
    }
    t->val_tokens = vt / t->n_part[MT_G2P_VALID];
    t->max_len = tgt;
    cfg->src_ctx = src;
    cfg->tgt_ctx = tgt;
    cfg->n_vocab = mt_g2p_vocab_size(&d->vocab);
    return mt_encdec_config_validate(cfg, err);
}

static void task_free(mt_task *tp) {
    encdec_task *t = (encdec_task *)tp;
    if (!t) return;
    mt_g2p_free(&t->dict);
    free(t->split);
    free(t->ex);
    free(t->bucket);
    free(t->drawn);
    free(t);
}

static void task_describe(const mt_task *tp, char *buf, size_t len) {
    const encdec_task *t = (const encdec_task *)tp;
    const mt_g2p_dict *d = &t->dict;
    snprintf(buf, len,
             "%d words (%d pronunciations, %d letters, %d phones), train %d words (%d "
             "examples), valid %d, test %d",
             d->n_words, d->n_prons, d->vocab.n_letters, d->vocab.n_phones, t->n_part[MT_G2P_TRAIN],
             t->n_ex, t->n_part[MT_G2P_VALID], t->n_part[MT_G2P_TEST]);
}

static char *task_warning(const mt_task *tp) {
    const mt_g2p_dict *d = &((const encdec_task *)tp)->dict;
    if (!d->n_skipped) return NULL;
    char *w = malloc(256);
    if (w)
        snprintf(w, 256, "skipped %d line(s) that are no dictionary entry (line %s%s)\n",
                 d->n_skipped, d->skipped, d->n_skipped > 5 ? ", ..." : "");
    return w;
}

static char *task_meta(const mt_task *tp) {
    return mt_g2p_vocab_to_json(&((const encdec_task *)tp)->dict.vocab);
}

/* B training examples drawn with replacement from one length bucket, the bucket drawn with
   probability its share of the examples: every example is as likely as with B uniform draws. */
static void draw_batch(mt_task *tp, mt_rng *r) {
    encdec_task *t = (encdec_task *)tp;
    int e0 = (int)mt_rng_below(r, (uint32_t)t->n_ex), k = 0, hi = t->n_bucket;
    while (hi - k > 1) { /* the bucket holding e0: bucket[k] <= e0 < bucket[k + 1] */
        int mid = (k + hi) / 2;
        *(t->bucket[mid] <= e0 ? &k : &hi) = mid;
    }
    double tokens = 0;
    for (int b = 0; b < t->B; b++) {
        int e = t->drawn[b] = t->bucket[k] +
                              (int)mt_rng_below(r, (uint32_t)(t->bucket[k + 1] - t->bucket[k])),
            p = t->ex[2 * e + 1];
        tokens += t->dict.phone_start[p + 1] - t->dict.phone_start[p] + 1;
    }
    t->drawn_tokens = tokens;
}

const char *mt_encdec_drawn_word(const mt_task *tp, int b) {
    const encdec_task *t = (const encdec_task *)tp;
    return t->dict.words[t->ex[2 * t->drawn[b]]];
}

/* The mean cross-entropy over the batch's target tokens, as this slice's share: its summed
   loss / (n x the batch's mean tokens per row), so that the replicas' losses weighted by their
   rows (n / B) add up to the batch's per-token mean. */
static mt_tensor *rows_loss(mt_ctx *c, const mt_model *mp, mt_params *P, mt_task *tp, int lo,
                            int n) {
    encdec_task *t = (encdec_task *)tp;
    const mt_encdec *m = (const mt_encdec *)mp;
    int *wp = mt_arena_alloc(c, 2 * (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) memcpy(wp + 2 * i, t->ex + 2 * t->drawn[lo + i], 2 * sizeof(int));
    rows_ids r = make_rows(c, &t->dict, wp, n);
    mt_tensor *loss = mt_encdec_loss(c, m, P, r.src, r.src_len, r.S, r.tgt, r.targets, n, r.T,
                                     mt_stack_ce(&m->cfg.stack));
    return mt_scale(c, loss, (float)(r.tokens / (n * t->drawn_tokens / t->B)));
}

static int eval_count(const mt_task *tp) {
    const encdec_task *t = (const encdec_task *)tp;
    int all = (t->n_part[MT_G2P_VALID] + t->B - 1) / t->B;
    return all < t->eval_batches ? all : t->eval_batches;
}

static int eval_draw(mt_task *tp, int i) {
    encdec_task *t = (encdec_task *)tp;
    t->eval_at = i * t->B;
    return t->n_part[MT_G2P_VALID] - t->eval_at < t->B ? t->n_part[MT_G2P_VALID] - t->eval_at
                                                       : t->B;
}

void mt_encdec_tally(mt_ctx *c, const mt_encdec *m, const mt_g2p_dict *d, const int *words, int n,
                     int beam, mt_g2p_tally t[2]) {
    size_t mark = mt_arena_mark(c);
    int *wp = mt_arena_alloc(c, 2 * (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) wp[2 * i] = words[i], wp[2 * i + 1] = d->pron_start[words[i]];
    rows_ids r = make_rows(c, d, wp, n);
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

/* The loss of each word's first pronunciation (teacher forced) as a share of the mean tokens
   of a validation word (so that the evaluation's loss is per token), then the words decoded
   greedily: WER and PER with and without stress. On a budget of one thread, as decoding
   (encdec_infer.c):
   the evaluation's forward of 64 words, 3+3 layers of 256, took 1.3 s on two threads at load 6
   and 0.14 s on one. */
static void eval_rows(mt_ctx *c, const mt_model *mp, mt_task *tp, int lo, int n,
                      mt_eval_sums *sums) {
    int threads = c->threads;
    c->threads = 1; /* the context's budget: nothing process-wide */
    encdec_task *t = (encdec_task *)tp;
    const mt_encdec *m = (const mt_encdec *)mp;
    const mt_g2p_dict *d = &t->dict;
    const int *words = t->split + t->n_part[MT_G2P_TRAIN] + t->eval_at + lo;
    int *wp = mt_arena_alloc(c, 2 * (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) wp[2 * i] = words[i], wp[2 * i + 1] = d->pron_start[words[i]];
    rows_ids r = make_rows(c, d, wp, n);
    /* the plain cross-entropy, without the training's label smoothing and z-loss */
    double loss = mt_encdec_loss(c, m, mp->P, r.src, r.src_len, r.S, r.tgt, r.targets, n, r.T,
                                 MT_CE_PLAIN)
                      ->data[0];
    sums->loss += loss * r.tokens / t->val_tokens;
    mt_g2p_tally tally[2] = {{0}};
    mt_encdec_tally(c, m, d, words, n, 1, tally);
    for (int s = 0; s < 2; s++) { /* METRICS: wer, per, then without stress */
        sums->metric[2 * s][0] += tally[s].wrong, sums->metric[2 * s][1] += tally[s].words;
        sums->metric[2 * s + 1][0] += tally[s].edits,
            sums->metric[2 * s + 1][1] += tally[s].ref_len;
    }
    c->threads = threads;
}

/* The diagnostics' probe: B validation words drawn with seed (the same words for a seed), each
   with its first pronunciation teacher forced. */
static mt_batch probe_rows(mt_ctx *c, mt_task *tp, uint64_t seed, int B) {
    encdec_task *t = (encdec_task *)tp;
    const mt_g2p_dict *d = &t->dict;
    mt_rng r;
    mt_rng_seed(&r, seed);
    int *wp = mt_arena_alloc(c, 2 * (size_t)B * sizeof(int));
    for (int i = 0; i < B; i++) {
        int w = t->split[t->n_part[MT_G2P_TRAIN] +
                         (int)mt_rng_below(&r, (uint32_t)t->n_part[MT_G2P_VALID])];
        wp[2 * i] = w, wp[2 * i + 1] = d->pron_start[w];
    }
    rows_ids ids = make_rows(c, d, wp, B);
    return (mt_batch){.B = B,
                      .src = ids.src,
                      .src_len = ids.src_len,
                      .S = ids.S,
                      .ids = ids.tgt,
                      .targets = ids.targets,
                      .T = ids.T};
}

/* F (tokens, C): the decoder's final hidden state (what the head reads) at the target positions
   only (phones + eos of each row, no padding). resid gets the encoder's stream entering each of
   its blocks, then the decoder's entering each of its blocks and leaving the last:
   enc_layers + dec_layers + 1 values (the encoder's output is the decoder's memory, not its
   stream, so it has no entry). */
static mt_tensor *hidden(mt_ctx *c, const mt_model *mp, const mt_batch *b, double *resid) {
    const mt_encdec *m = (const mt_encdec *)mp;
    const mt_encdec_layout *L = m->layout;
    mt_params *P = mp->P;
    int B = b->B;
    mt_tensor *x = mt_encdec_embed(c, m, P, L->enc_pos, b->src, B, b->S, 0);
    x = mt_stack_forward_ex(c, &L->enc, P, x, b->src_len, NULL, resid);
    mt_cross_mem mem = {.mem = mt_stack_final(c, &L->enc, P, x), .mem_len = b->src_len};
    mt_tensor *y = mt_encdec_embed(c, m, P, L->dec_pos, b->ids, B, b->T, 0);
    y = mt_stack_forward_ex(c, &L->dec, P, y, NULL, &mem, resid ? resid + m->cfg.enc_layers : NULL);
    y = mt_stack_final(c, &L->dec, P, y);
    int *at = mt_arena_alloc(c, (size_t)B * b->T * sizeof(int)), n = 0;
    for (int i = 0; i < B * b->T; i++)
        if (b->targets[i] >= 0) at[n++] = i;
    return mt_embedding(c, mt_reshape(c, y, 2, (int[]){B * b->T, m->cfg.stack.n_embd}), at, n);
}

/* The block-effectiveness probe's skipped block: the encoder's first, then the decoder's. */
static void skip_block(mt_model *mp, int block) {
    mt_encdec_layout *L = ((mt_encdec *)mp)->layout;
    int N = L->enc.n_layer;
    L->enc.skip = block < N ? block : -1;
    L->dec.skip = block >= N ? block - N : -1;
}

static mt_tensor *loss(mt_ctx *c, const mt_model *m, mt_params *P, const mt_batch *b,
                       mt_ce_opts ce) {
    return mt_encdec_loss(c, (const mt_encdec *)m, P, b->src, b->src_len, b->S, b->ids, b->targets,
                          b->B, b->T, ce);
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

static int row_units(const void *model_cfg) { return (void)model_cfg, 1; }

const mt_task_type mt_g2p_task = {
    .name = "g2p",
    .data = "a pronunciation dictionary (CMUdict 0.4: apt-get install festlex-cmu, then "
            "/usr/share/festival/dicts/cmu/cmudict-0.4.out)",
    .data_file = false,
    .units = "words",
    .unit = "word",
    .row_units = row_units,
    .load = task_load,
    .free = task_free,
    .describe = task_describe,
    .warning = task_warning,
    .meta = task_meta,
    .draw_batch = draw_batch,
    .rows_loss = rows_loss,
    .eval_count = eval_count,
    .eval_draw = eval_draw,
    .eval_rows = eval_rows,
    .metrics = METRICS,
    .probe_rows = probe_rows,
};

const mt_model_type mt_encdec_type = {
    .name = "encdec",
    .about = "an encoder-decoder: grapheme-to-phoneme",
    .task = &mt_g2p_task,
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
    .hidden = hidden,
    .skip_block = skip_block,
    .g2p = &G2P_OPS,
};
