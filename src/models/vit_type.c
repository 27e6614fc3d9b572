/* The ViT's type (model.h): its field table, what the trainer, the checkpoints and ./infer call
   through it, and its public constructor. Above vit.c (the model), which knows nothing of this
   file. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit_internal.h"

/* ---- config fields ------------------------------------------------------------------------- */

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(mt_vit_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(image_h, INT, "image_h", NULL, .flags = MT_FIELD_NO_FLAG),
    F(image_w, INT, "image_w", NULL, .flags = MT_FIELD_NO_FLAG),
    F(channels, INT, "channels", NULL, .flags = MT_FIELD_NO_FLAG),
    F(patch, INT, "patch", "patch size (divides the image size)", .range = "1.."),
    F(n_classes, INT, "n_classes", NULL, .flags = MT_FIELD_NO_FLAG),
    F(pool, ENUM, "pool", "what the head reads", .of = &MT_VIT_POOLS),
    F(emb_scale, BOOL, "emb_scale",
      "a learned scalar emb_scale on the tokens (patches + positions), init sqrt(n-embd), as "
      "DyT's and Derf's LLaMA setting"),
    F(stack, TABLE, "stack", NULL, .of = &MT_STACK_FIELDS),
};
#undef F
static const mt_fields VIT_FIELDS = MT_FIELDS_OF(FIELDS);

/* ---- build --------------------------------------------------------------------------------- */

mt_status mt_vit_build(mt_vit *m, const mt_vit_config *cfg, mt_err *err) {
    mt_status st = mt_vit_build_table(m, cfg, err);
    m->base.type = &mt_vit_type;
    if (st == MT_OK) st = mt_params_alloc(&m->P, err);
    if (st != MT_OK) mt_vit_free(m);
    return st;
}

mt_vit *mt_vit_of(mt_model *m) { return m && m->type == &mt_vit_type ? (mt_vit *)m : NULL; }

/* ---- the model on a batch -------------------------------------------------------------------- */

static mt_tensor *loss(mt_ctx *c, const mt_model *m, mt_params *P, const mt_batch *b,
                       mt_ce_opts ce) {
    MT_ASSERT(b->kind == MT_INPUT_IMAGES, "vit: a batch of another kind of input");
    return mt_vit_loss(c, (const mt_vit *)m, P, b->images.images, b->images.labels, b->B, ce);
}

/* ---- the type -------------------------------------------------------------------------------- */

static void config_default(void *cfg) { *(mt_vit_config *)cfg = mt_vit_config_default(); }
static mt_status config_validate(void *cfg, mt_err *err) {
    return mt_vit_config_validate(cfg, err);
}

static void config_describe(const void *cfgp, char *buf, size_t len) {
    const mt_vit_config *v = cfgp;
    const mt_stack_config *s = &v->stack;
    snprintf(buf, len,
             "vit, patch %d (%d tokens, pool %s), %d layers, %d heads, n_embd %d, n_ff "
             "%d, norm %s, placement %s, init %s",
             v->patch, mt_vit_tokens(v), mt_enum_name(&MT_VIT_POOLS, v->pool), s->n_layer,
             s->n_head, s->n_embd, s->n_ff, mt_enum_name(&MT_NORMS, s->norm.kind),
             mt_enum_name(&MT_PLACEMENTS, s->placement), mt_enum_name(&MT_INIT_SCHEMES, s->init));
}

static void type_free(mt_model *m) { mt_vit_free((mt_vit *)m); }

static char *meta_to_json(const mt_model *m) {
    return mt_images_meta_to_json(&((const mt_vit *)m)->meta);
}

static mt_status meta_from_json(mt_model *mp, const char *json, mt_err *err) {
    mt_vit *m = (mt_vit *)mp;
    const mt_vit_config *g = &m->cfg;
    mt_images meta;
    mt_status s = mt_images_meta_from_json(json, &meta, err);
    if (s != MT_OK) return s;
    if (meta.H != g->image_h || meta.W != g->image_w || meta.C != g->channels ||
        meta.n_classes != g->n_classes) {
        s = mt_errorf(err, MT_EFORMAT,
                      "the model takes %dx%dx%d images into %d classes, the "
                      "image metadata says %dx%dx%d and %d",
                      g->image_h, g->image_w, g->channels, g->n_classes, meta.H, meta.W, meta.C,
                      meta.n_classes);
        mt_images_free(&meta);
        return s;
    }
    mt_images_free(&m->meta);
    m->meta = meta;
    return MT_OK;
}

static void meta_describe(const mt_model *m, char *buf, size_t len) {
    char *json = meta_to_json(m);
    snprintf(buf, len, "%s", json);
    free(json);
}

/* ---- what ./infer does with it --------------------------------------------------------------- */

static const mt_images *classify_images(const mt_model *m) { return &((const mt_vit *)m)->meta; }

static mt_tensor *classify_logits(mt_ctx *c, const mt_model *m, const float *images, int B) {
    return mt_vit_forward(c, (const mt_vit *)m, m->P, images, B);
}

static const mt_classify_ops CLASSIFY_OPS = {.images = classify_images, .logits = classify_logits};

static int row_tokens(const void *cfg) { return mt_vit_tokens(cfg); }

static const mt_input INPUT = {.kind = MT_INPUT_IMAGES,
                               .image_h = offsetof(mt_vit_config, image_h),
                               .image_w = offsetof(mt_vit_config, image_w),
                               .channels = offsetof(mt_vit_config, channels),
                               .n_classes = offsetof(mt_vit_config, n_classes),
                               .row_tokens = row_tokens,
                               .more_tokens = "a smaller --patch, or --pool cls"};

const mt_model_type mt_vit_type = {
    .name = "vit",
    .about = "an image classifier",
    .input = &INPUT,
    .meta_key = "images",
    .config_size = sizeof(mt_vit_config),
    .fields = &VIT_FIELDS,
    .config_default = config_default,
    .config_validate = config_validate,
    .config_describe = config_describe,
    .activation_bytes = mt_vit_activation_bytes,
    .size = sizeof(mt_vit),
    .build_table = mt_vit_build_table,
    .free = type_free,
    .meta_to_json = meta_to_json,
    .meta_from_json = meta_from_json,
    .meta_describe = meta_describe,
    .loss = loss,
    .classify = &CLASSIFY_OPS,
};
