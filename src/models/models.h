/* mt models: the model interface (model.h) and the models on it, each assembled from src/nn:
 * the GPT, the ViT and the encoder-decoder. What is declared here beyond their types is what the
 * programs and tests use of each model directly: generation and scoring (GPT), image
 * classification (ViT), decoding and scoring words' phones (encoder-decoder, G2P). */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "../tensor/base.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"
#include "model.h"

/* ---- GPT ---------------------------------------------------------------------------------------
 * Token and learned position embeddings (or RoPE), n_layer causal blocks (any norm but bn and in,
 * any
 * placement; DeepNorm with the decoder-only constants), a head tied to the token embedding unless
 * untied. Trained on a text or token file, next-token cross-entropy.
 * Parameter names follow torch.nn (Linear weight [out, in]): tok_emb.weight (V, C),
 * pos_emb.weight (T, C) (learned positions only), blocks.{i}.attn_norm.*, blocks.{i}.ffn_norm.*,
 * blocks.{i}.attn.{q_proj,k_proj,v_proj,out_proj}.{weight,bias}, blocks.{i}.ffn.{fc1,fc2}.*,
 * (subln) blocks.{i}.attn.inner_norm.*, blocks.{i}.ffn.inner_norm.*, (peri)
 * blocks.{i}.attn_out_norm.*, blocks.{i}.ffn_out_norm.*, final_norm.* (pre, subln, peri),
 * lm_head.weight (untied only). */
extern const mt_model_type mt_gpt_type;

typedef enum { MT_POS_LEARNED, MT_POS_ROPE } mt_pos_kind;
extern const mt_enum MT_POS_KINDS; /* "learned", "rope" */
/* arch llama: a preset of pos rope, act swiglu, norm rms, no biases; ngpt: the same with norm
   none, untied, and nGPT's residual (the stack's, MT_RESIDUAL_NGPT: no placement). ./train
   layers an arch's pieces under the given options (a flag wins; what nGPT cannot take its
   validation refuses); a config built in code gets them in validation, each where its field
   still holds the GPT default (arch_applied false). */
typedef enum { MT_ARCH_GPT, MT_ARCH_LLAMA, MT_ARCH_NGPT } mt_gpt_arch;
extern const mt_enum MT_GPT_ARCHS; /* "gpt", "llama" */

typedef struct {
    mt_stack_config stack;
    int n_ctx, n_vocab;
    bool tied;
    float emb_std; /* the token and position embeddings' init: N(0, emb_std^2) */
    mt_gpt_arch arch;
    bool arch_applied; /* arch's pieces are in the fields (./train's layers or a validation put
                          them there): validation adds none */
    mt_pos_kind pos;   /* learned: pos_emb.weight added to the tokens; rope: q and k rotated */
    float rope_theta;  /* RoPE's base: position p turns channel pair i by p theta^(-2i/HS) */
    bool emb_scale;    /* a learned scalar on the embeddings, init sqrt(n_embd) (DyT's LLaMA) */
    mt_ngpt_cfg ngpt;  /* arch ngpt's scalings (nn.h; the block's and s_z), scales resolved */
    char value_embeds[128];   /* the layers with a value embedding, "0,1,-2,-1" (-1: the last);
                               "": none (docs/layers.md) */
    bool value_embeds_shared; /* the list's second half reads its first half's tables */
} mt_gpt_config;

typedef struct mt_gpt_layout mt_gpt_layout; /* parameter indices, private to the model */

typedef struct {
    mt_model base;
    mt_gpt_config cfg;
    mt_params P;
    mt_gpt_layout *layout;
    mt_tokenizer tok; /* what its ids mean: set from the data or the checkpoint */
} mt_gpt;

/* the stack's defaults, n_ctx 64, 256 bytes, tied, embeddings N(0, 0.02^2) as GPT-2 */
mt_gpt_config mt_gpt_config_default(void);
mt_status mt_gpt_config_validate(mt_gpt_config *cfg, mt_err *err);
/* The model in m (its parameters allocated, not initialised: mt_params_initialize). */
mt_status mt_gpt_build(mt_gpt *m, const mt_gpt_config *cfg, mt_err *err);
void mt_gpt_free(mt_gpt *m);
/* The GPT a model of mt_gpt_type is. */
mt_gpt *mt_gpt_of(mt_model *m);

/* ids (B*T) -> logits (B, T, V), on the parameters P (the model's own, m->P, or a replica's view
   of them: mt_params_view) */
mt_tensor *mt_gpt_forward(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, int B, int T);
/* Mean cross-entropy of targets (B*T, -1 ignored) under the logits of ids, with the terms of ce
   (mt_cross_entropy's; training passes the stack's, mt_stack_ce, evaluation and scoring
   MT_CE_PLAIN): a scalar. */
mt_tensor *mt_gpt_loss(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, const int *targets,
                       int B, int T, mt_ce_opts ce);

/* A batch of rows of T tokens, ids and targets (B, T): mt_gpt_rows_loss(c, P, lo, n, &batch) is
   the model's mean training loss (with the stack's label smoothing) on rows [lo, lo + n) with
   the parameters P (the trainer's mt_rows_loss,
   for programs that bring their own batches, as bench/gpt). */
typedef struct {
    const mt_gpt *m;
    const int *ids, *targets;
    int T;
} mt_gpt_batch;
mt_tensor *mt_gpt_rows_loss(mt_ctx *c, mt_params *P, int lo, int n, void *batch);

/* The tokens cut into consecutive non-overlapping windows of n_ctx + 1 (the last may be shorter,
   at least 2), each window's first tokens predicting its next: the summed negative
   log-likelihood (nats), the number of predicted tokens and the bytes they decode to (bits per
   byte = nll / ln 2 / bytes). Windows run MT_GPT_SCORE_BATCH to a forward, each thread its own
   batches in its own arena, the matrix products in the given mt_precision; the batches' sums are
   added in window order, so the result does not depend on the thread count. */
enum { MT_GPT_SCORE_BATCH = 16 };
mt_status mt_gpt_score(mt_gpt *m, const uint16_t *tok, size_t n, int precision, double *nll,
                       long *count, long *bytes, mt_err *err);

/* ---- generation -------------------------------------------------------------------------------
 * A KV cache keeps every block's keys and values of the tokens in the context window, so a new
 * token costs one pass over the window instead of re-running it. The window holds at most
 * n_ctx tokens; when a feed would pass that, it restarts from the last max(n_ctx / 2, n) of
 * them (at most n_ctx), recomputed at positions from 0: position embeddings are absolute.
 * With no_cache every feed re-runs the whole window through mt_gpt_forward: the same tokens at
 * the same positions, the reference the cache is tested against. */
typedef struct {
    mt_gpt *m;
    bool no_cache;
    int len;             /* tokens in the window */
    int *ids;            /* (n_ctx) the window */
    mt_attn_cache cache; /* every block's keys and values of the window (1 row, n_ctx) */
    float *logits;       /* (V) the next token's logits after the last feed */
    mt_ctx ctx;          /* the arena of one feed, no grad, eval mode */
} mt_kv_cache;

mt_status mt_kv_init(mt_kv_cache *kv, mt_gpt *m, bool no_cache, mt_err *err);
/* Appends ids (n >= 1 tokens) to the window and runs them; kv->logits then predicts the next. */
void mt_kv_feed(mt_kv_cache *kv, const int *ids, int n);
void mt_kv_free(mt_kv_cache *kv);

typedef struct {
    float temperature; /* 0: the most likely token */
    int top_k;         /* > 0: only the k most likely */
    float top_p;       /* < 1: only the most likely whose probabilities sum to p (nucleus) */
} mt_sampling;

/* A token drawn from softmax(logits / temperature) (V) cut by top_k then top_p; scratch holds
   V floats and V ints. One uniform draw from r per token (none at temperature 0). */
int mt_sample_token(const float *logits, int V, const mt_sampling *s, mt_rng *r, float *pscratch,
                    int *iscratch);

/* ---- export ----------------------------------------------------------------------------------
 * The GPT in the files other programs run (gpt_export.c, docs/export.md): llama2.c's version-0
 * model.bin and tokenizer.bin (what its run.c reads), or a GGUF v3 file of llama.cpp's "llama"
 * architecture, float32 (or float16 matrices). Both hold a Llama: pre-norm RMSNorm (eps inside
 * the root, no bias), no biases, RoPE on adjacent pairs, the SwiGLU FFN, n_kv_head key/value
 * heads; llama2c also fixes eps 1e-5 and rope_theta 10000. Token ids are mt's, unchanged. */
/* checkpoint: an mt checkpoint, which ./export writes itself (--merge-lora's plain model); hf: a
   Hugging Face LlamaForCausalLM (the Llama above) or GPT2LMHeadModel (Pre-LN LayerNorm blocks with
   biases, learned positions, tanh GELU, n_ff 4 n_embd, tied), which the type only checks and
   describes as the importer's shape (opts->arch): src/ckpt/hf.c writes it. */
typedef enum {
    MT_EXPORT_LLAMA2C,
    MT_EXPORT_GGUF,
    MT_EXPORT_CHECKPOINT,
    MT_EXPORT_HF
} mt_export_format;
extern const mt_enum MT_EXPORT_FORMATS; /* "llama2c", "gguf", "checkpoint", "hf" */
struct mt_export_opts {
    mt_export_format format;
    const char *path;           /* model.bin, model.gguf */
    const char *tokenizer_path; /* llama2c: tokenizer.bin */
    bool f16;                   /* gguf: the matrices as float16 (MT_EINVAL with llama2c) */
    mt_import_arch *arch;       /* hf: filled with the shape an importer reads (format GGUF for a
                                   Llama, LLMC for a GPT-2); nothing is written */
};
/* Writes opts->path (and, llama2c, opts->tokenizer_path) atomically; a model the format cannot
   hold is MT_EINVAL naming every config key that differs and the flag that would make it fit. */
mt_status mt_gpt_export(const mt_gpt *m, const mt_export_opts *opts, mt_err *err);
/* The inverse (the type's import): a llama2.c or GGUF file's shape as config lines of an --arch
   llama GPT and the map of the tensors' names (model.py's, GGUF's). */
mt_status mt_gpt_import(const mt_import_arch *a, mt_import *out, mt_err *err);

/* ---- ViT ---------------------------------------------------------------------------------------
 * Vision Transformer (Dosovitskiy et al. 2021, arXiv 2010.11929) on images x (B, CH, H, W):
 * P x P patches in raster order, T = (H / P)(W / P), each flattened as (CH, P, P) -- the layout of
 * a torch Conv2d(CH, C, P, stride P) weight, so patch_embed.weight (C, CH P P) is that weight
 * reshaped -- mapped to C channels; with the class token the sequence is [cls, patches] (T + 1);
 * a learned position embedding; n_layer bidirectional blocks from src/nn (any norm: bn, in, gn
 * too, their statistics over the tokens as mt_norm_tokens defines them; any placement, DeepNorm
 * with the encoder-only alpha and beta, Sub-LN with the encoder-only gain); the final norm (pre,
 * subln, peri) on every token; the class token's output or the mean over tokens; a linear head
 * to K classes. Trained on an image dataset (data.h), cross-entropy of the labels.
 * Parameter names: patch_embed.{weight,bias}, cls_token (1, C) (cls pooling only),
 * pos_emb.weight (T or T + 1, C), emb_scale (1) (with emb_scale), blocks.{i}.* as the GPT's,
 * final_norm.*, head.{weight,bias}. */
extern const mt_model_type mt_vit_type;

typedef enum { MT_VIT_POOL_CLS, MT_VIT_POOL_MEAN } mt_vit_pool;
extern const mt_enum MT_VIT_POOLS; /* "cls", "mean" */

typedef struct {
    mt_stack_config stack;
    int image_h, image_w, channels, patch, n_classes;
    mt_vit_pool pool;
    bool emb_scale; /* a learned scalar on the tokens (patches + positions), init sqrt(n_embd) */
} mt_vit_config;

typedef struct mt_vit_layout mt_vit_layout; /* parameter indices, private to the model */

typedef struct {
    mt_model base;
    mt_vit_config cfg;
    mt_params P;
    mt_vit_layout *layout;
    mt_images meta; /* what it reads images with (no pixels): size, normalisation, class names */
} mt_vit;

mt_vit_config mt_vit_config_default(void); /* 28x28x1, patch 7, 10 classes, the stack's defaults */
/* Checks every field (the patch divides the image, the stack) and resolves the derived ones. */
mt_status mt_vit_config_validate(mt_vit_config *cfg, mt_err *err);
int mt_vit_tokens(const mt_vit_config *cfg); /* the sequence length: patches (+ 1 with cls) */
mt_status mt_vit_build(mt_vit *m, const mt_vit_config *cfg, mt_err *err);
void mt_vit_free(mt_vit *m);
mt_vit *mt_vit_of(mt_model *m); /* the ViT a model of mt_vit_type is */
/* images (B, CH, H, W) -> logits (B, K), on the parameters P (m->P or a view of them) */
mt_tensor *mt_vit_forward(mt_ctx *c, const mt_vit *m, mt_params *P, const float *images, int B);
/* Mean cross-entropy of labels (B) in [0, K), with the terms of ce (mt_cross_entropy's): a
   scalar. */
mt_tensor *mt_vit_loss(mt_ctx *c, const mt_vit *m, mt_params *P, const float *images,
                       const int *labels, int B, mt_ce_opts ce);

/* ---- encoder-decoder ---------------------------------------------------------------------------
 * A Transformer encoder-decoder (Vaswani et al. 2017) trained on grapheme-to-phoneme: the letters
 * of a word in, its phones out (data.h's pronunciation dictionaries). One token embedding for
 * letters, phones and the specials (pad, bos, eos), learned position embeddings for each side,
 * enc_layers bidirectional blocks on the letters (self-attention keys masked to each word's
 * length), dec_layers blocks of causal self-attention, cross-attention on the encoder's output
 * (keys masked likewise) and FFN, a head tied to the token embedding unless untied. Every stack
 * option applies to both sides; the stack's n_layer is enc_layers + dec_layers (validate sets
 * it from its default 1, which no encoder-decoder has, and refuses another value). DeepNorm uses
 * the encoder-decoder rows: the stack's
 * deepnorm_alpha and deepnorm_beta are the encoder's (0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16)),
 * dec_deepnorm_alpha and dec_deepnorm_beta the decoder's ((3M)^(1/4), (12M)^(-1/4)); beta is the
 * Xavier gain of v_proj, out_proj, fc1 and fc2 of every attention (self and cross) and FFN.
 * bn and in are refused (their statistics would cross time in the decoder and take in padding).
 * Parameter names: tok_emb.weight (V, C), enc.pos_emb.weight (src_ctx, C),
 * dec.pos_emb.weight (tgt_ctx, C), emb_scale (1) (with emb_scale),
 * enc.blocks.{i}.{attn_norm, attn.{q,k,v,out}_proj, ffn_norm, ffn.{fc1,fc2}}.*,
 * dec.blocks.{i}.{attn_norm, attn.*, cross_attn_norm, cross_attn.{q,k,v,out}_proj, ffn_norm,
 * ffn.*}.*, enc.final_norm.* and dec.final_norm.* (pre only), lm_head.weight (untied only). */
extern const mt_model_type mt_encdec_type;

#define MT_ENCDEC_MAX_LAYERS 10000
#define MT_ENCDEC_MAX_CTX 4096

typedef struct {
    mt_stack_config stack; /* n_layer = enc_layers + dec_layers; DeepNorm's constants: encoder */
    int enc_layers, dec_layers;
    float dec_deepnorm_alpha, dec_deepnorm_beta; /* 0: from the depths */
    int src_ctx, tgt_ctx; /* positions: the longest word; the longest pronunciation + 1 (data) */
    int n_vocab;          /* 3 + letters + phones (data) */
    bool tied;
    float emb_std;
    bool emb_scale; /* a learned scalar on both embeddings (tokens + positions), init sqrt(C) */
} mt_encdec_config;

typedef struct mt_encdec_layout mt_encdec_layout; /* parameter indices, private to the model */

typedef struct {
    mt_model base;
    mt_encdec_config cfg;
    mt_params P;
    mt_encdec_layout *layout;
    mt_g2p_vocab vocab; /* what its ids mean: set from the data or the checkpoint */
} mt_encdec;

/* 4 + 4 layers, the stack's defaults, tied, embeddings N(0, 0.02^2) */
mt_encdec_config mt_encdec_config_default(void);
mt_status mt_encdec_config_validate(mt_encdec_config *cfg, mt_err *err);
mt_status mt_encdec_build(mt_encdec *m, const mt_encdec_config *cfg, mt_err *err);
void mt_encdec_free(mt_encdec *m);
mt_encdec *mt_encdec_of(mt_model *m);

/* src (B, S) letter ids padded with MT_G2P_PAD, src_len (B) each in [1, S]; tgt (B, T) decoder
   inputs (bos, phones, padding) -> logits (B, T, V). */
mt_tensor *mt_encdec_forward(mt_ctx *c, const mt_encdec *m, mt_params *P, const int *src,
                             const int *src_len, int S, const int *tgt, int B, int T);
/* Mean cross-entropy over targets (B, T) that are not -1 (phones, eos, then -1), with the terms
   of ce (mt_cross_entropy's): a scalar. */
mt_tensor *mt_encdec_loss(mt_ctx *c, const mt_encdec *m, mt_params *P, const int *src,
                          const int *src_len, int S, const int *tgt, const int *targets, int B,
                          int T, mt_ce_opts ce);

/* ---- decoding: the encoder once, its cross-attention keys and values once per decoder block,
 * then a token at a time with a KV cache of the decoder's self-attention; in c's arena (no
 * gradient), released at the end. out (B, tgt_ctx) receives phone token ids without bos and eos,
 * len (B) their count (at most tgt_ctx - 1: a decoding that reaches it stops there). */
void mt_encdec_greedy(mt_ctx *c, const mt_encdec *m, const int *src, const int *src_len, int B,
                      int S, int *out, int *len);
/* Beam search of width K for one word src (S letters): the hypothesis of highest summed
   log-probability among those ended by eos (or, when none ends, the best at tgt_ctx - 1); K
   hypotheses run as K rows of a batch; returns its length. K = 1 is greedy decoding. */
int mt_encdec_beam(mt_ctx *c, const mt_encdec *m, const int *src, int S, int K, int *out);
/* Decodes the dictionary's words (n, their indices; beam 1: greedy, in one batch) and adds them
   to the tallies (with and without stress). */
void mt_encdec_tally(mt_ctx *c, const mt_encdec *m, const mt_g2p_dict *d, const int *words, int n,
                     int beam, mt_g2p_tally t[2]);

#endif
