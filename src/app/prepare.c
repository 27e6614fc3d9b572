/* ./train --prepare: a text tokenized once into a token file or llm.c shards (docs/data.md). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/ckpt.h"
#include "../data/data.h"
#include "../io/fields.h"
#include "../io/io.h"
#include "../models/model.h"
#include "../tasks/task.h"
#include "../tensor/base.h"
#include "../train/train.h"
#include "app.h"

/* A file written through path.tmp renamed over path (mt_atomic_open): a failure (a full disk)
   leaves what path held. The writer fills f; name is for its messages. */
typedef mt_status (*file_writer)(FILE *f, const char *name, const void *arg, mt_err *err);
static mt_status write_atomic(const char *path, file_writer w, const void *arg, mt_err *err) {
    mt_atomic_file a;
    mt_err e2;
    mt_status s = mt_atomic_open(&a, path, err);
    if (s != MT_OK) return s;
    s = w(a.f, path, arg, err);
    mt_status c = mt_atomic_close(&a, s == MT_OK, &e2);
    if (s == MT_OK && c != MT_OK) *err = e2, s = c;
    return s;
}

typedef struct {
    const mt_tokenizer *tok;
    const mt_tokens *d;
    size_t lo, hi; /* llm.c: the shard's ids */
} prepared;

static mt_status tokfile_writer(FILE *f, const char *name, const void *arg, mt_err *err) {
    const prepared *p = arg;
    return mt_tokfile_write(f, name, p->tok, p->d, err);
}

static mt_status llmc_writer(FILE *f, const char *name, const void *arg, mt_err *err) {
    const prepared *p = arg;
    return mt_llmc_write(f, name, p->d, p->lo, p->hi, err);
}

static mt_status meta_writer(FILE *f, const char *name, const void *arg, mt_err *err) {
    char *json = mt_tok_to_json(((const prepared *)arg)->tok);
    bool ok = fprintf(f, "%s\n", json) >= 0;
    free(json);
    return ok ? MT_OK : mt_errorf(err, MT_EIO, "%s: cannot write", name);
}

/* --format llmc: dir must hold no shards nor meta.json (nothing there is replaced). */
static mt_status check_llmc_dir(const char *dir, mt_err *err) {
    DIR *d = opendir(dir);
    struct dirent *e;
    mt_status s = MT_OK;
    while (d && s == MT_OK && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if ((n > 4 && strcmp(e->d_name + n - 4, ".bin") == 0) ||
            strcmp(e->d_name, "meta.json") == 0)
            s = mt_errorf(err, MT_EINVAL,
                          "--prepare %s --format llmc: the directory already holds %s: expected a "
                          "new or empty directory (nothing in it is replaced)",
                          dir, e->d_name);
    }
    if (d) closedir(d);
    return s == MT_OK ? mt_make_dirs("--prepare", dir, err) : s;
}

/* --format llmc: dir/train_000000.bin, ... and dir/val_000000.bin, ... (shard ids each, llm.c's
   version 1 with mt's ids), then dir/meta.json (the tokenizer); on a failure the files written
   are removed. *n_files: the shards. */
static mt_status write_llmc(const char *dir, size_t shard, const mt_tokenizer *tok,
                            const mt_tokens *d, int *n_files, mt_err *err) {
    size_t n_train = d->n - d->n_val, cut[3] = {0, n_train, d->n};
    const char *part[2] = {"train", "val"};
    char path[MT_FIELD_STR_MAX + 32];
    mt_status s = MT_OK;
    *n_files = 0;
    for (int p = 0; p < 2 && s == MT_OK; p++)
        for (size_t lo = cut[p], k = 0; lo < cut[p + 1] && s == MT_OK; lo += shard, k++) {
            prepared a = {tok, d, lo, lo + shard < cut[p + 1] ? lo + shard : cut[p + 1]};
            snprintf(path, sizeof path, "%s/%s_%06zu.bin", dir, part[p], k);
            if ((s = write_atomic(path, llmc_writer, &a, err)) == MT_OK) ++*n_files;
        }
    snprintf(path, sizeof path, "%s/meta.json", dir);
    if (s == MT_OK) s = write_atomic(path, meta_writer, &(prepared){.tok = tok}, err);
    for (int p = 0; p < 2 && s != MT_OK; p++) /* the directory held none of these before */
        for (size_t k = 0; k < (size_t)*n_files; k++) {
            snprintf(path, sizeof path, "%s/%s_%06zu.bin", dir, part[p], k);
            unlink(path);
        }
    return s;
}

/* What is refused before --data is read (MT_EINVAL, whatever the check's own status). */
static mt_status prepare_check(const mt_run_options *o, mt_err *err) {
    const char *data = o->train.data.path;
    if (!o->train.task->data_file)
        return mt_errorf(err, MT_EINVAL,
                         "--prepare writes token files of text data; this --model "
                         "reads a dataset folder");
    if (mt_dist_size() > 1)
        return mt_errorf(err, MT_EINVAL, "--prepare runs in one process, not under mpirun");
    if ((!mt_data_is_set(data) && mt_file_check("--data", data, err) != MT_OK) ||
        mt_output_check("--prepare", o->prepare, "--data", data, err) != MT_OK ||
        (o->format == MT_PREPARE_MT &&
         mt_output_file_check("--prepare", o->prepare, err) != MT_OK) ||
        (o->format == MT_PREPARE_LLMC && check_llmc_dir(o->prepare, err) != MT_OK))
        return MT_EINVAL;
    return MT_OK;
}

mt_status mt_prepare(const mt_run_options *o, mt_prepared *p, mt_err *err) {
    const mt_data_cfg *dat = &o->train.data;
    mt_status s = prepare_check(o, err);
    if (s != MT_OK) return s;
    mt_tokenizer tok;
    mt_tokens d;
    char *json = NULL; /* a GGUF's vocabulary (src/ckpt reads GGUF) */
    if (dat->tokenizer_file[0] &&
        (s = mt_gguf_tokenizer(dat->tokenizer_file, mt_enum_name(&MT_TOKENIZERS, dat->tokenizer),
                               &json, err)) != MT_OK)
        return s;
    mt_text_cfg tc = {.kind = (mt_tok_kind)dat->tokenizer,
                      .vocab_size = dat->vocab_size,
                      .val_fraction = dat->val_fraction,
                      .data_vocab = dat->data_vocab,
                      .tokenizer_file = dat->tokenizer_file,
                      .tokenizer_json = json};
    *p = (mt_prepared){0};
    s = mt_data_load(dat->path, &tc, &tok, &d, err);
    free(json);
    if (s != MT_OK) return s;
    if (o->format == MT_PREPARE_LLMC)
        s = write_llmc(o->prepare, (size_t)o->shard_tokens, &tok, &d, &p->n_files, err);
    else s = write_atomic(o->prepare, tokfile_writer, &(prepared){.tok = &tok, .d = &d}, err);
    if (s == MT_OK) p->n = d.n, p->n_val = d.n_val, p->kind = tok.kind, p->n_vocab = tok.n_vocab;
    mt_tokens_free(&d);
    mt_tok_free(&tok);
    return s;
}
