/* The metrics CSV: step,loss,val_loss,lr,grad_norm,ms,tok_per_s, one row per logged step. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io.h"

static const char HEADER[] = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s\n";

/* Keeps the header and the rows of path with step <= keep_until (a resumed run's past). */
static mt_status truncate_rows(const char *path, long keep_until, mt_err *err) {
    FILE *f = fopen(path, "r+b");
    if (!f)
        return errno == ENOENT ? MT_OK
                               : mt_errorf(err, MT_EIO, "%s: cannot open: %s", path, strerror(errno));
    char line[512];
    long keep = 0; /* bytes kept */
    bool header = true;
    while (fgets(line, sizeof line, f)) {
        if (!header && strtol(line, NULL, 10) > keep_until) break;
        header = false;
        keep = ftell(f);
    }
    bool ok = !ferror(f) && fflush(f) == 0 && ftruncate(fileno(f), keep) == 0;
    fclose(f);
    return ok ? MT_OK : mt_errorf(err, MT_EIO, "%s: cannot rewrite: %s", path, strerror(errno));
}

mt_status mt_metrics_open(mt_metrics *m, const char *path, long keep_until, mt_err *err) {
    return mt_metrics_open_with(m, path, keep_until, NULL, err);
}

mt_status mt_metrics_open_with(mt_metrics *m, const char *path, long keep_until,
                               const char *const *extra, mt_err *err) {
    m->f = NULL;
    m->n_extra = 0;
    char header[sizeof HEADER + 256];
    snprintf(header, sizeof header, "%.*s", (int)sizeof HEADER - 2, HEADER);
    for (; extra && extra[m->n_extra]; m->n_extra++) {
        size_t at = strlen(header);
        snprintf(header + at, sizeof header - at, ",val_%s", extra[m->n_extra]);
    }
    strcat(header, "\n");
    if (keep_until >= 0) {
        mt_status s = truncate_rows(path, keep_until, err);
        if (s != MT_OK) return s;
    }
    m->f = fopen(path, keep_until >= 0 ? "ab" : "wb");
    if (!m->f) return mt_errorf(err, MT_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (ftell(m->f) == 0 && (fputs(header, m->f) == EOF || fflush(m->f) != 0)) {
        mt_metrics_close(m);
        return mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
    }
    return MT_OK;
}

mt_status mt_metrics_write(mt_metrics *m, const mt_metrics_row *r, mt_err *err) {
    char val[32] = "";
    if (!isnan(r->val_loss)) snprintf(val, sizeof val, "%.6f", r->val_loss);
    /* flushed every row, so the file can be followed (tail -f, a plotting loop) while training */
    bool ok = fprintf(m->f, "%ld,%.6f,%s,%.6g,%.6g,%.3f,%.1f", r->step, r->loss, val, r->lr,
                      r->grad_norm, r->ms, r->tok_per_s) >= 0;
    for (int k = 0; k < m->n_extra && ok; k++)
        ok = r->extra && !isnan(r->extra[k]) ? fprintf(m->f, ",%.6f", r->extra[k]) >= 0
                                             : fputc(',', m->f) != EOF;
    if (!ok || fputc('\n', m->f) == EOF || fflush(m->f) != 0)
        return mt_errorf(err, MT_EIO, "cannot write the metrics file: %s", strerror(errno));
    return MT_OK;
}

void mt_metrics_close(mt_metrics *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}
