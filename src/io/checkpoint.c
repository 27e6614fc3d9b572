/* A parameter table to and from safetensors, by the names and shapes of its entries. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

mt_status mt_st_save_params(const char *path, const mt_params *P, int n_meta,
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

mt_status mt_st_check_params(const mt_safetensors *st, const char *path, const mt_params *P,
                             mt_err *err) {
    char a[64], b[64];
    for (int i = 0; i < P->n; i++) {
        const mt_param *p = &P->p[i];
        const mt_st_entry *e = mt_st_find(st, p->name);
        if (!e)
            return mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' %s is missing", path, p->name,
                             shape_str(p->ndim, p->shape, a, sizeof a));
        bool same = e->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
        if (!same)
            return mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' has shape %s, the model needs %s",
                             path, p->name, shape_str(e->ndim, e->shape, a, sizeof a),
                             shape_str(p->ndim, p->shape, b, sizeof b));
        size_t bad = first_non_finite(e->data, e->n);
        if (bad < e->n)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: tensor '%s' holds %g at index %zu: a model's weights are finite "
                             "numbers (a damaged file, or a run that diverged)",
                             path, p->name, (double)e->data[bad], bad);
    }
    for (int i = 0; i < st->n; i++)
        if (mt_params_find(P, st->t[i].name) < 0)
            return mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' is not a parameter of the model",
                             path, st->t[i].name);
    return MT_OK;
}

mt_status mt_st_load_params(const mt_safetensors *st, const char *path, mt_params *P, mt_err *err) {
    mt_status s = mt_st_check_params(st, path, P, err);
    if (s != MT_OK) return s;
    for (int i = 0; i < P->n; i++)
        memcpy(P->data + P->p[i].offset, mt_st_find(st, P->p[i].name)->data,
               P->p[i].n * sizeof(float));
    return MT_OK;
}
