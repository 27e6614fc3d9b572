/* libFuzzer target: the safetensors parser must reject or accept any bytes without crashing or
   reading out of bounds (run under ASan + UBSan by `make fuzz`). */
#include <stdint.h>

#include "../../src/io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mt_safetensors st;
    mt_err err;
    if (mt_st_parse("fuzz", data, size, &st, &err) != MT_OK) return 0;
    volatile float sink = 0; /* touch every accepted element: offsets must be in bounds */
    for (int i = 0; i < st.n; i++)
        for (size_t j = 0; j < st.t[i].n; j++) sink += st.t[i].data[j];
    for (int i = 0; i < st.n_meta; i++) sink += (float)st.meta_val[i][0];
    mt_st_free(&st);
    return 0;
}
