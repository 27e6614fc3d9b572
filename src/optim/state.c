/* Optimizer state files for exact resume: "<slot>.<name>" for each state slot the kind keeps
 * ("m", "v") and each trainable entry, and the kind's name and the step count in __metadata__. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "../tensor/tensor.h"
#include "optim.h"

/* "<slot k>.<entry e>" into name. */
static void slot_name(const mt_optim *o, int k, const mt_param *e, char *name, size_t len) {
    snprintf(name, len, "%s.%s", o->type->slot_names[k], e->name);
}

/* name is "<slot>.<p>" for a slot o keeps and a trainable parameter p. */
static bool kept(const mt_optim *o, const mt_params *P, const char *name) {
    for (int k = 0; k < o->n_slots; k++) {
        size_t len = strlen(o->type->slot_names[k]);
        if (strncmp(name, o->type->slot_names[k], len) != 0 || name[len] != '.') continue;
        int i = mt_params_find(P, name + len + 1);
        return i >= 0 && mt_param_trained(&P->p[i]);
    }
    return false;
}

/* The state's own arrays (mt_optim_save). */
static const float *own_slot(const mt_optim *o, int k, const mt_param *e, void *arg) {
    (void)arg;
    return o->slot[k] + (e->grad_offset - o->lo);
}

mt_status mt_optim_save(const mt_optim *o, const mt_params *P, const char *path, mt_err *err) {
    MT_ASSERT(o->lo == 0 && o->hi == P->grad_total, "optim: saving a shard [%zu, %zu) of the state",
              o->lo, o->hi);
    return mt_optim_save_from(o, P, own_slot, NULL, path, err);
}

mt_status mt_optim_save_from(const mt_optim *o, const mt_params *P,
                             const float *(*slot_of)(const mt_optim *o, int k, const mt_param *e,
                                                     void *arg),
                             void *arg, const char *path, mt_err *err) {
    MT_ASSERT(P->grad_total == o->total, "optim: the gradients have %zu floats, the state %zu",
              P->grad_total, o->total);
    size_t cap = (size_t)o->n_slots * (size_t)P->n + 1;
    mt_st_item *items = calloc(cap, sizeof *items);
    char(*names)[128] = calloc(cap, sizeof *names);
    if (!items || !names) {
        free(items);
        free(names);
        return mt_errorf(err, MT_ENOMEM, "%s: out of memory saving the optimizer state", path);
    }
    int n = 0;
    for (int k = 0; k < o->n_slots; k++)
        for (int i = 0; i < P->n; i++) {
            const mt_param *e = &P->p[i];
            if (!mt_param_trained(e)) continue;
            slot_name(o, k, e, names[n], sizeof names[n]);
            items[n] = (mt_st_item){.name = names[n],
                                    .ndim = e->ndim,
                                    .shape = e->shape,
                                    .data = slot_of(o, k, e, arg)};
            n++;
        }
    char step[32];
    snprintf(step, sizeof step, "%ld", o->t);
    const char *keys[] = {"optim", "step"}, *vals[] = {o->type->name, step};
    mt_status s = mt_st_save(path, n, items, 2, keys, vals, err);
    free(items);
    free(names);
    return s;
}

/* The file's metadata names o's kind and a step count, *t. */
static mt_status check_meta(const mt_optim *o, const mt_safetensors *st, const char *path, long *t,
                            mt_err *err) {
    const char *kind = mt_st_meta(st, "optim"), *step = mt_st_meta(st, "step");
    char *end = NULL;
    *t = step ? strtol(step, &end, 10) : -1;
    if (!kind || strcmp(kind, o->type->name) != 0)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: optimizer state for '%s', but this run uses --optim %s; resume with "
                         "the same optimizer",
                         path, kind ? kind : "(no 'optim' in the metadata)", o->type->name);
    if (!step || *end || *t < 0)
        return mt_errorf(err, MT_EFORMAT, "%s: metadata 'step' is '%s', not a step count >= 0",
                         path, step ? step : "(missing)");
    return MT_OK;
}

/* Every tensor in the file is one o keeps, and every one it keeps is there, shaped as its
   parameter. */
static mt_status check_tensors(const mt_optim *o, const mt_params *P, const mt_safetensors *st,
                               const char *path, mt_err *err) {
    for (int j = 0; j < st->n; j++)
        if (!kept(o, P, st->t[j].name))
            return mt_errorf(err, MT_EFORMAT,
                             "%s: '%s' is not a moment this %s run keeps for one of its "
                             "parameters: the state belongs to another model or optimizer setting",
                             path, st->t[j].name, o->type->name);
    for (int k = 0; k < o->n_slots; k++)
        for (int i = 0; i < P->n; i++) {
            const mt_param *e = &P->p[i];
            if (!mt_param_trained(e)) continue;
            char name[128], want_shape[64], got_shape[64];
            slot_name(o, k, e, name, sizeof name);
            const mt_st_entry *x = mt_st_find(st, name);
            if (!x)
                return mt_errorf(err, MT_EFORMAT,
                                 "%s: '%s' is missing: the state belongs to another model or "
                                 "optimizer setting",
                                 path, name);
            mt_tensor got = {.ndim = x->ndim};
            memcpy(got.shape, x->shape, sizeof got.shape);
            if (!mt_same_shape(&got, &P->t[i]))
                return mt_errorf(err, MT_EFORMAT,
                                 "%s: '%s' has shape %s, the parameter %s: the state belongs to "
                                 "another model",
                                 path, name, mt_shape_str(&got, got_shape, sizeof got_shape),
                                 mt_shape_str(&P->t[i], want_shape, sizeof want_shape));
        }
    return MT_OK;
}

mt_status mt_optim_load(mt_optim *o, const mt_params *P, const char *path, mt_err *err) {
    MT_ASSERT(P->grad_total == o->total, "optim: the gradients have %zu floats, the state %zu",
              P->grad_total, o->total);
    mt_safetensors st;
    mt_status s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    long t;
    if ((s = check_meta(o, &st, path, &t, err)) == MT_OK &&
        (s = check_tensors(o, P, &st, path, err)) == MT_OK) {
        for (int k = 0; k < o->n_slots; k++)
            for (int i = o->first; i < o->last; i++) { /* the entries of this (shard's) state */
                const mt_param *e = &P->p[i];
                if (!mt_param_trained(e)) continue;
                char name[128];
                slot_name(o, k, e, name, sizeof name);
                memcpy(o->slot[k] + (e->grad_offset - o->lo), mt_st_find(&st, name)->data,
                       e->n * sizeof(float));
            }
        o->t = t;
    }
    mt_st_free(&st);
    return s;
}
