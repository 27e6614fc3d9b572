/* ./train: trains a model (--model, one of the registered types) on --data. Flags,
 * config files, progress, exit codes; the work itself is src/train, --prepare and the report
 * src/app, the model behind its type.
 * Exit status: 0 done, 1 runtime failure (diverged, I/O, out of memory), 2 usage (a flag, a
 * config value, a missing or malformed input file; nothing was written). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

static bool tty; /* progress on one line, rewritten (a terminal, one process) */

/* The directories of --out that the trainer creates (mt_missing_dirs), removed again when the
   run stops before its first step: a refused run writes nothing. */
static int new_dirs;
static _Noreturn void die_in_setup(const mt_run_options *o, mt_status s, const char *msg) {
    if (mt_dist_rank() == 0) mt_remove_new_dirs(o->train.out, new_dirs);
    die(mt_exit_code(s), msg);
}

/* What a run writes beside its checkpoints: the diagnostics' CSVs and, with --report, the page. */
typedef struct {
    mt_diag diag;
    mt_html_report page;
    bool reporting; /* rank 0 with --report, until a write fails */
} run_outputs;

/* The page rewritten: a failed write is a warning, and the run goes on without it. */
static void write_report(run_outputs *o, const mt_trainer *tr, bool done, const char *stopped) {
    mt_err e;
    if (o->reporting && mt_html_report_write(&o->page, tr, done, stopped, &e) != MT_OK) {
        fprintf(stderr, "train: warning: --report: %s; the run goes on without it\n", e.msg);
        o->reporting = false;
    }
}

/* The progress line of a logged step (mt_loop_cfg.on_log), and the page after an evaluation. */
static void on_log(const mt_trainer *tr, const mt_progress *p, void *arg) {
    mt_report_progress(stdout, tty, tr, p);
    if (p->eval && p->step < p->steps) write_report(arg, tr, false, NULL);
}

static mt_status diag_after_step(mt_trainer *tr, const mt_step_stats *st, void *arg, mt_err *err) {
    return mt_diag_after_step(&((run_outputs *)arg)->diag, tr, st, err);
}

/* The trainer of the options (resumed with --resume), or the error and exit. */
static void open_trainer(mt_trainer *tr, const mt_run_options *r) {
    mt_err e;
    mt_status s = mt_trainer_init(tr, &r->train, &r->optim, &e);
    mt_dist_agree(&s, &e); /* before the collective resume */
    if (s == MT_OK && r->train.resume) s = mt_trainer_resume(tr, &e);
    if (s != MT_OK) die_in_setup(r, s, e.msg);
}

/* With --time-budget or --target-loss, the run's outcome as one JSON line after "result ": the
   steps and tokens this invocation trained, its seconds from the first step, the last validation
   loss (null: none) and whether it reached --target-loss. */
static void print_result(const mt_progress *p) {
    char val[32] = "null";
    if (isfinite(p->val_last)) snprintf(val, sizeof val, "%.6f", p->val_last);
    long steps = p->step - p->first;
    printf("result {\"steps\":%ld,\"tokens\":%.0f,\"seconds\":%.3f,\"val_loss\":%s,"
           "\"reached\":%s}\n",
           steps, (double)steps * p->units, p->elapsed, val, p->reached ? "true" : "false");
}

/* Trains: the trainer set up (or resumed), the diagnostics opened, the loop run. */
static int train(const mt_run_options *o) {
    mt_err e;
    mt_trainer tr;
    new_dirs = mt_missing_dirs(o->train.out);
    open_trainer(&tr, o);
    run_outputs out = {.reporting = o->report && mt_dist_rank() == 0};
    mt_status s;
    if ((s = mt_diag_open(&out.diag, &o->diag, &tr, &e)) != MT_OK) die_in_setup(o, s, e.msg);
    if (out.reporting && (s = mt_html_report_open(&out.page, &tr, &e)) != MT_OK)
        die_in_setup(o, s, e.msg);
    char warning[512];
    if (mt_dist_rank() == 0 && mt_dist_thread_warning(warning, sizeof warning))
        fprintf(stderr, "train: warning: %s\n", warning);
    char *data_warning = mt_report_data_warning(&tr);
    if (data_warning && mt_dist_rank() == 0) fprintf(stderr, "train: %s", data_warning);
    free(data_warning);
    mt_report_setup(stdout, &tr, o);
    tty = mt_dist_size() == 1 && isatty(fileno(stdout)); /* mpirun: a pty per rank */
    mt_profile prof = {0};
    mt_loop_cfg lc = {.eval_every = o->eval_every,
                      .save_every = o->save_every,
                      .log_every = o->log_every,
                      .profile = o->profile ? &prof : NULL,
                      .time_budget = o->time_budget,
                      .target_loss = o->target_loss,
                      .after_step = diag_after_step,
                      .on_log = on_log,
                      .arg = &out};
    long first = tr.step;
    double t0 = mt_clock();
    mt_progress p;
    s = mt_trainer_run(&tr, &lc, &p, &e);
    write_report(&out, &tr, true, s == MT_OK ? NULL : e.msg);
    if (s != MT_OK) {
        if (tty) putchar('\n');
        die(mt_exit_code(s), e.msg); /* every rank has the same loss: all stop here */
    }
    if (first >= o->train.steps && mt_dist_rank() == 0)
        printf("step %ld of %d: wrote %s\n", tr.step, o->train.steps, tr.model_path);
    double seconds = mt_clock() - t0;
    mt_report_done(stdout, &tr, first, seconds, lc.profile);
    if ((o->time_budget > 0 || o->target_loss > 0) && mt_dist_rank() == 0) print_result(&p);
    if (out.reporting) /* what the page cost the run */
        printf("report  %s/report.html: %d writes in %.3f s, %.2f%% of the run\n", o->train.out,
               out.page.writes, out.page.seconds, 100 * out.page.seconds / seconds);
    mt_diag_close(&out.diag);
    if (o->report && mt_dist_rank() == 0) mt_html_report_close(&out.page);
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
static int run(const mt_run_options *o) {
    if (o->help) return print_help(), 0;
    if (o->format != MT_PREPARE_MT && !o->prepare[0])
        die(2, "--format says what --prepare writes: give --prepare too");
    mt_err e;
    if (o->prepare[0]) {
        mt_prepared p;
        mt_status s = mt_prepare(o, &p, &e);
        if (s != MT_OK) die(mt_exit_code(s), e.msg);
        mt_report_prepared(stdout, o, &p);
        return 0;
    }
    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o->threads > 0 ? o->threads : omp ? atoi(omp) : 0);
    if (mt_gemm_backend_from_env(&e) != MT_OK) die(2, e.msg);
    /* under MPI rank 0 alone prints progress and writes checkpoints and metrics */
    if (mt_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) die(1, "cannot silence stdout");
    return train(o);
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
