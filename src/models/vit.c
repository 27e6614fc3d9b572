/* ViT (models.h): patches -> linear embedding -> [cls] + position -> bidirectional blocks from
   src/nn -> final norm (pre) -> pooling -> head. B batch, CH image channels, H W image size,
   P patch size, T tokens (patches, + 1 with the class token), C n_embd, K classes. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_json.h"

struct mt_vit_layout {
    int patch_w, patch_b;     /* (C, CH P P), (C) or -1 */
    int cls_token;            /* (1, C), -1 with mean pooling */
    int pos_emb;              /* (T, C) */
    int head_w, head_b;       /* (K, C), (K) */
    bool final_norm_on;       /* pre only (mt_placement_final_norm) */
    mt_norm_params final_norm;
    mt_block_cfg block;       /* the same for every block (bidirectional) */
    mt_block_params *blocks;  /* n_layer */
};

static const char *const POOL_NAMES[] = {"cls", "mean"};

const char *mt_vit_pool_name(mt_vit_pool p) { return POOL_NAMES[p]; }

mt_status mt_vit_pool_parse(const char *name, mt_vit_pool *p, mt_err *err) {
    for (int i = 0; i < 2; i++)
        if (strcmp(name, POOL_NAMES[i]) == 0) return *p = (mt_vit_pool)i, MT_OK;
    return mt_errorf(err, MT_EINVAL, "unknown pool '%s' (accepted: cls, mean)", name);
}

/* ---- config ---------------------------------------------------------------------------------- */

mt_vit_config mt_vit_config_default(void) {
    return (mt_vit_config){.image_h = 28,
                           .image_w = 28,
                           .channels = 1,
                           .patch = 7,
                           .n_classes = 10,
                           .n_layer = 4,
                           .n_head = 4,
                           .n_embd = 64,
                           .n_ff = 0,
                           .norm = mt_norm_default(MT_NORM_LN),
                           .placement = MT_PLACE_PRE,
                           .init = MT_SCHEME_AUTO,
                           .bias = true,
                           .act = MT_ACT_GELU,
                           .pool = MT_VIT_POOL_CLS};
}

int mt_vit_tokens(const mt_vit_config *cfg) {
    return (cfg->image_h / cfg->patch) * (cfg->image_w / cfg->patch) +
           (cfg->pool == MT_VIT_POOL_CLS);
}

mt_status mt_vit_config_validate(mt_vit_config *cfg, mt_err *err) {
    const struct {
        const char *key;
        int v;
    } dims[] = {{"image_h", cfg->image_h}, {"image_w", cfg->image_w}, {"patch", cfg->patch},
                {"n_classes", cfg->n_classes}, {"n_layer", cfg->n_layer},
                {"n_head", cfg->n_head}, {"n_embd", cfg->n_embd}};
    for (int i = 0; i < 7; i++)
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
    if ((unsigned)cfg->pool > MT_VIT_POOL_MEAN)
        return mt_errorf(err, MT_EINVAL, "config: pool %d (accepted: cls, mean)", (int)cfg->pool);
    /* not causal: an image's patches may all see each other, so bn and in are fine here */
    mt_status st = mt_blocks_config_check(cfg->n_layer, cfg->n_head, cfg->n_embd, &cfg->n_ff,
                                          &cfg->norm, false, cfg->placement, &cfg->init,
                                          cfg->act, cfg->dropout, &cfg->deepnorm_alpha,
                                          &cfg->deepnorm_beta, err);
    if (st != MT_OK) return st;
    /* Every placement ends in a norm (pre: the final norm; post, deepnorm: the last block's), and
       InstanceNorm gives each channel mean 0 (its bias) over the tokens: the mean over tokens
       would be the same for every image. */
    if (cfg->norm.kind == MT_NORM_IN && cfg->pool == MT_VIT_POOL_MEAN)
        return mt_errorf(err, MT_EINVAL,
                         "config: norm in with pool mean: InstanceNorm sets every channel's mean "
                         "over the tokens to its bias, so mean pooling would see the same "
                         "features for every image; use pool cls with norm in");
    return MT_OK;
}

static const mt_cf_field FIELDS[] = {
    MT_CF_FIELD(mt_vit_config, "image_h", INT, image_h),
    MT_CF_FIELD(mt_vit_config, "image_w", INT, image_w),
    MT_CF_FIELD(mt_vit_config, "channels", INT, channels),
    MT_CF_FIELD(mt_vit_config, "patch", INT, patch),
    MT_CF_FIELD(mt_vit_config, "n_classes", INT, n_classes),
    MT_CF_FIELD(mt_vit_config, "pool", POOL, pool),
    MT_CF_BLOCK_FIELDS(mt_vit_config),
};
#define N_FIELDS (int)(sizeof FIELDS / sizeof FIELDS[0])

char *mt_vit_config_to_json(const mt_vit_config *cfg) {
    return mt_cf_to_json(FIELDS, N_FIELDS, cfg);
}

mt_status mt_vit_config_from_json(const char *json, mt_vit_config *cfg, mt_err *err) {
    *cfg = mt_vit_config_default();
    mt_status st = mt_cf_from_json(FIELDS, N_FIELDS, json, cfg, err);
    return st == MT_OK ? mt_vit_config_validate(cfg, err) : st;
}

/* ---- build and init ---------------------------------------------------------------------------- */

mt_status mt_vit_build(mt_vit *m, const mt_vit_config *cfg, mt_err *err) {
    mt_status st = mt_vit_build_table(m, cfg, err);
    if (st == MT_OK && (st = mt_params_alloc(&m->P, err)) != MT_OK) mt_vit_free(m);
    return st;
}

mt_status mt_vit_build_table(mt_vit *m, const mt_vit_config *cfg, mt_err *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    mt_status st = mt_vit_config_validate(&m->cfg, err);
    if (st != MT_OK) return st;
    const mt_vit_config *g = &m->cfg;
    int C = g->n_embd, K = g->n_classes, D = g->channels * g->patch * g->patch;
    mt_vit_layout *L = calloc(1, sizeof *L);
    if (L) L->blocks = calloc((size_t)g->n_layer, sizeof *L->blocks);
    if (!L || !L->blocks) {
        free(L);
        return mt_errorf(err, MT_ENOMEM, "cannot allocate the layout of %d blocks", g->n_layer);
    }
    m->layout = L;
    L->block = (mt_block_cfg){.C = C,
                              .F = g->n_ff,
                              .n_head = g->n_head,
                              .bias = g->bias,
                              .causal = false,
                              .norm = g->norm,
                              .placement = g->placement,
                              .alpha = g->deepnorm_alpha,
                              .act = g->act,
                              .dropout = g->dropout};
    mt_params *P = &m->P;
    mt_params_init_table(P);
    /* the patch embedding and the head as the GPT's untied head: N(0, 0.02) under gpt2,
       Xavier-normal with gain 1 otherwise */
    bool gpt2 = g->init == MT_SCHEME_GPT2;
    L->patch_w = mt_params_add(P, "patch_embed.weight", 2, (int[]){C, D}, MT_ROLE_MATRIX,
                               MT_INIT_NORMAL, gpt2 ? 0.02f : sqrtf(2.0f / (C + D)));
    L->patch_b = g->bias ? mt_params_add(P, "patch_embed.bias", 1, &C, MT_ROLE_BIAS,
                                         MT_INIT_ZEROS, 0.0f)
                         : -1;
    L->cls_token = g->pool == MT_VIT_POOL_CLS
                       ? mt_params_add(P, "cls_token", 2, (int[]){1, C}, MT_ROLE_EMBEDDING,
                                       MT_INIT_NORMAL, 0.02f)
                       : -1;
    L->pos_emb = mt_params_add(P, "pos_emb.weight", 2, (int[]){mt_vit_tokens(g), C},
                               MT_ROLE_EMBEDDING, MT_INIT_NORMAL, 0.02f);
    mt_block_init stds = mt_block_init_stds(g->init, g->n_layer, g->deepnorm_beta, C, g->n_ff);
    for (int i = 0; i < g->n_layer; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blocks.%d", i);
        mt_block_add_params(P, prefix, &L->block, &stds, &L->blocks[i]);
    }
    L->final_norm_on = mt_placement_final_norm(g->placement);
    L->final_norm = (mt_norm_params){-1, -1, -1, -1, -1};
    if (L->final_norm_on) mt_norm_add_params(P, "final_norm", &g->norm, C, &L->final_norm);
    L->head_w = mt_params_add(P, "head.weight", 2, (int[]){K, C}, MT_ROLE_MATRIX, MT_INIT_NORMAL,
                              gpt2 ? 0.02f : sqrtf(2.0f / (C + K)));
    L->head_b = mt_params_add(P, "head.bias", 1, &K, MT_ROLE_BIAS, MT_INIT_ZEROS, 0.0f);
    return MT_OK;
}

void mt_vit_init_weights(mt_vit *m, mt_rng *r) { mt_params_initialize(&m->P, r); }

void mt_vit_free(mt_vit *m) {
    if (m->layout) free(m->layout->blocks);
    free(m->layout);
    mt_params_free(&m->P);
    memset(m, 0, sizeof *m);
}

double mt_vit_activation_bytes(const mt_vit_config *cfg, int B, bool training) {
    double T = mt_vit_tokens(cfg), N = (double)B * T, C = cfg->n_embd, F = cfg->n_ff;
    double D = (double)cfg->channels * cfg->patch * cfg->patch;
    /* the patches and their embedding; per block about 16 (B, T, C) and 4 (B, T, F) tensors and
       (T, T) attention scratch per head; the logits; doubled for gradients */
    double floats = N * (D + 4 * C + cfg->n_layer * (16 * C + 4 * F)) +
                    cfg->n_layer * 4.0 * B * cfg->n_head * T * T + 4.0 * B * cfg->n_classes;
    return (training ? 2 : 1) * floats * sizeof(float);
}

size_t mt_vit_arena_bytes(const mt_vit_config *cfg, int B, bool training) {
    double bytes = 3 * mt_vit_activation_bytes(cfg, B, training) + (double)((size_t)64 << 20);
    return bytes < (double)SIZE_MAX / 2 ? (size_t)bytes : SIZE_MAX / 2;
}

/* ---- forward ------------------------------------------------------------------------------------ */

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

mt_tensor *mt_vit_forward(mt_ctx *c, mt_vit *m, const float *images, int B) {
    const mt_vit_config *g = &m->cfg;
    const mt_vit_layout *L = m->layout;
    mt_params *P = &m->P;
    int C = g->n_embd, p = g->patch, np = (g->image_h / p) * (g->image_w / p), T = mt_vit_tokens(g);
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
    x = mt_add(c, x, mt_reshape(c, mt_embedding(c, &P->t[L->pos_emb], pos, B * T), 3,
                                (int[]){B, T, C}));
    if (g->dropout > 0) x = mt_dropout(c, x, g->dropout);
    for (int i = 0; i < g->n_layer; i++) x = mt_block_forward(c, &L->block, P, &L->blocks[i], x);
    if (L->final_norm_on) x = mt_norm_tokens(c, &g->norm, P, &L->final_norm, x);
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

mt_tensor *mt_vit_loss(mt_ctx *c, mt_vit *m, const float *images, const int *labels, int B) {
    return mt_cross_entropy(c, mt_vit_forward(c, m, images, B), labels, -1);
}
