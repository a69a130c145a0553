/* dtype.h — element types of tensors and scalar conversions (bf16/f16 <-> f32). */
#ifndef KS_DTYPE_H
#define KS_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    DTYPE_F32 = 0,
    DTYPE_F16,
    DTYPE_BF16,
    DTYPE_F64,
    DTYPE_I64,
    DTYPE_I32,
    DTYPE_I16,
    DTYPE_I8,
    DTYPE_U8,
    DTYPE_BOOL,
    DTYPE_F8_E4M3,
    DTYPE_F8_E5M2,
    DTYPE_COUNT
} dtype_t;

size_t dtype_size(dtype_t t);
const char *dtype_name(dtype_t t);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round-to-nearest-even, NaN kept quiet. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

/* Element i of an F32, F16 or BF16 array as f32. */
static inline float dtype_elem_f32(dtype_t t, const void *d, int64_t i) {
    if (t == DTYPE_BF16) return bf16_to_f32(((const uint16_t *)d)[i]);
    if (t == DTYPE_F16) return f16_to_f32(((const uint16_t *)d)[i]);
    return ((const float *)d)[i];
}

#endif
