/* Fused multi-head scaled dot-product attention (Vaswani et al. 2017), one op.
   q, k, v, out (B, T, C), C = NH * HS; head h of batch b is the (T, HS) block at
   b T C + h HS with row stride C, so every matmul is a strided cblas_sgemm, no copies.
   Forward per (b, h): S = Q K^T / sqrt(HS) (T, T), masked to s <= t when causal,
   P = softmax_rows(S), O = P V. Saved per row: the max m and r = 1 / sum exp(S - m), (B, NH, T)
   each; backward recomputes P = exp(S - m) r, bit for bit the forward's, instead of keeping
   B NH T^2 probabilities. (One log-sum-exp m + log(sum) would round away the low bits of large
   scores: 6e-5 absolute at |S| ~ 1000.) */
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "nn.h"

typedef struct {
    int B, T, C, NH, HS;
    bool causal;
} attn_dims;

static attn_dims dims_of(const mt_node *n) {
    return (attn_dims){n->i[0], n->i[1], n->i[2], n->i[3], n->i[2] / n->i[3], n->i[4]};
}

/* S (T, T) = scale Q K^T for head block (b, h); q, k point at that block (row stride C). */
static void scores(const attn_dims *d, const float *q, const float *k, float *S) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->T, d->T, d->HS,
                1.0f / sqrtf((float)d->HS), q, d->C, k, d->C, 0.0f, S, d->T);
}

/* Per-thread (T, T) scratch: per_thread matrices for each thread of the pool. */
static float *scratch(mt_ctx *c, const attn_dims *d, int per_thread) {
    return mt_arena_floats(c, (size_t)mt_threads() * per_thread * d->T * d->T);
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
    int T = d.T;
#pragma omp parallel for if (parallel_worth(&d))
    for (int bh = 0; bh < d.B * d.NH; bh++) {
        size_t off = (size_t)(bh / d.NH) * T * d.C + (size_t)(bh % d.NH) * d.HS;
        float *S = work + (size_t)omp_get_thread_num() * T * T;
        scores(&d, q + off, k + off, S);
        for (int t = 0; t < T; t++) {
            float *row = S + (size_t)t * T;
            int len = d.causal ? t + 1 : T;
            float m = row[0], sum = 0.0f;
            for (int s = 1; s < len; s++) m = row[s] > m ? row[s] : m;
            for (int s = 0; s < len; s++) sum += row[s] = expf(row[s] - m);
            float inv = 1.0f / sum;
            for (int s = 0; s < len; s++) row[s] *= inv;
            for (int s = len; s < T; s++) row[s] = 0.0f;
            rmax[(size_t)bh * T + t] = m;
            rinv[(size_t)bh * T + t] = inv;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d.HS, T, 1.0f, S, T, v + off,
                    d.C, 0.0f, out + off, d.C);
    }
}

/* With P recomputed from m and r, and dO the block of out->grad:
     dV += P^T dO,  dP = dO V^T,  dS_ts = P_ts (dP_ts - sum_u P_tu dP_tu),
     dQ += dS K / sqrt(HS),  dK += dS^T Q / sqrt(HS).
   Masked entries have P = 0, hence dS = 0. Each (b, h) writes only its own blocks. */
static void attention_backward(mt_node *n) {
    attn_dims d = dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const float *dout = n->out->grad, *rmax = n->saved[0], *rinv = n->saved[1];
    float *dq = n->in[0]->grad, *dk = n->in[1]->grad, *dv = n->in[2]->grad;
    float *work = scratch(n->ctx, &d, 2);
    int T = d.T;
    float scale = 1.0f / sqrtf((float)d.HS);
#pragma omp parallel for if (parallel_worth(&d))
    for (int bh = 0; bh < d.B * d.NH; bh++) {
        size_t off = (size_t)(bh / d.NH) * T * d.C + (size_t)(bh % d.NH) * d.HS;
        float *P = work + (size_t)omp_get_thread_num() * 2 * T * T, *dP = P + (size_t)T * T;
        scores(&d, q + off, k + off, P);
        for (int t = 0; t < T; t++) {
            float *row = P + (size_t)t * T;
            int len = d.causal ? t + 1 : T;
            float m = rmax[(size_t)bh * T + t], inv = rinv[(size_t)bh * T + t];
            for (int s = 0; s < len; s++) row[s] = expf(row[s] - m) * inv;
            for (int s = len; s < T; s++) row[s] = 0.0f;
        }
        if (dv)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, d.HS, T, 1.0f, P, T,
                        dout + off, d.C, 1.0f, dv + off, d.C);
        if (!dq && !dk) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, d.HS, 1.0f, dout + off, d.C,
                    v + off, d.C, 0.0f, dP, T);
        for (int t = 0; t < T; t++) {
            const float *p = P + (size_t)t * T;
            float *g = dP + (size_t)t * T, dot = 0.0f;
            int len = d.causal ? t + 1 : T;
            for (int s = 0; s < len; s++) dot += p[s] * g[s];
            for (int s = 0; s < T; s++) g[s] = p[s] * (g[s] - dot);
        }
        if (dq)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d.HS, T, scale, dP, T,
                        k + off, d.C, 1.0f, dq + off, d.C);
        if (dk)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, d.HS, T, scale, dP, T,
                        q + off, d.C, 1.0f, dk + off, d.C);
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
