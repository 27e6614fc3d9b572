/* Fused multi-head scaled dot-product attention (Vaswani et al. 2017), one op.
   q, k, v, out (B, T, C), C = NH * HS; head h of batch b is the (T, HS) block at
   b T C + h HS with row stride C, so every matmul is a strided cblas_sgemm, no copies.
   Forward per (b, h): S = Q K^T / sqrt(HS) (T, T), masked to s <= t when causal,
   P = softmax_rows(S), O = P V. Saved per row: the max m and r = 1 / sum exp(S - m), (B, NH, T)
   each; backward recomputes P = exp(S - m) r, bit for bit the forward's, instead of keeping
   B NH T^2 probabilities. (One log-sum-exp m + log(sum) would round away the low bits of large
   scores: 6e-5 absolute at |S| ~ 1000.)
   Causal attention runs in blocks of ROWS query rows [t0, t1) against keys [0, t1) only, so the
   masked upper triangle is mostly never computed; forward and backward use the same blocks (the
   same sgemm calls give the same S). */
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "../tensor/vmath.h"
#include "nn.h"

enum { ROWS = 32 }; /* query rows per causal block */

typedef struct {
    int B, T, C, NH, HS;
    bool causal;
    int rows; /* rows per block: ROWS when causal, T otherwise */
} attn_dims;

static attn_dims dims_of(const mt_node *n) {
    int T = n->i[1];
    bool causal = n->i[4];
    return (attn_dims){n->i[0], T, n->i[2], n->i[3], n->i[2] / n->i[3], causal,
                       causal && T > ROWS ? ROWS : T};
}

/* S (t1 - t0, ns), row stride T, = Q[t0:t1] K[0:ns]^T / sqrt(HS); q, k at the head's block. */
static void scores(const attn_dims *d, const float *q, const float *k, int t0, int t1, int ns,
                   float *S) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t1 - t0, ns, d->HS,
                1.0f / sqrtf((float)d->HS), q + (size_t)t0 * d->C, d->C, k, d->C, 0.0f, S, d->T);
}

/* Per-thread scratch of n_mat (rows, T) matrices for each thread of the pool. */
static float *scratch(mt_ctx *c, const attn_dims *d, int n_mat) {
    return mt_arena_floats(c, (size_t)mt_threads() * n_mat * d->rows * d->T);
}

/* Work large enough to be worth the fork: about 2 B NH T^2 HS flops. */
static bool parallel_worth(const attn_dims *d) {
    return (size_t)d->B * d->NH * d->T * d->T * d->HS >= 64 * (size_t)MT_PAR_MIN;
}

static void attention_forward(mt_node *n) {
    attn_dims d = dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    float *out = n->out->data, *rmax = n->saved[0], *rinv = n->saved[1];
    float *work = scratch(n->ctx, &d, 1);
    int T = d.T, C = d.C;
#pragma omp parallel for if (parallel_worth(&d))
    for (int bh = 0; bh < d.B * d.NH; bh++) {
        size_t off = (size_t)(bh / d.NH) * T * C + (size_t)(bh % d.NH) * d.HS;
        float *S = work + (size_t)omp_get_thread_num() * d.rows * T;
        for (int t0 = 0; t0 < T; t0 += d.rows) {
            int t1 = t0 + d.rows < T ? t0 + d.rows : T, ns = d.causal ? t1 : T;
            scores(&d, q + off, k + off, t0, t1, ns, S);
            for (int t = t0; t < t1; t++) {
                float *row = S + (size_t)(t - t0) * T;
                int len = d.causal ? t + 1 : T;
                float m = row[0], sum = 0.0f;
                for (int s = 1; s < len; s++) m = row[s] > m ? row[s] : m;
                for (int s = 0; s < len; s++) row[s] = mt_vexpf(row[s] - m); /* vectorised */
                for (int s = 0; s < len; s++) sum += row[s];
                float inv = 1.0f / sum;
                for (int s = 0; s < len; s++) row[s] *= inv;
                for (int s = len; s < ns; s++) row[s] = 0.0f;
                rmax[(size_t)bh * T + t] = m;
                rinv[(size_t)bh * T + t] = inv;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t1 - t0, d.HS, ns, 1.0f, S, T,
                        v + off, C, 0.0f, out + off + (size_t)t0 * C, C);
        }
    }
}

/* Per block of rows [t0, t1) with keys [0, ns), P recomputed from m and r, dO = out->grad:
     dV[0:ns] += P^T dO[t0:t1],  dP = dO[t0:t1] V[0:ns]^T,  dS_ts = P_ts (dP_ts - sum_u P_tu dP_tu),
     dQ[t0:t1] += dS K[0:ns] / sqrt(HS),  dK[0:ns] += dS^T Q[t0:t1] / sqrt(HS).
   Masked entries have P = 0, hence dS = 0. Each (b, h) writes only its own blocks. */
static void attention_backward(mt_node *n) {
    attn_dims d = dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const float *dout = n->out->grad, *rmax = n->saved[0], *rinv = n->saved[1];
    float *dq = n->in[0]->grad, *dk = n->in[1]->grad, *dv = n->in[2]->grad;
    float *work = scratch(n->ctx, &d, 2);
    int T = d.T, C = d.C;
    float scale = 1.0f / sqrtf((float)d.HS);
#pragma omp parallel for if (parallel_worth(&d))
    for (int bh = 0; bh < d.B * d.NH; bh++) {
        size_t off = (size_t)(bh / d.NH) * T * C + (size_t)(bh % d.NH) * d.HS;
        float *P = work + (size_t)omp_get_thread_num() * 2 * d.rows * T;
        float *dP = P + (size_t)d.rows * T;
        for (int t0 = 0; t0 < T; t0 += d.rows) {
            int t1 = t0 + d.rows < T ? t0 + d.rows : T, ns = d.causal ? t1 : T, nr = t1 - t0;
            const float *dO = dout + off + (size_t)t0 * C;
            scores(&d, q + off, k + off, t0, t1, ns, P);
            for (int t = t0; t < t1; t++) {
                float *row = P + (size_t)(t - t0) * T;
                int len = d.causal ? t + 1 : T;
                float m = rmax[(size_t)bh * T + t], inv = rinv[(size_t)bh * T + t];
                for (int s = 0; s < len; s++) row[s] = mt_vexpf(row[s] - m) * inv;
                for (int s = len; s < ns; s++) row[s] = 0.0f;
            }
            if (dv)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, d.HS, nr, 1.0f, P, T, dO,
                            C, 1.0f, dv + off, C);
            if (!dq && !dk) continue;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, ns, d.HS, 1.0f, dO, C,
                        v + off, C, 0.0f, dP, T);
            for (int t = t0; t < t1; t++) {
                const float *p = P + (size_t)(t - t0) * T;
                float *g = dP + (size_t)(t - t0) * T, dot = 0.0f;
                int len = d.causal ? t + 1 : T;
                for (int s = 0; s < len; s++) dot += p[s] * g[s];
                for (int s = 0; s < ns; s++) g[s] = p[s] * (g[s] - dot);
            }
            if (dq)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, d.HS, ns, scale, dP, T,
                            k + off, C, 1.0f, dq + off + (size_t)t0 * C, C);
            if (dk)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, d.HS, nr, scale, dP, T,
                            q + off + (size_t)t0 * C, C, 1.0f, dk + off, C);
        }
    }
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
