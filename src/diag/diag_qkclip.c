/* QK-Clip's interventions by layer (diag.h, diag_qkclip.csv): the heads each attention clipped
   and its largest logit before clipping (mt_trainer.qk_attn_clipped, qk_max), summed and
   max-accumulated over the updates since the last row, a row per block every qk_every steps. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../nn/nn.h"
#include "../tensor/params.h"
#include "../train/train.h"
#include "diag.h"

mt_status mt_diag_qk_open(mt_diag *d, mt_trainer *tr, mt_err *err) {
    mt_diag_qk *q = &d->qk;
    int every = d->cfg.qk_every;
    if (every < 0)
        return mt_errorf(err, MT_EINVAL, "--diag-qkclip-every %d: expected 0 (off) or more", every);
    if (!every) return MT_OK;
    if (!tr->qk.n)
        return mt_errorf(err, MT_EINVAL,
                         "--diag-qkclip-every counts QK-Clip's interventions: it needs --qk-clip "
                         "TAU > 0");
    const mt_params *P = tr->P;
    int n = tr->qk.n, *block = malloc((size_t)P->n * sizeof *block),
        *group = malloc((size_t)P->n * sizeof *group);
    q->slot = malloc((size_t)n * sizeof *q->slot);
    q->cross = calloc((size_t)n, 1);
    mt_status s = MT_OK;
    if (!block || !group || !q->slot || !q->cross)
        s = mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    if (s == MT_OK) q->L = mt_diag_param_groups(P, group, block);
    size_t cells = 2 * (size_t)(q->L > 0 ? q->L : 1);
    if (s == MT_OK && (!(q->clipped = calloc(cells, sizeof *q->clipped)) ||
                       !(q->logit = malloc(cells * sizeof *q->logit))))
        s = mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    for (int i = 0; s == MT_OK && i < n; i++) { /* attention i: its block's self or cross cell */
        int w = tr->qk.attn[i].q_w;
        q->cross[i] = strstr(P->p[w].name, "cross_attn.") != NULL;
        q->slot[i] = 2 * block[w] + q->cross[i];
        MT_ASSERT(block[w] >= 0, "diag: %s outside the blocks", P->p[w].name);
    }
    free(block), free(group);
    for (size_t c = 0; s == MT_OK && c < cells; c++) q->logit[c] = -INFINITY;
    char path[1100];
    snprintf(path, sizeof path, "%s/diag_qkclip.csv", tr->cfg.out);
    if (s == MT_OK) s = mt_file_open("the diagnostics file", path, "wb", &q->f, err);
    if (s == MT_OK &&
        fputs("step,layer,self_clipped,self_logit,cross_clipped,cross_logit\n", q->f) == EOF)
        s = mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
    return s; /* on an error mt_diag_close frees what was allocated */
}

/* The step's counts and maxima into the cells; the rows when tr->step is due. */
mt_status mt_diag_qk_after_step(mt_diag *d, mt_trainer *tr, mt_err *err) {
    mt_diag_qk *q = &d->qk;
    if (!q->f) return MT_OK;
    bool any_cross = false;
    for (int i = 0; i < tr->qk.n; i++) {
        const mt_qk_attn *a = &tr->qk.attn[i];
        float top = q->logit[q->slot[i]];
        for (int h = 0; h < a->NH; h++) top = fmaxf(top, tr->qk_max[a->at + h]);
        q->logit[q->slot[i]] = top;
        q->clipped[q->slot[i]] += tr->qk_attn_clipped[i];
        any_cross |= q->cross[i];
    }
    if (tr->step % d->cfg.qk_every) return MT_OK;
    bool bad = false;
    for (int l = 0; l < q->L; l++) {
        long *n = q->clipped + 2 * l;
        float *top = q->logit + 2 * l;
        bad |= fprintf(q->f, "%ld,%d,%ld,%.6g,", tr->step, l, n[0], top[0]) < 0;
        bad |= (any_cross && isfinite(top[1]) ? fprintf(q->f, "%ld,%.6g\n", n[1], top[1])
                                              : fprintf(q->f, ",\n")) < 0;
        n[0] = n[1] = 0, top[0] = top[1] = -INFINITY;
    }
    return bad || fflush(q->f) ? mt_errorf(err, MT_EIO, "cannot write diag_qkclip.csv in %s: %s",
                                           tr->cfg.out, strerror(errno))
                               : MT_OK;
}

void mt_diag_qk_close(mt_diag *d) {
    mt_diag_qk *q = &d->qk;
    if (q->f) fclose(q->f);
    free(q->slot), free(q->cross), free(q->clipped), free(q->logit);
    memset(q, 0, sizeof *q);
}
