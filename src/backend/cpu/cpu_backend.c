/* cpu_backend.c — the CPU backend: host buffers, weights copied at load
 * (matrices packed into the kernels' 16-row panels, vectors as f32), and
 * every op parallelised over the thread pool with the SIMD kernels of
 * cpu_kernels_*.c. Always built. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/weight_share.h"
#include "base/dtype.h"
#include "base/err.h"
#include "base/threadpool.h"

typedef struct {
    threadpool *pool;
    const cpu_kernels *k;
    float *scratch;        /* attention scores, per thread */
    size_t scratch_per_thread;
    float *xg;             /* a matmul's activations in token groups (cpu_pack_tokens) */
    size_t xg_cap;         /* floats */
    float *fused_in, *fused_out; /* matmul_fused's normed input and product (the separate ops behind it) */
    size_t fused_in_cap, fused_out_cap; /* floats */
    weight_share shared;   /* packed copies, shared by weights of the same source (a tied lm_head) */
} cpu_impl;

static cpu_impl *impl_of(backend *be) { return be->impl; }

/* ---- buffers ---------------------------------------------------------- */

static void *cpu_buf_alloc(backend *be, size_t bytes) {
    (void)be;
    /* not zeroed: every buffer is written before it is read (large ones come
     * from mmap, so untouched KV pages cost no RSS) */
    size_t n = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}
static void cpu_buf_free(backend *be, void *p) { (void)be; free(p); }
static int cpu_buf_copy(backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes); /* empty copies may come with NULL pointers */
    return KS_OK;
}

/* ---- weights ---------------------------------------------------------- */

/* w->impl of a 1-D weight: an f32 copy; of a 2-D weight: the packed copy,
 * ceil(rows / CPU_PANEL) panels of cols x CPU_PANEL elements
 * (cpu_kernels.h), the fused parts' rows in order, rows past the end zero,
 * packed in parallel, a panel per task. */
typedef struct { const bk_weight *w; char *dst; size_t es; } pack_ctx;

static const void *weight_row(const bk_weight *w, int64_t row, size_t es) {
    int p = 0;
    while (p + 1 < w->n_parts && row >= w->part_rows[p]) row -= w->part_rows[p++];
    return (const char *)w->part_data[p] + (size_t)row * (size_t)w->cols * es;
}

static void pack_task(void *v, int task, int thread) {
    (void)thread;
    pack_ctx *c = v;
    const void *rows[CPU_PANEL];
    int64_t r0 = (int64_t)task * CPU_PANEL;
    int nr = c->w->rows - r0 < CPU_PANEL ? (int)(c->w->rows - r0) : CPU_PANEL;
    for (int r = 0; r < nr; r++) rows[r] = weight_row(c->w, r0 + r, c->es);
    cpu_pack_panel(c->dst + (size_t)task * CPU_PANEL * (size_t)c->w->cols * c->es, rows, nr, c->w->cols, c->es);
}

static void *pack_matrix(backend *be, const bk_weight *w) {
    size_t es = dtype_size(w->dtype);
    int n_panels = (int)((w->rows + CPU_PANEL - 1) / CPU_PANEL);
    char *dst = cpu_buf_alloc(be, (size_t)n_panels * CPU_PANEL * (size_t)w->cols * es);
    if (!dst) return NULL;
    pack_ctx c = {w, dst, es};
    tp_run(impl_of(be)->pool, n_panels, pack_task, &c);
    return dst;
}

static void *copy_vector(backend *be, const bk_weight *w) {
    float *f = cpu_buf_alloc(be, (size_t)w->rows * sizeof(float));
    if (!f) return NULL;
    int64_t j = 0;
    for (int p = 0; p < w->n_parts; p++)
        for (int64_t i = 0; i < w->part_rows[p]; i++) f[j++] = dtype_elem_f32(w->dtype, w->part_data[p], i);
    return f;
}

static int cpu_weight_init(backend *be, bk_weight *w, const st_tensor *const *parts, int n_parts) {
    memset(w, 0, sizeof *w);
    if (n_parts < 1 || n_parts > BK_MAX_PARTS) return err_set(KS_EINVAL, "weight: bad part count %d", n_parts);
    int two_d = 0;
    for (int i = 0; i < n_parts; i++) {
        const st_tensor *t = parts[i];
        if (t->dtype != DTYPE_F32 && t->dtype != DTYPE_F16 && t->dtype != DTYPE_BF16)
            return err_set(KS_EUNSUPPORTED, "tensor \"%s\": dtype %s not supported (F32, F16, BF16)",
                           t->name, dtype_name(t->dtype));
        if (t->n_dims != 1 && t->n_dims != 2)
            return err_set(KS_EFORMAT, "tensor \"%s\": expected 1 or 2 dims, got %d", t->name, t->n_dims);
        int64_t rows = t->shape[0], cols = t->n_dims == 2 ? t->shape[1] : 1;
        if (i == 0) {
            w->dtype = t->dtype;
            w->cols = cols;
            two_d = t->n_dims == 2;
        } else if (t->dtype != w->dtype || cols != w->cols || (t->n_dims == 2) != two_d) {
            return err_set(KS_EFORMAT, "tensor \"%s\": cannot fuse with \"%s\" (dtype/shape differ)",
                           t->name, parts[0]->name);
        }
        w->part_data[i] = t->data;
        w->part_rows[i] = rows;
        w->rows += rows;
    }
    w->n_parts = n_parts;
    if ((w->impl = weight_share_find(&impl_of(be)->shared, w))) return KS_OK;
    w->impl = two_d ? pack_matrix(be, w) : copy_vector(be, w);
    if (!w->impl)
        return err_set(KS_ENOMEM, "tensor \"%s\": out of memory copying %lld x %lld elements", parts[0]->name,
                       (long long)w->rows, (long long)w->cols);
    weight_share_add(&impl_of(be)->shared, w);
    return KS_OK;
}

static void cpu_weight_release(backend *be, bk_weight *w) {
    if (w->impl && weight_share_release(&impl_of(be)->shared, w->impl)) cpu_buf_free(be, w->impl);
    memset(w, 0, sizeof *w);
}

/* Element (row, col) of a matrix, from its packed panels, as f32. */
static inline float matrix_at(const bk_weight *w, int64_t row, int64_t col) {
    return dtype_elem_f32(w->dtype, w->impl, ((row / CPU_PANEL) * w->cols + col) * CPU_PANEL + row % CPU_PANEL);
}

/* A vector's f32 copy. */
static inline const float *vector_f32(const bk_weight *w) { return w->impl; }

/* ---- embed ------------------------------------------------------------ */

/* out (table.cols) = row id of the packed table */
static void embed_row(float *out, const bk_weight *table, int32_t id) {
    for (int64_t j = 0; j < table->cols; j++) out[j] = matrix_at(table, id, j);
}

static void cpu_embed(backend *be, float *out, const bk_weight *table, const int32_t *ids, int n) {
    (void)be;
    for (int i = 0; i < n; i++) embed_row(out + (int64_t)i * table->cols, table, ids[i]);
}

/* ---- rmsnorm ---------------------------------------------------------- */

typedef struct {
    float *out; int os; const float *in; int is; const bk_weight *w;
    int n_heads, dim; float eps; const cpu_kernels *k;
} rms_ctx;

static void rms_task(void *v, int task, int thread) {
    rms_ctx *c = v;
    int t = task / c->n_heads, h = task % c->n_heads;
    const float *x = c->in + (int64_t)t * c->is + (int64_t)h * c->dim;
    float *y = c->out + (int64_t)t * c->os + (int64_t)h * c->dim;
    float ss = c->k->dot(x, x, c->dim);
    float inv = 1.0f / sqrtf(ss / (float)c->dim + c->eps);
    const float *wf = vector_f32(c->w);
    for (int j = 0; j < c->dim; j++) y[j] = wf[j] * (x[j] * inv);
}

static void cpu_rmsnorm(backend *be, float *out, int out_stride, const float *in, int in_stride,
                        const bk_weight *w, int n, int n_heads, int dim, float eps) {
    rms_ctx c = {out, out_stride, in, in_stride, w, n_heads, dim, eps, impl_of(be)->k};
    int tasks = n * n_heads;
    if (tasks < 64) {
        for (int i = 0; i < tasks; i++) rms_task(&c, i, 0);
    } else {
        tp_run(impl_of(be)->pool, tasks, rms_task, &c);
    }
}

/* ---- matmul ----------------------------------------------------------- */

/* A task: MM_PANELS_PER_TASK panels against every token group, groups
 * outer, so a group's activations (k x mm_group floats) stay in cache
 * across the task's panels. */
#define MM_PANELS_PER_TASK 4

typedef struct {
    float *out; const float *xg; const bk_weight *w; const bk_weight *bias; int n;
    const cpu_kernels *k;
} mm_ctx;

static void mm_task(void *v, int task, int thread) {
    (void)thread;
    mm_ctx *c = v;
    const bk_weight *w = c->w;
    int64_t n_panels = (w->rows + CPU_PANEL - 1) / CPU_PANEL;
    int64_t p0 = (int64_t)task * MM_PANELS_PER_TASK;
    int64_t p1 = p0 + MM_PANELS_PER_TASK < n_panels ? p0 + MM_PANELS_PER_TASK : n_panels;
    cpu_mm_panels(c->k, w->dtype, c->out, (int)w->rows, c->xg, c->n, w->impl, w->cols, w->rows, p0, p1);
    if (c->bias)
        for (int t = 0; t < c->n; t++)
            for (int64_t r = p0 * CPU_PANEL; r < w->rows && r < p1 * CPU_PANEL; r++)
                c->out[(int64_t)t * w->rows + r] += vector_f32(c->bias)[r];
}

typedef struct { float *xg; const float *in; int n; int64_t k; int G; const cpu_kernels *ks; } xpack_ctx;

static void xpack_task(void *v, int task, int thread) {
    (void)thread;
    xpack_ctx *c = v;
    int g = task * c->G, nt = c->n - g < c->G ? c->n - g : c->G;
    c->ks->pack_tokens(c->xg + (int64_t)g * c->k, c->in + (int64_t)g * c->k, (int)c->k, nt, c->k);
}

/* a grow-only scratch of at least n floats */
static float *grow(backend *be, float **p, size_t *cap, size_t n) {
    if (n > *cap) {
        float *q = cpu_buf_alloc(be, n * sizeof(float));
        if (!q) abort(); /* out of memory for a copy of the activations: nothing sane to do */
        cpu_buf_free(be, *p);
        *p = q, *cap = n;
    }
    return *p;
}

static void cpu_matmul(backend *be, float *out, const float *in, const bk_weight *w,
                       const bk_weight *bias, int n) {
    cpu_impl *im = impl_of(be);
    int G = im->k->mm_group, groups = (n + G - 1) / G;
    const float *xg = in; /* one token's group is its row as it is */
    if (n > 1) {
        grow(be, &im->xg, &im->xg_cap, (size_t)groups * G * (size_t)w->cols);
        xpack_ctx xc = {im->xg, in, n, w->cols, G, im->k};
        if (groups > 1) tp_run(im->pool, groups, xpack_task, &xc);
        else xpack_task(&xc, 0, 0);
        xg = im->xg;
    }
    mm_ctx c = {out, xg, w, bias, n, im->k};
    int64_t n_panels = (w->rows + CPU_PANEL - 1) / CPU_PANEL;
    tp_run(im->pool, (int)((n_panels + MM_PANELS_PER_TASK - 1) / MM_PANELS_PER_TASK), mm_task, &c);
}

/* ---- rope ------------------------------------------------------------- */

static void cpu_rope(backend *be, float *x, int row_stride, int n, int n_heads, int head_dim,
                     const int32_t *pos, const float *inv_freq) {
    (void)be;
    int half = head_dim / 2;
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            float ang = (float)pos[t] * inv_freq[i];
            float c = cosf(ang), s = sinf(ang);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + (int64_t)t * row_stride + (int64_t)h * head_dim;
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

/* ---- KV cache --------------------------------------------------------- */

/* The cache's format is be->kv_elem_bytes: f32 rows (slot, kv_dim), or
 * bf16 (rounded to nearest even) with values in rows and keys in the
 * dimension-pair layout of cpu_kernels.h (cpu_kt_index). */
static void cpu_kv_store(backend *be, void *kcv, void *vcv, const float *k, const float *v, int src_stride,
                         const bk_attn_batch *ab, int kv_dim) {
    for (int t = 0; t < ab->n_tokens; t++) {
        int64_t slot = ab->slots[t];
        const float *kt = k + (int64_t)t * src_stride, *vt = v + (int64_t)t * src_stride;
        if (be->kv_elem_bytes == 4) {
            memcpy((float *)kcv + slot * kv_dim, kt, (size_t)kv_dim * sizeof(float));
            memcpy((float *)vcv + slot * kv_dim, vt, (size_t)kv_dim * sizeof(float));
            continue;
        }
        int bs = ab->block_size, i = (int)(slot % bs);
        uint16_t *kd = (uint16_t *)kcv + (slot - i) * kv_dim, *vd = (uint16_t *)vcv + slot * kv_dim;
        for (int c = 0; c < kv_dim; c++) {
            kd[cpu_kt_index(i, c, bs)] = f32_to_bf16(kt[c]);
            vd[c] = f32_to_bf16(vt[c]);
        }
    }
}

/* ---- attention -------------------------------------------------------- */

typedef struct {
    float *out; const float *q; int q_stride; const void *kc, *vc; const bk_attn_batch *ab;
    int n_heads, n_kv, hd; float scale; cpu_impl *im;
    bool per_token;   /* a task per token (all kv heads) instead of per (token, kv head) */
    bool bf16;        /* the cache holds bf16 (else f32) */
} attn_ctx;

/* Token t, kv heads [g0, g1), each with the n_heads/n_kv query heads
 * sharing it (their q rows and output rows are contiguous): scores for
 * every position (each key row read once for the group), softmax per head,
 * then the value rows (each read once for the group). Positions are walked
 * a block at a time, and within a block every kv head of the range in
 * turn, so with the whole range a block's rows are read in one sweep. A
 * head's kernel calls and their order do not depend on the range. sc:
 * the scores. */
static void attn_token(attn_ctx *c, int t, int g0, int g1, float *sc) {
    const bk_attn_batch *ab = c->ab;
    int grp = c->n_heads / c->n_kv, hd = c->hd, kv_dim = c->n_kv * hd, bs = ab->block_size;
    int n_ctx = ab->pos[t] + 1;
    const int32_t *table = ab->block_tables + (int64_t)ab->seq[t] * ab->max_blocks;
    const cpu_kernels *k = c->im->k;
    const float *q = c->q + (int64_t)t * c->q_stride;
    for (int j0 = 0; j0 < n_ctx; j0 += bs) {
        int mb = n_ctx - j0 < bs ? n_ctx - j0 : bs;
        if (c->bf16) { /* keys in column pairs: no widening, no horizontal sums */
            const uint16_t *kt = (const uint16_t *)c->kc + (int64_t)table[j0 / bs] * bs * kv_dim;
            for (int g = g0; g < g1; g++)
                for (int j = j0; j < j0 + mb; j += 16)
                    k->dots_bf16t(sc + (size_t)(g - g0) * grp * n_ctx + j, n_ctx, q + (int64_t)g * grp * hd, grp,
                                  kt + 2 * (j - j0), g * hd, bs, j0 + mb - j < 16 ? j0 + mb - j : 16, hd, c->scale);
            continue;
        }
        const float *kb = (const float *)c->kc + (int64_t)table[j0 / bs] * bs * kv_dim;
        for (int g = g0; g < g1; g++) {
            float *sg = sc + (size_t)(g - g0) * grp * n_ctx;
            for (int j = j0; j < j0 + mb; j += 16) { /* the kernels take runs of up to 16 */
                int m = j0 + mb - j < 16 ? j0 + mb - j : 16;
                k->dots(sg + j, n_ctx, q + (int64_t)g * grp * hd, grp, kb + (int64_t)(j - j0) * kv_dim + g * hd,
                        kv_dim, m, hd, c->scale);
            }
        }
    }
    for (int g = g0; g < g1; g++) {
        float *o = c->out + (int64_t)t * c->n_heads * hd + (int64_t)g * grp * hd;
        memset(o, 0, (size_t)grp * hd * sizeof(float));
        for (int h = 0; h < grp; h++) { /* normalised weights, so the output needs no division */
            float *sh = sc + ((size_t)(g - g0) * grp + h) * n_ctx;
            k->scale(sh, n_ctx, 1.0f / k->exp_sum(sh, n_ctx, k->max(sh, n_ctx)));
        }
    }
    for (int j0 = 0; j0 < n_ctx; j0 += bs) {
        int mb = n_ctx - j0 < bs ? n_ctx - j0 : bs;
        int64_t vb = (int64_t)table[j0 / bs] * bs * kv_dim; /* the block's first value row, in elements */
        for (int g = g0; g < g1; g++) {
            float *sg = sc + (size_t)(g - g0) * grp * n_ctx;
            float *o = c->out + (int64_t)t * c->n_heads * hd + (int64_t)g * grp * hd;
            for (int j = j0; j < j0 + mb; j += 16) {
                int m = j0 + mb - j < 16 ? j0 + mb - j : 16;
                int64_t at = vb + (int64_t)(j - j0) * kv_dim + g * hd;
                if (c->bf16) k->axpys_bf16(o, sg + j, n_ctx, (const uint16_t *)c->vc + at, kv_dim, m, grp, hd);
                else k->axpys(o, sg + j, n_ctx, (const float *)c->vc + at, kv_dim, m, grp, hd);
            }
        }
    }
}

/* A task: a whole token (every kv head, one sweep per KV block) when the
 * call has enough tokens to keep the pool busy, else one (token, kv head). */
static void attn_task(void *v, int task, int thread) {
    attn_ctx *c = v;
    float *sc = c->im->scratch + (size_t)thread * c->im->scratch_per_thread;
    if (c->per_token) attn_token(c, task, 0, c->n_kv, sc);
    else attn_token(c, task / c->n_kv, task % c->n_kv, task % c->n_kv + 1, sc);
}

static void cpu_attention(backend *be, float *out, const float *q, int q_stride, const void *k_cache,
                          const void *v_cache, const bk_attn_batch *ab, int n_heads, int n_kv_heads,
                          int head_dim, float scale) {
    cpu_impl *im = impl_of(be);
    bool per_token = ab->n_tokens >= 4 * tp_threads(im->pool);
    size_t need = (size_t)(per_token ? n_heads : n_heads / n_kv_heads) * (size_t)(ab->max_pos + 1);
    if (need > im->scratch_per_thread) {
        float *s = realloc(im->scratch, need * (size_t)tp_threads(im->pool) * sizeof(float));
        if (!s) abort(); /* out of memory for a few KB of scores: nothing sane to do */
        im->scratch = s;
        im->scratch_per_thread = need;
    }
    attn_ctx c = {out, q, q_stride, k_cache, v_cache, ab, n_heads, n_kv_heads, head_dim, scale, im, per_token,
                  be->kv_elem_bytes == 2};
    tp_run(im->pool, ab->n_tokens * (per_token ? 1 : n_kv_heads), attn_task, &c);
}

/* ---- elementwise ------------------------------------------------------ */

/* Elementwise ops and argmax split over the pool by rows once a call has
 * enough work to pay for the hand-off (each row is computed as it would be
 * alone, so the split changes nothing in the results); small calls (one
 * decode token) stay on the calling thread. */
#define PAR_MIN_ELEMS 16384

typedef struct {
    float *out; const float *in; int dim; const cpu_kernels *k;
} silu_ctx;

static void silu_rows(void *v, int t, int thread) {
    silu_ctx *c = v;
    const float *g = c->in + (int64_t)t * 2 * c->dim, *u = g + c->dim;
    float *o = c->out + (int64_t)t * c->dim;
    c->k->silu_mul(o, g, u, c->dim);
}

static void cpu_silu_mul(backend *be, float *out, const float *gu, int n, int dim) {
    silu_ctx c = {out, gu, dim, impl_of(be)->k};
    if ((int64_t)n * dim < PAR_MIN_ELEMS) {
        for (int t = 0; t < n; t++) silu_rows(&c, t, 0);
    } else {
        tp_run(impl_of(be)->pool, n, silu_rows, &c);
    }
}

typedef struct {
    float *x; const float *y; size_t n;
} add_ctx;

#define ADD_CHUNK 4096

static void add_chunk(void *v, int i, int thread) {
    add_ctx *c = v;
    size_t a = (size_t)i * ADD_CHUNK, b = a + ADD_CHUNK < c->n ? a + ADD_CHUNK : c->n;
    for (size_t j = a; j < b; j++) c->x[j] += c->y[j];
}

static void cpu_add(backend *be, float *x, const float *y, size_t n) {
    add_ctx c = {x, y, n};
    int chunks = (int)((n + ADD_CHUNK - 1) / ADD_CHUNK);
    if (n < PAR_MIN_ELEMS) {
        for (int i = 0; i < chunks; i++) add_chunk(&c, i, 0);
    } else {
        tp_run(impl_of(be)->pool, chunks, add_chunk, &c);
    }
}

static void cpu_qk_norm_rope(backend *be, float *qkv, int stride, int n, int nh, int nkv, int hd, const bk_weight *qn,
                             const bk_weight *kn, float eps, const int32_t *pos, const float *inv_freq, void *kc,
                             void *vc, const bk_attn_batch *ab) {
    if (qn) cpu_rmsnorm(be, qkv, stride, qkv, stride, qn, n, nh, hd, eps);
    if (kn) cpu_rmsnorm(be, qkv + nh * hd, stride, qkv + nh * hd, stride, kn, n, nkv, hd, eps);
    cpu_rope(be, qkv, stride, n, nh + nkv, hd, pos, inv_freq);
    if (kc) cpu_kv_store(be, kc, vc, qkv + nh * hd, qkv + (nh + nkv) * hd, stride, ab, nkv * hd);
}

static void cpu_gather_rows(backend *be, float *out, const float *in, const int32_t *idx, int n, int dim) {
    (void)be;
    for (int i = 0; i < n; i++)
        memmove(out + (int64_t)i * dim, in + (int64_t)idx[i] * dim, (size_t)dim * sizeof(float));
}

/* The separate ops in turn (rmsnorm, matmul, add or SiLU * up): the results
 * equal them bitwise, the residual add and the norm each one pass over rows
 * already in cache (the CPU has nothing to save by folding them). */
static void cpu_matmul_fused(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                             const bk_weight *w, const bk_weight *bias, int n, int mode) {
    cpu_impl *im = impl_of(be);
    int k = (int)w->cols, rows = (int)w->rows;
    if (norm) {
        float *xn = grow(be, &im->fused_in, &im->fused_in_cap, (size_t)n * k);
        cpu_rmsnorm(be, xn, k, in, k, norm, n, 1, k, eps);
        in = xn;
    }
    if (mode == BK_MM_PLAIN) {
        cpu_matmul(be, out, in, w, bias, n);
        return;
    }
    float *y = grow(be, &im->fused_out, &im->fused_out_cap, (size_t)n * rows);
    cpu_matmul(be, y, in, w, bias, n);
    if (mode == BK_MM_ADD) cpu_add(be, out, y, (size_t)n * rows);
    else cpu_silu_mul(be, out, y, n, rows / 2);
}

/* the two calls (one model path on every backend) */
static void cpu_matmul_fused_side(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                                  const bk_weight *w, const bk_weight *bias, int n, float *out2, const bk_weight *w2,
                                  bool add2) {
    cpu_matmul_fused(be, out, in, norm, eps, w, bias, n, BK_MM_PLAIN);
    cpu_matmul_fused(be, out2, in, NULL, 0.f, w2, NULL, n, add2 ? BK_MM_ADD : BK_MM_PLAIN);
}

static void cpu_mtp_input(backend *be, float *out, const bk_weight *table, const int32_t *ids, const float *hid,
                          const int32_t *idx, const bk_weight *w_e, const bk_weight *w_h, int n, int dim, float eps) {
    for (int t = 0; t < n; t++) {
        float *e = out + (int64_t)t * 2 * dim;
        embed_row(e, table, ids[t]);
        memcpy(e + dim, hid + (int64_t)idx[t] * dim, (size_t)dim * sizeof(float));
    }
    cpu_rmsnorm(be, out, 2 * dim, out, 2 * dim, w_e, n, 1, dim, eps);
    cpu_rmsnorm(be, out + dim, 2 * dim, out + dim, 2 * dim, w_h, n, 1, dim, eps);
}

typedef struct {
    int32_t *out; const float *in; int cols; const cpu_kernels *k;
} argmax_ctx;

static void argmax_row(void *v, int r, int thread) {
    argmax_ctx *c = v;
    c->out[r] = c->k->argmax(c->in + (int64_t)r * c->cols, c->cols);
}

static void cpu_argmax(backend *be, int32_t *out, const float *in, int n, int cols) {
    argmax_ctx c = {out, in, cols, impl_of(be)->k};
    if ((int64_t)n * cols < PAR_MIN_ELEMS || n < 2) {
        for (int r = 0; r < n; r++) argmax_row(&c, r, 0);
    } else {
        tp_run(impl_of(be)->pool, n, argmax_row, &c);
    }
}

static void cpu_free(backend *be) {
    cpu_impl *im = impl_of(be);
    if (im) {
        tp_free(im->pool);
        free(im->scratch);
        free(im->xg);
        free(im->fused_in);
        free(im->fused_out);
        for (int i = 0; i < im->shared.n; i++) free(im->shared.e[i].impl); /* weights never released */
        weight_share_free(&im->shared);
        free(im);
    }
    free(be);
}

static void cpu_spec_shift(backend *be, const int32_t *ids, const int32_t *drafts, const int32_t *k, int32_t *tok,
                           int32_t *pos, int32_t *pos2, const int32_t *entry, int32_t *slots, const int32_t *table,
                           int block_size, int n) {
    (void)be;
    int a = 0;
    while (a < *k && ids[a] == drafts[a]) a++;
    for (int j = 0; j < n; j++) {
        pos[j] += a;
        pos2[j] += a;
        int e = entry[j] + a;
        slots[j] = table[e / block_size] * block_size + e % block_size;
    }
    tok[0] = ids[a];
}

static void cpu_penalize_rows(backend *be, float *logits, int cols, int n_rows, const int32_t *tokens,
                              const int32_t *rows, const bk_pen_seq *seqs, int n_seqs, const bk_pen_ent *ent) {
    (void)be;
    for (int s = 0; s < n_seqs; s++) {
        const bk_pen_seq *ps = &seqs[s];
        int32_t fed[BK_PEN_MAX_FED];
        for (int j = 0; j < ps->n_rows && ps->row + j < n_rows; j++) {
            if (j > 0 && j <= BK_PEN_MAX_FED) fed[j - 1] = tokens[rows[ps->row + j]];
            bk_penalize_row(logits + (int64_t)(ps->row + j) * cols, cols, ps, ent, fed, j);
        }
    }
}

static void cpu_mask_rows(backend *be, float *logits, int cols, const int32_t *rows, const uint32_t *bits, int n) {
    (void)be;
    int words = (cols + 31) / 32;
    for (int k = 0; k < n; k++) {
        float *row = logits + (int64_t)rows[k] * cols;
        const uint32_t *b = bits + (size_t)k * words;
        for (int id = 0; id < cols; id++)
            if (!(b[id >> 5] >> (id & 31) & 1)) row[id] = -INFINITY;
    }
}

static void cpu_logprob_rows(backend *be, const float *raw, int cols, const int32_t *ids, const int32_t *rows, int n,
                             int top, bk_logprobs *out) {
    (void)be;
    for (int k = 0; k < n; k++) bk_logprob_row(raw + (int64_t)k * cols, cols, ids[rows[k]], top, &out[k]);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .buf_upload = cpu_buf_copy,
    .buf_download = cpu_buf_copy,
    .weight_init = cpu_weight_init,
    .weight_release = cpu_weight_release,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .matmul_fused = cpu_matmul_fused,
    .matmul_fused_side = cpu_matmul_fused_side,
    .add = cpu_add,
    .qk_norm_rope = cpu_qk_norm_rope,
    .gather_rows = cpu_gather_rows,
    .mtp_input = cpu_mtp_input,
    .argmax = cpu_argmax,
    .penalize_rows = cpu_penalize_rows,
    .mask_rows = cpu_mask_rows,
    .logprob_rows = cpu_logprob_rows,
    .spec_shift = cpu_spec_shift,
    .graph_begin = NULL,
    .free = cpu_free,
};

int backend_cpu_new(backend **out, int n_threads) {
    backend *be = calloc(1, sizeof *be);
    cpu_impl *im = calloc(1, sizeof *im);
    if (!be || !im) goto fail;
    im->pool = tp_new(n_threads);
    if (!im->pool) goto fail;
    im->k = cpu_kernels_select();
    be->ops = &cpu_ops;
    be->impl = im;
    be->kv_elem_bytes = 2;
    be->kv_elem_choices = 1u << 2 | 1u << 4;
    *out = be;
    return KS_OK;
fail:
    free(im);
    free(be);
    return err_set(KS_ENOMEM, "cpu backend: out of memory");
}

const char *backend_cpu_isa(const backend *be) { return ((const cpu_impl *)be->impl)->k->isa; }

void backend_free(backend *be) {
    if (be) be->ops->free(be);
}
