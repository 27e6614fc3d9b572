/* The model interface: what the trainer, the checkpoints, the diagnostics and the programs know
 * of a model. A model type fills one mt_model_type (its config, its parameter table, what it
 * reads its inputs with, its loss on a batch, what it can do for ./infer and ./export) and the
 * kind of input it takes (mt_input), which any task of that kind (src/tasks: data, batches,
 * evaluation) hands it; the registry lists the model types. Nothing outside src/models names a
 * type.
 * Dimension letters as in nn.h; a "row" is one sample of a batch (a window of tokens, an image). */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include "../data/data.h"
#include "../io/io.h"
#include "../tensor/base.h"
#include "../tensor/gemm.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"
#include "stack.h"

typedef struct mt_model_type mt_model_type;
typedef struct mt_model mt_model;

/* ---- what the programs do with a model, by what it can do ---------------------------------------
 * A type fills the tables of what its models do (NULL: not that); ./infer and ./export reach a
 * model through them only. Contexts passed in are in eval mode without grad; their precision
 * selects the products' number format. */

/* A language model over a tokenizer (the GPT): scoring a text and generation with a cache. */
typedef struct {
    const mt_tokenizer *(*tokenizer)(const mt_model *m);
    /* The summed negative log-likelihood (nats) of tok (n >= 2 tokens) cut into windows of the
       context, the tokens predicted and the bytes they decode to; the products in precision. */
    mt_status (*score)(const mt_model *m, const uint16_t *tok, size_t n, int precision, double *nll,
                       long *count, long *bytes, mt_err *err);
    /* A generation state (malloc'd: gen_close frees it), no_cache re-running the whole window
       each feed (the reference); gen_feed appends n >= 1 tokens and returns the next token's
       logits (vocabulary size), valid until the next feed. */
    mt_status (*gen_open)(mt_model *m, bool no_cache, int precision, void **state, mt_err *err);
    const float *(*gen_feed)(void *state, const int *ids, int n);
    void (*gen_close)(void *state);
} mt_text_ops;

/* An image classifier (the ViT): what it reads images with, and logits (B, K) of images
   (B, CH, H, W) normalised as the metadata says. */
typedef struct {
    const mt_images *(*images)(const mt_model *m);
    mt_tensor *(*logits)(mt_ctx *c, const mt_model *m, const float *images, int B);
} mt_classify_ops;

/* A transducer of letters into phones (the encoder-decoder): its vocabulary, the longest word
   it reads (src_ctx) and writes (tgt_ctx), decoding one word src (S letter ids) with a beam of
   width K (1: greedy) into out (tgt_ctx) returning the length, and the tallies of a
   dictionary's words (data.h's mt_g2p_tally, with and without stress). */
typedef struct {
    const mt_g2p_vocab *(*vocab)(const mt_model *m);
    void (*limits)(const mt_model *m, int *src_ctx, int *tgt_ctx);
    int (*transduce)(mt_ctx *c, const mt_model *m, const int *src, int S, int K, int *out);
    void (*tally)(mt_ctx *c, const mt_model *m, const mt_g2p_dict *d, const int *words, int n,
                  int K, mt_g2p_tally t[2]);
} mt_g2p_ops;

/* Writing the model in another program's format (export.h's mt_export_opts). */
typedef struct mt_export_opts mt_export_opts;
typedef mt_status (*mt_export_fn)(const mt_model *m, const mt_export_opts *opts, mt_err *err);

/* Reading another program's model file (src/ckpt's importers, docs/export.md): the shape the
   file holds, in a Llama's terms, and what a model type makes of it. llm.c's file is a GPT-2:
   LayerNorm, biases, tanh GELU, learned positions, n_ff 4 n_embd, tied. */
typedef enum { MT_IMPORT_LLAMA2C, MT_IMPORT_LLMC, MT_IMPORT_GGUF } mt_import_format;
typedef struct {
    mt_import_format format;
    int n_layer, n_head, n_kv_head, n_embd, n_ff, n_vocab, n_ctx;
    bool tied;
    float norm_eps, rope_theta;
} mt_import_arch;
/* A rule of a name map, a model's names <- the file's: the model's names that match the pattern
 * `model`, where each '*' matches a run of characters, are read from the file's tensor `file`
 * whose k-th '*' stands for what the k-th '*' of `model` matched:
 *   {"blocks.*.attn.qkv.weight", "h.*.attn.c_attn.weight"}: blocks.3.attn.qkv.weight <-
 *   h.3.attn.c_attn.weight. */
typedef struct {
    const char *model, *file;
} mt_name_rule;
typedef struct {
    char options[512];       /* the architecture as config lines ("n_layer = 6\n"): ./train
                                layers them under the given options */
    const mt_name_rule *map; /* the model's names <- the importer's (ckpt.h) */
    int n_map;
} mt_import;
/* MT_EINVAL naming what does not fit when the type cannot hold the file's model. */
typedef mt_status (*mt_import_fn)(const mt_import_arch *a, mt_import *out, mt_err *err);

/* A built model; the type's own struct holds it (first member) with the rest. */
struct mt_model {
    const mt_model_type *type;
    void *cfg;    /* the type's config, validated (type->config_size bytes) */
    mt_params *P; /* the parameter table */
};

/* ---- the kinds of input ----------------------------------------------------------------------
 * A model takes one kind of input, and any task (src/tasks) of that kind trains it. A kind says
 * what the model does with it besides its loss: images are classified (the type's classify
 * ops), pairs transduced (its g2p ops). */
typedef enum {
    MT_INPUT_TOKENS, /* windows of tokens, each predicting the next */
    MT_INPUT_IMAGES, /* images and their classes */
    MT_INPUT_PAIRS,  /* sequence pairs: a source and the target it is transduced into */
} mt_input_kind;

/* What a model declares of its config to a task: the kind of input, and where in the config
   (offsetof, into an int) the fields are that the task reads or the data sets; 0: none. */
typedef struct {
    mt_input_kind kind;
    size_t n_ctx;                                 /* tokens: a row's length (read) */
    size_t n_vocab;                               /* tokens, pairs: the vocabulary (set) */
    size_t image_h, image_w, channels, n_classes; /* images: set */
    size_t src_ctx, tgt_ctx; /* pairs: the longest source, the longest target + 1 (set) */
    /* images: the tokens of a row a norm's statistics see, and how to have more ("a smaller
       --patch"): BatchNorm's check of a process's rows */
    int (*row_tokens)(const void *cfg);
    const char *more_tokens;
} mt_input;

/* The int of cfg at offset (an mt_input field), read and set. */
static inline int mt_input_get(const void *cfg, size_t offset) {
    return *(const int *)((const char *)cfg + offset);
}
static inline void mt_input_set(void *cfg, size_t offset, int v) {
    *(int *)((char *)cfg + offset) = v;
}

/* ---- the rows a task hands a model --------------------------------------------------------------
 * A batch of B rows of one kind of input (the model checks it is its own). */
typedef struct {
    int T;
    const int *ids, *targets; /* (B, T): the inputs and what each predicts (-1: ignored) */
} mt_token_rows;
typedef struct {
    const float *images; /* (B, CH, H, W), normalised */
    const int *labels;   /* (B) their classes */
} mt_image_rows;
typedef struct {
    int S, T;
    const int *src, *src_len; /* sources (B, S) padded, their lengths (B) */
    const int *ids, *targets; /* decoder inputs and targets (B, T) (-1: ignored) */
} mt_pair_rows;
typedef struct {
    mt_input_kind kind;
    int B;
    union {
        mt_token_rows tokens;
        mt_image_rows images;
        mt_pair_rows pairs;
    };
} mt_batch;

/* The research probes of the diagnostics (src/diag), each NULL when the type has none: the
   hidden state the head reads (rows, C) of a batch, resid as mt_stack_forward's (the model's
   blocks' count + 1 values); the output logits (rows, V) of the batch's predictions (the log Z
   diagnostic); and the block the forward passes over from now on (its input unchanged; the
   blocks counted over the model's stacks, an encoder's first; -1: none): the
   block-effectiveness probe. */
typedef struct {
    mt_tensor *(*hidden)(mt_ctx *c, const mt_model *m, const mt_batch *b, double *resid);
    mt_tensor *(*logits)(mt_ctx *c, const mt_model *m, const mt_batch *b);
    void (*skip_block)(mt_model *m, int block);
} mt_probe_ops;

/* ---- model types ----------------------------------------------------------------------------- */
struct mt_model_type {
    const char *name;      /* "gpt": --model, the checkpoint's "model" */
    const char *about;     /* a line for --help */
    const mt_input *input; /* what it takes, which decides the tasks that train it */
    const char *meta_key;  /* the checkpoint metadata of what reads inputs: "tokenizer", "images" */

    /* config: the struct (which starts with its mt_stack_config), its fields (with the
       stack's), its defaults and checks */
    size_t config_size;
    const mt_fields *fields;
    void (*config_default)(void *cfg);
    /* Checks every field and resolves the derived ones (mt_stack_validate). */
    mt_status (*config_validate)(void *cfg, mt_err *err);
    /* "4 layers, 4 heads, ..." for the programs' model line */
    void (*config_describe)(const void *cfg, char *buf, size_t len);
    /* Optional: options a config trains with unless given (config-file lines: the GPT's arch
       pieces, nGPT's "weight_decay = 0"), or NULL; ./train layers them just under the layer
       that names them (src/train/options.h), and calls it again on the config they give, which
       it marks as holding them (its validation adds no preset of its own). */
    const char *(*option_defaults)(void *cfg);
    /* Activation bytes of a step of B rows (training: with gradients), in double. */
    double (*activation_bytes)(const void *cfg, int B, bool training);

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

    /* The mean cross-entropy of the batch's targets (its kind of input) with the terms of ce
       (label smoothing, z-loss: mt_cross_entropy's), on the parameters P: a scalar. */
    mt_tensor *(*loss)(mt_ctx *c, const mt_model *m, mt_params *P, const mt_batch *b,
                       mt_ce_opts ce);
    /* The diagnostics' probes (NULL: none). */
    const mt_probe_ops *probes;

    /* What the programs do with it (NULL: not that). */
    const mt_text_ops *text;
    const mt_classify_ops *classify;
    const mt_g2p_ops *g2p;
    mt_export_fn export; /* llama2c and GGUF files (docs/export.md) */
    mt_import_fn import; /* llama2c and GGUF files, read by src/ckpt (docs/export.md) */
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
void mt_model_free(mt_model *m);               /* NULL: nothing */
char *mt_model_config_json(const mt_model *m); /* malloc'd */
/* cfg (type->config_size bytes): the defaults, the keys json sets, validated. */
mt_status mt_model_config_from_json(const mt_model_type *type, const char *json, void *cfg,
                                    mt_err *err);
/* Step-arena bytes to reserve for B rows: the activation estimate, generously (3x + 64 MiB):
   pages the arena never touches cost nothing. */
size_t mt_model_arena_bytes(const mt_model_type *type, const void *cfg, int B, bool training);
/* An inference context of m for batches of B rows: eval mode, no grad, precision's products. */
mt_status mt_model_infer_ctx(mt_ctx *c, const mt_model *m, int B, mt_precision precision,
                             mt_err *err);

#endif
