/* Parity driver for the GPT (tests/parity/test_gpt.py). IN.safetensors holds every parameter
   under its mt name, "ids" and "targets" (B*T, as floats) and the metadata "config" (the model's
   JSON), "B" and "T". OUT.safetensors gets "logits" (B, T, V), "loss" (1) and "grad.<name>" for
   every trained parameter. The file's names must be exactly the model's: that is the contract
   checkpoints rely on. */
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static int fail(const char *msg) {
    fprintf(stderr, "gpt_driver: %s\n", msg);
    return 1;
}

int main(int argc, char **argv) {
    mt_err err;
    mt_safetensors in;
    int rc = parity_open(argc, argv, &in);
    if (rc) return rc;
    const char *json = mt_st_meta(&in, "config");
    mt_gpt_config cfg;
    if (!json) return fail("no 'config' in the metadata");
    if (mt_model_config_from_json(&mt_gpt_type, json, &cfg, &err) != MT_OK) return fail(err.msg);
    mt_gpt m;
    if (mt_gpt_build(&m, &cfg, &err) != MT_OK) return fail(err.msg);
    int B = (int)parity_opt(&in, "B"), T = (int)parity_opt(&in, "T"), n_named = 0;
    for (int i = 0; i < m.P.n; i++) {
        const mt_param *e = &m.P.p[i];
        const mt_st_entry *t = mt_st_find(&in, e->name);
        char msg[256];
        snprintf(msg, sizeof msg, "parameter %s missing or not of %zu elements", e->name, e->n);
        if (!t || t->n != e->n) return fail(msg);
        memcpy(m.P.data + e->offset, t->data, e->n * sizeof(float));
        n_named++;
    }
    if (n_named + 2 != in.n) return fail("the file holds tensors the model does not have");
    const mt_st_entry *ti = mt_st_find(&in, "ids"), *tt = mt_st_find(&in, "targets");
    if (!ti || !tt || ti->n != (size_t)B * T || tt->n != ti->n) return fail("ids/targets");
    int *ids = malloc(ti->n * sizeof(int)), *targets = malloc(ti->n * sizeof(int));
    for (size_t i = 0; i < ti->n; i++) ids[i] = (int)ti->data[i], targets[i] = (int)tt->data[i];

    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)256 << 20, 1, NULL) == MT_OK, "parity: no arena");
    mt_tensor *loss = mt_gpt_loss(&c, &m, ids, targets, B, T);
    mt_backward(&c, loss);
    c.grad_enabled = false;
    mt_tensor *logits = mt_gpt_forward(&c, &m, ids, B, T);

    mt_st_item *items = calloc((size_t)m.P.n + 2, sizeof *items);
    char(*names)[128] = calloc((size_t)m.P.n, sizeof *names);
    int n = 0;
    items[n++] = (mt_st_item){"logits", logits->ndim, logits->shape, logits->data};
    items[n++] = (mt_st_item){"loss", 1, loss->shape, loss->data};
    for (int i = 0; i < m.P.n; i++) {
        if (m.P.p[i].role == MT_ROLE_BUFFER) continue;
        snprintf(names[i], sizeof names[i], "grad.%s", m.P.p[i].name);
        items[n++] = (mt_st_item){names[i], m.P.p[i].ndim, m.P.p[i].shape,
                                  m.P.grad + m.P.p[i].offset};
    }
    rc = mt_st_save(argv[2], n, items, 0, NULL, NULL, &err) == MT_OK ? 0 : fail(err.msg);
    free(items);
    free(names);
    free(ids);
    free(targets);
    mt_ctx_free(&c);
    mt_gpt_free(&m);
    mt_st_free(&in);
    return rc;
}
