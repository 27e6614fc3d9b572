/* mt models: GPT (and the ViT) assembled from src/nn: config, parameter table, init, forward. */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "../nn/nn.h"

#endif
