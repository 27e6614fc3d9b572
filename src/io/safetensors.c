/* safetensors reader and writer (F32), with cJSON for the header. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tensor/tensor.h"
#include "io.h"

#define ST_MAX_HEADER (100u << 20) /* as the reference implementation: 100 MB of JSON at most */

/* ---- checksums ----------------------------------------------------------------------------------
 * mt_st_save adds the metadata ST_CHECKSUM: one CRC-32C (8 hex digits, space-separated) per
 * metadata entry (its key, a NUL, its value), then one per tensor (its name, a NUL, its dims as
 * 32-bit ints, its data), in the header's order. mt_st_parse checks them when the key is there
 * (files of other writers, and mt's before it, have none) and keeps the key out of the metadata.
 * A flipped byte anywhere is then refused: in the JSON's syntax or a tensor's entry by the
 * parser and the model's checks, in a value or the data by its CRC. */
#define ST_CHECKSUM "mt_crc32c"

/* CRC-32C of buf, in hardware where the CPU has it (x86's SSE4.2, chosen at run time so that a
   build for the x86-64 baseline has it too; aarch64's CRC extension, part of -march=armv8-a+crc),
   else bitwise (reflected polynomial 0x82f63b78). crc: the previous value (0 to start). */
#if defined(__x86_64__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p,
                                                            size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = (uint32_t)_mm_crc32_u64(crc, w);
    }
    for (; n; n--) crc = _mm_crc32_u8(crc, *p++);
    return crc;
}
static bool crc32c_has_hw(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = __crc32cd(crc, w);
    }
    for (; n; n--) crc = __crc32cb(crc, *p++);
    return crc;
}
static bool crc32c_has_hw(void) { return true; }
#else
static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    (void)p, (void)n;
    return crc;
}
static bool crc32c_has_hw(void) { return false; }
#endif

static uint32_t crc32c(uint32_t crc, const void *buf, size_t n) {
    const unsigned char *p = buf;
    crc = ~crc;
    if (crc32c_has_hw()) return ~crc32c_hw(crc, p, n);
    for (; n; n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) crc = crc >> 1 ^ (0x82f63b78u & -(crc & 1));
    }
    return ~crc;
}

static uint32_t meta_crc(const char *key, const char *val) {
    return crc32c(crc32c(0, key, strlen(key) + 1), val, strlen(val));
}

static uint32_t tensor_crc(const char *name, int ndim, const int *shape, const float *data) {
    uint32_t crc = crc32c(0, name, strlen(name) + 1);
    for (int d = 0; d < ndim; d++) {
        int32_t dim = shape[d];
        crc = crc32c(crc, &dim, sizeof dim);
    }
    return crc32c(crc, data, mt_shape_numel(ndim, shape) * sizeof(float));
}

/* The checksum list: 8 hex digits per item, space-separated; *want = item i's. */
static bool list_item(const char *list, int i, uint32_t *want) {
    const char *p = list + 9 * (size_t)i;
    *want = 0;
    for (int k = 0; k < 8; k++) {
        int c = p[k], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        *want = *want << 4 | (uint32_t)v;
    }
    return true;
}

/* The item whose checksum in list differs, or a list that does not fit the items. */
static mt_status check_sums(const char *name, const mt_safetensors *st, const char *list,
                            mt_err *err) {
    int items = st->n_meta + st->n;
    uint32_t want;
    bool fits = strlen(list) == (items ? 9 * (size_t)items - 1 : 0);
    for (int i = 0; fits && i < items; i++) fits = list_item(list, i, &want);
    if (!fits)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: the metadata '" ST_CHECKSUM "' is not %d checksums of 8 hex digits "
                         "(one per metadata entry and tensor): the file is damaged",
                         name, items);
    for (int i = 0; i < items; i++) {
        list_item(list, i, &want);
        if (i < st->n_meta && meta_crc(st->meta_key[i], st->meta_val[i]) != want)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: the metadata '%s' does not match its checksum: the file is "
                             "damaged",
                             name, st->meta_key[i]);
        const mt_st_entry *e = i < st->n_meta ? NULL : &st->t[i - st->n_meta];
        if (e && tensor_crc(e->name, e->ndim, e->shape, e->data) != want)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: tensor '%s' does not match its checksum: the file is damaged",
                             name, e->name);
    }
    return MT_OK;
}

/* Without a checksum, a metadata key one byte off its name is its name damaged. */
static mt_status check_unsummed(const char *name, const mt_safetensors *st, mt_err *err) {
    for (int i = 0; i < st->n_meta; i++) {
        const char *k = st->meta_key[i], *want = ST_CHECKSUM;
        int diff = strlen(k) == strlen(want) ? 0 : 2;
        for (; *k && diff < 2; k++, want++) diff += *k != *want;
        if (diff == 1)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: the metadata key '%s' is the checksum's name '" ST_CHECKSUM
                             "' with a byte changed: the file is damaged",
                             name, st->meta_key[i]);
    }
    return MT_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* *sums: the checksum list, when the header has one. */
static mt_status parse_header(const char *path, const char *json, size_t data_len,
                              mt_safetensors *st, size_t (*spans)[2], char **sums, mt_err *err) {
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return mt_errorf(err, MT_EFORMAT, "%s: the safetensors header is not a JSON object", path);
    }
    mt_status s = MT_OK;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(item)) {
                s = mt_errorf(err, MT_EFORMAT, "%s: __metadata__ is not an object", path);
                break;
            }
            const cJSON *kv;
            cJSON_ArrayForEach(kv, item) {
                if (!cJSON_IsString(kv)) {
                    s = mt_errorf(err, MT_EFORMAT, "%s: metadata '%s' is not a string", path,
                                  kv->string);
                    goto done;
                }
                if (strcmp(kv->string, ST_CHECKSUM) == 0 && !*sums) {
                    if (!(*sums = strdup(kv->valuestring))) {
                        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for the metadata", path);
                        goto done;
                    }
                    continue;
                }
                st->meta_key[st->n_meta] = strdup(kv->string);
                st->meta_val[st->n_meta++] = strdup(kv->valuestring);
                if (!st->meta_key[st->n_meta - 1] || !st->meta_val[st->n_meta - 1]) {
                    s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for the metadata", path);
                    goto done;
                }
            }
            continue;
        }
        mt_st_entry *e = &st->t[st->n];
        if (strlen(item->string) >= sizeof e->name) {
            s = mt_errorf(err, MT_EFORMAT, "%s: tensor name '%.40s...' is too long", path,
                          item->string);
            break;
        }
        strcpy(e->name, item->string);
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
        if (!cJSON_IsObject(item) || !cJSON_IsString(dtype) || !cJSON_IsArray(shape) ||
            !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
            s = mt_errorf(err, MT_EFORMAT,
                          "%s: tensor '%s' needs dtype, shape and two data_offsets", path, e->name);
            break;
        }
        if (strcmp(dtype->valuestring, "F32") != 0) {
            s = mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' has dtype %s; mt reads F32 only", path,
                          e->name, dtype->valuestring);
            break;
        }
        e->ndim = cJSON_GetArraySize(shape);
        if (e->ndim > MT_MAX_DIMS) {
            s = mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' has %d dims, at most %d", path, e->name,
                          e->ndim, MT_MAX_DIMS);
            break;
        }
        e->n = 1;
        for (int d = 0; d < e->ndim; d++) {
            const cJSON *v = cJSON_GetArrayItem(shape, d);
            /* each dim a whole number, the product within the data section */
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0 ||
                v->valuedouble != (double)(int)v->valuedouble ||
                (v->valuedouble > 0 && (double)e->n * v->valuedouble > (double)data_len)) {
                s = mt_errorf(err, MT_EFORMAT,
                              "%s: tensor '%s' has a bad shape (whole numbers whose product "
                              "fits the %zu-byte data section)",
                              path, e->name, data_len);
                goto done;
            }
            e->shape[d] = (int)v->valuedouble;
            e->n *= (size_t)e->shape[d];
        }
        const cJSON *ob = cJSON_GetArrayItem(offs, 0), *oe = cJSON_GetArrayItem(offs, 1);
        double b = cJSON_IsNumber(ob) ? ob->valuedouble : -1;
        double en = cJSON_IsNumber(oe) ? oe->valuedouble : -1;
        if (b < 0 || en < b || en > (double)data_len || b != (double)(size_t)b ||
            en != (double)(size_t)en) {
            s = mt_errorf(err, MT_EFORMAT,
                          "%s: tensor '%s' has data_offsets outside the %zu-byte data section",
                          path, e->name, data_len);
            break;
        }
        spans[st->n][0] = (size_t)b;
        spans[st->n][1] = (size_t)en;
        if ((size_t)en - (size_t)b != e->n * sizeof(float) || (size_t)b % sizeof(float)) {
            s = mt_errorf(err, MT_EFORMAT,
                          "%s: tensor '%s' spans %zu bytes, its shape needs %zu (aligned to 4)",
                          path, e->name, (size_t)en - (size_t)b, e->n * sizeof(float));
            break;
        }
        st->n++;
    }
done:
    cJSON_Delete(root);
    return s;
}

mt_status mt_st_parse(const char *name, const void *buf, size_t size, mt_safetensors *st,
                      mt_err *err) {
    memset(st, 0, sizeof *st);
    const unsigned char *bytes = buf;
    if (size < 8)
        return mt_errorf(err, MT_EFORMAT, "%s: not a safetensors file (shorter than 8 bytes)",
                         name);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    if (hlen > ST_MAX_HEADER || hlen > size - 8)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: header length %llu runs past the end of the %zu-byte file", name,
                         (unsigned long long)hlen, size);
    size_t data_len = size - 8 - hlen;
    mt_status s = MT_OK;
    size_t(*spans)[2] = NULL;
    char *sums = NULL, *json = malloc(hlen + 1);
    size_t items = 1; /* upper bounds: every tensor is an object, every metadata value a string */
    for (size_t i = 0; i < hlen; i++) items += bytes[8 + i] == '{' || bytes[8 + i] == ':';
    st->t = calloc(items, sizeof *st->t);
    st->meta_key = calloc(items, sizeof *st->meta_key);
    st->meta_val = calloc(items, sizeof *st->meta_val);
    spans = calloc(items, sizeof *spans);
    st->blob = aligned_alloc(64, (data_len + 64) / 64 * 64);
    if (!json || !st->t || !st->meta_key || !st->meta_val || !spans || !st->blob) {
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory reading a %zu-byte file", name, size);
        goto out;
    }
    memcpy(json, bytes + 8, hlen);
    json[hlen] = 0;
    if (memchr(json, 0, hlen)) {
        s = mt_errorf(err, MT_EFORMAT, "%s: the header holds a NUL byte", name);
        goto out;
    }
    memcpy(st->blob, bytes + 8 + hlen, data_len);
    if ((s = parse_header(name, json, data_len, st, spans, &sums, err)) != MT_OK) goto out;
    for (int i = 0; i < st->n; i++) {
        st->t[i].data = (const float *)((const char *)st->blob + spans[i][0]);
        int same = mt_name_index_add(&st->index, st->t, sizeof *st->t, i);
        if (same != i) {
            s = same < 0 ? mt_errorf(err, MT_ENOMEM, "%s: out of memory indexing the tensors", name)
                         : mt_errorf(err, MT_EFORMAT, "%s: tensor '%s' appears twice", name,
                                     st->t[i].name);
            goto out;
        }
    }
    qsort(spans, (size_t)st->n, sizeof *spans, cmp_offsets);
    for (int i = 1; i < st->n; i++)
        if (spans[i][0] < spans[i - 1][1]) {
            s = mt_errorf(err, MT_EFORMAT, "%s: two tensors overlap in the data section", name);
            goto out;
        }
    s = sums ? check_sums(name, st, sums, err) : check_unsummed(name, st, err);
out:
    free(sums);
    free(json);
    free(spans);
    if (s != MT_OK) mt_st_free(st);
    return s;
}

mt_status mt_st_load(const char *path, mt_safetensors *st, mt_err *err) {
    memset(st, 0, sizeof *st);
    FILE *f;
    mt_status s = mt_file_open("the safetensors file", path, "rb", &f, err);
    if (s != MT_OK) return s;
    off_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return mt_errorf(err, MT_EIO, "%s: cannot read (not a regular file?)", path);
    }
    unsigned char *buf = malloc(size ? (size_t)size : 1);
    if (!buf) {
        fclose(f);
        return mt_errorf(err, MT_ENOMEM, "%s: out of memory for %ld bytes", path, size);
    }
    bool ok = fread(buf, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    s = ok ? mt_st_parse(path, buf, (size_t)size, st, err)
           : mt_errorf(err, MT_EIO, "%s: cannot read: %s", path, strerror(errno));
    free(buf);
    return s;
}

_Static_assert(offsetof(mt_st_entry, name) == 0,
               "the name index reads an entry's name at its start");

int mt_st_add(mt_safetensors *st, const char *name, int ndim, const int *shape, const float *data) {
    mt_st_entry *e = &st->t[st->n];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->ndim = ndim, e->n = 1, e->data = data;
    for (int d = 0; d < ndim; d++) e->n *= (size_t)(e->shape[d] = shape[d]);
    int at = mt_name_index_add(&st->index, st->t, sizeof *st->t, st->n);
    return at < 0 ? -1 : at != st->n ? -2 : st->n++;
}

const mt_st_entry *mt_st_find(const mt_safetensors *st, const char *name) {
    int i = mt_name_index_find(&st->index, st->t, sizeof *st->t, name);
    return i < 0 ? NULL : &st->t[i];
}

const char *mt_st_meta(const mt_safetensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_key[i], key) == 0) return st->meta_val[i];
    return NULL;
}

void mt_st_free(mt_safetensors *st) {
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_key[i]);
        free(st->meta_val[i]);
    }
    free(st->meta_key);
    free(st->meta_val);
    free(st->t);
    free(st->blob);
    mt_name_index_free(&st->index);
    memset(st, 0, sizeof *st);
}

/* A growing string: the header. */
typedef struct {
    char *s;
    size_t len, cap;
    bool failed;
} header_buf;

static void header_add(header_buf *h, const char *s, size_t n) {
    if (h->failed) return;
    if (h->len + n + 1 > h->cap) {
        size_t cap = 2 * (h->len + n + 1);
        char *p = realloc(h->s, cap);
        if (!p) {
            h->failed = true;
            return;
        }
        h->s = p, h->cap = cap;
    }
    memcpy(h->s + h->len, s, n);
    h->s[h->len += n] = 0;
}

/* Object o's members (cJSON's unformatted print without its braces) after a comma unless first;
   o is deleted. */
static void header_members(header_buf *h, cJSON *o, bool first) {
    char *json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!json) {
        h->failed = true;
        return;
    }
    if (!first) header_add(h, ",", 1);
    header_add(h, json + 1, strlen(json) - 2);
    free(json);
}

/* The JSON header, as cJSON prints the whole object, built one tensor entry at a time: the tree
   of a model with thousands of tensors (a few MiB) never exists at once. */
static char *header_json(int n, const mt_st_item *items, int n_meta, const char *const *meta_keys,
                         const char *const *meta_vals, const char *sums) {
    header_buf h = {0};
    header_add(&h, "{", 1);
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
    for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(meta, meta_keys[i], meta_vals[i]);
    cJSON_AddStringToObject(meta, ST_CHECKSUM, sums);
    header_members(&h, root, true);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, items[i].name);
        size_t numel = mt_shape_numel(items[i].ndim, items[i].shape);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < items[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber(items[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += numel * sizeof(float);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        header_members(&h, root, false);
    }
    header_add(&h, "}", 1);
    if (!h.failed) return h.s;
    free(h.s);
    return NULL;
}

mt_status mt_st_save(const char *path, int n, const mt_st_item *items, int n_meta,
                     const char *const *meta_keys, const char *const *meta_vals, mt_err *err) {
    char *sums = malloc(9 * (size_t)(n_meta + n) + 1), *json = NULL;
    if (sums) {
        sums[0] = 0;
        for (int i = 0; i < n_meta + n; i++) {
            const mt_st_item *t = i < n_meta ? NULL : &items[i - n_meta];
            uint32_t crc = t ? tensor_crc(t->name, t->ndim, t->shape, t->data)
                             : meta_crc(meta_keys[i], meta_vals[i]);
            snprintf(sums + (i ? 9 * (size_t)i - 1 : 0), 10, i ? " %08x" : "%08x", crc);
        }
        json = header_json(n, items, n_meta, meta_keys, meta_vals, sums);
        free(sums);
    }
    if (!json) return mt_errorf(err, MT_ENOMEM, "%s: out of memory building the header", path);
    size_t hlen = strlen(json), padded = (hlen + 7) / 8 * 8; /* data 8-byte aligned */
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(padded >> (8 * i));

    mt_atomic_file af;
    mt_status s = mt_atomic_open(&af, path, err);
    if (s != MT_OK) {
        free(json);
        return s;
    }
    FILE *f = af.f;
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) {
        size_t numel = mt_shape_numel(items[i].ndim, items[i].shape);
        ok = fwrite(items[i].data, sizeof(float), numel, f) == numel;
    }
    s = mt_atomic_close(&af, ok, err);
    free(json);
    return s;
}
