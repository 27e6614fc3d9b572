/* The instruction-tuning task (--task sft): conversations from a JSONL file, each line a
   {"prompt": ..., "response": ...} pair or {"messages": [{"role": ..., "content": ...}, ...]},
   written with mt's chat template (data.h) and trained on the assistants' tokens alone (the other
   targets -1: ignored), for a model taking tokens. A row is one conversation, padded to T = n_ctx
   (inputs 0, targets -1). The loss is the mean over the batch's trained tokens, as torch's
   F.cross_entropy(ignore_index=-1) of the whole batch; validation on the last val_fraction of
   the conversations, in order. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "task.h"

typedef struct {
    mt_task base;
    mt_tokenizer tok;
    uint16_t *ids;    /* the conversations' tokens, conversation e at [off[e], off[e + 1]) */
    uint8_t *trained; /* 1: an assistant's token, a target the loss counts */
    size_t *off;
    int n, n_train; /* conversations; the first n_train train */
    int B, T, eval_batches;
    long tokens, trained_tokens;
    int *drawn;           /* (B) the drawn batch's conversations */
    int *x, *y;           /* (B, T) its rows */
    double drawn_trained; /* trained targets in the drawn batch */
    double eval_trained;  /* per evaluated row: the mean trained targets of the evaluated ones */
} sft_task;

/* ---- reading the conversations --------------------------------------------------------------- */

#define FORMS                                                                                      \
    "expected {\"prompt\": TEXT, \"response\": TEXT} or {\"messages\": [{\"role\": \"system\", "   \
    "\"user\" or \"assistant\", \"content\": TEXT}, ...]} with an assistant's turn"

/* The turns of one line's object (pointing into it); -1 when it is not one of FORMS. */
static int turns_of(const cJSON *o, mt_chat_turn *turns, int cap) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt"),
                *r = cJSON_GetObjectItemCaseSensitive(o, "response"),
                *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages"), *m;
    if (cJSON_IsString(p) && cJSON_IsString(r) && !msgs) {
        turns[0] = (mt_chat_turn){MT_CHAT_USER, p->valuestring, strlen(p->valuestring)};
        turns[1] = (mt_chat_turn){MT_CHAT_ASSISTANT, r->valuestring, strlen(r->valuestring)};
        return r->valuestring[0] ? 2 : -1;
    }
    int n = 0;
    bool said = false;
    if (!cJSON_IsArray(msgs) || p || r) return -1;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                    *text = cJSON_GetObjectItemCaseSensitive(m, "content");
        int k = cJSON_IsString(role) ? mt_chat_role_of(role->valuestring) : -1;
        if (k < 0 || !cJSON_IsString(text) || n == cap) return -1;
        turns[n++] = (mt_chat_turn){(mt_chat_role)k, text->valuestring, strlen(text->valuestring)};
        said |= k == MT_CHAT_ASSISTANT && text->valuestring[0];
    }
    return said ? n : -1;
}

enum { MAX_TURNS = 256 };

/* Each non-blank line of text parsed (lines[i] its line number), or the line that is not one of
   FORMS named. */
static mt_status parse_lines(char *text, const char *path, cJSON ***objs, int **lines, int *n,
                             mt_err *err) {
    int cap = 1;
    for (const char *c = text; *c; c++) cap += *c == '\n';
    *objs = calloc((size_t)cap, sizeof **objs), *lines = malloc((size_t)cap * sizeof **lines);
    if (!*objs || !*lines) return mt_errorf(err, MT_ENOMEM, "out of memory");
    *n = 0;
    mt_chat_turn turns[MAX_TURNS];
    int at = 0;
    for (char *l = text, *next; l; l = next, at++) {
        next = strchr(l, '\n');
        if (next) *next++ = 0;
        if (strspn(l, " \t\r") == strlen(l)) continue;
        cJSON *o = cJSON_Parse(l);
        if (!o || turns_of(o, turns, MAX_TURNS) < 0) {
            cJSON_Delete(o);
            return mt_errorf(err, MT_EFORMAT, "%s:%d: %s (at most %d turns)", path, at + 1,
                             o ? FORMS : "not a JSON object: " FORMS, MAX_TURNS);
        }
        (*objs)[*n] = o, (*lines)[(*n)++] = at + 1;
    }
    return *n ? MT_OK
              : mt_errorf(err, MT_EINVAL, "%s holds no conversation: %s, one a line", path, FORMS);
}

/* The training conversations' text as the template writes it: what char and bpe learn. */
static char *template_text(cJSON **objs, int n, size_t *len) {
    size_t cap = 1 << 16;
    char *s = malloc(cap);
    *len = 0;
    mt_chat_turn turns[MAX_TURNS];
    static const char *const HEAD[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};
    for (int e = 0; s && e < n; e++) {
        int k = turns_of(objs[e], turns, MAX_TURNS);
        for (int i = 0; s && i < k; i++) {
            size_t need = *len + turns[i].len + 64;
            if (need > cap) s = realloc(s, cap = 2 * need);
            if (!s) break;
            *len += (size_t)snprintf(s + *len, cap - *len, "%s%.*s%s\n", HEAD[turns[i].role],
                                     (int)turns[i].len, turns[i].text,
                                     turns[i].role == MT_CHAT_ASSISTANT ? MT_CHAT_END : "");
        }
    }
    return s;
}

/* Every conversation encoded into t->ids and t->trained; one longer than T + 1 tokens is
   refused, naming its line. */
static mt_status encode_all(sft_task *t, cJSON **objs, const int *lines, const char *path,
                            mt_err *err) {
    mt_chat_turn turns[MAX_TURNS];
    size_t room = 0;
    for (int e = 0; e < t->n; e++) room += mt_chat_room(turns, turns_of(objs[e], turns, MAX_TURNS));
    t->ids = malloc(room * sizeof *t->ids);
    t->trained = malloc(room);
    t->off = malloc(((size_t)t->n + 1) * sizeof *t->off);
    if (!t->ids || !t->trained || !t->off) return mt_errorf(err, MT_ENOMEM, "out of memory");
    t->off[0] = 0;
    for (int e = 0; e < t->n; e++) {
        size_t n, at = t->off[e];
        mt_err e2;
        int k = turns_of(objs[e], turns, MAX_TURNS);
        if (mt_chat_encode(&t->tok, turns, k, false, t->ids + at, t->trained + at, &n, &e2))
            return mt_errorf(err, MT_EINVAL, "%s:%d: %s", path, lines[e], e2.msg);
        if (n > (size_t)t->T + 1)
            return mt_errorf(err, MT_EINVAL,
                             "%s:%d: the conversation is %zu tokens with the chat template; a row "
                             "holds n_ctx + 1 = %d (--n-ctx %d, or shorten it)",
                             path, lines[e], n, t->T + 1, t->T);
        long trained = 0;
        for (size_t i = 1; i < n; i++) trained += t->trained[at + i];
        if (!trained)
            return mt_errorf(err, MT_EINVAL, "%s:%d: the assistant's reply encodes to no token",
                             path, lines[e]);
        t->tokens += (long)n, t->trained_tokens += trained;
        t->off[e + 1] = at + n;
    }
    return MT_OK;
}

static mt_status load(mt_task **tp, const mt_data_cfg *d, const mt_model_type *model, void *cfg,
                      mt_err *err) {
    sft_task *t = calloc(1, sizeof *t);
    if (!t) return mt_errorf(err, MT_ENOMEM, "out of memory");
    *tp = &t->base;
    t->base.type = &mt_sft_task;
    t->B = d->batch;
    t->T = mt_input_get(cfg, model->input->n_ctx);
    t->eval_batches = d->eval_batches;
    if (d->tokenizer == MT_TOK_IDS)
        return mt_errorf(err, MT_EINVAL,
                         "--task sft encodes text: --tokenizer byte, char, bpe, sp or gpt2, not "
                         "ids");
    if ((d->tokenizer == MT_TOK_SP || d->tokenizer == MT_TOK_GPT2) && !d->tokenizer_file[0])
        return mt_errorf(err, MT_EINVAL, "--tokenizer %s needs --tokenizer-file",
                         mt_enum_name(&MT_TOKENIZERS, d->tokenizer));
    if (!(d->val_fraction >= 0 && d->val_fraction < 1))
        return mt_errorf(err, MT_EINVAL, "--val-fraction %g: expected a fraction in [0, 1)",
                         d->val_fraction);
    char *text;
    size_t len;
    cJSON **objs = NULL;
    int *lines = NULL;
    mt_status s = mt_file_read("--data", d->path, &text, &len, err);
    if (s == MT_OK) s = parse_lines(text, d->path, &objs, &lines, &t->n, err);
    if (s == MT_OK) {
        int val = (int)(t->n * d->val_fraction);
        t->n_train = t->n - (val || t->n < 2 || d->val_fraction == 0 ? val : 1);
        size_t tlen, learn;
        char *all = template_text(objs, t->n, &tlen),
             *train = template_text(objs, t->n_train, &learn);
        mt_text_cfg tc = {.kind = d->tokenizer,
                          .vocab_size = d->vocab_size,
                          .tokenizer_file = d->tokenizer_file,
                          .tokenizer_json = d->tokenizer_json};
        /* char's alphabet from every conversation, bpe's merges from the training ones */
        s = !all || !train ? mt_errorf(err, MT_ENOMEM, "out of memory")
            : d->tokenizer == MT_TOK_BPE
                ? mt_tok_for_text(&tc, train, learn, learn, d->path, &t->tok, err)
                : mt_tok_for_text(&tc, all, tlen, tlen, d->path, &t->tok, err);
        free(all), free(train);
    }
    t->tok.chat = true;
    if (s == MT_OK) s = encode_all(t, objs, lines, d->path, err);
    for (int e = 0; objs && e < t->n; e++) cJSON_Delete(objs[e]);
    free(objs), free(lines), free(text);
    if (s != MT_OK) return s;
    mt_input_set(cfg, model->input->n_vocab, t->tok.n_vocab);
    if ((s = model->config_validate(cfg, err)) != MT_OK) return s;
    size_t n = (size_t)t->B * (size_t)t->T;
    t->x = malloc(n * sizeof *t->x), t->y = malloc(n * sizeof *t->y);
    t->drawn = malloc((size_t)t->B * sizeof *t->drawn);
    if (!t->x || !t->y || !t->drawn) return mt_errorf(err, MT_ENOMEM, "out of memory");
    long evaluated = 0, trained = 0;
    for (int e = t->n_train; e < t->n && e - t->n_train < t->B * t->eval_batches; e++, evaluated++)
        for (size_t i = t->off[e] + 1; i < t->off[e + 1]; i++) trained += t->trained[i];
    t->eval_trained = evaluated ? (double)trained / evaluated : 0;
    return MT_OK;
}

static void task_free(mt_task *tp) {
    sft_task *t = (sft_task *)tp;
    if (!t) return;
    mt_tok_free(&t->tok);
    free(t->ids), free(t->trained), free(t->off), free(t->drawn), free(t->x), free(t->y);
    free(t);
}

static void describe(const mt_task *tp, char *buf, size_t len) {
    const sft_task *t = (const sft_task *)tp;
    snprintf(buf, len,
             "%d conversations, %ld tokens (%ld trained: the assistants'; %s tokenizer, "
             "vocabulary %d), train %d, val %d",
             t->n, t->tokens, t->trained_tokens, mt_enum_name(&MT_TOKENIZERS, t->tok.kind),
             t->tok.n_vocab, t->n_train, t->n - t->n_train);
}

static char *meta(const mt_task *tp) { return mt_tok_to_json(&((const sft_task *)tp)->tok); }

/* Row b of x, y: conversation e, padded; returns its trained targets. */
static int fill_row(const sft_task *t, int e, int *x, int *y) {
    int n = (int)(t->off[e + 1] - t->off[e]) - 1, trained = 0; /* predictions */
    const uint16_t *ids = t->ids + t->off[e];
    const uint8_t *tr = t->trained + t->off[e];
    for (int i = 0; i < t->T; i++) {
        x[i] = i < n ? ids[i] : 0;
        y[i] = i < n && tr[i + 1] ? ids[i + 1] : -1;
        trained += y[i] >= 0;
    }
    return trained;
}

static void draw_batch(mt_task *tp, mt_rng *r) {
    sft_task *t = (sft_task *)tp;
    t->drawn_trained = 0;
    for (int b = 0; b < t->B; b++) {
        t->drawn[b] = (int)mt_rng_below(r, (uint32_t)t->n_train);
        t->drawn_trained += fill_row(t, t->drawn[b], t->x + (size_t)b * t->T,
                                     t->y + (size_t)b * t->T);
    }
}

static mt_batch rows(const sft_task *t, int lo, int n) {
    size_t at = (size_t)lo * (size_t)t->T;
    return mt_token_batch(t->x + at, t->y + at, t->T, n);
}

/* Trained targets in rows [lo, lo + n) of x, y. */
static double trained_in(const sft_task *t, int lo, int n) {
    double k = 0;
    for (size_t i = (size_t)lo * t->T; i < (size_t)(lo + n) * t->T; i++) k += t->y[i] >= 0;
    return k;
}

/* The mean cross-entropy over the batch's trained targets, as this slice's share: its own mean
   times its share of them over its share of the rows (the trainer weighs slices by rows). */
static mt_tensor *rows_loss(mt_ctx *c, const mt_model *m, mt_params *P, mt_task *tp, int lo,
                            int n) {
    const sft_task *t = (const sft_task *)tp;
    mt_batch b = rows(t, lo, n);
    mt_tensor *loss = m->type->loss(c, m, P, &b, mt_stack_ce(mt_config_stack(m->cfg)));
    return mt_scale(c, loss, (float)(trained_in(t, lo, n) / (n * t->drawn_trained / t->B)));
}

static int eval_count(const mt_task *tp) {
    const sft_task *t = (const sft_task *)tp;
    int all = (t->n - t->n_train + t->B - 1) / t->B;
    return all < t->eval_batches ? all : t->eval_batches;
}

static int eval_draw(mt_task *tp, int i) {
    sft_task *t = (sft_task *)tp;
    int first = t->n_train + i * t->B, n = t->n - first < t->B ? t->n - first : t->B;
    for (int b = 0; b < n; b++)
        fill_row(t, first + b, t->x + (size_t)b * t->T, t->y + (size_t)b * t->T);
    return n;
}

/* The plain cross-entropy (no label smoothing) summed so that the evaluation's mean over rows is
   the mean over the evaluated trained targets. */
static void eval_rows(mt_ctx *c, const mt_model *m, mt_task *tp, int lo, int n, mt_eval_sums *s) {
    const sft_task *t = (const sft_task *)tp;
    mt_batch b = rows(t, lo, n);
    double loss = m->type->loss(c, m, m->P, &b, MT_CE_PLAIN)->data[0];
    s->loss += loss * trained_in(t, lo, n) / t->eval_trained;
}

/* B conversations of the validation part (of the training part without one), in c's arena. */
static mt_batch probe_rows(mt_ctx *c, mt_task *tp, uint64_t seed, int B) {
    sft_task *t = (sft_task *)tp;
    int *ids = mt_arena_alloc(c, 2 * (size_t)B * t->T * sizeof *ids);
    bool val = t->n > t->n_train;
    mt_rng r;
    mt_rng_seed(&r, seed);
    for (int b = 0; b < B; b++) {
        int e = val ? t->n_train + (int)mt_rng_below(&r, (uint32_t)(t->n - t->n_train))
                    : (int)mt_rng_below(&r, (uint32_t)t->n_train);
        fill_row(t, e, ids + (size_t)b * t->T, ids + (size_t)(B + b) * t->T);
    }
    return mt_token_batch(ids, ids + (size_t)B * t->T, t->T, B);
}

const mt_task_type mt_sft_task = {
    .name = "sft",
    .input = MT_INPUT_TOKENS,
    .data = "a JSONL file of conversations (prompt/response pairs or chat messages)",
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
