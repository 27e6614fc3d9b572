/* Decoding with the encoder-decoder (models.h): the encoder and the cross-attention's keys and
   values once, then one token a step through the decoder with a KV cache of its
   self-attention; greedy and beam search. B rows, S source letters, T = tgt_ctx positions,
   C = NH * HS, L decoder blocks. Everything lives in the caller's arena, released at the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/vmath.h"
#include "encdec_internal.h"

typedef struct {
    const mt_encdec *m;
    int B, S, T, C, L;
    int *src_len;        /* (B) */
    mt_attn_cache self;  /* the decoder's self-attention keys and values so far (B rows, T) */
    mt_attn_cache cross; /* the cross-attention's keys and values of the encoder output (S) */
} dec_state;

/* Caches in c's arena; the encoder run and its cross keys and values stored. */
static void dec_start(mt_ctx *c, dec_state *st, const mt_encdec *m, const int *src,
                      const int *src_len, int B, int S) {
    const mt_encdec_layout *Lo = m->layout;
    mt_params *P = (mt_params *)&m->P;
    const mt_block_cfg *bc = &Lo->dec.block;
    int C = m->cfg.stack.n_embd, KC = C / bc->n_head * (bc->n_kv_head ? bc->n_kv_head : bc->n_head);
    *st = (dec_state){.m = m, .B = B, .S = S, .T = m->cfg.tgt_ctx, .C = C, .L = Lo->dec.n_layer};
    st->src_len = mt_arena_alloc(c, (size_t)B * sizeof(int));
    memcpy(st->src_len, src_len, (size_t)B * sizeof(int));
    mt_attn_cache_arena(c, &st->self, st->L, B, st->T, KC);
    mt_attn_cache_arena(c, &st->cross, st->L, B, S, C);
    size_t mark = mt_arena_mark(c);
    mt_tensor *mem = mt_encdec_encode(c, m, P, src, src_len, B, S);
    for (int l = 0; l < st->L; l++) {
        const mt_attn_params *ap = &Lo->dec.blocks[l].cross;
        mt_attn_cache_put(&st->cross, l, 0, mt_attn_keys(c, bc, P, ap, mem),
                          mt_param_linear(c, P, ap->v_w, ap->v_b, mem));
    }
    st->cross.len = S;
    mt_arena_release(c, mark);
}

/* Feeds tok (B) at position self.len; logits (B, V) of the next token. */
static void dec_step(mt_ctx *c, dec_state *st, const int *tok, float *logits) {
    const mt_encdec *m = st->m;
    const mt_encdec_layout *Lo = m->layout;
    mt_params *P = (mt_params *)&m->P;
    mt_block_cfg block = Lo->dec.block, *bc = &block;
    size_t mark = mt_arena_mark(c);
    mt_tensor *x = mt_encdec_embed(c, m, P, Lo->dec_pos, tok, st->B, 1, st->self.len);
    mt_tensor *v1 = NULL; /* the value residual's first values */
    for (int l = 0; l < st->L; l++) {
        const mt_block_params *bp = &Lo->dec.blocks[l];
        mt_cache_arg self = {.kv = &st->self, .layer = l, .v1 = &v1},
                     cross = {.kv = &st->cross, .layer = l, .kv_len = st->src_len};
        block.layer = l;
        x = mt_residual(c, bc, P, bp, MT_SUB_ATTN, x, mt_attn_sublayer_cached, &self);
        x = mt_residual(c, bc, P, bp, MT_SUB_CROSS, x, mt_cross_attn_sublayer_cached, &cross);
        x = mt_residual(c, bc, P, bp, MT_SUB_FFN, x, mt_ffn_sublayer, NULL);
    }
    mt_tensor *y = mt_encdec_head(c, m, P, x);
    memcpy(logits, y->data, y->n * sizeof(float));
    mt_arena_release(c, mark);
    st->self.len++;
}

/* Decoding runs without gradients, in eval mode and, unless the caller gave the context a thread
   budget, on one thread: its ops are tiny (B rows of one token), and forking them across the
   pool loses much when other processes hold the cores (5283 words, 3+3 layers of 256: 22 s on
   one thread, 80 s on two at load 4). begin saves the context's modes and budget, end restores
   them; nothing process-wide changes. */
typedef struct {
    bool grad, training;
    int threads;
} decode_mode;

static decode_mode decode_begin(mt_ctx *c) {
    decode_mode d = {c->grad_enabled, c->training, c->threads};
    c->grad_enabled = false, c->training = false;
    c->threads = c->threads ? c->threads : 1;
    return d;
}

static void decode_end(mt_ctx *c, decode_mode d) {
    c->grad_enabled = d.grad, c->training = d.training, c->threads = d.threads;
}

/* The outputs a decoding may choose: eos and the phones (not letters, pad or bos). */
static int first_phone(const mt_encdec *m) { return MT_G2P_TOK_SPECIAL + m->vocab.n_letters; }

void mt_encdec_greedy(mt_ctx *c, const mt_encdec *m, const int *src, const int *src_len, int B,
                      int S, int *out, int *len) {
    decode_mode mode = decode_begin(c);
    size_t mark = mt_arena_mark(c);
    dec_state st;
    dec_start(c, &st, m, src, src_len, B, S);
    int V = m->cfg.n_vocab, T = m->cfg.tgt_ctx, p0 = first_phone(m), live = B;
    int *tok = mt_arena_alloc(c, (size_t)B * sizeof(int));
    bool *done = mt_arena_alloc(c, (size_t)B * sizeof(bool));
    float *logits = mt_arena_floats(c, (size_t)B * V);
    for (int b = 0; b < B; b++) tok[b] = MT_G2P_BOS, len[b] = 0, done[b] = false;
    for (int t = 0; t < T && live > 0; t++) {
        dec_step(c, &st, tok, logits);
        for (int b = 0; b < B; b++) {
            if (done[b]) continue;
            const float *z = logits + (size_t)b * V;
            int best = MT_G2P_EOS;
            for (int v = p0; v < V; v++) best = z[v] > z[best] ? v : best;
            if (best == MT_G2P_EOS || len[b] == T - 1) {
                done[b] = true, live--;
                continue;
            }
            out[(size_t)b * T + len[b]++] = tok[b] = best;
        }
    }
    mt_arena_release(c, mark);
    decode_end(c, mode);
}

void mt_encdec_cached_logits(mt_ctx *c, const mt_encdec *m, const int *src, const int *src_len,
                             int B, int S, const int *tgt, int T, float *logits) {
    decode_mode mode = decode_begin(c);
    size_t mark = mt_arena_mark(c);
    int V = m->cfg.n_vocab, *tok = mt_arena_alloc(c, (size_t)B * sizeof(int));
    float *z = mt_arena_floats(c, (size_t)B * V);
    dec_state st;
    dec_start(c, &st, m, src, src_len, B, S);
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) tok[b] = tgt[(size_t)b * T + t];
        dec_step(c, &st, tok, z);
        for (int b = 0; b < B; b++)
            memcpy(logits + ((size_t)b * T + t) * V, z + (size_t)b * V, (size_t)V * sizeof(float));
    }
    mt_arena_release(c, mark);
    decode_end(c, mode);
}

typedef struct {
    float score;
    int row, tok;
} cand;

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->row != y->row ? x->row - y->row : x->tok - y->tok;
}

int mt_encdec_beam(mt_ctx *c, const mt_encdec *m, const int *src, int S, int K, int *out) {
    MT_ASSERT(K >= 1, "beam: width %d", K);
    decode_mode mode = decode_begin(c);
    size_t mark = mt_arena_mark(c);
    int V = m->cfg.n_vocab, T = m->cfg.tgt_ctx, p0 = first_phone(m);
    int *srcs = mt_arena_alloc(c, (size_t)K * S * sizeof(int)),
        *lens = mt_arena_alloc(c, (size_t)K * sizeof(int));
    for (int k = 0; k < K; k++)
        memcpy(srcs + (size_t)k * S, src, (size_t)S * sizeof(int)), lens[k] = S;
    dec_state st;
    dec_start(c, &st, m, srcs, lens, K, S);
    int nc = V - p0 + 1; /* candidates per row: eos and the phones */
    float *logits = mt_arena_floats(c, (size_t)K * V), *score = mt_arena_floats(c, (size_t)K);
    int *tok = mt_arena_alloc(c, (size_t)K * sizeof(int)),
        *hyp = mt_arena_alloc(c, 2 * (size_t)K * T * sizeof(int)), *hyp2 = hyp + (size_t)K * T,
        *best = mt_arena_alloc(c, (size_t)T * sizeof(int)), best_len = -1;
    cand *cs = mt_arena_alloc(c, (size_t)K * nc * sizeof(cand));
    float best_score = -INFINITY;
    int alive = 1; /* rows [0, alive) hold hypotheses; at first the empty one */
    tok[0] = MT_G2P_BOS, score[0] = 0;
    for (int k = 1; k < K; k++) tok[k] = MT_G2P_BOS, score[k] = -INFINITY;
    for (int t = 0; t < T && alive > 0; t++) {
        dec_step(c, &st, tok, logits);
        int n = 0;
        for (int k = 0; k < alive; k++) {
            const float *z = logits + (size_t)k * V;
            float mx = mt_vmaxf(z, V);
            double sum = 0;
            for (int v = 0; v < V; v++) sum += exp((double)z[v] - mx);
            float lse = mx + (float)log(sum);
            cs[n++] = (cand){score[k] + z[MT_G2P_EOS] - lse, k, MT_G2P_EOS};
            for (int v = p0; v < V && t < T - 1; v++) cs[n++] = (cand){score[k] + z[v] - lse, k, v};
        }
        qsort(cs, (size_t)n, sizeof *cs, cmp_cand);
        int next = 0;
        for (int i = 0; i < n && next < K; i++) {
            if (cs[i].tok == MT_G2P_EOS) { /* a finished hypothesis */
                if (cs[i].score > best_score) {
                    best_score = cs[i].score, best_len = t;
                    memcpy(best, hyp + (size_t)cs[i].row * T, (size_t)t * sizeof(int));
                }
                continue;
            }
            memcpy(hyp2 + (size_t)next * T, hyp + (size_t)cs[i].row * T, (size_t)t * sizeof(int));
            hyp2[(size_t)next * T + t] = cs[i].tok;
            score[next] = cs[i].score;
            tok[next] = cs[i].row; /* for now: the row it extends */
            next++;
        }
        /* the cache's rows follow their hypotheses: row j takes row tok[j]'s keys and values */
        mt_attn_cache_gather(c, &st.self, tok, next);
        int *sw = hyp;
        hyp = hyp2, hyp2 = sw;
        for (int j = 0; j < next; j++) tok[j] = hyp[(size_t)j * T + t];
        alive = next;
        /* scores only fall: no live hypothesis can beat the best finished one any more */
        if (alive > 0 && score[0] <= best_score) alive = 0;
    }
    if (best_len < 0) { /* none ended: the best at the length limit */
        best_len = T - 1 < st.self.len ? T - 1 : st.self.len;
        memcpy(best, hyp, (size_t)best_len * sizeof(int));
    }
    memcpy(out, best, (size_t)best_len * sizeof(int));
    mt_arena_release(c, mark);
    decode_end(c, mode);
    return best_len;
}
