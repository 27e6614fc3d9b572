/* libFuzzer target: the config-file parser, over a table with an option of every type, must
   accept or reject any text without crashing, and leave accepted values in range. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int n_layer = 4, norm = 0;
    float lr = 1e-3f;
    bool untie = false;
    char path[MT_OPT_STR_MAX] = "data/x.txt";
    static const mt_enum_item NORM_ITEMS[] = {{"ln", NULL}, {"rms", NULL}, {"prms", NULL},
                                              {"bn", NULL}, {"in", NULL}, {"gn", NULL},
                                              {"scale", NULL}, {"none", NULL}};
    static const mt_enum NORMS = MT_ENUM("norm", NORM_ITEMS);
    const mt_opt opts[] = {
        {"n-layer", MT_OPT_INT, &n_layer, NULL, "layers", 0, NULL},
        {"lr", MT_OPT_FLOAT, &lr, NULL, "learning rate", 0, NULL},
        {"data", MT_OPT_STR, path, NULL, "data file", 0, NULL},
        {"untie", MT_OPT_BOOL, &untie, NULL, "untie", 0, NULL},
        {"norm", MT_OPT_CHOICE, &norm, NULL, "norm", 0, &NORMS},
        {"resume", MT_OPT_BOOL, &untie, NULL, "flag only", MT_OPT_CLI, NULL},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    mt_err err;
    if (mt_opts_parse_ini(opts, n, text, "fuzz.ini", &err) == MT_OK) {
        if (norm < 0 || norm > 7 || !isfinite(lr) || strlen(path) >= MT_OPT_STR_MAX) abort();
        free(mt_opts_to_ini(opts, n));
    }
    free(mt_opts_help(opts, n));
    free(text);
    return 0;
}
