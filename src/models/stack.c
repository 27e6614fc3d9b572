/* The block stack (stack.h): config, validation, fields, init stds, build and forward. */
#include "stack.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mt_enum_item INIT_SCHEMES[] = {
    [MT_SCHEME_GPT2] = {.name = "gpt2",
                        .help = "N(0, 0.02), residual projections / sqrt(2 n_layer)"},
    [MT_SCHEME_XAVIER] = {.name = "xavier", .help = "Xavier-normal"},
    [MT_SCHEME_DEEPNORM] = {.name = "deepnorm",
                            .help = "Xavier-normal, gain beta on v, out, fc1 (fc3), fc2"},
    [MT_SCHEME_SUBLN] = {.name = "subln",
                         .help = "Xavier-normal, gain sqrt(log 2 n_layer) on v, out, fc1 (fc3), "
                                 "fc2"},
    [MT_SCHEME_DSL] = {.name = "dsl",
                       .help = "DeepScaleLM: q, k, v, out N(0, 1/n-embd), fc1 (fc3), fc2 variance "
                               "sqrt(2 / (n-embd n-ff))"},
    [MT_SCHEME_AUTO] = {.name = "auto",
                        .help = "deepnorm for --placement deepnorm, subln for subln, dsl for dsl, "
                                "else gpt2"},
};
const mt_enum MT_INIT_SCHEMES = MT_ENUM("init", INIT_SCHEMES);

static const mt_enum_item PARAM_KINDS[] = {
    [MT_PARAM_SP] = {.name = "sp", .help = "standard: no scaling with width or depth"},
    [MT_PARAM_MUP] = {.name = "mup",
                      .help = "muP: hidden init, lr and the logits scaled by base-width / n-embd"},
    [MT_PARAM_COMPLETEP] = {.name = "completep",
                            .help = "CompleteP: muP and each residual branch x base-depth / "
                                    "n-layer, AdamW eps and weight decay scaled"},
};
const mt_enum MT_PARAM_KINDS = MT_ENUM("param", PARAM_KINDS);

mt_stack_config mt_stack_default(void) {
    return (mt_stack_config){.n_layer = 4,
                             .n_head = 4,
                             .n_embd = 64,
                             .norm = mt_norm_default(MT_NORM_LN),
                             .placement = MT_PLACE_PRE,
                             .hc = {.kind = MT_HYPER_NONE,
                                    .streams = 4,
                                    .dynamic = true,
                                    .mhc_iters = 20},
                             .init = MT_SCHEME_AUTO,
                             .bias = true,
                             .act = MT_ACT_GELU,
                             .ff_multiple = 32,
                             .mixln_post = -1,
                             .dsl_k = 2,
                             .dsl_r0 = 0.221f};
}

/* A final norm before the head: a sum's placement with one, and hyper-connections' (Pre-LN's,
   after the streams' sum); nGPT's stream stays on the sphere. */
static bool final_norm(const mt_stack_config *s) {
    return s->residual != MT_RESIDUAL_NGPT && mt_placement_final_norm(s->placement);
}

/* What reads the options of one residual, placement or init (mt_field.read), on a resolved
   config. */
static bool sums(const void *s) {
    return ((const mt_stack_config *)s)->residual == MT_RESIDUAL_SUM;
}
static bool placed(const void *s, mt_placement p) {
    return sums(s) && ((const mt_stack_config *)s)->placement == p;
}
static bool reads_placement(const void *s) {
    return ((const mt_stack_config *)s)->residual != MT_RESIDUAL_NGPT;
}
static bool hyper(const void *s) { return ((const mt_stack_config *)s)->hc.kind != MT_HYPER_NONE; }
static bool mhc(const void *s) { return ((const mt_stack_config *)s)->hc.kind == MT_HYPER_MHC; }
static bool deepnorm(const void *s) { return placed(s, MT_PLACE_DEEPNORM); }
static bool mixln(const void *s) { return placed(s, MT_PLACE_MIXLN); }
static bool dsl(const void *s) { return placed(s, MT_PLACE_DSL); }
static bool inits(const void *s, mt_init_scheme i) {
    return ((const mt_stack_config *)s)->init == i;
}
static bool init_deepnorm(const void *s) { return inits(s, MT_SCHEME_DEEPNORM); }
static bool init_subln(const void *s) { return inits(s, MT_SCHEME_SUBLN); }
static bool init_dsl(const void *s) { return inits(s, MT_SCHEME_DSL); }
static bool param_mup(const void *s) { return ((const mt_stack_config *)s)->param != MT_PARAM_SP; }
static bool param_completep(const void *s) {
    return ((const mt_stack_config *)s)->param == MT_PARAM_COMPLETEP;
}
static bool point_wise_final_norm(const void *sp) {
    const mt_stack_config *s = sp;
    return (s->norm.kind == MT_NORM_DYT || s->norm.kind == MT_NORM_DERF) && final_norm(s);
}

/* placement ngpt, saved by older builds, was nGPT's residual: --arch ngpt's now */
static const mt_field_retired PLACEMENTS_RETIRED[] =
    {{.was = "ngpt",
      .now = "pre",
      .why = "nGPT's residual is --arch ngpt's, which reads no placement"},
     {0}};

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(mt_stack_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(n_layer, INT, "n_layer", "blocks (encdec: enc-layers + dec-layers, set from those)",
      .range = "1.."),
    F(n_head, INT, "n_head", "attention heads", .range = "1.."),
    F(n_kv_head, INT, "n_kv_head",
      "key-value heads (grouped-query attention), divides n-head; "
      "0: n-head",
      .range = "0.."),
    F(n_embd, INT, "n_embd", "channels", .range = "1.."),
    F(n_ff, INT, "n_ff",
      "FFN width; 0: 4 n-embd (swiglu: 8 n-embd / 3 rounded up to "
      "ff-multiple)",
      .range = "0.."),
    F(ff_multiple, INT, "ff_multiple", "swiglu: the default n-ff is a multiple of this",
      .range = "1.."),
    F(norm, TABLE, "norm", NULL, .of = &MT_NORM_FIELDS),
    F(norm.dyt_alpha_final, FLOAT, "dyt_alpha_final", /* the norm's, at the stack's final norm */
      "DyT and Derf: the initial alpha of the final norm; 0: dyt-alpha", .range = "0..",
      .read = point_wise_final_norm,
      .read_by = "the final norm of --norm dyt or derf (a placement with one: not post or "
                 "deepnorm; not --arch ngpt)"),
    F(qk.kind, ENUM, "qk_norm", "a norm on the attention's queries and keys, before RoPE",
      .of = &MT_QK_NORMS),
    F(qk.scope, ENUM, "qk_norm_scope", "QK-norm over each head or the whole projection",
      .of = &MT_QK_SCOPES),
    F(qk.affine, BOOL, "qk_norm_affine",
      "QK-norm with a learned gain (HS per head, or the projection's width; l2: a scalar)"),
    F(attn, TABLE, "attn", NULL, .of = &MT_ATTN_FIELDS),
    F(placement, ENUM, "placement", "residual placement of the norm", .of = &MT_PLACEMENTS,
      .retired = PLACEMENTS_RETIRED, .read = reads_placement,
      .read_by = "a residual that sums its sublayers, or hyper-connections (every model but "
                 "--arch ngpt)"),
    F(hc.kind, ENUM, "residual",
      "the residual stream: one summed stream, or (manifold-constrained) hyper-connections' "
      "--hc-streams streams",
      .of = &MT_HYPERS),
    F(hc.streams, INT, "hc_streams",
      "hyper-connections: the streams N, 1..16 (the paper's 4; 1 is a residual with learned "
      "weights)",
      .range = "1..16", .read = hyper, .read_by = "--residual hc or mhc"),
    F(hc.dynamic, BOOL, "hc_dynamic",
      "hyper-connections: static weights only (no DHC tanh terms; dynamic is the paper's "
      "default)",
      .flag = "hc_static", .read = hyper, .read_by = "--residual hc or mhc"),
    F(hc.mhc_iters, INT, "mhc_iters",
      "mHC: Sinkhorn-Knopp's iterations making the residual mixing doubly stochastic (the "
      "paper's 20)",
      .range = "1..", .read = mhc, .read_by = "--residual mhc"),
    F(deepnorm_alpha, FLOAT, "deepnorm_alpha", "DeepNorm's skip scale; 0: from the depth",
      .range = "0..", .read = deepnorm, .read_by = "--placement deepnorm"),
    F(deepnorm_beta, FLOAT, "deepnorm_beta", "DeepNorm's init gain; 0: from the depth",
      .range = "0..", .read = init_deepnorm,
      .read_by = "--init deepnorm (the default with --placement deepnorm)"),
    F(subln_gain, FLOAT, "subln_gain", "Sub-LN's init gain; 0: from the depth", .range = "0..",
      .read = init_subln, .read_by = "--init subln (the default with --placement subln)"),
    F(init, ENUM, "init", "weight init", .of = &MT_INIT_SCHEMES),
    F(bias, BOOL, "bias", "no biases in the linear layers", .flag = "no_bias"),
    F(act, ENUM, "act", "FFN activation", .of = &MT_ACTS),
    F(dropout, FLOAT, "dropout", "dropout probability"),
    F(label_smoothing, FLOAT, "label_smoothing",
      "training loss: each target (1 - eps) one-hot "
      "+ eps / classes, in [0, 1) (validation: the plain cross-entropy)"),
    F(z_loss, FLOAT, "z_loss",
      "training loss + z log(Z)^2 per target, Z the softmax's normaliser (PaLM: 1e-4; "
      "validation: the plain cross-entropy)",
      .range = "0.."),
    F(logit_softcap, FLOAT, "logit_softcap",
      "the head's logits C tanh(logits / C) in training, validation and sampling (Gemma 2: 30); "
      "0: none",
      .range = "0.."),
    F(mixln_post, INT, "mixln_post",
      "placement mixln: Post-LN in the first N blocks, Pre-LN after; -1: n-layer / 4",
      .range = "-1..", .read = mixln, .read_by = "--placement mixln"),
    F(dsl_k, FLOAT, "dsl_k",
      "placement dsl: beta^2 = k / n-layer, lambda^2 = 1 - beta^2, (0, n-layer]", .read = dsl,
      .read_by = "--placement dsl"),
    F(dsl_r0, FLOAT, "dsl_r0",
      "init dsl: the correlation of the embedded tokens, (0, 1] (the DeepScaleLM authors' "
      "0.221, BERT on Wikipedia)",
      .read = init_dsl, .read_by = "--init dsl (the default with --placement dsl)"),
    F(layer_lambdas, BOOL, "layer_lambdas",
      "nanochat's per-block scalars: block l reads resid_lambda_l x + x0_lambda_l x0, x0 the "
      "stream entering block 0 (init 1 and 0.1)",
      .read = sums,
      .read_by = "a residual that sums its sublayers (not --arch ngpt, not --residual hc or mhc)"),
    F(unet, BOOL, "unet",
      "modded-nanogpt's U-net: block L-1-j adds skip_weight (init 1) times block j's output to "
      "its input, j < L/2",
      .read = sums,
      .read_by = "a residual that sums its sublayers (not --arch ngpt, not --residual hc or mhc)"),
    F(zero_out, BOOL, "zero_init_out",
      "the blocks' output projections (attention's out_proj, the FFN's fc2) initialised to 0 "
      "(modded-nanogpt, nanochat)",
      .read = reads_placement,
      .read_by = "a model whose matrices are not unit vectors (not --arch ngpt)"),
    F(param, ENUM, "param",
      "parameterisation: how init, lr, weight decay, AdamW eps, the residual branches and the "
      "logits scale against a base model",
      .of = &MT_PARAM_KINDS),
    F(base_depth, INT, "base_depth",
      "CompleteP: the base model's n-layer L0, 1..n-layer (required)", .range = "0..",
      .read = param_completep, .read_by = "--param completep"),
    F(base_width, INT, "base_width",
      "muP, CompleteP: the base model's n-embd C0 (mup: required; completep 0: n-embd)",
      .range = "0..", .read = param_mup, .read_by = "--param mup or completep"),
};
#undef F
const mt_fields MT_STACK_FIELDS = MT_FIELDS_OF(FIELDS);

/* Mix-LN's switch (mixln_post: -1 resolved to n_layer / 4, as the paper's alpha = 0.25) and
   DeepScaleLM's k, each checked where its placement reads it (the fields' .read refuse a given
   one elsewhere). */
static mt_status placement_validate(mt_stack_config *s, mt_err *err) {
    if (mixln(s) && s->mixln_post != -1 && (s->mixln_post < 0 || s->mixln_post > s->n_layer))
        return mt_errorf(err, MT_EINVAL,
                         "config: mixln_post = %d: beyond the depth (the Post-LN blocks of "
                         "--placement mixln: 0 to n_layer = %d, or -1 for n_layer / 4)",
                         s->mixln_post, s->n_layer);
    if (mixln(s) && s->mixln_post == -1) s->mixln_post = s->n_layer / 4;
    if (dsl(s) && !(s->dsl_k > 0 && s->dsl_k <= s->n_layer))
        return mt_errorf(err, MT_EINVAL,
                         "config: dsl_k = %g: DeepScaleLM's beta^2 = k / n_layer needs k in "
                         "(0, n_layer = %d] (the paper's k = 2)",
                         s->dsl_k, s->n_layer);
    return MT_OK;
}

/* nGPT's residual (the GPT's --arch ngpt) reads no placement (left at pre), and its block has
   no norm layer, unit q and k per head with one s_qk for both, a SwiGLU with s_u and s_v, and
   no biases (the reference's): anything else is refused. */
static mt_status ngpt_validate(const mt_stack_config *s, mt_err *err) {
    if (s->residual != MT_RESIDUAL_NGPT) return MT_OK;
    const char *why =
        s->placement != MT_PLACE_PRE
            ? "no --placement: nGPT's residual is its own, Norm(h + alpha (Norm(F(h)) "
              "- h)), on no placement's norms"
        : s->norm.kind != MT_NORM_NONE ? "--norm none: nGPT has no norm layers (its "
                                         "vectors are kept on the unit sphere)"
        : s->qk.kind != MT_QK_NONE     ? "--qk-norm none: nGPT's queries and keys are "
                                         "unit per head and scaled by its own s_qk"
        : s->n_kv_head != s->n_head
            ? "--n-kv-head equal to --n-head: q and k share one s_qk head by head"
        : s->act != MT_ACT_SWIGLU ? "--act swiglu: s_u and s_v scale its two branches"
        : s->bias                 ? "--no-bias: a bias would move the unit vectors off the sphere"
        : s->attn.gate != MT_ATTN_GATE_NONE
            ? "--attn-gate none: nGPT's recipe keeps its own matrices on the unit sphere and has "
              "no rule for the gate's projection"
            : NULL;
    if (why) return mt_errorf(err, MT_EINVAL, "--arch ngpt needs %s", why);
    return MT_OK;
}

/* Hyper-connections (--residual hc): N streams within MT_HC_MAX_STREAMS, not with nGPT's residual
   (its own update on the sphere), a norm per token for the streams' norm; sets residual. */
static mt_status hyper_validate(mt_stack_config *s, mt_err *err) {
    if (s->hc.kind == MT_HYPER_NONE) return MT_OK;
    const char *name = mt_enum_name(&MT_HYPERS, s->hc.kind);
    if ((int)s->hc.kind < 0 || (int)s->hc.kind >= MT_HYPERS.n)
        return mt_errorf(err, MT_EINVAL, "config: residual %d is not one of its %d values",
                         (int)s->hc.kind, MT_HYPERS.n);
    if (s->hc.streams < 1 || s->hc.streams > MT_HC_MAX_STREAMS)
        return mt_errorf(err, MT_EINVAL,
                         "--hc-streams %d: hyper-connections need 1 to %d streams (the paper's 4)",
                         s->hc.streams, MT_HC_MAX_STREAMS);
    if (s->hc.kind == MT_HYPER_MHC && s->hc.mhc_iters < 1)
        return mt_errorf(err, MT_EINVAL,
                         "--mhc-iters %d: Sinkhorn-Knopp needs at least 1 iteration to make the "
                         "residual mixing doubly stochastic (the paper's 20)",
                         s->hc.mhc_iters);
    if (s->residual == MT_RESIDUAL_NGPT)
        return mt_errorf(err, MT_EINVAL,
                         "--residual %s with --arch ngpt: refused: nGPT's residual is its own "
                         "update on the unit sphere, Norm(h + alpha (Norm(F(h)) - h)), of one "
                         "stream; use --arch gpt or llama",
                         name);
    if (s->placement != MT_PLACE_PRE)
        return mt_errorf(
            err, MT_EINVAL,
            "--placement %s with --residual %s: refused: hyper-connections are Pre-LN, each "
            "sublayer reading Norm(h) of its width connection (subln, peri, lns and reorder "
            "change only F, its input or its output, and would fit, but are not built; post, "
            "deepnorm, mixln and dsl normalise or scale the residual sum, which the streams' "
            "mixing replaces); use --placement pre",
            mt_enum_name(&MT_PLACEMENTS, s->placement), name);
    if (s->hc.dynamic && (s->norm.kind == MT_NORM_BN || s->norm.kind == MT_NORM_IN))
        return mt_errorf(err, MT_EINVAL,
                         "--residual %s with --norm %s: refused: the dynamic weights normalise "
                         "each stream of each token, and %s's statistics cross tokens; use a "
                         "norm per token (ln, rms, ...) or --hc-static",
                         name, mt_enum_name(&MT_NORMS, s->norm.kind),
                         mt_enum_name(&MT_NORMS, s->norm.kind));
    s->residual = MT_RESIDUAL_HC;
    return MT_OK;
}

/* --param mup and completep: Pre-LN blocks summed into one stream under the gpt2 init, which the
   papers' rules are written for, and the base model's depth and width (init resolved). */
static mt_status param_validate(mt_stack_config *s, mt_err *err) {
    if (s->param == MT_PARAM_SP) return MT_OK;
    const char *name = mt_enum_name(&MT_PARAM_KINDS, s->param);
    if ((int)s->param < 0 || (int)s->param >= MT_PARAM_KINDS.n)
        return mt_errorf(err, MT_EINVAL, "config: param %d is not one of its %d values",
                         (int)s->param, MT_PARAM_KINDS.n);
    const char *why =
        s->residual != MT_RESIDUAL_SUM
            ? "a residual that sums its sublayers (not --arch ngpt, not --residual hc or mhc): "
              "the rules scale the branch added to one stream"
        : s->placement != MT_PLACE_PRE
            ? "--placement pre: the rules are derived for Pre-LN's x + F(N(x)) (post, deepnorm, "
              "mixln and dsl normalise or scale the sum, and lns, subln, peri, reorder change F)"
        : s->init != MT_SCHEME_GPT2
            ? "--init gpt2 (or auto): the rules scale the gpt2 scheme's N(0, 0.02) std"
            : NULL;
    if (why) return mt_errorf(err, MT_EINVAL, "--param %s needs %s", name, why);
    if (s->param == MT_PARAM_COMPLETEP && !(s->base_depth >= 1 && s->base_depth <= s->n_layer))
        return mt_errorf(err, MT_EINVAL,
                         "--param completep: --base-depth %d: the base model's depth L0 is "
                         "required, 1 to n_layer = %d (its branches are scaled by L0 / n_layer)",
                         s->base_depth, s->n_layer);
    if (s->param == MT_PARAM_MUP && s->base_width < 1)
        return mt_errorf(err, MT_EINVAL,
                         "--param mup: --base-width %d: the base model's width C0 is required, "
                         "at least 1 (the scales are C0 / n_embd = %d)",
                         s->base_width, s->n_embd);
    if (s->base_width == 0) s->base_width = s->n_embd;
    if (s->base_width % s->n_head)
        return mt_errorf(err, MT_EINVAL,
                         "--base-width %d: not a width of %d heads (the base model has n_head "
                         "heads of base_width / n_head channels): give a multiple of %d",
                         s->base_width, s->n_head, s->n_head);
    return MT_OK;
}

mt_param_scales mt_stack_param_scales(const mt_stack_config *s) {
    mt_param_scales k = {.init = 1, .lr = 1, .wd = 1, .eps = 1, .branch = 0, .logits = 1};
    if (s->param == MT_PARAM_SP) return k;
    double mN = (double)s->n_embd / s->base_width; /* m_N = C / C0 */
    k.init = (float)(1 / sqrt(mN)), k.lr = (float)(1 / mN), k.logits = (float)(1 / mN);
    if (s->param == MT_PARAM_COMPLETEP) {
        double mL = (double)s->n_layer / s->base_depth; /* m_L = L / L0, alpha = 1 */
        k.wd = (float)mN, k.eps = (float)(1 / (mN * mL)), k.branch = (float)(1 / mL);
    }
    return k;
}

void mt_stack_set_param_scales(const mt_stack_config *s, mt_params *P) {
    mt_param_scales k = mt_stack_param_scales(s);
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        if (e->role == MT_ROLE_MATRIX) e->lr_scale = k.lr, e->wd_scale = k.wd;
        e->eps_scale = k.eps;
    }
}

mt_status mt_stack_param_gpt_only(const mt_stack_config *s, const char *model, mt_err *err) {
    if (s->param == MT_PARAM_SP) return MT_OK;
    return mt_errorf(err, MT_EINVAL,
                     "--param %s: refused for %s: its logits' C0 / C scale is built in the GPT's "
                     "head only (--model gpt); give --param sp",
                     mt_enum_name(&MT_PARAM_KINDS, s->param), model);
}

mt_status mt_stack_validate(mt_stack_config *s, mt_deepnorm_arch arch, int N, int M, bool causal,
                            mt_err *err) {
    const struct {
        const char *key;
        int v;
    } dims[] = {{"n_layer", s->n_layer}, {"n_head", s->n_head}, {"n_embd", s->n_embd}};
    for (int i = 0; i < 3; i++)
        if (dims[i].v < 1)
            return mt_errorf(err, MT_EINVAL, "config: %s = %d, must be at least 1", dims[i].key,
                             dims[i].v);
    if (s->n_embd % s->n_head)
        return mt_errorf(err, MT_EINVAL,
                         "config: n_head = %d does not divide n_embd = %d (each head gets "
                         "n_embd / n_head channels)",
                         s->n_head, s->n_embd);
    if (s->n_kv_head < 0 || (s->n_kv_head > 0 && s->n_head % s->n_kv_head))
        return mt_errorf(err, MT_EINVAL,
                         "config: n_kv_head = %d does not divide n_head = %d "
                         "(each key-value head serves n_head / n_kv_head query heads; 0: n_head)",
                         s->n_kv_head, s->n_head);
    if (s->n_kv_head == 0) s->n_kv_head = s->n_head;
    if (s->n_ff < 0)
        return mt_errorf(err, MT_EINVAL, "config: n_ff = %d, must be at least 1 (0: 4 n_embd)",
                         s->n_ff);
    const struct {
        const mt_enum *e;
        int v;
    } enums[] = {{&MT_PLACEMENTS, (int)s->placement},
                 {&MT_INIT_SCHEMES, (int)s->init},
                 {&MT_ACTS, (int)s->act},
                 {&MT_RMS_FORMS, (int)s->norm.rms_form}};
    for (int i = 0; i < 4; i++)
        if (enums[i].v < 0 || enums[i].v >= enums[i].e->n)
            return mt_errorf(err, MT_EINVAL, "config: %s %d is not one of its %d values",
                             enums[i].e->what, enums[i].v, enums[i].e->n);
    if (!(s->dropout >= 0 && s->dropout < 1))
        return mt_errorf(err, MT_EINVAL, "config: dropout = %g, must be in [0, 1)", s->dropout);
    if (!(s->z_loss >= 0 && isfinite(s->z_loss)))
        return mt_errorf(err, MT_EINVAL,
                         "config: z_loss = %g, must be a finite number >= 0 (0: none; PaLM's 1e-4)",
                         s->z_loss);
    if (!(s->logit_softcap >= 0 && isfinite(s->logit_softcap)))
        return mt_errorf(err, MT_EINVAL,
                         "config: logit_softcap = %g, must be a finite number >= 0 (0: none; "
                         "Gemma 2's 30)",
                         s->logit_softcap);
    if (!(s->label_smoothing >= 0 && s->label_smoothing < 1))
        return mt_errorf(err, MT_EINVAL,
                         "config: label_smoothing = %g, must be in [0, 1) (0: "
                         "none; 0.1 is usual)",
                         s->label_smoothing);
    if (!(s->deepnorm_alpha >= 0) || !(s->deepnorm_beta >= 0) || !(s->subln_gain >= 0))
        return mt_errorf(err, MT_EINVAL,
                         "config: deepnorm_alpha = %g, deepnorm_beta = %g, "
                         "subln_gain = %g: expected 0 (from the depth) or more",
                         s->deepnorm_alpha, s->deepnorm_beta, s->subln_gain);
    mt_status st = ngpt_validate(s, err);
    if (st == MT_OK) st = hyper_validate(s, err);
    if (st == MT_OK) st = mt_norm_validate(&s->norm, s->n_embd, causal, err);
    if (st != MT_OK) return st;
    if ((st = mt_qk_norm_validate(&s->qk, s->n_embd / s->n_head, err)) != MT_OK) return st;
    if ((st = mt_attn_cfg_validate(&s->attn, err)) != MT_OK) return st;
    int deepest = N > M ? N : M; /* the blocks of the larger stack */
    if (s->attn.value_residual != MT_VALUE_RESIDUAL_NONE && deepest < 2)
        return mt_errorf(err, MT_EINVAL,
                         "--value-residual %s with %d block%s in a stack: refused: it mixes the "
                         "first block's values into the later blocks', and there are none; use 2 "
                         "or more --n-layer, or --value-residual none",
                         mt_enum_name(&MT_VALUE_RESIDUALS, s->attn.value_residual), deepest,
                         deepest == 1 ? "" : "s");
    if (s->placement == MT_PLACE_DEEPNORM &&
        (s->norm.kind == MT_NORM_DYT || s->norm.kind == MT_NORM_DERF))
        return mt_errorf(err, MT_EINVAL,
                         "--norm %s with --placement deepnorm: refused: DeepNorm's skip scale "
                         "alpha = (2N)^(1/4) assumes a norm after the sum that removes its scale, "
                         "and a point-wise %s does not (a larger sum only saturates it); use "
                         "--placement pre, post, subln or peri",
                         mt_enum_name(&MT_NORMS, s->norm.kind),
                         mt_enum_name(&MT_NORMS, s->norm.kind));
    if (s->ff_multiple < 1)
        return mt_errorf(err, MT_EINVAL,
                         "config: ff_multiple = %d, must be at least 1 (LLaMA: "
                         "256; mt's default 32)",
                         s->ff_multiple);
    if (s->n_ff == 0 && s->n_embd > INT_MAX / 4)
        return mt_errorf(err, MT_EINVAL,
                         "config: n_embd = %d: 4 n_embd (the default n_ff) "
                         "overflows an int; give n_ff",
                         s->n_embd);
    if (s->n_ff == 0 && s->act == MT_ACT_SWIGLU) { /* LLaMA: int(2 hidden / 3), rounded up */
        long long h = 2LL * 4 * s->n_embd / 3, m = s->ff_multiple;
        h = (h + m - 1) / m * m;
        if (h > INT_MAX)
            return mt_errorf(err, MT_EINVAL,
                             "config: the SwiGLU n_ff of n_embd = %d rounded up "
                             "to ff_multiple = %d overflows an int; give n_ff",
                             s->n_embd, s->ff_multiple);
        s->n_ff = (int)h;
    }
    if (s->n_ff == 0) s->n_ff = 4 * s->n_embd;
    mt_err inner;
    if (mt_placement_inner_norm(s->placement) &&
        mt_norm_validate(&s->norm, s->n_ff, causal, &inner) != MT_OK)
        return mt_errorf(err, MT_EINVAL,
                         "--placement %s also normalises the FFN's n_ff = %d "
                         "channels: %s",
                         mt_enum_name(&MT_PLACEMENTS, s->placement), s->n_ff, inner.msg);
    if ((st = placement_validate(s, err)) != MT_OK) return st;
    s->norm.eps = mt_norm_eps(&s->norm);
    float a, b;
    mt_deepnorm_constants(arch, N, M, &a, &b);
    if (!(s->deepnorm_alpha > 0)) s->deepnorm_alpha = a;
    if (!(s->deepnorm_beta > 0)) s->deepnorm_beta = b;
    if (!(s->subln_gain > 0)) s->subln_gain = mt_subln_gain(arch, N, M);
    if (s->init == MT_SCHEME_AUTO)
        s->init = s->placement == MT_PLACE_DEEPNORM ? MT_SCHEME_DEEPNORM
                  : s->placement == MT_PLACE_SUBLN  ? MT_SCHEME_SUBLN
                  : s->placement == MT_PLACE_DSL    ? MT_SCHEME_DSL
                                                    : MT_SCHEME_GPT2;
    if (s->init == MT_SCHEME_DSL && !(s->dsl_r0 > 0 && s->dsl_r0 <= 1))
        return mt_errorf(err, MT_EINVAL,
                         "config: dsl_r0 = %g: the embedded tokens' correlation must be in (0, 1] "
                         "(the DeepScaleLM authors' 0.221)",
                         s->dsl_r0);
    return param_validate(s, err);
}

mt_ce_opts mt_stack_ce(const mt_stack_config *s) {
    return (mt_ce_opts){.label_smoothing = s->label_smoothing, .z_loss = s->z_loss};
}

mt_block_cfg mt_stack_block(const mt_stack_config *s, bool causal) {
    return (mt_block_cfg){.C = s->n_embd,
                          .F = s->n_ff,
                          .n_head = s->n_head,
                          .n_kv_head = s->n_kv_head,
                          .bias = s->bias,
                          .causal = causal,
                          .norm = s->norm,
                          .qk = s->qk,
                          .attn = s->attn,
                          .residual = s->residual,
                          .hc = s->hc,
                          .placement = s->placement,
                          .alpha = s->deepnorm_alpha,
                          .act = s->act,
                          .dropout = s->dropout,
                          .mixln_post = s->mixln_post,
                          .dsl_lambda = sqrtf(1 - s->dsl_k / (float)s->n_layer),
                          .dsl_beta = sqrtf(s->dsl_k / (float)s->n_layer),
                          .branch = mt_stack_param_scales(s).branch};
}

/* DeepScaleLM's v_proj and out_proj variance in block `layer` (Kedia et al. 2024; the authors'
   sigma_attn_v_out, akhilkedia/TranformersGetStable, megatron/model/utils.py): at init the
   attention is uniform, its output the mean of the values, of variance C s^2 C s^2 r / (1 - p)
   (dropout p after it) for input tokens of correlation r: s^2 = sqrt((1 - p) / r) / C. r is the
   stream's, carried from the embeddings' r0 (1 - p) through every sublayer: the attention
   outputs tokens of correlation 1 - p, the FFN ReLU's map r + (sqrt(1 - r^2) - r acos r) / pi
   times 1 - p, and the residual mixes the skip's and the branch's correlations by their
   variances lambda^2 v and beta^2 (v the stream's variance; lambda = beta = 1 outside the dsl
   placement, as the authors' code without its lambda-beta flag). */
static double dsl_attn_variance(const mt_stack_config *s, int layer) {
    double p = s->dropout, beta2 = 1, lambda2 = 1, v = 1, r = s->dsl_r0 * (1 - p);
    if (s->placement == MT_PLACE_DSL) beta2 = s->dsl_k / s->n_layer, lambda2 = 1 - beta2;
    for (int l = 0; l < layer; l++)
        for (int sub = 0; sub < 2; sub++) { /* the attention, then the FFN */
            double relu = r + (sqrt(1 - r * r) - r * acos(r)) / M_PI;
            double out = (1 - p) * (sub == 0 ? 1 : relu);
            r = (lambda2 * r * v + beta2 * out) / (lambda2 * v + beta2);
            v = lambda2 * v + beta2;
        }
    return sqrt((1 - p) / r) / s->n_embd;
}

mt_block_init mt_stack_init_stds(const mt_stack_config *s, int layer) {
    int C = s->n_embd, F = s->n_ff, KC = C / s->n_head * s->n_kv_head; /* k_proj's, v_proj's */
    float sq = sqrtf(2.0f / ((float)C + C)), sf = sqrtf(2.0f / ((float)C + F));
    float skv = sqrtf(2.0f / ((float)C + KC)); /* the sums in float: no int overflow */
    float beta = s->deepnorm_beta, gamma = s->subln_gain;
    switch (s->init) {
    case MT_SCHEME_GPT2: {
        float g = MT_GPT2_STD, r = g / sqrtf(2.0f * s->n_layer); /* residual output projections */
        if (s->param != MT_PARAM_SP) g = r = MT_GPT2_STD * mt_stack_param_scales(s).init;
        return (mt_block_init){.q = g, .k = g, .v = g, .out = r, .fc1 = g, .fc2 = r};
    }
    case MT_SCHEME_XAVIER:
        return (mt_block_init){.q = sq, .k = skv, .v = skv, .out = sq, .fc1 = sf, .fc2 = sf};
    case MT_SCHEME_DEEPNORM:
        return (mt_block_init){.q = sq,
                               .k = skv,
                               .v = beta * skv,
                               .out = beta * sq,
                               .fc1 = beta * sf,
                               .fc2 = beta * sf};
    case MT_SCHEME_SUBLN: /* Magneto's Xavier-normal with gain gamma */
        return (mt_block_init){.q = sq,
                               .k = skv,
                               .v = gamma * skv,
                               .out = gamma * sq,
                               .fc1 = gamma * sf,
                               .fc2 = gamma * sf};
    case MT_SCHEME_DSL: { /* unit-variance sublayer outputs from unit-variance (normed) inputs */
        /* q, k: 1 / C; the FFN's C s^2 F s^2 / 2 / (1 - p) = 1 (ReLU's half, dropout after) */
        float a = 1 / sqrtf((float)C), vo = (float)sqrt(dsl_attn_variance(s, layer));
        float f = (float)pow(2.0 * (1 - s->dropout) / ((double)C * F), 0.25);
        return (mt_block_init){.q = a, .k = a, .v = vo, .out = vo, .fc1 = f, .fc2 = f};
    }
    case MT_SCHEME_AUTO: break;
    }
    MT_ASSERT(0, "init scheme %d has no stds (AUTO is resolved by validate)", (int)s->init);
}

double mt_stack_token_floats(const mt_stack_config *s) {
    double C = s->n_embd, F = s->n_ff, block = 16 * C + 4 * F;
    /* SwiGLU: fc3's output g kept (F); its backward writes dg over g (dg's own scratch, which this
       3 F also counted, is gone), so the rest is margin, kept so that arena sizes and the memory
       check stay as they were */
    if (s->act == MT_ACT_SWIGLU) block += 3 * F;
    if (mt_placement_inner_norm(s->placement)) block += 4 * F + 2 * C; /* unfused FFN, norms */
    if (mt_placement_out_norm(s->placement)) block += 4 * C;
    if (s->qk.kind != MT_QK_NONE) block += 4 * C;     /* normalised q and k, a cross-attention's */
    if (s->placement == MT_PLACE_LNS) block += 4 * C; /* the scaled norms' outputs */
    if (s->placement == MT_PLACE_DSL) block += 8 * C; /* the scaled skip and branch */
    if (s->residual == MT_RESIDUAL_NGPT) block += 4 * C + 6 * F; /* scaled q, k, u, v; unfused */
    if (s->layer_lambdas) block += 6 * C; /* the two scaled streams and their sum, gradients */
    if (s->unet) block += 4 * C;          /* the scaled skip and the sum */
    if (s->hc.kind != MT_HYPER_NONE) /* per sublayer: the streams' norm, H', h, their gradients */
        block += 12.0 * s->hc.streams * C + 4 * C;
    if (s->hc.kind == MT_HYPER_MHC) /* Sinkhorn's iterates in the backward, per sublayer */
        block += 2.0 * (2 * s->hc.mhc_iters + 1) * s->hc.streams * s->hc.streams;
    return s->n_layer * block;
}

float mt_stack_other_std(const mt_stack_config *s, int fan_in, int fan_out) {
    return s->init == MT_SCHEME_GPT2 ? MT_GPT2_STD : sqrtf(2.0f / (float)(fan_in + fan_out));
}

/* Block i's scalars of layer_lambdas, <prefix>.resid_lambda (1) = 1 and .x0_lambda (1) = 0.1, and
   of unet, .skip_weight (1) = 1 on the blocks i >= L - L/2 that read block L-1-i's output. */
static void add_mix_params(mt_params *P, const char *prefix, const mt_stack_config *s, int i,
                           mt_stack_mix *m) {
    const struct {
        bool on;
        const char *name;
        float init;
        int *at;
    } scalars[] = {{s->layer_lambdas, "resid_lambda", 1, &m->resid},
                   {s->layer_lambdas, "x0_lambda", 0.1f, &m->x0},
                   {s->unet && i >= s->n_layer - s->n_layer / 2, "skip_weight", 1, &m->skip}};
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "%s.%s", prefix, scalars[k].name);
        *scalars[k].at = scalars[k].on ? mt_params_add(P, name, 1, (int[]){1}, MT_ROLE_NORM,
                                                       MT_INIT_CONST, scalars[k].init)
                                       : -1;
    }
}

mt_status mt_stack_build(mt_stack *st, const mt_stack_config *s, bool causal, mt_params *P,
                         const char *prefix, const char *final_name, mt_err *err) {
    mt_block_cfg block = mt_stack_block(s, causal);
    return mt_stack_build_blocks(st, s, &block, P, prefix, final_name, err);
}

mt_status mt_stack_build_blocks(mt_stack *st, const mt_stack_config *s, const mt_block_cfg *block,
                                mt_params *P, const char *prefix, const char *final_name,
                                mt_err *err) {
    memset(st, 0, sizeof *st);
    st->blocks = calloc((size_t)s->n_layer, sizeof *st->blocks);
    st->mix = calloc((size_t)s->n_layer, sizeof *st->mix);
    st->lambdas = s->layer_lambdas, st->unet = s->unet;
    if (!st->blocks || !st->mix)
        return mt_errorf(err, MT_ENOMEM,
                         "n_layer = %d: out of memory for the table of %d blocks (before their "
                         "weights): use fewer layers",
                         s->n_layer, s->n_layer);
    st->n_layer = s->n_layer;
    st->norm = &s->norm;
    st->skip = -1;
    st->block = *block;
    for (int i = 0; i < s->n_layer; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.%d", prefix, i);
        mt_block_init stds = mt_stack_init_stds(s, i);
        if (s->zero_out) stds.out = stds.fc2 = 0;
        mt_block_cfg b = st->block;
        b.layer = i;
        mt_block_add_params(P, name, &b, &stds, &st->blocks[i]);
        add_mix_params(P, name, s, i, &st->mix[i]);
    }
    st->final_norm_on = final_norm(s);
    st->final_norm = MT_NORM_PARAMS_NONE;
    mt_norm_cfg final = mt_norm_at(&s->norm, MT_NORM_SITE_FINAL);
    if (st->final_norm_on) mt_norm_add_params(P, final_name, &final, s->n_embd, &st->final_norm);
    return MT_OK;
}

/* Mean over the tokens of ||x_t||_2; x (..., C). */
static double mean_token_norm(const mt_tensor *x) {
    int C = x->shape[x->ndim - 1];
    size_t n = x->n / (size_t)C;
    double sum = 0;
    for (size_t t = 0; t < n; t++) {
        double s = 0;
        for (int j = 0; j < C; j++) s += (double)x->data[t * C + j] * x->data[t * C + j];
        sum += sqrt(s);
    }
    return sum / (double)n;
}

/* Over all of x's values (tokens and channels; sigma^2 the population variance), two passes in
   double. */
void mt_stack_act_stats(const mt_tensor *x, double out[2]) {
    double sum = 0, top = 0;
    for (size_t i = 0; i < x->n; i++) sum += x->data[i], top = fmax(top, fabs(x->data[i]));
    double mu = sum / (double)x->n, m2 = 0, m4 = 0;
    for (size_t i = 0; i < x->n; i++) {
        double e = (x->data[i] - mu) * (x->data[i] - mu);
        m2 += e, m4 += e * e;
    }
    m2 /= (double)x->n, m4 /= (double)x->n;
    out[0] = top, out[1] = m2 > 0 ? m4 / (m2 * m2) : 0;
}

mt_tensor *mt_stack_forward(mt_ctx *c, const mt_stack *st, mt_params *P, mt_tensor *x,
                            double *resid) {
    return mt_stack_forward_ex(c, st, P, x, NULL, NULL, NULL, resid);
}

/* A block as mt_recompute's segment: what it reads besides x, kept until the backward (its
   config by value: it holds the block's index, which the loop below changes; v1 by value: a
   replay must not write through a pointer to the loop's). */
typedef struct {
    mt_block_cfg cfg;
    mt_params *P;
    const mt_block_params *bp;
    const int *x_len;
    mt_cross_mem mem;  /* mem.mem NULL: none */
    mt_tensor *v1;     /* the value residual's first values, NULL before the first block */
    mt_value_embed ve; /* ve.e NULL: none */
} block_segment;

/* The block of b; the first block of a value residual stores its values in *v1 */
static mt_tensor *block_run(mt_ctx *c, mt_tensor *x, const block_segment *b, mt_tensor **v1) {
    mt_self_arg self = {.kv_len = b->x_len, .v1 = v1, .ve = &b->ve};
    return mt_block_forward_ex(c, &b->cfg, b->P, b->bp, x, &self, b->mem.mem ? &b->mem : NULL);
}

static mt_tensor *block_forward(mt_ctx *c, mt_tensor *x, const void *arg) {
    const block_segment *b = arg;
    mt_tensor *v1 = b->v1;
    return block_run(c, x, b, &v1);
}

mt_tensor *mt_stack_forward_ex(mt_ctx *c, const mt_stack *st, mt_params *P, mt_tensor *x,
                               const int *x_len, const mt_cross_mem *mem, const mt_value_embed *ve,
                               double *resid) {
    mt_block_cfg block = st->block;
    bool value_residual = block.attn.value_residual != MT_VALUE_RESIDUAL_NONE;
    mt_tensor *v1 = NULL;
    x = mt_stack_streams(c, st, x);
    mt_stack_carry carry = mt_stack_carry_begin(c, st, x);
    for (int i = 0; i < st->n_layer; i++) {
        x = mt_stack_block_input(c, st, P, i, x, &carry);
        if (resid) resid[i] = mean_token_norm(x);
        if (c->act) mt_stack_act_stats(x, c->act + 2 * c->act_calls++);
        if (i != st->skip) { /* the block-skip probe's: x passes unchanged */
            block.layer = i;
            block_segment b = {block,
                               P,
                               &st->blocks[i],
                               x_len,
                               mem ? *mem : (mt_cross_mem){0},
                               v1,
                               ve ? ve[i] : (mt_value_embed){0}};
            /* the first block of a value residual runs plainly: its values outlive it */
            if (c->recompute && !(value_residual && !v1))
                x = mt_recompute(c, x, block_forward, &b, sizeof b);
            else x = block_run(c, x, &b, &v1);
        }
        mt_stack_block_output(st, i, x, &carry);
    }
    if (resid) resid[st->n_layer] = mean_token_norm(x);
    return mt_stack_streams_sum(c, st, x);
}

mt_stack_carry mt_stack_carry_begin(mt_ctx *c, const mt_stack *st, mt_tensor *x) {
    mt_stack_carry k = {.x0 = x};
    if (st->unet) k.out = mt_arena_alloc(c, (size_t)st->n_layer * sizeof *k.out);
    return k;
}

mt_tensor *mt_stack_block_input(mt_ctx *c, const mt_stack *st, mt_params *P, int l, mt_tensor *x,
                                const mt_stack_carry *k) {
    if (st->mix[l].skip >= 0)
        x = mt_add(c, x, mt_scale_by(c, k->out[st->n_layer - 1 - l], &P->t[st->mix[l].skip]));
    if (st->lambdas)
        x = mt_add(c, mt_scale_by(c, x, &P->t[st->mix[l].resid]),
                   mt_scale_by(c, k->x0, &P->t[st->mix[l].x0]));
    return x;
}

void mt_stack_block_output(const mt_stack *st, int l, mt_tensor *x, mt_stack_carry *k) {
    if (k->out && l < st->n_layer / 2) k->out[l] = x;
}

mt_tensor *mt_stack_streams(mt_ctx *c, const mt_stack *st, mt_tensor *x) {
    return st->block.residual == MT_RESIDUAL_HC ? mt_hc_expand(c, x, st->block.hc.streams) : x;
}

mt_tensor *mt_stack_streams_sum(mt_ctx *c, const mt_stack *st, mt_tensor *x) {
    return st->block.residual == MT_RESIDUAL_HC ? mt_hc_reduce(c, x, st->block.hc.streams) : x;
}

mt_tensor *mt_stack_final(mt_ctx *c, const mt_stack *st, mt_params *P, mt_tensor *x) {
    return st->final_norm_on ? mt_norm_tokens(c, st->norm, P, &st->final_norm, x) : x;
}

void mt_stack_free(mt_stack *st) {
    free(st->blocks);
    free(st->mix);
    memset(st, 0, sizeof *st);
}
