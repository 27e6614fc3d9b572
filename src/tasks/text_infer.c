/* ./infer's use of the text task's models: a sample streamed from a prompt (with a KV cache), or
 * the loss on a text file (--score), by a model that has text ops (model.h's mt_text_ops). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/data.h"
#include "../io/io.h"
#include "../models/model.h"
#include "../models/models.h"
#include "inference.h"

enum { MAX_CHAT_TURNS = 64 }; /* of a conversation of --chat - */

typedef struct {
    char prompt[MT_FIELD_STR_MAX], score[MT_FIELD_STR_MAX], chat[MT_FIELD_STR_MAX];
    int tokens, seed, top_k;
    float temperature, top_p;
    bool no_cache;
} text_options;
static const text_options DEFAULTS =
    {.prompt = "\n", .tokens = 200, .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1};

/* The sampling options are read without --score. */
static bool samples(const void *o) { return !((const text_options *)o)->score[0]; }
#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(text_options, member, TYPE, key, help, .read = samples,                               \
             .read_by = "sampling (a run without --score)", __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(prompt, STR, "prompt", "text the sample continues"),
    F(chat, STR, "chat",
      "a user's turn of a model instruction-tuned with --task sft: its reply is printed; -: a "
      "conversation, a turn a line of stdin"),
    F(tokens, INT, "tokens", "tokens to generate", .range = "0.."),
    F(temperature, FLOAT, "temperature", "sampling temperature; 0: always the most likely token",
      .range = "0.."),
    F(top_k, INT, "top_k", "sample among the k most likely tokens; 0: all", .range = "0.."),
    F(top_p, FLOAT, "top_p", "sample among the most likely tokens holding this probability; 1: all",
      .range = "1e-9..1"),
    F(seed, INT, "seed", "sampling seed", .range = "0.."),
    F(no_cache, BOOL, "no_cache", "re-run the whole window for every token (slow; for comparison)"),
    MT_FIELD(text_options, score, STR, "score",
             "print the model's loss on a text file instead of sampling"),
};
#undef F
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);

/* The loss of m on a text file: nll summed over count predicted tokens, which hold bytes bytes. */
typedef struct {
    double nll;
    long count, bytes;
} text_scored;

/* A text file encoded with tok (*ids malloc'd, *n of them); MT_EINVAL when it cannot be opened
   or encoded. */
static mt_status encode_file(const char *path, const mt_tokenizer *tok, uint16_t **ids, size_t *n,
                             mt_err *err) {
    FILE *f = fopen(path, "rb");
    *ids = NULL;
    if (!f) return mt_errorf(err, MT_EINVAL, "--score: cannot open the file");
    char *text = NULL;
    size_t len = 0, cap = 0, k;
    mt_status s = MT_OK;
    do {
        char *grown = len == cap ? realloc(text, cap = 2 * cap + 65536) : text;
        if (!grown) {
            s = mt_errorf(err, MT_ENOMEM, "out of memory");
            break;
        }
        text = grown;
        k = fread(text + len, 1, cap - len, f);
        len += k;
    } while (k > 0);
    fclose(f);
    *ids = s == MT_OK ? malloc((len + 1) * sizeof **ids) : NULL;
    if (s == MT_OK && !*ids) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    if (s == MT_OK && mt_tok_encode(tok, text, len, *ids, n, err) != MT_OK) s = MT_EINVAL;
    free(text);
    if (s != MT_OK) free(*ids), *ids = NULL;
    return s;
}

/* MT_EINVAL for a file that cannot be opened or encoded, or of fewer than 2 tokens. */
static mt_status score_file(const mt_model *m, const char *path, mt_precision precision,
                            text_scored *r, mt_err *err) {
    const mt_text_ops *t = m->type->text;
    size_t n;
    uint16_t *ids;
    mt_status s = encode_file(path, t->tokenizer(m), &ids, &n, err);
    if (s != MT_OK) return s;
    if (n < 2)
        s = mt_errorf(err, MT_EINVAL,
                      "--score: the file holds fewer than 2 tokens: nothing to "
                      "predict");
    else s = t->score(m, ids, n, precision, &r->nll, &r->count, &r->bytes, err);
    free(ids);
    return s;
}

/* The prompt's token ids (*ids malloc'd, *n of them); MT_EINVAL when it cannot be encoded or
   is empty. sp's starts with BOS when its file says
   (tokenizer.bin: always, as run.c's generate; tokenizer_config.json's add_bos_token). */
static mt_status prompt_ids(const mt_tokenizer *tok, const char *prompt, int **ids, size_t *n,
                            mt_err *err) {
    size_t plen = strlen(prompt);
    uint16_t *p16 = malloc((plen + 2) * sizeof *p16);
    mt_status s = MT_OK;
    *ids = malloc((plen + 2) * sizeof **ids);
    if (!p16 || !*ids) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    else if (tok->kind == MT_TOK_SP && plen)
        mt_sp_encode(tok, prompt, plen, mt_sp_add_bos(tok), false, p16, n);
    else if (mt_tok_encode(tok, prompt, plen, p16, n, err) != MT_OK) s = MT_EINVAL;
    else if (*n == 0)
        s = mt_errorf(err, MT_EINVAL, "--prompt is empty: give at least one character");
    for (size_t i = 0; s == MT_OK && i < *n; i++) (*ids)[i] = p16[i];
    free(p16);
    if (s != MT_OK) free(*ids), *ids = NULL;
    return s;
}

/* MT_EFORMAT when logits (V) hold a NaN or infinity: the weights are of a run that diverged. */
static mt_status check_logits(const float *logits, int V, int i, mt_err *err) {
    for (int v = 0; v < V; v++)
        if (!isfinite(logits[v]))
            return mt_errorf(err, MT_EFORMAT,
                             "the logits of sampled token %d hold %g (token id %d): the model's "
                             "weights make non-finite values (a run that diverged?)",
                             i, (double)logits[v], v);
    return MT_OK;
}

/* Of text's len bytes, those that can be written while stop may still follow: all but the
   longest tail that begins stop. */
static size_t safe_bytes(const char *text, size_t len, const char *stop) {
    size_t k = stop ? strlen(stop) - 1 : 0;
    for (; k > 0; k--)
        if (k <= len && memcmp(text + len - k, stop, k) == 0) break;
    return len - k;
}

/* What one sampling writes: echo (when the prompt's logits are finite), then up to o->tokens
   sampled tokens as they come; with stop, the sampling ends once the text ends with stop, which
   is not written. *text (malloc'd, NUL-terminated) keeps the sampled text, *sampled the tokens. */
typedef struct {
    const char *echo, *stop;
    char *text;
    size_t len, cap;
    int sampled;
} sampling_out;

/* Appends bytes to w's text; false when out of memory. */
static bool keep(sampling_out *w, const char *bytes, int len) {
    if (w->len + (size_t)len + 1 > w->cap) {
        char *grown = realloc(w->text, w->cap = 2 * (w->len + (size_t)len) + 256);
        if (!grown) return false;
        w->text = grown;
    }
    memcpy(w->text + w->len, bytes, (size_t)len);
    w->text[w->len += (size_t)len] = 0;
    return true;
}

/* The prompt's ids fed, then the sampling of w; MT_EFORMAT at the first non-finite logits (the
   prompt's: nothing written). */
static mt_status sample(void *gen, const mt_text_ops *t, const mt_tokenizer *tok,
                        const text_options *o, const int *prompt, size_t n, sampling_out *w,
                        FILE *out, mt_err *err) {
    mt_rng r;
    mt_rng_seed(&r, (uint64_t)o->seed);
    mt_sampling sampling = {o->temperature, o->top_k, o->top_p};
    int V = tok->n_vocab, *iscratch = malloc(V * sizeof(int));
    float *pscratch = malloc((size_t)V * sizeof(float));
    const float *logits = t->gen_feed(gen, prompt, (int)n);
    mt_status s = !iscratch || !pscratch ? mt_errorf(err, MT_ENOMEM, "out of memory")
                                         : check_logits(logits, V, 0, err);
    if (s == MT_OK && w->echo) fputs(w->echo, out), fflush(out);
    size_t written = 0, stop = w->stop ? strlen(w->stop) : 0;
    for (int i = 0, prev = prompt[n - 1]; s == MT_OK && i < o->tokens; i++) {
        int next = mt_sample_token(logits, V, &sampling, &r, pscratch, iscratch), len;
        const char *bytes = mt_tok_decode_after(tok, prev, next, &len);
        prev = next, w->sampled++;
        if (!keep(w, bytes, len)) s = mt_errorf(err, MT_ENOMEM, "out of memory");
        bool done = s == MT_OK && stop && w->len >= stop &&
                    memcmp(w->text + w->len - stop, w->stop, stop) == 0;
        if (done) w->text[w->len -= stop] = 0;
        size_t ready = done || i + 1 == o->tokens ? w->len : safe_bytes(w->text, w->len, w->stop);
        fwrite(w->text + written, 1, ready - written, out);
        fflush(out);
        written = ready;
        if (done) break;
        if (s == MT_OK && i + 1 < o->tokens)
            s = check_logits(logits = t->gen_feed(gen, &next, 1), V, i + 1, err);
    }
    free(iscratch);
    free(pscratch);
    return s;
}

/* The ids prompt (n of them) sampled on a generator of its own, written to out as w says;
   *seconds: the sampling's time. */
static mt_status generate(mt_model *m, const text_options *o, mt_precision precision,
                          const int *prompt, size_t n, sampling_out *w, FILE *out, double *seconds,
                          mt_err *err) {
    const mt_text_ops *t = m->type->text;
    void *gen;
    mt_status s = t->gen_open(m, o->no_cache, precision, &gen, err);
    if (s != MT_OK) return s;
    double t0 = mt_clock();
    s = sample(gen, t, t->tokenizer(m), o, prompt, n, w, out, err);
    *seconds = mt_clock() - t0;
    t->gen_close(gen);
    return s;
}

/* --prompt: the prompt, then --tokens sampled tokens (MT_EINVAL when it is empty or not
   encodable, nothing written). */
static mt_status continue_prompt(mt_model *m, const text_options *o, mt_infer_io *io, mt_err *err) {
    size_t n;
    int *prompt = NULL;
    double sec;
    sampling_out w = {.echo = o->prompt};
    mt_status s = prompt_ids(m->type->text->tokenizer(m), o->prompt, &prompt, &n, err);
    if (s == MT_OK) s = generate(m, o, io->precision, prompt, n, &w, io->out, &sec, err);
    if (s == MT_OK)
        fprintf(io->log, "\n[%d tokens in %.2f s: %.1f tokens/s%s]\n", w.sampled, sec,
                w.sampled / sec, o->no_cache ? ", no cache" : "");
    free(prompt);
    free(w.text);
    return s;
}

/* The assistant's reply to the conversation's turns, written to out and kept in *reply
   (malloc'd): the turns in the chat template, then sampling until "<|end|>" or --tokens. */
static mt_status chat_reply(mt_model *m, const text_options *o, mt_infer_io *io,
                            const mt_chat_turn *turns, int n_turns, char **reply, mt_err *err) {
    const mt_tokenizer *tok = m->type->text->tokenizer(m);
    size_t room = mt_chat_room(turns, n_turns), n;
    uint16_t *ids = malloc(room * sizeof *ids);
    int *prompt = malloc(room * sizeof *prompt);
    sampling_out w = {.stop = MT_CHAT_END};
    double sec;
    mt_status s = ids && prompt ? mt_chat_encode(tok, turns, n_turns, true, ids, NULL, &n, err)
                                : mt_errorf(err, MT_ENOMEM, "out of memory");
    for (size_t i = 0; s == MT_OK && i < n; i++) prompt[i] = ids[i];
    if (s == MT_OK) s = generate(m, o, io->precision, prompt, n, &w, io->out, &sec, err);
    fputc('\n', io->out);
    free(ids);
    free(prompt);
    *reply = w.text;
    return s;
}

/* --chat TEXT: one user turn and the reply; --chat -: a conversation, a user turn a line of
   stdin (with a "> " prompt on a terminal), each reply to all the turns so far. */
static mt_status chat(mt_model *m, const text_options *o, mt_infer_io *io, mt_err *err) {
    if (!m->type->text->tokenizer(m)->chat)
        return mt_errorf(err, MT_EINVAL,
                         "--chat: the model was not instruction-tuned (./train --task sft): its "
                         "checkpoint has no chat template");
    if (strcmp(o->prompt, DEFAULTS.prompt) != 0)
        return mt_errorf(err, MT_EINVAL, "--chat and --prompt: give one of them");
    bool lines = strcmp(o->chat, "-") == 0, tty = lines && isatty(fileno(stdin));
    mt_chat_turn turns[2 * MAX_CHAT_TURNS];
    char *said[2 * MAX_CHAT_TURNS] = {0}, line[MT_FIELD_STR_MAX];
    int n = 0;
    mt_status s = MT_OK;
    while (s == MT_OK && n + 2 <= 2 * MAX_CHAT_TURNS) {
        if (tty) fputs("> ", io->out), fflush(io->out);
        if (lines && !fgets(line, sizeof line, stdin)) break;
        const char *text = lines ? line : o->chat;
        size_t len = strcspn(text, lines ? "\n" : "");
        if (!(said[n] = strndup(text, len))) s = mt_errorf(err, MT_ENOMEM, "out of memory");
        if (s != MT_OK) break;
        turns[n] = (mt_chat_turn){MT_CHAT_USER, said[n], len};
        n++;
        s = chat_reply(m, o, io, turns, n, &said[n], err);
        if (said[n]) turns[n] = (mt_chat_turn){MT_CHAT_ASSISTANT, said[n], strlen(said[n])}, n++;
        if (!lines) break;
    }
    for (int i = 0; i < n; i++) free(said[i]);
    return s;
}

/* --score: the loss, perplexity and bits per byte on a text file; else the prompt, then --tokens
   sampled tokens, streamed to out, the speed to the log. */
static mt_status run(mt_model *m, const void *options, mt_infer_io *io, mt_err *err) {
    const text_options *o = options;
    text_scored r;
    if (o->score[0]) {
        mt_status s = mt_file_check("--score", o->score, err);
        if (s == MT_OK) s = score_file(m, o->score, io->precision, &r, err);
        if (s == MT_OK && !isfinite(r.nll))
            s = mt_errorf(err, MT_EFORMAT,
                          "--score: the loss is %g: the model's weights make non-finite logits "
                          "(a run that diverged?)",
                          r.nll / r.count);
        if (s != MT_OK) return s;
        /* bits per byte: comparable across tokenizers (bytes: those the predicted tokens hold) */
        fprintf(io->out, "loss=%.6f ppl=%.4f tokens=%ld bpb=%.4f bytes=%ld\n", r.nll / r.count,
                exp(r.nll / r.count), r.count, r.nll / log(2.0) / (double)r.bytes, r.bytes);
        return MT_OK;
    }
    return o->chat[0] ? chat(m, o, io, err) : continue_prompt(m, o, io, err);
}

const mt_infer_use mt_text_infer = {
    .name = "text",
    .does = "sample text from a prompt, or score a text file",
    .fields = &OPTIONS,
    .options_size = sizeof(text_options),
    .defaults = &DEFAULTS,
    .run = run,
};
