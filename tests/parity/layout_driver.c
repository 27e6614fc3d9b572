/* Parity driver for every model's parameter layout (harness.py layout), one model per line of
   stdin, "MODEL OUT CONFIG" (a model type's name: gpt, vit, encdec; a path; its config's JSON):
   OUT.safetensors gets the model's parameters and buffers as mt writes them
   (mt_ckpt_save_params: names, shapes, table order), with the metadata "roles", a JSON object
   name -> "matrix", "bias", "norm", "embedding", "buffer" or "head". Answers each line on stdout
   with "ok" or "error: why" (a config mt refuses). One process serves a whole parity test. */
#include <stdlib.h>
#include <string.h>

#include "../check.h"

static mt_status write_layout(const char *model, const char *out, const char *json, mt_err *err) {
    static const char *const ROLES[] =
        {[MT_ROLE_MATRIX] = "matrix",       [MT_ROLE_BIAS] = "bias",     [MT_ROLE_NORM] = "norm",
         [MT_ROLE_EMBEDDING] = "embedding", [MT_ROLE_BUFFER] = "buffer", [MT_ROLE_HEAD] = "head"};
    const mt_model_type *type = NULL;
    if (mt_model_type_find(model, &type, err) != MT_OK) return MT_EINVAL;
    mt_model *m = parity_config_model(type, json, NULL, err);
    if (!m) return MT_EINVAL;
    char *roles = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&roles, &len);
    for (int i = 0; i < m->P->n; i++)
        fprintf(f, "%s\"%s\": \"%s\"", i ? ", " : "{", m->P->p[i].name, ROLES[m->P->p[i].role]);
    fprintf(f, "}");
    fclose(f);
    const char *key = "roles", *val = roles;
    mt_status st = mt_ckpt_save_params(out, m->P, 1, &key, &val, err);
    free(roles);
    mt_model_free(m);
    return st;
}

int main(void) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        line[strcspn(line, "\n")] = 0;
        char *out = strchr(line, ' '), *json = out ? strchr(out + 1, ' ') : NULL;
        mt_err err = {0};
        if (!json) snprintf(err.msg, sizeof err.msg, "expected 'MODEL OUT CONFIG'");
        else *out++ = 0, *json++ = 0;
        if (json && write_layout(line, out, json, &err) == MT_OK) printf("ok\n");
        else printf("error: %s\n", err.msg);
        fflush(stdout);
    }
    free(line);
    return 0;
}
