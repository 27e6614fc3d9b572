/* The block stack every model holds: its config (one struct embedded in each model's config),
 * its validation, its fields for JSON and flags, and the blocks it builds from src/nn.
 * C n_embd, F n_ff, as in nn.h. */
#ifndef MT_STACK_H
#define MT_STACK_H

#include "../io/fields.h"
#include "../nn/nn.h"
#include "../tensor/base.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"

/* Weight init of the blocks' matrices. */
typedef enum {
    MT_SCHEME_GPT2,     /* N(0, 0.02); out_proj and fc2 N(0, (0.02 / sqrt(2 n_layer))^2) */
    MT_SCHEME_XAVIER,   /* Xavier-normal, gain 1: std = sqrt(2 / (fan_in + fan_out)) */
    MT_SCHEME_DEEPNORM, /* Xavier-normal, gain beta for fc1, fc2, v_proj, out_proj; 1 for q, k */
    MT_SCHEME_SUBLN,    /* Xavier-normal, gain gamma for fc1, fc2, v_proj, out_proj; 1 for q, k */
    MT_SCHEME_DSL,      /* DeepScaleLM: q, k, v, out N(0, 1/C); fc1, fc2 (fc3) variance
                           sqrt(2 / (C F)) (a unit-variance sublayer output) */
    MT_SCHEME_AUTO,     /* deepnorm for the deepnorm placement, subln for subln, dsl for dsl,
                           gpt2 otherwise (validate sets it) */
} mt_init_scheme;
extern const mt_enum MT_INIT_SCHEMES; /* "gpt2", "xavier", "deepnorm", "subln", "dsl", "auto" */

/* The parameterisation (--param): how init, the optimizer's per-tensor lr, weight decay and eps,
   the residual branches and the logits scale with the width and depth against a base model. */
typedef enum {
    MT_PARAM_SP,        /* standard: none of it */
    MT_PARAM_MUP,       /* muP (Yang et al. 2022, arXiv 2203.03466): width C against base_width */
    MT_PARAM_COMPLETEP, /* CompleteP (Dey et al. 2025, arXiv 2505.01618): muP's width rules and
                           depth-muP with alpha = 1, depth L against base_depth */
} mt_param_kind;
extern const mt_enum MT_PARAM_KINDS; /* "sp", "mup", "completep" */

typedef struct {
    int n_layer, n_head, n_embd, n_ff; /* n_ff 0: 4 n_embd (SwiGLU: LLaMA's rule, ff_multiple) */
    int ff_multiple;                   /* SwiGLU's default n_ff is rounded up to a multiple */
    int n_kv_head; /* key-value heads (grouped-query attention), divides n_head; 0: n_head */
    mt_norm_cfg norm;
    mt_qk_norm_cfg qk; /* QK-norm of every attention */
    mt_attn_cfg attn;  /* the self-attention's methods (gate, sink, softmax) */
    /* How the blocks join the stream (nn.h), set by the model (no field: not saved; the GPT's
       from --arch); a residual other than a sum reads no placement, which stays pre. */
    mt_residual_kind residual;
    mt_hyper_cfg hc; /* --residual hc: hyper-connections (sets residual to MT_RESIDUAL_HC) */
    mt_placement placement;
    float deepnorm_alpha, deepnorm_beta; /* 0: from the depth (mt_stack_validate) */
    float subln_gain;                    /* Sub-LN's gamma; 0: from the depth */
    mt_init_scheme init;
    bool bias;
    mt_act act;
    float dropout;
    float label_smoothing; /* of the training loss, in [0, 1): each target (1 - eps) onehot +
                              eps / V (mt_cross_entropy); evaluation scores the plain NLL */
    float z_loss;   /* of the training loss: + z_loss log(Z)^2 per target (mt_cross_entropy) */
    int mixln_post; /* Mix-LN: the first mixln_post blocks Post-LN; -1: n_layer / 4 */
    float dsl_k;    /* DeepScaleLM: beta^2 = dsl_k / n_layer, lambda^2 = 1 - beta^2 */
    float dsl_r0;   /* init dsl: the embedded tokens' correlation r, in (0, 1] (0.221) */
    /* the GPT's logits C tanh(logits / C) wherever they are read: training, validation and
       sampling (the model's own, not a term of the training loss); 0: none */
    float logit_softcap;
    mt_param_kind param;
    /* nanochat's per-block scalars: block l reads resid_lambda_l x + x0_lambda_l x0, x0 the
       stream entering block 0 (init 1 and 0.1) */
    bool layer_lambdas;
    /* modded-nanogpt's U-net: block L-1-j adds skip_weight times block j's output to its input,
       j < L/2 (init 1), before the lambdas */
    bool unet;
    /* the blocks' output projections (out_proj, fc2) initialised to 0 (modded-nanogpt, nanochat) */
    bool zero_out;
    int base_depth; /* completep: the base model's n_layer L0, 1..n_layer (required) */
    int base_width; /* mup (required), completep (0: n_embd): the base model's n_embd C0 */
} mt_stack_config;

/* The multipliers of --param (docs/optimizers.md's table), m_N = n_embd / base_width and
   m_L = n_layer / base_depth (1 where the kind has no such rule): the hidden matrices' init std
   (x 1 / sqrt(m_N), the gpt2 scheme's 0.02 on all six), lr (x 1 / m_N), weight decay (completep:
   x m_N), every tensor's AdamW eps (completep: x 1 / (m_N m_L)), each residual branch (completep:
   x 1 / m_L) and the logits (x 1 / m_N). */
typedef struct {
    float init, lr, wd, eps, branch, logits;
} mt_param_scales;
mt_param_scales mt_stack_param_scales(const mt_stack_config *s);
/* Sets the scales' lr, wd and eps on P's entries: lr and wd on every MT_ROLE_MATRIX entry (the
   blocks' hidden matrices), eps on all; after the model's last entry is added. */
void mt_stack_set_param_scales(const mt_stack_config *s, mt_params *P);
/* A model whose head does not scale its logits (model: "the ViT", ...) refuses --param mup and
   completep. */
mt_status mt_stack_param_gpt_only(const mt_stack_config *s, const char *model, mt_err *err);

/* 4 blocks of 4 heads, n_embd 64, LayerNorm, Pre-LN, init auto, biases, GELU, no dropout, no
   label smoothing, ff_multiple 32 (mixln_post -1, dsl_k 2, dsl_r0 0.221). */
mt_stack_config mt_stack_default(void);

/* The stack's fields under their JSON keys (n_layer, norm, norm_eps, ...), which are also the
   flags (--n-layer, --norm, ...): a TABLE field of each model's table (fields.h). */
extern const mt_fields MT_STACK_FIELDS;

/* Checks every field and resolves the derived ones, so that a validated config says exactly what
   the model computes: n_ff (0: 4 n_embd; with SwiGLU LLaMA's int(2 (4 n_embd) / 3) rounded up to
   a multiple of ff_multiple, the same parameter count as the 4 n_embd of two matrices), the norm's
   eps (its default as a number), DeepNorm's
   alpha and beta and Sub-LN's gain (unless set, > 0) from the row of arch for N encoder and M
   decoder layers (the count arch does not have is ignored), n_kv_head (0: n_head), init AUTO
   (deepnorm for the
   deepnorm placement, subln for subln, else gpt2), mixln_post (-1: n_layer / 4; given, it must
   be in [0, n_layer]), dsl_k (in (0, n_layer]), dsl_r0 (in (0, 1]), each where its placement or
   init reads it (elsewhere a given one is refused by the field's .read). causal: a model reading
   tokens left to right (bn and in are refused). With subln the norm must also fit the n_ff
   channels of the FFN's inner norm. */
mt_status mt_stack_validate(mt_stack_config *s, mt_deepnorm_arch arch, int N, int M, bool causal,
                            mt_err *err);

/* GPT-2's initialiser std, N(0, MT_GPT2_STD^2): every matrix under the gpt2 scheme (the residual
   projections divided by sqrt(2 n_layer)) and the models' embeddings. */
#define MT_GPT2_STD 0.02f

/* The training loss's terms: the stack's label smoothing and z-loss. */
mt_ce_opts mt_stack_ce(const mt_stack_config *s);
/* The block of a validated stack. */
mt_block_cfg mt_stack_block(const mt_stack_config *s, bool causal);
/* The std of every matrix of block `layer` (from 0) under the stack's (resolved) init scheme
   (only dsl's v_proj and out_proj depend on the layer). Embeddings are the model's. */
mt_block_init mt_stack_init_stds(const mt_stack_config *s, int layer);
/* Floats of one token's activations through the blocks, roughly (a model's memory estimate):
   per block about 16 C and 4 F, more for the extra norms of subln and peri. */
double mt_stack_token_floats(const mt_stack_config *s);
/* The std of a model's other matrices of fan_in x fan_out (an untied head, a patch embedding):
   N(0, MT_GPT2_STD^2) under gpt2, Xavier-normal with gain 1 otherwise. */
float mt_stack_other_std(const mt_stack_config *s, int fan_in, int fan_out);

/* A block's entries of layer_lambdas (resid, x0) and unet (skip); -1: none. */
typedef struct {
    int resid, x0, skip;
} mt_stack_mix;

/* The blocks of a validated stack: n_layer blocks named <prefix>.{i}, their parameters added to
   P, and the final norm (pre, subln, peri) named <prefix_final>. */
typedef struct {
    mt_block_cfg block;      /* the same for every block */
    mt_block_params *blocks; /* (n_layer) */
    int n_layer;
    bool final_norm_on;
    mt_norm_params final_norm;
    const mt_norm_cfg *norm; /* the stack's */
    int skip; /* a probe's: the block the forward passes over (its input unchanged); -1: none */
    mt_stack_mix *mix; /* (n_layer) */
    bool lambdas, unet;
} mt_stack;

/* What a forward carries across the blocks for layer_lambdas and unet: x0 and the first half's
   outputs (out, n_layer entries in the arena; NULL without unet). */
typedef struct {
    mt_tensor *x0, **out;
} mt_stack_carry;
mt_stack_carry mt_stack_carry_begin(mt_ctx *c, const mt_stack *st, mt_tensor *x);
/* Block l's input from the stream x: + skip_weight out[L-1-l] (unet), then resid_lambda x +
   x0_lambda x0 (layer_lambdas); x without either. */
mt_tensor *mt_stack_block_input(mt_ctx *c, const mt_stack *st, mt_params *P, int l, mt_tensor *x,
                                const mt_stack_carry *k);
/* Keeps block l's output x where a later block reads it (unet). */
void mt_stack_block_output(const mt_stack *st, int l, mt_tensor *x, mt_stack_carry *k);

mt_status mt_stack_build(mt_stack *st, const mt_stack_config *s, bool causal, mt_params *P,
                         const char *prefix, const char *final_name, mt_err *err);
/* The same with every block's config given (an encoder-decoder's decoder: block.cross). */
mt_status mt_stack_build_blocks(mt_stack *st, const mt_stack_config *s, const mt_block_cfg *block,
                                mt_params *P, const char *prefix, const char *final_name,
                                mt_err *err);
/* The activation probe's statistics of x (mt_ctx.act): out[0] = max |x|, out[1] = Pearson's
   kurtosis E[(x - mu)^4] / sigma^4 over all of x's values (0 for a constant x). */
void mt_stack_act_stats(const mt_tensor *x, double out[2]);
/* x (B, T, C) through every block. resid, when not NULL, gets (n_layer + 1) the mean token norm
   of the residual stream entering each block and leaving the last. */
mt_tensor *mt_stack_forward(mt_ctx *c, const mt_stack *st, mt_params *P, mt_tensor *x,
                            double *resid);
/* The blocks with mt_block_forward_ex: self-attention keys masked to x_len (B) or NULL, the
   cross-attention (decoders) on mem or NULL, block l's values with the value embedding ve[l]
   (ve NULL or ve[l].e NULL: none; the GPT's); resid as mt_stack_forward's (padded positions
   included in the mean). */
mt_tensor *mt_stack_forward_ex(mt_ctx *c, const mt_stack *st, mt_params *P, mt_tensor *x,
                               const int *x_len, const mt_cross_mem *mem, const mt_value_embed *ve,
                               double *resid);
/* Hyper-connections' streams (residual hc, else x itself): x (B, T, C) repeated N times into
   (B, T, N C) before the first block, and their sum (B, T, C) after the last (the KV-cache
   decoder calls them around its own loop of blocks). */
mt_tensor *mt_stack_streams(mt_ctx *c, const mt_stack *st, mt_tensor *x);
mt_tensor *mt_stack_streams_sum(mt_ctx *c, const mt_stack *st, mt_tensor *x);
/* The final norm of x (B, T, C) when the placement has one, else x. */
mt_tensor *mt_stack_final(mt_ctx *c, const mt_stack *st, mt_params *P, mt_tensor *x);
void mt_stack_free(mt_stack *st);

#endif
