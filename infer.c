/* ./infer: samples text from a checkpoint (streamed, with a KV cache), scores a text file,
 * classifies images with a ViT checkpoint, gives words' phones with an encoder-decoder (and scores
 * it on a dictionary), or describes a checkpoint. Exit status: 0 done, 1
 * runtime failure (I/O, out of memory, an unreadable image), 2 usage (a flag, a missing or
 * malformed checkpoint or input file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt.h"

enum { SCORE_WORDS = 64 /* --score-file: words decoded a batch */ };

typedef struct {
    char checkpoint[MT_FIELD_STR_MAX], prompt[MT_FIELD_STR_MAX], score[MT_FIELD_STR_MAX],
        info[MT_FIELD_STR_MAX], classify[MT_FIELD_STR_MAX], source[MT_FIELD_STR_MAX],
        score_file[MT_FIELD_STR_MAX];
    int tokens, top_k, seed, threads, beam, split, precision;
    float temperature, top_p;
    bool no_cache, help;
} infer_options;
static const infer_options DEFAULTS = {.prompt = "\n",
                                       .tokens = 200,
                                       .temperature = 0.8f,
                                       .top_k = 40,
                                       .top_p = 0.95f,
                                       .seed = 1,
                                       .beam = 1,
                                       .split = MT_G2P_ALL};
static infer_options o;

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(infer_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(checkpoint, STR, "checkpoint", "model.safetensors written by ./train"),
    F(prompt, STR, "prompt", "text the sample continues"),
    F(tokens, INT, "tokens", "tokens to generate", .range = "0.."),
    F(temperature, FLOAT, "temperature", "sampling temperature; 0: always the most likely token",
      .range = "0.."),
    F(top_k, INT, "top_k", "sample among the k most likely tokens; 0: all", .range = "0.."),
    F(top_p, FLOAT, "top_p",
      "sample among the most likely tokens holding this probability; 1: "
      "all",
      .range = "1e-9..1"),
    F(seed, INT, "seed", "sampling seed", .range = "0.."),
    F(threads, INT, "threads", "threads; 0: OMP_NUM_THREADS or all cores", .range = "0..1024"),
    F(precision, ENUM, "precision",
      "number format of the linear layers' matrix products (bf16: "
      "docs/performance.md)",
      .of = &MT_PRECISIONS),
    F(no_cache, BOOL, "no_cache",
      "re-run the whole window for every token (slow; for "
      "comparison)"),
    F(score, STR, "score", "print the model's loss on a text file instead of sampling"),
    F(classify, STR, "classify",
      "ViT: image files or directories, comma-separated: print each "
      "one's class"),
    F(source, STR, "source",
      "encdec: words (separated by spaces or commas) whose phones to "
      "print"),
    F(beam, INT, "beam", "encdec: beam width; 1: greedy", .range = "1..64"),
    F(score_file, STR, "score_file",
      "encdec: a pronunciation dictionary (CMUdict lines, or "
      "plain: word ph ph1 ...): WER and PER of the model on it"),
    F(split, ENUM, "split",
      "encdec --score-file: the part of the dictionary scored (train's "
      "split by word)",
      .of = &MT_G2P_SPLITS),
    F(info, STR, "info", "print a checkpoint's config and parameter count"),
    F(help, BOOL, "help", "this list", .flags = MT_FIELD_CLI),
};
#undef F
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);

static _Noreturn void die(int code, const char *msg) {
    fprintf(stderr, "infer: %s\n", msg);
    exit(code);
}

/* The model of a checkpoint. */
static mt_model *load(const char *path, mt_ckpt_state *state, char **options) {
    mt_err e;
    mt_model *m;
    mt_status s = mt_ckpt_load(path, &m, state, options, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    return m;
}

/* An inference context of the model for batches of B rows: eval mode, no grad, --precision. */
static void open_ctx(mt_ctx *c, const mt_model *m, int B) {
    mt_err e;
    if (mt_ctx_init(c, mt_model_arena_bytes(m->type, m->cfg, B, false), 0, &e) != MT_OK)
        die(1, e.msg);
    c->training = false;
    c->grad_enabled = false;
    c->precision = o.precision;
}

/* One image file: "path: class (p = probability)"; false when it cannot be read. */
static bool classify_file(mt_ctx *c, const mt_model *m, const char *path, uint8_t *pix, float *x) {
    const mt_images *meta = m->type->classify->images(m);
    mt_image_opts io = {.H = meta->H, .W = meta->W, .C = meta->C, .resize = true};
    mt_err e;
    if (mt_image_read(path, &io, pix, &e) != MT_OK) {
        fprintf(stderr, "infer: %s\n", e.msg);
        return false;
    }
    mt_image_to_floats(pix, meta->H, meta->W, meta->C, meta->mean, meta->std, x);
    mt_ctx_reset(c);
    const float *z = m->type->classify->logits(c, m, x, 1)->data;
    int best = 0;
    double sum = 0;
    for (int k = 1; k < meta->n_classes; k++)
        if (z[k] > z[best]) best = k;
    for (int k = 0; k < meta->n_classes; k++) sum += exp((double)z[k] - z[best]);
    printf("%s: %s (p = %.3f)\n", path, meta->class_names[best], 1 / sum);
    return true;
}

/* Each image of o.classify (files, or directories of them). An unreadable image is reported and
   the others classified; the exit status is then 1. */
static int classify(const mt_model *m) {
    mt_err e;
    const mt_images *meta = m->type->classify->images(m);
    mt_ctx c;
    open_ctx(&c, m, 1);
    int rc = 0, seen = 0;
    size_t pixels = (size_t)meta->H * meta->W * meta->C;
    uint8_t *pix = malloc(pixels);
    float *x = malloc(pixels * sizeof *x);
    if (!pix || !x) die(1, "out of memory");
    for (char *item = strtok(o.classify, ","); item; item = strtok(NULL, ",")) {
        char **files;
        int n;
        if (mt_image_files(item, &files, &n, &e) != MT_OK) die(2, e.msg);
        if (n == 0) {
            snprintf(e.msg, sizeof e.msg,
                     "--classify: the directory %s holds no files: expected "
                     "image files or directories of them",
                     item);
            die(2, e.msg);
        }
        seen += n;
        for (int i = 0; i < n; i++) {
            if (!classify_file(&c, m, files[i], pix, x)) rc = 1;
            free(files[i]);
        }
        free(files);
    }
    if (!seen)
        die(2, "--classify: no image given: expected image files or directories, "
               "comma-separated");
    free(pix);
    free(x);
    mt_ctx_free(&c);
    return rc;
}

/* The letter ids of word w (lower-cased in place) into src; an error naming the characters
   outside the model's letters, or a word longer than it reads. */
static int word_ids(const mt_g2p_vocab *v, char *w, int S, int *src) {
    char bad[MT_FIELD_STR_MAX] = "", msg[2 * MT_FIELD_STR_MAX + 200];
    int n = (int)strlen(w);
    for (int i = 0; i < n; i++) {
        w[i] = (char)(w[i] >= 'A' && w[i] <= 'Z' ? w[i] - 'A' + 'a' : w[i]);
        if (mt_g2p_letter_id(v, w[i]) < 0 && !strchr(bad, w[i])) bad[strlen(bad)] = w[i];
    }
    if (bad[0]) {
        snprintf(msg, sizeof msg,
                 "--source: \"%s\" has characters outside the model's letters "
                 "\"%.*s\": \"%s\"",
                 w, v->n_letters, v->letters, bad);
        die(2, msg);
    }
    if (n > S) {
        snprintf(msg, sizeof msg, "--source: \"%s\" has %d letters; the model reads at most %d", w,
                 n, S);
        die(2, msg);
    }
    for (int i = 0; i < n; i++) src[i] = mt_g2p_letter_id(v, w[i]);
    return n;
}

/* --source: each word's phones, "word  ph ph1 ..." (the plain dictionary format). Upper case
   reads as lower. */
static int g2p_source(const mt_model *m, mt_ctx *c) {
    const mt_g2p_ops *g = m->type->g2p;
    const mt_g2p_vocab *v = g->vocab(m);
    int S, T, seen = 0;
    g->limits(m, &S, &T);
    int *out = malloc((size_t)T * sizeof *out), *src = malloc((size_t)S * sizeof *src);
    if (!out || !src) die(1, "out of memory");
    for (char *w = strtok(o.source, " ,\t\n"); w; w = strtok(NULL, " ,\t\n")) {
        int n = word_ids(v, w, S, src);
        mt_ctx_reset(c);
        int len = g->transduce(c, m, src, n, o.beam, out);
        printf("%s ", w);
        for (int i = 0; i < len; i++) {
            char buf[8];
            printf(" %s", mt_g2p_token_name(v, out[i], buf));
        }
        putchar('\n');
        seen++;
    }
    if (!seen) die(2, "--source: no word given");
    free(out);
    free(src);
    return 0;
}

/* The words of the dictionary's --split into idx (n of them), checked against the longest word
   the model reads. */
static int split_words(const mt_g2p_dict *d, int S, int *idx) {
    int n[MT_G2P_PARTS], from = 0, count = d->n_words;
    if (o.split != MT_G2P_ALL) {
        mt_g2p_split(d, idx, n);
        for (int k = 0; k < o.split; k++) from += n[k];
        count = n[o.split];
        memmove(idx, idx + from, (size_t)count * sizeof *idx);
    } else
        for (int i = 0; i < d->n_words; i++) idx[i] = i;
    for (int i = 0; i < count; i++) {
        int len = (int)strlen(d->words[idx[i]]);
        if (len > S) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "--score-file: \"%s\" has %d letters; the model reads at "
                     "most %d",
                     d->words[idx[i]], len, S);
            die(2, msg);
        }
    }
    return count;
}

/* --score-file: WER and PER (with and without stress) of the words of a dictionary's --split. */
static int g2p_score(const mt_model *m, mt_ctx *c) {
    mt_err e;
    mt_g2p_dict d;
    const mt_g2p_ops *g = m->type->g2p;
    mt_status s = mt_g2p_load(o.score_file, g->vocab(m), &d, &e);
    if (s != MT_OK) die(s == MT_EIO || s == MT_ENOMEM ? 1 : 2, e.msg);
    int *idx = malloc((size_t)d.n_words * sizeof *idx), S, T;
    if (!idx) die(1, "out of memory");
    g->limits(m, &S, &T);
    int count = split_words(&d, S, idx);
    if (count == 0) {
        char msg[MT_FIELD_STR_MAX + 200];
        snprintf(msg, sizeof msg,
                 "--score-file %s: the %s part of its %d word(s) is empty: "
                 "nothing to score (--split all scores every word)",
                 o.score_file, mt_enum_name(&MT_G2P_SPLITS, o.split), d.n_words);
        die(2, msg);
    }
    mt_g2p_tally t[2] = {{0}};
    double t0 = mt_clock();
    for (int i = 0; i < count; i += SCORE_WORDS) {
        mt_ctx_reset(c);
        g->tally(c, m, &d, idx + i, count - i < SCORE_WORDS ? count - i : SCORE_WORDS, o.beam, t);
    }
    printf("words=%d wer=%.4f per=%.4f wer_nostress=%.4f per_nostress=%.4f beam=%d split=%s "
           "seconds=%.1f\n",
           count, mt_g2p_wer(&t[0]), mt_g2p_per(&t[0]), mt_g2p_wer(&t[1]), mt_g2p_per(&t[1]),
           o.beam, mt_enum_name(&MT_G2P_SPLITS, o.split), mt_clock() - t0);
    if (d.n_skipped)
        fprintf(stderr, "infer: skipped %d line(s) that are no dictionary entry (line %s%s)\n",
                d.n_skipped, d.skipped, d.n_skipped > 5 ? ", ..." : "");
    free(idx);
    mt_g2p_free(&d);
    return 0;
}

static int g2p(const mt_model *m) {
    if (!o.source[0] && !o.score_file[0])
        die(2, "an encdec checkpoint gives words' phones: --source \"WORD ...\" or "
               "--score-file DICT");
    mt_ctx c;
    open_ctx(&c, m, SCORE_WORDS * o.beam);
    int rc = o.source[0] ? g2p_source(m, &c) : g2p_score(m, &c);
    mt_ctx_free(&c);
    return rc;
}

static int info(void) {
    mt_ckpt_state state;
    char *options, line[1024];
    mt_model *m = load(o.info, &state, &options);
    char *config = mt_model_config_json(m);
    m->type->meta_describe(m, line, sizeof line);
    printf("checkpoint  %s\nmodel       %s\nconfig      %s\n%-11s %s\n"
           "parameters  %zu (%.3fM) in %d tensors\nsteps       %ld\n",
           o.info, m->type->name, config, m->type->meta_key, line, mt_params_count_trainable(m->P),
           mt_params_count_trainable(m->P) / 1e6, m->P->n, state.step);
    if (*options) printf("options (./train --resume starts from these):\n%s", options);
    free(config);
    free(options);
    mt_model_free(m);
    return 0;
}

/* Reads and encodes a text file with the checkpoint's tokenizer. */
static uint16_t *encode_file(const char *path, const mt_tokenizer *tok, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die(2, "--score: cannot open the file");
    char *text = NULL;
    size_t len = 0, cap = 0, k;
    do {
        if (len == cap && !(text = realloc(text, cap = 2 * cap + 65536))) die(1, "out of memory");
        k = fread(text + len, 1, cap - len, f);
        len += k;
    } while (k > 0);
    fclose(f);
    uint16_t *ids = malloc((len ? len : 1) * sizeof *ids);
    mt_err e;
    if (!ids) die(1, "out of memory");
    if (mt_tok_encode(tok, text, len, ids, n, &e) != MT_OK) die(2, e.msg);
    free(text);
    return ids;
}

/* --score: the loss, perplexity and bits per byte of the model on a text file. */
static int score(const mt_model *m) {
    const mt_text_ops *t = m->type->text;
    size_t n;
    uint16_t *ids = encode_file(o.score, t->tokenizer(m), &n);
    if (n < 2) die(2, "--score: the file holds fewer than 2 tokens: nothing to predict");
    double nll;
    long count, bytes;
    mt_err e;
    if (t->score(m, ids, n, o.precision, &nll, &count, &bytes, &e) != MT_OK) die(1, e.msg);
    /* bits per byte: comparable across tokenizers (bytes: those the predicted tokens hold) */
    printf("loss=%.6f ppl=%.4f tokens=%ld bpb=%.4f bytes=%ld\n", nll / count, exp(nll / count),
           count, nll / log(2.0) / (double)bytes, bytes);
    free(ids);
    return 0;
}

/* --prompt's token ids (n of them, malloc'd). */
static int *prompt_ids(const mt_tokenizer *tok, size_t *n) {
    size_t plen = strlen(o.prompt);
    uint16_t *p16 = malloc((plen ? plen : 1) * sizeof *p16);
    int *ids = malloc((plen ? plen : 1) * sizeof *ids);
    mt_err e;
    if (!p16 || !ids) die(1, "out of memory");
    if (mt_tok_encode(tok, o.prompt, plen, p16, n, &e) != MT_OK) die(2, e.msg);
    if (*n == 0) die(2, "--prompt is empty: give at least one character");
    for (size_t i = 0; i < *n; i++) ids[i] = p16[i];
    free(p16);
    return ids;
}

/* The prompt, then --tokens sampled tokens, streamed to stdout; the speed to stderr. */
static int generate(mt_model *m) {
    const mt_text_ops *t = m->type->text;
    const mt_tokenizer *tok = t->tokenizer(m);
    mt_err e;
    void *gen;
    if (t->gen_open(m, o.no_cache, o.precision, &gen, &e) != MT_OK) die(1, e.msg);
    size_t n;
    int *prompt = prompt_ids(tok, &n), V = tok->n_vocab, *iscratch = malloc(V * sizeof(int));
    float *pscratch = malloc((size_t)V * sizeof(float));
    if (!iscratch || !pscratch) die(1, "out of memory");
    mt_sampling sp = {o.temperature, o.top_k, o.top_p};
    mt_rng r;
    mt_rng_seed(&r, (uint64_t)o.seed);
    fputs(o.prompt, stdout);
    fflush(stdout);
    double t0 = mt_clock();
    const float *logits = t->gen_feed(gen, prompt, (int)n);
    for (int i = 0; i < o.tokens; i++) {
        int next = mt_sample_token(logits, V, &sp, &r, pscratch, iscratch), len;
        const char *bytes = mt_tok_decode(tok, next, &len);
        fwrite(bytes, 1, (size_t)len, stdout);
        fflush(stdout);
        if (i + 1 < o.tokens) logits = t->gen_feed(gen, &next, 1);
    }
    double s = mt_clock() - t0;
    fprintf(stderr, "\n[%d tokens in %.2f s: %.1f tokens/s%s]\n", o.tokens, s, o.tokens / s,
            o.no_cache ? ", no cache" : "");
    free(prompt);
    free(iscratch);
    free(pscratch);
    t->gen_close(gen);
    return 0;
}

/* What the flags ask of a model that can do it, or an error naming what it does. */
static int run(mt_model *m) {
    const mt_model_type *type = m->type;
    char msg[MT_FIELD_STR_MAX + 200];
    if (o.classify[0] && !type->classify) {
        snprintf(msg, sizeof msg,
                 "--classify: %s is a %s checkpoint, which does not classify "
                 "images; --classify takes a vit checkpoint",
                 o.checkpoint, type->name);
        die(2, msg);
    }
    if (o.classify[0]) return classify(m);
    if ((o.source[0] || o.score_file[0]) && !type->g2p) {
        snprintf(msg, sizeof msg,
                 "--source and --score-file take an encdec checkpoint; %s is a "
                 "%s checkpoint",
                 o.checkpoint, type->name);
        die(2, msg);
    }
    if (type->g2p) return g2p(m);
    if (!type->text) {
        snprintf(msg, sizeof msg,
                 "%s is a %s checkpoint: it does not generate text (a vit "
                 "classifies images: ./infer --checkpoint FILE --classify IMAGES)",
                 o.checkpoint, type->name);
        die(2, msg);
    }
    return o.score[0] ? score(m) : generate(m);
}

static void print_help(void) {
    mt_fieldset defaults = {&OPTIONS, (void *)&DEFAULTS};
    char *help = mt_fieldset_help(&defaults, 1, NULL, 0);
    printf("usage: ./infer --checkpoint out/model.safetensors [--prompt TEXT] [--tokens N] ...\n"
           "       ./infer --checkpoint F --score TEXTFILE\n"
           "       ./infer --checkpoint VIT --classify IMAGE[,IMAGE|DIR...]\n"
           "       ./infer --checkpoint ENCDEC --source \"WORD ...\" [--beam K]\n"
           "       ./infer --checkpoint ENCDEC --score-file DICT [--split test] [--beam K]\n"
           "       ./infer --info F\n\n%s",
           help);
    free(help);
}

int main(int argc, char **argv) {
    mt_err e;
    o = DEFAULTS;
    mt_fieldset set = {&OPTIONS, &o};
    if (mt_fieldset_parse_args(&set, 1, argc, argv, NULL, &e) != MT_OK) die(2, e.msg);
    if (o.help) return print_help(), 0;
    if (o.info[0]) {
        if (mt_file_check("--info", o.info, &e) != MT_OK) die(2, e.msg);
        return info();
    }
    if (!o.checkpoint[0]) die(2, "--checkpoint FILE is required (./infer --help lists the flags)");
    if (mt_file_check("--checkpoint", o.checkpoint, &e) != MT_OK ||
        (o.score[0] && mt_file_check("--score", o.score, &e) != MT_OK) ||
        (o.score_file[0] && mt_file_check("--score-file", o.score_file, &e) != MT_OK))
        die(2, e.msg);
    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o.threads > 0 ? o.threads : omp ? atoi(omp) : 0);
    if (mt_gemm_backend_from_env(&e) != MT_OK) die(2, e.msg);
    mt_model *model = load(o.checkpoint, NULL, NULL);
    if (o.precision == MT_BF16 && mt_bf16_check(&e) != MT_OK) die(2, e.msg);
    if (o.precision == MT_BF16 && mt_params_enable_bf16(model->P, &e) != MT_OK) die(1, e.msg);
    int rc = run(model);
    mt_model_free(model);
    return rc;
}
