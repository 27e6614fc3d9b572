/* mt: everything the programs and tests use. */
#ifndef MT_H
#define MT_H

#include "tensor/base.h"
#include "tensor/gemm.h"
#include "tensor/params.h"
#include "tensor/profile.h"
#include "tensor/tensor.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "models/models.h"
#include "data/data.h"
#include "io/io.h"
#include "tasks/task.h"
#include "ckpt/ckpt.h"
#include "train/train.h"
#include "diag/diag.h"
#include "train/options.h"
#include "app/app.h"

#endif
