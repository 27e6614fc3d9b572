/* The diagnostics of an instrumented forward (diag.h): diag_attn.csv's largest attention logit
   (mt_ctx.attn_max), diag_sink.csv's sink rate and entropy of the attention weights
   (mt_ctx.attn_sink) and diag_act.csv's max |x| and kurtosis of the residual stream entering
   each block (mt_ctx.act): one forward of the diagnostics' fixed batch, in eval mode on the step
   arena, with the due ones' fields set. L blocks, X of them with a cross-attention. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../models/model.h"
#include "../tensor/base.h"
#include "../tensor/tensor.h"
#include "../train/train.h"
#include "diag.h"

enum { ATTN, SINK, ACT, HOOKS };

static const struct {
    const char *flag, *name, *header;
} HOOK[HOOKS] = {
    {"--diag-attn-every", "diag_attn.csv", "step,layer,self,cross\n"},
    {"--diag-sink-every", "diag_sink.csv", "step,layer,sink_rate,entropy\n"},
    {"--diag-act-every", "diag_act.csv", "step,layer,max_abs,kurtosis\n"},
};

static int every(const mt_diag *d, int k) {
    return k == ATTN ? d->cfg.attn_every : k == SINK ? d->cfg.sink_every : d->cfg.act_every;
}

static FILE **file(mt_diag *d, int k) {
    return k == ATTN ? &d->attn : k == SINK ? &d->sink : &d->act;
}

/* Hook k's setting: 0, or > 0 with a model that has a probe, in one process. */
static mt_status check(const mt_diag *d, const mt_trainer *tr, int k, mt_err *err) {
    int n = every(d, k);
    if (n < 0) return mt_errorf(err, MT_EINVAL, "%s %d: expected 0 (off) or more", HOOK[k].flag, n);
    if (!n) return MT_OK;
    if (!mt_diag_probes_hidden(tr))
        return mt_errorf(err, MT_EINVAL,
                         "%s needs a model with a probe of its hidden state; --model %s has none",
                         HOOK[k].flag, tr->model->type->name);
    if (mt_dist_size() > 1)
        return mt_errorf(err, MT_EINVAL, "%s runs in one process, not under mpirun", HOOK[k].flag);
    if (d->cfg.batch > tr->cfg.batch) /* the step arena holds a batch */
        return mt_errorf(err, MT_EINVAL, "--diag-batch %d: at most --batch (%d)", d->cfg.batch,
                         tr->cfg.batch);
    return MT_OK;
}

static void close_hooks(mt_diag *d) {
    for (int k = 0; k < HOOKS; k++)
        if (*file(d, k)) fclose(*file(d, k)), *file(d, k) = NULL;
    free(d->attn_max), free(d->attn_sink), free(d->act_stats);
    d->attn_max = NULL, d->attn_sink = NULL, d->act_stats = NULL;
}

/* Opens the CSVs of the hooks that are on and writes their rows of the current step; on an error
   nothing stays open. */
mt_status mt_diag_attn_open(mt_diag *d, mt_trainer *tr, mt_err *err) {
    mt_status st = MT_OK;
    for (int k = 0; k < HOOKS && st == MT_OK; k++) st = check(d, tr, k, err);
    if (st != MT_OK || (!every(d, ATTN) && !every(d, SINK) && !every(d, ACT))) return st;
    size_t L = (size_t)mt_config_stack(tr->model->cfg)->n_layer;
    d->attn_max = malloc(2 * L * sizeof *d->attn_max);   /* a self- and a cross-attention */
    d->attn_sink = malloc(4 * L * sizeof *d->attn_sink); /* the same, two values each */
    d->act_stats = malloc(2 * L * sizeof *d->act_stats);
    if (!d->attn_max || !d->attn_sink || !d->act_stats)
        st = mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    for (int k = 0; k < HOOKS && st == MT_OK; k++) {
        char path[1100];
        snprintf(path, sizeof path, "%s/%s", tr->cfg.out, HOOK[k].name);
        if (!every(d, k)) continue;
        st = mt_file_open("the diagnostics file", path, "wb", file(d, k), err);
        if (st == MT_OK && fputs(HOOK[k].header, *file(d, k)) == EOF)
            st = mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
    }
    if (st == MT_OK) st = mt_diag_attn_rows(d, tr, tr->step, err);
    if (st != MT_OK) close_hooks(d);
    return st;
}

/* Block l's row of hook k from the forward's values (i: its self-attention's index in forward
   order, the cross-attention's after it); < 0 on a write error. */
static int row(const mt_diag *d, int k, FILE *f, long step, int l, int i, bool cross) {
    if (k == ATTN && !cross) return fprintf(f, "%ld,%d,%.9g,\n", step, l, d->attn_max[i]);
    if (k == ATTN)
        return fprintf(f, "%ld,%d,%.9g,%.9g\n", step, l, d->attn_max[i], d->attn_max[i + 1]);
    const double *v = k == SINK ? d->attn_sink + 2 * i : d->act_stats + 2 * l;
    return fprintf(f, "%ld,%d,%.9g,%.9g\n", step, l, v[0], v[1]);
}

mt_status mt_diag_attn_rows(mt_diag *d, mt_trainer *tr, long step, mt_err *err) {
    bool due[HOOKS];
    for (int k = 0; k < HOOKS; k++) due[k] = *file(d, k) && step % every(d, k) == 0;
    if (!due[ATTN] && !due[SINK] && !due[ACT]) return MT_OK;
    int L = mt_config_stack(tr->model->cfg)->n_layer;
    int B = d->cfg.batch > 0 ? d->cfg.batch : tr->cfg.batch < 4 ? tr->cfg.batch : 4;
    mt_ctx *c = &tr->ctx;
    mt_ctx_reset(c);
    c->training = false;
    c->grad_enabled = false;
    c->attn_max = due[ATTN] ? d->attn_max : NULL, c->attn_calls = 0;
    c->attn_sink = due[SINK] ? d->attn_sink : NULL, c->attn_sink_calls = 0;
    c->act = due[ACT] ? d->act_stats : NULL, c->act_calls = 0;
    mt_batch b = tr->task->type->probe_rows(c, tr->task, tr->cfg.seed ^ MT_DIAG_SEED, B);
    tr->model->type->probes->hidden(c, tr->model, &b, NULL);
    int calls = due[ATTN] ? c->attn_calls : c->attn_sink_calls, X = calls - L;
    MT_ASSERT(!due[ACT] || c->act_calls == L, "diag: %d block inputs in %d blocks", c->act_calls,
              L);
    c->attn_max = NULL, c->attn_sink = NULL, c->act = NULL;
    c->training = true;
    c->grad_enabled = true;
    MT_ASSERT(!(due[ATTN] || due[SINK]) || (X >= 0 && X <= L), "diag: %d attentions in %d blocks",
              calls, L);
    int bad = 0;
    for (int k = 0; k < HOOKS; k++) {
        if (!due[k]) continue;
        for (int l = 0, i = 0; l < L; l++) { /* the last X blocks: self, then cross */
            bool cross = l >= L - X;
            bad |= row(d, k, *file(d, k), step, l, i, cross) < 0;
            i += cross ? 2 : 1;
        }
        bad |= fflush(*file(d, k));
    }
    return bad ? mt_errorf(err, MT_EIO, "cannot write a diagnostics file in %s: %s", tr->cfg.out,
                           strerror(errno))
               : MT_OK;
}

void mt_diag_attn_close(mt_diag *d) { close_hooks(d); }
