/* prefix_cache.h — reuse of KV blocks across requests: full blocks are keyed
 * by a hash chain of their token ids (xxHash64 of the block's tokens seeded
 * with the previous block's key), kept after their sequence ends, and handed
 * to any later sequence whose tokens start the same way. LRU eviction under an
 * entry limit, and on demand when the KV pool runs out of free blocks.
 *
 * Ownership: the cache holds one reference on each block it keeps
 * (kv_cache.refs); sequences sharing a block hold their own. Only blocks no
 * sequence uses are evicted. Shared blocks are never written: a sequence
 * shares at most the full blocks strictly before its last prompt token, and
 * writes KV only at positions past them (so no copy-on-write is needed). */
#ifndef KS_PREFIX_CACHE_H
#define KS_PREFIX_CACHE_H

#include <stdint.h>

#include "kv/kv_cache.h"

typedef struct prefix_cache prefix_cache;

/* max_blocks: most blocks kept (<= the pool). lag: block i is keyed by the
 * chain through token block i + lag (0 for KV; 1 for entries whose block i
 * also depends on the first token of block i + 1, as the MTP head's, whose
 * entry for position q reads the hidden state at q - 1), so lookups and
 * inserts take tokens for n_blocks + lag blocks. */
prefix_cache *prefix_cache_new(int n_pool_blocks, int block_size, int max_blocks, int lag);
void prefix_cache_free(prefix_cache *pc);
/* Leading full blocks of tokens[0..n_blocks*bs) present in the cache, at
 * most n_blocks; their ids go to out (the caller takes references). */
int prefix_cache_lookup(prefix_cache *pc, kv_cache *kv, const int32_t *tokens, int n_blocks, int32_t *out);
/* Starts the empty sequence s (of kv) on the leading cached blocks of
 * tokens, at most n_blocks, taking a reference on each: lookup, then
 * kv_seq_share. With all, only when every one of the n_blocks is cached.
 * Returns the blocks shared (0: none, s untouched). */
int prefix_cache_share(prefix_cache *pc, kv_cache *kv, kv_seq *s, const int32_t *tokens, int n_blocks, int all);
/* Offers the full blocks of a sequence (blocks[i] holds tokens [i*bs,
 * (i+1)*bs) with valid KV); new ones are kept (the cache takes a reference). */
void prefix_cache_insert(prefix_cache *pc, kv_cache *kv, const int32_t *tokens, int n_blocks, const int32_t *blocks);
/* Drops up to `need` unused cached blocks, least recently used first, back to
 * the pool; returns how many. */
int prefix_cache_evict(prefix_cache *pc, kv_cache *kv, int need);
/* Cached blocks no sequence uses (evictable); a counter kept through
 * prefix_cache_ref_changed, so the KV cache must point at this cache
 * (kv_cache.pc) while it holds blocks. */
int prefix_cache_idle(const prefix_cache *pc);
/* Called by kv_cache on every reference change of a block. */
void prefix_cache_ref_changed(prefix_cache *pc, int id, int refs_before, int refs_after);
int prefix_cache_size(const prefix_cache *pc);

#endif
