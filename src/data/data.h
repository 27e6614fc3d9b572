/* mt data: tokenizers, text and token datasets, image datasets, the batch sampler. */
#ifndef MT_DATA_H
#define MT_DATA_H

#include "../tensor/tensor.h"

#endif
