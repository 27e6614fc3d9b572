/* The encoder-decoder: parameter names, DeepNorm's encoder-decoder constants and the init of every
   matrix against the formulas, a DeepNorm block's forward against x' = LN(alpha x + F(x)), the
   whole model by finite differences (padded rows, each placement), padding that changes nothing,
   the decoder's KV cache against the full forward, beam search of width 1 against greedy, and
   config errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../src/models/encdec_internal.h"
#include "../src/tasks/task.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static mt_encdec_config small(int N, int M, mt_placement placement) {
    mt_encdec_config g = mt_encdec_config_default();
    g.enc_layers = N, g.dec_layers = M, g.stack.n_head = 2, g.stack.n_embd = 8, g.stack.n_ff = 12;
    g.src_ctx = 6, g.tgt_ctx = 5, g.n_vocab = 11, g.stack.placement = placement;
    return g;
}

/* Names and shapes of every tensor, Pre-LN untied: the fixed list. */
static void test_names(void) {
    mt_encdec_config g = small(2, 1, MT_PLACE_PRE);
    g.tied = false;
    mt_encdec m;
    mt_err e;
    CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    const char *want[] = {"tok_emb.weight",
                          "enc.pos_emb.weight",
                          "dec.pos_emb.weight",
                          "enc.blocks.1.attn_norm.weight",
                          "enc.blocks.1.attn.v_proj.bias",
                          "enc.blocks.1.ffn.fc2.weight",
                          "enc.final_norm.bias",
                          "dec.blocks.0.attn.q_proj.weight",
                          "dec.blocks.0.cross_attn_norm.weight",
                          "dec.blocks.0.cross_attn.k_proj.weight",
                          "dec.blocks.0.cross_attn.out_proj.bias",
                          "dec.blocks.0.ffn_norm.bias",
                          "dec.final_norm.weight",
                          "lm_head.weight"};

    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(mt_params_find(&m.P, want[i]) >= 0, "no tensor %s", want[i]);
    /* per encoder block 2 norms x 2 + 8 linears x 2; per decoder block 3 x 2 + 12 x 2 */
    CHECK(m.P.n == 3 + 2 * 16 + 26 + 2 * 2 + 1, "%d tensors", m.P.n);
    CHECK(m.cfg.stack.n_layer == 3, "n_layer = enc + dec layers: %d", m.cfg.stack.n_layer);
    int q = mt_params_find(&m.P, "dec.pos_emb.weight");
    CHECK(q >= 0 && m.P.p[q].shape[0] == 5 && m.P.p[q].shape[1] == 8, "dec.pos_emb shape");
    mt_encdec_free(&m);
    g = small(2, 1, MT_PLACE_POST);
    CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    CHECK(mt_params_find(&m.P, "enc.final_norm.weight") < 0 &&
              mt_params_find(&m.P, "lm_head.weight") < 0,
          "post, tied: no final norms, no head");
    mt_encdec_free(&m);
    /* Sub-LN and Peri-LN: the cross-attention has its norms like the self-attention */
    g = small(1, 1, MT_PLACE_SUBLN);
    CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    CHECK(mt_params_find(&m.P, "dec.blocks.0.cross_attn.inner_norm.weight") >= 0,
          "subln: cross_attn.inner_norm");
    mt_encdec_free(&m);
    g = small(1, 1, MT_PLACE_PERI);
    CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    CHECK(mt_params_find(&m.P, "dec.blocks.0.cross_attn_out_norm.weight") >= 0,
          "peri: cross_attn_out_norm");
    mt_encdec_free(&m);
}

/* DeepNorm at N = 6, M = 12: the constants from the paper's formulas, and every matrix's std:
   Xavier with gain beta (the encoder's in enc.*, the decoder's in dec.*) for v_proj, out_proj,
   fc1, fc2 of self- and cross-attention and FFN, gain 1 for q_proj and k_proj. */
static void test_deepnorm_init(void) {
    int N = 6, M = 12;
    mt_encdec_config g = small(N, M, MT_PLACE_DEEPNORM);
    g.stack.n_embd = 64, g.stack.n_head = 4, g.stack.n_ff = 128, g.n_vocab = 40;
    mt_encdec m;
    mt_err e;
    CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    double ea = 0.81 * pow(pow(N, 4) * M, 1.0 / 16), eb = 0.87 * pow(pow(N, 4) * M, -1.0 / 16);
    double da = pow(3.0 * M, 0.25), db = pow(12.0 * M, -0.25);
    CHECK(fabs(m.cfg.stack.deepnorm_alpha - ea) < 1e-6 &&
              fabs(m.cfg.stack.deepnorm_beta - eb) < 1e-6,
          "encoder alpha %g beta %g, want %g %g", m.cfg.stack.deepnorm_alpha,
          m.cfg.stack.deepnorm_beta, ea, eb);
    CHECK(fabs(m.cfg.dec_deepnorm_alpha - da) < 1e-6 && fabs(m.cfg.dec_deepnorm_beta - db) < 1e-6,
          "decoder alpha %g beta %g, want %g %g", m.cfg.dec_deepnorm_alpha, m.cfg.dec_deepnorm_beta,
          da, db);
    CHECK(m.layout->enc.block.alpha == m.cfg.stack.deepnorm_alpha &&
              m.layout->dec.block.alpha == m.cfg.dec_deepnorm_alpha,
          "each stack its alpha");
    CHECK(m.cfg.stack.init == MT_SCHEME_DEEPNORM, "deepnorm placement: deepnorm init");
    mt_rng r;
    mt_rng_seed(&r, 5);
    mt_params_initialize(&m.P, &r);
    int checked = 0;
    for (int i = 0; i < m.P.n; i++) {
        const mt_param *p = &m.P.p[i];
        const float *w = m.P.data + p->offset;
        double s = 0, s2 = 0;
        for (size_t j = 0; j < p->n; j++) s += w[j], s2 += (double)w[j] * w[j];
        double std = sqrt(s2 / p->n - (s / p->n) * (s / p->n)), want;
        if (p->ndim != 2 || strstr(p->name, "_emb.")) continue;
        double xavier = sqrt(2.0 / (p->shape[0] + p->shape[1]));
        bool scaled = strstr(p->name, "v_proj") || strstr(p->name, "out_proj") ||
                      strstr(p->name, "fc1") || strstr(p->name, "fc2");
        want = xavier * (scaled ? (strstr(p->name, "enc.") == p->name ? eb : db) : 1.0);
        CHECK(fabs(std / want - 1) < 0.06, "%s: std %.5f, want %.5f", p->name, std, want);
        checked++;
    }
    CHECK(checked == 6 * N + 10 * M, "%d matrices checked", checked);
    mt_encdec_free(&m);
}

/* One DeepNorm encoder block's first sublayer on x: LN(alpha x + Attn(x)), Attn computed by hand
   from the same weights (mt_attention on the projections), alpha on the skip branch. */
static void test_deepnorm_forward(void) {
    mt_encdec_config g = small(2, 3, MT_PLACE_DEEPNORM);
    mt_encdec m;
    mt_err e;
    CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    mt_rng r;
    mt_rng_seed(&r, 9);
    mt_params_initialize(&m.P, &r);
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    int B = 2, T = 4, C = 8;
    mt_tensor *x = mt_tensor_new(&c, 3, (int[]){B, T, C});
    for (size_t i = 0; i < x->n; i++) x->data[i] = mt_rng_normal(&r);
    const mt_stack *st = &m.layout->dec; /* the decoder's: its own alpha */
    const mt_block_params *bp = &st->blocks[0];
    mt_tensor *y = mt_residual(&c, &st->block, &m.P, bp, MT_SUB_ATTN, x, mt_attn_sublayer, NULL);
    mt_tensor *f = mt_attn_sublayer(&c, &st->block, &m.P, bp, x, NULL);
    float alpha = m.cfg.dec_deepnorm_alpha;
    double worst = 0;
    for (int t = 0; t < B * T; t++) { /* LN without affine (weights 1, biases 0 at init) */
        double h[8], mean = 0, var = 0;
        for (int j = 0; j < C; j++) mean += h[j] = alpha * x->data[t * C + j] + f->data[t * C + j];
        mean /= C;
        for (int j = 0; j < C; j++) var += (h[j] - mean) * (h[j] - mean);
        var /= C;
        for (int j = 0; j < C; j++) {
            double want = (h[j] - mean) / sqrt(var + 1e-5);
            worst = worst_err(worst, fabs(want - y->data[t * C + j]));
        }
    }
    CHECK(worst < 1e-5, "deepnorm sublayer vs LN(alpha x + F(x)): %g", worst);
    mt_ctx_free(&c);
    mt_encdec_free(&m);
}

/* Two rows: words of 4 and 6 letters (the first padded), targets of 3 and 5 (one ignored). */
static const int SRC[] = {3, 4, 5, 6, 0, 0, 7, 8, 9, 3, 4, 5}, SRC_LEN[] = {4, 6};
static const int TGT[] = {1, 9, 10, 0, 0, 1, 10, 9, 9, 10},
                 TARGETS[] = {9, 10, 2, -1, -1, 10, 9, 9, 10, 2};

typedef struct {
    mt_encdec *m;
} model_arg;

static mt_tensor *build_loss(mt_ctx *c, mt_tensor **in, const void *arg) {
    (void)in;
    const model_arg *a = arg;
    return mt_encdec_loss(c, a->m, &a->m->P, SRC, SRC_LEN, 6, TGT, TARGETS, 2, 5, MT_CE_PLAIN);
}

static void test_gradcheck(void) {
    mt_rng r;
    mt_rng_seed(&r, 11);
    for (int k = 0; k < 6; k++) { /* pre, post, deepnorm, subln, peri, pre untied no-bias */
        mt_encdec_config g = small(2, 2, (mt_placement)(k % 5));
        g.stack.init = MT_SCHEME_XAVIER, g.tied = k != 5, g.stack.bias = k != 5;
        mt_encdec m;
        mt_err e;
        CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
        mt_params_initialize(&m.P, &r);
        for (size_t i = 0; i < m.P.total; i++) m.P.data[i] += 0.2f * mt_rng_normal(&r);
        mt_tensor **in = malloc((size_t)m.P.n * sizeof *in);
        for (int i = 0; i < m.P.n; i++) in[i] = &m.P.t[i];
        model_arg a = {&m};
        char name[64];
        snprintf(name, sizeof name, "encdec %s%s", mt_enum_name(&MT_PLACEMENTS, g.stack.placement),
                 k == 5 ? " untied no-bias" : "");
        gradcheck(name, build_loss, &a, m.P.n, in, 3e-3, 5e-3); /* 1e-2: curvature */
        free(in);
        mt_encdec_free(&m);
    }
}

/* Padding changes nothing: row 0 alone, unpadded, has the logits it has in the padded batch; the
   KV-cache decoder's logits equal the full forward's at every position (with a QK-norm: the
   caches hold the normalised keys, the cross-attention's stored once; with lns: the decoder's
   blocks counted from 0 in its stack; with emb_scale: both sides' embeddings scaled); beam 1 is
   greedy. */
static void test_padding_and_cache(mt_placement place, mt_qk_norm_cfg qk, bool emb_scale) {
    mt_encdec_config g = small(2, 2, place);
    g.stack.n_embd = 16, g.stack.n_head = 2, g.stack.n_ff = 24, g.tgt_ctx = 6, g.stack.qk = qk;
    g.emb_scale = emb_scale;
    mt_encdec m;
    mt_err e;
    CHECK(mt_encdec_build(&m, &g, &e) == MT_OK, "build: %s", e.msg);
    m.vocab.n_letters = 7; /* ids 3..9 letters, 10 a phone */
    mt_rng r;
    mt_rng_seed(&r, 3);
    mt_params_initialize(&m.P, &r);
    for (size_t i = 0; i < m.P.total; i++) m.P.data[i] += 0.3f * mt_rng_normal(&r);
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    c.grad_enabled = false;
    int V = g.n_vocab;
    mt_tensor *full = mt_encdec_forward(&c, &m, &m.P, SRC, SRC_LEN, 6, TGT, 2, 5);
    mt_tensor *alone = mt_encdec_forward(&c, &m, &m.P, SRC, SRC_LEN, 4, TGT, 1, 3);
    double worst = 0;
    for (int t = 0; t < 3; t++)
        for (int v = 0; v < V; v++)
            worst = worst_err(worst, fabs(full->data[t * V + v] - alone->data[t * V + v]));
    CHECK(worst < 1e-5, "padded and unpadded logits differ by %g", worst);
    float *cached = malloc(full->n * sizeof(float));
    mt_encdec_cached_logits(&c, &m, SRC, SRC_LEN, 2, 6, TGT, 5, cached);
    CHECK(max_rel_err(cached, full->data, full->n) < 1e-5, "%s: KV-cache logits vs the forward: %g",
          mt_enum_name(&MT_PLACEMENTS, place), max_rel_err(cached, full->data, full->n));
    free(cached);
    /* decoding: greedy against the argmax of the full forward on its own output, step by step */
    int out[2 * 6], len[2];
    mt_ctx_reset(&c);
    mt_encdec_greedy(&c, &m, SRC, SRC_LEN, 2, 6, out, len);
    for (int b = 0; b < 2; b++) {
        int tgt[6] = {MT_G2P_BOS}, n = 0;
        for (int t = 0; t < 6; t++) {
            mt_ctx_reset(&c);
            mt_tensor *z = mt_encdec_forward(&c, &m, &m.P, SRC + 6 * b, SRC_LEN + b, 6, tgt, 1,
                                             t + 1);
            const float *zt = z->data + (size_t)t * V;
            int best = MT_G2P_EOS;
            for (int v = 10; v < V; v++) best = zt[v] > zt[best] ? v : best;
            if (best == MT_G2P_EOS || t == 5) break;
            tgt[t + 1] = best, n++;
        }
        CHECK(n == len[b] && !memcmp(out + 6 * b, tgt + 1, (size_t)n * sizeof(int)),
              "row %d: greedy with the cache gave %d tokens, the full forward %d", b, len[b], n);
        mt_ctx_reset(&c);
        int bout[6], bl = mt_encdec_beam(&c, &m, SRC + 6 * b, SRC_LEN[b], 1, bout);
        CHECK(bl == len[b] && !memcmp(bout, out + 6 * b, (size_t)bl * sizeof(int)),
              "row %d: beam 1 (%d tokens) is not greedy (%d)", b, bl, len[b]);
        mt_ctx_reset(&c);
        bl = mt_encdec_beam(&c, &m, SRC + 6 * b, SRC_LEN[b], 4, bout);
        CHECK(bl >= 0 && bl <= 5, "beam 4: %d tokens", bl);
    }
    CHECK(c.grad_enabled == false && mt_threads() >= 1, "decoding restores the context");
    mt_ctx_free(&c);
    mt_encdec_free(&m);
}

static void test_bad_config(void) {
    mt_encdec_config g = small(2, 2, MT_PLACE_PRE);
    mt_err e;
    g.stack.n_layer = 3;
    CHECK(mt_encdec_config_validate(&g, &e) == MT_EINVAL && strstr(e.msg, "--enc-layers"),
          "n_layer other than enc + dec: %s", e.msg);
    g = small(0, 2, MT_PLACE_PRE);
    CHECK(mt_encdec_config_validate(&g, &e) == MT_EINVAL && strstr(e.msg, "enc_layers"), "%s",
          e.msg);
    g = small(2, 2, MT_PLACE_PRE);
    g.stack.norm.kind = MT_NORM_BN;
    CHECK(mt_encdec_config_validate(&g, &e) == MT_EINVAL, "BatchNorm refused");
    g = small(2, 2, MT_PLACE_PRE);
    g.stack.n_kv_head = 1;
    CHECK(mt_encdec_config_validate(&g, &e) == MT_EINVAL && strstr(e.msg, "no grouped-query"),
          "grouped-query attention refused: %s", e.msg);
    g = small(2, 2, MT_PLACE_DEEPNORM);
    g.dec_deepnorm_alpha = 2.5f;
    CHECK(mt_encdec_config_validate(&g, &e) == MT_OK && g.dec_deepnorm_alpha == 2.5f,
          "a given decoder alpha is kept");
    char *json = mt_fields_to_json(mt_encdec_type.fields, &g);
    CHECK(strstr(json, "\"enc_layers\":2") && strstr(json, "\"dec_layers\":2") &&
              strstr(json, "\"n_layer\":4"),
          "config JSON: %s", json);
    mt_encdec_config h;
    CHECK(mt_model_config_from_json(&mt_encdec_type, json, &h, &e) == MT_OK &&
              h.dec_deepnorm_alpha == 2.5f && h.enc_layers == 2,
          "JSON round trip: %s", e.msg);
    free(json);
    (void)ends_with;
}

/* Training batches drawn by length: every row of a batch has one word length, and over many
   batches each training example is drawn as often as uniform draws would draw it. */
static void test_length_buckets(void) {
    const char *path = "/tmp/mt_test_buckets.out";
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    char word[16];
    for (int i = 0; i < 240; i++) { /* 240 words of 1 to 12 letters, more short than long */
        int len = 1 + (i * i) % 12 % (1 + i % 12);
        for (int j = 0; j < len; j++) word[j] = (char)('a' + (i * 7 + j * 3) % 26);
        snprintf(word + len, sizeof word - (size_t)len, "%c%c", 'a' + i / 26 % 26, 'a' + i % 26);
        fprintf(f, "(\"%s\" nil (((hh ax) 0) ((l ow) 1)))\n", word);
    }
    fclose(f);
    mt_encdec_config cfg = mt_encdec_config_default();
    mt_data_cfg dc = {.batch = 8, .min_rows = 8, .eval_batches = 1};
    snprintf(dc.path, sizeof dc.path, "%s", path);
    mt_task *t = NULL;
    mt_err e;
    CHECK(mt_g2p_task.load(&t, &dc, &mt_encdec_type, &cfg, &e) == MT_OK, "load: %s", e.msg);
    if (!t) return;
    enum { DRAWS = 40000, MOST = 256 };
    const char *seen[MOST];
    int count[MOST] = {0}, n_seen = 0, mixed = 0;
    mt_rng r;
    mt_rng_seed(&r, 7);
    for (int d = 0; d < DRAWS; d++) {
        mt_g2p_task.draw_batch(t, &r);
        for (int b = 0; b < 8; b++) {
            const char *w = mt_g2p_task_drawn_word(t, b);
            mixed += strlen(w) != strlen(mt_g2p_task_drawn_word(t, 0));
            int k = 0;
            while (k < n_seen && seen[k] != w) k++;
            if (k == n_seen && n_seen < MOST) seen[n_seen++] = w;
            if (k < MOST) count[k]++;
        }
    }
    CHECK(mixed == 0, "%d rows of a batch with another word length than its first row", mixed);
    /* the training part: 90% of the 240 words; every one drawn ~ Poisson(mean), 6 sigma */
    CHECK(n_seen >= 210 && n_seen <= 222, "%d distinct training words drawn", n_seen);
    double mean = 8.0 * DRAWS / n_seen;
    int worst = 0;
    for (int k = 0; k < n_seen; k++)
        if (fabs(count[k] - mean) > fabs(count[worst] - mean)) worst = k;
    CHECK(fabs(count[worst] - mean) < 6 * sqrt(mean), "'%s' drawn %d times, uniform draws: %.0f",
          seen[worst], count[worst], mean);
    mt_g2p_task.free(t);
    remove(path);
}

int main(void) {
    test_names();
    test_deepnorm_init();
    test_deepnorm_forward();
    test_gradcheck();
    const mt_qk_norm_cfg no_qk = {.kind = MT_QK_NONE};
    test_padding_and_cache(MT_PLACE_PRE, no_qk, false);
    test_padding_and_cache(MT_PLACE_PRE, (mt_qk_norm_cfg){.kind = MT_QK_RMS, .affine = true},
                           false);
    test_padding_and_cache(MT_PLACE_PRE,
                           (mt_qk_norm_cfg){.kind = MT_QK_L2, .scope = MT_QK_ALL, .affine = true},
                           false);
    test_padding_and_cache(MT_PLACE_LNS, no_qk, false);
    test_padding_and_cache(MT_PLACE_REORDER, no_qk, false);
    test_padding_and_cache(MT_PLACE_PRE, no_qk, true); /* the embedding scale: both sides */
    test_bad_config();
    test_length_buckets();
    return check_finish("test_encdec");
}
