/* UTF-8 decoding, shared by the char tokenizer (tokenizer.c) and GPT-2's pre-tokenizer. */
#include "data.h"

bool mt_utf8_next(const unsigned char *s, size_t len, size_t *i, uint32_t *cp) {
    static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    unsigned char b = s[*i];
    int extra = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
    if (extra < 0 || *i + (size_t)extra >= len) return false;
    uint32_t c = extra ? b & (0x3f >> extra) : b;
    for (int k = 1; k <= extra; k++) {
        if ((s[*i + k] & 0xc0) != 0x80) return false;
        c = c << 6 | (s[*i + k] & 0x3f);
    }
    if (c < min_cp[extra] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return false;
    *cp = c;
    *i += (size_t)extra + 1;
    return true;
}
