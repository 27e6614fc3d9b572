/* ./train's options: the training, data, optimizer and diagnostics options and the model's config,
 * each a struct with its field table (fields.h), layered
 *     defaults < the resumed run's saved options (--resume: <out>/model.safetensors's "options")
 *              < the --config file < the flags,
 * and a model's preset (mt_model_type.option_defaults: --arch llama's pieces) just under the layer
 * that names it: --arch over the config file, a file's arch = over the defaults and saved options.
 * So an option of the same layer as the preset wins over it (or the model's validation refuses
 * it, as nGPT's does what its unit vectors cannot take), and one of a layer below does not. A
 * resumed run's model fields whose saved value does not give the model its checkpoint's config
 * records (a run saved before presets were layered) take the trained value.
 * --model, from any layer, decides which model's table applies: every model's flags are known
 * (argv is checked against all of them first), but another model's flag or key is an error
 * naming the model it belongs to. */
#ifndef MT_TRAIN_OPTIONS_H
#define MT_TRAIN_OPTIONS_H

#include "../io/fields.h"
#include "train.h"

/* ./train --diag-*: which of src/diag's CSVs a run writes (diag.h says what each holds). */
typedef struct {
    int grad_every;   /* 0: no diag_grad.csv */
    int update_steps; /* 0: no diag_update.csv */
    int resid_every;  /* 0: no diag_resid.csv */
    int attn_every;   /* 0: no diag_attn.csv */
    int batch;        /* sequences of the fixed batch; 0: min(4, the training batch) */
    int logz_every;   /* 0: no diag_logz.csv */
    int skip_every;   /* 0: no diag_skip.csv */
    int ratio_every;  /* 0: no diag_ratio.csv */
    int sink_every;   /* 0: no diag_sink.csv */
    int act_every;    /* 0: no diag_act.csv */
    int hc_every;     /* 0: no diag_hc.csv */
    int qk_every;     /* 0: no diag_qkclip.csv */
} mt_diag_cfg;

/* --format: what --prepare writes. */
typedef enum { MT_PREPARE_MT, MT_PREPARE_LLMC } mt_prepare_format;
extern const mt_enum MT_PREPARE_FORMATS;

/* The options of a run, resolved: every option of ./train, the training ones in the trainer's
   config (its model, task, model_cfg and options set by mt_run_options_read, malloc'd), and the
   model's config. */
typedef struct {
    char model[MT_FIELD_STR_MAX], task[MT_FIELD_STR_MAX];
    char prepare[MT_FIELD_STR_MAX], config[MT_FIELD_STR_MAX];
    int format, shard_tokens; /* --prepare's: mt_prepare_format; tokens per llm.c shard */
    int threads;
    mt_train_cfg train;
    mt_optim_config optim; /* min_lr and warmup derived where not given (MT_OPTIM_FIELDS) */
    int eval_every, eval_batches, save_every, log_every;
    float time_budget, target_loss; /* --time-budget, --target-loss (mt_loop_cfg); 0: none */
    mt_diag_cfg diag;
    bool report; /* report.html in the run's directory, rewritten at each evaluation */
    bool profile;
    bool help;
} mt_run_options;

/* Reads argv (tokenised and checked once), the config file and, with --resume, the run's saved
   options. With --help only the first two are read (r->help; print mt_run_options_help).
   Errors name the flag, key or file and what is accepted (MT_EINVAL; a checkpoint that cannot be
   read keeps its status). */
mt_status mt_run_options_read(mt_run_options *r, int argc, char **argv, mt_err *err);
void mt_run_options_free(mt_run_options *r);
/* Saved options (mt_train_cfg.options, a checkpoint's) with every value resolved, the derived
   ones included: two runs whose texts give the same are the same run (a warmup given equal to
   the one derived); malloc'd, NULL when the text does not read. */
char *mt_run_options_resolved(const char *options);
/* The flags at their defaults: the training options, the block stack's, each model's own;
   malloc'd. */
char *mt_run_options_help(void);

#endif
