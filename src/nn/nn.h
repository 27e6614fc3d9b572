/* mt nn: layers as fused ops over the tensor core.
 * Dimension letters: B batch, T time, C channels, NH heads, HS head size, F FFN width,
 * N rows (B*T), L length, H W image height and width, G groups. */
#ifndef MT_NN_H
#define MT_NN_H

#include "../tensor/tensor.h"

/* ---- normalization (issue 3) --------------------------------------------------------------------
 * The contract the models use; each norm is also a fused op of its own (declared below it). */
typedef enum {
    MT_NORM_LN,    /* LayerNorm */
    MT_NORM_RMS,   /* RMSNorm (LLaMA form or the paper's code form) */
    MT_NORM_PRMS,  /* partial RMSNorm */
    MT_NORM_BN,    /* BatchNorm */
    MT_NORM_IN,    /* InstanceNorm */
    MT_NORM_GN,    /* GroupNorm */
    MT_NORM_SCALE, /* ScaleNorm */
    MT_NORM_NONE,  /* identity, for ablations */
} mt_norm_kind;

typedef enum { MT_RMS_LLAMA, MT_RMS_PAPER } mt_rms_form;

#define MT_NORM_EPS_DEFAULT (-1.0f)

typedef struct {
    mt_norm_kind kind;
    float eps;            /* MT_NORM_EPS_DEFAULT: the kind's default (1e-5; 1e-8 for RMSNorm's
                             paper form); any other negative value is an error */
    float prms_p;         /* pRMSNorm: fraction of C the RMS is taken from, (0, 1] */
    int gn_groups;        /* GroupNorm: G groups, G divides C */
    mt_rms_form rms_form;
    bool rms_bias;        /* RMSNorm paper form: a learned bias */
    bool in_affine;       /* InstanceNorm: learned weight and bias (off by default, as in torch) */
} mt_norm_cfg;

mt_norm_cfg mt_norm_default(mt_norm_kind kind);
const char *mt_norm_name(mt_norm_kind kind); /* "ln", "rms", "prms", "bn", "in", "gn", ... */
mt_status mt_norm_parse(const char *name, mt_norm_kind *kind, mt_err *err);
/* Checks the options for C channels. causal: a model that reads tokens left to right, where
   BatchNorm's and InstanceNorm's statistics over time would let it see the future. */
mt_status mt_norm_validate(const mt_norm_cfg *cfg, int C, bool causal, mt_err *err);

/* Indices into mt_params of a norm's parameters, -1 where the kind has none. */
typedef struct {
    int weight, bias, running_mean, running_var, g;
} mt_norm_params;

/* Adds <prefix>.weight, .bias, .running_mean, .running_var or .g as the kind has them. */
void mt_norm_add_params(mt_params *P, const char *prefix, const mt_norm_cfg *cfg, int C,
                        mt_norm_params *np);
/* Normalizes tokens x (B, T, C), channels last: per token for ln, rms, prms, scale and gn
   (groups of C/G channels); over B*T per channel for bn (batch statistics when c->training,
   running statistics otherwise, which training updates); over T per sample and channel for in. */
mt_tensor *mt_norm_tokens(mt_ctx *c, const mt_norm_cfg *cfg, mt_params *P,
                          const mt_norm_params *np, mt_tensor *x);
/* The eps the kind uses when cfg->eps is MT_NORM_EPS_DEFAULT. */
float mt_norm_eps(const mt_norm_cfg *cfg);

/* The fused ops. w (C) and b (C) may be NULL (no affine part); eps >= 0.
   Per row of x (..., C): */
mt_tensor *mt_layernorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float eps);
mt_tensor *mt_rmsnorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float eps,
                      mt_rms_form form);
/* The RMS of the first k = mt_prms_k(C, p) channels scales all C; p in (0, 1]. */
mt_tensor *mt_prmsnorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float p, float eps,
                       mt_rms_form form);
int mt_prms_k(int C, float p); /* floor(C p), at least 1 */
/* g * x / max(||x||, eps), g a learned scalar (1). */
mt_tensor *mt_scalenorm(mt_ctx *c, mt_tensor *x, mt_tensor *g, float eps);

/* ---- linear, embedding, attention, FFN, residual blocks (issue 4) ----------------------------- */
typedef enum { MT_ACT_GELU, MT_ACT_GELU_ERF, MT_ACT_RELU, MT_ACT_SILU } mt_act; /* GELU: tanh form */
typedef enum { MT_PLACE_PRE, MT_PLACE_POST, MT_PLACE_DEEPNORM } mt_placement;

/* y = x W^T + b, as torch.nn.Linear: x (..., K), w (O, K), b (O) or NULL -> (..., O). */
mt_tensor *mt_linear(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b);

/* Multi-head scaled dot-product attention, one fused op: q, k, v (B, T, C), C = NH * HS, head h
   the channels [h HS, (h+1) HS). Per (b, h): softmax(q k^T / sqrt(HS), masked to s <= t when
   causal) v -> (B, T, C). Non-causal for encoders. */
mt_tensor *mt_attention(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                        bool causal);
#endif
