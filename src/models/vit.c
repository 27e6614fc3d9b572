/* ViT (models.h): patches -> linear embedding -> [cls] + position -> bidirectional blocks from
   src/nn -> final norm (pre, subln, peri) -> pooling -> head. B batch, CH image channels, H W
   image size, P patch size, T tokens (patches, + 1 with the class token), C n_embd, K classes. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit_internal.h"

struct mt_vit_layout {
    int patch_w, patch_b; /* (C, CH P P), (C) or -1 */
    int cls_token;        /* (1, C), -1 with mean pooling */
    int pos_emb;          /* (T, C) */
    int emb_scale;        /* (1), -1 without emb_scale */
    int head_w, head_b;   /* (K, C), (K) */
    mt_stack stack;       /* bidirectional blocks, the final norm (pre, subln, peri) */
};

static const mt_enum_item POOLS[] = {
    [MT_VIT_POOL_CLS] = {.name = "cls", .help = "the class token's output"},
    [MT_VIT_POOL_MEAN] = {.name = "mean", .help = "the mean over tokens"},
};
const mt_enum MT_VIT_POOLS = MT_ENUM("pool", POOLS);

/* ---- config ---------------------------------------------------------------------------------- */

mt_vit_config mt_vit_config_default(void) {
    return (mt_vit_config){.stack = mt_stack_default(),
                           .image_h = 28,
                           .image_w = 28,
                           .channels = 1,
                           .patch = 7,
                           .n_classes = 10,
                           .pool = MT_VIT_POOL_CLS};
}

int mt_vit_tokens(const mt_vit_config *cfg) {
    return (cfg->image_h / cfg->patch) * (cfg->image_w / cfg->patch) +
           (cfg->pool == MT_VIT_POOL_CLS);
}

#define MAX_VIT_SIZE (1 << 20)

mt_status mt_vit_config_validate(mt_vit_config *cfg, mt_err *err) {
    const struct {
        const char *key;
        int v;
    } dims[] = {{"image_h", cfg->image_h},
                {"image_w", cfg->image_w},
                {"patch", cfg->patch},
                {"n_classes", cfg->n_classes}};
    for (int i = 0; i < 4; i++)
        if (dims[i].v < 1)
            return mt_errorf(err, MT_EINVAL, "config: %s = %d, must be at least 1", dims[i].key,
                             dims[i].v);
    if (cfg->channels < 1 || cfg->channels > 4)
        return mt_errorf(err, MT_EINVAL, "config: channels = %d, must be 1 to 4", cfg->channels);
    if (cfg->image_h % cfg->patch || cfg->image_w % cfg->patch)
        return mt_errorf(err, MT_EINVAL,
                         "config: patch = %d does not divide the image size %dx%d (height x "
                         "width); pick a patch size that divides both",
                         cfg->patch, cfg->image_h, cfg->image_w);
    /* every size below stays an int: a patch's inputs, the tokens, their products with C */
    long inputs = (long)cfg->channels * cfg->patch * cfg->patch,
         tokens = (long)(cfg->image_h / cfg->patch) * (cfg->image_w / cfg->patch) + 1;
    if (inputs > MAX_VIT_SIZE || tokens > MAX_VIT_SIZE)
        return mt_errorf(err, MT_EINVAL,
                         "config: patch = %d on %dx%dx%d images makes %ld inputs a patch and %ld "
                         "tokens; each must be at most %d: use a smaller patch or image size",
                         cfg->patch, cfg->image_h, cfg->image_w, cfg->channels, inputs, tokens,
                         MAX_VIT_SIZE);
    if ((unsigned)cfg->pool >= (unsigned)MT_VIT_POOLS.n)
        return mt_errorf(err, MT_EINVAL, "config: pool %d (accepted: cls, mean)", (int)cfg->pool);
    /* not causal: an image's patches may all see each other, so bn and in are fine here */
    mt_status st = mt_stack_validate(&cfg->stack, MT_DEEPNORM_ENCODER_ONLY, cfg->stack.n_layer, 0,
                                     false, err);
    if (st != MT_OK) return st;
    mt_status ps = mt_stack_param_gpt_only(&cfg->stack, "the ViT", err);
    if (ps != MT_OK) return ps;
    if (cfg->stack.logit_softcap != 0)
        return mt_errorf(err, MT_EINVAL,
                         "config: logit_softcap = %g: the soft cap of the logits is the GPT's "
                         "(--model gpt); the ViT's head has none: give 0 (no --logit-softcap)",
                         cfg->stack.logit_softcap);
    /* Every placement ends in a norm (pre: the final norm; post, deepnorm: the last block's), and
       InstanceNorm gives each channel mean 0 (its bias) over the tokens: the mean over tokens
       would be the same for every image. */
    if (cfg->stack.norm.kind == MT_NORM_IN && cfg->pool == MT_VIT_POOL_MEAN)
        return mt_errorf(err, MT_EINVAL,
                         "config: norm in with pool mean: InstanceNorm sets every channel's mean "
                         "over the tokens to its bias, so mean pooling would see the same "
                         "features for every image; use pool cls with norm in");
    return MT_OK;
}

/* ---- build ----------------------------------------------------------------------------------- */

mt_status mt_vit_build_table(void *mp, const void *cfgp, mt_err *err) {
    mt_vit *m = mp;
    const mt_vit_config *cfg = cfgp;
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    mt_status st = mt_vit_config_validate(&m->cfg, err);
    if (st != MT_OK) return st;
    m->base = (mt_model){.cfg = &m->cfg, .P = &m->P}; /* the type: mt_model_table's */
    const mt_vit_config *g = &m->cfg;
    const mt_stack_config *s = &g->stack;
    int C = s->n_embd, K = g->n_classes, D = g->channels * g->patch * g->patch;
    m->meta =
        (mt_images){.H = g->image_h, .W = g->image_w, .C = g->channels, .n_classes = g->n_classes};
    mt_vit_layout *L = calloc(1, sizeof *L);
    if (!L) return mt_errorf(err, MT_ENOMEM, "out of memory for a model");
    m->layout = L;
    mt_params *P = &m->P;
    mt_params_init_table(P);
    /* the patch embedding and the head as the GPT's untied head */
    L->patch_w = mt_params_add(P, "patch_embed.weight", 2, (int[]){C, D}, MT_ROLE_HEAD,
                               MT_INIT_NORMAL, mt_stack_other_std(s, C, D));
    L->patch_b = s->bias ? mt_params_add(P, "patch_embed.bias", 1, &C, MT_ROLE_BIAS, MT_INIT_ZEROS,
                                         0.0f)
                         : -1;
    L->cls_token = g->pool == MT_VIT_POOL_CLS
                       ? mt_params_add(P, "cls_token", 2, (int[]){1, C}, MT_ROLE_EMBEDDING,
                                       MT_INIT_NORMAL, MT_GPT2_STD)
                       : -1;
    L->pos_emb = mt_params_add(P, "pos_emb.weight", 2, (int[]){mt_vit_tokens(g), C},
                               MT_ROLE_EMBEDDING, MT_INIT_NORMAL, MT_GPT2_STD);
    L->emb_scale = !g->emb_scale ? -1
                                 : mt_params_add(P, "emb_scale", 1, (int[]){1}, MT_ROLE_NORM,
                                                 MT_INIT_CONST, sqrtf((float)C));
    if ((st = mt_stack_build(&L->stack, s, false, P, "blocks", "final_norm", err)) != MT_OK)
        return st;
    L->head_w = mt_params_add(P, "head.weight", 2, (int[]){K, C}, MT_ROLE_HEAD, MT_INIT_NORMAL,
                              mt_stack_other_std(s, C, K));
    L->head_b = mt_params_add(P, "head.bias", 1, &K, MT_ROLE_BIAS, MT_INIT_ZEROS, 0.0f);
    return MT_OK;
}

void mt_vit_free(mt_vit *m) {
    if (m->layout) mt_stack_free(&m->layout->stack);
    free(m->layout);
    mt_params_free(&m->P);
    mt_images_free(&m->meta);
    memset(m, 0, sizeof *m);
}

double mt_vit_activation_bytes(const void *cfgp, int B, bool training) {
    const mt_vit_config *cfg = cfgp;
    const mt_stack_config *s = &cfg->stack;
    double T = mt_vit_tokens(cfg), N = (double)B * T, C = s->n_embd;
    double D = (double)cfg->channels * cfg->patch * cfg->patch;
    /* the patches and their embedding; the blocks (mt_stack_token_floats) and (T, T) attention
       scratch per head; the logits; doubled for gradients */
    double floats = N * (D + 4 * C + mt_stack_token_floats(s)) +
                    s->n_layer * 4.0 * B * s->n_head * T * T + 4.0 * B * cfg->n_classes;
    return (training ? 2 : 1) * floats * sizeof(float);
}

/* ---- forward --------------------------------------------------------------------------------- */

/* images (B, CH, H, W) -> patches (B, NP, CH P P), NP = (H / P)(W / P): patch (i, j) is token
   i (W / P) + j, its element (ch, y, x) is images[b][ch][i P + y][j P + x]. A copy of data
   without gradient: the images are inputs. */
static void patchify(const float *img, float *out, int B, int CH, int H, int W, int P) {
    int gw = W / P, np = (H / P) * gw, D = CH * P * P;
    MT_PARALLEL_FOR((size_t)B * CH * H * W >= MT_PAR_MIN, for (int bt = 0; bt < B * np; bt++) {
        int b = bt / np, i = bt % np / gw, j = bt % gw;
        float *o = out + (size_t)bt * D;
        for (int ch = 0; ch < CH; ch++)
            for (int y = 0; y < P; y++)
                memcpy(o + (ch * P + y) * P,
                       img + (((size_t)b * CH + ch) * H + i * P + y) * W + j * P,
                       (size_t)P * sizeof(float));
    });
}

mt_tensor *mt_vit_forward(mt_ctx *c, const mt_vit *m, mt_params *P, const float *images, int B) {
    const mt_vit_config *g = &m->cfg;
    const mt_vit_layout *L = m->layout;
    int C = g->stack.n_embd, p = g->patch, np = (g->image_h / p) * (g->image_w / p);
    int T = mt_vit_tokens(g);
    MT_ASSERT(B >= 1, "vit: batch of %d images", B);
    mt_tensor *patches = mt_tensor_new(c, 3, (int[]){B, np, g->channels * p * p});
    patchify(images, patches->data, B, g->channels, g->image_h, g->image_w, p);
    mt_tensor *x = mt_param_linear(c, P, L->patch_w, L->patch_b, patches); /* (B, np, C) */
    if (L->cls_token >= 0) { /* [cls, patches]: per image, C cls channels then np * C */
        int *zeros = mt_arena_alloc(c, (size_t)B * sizeof(int));
        memset(zeros, 0, (size_t)B * sizeof(int));
        mt_tensor *cls = mt_embedding(c, &P->t[L->cls_token], zeros, B); /* (B, C) */
        x = mt_concat(c, 2, (mt_tensor *[]){cls, mt_reshape(c, x, 2, (int[]){B, np * C})});
        x = mt_reshape(c, x, 3, (int[]){B, T, C});
    }
    int *pos = mt_arena_alloc(c, (size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) pos[i] = i % T;
    x = mt_add(c, x,
               mt_reshape(c, mt_embedding(c, &P->t[L->pos_emb], pos, B * T), 3, (int[]){B, T, C}));
    if (L->emb_scale >= 0) x = mt_scale_by(c, x, &P->t[L->emb_scale]);
    if (g->stack.dropout > 0) x = mt_dropout(c, x, g->stack.dropout);
    x = mt_stack_final(c, &L->stack, P, mt_stack_forward(c, &L->stack, P, x, NULL));
    mt_tensor *pooled;
    if (L->cls_token >= 0) { /* the class token's output: token 0 */
        pooled = mt_slice(c, mt_reshape(c, x, 2, (int[]){B, T * C}), 0, C);
    } else { /* the mean over tokens: x^T (1/T, ..., 1/T)^T per image -> (B, C, 1) */
        mt_tensor *avg = mt_tensor_new(c, 2, (int[]){T, 1});
        for (int t = 0; t < T; t++) avg->data[t] = 1.0f / T;
        pooled = mt_reshape(c, mt_matmul(c, x, avg, true, false), 2, (int[]){B, C});
    }
    return mt_param_linear(c, P, L->head_w, L->head_b, pooled); /* (B, K) */
}

mt_tensor *mt_vit_loss(mt_ctx *c, const mt_vit *m, mt_params *P, const float *images,
                       const int *labels, int B, mt_ce_opts ce) {
    return mt_cross_entropy(c, mt_vit_forward(c, m, P, images, B), labels, -1, ce);
}
