/* Parity driver for the encoder-decoder (tests/parity/test_encdec.py). IN.safetensors holds every
   parameter under its mt name, "src" (B, S), "src_len" (B), "tgt" and "targets" (B, T), as floats,
   and the metadata "config" (the model's JSON). OUT.safetensors gets "logits" (B, T, V), "loss"
   (1) and "grad.<name>" for every parameter. Optional metadata "qk_clip" (tau): the loss's
   forward feeds QK-Clip's probe, "qk_max" its maxima (heads, the attentions in table order). */
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
    mt_model *model = parity_model(&in, &mt_encdec_type, 4);
    if (!model) return 1;
    mt_encdec *m = mt_encdec_of(model);
    const mt_st_entry *ts = mt_st_find(&in, "src"), *tl = mt_st_find(&in, "src_len"),
                      *tt = mt_st_find(&in, "tgt"), *ty = mt_st_find(&in, "targets");
    if (!ts || !tl || !tt || !ty || ts->ndim != 2 || tt->ndim != 2) return fail("inputs");
    int B = ts->shape[0], S = ts->shape[1], T = tt->shape[1];
    int *src = ints(ts), *len = ints(tl), *tgt = ints(tt), *targets = ints(ty);
    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)256 << 20, 1, NULL) == MT_OK, "parity: no arena");
    mt_qk_clip qk;
    float *qk_max = parity_qk_probe(&in, &c, &m->P, m->cfg.stack.n_head, &qk);
    mt_tensor *loss = mt_encdec_loss(&c, m, &m->P, src, len, S, tgt, targets, B, T,
                                     mt_stack_ce(&m->cfg.stack));
    mt_backward(&c, loss);
    c.grad_enabled = false;
    mt_tensor *logits = mt_encdec_forward(&c, m, &m->P, src, len, S, tgt, B, T);
    mt_st_item *items = calloc((size_t)m->P.n + 3, sizeof *items);
    char(*names)[128] = calloc((size_t)m->P.n, sizeof *names);
    int n = 0;
    items[n++] = (mt_st_item){"logits", logits->ndim, logits->shape, logits->data};
    items[n++] = (mt_st_item){"loss", 1, loss->shape, loss->data};
    for (int i = 0; i < m->P.n; i++) {
        snprintf(names[i], sizeof names[i], "grad.%s", m->P.p[i].name);
        items[n++] = (mt_st_item){names[i], m->P.p[i].ndim, m->P.p[i].shape,
                                  m->P.grad + m->P.p[i].offset};
    }
    if (qk_max) items[n++] = (mt_st_item){"qk_max", 1, &qk.heads, qk_max};
    rc = mt_st_save(argv[2], n, items, 0, NULL, NULL, &err) == MT_OK ? 0 : fail(err.msg);
    free(items), free(names), free(src), free(len), free(tgt), free(targets), free(qk_max);
    mt_qk_clip_free(&qk);
    mt_ctx_free(&c);
    mt_model_free(model);
    mt_st_free(&in);
    return rc;
}
