/* ./train's options (options.h): their tables, defaults, layering and help. */
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/ckpt.h"
#include "../models/stack.h"
#include "../tensor/gemm.h"

static const mt_enum_item BAD_IMAGES[] = {[MT_BAD_IMAGES_SKIP] = {.name = "skip",
                                                                  .help = "and list them"},
                                          [MT_BAD_IMAGES_REJECT] = {.name = "reject",
                                                                    .help = "stop"}};
static const mt_enum MT_BAD_IMAGES = MT_ENUM("bad-images", BAD_IMAGES);
static const mt_enum_item RECOMPUTE[] =
    {[MT_RECOMPUTE_NONE] = {.name = "none", .help = "every activation kept for the backward"},
     [MT_RECOMPUTE_BLOCK] = {.name = "block",
                             .help = "each block's input kept, its forward run again in the "
                                     "backward"}};
static const mt_enum MT_RECOMPUTES = MT_ENUM("recompute", RECOMPUTE);
static const mt_enum_item PREPARE_FORMATS[] =
    {[MT_PREPARE_MT] = {.name = "mt", .help = "one token file with its tokenizer"},
     [MT_PREPARE_LLMC] = {.name = "llmc", .help = "a directory of llm.c shards and meta.json"}};
const mt_enum MT_PREPARE_FORMATS = MT_ENUM("format", PREPARE_FORMATS);

/* ---- tables -------------------------------------------------------------------------------- */

/* What reads an option (mt_field.read), on the resolved options. */
static bool token_shards(const void *d) {
    return mt_data_is_tokens(((const mt_data_cfg *)d)->path);
}
/* token data is read with the tokenizer it was made with (--prepare) */
static bool tokenizes(const void *d) { return !token_shards(d); }
static bool learns_bpe(const void *d) {
    return tokenizes(d) && ((const mt_data_cfg *)d)->tokenizer == MT_TOK_BPE;
}
static bool reads_tokenizer_file(const void *d) {
    int k = ((const mt_data_cfg *)d)->tokenizer;
    return tokenizes(d) && (k == MT_TOK_SP || k == MT_TOK_GPT2);
}
static bool prepares_llmc(const void *o) {
    const mt_run_options *t = o;
    return t->prepare[0] && t->format == MT_PREPARE_LLMC;
}
static bool lora(const void *o) { return ((const mt_run_options *)o)->train.lora.rank > 0; }
static bool mpi_build(const void *o) {
    (void)o;
#ifdef MT_MPI
    return true;
#else
    return false;
#endif
}

#define F(member, TYPE, key, help, ...) MT_FIELD(mt_data_cfg, member, TYPE, key, help, __VA_ARGS__)
static const mt_field DATA[] = {
    F(path, STR, "data",
      "training text (UTF-8 for char), token file FILE.bin, or a directory or quoted glob of "
      "token shards (mt, llm.c, nanoGPT: docs/data.md); images: an image folder (a subdirectory "
      "per class) or MNIST-format idx files"),
    F(tokenizer, ENUM, "tokenizer", "tokenizer of a text file", .of = &MT_TOKENIZERS,
      .read = tokenizes, .read_by = "--data of text (token data keeps its --prepare's)"),
    F(tokenizer_file, STR, "tokenizer_file",
      "--tokenizer sp: llama2.c's tokenizer.bin, the text encoded as its run.c encodes, or "
      "Hugging Face's tokenizer.json of a Llama (BPE by merge ranks, byte fallback); "
      "--tokenizer gpt2: the directory of GPT-2's encoder.json and vocab.bpe (or encoder.json's "
      "path, vocab.bpe beside it), encoded as its encoder.py encodes, or Hugging Face's "
      "tokenizer.json of GPT-2's BPE; either: none: --init-from's tokenizer.json (a Hugging Face "
      "directory's), or a GGUF file of "
      "that vocabulary (tokenizer.ggml.model llama for sp, gpt2 for gpt2)",
      .read = reads_tokenizer_file, .read_by = "--tokenizer sp or gpt2"),
    F(vocab_size, INT, "vocab_size",
      "bpe: the vocabulary learnt from the training part (the 256 bytes and the merges)",
      .range = "257..65536", .read = learns_bpe,
      .read_by = "--tokenizer bpe (byte: 256 tokens, char: the text's characters)"),
    F(data_vocab, INT, "data_vocab",
      "token shards without a tokenizer (llm.c, nanoGPT): the vocabulary of their ids; 0: "
      "meta.json's beside them (docs/data.md)",
      .range = "0..65536", .read = token_shards, .read_by = "--data of token shards"),
    F(val_fraction, FLOAT, "val_fraction",
      "last part of the data held out for validation (text: "
      "of its bytes; images: a random part, unless the data has a test part)"),
    F(image_size, INT, "image_size", "images resized to N x N; 0: the data's size", .range = "0.."),
    F(channels, INT, "channels", "images: 1 gray, 3 RGB (2, 4 with alpha); 0: the data's",
      .range = "0..4"),
    F(resize, BOOL, "resize", "images: one of another size is bad instead of resized",
      .flag = "no_resize"),
    F(bad_images, ENUM, "bad_images",
      "unreadable or mismatched images are skipped (and listed) or stop the run",
      .of = &MT_BAD_IMAGES),
    F(classes, STR, "classes",
      "images: class names, one per line (idx data; default: classes.txt beside it)"),
};
#undef F
static const mt_fields DATA_FIELDS = MT_FIELDS_OF(DATA);

#define F(member, TYPE, key, help, ...) MT_FIELD(mt_diag_cfg, member, TYPE, key, help, __VA_ARGS__)
static const mt_field DIAG[] = {
    F(grad_every, INT, "diag_grad_every",
      "per-sublayer gradient norms every N steps from init to diag_grad.csv; 0: off",
      .range = "0.."),
    F(update_steps, INT, "diag_update_steps",
      "model update ||F(x,theta_t) - F(x,theta_0)|| for steps 0..N to diag_update.csv; 0: off",
      .range = "0.."),
    F(resid_every, INT, "diag_resid_every",
      "residual-stream norm entering each block every N steps to diag_resid.csv; 0: off",
      .range = "0.."),
    F(attn_every, INT, "diag_attn_every",
      "the largest attention logit of each layer every N steps to diag_attn.csv; 0: off",
      .range = "0.."),
    F(batch, INT, "diag_batch",
      "rows of the fixed held-out batch of the diagnostics; 0: min(4, batch)", .range = "0.."),
    F(logz_every, INT, "diag_logz_every",
      "log Z of the output logits (mean, max over the batch) every N steps to diag_logz.csv; "
      "0: off",
      .range = "0.."),
    F(skip_every, INT, "diag_skip_every",
      "the batch's loss with each block skipped in turn, every N steps and at the end, to "
      "diag_skip.csv; 0: off",
      .range = "0.."),
    F(ratio_every, INT, "diag_update_ratio_every",
      "each matrix's update-to-weight ratio ||dW|| / ||W|| every N steps to diag_ratio.csv; 0: off",
      .range = "0.."),
    F(sink_every, INT, "diag_sink_every",
      "each layer's attention-sink rate and attention entropy every N steps to diag_sink.csv; "
      "0: off",
      .range = "0.."),
    F(act_every, INT, "diag_act_every",
      "max |x| and kurtosis of the residual stream entering each block every N steps to "
      "diag_act.csv; 0: off",
      .range = "0.."),
    F(hc_every, INT, "diag_hc_every",
      "--residual hc or mhc: the Amax gains of each block's residual mixing and of the composite "
      "mixing from it to the end (mHC's) every N steps to diag_hc.csv; 0: off",
      .range = "0.."),
    F(qk_every, INT, "diag_qkclip_every",
      "--qk-clip: the heads QK-Clip scaled in each layer's attention and its largest logit, over "
      "every N steps, to diag_qkclip.csv; 0: off",
      .range = "0.."),
};
#undef F
static const mt_fields DIAG_FIELDS = MT_FIELDS_OF(DIAG);

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(mt_run_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field TRAIN[] = {
    F(model, STR, "model", "the model (listed below)"),
    F(train.data, TABLE, "data", NULL, .of = &DATA_FIELDS),
    F(task, STR, "task",
      "the task the model trains on, one of its kind of input (listed below; none: the first)"),
    F(prepare, STR, "prepare", "write --data as a token file FILE.bin (or --format's) and exit",
      .flags = MT_FIELD_CLI),
    F(format, ENUM, "format", "--prepare's output", .of = &MT_PREPARE_FORMATS,
      .flags = MT_FIELD_CLI),
    F(shard_tokens, INT, "shard_tokens", "--prepare --format llmc: tokens per shard",
      .range = "1..2147483647", .flags = MT_FIELD_CLI, .read = prepares_llmc,
      .read_by = "--prepare --format llmc"),
    F(train.out, STR, "out", "directory of model.safetensors, optim.safetensors, metrics.csv"),
    F(config, STR, "config", "config file of key = value lines (flags override it)",
      .flags = MT_FIELD_CLI),
    F(train.resume, BOOL, "resume",
      "continue the run in --out (its options, then the config, then flags)",
      .flags = MT_FIELD_CLI),
    F(train.init_from, STR, "init_from",
      "a new run whose model starts from the weights of FILE (./train's model.safetensors, or "
      "an imported file: docs/export.md; a Hugging Face checkpoint's directory), by name and "
      "shape",
      .flags = MT_FIELD_CLI),
    F(train.init_skip, STR, "init_skip",
      "--init-from: globs (',' between them) of the tensors left at their initialisation",
      .flags = MT_FIELD_CLI),
    F(train.freeze, STR, "freeze",
      "globs (',' between them) of the parameters left as they are: no gradient, no optimizer "
      "state (names as the checkpoint's)"),
    F(train.lora.rank, INT, "lora_rank",
      "LoRA: the adapters' rank r on the --lora-targets matrices, the rest frozen; 0: none",
      .range = "0.."),
#define LORA .read = lora, .read_by = "--lora-rank"
    F(train.lora.alpha, FLOAT, "lora_alpha", "LoRA: the adapters' scale is alpha / r", LORA),
    F(train.lora.dropout, FLOAT, "lora_dropout", "LoRA: dropout on the adapters' input, in [0, 1)",
      LORA),
    F(train.lora.targets, STR, "lora_targets",
      "LoRA: peft's names of the matrices adapted, among q, k, v, o, gate, up, down", LORA),
#undef LORA
    F(train.seed, INT, "seed", "seed of the weights, batches and dropout", .range = "0.."),
    F(threads, INT, "threads", "threads; 0: OMP_NUM_THREADS or all cores", .range = "0..1024"),
    F(train.replicas, INT, "replicas",
      "threads that each run a slice of every batch (data parallel: no "
      "fork and join per op, faster for small models); 0: every thread (1 with BatchNorm or MPI "
      "ranks); 1: every op split across the threads",
      .range = "0..1024"),
    F(train.precision, ENUM, "precision",
      "number format of the linear layers' matrix products (bf16: docs/performance.md)",
      .of = &MT_PRECISIONS),
    F(train.steps, INT, "steps", "optimizer steps; 0 writes the initialised model", .range = "0.."),
    F(train.batch, INT, "batch", "rows (sequences, images) per step", .range = "1.."),
    F(train.grad_accum, INT, "grad_accum",
      "micro-batches of --batch rows per step: a step's batch is grad_accum x batch rows, in the "
      "memory of batch rows",
      .range = "1.."),
    F(train.recompute, ENUM, "recompute",
      "activations: block keeps each block's input only and recomputes the rest in the "
      "backward (less memory, one more forward)",
      .of = &MT_RECOMPUTES),
    F(optim, TABLE, "optim", NULL, .of = &MT_OPTIM_FIELDS),
    F(eval_every, INT, "eval_every",
      "validation every N steps (and at the end); 0: only at the end", .range = "0.."),
    F(eval_batches, INT, "eval_batches",
      "text: validation batches (the same ones each time); "
      "encdec: at most this many batches of validation words",
      .range = "1.."),
    F(save_every, INT, "save_every",
      "checkpoint every N steps (and at the end); 0: only at the end", .range = "0.."),
    F(log_every, INT, "log_every", "progress and a metrics row every N steps", .range = "1.."),
    F(time_budget, FLOAT, "time_budget",
      "stop after the step that ends past this many seconds from the first step (then validate "
      "and save as at the end); 0: none",
      .range = "(0..", .flags = MT_FIELD_CLI),
    F(target_loss, FLOAT, "target_loss",
      "stop at the first validation whose loss is at most this; 0: none", .range = "(0..",
      .flags = MT_FIELD_CLI),
    F(diag, TABLE, "diag", NULL, .of = &DIAG_FIELDS),
    F(report, BOOL, "report",
      "report.html in --out: the run's curves and per-block heatmaps (docs/plotting.md), "
      "rewritten at each evaluation; the page reloads itself until the run ends"),
    F(profile, BOOL, "profile",
      "time per op of the training steps (forward, backward, share), printed at the end",
      .flags = MT_FIELD_CLI),
    F(train.arena_mb, INT, "arena_mb", "step arena in MiB; 0: estimated", .range = "0.."),
    F(train.bucket_kb, INT, "bucket_kb",
      "MPI: gradients are summed across ranks in buckets of this "
      "many KiB, each sent once the backward pass has finished it",
      .range = "1..", .read = mpi_build, .read_by = "a build with MPI (make MPI=1)"),
    F(train.zero, INT, "zero",
      "MPI: 1 shards the optimizer state across the ranks (ZeRO-1: each rank updates its share "
      "of the tensors, docs/mpi.md); 0: every rank holds all of it",
      .range = "0..1", .flags = MT_FIELD_CLI),
    F(help, BOOL, "help", "this list", .flags = MT_FIELD_CLI),
};
#undef F
static const mt_fields TRAIN_FIELDS = MT_FIELDS_OF(TRAIN);

/* The defaults: a tiny GPT on tiny Shakespeare in a minute (configs/tiny-gpt.ini). The optimizer's
   numbers are floats' values (MT_OPTIM_FIELDS). */
static mt_run_options defaults(void) {
    mt_optim_config oc = mt_optim_defaults();
    oc.kind = MT_OPTIM_ADAMW, oc.decay_scope = MT_DECAY_MATRICES;
    oc.beta1 = 0.9f, oc.beta2 = 0.99f, oc.eps = 1e-8f, oc.weight_decay = 0.1f, oc.clip = 1.0f;
    oc.sched = (mt_schedule){.kind = MT_SCHED_COSINE, .lr = 3e-3f}; /* min_lr, warmup: derived */
    oc.sched.decay_frac = mt_optim_defaults().sched.decay_frac;
    mt_run_options o = {
        .train = {.data = {.path = "data/tinyshakespeare.txt",
                           .tokenizer = MT_TOK_BYTE,
                           .vocab_size = 4096,
                           .val_fraction = 0.1f,
                           .resize = true,
                           .bad_images = MT_BAD_IMAGES_SKIP},
                  .out = "out",
                  .seed = 1337,
                  .steps = 1000,
                  .batch = 32,
                  .grad_accum = 1,
                  .bucket_kb = MT_DIST_BUCKET_KB,
                  /* peft's LoraConfig: lora_alpha 8, dropout 0, q and v (LLaMA's) */
                  .lora = {.alpha = 8, .targets = "q,v"},
                  .resolve_options = mt_run_options_resolved},
        .shard_tokens = 100000000, /* llm.c's fineweb shards */
        .optim = oc,
        .eval_every = 200,
        .eval_batches = 20,
        .save_every = 500,
        .log_every = 10,
    };
    snprintf(o.model, sizeof o.model, "%s", mt_model_types[0]->name);
    return o;
}

/* ---- the sets of fields ---------------------------------------------------------------------- */

/* The block stack inside a model's config (which every config holds). */
static mt_fieldset stack_of(const mt_model_type *t, void *cfg) {
    for (int i = 0; i < t->fields->n; i++)
        if (t->fields->f[i].of == &MT_STACK_FIELDS)
            return (mt_fieldset){.fields = &MT_STACK_FIELDS,
                                 .obj = (char *)cfg + t->fields->f[i].off};
    MT_ASSERT(0, "model %s: its fields hold no block stack", t->name);
}

/* Every model's config at its defaults, for the first reading, when --model is not known yet:
   the training options, the stack (the first model's), every model's own fields. */
typedef struct {
    mt_run_options o;
    int n_types;
    void **cfg;
    mt_fieldset *sets; /* (2 + n_types) */
} all_models;

static void all_init(all_models *a) {
    for (a->n_types = 0; mt_model_types[a->n_types]; a->n_types++) {}
    a->cfg = calloc((size_t)a->n_types, sizeof *a->cfg);
    a->sets = calloc((size_t)a->n_types + 2, sizeof *a->sets);
    MT_ASSERT(a->cfg && a->sets, "train: out of memory");
    a->o = defaults();
    a->sets[0] = (mt_fieldset){.fields = &TRAIN_FIELDS, .obj = &a->o};
    for (int i = 0; i < a->n_types; i++) {
        const mt_model_type *t = mt_model_types[i];
        a->cfg[i] = malloc(t->config_size);
        MT_ASSERT(a->cfg[i], "train: out of memory");
        t->config_default(a->cfg[i]);
        a->sets[2 + i] = (mt_fieldset){.fields = t->fields, .obj = a->cfg[i]};
    }
    a->sets[1] = stack_of(mt_model_types[0], a->cfg[0]);
}

static void all_free(all_models *a) {
    for (int i = 0; i < a->n_types; i++) free(a->cfg[i]);
    free(a->cfg);
    free(a->sets);
}

/* The settings of the layers, bottom first: saved (a resumed run's), the config file, the flags;
   and the model's defaults (mt_model_type.option_defaults: a preset), just under the layer that
   names them (preset_under: the top layer that alone, on the defaults, gives them; else saved). */
typedef struct {
    mt_settings model, saved, file, flags;
    const mt_settings *preset_under;
    char *trained; /* --resume: the checkpoint's model config as config lines (trained_config) */
} layers;

/* Applies the layers under upto (NULL: all of them), the model's defaults where they sit. */
static mt_status apply_layers(const layers *L, const mt_fieldset *sets, int n,
                              const mt_settings *upto, mt_err *err) {
    const mt_settings *order[] = {&L->saved, &L->file, &L->flags};
    mt_status s = MT_OK;
    for (int i = 0; i < 3 && s == MT_OK; i++) {
        if (order[i] == L->preset_under) s = mt_settings_apply(&L->model, sets, n, err);
        if (order[i] == upto) break;
        if (s == MT_OK) s = mt_settings_apply(order[i], sets, n, err);
    }
    return s;
}

/* The value the settings give key (the last; '-' and '_' alike), NULL when none. */
static const char *setting(const mt_settings *s, const char *key) {
    const char *v = NULL;
    for (int i = 0; i < s->n; i++) {
        const char *a = s->s[i].name, *b = key;
        while (*a && (*a == *b || (strchr("-_", *a) && strchr("-_", *b)))) a++, b++;
        if (!*a && !*b) v = s->s[i].value;
    }
    return v;
}

/* A flag or config key of the run (not the saved options of a resumed one). */
static const char *given(const layers *L, const char *key) {
    return setting(&L->flags, key) ? setting(&L->flags, key) : setting(&L->file, key);
}

/* The given settings (the flags; the config file's lines that change a value and that no flag
   replaces: a run's saved options, read as a config file, hold every key) that the run does not
   read (mt_field.read) are refused, read on the resolved options and a validated copy of the
   model's config (one that does not validate yet is left to the trainer, which names why). */
static mt_status check_read(const layers *L, const mt_run_options *r, mt_err *err) {
    const mt_model_type *t = r->train.model;
    mt_run_options o = defaults();
    void *cfg = malloc(t->config_size);
    mt_setting *given = malloc(((size_t)L->flags.n + (size_t)L->file.n + 1) * sizeof *given);
    MT_ASSERT(cfg && given, "train: out of memory");
    t->config_default(cfg);
    mt_fieldset sets[] = {{&TRAIN_FIELDS, &o}, stack_of(t, cfg), {t->fields, cfg}};
    mt_settings g = {.s = given};
    mt_status s = apply_layers(L, sets, 3, &L->file, err);
    for (int i = 0; s == MT_OK && i < L->file.n; i++) /* against the layers under the file */
        if (!setting(&L->flags, L->file.s[i].name) && mt_setting_changes(&L->file.s[i], sets, 3))
            given[g.n++] = L->file.s[i]; /* (a flag's value replaces it) */
    for (int i = 0; i < L->flags.n; i++) given[g.n++] = L->flags.s[i];
    o = *r;
    memcpy(cfg, r->train.model_cfg, t->config_size);
    mt_err invalid;
    if (s == MT_OK && t->config_validate(cfg, &invalid) == MT_OK)
        s = mt_settings_check_read(&g, sets, 3, err);
    free(given);
    free(cfg);
    return s;
}

/* The checkpoint's model config (its "config": what the run trained, presets and derived values
   resolved) as config lines of its model's fields into *lines (malloc'd). */
static mt_status trained_config(const char *path, const char *model, const char *json, char **lines,
                                mt_err *err) {
    const mt_model_type *t;
    mt_status s = mt_model_type_find(model, &t, err);
    void *cfg = s == MT_OK ? malloc(t->config_size) : NULL;
    if (s != MT_OK) return s;
    MT_ASSERT(cfg, "train: out of memory");
    t->config_default(cfg);
    mt_err e;
    if (mt_fields_from_json(t->fields, json, cfg, &e) == MT_OK)
        *lines = mt_fieldset_to_ini(&(mt_fieldset){t->fields, cfg}, 1, NULL);
    else s = mt_errorf(err, MT_EFORMAT, "--resume: %s: its model config: %s", path, e.msg);
    free(cfg);
    return s;
}

/* The options of <out>/model.safetensors into *text and its model config as config lines into
   *model_lines (both malloc'd; the second NULL for a file without one); a --model (flag or config
   file, in L) other than the checkpoint's is refused: the saved options are that model's. */
static mt_status read_saved(const char *out, const layers *L, char **text, char **model_lines,
                            mt_err *err) {
    char path[MT_FIELD_STR_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (access(path, F_OK) != 0)
        return mt_errorf(err, MT_EINVAL,
                         "--resume: no checkpoint %s (--out names the run to continue)", path);
    mt_status s = mt_file_check("--resume", path, err);
    mt_safetensors st;
    if (s == MT_OK) s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    const char *saved = mt_st_meta(&st, "options"), *model = mt_st_meta(&st, "model");
    const char *asked = given(L, "model"), *config = mt_st_meta(&st, "config");
    if (!model) model = mt_model_types[0]->name; /* files from before models were named */
    if (saved && asked && strcmp(asked, model) != 0)
        s = mt_errorf(err, MT_EINVAL,
                      "--resume: %s holds a %s run, and --model %s was given: a run continues "
                      "as the model it is (drop --model)",
                      path, model, asked);
    if (saved && config && s == MT_OK) s = trained_config(path, model, config, model_lines, err);
    if (saved && s == MT_OK) *text = strdup(saved);
    mt_st_free(&st);
    if (s != MT_OK) return s;
    if (!saved)
        return mt_errorf(err, MT_EINVAL,
                         "the checkpoint has no saved options: was it written by ./train?");
    MT_ASSERT(*text, "train: out of memory");
    return MT_OK;
}

/* The layers as every model's fields read them (each setting checked), and the model they
   name. With --help only the flags and the config file. */
static mt_status read_layers(layers *L, all_models *a, int argc, char **argv, mt_err *err) {
    mt_fieldset *sets = a->sets;
    int n = 2 + a->n_types;
    mt_status s = mt_fieldset_parse_args(sets, n, argc, argv, &L->flags, err);
    if (s == MT_OK && a->o.config[0] &&
        (s = mt_fieldset_read_ini(sets, n, a->o.config, &L->file, err)) == MT_EIO)
        s = err->status = MT_EINVAL; /* a config file that cannot be read: a usage error */
    a->o = defaults();
    if (s == MT_OK) s = apply_layers(L, sets, n, NULL, err);
    if (s != MT_OK || a->o.help || (!a->o.train.resume && !a->o.train.init_from[0])) return s;
    char *text = NULL; /* a resumed run's options, or an imported --init-from's architecture */
    s = a->o.train.resume ? read_saved(a->o.train.out, L, &text, &L->trained, err)
                          : mt_ckpt_import_options(a->o.train.init_from, &text, err);
    if (s == MT_OK && text) /* both written by mt: saved options' rules (retired values) */
        s = mt_fieldset_parse_saved(sets, n, text,
                                    a->o.train.resume ? "the checkpoint's options"
                                                      : a->o.train.init_from,
                                    &L->saved, err);
    free(text);
    a->o = defaults();
    if (s == MT_OK) s = apply_layers(L, sets, n, NULL, err);
    return s;
}

/* Appends text (malloc'd, freed here) to *out. */
static void append(char **out, size_t *len, char *text) {
    size_t k = strlen(text);
    *out = realloc(*out, *len + k + 1);
    MT_ASSERT(*out, "train: out of memory");
    memcpy(*out + *len, text, k + 1);
    *len += k;
    free(text);
}

/* A resumed run's model fields whose saved options (over the model's defaults) do not give the
   model the checkpoint trained are set to the trained values, the last lines of the saved layer:
   an older build filled a preset's pieces in validation where the fields held the GPT's defaults,
   so its saved arch = llama with norm = ln trained RMSNorm. Compared on the validated config
   (derived values resolved); all of them when it does not validate. sets: the model's, at the
   defaults. */
static mt_status saved_as_trained(layers *L, const mt_model_type *t, const mt_fieldset *sets,
                                  mt_err *err) {
    void *scratch = malloc(t->config_size);
    MT_ASSERT(scratch, "train: out of memory");
    t->config_default(scratch);
    mt_settings trained = {0};
    mt_status s = apply_layers(L, sets, 3, &L->file, err);
    if (s == MT_OK && t->option_defaults) t->option_defaults(sets[2].obj); /* they are in */
    mt_err invalid;
    bool valid = s == MT_OK && t->config_validate(sets[2].obj, &invalid) == MT_OK;
    if (s == MT_OK)
        s = mt_fieldset_parse_ini(&(mt_fieldset){t->fields, scratch}, 1, L->trained,
                                  "the checkpoint's model config", &trained, err);
    char *differ = strdup(""), *line;
    size_t len = 0;
    for (int i = 0; s == MT_OK && i < trained.n; i++) {
        const mt_setting *x = &trained.s[i];
        if (valid && !mt_setting_changes(x, sets, 3)) continue;
        MT_ASSERT(asprintf(&line, "%s = \"%s\"\n", x->name, x->value) >= 0, "train: out of memory");
        append(&differ, &len, line);
    }
    if (s == MT_OK && len)
        s = mt_fieldset_parse_ini(sets, 3, differ, "the checkpoint's model config", &L->saved, err);
    free(differ);
    mt_settings_free(&trained);
    free(scratch);
    return s;
}

/* Every layer's settings in order (.s malloc'd, its entries L's): what gives a derived field. */
static mt_settings given_all(const layers *L) {
    const mt_settings *order[] = {&L->model, &L->saved, &L->file, &L->flags};
    mt_settings g = {
        .s = malloc((size_t)(L->model.n + L->saved.n + L->file.n + L->flags.n + 1) * sizeof *g.s)};
    MT_ASSERT(g.s, "train: out of memory");
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < order[i]->n; j++) g.s[g.n++] = order[i]->s[j];
    return g;
}

/* The fields no setting gives derived (on the run's steps: the optimizer's warmup). */
static void derive(mt_run_options *o, const mt_fieldset *sets, int n, const mt_settings *given) {
    o->optim.sched.steps = o->train.steps;
    mt_fieldset_derive(sets, n, given);
}

/* What the options resolve to for the loop: the derived fields. */
static void resolve(mt_run_options *r, const mt_fieldset *sets, const mt_settings *given) {
    derive(r, sets, 3, given);
    r->train.data.eval_batches = r->eval_batches;
}

/* The top layer that alone, on the defaults, gives the model's defaults md: the one that names
   the preset; saved when none does. */
static const mt_settings *preset_layer(const layers *L, const mt_model_type *t, const char *md) {
    const mt_settings *order[] = {&L->flags, &L->file, &L->saved}, *under = &L->saved;
    mt_run_options o;
    void *cfg = malloc(t->config_size);
    MT_ASSERT(cfg, "train: out of memory");
    mt_fieldset sets[] = {{&TRAIN_FIELDS, &o}, stack_of(t, cfg), {t->fields, cfg}};
    for (int i = 0; i < 3 && under == &L->saved; i++) {
        o = defaults();
        t->config_default(cfg);
        mt_err e;
        const char *named = mt_settings_apply(order[i], sets, 3, &e) == MT_OK
                                ? t->option_defaults(cfg)
                                : NULL;
        if (named && strcmp(named, md) == 0) under = order[i];
    }
    free(cfg);
    return under;
}

/* The layers on the model t's sets (the options o and its config cfg, at their defaults): its
   defaults where they sit, a resumed run's trained values (saved_as_trained). */
static mt_status model_layers(layers *L, const mt_model_type *t, mt_run_options *o, void *cfg,
                              const mt_fieldset *sets, mt_err *err) {
    L->preset_under = &L->saved;
    mt_status s = apply_layers(L, sets, 3, NULL, err);
    const char *md = s == MT_OK && t->option_defaults ? t->option_defaults(cfg) : NULL;
    if (md) {
        s = mt_fieldset_parse_ini(sets, 3, md, "the model's defaults", &L->model, err);
        L->preset_under = preset_layer(L, t, md);
    }
    if (s == MT_OK && L->trained) {
        *o = defaults();
        t->config_default(cfg);
        s = saved_as_trained(L, t, sets, err);
    }
    if (s != MT_OK || !(md || L->trained)) return s;
    *o = defaults(); /* the model's defaults, or the trained values, in: all again */
    t->config_default(cfg);
    s = apply_layers(L, sets, 3, NULL, err);
    if (s == MT_OK && md) t->option_defaults(cfg); /* it holds them now */
    return s;
}

/* The options of the model t read into r (its config malloc'd into r->train.model_cfg), its
   task found, the options to save and the derived ones set, what nothing reads refused. */
static mt_status read_model(layers *L, const mt_model_type *t, mt_run_options *r, mt_err *err) {
    void *cfg = malloc(t->config_size);
    MT_ASSERT(cfg, "train: out of memory");
    t->config_default(cfg);
    mt_fieldset sets[] = {{&TRAIN_FIELDS, r}, stack_of(t, cfg), {t->fields, cfg}};
    mt_status s = model_layers(L, t, r, cfg, sets, err);
    r->train.model = t, r->train.model_cfg = cfg;
    for (size_t n = strlen(r->train.out); n > 1 && r->train.out[n - 1] == '/';) /* o/ is o */
        r->train.out[--n] = 0;
    if (s == MT_OK) s = mt_task_find(r->task, t, &r->train.task, err);
    mt_settings given = given_all(L);
    if (s == MT_OK) r->train.options = mt_fieldset_to_ini(sets, 3, &given); /* no derived ones */
    resolve(r, sets, &given);
    free(given.s);
    return s == MT_OK ? check_read(L, r, err) : s;
}

/* A flag or config key that the model t has not and another model has (the first reading knew it
   by every model's fields): refused naming whose it is, where the model's own reading would only
   call it unknown. */
static mt_status other_model(const layers *L, const all_models *a, const mt_model_type *t,
                             mt_err *err) {
    int it = 0;
    while (mt_model_types[it] != t) it++;
    const mt_fieldset own[] = {a->sets[0], a->sets[1], a->sets[2 + it]};
    const mt_settings *given[] = {&L->file, &L->flags};
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < given[g]->n; i++) {
            const mt_setting *x = &given[g]->s[i];
            size_t len = strlen(x->name);
            if (mt_fieldset_find(own, 3, x->name, len, NULL)) continue;
            for (int k = 0; k < a->n_types; k++)
                if (mt_fieldset_find(&a->sets[2 + k], 1, x->name, len, NULL)) {
                    char where[MT_FIELD_STR_MAX + 96];
                    if (x->source)
                        snprintf(where, sizeof where, "%s:%d: key '%s'", x->source, x->line,
                                 x->name);
                    else snprintf(where, sizeof where, "--%s", x->name);
                    return mt_errorf(err, MT_EINVAL,
                                     "%s: refused for --model %s: it is an option of --model %s "
                                     "only (docs/layers.md says what each model takes)",
                                     where, t->name, mt_model_types[k]->name);
                }
        }
    return MT_OK;
}

mt_status mt_run_options_read(mt_run_options *r, int argc, char **argv, mt_err *err) {
    *r = defaults();
    layers L = {0};
    all_models a;
    all_init(&a);
    mt_status s = read_layers(&L, &a, argc, argv, err);
    const mt_model_type *t = NULL;
    if (s == MT_OK && a.o.help) r->help = true;
    if (s == MT_OK && !a.o.help) s = mt_model_type_find(a.o.model, &t, err);
    if (s == MT_OK && t) s = other_model(&L, &a, t, err);
    if (s == MT_OK && t) s = read_model(&L, t, r, err); /* the model's own fields only */
    all_free(&a);
    mt_settings_free(&L.model);
    mt_settings_free(&L.saved);
    mt_settings_free(&L.file);
    mt_settings_free(&L.flags);
    free(L.trained);
    return s;
}

void mt_run_options_free(mt_run_options *r) {
    free((void *)r->train.model_cfg); /* the run's own (mt_run_options_read) */
    free((void *)r->train.options);
    *r = (mt_run_options){0};
}

char *mt_run_options_help(void) {
    all_models a;
    all_init(&a);
    char *out = NULL, *line;
    size_t len = 0;
    append(&out, &len, mt_fieldset_help(a.sets, 1, NULL, 0));
    append(&out, &len, strdup("\nthe block stack (every model):\n"));
    append(&out, &len, mt_fieldset_help(a.sets + 1, 1, NULL, 0));
    for (int i = 0; i < a.n_types; i++) {
        const mt_model_type *t = mt_model_types[i];
        MT_ASSERT(asprintf(&line, "\n--model %s: %s (", t->name, t->about) >= 0,
                  "train: out of memory");
        append(&out, &len, line);
        for (int k = 0, first = 1; mt_task_types[k]; k++) { /* its tasks, the default first */
            const mt_task_type *task = mt_task_types[k];
            if (task->input != t->input->kind) continue;
            MT_ASSERT(asprintf(&line, "%s--task %s, --data: %s", first ? "" : "; ", task->name,
                               task->data) >= 0,
                      "train: out of memory");
            append(&out, &len, line);
            first = 0;
        }
        append(&out, &len, strdup(")\n"));
        /* a flag listed above (the stack's, an earlier model's) is not listed again */
        append(&out, &len, mt_fieldset_help(a.sets + 2 + i, 1, a.sets + 1, 1 + i));
    }
    all_free(&a);
    return out;
}

char *mt_run_options_resolved(const char *options) {
    all_models a;
    all_init(&a);
    mt_settings saved = {0};
    mt_err e;
    char *text = NULL;
    if (mt_fieldset_parse_saved(a.sets, 2 + a.n_types, options, "options", &saved, &e) == MT_OK) {
        derive(&a.o, a.sets, 2 + a.n_types, &saved);
        text = mt_fieldset_to_ini(a.sets, 2 + a.n_types, NULL);
    }
    mt_settings_free(&saved);
    all_free(&a);
    return text;
}
