/* ./train: trains a model (--model, one of the registered types) on --data. Flags,
 * config files, progress, exit codes; the work itself is src/train, the model behind its type.
 * Exit status: 0 done, 1 runtime failure (diverged, I/O, out of memory), 2 usage (a flag, a
 * config value, a missing or malformed input file; nothing was written). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt.h"

static const mt_enum_item BAD_IMAGES[] = {{"skip", "and list them"}, {"reject", "stop"}};
static const mt_enum MT_BAD_IMAGES = MT_ENUM("bad-images", BAD_IMAGES);

/* The options of training itself: the flag --name, the config key name (or name_with_underscores).
   A model's own options (its config, with the block stack's) are added from its type. */
static struct {
    char data[MT_OPT_STR_MAX], out[MT_OPT_STR_MAX], config[MT_OPT_STR_MAX],
        prepare[MT_OPT_STR_MAX], classes[MT_OPT_STR_MAX], model[MT_OPT_STR_MAX];
    int tokenizer, vocab_size;
    int image_size, channels, bad_images;
    bool no_resize;
    float val_fraction;
    int seed, threads, replicas, precision, steps, batch, arena_mb, bucket_kb;
    int optim, schedule, warmup, decay_scope;
    float lr, min_lr, warmup_init_lr, beta1, beta2, eps, weight_decay, momentum, clip;
    bool nesterov;
    int eval_every, eval_batches, save_every, log_every;
    int diag_grad_every, diag_update_steps, diag_resid_every, diag_batch;
    bool resume, help, profile;
} o = { /* the defaults: a tiny GPT on tiny Shakespeare in a minute (configs/tiny-gpt.ini) */
    .data = "data/tinyshakespeare.txt", .out = "out", .val_fraction = 0.1f,
    .tokenizer = MT_TOK_BYTE, .vocab_size = 4096, .bad_images = 0 /* skip */,
    .seed = 1337, .steps = 1000, .batch = 32,
    .optim = MT_OPTIM_ADAMW, .schedule = MT_SCHED_COSINE, .decay_scope = MT_DECAY_MATRICES,
    .warmup = -1, .lr = 3e-3f, .min_lr = -1, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
    .weight_decay = 0.1f, .clip = 1.0f,
    .eval_every = 200, .eval_batches = 20, .save_every = 500, .log_every = 10, .bucket_kb = 1024,
};

static const mt_opt TRAIN_OPTS[] = {
    {"model", MT_OPT_STR, o.model, NULL, "the model (listed below)", 0, NULL},
    {"data", MT_OPT_STR, o.data, NULL, "training text (UTF-8 for char) or token file FILE.bin; images: an image folder (a subdirectory per class) or MNIST-format idx files", 0, NULL},
    {"tokenizer", MT_OPT_CHOICE, &o.tokenizer, NULL, "tokenizer of a text file", 0, &MT_TOKENIZERS},
    {"vocab-size", MT_OPT_INT, &o.vocab_size, "257..65536", "bpe: the vocabulary learnt from the training part (the 256 bytes and the merges)", 0, NULL},
    {"val-fraction", MT_OPT_FLOAT, &o.val_fraction, NULL, "last part of the data held out for validation (text: of its bytes; images: a random part, unless the data has a test part)", 0, NULL},
    {"image-size", MT_OPT_INT, &o.image_size, "0..", "images resized to N x N; 0: the data's size", 0, NULL},
    {"channels", MT_OPT_INT, &o.channels, "0..4", "images: 1 gray, 3 RGB (2, 4 with alpha); 0: the data's", 0, NULL},
    {"no-resize", MT_OPT_BOOL, &o.no_resize, NULL, "images: one of another size is bad instead of resized", 0, NULL},
    {"bad-images", MT_OPT_CHOICE, &o.bad_images, NULL, "unreadable or mismatched images are skipped (and listed) or stop the run", 0, &MT_BAD_IMAGES},
    {"classes", MT_OPT_STR, o.classes, NULL, "images: class names, one per line (idx data; default: classes.txt beside it)", 0, NULL},
    {"prepare", MT_OPT_STR, o.prepare, NULL, "write --data as a token file FILE.bin and exit", MT_OPT_CLI, NULL},
    {"out", MT_OPT_STR, o.out, NULL, "directory of model.safetensors, optim.safetensors, metrics.csv", 0, NULL},
    {"config", MT_OPT_STR, o.config, NULL, "config file of key = value lines (flags override it)", MT_OPT_CLI, NULL},
    {"resume", MT_OPT_BOOL, &o.resume, NULL, "continue the run in --out (its options, then the config, then flags)", MT_OPT_CLI, NULL},
    {"seed", MT_OPT_INT, &o.seed, "0..", "seed of the weights, batches and dropout", 0, NULL},
    {"threads", MT_OPT_INT, &o.threads, "0..1024", "threads; 0: OMP_NUM_THREADS or all cores", 0, NULL},
    {"replicas", MT_OPT_INT, &o.replicas, "0..1024", "threads that each run a slice of every batch (data parallel: no fork and join per op, faster for small models); 0: every thread (1 with BatchNorm or MPI ranks); 1: every op split across the threads", 0, NULL},
    {"precision", MT_OPT_CHOICE, &o.precision, NULL, "number format of the linear layers' matrix products (bf16: docs/performance.md)", 0, &MT_PRECISIONS},
    {"steps", MT_OPT_INT, &o.steps, "0..", "optimizer steps; 0 writes the initialised model", 0, NULL},
    {"batch", MT_OPT_INT, &o.batch, "1..", "rows (sequences, images) per step", 0, NULL},
    {"optim", MT_OPT_CHOICE, &o.optim, NULL, "optimizer", 0, &MT_OPTIMS},
    {"lr", MT_OPT_FLOAT, &o.lr, NULL, "peak learning rate", 0, NULL},
    {"min-lr", MT_OPT_FLOAT, &o.min_lr, "-1..", "learning rate at the end of cosine and linear decays; -1: lr / 10", 0, NULL},
    {"warmup", MT_OPT_INT, &o.warmup, "-1..", "linear warmup steps; -1: steps / 10, at most 100", 0, NULL},
    {"warmup-init-lr", MT_OPT_FLOAT, &o.warmup_init_lr, NULL, "learning rate at step 0 of the warmup", 0, NULL},
    {"schedule", MT_OPT_CHOICE, &o.schedule, NULL, "learning-rate schedule after warmup", 0, &MT_SCHEDULES},
    {"beta1", MT_OPT_FLOAT, &o.beta1, NULL, "Adam beta1", 0, NULL},
    {"beta2", MT_OPT_FLOAT, &o.beta2, NULL, "Adam beta2", 0, NULL},
    {"eps", MT_OPT_FLOAT, &o.eps, NULL, "Adam epsilon", 0, NULL},
    {"weight-decay", MT_OPT_FLOAT, &o.weight_decay, NULL, "weight decay (decoupled for adamw)", 0, NULL},
    {"decay-scope", MT_OPT_CHOICE, &o.decay_scope, NULL, "what weight decay reaches", 0, &MT_DECAY_SCOPES},
    {"momentum", MT_OPT_FLOAT, &o.momentum, NULL, "SGD momentum", 0, NULL},
    {"nesterov", MT_OPT_BOOL, &o.nesterov, NULL, "SGD Nesterov momentum", 0, NULL},
    {"clip", MT_OPT_FLOAT, &o.clip, NULL, "max gradient norm; 0: no clipping", 0, NULL},
    {"eval-every", MT_OPT_INT, &o.eval_every, "0..", "validation every N steps (and at the end); 0: only at the end", 0, NULL},
    {"eval-batches", MT_OPT_INT, &o.eval_batches, "1..", "text: validation batches (the same ones each time); encdec: at most this many batches of validation words", 0, NULL},
    {"save-every", MT_OPT_INT, &o.save_every, "0..", "checkpoint every N steps (and at the end); 0: only at the end", 0, NULL},
    {"log-every", MT_OPT_INT, &o.log_every, "1..", "progress and a metrics row every N steps", 0, NULL},
    {"diag-grad-every", MT_OPT_INT, &o.diag_grad_every, "0..", "per-sublayer gradient norms every N steps from init to diag_grad.csv; 0: off", 0, NULL},
    {"diag-update-steps", MT_OPT_INT, &o.diag_update_steps, "0..", "model update ||F(x,theta_t) - F(x,theta_0)|| for steps 0..N to diag_update.csv; 0: off", 0, NULL},
    {"diag-resid-every", MT_OPT_INT, &o.diag_resid_every, "0..", "residual-stream norm entering each block every N steps to diag_resid.csv; 0: off", 0, NULL},
    {"diag-batch", MT_OPT_INT, &o.diag_batch, "0..", "rows of the fixed held-out batch of the diagnostics; 0: min(4, batch)", 0, NULL},
    {"profile", MT_OPT_BOOL, &o.profile, NULL, "time per op of the training steps (forward, backward, share), printed at the end", MT_OPT_CLI, NULL},
    {"arena-mb", MT_OPT_INT, &o.arena_mb, "0..", "step arena in MiB; 0: estimated", 0, NULL},
    {"bucket-kb", MT_OPT_INT, &o.bucket_kb, "1..", "MPI: gradients are summed across ranks in buckets of this many KiB, each sent once the backward pass has finished it", 0, NULL},
    {"help", MT_OPT_BOOL, &o.help, NULL, "this list", MT_OPT_CLI, NULL},
};
enum { N_TRAIN_OPTS = sizeof TRAIN_OPTS / sizeof *TRAIN_OPTS, MAX_OPTS = 256, MAX_TYPES = 16 };

/* The option table in use: the training options, the block stack's (every config starts with
   it), then the models' own; n_stack and n_own[i] mark where each part ends. The values of a
   model's options lie in its config, cfgs[i]. */
static mt_opt opts[MAX_OPTS];
static mt_cf_name names[MAX_OPTS];
static int n_opts, n_stack, n_own[MAX_TYPES], n_types;
static void *cfgs[MAX_TYPES];
static char defaults[sizeof o];

/* The options of every model type (only: of that one), each config at its defaults. */
static void build_options(const mt_model_type *only) {
    memcpy(opts, TRAIN_OPTS, sizeof TRAIN_OPTS);
    n_opts = N_TRAIN_OPTS;
    int stack_of = 0; /* the config whose stack the stack's options set */
    for (n_types = 0; mt_model_types[n_types]; n_types++) {
        const mt_model_type *t = mt_model_types[n_types];
        MT_ASSERT(n_types < MAX_TYPES, "train: more than %d model types", MAX_TYPES);
        if (!cfgs[n_types] && !(cfgs[n_types] = malloc(t->config_size))) {
            fprintf(stderr, "train: out of memory\n");
            exit(1);
        }
        t->config_default(cfgs[n_types]);
        if (t == only) stack_of = n_types;
    }
    n_stack = n_opts = mt_cf_options(&MT_STACK_FIELDS, cfgs[stack_of], opts, names, n_opts,
                                     MAX_OPTS);
    for (int i = 0; i < n_types; i++) {
        const mt_model_type *t = mt_model_types[i];
        if (!only || t == only)
            n_opts = mt_cf_options(t->fields, cfgs[i], opts, names, n_opts, MAX_OPTS);
        n_own[i] = n_opts;
    }
    MT_ASSERT(n_opts <= MAX_OPTS, "train: more than %d options", MAX_OPTS);
}

/* Every option at its default. */
static void reset_options(void) {
    memcpy(&o, defaults, sizeof o);
    for (int i = 0; i < n_types; i++) mt_model_types[i]->config_default(cfgs[i]);
}

static const char *USAGE =
    "usage: ./train [--config FILE.ini] [--flag value ...]\n"
    "Trains a model (a GPT on text unless --model says otherwise) on --data and writes\n"
    "<out>/model.safetensors, optim.safetensors and metrics.csv. Config files use the flag\n"
    "names as keys (n-layer = 4 or n_layer = 4).\n"
    "Examples: ./train --config configs/tiny-gpt.ini --steps 500\n"
    "          ./train --config configs/vit-mnist.ini\n\n";

/* Under MPI only rank 0 reports: the options are the same on every rank, the setup's errors are
   agreed on (mt_dist_agree), the checkpoints and metrics are rank 0's. A non-zero exit of one
   rank makes mpirun stop the others. */
static _Noreturn void die(int code, const char *msg) {
    if (mt_dist_rank() == 0) fprintf(stderr, "train: %s\n", msg);
    exit(code);
}


/* The options from defaults, then saved (a resumed run's), then the config file named by the
   flags, then the flags. */
static void layer_options(const char *saved, int argc, char **argv) {
    mt_err e;
    char config[MT_OPT_STR_MAX];
    reset_options();
    if (mt_opts_parse_args(opts, n_opts, argc, argv, &e) != MT_OK) die(2, e.msg);
    memcpy(config, o.config, sizeof config);
    reset_options();
    if (saved && mt_opts_parse_ini(opts, n_opts, saved, "the checkpoint's options", &e) != MT_OK)
        die(2, e.msg);
    if (config[0] && mt_opts_read_ini(opts, n_opts, config, &e) != MT_OK) die(2, e.msg);
    mt_opts_parse_args(opts, n_opts, argc, argv, NULL);
}

/* The options of the model --model names, layered again: another model's flag is an error. */
static const mt_model_type *model_options(const char *saved, int argc, char **argv) {
    const mt_model_type *type;
    mt_err e;
    layer_options(saved, argc, argv);
    if (mt_model_type_find(o.model, &type, &e) != MT_OK) die(2, e.msg);
    build_options(type);
    layer_options(saved, argc, argv);
    return type;
}

static void *model_config(const mt_model_type *type) {
    for (int i = 0; i < n_types; i++)
        if (mt_model_types[i] == type) return cfgs[i];
    MT_ASSERT(0, "train: model type %s is not registered", type->name);
}

/* --help: the training options, the block stack's, each model's own. */
static void print_help(void) {
    char *parts[3 + MAX_TYPES];
    printf("%s", USAGE);
    printf("%s\nthe block stack (every model):\n%s", parts[0] = mt_opts_help(opts, N_TRAIN_OPTS),
           parts[1] = mt_opts_help(opts + N_TRAIN_OPTS, n_stack - N_TRAIN_OPTS));
    for (int i = 0, from = n_stack; i < n_types; from = n_own[i++]) {
        printf("\n--model %s: %s (--data: %s)\n", mt_model_types[i]->name, mt_model_types[i]->about,
               mt_model_types[i]->task->data);
        fputs(parts[2 + i] = mt_opts_help(opts + from, n_own[i] - from), stdout);
    }
    for (int i = 0; i < 2 + n_types; i++) free(parts[i]);
}

static mt_optim_config optim_config(void) {
    mt_optim_config c = mt_optim_defaults();
    c.kind = (mt_optim_kind)o.optim;
    c.sched.kind = (mt_sched_kind)o.schedule;
    c.decay_scope = (mt_decay_scope)o.decay_scope;
    c.beta1 = o.beta1;
    c.beta2 = o.beta2;
    c.eps = o.eps;
    c.weight_decay = o.weight_decay;
    c.momentum = o.momentum;
    c.nesterov = o.nesterov;
    c.clip = o.clip;
    c.sched.lr = o.lr;
    bool decays = c.sched.kind == MT_SCHED_COSINE || c.sched.kind == MT_SCHED_LINEAR;
    /* -1: lr / 10; any other negative value reaches validation, which refuses it */
    c.sched.min_lr = o.min_lr != -1 ? o.min_lr : decays ? o.lr / 10 : 0;
    c.sched.warmup = o.warmup >= 0 ? o.warmup : o.steps / 10 < 100 ? o.steps / 10 : 100;
    c.sched.warmup_init_lr = o.warmup_init_lr;
    return c;
}

static int prepare(void) {
    mt_tokenizer tok;
    mt_tokens d;
    mt_err e;
    if (mt_file_check("--data", o.data, &e) != MT_OK) die(2, e.msg);
    mt_text_cfg tc = {(mt_tok_kind)o.tokenizer, o.vocab_size, o.val_fraction};
    mt_status s = mt_data_load(o.data, &tc, &tok, &d, &e);
    if (s == MT_OK) s = mt_tokfile_write(o.prepare, &tok, &d, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    printf("wrote %s: %zu tokens, %s tokenizer, vocabulary %d\n", o.prepare, d.n,
           mt_enum_name(&MT_TOKENIZERS, tok.kind), tok.n_vocab);
    mt_tokens_free(&d);
    mt_tok_free(&tok);
    return 0;
}

static const char *hms(double s, char *buf, size_t len) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

/* --resume: the options saved in the checkpoint of the run in o.out (malloc'd). */
static char *saved_options(void) {
    char path[MT_OPT_STR_MAX + 32];
    mt_err e;
    mt_safetensors st;
    snprintf(path, sizeof path, "%s/model.safetensors", o.out);
    if (access(path, F_OK) != 0) {
        snprintf(e.msg, sizeof e.msg,
                 "--resume: no checkpoint %s (--out names the run to continue)", path);
        die(2, e.msg);
    }
    if (mt_file_check("--resume", path, &e) != MT_OK) die(2, e.msg);
    mt_status s = mt_st_load(path, &st, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    const char *saved = mt_st_meta(&st, "options");
    if (!saved) die(2, "the checkpoint has no saved options: was it written by ./train?");
    char *copy = strdup(saved);
    mt_st_free(&st);
    return copy;
}

static mt_train_cfg train_config(const mt_model_type *type, const char *options) {
    return (mt_train_cfg){
        .model = type, .model_cfg = model_config(type),
        .data = {.path = o.data, .tokenizer = (mt_tok_kind)o.tokenizer, .vocab_size = o.vocab_size,
                 .val_fraction = o.val_fraction, .eval_batches = o.eval_batches,
                 .images = {.H = o.image_size, .W = o.image_size, .C = o.channels,
                            .resize = !o.no_resize, .skip_bad = o.bad_images == 0,
                            .classes = o.classes[0] ? o.classes : NULL}},
        .out = o.out, .seed = (uint64_t)o.seed, .steps = o.steps, .batch = o.batch,
        .arena_bytes = (size_t)(o.arena_mb > 0 ? o.arena_mb : 0) << 20, .options = options,
        .bucket_floats = (size_t)(o.bucket_kb > 0 ? o.bucket_kb : 1) * 1024 / sizeof(float),
        .resume = o.resume, .replicas = o.replicas, .precision = o.precision,
    };
}

/* The data, model and training lines (and the MPI line), and the data's warning. */
static void print_setup(const mt_trainer *tr) {
    const mt_model_type *type = tr->model->type;
    char line[512], batch[64];
    char *warning = type->task->warning ? type->task->warning(tr->task) : NULL;
    if (warning && mt_dist_rank() == 0) fprintf(stderr, "train: %s", warning);
    free(warning);
    type->task->describe(tr->task, line, sizeof line);
    printf("data    %s: %s\n", o.data, line);
    type->config_describe(tr->model->cfg, line, sizeof line);
    printf("model   %s: %.3fM parameters\n", line, mt_params_count_trainable(tr->P) / 1e6);
    mt_model_batch_words(type, tr->model->cfg, o.batch, batch, sizeof batch);
    printf("train   %s, lr %g (%s, warmup %ld), batch %s, %d threads (%d replicas), %s%s -> %s\n",
           mt_enum_name(&MT_OPTIMS, o.optim), o.lr, mt_enum_name(&MT_SCHEDULES, o.schedule),
           tr->opt.cfg.sched.warmup, batch, mt_threads(), tr->replicas.n,
           o.precision == MT_BF16 ? "bf16 products, " : "", o.resume ? "resumed" : "from scratch",
           o.out);
    if (mt_dist_size() > 1)
        printf("mpi     %d ranks (%d on this machine), %d to %d rows of each batch per rank, "
               "gradients summed in %d buckets\n", mt_dist_size(), mt_dist_local_size(),
               o.batch / mt_dist_size(), (o.batch + mt_dist_size() - 1) / mt_dist_size(),
               tr->dist.n_buckets);
}

static bool tty; /* progress on one line, rewritten (a terminal, one process) */

/* The progress line of a logged step (mt_loop_cfg.on_log). */
static void print_progress(const mt_trainer *tr, const mt_progress *p, void *arg) {
    (void)arg;
    const mt_model_type *type = tr->model->type;
    double per = p->elapsed / (double)(p->step - p->first);
    char el[32], eta[32];
    printf("%sstep %*ld/%ld | loss %.4f | lr %.2e | norm %6.3f | %6.0f %s/s | %s | ETA %s",
           tty ? "\r" : "", (int)snprintf(NULL, 0, "%ld", p->steps), p->step, p->steps,
           p->st.loss, p->st.lr, p->st.grad_norm, p->units / per, type->task->unit,
           hms(p->elapsed, el, sizeof el), hms(per * (double)(p->steps - p->step), eta, sizeof eta));
    if (p->eval && !isnan(p->val)) printf(" | val %.4f", p->val);
    if (p->eval && type->task->accuracy) printf(" acc %.4f", tr->val_accuracy);
    for (int k = 0; p->eval && k < mt_task_metric_count(type->task); k++)
        printf(" %s %.4f", type->task->metrics[k], p->metrics[k]);
    printf(tty ? (p->eval ? "\033[K\n" : "\033[K") : "\n");
    fflush(stdout);
}

static mt_status diag_after_step(mt_trainer *tr, const mt_step_stats *st, void *diag,
                                 mt_err *err) {
    return mt_diag_after_step(diag, tr, st, err);
}

/* The end of a run: its time and where it wrote, MPI's share, the profile. */
static void print_done(const mt_trainer *tr, long first, double seconds, const mt_profile *prof) {
    char el[32];
    long steps = tr->step - first;
    if (steps <= 0) return;
    printf("done: %ld steps in %s, arena peak %.1f MiB; wrote %s\n", steps,
           hms(seconds, el, sizeof el), tr->ctx.arena.peak / 1048576.0, tr->model_path);
    if (mt_dist_size() > 1)
        printf("mpi     rank 0 spent %.2f ms per step in the gradient sums (%.1f%% of the run)\n",
               1e3 * tr->dist.comm_s / (double)steps, 100 * tr->dist.comm_s / seconds);
    if (o.profile && mt_dist_rank() == 0) mt_profile_print(prof, stdout);
}

/* Trains: the trainer set up (or resumed), the diagnostics opened, the loop run. */
static int train(const mt_model_type *type) {
    mt_err e;
    char *options = mt_opts_to_ini(opts, n_opts);
    mt_train_cfg tc = train_config(type, options);
    mt_optim_config oc = optim_config();
    mt_trainer tr;
    mt_status s = mt_trainer_init(&tr, &tc, &oc, &e);
    if (s == MT_OK && o.resume) s = mt_trainer_resume(&tr, &e);
    mt_dist_agree(&s, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    mt_diag diag;
    mt_diag_cfg dc = {o.diag_grad_every, o.diag_update_steps, o.diag_resid_every, o.diag_batch};
    if (mt_dist_size() > 1 && (dc.grad_every || dc.update_steps || dc.resid_every))
        die(2, "the --diag-* diagnostics run in one process, not under mpirun");
    if ((s = mt_diag_open(&diag, &dc, &tr, &e)) != MT_OK) die(mt_exit_code(s), e.msg);
    char warning[512];
    if (mt_dist_rank() == 0 && mt_dist_thread_warning(warning, sizeof warning))
        fprintf(stderr, "train: warning: %s\n", warning);
    print_setup(&tr);
    tty = mt_dist_size() == 1 && isatty(fileno(stdout)); /* mpirun: a pty per rank */
    mt_profile prof = {0};
    mt_loop_cfg lc = {.eval_every = o.eval_every, .save_every = o.save_every,
                      .log_every = o.log_every, .profile = o.profile ? &prof : NULL,
                      .after_step = diag_after_step, .on_log = print_progress, .arg = &diag};
    long first = tr.step;
    double t0 = mt_clock();
    if ((s = mt_trainer_run(&tr, &lc, &e)) != MT_OK) {
        if (tty) putchar('\n');
        die(mt_exit_code(s), e.msg); /* every rank has the same loss: all stop here */
    }
    if (first >= o.steps && mt_dist_rank() == 0)
        printf("step %ld of %d: wrote %s\n", tr.step, o.steps, tr.model_path);
    print_done(&tr, first, mt_clock() - t0, &prof);
    mt_diag_close(&diag);
    mt_trainer_free(&tr);
    free(options);
    return 0;
}

int main(int argc, char **argv) {
    mt_dist_init(&argc, &argv);
    snprintf(o.model, sizeof o.model, "%s", mt_model_types[0]->name);
    memcpy(defaults, &o, sizeof o);
    mt_err e;
    build_options(NULL);
    layer_options(NULL, argc, argv);
    if (o.help) {
        reset_options(); /* the help shows the defaults */
        if (mt_dist_rank() == 0) print_help();
        mt_dist_finalize();
        return 0;
    }
    char *saved = o.resume ? saved_options() : NULL;
    const mt_model_type *type = model_options(saved, argc, argv); /* a resumed run's */
    free(saved);
    if (o.prepare[0] && !type->task->data_file)
        die(2, "--prepare writes token files of text data; this --model reads a dataset folder");
    if (o.prepare[0] && mt_dist_size() > 1) die(2, "--prepare runs in one process, not under mpirun");
    if (o.prepare[0]) return prepare();
    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o.threads > 0 ? o.threads : omp ? atoi(omp) : 0);
    if (mt_gemm_backend_from_env(&e) != MT_OK) die(2, e.msg);
    /* under MPI rank 0 alone prints progress and writes checkpoints and metrics */
    if (mt_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) die(1, "cannot silence stdout");
    int rc = train(type);
    mt_dist_finalize();
    return rc;
}
