/* The diagnostics of an instrumented forward (diag.h): diag_attn.csv's largest attention logit
   (mt_ctx.attn_max), diag_sink.csv's sink rate and entropy of the attention weights
   (mt_ctx.attn_sink), diag_act.csv's max |x| and kurtosis of the residual stream entering
   each block (mt_ctx.act) and diag_hc.csv's gains of the hyper-connections' residual mixing
   (mt_ctx.hc_coefs, mt_hc_gains): one forward of the diagnostics' fixed batch, in eval mode on
   the step arena, with the due ones' fields set. L blocks, X of them with a cross-attention. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../models/model.h"
#include "../models/stack.h"
#include "../nn/nn.h"
#include "../tensor/base.h"
#include "../tensor/tensor.h"
#include "../train/train.h"
#include "diag.h"

static const struct {
    const char *flag, *name, *header;
    size_t every; /* its mt_diag_cfg field */
} HOOK[MT_DIAG_HOOKS] = {
    [MT_DIAG_ATTN] = {"--diag-attn-every", "diag_attn.csv", "step,layer,self,cross\n",
                      offsetof(mt_diag_cfg, attn_every)},
    [MT_DIAG_SINK] = {"--diag-sink-every", "diag_sink.csv", "step,layer,sink_rate,entropy\n",
                      offsetof(mt_diag_cfg, sink_every)},
    [MT_DIAG_ACT] = {"--diag-act-every", "diag_act.csv", "step,layer,max_abs,kurtosis\n",
                     offsetof(mt_diag_cfg, act_every)},
    [MT_DIAG_HC] = {"--diag-hc-every", "diag_hc.csv",
                    "step,layer,attn_gain,attn_grad_gain,ffn_gain,ffn_grad_gain,composite_gain,"
                    "composite_grad_gain\n",
                    offsetof(mt_diag_cfg, hc_every)},
};

static int every(const mt_diag *d, int k) {
    return *(const int *)((const char *)&d->cfg + HOOK[k].every);
}

static FILE **file(mt_diag *d, int k) { return &d->hook[k]; }

static bool any_on(const mt_diag *d) {
    for (int k = 0; k < MT_DIAG_HOOKS; k++)
        if (every(d, k)) return true;
    return false;
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
    if (k == MT_DIAG_HC && mt_config_stack(tr->model->cfg)->residual != MT_RESIDUAL_HC)
        return mt_errorf(err, MT_EINVAL,
                         "%s measures hyper-connections' residual mixing: it needs --residual hc "
                         "or mhc",
                         HOOK[k].flag);
    return MT_OK;
}

static void close_hooks(mt_diag *d) {
    for (int k = 0; k < MT_DIAG_HOOKS; k++)
        if (*file(d, k)) fclose(*file(d, k)), *file(d, k) = NULL;
    free(d->attn_max), free(d->attn_sink), free(d->act_stats), free(d->hc_coefs), free(d->hc_gains);
    d->attn_max = NULL, d->attn_sink = NULL, d->act_stats = NULL;
    d->hc_coefs = NULL, d->hc_gains = NULL;
}

/* Opens the CSVs of the hooks that are on and writes their rows of the current step; on an error
   nothing stays open. */
mt_status mt_diag_attn_open(mt_diag *d, mt_trainer *tr, mt_err *err) {
    mt_status st = MT_OK;
    for (int k = 0; k < MT_DIAG_HOOKS && st == MT_OK; k++) st = check(d, tr, k, err);
    if (st != MT_OK || !any_on(d)) return st;
    size_t L = (size_t)mt_config_stack(tr->model->cfg)->n_layer;
    d->attn_max = malloc(2 * L * sizeof *d->attn_max);   /* a self- and a cross-attention */
    d->attn_sink = malloc(4 * L * sizeof *d->attn_sink); /* the same, two values each */
    d->act_stats = malloc(2 * L * sizeof *d->act_stats);
    bool hc = every(d, MT_DIAG_HC) > 0;
    if (hc) d->hc_coefs = malloc(2 * L * sizeof *d->hc_coefs); /* two sublayers a block */
    if (hc) d->hc_gains = malloc(8 * L * sizeof *d->hc_gains); /* mt_hc_gains' (2 L, 4) */
    if (!d->attn_max || !d->attn_sink || !d->act_stats || (hc && (!d->hc_coefs || !d->hc_gains)))
        st = mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    for (int k = 0; k < MT_DIAG_HOOKS && st == MT_OK; k++) {
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
    if (k == MT_DIAG_ATTN && !cross) return fprintf(f, "%ld,%d,%.9g,\n", step, l, d->attn_max[i]);
    if (k == MT_DIAG_ATTN)
        return fprintf(f, "%ld,%d,%.9g,%.9g\n", step, l, d->attn_max[i], d->attn_max[i + 1]);
    if (k == MT_DIAG_HC) { /* block l's sublayers 2 l, 2 l + 1; the composite from its input */
        const double *g = d->hc_gains + 8 * l;
        return fprintf(f, "%ld,%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", step, l, g[0], g[1], g[4], g[5],
                       g[2], g[3]);
    }
    const double *v = k == MT_DIAG_SINK ? d->attn_sink + 2 * i : d->act_stats + 2 * l;
    return fprintf(f, "%ld,%d,%.9g,%.9g\n", step, l, v[0], v[1]);
}

/* The probes of the due hooks set on c (NULL: off), their counts from 0. */
static void set_probes(mt_diag *d, mt_ctx *c, const bool *due) {
    c->attn_max = due[MT_DIAG_ATTN] ? d->attn_max : NULL, c->attn_calls = 0;
    c->attn_sink = due[MT_DIAG_SINK] ? d->attn_sink : NULL, c->attn_sink_calls = 0;
    c->act = due[MT_DIAG_ACT] ? d->act_stats : NULL, c->act_calls = 0;
    c->hc_coefs = due[MT_DIAG_HC] ? d->hc_coefs : NULL, c->hc_calls = 0;
}

mt_status mt_diag_attn_rows(mt_diag *d, mt_trainer *tr, long step, mt_err *err) {
    bool due[MT_DIAG_HOOKS], none = true;
    for (int k = 0; k < MT_DIAG_HOOKS; k++)
        none &= !(due[k] = *file(d, k) && step % every(d, k) == 0);
    if (none) return MT_OK;
    const mt_stack_config *s = mt_config_stack(tr->model->cfg);
    int L = s->n_layer;
    int B = d->cfg.batch > 0 ? d->cfg.batch : tr->cfg.batch < 4 ? tr->cfg.batch : 4;
    mt_ctx *c = &tr->ctx;
    mt_ctx_reset(c);
    c->training = false;
    c->grad_enabled = false;
    set_probes(d, c, due);
    mt_batch b = tr->task->type->probe_rows(c, tr->task, tr->cfg.seed ^ MT_DIAG_SEED, B);
    tr->model->type->probes->hidden(c, tr->model, &b, NULL);
    int calls = due[MT_DIAG_ATTN] ? c->attn_calls : c->attn_sink_calls, X = calls - L;
    MT_ASSERT(!due[MT_DIAG_ACT] || c->act_calls == L, "diag: %d block inputs in %d blocks",
              c->act_calls, L);
    MT_ASSERT(!due[MT_DIAG_HC] || c->hc_calls == 2 * L, "diag: %d hyper-connections in %d blocks",
              c->hc_calls, L);
    if (due[MT_DIAG_HC]) mt_hc_gains(d->hc_coefs, 2 * L, s->hc.streams, d->hc_gains);
    set_probes(d, c, (bool[MT_DIAG_HOOKS]){false});
    c->training = true;
    c->grad_enabled = true;
    MT_ASSERT(!(due[MT_DIAG_ATTN] || due[MT_DIAG_SINK]) || (X >= 0 && X <= L),
              "diag: %d attentions in %d blocks", calls, L);
    int bad = 0;
    for (int k = 0; k < MT_DIAG_HOOKS; k++) {
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
