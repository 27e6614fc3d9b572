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


static int prepare(const mt_train_options *o) {
    mt_tokenizer tok;
    mt_tokens d;
    mt_err e;
    const mt_data_options *dat = &o->data;
    if (mt_file_check("--data", dat->path, &e) != MT_OK) die(2, e.msg);
    mt_text_cfg tc = {(mt_tok_kind)dat->tokenizer, dat->vocab_size, dat->val_fraction};
    mt_status s = mt_data_load(dat->path, &tc, &tok, &d, &e);
    if (s == MT_OK) s = mt_tokfile_write(o->prepare, &tok, &d, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    printf("wrote %s: %zu tokens, %s tokenizer, vocabulary %d\n", o->prepare, d.n,
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
    mt_err e;
    mt_run_options r;
    mt_status s = mt_run_options_read(&r, argc, argv, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    const mt_train_options *o = &r.o;
    const mt_model_type *type = r.type;
    if (o->help) {
        char *help = mt_run_options_help(); /* the flags at their defaults */
        if (rank0) printf("%s%s", USAGE, help);
        free(help);
        mt_dist_finalize();
        return 0;
    }
    if (o->prepare[0] && !type->data_file)
        die(2, "--prepare writes token files of text data; this --model reads a dataset folder");
    if (o->prepare[0] && mt_dist_size() > 1) die(2, "--prepare runs in one process, not under mpirun");
    if (o->prepare[0]) return prepare(o);

    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o->threads > 0 ? o->threads : omp ? atoi(omp) : 0);
    if (mt_gemm_backend_from_env(&e) != MT_OK) die(2, e.msg);
    char path[MT_FIELD_STR_MAX + 32];
    mt_train_cfg tc = {
        .model = type, .model_cfg = r.model_cfg, .data = r.data,
        .out = o->out, .seed = (uint64_t)o->seed, .steps = o->steps, .batch = o->batch,
        .arena_bytes = (size_t)(o->arena_mb > 0 ? o->arena_mb : 0) << 20, .options = r.saved,
        .bucket_floats = (size_t)(o->bucket_kb > 0 ? o->bucket_kb : 1) * 1024 / sizeof(float),
        .resume = o->resume, .replicas = o->replicas, .precision = o->precision,
    };
    /* under MPI rank 0 alone prints progress and writes checkpoints and metrics */
    if (!rank0 && !freopen("/dev/null", "w", stdout)) die(1, "cannot silence stdout");
    mt_trainer tr;
    s = mt_trainer_init(&tr, &tc, &r.optim, &e);
    if (s == MT_OK && o->resume) s = mt_trainer_resume(&tr, &e);
    mt_dist_agree(&s, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);

    mt_diag diag;
    const mt_diag_cfg dc = o->diag;
    if (mt_dist_size() > 1 && (dc.grad_every || dc.update_steps || dc.resid_every))
        die(2, "the --diag-* diagnostics run in one process, not under mpirun");
    if ((s = mt_diag_open(&diag, &dc, &tr, &e)) != MT_OK) die(mt_exit_code(s), e.msg);
    if (rank0) check_threads();
    char line[512];
    char *warning = type->task_warning ? type->task_warning(tr.task) : NULL;
    if (warning && rank0) fprintf(stderr, "train: %s", warning);
    free(warning);
    type->task_describe(tr.task, line, sizeof line);
    printf("data    %s: %s\n", o->data.path, line);
    type->config_describe(tr.model->cfg, line, sizeof line);
    printf("model   %s: %.3fM parameters\n", line, mt_params_count_trainable(tr.P) / 1e6);
    char batch[64];
    mt_model_batch_words(type, tr.model->cfg, o->batch, batch, sizeof batch);
    printf("train   %s, lr %g (%s, warmup %ld), batch %s, %d threads (%d replicas), %s%s -> %s\n",
           mt_enum_name(&MT_OPTIMS, o->optim.kind), o->optim.sched.lr,
           mt_enum_name(&MT_SCHEDULES, o->optim.sched.kind),
           tr.opt.cfg.sched.warmup, batch, mt_threads(), tr.replicas.n,
           o->precision == MT_BF16 ? "bf16 products, " : "", o->resume ? "resumed" : "from scratch", o->out);
    if (mt_dist_size() > 1)
        printf("mpi     %d ranks (%d on this machine), %d to %d rows of each batch per rank, "
               "gradients summed in %d buckets\n", mt_dist_size(), mt_dist_local_size(),
               o->batch / mt_dist_size(), (o->batch + mt_dist_size() - 1) / mt_dist_size(),
               tr.dist.n_buckets);

    mt_metrics metrics;
    snprintf(path, sizeof path, "%s/metrics.csv", o->out);
    if (rank0 && (s = mt_metrics_open_with(&metrics, path, o->resume ? tr.step : -1, type->metrics,
                                           &e)) != MT_OK)
        die(1, e.msg);
    if (tr.step >= o->steps && rank0) {
        if ((s = mt_trainer_save(&tr, &e)) != MT_OK) die(1, e.msg);
        printf("step %ld of %d: wrote %s\n", tr.step, o->steps, tr.model_path);
    }

    bool tty = mt_dist_size() == 1 && isatty(fileno(stdout)); /* mpirun: a pty per rank */
    /* units (tokens, images) per step: the metrics' tok_per_s column counts them */
    long first = tr.step, tokens = (long)o->batch * type->row_units(tr.model->cfg);
    double t0 = mt_clock();
    char el[32], eta[32];
    mt_profile prof = {0};
    while (tr.step < o->steps) {
        double ts = mt_clock();
        mt_step_stats st;
        tr.ctx.profile = o->profile ? &prof : NULL; /* the training step only, not evaluations */
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
                    bad >= 0 ? tr.P->p[bad].name : "", o->out);
            mt_dist_finalize();
            return 1;
        }
        if ((s = mt_diag_after_step(&diag, &tr, &st, &e)) != MT_OK) die(1, e.msg);
        long step = tr.step;
        bool eval = (o->eval_every > 0 && step % o->eval_every == 0) || step == o->steps;
        bool log = step % o->log_every == 0 || eval;
        double val = eval ? mt_trainer_eval(&tr) : NAN;
        if (log) {
            double elapsed = mt_clock() - t0, per = elapsed / (double)(step - first);
            double extra[MT_EVAL_METRICS];
            for (int k = 0; k < mt_model_metric_count(type); k++)
                extra[k] = eval ? tr.val_metrics[k] : NAN;
            mt_metrics_row row = {step, st.loss, val, st.lr, st.grad_norm, ms, tokens / (ms / 1e3),
                                  (rank0 ? metrics.elapsed0 : 0) + elapsed, extra};
            if (rank0 && (s = mt_metrics_write(&metrics, &row, &e)) != MT_OK) die(1, e.msg);
            printf("%sstep %*ld/%d | loss %.4f | lr %.2e | norm %6.3f | %6.0f %s/s | %s | "
                   "ETA %s",
                   tty ? "\r" : "", (int)snprintf(NULL, 0, "%d", o->steps), step, o->steps,
                   st.loss, st.lr, st.grad_norm, tokens / per, type->unit,
                   hms(elapsed, el, sizeof el), hms(per * (double)(o->steps - step), eta, sizeof eta));
            if (eval && !isnan(val)) printf(" | val %.4f", val);
            if (eval && type->accuracy) printf(" acc %.4f", tr.val_accuracy);
            for (int k = 0; eval && k < mt_model_metric_count(type); k++)
                printf(" %s %.4f", type->metrics[k], tr.val_metrics[k]);
            printf(tty ? (eval ? "\033[K\n" : "\033[K") : "\n");
            fflush(stdout);
        }
        if (rank0 && ((o->save_every > 0 && step % o->save_every == 0) || step == o->steps))
            if ((s = mt_trainer_save(&tr, &e)) != MT_OK) die(1, e.msg);
    }
    double total = mt_clock() - t0;
    if (tr.step > first)
        printf("done: %ld steps in %s, arena peak %.1f MiB; wrote %s\n", tr.step - first,
               hms(total, el, sizeof el), tr.ctx.arena.peak / 1048576.0, tr.model_path);
    if (tr.step > first && mt_dist_size() > 1)
        printf("mpi     rank 0 spent %.2f ms per step in the gradient sums (%.1f%% of the run)\n",
               1e3 * tr.dist.comm_s / (double)(tr.step - first), 100 * tr.dist.comm_s / total);
    if (o->profile && tr.step > first && rank0) mt_profile_print(&prof, stdout);
    if (rank0) mt_metrics_close(&metrics);
    mt_diag_close(&diag);
    mt_trainer_free(&tr);
    mt_run_options_free(&r);
    mt_dist_finalize();
    return 0;
}
