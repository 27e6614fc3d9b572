/* Gradient accumulation (mt_train_cfg.grad_accum): a step of K micro-batches of B rows has the
   loss and gradient of one batch of K B rows, for the GPT (text), the ViT (images) and the
   encoder-decoder (G2P, whose loss is a mean over target tokens), with 1 and 2 replicas and in
   bf16 where the machine has it. The data are the same (the task draws a step's K B rows at
   once); only the order of float32 sums differs: each replica's gradient buffer adds K backward
   passes of B / replicas rows where one pass had K B / replicas, and the loss K partial means.
   Tolerance: those reorderings change a gradient element by a few float32 roundings of the
   largest partial sums: measured at most 2.3e-7 of max |g| in the first step (the loss 6e-8);
   1e-5 (1e-6 for the loss) is well above that and far below what a wrong weight gives (a
   micro-batch missed or counted twice: 1 / K of the gradient; a missing 1 / K: K - 1 times it).
   The second step's gradient carries the first one's differences through an AdamW update:
   measured 9e-7, tolerance 1e-4; in bf16 a weight that moved by an ulp can round to the next
   bf16 value (2^-8 relative), measured 6.5e-5, tolerance 1e-3. A gradient not zeroed between
   steps would be off by 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_accum_XXXXXX";

typedef struct {
    const char *name;
    const mt_model_type *type;
    const void *model_cfg;
    mt_data_cfg data;
} setup;

/* Two steps of B rows x K micro-batches: the loss and gradient of each (no clipping, so that the
   update sees the gradient as it is); false when the trainer cannot start. */
static bool two_steps(const setup *s, int B, int K, int replicas, int precision, double loss[2],
                      float *grad[2], size_t *n) {
    mt_train_cfg tc = {.model = s->type,
                       .model_cfg = s->model_cfg,
                       .data = s->data,
                       .seed = 5,
                       .steps = 2,
                       .batch = B,
                       .grad_accum = K,
                       .replicas = replicas,
                       .precision = precision};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    mt_optim_config oc = mt_optim_defaults();
    oc.kind = MT_OPTIM_ADAMW;
    oc.sched.lr = 1e-2f;
    mt_trainer tr;
    mt_err e;
    if (mt_trainer_init(&tr, &tc, &oc, &e) != MT_OK) {
        CHECK(0, "%s: trainer: %s", s->name, e.msg);
        return false;
    }
    tr.keep_grad = true;
    for (int i = 0; i < 2; i++) {
        mt_step_stats st;
        mt_trainer_step(&tr, &st);
        CHECK(st.finite, "%s: step %d is not finite", s->name, i + 1);
        loss[i] = st.loss;
        grad[i] = malloc(tr.P->total * sizeof(float));
        memcpy(grad[i], tr.P->grad, tr.P->total * sizeof(float));
    }
    *n = tr.P->total;
    mt_trainer_free(&tr);
    return true;
}

/* One batch of KB rows against K micro-batches of B, for each split and replica count. */
static void compare(const setup *s, int KB, const int *Ks, int n_K, int precision) {
    double ref_loss[2], loss[2];
    float *ref[2], *g[2];
    size_t n;
    if (!two_steps(s, KB, 1, 1, precision, ref_loss, ref, &n)) return;
    for (int i = 0; i < n_K; i++)
        for (int replicas = 1; replicas <= 2; replicas++) {
            int K = Ks[i];
            if (!two_steps(s, KB / K, K, replicas, precision, loss, g, &n)) continue;
            for (int t = 0; t < 2; t++) {
                double lerr = fabs(loss[t] - ref_loss[t]) / fabs(ref_loss[t]);
                double gerr = max_rel_err(g[t], ref[t], n);
                double tol = t == 0 ? 1e-5 : precision == MT_BF16 ? 1e-3 : 1e-4;
                CHECK(lerr <= 1e-6 && gerr <= tol,
                      "%s%s: %d x %d rows, %d replicas, step %d: loss %.9g against %.9g (%.2g), "
                      "gradient relative error %.3g",
                      s->name, precision == MT_BF16 ? " bf16" : "", K, KB / K, replicas, t + 1,
                      loss[t], ref_loss[t], lerr, gerr);
                free(g[t]);
            }
        }
    free(ref[0]);
    free(ref[1]);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    mt_set_threads(2);
    mt_err e;
    bool bf16 = mt_bf16_check(&e) == MT_OK;
    const int K8[] = {2, 4, 8}, K4[] = {2, 4};

    mt_gpt_config gc = mt_gpt_config_default();
    gc.stack.n_layer = 2, gc.stack.n_head = 2, gc.stack.n_embd = 16, gc.n_ctx = 16;
    setup gpt = {"gpt",
                 &mt_gpt_type,
                 &gc,
                 {.path = "data/tinyshakespeare.txt", .val_fraction = 0.1, .eval_batches = 1}};
    compare(&gpt, 8, K8, 3, MT_FP32);
    if (bf16) compare(&gpt, 8, K8, 1, MT_BF16);

    mt_vit_config vc = mt_vit_config_default();
    vc.stack.n_layer = 1, vc.stack.n_head = 2, vc.stack.n_embd = 16;
    setup vit = {"vit",
                 &mt_vit_type,
                 &vc,
                 {.path = "data/mnist", .val_fraction = 0.1, .eval_batches = 1}};
    vit.data.resize = true; /* ./train's defaults */
    if (access("data/mnist/t10k-images-idx3-ubyte.gz", R_OK) == 0) compare(&vit, 8, K4, 2, MT_FP32);

    mt_encdec_config ec = mt_encdec_config_default();
    ec.enc_layers = ec.dec_layers = 1, ec.stack.n_head = 2, ec.stack.n_embd = 16;
    const char *dict = test_write_dict(dir, 200);
    CHECK(dict != NULL, "cannot write the dictionary in %s", dir);
    setup encdec = {"encdec", &mt_encdec_type, &ec, {.val_fraction = 0.1, .eval_batches = 1}};
    snprintf(encdec.data.path, sizeof encdec.data.path, "%s", dict ? dict : "");
    if (dict) compare(&encdec, 8, K8, 3, MT_FP32);

    CHECK(test_remove_dir(dir) == 0, "cannot remove %s", dir);
    return check_finish("test_accum");
}
