/* test_prefix_cache.c — the prefix cache: hash-chain lookup, LRU eviction
 * and reference counts on a bare KV pool, a chain evicted from its end;
 * then on tinycoder, a request
 * sharing a 2k-token prefix with an earlier one is served >= 2000 prompt
 * tokens from the cache with output identical to a cold engine's; a tiny
 * cache (constant eviction) keeps outputs correct; 8 concurrent requests
 * give the outputs they give alone. */
#include <stdlib.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "kv/prefix_cache.h"
#include "engine_drain.h"
#include "tok/tok.h"
#include "test.h"

TEST(test_prefix_cache_chain_lru_refcounts) {
    backend *be = NULL;
    CHECK(backend_cpu_new(&be, 1) == 0);
    kv_cache kv;
    CHECK(kv_cache_init(&kv, be, 1, 4, 4, 8) == 0); /* 8 blocks of 4 tokens */
    prefix_cache *pc = prefix_cache_new(8, 4, 3, 0);   /* keeps at most 3 */
    kv.pc = pc;
    int32_t toks[16];
    for (int i = 0; i < 16; i++) toks[i] = 100 + i;
    kv_seq a = {0};
    CHECK(kv_seq_reserve(&kv, &a, 12) == 0); /* 3 blocks */
    prefix_cache_insert(pc, &kv, toks, 3, a.blocks);
    CHECK_EQ_INT(prefix_cache_size(pc), 3);
    kv_seq_release(&kv, &a);
    CHECK_EQ_INT(kv_free_blocks(&kv), 5); /* the cache holds 3 */
    CHECK_EQ_INT(prefix_cache_idle(pc), 3);
    int32_t got[4];
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, toks, 3, got), 3);
    /* a different second block breaks the chain after block 0 */
    int32_t other[12];
    memcpy(other, toks, sizeof other);
    other[5] = 7;
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, other, 3, got), 1);
    /* same block contents at a different place in the chain do not match */
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, toks + 4, 2, got), 0);
    /* a sequence sharing blocks: they cannot be evicted */
    kv_seq b = {0};
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, toks, 2, got), 2);
    CHECK(kv_seq_share(&kv, &b, got, 2, 8) == 0);
    CHECK_EQ_INT(prefix_cache_idle(pc), 1);
    CHECK_EQ_INT(prefix_cache_evict(pc, &kv, 3), 1);
    CHECK_EQ_INT(prefix_cache_size(pc), 2);
    /* the pool runs dry: reserve evicts idle cached blocks */
    kv_seq_release(&kv, &b);
    CHECK_EQ_INT(prefix_cache_idle(pc), 2); /* released: both cached blocks idle again */
    kv_seq c = {0};
    CHECK(kv_seq_reserve(&kv, &c, 32) == 0); /* all 8 blocks */
    CHECK_EQ_INT(prefix_cache_size(pc), 0);
    CHECK_EQ_INT(prefix_cache_idle(pc), 0);
    CHECK(kv_seq_reserve(&kv, &c, 36) != 0); /* and no more */
    kv_seq_release(&kv, &c);
    CHECK_EQ_INT(kv_free_blocks(&kv), 8);
    prefix_cache_free(pc);
    kv_cache_free(&kv);
    backend_free(be);
}

/* Eviction takes a chain from its end: what stays cached of a prompt is
 * always a prefix a lookup reaches (block 0 evicted first would strand the
 * rest: cached, holding KV, never found again) */
TEST(test_prefix_cache_evicts_a_chain_from_its_end) {
    backend *be = NULL;
    CHECK(backend_cpu_new(&be, 1) == 0);
    kv_cache kv;
    CHECK(kv_cache_init(&kv, be, 1, 4, 4, 8) == 0); /* 8 blocks of 4 tokens */
    prefix_cache *pc = prefix_cache_new(8, 4, 8, 0);
    kv.pc = pc;
    int32_t a[12], b[8], got[4];
    for (int i = 0; i < 12; i++) a[i] = 100 + i;
    for (int i = 0; i < 8; i++) b[i] = 500 + i;
    kv_seq sa = {0}, sb = {0};
    CHECK(kv_seq_reserve(&kv, &sa, 12) == 0);
    prefix_cache_insert(pc, &kv, a, 3, sa.blocks);
    kv_seq_release(&kv, &sa);
    CHECK(kv_seq_reserve(&kv, &sb, 8) == 0);
    prefix_cache_insert(pc, &kv, b, 2, sb.blocks);
    kv_seq_release(&kv, &sb);
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, a, 3, got), 3); /* a is the most recent now */
    CHECK_EQ_INT(prefix_cache_evict(pc, &kv, 1), 1);          /* b's end */
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, b, 2, got), 1);
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, a, 3, got), 3);
    CHECK_EQ_INT(prefix_cache_evict(pc, &kv, 2), 2); /* b's block 0, then a's end */
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, b, 2, got), 0);
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, a, 3, got), 2);
    CHECK_EQ_INT(prefix_cache_evict(pc, &kv, 1), 1);
    CHECK_EQ_INT(prefix_cache_lookup(pc, &kv, a, 3, got), 1);
    CHECK_EQ_INT(prefix_cache_size(pc), 1);
    prefix_cache_free(pc);
    kv_cache_free(&kv);
    backend_free(be);
}

typedef struct {
    int32_t toks[64];
    int n, cached;
} res;

static void run_one(engine *e, const int32_t *ids, int n, res *out) {
    engine_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 32;
    sample_params_default(&p.sp);
    p.sp.temperature = 0;
    engine_req *r = engine_submit(e, ids, n, &p);
    CHECK(r != NULL);
    memset(out, 0, sizeof *out);
    if (!r) return;
    engine_event done;
    out->n = engine_drain(r, out->toks, 64, &done, NULL, NULL);
    if (out->n > 64) out->n = 64;
    if (done.type == ENGINE_EV_DONE) out->cached = done.n_cached;
}

TEST(test_prefix_cache_shared_prefix_identical_output) {
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) SKIP("../shared/models/tinycoder not found");
    backend *be = NULL;
    model *m = NULL;
    tokenizer *tk = NULL;
    CHECK(backend_cpu_new(&be, 2) == 0);
    CHECK(model_load(&m, dir, be) == 0);
    CHECK(tok_load(&tk, dir) == 0);
    if (!m || !tk) return;
    /* a 2k+-token shared prefix (source code) and two different endings */
    char *src = NULL;
    size_t len = 0;
    FILE *f = fopen("src/engine/engine.c", "rb");
    CHECK(f != NULL);
    if (f) {
        src = malloc(16384);
        len = fread(src, 1, 16383, f);
        fclose(f);
    }
    int32_t *base;
    int nb;
    CHECK(tok_encode(tk, src, len, true, &base, &nb) == 0);
    CHECK(nb > 2100);
    int np = 2100;
    int32_t *p1 = malloc((np + 8) * 4), *p2 = malloc((np + 8) * 4);
    memcpy(p1, base, np * 4);
    memcpy(p2, base, np * 4);
    int32_t end1[3] = {100, 200, 300}, end2[3] = {101, 201, 301};
    memcpy(p1 + np, end1, sizeof end1);
    memcpy(p2 + np, end2, sizeof end2);
    engine_config cold = {.max_concurrent = 2, .prefill_chunk = 512, .ctx_size = 4096};
    engine_config warm = cold, tiny = cold;
    warm.prefix_cache = true;
    tiny.prefix_cache = true;
    tiny.prefix_cache_blocks = 4; /* far smaller than the prefix: constant eviction */
    res c1, c2, w1, w2, w3, t1, t2;
    engine *e = NULL;
    CHECK(engine_start(&e, m, tk, &cold) == 0);
    run_one(e, p1, np + 3, &c1);
    run_one(e, p2, np + 3, &c2);
    engine_stop(e);
    CHECK(engine_start(&e, m, tk, &warm) == 0);
    run_one(e, p1, np + 3, &w1);
    run_one(e, p2, np + 3, &w2);
    run_one(e, p2, np + 3, &w3); /* the whole prompt but its last block */
    engine_stats st;
    engine_get_stats(e, &st);
    engine_stop(e);
    CHECK(engine_start(&e, m, tk, &tiny) == 0);
    run_one(e, p1, np + 3, &t1);
    run_one(e, p2, np + 3, &t2);
    engine_stop(e);
    printf("    cached tokens: first %d, second %d, repeat %d (of %d); hit rate %.2f\n", w1.cached, w2.cached,
           w3.cached, np + 3, st.prefix_lookup_tokens ? (double)st.prefix_hit_tokens / st.prefix_lookup_tokens : 0);
    CHECK_EQ_INT(w1.cached, 0);
    CHECK(w2.cached >= 2000);
    CHECK(w3.cached >= w2.cached);
    CHECK(c1.n == 32 && c2.n == 32);
    CHECK(w1.n == c1.n && !memcmp(w1.toks, c1.toks, c1.n * 4));
    CHECK_MSG(w2.n == c2.n && !memcmp(w2.toks, c2.toks, c2.n * 4), "prefix-cache hit changed the output");
    CHECK(w3.n == c2.n && !memcmp(w3.toks, c2.toks, c2.n * 4));
    CHECK(t1.n == c1.n && !memcmp(t1.toks, c1.toks, c1.n * 4));
    CHECK(t2.n == c2.n && !memcmp(t2.toks, c2.toks, c2.n * 4));
    free(base);
    free(p1);
    free(p2);
    free(src);
    tok_free(tk);
    model_free(m);
    backend_free(be);
}
