/* The G2P task: pronunciations of words from a dictionary (data.h's mt_g2p_dict), for a model
   taking sequence pairs (which transduces them: its g2p ops). Training examples drawn from length
   buckets; evaluation on the validation words: the loss per token, and WER and PER with and
   without stress of their greedy decoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "task.h"

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
} g2p_task;

/* The model's batch of n rows r. */
static mt_batch pairs(const mt_g2p_rows *r, int n) {
    return (mt_batch){.kind = MT_INPUT_PAIRS,
                      .B = n,
                      .pairs = {.S = r->S,
                                .T = r->T,
                                .src = r->src,
                                .src_len = r->src_len,
                                .ids = r->tgt,
                                .targets = r->targets}};
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
static mt_status make_buckets(g2p_task *t, mt_err *err) {
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

static mt_status task_load(mt_task **tp, const mt_data_cfg *dc, const mt_model_type *model,
                           void *cfg, mt_err *err) {
    const mt_input *in = model->input;
    g2p_task *t = calloc(1, sizeof *t);
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
    mt_input_set(cfg, in->src_ctx, src);
    mt_input_set(cfg, in->tgt_ctx, tgt);
    mt_input_set(cfg, in->n_vocab, mt_g2p_vocab_size(&d->vocab));
    return model->config_validate(cfg, err);
}

static void task_free(mt_task *tp) {
    g2p_task *t = (g2p_task *)tp;
    if (!t) return;
    mt_g2p_free(&t->dict);
    free(t->split);
    free(t->ex);
    free(t->bucket);
    free(t->drawn);
    free(t);
}

static void task_describe(const mt_task *tp, char *buf, size_t len) {
    const g2p_task *t = (const g2p_task *)tp;
    const mt_g2p_dict *d = &t->dict;
    snprintf(buf, len,
             "%d words (%d pronunciations, %d letters, %d phones), train %d words (%d "
             "examples), valid %d, test %d",
             d->n_words, d->n_prons, d->vocab.n_letters, d->vocab.n_phones, t->n_part[MT_G2P_TRAIN],
             t->n_ex, t->n_part[MT_G2P_VALID], t->n_part[MT_G2P_TEST]);
}

static char *task_warning(const mt_task *tp) {
    const mt_g2p_dict *d = &((const g2p_task *)tp)->dict;
    if (!d->n_skipped) return NULL;
    char *w = malloc(256);
    if (w)
        snprintf(w, 256, "skipped %d line(s) that are no dictionary entry (line %s%s)\n",
                 d->n_skipped, d->skipped, d->n_skipped > 5 ? ", ..." : "");
    return w;
}

static char *task_meta(const mt_task *tp) {
    return mt_g2p_vocab_to_json(&((const g2p_task *)tp)->dict.vocab);
}

/* B training examples drawn with replacement from one length bucket, the bucket drawn with
   probability its share of the examples: every example is as likely as with B uniform draws. */
static void draw_batch(mt_task *tp, mt_rng *r) {
    g2p_task *t = (g2p_task *)tp;
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

const char *mt_g2p_task_drawn_word(const mt_task *tp, int b) {
    const g2p_task *t = (const g2p_task *)tp;
    return t->dict.words[t->ex[2 * t->drawn[b]]];
}

/* The mean cross-entropy over the batch's target tokens, as this slice's share: its summed
   loss / (n x the batch's mean tokens per row), so that the replicas' losses weighted by their
   rows (n / B) add up to the batch's per-token mean. */
static mt_tensor *rows_loss(mt_ctx *c, const mt_model *m, mt_params *P, mt_task *tp, int lo,
                            int n) {
    g2p_task *t = (g2p_task *)tp;
    int *wp = mt_arena_alloc(c, 2 * (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) memcpy(wp + 2 * i, t->ex + 2 * t->drawn[lo + i], 2 * sizeof(int));
    mt_g2p_rows r = mt_g2p_rows_of(c, &t->dict, wp, n);
    mt_batch b = pairs(&r, n);
    mt_tensor *loss = m->type->loss(c, m, P, &b, mt_stack_ce(mt_config_stack(m->cfg)));
    return mt_scale(c, loss, (float)(r.tokens / (n * t->drawn_tokens / t->B)));
}

static int eval_count(const mt_task *tp) {
    const g2p_task *t = (const g2p_task *)tp;
    int all = (t->n_part[MT_G2P_VALID] + t->B - 1) / t->B;
    return all < t->eval_batches ? all : t->eval_batches;
}

static int eval_draw(mt_task *tp, int i) {
    g2p_task *t = (g2p_task *)tp;
    t->eval_at = i * t->B;
    return t->n_part[MT_G2P_VALID] - t->eval_at < t->B ? t->n_part[MT_G2P_VALID] - t->eval_at
                                                       : t->B;
}

/* The loss of each word's first pronunciation (teacher forced) as a share of the mean tokens
   of a validation word (so that the evaluation's loss is per token), then the words decoded
   greedily (the model's tally): WER and PER with and without stress. On a budget of one thread,
   as decoding: at this size the fork and join of every op cost a second thread more than it
   saves. */
static void eval_rows(mt_ctx *c, const mt_model *m, mt_task *tp, int lo, int n,
                      mt_eval_sums *sums) {
    int threads = c->threads;
    c->threads = 1; /* the context's budget: nothing process-wide */
    g2p_task *t = (g2p_task *)tp;
    const mt_g2p_dict *d = &t->dict;
    const int *words = t->split + t->n_part[MT_G2P_TRAIN] + t->eval_at + lo;
    int *wp = mt_arena_alloc(c, 2 * (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) wp[2 * i] = words[i], wp[2 * i + 1] = d->pron_start[words[i]];
    mt_g2p_rows r = mt_g2p_rows_of(c, d, wp, n);
    /* the plain cross-entropy, without the training's label smoothing and z-loss */
    mt_batch b = pairs(&r, n);
    double loss = m->type->loss(c, m, m->P, &b, MT_CE_PLAIN)->data[0];
    sums->loss += loss * r.tokens / t->val_tokens;
    mt_g2p_tally tally[2] = {{0}};
    m->type->g2p->tally(c, m, d, words, n, 1, tally);
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
    g2p_task *t = (g2p_task *)tp;
    const mt_g2p_dict *d = &t->dict;
    mt_rng r;
    mt_rng_seed(&r, seed);
    int *wp = mt_arena_alloc(c, 2 * (size_t)B * sizeof(int));
    for (int i = 0; i < B; i++) {
        int w = t->split[t->n_part[MT_G2P_TRAIN] +
                         (int)mt_rng_below(&r, (uint32_t)t->n_part[MT_G2P_VALID])];
        wp[2 * i] = w, wp[2 * i + 1] = d->pron_start[w];
    }
    mt_g2p_rows rows = mt_g2p_rows_of(c, d, wp, B);
    return pairs(&rows, B);
}

const mt_task_type mt_g2p_task = {
    .name = "g2p",
    .input = MT_INPUT_PAIRS,
    .data = "a pronunciation dictionary (CMUdict 0.4: apt-get install festlex-cmu, then "
            "/usr/share/festival/dicts/cmu/cmudict-0.4.out)",
    .data_file = false,
    .units = "words",
    .unit_bytes = sizeof(int),
    .unit = "word",
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
    .infer = &mt_g2p_infer,
};
