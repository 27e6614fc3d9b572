/* Parity driver for the primitive ops (tests/parity/test_ops.py). Integer inputs (ids, targets)
   arrive as floats in x1; options are metadata numbers. */
#include <stdlib.h>

#include "../check.h"

/* x's values as ints, in the arena */
static int *as_ints(mt_ctx *c, const mt_tensor *x) {
    int *v = mt_arena_alloc(c, x->n * sizeof(int));
    for (size_t i = 0; i < x->n; i++) v[i] = (int)x->data[i];
    return v;
}

/* the ints KEY0, KEY1, ... KEY<n-1> of the input file */
static void opt_ints(const mt_safetensors *in, const char *key, int n, int *v) {
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s%d", key, i);
        v[i] = (int)parity_opt(in, name);
    }
}

static mt_tensor *b_matmul(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_matmul(c, x[0], x[1], parity_opt(in, "ta") != 0, parity_opt(in, "tb") != 0);
}

static mt_tensor *b_add(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_add(c, x[0], x[1]);
}

static mt_tensor *b_mul(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_mul(c, x[0], x[1]);
}

static mt_tensor *b_scale(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_scale(c, x[0], (float)parity_opt(in, "s"));
}

static mt_tensor *b_scale_by(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_scale_by(c, x[0], x[1]);
}

static mt_tensor *b_sum(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_sum(c, x[0]);
}

static mt_tensor *b_mean(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_mean(c, x[0]);
}

static mt_tensor *b_reshape(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    int ndim = (int)parity_opt(in, "ndim"), shape[MT_MAX_DIMS];
    opt_ints(in, "s", ndim, shape);
    return mt_reshape(c, x[0], ndim, shape);
}

static mt_tensor *b_permute(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    int perm[MT_MAX_DIMS];
    opt_ints(in, "p", x[0]->ndim, perm);
    return mt_permute(c, x[0], perm);
}

static mt_tensor *b_transpose(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_transpose(c, x[0], (int)parity_opt(in, "d0"), (int)parity_opt(in, "d1"));
}

/* the activations and softmax: one input, no option */
#define UNARY(NAME)                                                                                \
    static mt_tensor *b_##NAME(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {        \
        (void)n, (void)in;                                                                         \
        return mt_##NAME(c, x[0]);                                                                 \
    }
UNARY(gelu)
UNARY(gelu_erf)
UNARY(relu)
UNARY(relu2)
UNARY(silu)
UNARY(softmax)

static mt_tensor *b_swiglu(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_swiglu(c, x[0], x[1]);
}

/* x0 logits, x1 targets */
static mt_tensor *b_cross_entropy(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_cross_entropy(c, x[0], as_ints(c, x[1]), (int)parity_opt(in, "ignore"),
                            (mt_ce_opts){.label_smoothing = (float)parity_opt(in, "smoothing"),
                                         .z_loss = (float)parity_opt(in, "z_loss"),
                                         .softcap = (float)parity_opt(in, "softcap")});
}

static mt_tensor *b_softcap(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_softcap(c, x[0], (float)parity_opt(in, "cap"));
}

/* x0 weight, x1 ids */
static mt_tensor *b_embedding(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_embedding(c, x[0], as_ints(c, x[1]), (int)x[1]->n);
}

/* eval mode: the identity (training-mode statistics are checked in tests/test_ops.c) */
static mt_tensor *b_dropout(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    c->training = false;
    return mt_dropout(c, x[0], (float)parity_opt(in, "p"));
}

static mt_tensor *b_concat(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)in;
    return mt_concat(c, n, x);
}

static mt_tensor *b_slice(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_slice(c, x[0], (int)parity_opt(in, "start"), (int)parity_opt(in, "len"));
}

/* split into parts k0, k1, ...; returns the parts concatenated last first (a column rotation) so
   that every part's gradient flows back */
static mt_tensor *b_split(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    int k = (int)parity_opt(in, "parts"), sizes[MT_NODE_MAX_IN];
    mt_tensor *parts[MT_NODE_MAX_IN], *rot[MT_NODE_MAX_IN];
    MT_ASSERT(k >= 1 && k <= MT_NODE_MAX_IN, "parity split: %d parts", k);
    opt_ints(in, "k", k, sizes);
    mt_split(c, x[0], k, sizes, parts);
    rot[0] = parts[k - 1];
    for (int i = 1; i < k; i++) rot[i] = parts[i - 1];
    return mt_concat(c, k, rot);
}

/* RoPE (nn.h) on x0 (B, T, W) at positions pos0.., head size HS, base theta; the table for
   pos0 + T positions lives until the driver exits */
static mt_rope rope_table;
static void free_rope(void) { mt_rope_free(&rope_table); }

static mt_tensor *b_rope(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    int pos0 = (int)parity_opt(in, "pos0");
    mt_err err;
    MT_ASSERT(mt_rope_init(&rope_table, pos0 + x[0]->shape[1], (int)parity_opt(in, "HS"),
                           (float)parity_opt(in, "theta"), &err) == MT_OK,
              "%s", err.msg);
    atexit(free_rope);
    return mt_rope_apply(c, &rope_table, x[0], pos0);
}

static const parity_op OPS[] = {
    {"rope", b_rope},
    {"matmul", b_matmul},
    {"add", b_add},
    {"mul", b_mul},
    {"scale", b_scale},
    {"scale_by", b_scale_by},
    {"sum", b_sum},
    {"mean", b_mean},
    {"reshape", b_reshape},
    {"permute", b_permute},
    {"transpose", b_transpose},
    {"gelu", b_gelu},
    {"gelu_erf", b_gelu_erf},
    {"relu", b_relu},
    {"relu2", b_relu2},
    {"silu", b_silu},
    {"softmax", b_softmax},
    {"swiglu", b_swiglu},
    {"cross_entropy", b_cross_entropy},
    {"softcap", b_softcap},
    {"embedding", b_embedding},
    {"dropout", b_dropout},
    {"concat", b_concat},
    {"slice", b_slice},
    {"split", b_split},
};

int main(int argc, char **argv) {
    return parity_driver_main(argc, argv, OPS, (int)(sizeof OPS / sizeof OPS[0]));
}
