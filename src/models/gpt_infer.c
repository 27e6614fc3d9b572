/* GPT inference: scoring a text, the KV cache and token sampling. Scoring: B windows a batch of
   T = n_ctx positions. Generation: B = 1; n new tokens at positions pos0..pos0+n-1 of the window;
   C = NH * HS; L = pos0 + n positions attended. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_internal.h"

/* ---- scoring ------------------------------------------------------------------------------- */

/* Batch b: windows [b B, b B + rows) as rows of (rows, T) ids and targets; a shorter last window
   is padded with token 0, whose targets are ignored (-1): causal attention keeps the pad out of
   the real positions, so the row's loss is the window's own. Its summed NLL. */
static double score_batch(mt_ctx *c, mt_gpt *m, const uint16_t *tok, size_t n, size_t b,
                          size_t windows) {
    int T = m->cfg.n_ctx, B = MT_GPT_SCORE_BATCH;
    size_t W = (size_t)T + 1, w0 = b * (size_t)B;
    int rows = windows - w0 < (size_t)B ? (int)(windows - w0) : B, M = 0;
    mt_ctx_reset(c);
    int *ids = mt_arena_alloc(c, 2 * (size_t)rows * T * sizeof *ids), *targets = ids + rows * T;
    for (int r = 0; r < rows; r++) {
        size_t start = (w0 + (size_t)r) * W;
        int len = n - start < W ? (int)(n - start) : (int)W; /* >= 2 */
        for (int t = 0; t < T; t++) {
            bool real = t < len - 1;
            ids[r * T + t] = real ? tok[start + (size_t)t] : 0;
            targets[r * T + t] = real ? tok[start + (size_t)t + 1] : -1;
            M += real;
        }
    }
    /* the mean over the M targets, back to a sum */
    return (double)mt_gpt_loss(c, m, &m->P, ids, targets, rows, T, MT_CE_PLAIN)->data[0] * M;
}

mt_status mt_gpt_score(mt_gpt *m, const uint16_t *tok, size_t n, int precision, double *nll,
                       long *count, long *bytes, mt_err *err) {
    size_t W = (size_t)m->cfg.n_ctx + 1, B = MT_GPT_SCORE_BATCH;
    MT_ASSERT(n >= 2, "gpt score: %zu tokens, nothing to predict", n);
    size_t windows = (n - 2) / W + 1, batches = (windows + B - 1) / B;
    *count = 0;
    *bytes = 0;
    for (size_t i = 1; i < n; i++) /* every token but the windows' first is predicted */
        if (i % W) {
            int nb;
            mt_tok_decode(&m->tok, tok[i], &nb);
            *bytes += nb;
            ++*count;
        }
    /* a thread a context, each scoring whole batches with single-threaded kernels; with one
       batch or one thread, one context whose ops split across the threads */
    int k = batches < (size_t)mt_threads() ? (int)batches : mt_threads();
    mt_ctx *ctx = calloc((size_t)k, sizeof *ctx);
    double *sums = malloc(batches * sizeof *sums);
    mt_status s = ctx && sums ? MT_OK
                              : mt_errorf(err, MT_ENOMEM, "out of memory for %zu batches", batches);
    size_t arena = mt_model_arena_bytes(m->base.type, &m->cfg, (int)B, false);
    for (int i = 0; i < k && s == MT_OK; i++)
        if ((s = mt_ctx_init(&ctx[i], arena, 0, err)) == MT_OK) {
            ctx[i].training = false;
            ctx[i].grad_enabled = false;
            ctx[i].precision = precision;
        }
    if (s == MT_OK && k == 1)
        for (size_t b = 0; b < batches; b++) sums[b] = score_batch(ctx, m, tok, n, b, windows);
    else if (s == MT_OK) {
#pragma omp parallel for num_threads(k) schedule(dynamic, 1)
        for (size_t b = 0; b < batches; b++)
            sums[b] = score_batch(&ctx[omp_get_thread_num()], m, tok, n, b, windows);
    }
    *nll = 0;
    for (size_t b = 0; s == MT_OK && b < batches; b++) *nll += sums[b]; /* in window order */
    for (int i = 0; ctx && i < k; i++)
        if (ctx[i].arena.base) mt_ctx_free(&ctx[i]);
    free(ctx);
    free(sums);
    return s;
}

/* ---- generation ------------------------------------------------------------------------------ */

mt_status mt_kv_init(mt_kv_cache *kv, mt_gpt *m, bool no_cache, mt_err *err) {
    memset(kv, 0, sizeof *kv);
    kv->m = m;
    kv->no_cache = no_cache;
    const mt_stack_config *sc = &m->cfg.stack;
    int T = m->cfg.n_ctx, KC = sc->n_embd / sc->n_head * sc->n_kv_head; /* keys' channels */
    kv->ids = malloc((size_t)T * sizeof *kv->ids);
    kv->logits = malloc((size_t)m->cfg.n_vocab * sizeof *kv->logits);
    if (!kv->ids || !kv->logits) {
        mt_kv_free(kv);
        return mt_errorf(err, MT_ENOMEM, "out of memory for a window of %d tokens", T);
    }
    mt_status s = mt_attn_cache_alloc(&kv->cache, sc->n_layer, 1, T, KC, err);
    if (s == MT_OK)
        s = mt_ctx_init(&kv->ctx, mt_model_arena_bytes(m->base.type, &m->cfg, 1, false), 0, err);
    if (s != MT_OK) {
        mt_kv_free(kv);
        return s;
    }
    kv->ctx.training = false;
    kv->ctx.grad_enabled = false;
    return MT_OK;
}

void mt_kv_free(mt_kv_cache *kv) {
    free(kv->ids);
    free(kv->logits);
    mt_attn_cache_free(&kv->cache);
    if (kv->ctx.arena.base) mt_ctx_free(&kv->ctx);
    memset(kv, 0, sizeof *kv);
}

/* Runs the window's tokens [pos0, len) through the model; the last one's logits -> kv->logits. */
static void run(mt_kv_cache *kv, int pos0) {
    mt_gpt *m = kv->m;
    mt_ctx *c = &kv->ctx;
    int n = kv->len - pos0, V = m->cfg.n_vocab;
    mt_ctx_reset(c);
    mt_tensor *logits;
    if (kv->no_cache) {
        logits = mt_gpt_forward(c, m, &m->P, kv->ids, 1, kv->len);
    } else { /* the new tokens through the blocks, attending over the cache */
        const mt_stack *st = &m->layout->stack;
        mt_tensor *x = mt_gpt_embed(c, m, &m->P, kv->ids + pos0, 1, n, pos0);
        kv->cache.len = pos0;
        mt_block_cfg block = st->block;
        mt_tensor *v1 = NULL; /* the value residual's first values */
        const mt_value_embed *ve = mt_gpt_value_embeds(c, m, &m->P, kv->ids + pos0, 1, n);
        x = mt_stack_streams(c, st, x);
        mt_stack_carry carry = mt_stack_carry_begin(c, st, x);
        for (int l = 0; l < st->n_layer; l++) {
            const mt_block_params *bp = &st->blocks[l];
            mt_cache_arg arg = {.kv = &kv->cache, .layer = l, .v1 = &v1, .ve = ve ? &ve[l] : NULL};
            block.layer = l;
            x = mt_stack_block_input(c, st, &m->P, l, x, &carry);
            x = mt_residual(c, &block, &m->P, bp, MT_SUB_ATTN, x, mt_attn_sublayer_cached, &arg);
            x = mt_residual(c, &block, &m->P, bp, MT_SUB_FFN, x, mt_ffn_sublayer, NULL);
            mt_stack_block_output(st, l, x, &carry);
        }
        kv->cache.len = kv->len;
        logits = mt_gpt_head(c, m, &m->P, mt_stack_streams_sum(c, st, x));
    }
    memcpy(kv->logits, logits->data + logits->n - (size_t)V, (size_t)V * sizeof(float));
}

void mt_kv_feed(mt_kv_cache *kv, const int *ids, int n) {
    int T = kv->m->cfg.n_ctx;
    MT_ASSERT(n >= 1, "kv: feed of %d tokens", n);
    if (kv->len + n <= T) {
        memcpy(kv->ids + kv->len, ids, (size_t)n * sizeof *ids);
        kv->len += n;
        run(kv, kv->len - n);
        return;
    }
    /* slide: the last W tokens of window ++ ids, recomputed from position 0 */
    int W = n > T / 2 ? (n < T ? n : T) : (T / 2 > 0 ? T / 2 : 1);
    int from_ids = W < n ? W : n, from_window = W - from_ids;
    memmove(kv->ids, kv->ids + kv->len - from_window, (size_t)from_window * sizeof *ids);
    memcpy(kv->ids + from_window, ids + n - from_ids, (size_t)from_ids * sizeof *ids);
    kv->len = W;
    run(kv, 0);
}

/* ids by decreasing p[id], ties by increasing id (qsort_r's argument: p) */
static int cmp_desc(const void *a, const void *b, void *p) {
    int i = *(const int *)a, j = *(const int *)b;
    float u = ((const float *)p)[i], v = ((const float *)p)[j];
    return u > v ? -1 : u < v ? 1 : (i > j) - (i < j);
}

int mt_sample_token(const float *logits, int V, const mt_sampling *s, mt_rng *r, float *pscratch,
                    int *iscratch) {
    int best = 0;
    for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
    if (s->temperature <= 0) return best;
    /* p_i = exp((l_i - max) / temperature), then the candidates by decreasing probability */
    float *p = pscratch;
    int *idx = iscratch;
    for (int i = 0; i < V; i++) {
        p[i] = expf((logits[i] - logits[best]) / s->temperature);
        idx[i] = i;
    }
    qsort_r(idx, (size_t)V, sizeof *idx, cmp_desc, p);
    int n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    double total = 0;
    for (int i = 0; i < n; i++) total += p[idx[i]];
    if (s->top_p < 1) { /* the shortest prefix whose mass reaches top_p of the kept mass */
        double acc = 0;
        int keep = 0;
        while (keep < n && acc < s->top_p * total) acc += p[idx[keep++]];
        n = keep > 0 ? keep : 1;
        total = acc > 0 ? acc : p[idx[0]];
    }
    double u = (double)mt_rng_uniform(r) * total, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += p[idx[i]];
        if (u < acc) return idx[i];
    }
    return idx[n - 1];
}
