/* mt app: the programs' work beyond turning flags into calls, so that the tests can call it too:
 * ./train's --prepare and its report (setup, progress, end), ./infer --info (./infer's uses of
 * a checkpoint are the tasks': src/tasks/inference.h). It composes src/train and src/diag and
 * sits above both; nothing else in src/ uses it. Every function that prints takes the stream;
 * errors are returned, never printed. */
#ifndef MT_APP_H
#define MT_APP_H

#include <stdio.h>

#include "../data/data.h"
#include "../tensor/base.h"
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
mt_status mt_prepare(const mt_run_options *o, mt_prepared *p, mt_err *err);

/* ---- ./train's report (report.c) ------------------------------------------------------------- */
/* "wrote FILE: N tokens, ..." of --prepare. */
void mt_report_prepared(FILE *f, const mt_run_options *o, const mt_prepared *p);
/* The task's warning about its data (malloc'd), or NULL. */
char *mt_report_data_warning(const mt_trainer *tr);
/* The data, model, train lines, Muon's groups and, under MPI, the ranks and the optimizer state
   per rank (collective: every rank calls it). */
void mt_report_setup(FILE *f, const mt_trainer *tr, const mt_run_options *o);
/* The progress line of a logged step; tty: rewritten in place, a newline only after an
   evaluation. */
void mt_report_progress(FILE *f, bool tty, const mt_trainer *tr, const mt_progress *p);
/* The end of a run that took steps since step first: its time, the arena's peak and what it
   wrote, MPI's share of the time, the op profile (prof, or NULL). */
void mt_report_done(FILE *f, const mt_trainer *tr, long first, double seconds,
                    const mt_profile *prof);

/* ---- ./infer --info (describe.c) ------------------------------------------------------------ */
/* The checkpoint's model, config, parameter count, step and saved options, to out. */
mt_status mt_checkpoint_describe(const char *path, FILE *out, mt_err *err);

#endif
