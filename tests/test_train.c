/* GPT checkpoints (bit-exact round trip, errors naming the tensor), the scoring windows and data
   parallelism across threads (mt_replicas). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_train_XXXXXX";

static void test_checkpoint(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    mt_gpt_config c = mt_gpt_config_default();
    c.stack.n_layer = 2;
    c.stack.n_embd = 16;
    c.n_ctx = 8;
    c.n_vocab = 5;
    c.stack.norm = mt_norm_default(MT_NORM_RMS);
    c.stack.placement = MT_PLACE_POST;
    c.tied = false;
    mt_gpt m, *back;
    mt_model *loaded;
    mt_err e;
    CHECK(mt_gpt_build(&m, &c, &e) == MT_OK, "build: %s", e.msg);
    mt_rng r;
    mt_rng_seed(&r, 9);
    mt_params_initialize(&m.P, &r);
    m.P.data[m.P.p[0].offset] = -0.0f;
    mt_tok_free(&m.tok);
    CHECK(mt_tok_build_char(&m.tok, "abcde", 5, &e) == MT_OK, "tokenizer");
    mt_ckpt_state st = {123, {{1, 2, 3, 4}}, {{5, 6, 7, 0xffffffffffffffffULL}}}, st2;
    CHECK(mt_ckpt_save(path, &m.base, &st, "lr = 0.5\n", &e) == MT_OK, "save: %s", e.msg);
    char *options;
    CHECK(mt_ckpt_load(path, &loaded, &st2, &options, &e) == MT_OK, "load: %s", e.msg);
    back = mt_gpt_of(loaded);
    CHECK(back && back->P.total == m.P.total &&
              memcmp(back->P.data, m.P.data, m.P.total * sizeof(float)) == 0,
          "weights are not bit-exact");
    char *j1 = mt_model_config_json(&m.base), *j2 = mt_model_config_json(loaded);
    CHECK(strcmp(j1, j2) == 0, "config: %s vs %s", j1, j2);
    const mt_tokenizer *tok2 = &back->tok;
    CHECK(tok2->kind == MT_TOK_CHAR && tok2->n_vocab == 5 && tok2->chars[4] == 'e', "tokenizer");
    CHECK(memcmp(&st, &st2, sizeof st) == 0, "state: step %ld", st2.step);
    CHECK(strcmp(options, "lr = 0.5\n") == 0, "options");
    free(j1);
    free(j2);
    free(options);
    mt_model_free(loaded);

    /* a tokenizer that does not fit the model's vocabulary */
    mt_tokenizer tok = m.tok;
    mt_tok_init_byte(&m.tok);
    CHECK(mt_ckpt_save(path, &m.base, &st, "", &e) == MT_OK, "save");
    m.tok = tok;
    CHECK(mt_ckpt_load(path, &loaded, NULL, NULL, &e) == MT_EFORMAT &&
              strstr(e.msg, "n_vocab 5, the tokenizer 256"),
          "vocab mismatch: %s", e.msg);
    /* weights of another model under this config: the error names the tensor */
    mt_gpt other;
    c.stack.n_embd = 8;
    CHECK(mt_gpt_build(&other, &c, &e) == MT_OK, "build");
    mt_tok_free(&other.tok);
    CHECK(mt_tok_build_char(&other.tok, "abcde", 5, &e) == MT_OK, "tokenizer");
    mt_safetensors s;
    CHECK(mt_ckpt_save(path, &other.base, &st, "", &e) == MT_OK, "save");
    CHECK(mt_st_load(path, &s, &e) == MT_OK, "st");
    char *wrong = mt_model_config_json(&m.base);
    const char *keys[] = {"config", "tokenizer"}, *vals[] = {wrong, mt_st_meta(&s, "tokenizer")};
    CHECK(mt_ckpt_save_params(path, &other.P, 2, keys, vals, &e) == MT_OK, "save");
    CHECK(mt_ckpt_load(path, &loaded, NULL, NULL, &e) == MT_EFORMAT &&
              strstr(e.msg, "'tok_emb.weight' has shape (5, 8), the model needs (5, 16)"),
          "shape mismatch: %s", e.msg);
    free(wrong);
    mt_st_free(&s);
    mt_gpt_free(&other);
    mt_gpt_free(&m);
    unlink(path);
}

static void test_score_windows(void) {
    mt_gpt_config c = mt_gpt_config_default();
    c.stack.n_layer = 1;
    c.stack.n_embd = 8;
    c.stack.n_head = 2;
    c.n_ctx = 12;
    c.n_vocab = 7;
    mt_gpt m;
    mt_err e;
    CHECK(mt_gpt_build(&m, &c, &e) == MT_OK, "build: %s", e.msg);
    mt_rng r;
    mt_rng_seed(&r, 2);
    mt_params_initialize(&m.P, &r);
    mt_ctx ctx;
    CHECK(mt_ctx_init(&ctx, mt_model_arena_bytes(&mt_gpt_type, &m.cfg, 1, false), 0, &e) == MT_OK,
          "ctx");
    uint16_t tok[295];
    for (int i = 0; i < 295; i++) tok[i] = (uint16_t)((i * 3 + i / 5) % 7);
    /* windows of 13: 13 + 13 + 13 + 13 + 1 -> 12 + 12 + 12 + 12 predicted, the lone last token
       predicts nothing */
    double nll, nll1, nll2 = 0;
    long count, bytes;
    CHECK(mt_gpt_score(&m, tok, 53, MT_FP32, &nll, &count, &bytes, &e) == MT_OK, "score: %s",
          e.msg);
    CHECK(count == 48 && bytes == 48, "53 tokens: %ld predicted (%ld bytes), expected 48", count,
          bytes);
    /* 295 tokens: 22 windows of 13 and one of 9, more than a batch; at 1 and 2 threads the same
       bits, and the windows' losses one by one to float rounding */
    int threads = mt_threads();
    mt_set_threads(1);
    CHECK(mt_gpt_score(&m, tok, 295, MT_FP32, &nll1, &count, &bytes, &e) == MT_OK, "score: %s",
          e.msg);
    mt_set_threads(2);
    CHECK(mt_gpt_score(&m, tok, 295, MT_FP32, &nll, &count, &bytes, &e) == MT_OK, "score: %s",
          e.msg);
    mt_set_threads(threads);
    CHECK(count == 22 * 12 + 8, "295 tokens: %ld predicted, expected 272", count);
    CHECK(nll == nll1, "score at 2 threads %.17g, at 1 %.17g", nll, nll1);
    for (int w = 0; w < 23; w++) {
        int T = w < 22 ? 12 : 8, ids[12], tg[12];
        for (int t = 0; t < T; t++) ids[t] = tok[13 * w + t], tg[t] = tok[13 * w + t + 1];
        mt_ctx_reset(&ctx);
        nll2 += (double)mt_gpt_loss(&ctx, &m, &m.P, ids, tg, 1, T, MT_CE_PLAIN)->data[0] * T;
    }
    CHECK(fabs(nll - nll2) < 1e-6 * nll2, "score %.9g, windows %.9g", nll, nll2);
    mt_ctx_free(&ctx);
    mt_gpt_free(&m);
}

/* Replicas on rows [lo, lo + rows) of a batch of B: the loss and gradients (their buffers summed,
   mt_grads_sum) of one context on those rows weighted rows / B, to float rounding, with every
   replica (2, 3 of 5 rows: uneven slices; 4 replicas on 3 rows: fewer replicas run); the sum
   leaves the other replicas' gradients zeroed; two runs give the same bits; two passes before
   the sum give twice the gradient (to rounding: each pass adds to what the buffers hold). */
static void test_replicas(void) {
    enum { B = 5, T = 8 };
    mt_gpt_config c = mt_gpt_config_default();
    c.stack.n_layer = 2, c.stack.n_embd = 16, c.stack.n_head = 2, c.n_ctx = T, c.n_vocab = 11;
    mt_gpt m;
    mt_err e;
    CHECK(mt_gpt_build(&m, &c, &e) == MT_OK, "build: %s", e.msg);
    mt_rng r;
    mt_rng_seed(&r, 4);
    mt_params_initialize(&m.P, &r);
    int ids[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++)
        ids[i] = (int)mt_rng_below(&r, 11), targets[i] = (int)mt_rng_below(&r, 11);
    mt_gpt_batch b = {&m, ids, targets, T};
    size_t n = m.P.total;
    float *want = malloc(n * sizeof *want), *first = malloc(n * sizeof *first);
    mt_ctx ctx;
    CHECK(mt_ctx_init(&ctx, mt_model_arena_bytes(&mt_gpt_type, &c, B, true), 1, &e) == MT_OK,
          "ctx: %s", e.msg);
    const struct { int lo, rows, replicas; } cases[] = {{0, 5, 2}, {0, 5, 3}, {2, 3, 4}, {0, 5, 1}};
    for (int k = 0; k < 4; k++) {
        int lo = cases[k].lo, rows = cases[k].rows;
        mt_params_zero_grad(&m.P);
        mt_ctx_reset(&ctx);
        float w = (float)rows / B;
        mt_tensor *l = mt_gpt_rows_loss(&ctx, &m.P, lo, rows, &b);
        double want_loss = (double)l->data[0] * w;
        mt_backward_from(&ctx, l, &w);
        memcpy(want, m.P.grad, n * sizeof *want);
        mt_replicas R;
        CHECK(mt_replicas_init(&R, cases[k].replicas, &m.P,
                               mt_model_arena_bytes(&mt_gpt_type, &c, B, true), 7, &e) == MT_OK,
              "replicas: %s", e.msg);
        for (int run = 0; run < 2; run++) {
            mt_params_zero_grad(&m.P);
            double loss = mt_replicas_backward(&R, &ctx, &m.P, lo, rows, B, mt_gpt_rows_loss, &b);
            mt_grads G = mt_replicas_grads(&R);
            mt_grads_sum(&G, n);
            CHECK(fabs(loss - want_loss) < 1e-6 * want_loss, "%d replicas: loss %.9g, want %.9g",
                  R.n, loss, want_loss);
            double err = max_rel_err(m.P.grad, want, n);
            CHECK(err < 1e-5, "%d replicas of rows [%d, %d): gradient relative error %g", R.n, lo,
                  lo + rows, err);
            if (run == 0) memcpy(first, m.P.grad, n * sizeof *first);
            else
                CHECK(memcmp(first, m.P.grad, n * sizeof *first) == 0,
                      "%d replicas: two runs differ", R.n);
            for (int q = 0; q + 1 < R.n; q++)
                for (size_t i = 0; i < n; i++)
                    if (R.P[q].grad[i] != 0) {
                        CHECK(false, "replica %d: gradient %zu left at %g", q + 1, i,
                              R.P[q].grad[i]);
                        break;
                    }
        }
        /* two backward passes before the sum accumulate (micro-batches): twice the gradient */
        mt_params_zero_grad(&m.P);
        for (int pass = 0; pass < 2; pass++)
            mt_replicas_backward(&R, &ctx, &m.P, lo, rows, B, mt_gpt_rows_loss, &b);
        mt_grads G = mt_replicas_grads(&R);
        mt_grads_sum(&G, n);
        for (size_t i = 0; i < n; i++) want[i] = 2 * first[i];
        double err2 = max_rel_err(m.P.grad, want, n);
        CHECK(err2 < 1e-5,
              "%d replicas: two backward passes: relative error %g against twice "
              "the gradient",
              R.n, err2);
        mt_replicas_free(&R);
    }
    free(want);
    free(first);
    mt_ctx_free(&ctx);
    mt_gpt_free(&m);
}

/* mt_trainer_eval on the replicas' threads (the GPT's eval_concurrent; 2 replicas, 5 rows in
   slices of 3 and 2; 7 rows: two rounds of slices) gives the bits of the serial evaluation: every
   slice in replica 0's context, one after another, its sums added in slice order. */
static void test_eval_replicas(void) {
    for (int batch = 5; batch <= 7; batch += 2) {
        mt_train_cfg tc = {.model = &mt_gpt_type,
                           .data = {.path = "data/tinyshakespeare.txt",
                                    .val_fraction = 0.1,
                                    .eval_batches = 3},
                           .seed = 3,
                           .steps = 1,
                           .batch = batch,
                           .replicas = 2};
        snprintf(tc.out, sizeof tc.out, "%s", dir);
        mt_gpt_config mc = mt_gpt_config_default();
        mc.stack.n_layer = 2, mc.stack.n_head = 2, mc.stack.n_embd = 16, mc.n_ctx = 16;
        mt_optim_config oc = mt_optim_defaults();
        mt_trainer tr;
        mt_err e;
        tc.model_cfg = &mc;
        if (mt_trainer_init(&tr, &tc, &oc, &e) != MT_OK) {
            CHECK(0, "trainer: %s", e.msg);
            return;
        }
        if (batch == 7) tr.slice_rows = 2; /* 4 slices: two rounds of the 2 replicas */
        CHECK(tr.replicas.n == 2, "batch %d: %d replicas, want 2", batch, tr.replicas.n);
        mt_step_stats st;
        mt_trainer_step(&tr, &st); /* weights away from init */
        double got = mt_trainer_eval(&tr), sum = 0, rows = 0;
        const mt_task_type *task = tr.task->type;
        tr.ctx.training = tr.ctx.grad_enabled = false;
        for (int i = 0; i < task->eval_count(tr.task); i++) {
            int n = task->eval_draw(tr.task, i);
            rows += n;
            for (int at = 0; at < n; at += tr.slice_rows) {
                mt_eval_sums part = {0};
                mt_ctx_reset(&tr.ctx);
                task->eval_rows(&tr.ctx, tr.model, tr.task, at,
                                n - at < tr.slice_rows ? n - at : tr.slice_rows, &part);
                sum += part.loss;
            }
        }
        CHECK(got == sum / rows, "batch %d: evaluation on replicas %.17g, serial %.17g", batch, got,
              sum / rows);
        mt_trainer_free(&tr);
    }
}

enum { H = 8, QK_WARM = 20 }; /* test_qk_clip_split's heads (2 blocks of 4), steps before */

/* QK_WARM steps of a 2-layer, 4-head GPT in batch x accum rows on `replicas` (recompute:
   --recompute block) with no head clipped, then one with --qk-clip tau: the heads it clipped; its
   maxima (H) into smax and, with w, the n weights after it into *w (malloc'd). */
static int qk_clip_step(double tau, int batch, int accum, int replicas, bool recompute, float *smax,
                        float **w, size_t *n) {
    mt_train_cfg tc = {.model = &mt_gpt_type,
                       .data = {.path = "data/tinyshakespeare.txt",
                                .val_fraction = 0.1,
                                .eval_batches = 1},
                       .seed = 3,
                       .steps = QK_WARM + 1,
                       .batch = batch,
                       .grad_accum = accum,
                       .replicas = replicas,
                       .recompute = recompute ? MT_RECOMPUTE_BLOCK : MT_RECOMPUTE_NONE};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    mt_gpt_config mc = mt_gpt_config_default();
    mc.stack.n_layer = 2, mc.stack.n_head = 4, mc.stack.n_embd = 16, mc.n_ctx = 16;
    mt_optim_config oc = mt_optim_defaults();
    oc.qk_clip = tau;
    mt_trainer tr;
    mt_err e;
    tc.model_cfg = &mc;
    if (mt_trainer_init(&tr, &tc, &oc, &e) != MT_OK) {
        CHECK(0, "trainer: %s", e.msg);
        return -1;
    }
    CHECK(tr.qk.heads == H && tr.replicas.n == replicas, "%d heads, %d replicas", tr.qk.heads,
          tr.replicas.n);
    mt_step_stats st;
    tr.qk.tau = 1e30f; /* the weights away from init, where a logit's largest is a token pair's */
    for (int i = 0; i < QK_WARM; i++) mt_trainer_step(&tr, &st);
    tr.qk.tau = (float)tau;
    mt_trainer_step(&tr, &st);
    if (smax) memcpy(smax, tr.qk_max, H * sizeof *smax);
    if (w) {
        *n = tr.P->total, *w = malloc(*n * sizeof **w);
        memcpy(*w, tr.P->data, *n * sizeof **w);
    }
    float top = -INFINITY;
    for (int h = 0; h < H; h++) top = tr.qk_max[h] > top ? tr.qk_max[h] : top;
    CHECK(st.qk_logit == top, "the step's largest logit %g, of its heads %g", st.qk_logit, top);
    mt_trainer_free(&tr);
    return st.qk_clipped;
}

/* --qk-clip in the trainer: a step's maxima are over all of its rows however the step splits
   them: 8 rows at once on one replica, and 2 micro-batches of 4 on 2 replicas (slices of 2 rows)
   under --recompute block give the same maxima (to rounding: the products see other row counts),
   the same heads clipped and the same weights after the step; a tau between the maxima clips
   the heads above it only. */
static void test_qk_clip_split(void) {
    float want[H], got[H];
    CHECK(qk_clip_step(1e30, 8, 1, 1, false, want, NULL, NULL) == 0, "tau 1e30 clipped a head");
    float s[H];
    memcpy(s, want, sizeof s);
    for (int i = 0; i < H; i++) /* sorted: tau in the middle */
        for (int j = i + 1; j < H; j++)
            if (s[j] < s[i]) {
                float t = s[i];
                s[i] = s[j], s[j] = t;
            }
    CHECK(s[H / 2] > 1.01f * s[H / 2 - 1], "the maxima %g and %g too close for a tau between",
          s[H / 2 - 1], s[H / 2]);
    double tau = (s[H / 2 - 1] + s[H / 2]) / 2;
    size_t n = 0;
    float *w1 = NULL, *w2 = NULL;
    int c1 = qk_clip_step(tau, 8, 1, 1, false, want, &w1, &n);
    int c2 = qk_clip_step(tau, 4, 2, 2, true, got, &w2, &n);
    CHECK(c1 == H / 2 && c2 == H / 2, "tau %g: %d and %d heads clipped, want %d", tau, c1, c2,
          H / 2);
    CHECK(max_rel_err(got, want, H) < 1e-5,
          "the maxima of 2 x 4 rows on 2 replicas: relative error %g against 8 rows at once",
          max_rel_err(got, want, H));
    CHECK(w1 && w2 && max_rel_err(w2, w1, n) < 1e-4,
          "the weights after the split step: relative error %g", max_rel_err(w2, w1, n));
    free(w1);
    free(w2);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    mt_set_threads(2);
    test_checkpoint();
    test_score_windows();
    test_replicas();
    test_eval_replicas();
    test_qk_clip_split();
    rmdir(dir);
    return check_finish("test_train");
}
