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

typedef struct {
    char checkpoint[MT_FIELD_STR_MAX], prompt[MT_FIELD_STR_MAX], score[MT_FIELD_STR_MAX],
        info[MT_FIELD_STR_MAX], classify[MT_FIELD_STR_MAX], source[MT_FIELD_STR_MAX],
        score_file[MT_FIELD_STR_MAX];
    int tokens, top_k, seed, threads, beam, split, precision;
    float temperature, top_p;
    bool no_cache, help;
} infer_options;
static const infer_options DEFAULTS = {.prompt = "\n", .tokens = 200, .temperature = 0.8f,
                                       .top_k = 40, .top_p = 0.95f, .seed = 1, .beam = 1,
                                       .split = 3};
static infer_options o;

#define F(member, TYPE, key, help, ...) \
    MT_FIELD(infer_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(checkpoint, STR, "checkpoint", "model.safetensors written by ./train"),
    F(prompt, STR, "prompt", "text the sample continues"),
    F(tokens, INT, "tokens", "tokens to generate", .range = "0.."),
    F(temperature, FLOAT, "temperature", "sampling temperature; 0: always the most likely token",
      .range = "0.."),
    F(top_k, INT, "top_k", "sample among the k most likely tokens; 0: all", .range = "0.."),
    F(top_p, FLOAT, "top_p", "sample among the most likely tokens holding this probability; 1: "
      "all", .range = "1e-9..1"),
    F(seed, INT, "seed", "sampling seed", .range = "0.."),
    F(threads, INT, "threads", "threads; 0: OMP_NUM_THREADS or all cores", .range = "0..1024"),
    F(precision, ENUM, "precision", "number format of the linear layers' matrix products (bf16: "
      "docs/performance.md)", .of = &MT_PRECISIONS),
    F(no_cache, BOOL, "no_cache", "re-run the whole window for every token (slow; for "
      "comparison)"),
    F(score, STR, "score", "print the model's loss on a text file instead of sampling"),
    F(classify, STR, "classify", "ViT: image files or directories, comma-separated: print each "
      "one's class"),
    F(source, STR, "source", "encdec: words (separated by spaces or commas) whose phones to "
      "print"),
    F(beam, INT, "beam", "encdec: beam width; 1: greedy", .range = "1..64"),
    F(score_file, STR, "score_file", "encdec: a pronunciation dictionary (CMUdict lines, or "
      "plain: word ph ph1 ...): WER and PER of the model on it"),
    F(split, ENUM, "split", "encdec --score-file: the part of the dictionary scored (train's "
      "split by word)", .of = &MT_G2P_SPLITS),
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

/* Each image of o.classify (files, or directories of them): "path: class (p = probability)".
   An unreadable image is reported and the others classified; the exit status is then 1. */
static int classify(mt_vit *m) {
    mt_err e;
    const mt_images meta = m->meta;
    mt_ctx c;
    if (mt_ctx_init(&c, mt_model_arena_bytes(&mt_vit_type, &m->cfg, 1, false), 0, &e) != MT_OK)
        die(1, e.msg);
    c.training = false;
    c.grad_enabled = false;
    c.precision = o.precision;
    mt_image_opts io = {.H = meta.H, .W = meta.W, .C = meta.C, .resize = true};
    int K = meta.n_classes, rc = 0, seen = 0;
    uint8_t *pix = malloc((size_t)meta.H * meta.W * meta.C);
    float *x = malloc((size_t)meta.H * meta.W * meta.C * sizeof *x);
    if (!pix || !x) die(1, "out of memory");
    for (char *item = strtok(o.classify, ","); item; item = strtok(NULL, ",")) {
        char **files;
        int n;
        if (mt_image_files(item, &files, &n, &e) != MT_OK) die(2, e.msg);
        if (n == 0) {
            snprintf(e.msg, sizeof e.msg, "--classify: the directory %s holds no files: expected "
                     "image files or directories of them", item);
            die(2, e.msg);
        }
        seen += n;
        for (int i = 0; i < n; i++) {
            if (mt_image_read(files[i], &io, pix, &e) != MT_OK) {
                fprintf(stderr, "infer: %s\n", e.msg);
                rc = 1;
            } else {
                mt_image_to_floats(pix, meta.H, meta.W, meta.C, meta.mean, meta.std, x);
                mt_ctx_reset(&c);
                const float *z = mt_vit_forward(&c, m, x, 1)->data;
                int best = 0;
                double sum = 0;
                for (int k = 1; k < K; k++)
                    if (z[k] > z[best]) best = k;
                for (int k = 0; k < K; k++) sum += exp((double)z[k] - z[best]);
                printf("%s: %s (p = %.3f)\n", files[i], meta.class_names[best], 1 / sum);
            }
            free(files[i]);
        }
        free(files);
    }
    if (!seen) die(2, "--classify: no image given: expected image files or directories, "
                      "comma-separated");
    free(pix);
    free(x);
    mt_ctx_free(&c);
    return rc;
}

/* --source: each word's phones, "word  ph ph1 ..." (the plain dictionary format). Letters outside
   the model's vocabulary are an error naming them (exit 2); upper case reads as lower. */
static int g2p_source(mt_encdec *m, mt_ctx *c) {
    const mt_g2p_vocab *v = &m->vocab;
    int T = m->cfg.tgt_ctx, S = m->cfg.src_ctx, *out = malloc((size_t)T * sizeof *out),
        *src = malloc((size_t)S * sizeof *src), seen = 0;
    if (!out || !src) die(1, "out of memory");
    for (char *w = strtok(o.source, " ,\t\n"); w; w = strtok(NULL, " ,\t\n")) {
        char bad[MT_FIELD_STR_MAX] = "", msg[2 * MT_FIELD_STR_MAX + 200];
        int n = (int)strlen(w);
        for (int i = 0; i < n; i++) {
            w[i] = (char)(w[i] >= 'A' && w[i] <= 'Z' ? w[i] - 'A' + 'a' : w[i]);
            if (mt_g2p_letter_id(v, w[i]) < 0 && !strchr(bad, w[i])) bad[strlen(bad)] = w[i];
        }
        if (bad[0]) {
            snprintf(msg, sizeof msg, "--source: \"%s\" has characters outside the model's letters "
                     "\"%.*s\": \"%s\"", w, v->n_letters, v->letters, bad);
            die(2, msg);
        }
        if (n > S) {
            snprintf(msg, sizeof msg, "--source: \"%s\" has %d letters; the model reads at most %d",
                     w, n, S);
            die(2, msg);
        }
        for (int i = 0; i < n; i++) src[i] = mt_g2p_letter_id(v, w[i]);
        mt_ctx_reset(c);
        int len;
        if (o.beam > 1) len = mt_encdec_beam(c, m, src, n, o.beam, out);
        else mt_encdec_greedy(c, m, src, &n, 1, n, out, &len);
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

/* --score-file: WER and PER (with and without stress) of the words of a dictionary's --split. */
static int g2p_score(mt_encdec *m, mt_ctx *c) {
    mt_err e;
    mt_g2p_dict d;
    mt_status s = mt_g2p_load(o.score_file, &m->vocab, &d, &e);
    if (s != MT_OK) die(s == MT_EIO || s == MT_ENOMEM ? 1 : 2, e.msg);
    int *idx = malloc((size_t)d.n_words * sizeof *idx), n[3], from = 0, count = d.n_words;
    if (!idx) die(1, "out of memory");
    if (o.split < 3) {
        mt_g2p_split(&d, idx, n);
        for (int k = 0; k < o.split; k++) from += n[k];
        count = n[o.split];
    } else
        for (int i = 0; i < d.n_words; i++) idx[i] = i;
    for (int i = 0; i < count; i++) {
        int w = idx[from + i], len = (int)strlen(d.words[w]);
        if (len > m->cfg.src_ctx) {
            char msg[256];
            snprintf(msg, sizeof msg, "--score-file: \"%s\" has %d letters; the model reads at "
                     "most %d", d.words[w], len, m->cfg.src_ctx);
            die(2, msg);
        }
    }
    mt_g2p_tally t[2] = {{0}};
    double t0 = mt_clock();
    for (int i = 0; i < count; i += 64) {
        mt_ctx_reset(c);
        mt_encdec_tally(c, m, &d, idx + from + i, count - i < 64 ? count - i : 64, o.beam, t);
    }
    printf("words=%d wer=%.4f per=%.4f wer_nostress=%.4f per_nostress=%.4f beam=%d split=%s "
           "seconds=%.1f\n", count, mt_g2p_wer(&t[0]), mt_g2p_per(&t[0]), mt_g2p_wer(&t[1]),
           mt_g2p_per(&t[1]), o.beam, mt_enum_name(&MT_G2P_SPLITS, o.split), mt_clock() - t0);
    if (d.n_skipped)
        fprintf(stderr, "infer: skipped %d line(s) that are no dictionary entry (line %s%s)\n",
                d.n_skipped, d.skipped, d.n_skipped > 5 ? ", ..." : "");
    free(idx);
    mt_g2p_free(&d);
    return 0;
}

static int info(void) {
    mt_ckpt_state state;
    char *options, line[1024];
    mt_model *m = load(o.info, &state, &options);
    char *config = mt_model_config_json(m);
    m->type->meta_describe(m, line, sizeof line);
    printf("checkpoint  %s\nmodel       %s\nconfig      %s\n%-11s %s\n"
           "parameters  %zu (%.3fM) in %d tensors\nsteps       %ld\n",
           o.info, m->type->name, config, m->type->meta_key, line,
           mt_params_count_trainable(m->P), mt_params_count_trainable(m->P) / 1e6, m->P->n,
           state.step);
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

int main(int argc, char **argv) {
    mt_err e;
    o = DEFAULTS;
    mt_fieldset set = {&OPTIONS, &o}, defaults = {&OPTIONS, (void *)&DEFAULTS};
    if (mt_fieldset_parse_args(&set, 1, argc, argv, NULL, &e) != MT_OK) die(2, e.msg);
    if (o.help) {
        char *help = mt_fieldset_help(&defaults, 1, NULL, 0);
        printf("usage: ./infer --checkpoint out/model.safetensors [--prompt TEXT] [--tokens N] ...\n"
               "       ./infer --checkpoint F --score TEXTFILE\n"
               "       ./infer --checkpoint VIT --classify IMAGE[,IMAGE|DIR...]\n"
               "       ./infer --checkpoint ENCDEC --source \"WORD ...\" [--beam K]\n"
               "       ./infer --checkpoint ENCDEC --score-file DICT [--split test] [--beam K]\n"
               "       ./infer --info F\n\n%s",
               help);
        free(help);
        return 0;
    }
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
    mt_vit *vit = mt_vit_of(model);
    mt_gpt *gpt = mt_gpt_of(model);
    char msg[MT_FIELD_STR_MAX + 160];
    if (o.classify[0] && !vit) {
        snprintf(msg, sizeof msg, "--classify: %s is a %s checkpoint, which does not classify "
                 "images; --classify takes a vit checkpoint", o.checkpoint, model->type->name);
        die(2, msg);
    }
    if (o.classify[0]) {
        int rc = classify(vit);
        mt_model_free(model);
        return rc;
    }
    mt_encdec *ed = mt_encdec_of(model);
    if ((o.source[0] || o.score_file[0]) && !ed) {
        snprintf(msg, sizeof msg, "--source and --score-file take an encdec checkpoint; %s is a "
                 "%s checkpoint", o.checkpoint, model->type->name);
        die(2, msg);
    }
    if (ed) {
        if (!o.source[0] && !o.score_file[0])
            die(2, "an encdec checkpoint gives words' phones: --source \"WORD ...\" or "
                   "--score-file DICT");
        mt_ctx c;
        if (mt_ctx_init(&c, mt_model_arena_bytes(&mt_encdec_type, &ed->cfg, 64 * o.beam, false), 0,
                        &e) != MT_OK)
            die(1, e.msg);
        c.training = false;
        c.grad_enabled = false;
        c.precision = o.precision;
        int rc = o.source[0] ? g2p_source(ed, &c) : g2p_score(ed, &c);
        mt_ctx_free(&c);
        mt_model_free(model);
        return rc;
    }
    if (!gpt) {
        snprintf(msg, sizeof msg, "%s is a %s checkpoint: it does not generate text (a vit "
                 "classifies images: ./infer --checkpoint FILE --classify IMAGES)", o.checkpoint,
                 model->type->name);
        die(2, msg);
    }
    const mt_tokenizer *tok = &gpt->tok;
    if (o.score[0]) {
        size_t n;
        uint16_t *ids = encode_file(o.score, tok, &n);
        if (n < 2) die(2, "--score: the file holds fewer than 2 tokens: nothing to predict");
        double nll;
        long count, bytes;
        if (mt_gpt_score(gpt, ids, n, o.precision, &nll, &count, &bytes, &e) != MT_OK)
            die(1, e.msg);
        /* bits per byte: comparable across tokenizers (bytes: those the predicted tokens hold) */
        printf("loss=%.6f ppl=%.4f tokens=%ld bpb=%.4f bytes=%ld\n", nll / count,
               exp(nll / count), count, nll / log(2.0) / (double)bytes, bytes);
        free(ids);
        mt_model_free(model);
        return 0;
    }
    mt_kv_cache kv;
    if (mt_kv_init(&kv, gpt, o.no_cache, &e) != MT_OK) die(1, e.msg);
    kv.ctx.precision = o.precision;
    size_t plen = strlen(o.prompt), n;
    uint16_t *p16 = malloc((plen ? plen : 1) * sizeof *p16);
    int *prompt = malloc((plen ? plen : 1) * sizeof *prompt);
    if (!p16 || !prompt) die(1, "out of memory");
    if (mt_tok_encode(tok, o.prompt, plen, p16, &n, &e) != MT_OK) die(2, e.msg);
    if (n == 0) die(2, "--prompt is empty: give at least one character");
    for (size_t i = 0; i < n; i++) prompt[i] = p16[i];
    int V = gpt->cfg.n_vocab, *iscratch = malloc((size_t)V * sizeof(int));
    float *pscratch = malloc((size_t)V * sizeof(float));
    if (!iscratch || !pscratch) die(1, "out of memory");
    mt_sampling sp = {o.temperature, o.top_k, o.top_p};
    mt_rng r;
    mt_rng_seed(&r, (uint64_t)o.seed);
    fputs(o.prompt, stdout);
    fflush(stdout);
    double t0 = mt_clock();
    mt_kv_feed(&kv, prompt, (int)n);
    for (int i = 0; i < o.tokens; i++) {
        int next = mt_sample_token(kv.logits, V, &sp, &r, pscratch, iscratch);
        int len;
        const char *bytes = mt_tok_decode(tok, next, &len);
        fwrite(bytes, 1, (size_t)len, stdout);
        fflush(stdout);
        if (i + 1 < o.tokens) mt_kv_feed(&kv, &next, 1);
    }
    double s = mt_clock() - t0;
    fprintf(stderr, "\n[%d tokens in %.2f s: %.1f tokens/s%s]\n", o.tokens, s, o.tokens / s,
            o.no_cache ? ", no cache" : "");
    free(p16);
    free(prompt);
    free(iscratch);
    free(pscratch);
    mt_kv_free(&kv);
    mt_model_free(model);
    return 0;
}
