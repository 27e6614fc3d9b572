/* GGUF, llama.cpp's model file (its gguf.h and ggml.h): what its writer (src/models/gpt_export.c)
 * and its reader (src/ckpt/gguf.c) share, in one place.
 *
 * "GGUF", u32 version (3; 2 has the same layout), u64 tensor count, u64 key-value count; the
 * key-values (a string key, a u32 value type, the value); per tensor its name, u32 n_dims, u64
 * dims innermost first (torch's (out, in) is (in, out)), u32 tensor type, u64 offset into the
 * data; zeros to the alignment (general.alignment, 32 when absent); the data, each tensor at its
 * offset (a multiple of the alignment). A string is a u64 length and its bytes; an array a u32
 * element type, a u64 count and the elements. Little-endian. */
#ifndef MT_GGUF_H
#define MT_GGUF_H

#include <stdint.h>

#define MT_GGUF_MAGIC "GGUF"
#define MT_GGUF_ALIGN 32 /* the default alignment, and the one mt writes */

/* The value types of a key-value (gguf_type). */
typedef enum {
    MT_GGUF_U8,
    MT_GGUF_I8,
    MT_GGUF_U16,
    MT_GGUF_I16,
    MT_GGUF_U32,
    MT_GGUF_I32,
    MT_GGUF_F32,
    MT_GGUF_BOOL,
    MT_GGUF_STRING,
    MT_GGUF_ARRAY,
    MT_GGUF_U64,
    MT_GGUF_I64,
    MT_GGUF_F64,
    MT_GGUF_N_TYPES
} mt_gguf_type;

/* The tensor types mt reads (ggml_type's numbers); the others are named by mt_ggml_type_name. */
typedef enum {
    MT_GGML_F32 = 0,
    MT_GGML_F16 = 1,
    MT_GGML_Q4_0 = 2,
    MT_GGML_Q8_0 = 8,
    MT_GGML_Q4_K = 12,
    MT_GGML_Q6_K = 14,
    MT_GGML_BF16 = 30,
} mt_ggml_type;

/* ggml's name of a tensor type ("q5_K", "iq2_xxs"); NULL for a number ggml has none for. */
const char *mt_ggml_type_name(uint32_t type);

/* IEEE binary16 of f, rounded to the nearest (ties to even); beyond 65504 infinity. */
uint16_t mt_half_from_float(float f);
float mt_half_to_float(uint16_t h);

#endif
