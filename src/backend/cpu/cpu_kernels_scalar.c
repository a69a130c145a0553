/* cpu_kernels_scalar.c — portable C kernels: the fallback and the reference
 * the SIMD kernels are tested against. */
#include "backend/cpu/cpu_kernels.h"
#include "base/dtype.h"

static float dot_f32(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_f32(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

#define DEF_MM(name, type, conv)                                                        \
    static void name(float *out, int os, const float *x, int xs, int n, const void *wv, \
                     int64_t k, int nr) {                                               \
        const type *w = wv;                                                             \
        for (int r = 0; r < nr; r++)                                                    \
            for (int t = 0; t < n; t++) {                                               \
                const type *wr = w + (int64_t)r * k;                                    \
                const float *xr = x + (int64_t)t * xs;                                  \
                float s = 0;                                                            \
                for (int64_t i = 0; i < k; i++) s += xr[i] * conv(wr[i]);               \
                out[(int64_t)t * os + r] = s;                                           \
            }                                                                           \
    }

#define ID(v) (v)
DEF_MM(mm_bf16, uint16_t, bf16_to_f32)
DEF_MM(mm_f16, uint16_t, f16_to_f32)
DEF_MM(mm_f32, float, ID)

const cpu_kernels cpu_kernels_scalar = {"scalar", mm_bf16, mm_f16, mm_f32, dot_f32, axpy_f32};
