/* GGUF's shared pieces (gguf.h): the names of ggml's tensor types, and halves. */
#include <string.h>

#include "gguf.h"

static const char *const GGML_TYPES[] = {
    [0] = "f32",     [1] = "f16",      [2] = "q4_0",   [3] = "q4_1",    [6] = "q5_0",
    [7] = "q5_1",    [8] = "q8_0",     [9] = "q8_1",   [10] = "q2_K",   [11] = "q3_K",
    [12] = "q4_K",   [13] = "q5_K",    [14] = "q6_K",  [15] = "q8_K",   [16] = "iq2_xxs",
    [17] = "iq2_xs", [18] = "iq3_xxs", [19] = "iq1_s", [20] = "iq4_nl", [21] = "iq3_s",
    [22] = "iq2_s",  [23] = "iq4_xs",  [24] = "i8",    [25] = "i16",    [26] = "i32",
    [27] = "i64",    [28] = "f64",     [29] = "iq1_m", [30] = "bf16",   [34] = "tq1_0",
    [35] = "tq2_0",  [39] = "mxfp4",
};

const char *mt_ggml_type_name(uint32_t type) {
    return type < sizeof GGML_TYPES / sizeof *GGML_TYPES ? GGML_TYPES[type] : NULL;
}

uint16_t mt_half_from_float(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff, h, rem, tie;
    int E = (int)e - 127 + 15; /* the half's biased exponent */
    if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0)); /* inf, NaN */
    if (E >= 31) return (uint16_t)(sign | 0x7c00);
    if (E <= 0) { /* a subnormal half h 2^-24 = 1.m 2^(e-127): h = 1m >> (14 - E) */
        if (E < -10) return (uint16_t)sign;
        uint32_t M = m | 0x800000, shift = (uint32_t)(14 - E);
        h = M >> shift, rem = M & ((1u << shift) - 1), tie = 1u << (shift - 1);
    } else h = ((uint32_t)E << 10) | (m >> 13), rem = m & 0x1fff, tie = 0x1000;
    if (rem > tie || (rem == tie && (h & 1))) h++; /* a carry moves into the exponent */
    return (uint16_t)(sign | h);
}

/* sign, 5 exponent bits (bias 15), 10 mantissa bits; exponent 0: subnormal m 2^-24 */
float mt_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0x1f) x = sign | 0x7f800000 | (m << 13); /* inf, NaN */
    else if (e) x = sign | ((e - 15 + 127) << 23) | (m << 13);
    else if (!m) x = sign;
    else { /* normalise: shift m up until its top bit is the implicit one */ e = 127 - 15 + 1;
        while (!(m & 0x400)) m <<= 1, e--;
        x = sign | (e << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}
