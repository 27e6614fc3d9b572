/* ./infer --info: a checkpoint's description. */
#include <stdlib.h>

#include "../ckpt/ckpt.h"
#include "../models/model.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"
#include "app.h"

mt_status mt_checkpoint_describe(const char *path, FILE *out, mt_err *err) {
    mt_ckpt_state state;
    char *options, line[1024];
    mt_model *m;
    mt_status s = mt_ckpt_load(path, &m, &state, &options, err);
    if (s != MT_OK) return s;
    char *config = mt_model_config_json(m);
    m->type->meta_describe(m, line, sizeof line);
    fprintf(out,
            "checkpoint  %s\nmodel       %s\nconfig      %s\n%-11s %s\n"
            "parameters  %zu (%.3fM) in %d tensors\nsteps       %ld\n",
            path, m->type->name, config, m->type->meta_key, line, mt_params_count_trainable(m->P),
            mt_params_count_trainable(m->P) / 1e6, m->P->n, state.step);
    if (*options) fprintf(out, "options (./train --resume starts from these):\n%s", options);
    free(config);
    free(options);
    mt_model_free(m);
    return MT_OK;
}
