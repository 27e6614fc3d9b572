/* Fused multi-head scaled dot-product attention (Vaswani et al. 2017), one op.
   q, k, v, out (B, T, C), C = NH * HS; head h of batch b is the (T, HS) block at
   b T C + h HS with row stride C. Forward per (b, h): S = Q K^T / sqrt(HS) (T, T), masked to
   s <= t when causal, P = softmax_rows(S), O = P V. Saved per row: the max m and
   r = 1 / sum exp(S - m), (B, NH, T) each; backward recomputes P = exp(S - m) r, bit for bit the
   forward's (the same code computes S in both), instead of keeping B NH T^2 probabilities. (One
   log-sum-exp m + log(sum) would round away the low bits of large scores: 6e-5 absolute at
   |S| ~ 1000.)
   Two ways to run a head, chosen by its size (dims_of):
   - small heads (HS a multiple of the vector width TW, T <= SMALL_T; all the bench configs):
     per-thread K^T (and V^T) (HS, Tp) copies, so that a row of scores is a run of vectors, and
     every product is a register tile of TR rows by whole vectors, read straight from the
     (B, T, C) buffers: no sgemm call overhead on 32 x 32 blocks. Causal attention computes only
     the tiles on or below the diagonal.
   - large heads: strided cblas_sgemm calls on the (B, T, C) buffers, causal attention in blocks
     of ROWS query rows against keys [0, t1) only. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../tensor/vmath.h"
#include "nn.h"

/* TW: floats in one vector register */
#if defined(__AVX512F__)
#define TW 16
#elif defined(__AVX__)
#define TW 8
#else
#define TW 4
#endif
typedef float vf __attribute__((vector_size(TW * sizeof(float))));
enum {
    ROWS = 32,     /* query rows per causal block of the sgemm path */
    TR = 8,        /* rows of a register tile; its columns are vectors */
    TK = 2,        /* vectors per row of a score tile (TK TW keys) */
    SMALL_T = 512, /* longest T on the small path: beyond, P and dS (T, T) leave L2 (measured) */
};

typedef struct {
    int B, T, C, NH, HS;
    bool causal;
    bool small; /* the register-tile path */
    int rows;   /* sgemm path: rows per block, ROWS when causal, T otherwise */
    int Tp;     /* row stride of the score buffers: T rounded up to TK TW (a multiple of TR) */
} attn_dims;

static attn_dims dims_of(const mt_node *n) {
    int T = n->i[1], HS = n->i[2] / n->i[3];
    bool causal = n->i[4];
    return (attn_dims){n->i[0], T, n->i[2], n->i[3], HS, causal,
                       HS % TW == 0 && T <= SMALL_T, causal && T > ROWS ? ROWS : T,
                       (T + TK * TW - 1) / (TK * TW) * (TK * TW)};
}

/* Work large enough to be worth the fork: about 2 B NH T^2 HS flops. */
static bool parallel_worth(const attn_dims *d) {
    return (size_t)d->B * d->NH * d->T * d->T * d->HS >= 64 * (size_t)MT_PAR_MIN;
}

/* Per-thread scratch of n floats for each thread of the pool, 64-byte aligned per thread; the
   caller gives it back with mt_arena_release. */
static float *scratch(mt_ctx *c, size_t n, size_t *per_thread) {
    *per_thread = (n + 15) / 16 * 16;
    return mt_arena_floats(c, (size_t)mt_threads() * *per_thread);
}

/* exp(x) for x <= 0, a score minus its row's max: 0 below -80 (where exp is 1.8e-35, an absolute
   error below that on probabilities summing to 1), NaN stays NaN. 2^n then fits one exponent and
   mt_vexpf's selects for its edges are not needed. */
static inline float exp_le0(float x) {
    float c = x > -80.0f ? x : -80.0f, n, p = mt_vexp_reduced(c, &n);
    return x >= -80.0f ? p * mt_vpow2i((int)n) : x != x ? x : 0.0f;
}

/* Row t of scores turned into probabilities in place over n keys: exp(S - m) r over the keys it
   sees, [0, len), 0 over [len, n). With fresh, m and r are found and saved (the masked keys set
   to -inf, which exp turns into 0), else (backward) read: the same operations on the same scores
   give the same bits. */
static void softmax_row(float *row, int len, int n, float *m, float *r, bool fresh) {
    if (!fresh) {
        float mb = *m, inv = *r;
#pragma omp simd
        for (int s = 0; s < n; s++) row[s] = s < len ? exp_le0(row[s] - mb) * inv : 0.0f;
        return;
    }
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int s = 0; s < n; s++) {
        row[s] = s < len ? row[s] : -INFINITY;
        mx = row[s] > mx ? row[s] : mx;
    }
    float part[TW] = {0}; /* lane sums, added as a tree: 4 dependent adds, not 16 */
    for (int s0 = 0; s0 < n; s0 += TW)
        for (int j = 0; j < TW; j++) part[j] += row[s0 + j] = exp_le0(row[s0 + j] - mx);
    for (int w = TW / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) part[j] += part[j + w];
    float inv = 1.0f / part[0];
#pragma omp simd
    for (int s = 0; s < n; s++) row[s] *= inv;
    *m = mx, *r = inv;
}

/* dS_s = P_s (dP_s - sum_u P_u dP_u) over one row of n keys, in place over dP. */
static void ds_row(float *g, const float *p, int n) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int s = 0; s < n; s++) dot += p[s] * g[s];
#pragma omp simd
    for (int s = 0; s < n; s++) g[s] = p[s] * (g[s] - dot);
}

/* ---- small path: register tiles ---- */

/* a b + c lane by lane, in one rounding where the CPU has FMA (MT_MADD): a loop over the TW lanes
   that the compiler turns into one vector instruction */
static vf vmadd(vf a, vf b, vf c) {
    vf y;
    for (int j = 0; j < TW; j++) y[j] = MT_MADD(a[j], b[j], c[j]);
    return y;
}

static vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* D (TR, nv TW), row stride ldd, = alpha A (nr, K) Bt (K, nv TW): A row stride lda, its rows
   nr..TR-1 (past the head's end) stand in by row nr - 1 and give rows of D nobody reads; Bt
   row stride ldb. nv <= TK is a constant once inlined: the accumulators stay in registers. */
static inline __attribute__((always_inline)) void tile_abt(int nv, float *D, int ldd,
                                                           float alpha, const float *A, int lda,
                                                           int nr, const float *Bt, int ldb,
                                                           int K) {
    const float *a[TR];
    vf acc[TR][TK];
    for (int r = 0; r < TR; r++) {
        a[r] = A + (size_t)(r < nr ? r : nr - 1) * lda;
        for (int j = 0; j < nv; j++) acc[r][j] = (vf){0};
    }
    for (int i = 0; i < K; i++) {
        vf b[TK];
        for (int j = 0; j < nv; j++) b[j] = vload(Bt + (size_t)i * ldb + j * TW);
#pragma GCC unroll 8
        for (int r = 0; r < TR; r++)
            for (int j = 0; j < nv; j++) acc[r][j] = vmadd(b[j], a[r][i] - (vf){0}, acc[r][j]);
    }
    for (int r = 0; r < TR; r++)
        for (int j = 0; j < nv; j++) {
            vf y = alpha * acc[r][j];
            memcpy(D + (size_t)r * ldd + j * TW, &y, sizeof y);
        }
}

/* D (nr, TW) row stride ldd, nr <= TR, (+)= alpha sum_{k0 <= k < k1} A(r, k) B[k, 0:TW]:
   A(r, k) = A[r ar + k ak] (ar, ak pick A or A^T) for r < TR, B row stride ldb; = when
   !accumulate. */
static void tile_ab(float *D, int ldd, int nr, float alpha, bool accumulate, const float *A,
                    int ar, int ak, const float *B, int ldb, int k0, int k1) {
    vf acc[TR];
    /* D's rows, read at the end: their cache misses overlap the products */
    for (int r = 0; r < nr; r++) __builtin_prefetch(D + (size_t)r * ldd, 1);
    for (int r = 0; r < TR; r++) acc[r] = (vf){0};
    for (int k = k0; k < k1; k++) {
        vf b = vload(B + (size_t)k * ldb);
        const float *a = A + (size_t)k * ak;
#pragma GCC unroll 8
        for (int r = 0; r < TR; r++) acc[r] = vmadd(b, a[(size_t)r * ar] - (vf){0}, acc[r]);
    }
    for (int r = 0; r < nr; r++) {
        float *d = D + (size_t)r * ldd;
        vf y = alpha * acc[r];
        if (accumulate) y += vload(d);
        memcpy(d, &y, sizeof y);
    }
}

/* Xt (HS, Tp) = the head's X (T, HS) row stride C, transposed, zero padded columns. */
static void transpose_head(float *Xt, const float *X, const attn_dims *d) {
    for (int i = 0; i < d->HS; i++) {
        for (int t = 0; t < d->T; t++) Xt[(size_t)i * d->Tp + t] = X[(size_t)t * d->C + i];
        for (int t = d->T; t < d->Tp; t++) Xt[(size_t)i * d->Tp + t] = 0.0f;
    }
}

/* Keys [0, kend) that rows [t0, t0 + TR) see (later rows of a causal tile see fewer, P = 0 there),
   and the whole vectors kv >= kend over which the rows' softmax runs. */
static int key_end(const attn_dims *d, int t0) {
    return d->causal && t0 + TR < d->T ? t0 + TR : d->T;
}
static int key_vec(int kend) { return (kend + TW - 1) / TW * TW; }

/* S rows [t0, t0 + TR) (row stride Tp) = scale X[t0:] Yt[:, 0:kv]: X the head's Q or dO (T, HS)
   row stride C, Yt (HS, Tp) K^T or V^T; tiles of TK vectors of keys, then one. */
static void score_rows(float *S, const attn_dims *d, float scale, const float *X,
                       const float *Yt, int t0, int kv) {
    int nr = d->T - t0 < TR ? d->T - t0 : TR, s0 = 0;
    X += (size_t)t0 * d->C;
    for (; s0 + TK * TW <= kv; s0 += TK * TW)
        tile_abt(TK, S + s0, d->Tp, scale, X, d->C, nr, Yt + s0, d->Tp, d->HS);
    for (; s0 < kv; s0 += TW) tile_abt(1, S + s0, d->Tp, scale, X, d->C, nr, Yt + s0, d->Tp, d->HS);
}

/* Floats of per-thread scratch: Kt (HS, Tp), S (TR, Tp) forward; Kt, Vt (HS, Tp), P, dS (Tp, Tp)
   backward. */
static size_t small_scratch(const attn_dims *d, bool backward) {
    size_t ht = (size_t)d->HS * d->Tp;
    return backward ? 2 * ht + 2 * (size_t)d->Tp * d->Tp : ht + (size_t)TR * d->Tp;
}

/* One head (q, k, v, o at the head's block, rmax, rinv its T rows) on the small path. */
static void small_forward(const attn_dims *d, const float *q, const float *k, const float *v,
                          float *o, float *rmax, float *rinv, float *w) {
    int T = d->T, Tp = d->Tp, C = d->C;
    float *Kt = w, *S = Kt + (size_t)d->HS * Tp;
    transpose_head(Kt, k, d);
    for (int t0 = 0; t0 < T; t0 += TR) {
        int kend = key_end(d, t0), kv = key_vec(kend), nr = T - t0 < TR ? T - t0 : TR;
        score_rows(S, d, 1.0f / sqrtf((float)d->HS), q, Kt, t0, kv);
        for (int t = t0; t < t0 + nr; t++)
            softmax_row(S + (size_t)(t - t0) * Tp, d->causal ? t + 1 : T, kv, rmax + t, rinv + t,
                        true);
        for (int c0 = 0; c0 < d->HS; c0 += TW)
            tile_ab(o + (size_t)t0 * C + c0, C, nr, 1.0f, false, S, Tp, 1, v + c0, C, 0, kend);
    }
}

/* The small path's backward of one head (dq, dk, dv NULL: skipped), the products of
   attention_backward: row tiles give P, dP, dS and dQ, then column tiles of P and dS against
   rows t >= s0 (causal; P = dS = 0 above the diagonal) give dV and dK. */
static void small_backward(const attn_dims *d, const float *q, const float *k, const float *v,
                           const float *dout, const float *rmax, const float *rinv, float *dq,
                           float *dk, float *dv, float *w) {
    int T = d->T, Tp = d->Tp, HS = d->HS, C = d->C;
    float *Kt = w, *Vt = Kt + (size_t)HS * Tp, *P = Vt + (size_t)HS * Tp;
    float *dS = P + (size_t)Tp * Tp, scale = 1.0f / sqrtf((float)HS);
    transpose_head(Kt, k, d);
    transpose_head(Vt, v, d);
    for (int t0 = 0; t0 < T; t0 += TR) {
        int kend = key_end(d, t0), kv = key_vec(kend), nr = T - t0 < TR ? T - t0 : TR;
        float *Pt = P + (size_t)t0 * Tp, *dSt = dS + (size_t)t0 * Tp;
        score_rows(Pt, d, scale, q, Kt, t0, kv);
        for (int t = t0; t < t0 + nr; t++) {
            float m = rmax[t], r = rinv[t];
            softmax_row(P + (size_t)t * Tp, d->causal ? t + 1 : T, kv, &m, &r, false);
        }
        if (!dq && !dk) continue;
        score_rows(dSt, d, 1.0f, dout, Vt, t0, kv); /* dP */
        for (int t = t0; t < t0 + nr; t++) ds_row(dS + (size_t)t * Tp, P + (size_t)t * Tp, kv);
        if (dq)
            for (int c0 = 0; c0 < HS; c0 += TW)
                tile_ab(dq + (size_t)t0 * C + c0, C, nr, scale, true, dSt, Tp, 1, k + c0, C, 0,
                        kend);
    }
    for (int s0 = 0; s0 < T; s0 += TR) {
        int nr = T - s0 < TR ? T - s0 : TR, tbeg = d->causal ? s0 : 0;
        for (int c0 = 0; c0 < HS; c0 += TW) {
            if (dv)
                tile_ab(dv + (size_t)s0 * C + c0, C, nr, 1.0f, true, P + s0, 1, Tp, dout + c0, C,
                        tbeg, T);
            if (dk)
                tile_ab(dk + (size_t)s0 * C + c0, C, nr, scale, true, dS + s0, 1, Tp, q + c0, C,
                        tbeg, T);
        }
    }
}

/* ---- large path: strided sgemm ---- */

/* S (t1 - t0, ns), row stride Tp, = Q[t0:t1] K[0:ns]^T / sqrt(HS); q, k at the head's block. */
static void scores(const attn_dims *d, const float *q, const float *k, int t0, int t1, int ns,
                   float *S) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t1 - t0, ns, d->HS,
                1.0f / sqrtf((float)d->HS), q + (size_t)t0 * d->C, d->C, k, d->C, 0.0f, S, d->Tp);
}

static void large_forward(const attn_dims *d, const float *q, const float *k, const float *v,
                          float *o, float *rmax, float *rinv, float *S) {
    int T = d->T, Tp = d->Tp, C = d->C;
    for (int t0 = 0; t0 < T; t0 += d->rows) {
        int t1 = t0 + d->rows < T ? t0 + d->rows : T, ns = d->causal ? t1 : T;
        scores(d, q, k, t0, t1, ns, S);
        for (int t = t0; t < t1; t++)
            softmax_row(S + (size_t)(t - t0) * Tp, d->causal ? t + 1 : T, key_vec(ns), rmax + t,
                        rinv + t, true);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t1 - t0, d->HS, ns, 1.0f, S, Tp, v,
                    C, 0.0f, o + (size_t)t0 * C, C);
    }
}

/* Per block of rows [t0, t1) with keys [0, ns), P recomputed from m and r, dO = out->grad:
     dV[0:ns] += P^T dO[t0:t1],  dP = dO[t0:t1] V[0:ns]^T,  dS_ts = P_ts (dP_ts - sum_u P_tu dP_tu),
     dQ[t0:t1] += dS K[0:ns] / sqrt(HS),  dK[0:ns] += dS^T Q[t0:t1] / sqrt(HS).
   Masked entries have P = 0, hence dS = 0. */
static void large_backward(const attn_dims *d, const float *q, const float *k, const float *v,
                           const float *dout, const float *rmax, const float *rinv, float *dq,
                           float *dk, float *dv, float *P) {
    int T = d->T, Tp = d->Tp, C = d->C;
    float scale = 1.0f / sqrtf((float)d->HS), *dP = P + (size_t)d->rows * Tp;
    for (int t0 = 0; t0 < T; t0 += d->rows) {
        int t1 = t0 + d->rows < T ? t0 + d->rows : T, ns = d->causal ? t1 : T, nr = t1 - t0;
        const float *dO = dout + (size_t)t0 * C;
        scores(d, q, k, t0, t1, ns, P);
        for (int t = t0; t < t1; t++) {
            float m = rmax[t], r = rinv[t];
            softmax_row(P + (size_t)(t - t0) * Tp, d->causal ? t + 1 : T, key_vec(ns), &m, &r,
                        false);
        }
        if (dv)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, d->HS, nr, 1.0f, P, Tp, dO, C,
                        1.0f, dv, C);
        if (!dq && !dk) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, ns, d->HS, 1.0f, dO, C, v, C,
                    0.0f, dP, Tp);
        for (int t = 0; t < nr; t++) ds_row(dP + (size_t)t * Tp, P + (size_t)t * Tp, ns);
        if (dq)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, d->HS, ns, scale, dP, Tp, k,
                        C, 1.0f, dq + (size_t)t0 * C, C);
        if (dk)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, d->HS, nr, scale, dP, Tp,
                        q + (size_t)t0 * C, C, 1.0f, dk, C);
    }
}

/* ---- the op: each (b, h) by one thread, in a fixed order ---- */

static void attention_forward(mt_node *n) {
    attn_dims d = dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    float *out = n->out->data, *rmax = n->saved[0], *rinv = n->saved[1];
    size_t mark = mt_arena_mark(n->ctx), per;
    float *work =
        scratch(n->ctx, d.small ? small_scratch(&d, false) : (size_t)d.rows * d.Tp, &per);
#pragma omp parallel for if (parallel_worth(&d))
    for (int bh = 0; bh < d.B * d.NH; bh++) {
        size_t off = (size_t)(bh / d.NH) * d.T * d.C + (size_t)(bh % d.NH) * d.HS;
        size_t row = (size_t)bh * d.T;
        float *w = work + (size_t)omp_get_thread_num() * per;
        if (d.small)
            small_forward(&d, q + off, k + off, v + off, out + off, rmax + row, rinv + row, w);
        else
            large_forward(&d, q + off, k + off, v + off, out + off, rmax + row, rinv + row, w);
    }
    mt_arena_release(n->ctx, mark);
}

static void attention_backward(mt_node *n) {
    attn_dims d = dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const float *dout = n->out->grad, *rmax = n->saved[0], *rinv = n->saved[1];
    float *dq = n->in[0]->grad, *dk = n->in[1]->grad, *dv = n->in[2]->grad;
    size_t mark = mt_arena_mark(n->ctx), per;
    float *work =
        scratch(n->ctx, d.small ? small_scratch(&d, true) : 2 * (size_t)d.rows * d.Tp, &per);
#pragma omp parallel for if (parallel_worth(&d))
    for (int bh = 0; bh < d.B * d.NH; bh++) {
        size_t off = (size_t)(bh / d.NH) * d.T * d.C + (size_t)(bh % d.NH) * d.HS;
        size_t row = (size_t)bh * d.T;
        float *w = work + (size_t)omp_get_thread_num() * per;
        float *gq = dq ? dq + off : NULL, *gk = dk ? dk + off : NULL, *gv = dv ? dv + off : NULL;
        if (d.small)
            small_backward(&d, q + off, k + off, v + off, dout + off, rmax + row, rinv + row, gq,
                           gk, gv, w);
        else
            large_backward(&d, q + off, k + off, v + off, dout + off, rmax + row, rinv + row, gq,
                           gk, gv, w);
    }
    mt_arena_release(n->ctx, mark);
}
static const mt_op OP_ATTENTION = {"attention", attention_forward, attention_backward};

mt_tensor *mt_attention(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                        bool causal) {
    char sq[64], sk[64], sv[64];
    MT_ASSERT(q->ndim == 3 && mt_same_shape(q, k) && mt_same_shape(q, v),
              "attention: q %s, k %s, v %s must all be (B, T, C)", mt_shape_str(q, sq, 64),
              mt_shape_str(k, sk, 64), mt_shape_str(v, sv, 64));
    int B = q->shape[0], T = q->shape[1], C = q->shape[2];
    MT_ASSERT(n_head >= 1 && C % n_head == 0, "attention: %d heads do not divide C = %d", n_head,
              C);
    mt_tensor *out = mt_tensor_like(c, q);
    mt_node *n = mt_node_new(c, &OP_ATTENTION, out, 3, (mt_tensor *[]){q, k, v});
    int args[] = {B, T, C, n_head, causal};
    for (int i = 0; i < 5; i++) n->i[i] = args[i];
    n->saved[0] = mt_arena_floats(c, (size_t)B * n_head * T);
    n->saved[1] = mt_arena_floats(c, (size_t)B * n_head * T);
    mt_node_run(c, n);
    return out;
}
