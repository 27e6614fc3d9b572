/* The norm a model picks by name: options, checks, parameters, and the dispatch over tokens
 * x (B, T, C). The norms themselves are fused ops in norm_layer.c and norm_batch.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn.h"

static const mt_enum_item NORMS[] = {
    [MT_NORM_LN] = {.name = "ln", .help = "LayerNorm", .title = "LayerNorm"},
    [MT_NORM_RMS] = {.name = "rms", .help = "RMSNorm", .title = "RMSNorm"},
    [MT_NORM_PRMS] = {.name = "prms", .help = "partial RMSNorm", .title = "pRMSNorm"},
    [MT_NORM_BN] = {.name = "bn", .help = "BatchNorm", .title = "BatchNorm"},
    [MT_NORM_IN] = {.name = "in", .help = "InstanceNorm", .title = "InstanceNorm"},
    [MT_NORM_GN] = {.name = "gn", .help = "GroupNorm", .title = "GroupNorm"},
    [MT_NORM_SCALE] = {.name = "scale", .help = "ScaleNorm", .title = "ScaleNorm"},
    [MT_NORM_NONE] = {.name = "none", .help = "identity", .title = "no norm"},
    [MT_NORM_DYT] = {.name = "dyt", .help = "Dynamic Tanh, w tanh(alpha x) + b", .title = "DyT"},
    [MT_NORM_DERF] = {.name = "derf",
                      .help = "Dynamic erf, w erf(alpha x + s) + b",
                      .title = "Derf"},
};
const mt_enum MT_NORMS = MT_ENUM("norm", NORMS);
static const mt_enum_item RMS_FORMS[] = {
    [MT_RMS_LLAMA] = {.name = "llama", .help = "x / sqrt(mean(x^2) + eps)"},
    [MT_RMS_PAPER] = {.name = "paper", .help = "x / (sqrt(mean(x^2)) + eps)"},
};
const mt_enum MT_RMS_FORMS = MT_ENUM("rms form", RMS_FORMS);

/* BatchNorm's running statistics: r = (1 - momentum) r + momentum * batch, as torch. */
#define BN_MOMENTUM 0.1f

mt_norm_cfg mt_norm_default(mt_norm_kind kind) {
    return (mt_norm_cfg){.kind = kind,
                         .eps = MT_NORM_EPS_DEFAULT,
                         .prms_p = 0.0625f,
                         .gn_groups = 32,
                         .rms_form = MT_RMS_LLAMA,
                         .rms_bias = false,
                         .in_affine = false,
                         .dyt_alpha = 0.5f,
                         .dyt_weight_init = 1.0f};
}

static bool point_wise(const mt_norm_cfg *cfg) {
    return cfg->kind == MT_NORM_DYT || cfg->kind == MT_NORM_DERF;
}

mt_norm_cfg mt_norm_at(const mt_norm_cfg *cfg, mt_norm_site site) {
    mt_norm_cfg at = *cfg;
    float a = site == MT_NORM_SITE_ATTN  ? cfg->dyt_alpha_attn
              : site == MT_NORM_SITE_FFN ? cfg->dyt_alpha_ffn
                                         : cfg->dyt_alpha_final;
    if (a > 0) at.dyt_alpha = a;
    return at;
}

/* What reads the options of one kind (mt_field.read). */
static bool reads_point_wise(const void *cfg) { return point_wise(cfg); }
static bool reads_derf(const void *cfg) { return ((const mt_norm_cfg *)cfg)->kind == MT_NORM_DERF; }
static bool reads_gn(const void *cfg) { return ((const mt_norm_cfg *)cfg)->kind == MT_NORM_GN; }

#define F(member, TYPE, key, help, ...) MT_FIELD(mt_norm_cfg, member, TYPE, key, help, __VA_ARGS__)
#define POINT_WISE                                                                                 \
    .read = reads_point_wise, .read_by = "--norm dyt or derf", .flags = MT_FIELD_SET_READ
static const mt_field FIELDS[] = {
    F(kind, ENUM, "norm", "normalization", .of = &MT_NORMS),
    F(eps, FLOAT, "norm_eps", "norm epsilon; -1: the norm's default", .range = "-1.."),
    F(prms_p, FLOAT, "prms_p", "pRMSNorm: fraction of channels the RMS is taken from"),
    F(gn_groups, INT, "gn_groups", "GroupNorm groups", .range = "1..", .read = reads_gn,
      .read_by = "--norm gn"),
    F(rms_form, ENUM, "rms_form", "RMSNorm form: eps inside or outside the sqrt",
      .of = &MT_RMS_FORMS),
    F(rms_bias, BOOL, "rms_bias", "RMSNorm paper form: a learned bias"),
    F(in_affine, BOOL, "in_affine", "InstanceNorm: a learned weight and bias"),
    F(dyt_alpha, FLOAT, "dyt_alpha", "DyT and Derf: the initial alpha of every norm",
      .range = "0..", POINT_WISE),
    F(dyt_alpha_attn, FLOAT, "dyt_alpha_attn",
      "DyT and Derf: the initial alpha of the attention's norms; 0: dyt-alpha", .range = "0..",
      POINT_WISE),
    F(dyt_alpha_ffn, FLOAT, "dyt_alpha_ffn",
      "DyT and Derf: the initial alpha of the FFN's norms; 0: dyt-alpha", .range = "0..",
      POINT_WISE),
    F(derf_shift, FLOAT, "derf_shift", "Derf: the initial shift s", .read = reads_derf,
      .read_by = "--norm derf", .flags = MT_FIELD_SET_READ),
    F(dyt_weight_init, FLOAT, "dyt_weight_init",
      "DyT and Derf: the initial weight gamma of every norm, > 0 (8: narrow models, docs/norms.md)",
      .range = "0..", POINT_WISE),
};
#undef POINT_WISE
#undef F
const mt_fields MT_NORM_FIELDS = MT_FIELDS_OF(FIELDS);

/* DyT's and Derf's options: alphas > 0 (a site's 0: --dyt-alpha), a weight > 0, a finite
   shift. */
static mt_status point_validate(const mt_norm_cfg *cfg, mt_err *err) {
    const char *site = "the site's initial alpha must be > 0, or 0 for --dyt-alpha";
    const struct {
        const char *flag;
        float v, min; /* min: the least value accepted (-inf: any finite one) */
        const char *rule;
    } opts[] = {{"--dyt-alpha", cfg->dyt_alpha, FLT_MIN,
                 "the initial alpha must be > 0 (the papers use 0.5)"},
                {"--dyt-alpha-attn", cfg->dyt_alpha_attn, 0, site},
                {"--dyt-alpha-ffn", cfg->dyt_alpha_ffn, 0, site},
                {"--dyt-alpha-final", cfg->dyt_alpha_final, 0, site},
                {"--dyt-weight-init", cfg->dyt_weight_init, FLT_MIN,
                 "the initial weight must be a finite number > 0 (the papers use 1)"},
                {"--derf-shift", cfg->derf_shift, -INFINITY,
                 "the initial shift must be a finite number (0)"}};
    if (!point_wise(cfg)) return MT_OK;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!(isfinite(opts[i].v) && opts[i].v >= opts[i].min))
            return mt_errorf(err, MT_EINVAL, "%s: %g; %s", opts[i].flag, opts[i].v, opts[i].rule);
    return MT_OK;
}

static bool rms_like(const mt_norm_cfg *cfg) {
    return cfg->kind == MT_NORM_RMS || cfg->kind == MT_NORM_PRMS;
}

float mt_norm_eps(const mt_norm_cfg *cfg) {
    if (cfg->eps != MT_NORM_EPS_DEFAULT) return cfg->eps;
    return rms_like(cfg) && cfg->rms_form == MT_RMS_PAPER ? 1e-8f : 1e-5f;
}

mt_status mt_norm_validate(const mt_norm_cfg *cfg, int C, bool causal, mt_err *err) {
    const char *name = mt_enum_name(&MT_NORMS, cfg->kind);
    if (cfg->kind < 0 || (int)cfg->kind >= MT_NORMS.n)
        return mt_errorf(err, MT_EINVAL, "--norm: unknown norm kind %d", (int)cfg->kind);
    if (C < 1) return mt_errorf(err, MT_EINVAL, "--norm %s: %d channels, need at least 1", name, C);
    if (isnan(cfg->eps) || (cfg->eps < 0 && cfg->eps != MT_NORM_EPS_DEFAULT))
        return mt_errorf(err, MT_EINVAL, "--norm-eps: %g; eps must be >= 0 (e.g. 1e-5)", cfg->eps);
    if (cfg->kind == MT_NORM_PRMS && !(cfg->prms_p > 0 && cfg->prms_p <= 1))
        return mt_errorf(err, MT_EINVAL,
                         "--prms-p: %g is outside (0, 1]; it is the fraction of the %d channels "
                         "the RMS is taken from (the paper uses 0.0625)",
                         cfg->prms_p, C);
    if (cfg->kind == MT_NORM_GN && (cfg->gn_groups < 1 || C % cfg->gn_groups != 0))
        return mt_errorf(err, MT_EINVAL,
                         "--gn-groups: %d groups do not divide the %d channels; use a divisor "
                         "of %d (1 is LayerNorm-like, %d InstanceNorm-like)",
                         cfg->gn_groups, C, C, C);
    mt_norm_cfg unset = mt_norm_default(cfg->kind);
    mt_status st = mt_fields_check_unread(&MT_NORM_FIELDS, cfg, &unset, err);
    if (st == MT_OK) st = point_validate(cfg, err);
    if (st != MT_OK) return st;
    if (causal && (cfg->kind == MT_NORM_BN || cfg->kind == MT_NORM_IN))
        return mt_errorf(
            err, MT_EINVAL,
            "--norm %s: refused for a causal model: %s takes its statistics over %s, which "
            "includes the future tokens of every position, so training could read the future "
            "and generation (which has no future) would behave differently; it is available for "
            "non-causal models (the ViT, --model vit); a causal model can use ln, rms, prms, gn, "
            "scale, dyt, derf or none",
            name, cfg->kind == MT_NORM_BN ? "BatchNorm" : "InstanceNorm",
            cfg->kind == MT_NORM_BN ? "the batch and time (B*T)" : "time (T)");
    return MT_OK;
}

void mt_norm_add_params(mt_params *P, const char *prefix, const mt_norm_cfg *cfg, int C,
                        mt_norm_params *np) {
    *np = MT_NORM_PARAMS_NONE;
    char name[96];
    const int shape[] = {C};
#define ADD(field, suffix, role, init, value)                                                      \
    (snprintf(name, sizeof name, "%s.%s", prefix, suffix),                                         \
     np->field = mt_params_add(P, name, 1, shape, role, init, value))
    bool affine = cfg->kind == MT_NORM_LN || rms_like(cfg) || cfg->kind == MT_NORM_BN ||
                  cfg->kind == MT_NORM_GN || (cfg->kind == MT_NORM_IN && cfg->in_affine) ||
                  point_wise(cfg);
    bool bias = affine && (!rms_like(cfg) || (cfg->rms_form == MT_RMS_PAPER && cfg->rms_bias));
    if (affine) /* 1, or DyT's and Derf's --dyt-weight-init */
        ADD(weight, "weight", MT_ROLE_NORM, MT_INIT_CONST,
            point_wise(cfg) ? cfg->dyt_weight_init : 1.0f);
    if (bias) ADD(bias, "bias", MT_ROLE_NORM, MT_INIT_ZEROS, 0);
    if (cfg->kind == MT_NORM_BN) {
        ADD(running_mean, "running_mean", MT_ROLE_BUFFER, MT_INIT_ZEROS, 0);
        ADD(running_var, "running_var", MT_ROLE_BUFFER, MT_INIT_ONES, 0);
    }
    if (cfg->kind == MT_NORM_SCALE) {
        snprintf(name, sizeof name, "%s.g", prefix);
        np->g = mt_params_add(P, name, 1, (const int[]){1}, MT_ROLE_NORM, MT_INIT_CONST,
                              sqrtf((float)C));
    }
    if (point_wise(cfg)) {
        snprintf(name, sizeof name, "%s.alpha", prefix);
        np->alpha = mt_params_add(P, name, 1, (const int[]){1}, MT_ROLE_NORM, MT_INIT_CONST,
                                  cfg->dyt_alpha);
    }
    if (cfg->kind == MT_NORM_DERF) {
        snprintf(name, sizeof name, "%s.shift", prefix);
        np->shift = mt_params_add(P, name, 1, (const int[]){1}, MT_ROLE_NORM, MT_INIT_CONST,
                                  cfg->derf_shift);
    }
#undef ADD
}

static mt_tensor *param(mt_params *P, int i) { return i >= 0 ? &P->t[i] : NULL; }

mt_tensor *mt_norm_tokens(mt_ctx *c, const mt_norm_cfg *cfg, mt_params *P, const mt_norm_params *np,
                          mt_tensor *x) {
    mt_tensor *w = param(P, np->weight), *b = param(P, np->bias);
    float eps = mt_norm_eps(cfg);
    switch (cfg->kind) {
    case MT_NORM_LN: return mt_layernorm(c, x, w, b, eps);
    case MT_NORM_RMS: return mt_rmsnorm(c, x, w, b, eps, cfg->rms_form);
    case MT_NORM_PRMS: return mt_prmsnorm(c, x, w, b, cfg->prms_p, eps, cfg->rms_form);
    case MT_NORM_SCALE: return mt_scalenorm(c, x, param(P, np->g), eps);
    case MT_NORM_BN:
        return mt_batchnorm(c, x, w, b, param(P, np->running_mean), param(P, np->running_var),
                            BN_MOMENTUM, eps, true);
    case MT_NORM_IN: return mt_instancenorm(c, x, w, b, eps, true);
    case MT_NORM_GN: { /* per token: x as (B T, C) */
        int C = mt_cols(x);
        mt_tensor *y = mt_groupnorm(c, mt_reshape(c, x, 2, (int[]){mt_rows(x), C}), cfg->gn_groups,
                                    w, b, eps, false);
        return mt_reshape(c, y, x->ndim, x->shape);
    }
    case MT_NORM_NONE: return x;
    case MT_NORM_DYT: return mt_dyt(c, x, param(P, np->alpha), w, b);
    case MT_NORM_DERF: return mt_derf(c, x, param(P, np->alpha), param(P, np->shift), w, b);
    }
    MT_ASSERT(0, "norm_tokens: unknown norm kind %d", (int)cfg->kind);
}
