/* Parity driver for the ViT (tests/parity/test_vit.py). IN.safetensors holds every parameter and
   buffer under its mt name, "images" (B, CH, H, W), "labels" (B, as floats) and the metadata
   "config" (the model's JSON). One training-mode step: OUT.safetensors gets "logits" (B, K),
   "loss" (1), "grad.<name>" for every trained parameter and "buf.<name>" for every buffer after
   the step (BatchNorm's running statistics); then "logits_eval", the logits in eval mode. */
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static int fail(const char *msg) {
    fprintf(stderr, "vit_driver: %s\n", msg);
    return 1;
}

int main(int argc, char **argv) {
    mt_err err;
    mt_safetensors in;
    int rc = parity_open(argc, argv, &in);
    if (rc) return rc;
    mt_model *model = parity_model(&in, &mt_vit_type, 2);
    if (!model) return 1;
    mt_vit *m = mt_vit_of(model);
    const mt_st_entry *ti = mt_st_find(&in, "images"), *tl = mt_st_find(&in, "labels");
    int B = tl ? (int)tl->n : 0;
    if (!ti || !tl || ti->n != (size_t)B * m->cfg.channels * m->cfg.image_h * m->cfg.image_w)
        return fail("images (B, CH, H, W) and labels (B) expected");
    int *labels = malloc((size_t)B * sizeof(int));
    for (int i = 0; i < B; i++) labels[i] = (int)tl->data[i];

    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)256 << 20, 1, NULL) == MT_OK, "parity: no arena");
    c.training = true;
    mt_tensor *logits = mt_vit_forward(&c, m, &m->P, ti->data, B);
    mt_tensor *loss = mt_cross_entropy(&c, logits, labels, -1, mt_stack_ce(&m->cfg.stack));
    mt_backward(&c, loss);
    c.training = false;
    c.grad_enabled = false;
    mt_tensor *logits_eval = mt_vit_forward(&c, m, &m->P, ti->data, B);

    mt_st_item *items = calloc((size_t)m->P.n + 3, sizeof *items);
    char(*names)[128] = calloc((size_t)m->P.n, sizeof *names);
    int n = 0;
    items[n++] = (mt_st_item){"logits", logits->ndim, logits->shape, logits->data};
    items[n++] = (mt_st_item){"loss", 1, loss->shape, loss->data};
    items[n++] = (mt_st_item){"logits_eval", 2, logits_eval->shape, logits_eval->data};
    for (int i = 0; i < m->P.n; i++) {
        const mt_param *e = &m->P.p[i];
        bool buf = e->role == MT_ROLE_BUFFER;
        snprintf(names[i], sizeof names[i], "%s.%s", buf ? "buf" : "grad", e->name);
        items[n++] = (mt_st_item){names[i], e->ndim, e->shape,
                                  (buf ? m->P.data : m->P.grad) + e->offset};
    }
    rc = mt_st_save(argv[2], n, items, 0, NULL, NULL, &err) == MT_OK ? 0 : fail(err.msg);
    free(items);
    free(names);
    free(labels);
    mt_ctx_free(&c);
    mt_model_free(model);
    mt_st_free(&in);
    return rc;
}
