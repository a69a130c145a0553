/* kv_cache.h — paged KV cache: a pool of fixed-size blocks shared by all
 * sequences, and per-sequence block tables (vLLM-style paging).
 *
 * Layout per layer (backend buffers, owned by kv_cache):
 *   k[l], v[l]: (n_blocks, block_size, kv_dim) float, kv_dim = n_kv_heads * head_dim
 * Token at position p of a sequence lives in slot
 *   blocks[p / block_size] * block_size + p % block_size.
 * A kv_seq's block table is host memory owned by the kv_seq (kv_seq_release
 * drops its references and frees the table). Blocks are reference counted:
 * sequences and the prefix cache (kv/prefix_cache.h) may share one; a block
 * returns to the free list when its last reference goes. */
#ifndef KS_KV_CACHE_H
#define KS_KV_CACHE_H

#include <stdint.h>

#include "backend/backend.h"

#define KV_BLOCK_SIZE 16

typedef struct prefix_cache prefix_cache;

typedef struct kv_cache {
    unsigned long id;     /* unique in the process (from 1): what a recorded forward is keyed by —
                           * a freed cache's buffers may come back at the same addresses, some of them */
    backend *be;
    int n_layers, kv_dim, block_size, n_blocks;
    void **k, **v;        /* (n_layers) backend buffers, in the backend's KV format */
    int32_t *free_list;   /* host stack of free block ids */
    int n_free;
    int32_t *refs;        /* (n_blocks) references held on each block */
    prefix_cache *pc;     /* borrowed; NULL = no prefix caching. Reserve evicts from it. */
} kv_cache;

typedef struct {
    int32_t *blocks;      /* host, (cap) */
    int n_blocks, cap;
    int n_tokens;         /* positions [0, n_tokens) hold valid KV */
} kv_seq;

int kv_cache_init(kv_cache *kv, backend *be, int n_layers, int kv_dim, int block_size, int n_blocks);
void kv_cache_free(kv_cache *kv);
/* Ensures blocks exist for positions [0, n_tokens). KS_ENOMEM-style error
 * (KS_EINVAL with a message) when the pool is exhausted; nothing leaks. */
int kv_seq_reserve(kv_cache *kv, kv_seq *s, int n_tokens);
/* Keeps positions [0, n_tokens), returns blocks past them to the pool. */
void kv_seq_truncate(kv_cache *kv, kv_seq *s, int n_tokens);
void kv_seq_release(kv_cache *kv, kv_seq *s);
/* Starts an empty sequence on shared blocks (a cached prefix): takes a
 * reference on each; the sequence then holds n tokens of KV. */
int kv_seq_share(kv_cache *kv, kv_seq *s, const int32_t *blocks, int n_blocks, int n_tokens);
void kv_block_ref(kv_cache *kv, int block);
void kv_block_unref(kv_cache *kv, int block);
static inline int kv_free_blocks(const kv_cache *kv) { return kv->n_free; }

#endif
