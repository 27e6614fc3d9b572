/* Parity driver for the GPT (tests/parity/test_gpt.py). IN.safetensors holds every parameter
   under its mt name, "ids" and "targets" (B*T, as floats) and the metadata "config" (the model's
   JSON), "B" and "T". OUT.safetensors gets "logits" (B, T, V), "loss" (1) and "grad.<name>" for
   every trained parameter. The file's names must be exactly the model's: that is the contract
   checkpoints rely on. Optional metadata "precision" = "bf16": the linear layers' products in
   bf16 (tests/parity/test_bf16.py). `gpt_driver --bf16-check` exits 3 when this build or CPU
   has no bf16. Optional metadata "step_lr" and "step_eps": then one AdamW update (betas 0.9,
   0.95, weight decay "step_wd" or none, no clipping; --param's per-tensor scales) from those
   gradients, with what mt_optim_update does after it (nGPT's renormalisation), and
   "step.<name>" every parameter after it
   (tests/parity/test_ngpt.py). Optional metadata "lora_rank", "lora_alpha", "lora_targets":
   LoRA adapters (mt_ckpt_lora, the base frozen) whose A and B the file holds too
   (tests/parity/test_lora.py). Optional metadata "qk_clip" (tau, with "step_lr"): the loss's
   forward feeds QK-Clip's probe (mt_ctx.qk_max), "qk_max" (heads, in table order) its maxima,
   and mt_qk_clip_apply follows the update: "step.<name>" after both, and "qk_max_after" the
   maxima of the loss's forward on the clipped weights (their bf16 copy in bf16) (tests/parity/
   test_qk_clip.py). */
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static int fail(const char *msg) {
    fprintf(stderr, "gpt_driver: %s\n", msg);
    return 1;
}

int main(int argc, char **argv) {
    mt_err err;
    if (argc == 2 && !strcmp(argv[1], "--bf16-check")) { /* exit 3: no bf16 here, and why */
        if (mt_bf16_check(&err) == MT_OK) return 0;
        fprintf(stderr, "%s\n", err.msg);
        return 3;
    }
    mt_safetensors in;
    int rc = parity_open(argc, argv, &in);
    if (rc) return rc;
    mt_model *model = parity_model(&in, &mt_gpt_type, 2);
    if (!model) return 1;
    mt_gpt *m = mt_gpt_of(model);
    int B = (int)parity_opt(&in, "B"), T = (int)parity_opt(&in, "T");
    const mt_st_entry *ti = mt_st_find(&in, "ids"), *tt = mt_st_find(&in, "targets");
    if (!ti || !tt || ti->n != (size_t)B * T || tt->n != ti->n) return fail("ids/targets");
    int *ids = malloc(ti->n * sizeof(int)), *targets = malloc(ti->n * sizeof(int));
    for (size_t i = 0; i < ti->n; i++) ids[i] = (int)ti->data[i], targets[i] = (int)tt->data[i];

    mt_ctx c;
    MT_ASSERT(mt_ctx_init(&c, (size_t)256 << 20, 1, NULL) == MT_OK, "parity: no arena");
    const char *precision = mt_st_meta(&in, "precision");
    if (precision && mt_enum_parse(&MT_PRECISIONS, precision, &c.precision, &err) != MT_OK)
        return fail(err.msg);
    if (c.precision == MT_BF16 &&
        (mt_bf16_check(&err) != MT_OK || mt_params_enable_bf16(&m->P, &err) != MT_OK))
        return fail(err.msg);
    mt_qk_clip qk;
    float *qk_max = parity_qk_probe(&in, &c, &m->P, m->cfg.stack.n_head, &qk);
    mt_tensor *loss = mt_gpt_loss(&c, m, &m->P, ids, targets, B, T, mt_stack_ce(&m->cfg.stack));
    mt_backward(&c, loss);
    c.grad_enabled = false;
    mt_tensor *logits = mt_gpt_forward(&c, m, &m->P, ids, B, T);

    mt_st_item *items = calloc(2 * (size_t)m->P.n + 4, sizeof *items);
    char(*names)[128] = calloc(2 * (size_t)m->P.n, sizeof *names);
    float *grads = malloc(m->P.grad_total * sizeof *grads); /* the step consumes P.grad */
    memcpy(grads, m->P.grad, m->P.grad_total * sizeof *grads);
    int n = 0;
    items[n++] = (mt_st_item){"logits", logits->ndim, logits->shape, logits->data};
    items[n++] = (mt_st_item){"loss", 1, loss->shape, loss->data};
    for (int i = 0; i < m->P.n; i++) {
        if (!mt_param_trained(&m->P.p[i])) continue;
        snprintf(names[i], sizeof names[i], "grad.%s", m->P.p[i].name);
        items[n++] = (mt_st_item){names[i], m->P.p[i].ndim, m->P.p[i].shape,
                                  grads + m->P.p[i].grad_offset};
    }
    if (mt_st_meta(&in, "step_lr")) {
        mt_optim_config oc = mt_optim_defaults();
        oc.kind = MT_OPTIM_ADAMW, oc.beta1 = 0.9, oc.beta2 = 0.95, oc.weight_decay = 0;
        oc.eps = parity_opt(&in, "step_eps");
        if (mt_st_meta(&in, "step_wd")) oc.weight_decay = parity_opt(&in, "step_wd");
        mt_optim o;
        if (mt_optim_init(&o, &oc, &m->P, &err) != MT_OK) return fail(err.msg);
        mt_optim_step(&o, &m->P, parity_opt(&in, "step_lr"));
        mt_optim_free(&o);
        if (qk_max) mt_qk_clip_apply(&qk, &m->P, qk_max, NULL);
        for (int i = 0; i < m->P.n; i++) {
            snprintf(names[m->P.n + i], sizeof names[0], "step.%s", m->P.p[i].name);
            items[n++] = (mt_st_item){names[m->P.n + i], m->P.p[i].ndim, m->P.p[i].shape,
                                      m->P.data + m->P.p[i].offset};
        }
    }
    if (qk_max) items[n++] = (mt_st_item){"qk_max", 1, &qk.heads, qk_max};
    float *qk_after = qk_max && mt_st_meta(&in, "step_lr") ? malloc(qk.heads * sizeof *qk_after)
                                                           : NULL;
    if (qk_after) { /* the probe reads a forward with grad */
        mt_qk_clip_reset(qk_after, qk.heads);
        c.qk_max = qk_after, c.grad_enabled = true;
        mt_gpt_loss(&c, m, &m->P, ids, targets, B, T, mt_stack_ce(&m->cfg.stack));
        items[n++] = (mt_st_item){"qk_max_after", 1, &qk.heads, qk_after};
    }
    rc = mt_st_save(argv[2], n, items, 0, NULL, NULL, &err) == MT_OK ? 0 : fail(err.msg);
    mt_qk_clip_free(&qk);
    free(qk_max);
    free(qk_after);
    free(items);
    free(names);
    free(grads);
    free(ids);
    free(targets);
    mt_ctx_free(&c);
    mt_model_free(model);
    mt_st_free(&in);
    return rc;
}
