/* The ViT's parts that its type (vit_type.c) names. */
#ifndef MT_VIT_INTERNAL_H
#define MT_VIT_INTERNAL_H

#include "models.h"

/* The type's build_table and activation_bytes (model.h): the model's parameter table into m (an
   mt_vit), not allocated; activation bytes of a step of B images. */
mt_status mt_vit_build_table(void *m, const void *cfg, mt_err *err);
double mt_vit_activation_bytes(const void *cfg, int B, bool training);

#endif
