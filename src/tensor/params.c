/* The parameter table: entries added by a model's build, one allocation for data and gradients,
 * the initialiser, bf16 copies, views for replicas. */
#include "params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "gemm.h"
#include "tensor.h"

_Static_assert(offsetof(mt_param, name) == 0, "the name index reads an entry's name at its start");

void mt_params_init_table(mt_params *P) { memset(P, 0, sizeof *P); }

int mt_params_add(mt_params *P, const char *name, int ndim, const int shape[], mt_param_role role,
                  mt_init_kind init, float init_value) {
    MT_ASSERT(!P->data, "params: '%s' added after mt_params_alloc", name);
    MT_ASSERT(strlen(name) < sizeof P->p[0].name, "params: name '%s' is too long", name);
    if (P->n == P->cap) {
        P->cap = P->cap ? 2 * P->cap : 64;
        P->p = realloc(P->p, (size_t)P->cap * sizeof *P->p);
        MT_ASSERT(P->p, "params: out of memory for the table");
    }
    mt_param *e = &P->p[P->n];
    memset(e, 0, sizeof *e);
    strcpy(e->name, name);
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->n = mt_shape_numel(ndim, shape);
    e->offset = P->total;
    e->grad_offset = P->grad_total;
    e->role = role;
    e->decay = role == MT_ROLE_MATRIX || role == MT_ROLE_HEAD;
    e->lr_scale = e->wd_scale = e->eps_scale = 1;
    e->init = init;
    e->init_value = init_value;
    P->total += (e->n + 15) / 16 * 16; /* keep every entry 64-byte aligned */
    P->grad_total += (e->n + 15) / 16 * 16;
    int same = mt_name_index_add(&P->index, P->p, sizeof *P->p, P->n);
    MT_ASSERT(same == P->n, "params: '%s' %s", name,
              same < 0 ? "cannot be indexed (out of memory)" : "added twice");
    return P->n++;
}

/* The entries' places in the gradient buffer: their data's, the frozen ones' floats left out. */
static void place_grads(mt_params *P) {
    size_t frozen = 0;
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        size_t span = (i + 1 < P->n ? P->p[i + 1].offset : P->total) - e->offset;
        e->grad_offset = e->offset - frozen;
        if (e->frozen) frozen += span;
    }
    P->grad_total = P->total - frozen;
}

void mt_params_freeze(mt_params *P, int i) {
    MT_ASSERT(!P->data && i >= 0 && i < P->n, "params: freezing entry %d (before mt_params_alloc)",
              i);
    P->p[i].frozen = true;
    place_grads(P);
}

void mt_params_add_lora(mt_params *P, int w, int r, float alpha, float dropout) {
    const mt_param *e = &P->p[w];
    MT_ASSERT(e->ndim == 2 && r >= 1 && r <= e->shape[0] && r <= e->shape[1] && !e->lora,
              "params: LoRA of rank %d on %s (a matrix, once, r at most its smaller side)", r,
              e->name);
    char base[sizeof e->name], name[sizeof e->name + 16];
    int O = e->shape[0], K = e->shape[1];
    snprintf(base, sizeof base, "%s", e->name);
    size_t n = strlen(base);
    if (n > 7 && !strcmp(base + n - 7, ".weight")) base[n - 7] = 0;
    snprintf(name, sizeof name, "%s.lora_A.weight", base);
    int a = mt_params_add(P, name, 2, (int[]){r, K}, MT_ROLE_MATRIX, MT_INIT_UNIFORM,
                          1 / sqrtf((float)K));
    snprintf(name, sizeof name, "%s.lora_B.weight", base);
    mt_params_add(P, name, 2, (int[]){O, r}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    P->p[w].lora = a, P->p[w].lora_scale = alpha / (float)r, P->p[w].lora_dropout = dropout;
}

bool mt_params_merge_lora(mt_params *P) {
    int base = P->n;
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        if (!e->lora) continue;
        const mt_param *A = &P->p[e->lora], *B = A + 1;
        int O = e->shape[0], K = e->shape[1], r = A->shape[0];
        float *b = P->data + B->offset;
        for (size_t j = 0; j < B->n; j++) b[j] *= e->lora_scale; /* B is dropped after */
        mt_gemm(false, false, O, K, r, b, P->data + A->offset, 1.0f, P->data + e->offset, NULL);
        base = e->lora < base ? e->lora : base;
        e->lora = 0;
    }
    if (base == P->n) return false;
    P->n = base;
    mt_name_index_free(&P->index);
    for (int i = 0; i < P->n; i++)
        MT_ASSERT(mt_name_index_add(&P->index, P->p, sizeof *P->p, i) == i,
                  "params: cannot index '%s' again", P->p[i].name);
    mt_params_refresh_bf16(P);
    return true;
}

static size_t grad_bytes(const mt_params *P) {
    return (P->grad_total ? P->grad_total : 16) * sizeof(float);
}

/* Zeroes P->grad and points P->t at each entry's data and gradient (none for buffers and frozen
   entries). */
static void params_bind(mt_params *P) {
    memset(P->grad, 0, grad_bytes(P));
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        bool trained = mt_param_trained(e);
        P->t[i] = mt_tensor_view(P->data + e->offset, trained ? P->grad + e->grad_offset : NULL,
                                 e->ndim, e->shape);
        P->t[i].bf16 = P->bf16 ? P->bf16 + e->offset : NULL;
    }
}

mt_status mt_params_enable_bf16(mt_params *P, mt_err *err) {
    if (P->bf16) return MT_OK;
    size_t bytes = (P->total ? P->total : 16) * sizeof *P->bf16;
    if (!(P->bf16 = mt_alloc_big(bytes)))
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %.1f MiB for the bf16 weights",
                         bytes / 1048576.0);
    for (int i = 0; i < P->n; i++) P->t[i].bf16 = P->bf16 + P->p[i].offset;
    mt_params_refresh_bf16(P);
    return MT_OK;
}

void mt_params_refresh_bf16(mt_params *P) {
    if (P->bf16) mt_bf16_from_floats(P->bf16, P->data, P->total);
}

mt_status mt_params_alloc(mt_params *P, mt_err *err) {
    size_t bytes = (P->total ? P->total : 16) * sizeof(float);
    P->data = mt_alloc_big(bytes);
    P->grad = mt_alloc_big(grad_bytes(P));
    P->t = calloc((size_t)(P->n ? P->n : 1), sizeof *P->t);
    if (!P->data || !P->grad || !P->t)
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %.1f MiB for %zu parameters",
                         (bytes + grad_bytes(P)) / 1048576.0, P->total);
    memset(P->data, 0, bytes);
    params_bind(P);
    return MT_OK;
}

mt_status mt_params_view(const mt_params *P, mt_params *V, mt_err *err) {
    *V = *P;
    size_t bytes = grad_bytes(P);
    V->grad = mt_alloc_big(bytes);
    V->t = calloc((size_t)(P->n ? P->n : 1), sizeof *V->t);
    if (!V->grad || !V->t) {
        mt_params_view_free(V);
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %.1f MiB for a copy of the gradients",
                         bytes / 1048576.0);
    }
    params_bind(V);
    return MT_OK;
}

void mt_params_view_free(mt_params *V) {
    free(V->grad);
    free(V->t);
    memset(V, 0, sizeof *V);
}

void mt_params_initialize(mt_params *P, mt_rng *r) {
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        float *w = P->data + e->offset;
        for (size_t j = 0; j < e->n; j++) {
            switch (e->init) {
            case MT_INIT_ZEROS: w[j] = 0.0f; break;
            case MT_INIT_ONES: w[j] = 1.0f; break;
            case MT_INIT_CONST: w[j] = e->init_value; break;
            case MT_INIT_NORMAL: w[j] = e->init_value * mt_rng_normal(r); break;
            case MT_INIT_UNIFORM: w[j] = e->init_value * (2 * mt_rng_uniform(r) - 1); break;
            case MT_INIT_HC: { /* row i, column k of (N, N+1) */
                size_t i = j / (size_t)e->shape[1], k = j % (size_t)e->shape[1];
                w[j] = k == 0 ? (float)(i == (size_t)e->init_value) : (float)(k == i + 1);
                break;
            }
            case MT_INIT_EYE:
                w[j] = (float)(j / (size_t)e->shape[1] == j % (size_t)e->shape[1]);
                break;
            case MT_INIT_ONE_HOT: w[j] = (float)(j == (size_t)e->init_value); break;
            }
        }
    }
    mt_params_normalize_units(P);
}

void mt_params_set_unit(mt_params *P, int i, mt_unit_axis axis) {
    MT_ASSERT(!P->data && i >= 0 && i < P->n && P->p[i].ndim == 2 && !P->p[i].unit,
              "params: unit axis of entry %d (2-D, once, before mt_params_alloc)", i);
    P->p[i].unit = axis;
    P->n_unit += axis != MT_UNIT_NONE;
}

/* Rows [r0, r1) of w (R, K), each divided by its norm. */
static void unit_rows(float *w, int K, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        float *x = w + (size_t)r * K;
        double s = 0;
        for (int j = 0; j < K; j++) s += (double)x[j] * x[j];
        float inv = s > 0 ? (float)(1 / sqrt(s)) : 1.0f;
        for (int j = 0; j < K; j++) x[j] *= inv;
    }
}

enum { UNIT_COLS = 16 }; /* columns normalised together: a row's 64 bytes at a time */

/* Columns [c0, c0 + UNIT_COLS) (those below K) of w (R, K), each divided by its norm, the sums
   down the rows in order. */
static void unit_cols(float *w, int R, int K, int c0) {
    int n = K - c0 < UNIT_COLS ? K - c0 : UNIT_COLS;
    double s[UNIT_COLS] = {0};
    float inv[UNIT_COLS];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++)
            s[j] += (double)w[(size_t)r * K + c0 + j] * w[(size_t)r * K + c0 + j];
    for (int j = 0; j < n; j++) inv[j] = s[j] > 0 ? (float)(1 / sqrt(s[j])) : 1.0f;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) w[(size_t)r * K + c0 + j] *= inv[j];
}

void mt_params_normalize_units(mt_params *P) {
    for (int i = 0; P->n_unit && i < P->n; i++) {
        const mt_param *e = &P->p[i];
        if (!e->unit) continue;
        float *w = P->data + e->offset;
        int R = e->shape[0], K = e->shape[1];
        if (e->unit == MT_UNIT_ROWS) {
            MT_PARALLEL_FOR(e->n >= MT_PAR_MIN,
                            for (int r = 0; r < R; r++) unit_rows(w, K, r, r + 1););
        } else {
            int blocks = (K + UNIT_COLS - 1) / UNIT_COLS;
            MT_PARALLEL_FOR(e->n >= MT_PAR_MIN,
                            for (int b = 0; b < blocks; b++) unit_cols(w, R, K, b * UNIT_COLS););
        }
        if (P->bf16) mt_bf16_from_floats(P->bf16 + e->offset, w, e->n);
    }
}

int mt_params_find(const mt_params *P, const char *name) {
    return mt_name_index_find(&P->index, P->p, sizeof *P->p, name);
}

size_t mt_params_count_trainable(const mt_params *P) {
    size_t n = 0;
    for (int i = 0; i < P->n; i++)
        if (P->p[i].role != MT_ROLE_BUFFER) n += P->p[i].n;
    return n;
}

void mt_params_zero_grad(mt_params *P) {
    if (P->grad) memset(P->grad, 0, P->grad_total * sizeof(float));
}

void mt_params_free(mt_params *P) {
    free(P->p);
    free(P->bf16);
    free(P->data);
    free(P->grad);
    free(P->t);
    mt_name_index_free(&P->index);
    memset(P, 0, sizeof *P);
}
