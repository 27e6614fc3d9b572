/* The largest attention logit per layer (diag.h, diag_attn.csv): a forward of the diagnostics'
   fixed batch with the attention ops reporting their largest q.k / sqrt(HS) (mt_ctx.attn_max),
   in eval mode on the step arena. L blocks, X of them with a cross-attention. */
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

#define SEED_DIAG 0x4449414742415443ULL /* the fixed batch's windows: diag.c's */

/* Opens diag_attn.csv and writes its rows of the current step; on an error nothing stays open. */
mt_status mt_diag_attn_open(mt_diag *d, mt_trainer *tr, mt_err *err) {
    if (d->cfg.attn_every < 0)
        return mt_errorf(err, MT_EINVAL, "--diag-attn-every %d: expected 0 (off) or more",
                         d->cfg.attn_every);
    if (!d->cfg.attn_every) return MT_OK;
    if (!mt_diag_probes_hidden(tr))
        return mt_errorf(err, MT_EINVAL,
                         "--diag-attn-every needs a model with a probe of its hidden state; "
                         "--model %s has none",
                         tr->model->type->name);
    if (mt_dist_size() > 1)
        return mt_errorf(err, MT_EINVAL, "--diag-attn-every runs in one process, not under mpirun");
    if (d->cfg.batch > tr->cfg.batch) /* the step arena holds a batch */
        return mt_errorf(err, MT_EINVAL, "--diag-batch %d: at most --batch (%d)", d->cfg.batch,
                         tr->cfg.batch);
    int L = mt_config_stack(tr->model->cfg)->n_layer;
    char path[1100];
    snprintf(path, sizeof path, "%s/diag_attn.csv", tr->cfg.out);
    d->attn_max = malloc(2 * (size_t)L * sizeof *d->attn_max); /* a self- and a cross-attention */
    if (!d->attn_max) return mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    mt_status st = MT_OK;
    st = mt_file_open("the diagnostics file", path, "wb", &d->attn, err);
    if (st == MT_OK && fputs("step,layer,self,cross\n", d->attn) == EOF)
        st = mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
    if (st == MT_OK) st = mt_diag_attn_rows(d, tr, tr->step, err);
    if (st != MT_OK) {
        if (d->attn) fclose(d->attn);
        free(d->attn_max);
        d->attn = NULL, d->attn_max = NULL;
    }
    return st;
}

mt_status mt_diag_attn_rows(mt_diag *d, mt_trainer *tr, long step, mt_err *err) {
    int L = mt_config_stack(tr->model->cfg)->n_layer;
    int B = d->cfg.batch > 0 ? d->cfg.batch : tr->cfg.batch < 4 ? tr->cfg.batch : 4;
    mt_ctx *c = &tr->ctx;
    mt_ctx_reset(c);
    c->training = false;
    c->grad_enabled = false;
    c->attn_max = d->attn_max, c->attn_calls = 0;
    mt_batch b = tr->task->type->probe_rows(c, tr->task, tr->cfg.seed ^ SEED_DIAG, B);
    tr->model->type->probes->hidden(c, tr->model, &b, NULL);
    int calls = c->attn_calls, X = calls - L; /* the last X blocks: self, then cross */
    c->attn_max = NULL;
    c->training = true;
    c->grad_enabled = true;
    MT_ASSERT(X >= 0 && X <= L, "diag: %d attentions in %d blocks", calls, L);
    int bad = 0;
    for (int l = 0, i = 0; l < L; l++) {
        float self = d->attn_max[i++];
        if (l < L - X) bad |= fprintf(d->attn, "%ld,%d,%.9g,\n", step, l, self) < 0;
        else bad |= fprintf(d->attn, "%ld,%d,%.9g,%.9g\n", step, l, self, d->attn_max[i++]) < 0;
    }
    bad |= fflush(d->attn);
    return bad ? mt_errorf(err, MT_EIO, "cannot write diag_attn.csv: %s", strerror(errno)) : MT_OK;
}
