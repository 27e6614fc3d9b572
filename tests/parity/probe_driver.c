/* Parity driver for the diagnostics' attention probe (tests/parity/test_probe.py): x0 q (B, Tq, C),
   x1 k (B, Tk, KC), x2 a sink's logits (NH) when given; options NH, causal, pos0, softpick. y =
   (sink rate, entropy) as the op reports them to mt_ctx.attn_sink (in float: the values are
   within [0, log Tk]). Op act: y = (max |x0|, Pearson's kurtosis of x0) as the stack reports
   them to mt_ctx.act for a block's input. Op hc_gains: diag_hc.csv's gains (below). */
#include "../../src/models/stack.h"
#include "../check.h"

static mt_tensor *b_attn_sink(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    double got[2];
    c->attn_sink = got, c->attn_sink_calls = 0;
    mt_attn_mask mask = {.causal = parity_opt(in, "causal") != 0,
                         .pos0 = (int)parity_opt(in, "pos0"),
                         .sink = n > 2 ? x[2] : NULL,
                         .softpick = parity_opt(in, "softpick") != 0};
    c->grad_enabled = false;
    mt_attention_ex(c, x[0], x[1], x[1], (int)parity_opt(in, "NH"), &mask); /* v = k */
    MT_ASSERT(c->attn_sink_calls == 1, "parity: %d probe calls", c->attn_sink_calls);
    c->attn_sink = NULL;
    mt_tensor *y = mt_tensor_new(c, 1, (int[]){2});
    y->data[0] = (float)got[0], y->data[1] = (float)got[1];
    return y;
}

static mt_tensor *b_act(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    double got[2];
    mt_stack_act_stats(x[0], got);
    mt_tensor *y = mt_tensor_new(c, 1, (int[]){2});
    y->data[0] = (float)got[0], y->data[1] = (float)got[1];
    return y;
}

/* Op hc_gains: x0..x(n-1) the coefficients a of n sublayers ((N, N+1) or (R, N, N+1)), option N;
   y (n, 4) = mt_hc_gains' (in float). */
static mt_tensor *b_hc_gains(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    double got[4 * 64];
    MT_ASSERT(n <= 64, "parity: %d sublayers", n);
    mt_hc_gains((const mt_tensor *const *)x, n, (int)parity_opt(in, "N"), got);
    mt_tensor *y = mt_tensor_new(c, 1, (int[]){4 * n});
    for (int e = 0; e < 4 * n; e++) y->data[e] = (float)got[e];
    return y;
}

static const parity_op OPS[] = {{"attn_sink", b_attn_sink},
                                {"act", b_act},
                                {"hc_gains", b_hc_gains}};

int main(int argc, char **argv) {
    return parity_driver_main(argc, argv, OPS, (int)(sizeof OPS / sizeof OPS[0]));
}
