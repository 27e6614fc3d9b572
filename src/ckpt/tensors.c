/* A parameter table to and from safetensors, by the names and shapes of its entries: saving
   every entry, and loading them by name (a name map, skip globs, a report). */
#include <fnmatch.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

mt_status mt_ckpt_save_params(const char *path, const mt_params *P, int n_meta,
                              const char *const *meta_keys, const char *const *meta_vals,
                              mt_err *err) {
    mt_st_item *items = malloc((size_t)(P->n ? P->n : 1) * sizeof *items);
    if (!items) return mt_errorf(err, MT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < P->n; i++)
        items[i] = (mt_st_item){.name = P->p[i].name,
                                .ndim = P->p[i].ndim,
                                .shape = P->p[i].shape,
                                .data = P->data + P->p[i].offset};
    mt_status s = mt_st_save(path, P->n, items, n_meta, meta_keys, meta_vals, err);
    free(items);
    return s;
}

static const char *shape_str(int ndim, const int *shape, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < ndim && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, d ? ", %d" : "%d", shape[d]);
    if (k < len) snprintf(buf + k, len - k, ")");
    return buf;
}

/* The index of the first NaN or infinity of x[0, n) (exponent bits all ones), n when all are
   finite: an integer test per block of 1024 that GCC vectorises, then the block's element. */
static size_t first_non_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 1024) {
        size_t m = n - i < 1024 ? n - i : 1024;
        uint32_t any = 0;
        for (size_t j = 0; j < m; j++) {
            uint32_t bits;
            memcpy(&bits, &x[i + j], sizeof bits);
            any |= (bits & 0x7f800000u) == 0x7f800000u;
        }
        if (any)
            for (size_t j = 0; j < m; j++)
                if (!isfinite(x[i + j])) return i + j;
    }
    return n;
}

/* ---- names ----------------------------------------------------------------------------------- */
#define MAX_STARS 8

/* Whether s matches the pattern p ('*': any run, the shortest first), each '*''s run from k on
   into at[k], len[k]. */
static bool capture(const char *p, const char *s, const char **at, size_t *len, int k) {
    if (*p == '*') {
        MT_ASSERT(k < MAX_STARS, "a name rule has more than %d '*'", MAX_STARS);
        for (size_t n = 0;; n++) {
            at[k] = s, len[k] = n;
            if (capture(p + 1, s + n, at, len, k + 1)) return true;
            if (!s[n]) return false;
        }
    }
    if (*p != *s) return false;
    return !*p || capture(p + 1, s + 1, at, len, k);
}

const char *mt_load_file_name(const mt_load_spec *spec, const char *name, char *buf, size_t len) {
    const char *at[MAX_STARS];
    size_t n[MAX_STARS];
    for (int r = 0; r < spec->n_map; r++) {
        if (!capture(spec->map[r].model, name, at, n, 0)) continue;
        size_t o = 0;
        int k = 0;
        for (const char *f = spec->map[r].file; *f && o + 1 < len; f++)
            if (*f != '*') buf[o++] = *f;
            else {
                MT_ASSERT(k < MAX_STARS, "rule %s <- %s: more '*' in the file's name",
                          spec->map[r].model, spec->map[r].file);
                size_t c = n[k] < len - 1 - o ? n[k] : len - 1 - o;
                memcpy(buf + o, at[k++], c);
                o += c;
            }
        buf[o] = 0;
        return buf;
    }
    return name;
}

/* The first of the comma-separated globs that matches name, -1 when none does. */
static int glob_index(const char *globs, const char *name) {
    char g[256];
    int k = 0;
    for (const char *p = globs; p && *p; k++) {
        size_t n = strcspn(p, ",");
        snprintf(g, sizeof g, "%.*s", (int)n, p);
        if (n && fnmatch(g, name, 0) == 0) return k;
        p += n + (p[n] == ',');
    }
    return -1;
}

/* ", a, b (+3)": up to 4 of the n names of(i, arg), into buf at *o. */
static void name_list(char *buf, size_t len, size_t *o, int n, const char *(*of)(int, const void *),
                      const void *arg) {
    for (int i = 0; i < n && i < 4 && *o < len; i++)
        *o += (size_t)snprintf(buf + *o, len - *o, "%s%s", i ? ", " : "", of(i, arg));
    if (n > 4 && *o < len) *o += (size_t)snprintf(buf + *o, len - *o, " (+%d)", n - 4);
}

static const char *param_name(int i, const void *P) { return ((const mt_params *)P)->p[i].name; }

/* A glob of globs that matches none of P's names: an error naming it after what ("--freeze: the
   glob") and listing some of the names. */
static mt_status check_globs(const mt_params *P, const char *globs, const char *what, mt_err *err) {
    int k = 0;
    for (const char *p = globs; p && *p; k++) {
        size_t n = strcspn(p, ",");
        bool used = false;
        for (int i = 0; i < P->n && !used; i++) used = glob_index(globs, P->p[i].name) == k;
        if (!used) {
            char names[256];
            size_t o = 0;
            name_list(names, sizeof names, &o, P->n, param_name, P);
            return mt_errorf(err, MT_EINVAL,
                             "%s '%.*s' matches no tensor of the model (its tensors: %s)", what,
                             (int)n, p, names);
        }
        p += n + (p[n] == ',');
    }
    return MT_OK;
}

mt_status mt_ckpt_freeze(mt_params *P, const char *globs, mt_err *err) {
    mt_status s = check_globs(P, globs, "--freeze: the glob", err);
    for (int i = 0; s == MT_OK && i < P->n; i++)
        if (glob_index(globs, P->p[i].name) >= 0) mt_params_freeze(P, i);
    return s;
}

/* Entry i of P read from e (NULL: not in the file under fname), or an error naming it. */
static mt_status check_entry(const mt_param *p, const mt_st_entry *e, const char *fname,
                             const char *path, mt_err *err) {
    char a[64], b[64], as[300] = "";
    if (strcmp(fname, p->name) != 0)
        snprintf(as, sizeof as, " (the file's '%s' by the name map)", fname);
    if (!e)
        return mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' %s is missing%s", path, p->name,
                         shape_str(p->ndim, p->shape, a, sizeof a), as);
    bool same = e->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
    if (!same)
        return mt_errorf(err, MT_EFORMAT, "%s: tensor '%s'%s has shape %s, the model needs %s",
                         path, p->name, as, shape_str(e->ndim, e->shape, a, sizeof a),
                         shape_str(p->ndim, p->shape, b, sizeof b));
    size_t bad = first_non_finite(e->data, e->n);
    if (bad < e->n)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: tensor '%s'%s holds %g at index %zu: a model's weights are finite "
                         "numbers (a damaged file, or a run that diverged)",
                         path, p->name, as, (double)e->data[bad], bad);
    return MT_OK;
}

/* Every entry of P resolved to its tensor of st (src[i]; NULL: skipped) and checked, the report
   filled. */
static mt_status resolve(const mt_safetensors *st, const char *path, const mt_params *P,
                         const mt_load_spec *spec, const mt_st_entry **src, bool *read,
                         mt_load_report *r, mt_err *err) {
    char what[512];
    snprintf(what, sizeof what, "%.480s: the skip glob", path);
    mt_status s = check_globs(P, spec->skip, what, err);
    for (int i = 0; i < P->n && s == MT_OK; i++) {
        const mt_param *p = &P->p[i];
        char buf[256];
        const char *fname = mt_load_file_name(spec, p->name, buf, sizeof buf);
        const mt_st_entry *e = mt_st_find(st, fname);
        if (e) read[e - st->t] = true;
        src[i] = NULL;
        if ((r->is_skipped[i] = glob_index(spec->skip, p->name) >= 0)) {
            r->skipped++;
            continue;
        }
        if ((s = check_entry(p, e, fname, path, err)) != MT_OK) r->failed = i;
        src[i] = e;
        r->loaded++;
        r->loaded_floats += p->n;
    }
    for (int j = 0; j < st->n && s == MT_OK; j++) {
        if (read[j]) continue;
        if (spec->exact)
            return mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' is not a parameter of the model",
                             path, st->t[j].name);
        if (!(r->unused[r->n_unused++] = strdup(st->t[j].name)))
            return mt_errorf(err, MT_ENOMEM, "out of memory");
    }
    return s;
}

mt_status mt_ckpt_load_names(const mt_safetensors *st, const char *path, mt_params *P,
                             const mt_load_spec *spec, mt_load_report *r, mt_err *err) {
    *r = (mt_load_report){.failed = -1,
                          .is_skipped = calloc((size_t)P->n + 1, sizeof *r->is_skipped),
                          .unused = calloc((size_t)st->n + 1, sizeof *r->unused)};
    const mt_st_entry **src = malloc(((size_t)P->n + 1) * sizeof *src);
    bool *read = calloc((size_t)st->n + 1, sizeof *read);
    mt_status s = r->is_skipped && r->unused && src && read
                      ? resolve(st, path, P, spec, src, read, r, err)
                      : mt_errorf(err, MT_ENOMEM, "out of memory");
    for (int i = 0; i < P->n && s == MT_OK && P->data; i++)
        if (src[i]) memcpy(P->data + P->p[i].offset, src[i]->data, P->p[i].n * sizeof(float));
    free(src);
    free(read);
    return s;
}

void mt_load_report_free(mt_load_report *r) {
    for (int j = 0; j < r->n_unused; j++) free(r->unused[j]);
    free(r->unused);
    free(r->is_skipped);
    *r = (mt_load_report){.failed = -1};
}

/* The i-th skipped entry's name. */
typedef struct {
    const mt_load_report *r;
    const mt_params *P;
} skipped_of;
static const char *skipped_name(int i, const void *arg) {
    const skipped_of *a = arg;
    for (int k = 0;; k++)
        if (a->r->is_skipped[k] && i-- == 0) return a->P->p[k].name;
}
static const char *unused_name(int i, const void *r) {
    return ((const mt_load_report *)r)->unused[i];
}

void mt_load_report_describe(const mt_load_report *r, const mt_params *P, const char *path,
                             char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "loaded %d of %d tensors (%.3fM numbers) from %s",
                                r->loaded, P->n, r->loaded_floats / 1e6, path);
    if (r->skipped && o < len) {
        o += (size_t)snprintf(buf + o, len - o, "; left at their initialisation: ");
        name_list(buf, len, &o, r->skipped, skipped_name, &(skipped_of){r, P});
    }
    if ((r->n_unused || r->differs[0]) && o < len) o += (size_t)snprintf(buf + o, len - o, "\n");
    if (r->n_unused && o < len) {
        o += (size_t)snprintf(buf + o, len - o, "not read: the file's %d tensor%s ", r->n_unused,
                              r->n_unused > 1 ? "s" : "");
        name_list(buf, len, &o, r->n_unused, unused_name, r);
    }
    if (r->differs[0] && o < len)
        snprintf(buf + o, len - o, "%sthe file's config differs: %s", r->n_unused ? "; " : "",
                 r->differs);
}

/* ---- a checkpoint's tensors: the model's, under its names, and nothing else ------------------ */
static const mt_load_spec EXACT = {.exact = true};

mt_status mt_ckpt_check_params(const mt_safetensors *st, const char *path, const mt_params *P,
                               mt_err *err) {
    mt_params table = *P;
    table.data = NULL; /* the checks alone: P's data need not exist */
    mt_load_report r;
    mt_status s = mt_ckpt_load_names(st, path, &table, &EXACT, &r, err);
    mt_load_report_free(&r);
    return s;
}

mt_status mt_ckpt_load_params(const mt_safetensors *st, const char *path, mt_params *P,
                              mt_err *err) {
    mt_load_report r;
    mt_status s = mt_ckpt_load_names(st, path, P, &EXACT, &r, err);
    mt_load_report_free(&r);
    return s;
}
