/* ./train: trains a GPT on a text or token file, or a ViT on images (--model vit). Flags, config
 * files, progress, exit codes; the work itself is src/train. Exit status: 0 done, 1 runtime
 * failure (diverged, I/O, out of memory), 2 usage (a flag, a config value, a missing or malformed
 * input file; nothing was written). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt.h"

/* Every option: the flag --name, the config key name (or name_with_underscores). */
static struct {
    char data[MT_OPT_STR_MAX], out[MT_OPT_STR_MAX], config[MT_OPT_STR_MAX],
        prepare[MT_OPT_STR_MAX], classes[MT_OPT_STR_MAX];
    int model, tokenizer;
    int patch, pool, image_size, channels, bad_images;
    bool no_resize;
    float val_fraction;
    int seed, threads, replicas, steps, batch, arena_mb, bucket_kb;
    int n_layer, n_head, n_embd, n_ctx, n_ff;
    int norm, gn_groups, rms_form;
    float norm_eps, prms_p;
    int placement, init, act;
    bool untie, no_bias;
    float dropout;
    int optim, schedule, warmup, decay_scope;
    float lr, min_lr, warmup_init_lr, beta1, beta2, eps, weight_decay, momentum, clip;
    bool nesterov;
    int eval_every, eval_batches, save_every, log_every;
    int diag_grad_every, diag_update_steps, diag_resid_every, diag_batch;
    bool resume, help, profile;
} o = { /* the defaults: a tiny GPT on tiny Shakespeare in a few minutes (configs/tiny-gpt.ini) */
    .data = "data/tinyshakespeare.txt", .out = "out", .val_fraction = 0.1f,
    .seed = 1337, .steps = 1000, .batch = 32,
    .n_layer = 4, .n_head = 4, .n_embd = 64, .n_ctx = 64,
    .norm_eps = -1, .prms_p = 0.0625f, .init = 3 /* auto */, .patch = 7,
    .optim = 2 /* adamw */, .schedule = 1 /* cosine */, .warmup = -1,
    .lr = 3e-3f, .min_lr = -1, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
    .weight_decay = 0.1f, .clip = 1.0f,
    .eval_every = 200, .eval_batches = 20, .save_every = 500, .log_every = 10, .bucket_kb = 1024,
};

static const mt_opt OPTS[] = {
    {"model", MT_OPT_CHOICE, &o.model, "gpt|vit", "gpt: a language model on text; vit: an image classifier", 0},
    {"data", MT_OPT_STR, o.data, NULL, "training text (UTF-8 for char) or token file FILE.bin; vit: an image folder (a subdirectory per class) or MNIST-format idx files", 0},
    {"tokenizer", MT_OPT_CHOICE, &o.tokenizer, "byte|char", "tokenizer of a text file", 0},
    {"val-fraction", MT_OPT_FLOAT, &o.val_fraction, NULL, "last part of the data held out for validation (vit: a random part, unless the data has a test part)", 0},
    {"image-size", MT_OPT_INT, &o.image_size, "0..", "vit: images resized to N x N; 0: the data's size", 0},
    {"channels", MT_OPT_INT, &o.channels, "0..4", "vit: 1 gray, 3 RGB (2, 4 with alpha); 0: the data's", 0},
    {"no-resize", MT_OPT_BOOL, &o.no_resize, NULL, "vit: an image of another size is bad instead of resized", 0},
    {"bad-images", MT_OPT_CHOICE, &o.bad_images, "skip|reject", "vit: unreadable or mismatched images are skipped (and listed) or stop the run", 0},
    {"classes", MT_OPT_STR, o.classes, NULL, "vit: class names, one per line (idx data; default: classes.txt beside it)", 0},
    {"patch", MT_OPT_INT, &o.patch, "1..", "vit: patch size (divides the image size)", 0},
    {"pool", MT_OPT_CHOICE, &o.pool, "cls|mean", "vit: the class token's output, or the mean over tokens", 0},
    {"prepare", MT_OPT_STR, o.prepare, NULL, "write --data as a token file FILE.bin and exit", MT_OPT_CLI},
    {"out", MT_OPT_STR, o.out, NULL, "directory of model.safetensors, optim.safetensors, metrics.csv", 0},
    {"config", MT_OPT_STR, o.config, NULL, "config file of key = value lines (flags override it)", MT_OPT_CLI},
    {"resume", MT_OPT_BOOL, &o.resume, NULL, "continue the run in --out (its options, then the config, then flags)", MT_OPT_CLI},
    {"seed", MT_OPT_INT, &o.seed, "0..", "seed of the weights, batches and dropout", 0},
    {"threads", MT_OPT_INT, &o.threads, "0..1024", "threads; 0: OMP_NUM_THREADS or all cores", 0},
    {"replicas", MT_OPT_INT, &o.replicas, "0..1024", "threads that each run a slice of every batch (data parallel: no fork and join per op, faster for small models); 0: every thread (1 with BatchNorm or MPI ranks); 1: every op split across the threads", 0},
    {"steps", MT_OPT_INT, &o.steps, "0..", "optimizer steps; 0 writes the initialised model", 0},
    {"batch", MT_OPT_INT, &o.batch, "1..", "sequences per step", 0},
    {"n-layer", MT_OPT_INT, &o.n_layer, "1..", "blocks", 0},
    {"n-head", MT_OPT_INT, &o.n_head, "1..", "attention heads", 0},
    {"n-embd", MT_OPT_INT, &o.n_embd, "1..", "channels", 0},
    {"n-ctx", MT_OPT_INT, &o.n_ctx, "1..", "context length (tokens)", 0},
    {"n-ff", MT_OPT_INT, &o.n_ff, "0..", "FFN width; 0: 4 n-embd", 0},
    {"norm", MT_OPT_CHOICE, &o.norm, "ln|rms|prms|bn|in|gn|scale|none", "normalization", 0},
    {"norm-eps", MT_OPT_FLOAT, &o.norm_eps, "-1..", "norm epsilon; -1: the norm's default", 0},
    {"prms-p", MT_OPT_FLOAT, &o.prms_p, NULL, "pRMSNorm: fraction of channels the RMS is taken from", 0},
    {"gn-groups", MT_OPT_INT, &o.gn_groups, "0..", "GroupNorm groups; 0: the norm's default", 0},
    {"rms-form", MT_OPT_CHOICE, &o.rms_form, "llama|paper", "RMSNorm form: eps inside or outside the sqrt", 0},
    {"placement", MT_OPT_CHOICE, &o.placement, "pre|post|deepnorm", "residual placement of the norm", 0},
    {"init", MT_OPT_CHOICE, &o.init, "gpt2|xavier|deepnorm|auto", "weight init (auto: deepnorm for --placement deepnorm, else gpt2)", 0},
    {"untie", MT_OPT_BOOL, &o.untie, NULL, "a separate output head instead of the token embedding", 0},
    {"no-bias", MT_OPT_BOOL, &o.no_bias, NULL, "no biases in the linear layers", 0},
    {"act", MT_OPT_CHOICE, &o.act, "gelu|gelu_erf|relu|silu", "FFN activation", 0},
    {"dropout", MT_OPT_FLOAT, &o.dropout, NULL, "dropout probability", 0},
    {"optim", MT_OPT_CHOICE, &o.optim, "sgd|adam|adamw", "optimizer", 0},
    {"lr", MT_OPT_FLOAT, &o.lr, NULL, "peak learning rate", 0},
    {"min-lr", MT_OPT_FLOAT, &o.min_lr, "-1..", "learning rate at the end of cosine and linear decays; -1: lr / 10", 0},
    {"warmup", MT_OPT_INT, &o.warmup, "-1..", "linear warmup steps; -1: steps / 10, at most 100", 0},
    {"warmup-init-lr", MT_OPT_FLOAT, &o.warmup_init_lr, NULL, "learning rate at step 0 of the warmup", 0},
    {"schedule", MT_OPT_CHOICE, &o.schedule, "const|cosine|linear|invsqrt", "learning-rate schedule after warmup", 0},
    {"beta1", MT_OPT_FLOAT, &o.beta1, NULL, "Adam beta1", 0},
    {"beta2", MT_OPT_FLOAT, &o.beta2, NULL, "Adam beta2", 0},
    {"eps", MT_OPT_FLOAT, &o.eps, NULL, "Adam epsilon", 0},
    {"weight-decay", MT_OPT_FLOAT, &o.weight_decay, NULL, "weight decay (decoupled for adamw)", 0},
    {"decay-scope", MT_OPT_CHOICE, &o.decay_scope, "matrices|embeddings|all", "what weight decay reaches", 0},
    {"momentum", MT_OPT_FLOAT, &o.momentum, NULL, "SGD momentum", 0},
    {"nesterov", MT_OPT_BOOL, &o.nesterov, NULL, "SGD Nesterov momentum", 0},
    {"clip", MT_OPT_FLOAT, &o.clip, NULL, "max gradient norm; 0: no clipping", 0},
    {"eval-every", MT_OPT_INT, &o.eval_every, "0..", "validation every N steps (and at the end); 0: only at the end", 0},
    {"eval-batches", MT_OPT_INT, &o.eval_batches, "1..", "validation batches (the same ones each time)", 0},
    {"save-every", MT_OPT_INT, &o.save_every, "0..", "checkpoint every N steps (and at the end); 0: only at the end", 0},
    {"log-every", MT_OPT_INT, &o.log_every, "1..", "progress and a metrics row every N steps", 0},
    {"diag-grad-every", MT_OPT_INT, &o.diag_grad_every, "0..", "per-sublayer gradient norms every N steps from init to diag_grad.csv; 0: off", 0},
    {"diag-update-steps", MT_OPT_INT, &o.diag_update_steps, "0..", "model update ||F(x,theta_t) - F(x,theta_0)|| for steps 0..N to diag_update.csv; 0: off", 0},
    {"diag-resid-every", MT_OPT_INT, &o.diag_resid_every, "0..", "residual-stream norm entering each block every N steps to diag_resid.csv; 0: off", 0},
    {"diag-batch", MT_OPT_INT, &o.diag_batch, "0..", "sequences of the fixed held-out batch of the diagnostics; 0: min(4, batch)", 0},
    {"profile", MT_OPT_BOOL, &o.profile, NULL, "time per op of the training steps (forward, backward, share), printed at the end", MT_OPT_CLI},
    {"arena-mb", MT_OPT_INT, &o.arena_mb, "0..", "step arena in MiB; 0: estimated", 0},
    {"bucket-kb", MT_OPT_INT, &o.bucket_kb, "1..", "MPI: gradients are summed across ranks in buckets of this many KiB, each sent once the backward pass has finished it", 0},
    {"help", MT_OPT_BOOL, &o.help, NULL, "this list", MT_OPT_CLI},
};
enum { N_OPTS = sizeof OPTS / sizeof *OPTS };

static const char *USAGE =
    "usage: ./train [--config FILE.ini] [--flag value ...]\n"
    "Trains a GPT (or with --model vit a ViT on images) on --data and writes\n"
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

/* 2: the run cannot start as asked (a flag, a config value, an input file that is missing or
   malformed); 1: a failure while working (I/O, out of memory, divergence). */
static int exit_code(mt_status s) { return s == MT_EINVAL || s == MT_EFORMAT ? 2 : 1; }

/* The text of a choice option ("rms"). */
static const char *choice(const char *name) {
    static char buf[8][64];
    static int k;
    k = (k + 1) % 8;
    return mt_opt_format(mt_opts_find(OPTS, N_OPTS, name), buf[k], sizeof buf[k]);
}

/* The options from defaults, then saved (a resumed run's), then the config file named by the
   flags, then the flags. */
static void layer_options(const void *defaults, const char *saved, int argc, char **argv) {
    mt_err e;
    char config[MT_OPT_STR_MAX];
    memcpy(&o, defaults, sizeof o);
    if (mt_opts_parse_args(OPTS, N_OPTS, argc, argv, &e) != MT_OK) die(2, e.msg);
    memcpy(config, o.config, sizeof config);
    memcpy(&o, defaults, sizeof o);
    if (saved && mt_opts_parse_ini(OPTS, N_OPTS, saved, "the checkpoint's options", &e) != MT_OK)
        die(2, e.msg);
    if (config[0] && mt_opts_read_ini(OPTS, N_OPTS, config, &e) != MT_OK) die(2, e.msg);
    mt_opts_parse_args(OPTS, N_OPTS, argc, argv, NULL);
}

/* What both models take from the same options: the norm (with its own options), the placement,
   the init scheme and the activation. */
static void shared_choices(mt_norm_cfg *norm, mt_placement *placement, mt_init_scheme *init,
                           mt_act *act) {
    mt_err e;
    mt_norm_kind kind;
    if (mt_norm_parse(choice("norm"), &kind, &e) != MT_OK ||
        mt_placement_parse(choice("placement"), placement, &e) != MT_OK ||
        mt_init_scheme_parse(choice("init"), init, &e) != MT_OK ||
        mt_act_parse(choice("act"), act, &e) != MT_OK)
        die(2, e.msg);
    *norm = mt_norm_default(kind);
    norm->eps = o.norm_eps; /* -1 = MT_NORM_EPS_DEFAULT; other negatives are refused by validation */
    norm->prms_p = o.prms_p;
    if (o.gn_groups > 0) norm->gn_groups = o.gn_groups;
    norm->rms_form = o.rms_form == 1 ? MT_RMS_PAPER : MT_RMS_LLAMA;
}

static mt_gpt_config model_config(void) {
    mt_gpt_config c = mt_gpt_config_default();
    shared_choices(&c.norm, &c.placement, &c.init, &c.act);
    c.n_layer = o.n_layer;
    c.n_head = o.n_head;
    c.n_embd = o.n_embd;
    c.n_ctx = o.n_ctx;
    c.n_ff = o.n_ff;
    c.tied = !o.untie;
    c.bias = !o.no_bias;
    c.dropout = o.dropout;
    return c;
}

/* The ViT's size comes from the data (image size, channels, classes: the trainer sets them). */
static mt_vit_config vit_config(void) {
    mt_vit_config c = mt_vit_config_default();
    mt_err e;
    shared_choices(&c.norm, &c.placement, &c.init, &c.act);
    if (mt_vit_pool_parse(choice("pool"), &c.pool, &e) != MT_OK) die(2, e.msg);
    c.patch = o.patch;
    c.n_layer = o.n_layer;
    c.n_head = o.n_head;
    c.n_embd = o.n_embd;
    c.n_ff = o.n_ff;
    c.bias = !o.no_bias;
    c.dropout = o.dropout;
    return c;
}

static mt_optim_config optim_config(void) {
    mt_optim_config c = mt_optim_defaults();
    mt_err e;
    if (mt_optim_parse_kind(choice("optim"), &c.kind, &e) != MT_OK ||
        mt_optim_parse_schedule(choice("schedule"), &c.sched.kind, &e) != MT_OK ||
        mt_optim_parse_decay_scope(choice("decay-scope"), &c.decay_scope, &e) != MT_OK)
        die(2, e.msg);
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
    mt_tok_kind kind = o.tokenizer == 1 ? MT_TOK_CHAR : MT_TOK_BYTE;
    mt_status s = mt_data_load(o.data, kind, &tok, &d, &e);
    if (s == MT_OK) s = mt_tokfile_write(o.prepare, &tok, &d, &e);
    if (s != MT_OK) die(exit_code(s), e.msg);
    printf("wrote %s: %zu tokens, %s tokenizer, vocabulary %d\n", o.prepare, d.n,
           mt_tok_name(tok.kind), tok.n_vocab);
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

/* mpirun binds each rank to one core unless told otherwise: warn when that leaves cores idle,
   or when ranks x threads oversubscribe the cores. */
static void check_threads(void) {
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), per_node = mt_dist_local_size();
    if (mt_dist_size() == 1 && !getenv("OMPI_COMM_WORLD_SIZE")) return;
    if (mt_threads() == 1 && per_node < cores)
        fprintf(stderr, "train: warning: each of the %d rank(s) on this machine runs 1 thread on %d "
                "cores; mpirun binds a rank to one core unless given --bind-to none (or --map-by "
                "slot:PE=N) and -x OMP_NUM_THREADS=N\n", per_node, cores);
    else if (mt_threads() * per_node > cores)
        fprintf(stderr, "train: warning: %d rank(s) x %d threads on %d cores: oversubscribed, "
                "set --threads or OMP_NUM_THREADS to %d\n", per_node, mt_threads(), cores,
                cores / per_node > 0 ? cores / per_node : 1);
}

int main(int argc, char **argv) {
    mt_dist_init(&argc, &argv);
    bool rank0 = mt_dist_rank() == 0;
    static char defaults[sizeof o];
    memcpy(defaults, &o, sizeof o);
    mt_err e;
    layer_options(defaults, NULL, argc, argv);
    if (o.help) {
        memcpy(&o, defaults, sizeof o); /* the help shows the defaults */
        char *help = mt_opts_help(OPTS, N_OPTS);
        if (rank0) printf("%s%s", USAGE, help);
        free(help);
        mt_dist_finalize();
        return 0;
    }
    bool vit = o.model == 1;
    if (o.prepare[0] && vit) die(2, "--prepare writes token files for --model gpt");
    if (o.prepare[0] && mt_dist_size() > 1) die(2, "--prepare runs in one process, not under mpirun");
    if (o.prepare[0]) return prepare();

    char *saved = NULL, path[MT_OPT_STR_MAX + 32];
    if (o.resume) {
        snprintf(path, sizeof path, "%s/model.safetensors", o.out);
        mt_safetensors st;
        if (access(path, F_OK) != 0) {
            snprintf(e.msg, sizeof e.msg,
                     "--resume: no checkpoint %s (--out names the run to continue)", path);
            die(2, e.msg);
        }
        if (mt_file_check("--resume", path, &e) != MT_OK) die(2, e.msg);
        mt_status s = mt_st_load(path, &st, &e);
        if (s != MT_OK) die(exit_code(s), e.msg);
        const char *opts = mt_st_meta(&st, "options");
        if (!opts) die(2, "the checkpoint has no saved options: was it written by ./train?");
        saved = strdup(opts);
        mt_st_free(&st);
        layer_options(defaults, saved, argc, argv);
    }

    vit = o.model == 1; /* a resumed run's */
    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o.threads > 0 ? o.threads : omp ? atoi(omp) : 0);
    mt_gpt_config mc = model_config();
    mt_vit_config vc = vit_config();
    mt_optim_config oc = optim_config();
    char *options = mt_opts_to_ini(OPTS, N_OPTS);
    mt_train_cfg tc = {
        .data = o.data, .tokenizer = o.tokenizer == 1 ? MT_TOK_CHAR : MT_TOK_BYTE,
        .val_fraction = o.val_fraction, .out = o.out, .seed = (uint64_t)o.seed,
        .steps = o.steps, .batch = o.batch, .eval_batches = o.eval_batches,
        .arena_bytes = (size_t)(o.arena_mb > 0 ? o.arena_mb : 0) << 20, .options = options,
        .bucket_floats = (size_t)(o.bucket_kb > 0 ? o.bucket_kb : 1) * 1024 / sizeof(float),
        .model = vit ? MT_MODEL_VIT : MT_MODEL_GPT, .vit = &vc,
        .images = {.H = o.image_size, .W = o.image_size, .C = o.channels, .resize = !o.no_resize,
                   .skip_bad = o.bad_images == 0, .classes = o.classes[0] ? o.classes : NULL},
        .resume = o.resume, .replicas = o.replicas,
    };
    /* under MPI rank 0 alone prints progress and writes checkpoints and metrics */
    if (!rank0 && !freopen("/dev/null", "w", stdout)) die(1, "cannot silence stdout");
    mt_trainer tr;
    mt_status s = mt_trainer_init(&tr, &tc, &mc, &oc, &e);
    if (s == MT_OK && o.resume) s = mt_trainer_resume(&tr, &e);
    mt_dist_agree(&s, &e);
    if (s != MT_OK) die(exit_code(s), e.msg);

    mt_diag diag;
    mt_diag_cfg dc = {o.diag_grad_every, o.diag_update_steps, o.diag_resid_every, o.diag_batch};
    if (mt_dist_size() > 1 && (dc.grad_every || dc.update_steps || dc.resid_every))
        die(2, "the --diag-* diagnostics run in one process, not under mpirun");
    if ((s = mt_diag_open(&diag, &dc, &tr, &e)) != MT_OK) die(exit_code(s), e.msg);
    const mt_gpt_config *m = &tr.model.cfg;
    const mt_vit_config *v = &tr.vit.cfg;
    const mt_images *d = &tr.imgs;
    if (rank0) check_threads();
    if (vit && d->n_skipped && rank0)
        fprintf(stderr, "train: skipped %d unreadable or mismatched image(s) (--bad-images "
                "reject stops instead):\n%s", d->n_skipped, d->skipped);
    if (vit)
        printf("data    %s: %d images %dx%dx%d, %d classes, train %d, val %d%s\n", o.data, d->n,
               d->H, d->W, d->C, d->n_classes, tr.n_train_img, tr.n_val_img,
               d->n_train < d->n ? " (its test part)" : "");
    else
        printf("data    %s: %zu tokens (%s tokenizer, vocabulary %d), train %zu, val %zu\n",
               o.data, tr.all.n, mt_tok_name(tr.tok.kind), tr.tok.n_vocab, tr.train.n, tr.val.n);
    if (vit)
        printf("model   vit, patch %d (%d tokens, pool %s), %d layers, %d heads, n_embd %d, n_ff "
               "%d, norm %s, placement %s, init %s: %.3fM parameters\n",
               v->patch, mt_vit_tokens(v), mt_vit_pool_name(v->pool), v->n_layer, v->n_head,
               v->n_embd, v->n_ff, mt_norm_name(v->norm.kind), mt_placement_name(v->placement),
               mt_init_scheme_name(v->init), mt_params_count_trainable(tr.P) / 1e6);
    else
        printf("model   %d layers, %d heads, n_embd %d, n_ff %d, n_ctx %d, norm %s, placement %s, "
               "init %s: %.3fM parameters\n",
               m->n_layer, m->n_head, m->n_embd, m->n_ff, m->n_ctx, mt_norm_name(m->norm.kind),
               mt_placement_name(m->placement), mt_init_scheme_name(m->init),
               mt_params_count_trainable(tr.P) / 1e6);
    printf("train   %s, lr %g (%s, warmup %ld), batch %d x %d %s, %d threads (%d replicas), %s "
           "-> %s\n",
           choice("optim"), o.lr, choice("schedule"), tr.opt.cfg.sched.warmup, o.batch,
           vit ? 1 : m->n_ctx, vit ? "image" : "tokens", mt_threads(), tr.replicas.n,
           o.resume ? "resumed" : "from scratch", o.out);
    if (mt_dist_size() > 1)
        printf("mpi     %d ranks (%d on this machine), %d to %d rows of each batch per rank, "
               "gradients summed in %d buckets\n", mt_dist_size(), mt_dist_local_size(),
               o.batch / mt_dist_size(), (o.batch + mt_dist_size() - 1) / mt_dist_size(),
               tr.dist.n_buckets);

    mt_metrics metrics;
    snprintf(path, sizeof path, "%s/metrics.csv", o.out);
    if (rank0 && (s = mt_metrics_open(&metrics, path, o.resume ? tr.step : -1, &e)) != MT_OK)
        die(1, e.msg);
    if (tr.step >= o.steps && rank0) {
        if ((s = mt_trainer_save(&tr, &e)) != MT_OK) die(1, e.msg);
        printf("step %ld of %d: wrote %s\n", tr.step, o.steps, tr.model_path);
    }

    bool tty = mt_dist_size() == 1 && isatty(fileno(stdout)); /* mpirun: a pty per rank */
    /* tokens per step, or images for the vit (the metrics' tok_per_s column is then images/s) */
    long first = tr.step, tokens = (long)o.batch * (vit ? 1 : m->n_ctx);
    double t0 = mt_clock();
    char el[32], eta[32];
    mt_profile prof = {0};
    while (tr.step < o.steps) {
        double ts = mt_clock();
        mt_step_stats st;
        tr.ctx.profile = o.profile ? &prof : NULL; /* the training step only, not evaluations */
        mt_trainer_step(&tr, &st);
        tr.ctx.profile = NULL;
        double ms = 1e3 * (mt_clock() - ts);
        prof.steps++, prof.step_s += ms / 1e3;
        if (!st.finite) {
            int bad = mt_params_first_nonfinite(tr.P);
            if (tty) putchar('\n');
            if (rank0) /* every rank has the same loss and gradients: all stop here */
                fprintf(stderr,
                    "train: step %ld: the loss is %g and the gradient norm %g; %s%s. Nothing was "
                    "updated; the last checkpoint in %s stays as it was. Try a lower --lr, "
                    "--warmup or --clip.\n",
                    tr.step + 1, st.loss, st.grad_norm,
                    bad >= 0 ? "the first non-finite gradient is in " : "every gradient is finite",
                    bad >= 0 ? tr.P->p[bad].name : "", o.out);
            mt_dist_finalize();
            return 1;
        }
        if ((s = mt_diag_after_step(&diag, &tr, &st, &e)) != MT_OK) die(1, e.msg);
        long step = tr.step;
        bool eval = (o.eval_every > 0 && step % o.eval_every == 0) || step == o.steps;
        bool log = step % o.log_every == 0 || eval;
        double val = eval ? mt_trainer_eval(&tr) : NAN;
        if (log) {
            double elapsed = mt_clock() - t0, per = elapsed / (double)(step - first);
            mt_metrics_row row = {step, st.loss, val, st.lr, st.grad_norm, ms, tokens / (ms / 1e3)};
            if (rank0 && (s = mt_metrics_write(&metrics, &row, &e)) != MT_OK) die(1, e.msg);
            printf("%sstep %*ld/%d | loss %.4f | lr %.2e | norm %6.3f | %6.0f %s/s | %s | "
                   "ETA %s",
                   tty ? "\r" : "", (int)snprintf(NULL, 0, "%d", o.steps), step, o.steps,
                   st.loss, st.lr, st.grad_norm, tokens / per, vit ? "img" : "tok",
                   hms(elapsed, el, sizeof el), hms(per * (double)(o.steps - step), eta, sizeof eta));
            if (eval && !isnan(val)) printf(" | val %.4f", val);
            if (eval && vit) printf(" acc %.4f", tr.val_accuracy);
            printf(tty ? (eval ? "\033[K\n" : "\033[K") : "\n");
            fflush(stdout);
        }
        if (rank0 && ((o.save_every > 0 && step % o.save_every == 0) || step == o.steps))
            if ((s = mt_trainer_save(&tr, &e)) != MT_OK) die(1, e.msg);
    }
    double total = mt_clock() - t0;
    if (tr.step > first)
        printf("done: %ld steps in %s, arena peak %.1f MiB; wrote %s\n", tr.step - first,
               hms(total, el, sizeof el), tr.ctx.arena.peak / 1048576.0, tr.model_path);
    if (tr.step > first && mt_dist_size() > 1)
        printf("mpi     rank 0 spent %.2f ms per step in the gradient sums (%.1f%% of the run)\n",
               1e3 * tr.dist.comm_s / (double)(tr.step - first), 100 * tr.dist.comm_s / total);
    if (o.profile && tr.step > first && rank0) mt_profile_print(&prof, stdout);
    if (rank0) mt_metrics_close(&metrics);
    mt_diag_close(&diag);
    mt_trainer_free(&tr);
    free(options);
    free(saved);
    mt_dist_finalize();
    return 0;
}
