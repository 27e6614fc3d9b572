/* The model types ./train and ./infer know: one line each. The first is the default of --model
   and the type of checkpoints written before models were named. */
#include "models.h"

const mt_model_type *const mt_model_types[] = {
    &mt_gpt_type,
    &mt_vit_type,
    &mt_encdec_type,
    NULL,
};
