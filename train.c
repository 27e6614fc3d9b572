/* ./train: trains a model (--model, one of the registered types) on --data. Flags,
 * config files, progress, exit codes; the work itself is src/train, the model behind its type.
 * Exit status: 0 done, 1 runtime failure (diverged, I/O, out of memory), 2 usage (a flag, a
 * config value, a missing or malformed input file; nothing was written). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt.h"

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

/* --prepare: --data as a token file, or as llm.c shards. */
static int prepare(const mt_train_options *o) {
    mt_tokenizer tok;
    mt_tokens d;
    mt_err e;
    const mt_data_options *dat = &o->data;
    bool llmc = o->format == MT_PREPARE_LLMC;
    if ((!mt_data_is_set(dat->path) && mt_file_check("--data", dat->path, &e) != MT_OK) ||
        mt_output_check("--prepare", o->prepare, "--data", dat->path, &e) != MT_OK ||
        (llmc && check_llmc_dir(o->prepare, &e) != MT_OK))
        die(2, e.msg);
    mt_text_cfg tc = {(mt_tok_kind)dat->tokenizer, dat->vocab_size, dat->val_fraction,
                      dat->data_vocab};
    int n_files = 0;
    mt_status s = mt_data_load(dat->path, &tc, &tok, &d, &e);
    if (s == MT_OK && llmc)
        s = write_llmc(o->prepare, (size_t)o->shard_tokens, &tok, &d, &n_files, &e);
    else if (s == MT_OK)
        s = write_atomic(o->prepare, tokfile_writer, &(prepared){.tok = &tok, .d = &d}, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    printf("wrote %s: %zu tokens, %s tokenizer, vocabulary %d", o->prepare, d.n,
           mt_enum_name(&MT_TOKENIZERS, tok.kind), tok.n_vocab);
    if (llmc)
        printf(" (mt's ids, not GPT-2's); %d llm.c shards of at most %d tokens (val: %zu tokens), "
               "meta.json",
               n_files, o->shard_tokens, d.n_val);
    printf("\n");
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

/* Under MPI: the optimizer state's bytes on each rank (collective), with --zero 1 a shard each,
   and the largest entry's, which bounds how far a shard of whole entries is from 1/N. */
static void print_state(const mt_trainer *tr) {
    int N = mt_dist_size();
    const mt_params *P = tr->P;
    double slot_bytes = (double)tr->opt.n_slots * sizeof(float), whole = slot_bytes * P->total;
    double bytes[N], most = 0, largest = 0;
    if (tr->cfg.zero) mt_zero_state_bytes(&tr->zero, &tr->opt, bytes);
    else
        for (int r = 0; r < N; r++) bytes[r] = whole;
    for (int i = 0; i < P->n; i++) {
        size_t end = i + 1 < P->n ? P->p[i + 1].offset : P->total;
        if (slot_bytes * (end - P->p[i].offset) > largest)
            largest = slot_bytes * (end - P->p[i].offset);
    }
    printf("state   optimizer state bytes per rank:");
    for (int r = 0; r < N; r++) {
        printf(" %.0f", bytes[r]);
        most = bytes[r] > most ? bytes[r] : most;
    }
    printf(" (the whole %.0f, the largest tensor's %.0f; %s the most %.3f x 1/%d of it)\n", whole,
           largest, tr->cfg.zero ? "--zero 1," : "not sharded,", whole > 0 ? most * N / whole : 0.0,
           N);
}

/* The data, model and training lines (and the MPI line), and the data's warning. */
static void print_setup(const mt_trainer *tr, const mt_train_options *o) {
    const mt_model_type *type = tr->model->type;
    char line[512], batch[64];
    char *warning = tr->task->type->warning ? tr->task->type->warning(tr->task) : NULL;
    if (warning && mt_dist_rank() == 0) fprintf(stderr, "train: %s", warning);
    free(warning);
    tr->task->type->describe(tr->task, line, sizeof line);
    printf("data    %s: %s\n", o->data.path, line);
    type->config_describe(tr->model->cfg, line, sizeof line);
    printf("model   %s: %.3fM parameters\n", line, mt_params_count_trainable(tr->P) / 1e6);
    mt_task_batch_words(tr->task->type, type, tr->model->cfg, o->grad_accum * o->batch, batch,
                        sizeof batch);
    if (o->grad_accum > 1) /* "128 x 64 tokens in 4 micro-batches" */
        snprintf(batch + strlen(batch), sizeof batch - strlen(batch), " in %d micro-batches",
                 o->grad_accum);
    printf("train   %s, lr %g (%s, warmup %ld), batch %s, %d threads (%d replicas), %s%s -> %s\n",
           mt_enum_name(&MT_OPTIMS, o->optim.kind), o->optim.sched.lr,
           mt_enum_name(&MT_SCHEDULES, o->optim.sched.kind), tr->opt.cfg.sched.warmup, batch,
           mt_threads(), tr->replicas.n, o->precision == MT_BF16 ? "bf16 products, " : "",
           o->resume ? "resumed" : "from scratch", o->out);
    const mt_optim *op = &tr->opt;
    if (op->type->whole) /* Muon: its two groups */
        printf("groups  %d hidden matrices (%.3fM parameters) %s, lr %g; %d other tensors AdamW, "
               "lr %g\n",
               op->n_whole, op->whole_floats / 1e6, op->type->name,
               op->cfg.muon_lr < 0 ? op->cfg.sched.lr : op->cfg.muon_lr, op->n_pieces,
               op->cfg.adam_lr < 0 ? op->cfg.sched.lr : op->cfg.adam_lr);
    if (mt_dist_size() > 1)
        printf("mpi     %d ranks (%d on this machine), %d to %d rows of each batch per rank, "
               "gradients summed in %d buckets\n",
               mt_dist_size(), mt_dist_local_size(), o->batch / mt_dist_size(),
               (o->batch + mt_dist_size() - 1) / mt_dist_size(), tr->dist.n_buckets);
    if (mt_dist_size() > 1) print_state(tr);
}

static bool tty; /* progress on one line, rewritten (a terminal, one process) */

/* The progress line of a logged step (mt_loop_cfg.on_log). */
static void print_progress(const mt_trainer *tr, const mt_progress *p, void *arg) {
    (void)arg;
    const mt_task_type *task = tr->task->type;
    double per = p->elapsed / (double)(p->step - p->first);
    char el[32], eta[32];
    printf("%sstep %*ld/%ld | loss %.4f | lr %.2e | norm %6.3f | %6.0f %s/s | %s | ETA %s",
           tty ? "\r" : "", (int)snprintf(NULL, 0, "%ld", p->steps), p->step, p->steps, p->st.loss,
           p->st.lr, p->st.grad_norm, p->units / per, task->unit, hms(p->elapsed, el, sizeof el),
           hms(per * (double)(p->steps - p->step), eta, sizeof eta));
    if (p->eval && !isnan(p->val)) printf(" | val %.4f", p->val);
    if (p->eval && task->accuracy) printf(" acc %.4f", tr->val_accuracy);
    for (int k = 0; p->eval && k < mt_task_metric_count(task); k++)
        printf(" %s %.4f", task->metrics[k], p->metrics[k]);
    printf(tty ? (p->eval ? "\033[K\n" : "\033[K") : "\n");
    fflush(stdout);
}

static mt_status diag_after_step(mt_trainer *tr, const mt_step_stats *st, void *diag, mt_err *err) {
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
    if (prof && mt_dist_rank() == 0) mt_profile_print(prof, stdout);
}

/* The trainer of the options (resumed with --resume), or the error and exit. */
static void open_trainer(mt_trainer *tr, const mt_run_options *r) {
    mt_train_cfg tc = mt_run_options_train_cfg(r);
    mt_err e;
    mt_status s = mt_trainer_init(tr, &tc, &r->optim, &e);
    if (s == MT_OK && r->o.resume) s = mt_trainer_resume(tr, &e);
    mt_dist_agree(&s, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
}

/* Trains: the trainer set up (or resumed), the diagnostics opened, the loop run. */
static int train(const mt_run_options *r) {
    const mt_train_options *o = &r->o;
    mt_err e;
    mt_trainer tr;
    open_trainer(&tr, r);
    mt_diag diag;
    mt_status s;
    if (mt_dist_size() > 1 && (o->diag.grad_every || o->diag.update_steps || o->diag.resid_every))
        die(2, "the --diag-* diagnostics run in one process, not under mpirun");
    if ((s = mt_diag_open(&diag, &o->diag, &tr, &e)) != MT_OK) die(mt_exit_code(s), e.msg);
    char warning[512];
    if (mt_dist_rank() == 0 && mt_dist_thread_warning(warning, sizeof warning))
        fprintf(stderr, "train: warning: %s\n", warning);
    print_setup(&tr, o);
    tty = mt_dist_size() == 1 && isatty(fileno(stdout)); /* mpirun: a pty per rank */
    mt_profile prof = {0};
    mt_loop_cfg lc = {.eval_every = o->eval_every,
                      .save_every = o->save_every,
                      .log_every = o->log_every,
                      .profile = o->profile ? &prof : NULL,
                      .after_step = diag_after_step,
                      .on_log = print_progress,
                      .arg = &diag};
    long first = tr.step;
    double t0 = mt_clock();
    if ((s = mt_trainer_run(&tr, &lc, &e)) != MT_OK) {
        if (tty) putchar('\n');
        die(mt_exit_code(s), e.msg); /* every rank has the same loss: all stop here */
    }
    if (first >= o->steps && mt_dist_rank() == 0)
        printf("step %ld of %d: wrote %s\n", tr.step, o->steps, tr.model_path);
    print_done(&tr, first, mt_clock() - t0, lc.profile);
    mt_diag_close(&diag);
    mt_trainer_free(&tr);
    return 0;
}

/* ./train --help */
static void print_help(void) {
    char *help = mt_run_options_help(); /* the flags at their defaults */
    if (mt_dist_rank() == 0) printf("%s%s", USAGE, help);
    free(help);
}

/* What the options ask: the help, a token file (--prepare), or a run. */
static int run(const mt_run_options *r) {
    const mt_train_options *o = &r->o;
    if (o->help) return print_help(), 0;
    if (o->prepare[0] && !r->task->data_file)
        die(2, "--prepare writes token files of text data; this --model reads a dataset folder");
    if (o->prepare[0] && mt_dist_size() > 1)
        die(2, "--prepare runs in one process, not under mpirun");
    if (o->format != MT_PREPARE_MT && !o->prepare[0])
        die(2, "--format says what --prepare writes: give --prepare too");
    if (o->prepare[0]) return prepare(o);
    mt_err e;
    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o->threads > 0 ? o->threads : omp ? atoi(omp) : 0);
    if (mt_gemm_backend_from_env(&e) != MT_OK) die(2, e.msg);
    /* under MPI rank 0 alone prints progress and writes checkpoints and metrics */
    if (mt_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) die(1, "cannot silence stdout");
    return train(r);
}

int main(int argc, char **argv) {
    mt_dist_init(&argc, &argv);
    mt_err e;
    mt_run_options r;
    mt_status s = mt_run_options_read(&r, argc, argv, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    int rc = run(&r);
    mt_run_options_free(&r);
    mt_dist_finalize();
    return rc;
}
