/* cpu_kernels_scalar.c — portable C kernels: the fallback and the reference
 * the SIMD kernels are tested against. */
#include <math.h>

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

static void dots_f32(float *s, int ss, const float *q, int grp, const float *k, int64_t ks, int n, int hd,
                     float scale) {
    for (int j = 0; j < n; j++)
        for (int h = 0; h < grp; h++) s[(int64_t)h * ss + j] = dot_f32(q + (int64_t)h * hd, k + j * ks, hd) * scale;
}

static float exp_sum_f32(float *s, int n, float mx) {
    float sum = 0;
    for (int i = 0; i < n; i++) {
        s[i] = expf(s[i] - mx);
        sum += s[i];
    }
    return sum;
}

static void axpys_f32(float *o, const float *w, int ws, const float *v, int64_t vs, int n, int grp, int hd) {
    for (int j = 0; j < n; j++)
        for (int h = 0; h < grp; h++) axpy_f32(o + (int64_t)h * hd, w[(int64_t)h * ws + j], v + j * vs, hd);
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

const cpu_kernels cpu_kernels_scalar = {"scalar", mm_bf16,  mm_f16,      mm_f32,   dot_f32,
                                        axpy_f32, dots_f32, exp_sum_f32, axpys_f32};
