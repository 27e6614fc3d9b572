/* Optimizer state files for exact resume: "m.<name>", "v.<name>" per trainable entry, and the
 * optimizer kind and step count in __metadata__. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../tensor/tensor.h"
#include "optim.h"

/* The moment buffers the optimizer keeps, with their name prefixes. */
static int moments(const mt_optim *o, float *buf[2], const char *prefix[2]) {
    int k = 0;
    if (o->m) buf[k] = o->m, prefix[k++] = "m";
    if (o->v) buf[k] = o->v, prefix[k++] = "v";
    return k;
}

/* name is "m.<p>" or "v.<p>" for a moment o keeps and a trainable parameter p. */
static bool kept(const mt_optim *o, const mt_params *P, const char *name) {
    bool moment = (name[0] == 'm' && o->m) || (name[0] == 'v' && o->v);
    if (!moment || name[1] != '.') return false;
    int i = mt_params_find(P, name + 2);
    return i >= 0 && P->p[i].role != MT_ROLE_BUFFER;
}

mt_status mt_optim_save(const mt_optim *o, const mt_params *P, const char *path, mt_err *err) {
    MT_ASSERT(P->total == o->total, "optim: the parameters have %zu floats, the state %zu",
              P->total, o->total);
    float *buf[2];
    const char *prefix[2];
    int nb = moments(o, buf, prefix);
    size_t cap = (size_t)nb * (size_t)P->n + 1;
    mt_st_item *items = calloc(cap, sizeof *items);
    char(*names)[128] = calloc(cap, sizeof *names);
    if (!items || !names) {
        free(items);
        free(names);
        return mt_errorf(err, MT_ENOMEM, "%s: out of memory saving the optimizer state", path);
    }
    int n = 0;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < P->n; i++) {
            const mt_param *e = &P->p[i];
            if (e->role == MT_ROLE_BUFFER) continue;
            snprintf(names[n], sizeof names[n], "%s.%s", prefix[b], e->name);
            items[n] = (mt_st_item){.name = names[n], .ndim = e->ndim, .shape = e->shape,
                                    .data = buf[b] + e->offset};
            n++;
        }
    char step[32];
    snprintf(step, sizeof step, "%ld", o->t);
    const char *keys[] = {"optim", "step"}, *vals[] = {mt_enum_name(&MT_OPTIMS, o->cfg.kind), step};
    mt_status s = mt_st_save(path, n, items, 2, keys, vals, err);
    free(items);
    free(names);
    return s;
}

mt_status mt_optim_load(mt_optim *o, const mt_params *P, const char *path, mt_err *err) {
    MT_ASSERT(P->total == o->total, "optim: the parameters have %zu floats, the state %zu",
              P->total, o->total);
    mt_safetensors st;
    mt_status s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    const char *kind = mt_st_meta(&st, "optim"), *step = mt_st_meta(&st, "step");
    const char *want = mt_enum_name(&MT_OPTIMS, o->cfg.kind);
    char *end = NULL;
    long t = step ? strtol(step, &end, 10) : -1;
    float *buf[2];
    const char *prefix[2];
    int nb = moments(o, buf, prefix);
    if (!kind || strcmp(kind, want) != 0) {
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: optimizer state for '%s', but this run uses --optim %s; resume with "
                      "the same optimizer",
                      path, kind ? kind : "(no 'optim' in the metadata)", want);
        goto out;
    }
    if (!step || *end || t < 0) {
        s = mt_errorf(err, MT_EFORMAT, "%s: metadata 'step' is '%s', not a step count >= 0", path,
                      step ? step : "(missing)");
        goto out;
    }
    /* every tensor in the file is one this optimizer keeps ... */
    for (int j = 0; j < st.n; j++)
        if (!kept(o, P, st.t[j].name)) {
            s = mt_errorf(err, MT_EFORMAT,
                          "%s: '%s' is not a moment this %s run keeps for one of its parameters: "
                          "the state belongs to another model or optimizer setting",
                          path, st.t[j].name, want);
            goto out;
        }
    /* ... and every one it keeps is there, shaped as its parameter */
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < P->n; i++) {
            const mt_param *e = &P->p[i];
            if (e->role == MT_ROLE_BUFFER) continue;
            char name[128], want_shape[64], got_shape[64];
            snprintf(name, sizeof name, "%s.%s", prefix[b], e->name);
            const mt_st_entry *x = mt_st_find(&st, name);
            if (!x) {
                s = mt_errorf(err, MT_EFORMAT,
                              "%s: '%s' is missing: the state belongs to another model or "
                              "optimizer setting",
                              path, name);
                goto out;
            }
            mt_tensor got = {.ndim = x->ndim};
            memcpy(got.shape, x->shape, sizeof got.shape);
            if (!mt_same_shape(&got, &P->t[i])) {
                s = mt_errorf(err, MT_EFORMAT,
                              "%s: '%s' has shape %s, the parameter %s: the state belongs to "
                              "another model",
                              path, name, mt_shape_str(&got, got_shape, sizeof got_shape),
                              mt_shape_str(&P->t[i], want_shape, sizeof want_shape));
                goto out;
            }
        }
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < P->n; i++) {
            const mt_param *e = &P->p[i];
            if (e->role == MT_ROLE_BUFFER) continue;
            char name[128];
            snprintf(name, sizeof name, "%s.%s", prefix[b], e->name);
            memcpy(buf[b] + e->offset, mt_st_find(&st, name)->data, e->n * sizeof(float));
        }
    o->t = t;
out:
    mt_st_free(&st);
    return s;
}
