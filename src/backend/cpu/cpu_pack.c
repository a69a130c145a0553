/* cpu_pack.c — the two layouts the CPU matmul kernels read (cpu_kernels.h):
 * weight panels of CPU_PANEL rows, column-major inside a panel (packed once
 * at load), and activation groups of mm_group tokens, token-minor (packed
 * per matmul call), and the loop of the kernels over them. */
#include "backend/cpu/cpu_kernels.h"
#include "base/dtype.h"

#define PACK(TYPE)                                                                             \
    for (int64_t i = 0; i < k; i++)                                                            \
        for (int r = 0; r < CPU_PANEL; r++)                                                    \
            ((TYPE *)dst)[i * CPU_PANEL + r] = r < nrows ? ((const TYPE *)rows[r])[i] : (TYPE)0;

void cpu_pack_panel(void *dst, const void *const *rows, int nrows, int64_t k, size_t elem_size) {
    if (elem_size == 2) {
        PACK(uint16_t)
    } else {
        PACK(uint32_t)
    }
}

void cpu_pack_tokens(float *xg, const float *x, int x_stride, int n, int64_t k, int group) {
    for (int g = 0; g < n; g += group) {
        int nt = n - g < group ? n - g : group;
        float *dst = xg + (int64_t)g * k;
        const float *src = x + (int64_t)g * x_stride;
        for (int64_t i = 0; i < k; i++)
            for (int t = 0; t < nt; t++) dst[i * nt + t] = src[(int64_t)t * x_stride + i];
    }
}

void cpu_mm_panels(const cpu_kernels *ks, int dt, float *out, int out_stride, const float *xg, int n,
                   const void *panels, int64_t k, int64_t rows, int64_t p0, int64_t p1) {
    cpu_mm_fn fn = dt == DTYPE_BF16 ? ks->mm_bf16 : dt == DTYPE_F16 ? ks->mm_f16 : ks->mm_f32;
    size_t panel_bytes = CPU_PANEL * (size_t)k * dtype_size(dt);
    int G = ks->mm_group;
    if (p1 <= p0) return;
    int nr_last = rows - (p1 - 1) * CPU_PANEL < CPU_PANEL ? (int)(rows - (p1 - 1) * CPU_PANEL) : CPU_PANEL;
    for (int g = 0; g < n; g += G) {
        int nt = n - g < G ? n - g : G;
        fn(out + (int64_t)g * out_stride + p0 * CPU_PANEL, out_stride, xg + (int64_t)g * k, nt,
           (const char *)panels + (size_t)p0 * panel_bytes, k, (int)(p1 - p0), nr_last);
    }
}
