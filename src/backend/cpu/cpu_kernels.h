/* cpu_kernels.h — the per-ISA inner kernels of the CPU backend (scalar, AVX2,
 * AVX-512), chosen once at run time by cpu_kernels_select().
 *
 * mm_*: for tokens t < n and weight rows r < nr (row length k, element type
 * per function): out[t*out_stride + r] = dot(x + t*x_stride, w + r*k).
 * Each (t, r) dot product is accumulated in the same order whatever n and nr
 * are, so results do not depend on batch composition (DESIGN.md principle 2). */
#ifndef KS_CPU_KERNELS_H
#define KS_CPU_KERNELS_H

#include <stdint.h>

typedef void (*cpu_mm_fn)(float *out, int out_stride, const float *x, int x_stride, int n,
                          const void *w, int64_t k, int nr);

typedef struct {
    const char *isa;            /* "scalar", "avx2", "avx512" */
    cpu_mm_fn mm_bf16;
    cpu_mm_fn mm_f16;
    cpu_mm_fn mm_f32;
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n); /* y += a * x */
    /* attention's inner loops, for grp query heads sharing the key/value rows
     * of n positions (a KV block; n <= 16) at k + j*kstride / v + j*vstride:
     * s[h * s_stride + j] = dot(q + h*hd, k_j) * scale for h < grp, j < n */
    void (*dots)(float *s, int s_stride, const float *q, int grp, const float *k, int64_t kstride, int n, int hd,
                 float scale);
    /* s[i] = exp(s[i] - mx) for i < n; returns their sum */
    float (*exp_sum)(float *s, int n, float mx);
    /* o + h*hd += sum over j < n of w[h * w_stride + j] * v_j, for h < grp */
    void (*axpys)(float *o, const float *w, int w_stride, const float *v, int64_t vstride, int n, int grp, int hd);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_scalar;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;

/* Best ISA this CPU supports; env KESTREL_CPU_ISA=scalar|avx2|avx512 forces
 * one (falls back when the CPU lacks it). */
const cpu_kernels *cpu_kernels_select(void);

#endif
