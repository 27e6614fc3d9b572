/* mt nn: layers as fused ops over the tensor core.
 * Dimension letters: B batch, T time, C channels, NH heads, HS head size, F FFN width,
 * N rows (B*T), L length, H W image height and width, G groups. */
#ifndef MT_NN_H
#define MT_NN_H

#include "../io/fields.h"
#include "../tensor/base.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"

/* ---- normalization ------------------------------------------------------------------------------
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
    MT_NORM_DYT,   /* Dynamic Tanh: w tanh(alpha x) + b, no statistics */
    MT_NORM_DERF,  /* Dynamic erf: w erf(alpha x + s) + b, no statistics */
} mt_norm_kind;

typedef enum { MT_RMS_LLAMA, MT_RMS_PAPER } mt_rms_form;
extern const mt_enum MT_RMS_FORMS; /* "llama", "paper" */

#define MT_NORM_EPS_DEFAULT (-1.0f)

typedef struct {
    mt_norm_kind kind;
    float eps;     /* MT_NORM_EPS_DEFAULT: the kind's default (1e-5; 1e-8 for RMSNorm's
                             paper form); any other negative value is an error */
    float prms_p;  /* pRMSNorm: fraction of C the RMS is taken from, (0, 1] */
    int gn_groups; /* GroupNorm: G groups, G divides C */
    mt_rms_form rms_form;
    bool rms_bias;  /* RMSNorm paper form: a learned bias */
    bool in_affine; /* InstanceNorm: learned weight and bias (off by default, as in torch) */
    /* DyT and Derf: the initial alpha of every site, and of the attention's (self and cross:
       the norms of those sublayers), the FFN's and the final norm's (0: dyt_alpha); Derf's
       initial shift s */
    float dyt_alpha, dyt_alpha_attn, dyt_alpha_ffn, dyt_alpha_final, derf_shift;
    float dyt_weight_init; /* DyT and Derf: the initial weight gamma of every norm (1) */
} mt_norm_cfg;

mt_norm_cfg mt_norm_default(mt_norm_kind kind);
/* The norm's fields under their JSON keys (norm, norm_eps, prms_p, gn_groups, ..., dyt_alpha,
   derf_shift, dyt_weight_init), which are also the flags, each a kind's with the kind that reads
   it (mt_field.read): a TABLE field of the stack's. dyt_alpha_final is the stack's (read where
   its placement has a final norm). */
extern const mt_fields MT_NORM_FIELDS;
extern const mt_enum MT_NORMS; /* "ln", "rms", "prms", "bn", "in", "gn", "scale", "none", "dyt",
                                  "derf" */
/* Checks the options for C channels (one that the kind does not read, set: refused, naming what
   reads it). causal: a model that reads tokens left to right, where
   BatchNorm's and InstanceNorm's statistics over time would let it see the future. */
mt_status mt_norm_validate(const mt_norm_cfg *cfg, int C, bool causal, mt_err *err);

/* Where a norm sits, for the options that differ per site (DyT's and Derf's initial alpha). */
typedef enum { MT_NORM_SITE_ATTN, MT_NORM_SITE_FFN, MT_NORM_SITE_FINAL } mt_norm_site;
/* cfg with the site's initial alpha as dyt_alpha (a copy, for mt_norm_add_params). */
mt_norm_cfg mt_norm_at(const mt_norm_cfg *cfg, mt_norm_site site);

/* Indices into mt_params of a norm's parameters, -1 where the kind has none. */
typedef struct {
    int weight, bias, running_mean, running_var, g;
    int alpha, shift; /* DyT, Derf: (1) each; Derf's shift */
} mt_norm_params;
/* A norm with no parameters (none, or not built): every index -1. */
#define MT_NORM_PARAMS_NONE                                                                        \
    ((mt_norm_params){.weight = -1,                                                                \
                      .bias = -1,                                                                  \
                      .running_mean = -1,                                                          \
                      .running_var = -1,                                                           \
                      .g = -1,                                                                     \
                      .alpha = -1,                                                                 \
                      .shift = -1})
_Static_assert(sizeof(mt_norm_params) == 7 * sizeof(int), "MT_NORM_PARAMS_NONE sets every field");

/* Adds <prefix>.weight, .bias, .running_mean, .running_var, .g, .alpha or .shift as the kind has
   them (DyT: weight = cfg->dyt_weight_init, bias, alpha = cfg->dyt_alpha; Derf: also shift =
   cfg->derf_shift). */
void mt_norm_add_params(mt_params *P, const char *prefix, const mt_norm_cfg *cfg, int C,
                        mt_norm_params *np);
/* Normalizes tokens x (B, T, C), channels last: per token for ln, rms, prms, scale and gn
   (groups of C/G channels); over B*T per channel for bn (batch statistics when c->training,
   running statistics otherwise, which training updates); over T per sample and channel for in. */
mt_tensor *mt_norm_tokens(mt_ctx *c, const mt_norm_cfg *cfg, mt_params *P, const mt_norm_params *np,
                          mt_tensor *x);
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
/* Point-wise, no statistics (norm_point.c), x (..., C), alpha (1), s (1), w (C) and b (C) or
   NULL: DyT y = w tanh(alpha x) + b; Derf y = w erf(alpha x + s) + b. */
mt_tensor *mt_dyt(mt_ctx *c, mt_tensor *x, mt_tensor *alpha, mt_tensor *w, mt_tensor *b);
mt_tensor *mt_derf(mt_ctx *c, mt_tensor *x, mt_tensor *alpha, mt_tensor *s, mt_tensor *w,
                   mt_tensor *b);
/* Over other axes: x (N, C, *spatial) channels-first as torch takes it ((N, C), (N, C, L),
   (N, C, H, W)), or (N, *spatial, C) when channels_last (tokens (B, T, C)).
   BatchNorm: per channel over N and spatial; with c->training (or no running statistics) the
   batch statistics, and running_mean, running_var (C) (NULL: not tracked) are updated with
   momentum and the unbiased variance; otherwise the running statistics. */
mt_tensor *mt_batchnorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b,
                        mt_tensor *running_mean, mt_tensor *running_var, float momentum, float eps,
                        bool channels_last);
/* InstanceNorm: per sample and channel over the spatial dims (at least one). */
mt_tensor *mt_instancenorm(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, float eps,
                           bool channels_last);
/* GroupNorm: per sample over G groups of C/G channels and the spatial dims; G divides C. */
mt_tensor *mt_groupnorm(mt_ctx *c, mt_tensor *x, int G, mt_tensor *w, mt_tensor *b, float eps,
                        bool channels_last);

/* ---- QK-Clip (qk_clip.c): MuonClip's rescaling after an optimizer step --------------------------
 * (Kimi K2, arXiv 2507.20534, sec. 2.1, Algorithm 1.) For each attention head h with S_h, its
 * largest logit q.k / sqrt(HS) of the step (mt_ctx.qk_max), above tau: eta_h = tau / S_h, and
 * W_q's and W_k's rows of the head (their biases' too) times sqrt(eta_h); with grouped key heads
 * the shared key head takes sqrt(e), e = min eta over its query heads, and each query head
 * eta_h / sqrt(e): every logit of head h times eta_h exactly. The attentions are the blocks'
 * (mt_block_add_params' names); no QK-norm (the logits are bounded by its gains, not by W_q and
 * W_k): the caller refuses it. */
typedef struct {
    int q_w, q_b, k_w, k_b; /* entries of the table; biases -1 when none */
    int NH, NKV, HS;        /* query heads, key heads, head size */
    int at;                 /* the slot of its head 0 in a step's maxima */
} mt_qk_attn;
typedef struct {
    float tau;
    int n, heads;     /* attentions, and their heads: the slots of a step's maxima */
    mt_qk_attn *attn; /* (n) in table order */
    int *slot;        /* (P->n) an attention's first slot by its q_proj weight's entry, else -1:
                          mt_ctx.qk_slot */
} mt_qk_clip;
/* The attentions of P (n_head query heads each), none of their q_proj and k_proj entries
   frozen (MT_EINVAL naming it); MT_EINVAL when P has none. */
mt_status mt_qk_clip_init(mt_qk_clip *q, const mt_params *P, int n_head, float tau, mt_err *err);
/* smax (heads) = -inf: a step's maxima before its forwards max-accumulate into it. */
void mt_qk_clip_reset(float *smax, int heads);
/* The rescaling of every head whose smax (heads) exceeds tau (P's bf16 copy refreshed); returns
   the heads clipped, and each attention's in per_attn (n; NULL: not asked). No allocation. */
int mt_qk_clip_apply(const mt_qk_clip *q, mt_params *P, const float *smax, int *per_attn);
void mt_qk_clip_free(mt_qk_clip *q);

/* ---- the attention's methods (attn_methods.c): options of every self-attention ------------------
 * gate  gated attention (Qiu et al. 2025, arXiv 2505.06708, the paper's G1; qiuzh20/
 *       gated_attention): Y' = Y * sigmoid(X W_theta + b) on the heads' output Y (B, T, C) before
 *       the output projection, X the sublayer's input; W_theta (C, C) elementwise, (NH, C)
 *       headwise (one gate per head over its HS channels); init as q_proj, b as the biases.
 * sink  a learned logit z_h per head in the softmax's denominator (gpt-oss, openai/gpt-oss's
 *       sdpa): P_ts = exp(S_ts) / (exp(z_h) + sum_u exp(S_tu)); init N(0, q_proj's std) as HF
 *       transformers' GptOss.
 * softmax  softpick (Zuhri et al. 2025, arXiv 2504.20966; zaydzuhri/softpick-attention):
 *       relu(exp(S) - 1) / (sum |exp(S) - 1| + eps) over the keys a query sees, in place of
 *       softmax (mt_attn_mask.softpick).
 * value_residual  ResFormer's value residual (Zhou et al. 2024, arXiv 2410.17897; its code
 *       Zcchill/Value-Residual-Learning, and modded-nanogpt's learned form): block n >= 2
 *       attends to V'_n = lambda_1 V_1 + lambda_2 V_n, V_1 the first block's values (its
 *       gradient flowing back from every block); half: lambda_1 = lambda_2 = 1/2 (the paper's
 *       ResFormer), learned: both learned per block, init 1/2 (the paper's Learnable-ResFormer). */
typedef enum { MT_ATTN_GATE_NONE, MT_ATTN_GATE_ELEMENTWISE, MT_ATTN_GATE_HEADWISE } mt_attn_gate;
extern const mt_enum MT_ATTN_GATES; /* "none", "elementwise", "headwise" */
typedef enum { MT_SOFTMAX, MT_SOFTPICK } mt_attn_softmax;
extern const mt_enum MT_ATTN_SOFTMAXES; /* "softmax", "softpick" */
typedef enum {
    MT_VALUE_RESIDUAL_NONE,
    MT_VALUE_RESIDUAL_HALF,
    MT_VALUE_RESIDUAL_LEARNED
} mt_value_residual;
extern const mt_enum MT_VALUE_RESIDUALS; /* "none", "half", "learned" */
typedef struct {
    mt_attn_gate gate;
    bool sink;
    mt_attn_softmax softmax;
    mt_value_residual value_residual;
} mt_attn_cfg;
/* attn_gate, attn_sink, softmax, value_residual: a TABLE field of the stack's */
extern const mt_fields MT_ATTN_FIELDS;
mt_status mt_attn_cfg_validate(const mt_attn_cfg *a, mt_err *err);
/* y (..., C) * sigmoid(z) with z (..., C / G): each gate z_j over G adjacent channels of y
   (G = 1 elementwise, HS headwise). */
mt_tensor *mt_sigmoid_gate(mt_ctx *c, mt_tensor *y, mt_tensor *z);

/* ---- linear, embedding, attention, FFN, residual blocks -------------------------------------- */
typedef enum {
    MT_PLACE_PRE,
    MT_PLACE_POST,
    MT_PLACE_DEEPNORM,
    MT_PLACE_SUBLN,   /* Sub-LN (Magneto) */
    MT_PLACE_PERI,    /* Peri-LN */
    MT_PLACE_LNS,     /* LayerNorm Scaling: Pre-LN, N(x) / sqrt(layer + 1) */
    MT_PLACE_REORDER, /* OLMo-2: x + N(F(x)) */
    MT_PLACE_MIXLN,   /* Mix-LN: Post-LN in the first mixln_post blocks, Pre-LN after */
    MT_PLACE_DSL,     /* DeepScaleLM: lambda x + beta F(N(x)) */
} mt_placement;

/* How a block's sublayers join the residual stream: the slot of the residual-stream methods. A
   model sets it (no flag of the stack's); a method whose stream is not a sum of the sublayers
   reads no placement. */
typedef enum {
    MT_RESIDUAL_SUM,  /* x + F(...) as the placement says */
    MT_RESIDUAL_NGPT, /* nGPT: Norm(x + alpha (Norm(F(x)) - x)) on the unit sphere, no norm
                         layer (the GPT's --arch ngpt) */
    MT_RESIDUAL_HC,   /* hyper-connections: N streams (mt_hyper_cfg, the stack's --residual) */
} mt_residual_kind;

/* Hyper-connections (Zhu et al. 2024, arXiv 2409.19606; src/nn/hyper.c): the stack's --residual,
   the residual stream widened to `streams` copies H (N, C) per token. Each sublayer reads
   h = sum_i A_m[i] H_i and writes H' = A_r^T H + B^T F(Norm(h)); hc: A = (A_m A_r) (N, N+1), B
   (N) learned (static) plus, dynamic, s_a tanh(Norm(H) W_a) and s_b tanh(Norm(H) W_b). */
typedef enum { MT_HYPER_NONE, MT_HYPER_HC, MT_HYPER_MHC } mt_hyper_kind;
extern const mt_enum MT_HYPERS; /* "sum", "hc", "mhc" */
#define MT_HC_MAX_STREAMS 16
typedef struct {
    mt_hyper_kind kind;
    int streams;   /* N, 1..MT_HC_MAX_STREAMS */
    bool dynamic;  /* DHC's input-dependent terms (the paper's default) */
    int mhc_iters; /* mHC (Xie et al. 2025, arXiv 2512.24880): Sinkhorn-Knopp's iterations */
} mt_hyper_cfg;

/* y = x W^T + b, as torch.nn.Linear: x (..., K), w (O, K), b (O) or NULL -> (..., O). */
mt_tensor *mt_linear(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b);
/* LoRA: x (..., K) -> x W^T + b + s (xd A^T) B^T, W (O, K), b (O) or NULL, A (r, K), B (O, r),
   xd x's shape (dropout(x), or x). One op: W's gradient, NULL when frozen, is skipped. */
mt_tensor *mt_linear_lora(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b, mt_tensor *A,
                          mt_tensor *B, mt_tensor *xd, float s);

/* The FFN fc2(act(fc1(x))) as one fused op: y = act(x W1^T + b1) W2^T + b2, x (..., C),
   w1 (F, C), b1 (F) or NULL, w2 (C, F), b2 (C) or NULL -> (..., C). Keeps only x W1^T + b1 for
   backward (which recomputes the activation), one N x F buffer instead of the chain's two.
   act MT_ACT_SWIGLU (LLaMA's FFN): y = (silu(x W1^T + b1) * (x W3^T + b3)) W2^T + b2 with
   w3 (F, C), b3 (F) or NULL; keeps the two N x F products. w3 and b3 are NULL for the others. */
mt_tensor *mt_ffn(mt_ctx *c, mt_tensor *x, mt_tensor *w1, mt_tensor *b1, mt_tensor *w2,
                  mt_tensor *b2, mt_tensor *w3, mt_tensor *b3, mt_act act);

/* QK-norm (norm_qk.c): a norm on an attention's queries and keys after their projections and
   before RoPE, as Qwen3, Gemma 3 (per head) and OLMo-2 (the whole projection) place it
   (docs/layers.md). rms: x / sqrt(mean(x^2) + 1e-6); ln: (x - mean) / sqrt(var + 1e-5); each
   times a learned weight with affine (HS per head, shared by the heads; else the projection's
   width). l2: g x / max(||x||, 1e-12), g one learned scalar (init sqrt(width)), affine only. */
typedef enum { MT_QK_NONE, MT_QK_RMS, MT_QK_LN, MT_QK_L2 } mt_qk_norm_kind;
typedef enum { MT_QK_HEAD, MT_QK_ALL } mt_qk_norm_scope;
typedef struct {
    mt_qk_norm_kind kind;
    mt_qk_norm_scope scope;
    bool affine; /* a learned gain */
} mt_qk_norm_cfg;
extern const mt_enum MT_QK_NORMS;  /* "none", "rms", "ln", "l2" */
extern const mt_enum MT_QK_SCOPES; /* "head", "all" */
/* Refuses what makes no sense (the reason in err): scope or affine without a norm, l2 without a
   gain, LayerNorm per head of size 1. */
mt_status mt_qk_norm_validate(const mt_qk_norm_cfg *qk, int HS, mt_err *err);
/* With affine, <prefix>.q_norm.* and <prefix>.k_norm.* for queries of C and keys of KC
   channels; *q, *k their indices, -1 without. */
void mt_qk_norm_add_params(mt_params *P, const char *prefix, const mt_qk_norm_cfg *qk, int HS,
                           int C, int KC, int *q, int *k);
/* x (..., W), W a multiple of HS, normalised per head of HS channels or whole, gain P->t[gain]
   (-1: none); x itself for kind none. */
mt_tensor *mt_qk_norm(mt_ctx *c, const mt_qk_norm_cfg *qk, int HS, mt_params *P, int gain,
                      mt_tensor *x);

/* Multi-head scaled dot-product attention, one fused op: q (B, T, C), C = NH * HS, head h the
   channels [h HS, (h+1) HS); k, v (B, T, KC) with KC = NKV HS, NKV dividing NH (grouped-query
   attention; KC = C: one key-value head per head), head h reading key-value head h / (NH / NKV).
   Per (b, h): softmax(q k^T / sqrt(HS), masked to s <= t when causal) v -> (B, T, C).
   Non-causal for encoders. */
mt_tensor *mt_attention(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                        bool causal);
/* The same with queries and keys of different lengths and a key-padding mask: q (B, Tq, C),
   k, v (B, Tk, C) -> (B, Tq, C); kv_len (B) or NULL (all Tk): row b's queries see keys
   [0, kv_len[b]) only, 1 <= kv_len[b] <= Tk (the keys past a sequence's end are padding); causal
   (Tq == Tk): also s <= t. Cross-attention (decoder queries on encoder keys) and variable-length
   self-attention. */
mt_tensor *mt_attention_masked(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                               bool causal, const int *kv_len);
/* The general form, which the two above are: q (B, Tq, C), k, v (B, Tk, KC) (grouped heads as
   mt_attention's) -> (B, Tq, C); query t stands at position pos0 + t of the sequence the keys
   are positions 0.. of; row b's queries see keys [0, kv_len[b]) (NULL: all Tk), and with causal
   only s <= pos0 + t. pos0 > 0: the new tokens of a generation over the keys of a KV cache. */
typedef struct {
    bool causal;
    int pos0;
    const int *kv_len; /* (B) in [1, Tk], or NULL */
    mt_tensor *sink;   /* (NH) learned sink logits (gpt-oss: a column of the softmax, dropped
                        after it), or NULL; never the fused op */
    bool softpick;     /* softpick in place of softmax (not with a sink); never the fused op */
} mt_attn_mask;
mt_tensor *mt_attention_ex(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                           const mt_attn_mask *mask);

/* A KV cache: the keys and values an attention has seen, per layer, for B rows of up to cap
   positions of KC channels (n_kv_head HS), so that a new token attends to them without
   recomputing them. Generation (the GPT) and decoding (the encoder-decoder's self-attention, and
   its cross-attention's keys of the encoder output, stored once) share it. k, v
   (n_layer, B, cap, KC); positions [0, len) hold keys, the same count in every row and layer. */
typedef struct {
    int n_layer, B, cap, KC;
    int len;
    float *k, *v;
    float *owned; /* mt_attn_cache_alloc's block, else NULL (in an arena) */
} mt_attn_cache;
/* Empty caches (len 0) in a block of their own (free with mt_attn_cache_free; MT_ENOMEM naming
   the size), or in c's arena. */
mt_status mt_attn_cache_alloc(mt_attn_cache *kv, int n_layer, int B, int cap, int KC, mt_err *err);
void mt_attn_cache_arena(mt_ctx *c, mt_attn_cache *kv, int n_layer, int B, int cap, int KC);
void mt_attn_cache_free(mt_attn_cache *kv);
/* k, v (B, n, KC) into layer `layer` at positions [pos, pos + n) (len unchanged). */
void mt_attn_cache_put(mt_attn_cache *kv, int layer, int pos, const mt_tensor *k,
                       const mt_tensor *v);
/* Tensors (B, cap, KC) over a layer's keys and values (arena headers, the cache's memory). */
void mt_attn_cache_layer(mt_ctx *c, const mt_attn_cache *kv, int layer, mt_tensor **k,
                         mt_tensor **v);
/* Row j of every layer takes row from[j]'s positions [0, len), j < rows (beam search: the
   rows follow their hypotheses); scratch from c's arena, given back. */
void mt_attn_cache_gather(mt_ctx *c, mt_attn_cache *kv, const int *from, int rows);
/* Causal self-attention of n new positions over the cache: k, v (B, n, KC) join layer `layer`
   at positions [len, len + n), then q (B, n, C) attends to positions [0, len + n), query t at
   position len + t (mt_attention_ex), with softmax's sink and softpick (its other fields
   unread). The caller adds n to len once every layer has run. */
mt_tensor *mt_attention_cached(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v,
                               mt_attn_cache *kv, int layer, int n_head,
                               const mt_attn_mask *softmax);

/* Rotary position embedding (RoPE; Su et al. 2021, arXiv 2104.09864), llama2.c's convention:
   each head's adjacent channel pair (x[2i], x[2i+1]), i < HS/2, rotated by the angle
   p theta^(-2i/HS) at position p (docs/layers.md). The cos and sin of every angle are tabled,
   in double, for the positions asked for so far (the first apply of a training run asks for all
   n_pos; generation for as many as it reached, doubling): a config's n_pos costs nothing until
   positions are used. */
typedef struct {
    int n_pos, HS;
    float theta;
    float *cs; /* (rows, HS/2, 2): cos, sin of positions [0, rows) */
    int rows;
    void *tables; /* cs's table, then those it replaced (nodes built before still read them) */
} mt_rope;
mt_status mt_rope_init(mt_rope *r, int n_pos, int HS, float theta, mt_err *err);
void mt_rope_free(mt_rope *r);
/* x (B, T, W), W heads of r->HS channels side by side -> x with row (b, t) rotated at position
   pos0 + t; pos0 + T <= r->n_pos. */
mt_tensor *mt_rope_apply(mt_ctx *c, const mt_rope *r, mt_tensor *x, int pos0);

mt_tensor *mt_activation(mt_ctx *c, mt_act act, mt_tensor *x);
extern const mt_enum MT_ACTS;       /* "gelu", "gelu_erf", "relu", "silu", "swiglu", "relu2" */
extern const mt_enum MT_PLACEMENTS; /* "pre", "post", "deepnorm", "subln", "peri", "lns",
                                       "reorder", "mixln", "dsl" */

/* ---- nGPT, the normalised Transformer (Loshchilov et al. 2024, arXiv 2410.01131; ngpt.c) -------
 * Each learned scaling s is stored as s_scale times the value it acts with, s_init / s_scale
 * times the stored one (the reference's trick: the optimizer sees it at the scale s_scale):
 *   alpha  eigen learning rates of the attention and the FFN (C each), init 0.05, scale 1/sqrt(C)
 *   s_qk   on the unit queries and keys per head channel (C), init 1, scale 1/sqrt(C)
 *   s_u    on SwiGLU's linear branch fc3 (F), init 1, scale 1; s_v on its gate fc1 (F), the same
 *          and times sqrt(C)
 *   s_z    on the logits (V), init 1, scale 1/sqrt(C) (the GPT's head)
 * A scale of 0 in a config means 1/sqrt(C) where the paper has it (resolved by validation). */
typedef struct {
    float alpha_init, alpha_scale, sqk_init, sqk_scale, suv_init, suv_scale, sz_init, sz_scale;
} mt_ngpt_cfg;
/* The paper's: 0.05, 1/sqrt(C) (0), 1, 1/sqrt(C) (0), 1, 1, 1, 1/sqrt(C) (0). */
mt_ngpt_cfg mt_ngpt_default(void);

/* y = k s * x, s (W) a learned vector over the last dim of x (..., W), k a constant:
   dx += k s dy, ds += k sum_rows dy x (down the rows in order, in double). */
mt_tensor *mt_scale_channels(mt_ctx *c, mt_tensor *x, mt_tensor *s, float k);
/* nGPT's residual update, one fused op per row of h, y (..., C):
   out = Norm(h + a (Norm(y) - h)), Norm(x) = x / ||x||, a = k |alpha| (alpha (C) learned, the
   reference's absolute value). */
mt_tensor *mt_ngpt_residual(mt_ctx *c, mt_tensor *h, mt_tensor *y, mt_tensor *alpha, float k);

/* DeepNorm's constants (DeepNet, Wang et al. 2022, arXiv 2203.00555, table in docs/layers.md):
   alpha scales the skip branch, beta is the Xavier gain of fc1, fc2, v_proj and out_proj.
   N encoder layers, M decoder layers (a layer holds an attention and an FFN sublayer); the count
   an architecture does not have is ignored. */
typedef enum {
    MT_DEEPNORM_ENCODER_ONLY,   /* alpha (2N)^(1/4),          beta (8N)^(-1/4) */
    MT_DEEPNORM_DECODER_ONLY,   /* alpha (2M)^(1/4),          beta (8M)^(-1/4) */
    MT_DEEPNORM_ENCDEC_ENCODER, /* alpha 0.81 (N^4 M)^(1/16), beta 0.87 (N^4 M)^(-1/16) */
    MT_DEEPNORM_ENCDEC_DECODER, /* alpha (3M)^(1/4),          beta (12M)^(-1/4) */
} mt_deepnorm_arch;
void mt_deepnorm_constants(mt_deepnorm_arch arch, int N, int M, float *alpha, float *beta);
/* Sub-LN's init gain gamma (Magneto, Wang et al. 2022, arXiv 2210.06423, as torchscale computes
   it) for the same rows: sqrt(log 2N) encoder-only, sqrt(log 2M) decoder-only,
   sqrt(log(3M) log(2N) / 3) for an encoder-decoder's encoder, sqrt(log 3M) for its decoder. */
float mt_subln_gain(mt_deepnorm_arch arch, int N, int M);

/* ---- hyper-connections (hyper.c): x (R, C), H (R, N C) rows of N streams, R = B T; the
   coefficients a (N, N+1) shared by every row or (R, N, N+1) per row, b (N) or (R, N) ---- */
/* H_i = x for each stream i: (..., C) -> (..., N C) */
mt_tensor *mt_hc_expand(mt_ctx *c, mt_tensor *x, int N);
/* sum_i H_i: (..., N C) -> (..., C) */
mt_tensor *mt_hc_reduce(mt_ctx *c, mt_tensor *H, int N);
/* the width connection, h = sum_i a[i][0] H_i: (..., N C) -> (..., C) */
mt_tensor *mt_hc_width(mt_ctx *c, mt_tensor *H, mt_tensor *a, int N);
/* the depth connection, H'_j = sum_i a[i][1 + j] H_i + b[j] y: (..., N C) */
mt_tensor *mt_hc_depth(mt_ctx *c, mt_tensor *H, mt_tensor *a, mt_tensor *y, mt_tensor *b, int N);
/* DHC's coefficients: S + s tanh(Hn W) (use_tanh false, mHC's: S + s Hn W), Hn (R N, C) the
   normed streams, W (C, K), s (1), S (N K) -> (R, N K) */
mt_tensor *mt_hc_dynamic(mt_ctx *c, mt_tensor *Hn, mt_tensor *W, mt_tensor *s, mt_tensor *S, int N,
                         bool use_tanh);
/* mHC's maps of logits z (R, 2N + N^2) = [pre | post | res (N, N)]: (R, N (N+1) + N) = [a | b],
   a[i][0] = sigmoid(pre_i), a[i][1+j] = SinkhornKnopp_K(res)[j][i], b = 2 sigmoid(post) */
mt_tensor *mt_mhc_maps(mt_ctx *c, mt_tensor *z, int N, int K);
/* mHC's Amax gains of the residual mixing of S sublayers in forward order, their coefficients
   a[s] shared or per row (the same rows): out (S, 4) = the largest absolute row sum (the
   signal's gain) and column sum (the gradient's) of sublayer s's mixing H_s, then of the
   composite H_{S-1} ... H_s, each the max over the rows (hyper.c says how H_s reads a). */
void mt_hc_gains(const mt_tensor *const *a, int S, int N, double *out);

/* ---- one Transformer block: an attention and an FFN sublayer, each in a residual ---------------
 * Pre-LN:   x = x + F(N(x))        (and a final norm before the head: mt_placement_final_norm)
 * Post-LN:  x = N(x + F(x))
 * DeepNorm: x = N(alpha x + F(x))  (alpha on the skip branch)
 * Sub-LN:   x = x + F(N(x)), F with an inner norm before its output projection (final norm)
 * Peri-LN:  x = x + N_out(F(N(x)))  (final norm)
 * LNS:      x = x + F(N(x) / sqrt(l + 1)), l the block's index from 0 (final norm)
 * reorder:  x = x + N(F(x))        (OLMo-2; final norm)
 * Mix-LN:   Post-LN in blocks l < mixln_post, Pre-LN after (final norm)
 * DSL:      x = lambda x + beta F(N(x)), lambda^2 + beta^2 = 1 (DeepScaleLM; final norm)
 * and the residual methods that are not a sum (mt_residual_kind, no placement):
 * nGPT:     x = Norm(x + alpha (Norm(F(x)) - x)), no norm layers (mt_ngpt_residual); every
 *           matrix's vectors along C on the unit sphere, q and k unit per head then times
 *           s_qk (and sqrt(HS) for the softmax), SwiGLU's fc3(x) s_u, fc1(x) s_v sqrt(C)
 * HC:       H = A_r^T H + B^T F(N(A_m^T H)), H (N, C) the stack's streams (mt_hyper_cfg;
 *           x here is H, (B, T, N C))
 * F is dropout(attention) or dropout(FFN), Peri-LN's dropout after N_out; the attention is
 * out_proj(attention(q, k, v)), the FFN fc2(act(fc1(x))) (SwiGLU: fc2(silu(fc1(x)) fc3(x))), and
 * with Sub-LN out_proj(N_inner(attention(q, k, v))) and fc2(N_inner(act(fc1(x)))). */
typedef struct {
    int C, F, n_head; /* channels, FFN width, heads (divides C) */
    int n_kv_head;    /* the self-attention's key-value heads (divides n_head; 0: n_head):
                           k_proj and v_proj (n_kv_head HS, C), head h reading h / (NH / NKV) */
    bool bias;        /* biases on every projection */
    bool causal;      /* attention masked to the past (decoders) */
    bool cross;       /* a cross-attention sublayer between the two (encoder-decoder) */
    mt_norm_cfg norm;
    mt_qk_norm_cfg qk; /* QK-norm of every attention (self and cross) */
    mt_attn_cfg attn;  /* the self-attention's methods (gate, sink, softmax) */
    mt_residual_kind residual;
    mt_placement placement; /* of MT_RESIDUAL_SUM */
    float alpha;            /* DeepNorm's skip scale */
    mt_act act;
    float dropout; /* on each sublayer's output; 0: none */
    const mt_rope
        *rope;      /* RoPE on the self-attention's q and k (at positions 0..T-1); NULL: none */
    int layer;      /* the block's index from 0 in its stack (LNS's scale, Mix-LN's switch) */
    int mixln_post; /* Mix-LN: blocks [0, mixln_post) are Post-LN */
    float dsl_lambda, dsl_beta; /* DeepScaleLM's skip and branch scales */
    float branch;     /* placement pre: x + branch F(N(x)), CompleteP's L0 / L (--param); 0: 1 */
    mt_ngpt_cfg ngpt; /* nGPT's scalings (residual ngpt), scales resolved */
    mt_hyper_cfg hc;  /* hyper-connections (residual hc) */
} mt_block_cfg;

/* Indices into mt_params; biases -1 when the block has none, q_norm and k_norm the QK-norm's
   gains, gate_w and gate_b the gate's projection, sink the sink logits, lambda_v1 and lambda_v
   the learned value residual's scalars (-1: none). */
typedef struct {
    int q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
    int q_norm, k_norm;
    int gate_w, gate_b;
    int sink;
    int lambda_v1, lambda_v;
} mt_attn_params;
/* An attention not built (a block without cross-attention): every index -1. */
#define MT_ATTN_PARAMS_NONE                                                                        \
    ((mt_attn_params){.q_w = -1,                                                                   \
                      .q_b = -1,                                                                   \
                      .k_w = -1,                                                                   \
                      .k_b = -1,                                                                   \
                      .v_w = -1,                                                                   \
                      .v_b = -1,                                                                   \
                      .out_w = -1,                                                                 \
                      .out_b = -1,                                                                 \
                      .q_norm = -1,                                                                \
                      .k_norm = -1,                                                                \
                      .gate_w = -1,                                                                \
                      .gate_b = -1,                                                                \
                      .sink = -1,                                                                  \
                      .lambda_v1 = -1,                                                             \
                      .lambda_v = -1})
_Static_assert(sizeof(mt_attn_params) == 15 * sizeof(int), "MT_ATTN_PARAMS_NONE sets every field");
typedef struct {
    int fc1_w, fc1_b, fc2_w, fc2_b, fc3_w, fc3_b; /* fc3: SwiGLU's, else -1 */
} mt_ffn_params;
/* nGPT's learned vectors of a block (residual ngpt; else -1): attn_alpha, ffn_alpha (C),
   attn.s_qk (C), ffn.s_u, ffn.s_v (F). */
typedef struct {
    int attn_alpha, ffn_alpha, s_qk, s_u, s_v;
} mt_ngpt_params;
/* A sublayer's hyper-connection (residual hc; else -1): <prefix>.static_alpha (N, N+1),
   .static_beta (N) and, dynamic, .norm.* (C), .dynamic_alpha_fn (C, N+1), .dynamic_alpha_scale
   (1), .dynamic_beta_fn (C), .dynamic_beta_scale (1). */
/* mHC instead: <prefix>.b_pre, .b_post (N), .b_res (N, N) and, dynamic, .norm.* (N C),
   .phi_pre, .phi_post (N C, N), .phi_res (N C, N^2), .alpha_pre, .alpha_post, .alpha_res (1):
   b, phi and alpha in that order (pre, post, res). */
typedef struct {
    int static_alpha, static_beta, alpha_fn, alpha_scale, beta_fn, beta_scale;
    int b[3], phi[3], alpha[3];
    mt_norm_params norm;
} mt_hyper_params;
typedef struct {
    mt_norm_params attn_norm, ffn_norm;
    mt_ngpt_params ngpt;
    mt_hyper_params attn_hc, ffn_hc; /* <prefix>.attn_hc.*, .ffn_hc.* */
    mt_attn_params attn;
    mt_ffn_params ffn;
    mt_norm_params attn_inner, ffn_inner; /* Sub-LN: attn.inner_norm (C), ffn.inner_norm (F) */
    mt_norm_params attn_out, ffn_out;     /* Peri-LN: attn_out_norm, ffn_out_norm (C) */
    /* with cfg->cross: cross_attn_norm, cross_attn.*, (Sub-LN) cross_attn.inner_norm,
       (Peri-LN) cross_attn_out_norm */
    mt_norm_params cross_norm, cross_inner, cross_out;
    mt_attn_params cross;
} mt_block_params;

/* The sublayers of a block: its self-attention, (encoder-decoder) cross-attention, FFN. */
typedef enum { MT_SUB_ATTN, MT_SUB_FFN, MT_SUB_CROSS } mt_sub;

/* The std of each matrix's N(0, std^2) initialiser, chosen by the model's init scheme. */
typedef struct {
    float q, k, v, out, fc1, fc2;
} mt_block_init;

/* Adds <prefix>.attn_norm.*, <prefix>.attn.{q,k,v,out}_proj.{weight,bias}, (Sub-LN)
   <prefix>.attn.inner_norm.*, (Peri-LN) <prefix>.attn_out_norm.*, <prefix>.ffn_norm.*,
   <prefix>.ffn.{fc1,fc2}.{weight,bias} (SwiGLU: fc3 too, fc1's init), (Sub-LN)
   <prefix>.ffn.inner_norm.*, (Peri-LN)
   <prefix>.ffn_out_norm.*; with cfg->cross, after the self-attention's, <prefix>.cross_attn_norm.*,
   <prefix>.cross_attn.{q,k,v,out}_proj.* (the self-attention's init stds) and their Sub-LN or
   Peri-LN norms as the self-attention's; biases initialised to 0, norms as their kind. */
void mt_block_add_params(mt_params *P, const char *prefix, const mt_block_cfg *cfg,
                         const mt_block_init *init, mt_block_params *bp);
/* x (B, T, C) -> (B, T, C) */
mt_tensor *mt_block_forward(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                            const mt_block_params *bp, mt_tensor *x);
/* What a cross-attention reads: the encoder's output mem (B, S, C) and its lengths (B) or NULL. */
typedef struct {
    mt_tensor *mem;
    const int *mem_len;
} mt_cross_mem;
/* A value embedding of a block (modded-nanogpt's): its values v (B, T, KC) become
   lambda_v v + e, e = lambda_e E[ids] (B, T, KC) the caller's (the GPT's table row of each token,
   scaled), lambda_v (1) the block's scalar. */
typedef struct {
    mt_tensor *e, *lambda_v;
} mt_value_embed;
/* What a self-attention reads besides x: the keys' lengths kv_len (B) of a padded batch (NULL:
   none); with a value residual (cfg->attn.value_residual), *v1 the stack's first values
   (B, T, KC): NULL until the first block run stores its own there, which the later blocks mix in
   (their caller keeps *v1 across the stack). */
typedef struct {
    const int *kv_len;
    mt_tensor **v1;
    const mt_value_embed *ve; /* NULL or ve->e NULL: none */
} mt_self_arg;
/* The block with its self-attention's arg self (NULL: keys unmasked, no value residual) and,
   with cfg->cross, its cross-attention on mem. */
mt_tensor *mt_block_forward_ex(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                               const mt_block_params *bp, mt_tensor *x, const mt_self_arg *self,
                               const mt_cross_mem *mem);

/* The pieces of a block, for callers that run a sublayer their own way (the KV-cache decoder).
   A sublayer maps x (B, T, C) to (B, T, C); arg is the caller's. */
typedef mt_tensor *(*mt_sublayer)(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                  const mt_block_params *bp, mt_tensor *x, void *arg);
/* The residual, decided here only (its method, then for a sum the placement): x and the sublayer
   f (sublayer sub of the block: its norms) (see above). */
mt_tensor *mt_residual(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_block_params *bp,
                       mt_sub sub, mt_tensor *x, mt_sublayer f, void *arg);
/* pre, subln, peri, lns, reorder, mixln, dsl: a final norm before the head */
bool mt_placement_final_norm(mt_placement p);
bool mt_placement_inner_norm(mt_placement p); /* subln: a norm inside each sublayer */
bool mt_placement_out_norm(mt_placement p);   /* peri: a norm on each sublayer's output */
/* y = x W^T + b with W = P->t[w] and b = P->t[b] (none when b < 0); with W's LoRA adapter
   (mt_params_add_lora), mt_linear_lora's, its dropout in training. */
mt_tensor *mt_param_linear(mt_ctx *c, mt_params *P, int w, int b, mt_tensor *x);
/* The keys k_proj(x) of attention a (the block's attn or cross) after the QK-norm: what the
   attention and a KV cache read. */
mt_tensor *mt_attn_keys(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P, const mt_attn_params *a,
                        mt_tensor *x);
/* out_proj(attention(q_proj(x), k_proj(x), v_proj(x))), q and k after the QK-norm (cfg->qk) and
   rotated by cfg->rope when set, v mixed with the first block's by a value residual; arg: an
   mt_self_arg, or NULL. */
mt_tensor *mt_attn_sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                            const mt_block_params *bp, mt_tensor *x, void *arg);
/* The cross-attention: out_proj(attention(q_proj(x), k_proj(mem), v_proj(mem))) with the
   cross_attn projections (Sub-LN: its inner norm before out_proj), keys masked to mem_len; arg:
   the mt_cross_mem. */
mt_tensor *mt_cross_attn_sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                  const mt_block_params *bp, mt_tensor *x, void *arg);
/* The two attention sublayers over a KV cache (generation and decoding), arg an mt_cache_arg:
   mt_attn_sublayer_cached projects x (B, n, C) of n new positions, rotates q and k at positions
   kv->len.. (RoPE), and attends with mt_attention_cached (the caller advances kv->len);
   mt_cross_attn_sublayer_cached attends to the encoder's keys and values, stored in kv by the
   caller (mt_attn_cache_put of k_proj(mem), v_proj(mem)), masked to kv_len, as
   mt_cross_attn_sublayer does to mem. */
typedef struct {
    mt_attn_cache *kv;
    int layer;
    const int *kv_len; /* cross: (B) the encoder rows' lengths */
    mt_tensor **v1;    /* self with a value residual: as mt_self_arg's, over the new positions */
    const mt_value_embed *ve; /* self: as mt_self_arg's, of the new positions */
} mt_cache_arg;
mt_tensor *mt_attn_sublayer_cached(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                   const mt_block_params *bp, mt_tensor *x, void *arg);
mt_tensor *mt_cross_attn_sublayer_cached(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                                         const mt_block_params *bp, mt_tensor *x, void *arg);
/* The attention's output projection of y (B, T, C), the heads side by side: out_proj(y), or
   out_proj(N_inner(y)) with Sub-LN. */
mt_tensor *mt_attn_output(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                          const mt_block_params *bp, mt_tensor *y);
/* fc2(act(fc1(x))), one mt_ffn; with Sub-LN fc2(N_inner(act(fc1(x)))) as four ops (SwiGLU:
   act(fc1(x)) is silu(fc1(x)) fc3(x)); arg unused. */
mt_tensor *mt_ffn_sublayer(mt_ctx *c, const mt_block_cfg *cfg, mt_params *P,
                           const mt_block_params *bp, mt_tensor *x, void *arg);
#endif
