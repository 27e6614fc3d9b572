/* safetensors: a bit-exact round trip, and every malformed file rejected with a message. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_st_XXXXXX";

static void write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

/* A file with the given JSON header followed by data_len bytes of data. */
static size_t make_file(unsigned char *buf, const char *json, size_t data_len) {
    uint64_t h = strlen(json);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(h >> (8 * i));
    memcpy(buf + 8, json, h);
    memset(buf + 8 + h, 0, data_len);
    return 8 + h + data_len;
}

static void test_round_trip(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    float w[6] = {1.5f, -2, 3e-8f, 4, 5, 6}, b[3] = {-0.0f, 1e30f, 7};
    mt_st_item items[] = {{"fc.weight", 2, (int[]){2, 3}, w}, {"fc.bias", 1, (int[]){3}, b}};
    const char *keys[] = {"config", "step"}, *vals[] = {"{\"n_layer\": 2}", "17"};
    mt_err err;
    CHECK(mt_st_save(path, 2, items, 2, keys, vals, &err) == MT_OK, "save: %s", err.msg);
    mt_safetensors st;
    CHECK(mt_st_load(path, &st, &err) == MT_OK, "load: %s", err.msg);
    const mt_st_entry *e = mt_st_find(&st, "fc.weight");
    CHECK(e && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 3, "weight shape");
    CHECK(e && memcmp(e->data, w, sizeof w) == 0, "weight bits");
    e = mt_st_find(&st, "fc.bias");
    CHECK(e && memcmp(e->data, b, sizeof b) == 0, "bias bits");
    CHECK(st.n == 2 && strcmp(st.t[0].name, "fc.weight") == 0, "header order kept");
    CHECK(mt_st_meta(&st, "step") && strcmp(mt_st_meta(&st, "step"), "17") == 0, "metadata");
    CHECK(mt_st_meta(&st, "absent") == NULL && mt_st_find(&st, "absent") == NULL, "absent");
    mt_st_free(&st);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    CHECK(access(tmp, F_OK) != 0, "no temporary file left behind");
    /* a failed save (no such directory) leaves nothing and says why */
    snprintf(path, sizeof path, "%s/missing/b.safetensors", dir);
    CHECK(mt_st_save(path, 2, items, 0, NULL, NULL, &err) == MT_EIO && strstr(err.msg, path),
          "save into a missing dir: %s", err.msg);
}

static void test_rejections(void) {
    struct {
        const char *json;
        size_t data_len;
        const char *expect; /* a word the message must hold */
    } bad[] = {
        {"[1, 2]", 0, "not a JSON object"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}", 8, "JSON"},
        {"{\"a\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, "F16"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 8, "outside"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
         16, "overlap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
         16, "twice"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 8]}}", 8, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1e300, 1e300], \"data_offsets\": [0, 8]}}", 8,
         "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
         "dims"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8, "data_offsets"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [\"0\", 8]}}", 8,
         "outside"},
        {"{\"__metadata__\": {\"k\": 5}}", 0, "not a string"},
        {"{\"__metadata__\": [1]}", 0, "not an object"},
        {"{\"a\": 3}", 0, "needs dtype"},
    };
    unsigned char buf[1024];
    char path[256];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t n = make_file(buf, bad[k].json, bad[k].data_len);
        write_file(path, buf, n);
        mt_safetensors st;
        mt_err err = {0};
        mt_status s = mt_st_load(path, &st, &err);
        CHECK(s == MT_EFORMAT && strstr(err.msg, bad[k].expect) && strstr(err.msg, path),
              "case %zu (%s): status %d, message '%s'", k, bad[k].expect, s, err.msg);
    }
    /* header length beyond the file, and a file shorter than its length field */
    size_t n = make_file(buf, "{}", 0);
    buf[0] = 200;
    write_file(path, buf, n);
    mt_safetensors st;
    mt_err err;
    CHECK(mt_st_load(path, &st, &err) == MT_EFORMAT && strstr(err.msg, "past the end"), "%s",
          err.msg);
    write_file(path, buf, 5);
    CHECK(mt_st_load(path, &st, &err) == MT_EFORMAT && strstr(err.msg, "shorter"), "%s", err.msg);
    CHECK(mt_st_load(dir, &st, &err) != MT_OK, "a directory is not a file");
    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    CHECK(mt_st_load(path, &st, &err) == MT_EIO && strstr(err.msg, "cannot open"), "%s", err.msg);
    /* a NUL inside the header */
    n = make_file(buf, "{}  ", 0);
    buf[10] = 0;
    CHECK(mt_st_parse("mem", buf, n, &st, &err) == MT_EFORMAT, "NUL in header");
}

/* a and b hold the same metadata and tensors, bit for bit */
static bool same_content(const mt_safetensors *a, const mt_safetensors *b) {
    bool same = a->n_meta == b->n_meta && a->n == b->n;
    for (int i = 0; same && i < a->n_meta; i++)
        same = strcmp(a->meta_key[i], b->meta_key[i]) == 0 &&
               strcmp(a->meta_val[i], b->meta_val[i]) == 0;
    for (int i = 0; same && i < a->n; i++) {
        const mt_st_entry *x = &a->t[i], *y = &b->t[i];
        same = strcmp(x->name, y->name) == 0 && x->ndim == y->ndim && x->n == y->n &&
               memcmp(x->shape, y->shape, sizeof x->shape) == 0 &&
               memcmp(x->data, y->data, x->n * sizeof(float)) == 0;
    }
    return same;
}

/* Every byte of a saved file changed (three ways, one of them `[[32,` into `[[3\x12,`, which
   cJSON reads as 3): each damaged file is refused, or reads as the same metadata and tensors
   (a change to the header's padding or its JSON whitespace). Then the checksum's limits: a file
   without one (another writer's, or mt's before it) loads; its name one byte off is refused. */
static void test_flipped_bytes(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/f.safetensors", dir);
    float w[6] = {1.5f, -2, 3e-8f, 4, 5, 6}, b[3] = {-0.0f, 1e30f, 7};
    mt_st_item items[] = {{"fc.weight", 2, (int[]){2, 3}, w}, {"fc.bias", 1, (int[]){3}, b}};
    const char *keys[] = {"tokenizer", "step"}, *vals[] = {"{\"merges\": [[32, 101]]}", "17"};
    mt_err err;
    mt_safetensors ref, st;
    CHECK(mt_st_save(path, 2, items, 2, keys, vals, &err) == MT_OK, "save: %s", err.msg);
    CHECK(mt_st_load(path, &ref, &err) == MT_OK && ref.n_meta == 2, "load: %s", err.msg);
    FILE *f = fopen(path, "rb");
    static unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    int refused = 0, changed = 0;
    const unsigned char flips[] = {0x01, 0x20, 0x80};
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof flips; k++) {
            buf[i] ^= flips[k];
            if (mt_st_parse("flipped", buf, n, &st, &err) != MT_OK) refused++;
            else {
                CHECK(same_content(&ref, &st), "byte %zu ^ 0x%02x read as other content", i,
                      flips[k]);
                changed += !same_content(&ref, &st);
                mt_st_free(&st);
            }
            buf[i] ^= flips[k];
        }
    CHECK(refused > (int)n && changed == 0, "%d of %zu flips refused, %d read differently", refused,
          3 * n, changed);
    mt_st_free(&ref);
    n = make_file(buf,
                  "{\"__metadata__\": {\"step\": \"3\"}, "
                  "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                  4);
    CHECK(mt_st_parse("old", buf, n, &st, &err) == MT_OK, "a file without checksums: %s", err.msg);
    mt_st_free(&st);
    n = make_file(buf, "{\"__metadata__\": {\"mt_crc32x\": \"00000000\"}}", 0);
    CHECK(mt_st_parse("key", buf, n, &st, &err) == MT_EFORMAT && strstr(err.msg, "mt_crc32x"),
          "the checksum's name damaged: %s", err.msg);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_round_trip();
    test_rejections();
    test_flipped_bytes();
    CHECK(test_remove_dir(dir) == 0, "cannot remove %s", dir);
    return check_finish("test_safetensors");
}
