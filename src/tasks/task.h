/* Tasks: what a model is trained and evaluated on. A task owns its data (loaded and split from
 * the data options), the training batches it draws, the loss of their rows and the evaluation;
 * it reaches a model only through its type (src/models/model.h): the kind of input the type
 * takes (mt_input: the config fields a task reads and the data sets), config_validate, the loss
 * of a batch of that kind and the ops of the kind (classify, g2p). So a task trains any model of
 * its kind, and no task names a model. The registry lists the tasks; --task chooses one, the
 * first of the model's kind by default. Dimension letters as in nn.h. */
#ifndef MT_TASK_H
#define MT_TASK_H

#include "../data/data.h"
#include "../io/fields.h"
#include "../models/model.h"
#include "../models/stack.h"
#include "../nn/nn.h"
#include "../tensor/base.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"
#include "inference.h"

/* A task's state is its type's own struct, which holds mt_task first. */
typedef struct mt_task_type mt_task_type;
typedef struct {
    const mt_task_type *type;
} mt_task;

/* What the training data is and how it is read and split: ./train's data options (read into by
   the field table of src/train/options.c), then what the trainer sets. */
typedef struct {
    char path[MT_FIELD_STR_MAX]; /* a text, token file or shard set, or an image dataset (data.h) */
    mt_tok_kind tokenizer;       /* text */
    int vocab_size;              /* text, bpe: the vocabulary to learn from the training part */
    char tokenizer_file[MT_FIELD_STR_MAX]; /* text, sp: llama2.c's tokenizer.bin */
    const char *tokenizer_json; /* the trainer's: tokenizer_file's tokenizer read whole (a GGUF's
                                   vocabulary, mt_tok_to_json's form); NULL: the task reads it */
    int data_vocab;      /* token shards without a tokenizer: their vocabulary; 0: meta.json's */
    double val_fraction; /* the last part of a text (in bytes); a random part of images (but a
                            test part) */
    /* images (the task's mt_image_opts): H = W = image_size and C = channels, 0: the data's */
    int image_size, channels;
    bool resize;                    /* another size resized (not mismatched) */
    int bad_images;                 /* mt_bad_images */
    char classes[MT_FIELD_STR_MAX]; /* a class-name file; "": classes.txt beside idx data */
    uint64_t seed;                  /* a random split */
    int batch;        /* rows of a training batch: an optimizer step's (every micro-batch) */
    int min_rows;     /* the fewest rows of a micro-batch one process computes */
    int eval_batches; /* text: validation batches of `batch` windows */
} mt_data_cfg;

#define MT_EVAL_METRICS 8

/* An evaluation's sums over rows: the loss summed over rows, the rows predicted right (a task
   with accuracy), and for each of the task's metrics its two terms (a share of wrong words:
   wrong, words), whose ratio over every evaluation batch is the metric. Only doubles: it is
   summed across processes as an array. */
typedef struct {
    double loss, right;
    double metric[MT_EVAL_METRICS][2];
} mt_eval_sums;

struct mt_task_type {
    const char *name;    /* "text": --task */
    mt_input_kind input; /* the kind of input it hands a model */
    const char *data;    /* what --data names: "a text or token file" */
    bool data_file;      /* --data is a file (not a folder; text: or a shard set,
                            mt_data_is_set): text, which --prepare can tokenize */
    const char *units;   /* what a row holds: "tokens", "images" */
    const char *unit;    /* of throughput: "tok", "img" */
    /* Units (tokens) in a row of a model's config (throughput); NULL: a row is one unit. */
    int (*row_units)(const mt_model_type *model, const void *model_cfg);
    size_t unit_bytes; /* what a unit takes in the drawn batch (text: its input and target ids) */

    /* Loads and splits the data; fills the fields of the model config the data decides
       (model->input's: n_vocab; image size, channels, classes) and validates it. */
    mt_status (*load)(mt_task **t, const mt_data_cfg *d, const mt_model_type *model,
                      void *model_cfg, mt_err *err);
    void (*free)(mt_task *t);
    /* The data line of the programs; a warning about the data (malloc'd) or NULL (warning
       NULL: the task never warns). */
    void (*describe)(const mt_task *t, char *buf, size_t len);
    char *(*warning)(const mt_task *t);
    /* The meta JSON (the model type's meta_to_json) of the data: what a model trained on it reads
       inputs with. */
    char *(*meta)(const mt_task *t);

    /* Draws the next training batch of d->batch rows with r (the same draw in every process). */
    void (*draw_batch)(mt_task *t, mt_rng *r);
    /* The mean loss over rows [lo, lo + n) of the drawn batch (a scalar), built in c on the
       parameters P (the model's or a replica's view of them); what the rows read beyond the
       drawn indices (images) goes in c's arena: slices run concurrently. */
    mt_tensor *(*rows_loss)(mt_ctx *c, const mt_model *m, mt_params *P, mt_task *t, int lo, int n);

    /* Evaluation: the same validation batches every time. eval_count: how many; eval_draw: draws
       batch i (i = 0 first) and returns its rows; eval_rows: adds rows [lo, lo + n) of it to s. */
    int (*eval_count)(const mt_task *t);
    int (*eval_draw)(mt_task *t, int i);
    void (*eval_rows)(mt_ctx *c, const mt_model *m, mt_task *t, int lo, int n, mt_eval_sums *s);
    /* eval_rows may run on disjoint rows of a batch in several contexts at once (it writes
       nothing but its context's arena and its sums): the trainer then evaluates a batch's slices
       on the replicas' threads, else one slice after another */
    bool eval_concurrent;
    bool accuracy; /* eval_rows counts the rows right */
    /* Evaluation metrics besides loss and accuracy, NULL or NULL-terminated names (at most
       MT_EVAL_METRICS; "wer"). They become columns of metrics.csv and are printed at evaluation. */
    const char *const *metrics;

    /* Diagnostics (NULL: none): B fixed held-out rows (the same every call for a seed), in c's
       arena, for the model's hidden. */
    mt_batch (*probe_rows)(mt_ctx *c, mt_task *t, uint64_t seed, int B);

    /* What ./infer does with a model of the task's kind (NULL: nothing; inference.h). */
    const mt_infer_use *infer;
};

/* n rows of T tokens, their inputs and targets (n, T): the batch the token tasks hand a model. */
static inline mt_batch mt_token_batch(const int *ids, const int *targets, int T, int n) {
    return (mt_batch){.kind = MT_INPUT_TOKENS,
                      .B = n,
                      .tokens = {.T = T, .ids = ids, .targets = targets}};
}
/* A row's units of a model taking tokens: its n_ctx (the text and sft tasks' row_units). */
int mt_text_row_units(const mt_model_type *model, const void *cfg);

/* The tasks (one file each). */
extern const mt_task_type mt_text_task;  /* text.c: next-token prediction */
extern const mt_task_type mt_image_task; /* images.c: classification */
extern const mt_task_type mt_g2p_task;   /* g2p.c: pronunciations of words */
extern const mt_task_type mt_sft_task;   /* sft.c: instruction tuning on conversations */

/* ---- the registry ---------------------------------------------------------------------------- */
/* The tasks, NULL-terminated. */
extern const mt_task_type *const mt_task_types[];
/* The first task of the model's kind of input (NULL: none). */
const mt_task_type *mt_task_default(const mt_model_type *model);
/* The task for a model of type: the one named name (refused, naming those that would do, when it
   takes another kind of input), or with name NULL or "" the first of the model's kind. */
mt_status mt_task_find(const char *name, const mt_model_type *model, const mt_task_type **task,
                       mt_err *err);
/* Refuses a task of another kind of input than the model's. */
mt_status mt_task_check(const mt_task_type *task, const mt_model_type *model, mt_err *err);

/* The number of the task's metrics. */
int mt_task_metric_count(const mt_task_type *task);
/* Units in a row of a model's config (mt_task_type.row_units). */
int mt_task_row_units(const mt_task_type *task, const mt_model_type *model, const void *cfg);
/* "32 x 64 tokens", "64 images": a batch of B rows of a model's config in words. */
const char *mt_task_batch_words(const mt_task_type *task, const mt_model_type *model,
                                const void *cfg, int B, char *buf, size_t len);

/* g2p.c, for its test: the word of row b of the drawn batch. */
const char *mt_g2p_task_drawn_word(const mt_task *t, int b);

#endif
