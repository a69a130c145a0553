/* kv_cache.c — block pool and block tables (see kv_cache.h). */
#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/prefix_cache.h"

int kv_cache_init(kv_cache *kv, backend *be, int n_layers, int kv_dim, int block_size, int n_blocks) {
    memset(kv, 0, sizeof *kv);
    if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return err_set(KS_EINVAL, "kv cache: bad geometry");
    size_t bytes = (size_t)n_blocks * (size_t)block_size * (size_t)kv_dim * (size_t)be->kv_elem_bytes; /* per layer, K or V */
    static unsigned long next_id;
    kv->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    kv->be = be;
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->k = calloc((size_t)n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)n_layers, sizeof *kv->v);
    kv->free_list = malloc((size_t)n_blocks * sizeof *kv->free_list);
    kv->refs = calloc((size_t)n_blocks, sizeof *kv->refs);
    if (!kv->k || !kv->v || !kv->free_list || !kv->refs) goto oom;
    for (int l = 0; l < n_layers; l++) {
        kv->k[l] = be->ops->buf_alloc(be, bytes);
        kv->v[l] = be->ops->buf_alloc(be, bytes);
        if (!kv->k[l] || !kv->v[l]) goto oom;
    }
    for (int i = 0; i < n_blocks; i++) kv->free_list[i] = n_blocks - 1 - i; /* pop gives 0,1,2.. */
    kv->n_free = n_blocks;
    return KS_OK;
oom:
    kv_cache_free(kv);
    return err_set(KS_ENOMEM, "kv cache: out of %s memory for %d blocks of %d tokens (%.2f GiB over %d layers): a smaller --kv-mem, "
                   "--ctx-size or --max-concurrent may fit",
                   be->ops->name, n_blocks, block_size, 2.0 * n_layers * (double)bytes / (1 << 30), n_layers);
}

void kv_cache_free(kv_cache *kv) {
    if (kv->k)
        for (int l = 0; l < kv->n_layers; l++) kv->be->ops->buf_free(kv->be, kv->k[l]);
    if (kv->v)
        for (int l = 0; l < kv->n_layers; l++) kv->be->ops->buf_free(kv->be, kv->v[l]);
    free(kv->k);
    free(kv->v);
    free(kv->free_list);
    free(kv->refs);
    memset(kv, 0, sizeof *kv);
}

int kv_seq_reserve(kv_cache *kv, kv_seq *s, int n_tokens) {
    int need = (n_tokens + kv->block_size - 1) / kv->block_size;
    if (need <= s->n_blocks) return KS_OK;
    if (need - s->n_blocks > kv->n_free && kv->pc)
        prefix_cache_evict(kv->pc, kv, need - s->n_blocks - kv->n_free);
    if (need - s->n_blocks > kv->n_free)
        return err_set(KS_EINVAL, "KV cache full: need %d more blocks of %d tokens, %d free",
                       need - s->n_blocks, kv->block_size, kv->n_free);
    if (need > s->cap) {
        int cap = s->cap ? s->cap : 8;
        while (cap < need) cap *= 2;
        int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof *nb);
        if (!nb) return err_set(KS_ENOMEM, "kv cache: out of memory for a block table");
        s->blocks = nb;
        s->cap = cap;
    }
    while (s->n_blocks < need) {
        int b = kv->free_list[--kv->n_free];
        kv->refs[b] = 1;
        s->blocks[s->n_blocks++] = b;
    }
    return KS_OK;
}

void kv_block_ref(kv_cache *kv, int block) {
    int before = kv->refs[block]++;
    if (kv->pc) prefix_cache_ref_changed(kv->pc, block, before, before + 1);
}

void kv_block_unref(kv_cache *kv, int block) {
    int after = --kv->refs[block];
    if (kv->pc) prefix_cache_ref_changed(kv->pc, block, after + 1, after);
    if (after == 0) kv->free_list[kv->n_free++] = block;
}

int kv_seq_share(kv_cache *kv, kv_seq *s, const int32_t *blocks, int n_blocks, int n_tokens) {
    if (n_blocks > s->cap) {
        int32_t *nb = realloc(s->blocks, (size_t)n_blocks * sizeof *nb);
        if (!nb) return err_set(KS_ENOMEM, "kv cache: out of memory for a block table");
        s->blocks = nb;
        s->cap = n_blocks;
    }
    for (int i = 0; i < n_blocks; i++) {
        s->blocks[i] = blocks[i];
        kv_block_ref(kv, blocks[i]);
    }
    s->n_blocks = n_blocks;
    s->n_tokens = n_tokens;
    return KS_OK;
}

void kv_seq_truncate(kv_cache *kv, kv_seq *s, int n_tokens) {
    if (n_tokens < 0) n_tokens = 0;
    int keep = (n_tokens + kv->block_size - 1) / kv->block_size;
    while (s->n_blocks > keep) kv_block_unref(kv, s->blocks[--s->n_blocks]);
    if (s->n_tokens > n_tokens) s->n_tokens = n_tokens;
}

void kv_seq_release(kv_cache *kv, kv_seq *s) {
    kv_seq_truncate(kv, s, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}
