/* Fused multi-head scaled dot-product attention (Vaswani et al. 2017), one op.
   q, k, v, out (B, T, C), C = NH * HS; head h of batch b is the (T, HS) block at
   b T C + h HS with row stride C. Forward per (b, h): S = Q K^T / sqrt(HS) (T, T), masked to
   s <= t when causal, P = softmax_rows(S), O = P V. Saved per row: the max m and
   r = 1 / sum exp(S - m), (B, NH, T) each. The small path (below) also keeps E = exp(S - m) of
   its score blocks when the node is recorded (causal: about B NH T^2 / 2 floats), and its
   backward takes P = E r from it; the large path's backward recomputes P = exp(S - m) r, bit for
   bit the forward's (the same code computes S in both). (One log-sum-exp m + log(sum) would
   round away the low bits of large scores: 6e-5 absolute at |S| ~ 1000.)
   Scores are kept transposed, S^T (keys, queries), in blocks of QB queries: a row of a block is
   QB queries' scores for one key, so the softmax's max and sum over keys run down the columns
   as vector operations, with no reduction across a vector. Causal blocks stop at the block's
   last query, kend = q0 + QB keys. Two ways to compute the products, chosen by the head's size:
   - small heads (HS a multiple of the vector width MT_VW, T <= SMALL_T; all the bench configs):
     register tiles of TR rows by whole vectors, read straight from the (B, T, C) buffers and a
     per-head Q^T (backward: dO^T) (HS, Tp) copy: no sgemm call overhead on 32 x 32 blocks.
     Causal products stop at each tile's last row, and score tiles skip the vector of queries
     that sees none of their keys. The mask and max run on each score tile while it is in L1;
     the forward scales O's rows by r instead of P's; the backward asks for the next head's
     q, k, v and E while it works on this one (in a training step they are out of cache).
     Keeping E spares the backward S's recompute, a fifth of its products, and the exp.
   - large heads: strided products (mt_gemm_strided) on the (B, T, C) buffers.
   The masked op (mt_attention_ex, after it): a key-padding mask, queries and keys of different
   lengths, queries further on in the sequence than the first of their keys: cross-attention,
   padded self-attention, and the attention of generation and decoding over a KV cache, whose
   type (mt_attn_cache) ends the file. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/gemm.h"
#include "../tensor/simd.h"
#include "../tensor/vmath.h"
#include "nn.h"

enum {
    /* rows of a register tile; its columns are vectors: TR x 2 accumulators, 2 vectors of B and
       a broadcast of A within the vector registers (32 with AVX-512; 16 with AVX2, where 8 rows
       spilled) */
    TR = MT_VW >= 16 ? 8 : 4,
    QB = 2 * MT_VW, /* queries per block of transposed scores (a multiple of TR) */
    SMALL_T = 512,  /* longest T on the small path: beyond, P and dS (T, T) leave L2 (measured) */
};

typedef struct {
    int B, T, C, NH, HS;
    bool causal;
    bool small; /* the register-tile path */
    int Tp;     /* T rounded up to QB: the rows and row stride of the score buffers */
    int KC, G;  /* k's and v's row stride NKV HS; heads per key-value head NH / NKV */
} attn_dims;

static attn_dims dims_of(const mt_node *n) {
    int T = n->i[1], HS = n->i[2] / n->i[3], KC = n->i[5];
    bool causal = n->i[4];
    return (attn_dims){n->i[0],
                       T,
                       n->i[2],
                       n->i[3],
                       HS,
                       causal,
                       HS % MT_VW == 0 && T <= SMALL_T,
                       (T + QB - 1) / QB * QB,
                       KC,
                       n->i[3] / (KC / HS)};
}

/* Work large enough to be worth the fork: about 2 B NH T^2 HS flops. */
static bool parallel_worth(const attn_dims *d) {
    return (size_t)d->B * d->NH * d->T * d->T * d->HS >= 64 * (size_t)MT_PAR_MIN;
}

/* Keys [0, kend) that the queries [q0, q0 + QB) see. */
static int key_end(const attn_dims *d, int q0) {
    return d->causal && q0 + QB < d->T ? q0 + QB : d->T;
}

enum { SCORES, PROBS }; /* what block_rows leaves */

/* Rows [s0, s1) (keys) of a block of transposed scores St (QB queries from q0, row stride ld)
   holding scores y, per key s and query t (masked: s > t when causal) turned into
   SCORES  y, -inf masked; u[t - q0] = max(u[t - q0], y) (forward: the running max);
   PROBS   P = exp(y - u_t) w_t, 0 masked, with u = m and w = r (QB each): the forward's
           exp(S - m) (softmax_block) times r, bit for bit (the same operations on the same y;
           the large path's backward).
   A row's vectors of queries that all come before its key get the masked value without the
   arithmetic. The loops over a vector's MT_VW lanes are vector instructions. */
static void block_rows(int kind, float *St, int ld, const attn_dims *d, int q0, int s0, int s1,
                       float *u, const float *w) {
    float a[QB], b[QB]; /* u and w, which rows cannot alias */
    memcpy(a, u, sizeof a);
    if (kind == PROBS) memcpy(b, w, sizeof b);
    for (int s = s0; s < s1; s++) {
        float *row = St + (size_t)s * ld;
        for (int j0 = 0; j0 < QB; j0 += MT_VW) {
            if (d->causal && s >= q0 + j0 + MT_VW) { /* every query of the vector masked */
                for (int j = j0; j < j0 + MT_VW; j++) row[j] = kind == SCORES ? -INFINITY : 0.0f;
                continue;
            }
            mt_vf e = {0};
            if (kind == PROBS)
                e = mt_vf_exp_le0(mt_vf_load(row + j0) - mt_vf_load(a + j0)) * mt_vf_load(b + j0);
            for (int j = j0; j < j0 + MT_VW; j++) {
                bool masked = d->causal && s > q0 + j;
                if (kind == SCORES) {
                    row[j] = masked ? -INFINITY : row[j];
                    a[j] = row[j] > a[j] ? row[j] : a[j];
                } else row[j] = masked ? 0.0f : e[j - j0];
            }
        }
    }
    if (kind == SCORES) memcpy(u, a, sizeof a);
}

/* A block of transposed scores St (keys [0, kend), QB queries from q0; row stride ld) with its
   mask applied and its maxima mx (block_rows' SCORES) turned into exp(S - m_t) in place, m and
   r = 1 / sum_s exp(S_ts - m_t) of the block's queries below T written; normalize: into the
   probabilities exp(S - m) r (else O's rows are scaled by r instead). */
static void softmax_block(float *St, int ld, const attn_dims *d, int q0, int kend, const float *mx,
                          float *m, float *r, bool normalize) {
    int nq = d->T - q0 < QB ? d->T - q0 : QB;
    float sum[QB] = {0};
    for (int s = 0; s < kend; s++) {
        float *row = St + (size_t)s * ld;
        for (int j0 = 0; j0 < QB; j0 += MT_VW) {
            if (d->causal && s >= q0 + j0 + MT_VW) { /* masked: exp(-inf) */
                for (int j = j0; j < j0 + MT_VW; j++) row[j] = 0.0f;
                continue;
            }
            mt_vf e = mt_vf_exp_le0(mt_vf_load(row + j0) - mt_vf_load(mx + j0));
            for (int j = j0; j < j0 + MT_VW; j++) sum[j] += row[j] = e[j - j0];
        }
    }
    for (int j = 0; j < QB; j++) sum[j] = 1.0f / sum[j];
    for (int s = 0; normalize && s < kend; s++) {
        float *row = St + (size_t)s * ld;
        for (int j = 0; j < QB; j++) row[j] *= sum[j];
    }
    for (int j = 0; j < nq; j++) m[j] = mx[j], r[j] = sum[j];
}

/* u (QB) = the block's m or r from q0, 0 past T */
static void block_vec(float *u, const float *m, const attn_dims *d, int q0) {
    for (int j = 0; j < QB; j++) u[j] = q0 + j < d->T ? m[j] : 0.0f;
}

/* dS_st = P_st (dP_st - sum_u P_ut dP_ut) down the QB columns of keys [0, kend), in place over
   dP (transposed blocks, row stride ld). */
static void ds_block(float *dSt, const float *Pt, int ld, int kend) {
    float dot[QB] = {0};
    for (int s = 0; s < kend; s++)
        for (int j = 0; j < QB; j++) dot[j] += Pt[(size_t)s * ld + j] * dSt[(size_t)s * ld + j];
    for (int s = 0; s < kend; s++)
        for (int j = 0; j < QB; j++) {
            float *g = dSt + (size_t)s * ld + j;
            *g = Pt[(size_t)s * ld + j] * (*g - dot[j]);
        }
}

/* ---- small path: register tiles ---- */

/* D (TR, QB), row stride ldd, = alpha A (nr, K) Bt (K, QB): A row stride lda, its rows nr..TR-1
   (past the head's end) stand in by row nr - 1 and give rows of D nobody reads; Bt row stride
   ldb. Vectors [0, j0) of each row are set to 0 instead (causal: keys those queries do not see);
   j0 is a constant once inlined and the accumulators stay in registers. */
static inline __attribute__((always_inline)) void tile_abt(int j0, float *D, int ldd, float alpha,
                                                           const float *A, int lda, int nr,
                                                           const float *Bt, int ldb, int K) {
    enum { NV = QB / MT_VW };
    const float *a[TR];
    mt_vf acc[TR][NV];
    for (int r = 0; r < TR; r++) {
        a[r] = A + (size_t)(r < nr ? r : nr - 1) * lda;
        for (int j = 0; j < NV; j++) acc[r][j] = (mt_vf){0};
    }
    for (int i = 0; i < K; i++) {
        mt_vf b[NV];
        for (int j = j0; j < NV; j++) b[j] = mt_vf_load(Bt + (size_t)i * ldb + j * MT_VW);
#pragma GCC unroll 8
        for (int r = 0; r < TR; r++)
            for (int j = j0; j < NV; j++)
                acc[r][j] = mt_vf_madd(b[j], a[r][i] - (mt_vf){0}, acc[r][j]);
    }
    for (int r = 0; r < TR; r++)
        for (int j = 0; j < NV; j++) MT_VSTORE(D + (size_t)r * ldd + j * MT_VW, alpha * acc[r][j]);
}

/* D (nr, nv MT_VW) row stride ldd, nr <= TR, (+)= alpha_r sum_{k0 <= k < k1} A(r, k) B[k, :]:
   A(r, k) = A[r ar + k ak] (ar, ak pick A or A^T) for r < TR, B row stride ldb; = when
   !accumulate; alpha_r = alpha, or rs[r] when rs. */
static inline __attribute__((always_inline)) void tile_ab_(int nv, float *D, int ldd, int nr,
                                                           float alpha, const float *rs,
                                                           bool accumulate, const float *A, int ar,
                                                           int ak, const float *B, int ldb, int k0,
                                                           int k1) {
    mt_vf acc[TR][2];
    /* D's rows, read at the end: their cache misses overlap the products */
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nv; j++) __builtin_prefetch(D + (size_t)r * ldd + j * MT_VW, 1);
    for (int r = 0; r < TR; r++)
        for (int j = 0; j < nv; j++) acc[r][j] = (mt_vf){0};
    for (int k = k0; k < k1; k++) {
        mt_vf b[2];
        for (int j = 0; j < nv; j++) b[j] = mt_vf_load(B + (size_t)k * ldb + j * MT_VW);
        const float *a = A + (size_t)k * ak;
#pragma GCC unroll 8
        for (int r = 0; r < TR; r++) {
            mt_vf x = a[(size_t)r * ar] - (mt_vf){0};
            for (int j = 0; j < nv; j++) acc[r][j] = mt_vf_madd(b[j], x, acc[r][j]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nv; j++) {
            float *d = D + (size_t)r * ldd + j * MT_VW;
            mt_vf y = (rs ? rs[r] : alpha) * acc[r][j];
            if (accumulate) y += mt_vf_load(d);
            MT_VSTORE(d, y);
        }
}

/* tile_ab_ on nv (1 or 2) vectors, with ar == 1 (A^T: a row's TR values are adjacent) compiled
   apart: constant offsets */
static void tile_ab(int nv, float *D, int ldd, int nr, float alpha, const float *rs,
                    bool accumulate, const float *A, int ar, int ak, const float *B, int ldb,
                    int k0, int k1) {
    if (nv == 2 && ar == 1)
        tile_ab_(2, D, ldd, nr, alpha, rs, accumulate, A, 1, ak, B, ldb, k0, k1);
    else if (nv == 2) tile_ab_(2, D, ldd, nr, alpha, rs, accumulate, A, ar, ak, B, ldb, k0, k1);
    else if (ar == 1) tile_ab_(1, D, ldd, nr, alpha, rs, accumulate, A, 1, ak, B, ldb, k0, k1);
    else tile_ab_(1, D, ldd, nr, alpha, rs, accumulate, A, ar, ak, B, ldb, k0, k1);
}

/* Rows [t0, t0 + TR) of a head's (T, HS) D (row stride ldd) (+)= alpha_r sum_{k0 <= k < k1}
   A(r, k) X[k, :], X the head's K, V, Q or dO (row stride ldx): tile_ab over the head's columns.
   The strides are C for q, dO and their gradients, KC for k, v and theirs. */
static void head_rows(float *D, int ldd, const attn_dims *d, int t0, float alpha, const float *rs,
                      bool accumulate, const float *A, int ar, int ak, const float *X, int ldx,
                      int k0, int k1) {
    int nr = d->T - t0 < TR ? d->T - t0 : TR;
    for (int c0 = 0; c0 < d->HS; c0 += 2 * MT_VW) {
        int nv = d->HS - c0 >= 2 * MT_VW ? 2 : 1;
        tile_ab(nv, D + (size_t)t0 * ldd + c0, ldd, nr, alpha, rs, accumulate, A, ar, ak, X + c0,
                ldx, k0, k1);
    }
}

/* Xt (HS, Tp) = the head's X (T, HS) row stride C, transposed, zero padded columns: 8 x 8
   blocks in registers (mt_v8_transpose), the edges one by one. */
static void transpose_head(float *Xt, const float *X, const attn_dims *d) {
    int T = d->T, Tp = d->Tp, HS = d->HS, C = d->C, T8 = T / 8 * 8, H8 = HS / 8 * 8;
    for (int t0 = 0; t0 < T8; t0 += 8)
        for (int i0 = 0; i0 < H8; i0 += 8) {
            mt_v8 r[8];
            for (int j = 0; j < 8; j++) r[j] = mt_v8_load(X + (size_t)(t0 + j) * C + i0);
            mt_v8_transpose(r);
            for (int j = 0; j < 8; j++) MT_VSTORE(Xt + (size_t)(i0 + j) * Tp + t0, r[j]);
        }
    for (int i = 0; i < HS; i++) {
        for (int t = i < H8 ? T8 : 0; t < T; t++) Xt[(size_t)i * Tp + t] = X[(size_t)t * C + i];
        for (int t = T; t < Tp; t++) Xt[(size_t)i * Tp + t] = 0.0f;
    }
}

/* St (keys [0, kend) rounded up to TR, queries [q0, q0 + QB); row stride ld) = scale X[0:kend] Yt,
   X the head's K or V (T, HS) row stride KC, Yt (HS, QB) at the block's first query of Q^T or
   dO^T; with mx (QB maxima), block_rows' SCORES on each tile while it is in L1. Causal key tiles
   from q0 + MT_VW on are seen by the second vector of queries only. */
static void score_block(float *St, int ld, const attn_dims *d, float scale, const float *X,
                        const float *Yt, int q0, int kend, float *mx) {
    for (int s0 = 0; s0 < kend; s0 += TR) {
        float *D = St + (size_t)s0 * ld;
        const float *A = X + (size_t)s0 * d->KC;
        int nr = d->T - s0 < TR ? d->T - s0 : TR;
        if (d->causal && s0 >= q0 + MT_VW)
            tile_abt(1, D, ld, scale, A, d->KC, nr, Yt, d->Tp, d->HS);
        else tile_abt(0, D, ld, scale, A, d->KC, nr, Yt, d->Tp, d->HS);
        if (mx) block_rows(SCORES, St, ld, d, q0, s0, s0 + TR < kend ? s0 + TR : kend, mx, NULL);
    }
}

/* Keys a causal row tile [t0, t0 + TR) of O or dQ sums over: [0, k1) */
static int tile_keys(const attn_dims *d, int t0) {
    return d->causal && t0 + TR < d->T ? t0 + TR : d->T;
}

/* Floats of a head's kept E on the small path: per query block, keys [0, kend) rounded up to TR
   (the rows its score tiles write) by QB */
static size_t kept_floats(const attn_dims *d) {
    size_t n = 0;
    for (int q0 = 0; q0 < d->T; q0 += QB) n += (size_t)(key_end(d, q0) + TR - 1) / TR * TR * QB;
    return n;
}

/* Where the next head's q and k, v start, in floats on from this head's (0: no next head). */
typedef struct {
    ptrdiff_t q, kv;
} next_head;

/* Rows [t0, t0 + TR) of the next head's q, k, v (next; none when next.q is 0) and the matching
   share of its kept E (En, n floats) asked into L2, a cache line at a time. Spread over this
   head's row tiles, they arrive before the next head needs them, when a training step's backward
   finds them out of cache. */
static inline __attribute__((always_inline)) void prefetch_next(const float *q, const float *k,
                                                                const float *v, next_head next,
                                                                const float *En, size_t n,
                                                                const attn_dims *d, int t0) {
    enum { LINE = 64 / sizeof(float) };
    if (!next.q) return;
    for (int t = t0; t < t0 + TR && t < d->T; t++)
        for (int i = 0; i < d->HS; i += LINE) {
            size_t o = (size_t)(next.q + (ptrdiff_t)t * d->C + i);
            size_t okv = (size_t)(next.kv + (ptrdiff_t)t * d->KC + i);
            __builtin_prefetch(q + o, 0, 2);
            __builtin_prefetch(k + okv, 0, 2);
            __builtin_prefetch(v + okv, 0, 2);
        }
    size_t e0 = n * (size_t)t0 / (size_t)d->T, e1 = n * (size_t)(t0 + TR) / (size_t)d->T;
    for (size_t i = e0 / LINE * LINE; i < e1 && i < n; i += LINE) __builtin_prefetch(En + i, 0, 2);
}

/* Floats of per-thread scratch: Qt (HS, Tp), St (Tp, QB) forward; dOt (HS, Tp), Pt, dSt
   (Tp, Tp) backward. */
static size_t small_scratch(const attn_dims *d, bool backward) {
    size_t ht = (size_t)d->HS * d->Tp;
    return backward ? ht + 2 * (size_t)d->Tp * d->Tp : ht + (size_t)d->Tp * QB;
}

/* One head (q, k, v, o at the head's block, rmax, rinv its T rows, E its kept_floats or NULL:
   not kept) on the small path: O[t] = r_t sum_s exp(S_ts - m_t) V[s] = r_t sum_s St[s, t - q0]
   V[s], each block's St in E (then kept, one block after another) or in the scratch. */
static void small_forward(const attn_dims *d, const float *q, const float *k, const float *v,
                          float *o, float *rmax, float *rinv, float *w, float *E) {
    float *Qt = w, *St = Qt + (size_t)d->HS * d->Tp, scale = 1.0f / sqrtf((float)d->HS);
    transpose_head(Qt, q, d);
    for (int q0 = 0; q0 < d->T; q0 += QB) {
        int kend = key_end(d, q0);
        if (E) St = E, E += (size_t)(kend + TR - 1) / TR * TR * QB;
        float mx[QB];
        for (int j = 0; j < QB; j++) mx[j] = -INFINITY;
        score_block(St, QB, d, scale, k, Qt + q0, q0, kend, mx);
        softmax_block(St, QB, d, q0, kend, mx, rmax + q0, rinv + q0, false);
        for (int t0 = q0; t0 < q0 + QB && t0 < d->T; t0 += TR)
            head_rows(o, d->C, d, t0, 1.0f, rinv + t0, false, St + (t0 - q0), 1, QB, v, d->KC, 0,
                      tile_keys(d, t0));
    }
}

/* The small path's backward of one head (dq, dk, dv NULL: skipped; rinv and E, the forward's
   kept_floats, read; next: where the next head's q, k, v start, from this head's, 0 if none),
   the products of large_backward: query blocks give P^T = E r, dP^T = V dO^T, dS^T and dQ,
   then row tiles of keys over all the queries that see them (t >= s0 when causal; P = dS = 0
   above the diagonal) give dV and dK. */
static void small_backward(const attn_dims *d, const float *q, const float *k, const float *v,
                           const float *dout, const float *rinv, const float *E, float *dq,
                           float *dk, float *dv, float *w, next_head next) {
    int T = d->T, Tp = d->Tp, HS = d->HS;
    float *dOt = w, *Pt = dOt + (size_t)HS * Tp, *dSt = Pt + (size_t)Tp * Tp;
    float scale = 1.0f / sqrtf((float)HS);
    size_t nE = kept_floats(d);
    const float *En = E + nE;
    transpose_head(dOt, dout, d);
    for (int q0 = 0; q0 < T; q0 += QB) {
        int kend = key_end(d, q0), rows = (kend + TR - 1) / TR * TR;
        float r[QB];
        block_vec(r, rinv + q0, d, q0);
        for (int s = 0; s < rows; s++) /* P^T: the forward's exp(S - m) r, as block_rows' PROBS */
            for (int j = 0; j < QB; j++) Pt[(size_t)s * Tp + q0 + j] = E[(size_t)s * QB + j] * r[j];
        E += (size_t)rows * QB;
        if (!dq && !dk) continue;
        score_block(dSt + q0, Tp, d, 1.0f, v, dOt + q0, q0, kend, NULL); /* dP^T */
        ds_block(dSt + q0, Pt + q0, Tp, kend);
        if (dq)
            for (int t0 = q0; t0 < q0 + QB && t0 < T; t0 += TR)
                head_rows(dq, d->C, d, t0, scale, NULL, true, dSt + t0, 1, Tp, k, d->KC, 0,
                          tile_keys(d, t0));
    }
    for (int s0 = 0; s0 < T; s0 += TR) {
        int tbeg = d->causal ? s0 : 0;
        if (dv)
            head_rows(dv, d->KC, d, s0, 1.0f, NULL, true, Pt + (size_t)s0 * Tp, Tp, 1, dout, d->C,
                      tbeg, T);
        if (dk)
            head_rows(dk, d->KC, d, s0, scale, NULL, true, dSt + (size_t)s0 * Tp, Tp, 1, q, d->C,
                      tbeg, T);
        prefetch_next(q, k, v, next, En, nE, d, s0);
    }
}

/* ---- large path: strided sgemm on blocks of QB queries ---- */

/* St (kend, nq) row stride QB = scale X[0:kend] Y[q0:q0 + nq]^T, X (K or V, row stride KC) and
   Y (Q or dO, row stride C) the head's (T, HS). */
static void score_gemm(float *St, const attn_dims *d, float scale, const float *X, const float *Y,
                       int q0, int nq, int kend) {
    mt_gemm_strided(false, true, kend, nq, d->HS, scale, X, d->KC, Y + (size_t)q0 * d->C, d->C,
                    0.0f, St, QB);
}

static void large_forward(const attn_dims *d, const float *q, const float *k, const float *v,
                          float *o, float *rmax, float *rinv, float *St) {
    for (int q0 = 0; q0 < d->T; q0 += QB) {
        int kend = key_end(d, q0), nq = d->T - q0 < QB ? d->T - q0 : QB;
        float mx[QB];
        for (int j = 0; j < QB; j++) mx[j] = -INFINITY;
        score_gemm(St, d, 1.0f / sqrtf((float)d->HS), k, q, q0, nq, kend);
        block_rows(SCORES, St, QB, d, q0, 0, kend, mx, NULL);
        softmax_block(St, QB, d, q0, kend, mx, rmax + q0, rinv + q0, true);
        mt_gemm_strided(true, false, nq, d->HS, kend, 1.0f, St, QB, v, d->KC, 0.0f,
                        o + (size_t)q0 * d->C, d->C);
    }
}

/* Per block of queries [q0, q0 + nq) with keys [0, kend), P^T recomputed from m and r,
   dO = out->grad:
     dV[0:kend] += P^T dO[q0:],  dP^T = V[0:kend] dO[q0:]^T,
     dS_ts = P_ts (dP_ts - sum_u P_tu dP_tu),
     dQ[q0:] += dS K[0:kend] / sqrt(HS),  dK[0:kend] += dS^T Q[q0:] / sqrt(HS).
   Masked entries have P = 0, hence dS = 0. */
static void large_backward(const attn_dims *d, const float *q, const float *k, const float *v,
                           const float *dout, float *rmax, float *rinv, float *dq, float *dk,
                           float *dv, float *Pt) {
    int C = d->C, KC = d->KC, HS = d->HS;
    float scale = 1.0f / sqrtf((float)HS), *dSt = Pt + (size_t)d->Tp * QB;
    for (int q0 = 0; q0 < d->T; q0 += QB) {
        int kend = key_end(d, q0), nq = d->T - q0 < QB ? d->T - q0 : QB;
        const float *dO = dout + (size_t)q0 * C;
        float m[QB], r[QB];
        block_vec(m, rmax + q0, d, q0);
        block_vec(r, rinv + q0, d, q0);
        score_gemm(Pt, d, scale, k, q, q0, nq, kend);
        block_rows(PROBS, Pt, QB, d, q0, 0, kend, m, r);
        if (dv) mt_gemm_strided(false, false, kend, HS, nq, 1.0f, Pt, QB, dO, C, 1.0f, dv, KC);
        if (!dq && !dk) continue;
        score_gemm(dSt, d, 1.0f, v, dout, q0, nq, kend); /* dP^T */
        ds_block(dSt, Pt, QB, kend);
        if (dq)
            mt_gemm_strided(true, false, nq, HS, kend, scale, dSt, QB, k, KC, 1.0f,
                            dq + (size_t)q0 * C, C);
        if (dk)
            mt_gemm_strided(false, false, kend, HS, nq, scale, dSt, QB, q + (size_t)q0 * C, C, 1.0f,
                            dk, KC);
    }
}

/* Scratch for each of `slots` threads, 64-byte aligned per thread: the small path's or the large
   path's n floats, zeroed for the large path (its last block leaves columns past T unwritten,
   and they must stay finite); the caller gives it back with mt_arena_release. */
static float *scratch(mt_ctx *c, const attn_dims *d, bool backward, int slots, size_t *per_thread) {
    size_t n = d->small ? small_scratch(d, backward) : (backward ? 2 : 1) * (size_t)d->Tp * QB;
    *per_thread = (n + 15) / 16 * 16;
    n = (size_t)slots * *per_thread;
    return d->small ? mt_arena_floats(c, n) : mt_arena_zeros(c, n);
}

/* The threads the (b, h) loop runs on: the pool when worth it and not inside a parallel region
   (a replica), else 1, whose scratch slot is 0 whatever omp_get_thread_num() says there. */
static int loop_threads(const attn_dims *d) {
    return parallel_worth(d) && !omp_in_parallel() ? mt_threads() : 1;
}

/* This thread's slot of scratch made for `slots` threads, per floats each */
static float *thread_slot(float *work, int slots, size_t per) {
    return work + (size_t)(slots > 1 ? omp_get_thread_num() : 0) * per;
}

/* ---- the op: each (b, h) by one thread, in a fixed order ---- */

/* Where head bh = b NH + h starts in a (B, T, C) buffer (q, out), and where its key-value head
   h / G starts in a (B, T, KC) buffer (k, v) */
static size_t head_offset(const attn_dims *d, int bh) {
    return (size_t)(bh / d->NH) * d->T * d->C + (size_t)(bh % d->NH) * d->HS;
}
static size_t kv_offset(const attn_dims *d, int bh) {
    return (size_t)(bh / d->NH) * d->T * d->KC + (size_t)(bh % d->NH / d->G) * d->HS;
}

static void attention_forward(mt_node *n) {
    attn_dims d = dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    float *out = n->out->data, *rmax = n->saved[0], *rinv = n->saved[1], *E = n->saved[2];
    size_t mark = mt_arena_mark(n->ctx), per;
    int slots = loop_threads(&d);
    float *work = scratch(n->ctx, &d, false, slots, &per);
    MT_PARALLEL_FOR(slots > 1, for (int bh = 0; bh < d.B * d.NH; bh++) {
        size_t off = head_offset(&d, bh), kv = kv_offset(&d, bh);
        size_t row = (size_t)bh * d.T;
        float *w = thread_slot(work, slots, per);
        if (d.small)
            small_forward(&d, q + off, k + kv, v + kv, out + off, rmax + row, rinv + row, w,
                          E ? E + (size_t)bh * kept_floats(&d) : NULL);
        else
            large_forward(&d, q + off, k + kv, v + kv, out + off, rmax + row, rinv + row, w);
    });
    mt_arena_release(n->ctx, mark);
}

static void attention_backward(mt_node *n) {
    attn_dims d = dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const float *dout = n->out->grad;
    float *rmax = n->saved[0], *rinv = n->saved[1];
    float *dq = n->in[0]->grad, *dk = n->in[1]->grad, *dv = n->in[2]->grad;
    size_t mark = mt_arena_mark(n->ctx), per;
    int slots = loop_threads(&d);
    float *work = scratch(n->ctx, &d, true, slots, &per);
    /* one thread per key-value head: its G query heads, in order, add into its dk and dv */
    int NKV = d.NH / d.G;
    MT_PARALLEL_FOR(slots > 1, for (int u = 0; u < d.B * NKV; u++) {
        float *w = thread_slot(work, slots, per);
        for (int bh = u / NKV * d.NH + u % NKV * d.G, end = bh + d.G; bh < end; bh++) {
            size_t off = head_offset(&d, bh), kv = kv_offset(&d, bh);
            size_t row = (size_t)bh * d.T;
            float *gq = dq ? dq + off : NULL, *gk = dk ? dk + kv : NULL,
                  *gv = dv ? dv + kv : NULL;
            /* the head this thread runs next: the group's next, or the next group's first */
            int nb = bh + 1 < end ? bh + 1 : u + 1 < d.B * NKV ? (u + 1) / NKV * d.NH +
                                                                     (u + 1) % NKV * d.G
                                                               : -1;
            next_head next = {0, 0};
            if (nb >= 0)
                next = (next_head){(ptrdiff_t)head_offset(&d, nb) - (ptrdiff_t)off,
                                   (ptrdiff_t)kv_offset(&d, nb) - (ptrdiff_t)kv};
            if (d.small)
                small_backward(&d, q + off, k + kv, v + kv, dout + off, rinv + row,
                               n->saved[2] + (size_t)bh * kept_floats(&d), gq, gk, gv, w, next);
            else
                large_backward(&d, q + off, k + kv, v + kv, dout + off, rmax + row, rinv + row,
                               gq, gk, gv, w);
        }
    });
    mt_arena_release(n->ctx, mark);
}
static const mt_op OP_ATTENTION = {.name = "attention",
                                   .forward = attention_forward,
                                   .backward = attention_backward};

/* For the diagnostics' probe (mt_ctx.attn_max): the largest of an op's n saved row maxima of
   the scores S = q.k / sqrt(HS), each over the keys its query sees. */
static void record_max_logit(mt_ctx *c, const float *rmax, size_t n) {
    if (!c->attn_max) return;
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++) m = rmax[i] > m ? rmax[i] : m;
    c->attn_max[c->attn_calls++] = m;
}

static void record_weights(mt_ctx *c, const mt_tensor *q, const mt_tensor *k, int NH,
                           const mt_attn_mask *mask, const float *m, const float *r);

/* Whether this forward feeds QK-Clip's probe (mt_ctx.qk_max) */
static bool qk_probed(const mt_ctx *c) {
    return c->qk_max && c->qk_slot && c->qk_at >= 0 && c->grad_enabled && !c->replaying;
}

/* QK-Clip's probe: qk_max[qk_at + h] = max(itself, the largest of head h's row maxima m), m
   (B, NH, T) the logits' maxima over the keys each query sees (without a sink's). */
static void record_head_max(mt_ctx *c, const float *m, int B, int NH, int T) {
    if (!qk_probed(c)) return;
    float *out = c->qk_max + c->qk_at;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float mx = mt_vmaxf(m + ((size_t)b * NH + h) * T, T);
            out[h] = mx > out[h] ? mx : out[h];
        }
}

mt_tensor *mt_attention(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                        bool causal) {
    char sq[64], sk[64], sv[64];
    MT_ASSERT(q->ndim == 3 && k->ndim == 3 && mt_same_shape(k, v) && q->shape[0] == k->shape[0] &&
                  q->shape[1] == k->shape[1],
              "attention: q %s (B, T, C), k %s and v %s (B, T, KC)", mt_shape_str(q, sq, 64),
              mt_shape_str(k, sk, 64), mt_shape_str(v, sv, 64));
    int B = q->shape[0], T = q->shape[1], C = q->shape[2], KC = k->shape[2];
    MT_ASSERT(n_head >= 1 && C % n_head == 0, "attention: %d heads do not divide C = %d", n_head,
              C);
    int HS = C / n_head;
    MT_ASSERT(KC % HS == 0 && n_head % (KC / HS) == 0,
              "attention: k and v of %d channels are not a whole number of heads of %d that "
              "divides the %d query heads",
              KC, HS, n_head);
    mt_tensor *out = mt_tensor_like(c, q);
    mt_node *n = mt_node_new(c, &OP_ATTENTION, out, 3, (mt_tensor *[]){q, k, v});
    int args[] = {B, T, C, n_head, causal, KC};
    for (int i = 0; i < 6; i++) n->i[i] = args[i];
    n->saved[0] = mt_arena_floats(c, (size_t)B * n_head * T);
    n->saved[1] = mt_arena_floats(c, (size_t)B * n_head * T);
    attn_dims d = dims_of(n);
    /* E only for a node that mt_node_run will record */
    bool recorded = c->grad_enabled && (q->requires_grad || k->requires_grad || v->requires_grad);
    if (d.small && recorded) n->saved[2] = mt_arena_floats(c, (size_t)B * n_head * kept_floats(&d));
    mt_node_run(c, n);
    record_max_logit(c, n->saved[0], (size_t)B * n_head * T);
    record_head_max(c, n->saved[0], B, n_head, T);
    record_weights(c, q, k, n_head, &(mt_attn_mask){.causal = causal}, n->saved[0], n->saved[1]);
    return out;
}

/* ---- the masked op (nn.h, mt_attention_ex): a key-padding mask, queries and keys of different
   lengths, queries at positions pos0.. of a longer sequence: cross-attention, variable-length
   self-attention, and attention over a KV cache (generation, decoding). Without a mask, with
   Tq == Tk and pos0 = 0 it is mt_attention (its register-tile and sgemm paths); otherwise this
   op, on mt_gemm_strided per (b, h), which skips the padded keys instead of masking them (with
   one query, the GEMM layer's matrix-vector kernel).
   q, out (B, Tq, C), k, v (B, Tk, KC), C = NH * HS, KC = NKV HS, head h reading key-value head
   h / G, G = NH / NKV; L = kv_len[b], row b's unpadded keys; query t at position pos0 + t.
   Forward per (b, h): S = Q K[0:L]^T / sqrt(HS) (Tq, L), masked to s <= pos0 + t when causal,
   P = softmax_rows(S), O = P V[0:L]. Saved per query row: the max m and r = 1 / sum exp(S - m),
   (B, NH, Tq) each; the backward recomputes P = exp(S - m) r with the same code.
   With a sink (gpt-oss's learned logit z_h per head, in[3] (NH)): the softmax over [S_t, z_h]
   with the sink's column dropped, m = max(z_h, S_t), 1 / r = exp(z_h - m) + sum exp(S - m); the
   sink's share p_t = exp(z_h - m) r takes dz_h = -sum_{b, t} p_t sum_s P_ts dP_ts.
   Softpick (f[1] = 1; arXiv 2504.20966) in place of softmax, in its code's stable form: with
   E = exp(S - m), u = E - exp(-m) (= exp(-m) (exp(S) - 1)), P = relu(u) r, r = 1 / (sum_s |u_s| +
   eps) over the keys the query sees, eps = 1e-8; saved m and r. dS_s = E_s r (1[u_s > 0] dP_s -
   sign(u_s) sum_u P_u dP_u), m held constant (through m the reference's autograd adds
   -P eps r, below 1e-8 of P). */
typedef struct {
    int B, Tq, Tk, C, NH, HS;
    bool causal;
    int KC, G, pos0;
    int Lmax; /* the longest kv_len: what the work and the scratch are sized by */
    bool softpick;
} mask_dims;

static mask_dims mask_dims_of(const mt_node *n) {
    mask_dims d = {.B = n->i[0], .Tq = n->i[1], .Tk = n->i[2], .C = n->i[3], .NH = n->i[4]};
    d.HS = d.C / d.NH, d.causal = n->i[5], d.KC = n->i[6], d.pos0 = n->i[7];
    d.G = d.NH / (d.KC / d.HS), d.Lmax = (int)n->f[0], d.softpick = n->f[1] != 0;
    return d;
}

/* Keys query t sees: [0, kend) */
static int query_keys(const mask_dims *d, int L, int t) {
    return d->causal && d->pos0 + t + 1 < L ? d->pos0 + t + 1 : L;
}

/* Head h's sink logit, -inf without one */
static float sink_of(const mt_node *n, int h) {
    return n->n_in > 3 ? n->in[3]->data[h] : -INFINITY;
}

#define SOFTPICK_EPS 1e-8f /* the reference's naive softpick's eps */

/* Softpick of a row's scores y[0, n) (see above): P into y, E = exp(y - m) into e (or NULL);
   without have_stats m and r written. */
static void softpick_row(float *y, int n, float *m, float *r, bool have_stats, float *e) {
    if (!have_stats) {
        float mx = -INFINITY, sum = SOFTPICK_EPS;
        for (int s = 0; s < n; s++) mx = y[s] > mx ? y[s] : mx;
        float em = mt_vexpf(-mx);
        for (int s = 0; s < n; s++) sum += fabsf(mt_vexpf(y[s] - mx) - em);
        *m = mx, *r = 1.0f / sum;
    }
    float em = mt_vexpf(-*m);
    for (int s = 0; s < n; s++) {
        float x = mt_vexpf(y[s] - *m), u = x - em;
        if (e) e[s] = x;
        y[s] = (u > 0 ? u : 0.0f) * *r;
    }
}

/* dS over dP (g) of a row of softpick, P and E = exp(S - m) (0 masked and padded: no gradient) */
static void softpick_ds(float *g, const float *p, const float *e, int L, float m, float r) {
    float dot = 0, em = mt_vexpf(-m);
    for (int s = 0; s < L; s++) dot += p[s] * g[s];
    for (int s = 0; s < L; s++) {
        float u = e[s] - em;
        g[s] = e[s] * r * ((u > 0 ? g[s] : 0.0f) - (u > 0 ? dot : u < 0 ? -dot : 0.0f));
    }
}

/* S (Tq, L) row stride L = scale Q K[0:L]^T, masked entries -inf; with m and r given (backward),
   turned into P = exp(S - m) r (0 masked); else into P with m and r written, the sink logit z
   (-inf: none) in the max and the sum, and the scores' own max into smax[t] unless NULL.
   Softpick: its P, and E (Tq, L) (NULL: not kept). */
static void probs(float *S, const mask_dims *d, int L, const float *q, const float *k, float *m,
                  float *r, bool have_stats, float z, float *E, float *smax) {
    mt_gemm_strided(false, true, d->Tq, L, d->HS, 1.0f / sqrtf((float)d->HS), q, d->C, k, d->KC,
                    0.0f, S, L);
    for (int t = 0; t < d->Tq; t++) {
        float *row = S + (size_t)t * L;
        int kend = query_keys(d, L, t);
        if (d->softpick) {
            float *e = E ? E + (size_t)t * L : NULL;
            softpick_row(row, kend, m + t, r + t, have_stats, e);
            for (int s = kend; e && s < L; s++) e[s] = 0.0f;
        } else if (!have_stats) {
            float mx = mt_vmaxf(row, kend), sum = 0;
            if (smax) smax[t] = mx;
            mx = z > mx ? z : mx;
            if (z > -INFINITY) sum = mt_vexpf(z - mx);
            for (int s = 0; s < kend; s++) sum += row[s] = mt_vexpf(row[s] - mx);
            m[t] = mx, r[t] = 1.0f / sum;
            for (int s = 0; s < kend; s++) row[s] *= r[t];
        } else {
            for (int s = 0; s < kend; s++) row[s] = mt_vexpf(row[s] - m[t]) * r[t];
        }
        for (int s = kend; s < L; s++) row[s] = 0.0f;
    }
}

/* Threads of the (b, h) loop: the pool when the work is worth the fork and no parallel region is
   active (a replica), else 1, whose scratch slot is 0 (thread_slot). The work is B NH Tq Tk HS
   multiply-adds each way; one query a row (a token of decoding) reads its keys once, so
   forking pays sooner there. */
static int mask_threads(const mask_dims *d) {
    size_t work = (size_t)d->B * d->NH * d->Tq * (d->Tq == 1 ? d->Lmax : d->Tk) * d->HS;
    bool worth = work >= (d->Tq == 1 ? 2 : 64) * (size_t)MT_PAR_MIN;
    return worth && !omp_in_parallel() ? mt_threads() : 1;
}

/* Where head h of row b starts in q (and out), and its key-value head in k (and v) */
static size_t mask_q_offset(const mask_dims *d, int b, int h) {
    return (size_t)b * d->Tq * d->C + (size_t)h * d->HS;
}
static size_t mask_kv_offset(const mask_dims *d, int b, int h) {
    return (size_t)b * d->Tk * d->KC + (size_t)(h / d->G) * d->HS;
}

/* One head's queries (q, k at its offsets, L keys, m and r its rows'): into acc[0] the queries
   with P_t0 > MT_ATTN_SINK_EPS, into acc[1] the sum of their entropies (record_weights). */
static void head_weights(const mask_dims *d, const float *q, const float *k, int L, const float *m,
                         const float *r, double *acc) {
    double sunk = 0, ent = 0, scale = 1 / sqrt((double)d->HS);
    for (int t = 0; t < d->Tq; t++) {
        double em = exp(-(double)m[t]);
        for (int s = 0, kend = query_keys(d, L, t); s < kend; s++) {
            double dot = 0;
            for (int j = 0; j < d->HS; j++)
                dot += (double)q[(size_t)t * d->C + j] * k[(size_t)s * d->KC + j];
            double e = exp(dot * scale - m[t]), p = (d->softpick ? fmax(e - em, 0) : e) * r[t];
            if (s == 0) sunk += p > MT_ATTN_SINK_EPS;
            if (p > 0) ent -= p * log(p);
        }
    }
    acc[0] = sunk, acc[1] = ent;
}

/* For the diagnostics' probe (mt_ctx.attn_sink): the weights P_ts the values are mixed with,
   recomputed from q, k and the op's saved m and r as probs computes them (P = exp(S - m) r,
   a sink's logit in m and r; softpick's relu(exp(S - m) - exp(-m)) r), in double: the share of
   (b, h, t) with P_t0 > MT_ATTN_SINK_EPS and the mean over them of -sum_s P_ts log P_ts
   (0 log 0 = 0). Per (b, h) into the arena, then summed in order. */
static void record_weights(mt_ctx *c, const mt_tensor *q, const mt_tensor *k, int NH,
                           const mt_attn_mask *mask, const float *m, const float *r) {
    if (!c->attn_sink) return;
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], C = q->shape[2], KC = k->shape[2];
    int HS = C / NH;
    mask_dims d = {.B = B,
                   .Tq = Tq,
                   .Tk = Tk,
                   .C = C,
                   .NH = NH,
                   .HS = HS,
                   .causal = mask->causal,
                   .KC = KC,
                   .G = NH / (KC / HS),
                   .pos0 = mask->pos0,
                   .Lmax = Tk,
                   .softpick = mask->softpick};
    size_t mark = mt_arena_mark(c);
    double *acc = mt_arena_alloc(c, 2 * (size_t)B * NH * sizeof *acc); /* (B NH, 2) */
    MT_PARALLEL_FOR(mask_threads(&d) > 1, for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, L = mask->kv_len ? mask->kv_len[b] : Tk;
        head_weights(&d, q->data + mask_q_offset(&d, b, h), k->data + mask_kv_offset(&d, b, h), L,
                     m + (size_t)bh * Tq, r + (size_t)bh * Tq, acc + 2 * bh);
    });
    double sunk = 0, ent = 0;
    for (int bh = 0; bh < B * NH; bh++) sunk += acc[2 * bh], ent += acc[2 * bh + 1];
    double n = (double)B * NH * Tq;
    c->attn_sink[2 * c->attn_sink_calls] = sunk / n;
    c->attn_sink[2 * c->attn_sink_calls++ + 1] = ent / n;
    mt_arena_release(c, mark);
}

static void masked_forward(mt_node *n) {
    mask_dims d = mask_dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const int *len = n->ids;
    float *out = n->out->data, *rmax = n->saved[0], *rinv = n->saved[1];
    size_t mark = mt_arena_mark(n->ctx), per = ((size_t)d.Tq * d.Lmax + 15) / 16 * 16;
    int slots = mask_threads(&d);
    float *work = mt_arena_floats(n->ctx, (size_t)slots * per);
    MT_PARALLEL_FOR(slots > 1, for (int bh = 0; bh < d.B * d.NH; bh++) {
        int b = bh / d.NH, h = bh % d.NH, L = len ? len[b] : d.Tk;
        size_t oq = mask_q_offset(&d, b, h), ok = mask_kv_offset(&d, b, h);
        size_t row = (size_t)bh * d.Tq;
        float *P = thread_slot(work, slots, per);
        probs(P, &d, L, q + oq, k + ok, rmax + row, rinv + row, false, sink_of(n, h), NULL,
              n->saved[2] ? n->saved[2] + row : NULL);
        mt_gemm_strided(false, false, d.Tq, d.HS, L, 1.0f, P, L, v + ok, d.KC, 0.0f, out + oq, d.C);
    });
    mt_arena_release(n->ctx, mark);
}

/* dO = out->grad; per (b, h), with P recomputed:
     dV[0:L] += P^T dO,  dP = dO V[0:L]^T,  dS_ts = P_ts (dP_ts - sum_u P_tu dP_tu),
     dQ += dS K[0:L] / sqrt(HS),  dK[0:L] += dS^T Q / sqrt(HS).
   Padded keys (s >= L) and masked entries have P = 0: no gradient reaches them. With grouped
   heads (G > 1) the G query heads of a key-value head add into its dK and dV: one thread runs
   the G of them, in order. A sink's gradient is summed per (b, h), then over b in order. */
static void masked_backward(mt_node *n) {
    mask_dims d = mask_dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const float *dout = n->out->grad;
    const int *len = n->ids;
    float *rmax = n->saved[0], *rinv = n->saved[1];
    float *dq = n->in[0]->grad, *dk = n->in[1]->grad, *dv = n->in[2]->grad;
    float scale = 1.0f / sqrtf((float)d.HS);
    size_t mark = mt_arena_mark(n->ctx),
           per = ((2 + d.softpick) * (size_t)d.Tq * d.Lmax + 15) / 16 * 16; /* P, dS (, E) */
    int slots = mask_threads(&d), NKV = d.NH / d.G;
    float *work = mt_arena_floats(n->ctx, (size_t)slots * per);
    float *dsink = n->n_in > 3 && n->in[3]->grad ? mt_arena_floats(n->ctx, (size_t)d.B * d.NH)
                                                 : NULL;
    MT_PARALLEL_FOR(slots > 1, for (int u = 0; u < d.B * NKV; u++) {
        for (int h = u % NKV * d.G; h < (u % NKV + 1) * d.G; h++) {
            int b = u / NKV, L = len ? len[b] : d.Tk, C = d.C, KC = d.KC, HS = d.HS;
            size_t oq = mask_q_offset(&d, b, h), ok = mask_kv_offset(&d, b, h);
            size_t row = ((size_t)b * d.NH + h) * d.Tq;
            float *P = thread_slot(work, slots, per), *dS = P + (size_t)d.Tq * L,
                  *E = d.softpick ? dS + (size_t)d.Tq * L : NULL;
            probs(P, &d, L, q + oq, k + ok, rmax + row, rinv + row, true, sink_of(n, h), E,
                  NULL);
            if (dv)
                mt_gemm_strided(true, false, L, HS, d.Tq, 1.0f, P, L, dout + oq, C, 1.0f, dv + ok,
                                KC);
            if (!dq && !dk && !dsink) continue;
            mt_gemm_strided(false, true, d.Tq, L, HS, 1.0f, dout + oq, C, v + ok, KC, 0.0f, dS, L);
            double dz = 0;
            for (int t = 0; t < d.Tq; t++) {
                float *g = dS + (size_t)t * L, *p = P + (size_t)t * L, dot = 0;
                if (E) {
                    softpick_ds(g, p, E + (size_t)t * L, L, rmax[row + t], rinv[row + t]);
                    continue;
                }
                for (int s = 0; s < L; s++) dot += p[s] * g[s];
                for (int s = 0; s < L; s++) g[s] = p[s] * (g[s] - dot);
                if (dsink) /* d(loss)/dz = -p_sink sum_s p_s g_s */
                    dz -= (double)mt_vexpf(sink_of(n, h) - rmax[row + t]) * rinv[row + t] * dot;
            }
            if (dsink) dsink[(size_t)b * d.NH + h] = (float)dz;
            if (dq)
                mt_gemm_strided(false, false, d.Tq, HS, L, scale, dS, L, k + ok, KC, 1.0f,
                                dq + oq, C);
            if (dk)
                mt_gemm_strided(true, false, L, HS, d.Tq, scale, dS, L, q + oq, C, 1.0f, dk + ok,
                                KC);
        }
    });
    for (int i = 0; dsink && i < d.B * d.NH; i++) n->in[3]->grad[i % d.NH] += dsink[i];
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_ATTENTION_MASKED = {.name = "attention_masked",
                                          .forward = masked_forward,
                                          .backward = masked_backward};

/* Checks q (B, Tq, C), k and v (B, Tk, KC) and the mask; the heads' size C / n_head. */
static int check_masked(const mt_tensor *q, const mt_tensor *k, const mt_tensor *v, int n_head,
                        const mt_attn_mask *mask) {
    char sq[64], sk[64], sv[64];
    MT_ASSERT(q->ndim == 3 && k->ndim == 3 && mt_same_shape(k, v) && q->shape[0] == k->shape[0],
              "attention: q %s (B, Tq, C), k %s and v %s (B, Tk, KC)", mt_shape_str(q, sq, 64),
              mt_shape_str(k, sk, 64), mt_shape_str(v, sv, 64));
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], C = q->shape[2], KC = k->shape[2];
    MT_ASSERT(n_head >= 1 && C % n_head == 0, "attention: %d heads do not divide C = %d", n_head,
              C);
    int HS = C / n_head;
    MT_ASSERT(KC % HS == 0 && n_head % (KC / HS) == 0,
              "attention: k and v of %d channels are not a whole number of heads of %d that "
              "divides the %d query heads",
              KC, HS, n_head);
    MT_ASSERT(mask->pos0 >= 0 && (!mask->causal || mask->kv_len || mask->pos0 + Tq <= Tk),
              "attention: causal queries at positions %d..%d with %d keys", mask->pos0,
              mask->pos0 + Tq - 1, Tk);
    for (int b = 0; mask->kv_len && b < B; b++)
        MT_ASSERT(mask->kv_len[b] >= 1 && mask->kv_len[b] <= Tk,
                  "attention: row %d has %d keys of %d", b, mask->kv_len[b], Tk);
    return HS;
}

mt_tensor *mt_attention_ex(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                           const mt_attn_mask *mask) {
    check_masked(q, k, v, n_head, mask);
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], Lmax = 0;
    for (int b = 0; b < B; b++) {
        int L = mask->kv_len ? mask->kv_len[b] : Tk;
        Lmax = L > Lmax ? L : Lmax;
    }
    /* every row's keys, from position 0, softmax, no sink: fused */
    bool full = Tq == Tk && mask->pos0 == 0 && !mask->sink && !mask->softpick;
    for (int b = 0; mask->kv_len && b < B; b++) full = full && mask->kv_len[b] == Tk;
    if (full) return mt_attention(c, q, k, v, n_head, mask->causal);
    MT_ASSERT(!mask->sink || !mask->softpick, "attention: a sink with softpick");
    MT_ASSERT(!mask->sink || (mask->sink->n == (size_t)n_head),
              "attention: a sink of %zu logits for %d heads", mask->sink ? mask->sink->n : 0,
              n_head);
    mt_tensor *out = mt_tensor_like(c, q);
    mt_node *n = mt_node_new(c, &OP_ATTENTION_MASKED, out, mask->sink ? 4 : 3,
                             (mt_tensor *[]){q, k, v, mask->sink});
    int args[] = {B, Tq, Tk, q->shape[2], n_head, mask->causal, k->shape[2], mask->pos0};
    for (int i = 0; i < 8; i++) n->i[i] = args[i];
    n->f[0] = (float)Lmax; /* exact: Lmax < 2^24 */
    n->f[1] = mask->softpick;
    if (mask->kv_len) {
        int *len = mt_arena_alloc(c, (size_t)B * sizeof *len);
        memcpy(len, mask->kv_len, (size_t)B * sizeof *len);
        n->ids = len;
    }
    n->saved[0] = mt_arena_floats(c, (size_t)B * n_head * Tq);
    n->saved[1] = mt_arena_floats(c, (size_t)B * n_head * Tq);
    /* a sink's logit is in the saved max: QK-Clip's probe reads the scores' own */
    if (mask->sink && qk_probed(c)) n->saved[2] = mt_arena_floats(c, (size_t)B * n_head * Tq);
    mt_node_run(c, n);
    record_max_logit(c, n->saved[0], (size_t)B * n_head * Tq);
    record_head_max(c, n->saved[2] ? n->saved[2] : n->saved[0], B, n_head, Tq);
    record_weights(c, q, k, n_head, mask, n->saved[0], n->saved[1]);
    return out;
}

mt_tensor *mt_attention_masked(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                               bool causal, const int *kv_len) {
    return mt_attention_ex(c, q, k, v, n_head, &(mt_attn_mask){.causal = causal, .kv_len = kv_len});
}

/* ---- the KV cache (nn.h, mt_attn_cache) ---- */

static void cache_shape(mt_attn_cache *kv, int n_layer, int B, int cap, int KC) {
    *kv = (mt_attn_cache){.n_layer = n_layer, .B = B, .cap = cap, .KC = KC};
}

static size_t cache_floats(const mt_attn_cache *kv) {
    return (size_t)kv->n_layer * kv->B * kv->cap * kv->KC;
}

mt_status mt_attn_cache_alloc(mt_attn_cache *kv, int n_layer, int B, int cap, int KC, mt_err *err) {
    cache_shape(kv, n_layer, B, cap, KC);
    size_t n = cache_floats(kv);
    kv->owned = mt_alloc_big(2 * n * sizeof(float));
    if (!kv->owned)
        return mt_errorf(err, MT_ENOMEM,
                         "out of memory for a KV cache of %d layers, %d rows, "
                         "%d positions of %d channels",
                         n_layer, B, cap, KC);
    kv->k = kv->owned, kv->v = kv->owned + n;
    return MT_OK;
}

void mt_attn_cache_arena(mt_ctx *c, mt_attn_cache *kv, int n_layer, int B, int cap, int KC) {
    cache_shape(kv, n_layer, B, cap, KC);
    kv->k = mt_arena_floats(c, cache_floats(kv));
    kv->v = mt_arena_floats(c, cache_floats(kv));
}

void mt_attn_cache_free(mt_attn_cache *kv) {
    free(kv->owned);
    *kv = (mt_attn_cache){0};
}

/* Layer l, row b, position pos of buf */
static float *cache_at(const mt_attn_cache *kv, float *buf, int layer, int b, int pos) {
    return buf + (((size_t)layer * kv->B + b) * kv->cap + pos) * kv->KC;
}

void mt_attn_cache_put(mt_attn_cache *kv, int layer, int pos, const mt_tensor *k,
                       const mt_tensor *v) {
    char sk[64];
    int n = k->shape[1];
    MT_ASSERT(k->ndim == 3 && k->shape[0] == kv->B && k->shape[2] == kv->KC &&
                  mt_same_shape(k, v) && layer >= 0 && layer < kv->n_layer && pos >= 0 &&
                  pos + n <= kv->cap,
              "kv cache (%d layers, %d rows, %d positions, %d channels): keys %s at layer %d, "
              "position %d",
              kv->n_layer, kv->B, kv->cap, kv->KC, mt_shape_str(k, sk, 64), layer, pos);
    for (int b = 0; b < kv->B; b++) {
        size_t from = (size_t)b * n * kv->KC, bytes = (size_t)n * kv->KC * sizeof(float);
        memcpy(cache_at(kv, kv->k, layer, b, pos), k->data + from, bytes);
        memcpy(cache_at(kv, kv->v, layer, b, pos), v->data + from, bytes);
    }
}

void mt_attn_cache_layer(mt_ctx *c, const mt_attn_cache *kv, int layer, mt_tensor **k,
                         mt_tensor **v) {
    int shape[] = {kv->B, kv->cap, kv->KC};
    *k = mt_arena_alloc(c, sizeof **k), *v = mt_arena_alloc(c, sizeof **v);
    **k = mt_tensor_view(cache_at(kv, kv->k, layer, 0, 0), NULL, 3, shape);
    **v = mt_tensor_view(cache_at(kv, kv->v, layer, 0, 0), NULL, 3, shape);
}

void mt_attn_cache_gather(mt_ctx *c, mt_attn_cache *kv, const int *from, int rows) {
    size_t mark = mt_arena_mark(c), n = (size_t)kv->len * kv->KC;
    float *tmp = mt_arena_floats(c, (size_t)rows * n);
    for (int l = 0; l < kv->n_layer; l++)
        for (float *buf = kv->k; buf; buf = buf == kv->k ? kv->v : NULL) {
            for (int j = 0; j < rows; j++)
                memcpy(tmp + j * n, cache_at(kv, buf, l, from[j], 0), n * sizeof(float));
            for (int j = 0; j < rows; j++)
                memcpy(cache_at(kv, buf, l, j, 0), tmp + j * n, n * sizeof(float));
        }
    mt_arena_release(c, mark);
}

mt_tensor *mt_attention_cached(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v,
                               mt_attn_cache *kv, int layer, int n_head,
                               const mt_attn_mask *softmax) {
    int B = kv->B, n = q->shape[1], L = kv->len + n;
    mt_attn_cache_put(kv, layer, kv->len, k, v);
    mt_tensor *K, *V;
    mt_attn_cache_layer(c, kv, layer, &K, &V);
    int *len = mt_arena_alloc(c, (size_t)B * sizeof *len);
    for (int b = 0; b < B; b++) len[b] = L;
    return mt_attention_ex(c, q, K, V, n_head,
                           &(mt_attn_mask){.causal = true,
                                           .pos0 = kv->len,
                                           .kv_len = len,
                                           .sink = softmax->sink,
                                           .softpick = softmax->softpick});
}
