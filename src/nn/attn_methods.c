/* The self-attention's methods (nn.h, mt_attn_cfg): their names, fields and checks, and the
   ops they add. docs/layers.md has the formulas, papers and public implementations. */
#include "../tensor/vmath.h"
#include "nn.h"

static const mt_enum_item GATES[] = {
    [MT_ATTN_GATE_NONE] = {.name = "none", .title = "off"},
    [MT_ATTN_GATE_ELEMENTWISE] = {.name = "elementwise",
                                  .help = "Y * sigmoid(X W), W (C, C): a gate per channel",
                                  .title = "gated attention"},
    [MT_ATTN_GATE_HEADWISE] = {.name = "headwise",
                               .help = "Y * sigmoid(X W), W (NH, C): a gate per head",
                               .title = "head gates"},
};
const mt_enum MT_ATTN_GATES = MT_ENUM("attention gate", GATES);
static const mt_enum_item SOFTMAXES[] = {
    [MT_SOFTMAX] = {.name = "softmax", .help = "exp(S) / sum exp(S)", .title = "softmax"},
    [MT_SOFTPICK] = {.name = "softpick",
                     .help = "relu(exp(S) - 1) / (sum |exp(S) - 1| + 1e-8) (arXiv 2504.20966)",
                     .title = "Softpick"},
};
const mt_enum MT_ATTN_SOFTMAXES = MT_ENUM("attention softmax", SOFTMAXES);
static const mt_enum_item VALUE_RESIDUALS[] = {
    [MT_VALUE_RESIDUAL_NONE] = {.name = "none", .title = "off"},
    [MT_VALUE_RESIDUAL_HALF] = {.name = "half",
                                .help = "V_1 / 2 + V_n / 2 (ResFormer)",
                                .title = "value residual"},
    [MT_VALUE_RESIDUAL_LEARNED] = {.name = "learned",
                                   .help = "lambda_1 V_1 + lambda_2 V_n, both learned, init 1/2",
                                   .title = "learned value residual"},
};
const mt_enum MT_VALUE_RESIDUALS = MT_ENUM("value residual", VALUE_RESIDUALS);

#define F(member, TYPE, key, help, ...) MT_FIELD(mt_attn_cfg, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(gate, ENUM, "attn_gate",
      "gated attention (arXiv 2505.06708, G1): the heads' output times sigmoid(X W) before "
      "out_proj",
      .of = &MT_ATTN_GATES),
    F(sink, BOOL, "attn_sink",
      "a learned sink logit per head in the softmax's denominator (gpt-oss)"),
    F(softmax, ENUM, "softmax", "the attention's normaliser of its scores",
      .of = &MT_ATTN_SOFTMAXES),
    F(value_residual, ENUM, "value_residual",
      "ResFormer (arXiv 2410.17897): every block after the first attends to its values mixed "
      "with the first block's",
      .of = &MT_VALUE_RESIDUALS),
};
#undef F
const mt_fields MT_ATTN_FIELDS = MT_FIELDS_OF(FIELDS);

mt_status mt_attn_cfg_validate(const mt_attn_cfg *a, mt_err *err) {
    if ((int)a->gate < 0 || (int)a->gate >= MT_ATTN_GATES.n || (int)a->softmax < 0 ||
        (int)a->softmax >= MT_ATTN_SOFTMAXES.n || (int)a->value_residual < 0 ||
        (int)a->value_residual >= MT_VALUE_RESIDUALS.n)
        return mt_errorf(err, MT_EINVAL,
                         "config: attn_gate %d, softmax %d or value_residual %d is not one of its "
                         "values",
                         (int)a->gate, (int)a->softmax, (int)a->value_residual);
    if (a->sink && a->softmax == MT_SOFTPICK)
        return mt_errorf(err, MT_EINVAL,
                         "--attn-sink with --softmax softpick: refused: softpick already lets a "
                         "head attend to nothing (relu(exp(S) - 1) is 0 for every score <= 0, and "
                         "its rows need not sum to 1), and a sink logit would only add "
                         "|exp(z) - 1| to its denominator, a learned temperature neither paper "
                         "has; use --softmax softmax with --attn-sink, or softpick alone");
    return MT_OK;
}

/* ---- sigmoid gate: out = y * sigmoid(z_g), y (N, C), z (N, C / G), g = j / G ---- */
static void gate_forward(mt_node *n) {
    const float *y = n->in[0]->data, *z = n->in[1]->data;
    float *out = n->out->data;
    int C = mt_cols(n->in[0]), W = mt_cols(n->in[1]), G = C / W;
    size_t N = n->out->n / C;
    MT_PARALLEL_FOR(N * C >= MT_PAR_MIN, for (size_t r = 0; r < N; r++) {
        for (int j = 0; j < C; j++)
            out[r * C + j] = y[r * C + j] * mt_vsigmoidf(z[r * W + j / G]);
    });
}

/* dy += dout s, dz_g += s (1 - s) sum_{j in g} dout_j y_j, s = sigmoid(z_g) */
static void gate_backward(mt_node *n) {
    const float *y = n->in[0]->data, *z = n->in[1]->data, *dout = n->out->grad;
    float *dy = n->in[0]->grad, *dz = n->in[1]->grad;
    int C = mt_cols(n->in[0]), W = mt_cols(n->in[1]), G = C / W;
    size_t N = n->out->n / C;
    MT_PARALLEL_FOR(N * C >= MT_PAR_MIN, for (size_t r = 0; r < N; r++) {
        for (int g = 0; g < W; g++) {
            float s = mt_vsigmoidf(z[r * W + g]), dot = 0;
            for (int j = g * G; j < (g + 1) * G; j++) {
                if (dy) dy[r * C + j] += dout[r * C + j] * s;
                dot += dout[r * C + j] * y[r * C + j];
            }
            if (dz) dz[r * W + g] += s * (1 - s) * dot;
        }
    });
}

static const mt_op OP_SIGMOID_GATE = {.name = "sigmoid_gate",
                                      .forward = gate_forward,
                                      .backward = gate_backward};

mt_tensor *mt_sigmoid_gate(mt_ctx *c, mt_tensor *y, mt_tensor *z) {
    char sy[64], sz[64];
    int C = mt_cols(y), W = mt_cols(z);
    MT_ASSERT(W >= 1 && C % W == 0 && y->n / C == z->n / W,
              "sigmoid_gate: y %s and z %s: z's rows must be y's, its width divide y's",
              mt_shape_str(y, sy, 64), mt_shape_str(z, sz, 64));
    mt_tensor *out = mt_tensor_like(c, y);
    mt_node *n = mt_node_new(c, &OP_SIGMOID_GATE, out, 2, (mt_tensor *[]){y, z});
    mt_node_run(c, n);
    return out;
}
