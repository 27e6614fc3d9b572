/* Parity driver for the encoder-decoder (tests/parity/test_encdec.py). IN.safetensors holds every
   parameter under its mt name, "src" (B, S), "src_len" (B), "tgt" and "targets" (B, T), as floats,
   and the metadata "config" (the model's JSON). OUT.safetensors gets "logits" (B, T, V), "loss"
   (1) and "grad.<name>" for every parameter. */
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static int fail(const char *msg) {
    fprintf(stderr, "encdec_driver: %s\n", msg);
    return 1;
}

static int *ints(const mt_st_entry *t) {
    int *v = malloc(t->n * sizeof(int));
    for (size_t i = 0; i < t->n; i++) v[i] = (int)t->data[i];
    return v;
}

int main(int argc, char **argv) {
    mt_err err;
    mt_safetensors in;
    int rc = parity_open(argc, argv, &in);
    if (rc) return rc;
    const char *json = mt_st_meta(&in, "config");
    mt_encdec_config cfg;
    if (!json) return fail("no 'config' in the metadata");
    if (mt_model_config_from_json(&mt_encdec_type, json, &cfg, &err) != MT_OK) return fail(err.msg);
    mt_encdec m;
    if (mt_encdec_build(&m, &cfg, &err) != MT_OK) return fail(err.msg);
    for (int i = 0; i < m.P.n; i++) {
        const mt_param *e = &m.P.p[i];
        const mt_st_entry *t = mt_st_find(&in, e->name);
        char msg[256];
        snprintf(msg, sizeof msg, "parameter %s missing or not of %zu elements", e->name, e->n);
        if (!t || t->n != e->n) return fail(msg);
        memcpy(m.P.data + e->offset, t->data, e->n * sizeof(float));
    }
    if (m.P.n + 4 != in.n) return fail("the file holds tensors the model does not have");
    const mt_st_entry *ts = mt_st_find(&in, "src"), *tl = mt_st_find(&in, "src_len"),
                      *tt = mt_st_find(&in, "tgt"), *ty = mt_st_find(&in, "targets");
    if (!ts || !tl || !tt || !ty || ts->ndim != 2 || tt->ndim != 2) return fail("inputs");
    int B = ts->shape[0], S = ts->shape[1], T = tt->shape[1];
    int *src = ints(ts), *len = ints(tl), *tgt = ints(tt), *targets = ints(ty);
    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)256 << 20, 1, NULL) == MT_OK, "parity: no arena");
    mt_tensor *loss = mt_encdec_loss(&c, &m, src, len, S, tgt, targets, B, T);
    mt_backward(&c, loss);
    c.grad_enabled = false;
    mt_tensor *logits = mt_encdec_forward(&c, &m, src, len, S, tgt, B, T);
    mt_st_item *items = calloc((size_t)m.P.n + 2, sizeof *items);
    char(*names)[128] = calloc((size_t)m.P.n, sizeof *names);
    int n = 0;
    items[n++] = (mt_st_item){"logits", logits->ndim, logits->shape, logits->data};
    items[n++] = (mt_st_item){"loss", 1, loss->shape, loss->data};
    for (int i = 0; i < m.P.n; i++) {
        snprintf(names[i], sizeof names[i], "grad.%s", m.P.p[i].name);
        items[n++] = (mt_st_item){names[i], m.P.p[i].ndim, m.P.p[i].shape,
                                  m.P.grad + m.P.p[i].offset};
    }
    rc = mt_st_save(argv[2], n, items, 0, NULL, NULL, &err) == MT_OK ? 0 : fail(err.msg);
    free(items), free(names), free(src), free(len), free(tgt), free(targets);
    mt_ctx_free(&c);
    mt_encdec_free(&m);
    mt_st_free(&in);
    return rc;
}
