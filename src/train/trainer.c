/* The training loop's pieces: setup, one step, evaluation, checkpoints, resume, for any model
   through its type (src/models/model.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../io/fields.h"
#include "../models/stack.h"
#include "../nn/nn.h"
#include "../tensor/gemm.h"
#include "train.h"

/* independent RNG streams from one seed */
#define SEED_SAMPLER 0x53414d504c455221ULL
#define SEED_DROPOUT 0x44524f504f555421ULL

/* The most rows of a batch of B one rank computes. */
static int local_rows(int B) { return (int)(((long)B + mt_dist_size() - 1) / mt_dist_size()); }

/* The first line of a that differs from b's into x, b's into y ("" past an end). */
static void first_difference(const char *a, const char *b, char *x, char *y, size_t len) {
    while (*a || *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || strncmp(a, b, la) != 0) {
            snprintf(x, len, "%.*s", (int)la, a);
            snprintf(y, len, "%.*s", (int)lb, b);
            return;
        }
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
}

/* A run in out that is not the one asked for (other options, as cfg->resolve_options gives
   them: a default and the same value given are one run) is refused without --resume: its
   checkpoint would be overwritten. The same options start the run over. */
static mt_status check_fresh_out(const mt_train_cfg *cfg, const char *model_path, mt_err *err) {
    struct stat sb;
    if (stat(model_path, &sb) != 0) return MT_OK;
    mt_safetensors st;
    mt_err e;
    if (mt_st_load(model_path, &st, &e) != MT_OK)
        return mt_errorf(err, MT_EINVAL,
                         "--out %s holds a model.safetensors that cannot be read (%s): remove it "
                         "or choose another --out",
                         cfg->out, e.msg);
    const char *saved = mt_st_meta(&st, "options"), *options = cfg->options ? cfg->options : "";
    char *there = saved && cfg->resolve_options ? cfg->resolve_options(saved) : NULL;
    char *now = there ? cfg->resolve_options(options) : NULL;
    const char *a = now ? there : saved, *b = now ? now : options;
    mt_status s = MT_OK;
    if (!a || strcmp(a, b) != 0) {
        char x[160] = "", y[160] = ""; /* the first line that differs names the option */
        first_difference(a ? a : "", b, x, y, sizeof x);
        s = mt_errorf(err, MT_EINVAL,
                      "--out %s already holds another run (there '%s', now '%s'): --resume "
                      "continues it, or choose another --out",
                      cfg->out, x, y);
    }
    free(there);
    free(now);
    mt_st_free(&st);
    return s;
}

/* --recompute block: a context's blocks keep only their input (mt_ctx.recompute). */
static bool recomputes(const mt_train_cfg *cfg) { return cfg->recompute == MT_RECOMPUTE_BLOCK; }

/* --arena-mb in bytes; 0: none given. */
static size_t arena_given(const mt_train_cfg *cfg) { return (size_t)cfg->arena_mb << 20; }

/* The step arena for a slice of rows of the batch: --arena-mb, or the model's estimate. */
static size_t step_arena(const mt_trainer *tr, int rows) {
    if (tr->cfg.arena_mb) return arena_given(&tr->cfg);
    return mt_model_arena_bytes(tr->model->type, tr->model->cfg, rows, true);
}

static bool has_buffers(const mt_params *P) {
    for (int i = 0; i < P->n; i++)
        if (P->p[i].role == MT_ROLE_BUFFER) return true;
    return false;
}

/* The replicas a step runs (mt_train_cfg.replicas, checked by check_replicas once the model
   exists): at most one per row of this rank's slice of the batch. */
static int replica_count(const mt_train_cfg *cfg, const mt_params *P) {
    int n = cfg->replicas;
    if (n == 0) n = mt_dist_size() > 1 || has_buffers(P) ? 1 : mt_threads();
    return n < local_rows(cfg->batch) ? n : local_rows(cfg->batch);
}

static mt_status check_replicas(const mt_train_cfg *cfg, const mt_params *P, mt_err *err) {
    if (cfg->replicas < 0 || cfg->replicas > mt_threads())
        return mt_errorf(err, MT_EINVAL,
                         "--replicas %d: expected 0 (one per thread) to %d (the threads)",
                         cfg->replicas, mt_threads());
    if (cfg->replicas > 1 && has_buffers(P))
        return mt_errorf(err, MT_EINVAL,
                         "--replicas %d: the model keeps running statistics (BatchNorm), which "
                         "replicas would all write: expected 0 or 1",
                         cfg->replicas);
    if (cfg->replicas > 1 && mt_dist_size() > 1)
        return mt_errorf(err, MT_EINVAL,
                         "--replicas %d: MPI runs %d ranks: expected 0 or 1 (one thread of "
                         "replicas per rank is not supported)",
                         cfg->replicas, mt_dist_size());
    return MT_OK;
}

/* The bytes of a step's drawn batch (every micro-batch's rows) for the model config mc. */
static double drawn_bytes(const mt_train_cfg *cfg, const void *mc) {
    return (double)cfg->data.batch * cfg->task->unit_bytes *
           mt_task_row_units(cfg->task, cfg->model, mc);
}

/* The drawn batch alone against the available memory, before the task allocates it. */
static mt_status check_drawn(const mt_train_cfg *cfg, mt_err *err) {
    char what[128];
    snprintf(what, sizeof what, "the step's drawn batch of --batch %d x --grad-accum %d rows",
             cfg->batch, cfg->grad_accum);
    return mt_mem_check(drawn_bytes(cfg, cfg->model_cfg), what, err);
}

/* The parameter table P (not yet allocated), its gradients, the optimizer state and act bytes
   of a step's activations (batch names the batch) against the available memory. */
static mt_status check_memory(const mt_trainer *tr, const mt_params *P, const mt_optim_config *oc,
                              double act, const char *batch, mt_err *err) {
    double gib = 1024.0 * 1024 * 1024, params = (double)P->total * sizeof(float);
    double grads = (double)P->grad_total * sizeof(float); /* the frozen entries' left out */
    double slots = mt_optim_state_slots(oc);              /* floats of state per gradient float */
    if (tr->par->sharded) slots /= mt_dist_size();        /* about 1/N of it: a shard */
    slots += replica_count(&tr->cfg, P) - 1;              /* the other replicas' gradients */
    if (tr->cfg.arena_mb) act = (double)arena_given(&tr->cfg);
    double drawn = drawn_bytes(&tr->cfg, tr->model->cfg);
    char what[384];
    snprintf(what, sizeof what,
             "parameters and gradients %.2f GiB, optimizer state and replicas' gradients %.2f "
             "GiB, activations of a batch of %s %.2f GiB, the step's drawn batch of --batch %d "
             "x --grad-accum %d rows %.2f GiB",
             (params + grads) / gib, slots * grads / gib, batch, act / gib, tr->cfg.batch,
             tr->cfg.grad_accum, drawn / gib);
    mt_status s = mt_mem_check(params + (1 + slots) * grads + act + drawn, what, err);
    if (s != MT_OK) return s;
    /* each step arena is reserved whole (and touched as used): one larger than the memory and
       swap is refused by the kernel whatever the check above found */
    int n_rep = replica_count(&tr->cfg, P), rows = local_rows(tr->cfg.batch);
    double arena = (double)step_arena(tr, (rows + n_rep - 1) / n_rep), total = mt_mem_total();
    if (arena <= total) return MT_OK;
    return mt_errorf(err, MT_ENOMEM,
                     "a step arena of %.2f GiB (3 x the activations of %d row(s) + 64 MiB) is "
                     "more than this machine's memory and swap, %.2f GiB: use a smaller --batch, "
                     "--n-ctx or model, or set --arena-mb",
                     arena / gib, (rows + n_rep - 1) / n_rep, total / gib);
}

/* --init-skip's globs, and a LoRA run's adapters: the file holds the base. */
static const char *init_skip(const mt_train_cfg *cfg, char *buf, size_t len) {
    bool given = cfg->init_skip[0];
    snprintf(buf, len, "%s%s%s", given ? cfg->init_skip : "", given ? "," : "",
             cfg->lora.rank > 0 ? "*.lora_A.weight,*.lora_B.weight" : "");
    return buf;
}

/* The data, then the model it decides the rest of (vocabulary, image size), its memory checked,
   allocated and initialised (seeded). */
static mt_status setup(mt_trainer *tr, const mt_optim_config *oc, mt_err *err) {
    const mt_train_cfg *cfg = &tr->cfg;
    const mt_model_type *type = cfg->model;
    void *mc = malloc(type->config_size);
    if (!mc) return mt_errorf(err, MT_ENOMEM, "out of memory for a config");
    memcpy(mc, cfg->model_cfg, type->config_size);
    mt_data_cfg data = cfg->data; /* a GGUF's vocabulary read here: tasks do not read GGUF */
    if ((data.tokenizer == MT_TOK_GPT2 || data.tokenizer == MT_TOK_SP) && !data.tokenizer_file[0] &&
        cfg->init_from[0] &&
        !mt_hf_tokenizer_json(cfg->init_from, data.tokenizer_file, sizeof data.tokenizer_file))
        data.tokenizer_file[0] = 0; /* --init-from's own tokenizer.json, if it has one */
    char *json = NULL;
    mt_status s = data.tokenizer_file[0]
                      ? mt_gguf_tokenizer(data.tokenizer_file,
                                          mt_enum_name(&MT_TOKENIZERS, data.tokenizer), &json, err)
                      : MT_OK;
    data.tokenizer_json = json;
    if (s == MT_OK) s = cfg->task->load(&tr->task, &data, type, mc, err);
    free(json);
    if (s == MT_OK) s = mt_model_table(&tr->model, type, mc, err);
    if (s == MT_OK) s = mt_ckpt_freeze(tr->model->P, cfg->freeze, err);
    if (s == MT_OK) s = mt_ckpt_lora(tr->model->P, &cfg->lora, err);
    free(mc);
    char *meta = s == MT_OK ? tr->task->type->meta(tr->task) : NULL;
    if (s == MT_OK) s = type->meta_from_json(tr->model, meta, err);
    free(meta);
    if (s != MT_OK) return s;
    char batch[64];
    mt_task_batch_words(cfg->task, type, tr->model->cfg, cfg->batch, batch, sizeof batch);
    if ((s = check_memory(tr, tr->model->P, oc,
                          type->activation_bytes(tr->model->cfg, cfg->batch, true), batch, err)) !=
            MT_OK ||
        (s = mt_params_alloc(tr->model->P, err)) != MT_OK)
        return s;
    tr->P = tr->model->P;
    mt_rng r;
    mt_rng_seed(&r, cfg->seed);
    mt_params_initialize(tr->P, &r);
    char skip[2 * MT_FIELD_STR_MAX];
    if (cfg->init_from[0])
        s = mt_ckpt_init_from(cfg->init_from, tr->model, init_skip(cfg, skip, sizeof skip),
                              &tr->init, err);
    return s;
}

/* With --arena-mb: the bytes one slice of a batch takes, measured in an arena of the estimated
   size on the first training batch (forward and backward) and the first evaluation batch,
   against the arena asked for. The draws use copies of the RNGs; the
   gradients and the buffers (BatchNorm's running statistics) are put back. */
static mt_status check_arena(mt_trainer *tr, mt_err *err) {
    const mt_train_cfg *cfg = &tr->cfg;
    const mt_model_type *type = tr->model->type;
    int lo, n;
    mt_dist_slice(cfg->batch, &lo, &n);
    mt_ctx c;
    float *saved = malloc(tr->P->total * sizeof *saved);
    mt_status s = saved ? mt_ctx_init(&c,
                                      mt_model_arena_bytes(type, tr->model->cfg,
                                                           local_rows(cfg->batch), true),
                                      0, err)
                        : mt_errorf(err, MT_ENOMEM, "out of memory");
    if (s != MT_OK) {
        free(saved);
        return s;
    }
    memcpy(saved, tr->P->data, tr->P->total * sizeof *saved);
    c.precision = cfg->precision;
    c.recompute = recomputes(cfg);
    c.free_activations = true; /* as in a step */
    mt_rng r = tr->sampler.rng;
    tr->task->type->draw_batch(tr->task, &r);
    mt_tensor *loss = tr->task->type->rows_loss(&c, tr->model, tr->P, tr->task, lo,
                                                tr->slice_rows < n ? tr->slice_rows : n);
    float one = 1;
    mt_backward_from(&c, loss, &one);
    mt_params_zero_grad(tr->P);
    if (tr->task->type->eval_count(tr->task) > 0) {
        int eval_lo, eval_n, rows = tr->task->type->eval_draw(tr->task, 0);
        mt_dist_slice(rows, &eval_lo, &eval_n);
        mt_eval_sums sums = {0};
        mt_ctx_reset(&c);
        c.training = c.grad_enabled = false;
        if (eval_n > 0)
            tr->task->type->eval_rows(&c, tr->model, tr->task, eval_lo,
                                      tr->slice_rows < eval_n ? tr->slice_rows : eval_n, &sums);
    }
    memcpy(tr->P->data, saved, tr->P->total * sizeof *saved);
    size_t need = c.arena.peak;
    free(saved);
    mt_ctx_free(&c);
    if (arena_given(cfg) >= need) return MT_OK;
    return mt_errorf(err, MT_EINVAL,
                     "--arena-mb %d: a step of this model and batch takes %.1f MiB of step arena "
                     "(measured on one batch): give at least %zu, or 0 for the estimate",
                     cfg->arena_mb, need / 1048576.0, (need + (1 << 20) - 1) >> 20);
}

/* --qk-clip: the model's attentions and each replica context's probe of the step's maxima.
   Refused where the logits are not bounded by the projections: QK-norm and nGPT normalise q and
   k per head, so a logit is bounded by the norm's gains (nGPT: by s_qk), which W_q and W_k
   cannot change. */
static mt_status setup_qk_clip(mt_trainer *tr, mt_err *err) {
    double tau = tr->opt.cfg.qk_clip;
    if (tau <= 0) return MT_OK;
    const mt_stack_config *s = mt_config_stack(tr->model->cfg);
    if (s->residual == MT_RESIDUAL_NGPT || s->qk.kind != MT_QK_NONE)
        return mt_errorf(err, MT_EINVAL,
                         "--qk-clip %g with %s: refused: its queries and keys are normalised, "
                         "so the logits are bounded by the norm's gains, not by the q and k "
                         "projections QK-Clip rescales; use --qk-norm none (and not --arch ngpt), "
                         "or --qk-clip 0",
                         tau, s->residual == MT_RESIDUAL_NGPT ? "--arch ngpt" : "--qk-norm");
    mt_status st = mt_qk_clip_init(&tr->qk, tr->P, s->n_head, (float)tau, err);
    if (st != MT_OK) return st;
    size_t H = (size_t)tr->qk.heads;
    tr->qk_max = malloc((size_t)tr->replicas.n * H * sizeof *tr->qk_max);
    tr->qk_attn_clipped = calloc((size_t)tr->qk.n, sizeof *tr->qk_attn_clipped);
    if (!tr->qk_max || !tr->qk_attn_clipped)
        return mt_errorf(err, MT_ENOMEM, "out of memory for --qk-clip");
    for (int r = 0; r < tr->replicas.n; r++) {
        mt_ctx *c = r ? &tr->replicas.ctx[r - 1] : &tr->ctx;
        c->qk_max = tr->qk_max + r * H, c->qk_slot = tr->qk.slot, c->qk_at = -1;
    }
    return MT_OK;
}

/* --init-from starts a new run from a file's weights: not with --resume, which continues the run
   in --out; --init-skip names tensors of that file. */
static mt_status check_init(const mt_train_cfg *cfg, mt_err *err) {
    bool from = cfg->init_from[0];
    if (cfg->init_skip[0] && !from)
        return mt_errorf(err, MT_EINVAL,
                         "--init-skip %s leaves tensors of --init-from's file unread: give "
                         "--init-from too, or drop it",
                         cfg->init_skip);
    if (!from) return MT_OK;
    if (cfg->resume)
        return mt_errorf(err, MT_EINVAL,
                         "--init-from starts a new run from a file's weights, --resume continues "
                         "the run in --out with its own: give one of them");
    if (mt_hf_is(cfg->init_from)) return MT_OK; /* a directory, its importer checks it */
    return mt_file_check("--init-from", cfg->init_from, err);
}

mt_status mt_trainer_init(mt_trainer *tr, const mt_train_cfg *cfg, const mt_optim_config *oc,
                          mt_err *err) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = *cfg;
    if (cfg->grad_accum < 0 || (cfg->grad_accum > 0 && cfg->batch > INT_MAX / cfg->grad_accum))
        return mt_errorf(err, MT_EINVAL,
                         "--grad-accum %d: expected 1 or more, with --batch %d times it at most "
                         "%d",
                         cfg->grad_accum, cfg->batch, INT_MAX);
    int K = tr->cfg.grad_accum = cfg->grad_accum > 0 ? cfg->grad_accum : 1;
    tr->cfg.data.seed = cfg->seed;
    tr->cfg.data.batch = K * cfg->batch; /* the task draws a step's rows at once */
    tr->cfg.data.min_rows = cfg->batch / mt_dist_size();
    if (cfg->steps < 0)
        return mt_errorf(err, MT_EINVAL, "--steps %d: expected 0 or more", cfg->steps);
    if (cfg->batch < 1)
        return mt_errorf(err, MT_EINVAL, "--batch %d: expected 1 or more", cfg->batch);
    if (cfg->batch < mt_dist_size())
        return mt_errorf(err, MT_EINVAL,
                         "--batch %d: smaller than the %d MPI ranks (each computes a slice of "
                         "the batch): expected %d or more",
                         cfg->batch, mt_dist_size(), mt_dist_size());
    mt_status s = mt_parallel_choose(cfg, &tr->par, err);
    if (s != MT_OK) return s;
    if (cfg->data.eval_batches < 1)
        return mt_errorf(err, MT_EINVAL, "--eval-batches %d: expected 1 or more",
                         cfg->data.eval_batches);
    if (snprintf(tr->model_path, sizeof tr->model_path, "%s/model.safetensors", cfg->out) >=
            (int)sizeof tr->model_path ||
        snprintf(tr->optim_path, sizeof tr->optim_path, "%s/optim.safetensors", cfg->out) >=
            (int)sizeof tr->optim_path ||
        snprintf(tr->optim_prev_path, sizeof tr->optim_prev_path, "%s/optim.prev.safetensors",
                 cfg->out) >= (int)sizeof tr->optim_prev_path)
        return mt_errorf(err, MT_EINVAL, "--out: the path is too long");
    struct stat sb;
    const char *data = cfg->data.path;
    if ((!tr->cfg.task && (s = mt_task_find(NULL, cfg->model, &tr->cfg.task, err)) != MT_OK) ||
        (s = mt_task_check(tr->cfg.task, cfg->model, err)) != MT_OK)
        return s;
    const mt_task_type *task = tr->cfg.task;
    if (!task->data_file && stat(data, &sb) != 0) /* a file or a directory */
        return mt_errorf(err, MT_EINVAL, "--data %s: %s: expected %s (--model %s)", data,
                         strerror(errno), task->data, cfg->model->name);
    if ((task->data_file && !mt_data_is_set(data) &&
         (s = mt_file_check("--data", data, err)) != MT_OK) ||
        (s = mt_dir_check_writable("--out", cfg->out, err)) != MT_OK ||
        (!cfg->resume && (s = check_fresh_out(cfg, tr->model_path, err)) != MT_OK))
        return s;
    if (cfg->precision == MT_BF16 && (s = mt_bf16_check(err)) != MT_OK) return s;
    if ((s = check_init(cfg, err)) != MT_OK || (s = check_drawn(&tr->cfg, err)) != MT_OK) return s;
    if ((cfg->freeze[0] || cfg->lora.rank > 0) && tr->par->sharded)
        return mt_errorf(err, MT_EINVAL,
                         "--freeze or --lora-rank with --zero 1: the optimizer state's shards are "
                         "ranges of the whole table, frozen entries included; give one of them");
    s = setup(tr, oc, err);
    if (s == MT_OK) s = check_replicas(cfg, tr->P, err);
    /* before the replicas' views of P, which share the copy */
    if (s == MT_OK && cfg->precision == MT_BF16) s = mt_params_enable_bf16(tr->P, err);
    if (s != MT_OK) goto fail;
    mt_optim_config opt_cfg = *oc;
    /* --steps 0 takes no update: any schedule length that validates will do */
    opt_cfg.sched.steps = cfg->steps > 0 ? cfg->steps : oc->sched.warmup > 0 ? oc->sched.warmup : 1;
    int first, last; /* this rank's entries, which its optimizer updates */
    if ((s = tr->par->init(tr, &first, &last, err)) != MT_OK ||
        (s = mt_optim_init_shard(&tr->opt, &opt_cfg, tr->P, first, last, err)) != MT_OK)
        goto fail;
    /* replica 0's arena (tr->ctx) also serves evaluations of whole batches */
    int n_rep = replica_count(cfg, tr->P), rows = local_rows(cfg->batch);
    tr->slice_rows = (rows + n_rep - 1) / n_rep;
    size_t arena = step_arena(tr, tr->slice_rows);
    if ((s = mt_ctx_init(&tr->ctx, arena, cfg->seed ^ SEED_DROPOUT, err)) != MT_OK ||
        (s = mt_replicas_init(&tr->replicas, n_rep, tr->P, arena, cfg->seed ^ SEED_DROPOUT, err)) !=
            MT_OK) {
        if (s == MT_ENOMEM) /* what the estimate came from, and what to lower */
            mt_errorf(err, s,
                      "cannot reserve %d step arena(s) of %.1f MiB (%s): use a smaller --batch, "
                      "a smaller model (--n-layer, --n-ctx, --n-embd), fewer --threads, or "
                      "--arena-mb",
                      n_rep, arena / 1048576.0,
                      cfg->arena_mb ? "--arena-mb"
                                    : "3 times the estimated activations of a slice, + 64 MiB");
        goto fail;
    }
    tr->ctx.precision = cfg->precision;
    tr->ctx.recompute = recomputes(cfg);
    tr->ctx.free_activations = true; /* a step reads the loss only, as the replicas' */
    for (int r = 0; r < n_rep - 1; r++) {
        tr->replicas.ctx[r].precision = cfg->precision;
        tr->replicas.ctx[r].recompute = recomputes(cfg);
    }
    mt_sampler_init(&tr->sampler, cfg->seed ^ SEED_SAMPLER);
    if ((s = setup_qk_clip(tr, err)) != MT_OK) goto fail;
    if (cfg->arena_mb && (s = check_arena(tr, err)) != MT_OK) goto fail;
    if ((s = mt_make_dirs("--out", cfg->out, err)) != MT_OK) goto fail;
    return MT_OK;
fail:
    mt_trainer_free(tr);
    return s;
}

/* Whether diff ("key is ... in the checkpoint, ... now") names a config field that the data sets
   (no flag: the encoder-decoder's src_ctx is its dictionary's longest word). */
static bool set_by_data(const mt_fields *t, const char *diff) {
    size_t len = strcspn(diff, " ");
    for (int i = 0; i < t->n; i++) {
        const mt_field *f = &t->f[i];
        if (f->type == MT_FIELD_TABLE ? set_by_data(f->of, diff)
                                      : strlen(f->key) == len && !strncmp(f->key, diff, len))
            return f->type == MT_FIELD_TABLE || (f->flags & MT_FIELD_NO_FLAG);
    }
    return false;
}

/* The checkpoint's model into the trainer's, which must be the same model (config) trained on the
   same data (what it reads inputs with); state gets the checkpoint's step and RNGs. */
static mt_status load_same(mt_trainer *tr, mt_ckpt_state *state, mt_err *err) {
    mt_model *saved;
    mt_status s = mt_ckpt_load(tr->model_path, &saved, state, NULL, err);
    if (s != MT_OK) return s;
    const mt_model_type *type = tr->model->type;
    char *a = mt_model_config_json(saved), *b = mt_model_config_json(tr->model);
    char *ma = saved->type->meta_to_json(saved), *mb = type->meta_to_json(tr->model);
    char diff[512];
    if (saved->type != type)
        s = mt_errorf(err, MT_EINVAL,
                      "%s holds a %s model, not a %s: a resumed run keeps its "
                      "model",
                      tr->model_path, saved->type->name, type->name);
    else if (!mt_json_same(a, b, diff, sizeof diff) && set_by_data(type->fields, diff))
        s = mt_errorf(err, MT_EINVAL,
                      "%s: the data differs from the run's: %s (a value --data %s decides; a "
                      "resumed run needs the same data)",
                      tr->model_path, diff, tr->cfg.data.path);
    else if (!mt_json_same(a, b, diff, sizeof diff))
        s = mt_errorf(err, MT_EINVAL,
                      "%s: a resumed run keeps its model, but the model options differ: %s",
                      tr->model_path, diff);
    else if (strcmp(ma, mb) != 0)
        s = mt_errorf(err, MT_EINVAL,
                      "%s: the checkpoint's %s differs from the one of %s (a "
                      "resumed run needs the same data and data options)",
                      tr->model_path, type->meta_key, tr->cfg.data.path);
    else memcpy(tr->P->data, saved->P->data, saved->P->total * sizeof(float));
    free(a);
    free(b);
    free(ma);
    free(mb);
    mt_model_free(saved);
    return s;
}

/* Rank 0's part of load_optim: optim, or optim.prev when it holds the model's step, renamed back
   in place (or the next save would keep the newer, orphaned state as prev). */
static mt_status load_optim_root(mt_trainer *tr, long step, mt_err *err) {
    mt_status s = mt_optim_load(&tr->opt, tr->P, tr->optim_path, err);
    if (s == MT_OK && tr->opt.t == step) return MT_OK;
    long t = s == MT_OK ? tr->opt.t : -1;
    mt_err e;
    if (mt_optim_load(&tr->opt, tr->P, tr->optim_prev_path, &e) == MT_OK && tr->opt.t == step)
        return rename(tr->optim_prev_path, tr->optim_path) == 0
                   ? MT_OK
                   : mt_errorf(err, MT_EIO, "%s: cannot rename to %s: %s", tr->optim_prev_path,
                               tr->optim_path, strerror(errno));
    if (s != MT_OK) return s;
    return mt_errorf(err, MT_EFORMAT,
                     "%s holds the optimizer of step %ld, %s the model of step %ld, and %s "
                     "no state of that step: the files are not of one save; put back the "
                     "optimizer state of step %ld (a copy of this --out) to resume",
                     tr->optim_path, t, tr->model_path, step, tr->optim_prev_path, step);
}

/* The optimizer state of the model's step into tr->opt: optim, or optim.prev when a kill came
   between the two writes of a save (mt_trainer_save). Under MPI rank 0 alone chooses and renames;
   the others wait for it, then read optim, so that no rank reads a file another moves. */
static mt_status load_optim(mt_trainer *tr, long step, mt_err *err) {
    bool root = mt_dist_rank() == 0;
    mt_status s = root ? load_optim_root(tr, step, err) : MT_OK;
    mt_dist_agree(&s, err);
    if (s == MT_OK && !root && (s = mt_optim_load(&tr->opt, tr->P, tr->optim_path, err)) == MT_OK &&
        tr->opt.t != step)
        s = mt_errorf(err, MT_EFORMAT,
                      "%s holds the optimizer of step %ld after rank 0 chose the state of step "
                      "%ld: is another process writing %s?",
                      tr->optim_path, tr->opt.t, step, tr->cfg.out);
    return s;
}

mt_status mt_trainer_resume(mt_trainer *tr, mt_err *err) {
    mt_ckpt_state state;
    mt_status s = load_same(tr, &state, err);
    mt_dist_agree(&s, err);
    if (s == MT_OK) s = load_optim(tr, state.step, err);
    mt_dist_agree(&s, err);
    if (s == MT_OK) {
        tr->step = state.step;
        tr->sampler.rng = state.sampler;
        tr->ctx.rng = state.dropout;
        mt_params_refresh_bf16(tr->P);
    }
    return s;
}

/* --qk-clip after the update (on the whole weights, every rank alike): the replicas' maxima
   into replica 0's, the largest across ranks, the heads above tau rescaled. */
static void qk_clip_step(mt_trainer *tr, mt_step_stats *st) {
    int H = tr->qk.heads;
    float *m = tr->qk_max;
    for (int r = 1; r < tr->replicas.n; r++)
        for (int h = 0; h < H; h++) m[h] = m[r * H + h] > m[h] ? m[r * H + h] : m[h];
    mt_dist_max(m, H);
    st->qk_logit = -INFINITY;
    for (int h = 0; h < H; h++) st->qk_logit = m[h] > st->qk_logit ? m[h] : st->qk_logit;
    st->qk_clipped = mt_qk_clip_apply(&tr->qk, tr->P, m, tr->qk_attn_clipped);
}

void mt_trainer_step(mt_trainer *tr, mt_step_stats *st) {
    const mt_parallel *par = tr->par;
    st->qk_clipped = 0, st->qk_logit = NAN;
    if (tr->qk.n) mt_qk_clip_reset(tr->qk_max, tr->replicas.n * tr->qk.heads);
    tr->ctx.training = tr->ctx.grad_enabled = true;
    /* the gradients start at zero: the last update consumed them, unless they were kept */
    if (tr->grad_held) mt_params_zero_grad(tr->P), tr->grad_held = false;
    tr->task->type->draw_batch(tr->task, &tr->sampler.rng);
    mt_grads G;
    st->loss = par->backward(tr, &G);
    mt_dist_sum(&st->loss, 1); /* every rank sees the same loss and gradients: they stop together */
    st->lr = mt_optim_lr_at(&tr->opt.cfg.sched, tr->step);
    st->grad_norm = par->grad_norm(tr, &G);
    st->finite = isfinite(st->loss) && isfinite(st->grad_norm);
    /* clip, update and zero the gradients in one pass; or leave them summed in P->grad for
       whoever looks (keep_grad, or a step that updates nothing) */
    tr->grad_held = tr->keep_grad || !st->finite;
    if (!st->finite) {
        par->gather(tr, true);
        mt_grads_sum(&G, tr->P->grad_total);
        return;
    }
    mt_optim_update(&tr->opt, tr->P, &G, st->lr,
                    mt_optim_clip_coef(st->grad_norm, tr->opt.cfg.clip), tr->keep_grad);
    par->gather(tr, tr->keep_grad);
    if (tr->qk.n) qk_clip_step(tr, st);
    tr->step++;
}

/* One evaluation batch's rows [lo, lo + n) in slices of a replica's rows (the arenas are sized
   for those): slice s into part[s], evaluated by mt_replicas_run. */
typedef struct {
    mt_trainer *tr;
    int lo, n, first; /* the batch's rows, the first slice of this round */
    mt_eval_sums *part;
} eval_batch;

static void eval_slice(mt_ctx *c, int s, void *arg) {
    eval_batch *b = arg;
    int at = b->lo + (b->first + s) * b->tr->slice_rows, end = b->lo + b->n;
    mt_ctx_reset(c);
    b->part[s] = (mt_eval_sums){0};
    b->tr->task->type->eval_rows(c, b->tr->model, b->tr->task, at,
                                 end - at < b->tr->slice_rows ? end - at : b->tr->slice_rows,
                                 &b->part[s]);
}

/* a += b, term by term */
static void eval_sums_add(mt_eval_sums *a, const mt_eval_sums *b) {
    a->loss += b->loss;
    a->right += b->right;
    for (int k = 0; k < MT_EVAL_METRICS; k++)
        a->metric[k][0] += b->metric[k][0], a->metric[k][1] += b->metric[k][1];
}

/* The sums of every evaluation batch's rows of this rank, added slice by slice in order (the
   sums a serial evaluation adds, in its order); the rows of the batches in rows_all. */
static mt_eval_sums eval_batches(mt_trainer *tr, double *rows_all) {
    const mt_task_type *task = tr->task->type;
    mt_eval_sums sums = {0}, part[tr->replicas.n];
    int batches = task->eval_count(tr->task);
    for (int i = 0; i < batches; i++) {
        eval_batch b = {.tr = tr, .part = part};
        int rows = task->eval_draw(tr->task, i);
        mt_dist_slice(rows, &b.lo, &b.n);
        *rows_all += rows;
        /* rounds of as many slices as replicas (a training batch's rows make one round) */
        int slices = (b.n + tr->slice_rows - 1) / tr->slice_rows;
        for (; b.first < slices; b.first += tr->replicas.n) {
            int k = slices - b.first < tr->replicas.n ? slices - b.first : tr->replicas.n;
            if (task->eval_concurrent) mt_replicas_run(&tr->replicas, &tr->ctx, k, eval_slice, &b);
            else
                for (int s = 0; s < k; s++) eval_slice(&tr->ctx, s, &b);
            for (int s = 0; s < k; s++) eval_sums_add(&sums, &part[s]);
        }
    }
    return sums;
}

double mt_trainer_eval(mt_trainer *tr) {
    const mt_task_type *task = tr->task->type;
    mt_ctx *c = &tr->ctx;
    c->training = false;
    c->grad_enabled = false;
    double rows_all = 0;
    mt_eval_sums sums = eval_batches(tr, &rows_all);
    int nm = mt_task_metric_count(task);
    /* across ranks: the loss, the rows right and the metrics' terms, as one array */
    double all[2 + 2 * MT_EVAL_METRICS] = {sums.loss, sums.right};
    for (int k = 0; k < nm; k++)
        all[2 + 2 * k] = sums.metric[k][0], all[3 + 2 * k] = sums.metric[k][1];
    mt_dist_sum(all, 2 + 2 * nm);
    c->training = true;
    c->grad_enabled = true;
    tr->val_accuracy = rows_all > 0 ? all[1] / rows_all : NAN;
    for (int k = 0; k < nm; k++)
        tr->val_metrics[k] = all[3 + 2 * k] > 0 ? all[2 + 2 * k] / all[3 + 2 * k] : NAN;
    return rows_all > 0 ? all[0] / rows_all : NAN;
}

mt_status mt_trainer_save(mt_trainer *tr, mt_err *err) {
    bool root = mt_dist_rank() == 0;
    if (root && rename(tr->optim_path, tr->optim_prev_path) != 0 && errno != ENOENT)
        return mt_errorf(err, MT_EIO, "%s: cannot rename to %s: %s", tr->optim_path,
                         tr->optim_prev_path, strerror(errno));
    mt_status s = tr->par->save_optim(tr, tr->optim_path, err);
    if (s != MT_OK || !root) return s;
    mt_ckpt_state state = {.step = tr->step, .sampler = tr->sampler.rng, .dropout = tr->ctx.rng};
    s = mt_ckpt_save(tr->model_path, tr->model, &state, tr->cfg.options, err);
    return s == MT_OK ? mt_ckpt_save_lora(tr->cfg.out, tr->P, &tr->cfg.lora, err) : s;
}

void mt_trainer_free(mt_trainer *tr) {
    if (tr->task) tr->task->type->free(tr->task);
    mt_model_free(tr->model);
    mt_optim_free(&tr->opt);
    mt_ctx_free(&tr->ctx);
    mt_replicas_free(&tr->replicas);
    mt_dist_grads_free(&tr->dist);
    mt_zero_free(&tr->zero);
    mt_load_report_free(&tr->init);
    mt_qk_clip_free(&tr->qk);
    free(tr->qk_max);
    free(tr->qk_attn_clipped);
    memset(tr, 0, sizeof *tr);
}
