/* Each matrix's update-to-weight ratio (diag.h, diag_ratio.csv): ||W_s - W_{s-1}||_F /
   ||W_{s-1}||_F of the trained matrices, W_{s-1} copied after step s - 1 when step s is due.
   Memory at open: the copy of the counted matrices and the sums. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../tensor/params.h"
#include "../train/train.h"
#include "diag.h"

/* A trained matrix: its entry counts in the ratios. */
static bool counted(const mt_param *p) {
    return (p->role == MT_ROLE_MATRIX || p->role == MT_ROLE_HEAD || p->role == MT_ROLE_EMBEDDING) &&
           !p->frozen && p->ndim >= 2;
}

/* A block's matrix by its name in the block ("attn.q_proj", "ffn.fc1": after "blocks.<j>.",
   less ".weight"). */
static void column_name(const char *name, char out[96]) {
    const char *b = strstr(name, "blocks.");
    int n = 0;
    if (b) sscanf(b, "blocks.%*d.%n", &n);
    const char *rel = b && n ? b + n : name;
    size_t k = strlen(rel);
    if (k > 7 && strcmp(rel + k - 7, ".weight") == 0) k -= 7;
    snprintf(out, 96, "%.*s", (int)k, rel);
}

/* r->col of each entry: its column among the blocks' matrices (the union of their names in
   first-seen order), -1 when not counted, -2 when counted outside the blocks; the CSV header
   "step,layer,<names>,total". */
static mt_status ratio_columns(mt_diag_ratio *r, const mt_params *P, char **header, mt_err *err) {
    char(*names)[96] = malloc((size_t)P->n * sizeof *names);
    size_t len = 32 + (size_t)P->n * 97;
    *header = malloc(len);
    if (!names || !*header) {
        free(names);
        return mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    }
    int n = 0, at = snprintf(*header, len, "step,layer");
    for (int i = 0; i < P->n; i++) {
        r->col[i] = !counted(&P->p[i]) ? -1 : r->block[i] < 0 ? -2 : n;
        if (r->col[i] != n) continue;
        column_name(P->p[i].name, names[n]);
        for (int c = 0; c < n; c++)
            if (strcmp(names[c], names[n]) == 0) r->col[i] = c;
        if (r->col[i] == n) at += snprintf(*header + at, len - at, ",%s", names[n++]);
    }
    snprintf(*header + at, len - at, ",total\n");
    r->n_cols = n;
    free(names);
    return MT_OK;
}

/* W_step of the counted entries into r->prev. */
static void snapshot(mt_diag_ratio *r, const mt_params *P, long step) {
#pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < P->n; i++)
        if (r->col[i] != -1)
            memcpy(r->prev + r->off[i], P->data + P->p[i].offset, P->p[i].n * sizeof(float));
    r->step = step;
}

mt_status mt_diag_ratio_open(mt_diag *d, mt_trainer *tr, mt_err *err) {
    mt_diag_ratio *r = &d->ratio;
    if (d->cfg.ratio_every < 0)
        return mt_errorf(err, MT_EINVAL, "--diag-update-ratio-every %d: expected 0 (off) or more",
                         d->cfg.ratio_every);
    if (!d->cfg.ratio_every) return MT_OK;
    if (mt_dist_size() > 1)
        return mt_errorf(err, MT_EINVAL,
                         "--diag-update-ratio-every runs in one process, not under mpirun");
    const mt_params *P = tr->P;
    size_t floats = 0, n = (size_t)P->n;
    r->off = malloc(n * sizeof *r->off);
    for (int i = 0; r->off && i < P->n; i++)
        r->off[i] = floats, floats += counted(&P->p[i]) ? P->p[i].n : 0;
    r->block = malloc(n * sizeof *r->block);
    r->col = malloc(n * sizeof *r->col);
    r->pair = malloc(2 * n * sizeof *r->pair);
    r->prev = malloc((floats ? floats : 1) * sizeof *r->prev);
    int *group = malloc(n * sizeof *group);
    char *header = NULL;
    mt_status s = MT_OK;
    if (!r->off || !r->block || !r->col || !r->pair || !r->prev || !group)
        s = mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    if (s == MT_OK) {
        r->L = mt_diag_param_groups(P, group, r->block);
        s = ratio_columns(r, P, &header, err);
    }
    free(group);
    size_t sums = 2 * ((size_t)r->L + 1) * ((size_t)r->n_cols + 1);
    if (s == MT_OK && !(r->sq = malloc(sums * sizeof *r->sq)))
        s = mt_errorf(err, MT_ENOMEM, "out of memory for the diagnostics");
    char path[1100];
    snprintf(path, sizeof path, "%s/diag_ratio.csv", tr->cfg.out);
    if (s == MT_OK) s = mt_file_open("the diagnostics file", path, "wb", &r->f, err);
    if (s == MT_OK && fputs(header, r->f) == EOF)
        s = mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
    free(header);
    r->step = -1;
    if (s == MT_OK && (tr->step + 1) % d->cfg.ratio_every == 0) snapshot(r, P, tr->step);
    return s; /* on an error mt_diag_close frees what was allocated */
}

/* The rows of step: per block each column's ratio and the total; row -1 the matrices outside. */
static mt_status ratio_rows(mt_diag_ratio *r, const mt_params *P, long step, mt_err *err) {
#pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < P->n; i++) {
        if (r->col[i] == -1) continue;
        const float *w = P->data + P->p[i].offset, *w0 = r->prev + r->off[i];
        double du = 0, ww = 0;
        for (size_t j = 0; j < P->p[i].n; j++) {
            double e = (double)w[j] - w0[j];
            du += e * e, ww += (double)w0[j] * w0[j];
        }
        r->pair[2 * i] = du, r->pair[2 * i + 1] = ww;
    }
    int C = r->n_cols + 1; /* the columns and the total */
    memset(r->sq, 0, 2 * ((size_t)r->L + 1) * (size_t)C * sizeof *r->sq);
    for (int i = 0; i < P->n; i++) {
        if (r->col[i] == -1) continue;
        int row = r->block[i] < 0 ? r->L : r->block[i]; /* the outside last */
        double *cell = r->sq + 2 * (size_t)row * C, *pair = r->pair + 2 * i;
        if (r->col[i] >= 0) cell[2 * r->col[i]] += pair[0], cell[2 * r->col[i] + 1] += pair[1];
        cell[2 * r->n_cols] += pair[0], cell[2 * r->n_cols + 1] += pair[1];
    }
    bool bad = false;
    for (int row = 0; row <= r->L; row++) {
        const double *cell = r->sq + 2 * (size_t)row * C;
        bad |= fprintf(r->f, "%ld,%d", step, row == r->L ? -1 : row) < 0;
        for (int c = 0; c < C; c++)
            bad |= (cell[2 * c + 1] > 0
                        ? fprintf(r->f, ",%.6g", sqrt(cell[2 * c] / cell[2 * c + 1]))
                        : fprintf(r->f, ",")) < 0;
        bad |= fputc('\n', r->f) == EOF;
    }
    bad |= fflush(r->f) != 0;
    return bad ? mt_errorf(err, MT_EIO, "cannot write diag_ratio.csv: %s", strerror(errno)) : MT_OK;
}

mt_status mt_diag_ratio_after_step(mt_diag *d, mt_trainer *tr, mt_err *err) {
    mt_diag_ratio *r = &d->ratio;
    long step = tr->step, every = d->cfg.ratio_every;
    mt_status s = MT_OK;
    if (!r->f) return MT_OK;
    if (step % every == 0 && r->step == step - 1) s = ratio_rows(r, tr->P, step, err);
    if ((step + 1) % every == 0) snapshot(r, tr->P, step);
    return s;
}

void mt_diag_ratio_close(mt_diag *d) {
    mt_diag_ratio *r = &d->ratio;
    if (r->f) fclose(r->f);
    free(r->off);
    free(r->block);
    free(r->col);
    free(r->pair);
    free(r->sq);
    free(r->prev);
    *r = (mt_diag_ratio){0};
}
