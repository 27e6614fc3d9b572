/* The encoder-decoder's network (models.h): the embeddings, the encoder, the head and the
   teacher-forced forward and loss. Below both the model's file (encdec.c: config, parameters,
   the dictionary's tallies) and the decoding (encdec_infer.c), which use it and not each
   other's reverse: encdec.c -> encdec_infer.c -> encdec_forward.c. B batch, S source length,
   T target length, C n_embd, V vocabulary. */
#include "encdec_internal.h"

/* ---- forward --------------------------------------------------------------------------------- */

mt_tensor *mt_encdec_embed(mt_ctx *c, const mt_encdec *m, mt_params *P, int pos_table,
                           const int *ids, int B, int T, int pos0) {
    const mt_encdec_layout *L = m->layout;
    int *pos = mt_arena_alloc(c, (size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) pos[i] = pos0 + i % T;
    MT_ASSERT(pos0 + T <= P->t[pos_table].shape[0], "encdec: positions %d..%d past %d", pos0,
              pos0 + T - 1, P->t[pos_table].shape[0]);
    mt_tensor *x = mt_add(c, mt_embedding(c, &P->t[L->tok_emb], ids, B * T),
                          mt_embedding(c, &P->t[pos_table], pos, B * T));
    if (L->emb_scale >= 0) x = mt_scale_by(c, x, &P->t[L->emb_scale]);
    x = mt_reshape(c, x, 3, (int[]){B, T, m->cfg.stack.n_embd});
    return m->cfg.stack.dropout > 0 ? mt_dropout(c, x, m->cfg.stack.dropout) : x;
}

mt_tensor *mt_encdec_encode(mt_ctx *c, const mt_encdec *m, mt_params *P, const int *src,
                            const int *src_len, int B, int S) {
    const mt_encdec_layout *L = m->layout;
    mt_tensor *x = mt_encdec_embed(c, m, P, L->enc_pos, src, B, S, 0);
    x = mt_stack_forward_ex(c, &L->enc, P, x, src_len, NULL, NULL, NULL);
    return mt_stack_final(c, &L->enc, P, x);
}

mt_tensor *mt_encdec_head(mt_ctx *c, const mt_encdec *m, mt_params *P, mt_tensor *x) {
    const mt_encdec_layout *L = m->layout;
    x = mt_stack_final(c, &L->dec, P, x);
    if (L->lm_head >= 0) return mt_linear(c, x, &P->t[L->lm_head], NULL);
    return mt_linear(c, x, &P->t[L->tok_emb], NULL); /* x tok_emb^T: the tied head */
}

mt_tensor *mt_encdec_forward(mt_ctx *c, const mt_encdec *m, mt_params *P, const int *src,
                             const int *src_len, int S, const int *tgt, int B, int T) {
    const mt_encdec_layout *L = m->layout;
    mt_cross_mem mem = {.mem = mt_encdec_encode(c, m, P, src, src_len, B, S), .mem_len = src_len};
    mt_tensor *y = mt_encdec_embed(c, m, P, L->dec_pos, tgt, B, T, 0);
    y = mt_stack_forward_ex(c, &L->dec, P, y, NULL, &mem, NULL, NULL);
    return mt_encdec_head(c, m, P, y);
}

mt_tensor *mt_encdec_loss(mt_ctx *c, const mt_encdec *m, mt_params *P, const int *src,
                          const int *src_len, int S, const int *tgt, const int *targets, int B,
                          int T, mt_ce_opts ce) {
    return mt_cross_entropy(c, mt_encdec_forward(c, m, P, src, src_len, S, tgt, B, T), targets, -1,
                            ce);
}
