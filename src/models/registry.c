/* The model types ./train and ./infer know: one line each. The first is the default of --model
   and the type of checkpoints written before models were named. */
#include <stdio.h>
#include <string.h>

#include "models.h"

const mt_model_type *const mt_model_types[] = {
    &mt_gpt_type,
    &mt_vit_type,
    &mt_encdec_type,
    NULL,
};

mt_status mt_model_type_find(const char *name, const mt_model_type **type, mt_err *err) {
    char names[256] = "";
    for (int i = 0; mt_model_types[i]; i++) {
        if (strcmp(mt_model_types[i]->name, name) == 0) return *type = mt_model_types[i], MT_OK;
        size_t at = strlen(names);
        snprintf(names + at, sizeof names - at, "%s%s (%s)", i ? ", " : "", mt_model_types[i]->name,
                 mt_model_types[i]->about);
    }
    return mt_errorf(err, MT_EINVAL, "unknown model '%s' (accepted: %s)", name, names);
}
