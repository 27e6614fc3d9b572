/* mt optim: SGD, Adam, AdamW over the flat parameter buffer, gradient clipping, and learning-rate
 * schedules as pure functions of the step. */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include "../tensor/tensor.h"

#endif
