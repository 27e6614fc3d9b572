/* Rotary position embedding (RoPE; Su et al. 2021, "RoFormer", arXiv 2104.09864) as one op, in
   llama2.c's convention (its run.c): in each head of HS channels, the adjacent pair
   (x[2i], x[2i+1]), i < HS/2, is rotated by the angle p w_i at position p, w_i = theta^(-2i/HS):
     y[2i]   = x[2i] cos(p w_i) - x[2i+1] sin(p w_i)
     y[2i+1] = x[2i] sin(p w_i) + x[2i+1] cos(p w_i)
   (HF transformers' LLaMA rotates the halves (x[i], x[i + HS/2]) instead: the same model up to a
   permutation of each head's q and k channels.) x, y (B, T, W), W a multiple of HS (any number
   of heads: q's NH or k's n_kv_head). The cos and sin come from a table computed in double
   for the positions asked for so far (rope_rows); the op reads rows pos0 .. pos0 + T - 1. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "nn.h"

/* A table and the one it replaced (NULL: none). */
typedef struct rope_table {
    struct rope_table *prev;
    float cs[];
} rope_table;

mt_status mt_rope_init(mt_rope *r, int n_pos, int HS, float theta, mt_err *err) {
    *r = (mt_rope){.n_pos = n_pos, .HS = HS, .theta = theta};
    if (n_pos < 1 || HS < 2 || HS % 2 || !(theta > 0))
        return mt_errorf(err, MT_EINVAL,
                         "rope: head size %d must be even (at least 2), theta "
                         "%g > 0 and %d positions at least 1",
                         HS, theta, n_pos);
    return MT_OK;
}

/* r's table of at least need rows (at most n_pos, at least twice the rows it had), the smaller
   one kept for the nodes that read it. Under a lock: replicas apply RoPE concurrently. */
static const float *rope_rows(mt_rope *r, int need) {
    const float *cs;
#pragma omp critical(mt_rope)
    {
        if (r->rows < need) {
            int rows = 2 * (size_t)r->rows > (size_t)need ? 2 * r->rows : need;
            rows = rows < r->n_pos ? rows : r->n_pos;
            size_t half = (size_t)r->HS / 2;
            rope_table *t = malloc(sizeof *t + (size_t)rows * half * 2 * sizeof(float));
            MT_ASSERT(t, "rope: out of memory for the cos and sin of %d positions", rows);
            for (size_t i = 0; i < half; i++) {
                double w = pow((double)r->theta, -2.0 * (double)i / r->HS);
                for (int p = 0; p < rows; p++) {
                    t->cs[((size_t)p * half + i) * 2] = (float)cos(p * w);
                    t->cs[((size_t)p * half + i) * 2 + 1] = (float)sin(p * w);
                }
            }
            t->prev = r->tables;
            r->tables = t, r->cs = t->cs, r->rows = rows;
        }
        cs = r->cs;
    }
    return cs;
}

void mt_rope_free(mt_rope *r) {
    for (rope_table *t = r->tables, *prev; t; t = prev) {
        prev = t->prev;
        free(t);
    }
    r->tables = NULL, r->cs = NULL, r->rows = 0;
}

/* y (B T, W) = x rotated, sign = 1; or the inverse rotation (sign = -1) added into y: the
   backward, dx[2i] += dy[2i] cos + dy[2i+1] sin, dx[2i+1] += -dy[2i] sin + dy[2i+1] cos (the
   transpose of a rotation is the rotation by minus the angle). Row (b, t) is at position
   pos0 + t. */
static void rope_kernel(float *y, const float *x, const float *table, int rows, int T, int W,
                        int HS, int pos0, float sign, bool acc) {
    int half = HS / 2;
    MT_PARALLEL_FOR((size_t)rows * W >= MT_PAR_MIN, for (int r = 0; r < rows; r++) {
        const float *cs = table + (size_t)(pos0 + r % T) * half * 2;
        const float *xr = x + (size_t)r * W;
        float *yr = y + (size_t)r * W;
        for (int h0 = 0; h0 < W; h0 += HS)
            _Pragma("omp simd") for (int i = 0; i < half; i++) {
                float c = cs[2 * i], s = sign * cs[2 * i + 1];
                float a = xr[h0 + 2 * i], b = xr[h0 + 2 * i + 1];
                float u = a * c - b * s, v = a * s + b * c;
                if (acc) yr[h0 + 2 * i] += u, yr[h0 + 2 * i + 1] += v;
                else yr[h0 + 2 * i] = u, yr[h0 + 2 * i + 1] = v;
            }
    });
}

/* in x; p the table; i[0] rows B T, i[1] T, i[2] W, i[3] HS, i[4] pos0 */
static void rope_forward(mt_node *n) {
    rope_kernel(n->out->data, n->in[0]->data, n->p, n->i[0], n->i[1], n->i[2], n->i[3], n->i[4],
                1.0f, false);
}

static void rope_backward(mt_node *n) {
    if (n->in[0]->grad)
        rope_kernel(n->in[0]->grad, n->out->grad, n->p, n->i[0], n->i[1], n->i[2], n->i[3], n->i[4],
                    -1.0f, true);
}

static const mt_op OP_ROPE = {.name = "rope", .forward = rope_forward, .backward = rope_backward};

mt_tensor *mt_rope_apply(mt_ctx *c, const mt_rope *r, mt_tensor *x, int pos0) {
    char sx[64];
    MT_ASSERT(x->ndim == 3 && x->shape[2] % r->HS == 0, "rope: x %s must be (B, T, heads x %d)",
              mt_shape_str(x, sx, 64), r->HS);
    int T = x->shape[1];
    MT_ASSERT(pos0 >= 0 && pos0 + T <= r->n_pos, "rope: positions %d..%d, the table has %d", pos0,
              pos0 + T - 1, r->n_pos);
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, &OP_ROPE, out, 1, (mt_tensor *[]){x});
    n->p = (void *)rope_rows((mt_rope *)r, pos0 + T); /* the table grows: a cache, not r's value */
    int args[] = {x->shape[0] * T, T, x->shape[2], r->HS, pos0};
    for (int i = 0; i < 5; i++) n->i[i] = args[i];
    mt_node_run(c, n);
    return out;
}
