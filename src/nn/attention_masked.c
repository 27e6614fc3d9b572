/* Attention with a key-padding mask and queries and keys of different lengths (nn.h,
   mt_attention_masked): cross-attention and variable-length self-attention. Without a mask and
   with Tq == Tk it is mt_attention (its register-tile and sgemm paths); otherwise this op, on
   strided cblas_sgemm calls per (b, h), which skip the padded keys instead of masking them.
   q, out (B, Tq, C), k, v (B, Tk, C), C = NH * HS; L = kv_len[b], row b's unpadded keys.
   Forward per (b, h): S = Q K[0:L]^T / sqrt(HS) (Tq, L), masked to s <= t when causal,
   P = softmax_rows(S), O = P V[0:L]. Saved per query row: the max m and r = 1 / sum exp(S - m),
   (B, NH, Tq) each; the backward recomputes P = exp(S - m) r with the same code. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../tensor/vmath.h"
#include "nn.h"

typedef struct {
    int B, Tq, Tk, C, NH, HS;
    bool causal;
} mask_dims;

static mask_dims mask_dims_of(const mt_node *n) {
    return (mask_dims){n->i[0], n->i[1], n->i[2], n->i[3], n->i[4], n->i[3] / n->i[4], n->i[5]};
}

/* Keys query t sees: [0, kend) */
static int query_keys(const mask_dims *d, int L, int t) {
    return d->causal && t + 1 < L ? t + 1 : L;
}

/* S (Tq, L) row stride L = scale Q K[0:L]^T, masked entries -inf; with m and r given (backward),
   turned into P = exp(S - m) r (0 masked); else into P with m and r written. */
static void probs(float *S, const mask_dims *d, int L, const float *q, const float *k,
                  float *m, float *r, bool have_stats) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->Tq, L, d->HS,
                1.0f / sqrtf((float)d->HS), q, d->C, k, d->C, 0.0f, S, L);
    for (int t = 0; t < d->Tq; t++) {
        float *row = S + (size_t)t * L;
        int kend = query_keys(d, L, t);
        if (!have_stats) {
            float mx = -INFINITY, sum = 0;
            for (int s = 0; s < kend; s++) mx = row[s] > mx ? row[s] : mx;
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
   active (a replica), else 1, whose scratch slot is 0 (as attention.c's thread_slot). */
static int mask_threads(const mask_dims *d) {
    bool worth = (size_t)d->B * d->NH * d->Tq * d->Tk * d->HS >= 64 * (size_t)MT_PAR_MIN;
    return worth && !omp_in_parallel() ? mt_threads() : 1;
}

static float *slot_of(float *work, int slots, size_t per) {
    return work + (size_t)(slots > 1 ? omp_get_thread_num() : 0) * per;
}

static void masked_forward(mt_node *n) {
    mask_dims d = mask_dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const int *len = n->ids;
    float *out = n->out->data, *rmax = n->saved[0], *rinv = n->saved[1];
    size_t mark = mt_arena_mark(n->ctx), per = ((size_t)d.Tq * d.Tk + 15) / 16 * 16;
    int slots = mask_threads(&d);
    float *work = mt_arena_floats(n->ctx, (size_t)slots * per);
    MT_PARALLEL_FOR(slots > 1, for (int bh = 0; bh < d.B * d.NH; bh++) {
        int b = bh / d.NH, h = bh % d.NH, L = len ? len[b] : d.Tk;
        size_t oq = (size_t)b * d.Tq * d.C + (size_t)h * d.HS,
               ok = (size_t)b * d.Tk * d.C + (size_t)h * d.HS, row = (size_t)bh * d.Tq;
        float *P = slot_of(work, slots, per);
        probs(P, &d, L, q + oq, k + ok, rmax + row, rinv + row, false);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.Tq, d.HS, L, 1.0f, P, L,
                    v + ok, d.C, 0.0f, out + oq, d.C);
    });
    mt_arena_release(n->ctx, mark);
}

/* dO = out->grad; per (b, h), with P recomputed:
     dV[0:L] += P^T dO,  dP = dO V[0:L]^T,  dS_ts = P_ts (dP_ts - sum_u P_tu dP_tu),
     dQ += dS K[0:L] / sqrt(HS),  dK[0:L] += dS^T Q / sqrt(HS).
   Padded keys (s >= L) and masked entries have P = 0: no gradient reaches them. */
static void masked_backward(mt_node *n) {
    mask_dims d = mask_dims_of(n);
    const float *q = n->in[0]->data, *k = n->in[1]->data, *v = n->in[2]->data;
    const float *dout = n->out->grad;
    const int *len = n->ids;
    float *rmax = n->saved[0], *rinv = n->saved[1];
    float *dq = n->in[0]->grad, *dk = n->in[1]->grad, *dv = n->in[2]->grad;
    float scale = 1.0f / sqrtf((float)d.HS);
    size_t mark = mt_arena_mark(n->ctx), per = (2 * (size_t)d.Tq * d.Tk + 15) / 16 * 16;
    int slots = mask_threads(&d);
    float *work = mt_arena_floats(n->ctx, (size_t)slots * per);
    MT_PARALLEL_FOR(slots > 1, for (int bh = 0; bh < d.B * d.NH; bh++) {
        int b = bh / d.NH, h = bh % d.NH, L = len ? len[b] : d.Tk, C = d.C, HS = d.HS;
        size_t oq = (size_t)b * d.Tq * C + (size_t)h * HS, ok = (size_t)b * d.Tk * C + (size_t)h * HS,
               row = (size_t)bh * d.Tq;
        float *P = slot_of(work, slots, per), *dS = P + (size_t)d.Tq * d.Tk;
        probs(P, &d, L, q + oq, k + ok, rmax + row, rinv + row, true);
        if (dv)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, HS, d.Tq, 1.0f, P, L,
                        dout + oq, C, 1.0f, dv + ok, C);
        if (dq || dk) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.Tq, L, HS, 1.0f, dout + oq, C,
                        v + ok, C, 0.0f, dS, L);
            for (int t = 0; t < d.Tq; t++) {
                float *g = dS + (size_t)t * L, *p = P + (size_t)t * L, dot = 0;
                for (int s = 0; s < L; s++) dot += p[s] * g[s];
                for (int s = 0; s < L; s++) g[s] = p[s] * (g[s] - dot);
            }
            if (dq)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.Tq, HS, L, scale, dS, L,
                            k + ok, C, 1.0f, dq + oq, C);
            if (dk)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, HS, d.Tq, scale, dS, L,
                            q + oq, C, 1.0f, dk + ok, C);
        }
    });
    mt_arena_release(n->ctx, mark);
}

static const mt_op OP_ATTENTION_MASKED = {"attention_masked", masked_forward, masked_backward};

mt_tensor *mt_attention_masked(mt_ctx *c, mt_tensor *q, mt_tensor *k, mt_tensor *v, int n_head,
                               bool causal, const int *kv_len) {
    char sq[64], sk[64], sv[64];
    MT_ASSERT(q->ndim == 3 && k->ndim == 3 && mt_same_shape(k, v) && q->shape[0] == k->shape[0] &&
                  q->shape[2] == k->shape[2],
              "attention: q %s (B, Tq, C), k %s and v %s (B, Tk, C)", mt_shape_str(q, sq, 64),
              mt_shape_str(k, sk, 64), mt_shape_str(v, sv, 64));
    int B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], C = q->shape[2];
    MT_ASSERT(!causal || Tq == Tk, "attention: causal with %d queries and %d keys", Tq, Tk);
    MT_ASSERT(n_head >= 1 && C % n_head == 0, "attention: %d heads do not divide C = %d", n_head,
              C);
    bool full = true;
    for (int b = 0; kv_len && b < B; b++) {
        MT_ASSERT(kv_len[b] >= 1 && kv_len[b] <= Tk, "attention: row %d has %d keys of %d", b,
                  kv_len[b], Tk);
        full = full && kv_len[b] == Tk;
    }
    if (full && Tq == Tk) return mt_attention(c, q, k, v, n_head, causal);
    mt_tensor *out = mt_tensor_like(c, q);
    mt_node *n = mt_node_new(c, &OP_ATTENTION_MASKED, out, 3, (mt_tensor *[]){q, k, v});
    int args[] = {B, Tq, Tk, C, n_head, causal};
    for (int i = 0; i < 6; i++) n->i[i] = args[i];
    if (kv_len) {
        int *len = mt_arena_alloc(c, (size_t)B * sizeof *len);
        memcpy(len, kv_len, (size_t)B * sizeof *len);
        n->ids = len;
    }
    n->saved[0] = mt_arena_floats(c, (size_t)B * n_head * Tq);
    n->saved[1] = mt_arena_floats(c, (size_t)B * n_head * Tq);
    mt_node_run(c, n);
    return out;
}
