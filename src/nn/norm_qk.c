/* QK-norm: a norm on an attention's queries and keys after their projections (before RoPE), per
 * head (Qwen3, Gemma 3: a gain of HS shared by the heads) or over the whole projection (OLMo-2:
 * a gain of its width), through the fused per-row norms of norm_layer.c. x (B, T, W), W = NH HS
 * for queries, NKV HS for keys; HS head size. */
#include <math.h>
#include <stdio.h>

#include "nn.h"

static const mt_enum_item QK_NORMS[] = {
    [MT_QK_NONE] = {.name = "none", .title = "off"},
    [MT_QK_RMS] = {.name = "rms",
                   .help = "x / sqrt(mean(x^2) + 1e-6) (* weight)",
                   .title = "QK-RMSNorm"},
    [MT_QK_LN] = {.name = "ln",
                  .help = "(x - mean) / sqrt(var + 1e-5) (* weight)",
                  .title = "QK-LayerNorm"},
    [MT_QK_L2] = {.name = "l2",
                  .help = "g x / max(||x||, 1e-12), g a learned scalar (init sqrt(width))",
                  .title = "QK-L2"},
};
static const mt_enum_item QK_SCOPES[] = {
    [MT_QK_HEAD] = {.name = "head", .help = "each head's HS channels (Qwen3, Gemma 3)"},
    [MT_QK_ALL] = {.name = "all", .help = "the whole projection (OLMo-2)"},
};
const mt_enum MT_QK_NORMS = MT_ENUM("qk norm", QK_NORMS);
const mt_enum MT_QK_SCOPES = MT_ENUM("qk norm scope", QK_SCOPES);

/* eps: RMSNorm's as Qwen3, Gemma 3 and OLMo-2 configure it, LayerNorm's torch default, and
   F.normalize's for l2 */
static float qk_eps(mt_qk_norm_kind kind) {
    return kind == MT_QK_RMS ? 1e-6f : kind == MT_QK_LN ? 1e-5f : 1e-12f;
}

mt_status mt_qk_norm_validate(const mt_qk_norm_cfg *qk, int HS, mt_err *err) {
    if ((int)qk->kind < 0 || (int)qk->kind >= MT_QK_NORMS.n || (int)qk->scope < 0 ||
        (int)qk->scope >= MT_QK_SCOPES.n)
        return mt_errorf(err, MT_EINVAL,
                         "config: qk_norm %d or qk_norm_scope %d is not one of "
                         "its values",
                         (int)qk->kind, (int)qk->scope);
    if (qk->kind == MT_QK_NONE && (qk->scope != MT_QK_HEAD || qk->affine))
        return mt_errorf(err, MT_EINVAL,
                         "--qk-norm-scope %s%s: there is no QK-norm to apply to "
                         "(--qk-norm none); give --qk-norm rms, ln or l2",
                         mt_enum_name(&MT_QK_SCOPES, qk->scope),
                         qk->affine ? " and --qk-norm-affine" : "");
    if (qk->kind == MT_QK_L2 && !qk->affine)
        return mt_errorf(err, MT_EINVAL,
                         "--qk-norm l2 without --qk-norm-affine: refused: unit queries and keys "
                         "bound every attention logit to [-1/sqrt(HS), 1/sqrt(HS)] = +-%.3g, so "
                         "softmax stays near uniform and nothing could sharpen it; add "
                         "--qk-norm-affine (a learned scale g on each, init sqrt(width), as "
                         "ScaleNorm) or use rms or ln",
                         1 / sqrt((double)HS));
    if (qk->kind == MT_QK_LN && qk->scope == MT_QK_HEAD && HS < 2)
        return mt_errorf(err, MT_EINVAL,
                         "--qk-norm ln per head with head size %d: refused: LayerNorm of one "
                         "channel is 0, so every query and key would vanish; use --qk-norm rms or "
                         "--qk-norm-scope all",
                         HS);
    return MT_OK;
}

/* <prefix>.<which>.weight (W) or .g (1); -1 without a gain */
static int add_gain(mt_params *P, const char *prefix, const char *which, const mt_qk_norm_cfg *qk,
                    int W) {
    if (qk->kind == MT_QK_NONE || !qk->affine) return -1;
    char name[192];
    bool l2 = qk->kind == MT_QK_L2;
    snprintf(name, sizeof name, "%s.%s.%s", prefix, which, l2 ? "g" : "weight");
    return l2 ? mt_params_add(P, name, 1, (const int[]){1}, MT_ROLE_NORM, MT_INIT_CONST,
                              sqrtf((float)W))
              : mt_params_add(P, name, 1, (const int[]){W}, MT_ROLE_NORM, MT_INIT_ONES, 0);
}

void mt_qk_norm_add_params(mt_params *P, const char *prefix, const mt_qk_norm_cfg *qk, int HS,
                           int C, int KC, int *q, int *k) {
    bool head = qk->scope == MT_QK_HEAD;
    *q = add_gain(P, prefix, "q_norm", qk, head ? HS : C);
    *k = add_gain(P, prefix, "k_norm", qk, head ? HS : KC);
}

mt_tensor *mt_qk_norm(mt_ctx *c, const mt_qk_norm_cfg *qk, int HS, mt_params *P, int gain,
                      mt_tensor *x) {
    if (qk->kind == MT_QK_NONE) return x;
    mt_tensor *g = gain >= 0 ? &P->t[gain] : NULL, *rows = x;
    int W = mt_cols(x);
    MT_ASSERT(W % HS == 0, "qk_norm: width %d is not a multiple of the head size %d", W, HS);
    if (qk->scope == MT_QK_HEAD) /* (..., W) as rows of HS: the same memory */
        rows = mt_reshape(c, x, 2, (int[]){(int)(x->n / HS), HS});
    float eps = qk_eps(qk->kind);
    mt_tensor *y = qk->kind == MT_QK_RMS  ? mt_rmsnorm(c, rows, g, NULL, eps, MT_RMS_LLAMA)
                   : qk->kind == MT_QK_LN ? mt_layernorm(c, rows, g, NULL, eps)
                                          : mt_scalenorm(c, rows, g, eps);
    return qk->scope == MT_QK_HEAD ? mt_reshape(c, y, x->ndim, x->shape) : y;
}
