/* The GPT's private layout and parts, shared by gpt.c, its decoding (gpt_infer.c) and its type
   (gpt_type.c). */
#ifndef MT_GPT_INTERNAL_H
#define MT_GPT_INTERNAL_H

#include "models.h"

struct mt_gpt_layout {
    int tok_emb, pos_emb; /* (V, C), (n_ctx, C); pos_emb -1 with RoPE */
    mt_rope rope;         /* pos rope: the table for n_ctx positions, which the blocks read */
    int lm_head;          /* (V, C), -1 when tied to tok_emb */
    int emb_scale;        /* (1), -1 without --emb-scale */
    int s_z;              /* (V) nGPT's logit scale, -1 without --arch ngpt */
    mt_stack stack;       /* causal blocks, the final norm (pre, subln, peri) */
    struct {
        int emb, lambda_v, lambda_e; /* (V, KC), (1), (1); -1: block l has none */
    } * ve;                          /* (n_layer) --value-embeds */
    bool has_ve;
};

/* x (B, T, C) = tok_emb[ids] + pos_emb[pos0 + t] (RoPE: tok_emb[ids] alone), times emb_scale
   when the model has it; then dropout when configured; ids (B*T), pos0 + T <= n_ctx. */
mt_tensor *mt_gpt_embed(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, int B, int T,
                        int pos0);
/* The value embeddings of ids (B*T): (n_layer) in c's arena, entry l's e = lambda_e E_l[ids]
   (B, T, KC) and lambda_v for the blocks with a table; NULL without --value-embeds. */
mt_value_embed *mt_gpt_value_embeds(mt_ctx *c, const mt_gpt *m, mt_params *P, const int *ids, int B,
                                    int T);
/* The blocks of the embedded x (B, T, C) of ids (B*T), with their value embeddings; resid as
   mt_stack_forward's. */
mt_tensor *mt_gpt_blocks(mt_ctx *c, const mt_gpt *m, mt_params *P, mt_tensor *x, const int *ids,
                         double *resid);
/* The final norm (pre, subln, peri) and the head: x (B, T, C) -> logits (B, T, V). */
mt_tensor *mt_gpt_head(mt_ctx *c, const mt_gpt *m, mt_params *P, mt_tensor *x);

/* arch llama's and ngpt's pieces (models.h), each where its field holds the GPT default;
   idempotent, so a validated config validates to itself. ngpt: no norm layer, its own placement,
   an untied head (the paper's), RoPE (a learned position table would move the embeddings off
   the sphere). */
void mt_gpt_arch_fill(mt_gpt_config *cfg);

/* The type's build_table and activation_bytes (model.h): the model's parameter table into m (an
   mt_gpt), not allocated; activation bytes of a step of B rows. */
mt_status mt_gpt_build_table(void *m, const void *cfg, mt_err *err);
double mt_gpt_activation_bytes(const void *cfg, int B, bool training);

#endif
