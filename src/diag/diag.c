/* Depth-study diagnostics: per-sublayer gradient norms, the model update against theta_0, the
   residual-stream norms, the output logits' log Z and the block-skip probe (diag.h). Memory is
   allocated at open; a diagnostic step uses the step arena only. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../models/model.h"
#include "../tensor/base.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"
#include "../tensor/vmath.h"
#include "../train/train.h"
#include "diag.h"

static FILE *open_csv(const char *dir, const char *name, const char *header, mt_err *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = NULL;
    if (mt_file_open("the diagnostics file", path, "wb", &f, err) != MT_OK) return NULL;
    if (fputs(header, f) == EOF) {
        mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    return f;
}

/* Evaluates F(x, theta) on the fixed batch: the update row (step <= update_steps) and the
   residual rows (resid due) for step. */
static mt_status forward_rows(mt_diag *d, mt_trainer *tr, long step, bool update, bool resid,
                              mt_err *err) {
    mt_ctx *c = &tr->ctx;
    mt_ctx_reset(c);
    c->training = false;
    c->grad_enabled = false;
    mt_batch b = tr->task->type->probe_rows(c, tr->task, tr->cfg.seed ^ MT_DIAG_SEED, d->B);
    mt_tensor *f = tr->model->type->probes->hidden(c, tr->model, &b, resid ? d->resid_norm : NULL);
    c->training = true;
    c->grad_enabled = true;
    int ok = 0;
    if (step == 0 && update && !(d->f0 = malloc(f->n * sizeof *d->f0)))
        return mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    if (step == 0 && update) memcpy(d->f0, f->data, f->n * sizeof(float));
    if (update) {
        double s = 0;
        for (size_t i = 0; i < f->n; i++) {
            double e = (double)f->data[i] - d->f0[i];
            s += e * e;
        }
        ok |= fprintf(d->update, "%ld,%.9g\n", step, sqrt(s / (double)f->n)) < 0 ||
              fflush(d->update);
    }
    if (resid) {
        for (int i = 0; i <= d->L; i++)
            ok |= fprintf(d->resid, "%ld,%d,%.9g\n", step, i, d->resid_norm[i]) < 0;
        ok |= fflush(d->resid);
    }
    return ok ? mt_errorf(err, MT_EIO, "cannot write a diagnostics file in %s: %s", tr->cfg.out,
                          strerror(errno))
              : MT_OK;
}

/* The probe batch in c, reset, in eval mode without gradients (the caller restores them). */
static mt_batch probe(mt_diag *d, mt_trainer *tr) {
    mt_ctx *c = &tr->ctx;
    mt_ctx_reset(c);
    c->training = false;
    c->grad_enabled = false;
    return tr->task->type->probe_rows(c, tr->task, tr->cfg.seed ^ MT_DIAG_SEED, d->B);
}

static mt_status write_failed(const char *name, mt_err *err) {
    return mt_errorf(err, MT_EIO, "cannot write %s: %s", name, strerror(errno));
}

/* The logz row of step: log Z of every row of the logits, in double, its mean and max. */
static mt_status logz_row(mt_diag *d, mt_trainer *tr, long step, mt_err *err) {
    mt_batch b = probe(d, tr);
    const mt_tensor *y = tr->model->type->probes->logits(&tr->ctx, tr->model, &b);
    tr->ctx.training = tr->ctx.grad_enabled = true;
    int rows = mt_rows(y), V = mt_cols(y);
    double sum = 0, top = -INFINITY;
    for (int r = 0; r < rows; r++) {
        const float *x = y->data + (size_t)r * V;
        double m = mt_vmaxf(x, V), s = 0; /* in float (exact): GCC 12 for aarch64 fails (ICE) on
                                              an fmax reduction of floats widened to double */
        for (int j = 0; j < V; j++) s += exp(x[j] - m);
        sum += m + log(s), top = fmax(top, m + log(s));
    }
    bool bad = fprintf(d->logz, "%ld,%.9g,%.9g\n", step, sum / rows, top) < 0 || fflush(d->logz);
    return bad ? write_failed("diag_logz.csv", err) : MT_OK;
}

/* The probe batch's plain cross-entropy with block `skip` passed over (-1: none). */
static double skipped_loss(mt_diag *d, mt_trainer *tr, int skip) {
    mt_batch b = probe(d, tr);
    tr->model->type->probes->skip_block(tr->model, skip);
    double loss = tr->model->type->loss(&tr->ctx, tr->model, tr->P, &b, MT_CE_PLAIN)->data[0];
    tr->model->type->probes->skip_block(tr->model, -1);
    tr->ctx.training = tr->ctx.grad_enabled = true;
    return loss;
}

/* The skip rows of step: the whole model's loss (block -1), then each block skipped. */
static mt_status skip_rows(mt_diag *d, mt_trainer *tr, long step, mt_err *err) {
    double whole = skipped_loss(d, tr, -1);
    bool bad = fprintf(d->skip, "%ld,-1,%.9g,0\n", step, whole) < 0;
    for (int l = 0; l < d->L; l++) {
        double loss = skipped_loss(d, tr, l);
        bad |= fprintf(d->skip, "%ld,%d,%.9g,%.9g\n", step, l, loss, loss - whole) < 0;
    }
    return bad || fflush(d->skip) ? write_failed("diag_skip.csv", err) : MT_OK;
}

/* The logz and skip rows due at step (at_end: the run's last step). */
static mt_status probe_rows_due(mt_diag *d, mt_trainer *tr, long step, bool at_end, mt_err *err) {
    mt_status s = MT_OK;
    if (d->logz && step % d->cfg.logz_every == 0) s = logz_row(d, tr, step, err);
    if (s == MT_OK && d->skip && (step % d->cfg.skip_every == 0 || at_end))
        s = skip_rows(d, tr, step, err);
    return s;
}

/* The model type can give what the logz and skip diagnostics read (it has probes: it probes its
   hidden state). */
static mt_status probe_check(const mt_diag_cfg *cfg, const mt_trainer *tr, mt_err *err) {
    const mt_model_type *t = tr->model->type;
    if (cfg->logz_every && !t->probes->logits)
        return mt_errorf(err, MT_EINVAL,
                         "--diag-logz-every reads the output logits of every position; --model %s "
                         "does not give them (the GPT does)",
                         t->name);
    if (cfg->skip_every && !t->probes->skip_block)
        return mt_errorf(err, MT_EINVAL,
                         "--diag-skip-every skips blocks of the model; --model %s cannot (the GPT "
                         "and the encoder-decoder can)",
                         t->name);
    return MT_OK;
}

/* The diagnostics of the probes (and diag_attn.c's); on an error nothing stays open. */
static mt_status open_probes(mt_diag *d, const mt_diag_cfg *cfg, mt_trainer *tr, mt_err *err) {
    if (mt_dist_size() > 1 && (cfg->grad_every || cfg->update_steps || cfg->resid_every))
        return mt_errorf(err, MT_EINVAL,
                         "the --diag-* diagnostics run in one process, not under mpirun");
    if (cfg->grad_every < 0 || cfg->update_steps < 0 || cfg->resid_every < 0 || cfg->batch < 0)
        return mt_errorf(err, MT_EINVAL,
                         "--diag-grad-every %d, --diag-update-steps %d, --diag-resid-every %d, "
                         "--diag-batch %d: expected 0 (off) or more",
                         cfg->grad_every, cfg->update_steps, cfg->resid_every, cfg->batch);
    if (cfg->logz_every < 0 || cfg->skip_every < 0)
        return mt_errorf(err, MT_EINVAL,
                         "--diag-logz-every %d, --diag-skip-every %d: expected 0 (off) or more",
                         cfg->logz_every, cfg->skip_every);
    /* all off, or all but diag_attn.c's, which checks and opens its own file */
    if (!cfg->grad_every && !cfg->update_steps && !cfg->resid_every && !cfg->logz_every &&
        !cfg->skip_every)
        return mt_diag_attn_open(d, tr, err);
    if (!mt_diag_probes_hidden(tr))
        return mt_errorf(err, MT_EINVAL,
                         "the --diag-* diagnostics need a model with a probe of "
                         "its hidden state; --model %s has none",
                         tr->model->type->name);
    mt_status st = probe_check(cfg, tr, err);
    if (st != MT_OK) return st;
    if (cfg->update_steps > 0 && tr->step > 0)
        return mt_errorf(err, MT_EINVAL,
                         "--diag-update-steps measures against the initial weights: a run resumed "
                         "at step %ld has lost them (start from scratch, or set it to 0)",
                         tr->step);
    if (cfg->batch > tr->cfg.batch) /* the step arena holds a batch */
        return mt_errorf(err, MT_EINVAL, "--diag-batch %d: at most --batch (%d)", cfg->batch,
                         tr->cfg.batch);
    tr->keep_grad = cfg->grad_every > 0; /* grad_rows reads the gradients after a step */
    const mt_params *P = tr->P;
    d->L = mt_config_stack(tr->model->cfg)->n_layer;
    d->B = cfg->batch > 0 ? cfg->batch : tr->cfg.batch < 4 ? tr->cfg.batch : 4;
    bool fwd = cfg->update_steps > 0 || cfg->resid_every > 0;
    d->group = malloc((size_t)P->n * sizeof *d->group);
    d->sq = malloc((4 * (size_t)d->L + 1) * sizeof *d->sq);
    d->resid_norm = malloc(((size_t)d->L + 1) * sizeof *d->resid_norm);
    if (!d->group || !d->sq || !d->resid_norm) {
        mt_diag_close(d);
        return mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    }
    int blocks = mt_diag_param_groups(P, d->group, NULL);
    MT_ASSERT(blocks == d->L, "diag: %d blocks named in the parameters, the config has %d", blocks,
              d->L);
    const char *out = tr->cfg.out;
    if ((cfg->grad_every &&
         !(d->grad = open_csv(out, "diag_grad.csv",
                              "step,layer,attn_norm,attn,ffn_norm,ffn,total\n", err))) ||
        (cfg->update_steps &&
         !(d->update = open_csv(out, "diag_update.csv", "step,update\n", err))) ||
        (cfg->resid_every &&
         !(d->resid = open_csv(out, "diag_resid.csv", "step,layer,norm\n", err))) ||
        (cfg->logz_every && !(d->logz = open_csv(out, "diag_logz.csv", "step,mean,max\n", err))) ||
        (cfg->skip_every &&
         !(d->skip = open_csv(out, "diag_skip.csv", "step,block,loss,delta\n", err)))) {
        mt_diag_close(d);
        return err ? err->status : MT_EIO;
    }
    if (fwd) st = forward_rows(d, tr, tr->step, cfg->update_steps > 0, cfg->resid_every > 0, err);
    if (st == MT_OK) st = probe_rows_due(d, tr, tr->step, false, err);
    if (st == MT_OK) st = mt_diag_attn_open(d, tr, err);
    if (st != MT_OK) mt_diag_close(d);
    return st;
}

mt_status mt_diag_open(mt_diag *d, const mt_diag_cfg *cfg, mt_trainer *tr, mt_err *err) {
    memset(d, 0, sizeof *d);
    d->cfg = *cfg;
    mt_status s = open_probes(d, cfg, tr, err);
    if (s == MT_OK) s = mt_diag_ratio_open(d, tr, err); /* any model: it reads the parameters */
    if (s == MT_OK) s = mt_diag_qk_open(d, tr, err);    /* any model with --qk-clip */
    if (s != MT_OK) mt_diag_close(d);
    return s;
}

/* The gradient rows of the weights after `step` updates; the gradients in P are clipped by
   st->grad_norm's coefficient, undone here (mt_optim_clip). */
static mt_status grad_rows(mt_diag *d, const mt_params *P, long step, double clip, double grad_norm,
                           mt_err *err) {
    double coef = clip / (grad_norm + 1e-6);
    double unscale = clip > 0 && coef < 1 ? 1 / coef : 1, rest = 0;
    memset(d->sq, 0, (4 * (size_t)d->L + 1) * sizeof *d->sq);
    for (int i = 0; i < P->n; i++) {
        if (P->p[i].frozen) continue;
        const float *g = P->grad + P->p[i].grad_offset;
        double s = 0;
        for (size_t j = 0; j < P->p[i].n; j++) s += (double)g[j] * g[j];
        if (d->group[i] >= 0) d->sq[d->group[i]] += s;
        else rest += s;
    }
    int bad = 0;
    for (int l = 0; l < d->L; l++) {
        const double *q = d->sq + 4 * l;
        bad |= fprintf(d->grad, "%ld,%d,%.9g,%.9g,%.9g,%.9g,%.9g\n", step, l, sqrt(q[0]) * unscale,
                       sqrt(q[1]) * unscale, sqrt(q[2]) * unscale, sqrt(q[3]) * unscale,
                       sqrt(q[0] + q[1] + q[2] + q[3]) * unscale) < 0;
    }
    bad |= fprintf(d->grad, "%ld,-1,,,,,%.9g\n", step, sqrt(rest) * unscale) < 0 || fflush(d->grad);
    return bad ? mt_errorf(err, MT_EIO, "cannot write diag_grad.csv: %s", strerror(errno)) : MT_OK;
}

mt_status mt_diag_after_step(mt_diag *d, mt_trainer *tr, const mt_step_stats *st, mt_err *err) {
    long step = tr->step; /* the weights after `step` updates; the gradients of step - 1 */
    mt_status s = MT_OK;
    if (d->grad && (step - 1) % d->cfg.grad_every == 0)
        s = grad_rows(d, tr->P, step - 1, tr->opt.cfg.clip, st->grad_norm, err);
    bool update = d->update && step <= d->cfg.update_steps;
    bool resid = d->resid && step % d->cfg.resid_every == 0;
    if (s == MT_OK && (update || resid)) s = forward_rows(d, tr, step, update, resid, err);
    if (s == MT_OK) s = mt_diag_attn_rows(d, tr, step, err);
    if (s == MT_OK) s = probe_rows_due(d, tr, step, step == tr->cfg.steps, err);
    if (s == MT_OK) s = mt_diag_ratio_after_step(d, tr, err);
    if (s == MT_OK) s = mt_diag_qk_after_step(d, tr, err);
    return s;
}

void mt_diag_close(mt_diag *d) {
    if (d->grad) fclose(d->grad);
    if (d->update) fclose(d->update);
    if (d->resid) fclose(d->resid);
    mt_diag_attn_close(d);
    if (d->logz) fclose(d->logz);
    if (d->skip) fclose(d->skip);
    free(d->group);
    free(d->sq);
    free(d->resid_norm);
    free(d->f0);
    mt_diag_ratio_close(d);
    mt_diag_qk_close(d);
    memset(d, 0, sizeof *d);
}
