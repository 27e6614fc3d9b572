/* mt train: a model trained on its data (the loop's step, evaluation, checkpoints through
 * src/ckpt, resume, a start from another run's weights); data parallelism across threads
 * (replicas) and processes (MPI). The programs train.c and infer.c are thin shells over this
 * module and src/app; what is particular to a model is behind its type (src/models/model.h), to
 * its data behind its task (src/tasks/task.h). */
#ifndef MT_TRAIN_H
#define MT_TRAIN_H

#include "../ckpt/ckpt.h"
#include "../data/data.h"
#include "../io/fields.h"
#include "../io/io.h"
#include "../models/model.h"
#include "../nn/nn.h"
#include "../optim/optim.h"
#include "../tasks/task.h"
#include "../tensor/base.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"

/* ---- data parallelism (MPI) ------------------------------------------------------------------
 * Built with MT_MPI (make MPI=1), ./train is one rank of an MPI job: every rank holds the whole
 * model and computes a slice of each global batch (mt_dist_slice); the gradients are summed
 * across ranks in buckets, each started (MPI_Iallreduce) as soon as the backward pass has
 * finished every gradient in it. Without MT_MPI the process is rank 0 of 1 and these do nothing. */
/* The default size of a bucket (./train --bucket-kb): 1 MiB, 256 Ki floats. */
#define MT_DIST_BUCKET_KB 1024
void mt_dist_init(int *argc, char ***argv);
void mt_dist_finalize(void);
int mt_dist_rank(void);
int mt_dist_size(void);
int mt_dist_local_size(void); /* ranks on this machine */
/* Under mpirun: a warning into buf when the ranks on this machine leave cores idle (mpirun binds
   a rank to one core unless told otherwise) or oversubscribe them; false when there is none. */
bool mt_dist_thread_warning(char *buf, size_t len);
/* This rank's rows [lo, lo + n) of B: consecutive slices in rank order, n = B / size +- 1. */
void mt_dist_slice(int B, int *lo, int *n);
/* x (n) summed across ranks, in place. */
void mt_dist_sum(double *x, int n);
/* x (n) the largest across ranks, in place. */
void mt_dist_max(float *x, int n);
/* Collective: when *s failed on any rank, every rank gets the status and message (naming the
   rank) of the lowest such rank, so that all stop together with one message. */
void mt_dist_agree(mt_status *s, mt_err *err);

/* ZeRO-1 (--zero 1, zero.c): the optimizer state sharded across the ranks. Rank r holds the state
   of a run of whole entries of the parameter table, [first[r], first[r + 1]), floats
   [at[r], at[r + 1]) of P->data (the runs tile the table in order, cut so that the largest run is
   as small as it can be: 1/N of the floats within the largest entry). A step's
   gradients are reduce-scattered (each bucket's sum lands in its owners' shards), each rank
   updates its own entries, and the parameters are all-gathered. Whole entries because Muon steps
   a matrix whole (Newton-Schulz); the same cut serves every kind. */
typedef struct {
    int ranks;
    int *first;   /* (ranks + 1) */
    size_t *at;   /* (ranks + 1) */
    int *counts;  /* (ranks) floats of each shard, for the gathers */
    float *stash; /* the buffers (BatchNorm's statistics) outside the shard, kept across a
                           gather: each rank keeps its own, as without --zero */
    size_t stash_floats;
} mt_zero;

/* The cut of P's entries into `ranks` runs (first: ranks + 1 entries, 0 and P->n at the ends) whose
   largest is the smallest possible: at most total / ranks floats plus the largest entry. */
void mt_zero_plan(const mt_params *P, int ranks, int *first);
/* The plan for this job's ranks and its buffers. */
mt_status mt_zero_init(mt_zero *z, const mt_params *P, mt_err *err);
void mt_zero_free(mt_zero *z);
/* The sum of squares of the summed gradient, each rank's shard's summed across ranks: every
   rank gets the norm's square. */
double mt_zero_grad_sumsq(const mt_zero *z, const mt_params *P);
/* After an update of this rank's shard: the parameters all-gathered (the buffers outside the shard
   kept, the bf16 copy rounded), and the gradient outside the shard zeroed, or with `grads`
   all-gathered too (P->grad then holds the whole summed gradient, as without --zero). */
void mt_zero_gather(const mt_zero *z, mt_params *P, bool grads);
/* Collective: the other shards' optimizer state gathered on rank 0, which saves it with its own
   as mt_optim_save (the same file as an unsharded run's; for the write rank 0 holds the whole
   state, as every rank does without --zero); the other ranks return MT_OK. */
mt_status mt_zero_save_optim(const mt_zero *z, const mt_optim *o, const mt_params *P,
                             const char *path, mt_err *err);
/* Collective: the optimizer state bytes each rank holds, bytes[ranks]. */
void mt_zero_state_bytes(const mt_zero *z, const mt_optim *o, double *bytes);

typedef struct {
    mt_params *P;
    const mt_zero *zero; /* NULL: the gradients are all-reduced; else reduce-scattered */
    int *rs_counts;      /* (n_buckets x ranks) with zero: bucket b's floats in rank r's shard */
    int n_buckets;
    int *bucket;          /* (P->n) the bucket of each entry */
    const mt_node **last; /* (P->n) the node whose backward finishes entry i this step */
    size_t *lo, *hi;      /* (n_buckets) the bucket's range of P->grad, in floats */
    int *pending;         /* (n_buckets) its entries not final yet */
    bool *started;        /* (n_buckets) */
    void *req;            /* (n_buckets) MPI requests */
    double comm_s;        /* seconds spent in MPI calls by this rank (starting, testing, waiting) */
} mt_dist_grads;

/* Buckets of about bucket_floats gradients; with zero (not NULL) each bucket is reduce-scattered
   into the ranks' shards, and mt_dist_grads_end leaves this rank's shard of P->grad summed (the
   rest of P->grad undefined: mt_zero_gather zeroes or gathers it). */
mt_status mt_dist_grads_init(mt_dist_grads *g, mt_params *P, size_t bucket_floats,
                             const mt_zero *zero, mt_err *err);
/* Between the forward and the backward pass: marks each parameter's last reader on c's tape and
   hooks c's backward; mt_dist_grads_end (after it) waits until P->grad is summed everywhere. */
void mt_dist_grads_begin(mt_dist_grads *g, mt_ctx *c);
void mt_dist_grads_end(mt_dist_grads *g, mt_ctx *c);
void mt_dist_grads_free(mt_dist_grads *g);

/* ---- data parallelism across threads ------------------------------------------------------------
 * A step's rows split across the threads of the process: replica r runs the forward and backward
 * of its consecutive slice on one thread, with single-threaded kernels, in a step arena of its
 * own and into gradients of its own (mt_params_view: the weights are shared); the batch's
 * gradient is the sum of the replicas', in a fixed order (the same bits on every run), which the
 * optimizer reads where it lies (mt_grads). For a
 * small model this beats splitting every op across the threads: no fork and join per op, each
 * core on its own rows (deep100, 2 threads: 1.2x). It needs a model without buffers (BatchNorm's
 * running statistics would be written by every replica). */

/* The loss of rows [lo, lo + n) of the batch, built in c on the parameters P (a replica's view or
   the model's own): a scalar, the mean over the rows. */
typedef mt_tensor *(*mt_rows_loss)(mt_ctx *c, mt_params *P, int lo, int n, void *arg);

typedef struct {
    int n;        /* replicas; 1: only the caller's context, every op split across the threads */
    mt_ctx *ctx;  /* (n - 1) the step arenas of replicas 1.. (replica 0 runs in the caller's) */
    mt_params *P; /* (n - 1) their parameter views */
    float **grad; /* (n) the gradient buffers: P->grad (replica 0's), then replicas 1..'s */
    double *loss; /* (n) each replica's weighted loss of the last backward */
    int ran;      /* the most replicas a backward has run: the buffers that hold gradients */
} mt_replicas;

/* n replicas of the model whose parameters are P, each with an arena of arena_bytes for its slice
   of the batch; dropout streams seeded from seed. */
mt_status mt_replicas_init(mt_replicas *R, int n, const mt_params *P, size_t arena_bytes,
                           uint64_t seed, mt_err *err);
/* Forward and backward of rows [lo, lo + rows) of a batch of B rows: replica r computes
   loss(c_r, P_r, its slice) and its backward with the weight n_r / B into its gradient buffer,
   so that the sum of the buffers, mt_replicas_grads, is the gradient of the batch's mean loss
   (added to what they held: calls accumulate until an update consumes them). c is replica 0's
   context (reset here); the others draw their dropout keys from streams reseeded from c->rng.
   Returns sum_r loss_r n_r / B. */
double mt_replicas_backward(mt_replicas *R, mt_ctx *c, mt_params *P, int lo, int rows, int B,
                            mt_rows_loss loss, void *arg);
/* fn(c_s, s, arg) for s in [0, k), k <= R->n, each on a thread of its own in replica s's context
   (c for s = 0; the others with c's training and grad modes); one after another when k == 1.
   For work whose parts share nothing but read-only parameters (evaluation). */
void mt_replicas_run(mt_replicas *R, mt_ctx *c, int k, void (*fn)(mt_ctx *c, int s, void *arg),
                     void *arg);
/* The gradient the backward passes left: for mt_optim_update (which zeroes the buffers), or
   mt_grads_sum to have it in P->grad. */
mt_grads mt_replicas_grads(const mt_replicas *R);
void mt_replicas_free(mt_replicas *R);

/* ---- the step's parallelism -------------------------------------------------------------------
 * How a step's work is split, one of three chosen once by mt_trainer_init (mt_parallel_choose):
 * - threads: one process whose replicas split each micro-batch across the threads (mt_replicas);
 * - ranks: MPI ranks, each computing a slice of each micro-batch, the gradients all-reduced in
 *   buckets during the last backward (mt_dist_grads);
 * - shards: ranks with --zero 1, the gradients reduce-scattered into the ranks' shards, each
 *   rank's optimizer state and update its own entries, the parameters all-gathered (mt_zero).
 * The step calls backward, grad_norm, the update of this rank's entries and gather, in order. */
typedef struct mt_trainer mt_trainer;
typedef struct {
    bool sharded; /* each rank holds the optimizer state of its own entries only (about 1/N) */
    /* What the steps use (the buckets, the shards), and this rank's entries of the parameter
       table, [*first, *last): the ones its optimizer updates. */
    mt_status (*init)(mt_trainer *tr, int *first, int *last, mt_err *err);
    /* Forward and backward of the drawn batch's micro-batches: *G the gradient of the step's
       mean loss, summed across ranks (with shards: this rank's entries of it); returns this
       rank's share of the step's mean loss. */
    double (*backward)(mt_trainer *tr, mt_grads *G);
    /* The norm of the summed gradient G, the same on every rank. */
    double (*grad_norm)(const mt_trainer *tr, const mt_grads *G);
    /* After this rank's entries were updated (or left): every rank's parameters the same, and
       P->grad zero outside this rank's entries, or with grads G's sum there too. */
    void (*gather)(mt_trainer *tr, bool grads);
    /* Collective: the whole optimizer state written to path by rank 0 (the others: MT_OK). */
    mt_status (*save_optim)(mt_trainer *tr, const char *path, mt_err *err);
} mt_parallel;

/* ---- training -------------------------------------------------------------------------------- */
/* --recompute: what a training step keeps for the backward. */
typedef enum { MT_RECOMPUTE_NONE, MT_RECOMPUTE_BLOCK } mt_recompute_mode;

/* A run: the options' values as ./train's field table reads them (options.h), the model, task and
   saved options as the run's options resolve them (or a test sets them). */
typedef struct {
    const mt_model_type *model;
    const void *model_cfg;      /* the model's config (the data sets what it decides) */
    const mt_task_type *task;   /* what it trains on (mt_task_check); NULL: the first for the
                                   model's kind of input (mt_task_find) */
    mt_data_cfg data;           /* data.seed and .batch are set from seed and batch */
    char out[MT_FIELD_STR_MAX]; /* directory, created when missing */
    int seed;                   /* weights, sampler and dropout */
    int steps, batch;
    int grad_accum; /* micro-batches of `batch` rows an optimizer step takes (0: 1): the
                       step's batch is grad_accum x batch rows, computed batch at a time */
    int arena_mb;   /* the step arena in MiB; 0: estimated from the model and batch */
    int bucket_kb;  /* MPI: KiB of gradients per bucket (mt_dist_grads); 0: MT_DIST_BUCKET_KB */
    const char *options; /* saved in checkpoints (config-file lines) */
    /* options as compared with another run's (defaults filled in; malloc'd, NULL when they do
       not read); NULL: the texts compared as they are */
    char *(*resolve_options)(const char *options);
    bool resume;   /* false: an out directory holding a run with other options is refused */
    int zero;      /* 1: ZeRO-1 (mt_zero), the optimizer state sharded across MPI ranks; 0 */
    int replicas;  /* threads that each run a slice of a step's batch (mt_replicas): 0 =
                      every thread, unless the model has buffers or MPI runs several ranks
                      (then 1); 1 = one, with every op split across the threads */
    int recompute; /* mt_recompute_mode: MT_RECOMPUTE_BLOCK, each block keeps only its input and
                      runs again in the backward (mt_recompute) */
    int precision; /* mt_precision of the linear layers' products: MT_BF16 keeps the
                      weights' bf16 copy (refreshed after each update); mt_bf16_check
                      must pass */
    /* "": the model initialised; else a checkpoint whose weights it starts from by name
       (mt_ckpt_init_from), but the tensors init_skip's globs name: a new run (step 0, a fresh
       optimizer state) */
    char init_from[MT_FIELD_STR_MAX], init_skip[MT_FIELD_STR_MAX];
    /* "": every parameter trained; else globs of the names of those left as they are
       (mt_ckpt_freeze: no gradient, no optimizer state) */
    char freeze[MT_FIELD_STR_MAX];
    mt_lora_cfg lora; /* rank 0: none */
} mt_train_cfg;

struct mt_trainer {
    mt_train_cfg cfg;
    const mt_parallel *par; /* how the step's work is split (mt_parallel_choose) */
    mt_model *model;
    mt_task *task;
    mt_optim opt;
    mt_ctx ctx;
    mt_sampler sampler;
    long step;                           /* steps taken */
    mt_params *P;                        /* the parameters of the model trained */
    double val_accuracy;                 /* of the last mt_trainer_eval, for a type with accuracy */
    double val_metrics[MT_EVAL_METRICS]; /* of the last mt_trainer_eval: the type's metrics */
    char model_path[1024], optim_path[1024], optim_prev_path[1024];
    mt_dist_grads dist; /* under MPI (ranks, shards): the gradient buckets */
    mt_zero zero;       /* with shards (--zero 1): the plan; tr->opt holds this rank's state */
    mt_replicas replicas;
    int slice_rows; /* the most rows one context computes at once: a replica's slice */
    bool keep_grad; /* set by a caller that reads P->grad after a step (the diagnostics) */
    bool grad_held; /* P->grad holds the last step's gradient: the next step zeroes it first */
    /* with cfg.init_from: what the model's start read from the file */
    mt_load_report init;
    /* --qk-clip (tr->opt.cfg.qk_clip > 0; else qk.n 0): the attentions, and (replicas x
       qk.heads) each replica context's probe of a step's largest logits (mt_ctx.qk_max) */
    mt_qk_clip qk;
    float *qk_max;        /* after a step: its first qk.heads the largest logits before clipping */
    int *qk_attn_clipped; /* (qk.n) the heads each attention clipped at the last step */
};

/* How a run of cfg splits its steps in this job: threads in one process, ranks under MPI, shards
   with cfg->zero (which one process refuses, MT_EINVAL). */
mt_status mt_parallel_choose(const mt_train_cfg *cfg, const mt_parallel **par, mt_err *err);

/* Checks the paths (--data a readable file, --out a writable directory that holds no run with
   other options unless cfg->resume) and that the model, its gradients, the optimizer state and
   a step's activations fit in the available memory (MT_ENOMEM "needs X GiB, Y GiB available"),
   then loads the data, builds and initialises the model (seeded; with cfg->init_from its weights
   then read from that checkpoint by name, tr->init the report) and the optimizer
   (oc->sched.steps is set to cfg->steps) and allocates everything the loop needs. A given
   arena_mb smaller than a step needs is refused (MT_EINVAL, naming --arena-mb and the size
   measured). Nothing is written but the out directory, created last. */
mt_status mt_trainer_init(mt_trainer *tr, const mt_train_cfg *cfg, const mt_optim_config *oc,
                          mt_err *err);
/* Continues from the checkpoint in cfg->out: its model (mc must describe the same model), the
   optimizer state, the step and the RNG states. The data and tokenizer must be those of the
   checkpoint. Collective under MPI (every rank calls it, and gets the same status); rank 0 alone
   touches the files. */
mt_status mt_trainer_resume(mt_trainer *tr, mt_err *err);

typedef struct {
    double loss, grad_norm, lr; /* grad_norm before clipping */
    bool finite;                /* false: nothing was updated; see mt_params_first_nonfinite */
    /* --qk-clip: the heads clipped after the update and the step's largest logit over every
       head (before the clip); 0 and NAN without it */
    int qk_clipped;
    double qk_logit;
} mt_step_stats;

/* One step: a batch of grad_accum x batch rows, drawn at once; forward and backward of each
   micro-batch of batch rows (under MPI this rank's slice of it), the gradients accumulated in
   P->grad (or the replicas' buffers) with the weight of their rows in the step's batch, and
   summed across ranks during the last backward (with --zero 1 reduce-scattered: this rank's
   shard is updated and the parameters all-gathered); clip, the optimizer update (skipped when the
   loss or the gradient norm is not finite), zero grad; the last three in one pass
   (mt_optim_update); then with --qk-clip the rescaling of the heads whose largest logit of the
   step (over its micro-batches, replicas and ranks) exceeded tau (mt_qk_clip_apply). After a
   step that updated nothing, or with tr->keep_grad, P->grad holds the gradient (summed; clipped
   when the update ran). No allocation: the step arena and the
   trainer's buffers. */
void mt_trainer_step(mt_trainer *tr, mt_step_stats *st);
/* Mean validation loss over the rows of the type's evaluation batches (the same every time);
   NAN without a validation split. tr->val_accuracy is set for a type with accuracy. Under MPI
   each rank evaluates its slice of every batch and the sums are combined: every rank gets the
   same value. */
double mt_trainer_eval(mt_trainer *tr);
/* Writes the optimizer state, then the model (which commits the step). The previous optimizer
   state is kept as optim.prev.safetensors until then: a run killed between the two writes
   resumes from the model's step with the optimizer state of that step. Every rank calls it: rank 0
   writes (with --zero 1 after gathering the shards), the others return MT_OK. */
mt_status mt_trainer_save(mt_trainer *tr, mt_err *err);
void mt_trainer_free(mt_trainer *tr);

/* ---- the loop -------------------------------------------------------------------------------- */
/* Where a run is, for the program's progress line: after each logged step. */
typedef struct {
    long step, steps, first; /* steps taken, the run's steps, the step it started from */
    mt_step_stats st;        /* of the last step */
    double ms;               /* the last step's time */
    double t0, elapsed;      /* mt_clock() at the start; seconds since, at the log */
    double units;            /* tokens (images, words) of a step's batch */
    bool eval;               /* validated at this step: val and the metrics are set */
    bool reached;            /* a validation loss reached mt_loop_cfg.target_loss */
    double val_last;         /* the last validation loss, NAN before any */
    double val;              /* mean validation loss, NAN when not evaluated */
    const double *metrics;   /* the type's metrics (tr->val_metrics), NAN when not evaluated */
} mt_progress;

typedef struct {
    int eval_every;      /* validation every N steps and at the end; 0: only at the end */
    int save_every;      /* checkpoint every N steps and at the end; 0: only at the end */
    int log_every;       /* a metrics row (and on_log) every N steps, and at each evaluation */
    mt_profile *profile; /* NULL, or where the training steps' ops are timed (not evaluations) */
    /* Early stops (0: none): after the step that ends past time_budget seconds from the first
       step, or at the evaluation whose loss is <= target_loss; the stop validates and saves as
       the last step does. */
    double time_budget, target_loss;
    /* After each step that updated (the diagnostics): a failure stops the run with it. */
    mt_status (*after_step)(mt_trainer *tr, const mt_step_stats *st, void *arg, mt_err *err);
    void (*on_log)(const mt_trainer *tr, const mt_progress *p, void *arg); /* the progress line */
    void *arg;
} mt_loop_cfg;

/* Trains from tr->step to tr->cfg.steps: each step, then the diagnostics (after_step), the
   evaluation and metrics row when due (<out>/metrics.csv, rank 0; a resumed run keeps the rows
   up to its step), a checkpoint when due and at the end. A run already at its last step writes
   its checkpoint again. time_budget and target_loss stop the run earlier (p: where it stopped,
   NULL: not wanted). A step whose loss or gradient is not finite stops the run with
   MT_EDIVERGED naming the first non-finite gradient (nothing updated, the last checkpoint kept). */
mt_status mt_trainer_run(mt_trainer *tr, const mt_loop_cfg *cfg, mt_progress *p, mt_err *err);

/* gguf_vocab.c: */
/* --tokenizer KIND --tokenizer-file PATH when PATH is a GGUF file (else *json NULL): its
   vocabulary as mt's tokenizer JSON (the form mt_tok_from_json reads) of KIND, "sp" for a
   SentencePiece one (model llama: its pieces, U+2581 read as ' ', and scores), "gpt2" for a
   byte-level BPE one (model gpt2 of GPT-2's ids: tokens, merges; mt_gpt2_from_vocab checks them,
   MT_EFORMAT); MT_EINVAL naming the --tokenizer its model needs. */
mt_status mt_gguf_tokenizer(const char *path, const char *kind, char **json, mt_err *err);

#endif
