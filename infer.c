/* ./infer: samples text from a checkpoint (streamed, with a KV cache), scores a text file,
 * classifies images with a ViT checkpoint, gives words' phones with an encoder-decoder (and scores
 * it on a dictionary), or describes a checkpoint: the flags, the printing and the exit codes; each
 * use is src/app's (infer_text.c, infer_images.c, infer_g2p.c). Exit status: 0 done, 1 runtime
 * failure (I/O, out of memory, an unreadable image), 2 usage (a flag, a missing or
 * malformed checkpoint or input file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mt.h"

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
    F(top_p, FLOAT, "top_p", "sample among the most likely tokens holding this probability; 1: all",
      .range = "1e-9..1"),
    F(seed, INT, "seed", "sampling seed", .range = "0.."),
    F(threads, INT, "threads", "threads; 0: OMP_NUM_THREADS or all cores", .range = "0..1024"),
    F(precision, ENUM, "precision",
      "number format of the linear layers' matrix products (bf16: docs/performance.md)",
      .of = &MT_PRECISIONS),
    F(no_cache, BOOL, "no_cache", "re-run the whole window for every token (slow; for comparison)"),
    F(score, STR, "score", "print the model's loss on a text file instead of sampling"),
    F(classify, STR, "classify",
      "ViT: image files or directories, comma-separated: print each one's class"),
    F(source, STR, "source", "encdec: words (separated by spaces or commas) whose phones to print"),
    F(beam, INT, "beam", "encdec: beam width; 1: greedy", .range = "1..64"),
    F(score_file, STR, "score_file",
      "encdec: a pronunciation dictionary (CMUdict lines, or plain: word ph ph1 ...): WER and PER "
      "of the model on it"),
    F(split, ENUM, "split",
      "encdec --score-file: the part of the dictionary scored (train's split by word)",
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

/* A usage error (exit 2) of the checkpoint: fmt names it and its type (two %s). */
static _Noreturn void refuse(const char *fmt, const mt_model_type *type) {
    fprintf(stderr, "infer: ");
    fprintf(stderr, fmt, o.checkpoint, type->name);
    fprintf(stderr, "\n");
    exit(2);
}

static void check(mt_status s, const mt_err *e) {
    if (s != MT_OK) die(mt_exit_code(s), e->msg);
}

/* --classify: "path: class (p = probability)"; an unreadable image on stderr (exit status 1). */
static void print_image(const char *path, const char *cls, double p, const char *error, void *rc) {
    if (error) fprintf(stderr, "infer: %s\n", error), *(int *)rc = 1;
    else printf("%s: %s (p = %.3f)\n", path, cls, p);
}

/* --source: each word's phones; --score-file: WER and PER of the words of a dictionary's
   --split. */
static int g2p(const mt_model *m) {
    if (!o.source[0] && !o.score_file[0])
        die(2,
            "an encdec checkpoint gives words' phones: --source \"WORD ...\" or --score-file DICT");
    mt_err e;
    mt_g2p_run g = {.beam = o.beam, .precision = o.precision};
    mt_g2p_scored r;
    if (o.source[0]) return check(mt_g2p_words(m, &g, o.source, stdout, &e), &e), 0;
    check(mt_g2p_score_file(m, &g, o.score_file, o.split, &r, &e), &e);
    printf("words=%d wer=%.4f per=%.4f wer_nostress=%.4f per_nostress=%.4f beam=%d split=%s "
           "seconds=%.1f\n",
           r.words, mt_g2p_wer(&r.t[0]), mt_g2p_per(&r.t[0]), mt_g2p_wer(&r.t[1]),
           mt_g2p_per(&r.t[1]), o.beam, mt_enum_name(&MT_G2P_SPLITS, o.split), r.seconds);
    if (r.n_skipped)
        fprintf(stderr, "infer: skipped %d line(s) that are no dictionary entry (line %s%s)\n",
                r.n_skipped, r.skipped, r.n_skipped > 5 ? ", ..." : "");
    return 0;
}

/* --score: the loss, perplexity and bits per byte of the model on a text file. */
static int score(const mt_model *m) {
    mt_err e;
    mt_text_scored r;
    check(mt_text_score_file(m, o.score, o.precision, &r, &e), &e);
    /* bits per byte: comparable across tokenizers (bytes: those the predicted tokens hold) */
    printf("loss=%.6f ppl=%.4f tokens=%ld bpb=%.4f bytes=%ld\n", r.nll / r.count,
           exp(r.nll / r.count), r.count, r.nll / log(2.0) / (double)r.bytes, r.bytes);
    return 0;
}

/* The prompt, then --tokens sampled tokens, streamed to stdout; the speed to stderr. */
static int generate(mt_model *m) {
    mt_err e;
    mt_gen_run g = {.prompt = o.prompt,
                    .tokens = o.tokens,
                    .seed = o.seed,
                    .sampling = {o.temperature, o.top_k, o.top_p},
                    .no_cache = o.no_cache,
                    .precision = o.precision};
    double sec;
    check(mt_text_generate(m, &g, stdout, &sec, &e), &e);
    fprintf(stderr, "\n[%d tokens in %.2f s: %.1f tokens/s%s]\n", o.tokens, sec, o.tokens / sec,
            o.no_cache ? ", no cache" : "");
    return 0;
}

/* What the flags ask of a model that can do it, or an error naming what it does. */
static int run(mt_model *m) {
    const mt_model_type *type = m->type;
    mt_err e;
    int rc = 0;
    if (o.classify[0] && !type->classify)
        refuse("--classify: %s is a %s checkpoint, which does not classify images; --classify "
               "takes a vit checkpoint",
               type);
    if (o.classify[0])
        return check(mt_classify(m, o.precision, o.classify, print_image, &rc, &e), &e), rc;
    if ((o.source[0] || o.score_file[0]) && !type->g2p)
        refuse("--source and --score-file take an encdec checkpoint; %s is a %s checkpoint", type);
    if (type->g2p) return g2p(m);
    if (!type->text)
        refuse("%s is a %s checkpoint: it does not generate text (a vit classifies images: "
               "./infer --checkpoint FILE --classify IMAGES)",
               type);
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
        return check(mt_checkpoint_describe(o.info, stdout, &e), &e), 0;
    }
    if (!o.checkpoint[0]) die(2, "--checkpoint FILE is required (./infer --help lists the flags)");
    if (mt_file_check("--checkpoint", o.checkpoint, &e) != MT_OK ||
        (o.score[0] && mt_file_check("--score", o.score, &e) != MT_OK) ||
        (o.score_file[0] && mt_file_check("--score-file", o.score_file, &e) != MT_OK))
        die(2, e.msg);
    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o.threads > 0 ? o.threads : omp ? atoi(omp) : 0);
    if (mt_gemm_backend_from_env(&e) != MT_OK) die(2, e.msg);
    mt_model *model;
    check(mt_ckpt_load(o.checkpoint, &model, NULL, NULL, &e), &e);
    if (o.precision == MT_BF16 && mt_bf16_check(&e) != MT_OK) die(2, e.msg);
    if (o.precision == MT_BF16 && mt_params_enable_bf16(model->P, &e) != MT_OK) die(1, e.msg);
    int rc = run(model);
    mt_model_free(model);
    return rc;
}
