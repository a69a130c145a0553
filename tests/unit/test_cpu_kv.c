/* test_cpu_kv.c — the CPU backend's KV formats: a bf16 cache (the default)
 * stores each element rounded to nearest even (values in rows, keys in the
 * column pairs of cpu_kt_index), and attention over it equals attention
 * over an f32 cache (--kv-type f32) holding the same rounded values within
 * 1e-5 of the largest output (the scores are summed in another order), for a lone token, a few
 * tokens (a task per token and kv head) and a batch large enough for a
 * task per token, each token's output bitwise the one it gets alone;
 * --kv-type names only bf16 and f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/dtype.h"
#include "test.h"

#define NH 8
#define NKV 2
#define HD 64
#define BS 16
#define L 77 /* keys: four whole blocks and a partial one */
#define NB 8 /* blocks in the pool */

static float frnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 16384.0f - 2.0f;
}

TEST(test_cpu_bf16_kv_is_f32_attention_on_rounded_values_and_batch_invariant) {
    backend *b16 = NULL, *b32 = NULL;
    CHECK(backend_cpu_new(&b16, 2) == 0);
    CHECK(backend_cpu_new(&b32, 2) == 0);
    if (!b16 || !b32) { backend_free(b16); backend_free(b32); return; }
    CHECK(b16->kv_elem_bytes == 2); /* the default */
    CHECK(backend_set_kv_type(b32, "f32") == 0 && b32->kv_elem_bytes == 4);
    CHECK(backend_set_kv_type(b32, "f16") != 0 && b32->kv_elem_bytes == 4); /* not a format: refused, unchanged */
    int kv_dim = NKV * HD, qs = (NH + 2 * NKV) * HD;
    size_t cache = (size_t)NB * BS * kv_dim;
    uint16_t *kc16 = malloc(cache * 2), *vc16 = malloc(cache * 2);
    float *kc32 = malloc(cache * 4), *vc32 = malloc(cache * 4);
    float *rows = malloc((size_t)L * qs * 4), *rounded = malloc((size_t)L * qs * 4);
    float *o16 = malloc((size_t)L * NH * HD * 4), *o32 = malloc((size_t)L * NH * HD * 4);
    int32_t table[NB] = {5, 2, 7, 0, 3, 1, 6, 4}, pos[L], seq[L], slots[L];
    unsigned seed = 3;
    for (int i = 0; i < L * qs; i++) {
        rows[i] = frnd(&seed);
        rounded[i] = bf16_to_f32(f32_to_bf16(rows[i]));
    }
    for (int t = 0; t < L; t++) {
        pos[t] = t;
        seq[t] = 0;
        slots[t] = table[t / BS] * BS + t % BS;
    }
    bk_attn_batch ab = {.n_tokens = L, .pos = pos, .seq = seq, .slots = slots, .block_tables = table,
                        .max_blocks = NB, .block_size = BS, .max_pos = L - 1, .kv_capacity = NB * BS};
    /* the bf16 cache from the unrounded rows, the f32 one from the rounded */
    b16->ops->kv_store(b16, kc16, vc16, rows + NH * HD, rows + (NH + NKV) * HD, qs, &ab, kv_dim);
    b32->ops->kv_store(b32, kc32, vc32, rounded + NH * HD, rounded + (NH + NKV) * HD, qs, &ab, kv_dim);
    int bad = 0;
    for (int t = 0; t < L; t++)
        for (int c = 0; c < kv_dim; c++) {
            int64_t block = slots[t] / BS, i = slots[t] % BS;
            bad += kc16[block * BS * kv_dim + cpu_kt_index((int)i, c, BS)] !=
                       f32_to_bf16(rows[(size_t)t * qs + NH * HD + c]) ||
                   vc16[(size_t)slots[t] * kv_dim + c] != f32_to_bf16(rows[(size_t)t * qs + (NH + NKV) * HD + c]) ||
                   kc32[(size_t)slots[t] * kv_dim + c] != rounded[(size_t)t * qs + NH * HD + c];
        }
    CHECK_MSG(bad == 0, "%d stored elements are not the rows rounded to bf16 in the cache's layout", bad);
    /* queries: the last token alone, 3 tokens, then all 77 (one task per token) */
    int counts[3] = {1, 3, L};
    float *alone = malloc((size_t)NH * HD * 4);
    for (int ci = 0; ci < 3; ci++) {
        int n = counts[ci], first = L - n;
        bk_attn_batch qb = ab;
        qb.n_tokens = n;
        qb.pos = pos + first;
        qb.seq = seq + first;
        qb.slots = slots + first;
        const float *q = rows + (size_t)first * qs;
        b16->ops->attention(b16, o16, q, qs, kc16, vc16, &qb, NH, NKV, HD, 0.125f);
        b32->ops->attention(b32, o32, q, qs, kc32, vc32, &qb, NH, NKV, HD, 0.125f);
        double err = 0, mag = 0; /* largest difference, relative to the largest output */
        for (int i = 0; i < n * NH * HD; i++) {
            err = fmax(err, fabs(o16[i] - o32[i]));
            mag = fmax(mag, fabs(o32[i]));
        }
        CHECK_MSG(err <= 1e-5 * mag, "%d tokens: bf16 cache vs f32 attention over the rounded values: %g of %g", n, err,
                  mag);
        for (int t = 0; t < n; t += n > 3 ? 19 : 1) { /* batch invariance */
            bk_attn_batch one = qb;
            one.n_tokens = 1;
            one.pos += t;
            one.seq += t;
            one.slots += t;
            b16->ops->attention(b16, alone, q + (size_t)t * qs, qs, kc16, vc16, &one, NH, NKV, HD, 0.125f);
            CHECK_MSG(!memcmp(alone, o16 + (size_t)t * NH * HD, (size_t)NH * HD * 4),
                      "token %d of %d: its output alone differs from the batch's", t, n);
        }
    }
    free(alone);
    free(kc16); free(vc16); free(kc32); free(vc32); free(rows); free(rounded); free(o16); free(o32);
    backend_free(b16);
    backend_free(b32);
}
