/* mt nn: layers as fused ops over the tensor core.
 * Dimension letters: B batch, T time, C channels, NH heads, HS head size, F FFN width,
 * N rows (B*T), L length, H W image height and width, G groups. */
#ifndef MT_NN_H
#define MT_NN_H

#include "../tensor/tensor.h"

/* ---- normalization (norm.c and friends; issue 3) --------------------------------------------- */

/* ---- linear, embedding, attention, FFN, residual blocks (issue 4) ----------------------------- */

#endif
