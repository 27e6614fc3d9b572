/* Byte and character tokenizers. Characters are Unicode code points of UTF-8 text. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

/* Decodes the UTF-8 character at s[*i] (len bytes in s) into *cp and advances *i.
   Rejects stray continuation bytes, truncated sequences, overlong forms, surrogates and
   code points above U+10FFFF. */
static bool utf8_next(const unsigned char *s, size_t len, size_t *i, uint32_t *cp) {
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

static int utf8_put(uint32_t c, char out[4]) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3f));
    out[2] = (char)(0x80 | (c >> 6 & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

static mt_status bad_utf8(mt_err *err, size_t at, unsigned char b) {
    return mt_errorf(err, MT_EFORMAT,
                     "invalid UTF-8 at byte %zu (0x%02x): the char tokenizer reads UTF-8 text; "
                     "--tokenizer byte reads anything",
                     at, b);
}

void mt_tok_init_byte(mt_tokenizer *t) {
    memset(t, 0, sizeof *t);
    t->kind = MT_TOK_BYTE;
    t->n_vocab = 256;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

mt_status mt_tok_build_char(mt_tokenizer *t, const char *text, size_t len, mt_err *err) {
    memset(t, 0, sizeof *t);
    t->kind = MT_TOK_CHAR;
    const unsigned char *s = (const unsigned char *)text;
    /* ASCII and Latin-1 in a table, everything else collected then sorted and deduplicated */
    bool seen[256] = {false};
    size_t n_other = 0, cap = 0;
    uint32_t *other = NULL, cp;
    for (size_t i = 0; i < len;) {
        size_t at = i;
        if (!utf8_next(s, len, &i, &cp)) {
            free(other);
            return bad_utf8(err, at, s[at]);
        }
        if (cp < 256) {
            seen[cp] = true;
            continue;
        }
        if (n_other == cap) {
            cap = cap ? 2 * cap : 256;
            uint32_t *grown = realloc(other, cap * sizeof *other);
            if (!grown) {
                free(other);
                return mt_errorf(err, MT_ENOMEM, "out of memory building the char vocabulary");
            }
            other = grown;
        }
        other[n_other++] = cp;
    }
    if (n_other) qsort(other, n_other, sizeof *other, cmp_u32);
    size_t n = 0;
    for (int c = 0; c < 256; c++) n += seen[c];
    for (size_t i = 0; i < n_other; i++) n += i == 0 || other[i] != other[i - 1];
    if (n == 0) {
        free(other);
        return mt_errorf(err, MT_EINVAL, "the char tokenizer needs a non-empty text");
    }
    if (n > 65536) {
        free(other);
        return mt_errorf(err, MT_EINVAL,
                         "the text has %zu distinct characters; token ids are 16-bit (65536 at "
                         "most): use --tokenizer byte",
                         n);
    }
    t->chars = malloc(n * sizeof *t->chars);
    if (!t->chars) {
        free(other);
        return mt_errorf(err, MT_ENOMEM, "out of memory building the char vocabulary");
    }
    for (int c = 0; c < 256; c++)
        if (seen[c]) t->chars[t->n_vocab++] = (uint32_t)c;
    for (size_t i = 0; i < n_other; i++)
        if (i == 0 || other[i] != other[i - 1]) t->chars[t->n_vocab++] = other[i];
    free(other);
    return MT_OK;
}

/* The id of code point c, or -1. */
static int char_id(const mt_tokenizer *t, uint32_t c) {
    int lo = 0, hi = t->n_vocab - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (t->chars[mid] == c) return mid;
        if (t->chars[mid] < c) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

mt_status mt_tok_encode(const mt_tokenizer *t, const char *text, size_t len, uint16_t *ids,
                        size_t *n, mt_err *err) {
    const unsigned char *s = (const unsigned char *)text;
    *n = 0;
    if (t->kind == MT_TOK_BYTE) {
        for (size_t i = 0; i < len; i++) ids[i] = s[i];
        *n = len;
        return MT_OK;
    }
    uint32_t cp;
    for (size_t i = 0; i < len;) {
        size_t at = i;
        if (!utf8_next(s, len, &i, &cp)) return bad_utf8(err, at, s[at]);
        int id = char_id(t, cp);
        if (id < 0) {
            char u[5] = {0};
            utf8_put(cp, u);
            return mt_errorf(err, MT_EINVAL,
                             "character '%s' (U+%04X) at byte %zu is not in the char tokenizer's "
                             "vocabulary of %d characters (built from the training text)",
                             cp >= 32 && cp != 127 ? u : "?", (unsigned)cp, at, t->n_vocab);
        }
        ids[(*n)++] = (uint16_t)id;
    }
    return MT_OK;
}

int mt_tok_decode(const mt_tokenizer *t, int id, char out[4]) {
    MT_ASSERT(id >= 0 && id < t->n_vocab, "decode: id %d outside [0, %d)", id, t->n_vocab);
    if (t->kind == MT_TOK_BYTE) {
        out[0] = (char)id;
        return 1;
    }
    return utf8_put(t->chars[id], out);
}

static const mt_enum_item TOKENIZERS[] = {
    [MT_TOK_BYTE] = {"byte", "every byte a token"},
    [MT_TOK_CHAR] = {"char", "every character of the text a token"},
};
const mt_enum MT_TOKENIZERS = MT_ENUM("tokenizer", TOKENIZERS);

char *mt_tok_to_json(const mt_tokenizer *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", mt_enum_name(&MT_TOKENIZERS, t->kind));
    if (t->kind == MT_TOK_CHAR) {
        cJSON *a = cJSON_AddArrayToObject(o, "chars");
        for (int i = 0; i < t->n_vocab; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(t->chars[i]));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(s, "tokenizer: out of memory writing JSON");
    return s;
}

mt_status mt_tok_from_json(const char *json, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    cJSON *o = cJSON_Parse(json);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    mt_status s = MT_OK;
    if (!cJSON_IsString(type)) {
        s = mt_errorf(err, MT_EFORMAT, "tokenizer: expected {\"type\": \"byte\" or \"char\", ...}");
    } else if (strcmp(type->valuestring, "byte") == 0) {
        mt_tok_init_byte(t);
    } else if (strcmp(type->valuestring, "char") == 0) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "chars");
        int n = cJSON_GetArraySize(a);
        if (!cJSON_IsArray(a) || n < 1 || n > 65536) {
            s = mt_errorf(err, MT_EFORMAT, "tokenizer: char needs 'chars', 1 to 65536 code points");
            goto out;
        }
        t->kind = MT_TOK_CHAR;
        if (!(t->chars = malloc((size_t)n * sizeof *t->chars))) {
            s = mt_errorf(err, MT_ENOMEM, "tokenizer: out of memory for %d code points", n);
            goto out;
        }
        const cJSON *v;
        cJSON_ArrayForEach(v, a) {
            double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
            if (d < 0 || d > 0x10ffff || d != (double)(uint32_t)d ||
                (t->n_vocab && (uint32_t)d <= t->chars[t->n_vocab - 1])) {
                s = mt_errorf(err, MT_EFORMAT,
                              "tokenizer: chars[%d] is not a code point above the previous one",
                              t->n_vocab);
                mt_tok_free(t);
                goto out;
            }
            t->chars[t->n_vocab++] = (uint32_t)d;
        }
    } else {
        s = mt_errorf(err, MT_EFORMAT, "tokenizer: unknown type '%s' (byte or char)",
                      type->valuestring);
    }
out:
    cJSON_Delete(o);
    return s;
}

void mt_tok_free(mt_tokenizer *t) {
    free(t->chars);
    memset(t, 0, sizeof *t);
}
