#include "check.h"

#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int check_failures = 0;

int check_finish(const char *test_name) {
    if (check_failures) fprintf(stderr, "%s: %d check(s) failed\n", test_name, check_failures);
    else printf("%s: ok\n", test_name);
    return check_failures ? 1 : 0;
}

static int remove_entry(const char *path, const struct stat *st, int kind, struct FTW *ftw) {
    (void)st, (void)kind, (void)ftw;
    return remove(path);
}

int test_remove_dir(const char *dir) { return nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

mt_tensor *test_tensor(mt_rng *r, int ndim, const int shape[], float lo, float hi,
                       bool requires_grad) {
    size_t n = mt_shape_numel(ndim, shape);
    float *data = malloc(n * sizeof(float));
    float *grad = requires_grad ? calloc(n, sizeof(float)) : NULL;
    for (size_t i = 0; i < n; i++) data[i] = lo + (hi - lo) * mt_rng_uniform(r);
    mt_tensor *t = malloc(sizeof *t);
    *t = mt_tensor_view(data, grad, ndim, shape);
    return t;
}

void test_tensor_free(mt_tensor *t) {
    if (!t) return;
    free(t->data);
    free(t->grad);
    free(t);
}

double max_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

static double weighted_sum(const mt_tensor *y, const float *w) {
    double s = 0;
    for (size_t i = 0; i < y->n; i++) s += (double)y->data[i] * w[i];
    return s;
}

int gradcheck(const char *name, gc_build build, const void *arg, int n_in, mt_tensor *in[],
              double eps, double tol) {
    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)256 << 20, 1, NULL) == MT_OK, "gradcheck: no arena");
    mt_rng wr;
    const float prefill = 0.5f;

    /* analytic gradients */
    for (int i = 0; i < n_in; i++)
        if (in[i]->grad)
            for (size_t j = 0; j < in[i]->n; j++) in[i]->grad[j] = prefill;
    mt_rng_seed(&c.rng, 42);
    mt_tensor *y = build(&c, in, arg);
    size_t ny = y->n;
    float *w = malloc(ny * sizeof(float));
    mt_rng_seed(&wr, 7);
    for (size_t j = 0; j < ny; j++) w[j] = 2.0f * mt_rng_uniform(&wr) - 1.0f;
    mt_backward_from(&c, y, w);

    int bad = 0;
    c.grad_enabled = false;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]->grad) continue;
        size_t n = in[i]->n;
        float *ana = malloc(n * sizeof(float));
        double scale = 1e-2;
        for (size_t j = 0; j < n; j++) {
            ana[j] = in[i]->grad[j] - prefill;
            if (fabs(ana[j]) > scale) scale = fabs(ana[j]);
        }
        for (size_t j = 0; j < n; j++) {
            float x0 = in[i]->data[j];
            double lp, lm;
            in[i]->data[j] = x0 + (float)eps;
            mt_ctx_reset(&c);
            mt_rng_seed(&c.rng, 42);
            lp = weighted_sum(build(&c, in, arg), w);
            in[i]->data[j] = x0 - (float)eps;
            mt_ctx_reset(&c);
            mt_rng_seed(&c.rng, 42);
            lm = weighted_sum(build(&c, in, arg), w);
            in[i]->data[j] = x0;
            double num = (lp - lm) / (2 * eps);
            double diff = fabs(num - ana[j]);
            if (!(diff <= tol * (scale + fabs(num)))) {
                if (bad < 5)
                    fprintf(stderr,
                            "gradcheck %s: input %d element %zu: analytic %.6g numeric %.6g\n",
                            name, i, j, ana[j], num);
                bad++;
            }
        }
        free(ana);
    }
    CHECK(bad == 0, "gradcheck %s: %d element(s) mismatch", name, bad);
    free(w);
    mt_ctx_free(&c);
    return bad;
}

/* ---- parity driver ------------------------------------------------------------------------- */

double parity_opt(const mt_safetensors *in, const char *key) {
    const char *v = mt_st_meta(in, key);
    MT_ASSERT(v, "parity driver: option '%s' missing from the input file", key);
    return atof(v);
}

float *parity_qk_probe(const mt_safetensors *in, mt_ctx *c, const mt_params *P, int n_head,
                       mt_qk_clip *qk) {
    *qk = (mt_qk_clip){0};
    if (!mt_st_meta(in, "qk_clip")) return NULL;
    mt_err err;
    MT_ASSERT(mt_qk_clip_init(qk, P, n_head, (float)parity_opt(in, "qk_clip"), &err) == MT_OK,
              "parity driver: %s", err.msg);
    float *qk_max = malloc((size_t)qk->heads * sizeof *qk_max);
    MT_ASSERT(qk_max, "parity driver: out of memory");
    mt_qk_clip_reset(qk_max, qk->heads);
    c->qk_max = qk_max, c->qk_slot = qk->slot, c->qk_at = -1;
    return qk_max;
}

int parity_open(int argc, char **argv, mt_safetensors *in) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
        return 2;
    }
    mt_set_threads(0);
    mt_err err;
    if (mt_st_load(argv[1], in, &err) != MT_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        return 1;
    }
    return 0;
}

mt_model *parity_config_model(const mt_model_type *type, const char *json, const mt_lora_cfg *lora,
                              mt_err *err) {
    void *cfg = malloc(type->config_size);
    mt_model *m = NULL;
    if (!json) snprintf(err->msg, sizeof err->msg, "no 'config' in the metadata");
    else if (mt_model_config_from_json(type, json, cfg, err) == MT_OK &&
             mt_model_table(&m, type, cfg, err) == MT_OK &&
             ((lora && mt_ckpt_lora(m->P, lora, err) != MT_OK) ||
              mt_params_alloc(m->P, err) != MT_OK))
        mt_model_free(m), m = NULL;
    free(cfg);
    return m;
}

mt_model *parity_model(const mt_safetensors *in, const mt_model_type *type, int n_inputs) {
    mt_err err;
    const char *targets = mt_st_meta(in, "lora_targets");
    mt_lora_cfg lora = {.rank = targets ? (int)parity_opt(in, "lora_rank") : 0,
                        .alpha = targets ? parity_opt(in, "lora_alpha") : 0};
    snprintf(lora.targets, sizeof lora.targets, "%s", targets ? targets : "");
    mt_model *m = parity_config_model(type, mt_st_meta(in, "config"), &lora, &err);
    for (int i = 0; m && i < m->P->n; i++) {
        const mt_param *e = &m->P->p[i];
        const mt_st_entry *t = mt_st_find(in, e->name);
        if (t && t->n == e->n) {
            memcpy(m->P->data + e->offset, t->data, e->n * sizeof(float));
            continue;
        }
        snprintf(err.msg, sizeof err.msg, "parameter %s missing or not of %zu elements", e->name,
                 e->n);
        mt_model_free(m), m = NULL;
    }
    if (m && m->P->n + n_inputs != in->n) {
        snprintf(err.msg, sizeof err.msg, "the file holds tensors the model does not have");
        mt_model_free(m), m = NULL;
    }
    if (!m) fprintf(stderr, "%s driver: %s\n", type->name, err.msg);
    return m;
}

int parity_driver_main(int argc, char **argv, const parity_op *ops, int n_ops) {
    mt_err err;
    mt_safetensors in;
    int rc = parity_open(argc, argv, &in);
    if (rc) return rc;
    const char *opname = mt_st_meta(&in, "op"), *grad = mt_st_meta(&in, "grad");
    const parity_op *op = NULL;
    for (int i = 0; opname && i < n_ops; i++)
        if (strcmp(ops[i].name, opname) == 0) op = &ops[i];
    if (!op) {
        fprintf(stderr, "%s: unknown op '%s'\n", argv[0], opname ? opname : "(none)");
        return 2;
    }
    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)1 << 30, 1, NULL) == MT_OK, "parity: no arena");
    mt_tensor *x[MT_NODE_MAX_IN];
    int n_x = 0;
    for (; n_x < MT_NODE_MAX_IN; n_x++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", n_x);
        const mt_st_entry *e = mt_st_find(&in, name);
        if (!e) break;
        int shape[MT_MAX_DIMS] = {1};
        for (int d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
        x[n_x] = mt_tensor_from(&c, e->data, e->ndim ? e->ndim : 1, shape);
        x[n_x]->requires_grad = grad && (int)strlen(grad) > n_x && grad[n_x] == '1';
    }
    mt_tensor *y = op->build(&c, x, n_x, &in);
    const mt_st_entry *dy = mt_st_find(&in, "dy");
    if (dy && y->requires_grad) {
        MT_ASSERT(dy->n == y->n, "parity: dy has %zu elements, y %zu", dy->n, y->n);
        mt_backward_from(&c, y, dy->data);
    }
    mt_st_item items[1 + MT_NODE_MAX_IN];
    char names[MT_NODE_MAX_IN][8];
    int n_items = 0;
    items[n_items++] = (mt_st_item){"y", y->ndim, y->shape, y->data};
    for (int i = 0; i < n_x; i++) {
        if (!x[i]->requires_grad) continue;
        snprintf(names[i], sizeof names[i], "dx%d", i);
        const float *g = x[i]->grad ? x[i]->grad : mt_arena_zeros(&c, x[i]->n);
        items[n_items++] = (mt_st_item){names[i], x[i]->ndim, x[i]->shape, g};
    }
    rc = 0;
    if (mt_st_save(argv[2], n_items, items, 0, NULL, NULL, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        rc = 1;
    }
    mt_ctx_free(&c);
    mt_st_free(&in);
    return rc;
}

const char *test_write_dict(const char *dir, int n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/dict.out", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    const char *phones[] = {"hh", "ax", "l", "ow", "k", "ae", "t"};
    for (int i = 0; i < n; i++) {
        char word[16];
        int len = 1 + (i * 7) % 9;
        for (int j = 0; j < len; j++) word[j] = (char)('a' + (i * 5 + j * 3) % 26);
        snprintf(word + len, sizeof word - (size_t)len, "%c%c", 'a' + i / 26 % 26, 'a' + i % 26);
        fprintf(f, "(\"%s\" nil (", word); /* syllables ((phones) stress) */
        for (int p = 0; p < 2 + i % 4; p++) fprintf(f, "((%s) %d) ", phones[(i + p) % 7], p % 2);
        fprintf(f, "))\n");
    }
    return fclose(f) == 0 ? path : NULL;
}
