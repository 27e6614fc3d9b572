/* mt app: the programs' work beyond turning flags into calls, so that the tests can call it too:
 * ./train's --prepare and its report (setup, progress, end), ./infer's uses of a checkpoint (text,
 * images, pronunciations). It composes src/train and src/diag and sits above both; nothing else
 * in src/ uses it. Every function that prints takes the stream; errors are returned, never
 * printed. */
#ifndef MT_APP_H
#define MT_APP_H

#include <stdio.h>

#include "../data/data.h"
#include "../models/model.h"
#include "../models/models.h"
#include "../tensor/base.h"
#include "../tensor/gemm.h"
#include "../tensor/profile.h"
#include "../tensor/tensor.h"
#include "../train/options.h"
#include "../train/train.h"

/* ---- ./train --prepare (prepare.c) ----------------------------------------------------------- */
/* What --prepare wrote. */
typedef struct {
    size_t n, n_val;  /* tokens, of them the validation part */
    mt_tok_kind kind; /* the tokenizer */
    int n_vocab;
    int n_files; /* --format llmc: the shards */
} mt_prepared;

/* ./train --prepare: r->o.data tokenized into r->o.prepare, a token file (written whole or not at
   all), or with --format llmc a new or empty directory of llm.c shards of mt's ids (train_*.bin,
   val_*.bin, --shard-tokens each) and meta.json (the tokenizer; on a failure the shards written
   are removed). MT_EINVAL before anything is read: a model whose data is no file, MPI ranks, a
   missing --data, --prepare naming --data, a directory holding shards or meta.json. */
mt_status mt_prepare(const mt_run_options *r, mt_prepared *p, mt_err *err);

/* ---- ./train's report (report.c) ------------------------------------------------------------- */
/* "wrote FILE: N tokens, ..." of --prepare. */
void mt_report_prepared(FILE *f, const mt_train_options *o, const mt_prepared *p);
/* The task's warning about its data (malloc'd), or NULL. */
char *mt_report_data_warning(const mt_trainer *tr);
/* The data, model, train lines, Muon's groups and, under MPI, the ranks and the optimizer state
   per rank (collective: every rank calls it). */
void mt_report_setup(FILE *f, const mt_trainer *tr, const mt_train_options *o);
/* The progress line of a logged step; tty: rewritten in place, a newline only after an
   evaluation. */
void mt_report_progress(FILE *f, bool tty, const mt_trainer *tr, const mt_progress *p);
/* The end of a run that took steps since step first: its time, the arena's peak and what it
   wrote, MPI's share of the time, the op profile (prof, or NULL). */
void mt_report_done(FILE *f, const mt_trainer *tr, long first, double seconds,
                    const mt_profile *prof);

/* ---- ./infer's uses of a checkpoint ---------------------------------------------------------- */
/* An inference context of m for batches of B rows: eval mode, no grad, precision's products. */
mt_status mt_infer_ctx_open(mt_ctx *c, const mt_model *m, int B, mt_precision precision,
                            mt_err *err);

/* --info: the checkpoint's model, config, parameter count, step and saved options, to out. */
mt_status mt_checkpoint_describe(const char *path, FILE *out, mt_err *err);

/* Text (infer_text.c), a model with text ops. A sample: the prompt, then tokens sampled. */
typedef struct {
    const char *prompt;
    int tokens, seed;
    mt_sampling sampling;
    bool no_cache; /* re-run the whole window for every token (the reference) */
    mt_precision precision;
} mt_gen_run;
/* The prompt (MT_EINVAL when empty or not encodable, nothing written), then g->tokens sampled,
   streamed to out; *seconds: the sampling's time. */
mt_status mt_text_generate(mt_model *m, const mt_gen_run *g, FILE *out, double *seconds,
                           mt_err *err);
/* The loss of m on a text file: nll summed over count predicted tokens, which hold bytes bytes. */
typedef struct {
    double nll;
    long count, bytes;
} mt_text_scored;
/* MT_EINVAL for a file that cannot be opened or encoded, or of fewer than 2 tokens. */
mt_status mt_text_score_file(const mt_model *m, const char *path, mt_precision precision,
                             mt_text_scored *r, mt_err *err);

/* Images (infer_images.c), a model that classifies. Called for each image in order: its class
   and probability, or (class NULL) why it could not be read. */
typedef void (*mt_on_image)(const char *path, const char *cls, double p, const char *error,
                            void *arg);
/* Each image of items (comma-separated image files or directories of them; cut in place):
   MT_EINVAL for a missing path, an empty directory or no image at all, after the images before
   it. An unreadable image is passed to on and the others classified. */
mt_status mt_classify(const mt_model *m, mt_precision precision, char *items, mt_on_image on,
                      void *arg, mt_err *err);

/* Pronunciations (infer_g2p.c), a model with G2P ops. */
enum { MT_G2P_SCORE_WORDS = 64 /* words decoded a batch */ };
typedef struct {
    int beam; /* 1: greedy */
    mt_precision precision;
} mt_g2p_run;
/* Each word of words (separated by spaces or commas; cut and lower-cased in place) and its
   phones, "word  ph ph1 ..." (the plain dictionary format), to out: MT_EINVAL at the first word
   with a character outside the model's letters or longer than it reads, or for no word. */
mt_status mt_g2p_words(const mt_model *m, const mt_g2p_run *g, char *words, FILE *out, mt_err *err);
typedef struct {
    int words;         /* scored */
    mt_g2p_tally t[2]; /* with stress, without */
    double seconds;    /* decoding's */
    int n_skipped;     /* the dictionary's lines that are no entry */
    char skipped[128]; /* "line 1, ..." */
} mt_g2p_scored;
/* The dictionary at path (mt_g2p_load) scored on its part (mt_g2p_split; MT_G2P_ALL: every
   word): MT_EINVAL for a word longer than the model reads or an empty part. */
mt_status mt_g2p_score_file(const mt_model *m, const mt_g2p_run *g, const char *path,
                            mt_g2p_part part, mt_g2p_scored *r, mt_err *err);

#endif
