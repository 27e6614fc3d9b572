/* src/nn layers: linear and attention against naive loops and by finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- linear ---- */
static mt_tensor *build_linear(mt_ctx *c, mt_tensor **in, const void *arg) {
    return mt_linear(c, in[0], in[1], *(const bool *)arg ? in[2] : NULL);
}

static void test_linear(void) {
    mt_rng r;
    mt_rng_seed(&r, 11);
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    struct {
        int ndim, xs[3], O;
        bool bias;
    } cases[] = {{2, {1, 1}, 1, true}, {2, {5, 7}, 3, true}, {3, {2, 9, 17}, 70, true},
                 {3, {2, 3, 8}, 5, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int K = cases[k].xs[cases[k].ndim - 1], O = cases[k].O;
        mt_tensor *x = test_tensor(&r, cases[k].ndim, cases[k].xs, -1, 1, true);
        mt_tensor *w = test_tensor(&r, 2, (int[]){O, K}, -1, 1, true);
        mt_tensor *b = cases[k].bias ? test_tensor(&r, 1, &O, -1, 1, true) : NULL;
        mt_ctx_reset(&c);
        mt_tensor *y = mt_linear(&c, x, w, b);
        CHECK(y->ndim == x->ndim && mt_cols(y) == O && mt_rows(y) == mt_rows(x), "linear shape");
        float *ref = malloc(y->n * sizeof(float));
        for (int i = 0; i < mt_rows(x); i++)
            for (int o = 0; o < O; o++) {
                double s = b ? b->data[o] : 0.0;
                for (int j = 0; j < K; j++) s += (double)x->data[i * K + j] * w->data[o * K + j];
                ref[i * O + o] = (float)s;
            }
        CHECK(max_rel_err(y->data, ref, y->n) < 1e-5, "linear case %zu vs naive: %g", k,
              max_rel_err(y->data, ref, y->n));
        char name[32];
        snprintf(name, sizeof name, "linear[%zu]", k);
        gradcheck(name, build_linear, &cases[k].bias, b ? 3 : 2, (mt_tensor *[]){x, w, b}, 1e-2, 1e-3);
        free(ref);
        test_tensor_free(x);
        test_tensor_free(w);
        test_tensor_free(b);
    }
    mt_ctx_free(&c);
}

/* ---- attention ---- */
typedef struct {
    int n_head;
    bool causal;
} attn_arg;

static mt_tensor *build_attention(mt_ctx *c, mt_tensor **in, const void *arg) {
    const attn_arg *a = arg;
    return mt_attention(c, in[0], in[1], in[2], a->n_head, a->causal);
}

/* The textbook loop, in double: out[b,t,h] = sum_s softmax_s(q.k / sqrt(HS)) v[b,s,h]. */
static void ref_attention(const mt_tensor *q, const mt_tensor *k, const mt_tensor *v, int NH,
                          bool causal, float *out) {
    int B = q->shape[0], T = q->shape[1], C = q->shape[2], HS = C / NH;
    double *p = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *qt = q->data + ((size_t)b * T + t) * C + h * HS;
                double m = -INFINITY, sum = 0;
                for (int s = 0; s < T; s++) {
                    const float *ks = k->data + ((size_t)b * T + s) * C + h * HS;
                    double dot = 0;
                    for (int i = 0; i < HS; i++) dot += (double)qt[i] * ks[i];
                    p[s] = (causal && s > t) ? -INFINITY : dot / sqrt((double)HS);
                    if (p[s] > m) m = p[s];
                }
                for (int s = 0; s < T; s++) sum += p[s] = exp(p[s] - m);
                for (int i = 0; i < HS; i++) {
                    double o = 0;
                    for (int s = 0; s < T; s++)
                        o += p[s] / sum * v->data[((size_t)b * T + s) * C + h * HS + i];
                    out[((size_t)b * T + t) * C + h * HS + i] = (float)o;
                }
            }
    free(p);
}

static void test_attention(void) {
    mt_rng r;
    mt_rng_seed(&r, 12);
    mt_ctx c;
    mt_ctx_init(&c, 64 << 20, 1, NULL);
    struct {
        int B, T, C, NH;
        bool gradcheck;
    } cases[] = {{1, 1, 4, 2, true}, {2, 5, 8, 2, true},  {2, 19, 12, 3, true},
                 {1, 16, 8, 1, true}, {3, 37, 16, 4, false}, {4, 64, 64, 4, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int causal = 0; causal < 2; causal++) {
            int shape[] = {cases[k].B, cases[k].T, cases[k].C};
            attn_arg a = {cases[k].NH, causal};
            mt_tensor *q = test_tensor(&r, 3, shape, -2, 2, true);
            mt_tensor *kk = test_tensor(&r, 3, shape, -2, 2, true);
            mt_tensor *v = test_tensor(&r, 3, shape, -1, 1, true);
            mt_ctx_reset(&c);
            mt_tensor *y = mt_attention(&c, q, kk, v, a.n_head, causal);
            float *ref = malloc(y->n * sizeof(float));
            ref_attention(q, kk, v, a.n_head, causal, ref);
            double e = max_rel_err(y->data, ref, y->n);
            CHECK(e < 1e-5, "attention case %zu causal %d vs naive: %g", k, causal, e);
            if (cases[k].gradcheck) {
                char name[48];
                snprintf(name, sizeof name, "attention[%zu]%s", k, causal ? " causal" : "");
                gradcheck(name, build_attention, &a, 3, (mt_tensor *[]){q, kk, v}, 1e-2, 2e-3);
            }
            free(ref);
            test_tensor_free(q);
            test_tensor_free(kk);
            test_tensor_free(v);
        }
    mt_ctx_free(&c);
}

int main(void) {
    test_linear();
    test_attention();
    return check_finish("test_nn");
}
