/* The text task: next-token prediction on a text, a token file or a set of token shards (data.h),
   for a model taking tokens. Windows of T = n_ctx tokens (the model's input.n_ctx) drawn at
   random from the training part; validation on the same eval_batches x B windows of the held-out
   part every time. B T as in nn.h. */
#include <stdio.h>
#include <stdlib.h>

#include "task.h"

#define SEED_EVAL 0x4556414c5549414eULL /* the validation windows */

typedef struct {
    mt_task base;
    mt_tokenizer tok;
    mt_tokens all, train, val;
    int B, T, eval_batches;
    uint64_t seed;
    int *x, *y;      /* (B, T) the drawn batch: inputs and next tokens */
    mt_sampler eval; /* the validation windows' draws */
} text_task;

static mt_status load(mt_task **tp, const mt_data_cfg *d, const mt_model_type *model, void *cfg,
                      mt_err *err) {
    text_task *t = calloc(1, sizeof *t);
    if (!t) return mt_errorf(err, MT_ENOMEM, "out of memory");
    *tp = &t->base;
    t->base.type = &mt_text_task;
    t->B = d->batch;
    t->T = mt_input_get(cfg, model->input->n_ctx);
    t->eval_batches = d->eval_batches;
    t->seed = d->seed;
    mt_text_cfg tc = {.kind = d->tokenizer,
                      .vocab_size = d->vocab_size,
                      .val_fraction = d->val_fraction,
                      .data_vocab = d->data_vocab,
                      .tokenizer_file = d->tokenizer_file,
                      .tokenizer_json = d->tokenizer_json};
    mt_status s = mt_data_load(d->path, &tc, &t->tok, &t->all, err);
    if (s != MT_OK) return s;
    mt_input_set(cfg, model->input->n_vocab, t->tok.n_vocab);
    if ((s = model->config_validate(cfg, err)) != MT_OK ||
        (s = mt_tokens_split(&t->all, t->T, &t->train, &t->val, err)) != MT_OK)
        return s;
    size_t n = (size_t)d->batch * (size_t)t->T; /* the whole batch: every rank draws it */
    t->x = malloc(n * sizeof *t->x);
    t->y = malloc(n * sizeof *t->y);
    if (!t->x || !t->y)
        return mt_errorf(err, MT_ENOMEM, "out of memory for a batch of %zu tokens", n);
    return MT_OK;
}

static void task_free(mt_task *tp) {
    text_task *t = (text_task *)tp;
    if (!t) return;
    mt_tok_free(&t->tok);
    mt_tokens_free(&t->train);
    mt_tokens_free(&t->val);
    mt_tokens_free(&t->all);
    free(t->x);
    free(t->y);
    free(t);
}

static void describe(const mt_task *tp, char *buf, size_t len) {
    const text_task *t = (const text_task *)tp;
    int n = snprintf(buf, len, "%zu tokens (%s tokenizer, vocabulary %d), train %zu, val %zu",
                     t->all.n, mt_enum_name(&MT_TOKENIZERS, t->tok.kind), t->tok.n_vocab,
                     t->train.n, t->val.n);
    if (t->all.n_span > 1 && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " in %d shards (mapped)", t->all.n_span);
}

static char *meta(const mt_task *tp) { return mt_tok_to_json(&((const text_task *)tp)->tok); }

int mt_text_row_units(const mt_model_type *model, const void *cfg) {
    return mt_input_get(cfg, model->input->n_ctx);
}

static void draw_batch(mt_task *tp, mt_rng *r) {
    text_task *t = (text_task *)tp;
    mt_sampler s = {.rng = *r};
    mt_sampler_next(&s, &t->train, t->B, t->T, t->x, t->y);
    *r = s.rng;
}

/* Rows [lo, lo + n) of the drawn batch. */
static mt_batch rows(const text_task *t, int lo, int n) {
    size_t at = (size_t)lo * (size_t)t->T;
    return mt_token_batch(t->x + at, t->y + at, t->T, n);
}

static mt_tensor *rows_loss(mt_ctx *c, const mt_model *m, mt_params *P, mt_task *tp, int lo,
                            int n) {
    mt_batch b = rows((const text_task *)tp, lo, n);
    return m->type->loss(c, m, P, &b, mt_stack_ce(mt_config_stack(m->cfg)));
}

static int eval_count(const mt_task *tp) {
    const text_task *t = (const text_task *)tp;
    return t->val.n ? t->eval_batches : 0;
}

static int eval_draw(mt_task *tp, int i) {
    text_task *t = (text_task *)tp;
    if (i == 0) mt_sampler_init(&t->eval, t->seed ^ SEED_EVAL); /* the same windows every time */
    mt_sampler_next(&t->eval, &t->val, t->B, t->T, t->x, t->y);
    return t->B;
}

static void eval_rows(mt_ctx *c, const mt_model *m, mt_task *tp, int lo, int n, mt_eval_sums *s) {
    mt_batch b = rows((const text_task *)tp, lo, n);
    /* the plain cross-entropy, without the training's label smoothing */
    s->loss += (double)m->type->loss(c, m, m->P, &b, MT_CE_PLAIN)->data[0] * n;
}

/* B windows of the validation part (of the training part when it is too short), the same for a
   seed. */
static mt_batch probe_rows(mt_ctx *c, mt_task *tp, uint64_t seed, int B) {
    text_task *t = (text_task *)tp;
    int *ids = mt_arena_alloc(c, 2 * (size_t)B * t->T * sizeof *ids);
    const mt_tokens *src = t->val.n > (size_t)t->T ? &t->val : &t->train;
    mt_sampler s;
    mt_sampler_init(&s, seed);
    mt_sampler_next(&s, src, B, t->T, ids, ids + (size_t)B * t->T);
    return mt_token_batch(ids, ids + (size_t)B * t->T, t->T, B);
}

const mt_task_type mt_text_task = {
    .name = "text",
    .input = MT_INPUT_TOKENS,
    .data = "a text or token file, or a directory or glob of token shards",
    .data_file = true,
    .units = "tokens",
    .unit = "tok",
    .row_units = mt_text_row_units,
    .unit_bytes = 2 * sizeof(int),
    .load = load,
    .free = task_free,
    .describe = describe,
    .meta = meta,
    .draw_batch = draw_batch,
    .rows_loss = rows_loss,
    .eval_count = eval_count,
    .eval_draw = eval_draw,
    .eval_rows = eval_rows,
    .eval_concurrent = true,
    .probe_rows = probe_rows,
    .infer = &mt_text_infer,
};
