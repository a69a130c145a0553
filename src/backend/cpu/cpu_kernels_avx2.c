/* cpu_kernels_avx2.c — AVX2/FMA kernels: a bf16/f16/f32 weight panel (16
 * rows, two 8-lane vectors) times up to 6 tokens of f32 activations (one FMA
 * chain per result, cpu_kernels.h: bitwise the AVX-512 kernel's). The
 * attention kernels unroll a full run of positions so its sums stay in
 * registers (the same operations in the same order). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "base/dtype.h"

/* Software prefetch this many bytes ahead in the panel being read (one
 * panel is a single stream). */
#define PF_BYTES 2048

static inline __m256 load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }

static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 sh = _mm_movehdup_ps(lo);
    lo = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, lo);
    return _mm_cvtss_f32(_mm_add_ss(lo, sh));
}

/* T tokens x P panels of 16 rows: two accumulators per (panel, token), rows
 * 0-7 and 8-15; column i of a panel is two vectors, times token t's x[i]
 * broadcast. P > 1 for few tokens: independent chains hide the FMA latency. */
#define DEF_PANEL(NAME, TYPE, LOAD, T, P)                                                     \
    static void NAME##_##T##x##P(float *out, int os, const float *xg, const void *pwv, int64_t k, int nr_last) { \
        const TYPE *pw = pwv;                                                                  \
        __m256 lo[P][T], hi[P][T];                                                             \
        _Pragma("GCC unroll 4") for (int q = 0; q < P; q++)                                    \
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) lo[q][t] = hi[q][t] = _mm256_setzero_ps(); \
        for (int64_t i = 0; i < k; i++) {                                                      \
            const float *xi = xg + i * T;                                                      \
            _Pragma("GCC unroll 4") for (int q = 0; q < P; q++) {                              \
                const TYPE *col = pw + (q * k + i) * CPU_PANEL;                                \
                if ((i * CPU_PANEL * sizeof(TYPE)) % 64 == 0)                                  \
                    _mm_prefetch((const char *)col + PF_BYTES, _MM_HINT_T0);                   \
                __m256 w0 = LOAD(col), w1 = LOAD(col + 8);                                     \
                _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {                          \
                    __m256 xv = _mm256_broadcast_ss(xi + t);                                   \
                    lo[q][t] = _mm256_fmadd_ps(w0, xv, lo[q][t]);                              \
                    hi[q][t] = _mm256_fmadd_ps(w1, xv, hi[q][t]);                              \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        for (int q = 0; q < P; q++)                                                            \
            for (int t = 0; t < T; t++) {                                                      \
                float v[CPU_PANEL];                                                            \
                _mm256_storeu_ps(v, lo[q][t]);                                                 \
                _mm256_storeu_ps(v + 8, hi[q][t]);                                             \
                int nr = q == P - 1 ? nr_last : CPU_PANEL;                                     \
                for (int r = 0; r < nr; r++) out[t * os + q * CPU_PANEL + r] = v[r];           \
            }                                                                                  \
    }

/* 6 tokens: 12 accumulators, 2 weight vectors and a broadcast in 16 ymm */
#define MM_GROUP 6
#define DEF_MM(NAME, TYPE, LOAD)                                                               \
    DEF_PANEL(NAME, TYPE, LOAD, 1, 1) DEF_PANEL(NAME, TYPE, LOAD, 2, 1) DEF_PANEL(NAME, TYPE, LOAD, 3, 1) \
    DEF_PANEL(NAME, TYPE, LOAD, 4, 1) DEF_PANEL(NAME, TYPE, LOAD, 5, 1) DEF_PANEL(NAME, TYPE, LOAD, 6, 1) \
    DEF_PANEL(NAME, TYPE, LOAD, 1, 4) DEF_PANEL(NAME, TYPE, LOAD, 2, 2)                                  \
    static void NAME(float *out, int os, const float *xg, int nt, const void *pw, int64_t k, int np, int nr_last) { \
        static const cpu_panel_fn one[MM_GROUP] = {NAME##_1x1, NAME##_2x1, NAME##_3x1, \
                                               NAME##_4x1, NAME##_5x1, NAME##_6x1}; \
        static const cpu_panel_fn multi[2] = {NAME##_1x4, NAME##_2x2};         \
        int P = nt == 1 ? 4 : nt == 2 ? 2 : 1;                                                 \
        cpu_mm_split(out, os, xg, pw, k, np, nr_last, CPU_PANEL * (size_t)k * sizeof(TYPE), P,                  \
                     nt <= 2 ? multi[nt - 1] : NULL, one[nt - 1]);                                     \
    }

DEF_MM(mm_bf16, uint16_t, load_bf16)
DEF_MM(mm_f16, uint16_t, load_f16)
DEF_MM(mm_f32, float, load_f32)

static float dot_f32(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_f32(float *y, float a, const float *x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* 8 vectors -> one: lane j = the sum of v[j]'s 8 lanes, by a fixed
 * transpose-and-add tree (each result sums its own vector only) */
static inline __m256 sum8(const __m256 v[8]) {
    __m256 x[2];
    for (int i = 0; i < 2; i++) {
        const __m256 *a = v + 4 * i;
        __m256 w0 = _mm256_add_ps(_mm256_unpacklo_ps(a[0], a[1]), _mm256_unpackhi_ps(a[0], a[1]));
        __m256 w1 = _mm256_add_ps(_mm256_unpacklo_ps(a[2], a[3]), _mm256_unpackhi_ps(a[2], a[3]));
        x[i] = _mm256_add_ps(_mm256_shuffle_ps(w0, w1, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(w0, w1, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(x[0], x[1], 0x20), _mm256_permute2f128_ps(x[0], x[1], 0x31));
}

/* acc[j] += q . k_j over the head dimension for j < m (a run of up to 8
 * positions); always inlined, so a constant m (a full run) unrolls and the
 * sums stay in registers, where a variable one keeps them on the stack */
static inline __attribute__((always_inline)) void dots_run(__m256 *acc, const float *qh, const float *k, int64_t ks,
                                                           int m, int hd) {
    for (int i = 0; i < hd; i += 8) {
        __m256 qv = _mm256_loadu_ps(qh + i);
        _Pragma("GCC unroll 8") for (int j = 0; j < m; j++)
            acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + j * ks + i), acc[j]);
    }
}

/* per head and run of 8 positions: one accumulator per position over the
 * head dimension, then the 8 sums at once (sum8) */
static void dots_f32(float *s, int ss, const float *q, int grp, const float *k, int64_t ks, int n, int hd,
                     float scale) {
    if (hd % 8 || n > 16) {
        for (int j = 0; j < n; j++)
            for (int h = 0; h < grp; h++) s[(int64_t)h * ss + j] = dot_f32(q + (int64_t)h * hd, k + j * ks, hd) * scale;
        return;
    }
    for (int j0 = 0; j0 < n; j0 += 8) {
        int m = n - j0 < 8 ? n - j0 : 8;
        for (int h = 0; h < grp; h++) {
            const float *qh = q + (int64_t)h * hd;
            __m256 acc[8];
            for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
            if (m == 8) dots_run(acc, qh, k + j0 * ks, ks, 8, hd);
            else dots_run(acc, qh, k + j0 * ks, ks, m, hd);
            float r[8];
            _mm256_storeu_ps(r, _mm256_mul_ps(sum8(acc), _mm256_set1_ps(scale)));
            for (int j = 0; j < m; j++) s[(int64_t)h * ss + j0 + j] = r[j];
        }
    }
}

/* e^x for x <= 0 (Cephes expf: x = n ln2 + r, a degree-7 polynomial in r,
 * times 2^n built in the exponent bits), about 1 ulp; clamped below -87.3 */
static inline __m256 exp_neg(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static float max_f32(const float *s, int n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(s + i), m); /* NaN in s: m kept */
    float t[8], mx = -INFINITY;
    _mm256_storeu_ps(t, m);
    for (int j = 0; j < 8; j++) mx = t[j] > mx ? t[j] : mx;
    for (; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    return mx;
}

static void scale_f32(float *s, int n, float a) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), av));
    for (; i < n; i++) s[i] *= a;
}

static float exp_sum_f32(float *s, int n, float mx) {
    __m256 m = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
        _mm256_storeu_ps(s + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) { /* the tail through a padded copy: the same polynomial */
        float t[8] = {0};
        for (int j = i; j < n; j++) t[j - i] = s[j] - mx;
        for (int j = n - i; j < 8; j++) t[j] = -100.0f; /* e^-100 clamps to ~1e-38, dropped below */
        __m256 e = exp_neg(_mm256_loadu_ps(t));
        _mm256_storeu_ps(t, e);
        for (int j = i; j < n; j++) s[j] = t[j - i];
        for (int j = n - i; j < 8; j++) t[j] = 0.0f;
        acc = _mm256_add_ps(acc, _mm256_loadu_ps(t));
    }
    return hsum(acc);
}

/* two passes: the largest value (max_ps(v, m) keeps m where v is NaN), then
 * the first lane equal to it — the scalar loop's answer */

static int argmax_f32(const float *x, int n) {
    if (n < 16 || x[0] != x[0]) return cpu_argmax_loop(x, n);
    __m256 m = _mm256_set1_ps(x[0]);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    float t[8], mx = x[0];
    _mm256_storeu_ps(t, m);
    for (int j = 0; j < 8; j++) mx = t[j] > mx ? t[j] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m256 mv = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
        if (eq) return i + __builtin_ctz((unsigned)eq);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return 0;
}

/* silu(g) * u with e = e^-|g| (exp_neg's range): sigmoid(g) = 1 / (1 + e)
 * for g >= 0, e / (1 + e) below */
static inline __m256 silu_mul8(__m256 g, __m256 u) {
    __m256 neg_abs = _mm256_or_ps(g, _mm256_set1_ps(-0.0f));
    __m256 e = exp_neg(neg_abs);
    __m256 num = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_mul_ps(_mm256_mul_ps(g, _mm256_div_ps(num, _mm256_add_ps(e, _mm256_set1_ps(1.0f)))), u);
}

static void silu_mul_f32(float *o, const float *g, const float *u, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) { /* the tail through a padded copy: the same polynomial */
        float tg[8] = {0}, tu[8] = {0}, to[8];
        for (int j = i; j < n; j++) tg[j - i] = g[j], tu[j - i] = u[j];
        _mm256_storeu_ps(to, silu_mul8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
        for (int j = i; j < n; j++) o[j] = to[j - i];
    }
}

/* lanes i..i+7 of each head's output += sum over j < m of w[h][j] v_j, the
 * m value rows (m <= 16; f32, or bf16 widened as loaded) loaded once;
 * always inlined, so a constant m keeps them in registers */
static inline __attribute__((always_inline)) void axpys_run(float *o, const float *w, int ws, const void *v,
                                                            int64_t vs, int m, int grp, int hd, int i, int bf16) {
    __m256 vv[16] = {0}; /* (only rows < m are read: the zeros quiet -Wmaybe-uninitialized and fold away) */
    _Pragma("GCC unroll 8") for (int j = 0; j < m; j++) vv[j] =
        bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(
                   _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)v + j * vs + i))), 16))
             : _mm256_loadu_ps((const float *)v + j * vs + i);
    for (int h = 0; h < grp; h++) {
        const float *wh = w + (int64_t)h * ws;
        float *oh = o + (int64_t)h * hd + i;
        __m256 acc = _mm256_loadu_ps(oh);
        _Pragma("GCC unroll 8") for (int j = 0; j < m; j++) acc = _mm256_fmadd_ps(_mm256_set1_ps(wh[j]), vv[j], acc);
        _mm256_storeu_ps(oh, acc);
    }
}

/* per 8 lanes of the head dimension: the value rows loaded once, each
 * head's output accumulated over them in a register; a whole KV block as
 * two runs of 8 rows (16 ymm rows would not fit the registers), each head's
 * sum stored and reloaded between them: the same arithmetic */
static inline __attribute__((always_inline)) void axpys_lanes(float *o, const float *w, int ws, const void *v,
                                                              int64_t vs, int n, int grp, int hd, int bf16) {
    size_t es = bf16 ? 2 : 4;
    for (int i = 0; i < hd; i += 8) {
        if (n == 16) {
            axpys_run(o, w, ws, v, vs, 8, grp, hd, i, bf16);
            axpys_run(o, w + 8, ws, (const char *)v + 8 * vs * es, vs, 8, grp, hd, i, bf16);
        } else {
            axpys_run(o, w, ws, v, vs, n, grp, hd, i, bf16);
        }
    }
}

static void axpys_f32(float *o, const float *w, int ws, const float *v, int64_t vs, int n, int grp, int hd) {
    if (hd % 8 || n > 16) {
        for (int j = 0; j < n; j++)
            for (int h = 0; h < grp; h++) axpy_f32(o + (int64_t)h * hd, w[(int64_t)h * ws + j], v + j * vs, hd);
        return;
    }
    axpys_lanes(o, w, ws, v, vs, n, grp, hd, 0);
}

static void axpys_bf16(float *o, const float *w, int ws, const uint16_t *v, int64_t vs, int n, int grp, int hd) {
    if (!cpu_axpys_bf16_by_loop(o, w, ws, v, vs, n, grp, hd, 8)) axpys_lanes(o, w, ws, v, vs, n, grp, hd, 1);
}

static void pack_tokens(float *xg, const float *x, int xs, int n, int64_t k) {
    cpu_pack_tokens(xg, x, xs, n, k, MM_GROUP);
}

/* heads [h0, h0 + NH) over 16 positions as two vectors of 8: per dimension
 * pair two loads, the even halves shifted up and the odd ones masked into
 * f32, two accumulators per head and half */
static inline __attribute__((always_inline)) void dots_bf16t_run(float *out, const float *q, const uint16_t *kt,
                                                                 int bs, int hd, float scale, int h0, int NH) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 e[2][2], o[2][2];
    for (int h = 0; h < NH; h++)
        for (int p = 0; p < 2; p++) e[h][p] = o[h][p] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 2) {
        for (int p = 0; p < 2; p++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(kt + (int64_t)d * bs + 16 * p));
            __m256 ke = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), ko = _mm256_castsi256_ps(_mm256_and_si256(w, hi));
            for (int h = 0; h < NH; h++) {
                const float *qh = q + (int64_t)(h0 + h) * hd + d;
                e[h][p] = _mm256_fmadd_ps(_mm256_set1_ps(qh[0]), ke, e[h][p]);
                o[h][p] = _mm256_fmadd_ps(_mm256_set1_ps(qh[1]), ko, o[h][p]);
            }
        }
    }
    for (int h = 0; h < NH; h++)
        for (int p = 0; p < 2; p++)
            _mm256_storeu_ps(out + h * 16 + 8 * p, _mm256_mul_ps(_mm256_add_ps(e[h][p], o[h][p]), _mm256_set1_ps(scale)));
}

static void dots_bf16t(float *s, int ss, const float *q, int grp, const uint16_t *kt, int c0, int bs, int n, int hd,
                       float scale) {
    if (cpu_dots_bf16t_by_loop(s, ss, q, grp, kt, c0, bs, n, hd, scale)) return;
    kt += (int64_t)c0 * bs; /* the head's first column pair */
    float out[2 * 16];
    for (int h = 0; h < grp; h += 2) {
        int nh = grp - h < 2 ? 1 : 2;
        if (nh == 2) dots_bf16t_run(out, q, kt, bs, hd, scale, h, 2);
        else dots_bf16t_run(out, q, kt, bs, hd, scale, h, 1);
        for (int i = 0; i < nh; i++) memcpy(s + (int64_t)(h + i) * ss, out + i * 16, (size_t)n * sizeof(float));
    }
}

const cpu_kernels cpu_kernels_avx2 = {
    .isa = "avx2",
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
