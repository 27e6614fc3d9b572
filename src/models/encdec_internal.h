/* The encoder-decoder's private layout, shared by encdec.c and its decoding (encdec_infer.c). */
#ifndef MT_ENCDEC_INTERNAL_H
#define MT_ENCDEC_INTERNAL_H

#include "models.h"

struct mt_encdec_layout {
    int tok_emb, enc_pos, dec_pos;    /* (V, C), (src_ctx, C), (tgt_ctx, C) */
    int emb_scale;                    /* (1), -1 without emb_scale */
    int lm_head;                      /* (V, C), -1 when tied to tok_emb */
    mt_stack_config enc_cfg, dec_cfg; /* the stack with each side's depth and DeepNorm row */
    mt_stack enc, dec;                /* bidirectional blocks; causal blocks with cross-attention */
};

/* x (B, T, C) = tok_emb[ids] + pos_emb[pos0 + t] (the table pos_table), times emb_scale when
   there is one, dropout when set. */
mt_tensor *mt_encdec_embed(mt_ctx *c, const mt_encdec *m, mt_params *P, int pos_table,
                           const int *ids, int B, int T, int pos0);
/* The encoder's output (B, S, C), after its final norm (pre). */
mt_tensor *mt_encdec_encode(mt_ctx *c, const mt_encdec *m, mt_params *P, const int *src,
                            const int *src_len, int B, int S);
/* The logits (B, T, V) of tgt (B, T) fed one position at a time through the KV-cache decoder
   (what decoding computes; the tests compare it with mt_encdec_forward). */
void mt_encdec_cached_logits(mt_ctx *c, const mt_encdec *m, const int *src, const int *src_len,
                             int B, int S, const int *tgt, int T, float *logits);
/* The decoder's final norm (pre) and the head: (B, T, C) -> (B, T, V). */
mt_tensor *mt_encdec_head(mt_ctx *c, const mt_encdec *m, mt_params *P, mt_tensor *x);

#endif
