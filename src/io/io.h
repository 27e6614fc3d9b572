/* mt io: safetensors checkpoints (and, with later issues, config files and metrics logs).
 * safetensors: 8-byte little-endian header length N, N bytes of JSON, then raw data.
 * The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * into the data section) and may hold "__metadata__", an object of string values. */
#ifndef MT_IO_H
#define MT_IO_H

#include "../tensor/tensor.h"

typedef struct {
    char name[128];
    int ndim; /* 0 for a scalar */
    int shape[MT_MAX_DIMS];
    size_t n;          /* elements */
    const float *data; /* into the loaded file's aligned data copy */
} mt_st_entry;

typedef struct {
    int n;
    mt_st_entry *t; /* in the order of the file's header */
    int n_meta;
    char **meta_key, **meta_val;
    float *blob; /* the data section, 64-byte aligned */
} mt_safetensors;

/* Reads and validates a whole file: F32 tensors only, offsets inside the data section, sizes
   that match the shapes, no overlap. Errors name the file and the offending entry. */
mt_status mt_st_load(const char *path, mt_safetensors *st, mt_err *err);
const mt_st_entry *mt_st_find(const mt_safetensors *st, const char *name);
const char *mt_st_meta(const mt_safetensors *st, const char *key); /* NULL when absent */
void mt_st_free(mt_safetensors *st);

typedef struct {
    const char *name;
    int ndim;
    const int *shape;
    const float *data;
} mt_st_item;

/* Writes path atomically: a temporary file beside it, fsynced, then renamed over path. */
mt_status mt_st_save(const char *path, int n, const mt_st_item *items, int n_meta,
                     const char *const *meta_keys, const char *const *meta_vals, mt_err *err);

#endif
