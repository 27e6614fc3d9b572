/* The metrics CSV: step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s, one row per logged
   step. Files of the older format (no elapsed_s) stay readable; a run resumed on one rewrites it
   in this format. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"

static const char HEADER[] = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s\n";
static const char OLD_HEADER[] = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s\n";

/* The 8th field of a row (elapsed_s), 0 when it is missing or empty. */
static double row_elapsed(const char *line) {
    for (int commas = 0; *line && commas < 7; line++) commas += *line == ',';
    return *line && *line != '\n' ? strtod(line, NULL) : 0;
}

/* Keeps the header and the rows of path with step <= keep_until (a resumed run's past); *elapsed
   gets the last kept row's elapsed_s. A file with the older header is rewritten with the current
   one, its kept rows given an empty elapsed_s. */
static mt_status truncate_rows(const char *path, long keep_until, double *elapsed, mt_err *err) {
    *elapsed = 0;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return MT_OK;
    FILE *f;
    mt_status s = mt_file_open("the metrics file", path, "r+b", &f, err);
    if (s != MT_OK) return s;
    char line[512];
    off_t keep = 0; /* bytes kept */
    bool header = true, old = false;
    char *rows = NULL; /* an old file's kept rows, each with ",\n" for its newline */
    size_t len = 0;
    while (fgets(line, sizeof line, f)) {
        if (header) {
            old = strcmp(line, OLD_HEADER) == 0;
            header = false;
            keep = ftello(f);
            continue;
        }
        if (strtol(line, NULL, 10) > keep_until) break;
        keep = ftello(f);
        *elapsed = row_elapsed(line);
        if (!old) continue;
        size_t n = strcspn(line, "\n");
        char *grown = realloc(rows, len + n + 3);
        if (!grown) {
            free(rows);
            fclose(f);
            return mt_errorf(err, MT_ENOMEM, "%s: out of memory to rewrite it", path);
        }
        rows = grown;
        memcpy(rows + len, line, n);
        memcpy(rows + len + n, ",\n", 3);
        len += n + 2;
    }
    bool ok = !ferror(f);
    if (ok && old) /* the current header, then the rows with an empty elapsed_s */
        ok = fseeko(f, 0, SEEK_SET) == 0 && fputs(HEADER, f) != EOF &&
             (len == 0 || fwrite(rows, 1, len, f) == len) && (keep = ftello(f)) >= 0;
    ok = ok && fflush(f) == 0 && ftruncate(fileno(f), keep) == 0;
    free(rows);
    fclose(f);
    return ok ? MT_OK : mt_errorf(err, MT_EIO, "%s: cannot rewrite: %s", path, strerror(errno));
}

mt_status mt_metrics_open(mt_metrics *m, const char *path, long keep_until, mt_err *err) {
    return mt_metrics_open_with(m, path, keep_until, NULL, err);
}

mt_status mt_metrics_open_with(mt_metrics *m, const char *path, long keep_until,
                               const char *const *extra, mt_err *err) {
    m->f = NULL;
    m->elapsed0 = 0;
    m->n_extra = 0;
    char header[sizeof HEADER + 256];
    snprintf(header, sizeof header, "%.*s", (int)sizeof HEADER - 2, HEADER);
    for (; extra && extra[m->n_extra]; m->n_extra++) {
        size_t at = strlen(header);
        snprintf(header + at, sizeof header - at, ",%s", extra[m->n_extra]);
    }
    strcat(header, "\n");
    if (keep_until >= 0) {
        mt_status s = truncate_rows(path, keep_until, &m->elapsed0, err);
        if (s != MT_OK) return s;
    }
    mt_status s = mt_file_open("the metrics file", path, keep_until >= 0 ? "ab" : "wb", &m->f, err);
    if (s != MT_OK) return s;
    setvbuf(m->f, NULL, _IONBF, 0); /* a row is one write (mt_metrics_write) */
    if (lseek(fileno(m->f), 0, SEEK_END) == 0 && fputs(header, m->f) == EOF) {
        mt_metrics_close(m);
        return mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
    }
    return MT_OK;
}

mt_status mt_metrics_write(mt_metrics *m, const mt_metrics_row *r, mt_err *err) {
    char row[4096], val[32] = "";
    if (!isnan(r->val_loss)) snprintf(val, sizeof val, "%.6f", r->val_loss);
    int len = snprintf(row, sizeof row, "%ld,%.6f,%s,%.6g,%.6g,%.3f,%.1f,%.3f", r->step, r->loss,
                       val, r->lr, r->grad_norm, r->ms, r->tok_per_s, r->elapsed_s);
    for (int k = 0; k < m->n_extra && len < (int)sizeof row; k++)
        len += r->extra && !isnan(r->extra[k])
                   ? snprintf(row + len, sizeof row - (size_t)len, ",%.6f", r->extra[k])
                   : snprintf(row + len, sizeof row - (size_t)len, ",");
    if (len + 1 >= (int)sizeof row)
        return mt_errorf(err, MT_EIO, "the metrics file: a row of over %zu bytes", sizeof row);
    row[len++] = '\n';
    /* one unbuffered write a row, so the file can be followed (tail -f, a plotting loop) while
       training; a short write (a full disk) is cut back off: the file ends with a whole row */
    off_t end = lseek(fileno(m->f), 0, SEEK_END);
    if (fwrite(row, 1, (size_t)len, m->f) == (size_t)len) return MT_OK;
    mt_status s = mt_errorf(err, MT_EIO, "cannot write the metrics file: %s", strerror(errno));
    if (end >= 0 && ftruncate(fileno(m->f), end) == 0) clearerr(m->f);
    return s;
}

void mt_metrics_close(mt_metrics *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}
