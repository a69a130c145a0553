/* prefix_cache.c — hash-chained full KV blocks with LRU (see prefix_cache.h).
 * Per pool block: its chain key, parent key and tokens (checked on lookup, so
 * a hash collision can never hand out wrong KV), and LRU links. The index is
 * an open-addressing table key -> block with backward-shift deletion. */
#include "kv/prefix_cache.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/err.h"
#include "kv/kv_cache.h"

typedef struct {
    uint64_t key, parent;
    int prev, next;          /* LRU links (-1 = none); head = most recent */
    int cached;
} pc_block;

struct prefix_cache {
    int n_pool, bs, max_blocks, n_cached, lag;
    int n_idle;              /* cached blocks only the cache holds (refs == 1) */
    pc_block *b;             /* (n_pool) */
    int32_t *tokens;         /* (n_pool, bs) */
    int *table;              /* (cap) block id or -1 */
    int cap;
    int head, tail;
};

static uint64_t chain_key(uint64_t parent, const int32_t *toks, int bs) {
    return XXH64(toks, (size_t)bs * sizeof *toks, parent) | 1; /* never 0 */
}

prefix_cache *prefix_cache_new(int n_pool_blocks, int block_size, int max_blocks, int lag) {
    prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->lag = lag;
    pc->n_pool = n_pool_blocks;
    pc->bs = block_size;
    pc->max_blocks = max_blocks < n_pool_blocks ? max_blocks : n_pool_blocks;
    pc->cap = 16;
    while (pc->cap < 2 * n_pool_blocks) pc->cap *= 2;
    pc->b = calloc((size_t)n_pool_blocks, sizeof *pc->b);
    pc->tokens = malloc((size_t)n_pool_blocks * block_size * sizeof *pc->tokens);
    pc->table = malloc((size_t)pc->cap * sizeof *pc->table);
    if (!pc->b || !pc->tokens || !pc->table) {
        prefix_cache_free(pc);
        return NULL;
    }
    for (int i = 0; i < pc->cap; i++) pc->table[i] = -1;
    for (int i = 0; i < n_pool_blocks; i++) pc->b[i].prev = pc->b[i].next = -1; /* (in no list) */
    pc->head = pc->tail = -1;
    return pc;
}

void prefix_cache_free(prefix_cache *pc) {
    if (!pc) return;
    free(pc->b);
    free(pc->tokens);
    free(pc->table);
    free(pc);
}

int prefix_cache_size(const prefix_cache *pc) { return pc ? pc->n_cached : 0; }

static size_t slot_of(const prefix_cache *pc, uint64_t key) { return (size_t)(key ^ (key >> 31)) & (size_t)(pc->cap - 1); }

static int table_find(const prefix_cache *pc, uint64_t key) {
    for (size_t h = slot_of(pc, key);; h = (h + 1) & (size_t)(pc->cap - 1)) {
        int id = pc->table[h];
        if (id < 0) return -1;
        if (pc->b[id].key == key) return id;
    }
}

static void table_put(prefix_cache *pc, int id) {
    size_t h = slot_of(pc, pc->b[id].key);
    while (pc->table[h] >= 0) h = (h + 1) & (size_t)(pc->cap - 1);
    pc->table[h] = id;
}

static void table_del(prefix_cache *pc, int id) {
    size_t h = slot_of(pc, pc->b[id].key), m = (size_t)(pc->cap - 1);
    while (pc->table[h] != id) h = (h + 1) & m;
    pc->table[h] = -1;
    for (size_t j = (h + 1) & m; pc->table[j] >= 0; j = (j + 1) & m) { /* backward shift */
        int o = pc->table[j];
        size_t home = slot_of(pc, pc->b[o].key);
        /* move o into the hole when its home is not in (h, j] (cyclically) */
        if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
            pc->table[h] = o;
            pc->table[j] = -1;
            h = j;
        }
    }
}

static void lru_unlink(prefix_cache *pc, int id) {
    pc_block *x = &pc->b[id];
    if (x->prev >= 0) pc->b[x->prev].next = x->next;
    else pc->head = x->next;
    if (x->next >= 0) pc->b[x->next].prev = x->prev;
    else pc->tail = x->prev;
    x->prev = x->next = -1;
}

static void lru_push_front(prefix_cache *pc, int id) {
    pc_block *x = &pc->b[id];
    x->prev = -1;
    x->next = pc->head;
    if (pc->head >= 0) pc->b[pc->head].prev = id;
    pc->head = id;
    if (pc->tail < 0) pc->tail = id;
}

/* A chain's block made recent (unlinked if linked): block 0 at the front,
 * each later one just behind the one before it (prev: that block's id, -1
 * for block 0), so a chain is evicted from its end and what stays cached is
 * always a prefix a lookup can still reach. */
static void lru_touch(prefix_cache *pc, int id, int prev) {
    if (pc->b[id].prev >= 0 || pc->b[id].next >= 0 || pc->head == id) lru_unlink(pc, id);
    if (prev < 0 || !pc->b[prev].cached) { /* (block 0, or the one before was evicted meanwhile) */
        lru_push_front(pc, id);
        return;
    }
    pc_block *x = &pc->b[id], *p = &pc->b[prev];
    x->prev = prev;
    x->next = p->next;
    if (p->next >= 0) pc->b[p->next].prev = id;
    else pc->tail = id;
    p->next = id;
}

/* the chain key through the first `lag` token blocks (the parent of block 0) */
static uint64_t lag_key(const prefix_cache *pc, const int32_t *tokens) {
    uint64_t key = 0;
    for (int i = 0; i < pc->lag; i++) key = chain_key(key, tokens + (size_t)i * pc->bs, pc->bs);
    return key;
}

int prefix_cache_lookup(prefix_cache *pc, kv_cache *kv, const int32_t *tokens, int n_blocks, int32_t *out) {
    (void)kv;
    uint64_t parent = lag_key(pc, tokens);
    int found = 0;
    tokens += (size_t)pc->lag * pc->bs;
    for (int i = 0; i < n_blocks; i++) {
        const int32_t *t = tokens + (size_t)i * pc->bs;
        uint64_t key = chain_key(parent, t, pc->bs);
        int id = table_find(pc, key);
        if (id < 0 || pc->b[id].parent != parent ||
            memcmp(pc->tokens + (size_t)id * pc->bs, t, (size_t)pc->bs * sizeof *t))
            break;
        lru_touch(pc, id, found ? out[found - 1] : -1);
        out[found++] = id;
        parent = key;
    }
    return found;
}

int prefix_cache_share(prefix_cache *pc, kv_cache *kv, kv_seq *s, const int32_t *tokens, int n_blocks, int all) {
    if (n_blocks <= 0) return 0;
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    if (!blocks) return 0;
    int found = prefix_cache_lookup(pc, kv, tokens, n_blocks, blocks);
    if ((all && found < n_blocks) || (found > 0 && kv_seq_share(kv, s, blocks, found, found * pc->bs) != KS_OK))
        found = 0;
    free(blocks);
    return found;
}

static void drop(prefix_cache *pc, kv_cache *kv, int id) {
    table_del(pc, id);
    lru_unlink(pc, id);
    pc->b[id].cached = 0;
    pc->n_cached--;
    pc->n_idle -= kv->refs[id] == 1;
    kv_block_unref(kv, id);
}

void prefix_cache_ref_changed(prefix_cache *pc, int id, int refs_before, int refs_after) {
    if (pc->b[id].cached) pc->n_idle += (refs_after == 1) - (refs_before == 1);
}

int prefix_cache_evict(prefix_cache *pc, kv_cache *kv, int need) {
    int freed = 0;
    for (int id = pc->tail; id >= 0 && freed < need;) {
        int prev = pc->b[id].prev;
        if (kv->refs[id] == 1) { /* only the cache holds it */
            drop(pc, kv, id);
            freed++;
        }
        id = prev;
    }
    return freed;
}

int prefix_cache_idle(const prefix_cache *pc) { return pc->n_idle; }

void prefix_cache_insert(prefix_cache *pc, kv_cache *kv, const int32_t *tokens, int n_blocks, const int32_t *blocks) {
    uint64_t parent = lag_key(pc, tokens);
    int last = -1; /* the chain's block before this one, as cached */
    tokens += (size_t)pc->lag * pc->bs;
    for (int i = 0; i < n_blocks; i++) {
        const int32_t *t = tokens + (size_t)i * pc->bs;
        uint64_t key = chain_key(parent, t, pc->bs);
        int id = blocks[i];
        int have = table_find(pc, key);
        if (have < 0 && !pc->b[id].cached) {
            if (pc->n_cached >= pc->max_blocks && prefix_cache_evict(pc, kv, 1) == 0) return;
            kv_block_ref(kv, id); /* before it counts as cached: the sequence still holds it */
            pc->b[id].key = key;
            pc->b[id].parent = parent;
            pc->b[id].cached = 1;
            pc->n_idle += kv->refs[id] == 1;
            memcpy(pc->tokens + (size_t)id * pc->bs, t, (size_t)pc->bs * sizeof *t);
            table_put(pc, id);
            lru_touch(pc, id, last);
            pc->n_cached++;
            last = id;
        } else if (have >= 0) { /* (cached already, maybe under another block: the chain goes on through it) */
            lru_touch(pc, have, last);
            last = have;
        }
        parent = key;
    }
}
