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

static float max_f32(const float *s, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = s[i] > m ? s[i] : m;
    return m;
}

static void scale_f32(float *s, int n, float a) {
    for (int i = 0; i < n; i++) s[i] *= a;
}

static float exp_sum_f32(float *s, int n, float mx) {
    float sum = 0;
    for (int i = 0; i < n; i++) {
        s[i] = expf(s[i] - mx);
        sum += s[i];
    }
    return sum;
}

static int argmax_f32(const float *x, int n) { return cpu_argmax_loop(x, n); }

static void silu_mul_f32(float *o, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void axpys_f32(float *o, const float *w, int ws, const float *v, int64_t vs, int n, int grp, int hd) {
    for (int j = 0; j < n; j++)
        for (int h = 0; h < grp; h++) axpy_f32(o + (int64_t)h * hd, w[(int64_t)h * ws + j], v + j * vs, hd);
}

/* fmaf: the SIMD kernels' fused chain, so their results equal these bitwise */
#define MM_GROUP 16
#define DEF_MM(name, type, conv)                                                                 \
    static void name(float *out, int os, const float *xg, int nt, const void *pw, int64_t k, int np,   \
                     int nr_last) {                                                              \
        for (int p = 0; p < np; p++) {                                                          \
            const type *w = (const type *)pw + (int64_t)p * k * CPU_PANEL;                       \
            int nr = p == np - 1 ? nr_last : CPU_PANEL;                                          \
            for (int t = 0; t < nt; t++)                                                         \
                for (int r = 0; r < nr; r++) {                                                   \
                    float s = 0;                                                                 \
                    for (int64_t i = 0; i < k; i++) s = fmaf(xg[i * nt + t], conv(w[i * CPU_PANEL + r]), s); \
                    out[(int64_t)t * os + p * CPU_PANEL + r] = s;                                \
                }                                                                                \
        }                                                                                        \
    }

#define ID(v) (v)
DEF_MM(mm_bf16, uint16_t, bf16_to_f32)
DEF_MM(mm_f16, uint16_t, f16_to_f32)
DEF_MM(mm_f32, float, ID)

static void pack_tokens(float *xg, const float *x, int xs, int n, int64_t k) {
    cpu_pack_tokens(xg, x, xs, n, k, MM_GROUP);
}

static void dots_bf16t(float *s, int ss, const float *q, int grp, const uint16_t *kt, int c0, int bs, int n, int hd,
                       float scale) {
    cpu_dots_bf16t_loop(s, ss, q, grp, kt, c0, bs, n, hd, scale);
}

static void axpys_bf16(float *o, const float *w, int ws, const uint16_t *v, int64_t vs, int n, int grp, int hd) {
    cpu_axpys_bf16_loop(o, w, ws, v, vs, n, grp, hd);
}

const cpu_kernels cpu_kernels_scalar = {
    .isa = "scalar",
    .mm_group = MM_GROUP,
    .mm_bf16 = mm_bf16,
    .mm_f16 = mm_f16,
    .mm_f32 = mm_f32,
    .dot = dot_f32,
    .axpy = axpy_f32,
    .dots = dots_f32,
    .max = max_f32,
    .scale = scale_f32,
    .exp_sum = exp_sum_f32,
    .pack_tokens = pack_tokens,
    .argmax = argmax_f32,
    .silu_mul = silu_mul_f32,
    .axpys = axpys_f32,
    .dots_bf16t = dots_bf16t,
    .axpys_bf16 = axpys_bf16,
};
