/* The training loop (mt_trainer_run): steps, evaluation, metrics.csv, checkpoints and the stop on
   a non-finite loss, for any model through its trainer; the program only prints what it is told
   (mt_loop_cfg.on_log). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../tensor/profile.h"
#include "train.h"

/* The run stops at step tr->step + 1, whose loss or gradient is not finite: nothing was updated,
   the last checkpoint stays as it was. */
static mt_status diverged(const mt_trainer *tr, const mt_step_stats *st, mt_err *err) {
    int bad = mt_params_first_nonfinite(tr->P);
    return mt_errorf(err, MT_EDIVERGED,
                     "step %ld: the loss is %g and the gradient norm %g; %s%s. Nothing was "
                     "updated; the last checkpoint in %s stays as it was. Try a lower --lr, "
                     "--warmup or --clip.",
                     tr->step + 1, st->loss, st->grad_norm,
                     bad >= 0 ? "the first non-finite gradient is in " : "every gradient is finite",
                     bad >= 0 ? tr->P->p[bad].name : "", tr->cfg.out);
}

/* The columns of metrics.csv after elapsed_s: val_<name> of the task's metrics, then with
   --qk-clip the step's heads clipped and largest logit (mt_step_stats). */
enum { QK_COLUMNS = 2 };

/* metrics.csv in the run's directory (rank 0's): a resumed run keeps the rows up to its step. */
static mt_status open_metrics(mt_trainer *tr, mt_metrics *m, bool *open, mt_err *err) {
    char path[1100], names[MT_EVAL_METRICS][64];
    const char *cols[MT_EVAL_METRICS + QK_COLUMNS + 1] = {0};
    int nm = mt_task_metric_count(tr->task->type);
    for (int k = 0; k < nm; k++)
        snprintf(names[k], sizeof names[k], "val_%s", tr->task->type->metrics[k]);
    for (int k = 0; k < nm; k++) cols[k] = names[k];
    if (tr->qk.n) cols[nm] = "qk_clipped", cols[nm + 1] = "qk_max_logit";
    *open = false;
    if (mt_dist_rank() != 0) return MT_OK;
    snprintf(path, sizeof path, "%s/metrics.csv", tr->cfg.out);
    mt_status s = mt_metrics_open_with(m, path, tr->cfg.resume ? tr->step : -1, cols, err);
    *open = s == MT_OK;
    return s;
}

/* The evaluation and metrics row of a logged step, then the report. */
static mt_status log_step(mt_trainer *tr, const mt_loop_cfg *lc, mt_metrics *m, bool rank0,
                          mt_progress *p, mt_err *err) {
    double extra[MT_EVAL_METRICS + QK_COLUMNS];
    p->val = p->eval ? mt_trainer_eval(tr) : NAN;
    p->elapsed = mt_clock() - p->t0;
    int nm = mt_task_metric_count(tr->task->type);
    for (int k = 0; k < nm; k++) extra[k] = p->eval ? tr->val_metrics[k] : NAN;
    if (tr->qk.n) extra[nm] = p->st.qk_clipped, extra[nm + 1] = p->st.qk_logit;
    p->metrics = extra;
    mt_metrics_row row = {.step = p->step,
                          .loss = p->st.loss,
                          .val_loss = p->val,
                          .lr = p->st.lr,
                          .grad_norm = p->st.grad_norm,
                          .ms = p->ms,
                          .tok_per_s = p->units / (p->ms / 1e3),
                          .elapsed_s = (rank0 ? m->elapsed0 : 0) + p->elapsed,
                          .extra = extra};
    mt_status s = rank0 ? mt_metrics_write(m, &row, err) : MT_OK;
    if (s == MT_OK && lc->on_log) lc->on_log(tr, p, lc->arg);
    return s;
}

/* Past --time-budget after this step: on every rank alike (the slowest rank's clock decides, so
   that all stop at the same step). */
static bool out_of_time(const mt_loop_cfg *lc, const mt_progress *p) {
    if (!(lc->time_budget > 0)) return false;
    float over = mt_clock() - p->t0 > lc->time_budget;
    mt_dist_max(&over, 1);
    return over > 0;
}

/* One step and what follows it: diagnostics, evaluation, logging, a checkpoint; *stop: the run
   ends here (its last step, the time budget spent or the target loss reached). */
static mt_status step_once(mt_trainer *tr, const mt_loop_cfg *lc, mt_metrics *m, bool rank0,
                           mt_progress *p, bool *stop, mt_err *err) {
    double ts = mt_clock();
    tr->ctx.profile = lc->profile; /* the training step only, not evaluations */
    mt_trainer_step(tr, &p->st);
    tr->ctx.profile = NULL;
    p->ms = 1e3 * (mt_clock() - ts);
    if (lc->profile) lc->profile->steps++, lc->profile->step_s += p->ms / 1e3;
    if (!p->st.finite) return diverged(tr, &p->st, err);
    mt_status s = lc->after_step ? lc->after_step(tr, &p->st, lc->arg, err) : MT_OK;
    p->step = tr->step;
    *stop = p->step == p->steps || out_of_time(lc, p); /* the loss of the last step validated */
    p->eval = (lc->eval_every > 0 && p->step % lc->eval_every == 0) || *stop;
    if (s == MT_OK && (p->step % lc->log_every == 0 || p->eval))
        s = log_step(tr, lc, m, rank0, p, err);
    if (p->eval) p->val_last = p->val; /* the same on every rank (summed across them) */
    p->reached = p->reached || (p->eval && lc->target_loss > 0 && p->val <= lc->target_loss);
    *stop = *stop || p->reached;
    bool save = (lc->save_every > 0 && p->step % lc->save_every == 0) || *stop;
    return s == MT_OK && save ? mt_trainer_save(tr, err) : s; /* rank 0 writes */
}

mt_status mt_trainer_run(mt_trainer *tr, const mt_loop_cfg *lc, mt_progress *out, mt_err *err) {
    MT_ASSERT(lc->log_every >= 1, "loop: log_every %d", lc->log_every);
    bool rank0 = mt_dist_rank() == 0, open, stop = false;
    mt_metrics m;
    mt_status s = open_metrics(tr, &m, &open, err);
    mt_progress p = {.steps = tr->cfg.steps,
                     .first = tr->step,
                     .t0 = mt_clock(),
                     .val_last = NAN,
                     .units = (double)tr->cfg.batch * tr->cfg.grad_accum *
                              mt_task_row_units(tr->task->type, tr->model->type, tr->model->cfg)};
    /* a resumed run already at its last step writes its checkpoint again */
    if (s == MT_OK && tr->step >= tr->cfg.steps) s = mt_trainer_save(tr, err);
    while (s == MT_OK && !stop && tr->step < tr->cfg.steps)
        s = step_once(tr, lc, &m, rank0, &p, &stop, err);
    p.step = tr->step, p.elapsed = mt_clock() - p.t0;
    if (open) mt_metrics_close(&m);
    if (out) *out = p;
    return s;
}
