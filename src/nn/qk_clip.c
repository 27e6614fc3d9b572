/* QK-Clip (nn.h, mt_qk_clip): MuonClip's rescaling of the query and key projections of every
   attention head whose largest logit of the step exceeded tau (Kimi K2, arXiv 2507.20534,
   section 2.1 and Algorithm 1). NH query heads, NKV key heads of HS channels, G = NH / NKV query
   heads per key head; the attentions are the blocks' (src/nn/block.c) found by their names,
   <prefix>.attn.{q,k}_proj and <prefix>.cross_attn.{q,k}_proj, weights (rows, C) and biases.
   docs/optimizers.md has the rule and its reasons. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* The entry name with its last len_suffix characters replaced by suffix, or -1 when absent. */
static int sibling(const mt_params *P, const char *name, size_t len_suffix, const char *suffix) {
    char buf[sizeof P->p[0].name + 16];
    snprintf(buf, sizeof buf, "%.*s%s", (int)(strlen(name) - len_suffix), name, suffix);
    return mt_params_find(P, buf);
}

/* Whether name ends in "attn.q_proj.weight" (a self- or cross-attention's query projection). */
static bool is_query(const char *name) {
    static const char end[] = "attn.q_proj.weight";
    size_t n = strlen(name), m = sizeof end - 1;
    return n >= m && strcmp(name + n - m, end) == 0;
}

/* The attention whose q_proj weight is entry i, its heads' slots from at. */
static mt_status attn_of(const mt_params *P, int i, int n_head, int at, mt_qk_attn *a,
                         mt_err *err) {
    const mt_param *q = &P->p[i];
    size_t w = strlen("q_proj.weight");
    *a = (mt_qk_attn){.q_w = i,
                      .q_b = sibling(P, q->name, w, "q_proj.bias"),
                      .k_w = sibling(P, q->name, w, "k_proj.weight"),
                      .k_b = sibling(P, q->name, w, "k_proj.bias"),
                      .NH = n_head,
                      .at = at};
    MT_ASSERT(a->k_w >= 0 && q->ndim == 2 && q->shape[0] % n_head == 0,
              "qk-clip: %s (%d rows) without its k_proj, or not of %d heads", q->name, q->shape[0],
              n_head);
    a->HS = q->shape[0] / n_head, a->NKV = P->p[a->k_w].shape[0] / a->HS;
    const int e[] = {a->q_w, a->q_b, a->k_w, a->k_b};
    for (int j = 0; j < 4; j++)
        if (e[j] >= 0 && !mt_param_trained(&P->p[e[j]]))
            return mt_errorf(err, MT_EINVAL,
                             "--qk-clip rescales %s, which is not trained (--freeze, or a LoRA "
                             "run's base): give --qk-clip 0, or train it",
                             P->p[e[j]].name);
    return MT_OK;
}

mt_status mt_qk_clip_init(mt_qk_clip *q, const mt_params *P, int n_head, float tau, mt_err *err) {
    memset(q, 0, sizeof *q);
    q->tau = tau;
    for (int i = 0; i < P->n; i++) q->n += is_query(P->p[i].name);
    q->attn = calloc((size_t)(q->n ? q->n : 1), sizeof *q->attn);
    q->slot = malloc((size_t)P->n * sizeof *q->slot);
    if (!q->attn || !q->slot) {
        mt_qk_clip_free(q);
        return mt_errorf(err, MT_ENOMEM, "out of memory for --qk-clip");
    }
    int k = 0;
    for (int i = 0; i < P->n; i++) {
        q->slot[i] = -1;
        if (!is_query(P->p[i].name)) continue;
        mt_status s = attn_of(P, i, n_head, q->heads, &q->attn[k], err);
        if (s != MT_OK) {
            mt_qk_clip_free(q);
            return s;
        }
        q->slot[i] = q->heads;
        q->heads += q->attn[k++].NH;
    }
    if (q->n == 0) {
        mt_qk_clip_free(q);
        return mt_errorf(err, MT_EINVAL, "--qk-clip: the model has no attention to clip");
    }
    return MT_OK;
}

void mt_qk_clip_reset(float *smax, int heads) {
    for (int h = 0; h < heads; h++) smax[h] = -INFINITY;
}

/* Rows [r0, r0 + HS) of entry w (a weight (rows, C) or, 1-D, a bias) times s; none when w < 0. */
static void scale_rows(mt_params *P, int w, int r0, int HS, float s) {
    if (w < 0) return;
    size_t cols = P->p[w].ndim == 2 ? (size_t)P->p[w].shape[1] : 1;
    float *x = P->t[w].data + (size_t)r0 * cols;
    for (size_t i = 0; i < (size_t)HS * cols; i++) x[i] *= s;
}

/* Attention a: eta_h = min(1, tau / S_h) of each head, and per key head g (its query heads
   h = g G .. g G + G - 1) with e = min_h eta_h < 1: k's rows of g times sqrt(e), each q head's
   times eta_h / sqrt(e), so that every logit of head h is scaled by eta_h exactly (G = 1: the
   paper's sqrt(eta_h) on each side). Returns the heads clipped. */
static int clip_attn(const mt_qk_clip *q, const mt_qk_attn *a, mt_params *P, const float *smax) {
    int G = a->NH / a->NKV, clipped = 0;
    for (int g = 0; g < a->NKV; g++) {
        float eta[G], e = 1;
        for (int j = 0; j < G; j++) {
            float S = smax[a->at + g * G + j];
            eta[j] = S > q->tau ? q->tau / S : 1.0f;
            e = eta[j] < e ? eta[j] : e;
            clipped += eta[j] < 1;
        }
        if (e >= 1) continue;
        float sk = sqrtf(e);
        scale_rows(P, a->k_w, g * a->HS, a->HS, sk);
        scale_rows(P, a->k_b, g * a->HS, a->HS, sk);
        for (int j = 0; j < G; j++) {
            int r0 = (g * G + j) * a->HS;
            scale_rows(P, a->q_w, r0, a->HS, eta[j] / sk);
            scale_rows(P, a->q_b, r0, a->HS, eta[j] / sk);
        }
    }
    return clipped;
}

int mt_qk_clip_apply(const mt_qk_clip *q, mt_params *P, const float *smax, int *per_attn) {
    int clipped = 0;
    for (int i = 0; i < q->n; i++) {
        int c = clip_attn(q, &q->attn[i], P, smax);
        clipped += c;
        if (per_attn) per_attn[i] = c;
    }
    if (clipped && P->bf16) mt_params_refresh_bf16(P);
    return clipped;
}

void mt_qk_clip_free(mt_qk_clip *q) {
    free(q->attn);
    free(q->slot);
    memset(q, 0, sizeof *q);
}
