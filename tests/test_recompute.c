/* Activation recomputation (mt_recompute, ./train --recompute block): two training steps of the
   GPT (text), the ViT (images) and the encoder-decoder (G2P, whose decoder blocks also read the
   encoder's output), for every placement and every norm the model accepts, with dropout, give
   the bits of the same steps without it: the loss, every gradient, the weights after the
   updates and BatchNorm's running statistics (updated once, not again by the recomputation);
   with 2 replicas (1 with BatchNorm) and with 1 (every op split across the threads), and in
   bf16 where the machine has it; with the value residual, whose later blocks read the first's
   values. And the step arena's peak falls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_recompute_XXXXXX";

typedef struct {
    const char *name;
    const mt_model_type *type;
    void *model_cfg;
    mt_stack_config *stack; /* inside model_cfg */
    mt_data_cfg data;
} setup;

typedef struct {
    double loss[2];
    float *grad[2], *weights; /* after each step; after the second update */
    size_t n, peak;
} run;

/* Two steps with keep_grad; false when the model refuses the config (a norm it cannot take). */
static bool two_steps(const setup *s, bool recompute, int replicas, int precision, run *r) {
    mt_train_cfg tc = {.model = s->type,
                       .model_cfg = s->model_cfg,
                       .data = s->data,
                       .seed = 11,
                       .steps = 2,
                       .batch = 4,
                       .replicas = replicas,
                       .precision = precision,
                       .recompute = recompute ? MT_RECOMPUTE_BLOCK : MT_RECOMPUTE_NONE};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    mt_optim_config oc = mt_optim_defaults();
    oc.kind = MT_OPTIM_ADAMW;
    if (s->type == &mt_gpt_type && ((const mt_gpt_config *)s->model_cfg)->arch == MT_ARCH_NGPT)
        oc.weight_decay = 0; /* refused on its unit matrices */
    oc.sched.lr = 1e-2f;
    mt_trainer tr;
    mt_err e;
    if (mt_trainer_init(&tr, &tc, &oc, &e) != MT_OK) return false;
    tr.keep_grad = true;
    r->n = tr.P->total;
    for (int i = 0; i < 2; i++) {
        mt_step_stats st;
        mt_trainer_step(&tr, &st);
        r->loss[i] = st.loss;
        r->grad[i] = malloc(r->n * sizeof(float));
        memcpy(r->grad[i], tr.P->grad, r->n * sizeof(float));
    }
    r->weights = malloc(r->n * sizeof(float));
    memcpy(r->weights, tr.P->data, r->n * sizeof(float)); /* BatchNorm's statistics too */
    r->peak = tr.ctx.arena.peak;
    mt_trainer_free(&tr);
    return true;
}

static void run_free(run *r) { free(r->grad[0]), free(r->grad[1]), free(r->weights); }

/* With and without recomputation, the same bits; returns false when the model refused. */
static bool compare(const setup *s, int replicas, int precision, const char *what) {
    run a, b;
    if (!two_steps(s, false, replicas, precision, &a)) return false;
    CHECK(two_steps(s, true, replicas, precision, &b), "%s %s: refused with recomputation", s->name,
          what);
    bool same = a.loss[0] == b.loss[0] && a.loss[1] == b.loss[1];
    for (int i = 0; i < 2; i++) same &= memcmp(a.grad[i], b.grad[i], a.n * sizeof(float)) == 0;
    CHECK(same && memcmp(a.weights, b.weights, a.n * sizeof(float)) == 0,
          "%s %s, %d replicas%s: recomputed steps differ (losses %.9g %.9g against %.9g %.9g)",
          s->name, what, replicas, precision == MT_BF16 ? ", bf16" : "", b.loss[0], b.loss[1],
          a.loss[0], a.loss[1]);
    CHECK(b.peak < a.peak, "%s %s: the arena's peak %zu with recomputation, %zu without", s->name,
          what, b.peak, a.peak);
    run_free(&a), run_free(&b);
    return true;
}

/* Every placement and norm (those the model refuses are skipped: bn and in for causal models,
   mixln and dsl for the encoder-decoder; at least one per placement must run), the default
   replicas and 1. */
static void every_block(const setup *s) {
    for (int p = 0; p < MT_PLACEMENTS.n; p++) {
        if (s->type == &mt_encdec_type && (p == MT_PLACE_MIXLN || p == MT_PLACE_DSL))
            continue; /* refused by the encoder-decoder (they count one stack's blocks) */
        int ran = 0;
        for (int k = 0; k < MT_NORMS.n; k++) {
            char what[96];
            snprintf(what, sizeof what, "%s %s", MT_PLACEMENTS.items[p].name,
                     MT_NORMS.items[k].name);
            s->stack->placement = (mt_placement)p;
            s->stack->norm = mt_norm_default((mt_norm_kind)k);
            s->stack->norm.gn_groups = 4; /* of n_embd 16 */
            bool causal = s->type != &mt_vit_type, ok = compare(s, 0, MT_FP32, what);
            bool dyt_deepnorm = p == MT_PLACE_DEEPNORM && (k == MT_NORM_DYT || k == MT_NORM_DERF);
            CHECK(ok || dyt_deepnorm || (causal && (k == MT_NORM_BN || k == MT_NORM_IN)),
                  "%s %s: refused", s->name, what);
            ran += ok;
            if (p == 0) compare(s, 1, MT_FP32, what);
        }
        CHECK(ran > 0, "%s: no norm ran with placement %s", s->name, MT_PLACEMENTS.items[p].name);
    }
    s->stack->placement = MT_PLACE_PRE;
    s->stack->norm = mt_norm_default(MT_NORM_LN);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    mt_set_threads(2);
    mt_err e;
    char text[300];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    FILE *f = fopen(text, "wb"), *src = fopen("data/tinyshakespeare.txt", "rb");
    CHECK(f && src, "cannot copy data/tinyshakespeare.txt to %s", text);
    if (!f || !src) return check_finish("test_recompute");
    char buf[20000];
    fwrite(buf, 1, fread(buf, 1, sizeof buf, src), f);
    fclose(f), fclose(src);

    mt_gpt_config gc = mt_gpt_config_default();
    gc.stack.n_layer = 3, gc.stack.n_head = 2, gc.stack.n_embd = 16, gc.n_ctx = 16;
    gc.stack.dropout = 0.1f;
    setup gpt = {"gpt", &mt_gpt_type, &gc, &gc.stack, {.val_fraction = 0.1}};
    snprintf(gpt.data.path, sizeof gpt.data.path, "%s", text);
    gpt.data.eval_batches = 1;
    every_block(&gpt);
    gc.arch = MT_ARCH_LLAMA; /* RoPE, SwiGLU, RMSNorm, grouped-query attention */
    gc.stack.n_kv_head = 1;
    CHECK(compare(&gpt, 2, MT_FP32, "llama"), "gpt llama: refused");
    gc.arch = MT_ARCH_NGPT, gc.stack.n_kv_head = 0; /* nGPT's residual and scalings */
    CHECK(compare(&gpt, 2, MT_FP32, "ngpt"), "gpt ngpt: refused");
    CHECK(compare(&gpt, 1, MT_FP32, "ngpt"), "gpt ngpt, 1 replica: refused");
    gc.arch = MT_ARCH_GPT; /* the trainer validated copies: gc is as set */
    if (mt_bf16_check(&e) == MT_OK) CHECK(compare(&gpt, 2, MT_BF16, "pre ln"), "gpt bf16: refused");
    /* the value residual: later blocks' replays read the first block's values, kept */
    gc.stack.attn.value_residual = MT_VALUE_RESIDUAL_LEARNED;
    CHECK(compare(&gpt, 2, MT_FP32, "value residual"), "gpt value residual: refused");
    gc.stack.attn.value_residual = MT_VALUE_RESIDUAL_NONE;
    /* value embeddings: the rows gathered before the blocks, read by their replays */
    snprintf(gc.value_embeds, sizeof gc.value_embeds, "0,-1");
    CHECK(compare(&gpt, 2, MT_FP32, "value embeds"), "gpt value embeds: refused");
    gc.value_embeds[0] = 0;

    mt_vit_config vc = mt_vit_config_default();
    vc.stack.n_layer = 2, vc.stack.n_head = 2, vc.stack.n_embd = 16;
    vc.stack.dropout = 0.1f;
    setup vit = {"vit", &mt_vit_type, &vc, &vc.stack, {.path = "data/mnist", .val_fraction = 0.1}};
    vit.data.eval_batches = 1;
    vit.data.resize = true; /* ./train's defaults */
    if (access("data/mnist/t10k-images-idx3-ubyte.gz", R_OK) == 0) every_block(&vit);

    mt_encdec_config ec = mt_encdec_config_default();
    ec.enc_layers = ec.dec_layers = 2, ec.stack.n_head = 2, ec.stack.n_embd = 16;
    ec.stack.dropout = 0.1f;
    const char *dict = test_write_dict(dir, 120);
    CHECK(dict != NULL, "cannot write the dictionary in %s", dir);
    setup encdec = {"encdec", &mt_encdec_type, &ec, &ec.stack, {.val_fraction = 0.1}};
    snprintf(encdec.data.path, sizeof encdec.data.path, "%s", dict ? dict : "");
    encdec.data.eval_batches = 1;
    if (dict) every_block(&encdec);
    ec.stack.attn.value_residual = MT_VALUE_RESIDUAL_HALF; /* the encoder's and the decoder's */
    if (dict)
        CHECK(compare(&encdec, 2, MT_FP32, "value residual"), "encdec value residual: refused");

    CHECK(test_remove_dir(dir) == 0, "cannot remove %s", dir);
    return check_finish("test_recompute");
}
