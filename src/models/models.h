/* mt models: GPT (and the ViT) assembled from src/nn: config, parameter table, init, forward. */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "../nn/nn.h"

/* ---- GPT (issue 4) ----------------------------------------------------------------------------
 * Parameter names follow torch.nn (Linear weight [out, in]): tok_emb.weight (V, C),
 * pos_emb.weight (T, C), blocks.{i}.attn_norm.*, blocks.{i}.ffn_norm.*,
 * blocks.{i}.attn.{q_proj,k_proj,v_proj,out_proj}.{weight,bias}, blocks.{i}.ffn.{fc1,fc2}.*,
 * final_norm.* (pre only), lm_head.weight (untied only). */
typedef enum {
    MT_SCHEME_GPT2,     /* N(0, 0.02); out_proj and fc2 N(0, (0.02 / sqrt(2 n_layer))^2) */
    MT_SCHEME_XAVIER,   /* Xavier-normal, gain 1: std = sqrt(2 / (fan_in + fan_out)) */
    MT_SCHEME_DEEPNORM, /* Xavier-normal, gain beta for fc1, fc2, v_proj, out_proj; 1 for q, k */
    MT_SCHEME_AUTO,     /* deepnorm for the deepnorm placement, gpt2 otherwise (validate sets it) */
} mt_init_scheme;
const char *mt_init_scheme_name(mt_init_scheme s); /* "gpt2", "xavier", "deepnorm", "auto" */
mt_status mt_init_scheme_parse(const char *name, mt_init_scheme *s, mt_err *err);
/* The std of every block matrix under scheme s (not AUTO) for n_layer blocks of width C, FFN
   width F; beta is DeepNorm's. Embeddings are N(0, 0.02) in every scheme. */
mt_block_init mt_block_init_stds(mt_init_scheme s, int n_layer, float beta, int C, int F);
/* What the GPT and the ViT check alike about their stack of blocks, filling the derived fields:
   n_head divides n_embd; n_ff >= 0 (0: 4 n_embd); placement, init and act in range (init AUTO:
   deepnorm's for the deepnorm placement, gpt2 otherwise); dropout in [0, 1); the norm for
   n_embd channels; DeepNorm's alpha and beta, decoder-only when causal, encoder-only otherwise,
   for n_layer blocks unless set (> 0). */
mt_status mt_blocks_config_check(int n_layer, int n_head, int n_embd, int *n_ff,
                                 mt_norm_cfg *norm, bool causal, mt_placement placement,
                                 mt_init_scheme *init, mt_act act, float dropout, float *alpha,
                                 float *beta, mt_err *err);

typedef struct {
    int n_layer, n_head, n_embd, n_ctx, n_vocab, n_ff;
    mt_norm_cfg norm;
    mt_placement placement;
    float deepnorm_alpha, deepnorm_beta; /* derived from n_layer unless set (> 0) */
    mt_init_scheme init;
    bool tied, bias;
    mt_act act;
    float dropout;
} mt_gpt_config;

typedef struct mt_gpt_layout mt_gpt_layout; /* parameter indices, private to the model */

typedef struct {
    mt_gpt_config cfg;
    mt_params P;
    mt_gpt_layout *layout;
} mt_gpt;

mt_gpt_config mt_gpt_config_default(void);
/* Checks every field and fills the derived ones (n_ff = 4 C when 0, DeepNorm alpha and beta from
   the decoder-only row when not set, init AUTO). */
mt_status mt_gpt_config_validate(mt_gpt_config *cfg, mt_err *err);
mt_status mt_gpt_build(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err);
/* mt_gpt_build but for the allocation of the parameters: m->P.total is known (a memory estimate
   can come first) and mt_params_alloc(&m->P, err) completes the build. */
mt_status mt_gpt_build_table(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err);
void mt_gpt_init_weights(mt_gpt *m, mt_rng *r);
/* ids (B*T) -> logits (B, T, V) */
mt_tensor *mt_gpt_forward(mt_ctx *c, mt_gpt *m, const int *ids, int B, int T);
/* Mean cross-entropy of targets (B*T, -1 ignored) under the logits of ids: a scalar. */
mt_tensor *mt_gpt_loss(mt_ctx *c, mt_gpt *m, const int *ids, const int *targets, int B, int T);
char *mt_gpt_config_to_json(const mt_gpt_config *cfg); /* malloc'd JSON object */
mt_status mt_gpt_config_from_json(const char *json, mt_gpt_config *cfg, mt_err *err);
void mt_gpt_free(mt_gpt *m);

/* ---- generation (issue 6) -----------------------------------------------------------------------
 * A KV cache keeps every block's keys and values of the tokens in the context window, so a new
 * token costs one pass over the window instead of re-running it. The window holds at most
 * n_ctx tokens; when a feed would pass that, it restarts from the last max(n_ctx / 2, n) of
 * them (at most n_ctx), recomputed at positions from 0: position embeddings are absolute.
 * With no_cache every feed re-runs the whole window through mt_gpt_forward: the same tokens at
 * the same positions, the reference the cache is tested against. */
typedef struct {
    mt_gpt *m;
    bool no_cache;
    int len;       /* tokens in the window */
    int *ids;      /* (n_ctx) the window */
    float *k, *v;  /* (n_layer, n_ctx, C) the window's keys and values */
    float *logits; /* (V) the next token's logits after the last feed */
    mt_ctx ctx;    /* the arena of one feed, no grad, eval mode */
} mt_kv_cache;

mt_status mt_kv_init(mt_kv_cache *kv, mt_gpt *m, bool no_cache, mt_err *err);
/* Appends ids (n >= 1 tokens) to the window and runs them; kv->logits then predicts the next. */
void mt_kv_feed(mt_kv_cache *kv, const int *ids, int n);
void mt_kv_free(mt_kv_cache *kv);

/* Estimated activation bytes of a step of B sequences of n_ctx tokens (training: with
   gradients): what the step arena will touch. In double: absurd configs do not overflow. */
double mt_gpt_activation_bytes(const mt_gpt_config *cfg, int B, bool training);
/* Step-arena bytes to reserve: the activation estimate, generously (3x + 64 MiB): pages the arena
   never touches cost nothing. */
size_t mt_gpt_arena_bytes(const mt_gpt_config *cfg, int B, bool training);

typedef struct {
    float temperature; /* 0: the most likely token */
    int top_k;         /* > 0: only the k most likely */
    float top_p;       /* < 1: only the most likely whose probabilities sum to p (nucleus) */
} mt_sampling;

/* A token drawn from softmax(logits / temperature) (V) cut by top_k then top_p; scratch holds
   V floats and V ints. One uniform draw from r per token (none at temperature 0). */
int mt_sample_token(const float *logits, int V, const mt_sampling *s, mt_rng *r, float *pscratch,
                    int *iscratch);

/* ---- ViT (issue 10) -----------------------------------------------------------------------------
 * Vision Transformer (Dosovitskiy et al. 2021, arXiv 2010.11929) on images x (B, CH, H, W):
 * P x P patches in raster order, T = (H / P)(W / P), each flattened as (CH, P, P) -- the layout of
 * a torch Conv2d(CH, C, P, stride P) weight, so patch_embed.weight (C, CH P P) is that weight
 * reshaped -- mapped to C channels; with the class token the sequence is [cls, patches] (T + 1);
 * a learned position embedding; n_layer bidirectional blocks from src/nn (any norm: bn, in, gn
 * too, their statistics over the tokens as mt_norm_tokens defines them; any placement, DeepNorm
 * with the encoder-only alpha and beta); the final norm (pre only) on every token; the class
 * token's output or the mean over tokens; a linear head to K classes.
 * Parameter names: patch_embed.{weight,bias}, cls_token (1, C) (cls pooling only),
 * pos_emb.weight (T or T + 1, C), blocks.{i}.* as the GPT's, final_norm.*, head.{weight,bias}. */
typedef enum { MT_VIT_POOL_CLS, MT_VIT_POOL_MEAN } mt_vit_pool;
const char *mt_vit_pool_name(mt_vit_pool p); /* "cls", "mean" */
mt_status mt_vit_pool_parse(const char *name, mt_vit_pool *p, mt_err *err);

typedef struct {
    int image_h, image_w, channels, patch, n_classes;
    int n_layer, n_head, n_embd, n_ff;
    mt_norm_cfg norm;
    mt_placement placement;
    float deepnorm_alpha, deepnorm_beta; /* from the encoder-only row unless set (> 0) */
    mt_init_scheme init;
    bool bias;
    mt_act act;
    float dropout;
    mt_vit_pool pool;
} mt_vit_config;

typedef struct mt_vit_layout mt_vit_layout; /* parameter indices, private to the model */

typedef struct {
    mt_vit_config cfg;
    mt_params P;
    mt_vit_layout *layout;
} mt_vit;

mt_vit_config mt_vit_config_default(void); /* 28x28x1, patch 7, 10 classes, 4 layers of 64 */
/* Checks every field (the patch divides the image, n_head divides n_embd, the norm's options)
   and fills the derived ones (n_ff = 4 n_embd when 0, DeepNorm's constants, init AUTO). */
mt_status mt_vit_config_validate(mt_vit_config *cfg, mt_err *err);
int mt_vit_tokens(const mt_vit_config *cfg); /* the sequence length: patches (+ 1 with cls) */
mt_status mt_vit_build(mt_vit *m, const mt_vit_config *cfg, mt_err *err);
/* As mt_gpt_build_table: the table only; mt_params_alloc(&m->P, err) completes the build. */
mt_status mt_vit_build_table(mt_vit *m, const mt_vit_config *cfg, mt_err *err);
void mt_vit_init_weights(mt_vit *m, mt_rng *r);
/* Estimated activation bytes of a step of B images (training: with gradients), in double. */
double mt_vit_activation_bytes(const mt_vit_config *cfg, int B, bool training);
/* Step-arena bytes to reserve: the estimate, generously (3x + 64 MiB): pages the arena never
   touches cost nothing. */
size_t mt_vit_arena_bytes(const mt_vit_config *cfg, int B, bool training);
/* images (B, CH, H, W) -> logits (B, K) */
mt_tensor *mt_vit_forward(mt_ctx *c, mt_vit *m, const float *images, int B);
/* Mean cross-entropy of labels (B) in [0, K): a scalar. */
mt_tensor *mt_vit_loss(mt_ctx *c, mt_vit *m, const float *images, const int *labels, int B);
char *mt_vit_config_to_json(const mt_vit_config *cfg); /* malloc'd JSON object */
mt_status mt_vit_config_from_json(const char *json, mt_vit_config *cfg, mt_err *err);
void mt_vit_free(mt_vit *m);

#endif
