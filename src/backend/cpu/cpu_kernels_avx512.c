/* cpu_kernels_avx512.c — AVX-512 kernels: a bf16/f16/f32 weight panel (16
 * rows, one per lane) times up to 16 tokens of f32 activations, one
 * accumulator register per token (cpu_kernels.h: one FMA chain per result);
 * attention's dot products and value sums over a KV block. */
#include <immintrin.h>
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

/* Software prefetch this many bytes ahead in the panel being read (one
 * panel is a single stream; cpu_matmul_bench: 1-2 KiB ahead streamed 15%
 * faster at 1 token than 8 or 16 KiB, the same at 16 tokens). */
#define PF_BYTES 2048

static inline __m512 load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline __m512 load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 load_f32(const float *p) { return _mm512_loadu_ps(p); }

/* T tokens x P panels of 16 rows: one accumulator per (panel, token), lane
 * r = row r; column i of a panel is one vector, times token t's x[i]
 * broadcast. P > 1 for few tokens: independent chains hide the FMA latency. */
#define DEF_PANEL(NAME, TYPE, LOAD, T, P)                                                     \
    static void NAME##_##T##x##P(float *out, int os, const float *xg, const void *pwv, int64_t k, int nr_last) { \
        const TYPE *pw = pwv;                                                                  \
        __m512 acc[P][T];                                                                      \
        _Pragma("GCC unroll 4") for (int q = 0; q < P; q++)                                    \
            _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) acc[q][t] = _mm512_setzero_ps(); \
        for (int64_t i = 0; i < k; i++) {                                                      \
            const float *xi = xg + i * T;                                                      \
            _Pragma("GCC unroll 4") for (int q = 0; q < P; q++) {                              \
                const TYPE *col = pw + (q * k + i) * CPU_PANEL;                                \
                if ((i * CPU_PANEL * sizeof(TYPE)) % 64 == 0)                                  \
                    _mm_prefetch((const char *)col + PF_BYTES, _MM_HINT_T0);                   \
                __m512 wv = LOAD(col);                                                         \
                _Pragma("GCC unroll 16") for (int t = 0; t < T; t++)                           \
                    acc[q][t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xi[t]), acc[q][t]);         \
            }                                                                                  \
        }                                                                                      \
        _Pragma("GCC unroll 4") for (int q = 0; q < P; q++) {                                  \
            __mmask16 m = q == P - 1 ? (__mmask16)((1u << nr_last) - 1) : (__mmask16)0xffff;   \
            _Pragma("GCC unroll 16") for (int t = 0; t < T; t++)                               \
                _mm512_mask_storeu_ps(out + t * os + q * CPU_PANEL, m, acc[q][t]);             \
        }                                                                                      \
    }

#define MM_GROUP 16
#define DEF_MM(NAME, TYPE, LOAD)                                                               \
    DEF_PANEL(NAME, TYPE, LOAD, 1, 1) DEF_PANEL(NAME, TYPE, LOAD, 2, 1) DEF_PANEL(NAME, TYPE, LOAD, 3, 1) \
    DEF_PANEL(NAME, TYPE, LOAD, 4, 1) DEF_PANEL(NAME, TYPE, LOAD, 5, 1) DEF_PANEL(NAME, TYPE, LOAD, 6, 1) \
    DEF_PANEL(NAME, TYPE, LOAD, 7, 1) DEF_PANEL(NAME, TYPE, LOAD, 8, 1) DEF_PANEL(NAME, TYPE, LOAD, 9, 1) \
    DEF_PANEL(NAME, TYPE, LOAD, 10, 1) DEF_PANEL(NAME, TYPE, LOAD, 11, 1) DEF_PANEL(NAME, TYPE, LOAD, 12, 1) \
    DEF_PANEL(NAME, TYPE, LOAD, 13, 1) DEF_PANEL(NAME, TYPE, LOAD, 14, 1) DEF_PANEL(NAME, TYPE, LOAD, 15, 1) \
    DEF_PANEL(NAME, TYPE, LOAD, 16, 1) DEF_PANEL(NAME, TYPE, LOAD, 1, 4) DEF_PANEL(NAME, TYPE, LOAD, 2, 4)   \
    DEF_PANEL(NAME, TYPE, LOAD, 3, 2) DEF_PANEL(NAME, TYPE, LOAD, 4, 2)                                      \
    static void NAME(float *out, int os, const float *xg, int nt, const void *pw, int64_t k, int np, int nr_last) { \
        static const cpu_panel_fn one[MM_GROUP] = {                                                \
            NAME##_1x1,  NAME##_2x1,  NAME##_3x1,  NAME##_4x1,   \
            NAME##_5x1,  NAME##_6x1,  NAME##_7x1,  NAME##_8x1,   \
            NAME##_9x1,  NAME##_10x1, NAME##_11x1, NAME##_12x1,  \
            NAME##_13x1, NAME##_14x1, NAME##_15x1, NAME##_16x1}; \
        static const cpu_panel_fn multi[4] = {NAME##_1x4, NAME##_2x4, NAME##_3x2, \
                                          NAME##_4x2};                               \
        int P = nt <= 2 ? 4 : nt <= 4 ? 2 : 1;                                                 \
        cpu_mm_split(out, os, xg, pw, k, np, nr_last, CPU_PANEL * (size_t)k * sizeof(TYPE), P,                  \
                     nt <= 4 ? multi[nt - 1] : NULL, one[nt - 1]);                                     \
    }

DEF_MM(mm_bf16, uint16_t, load_bf16)
DEF_MM(mm_f16, uint16_t, load_f16)
DEF_MM(mm_f32, float, load_f32)

static float dot_f32(const float *a, const float *b, int n) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static void axpy_f32(float *y, float a, const float *x, int n) {
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* 16 vectors -> one: lane j = the sum of v[j]'s 16 lanes, by a fixed
 * transpose-and-add tree (each result sums its own vector only, always in
 * the same order, whatever the other lanes hold) */
static inline __m512 sum16(const __m512 v[16]) {
    __m512 x[4];
    for (int i = 0; i < 4; i++) {
        const __m512 *a = v + 4 * i;
        __m512 w0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
        __m512 w1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
        x[i] = _mm512_add_ps(_mm512_shuffle_ps(w0, w1, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(w0, w1, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    __m512 z01 = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 z23 = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(x[2], x[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(z01, z23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(z01, z23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* acc[j] += q . k_j over the head dimension for j < m (a run of positions);
 * always inlined, so a constant m (a whole KV block) unrolls and the sums
 * stay in registers, where a variable one keeps them on the stack */
static inline __attribute__((always_inline)) void dots_run(__m512 *acc, const float *qh, const float *k, int64_t ks,
                                                           int m, int hd) {
    for (int i = 0; i < hd; i += 16) {
        __m512 qv = _mm512_loadu_ps(qh + i);
        _Pragma("GCC unroll 16") for (int j = 0; j < m; j++)
            acc[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k + j * ks + i), acc[j]);
    }
}

/* per head: one accumulator per position over the head dimension, then
 * the 16 positions' sums at once (sum16) — no horizontal sum per position */
static void dots_f32(float *s, int ss, const float *q, int grp, const float *k, int64_t ks, int n, int hd,
                     float scale) {
    if (hd % 16 || n > 16) {
        for (int j = 0; j < n; j++)
            for (int h = 0; h < grp; h++) s[(int64_t)h * ss + j] = dot_f32(q + (int64_t)h * hd, k + j * ks, hd) * scale;
        return;
    }
    __mmask16 m = (__mmask16)((1u << n) - 1);
    for (int h = 0; h < grp; h++) {
        const float *qh = q + (int64_t)h * hd;
        __m512 acc[16];
        for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
        if (n == 16) dots_run(acc, qh, k, ks, 16, hd);
        else dots_run(acc, qh, k, ks, n, hd);
        _mm512_mask_storeu_ps(s + (int64_t)h * ss, m, _mm512_mul_ps(sum16(acc), _mm512_set1_ps(scale)));
    }
}

/* e^x for x <= 0 (Cephes expf: x = n ln2 + r, a degree-7 polynomial in r,
 * scaled by 2^n), about 1 ulp; below -87.3 it is clamped (e^-87.3 ~ 1e-38) */
static inline __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static float max_f32(const float *s, int n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(s + i), m); /* NaN in s: m kept */
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        m = _mm512_mask_max_ps(m, k, _mm512_maskz_loadu_ps(k, s + i), m);
    }
    return _mm512_reduce_max_ps(m);
}

static void scale_f32(float *s, int n, float a) {
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(s + i, _mm512_mul_ps(_mm512_loadu_ps(s + i), av));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(s + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + i), av));
    }
}

static float exp_sum_f32(float *s, int n, float mx) {
    __m512 m = _mm512_set1_ps(mx), acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s + i), m));
        _mm512_storeu_ps(s + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) { /* the tail through a mask: the same polynomial */
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m));
        _mm512_mask_storeu_ps(s + i, k, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(acc);
}

/* 16 rows of 16 floats (r[t] = token t's columns c..c+15) -> 16 vectors,
 * vector j = column c+j of the 16 tokens: unpack pairs, then 4x4 blocks
 * within 128-bit lanes, then lanes across vectors */
static inline void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) { /* u[g + j] lane L: column 4L + j of rows g..g+3 */
        u[g + 0] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        __m512 v = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), w = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88), w2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(v, v2, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v, v2, 0xDD);
        r[4 + j] = _mm512_shuffle_f32x4(w, w2, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(w, w2, 0xDD);
    }
}

/* whole 16-token groups through transpose16, the rest as cpu_pack_tokens */
static void pack_tokens(float *xg, const float *x, int xs, int n, int64_t k) {
    int g = 0;
    for (; g + MM_GROUP <= n; g += MM_GROUP) {
        float *dst = xg + (int64_t)g * k;
        const float *src = x + (int64_t)g * xs;
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            __m512 r[16];
            for (int t = 0; t < 16; t++) r[t] = _mm512_loadu_ps(src + (int64_t)t * xs + i);
            transpose16(r);
            for (int j = 0; j < 16; j++) _mm512_storeu_ps(dst + (i + j) * MM_GROUP, r[j]);
        }
        for (; i < k; i++)
            for (int t = 0; t < MM_GROUP; t++) dst[i * MM_GROUP + t] = src[(int64_t)t * xs + i];
    }
    if (g < n) cpu_pack_tokens(xg + (int64_t)g * k, x + (int64_t)g * xs, xs, n - g, k, MM_GROUP);
}

/* two passes: the largest value (max_ps(v, m) keeps m where v is NaN), then
 * the first lane equal to it — the scalar loop's answer */
static int argmax_f32(const float *x, int n) {
    if (n < 32 || x[0] != x[0]) return cpu_argmax_loop(x, n);
    __m512 m = _mm512_set1_ps(x[0]);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    float mx = _mm512_reduce_max_ps(m);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m512 mv = _mm512_set1_ps(mx);
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), mv, _CMP_EQ_OQ);
        if (eq) return i + __builtin_ctz(eq);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return 0;
}

/* silu(g) * u with e = e^-|g| (exp_neg's range): sigmoid(g) = 1 / (1 + e)
 * for g >= 0, e / (1 + e) below */
static inline __m512 silu_mul16(__m512 g, __m512 u) {
    __m512 e = exp_neg(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
    __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GE_OQ), e, _mm512_set1_ps(1.0f));
    return _mm512_mul_ps(_mm512_mul_ps(g, _mm512_div_ps(num, _mm512_add_ps(e, _mm512_set1_ps(1.0f)))), u);
}

static void silu_mul_f32(float *o, const float *g, const float *u, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, silu_mul16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(o + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* lanes i..i+15 of each head's output += sum over j < m of w[h][j] v_j, the
 * m value rows (f32, or bf16 widened as loaded) loaded once; always
 * inlined, so a constant m (a whole KV block) keeps them in registers */
static inline __attribute__((always_inline)) void axpys_run(float *o, const float *w, int ws, const void *v,
                                                            int64_t vs, int m, int grp, int hd, int i, int bf16) {
    __m512 vv[16] = {0}; /* (only rows < m are read: the zeros quiet -Wmaybe-uninitialized and fold away) */
    _Pragma("GCC unroll 16") for (int j = 0; j < m; j++) vv[j] =
        bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(
                   _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)v + j * vs + i))), 16))
             : _mm512_loadu_ps((const float *)v + j * vs + i);
    for (int h = 0; h < grp; h++) {
        const float *wh = w + (int64_t)h * ws;
        float *oh = o + (int64_t)h * hd + i;
        __m512 acc = _mm512_loadu_ps(oh);
        _Pragma("GCC unroll 16") for (int j = 0; j < m; j++) acc = _mm512_fmadd_ps(_mm512_set1_ps(wh[j]), vv[j], acc);
        _mm512_storeu_ps(oh, acc);
    }
}

/* per 16 lanes of the head dimension: the n value rows loaded once, each
 * head's output accumulated over them in a register */
static inline __attribute__((always_inline)) void axpys_lanes(float *o, const float *w, int ws, const void *v,
                                                              int64_t vs, int n, int grp, int hd, int bf16) {
    for (int i = 0; i < hd; i += 16) {
        if (n == 16) axpys_run(o, w, ws, v, vs, 16, grp, hd, i, bf16);
        else axpys_run(o, w, ws, v, vs, n, grp, hd, i, bf16);
    }
}

static void axpys_f32(float *o, const float *w, int ws, const float *v, int64_t vs, int n, int grp, int hd) {
    if (hd % 16 || n > 16) {
        for (int j = 0; j < n; j++)
            for (int h = 0; h < grp; h++) axpy_f32(o + (int64_t)h * hd, w[(int64_t)h * ws + j], v + j * vs, hd);
        return;
    }
    axpys_lanes(o, w, ws, v, vs, n, grp, hd, 0);
}

static void axpys_bf16(float *o, const float *w, int ws, const uint16_t *v, int64_t vs, int n, int grp, int hd) {
    if (!cpu_axpys_bf16_by_loop(o, w, ws, v, vs, n, grp, hd, 16)) axpys_lanes(o, w, ws, v, vs, n, grp, hd, 1);
}

/* heads [h0, h0 + NH) over one run of 16 positions: per dimension pair one
 * load (16 positions x 2 dimensions), the even halves shifted up and the
 * odd ones masked into f32, two accumulators per head */
static inline __attribute__((always_inline)) void dots_bf16t_run(float *s, int ss, const float *q, const uint16_t *kt,
                                                                 int bs, __mmask16 m, int hd, float scale, int h0,
                                                                 int NH) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512 e[4], o[4];
    for (int h = 0; h < NH; h++) e[h] = o[h] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 2) {
        __m512i w = _mm512_loadu_si512((const void *)(kt + (int64_t)d * bs));
        __m512 ke = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), ko = _mm512_castsi512_ps(_mm512_and_si512(w, hi));
        for (int h = 0; h < NH; h++) {
            const float *qh = q + (int64_t)(h0 + h) * hd + d;
            e[h] = _mm512_fmadd_ps(_mm512_set1_ps(qh[0]), ke, e[h]);
            o[h] = _mm512_fmadd_ps(_mm512_set1_ps(qh[1]), ko, o[h]);
        }
    }
    for (int h = 0; h < NH; h++)
        _mm512_mask_storeu_ps(s + (int64_t)(h0 + h) * ss, m, _mm512_mul_ps(_mm512_add_ps(e[h], o[h]), _mm512_set1_ps(scale)));
}

static void dots_bf16t(float *s, int ss, const float *q, int grp, const uint16_t *kt, int c0, int bs, int n, int hd,
                       float scale) {
    if (cpu_dots_bf16t_by_loop(s, ss, q, grp, kt, c0, bs, n, hd, scale)) return;
    kt += (int64_t)c0 * bs; /* the head's first column pair */
    __mmask16 m = (__mmask16)((1u << n) - 1);
    int h = 0;
    for (; h + 4 <= grp; h += 4) dots_bf16t_run(s, ss, q, kt, bs, m, hd, scale, h, 4);
    for (; h < grp; h++) dots_bf16t_run(s, ss, q, kt, bs, m, hd, scale, h, 1);
}

const cpu_kernels cpu_kernels_avx512 = {
    .isa = "avx512",
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
