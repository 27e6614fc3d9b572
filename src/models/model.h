/* The model interface: what the trainer, the checkpoints, the diagnostics and ./train know of a
 * model. A model type fills one mt_model_type (its config, its parameter table, what it reads
 * its inputs with, its training data, batches, loss and evaluation); the registry lists the
 * types. Nothing outside src/models names a type.
 * Dimension letters as in nn.h; a "row" is one sample of a batch (a window of tokens, an image). */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include "../data/data.h"
#include "../io/io.h"
#include "stack.h"

typedef struct mt_model_type mt_model_type;

#define MT_EVAL_METRICS 8

/* A built model; the type's own struct holds it (first member) with the rest. */
typedef struct {
    const mt_model_type *type;
    void *cfg;    /* the type's config, validated (type->config_size bytes) */
    mt_params *P; /* the parameter table */
} mt_model;

/* A model type's training data, drawn batches and evaluation state: the type's own struct holds
   it (first member) with the rest. */
typedef struct {
    const mt_model_type *type;
} mt_task;

/* What the training data is and how it is read and split. */
typedef struct {
    const char *path;      /* a text or token file, or an image dataset (data.h) */
    mt_tok_kind tokenizer; /* text */
    int vocab_size;        /* text, bpe: the vocabulary to learn from the training part */
    double val_fraction;   /* the last part of a text (in bytes); a random part of images (but a
                              test part) */
    mt_image_opts images;  /* images */
    uint64_t seed;         /* a random split */
    int batch;             /* rows of a training batch */
    int rows;              /* the most rows of a batch one process computes (its buffers) */
    int min_rows;          /* the fewest */
    int eval_batches;      /* text: validation batches of `batch` windows */
} mt_data_cfg;

struct mt_model_type {
    const char *name;     /* "gpt": --model, the checkpoint's "model" */
    const char *about;    /* a line for --help */
    const char *data;     /* what --data names: "a text or token file" */
    bool data_file;       /* --data is a file (not a folder): text, which --prepare can tokenize */
    const char *meta_key; /* the checkpoint metadata of what reads inputs: "tokenizer", "images" */
    const char *units;    /* what a row holds: "tokens", "images" */
    const char *unit;     /* of throughput: "tok", "img" */

    /* config: the struct (which starts with its mt_stack_config), its fields (with the
       stack's), its defaults and checks */
    size_t config_size;
    const mt_fields *fields;
    void (*config_default)(void *cfg);
    /* Checks every field and resolves the derived ones (mt_stack_validate). */
    mt_status (*config_validate)(void *cfg, mt_err *err);
    /* "4 layers, 4 heads, ..." for the programs' model line */
    void (*config_describe)(const void *cfg, char *buf, size_t len);
    /* Activation bytes of a step of B rows (training: with gradients), in double. */
    double (*activation_bytes)(const void *cfg, int B, bool training);
    /* Units (tokens, images) in a row: throughput. */
    int (*row_units)(const void *cfg);

    /* The model of a config (validated again here) into m, the type's instance struct of size
       bytes: its parameter table, not yet allocated (mt_model_build allocates), so that its
       memory can be checked first. free releases what an instance holds, even a failed
       build's. Both through mt_model_table and mt_model_free. */
    size_t size;
    mt_status (*build_table)(void *m, const void *cfg, mt_err *err);
    void (*free)(mt_model *m);
    /* What the model reads its inputs with (the tokenizer; image size, normalisation and class
       names) as JSON, both ways; from_json checks it against the config. */
    char *(*meta_to_json)(const mt_model *m);
    mt_status (*meta_from_json)(mt_model *m, const char *json, mt_err *err);
    /* The same in words for ./infer --info: "char, vocabulary 65" */
    void (*meta_describe)(const mt_model *m, char *buf, size_t len);

    /* Loads and splits the training data; fills the fields of cfg the data decides (n_vocab;
       image size, channels, classes). */
    mt_status (*task_load)(mt_task **t, const mt_data_cfg *d, void *cfg, mt_err *err);
    void (*task_free)(mt_task *t);
    /* The data line of the programs; a warning about the data (malloc'd) or NULL (task_warning
       NULL: the type never warns). */
    void (*task_describe)(const mt_task *t, char *buf, size_t len);
    char *(*task_warning)(const mt_task *t);
    /* The meta JSON (meta_to_json's) of the data: what a model trained on it reads inputs with. */
    char *(*task_meta)(const mt_task *t);
    /* Draws the next training batch of d->batch rows with r (the same draw in every process)
       and makes rows [lo, lo + n) of it ready for rows_loss. */
    void (*draw_batch)(mt_task *t, mt_rng *r, int lo, int n);
    /* The mean loss over rows [lo, lo + n) of the drawn batch (a scalar), built in c on the
       parameters P (the model's or a replica's view of them). */
    mt_tensor *(*rows_loss)(mt_ctx *c, const mt_model *m, mt_params *P, mt_task *t, int lo, int n);
    /* Evaluation: the same validation batches every time. eval_count: how many; eval_draw: draws
       batch i (i = 0 first) and returns its rows; eval_rows: adds the loss summed over rows
       [lo, lo + n) of it to sums[0], with accuracy the rows predicted right to sums[1], and with
       metrics the two terms of metric k to sums[2 + 2k] and sums[3 + 2k]. */
    int (*eval_count)(const mt_task *t);
    int (*eval_draw)(mt_task *t, int i);
    void (*eval_rows)(mt_ctx *c, mt_model *m, mt_task *t, int lo, int n, double sums[2]);
    /* eval_rows may run on disjoint rows of a batch in several contexts at once (it writes
       nothing but its context's arena and its sums): the trainer then evaluates a batch's slices
       on the replicas' threads, else one slice after another */
    bool eval_concurrent;
    bool accuracy;
    /* Evaluation metrics besides loss and accuracy, NULL or NULL-terminated names (at most
       MT_EVAL_METRICS; "wer"): metric k is sums[2 + 2k] / sums[3 + 2k] summed over every
       evaluation batch (a share of wrong words: wrong, words). They become columns of
       metrics.csv and are printed at evaluation. */
    const char *const *metrics;

    /* Diagnostics (NULL: the type has none): the hidden state the head reads (rows, C) of B fixed
       held-out rows (the same every call for a seed), resid as mt_stack_forward's. */
    mt_tensor *(*probe)(mt_ctx *c, mt_model *m, mt_task *t, uint64_t seed, int B, double *resid);
};

/* The block stack of a config of any type: every config starts with it. */
static inline const mt_stack_config *mt_config_stack(const void *cfg) { return cfg; }

/* ---- the registry ---------------------------------------------------------------------------- */
/* The types, NULL-terminated. */
extern const mt_model_type *const mt_model_types[];
/* The type named name, or an error naming the accepted ones. */
mt_status mt_model_type_find(const char *name, const mt_model_type **type, mt_err *err);

/* ---- what every model does through its type -------------------------------------------------- */
/* A model of type built from cfg, its parameter table not yet allocated (malloc'd: free it
   with mt_model_free); NULL and the error on failure. */
mt_status mt_model_table(mt_model **m, const mt_model_type *type, const void *cfg, mt_err *err);
/* mt_model_table, then the parameters allocated. */
mt_status mt_model_build(mt_model **m, const mt_model_type *type, const void *cfg, mt_err *err);
void mt_model_free(mt_model *m); /* NULL: nothing */
char *mt_model_config_json(const mt_model *m); /* malloc'd */
/* cfg (type->config_size bytes): the defaults, the keys json sets, validated. */
mt_status mt_model_config_from_json(const mt_model_type *type, const char *json, void *cfg,
                                    mt_err *err);
/* The number of type->metrics. */
int mt_model_metric_count(const mt_model_type *type);
/* "32 x 64 tokens", "64 images": a batch of B rows in words. */
const char *mt_model_batch_words(const mt_model_type *type, const void *cfg, int B, char *buf,
                                 size_t len);
/* Step-arena bytes to reserve for B rows: the activation estimate, generously (3x + 64 MiB):
   pages the arena never touches cost nothing. */
size_t mt_model_arena_bytes(const mt_model_type *type, const void *cfg, int B, bool training);

#endif
