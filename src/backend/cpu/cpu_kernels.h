/* cpu_kernels.h — the per-ISA inner kernels of the CPU backend (scalar, AVX2,
 * AVX-512), chosen once at run time by cpu_kernels_select().
 *
 * mm_*: np consecutive weight panels times one group of tokens. Weights are packed at
 * load into panels of CPU_PANEL rows (cpu_pack_panel): panel element (i, r)
 * = row r, column i, at panel[i * CPU_PANEL + r], so one vector load takes
 * column i of 16 rows. Activations are packed per call in groups of the
 * kernel set's mm_group tokens (cpu_pack_tokens): xg[i * nt + t] for a
 * group of nt tokens (the last one may be short: dense, so a single token's
 * activations are a plain row).
 * For t < nt <= mm_group, panel q < np and row r of it (< CPU_PANEL; the
 * last panel's first nr_last rows only):
 *   out[t*out_stride + q*CPU_PANEL + r] = sum over i < k of xg[i*nt + t] * panel_q(i, r),
 * one fused multiply-add chain per result in the order of i, starting from
 * 0 — so a (token, row) result is bitwise the same whatever nt, nr, the
 * group or the ISA (DESIGN.md principle 2). */
#ifndef KS_CPU_KERNELS_H
#define KS_CPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

#define CPU_PANEL 16

typedef void (*cpu_mm_fn)(float *out, int out_stride, const float *xg, int nt, const void *panels, int64_t k,
                          int np, int nr_last);

/* An ISA's kernel for a fixed token count and P panels: out, out_stride, xg,
 * panels, k, nr_last. cpu_mm_split runs np panels through it P at a time
 * (multi, when P > 1), the rest one at a time (one); pb = bytes per panel. */
typedef void (*cpu_panel_fn)(float *, int, const float *, const void *, int64_t, int);
static inline void cpu_mm_split(float *out, int os, const float *xg, const void *pw, int64_t k, int np, int nr_last,
                                size_t pb, int P, cpu_panel_fn multi, cpu_panel_fn one) {
    for (; P > 1 && np >= P; np -= P, out += P * CPU_PANEL, pw = (const char *)pw + P * pb)
        multi(out, os, xg, pw, k, np == P ? nr_last : CPU_PANEL);
    for (; np > 0; np--, out += CPU_PANEL, pw = (const char *)pw + pb)
        one(out, os, xg, pw, k, np == 1 ? nr_last : CPU_PANEL);
}

/* the argmax every ISA must equal (and their fallback for short rows) */
static inline int cpu_argmax_loop(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The bf16 KV cache's keys (cpu_backend.c's kv_store): within a block of bs
 * positions, column pairs outer: (position i, column c of kv_dim) at
 * cpu_kt_index(i, c, bs) — one 32-bit word holds columns c, c+1 of position
 * i, so one vector load takes a column pair of 16 positions and the scores
 * need no horizontal sums. (With an even head size, kv head g's keys are
 * the block's elements from g*hd*bs on.) Values keep rows (position,
 * kv_dim), as an f32 cache's keys and values. */
static inline int64_t cpu_kt_index(int i, int c, int bs) { return (int64_t)(c / 2) * 2 * bs + 2 * i + (c & 1); }

/* dots_bf16t's arithmetic, which every ISA's must equal bitwise: for head
 * h < grp and position j < n of a run (kt: the block's keys offset by the
 * run's first position, 2 * j0; the head's columns from c0), two fused
 * chains from 0 — the head's even dimensions and its odd ones — then
 * s[h*ss + j] = (even + odd) * scale */
static inline void cpu_dots_bf16t_loop(float *s, int ss, const float *q, int grp, const uint16_t *kt, int c0, int bs,
                                       int n, int hd, float scale) {
    for (int h = 0; h < grp; h++)
        for (int j = 0; j < n; j++) {
            const float *qh = q + (int64_t)h * hd;
            float e = 0, o = 0;
            for (int d = 0; d + 1 < hd; d += 2) {
                e = fmaf(qh[d], bf16_to_f32(kt[cpu_kt_index(j, c0 + d, bs)]), e);
                o = fmaf(qh[d + 1], bf16_to_f32(kt[cpu_kt_index(j, c0 + d + 1, bs)]), o);
            }
            if (hd & 1) e = fmaf(qh[hd - 1], bf16_to_f32(kt[cpu_kt_index(j, c0 + hd - 1, bs)]), e);
            s[(int64_t)h * ss + j] = (e + o) * scale;
        }
}

/* axpys_bf16's arithmetic, which every ISA's must equal bitwise: for h <
 * grp and d < hd, o[h*hd + d] = fmaf(w[h*ws + j], v_j[d], o[h*hd + d]) for
 * j = 0 .. n-1 in order (v_j = v + j*vs, bf16) */
static inline void cpu_axpys_bf16_loop(float *o, const float *w, int ws, const uint16_t *v, int64_t vs, int n, int grp,
                                       int hd) {
    for (int h = 0; h < grp; h++)
        for (int d = 0; d < hd; d++) {
            float acc = o[(int64_t)h * hd + d];
            for (int j = 0; j < n; j++) acc = fmaf(w[(int64_t)h * ws + j], bf16_to_f32(v[j * vs + d]), acc);
            o[(int64_t)h * hd + d] = acc;
        }
}

/* The SIMD dots_bf16t take whole vectors of 16 positions (lanes past n are
 * computed from the block's unwritten slots and not kept): even head sizes,
 * blocks of whole runs of 16. Anything else runs the loop here (true). */
static inline int cpu_dots_bf16t_by_loop(float *s, int ss, const float *q, int grp, const uint16_t *kt, int c0, int bs,
                                         int n, int hd, float scale) {
    if (!(hd & 1 || n > 16 || bs % 16)) return 0;
    cpu_dots_bf16t_loop(s, ss, q, grp, kt, c0, bs, n, hd, scale);
    return 1;
}

/* The SIMD axpys_bf16 take head sizes in whole vectors of `lanes` and runs
 * of up to 16 positions; anything else runs the loop here (true). */
static inline int cpu_axpys_bf16_by_loop(float *o, const float *w, int ws, const uint16_t *v, int64_t vs, int n,
                                         int grp, int hd, int lanes) {
    if (!(hd % lanes || n > 16)) return 0;
    cpu_axpys_bf16_loop(o, w, ws, v, vs, n, grp, hd);
    return 1;
}

typedef struct {
    const char *isa;            /* "scalar", "avx2", "avx512" */
    int mm_group;               /* tokens per activation group (accumulators in registers) */
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
    /* the largest of s[0..n) from -inf (NaNs skipped: s[i] > m ? s[i] : m;
     * of a tie between +0 and -0 either may come back) */
    float (*max)(const float *s, int n);
    /* s[i] *= a for i < n */
    void (*scale)(float *s, int n, float a);
    /* s[i] = exp(s[i] - mx) for i < n; returns their sum */
    float (*exp_sum)(float *s, int n, float mx);
    /* cpu_pack_tokens with this set's mm_group (the same bytes; AVX-512
     * transposes whole 16-token groups in registers) */
    void (*pack_tokens)(float *xg, const float *x, int x_stride, int n, int64_t k);
    /* the first index of the largest of x[0..n) (NaNs never win; x[0]
     * NaN: 0), as the scalar loop `if (x[i] > x[best]) best = i` */
    int (*argmax)(const float *x, int n);
    /* o[j] = silu(g[j]) * u[j] for j < n (silu(x) = x / (1 + e^-x)) */
    void (*silu_mul)(float *o, const float *g, const float *u, int n);
    /* o + h*hd += sum over j < n of w[h * w_stride + j] * v_j, for h < grp */
    void (*axpys)(float *o, const float *w, int w_stride, const float *v, int64_t vstride, int n, int grp, int hd);
    /* dots over n <= 16 positions of a bf16 cache's keys in the layout
     * above: cpu_dots_bf16t_loop's results, bitwise */
    void (*dots_bf16t)(float *s, int s_stride, const float *q, int grp, const uint16_t *kt, int c0, int bs, int n,
                       int hd, float scale);
    /* axpys over a bf16 cache's value rows: cpu_axpys_bf16_loop's results, bitwise */
    void (*axpys_bf16)(float *o, const float *w, int w_stride, const uint16_t *v, int64_t vstride, int n, int grp,
                       int hd);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_scalar;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;

/* cpu_pack.c: the layouts above. cpu_pack_panel writes one panel (k *
 * CPU_PANEL elements of elem_size bytes) from nrows <= CPU_PANEL row
 * pointers (rows past nrows are zeros); cpu_pack_tokens writes the n rows of
 * x (row stride x_stride) as ceil(n / group) groups, group g at
 * xg + g * group * k, of k * nt floats for its nt tokens. */
void cpu_pack_panel(void *dst, const void *const *rows, int nrows, int64_t k, size_t elem_size);
void cpu_pack_tokens(float *xg, const float *x, int x_stride, int n, int64_t k, int group);
/* out (n, rows) at row stride out_stride, columns of panels [p0, p1) only:
 * panels (ceil(rows / CPU_PANEL) of k columns, dtype dt) times the packed
 * tokens xg, token groups outer (a group stays in cache across the panels) */
void cpu_mm_panels(const cpu_kernels *ks, int dt, float *out, int out_stride, const float *xg, int n,
                   const void *panels, int64_t k, int64_t rows, int64_t p0, int64_t p1);

/* Best ISA this CPU supports; env KESTREL_CPU_ISA=scalar|avx2|avx512 forces
 * one (falls back when the CPU lacks it). */
const cpu_kernels *cpu_kernels_select(void);

#endif
