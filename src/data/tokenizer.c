/* The tokenizers' common parts (encode, decode, JSON) and the byte, character and ids tokenizers.
 * Characters are Unicode code points of UTF-8 text; bpe.c holds the byte-pair encoding. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

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

/* The UTF-8 bytes of every char id into t->bytes and t->off. */
static mt_status char_bytes(mt_tokenizer *t, mt_err *err) {
    t->bytes = malloc((size_t)t->n_vocab * 4);
    t->off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->off);
    if (!t->bytes || !t->off) {
        mt_tok_free(t);
        return mt_errorf(err, MT_ENOMEM, "out of memory building the char vocabulary");
    }
    t->off[0] = 0;
    for (int i = 0; i < t->n_vocab; i++)
        t->off[i + 1] = t->off[i] + (uint32_t)utf8_put(t->chars[i], t->bytes + t->off[i]);
    return MT_OK;
}

mt_status mt_tok_init_ids(mt_tokenizer *t, int n_vocab, mt_err *err) {
    memset(t, 0, sizeof *t);
    if (n_vocab < 1 || n_vocab > 65536)
        return mt_errorf(err, MT_EFORMAT, "tokenizer: ids needs 'n_vocab' from 1 to 65536, not %d",
                         n_vocab);
    t->kind = MT_TOK_IDS;
    t->n_vocab = n_vocab;
    /* id i decodes to "<i>": at most 7 bytes ("<65535>") each */
    t->off = malloc(((size_t)n_vocab + 1) * sizeof *t->off);
    t->bytes = malloc((size_t)n_vocab * 8);
    if (!t->off || !t->bytes) {
        mt_tok_free(t);
        return mt_errorf(err, MT_ENOMEM, "tokenizer: out of memory for %d ids", n_vocab);
    }
    t->off[0] = 0;
    for (int i = 0; i < n_vocab; i++)
        t->off[i + 1] = t->off[i] + (uint32_t)sprintf(t->bytes + t->off[i], "<%d>", i);
    return MT_OK;
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
        if (!mt_utf8_next(s, len, &i, &cp)) {
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
    return char_bytes(t, err);
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
    if (t->kind == MT_TOK_BPE || t->kind == MT_TOK_GPT2) {
        mt_bpe_encode(t, s, len, ids, n);
        return MT_OK;
    }
    if (t->kind == MT_TOK_SP) {
        mt_sp_encode(t, text, len, false, false, ids, n);
        return MT_OK;
    }
    if (t->kind == MT_TOK_IDS)
        return mt_errorf(err, MT_EINVAL,
                         "the ids tokenizer cannot encode text: its %d ids came from token shards "
                         "without a tokenizer (llm.c, nanoGPT); give it a text tokenizer "
                         "(meta.json beside the shards, docs/data.md)",
                         t->n_vocab);
    uint32_t cp;
    for (size_t i = 0; i < len;) {
        size_t at = i;
        if (!mt_utf8_next(s, len, &i, &cp)) return bad_utf8(err, at, s[at]);
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

/* The 256 bytes, each byte token's text. */
static const unsigned char BYTES[256] = {
#define B4(i) i, i + 1, i + 2, i + 3
#define B16(i) B4(i), B4(i + 4), B4(i + 8), B4(i + 12)
    B16(0),   B16(16),  B16(32),  B16(48),  B16(64),  B16(80),  B16(96),  B16(112),
    B16(128), B16(144), B16(160), B16(176), B16(192), B16(208), B16(224), B16(240),
#undef B16
#undef B4
};

const char *mt_tok_decode(const mt_tokenizer *t, int id, int *len) {
    MT_ASSERT(id >= 0 && id < t->n_vocab, "decode: id %d outside [0, %d)", id, t->n_vocab);
    if (t->kind == MT_TOK_BYTE) {
        *len = 1;
        return (const char *)BYTES + id;
    }
    *len = (int)(t->off[id + 1] - t->off[id]);
    return t->bytes + t->off[id];
}

const char *mt_tok_decode_after(const mt_tokenizer *t, int prev, int id, int *len) {
    const char *b = mt_tok_decode(t, id, len);
    if (t->kind == MT_TOK_SP && prev == MT_SP_BOS && b[0] == ' ') {
        --*len;
        return b + 1;
    }
    return b;
}

static const mt_enum_item TOKENIZERS[] = {
    [MT_TOK_BYTE] = {.name = "byte", .help = "every byte a token"},
    [MT_TOK_CHAR] = {.name = "char", .help = "every character of the text a token"},
    [MT_TOK_BPE] = {.name = "bpe",
                    .help = "byte-level BPE learnt from the training part, --vocab-size tokens"},
    [MT_TOK_IDS] = {.name = "ids", .help = "token shards' ids without a tokenizer (no text)"},
    [MT_TOK_SP] = {.name = "sp",
                   .help = "llama2.c's tokenizer.bin (--tokenizer-file), encoded as run.c does, or "
                           "a Llama's tokenizer.json, as Hugging Face's tokenizers does"},
    [MT_TOK_GPT2] = {.name = "gpt2",
                     .help = "GPT-2's BPE (--tokenizer-file: encoder.json, vocab.bpe), encoded as "
                             "its encoder.py does"},
};
const mt_enum MT_TOKENIZERS = MT_ENUM("tokenizer", TOKENIZERS);

char *mt_tok_to_json(const mt_tokenizer *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", mt_enum_name(&MT_TOKENIZERS, t->kind));
    if (t->kind == MT_TOK_CHAR) {
        cJSON *a = cJSON_AddArrayToObject(o, "chars");
        for (int i = 0; i < t->n_vocab; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(t->chars[i]));
    }
    if (t->kind == MT_TOK_IDS) cJSON_AddNumberToObject(o, "n_vocab", t->n_vocab);
    if (t->kind == MT_TOK_BPE || t->kind == MT_TOK_GPT2) {
        cJSON *a = cJSON_AddArrayToObject(o, "merges");
        for (int k = 0; k < t->n_merges; k++) {
            const int pair[2] = {t->merges[k][0], t->merges[k][1]};
            cJSON_AddItemToArray(a, cJSON_CreateIntArray(pair, 2));
        }
    }
    if (t->kind == MT_TOK_GPT2) {
        cJSON *a = cJSON_AddArrayToObject(o, "special");
        for (int id = 256 + t->n_merges; id < t->n_vocab; id++) {
            char text[MT_TOK_MAX_BYTES + 1];
            int len;
            const char *b = mt_tok_decode(t, id, &len); /* len set before memcpy reads it */
            memcpy(text, b, (size_t)len);
            text[len] = 0;
            cJSON_AddItemToArray(a, cJSON_CreateString(text));
        }
    }
    if (t->kind == MT_TOK_SP) mt_sp_to_json(t, o);
    if (t->chat) cJSON_AddStringToObject(o, "chat_template", MT_CHAT_TEMPLATE);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(s, "tokenizer: out of memory writing JSON");
    return s;
}

/* The merges [[left, right], ...] of a bpe or gpt2 tokenizer's JSON into t (id_byte: as
   mt_bpe_from_merges). */
static mt_status bpe_from_json(const cJSON *a, const uint8_t *id_byte, mt_tokenizer *t,
                               mt_err *err) {
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n > MT_BPE_MAX_VOCAB - 256)
        return mt_errorf(err, MT_EFORMAT, "tokenizer: bpe needs 'merges', 0 to %d pairs of ids",
                         MT_BPE_MAX_VOCAB - 256);
    uint16_t(*merges)[2] = malloc(((size_t)n + 1) * sizeof *merges);
    MT_ASSERT(merges, "tokenizer: out of memory");
    int k = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, a) {
        const cJSON *l = cJSON_GetArrayItem(m, 0), *r = cJSON_GetArrayItem(m, 1);
        double dl = cJSON_IsNumber(l) ? l->valuedouble : -1,
               dr = cJSON_IsNumber(r) ? r->valuedouble : -1;
        if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || dl < 0 || dr < 0 || dl >= 256 + k ||
            dr >= 256 + k || dl != (int)dl || dr != (int)dr) {
            free(merges);
            return mt_errorf(err, MT_EFORMAT,
                             "tokenizer: merges[%d] is not a pair of ids below its own, %d", k,
                             256 + k);
        }
        merges[k][0] = (uint16_t)dl;
        merges[k][1] = (uint16_t)dr;
        k++;
    }
    mt_err e;
    mt_status s = mt_bpe_from_merges(t, id_byte, merges, n, &e);
    return s == MT_OK ? MT_OK : mt_errorf(err, s, "tokenizer: %s", e.msg);
}

/* A gpt2 tokenizer's merges (GPT-2's ids) and special tokens ["<|endoftext|>"] into t. */
static mt_status gpt2_from_json(const cJSON *o, mt_tokenizer *t, mt_err *err) {
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "special"), *v;
    int n = cJSON_GetArraySize(sp), k = 0;
    if (!cJSON_IsArray(sp) || n > 64)
        return mt_errorf(err, MT_EFORMAT, "tokenizer: gpt2 needs 'special', 0 to 64 strings");
    const char *text[64];
    cJSON_ArrayForEach(v, sp) {
        if (!cJSON_IsString(v))
            return mt_errorf(err, MT_EFORMAT, "tokenizer: gpt2's special[%d] is not a string", k);
        text[k++] = v->valuestring;
    }
    uint8_t id_byte[256];
    mt_gpt2_byte_order(id_byte);
    mt_status s = bpe_from_json(cJSON_GetObjectItemCaseSensitive(o, "merges"), id_byte, t, err);
    return s == MT_OK ? mt_gpt2_add_special(t, text, n, err) : s;
}

mt_status mt_tok_from_json(const char *json, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    cJSON *o = cJSON_Parse(json);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    mt_status s = MT_OK;
    if (!cJSON_IsString(type)) {
        s = mt_errorf(err, MT_EFORMAT,
                      "tokenizer: expected {\"type\": \"byte\", \"char\", \"bpe\", \"ids\", "
                      "\"sp\" or \"gpt2\", ...}");
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
        s = char_bytes(t, err);
    } else if (strcmp(type->valuestring, "bpe") == 0) {
        s = bpe_from_json(cJSON_GetObjectItemCaseSensitive(o, "merges"), NULL, t, err);
    } else if (strcmp(type->valuestring, "ids") == 0) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "n_vocab");
        double v = cJSON_IsNumber(n) ? n->valuedouble : 0;
        s = mt_tok_init_ids(t, v >= 1 && v <= 65536 && v == (int)v ? (int)v : 0, err);
    } else if (strcmp(type->valuestring, "sp") == 0) {
        s = mt_sp_from_json(o, t, err);
    } else if (strcmp(type->valuestring, "gpt2") == 0) {
        s = gpt2_from_json(o, t, err);
    } else {
        s = mt_errorf(err, MT_EFORMAT,
                      "tokenizer: unknown type '%s' (byte, char, bpe, ids, sp or gpt2)",
                      type->valuestring);
    }
    const cJSON *chat = cJSON_GetObjectItemCaseSensitive(o, "chat_template");
    if (s == MT_OK && chat &&
        !(cJSON_IsString(chat) && !strcmp(chat->valuestring, MT_CHAT_TEMPLATE))) {
        mt_tok_free(t);
        s = mt_errorf(err, MT_EFORMAT, "tokenizer: a chat template mt does not know (its own: %s)",
                      MT_CHAT_TEMPLATE);
    }
    t->chat = s == MT_OK && chat;
out:
    cJSON_Delete(o);
    return s;
}

void mt_tok_free(mt_tokenizer *t) {
    free(t->chars);
    free(t->merges);
    free(t->bytes);
    free(t->off);
    mt_bpe_index_free(t->index);
    mt_sp_free(t->sp);
    memset(t, 0, sizeof *t);
}
