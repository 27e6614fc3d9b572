/* Depth-study diagnostics (src/diag): the CSVs' columns, the gradient norms adding up in squares
   to the global norm (clipped or not), each column the norm of its parameters' gradients (the
   inner and output norms of Sub-LN and Peri-LN with their sublayer), the update 0 at init and > 0
   after, residual norms per block, the largest attention logit per block (self, and cross in a
   decoder), and the refusals. A tiny GPT on tiny Shakespeare for a few steps, and a tiny
   encoder-decoder on a made-up dictionary: its blocks numbered encoder first, a decoder block's
   cross-attention in its attention columns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/models/gpt_internal.h"
#include "check.h"

static char dir[] = "/tmp/mt_test_diag_XXXXXX";

/* The file's lines into a malloc'd buffer; *n lines (header included). */
static char **read_lines(const char *name, int *n) {
    char path[256], line[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    *n = 0;
    if (!f) return NULL;
    char **lines = NULL;
    while (fgets(line, sizeof line, f)) {
        lines = realloc(lines, (size_t)(*n + 1) * sizeof *lines);
        lines[(*n)++] = strdup(line);
    }
    fclose(f);
    return lines;
}

static void free_lines(char **lines, int n) {
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
}

enum { STEPS = 5, ENC = 2, DEC = 2 };

/* The run's model: a GPT of 3 layers, or an encoder-decoder of ENC + DEC. */
typedef struct {
    const mt_model_type *type;
    void *cfg;
    const char *data;
    int L;
} model_case;

/* The gradient norms of layer l's columns attn_norm, attn, ffn_norm, ffn from P's gradients,
   grouped by the names as diag.h says: a sublayer's own norms (attn.inner_norm, attn_out_norm,
   ffn.inner_norm, ffn_out_norm) count with it, a decoder block's cross-attention with its
   attention; an encoder-decoder's layer l is enc.blocks.l, then dec.blocks.(l - ENC). */
static void columns(const model_case *mc, const mt_params *P, int l, double col[4]) {
    static const char *const SUB[][4] = {{"attn_norm.", "cross_attn_norm.", NULL, NULL},
                                         {"attn.", "attn_out_norm.", "cross_attn.",
                                          "cross_attn_out_norm."},
                                         {"ffn_norm.", NULL, NULL, NULL},
                                         {"ffn.", "ffn_out_norm.", NULL, NULL}};
    char prefix[64];
    for (int k = 0; k < 4; k++) {
        col[k] = 0;
        for (int i = 0; i < P->n; i++)
            for (int j = 0; j < 4 && SUB[k][j]; j++) {
                if (mc->type == &mt_gpt_type)
                    snprintf(prefix, sizeof prefix, "blocks.%d.%s", l, SUB[k][j]);
                else
                    snprintf(prefix, sizeof prefix, "%s.blocks.%d.%s", l < ENC ? "enc" : "dec",
                             l < ENC ? l : l - ENC, SUB[k][j]);
                if (strncmp(P->p[i].name, prefix, strlen(prefix))) continue;
                for (size_t e = 0; e < P->p[i].n; e++)
                    col[k] += (double)P->grad[P->p[i].offset + e] * P->grad[P->p[i].offset + e];
            }
        col[k] = sqrt(col[k]);
    }
}

/* max |x| and E[(x - mu)^4] / sigma^4 of the GPT's first block's input on the diagnostics' batch:
   its embedding of the probe rows, summed here in double. */
static void act_of(mt_trainer *tr, double out[2]) {
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    c.training = c.grad_enabled = false;
    mt_batch b = tr->task->type->probe_rows(&c, tr->task, tr->cfg.seed ^ MT_DIAG_SEED, 4);
    const mt_tensor *x = mt_gpt_embed(&c, mt_gpt_of(tr->model), tr->P, b.tokens.ids, b.B,
                                      b.tokens.T, 0);
    double mu = 0, m2 = 0, m4 = 0, top = 0;
    for (size_t i = 0; i < x->n; i++) mu += x->data[i] / (double)x->n;
    for (size_t i = 0; i < x->n; i++) {
        double dx = x->data[i] - mu;
        m2 += dx * dx / (double)x->n, m4 += dx * dx * dx * dx / (double)x->n;
        top = fmax(top, fabs((double)x->data[i]));
    }
    out[0] = top, out[1] = m4 / (m2 * m2);
    mt_ctx_free(&c);
}

/* The losses of STEPS training steps, with the diagnostics on or off. */
static void train(const model_case *mc, double clip, bool diag, double *losses, double *norms) {
    const int L = mc->L;
    mt_train_cfg tc = {.model = mc->type,
                       .data = {.val_fraction = 0.1, .eval_batches = 1},
                       .seed = 7,
                       .steps = STEPS,
                       .batch = 4};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    snprintf(tc.data.path, sizeof tc.data.path, "%s", mc->data);
    mt_stack_config *stack = mc->cfg; /* every config starts with its stack */
    mt_placement place = stack->placement;
    mt_optim_config oc = mt_optim_defaults();
    oc.clip = clip;
    oc.sched.lr = 1e-2;
    mt_trainer tr;
    mt_err e;
    mt_diag d;
    tc.model_cfg = mc->cfg;
    if (mt_trainer_init(&tr, &tc, &oc, &e) != MT_OK) {
        CHECK(0, "trainer: %s", e.msg);
        return;
    }
    mt_diag_cfg dc = {.grad_every = 2,
                      .update_steps = 3,
                      .resid_every = 2,
                      .attn_every = 2,
                      .sink_every = 2,
                      .act_every = 2},
                off = {0};
    double act0[2] = {0}; /* the GPT's layer 0 at step 4, from its embedding (act_of) */
    CHECK(mt_diag_open(&d, diag ? &dc : &off, &tr, &e) == MT_OK, "open: %s", e.msg);
    for (int s = 0; s < STEPS; s++) {
        mt_step_stats st;
        mt_trainer_step(&tr, &st);
        losses[s] = st.loss;
        norms[s] = st.grad_norm;
        CHECK(st.finite, "step %d", s);
        CHECK(mt_diag_after_step(&d, &tr, &st, &e) == MT_OK, "after step: %s", e.msg);
        if (diag && tr.step == 4 && mc->type == &mt_gpt_type) act_of(&tr, act0);
    }
    mt_diag_close(&d);
    if (!diag) {
        mt_trainer_free(&tr);
        return;
    }

    int n;
    char **g = read_lines("diag_grad.csv", &n);
    CHECK(n == 1 + 3 * (L + 1), "diag_grad.csv: %d lines, expected a header and %d rows", n,
          3 * (L + 1));
    CHECK(n > 0 && strcmp(g[0], "step,layer,attn_norm,attn,ffn_norm,ffn,total\n") == 0, "header");
    for (int k = 0; k < 3 && n == 1 + 3 * (L + 1); k++) {
        double sum = 0;
        for (int i = 0; i <= L; i++) { /* layers 0..L-1, then -1 */
            int l = i < L ? i : -1;
            const char *row = g[1 + k * (L + 1) + i];
            long step;
            int layer;
            double a, b, c2, f, total;
            if (l < 0) {
                CHECK(sscanf(row, "%ld,%d,,,,,%lf", &step, &layer, &total) == 3, "row %s", row);
            } else {
                CHECK(sscanf(row, "%ld,%d,%lf,%lf,%lf,%lf,%lf", &step, &layer, &a, &b, &c2, &f,
                             &total) == 7,
                      "row %s", row);
                CHECK(a > 0 && b > 0 && c2 > 0 && f > 0, "every sublayer has a gradient: %s", row);
                CHECK(fabs(a * a + b * b + c2 * c2 + f * f - total * total) <= 1e-5 * total * total,
                      "sublayers vs total: %s", row);
                if (k == 2 && clip == 0) { /* the last step's gradients are still in P */
                    double col[4], got[4] = {a, b, c2, f};
                    columns(mc, tr.P, l, col);
                    for (int j = 0; j < 4; j++)
                        CHECK(fabs(got[j] - col[j]) <= 1e-5 * col[j],
                              "%s layer %d column %d: "
                              "%.7g, its parameters' gradients %.7g",
                              mt_enum_name(&MT_PLACEMENTS, place), l, j, got[j], col[j]);
                }
            }
            CHECK(step == 2 * k && layer == l, "row %s: step %d layer %d", row, 2 * k, l);
            sum += total * total;
        }
        CHECK(fabs(sqrt(sum) - norms[2 * k]) <= 1e-4 * norms[2 * k],
              "step %d: per-layer norms give %.7g, the global norm is %.7g (clip %g)", 2 * k,
              sqrt(sum), norms[2 * k], clip);
    }
    free_lines(g, n);

    char **u = read_lines("diag_update.csv", &n);
    CHECK(n == 1 + 4 && strcmp(u[0], "step,update\n") == 0, "diag_update.csv: %d lines", n);
    for (int i = 1; i < n; i++) {
        long step;
        double v;
        CHECK(sscanf(u[i], "%ld,%lf", &step, &v) == 2 && step == i - 1, "row %s", u[i]);
        CHECK(step == 0 ? v == 0 : v > 1e-4 && v < 10, "update at step %ld: %g", step, v);
    }
    free_lines(u, n);

    char **r = read_lines("diag_resid.csv", &n);
    CHECK(n == 1 + 3 * (L + 1) && strcmp(r[0], "step,layer,norm\n") == 0,
          "diag_resid.csv: %d lines", n);
    for (int i = 1; i < n; i++) {
        long step;
        int layer;
        double v;
        CHECK(sscanf(r[i], "%ld,%d,%lf", &step, &layer, &v) == 3 &&
                  step == 2 * ((i - 1) / (L + 1)) && layer == (i - 1) % (L + 1) && v > 0 &&
                  isfinite(v),
              "row %s", r[i]);
    }
    free_lines(r, n);

    /* the largest attention logit of each block's self- and (decoder) cross-attention */
    char **a = read_lines("diag_attn.csv", &n);
    CHECK(n == 1 + 3 * L && strcmp(a[0], "step,layer,self,cross\n") == 0, "diag_attn.csv: %d lines",
          n);
    for (int i = 1; i < n; i++) {
        long step;
        int layer, got;
        double self, cross;
        bool dec = mc->type == &mt_encdec_type && (i - 1) % L >= ENC; /* has a cross-attention */
        got = sscanf(a[i], "%ld,%d,%lf,%lf", &step, &layer, &self, &cross);
        CHECK(got == (dec ? 4 : 3) && step == 2 * ((i - 1) / L) && layer == (i - 1) % L &&
                  isfinite(self) && (!dec || isfinite(cross)),
              "row %s", a[i]);
    }
    free_lines(a, n);

    /* each block's self-attention: its sink rate a share, its entropy within [0, log T] */
    char **k = read_lines("diag_sink.csv", &n);
    CHECK(n == 1 + 3 * L && strcmp(k[0], "step,layer,sink_rate,entropy\n") == 0,
          "diag_sink.csv: %d lines", n);
    for (int i = 1; i < n; i++) {
        long step;
        int layer;
        double rate, ent;
        CHECK(sscanf(k[i], "%ld,%d,%lf,%lf", &step, &layer, &rate, &ent) == 4 &&
                  step == 2 * ((i - 1) / L) && layer == (i - 1) % L && rate >= 0 && rate <= 1 &&
                  ent > 0 && ent <= log(64),
              "row %s", k[i]);
    }
    free_lines(k, n);
    /* each block's input: the GPT's first against its embedding */
    char **x = read_lines("diag_act.csv", &n);
    CHECK(n == 1 + 3 * L && strcmp(x[0], "step,layer,max_abs,kurtosis\n") == 0,
          "diag_act.csv: %d lines", n);
    for (int i = 1; i < n; i++) {
        long step;
        int layer;
        double top, kurt;
        CHECK(sscanf(x[i], "%ld,%d,%lf,%lf", &step, &layer, &top, &kurt) == 4 &&
                  step == 2 * ((i - 1) / L) && layer == (i - 1) % L && top > 0 && kurt >= 1,
              "row %s", x[i]);
        if (step == 4 && layer == 0 && mc->type == &mt_gpt_type)
            CHECK(fabs(top - act0[0]) <= 1e-4 * act0[0] && fabs(kurt - act0[1]) <= 1e-4 * act0[1],
                  "layer 0 at step 4: max |x| %.7g kurtosis %.7g, its embedding's %.7g %.7g", top,
                  kurt, act0[0], act0[1]);
    }
    free_lines(x, n);

    /* a resumed run cannot measure against theta_0; negative settings are refused */
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_EINVAL && strstr(e.msg, "--diag-update-steps"),
          "update after step 0: %s", e.msg);
    dc = (mt_diag_cfg){.grad_every = -1};
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_EINVAL && strstr(e.msg, "expected 0"),
          "negative: %s", e.msg);
    dc = (mt_diag_cfg){.attn_every = -2};
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_EINVAL && strstr(e.msg, "--diag-attn-every -2"),
          "negative attn: %s", e.msg);
    dc = (mt_diag_cfg){.sink_every = -3};
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_EINVAL && strstr(e.msg, "--diag-sink-every -3"),
          "negative sink: %s", e.msg);
    dc = (mt_diag_cfg){.act_every = -4};
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_EINVAL && strstr(e.msg, "--diag-act-every -4"),
          "negative act: %s", e.msg);
    mt_trainer_free(&tr);
}

/* ||W - W0|| / ||W0|| over the matrices (ndim 2) whose names start with prefix and end with
   suffix (NULL: any; with prefix NULL, those outside the blocks). */
static double ratio_of(const mt_params *P, const float *w0, const char *prefix,
                       const char *suffix) {
    double du = 0, ww = 0;
    for (int i = 0; i < P->n; i++) {
        const char *name = P->p[i].name;
        size_t n = strlen(name), k = suffix ? strlen(suffix) : 0;
        bool in = prefix ? strncmp(name, prefix, strlen(prefix)) == 0 : !strstr(name, "blocks.");
        if (P->p[i].ndim != 2 || !in || (suffix && (n < k || strcmp(name + n - k, suffix))))
            continue;
        for (size_t j = 0; j < P->p[i].n; j++) {
            double a = w0[P->p[i].offset + j], b = P->data[P->p[i].offset + j];
            du += (b - a) * (b - a), ww += a * a;
        }
    }
    return sqrt(du / ww);
}

/* diag_ratio.csv against the weights kept before its steps: a column per block matrix by its name
   in the block, the block's total, row -1 the matrices outside the blocks. */
static void test_ratio(const model_case *mc) {
    mt_train_cfg tc = {.model = mc->type,
                       .data = {.val_fraction = 0.1, .eval_batches = 1},
                       .seed = 7,
                       .steps = STEPS,
                       .batch = 4,
                       .model_cfg = mc->cfg};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    snprintf(tc.data.path, sizeof tc.data.path, "%s", mc->data);
    mt_optim_config oc = mt_optim_defaults();
    oc.sched.lr = 1e-2;
    mt_trainer tr;
    mt_err e;
    mt_diag d;
    if (mt_trainer_init(&tr, &tc, &oc, &e) != MT_OK) {
        CHECK(0, "trainer: %s", e.msg);
        return;
    }
    mt_diag_cfg dc = {.ratio_every = 2};
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_OK, "open: %s", e.msg);
    float *w0 = malloc(tr.P->total * sizeof *w0);
    double want[STEPS + 1][8][16] = {{{0}}}; /* [step][layer, L: -1][column] */
    char **head = NULL;
    int n_head = 0;
    for (int s = 1; s <= STEPS; s++) {
        memcpy(w0, tr.P->data, tr.P->total * sizeof *w0);
        mt_step_stats st;
        mt_trainer_step(&tr, &st);
        CHECK(mt_diag_after_step(&d, &tr, &st, &e) == MT_OK, "after step: %s", e.msg);
        if (s % 2) continue;
        if (!head) head = read_lines("diag_ratio.csv", &n_head); /* the header is written */
        char cols[512], *save, *c;
        snprintf(cols, sizeof cols, "%s", head[0]);
        cols[strcspn(cols, "\n")] = 0;
        strtok_r(cols, ",", &save), strtok_r(NULL, ",", &save); /* step, layer */
        for (int k = 0; k < 16 && (c = strtok_r(NULL, ",", &save)); k++)
            for (int l = 0; l < mc->L; l++) {
                char prefix[64], suffix[64];
                if (mc->type == &mt_gpt_type) snprintf(prefix, sizeof prefix, "blocks.%d.", l);
                else
                    snprintf(prefix, sizeof prefix, "%s.blocks.%d.", l < ENC ? "enc" : "dec",
                             l < ENC ? l : l - ENC);
                snprintf(suffix, sizeof suffix, ".%s.weight", c);
                want[s][l][k] = ratio_of(tr.P, w0, prefix, strcmp(c, "total") ? suffix : NULL);
            }
        want[s][mc->L][0] = ratio_of(tr.P, w0, NULL, NULL);
    }
    mt_diag_close(&d);
    free_lines(head, n_head);
    int n;
    char **r = read_lines("diag_ratio.csv", &n);
    CHECK(n == 1 + 2 * (mc->L + 1), "diag_ratio.csv: %d lines, expected %d", n,
          1 + 2 * (mc->L + 1));
    CHECK(n > 0 && strncmp(r[0], "step,layer,attn.q_proj,", 23) == 0, "header %s", n ? r[0] : "");
    for (int i = 1; i < n && n == 1 + 2 * (mc->L + 1); i++) {
        int s = 2 * (1 + (i - 1) / (mc->L + 1)), l = (i - 1) % (mc->L + 1), got = 0;
        long step;
        int layer, at;
        CHECK(sscanf(r[i], "%ld,%d,%n", &step, &layer, &at) == 2 && step == s &&
                  layer == (l == mc->L ? -1 : l),
              "row %s: step %d layer %d", r[i], s, l);
        for (const char *v = r[i] + at; *v && *v != '\n'; got++) {
            size_t len = strcspn(v, ",\n");
            bool last = v[len] != ',';
            double x = len ? atof(v) : NAN, w = l < mc->L ? want[s][l][got]
                                                : last    ? want[s][l][0]
                                                          : NAN;
            /* empty where the block has no such matrix (NaN: none to measure); row -1: the
               total alone */
            CHECK(len ? fabs(x - w) <= 1e-5 * w && w > 0 : isnan(w),
                  "step %d layer %d column %d: %.7g, the weights give %.7g (%s)", s, l, got, x, w,
                  r[i]);
            v += len + !last;
        }
    }
    free_lines(r, n);
    dc = (mt_diag_cfg){.ratio_every = -1};
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_EINVAL && strstr(e.msg, "--diag-update-ratio-every"),
          "negative: %s", e.msg);
    free(w0);
    mt_trainer_free(&tr);
}

static void run_case(const model_case *mc, double clip) {
    double with[STEPS], without[STEPS], norms[STEPS];
    train(mc, clip, true, with, norms);
    train(mc, clip, false, without, norms);
    /* the diagnostics' forward runs in eval mode on the step arena: training is unchanged */
    CHECK(memcmp(with, without, sizeof with) == 0,
          "the diagnostics changed the losses: %.9g vs %.9g", with[STEPS - 1], without[STEPS - 1]);
}

static void run(mt_placement place, double clip) {
    mt_gpt_config g = mt_gpt_config_default();
    g.stack.n_layer = 3;
    g.stack.n_head = 2;
    g.stack.n_embd = 16;
    g.stack.n_ff = 32;
    g.n_ctx = 16;
    g.stack.placement = place;
    g.stack.dropout = 0.1f; /* so that a draw from the dropout RNG would show */
    model_case mc = {&mt_gpt_type, &g, "data/tinyshakespeare.txt", 3};
    run_case(&mc, clip);
}

/* A made-up dictionary of 60 distinct words of 3 to 5 letters from a..h (the first three: i in
   base 8), a phone per letter, in the "word phone phone" form: 54 training words, 3 validation
   and 3 test. */
static void write_dict(const char *path) {
    static const char *const PHONE[] = {"aa1", "b", "k", "d", "eh0", "f", "g", "hh"};
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    for (int i = 0; f && i < 60; i++) {
        char word[6] = {(char)('a' + i / 64), (char)('a' + i / 8 % 8), (char)('a' + i % 8), 0};
        for (int j = 3; j < 3 + i % 3; j++) word[j] = (char)('a' + (i + j) % 8), word[j + 1] = 0;
        fprintf(f, "%s", word);
        for (const char *c = word; *c; c++) fprintf(f, " %s", PHONE[*c - 'a']);
        fputc('\n', f);
    }
    if (f) fclose(f);
}

static void run_encdec(mt_placement place, double clip) {
    char path[256];
    snprintf(path, sizeof path, "%s/dict", dir);
    write_dict(path);
    mt_encdec_config g = mt_encdec_config_default();
    g.enc_layers = ENC, g.dec_layers = DEC;
    g.stack.n_head = 2, g.stack.n_embd = 16, g.stack.n_ff = 32, g.stack.placement = place;
    g.stack.dropout = 0.1f;
    model_case mc = {&mt_encdec_type, &g, path, ENC + DEC};
    run_case(&mc, clip);
}

/* The fixed batch's loss by a forward written here: embeddings, every block but `skip` (-1: none)
   with mt_block_forward, the head, the plain cross-entropy. */
static double loss_without(mt_ctx *c, const mt_gpt *m, const mt_batch *b, int skip) {
    const mt_stack *st = &m->layout->stack;
    mt_params *P = (mt_params *)&m->P;
    mt_tensor *x = mt_gpt_embed(c, m, P, b->tokens.ids, b->B, b->tokens.T, 0);
    for (int i = 0; i < st->n_layer; i++) {
        mt_block_cfg bc = st->block;
        bc.layer = i;
        if (i != skip) x = mt_block_forward(c, &bc, P, &st->blocks[i], x);
    }
    return mt_cross_entropy(c, mt_gpt_head(c, m, P, x), b->tokens.targets, -1, MT_CE_PLAIN)
        ->data[0];
}

/* diag_logz.csv and diag_skip.csv of a GPT against their definitions at the run's last step: log Z
   of the fixed batch's logits in double, each block's loss with it left out (loss_without); the
   rows' steps (logz every step, skip every 2 and after the last). */
static void test_probe(mt_placement place) {
    mt_gpt_config g = mt_gpt_config_default();
    g.stack.n_layer = 3, g.stack.n_head = 2, g.stack.n_embd = 16, g.stack.n_ff = 32, g.n_ctx = 16;
    g.stack.placement = place;
    mt_train_cfg tc = {.model = &mt_gpt_type,
                       .data = {.path = "data/tinyshakespeare.txt",
                                .val_fraction = 0.1,
                                .eval_batches = 1},
                       .seed = 7,
                       .steps = STEPS,
                       .batch = 4,
                       .model_cfg = &g};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    mt_optim_config oc = mt_optim_defaults();
    mt_trainer tr;
    mt_diag d;
    mt_err e;
    CHECK(mt_trainer_init(&tr, &tc, &oc, &e) == MT_OK, "trainer: %s", e.msg);
    mt_diag_cfg dc = {.logz_every = 1, .skip_every = 2};
    CHECK(mt_diag_open(&d, &dc, &tr, &e) == MT_OK, "open: %s", e.msg);
    for (int s = 0; s < STEPS; s++) {
        mt_step_stats st;
        mt_trainer_step(&tr, &st);
        CHECK(mt_diag_after_step(&d, &tr, &st, &e) == MT_OK, "after step: %s", e.msg);
    }
    mt_diag_close(&d);
    mt_ctx *c = &tr.ctx;
    mt_ctx_reset(c);
    c->grad_enabled = false, c->training = false;
    mt_batch b = tr.task->type->probe_rows(c, tr.task, tc.seed ^ MT_DIAG_SEED, 4);
    const mt_gpt *m = mt_gpt_of(tr.model);
    int n, V = m->cfg.n_vocab;
    mt_tensor *y = mt_gpt_forward(c, m, tr.P, b.tokens.ids, b.B, b.tokens.T);
    double sum = 0, top = -INFINITY, mean = NAN, max = NAN; /* NaN: a failed read fails */
    for (int r = 0; r < b.B * b.tokens.T; r++) {
        double s = 0;
        for (int j = 0; j < V; j++) s += exp(y->data[(size_t)r * V + j]);
        sum += log(s), top = fmax(top, log(s));
    }
    char **z = read_lines("diag_logz.csv", &n);
    CHECK(n == STEPS + 2 && strcmp(z[0], "step,mean,max\n") == 0, "diag_logz.csv: %d lines", n);
    long step;
    CHECK(n == STEPS + 2 && sscanf(z[n - 1], "%ld,%lf,%lf", &step, &mean, &max) == 3 &&
              step == STEPS,
          "last logz row");
    sum /= b.B * b.tokens.T;
    CHECK(fabs(mean - sum) < 1e-5 * fabs(sum) && fabs(max - top) < 1e-5 * fabs(top),
          "%s: log Z mean %.7g max %.7g, by hand %.7g %.7g", mt_enum_name(&MT_PLACEMENTS, place),
          mean, max, sum, top);
    free_lines(z, n);
    char **k = read_lines("diag_skip.csv", &n);
    int L = 3, rows = 4 * (L + 1); /* steps 0, 2, 4 and the last, 5 */
    CHECK(n == 1 + rows && strcmp(k[0], "step,block,loss,delta\n") == 0, "diag_skip.csv: %d", n);
    double whole = loss_without(c, m, &b, -1);
    for (int i = 0; n == 1 + rows && i <= L; i++) {
        int block;
        double loss, delta, want = loss_without(c, m, &b, i - 1);
        CHECK(sscanf(k[1 + rows - (L + 1) + i], "%ld,%d,%lf,%lf", &step, &block, &loss, &delta) ==
                      4 &&
                  step == STEPS && block == i - 1,
              "skip row %s", k[1 + rows - (L + 1) + i]);
        CHECK(fabs(loss - want) < 1e-5 * want && fabs(delta - (want - whole)) < 1e-5 * want,
              "%s: skipping block %d: loss %.7g delta %.3g, by hand %.7g %.3g",
              mt_enum_name(&MT_PLACEMENTS, place), block, loss, delta, want, want - whole);
    }
    free_lines(k, n);
    mt_diag_cfg bad = {.skip_every = -2};
    CHECK(mt_diag_open(&d, &bad, &tr, &e) == MT_EINVAL && strstr(e.msg, "--diag-skip-every -2"),
          "negative: %s", e.msg);
    mt_trainer_free(&tr);
}

static void test_ratio_cases(void) {
    mt_gpt_config g = mt_gpt_config_default();
    g.stack.n_layer = 3, g.stack.n_head = 2, g.stack.n_embd = 16, g.stack.n_ff = 32, g.n_ctx = 16;
    test_ratio(&(model_case){&mt_gpt_type, &g, "data/tinyshakespeare.txt", 3});
    char path[256];
    snprintf(path, sizeof path, "%s/dict", dir);
    write_dict(path);
    mt_encdec_config ed = mt_encdec_config_default();
    ed.enc_layers = ENC, ed.dec_layers = DEC;
    ed.stack.n_head = 2, ed.stack.n_embd = 16, ed.stack.n_ff = 32;
    test_ratio(&(model_case){&mt_encdec_type, &ed, path, ENC + DEC});
}

int main(void) {
    mt_set_threads(1);
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    run(MT_PLACE_PRE, 0);
    run(MT_PLACE_POST, 0.05); /* clipped: the rows are the gradients before clipping */
    run(MT_PLACE_DEEPNORM, 1.0);
    run(MT_PLACE_SUBLN, 0);
    run(MT_PLACE_PERI, 0);
    run_encdec(MT_PLACE_PRE, 0);
    run_encdec(MT_PLACE_POST, 0);
    run_encdec(MT_PLACE_DEEPNORM, 0.05);
    run_encdec(MT_PLACE_PERI, 0);
    run_encdec(MT_PLACE_SUBLN, 0);
    test_probe(MT_PLACE_LNS);
    test_probe(MT_PLACE_MIXLN);
    test_ratio_cases();
    const char *names[] = {"diag_grad.csv",     "diag_update.csv",   "diag_resid.csv",
                           "model.safetensors", "optim.safetensors", "dict",
                           "diag_attn.csv",     "diag_logz.csv",     "diag_skip.csv",
                           "diag_ratio.csv",    "diag_sink.csv",     "diag_act.csv"};
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return check_finish("test_diag");
}
