/* tok_bpe.c — the BPE model: one pre-token -> ids. Characters become
 * symbols (vocab lookup, byte_fallback <0xNN>, unk with fuse_unk), then
 * merges are applied lowest rank first (leftmost on ties) with a binary
 * min-heap over a linked list of symbols: O(n log n) per pre-token, the same
 * order as Hugging Face tokenizers' Word::merge_all. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tok/tok_internal.h"

struct tok_sym {
    int32_t id;
    int32_t prev, next; // -1 at the ends
    uint32_t len;       // bytes of text covered; 0 = merged away
};

/* ---- min-heap of (rank << 32 | position) ---------------------------------- */

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

static int scratch_reserve(tok_scratch *sc, size_t nsym) {
    if (nsym > sc->sym_cap) {
        size_t cap = sc->sym_cap ? sc->sym_cap : 64;
        while (cap < nsym) cap *= 2;
        struct tok_sym *ns = realloc(sc->sym, cap * sizeof *ns);
        if (!ns) return err_set(KS_ENOMEM, "tokenizer: out of memory (%zu symbols)", cap);
        sc->sym = ns;
        sc->sym_cap = cap;
    }
    if (3 * nsym > sc->heap_cap) {
        size_t cap = sc->heap_cap ? sc->heap_cap : 192;
        while (cap < 3 * nsym) cap *= 2;
        uint64_t *nh = realloc(sc->heap, cap * sizeof *nh);
        if (!nh) return err_set(KS_ENOMEM, "tokenizer: out of memory (heap of %zu)", cap);
        sc->heap = nh;
        sc->heap_cap = cap;
    }
    return KS_OK;
}

static bool pair_rank(const tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    uint64_t v;
    if (!tok_pmap_get(&t->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &v)) return false;
    *rank = (uint32_t)(v >> 32);
    *new_id = (int32_t)(uint32_t)v;
    return true;
}

static void sym_add(tok_scratch *sc, size_t *n, int32_t id, uint32_t len) {
    struct tok_sym *s = &sc->sym[*n];
    s->id = id;
    s->len = len;
    s->prev = (int32_t)*n - 1;
    s->next = -1;
    if (*n) sc->sym[*n - 1].next = (int32_t)*n;
    (*n)++;
}

int tok_bpe_word(const tokenizer *t, tok_scratch *sc, const char *s, size_t len, tok_ids *out) {
    int rc;
    if (len == 0) return KS_OK;
    if (t->ignore_merges && len <= UINT32_MAX) {
        int32_t id = tok_smap_get(&t->vocab, s, (uint32_t)len);
        if (id >= 0) return tok_ids_push(out, id);
    }
    /* at most one symbol per byte (byte fallback) */
    if ((rc = scratch_reserve(sc, len + 1)) < 0) return rc;
    size_t n = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < len;) {
        int cl = tok_utf8_len((const unsigned char *)s + i, len - i);
        if (!cl) cl = 1;
        bool first = i == 0, last = i + cl == len;
        const char *key = s + i;
        size_t klen = cl;
        if ((!first && t->cont_prefix) || (last && t->eow_suffix)) {
            tok_buf *w = &sc->word;
            w->len = 0;
            if (!first && t->cont_prefix && (rc = tok_buf_add(w, t->cont_prefix, strlen(t->cont_prefix))) < 0)
                return rc;
            if ((rc = tok_buf_add(w, s + i, cl)) < 0) return rc;
            if (last && t->eow_suffix && (rc = tok_buf_add(w, t->eow_suffix, strlen(t->eow_suffix))) < 0)
                return rc;
            key = w->p;
            klen = w->len;
        }
        int32_t id = tok_smap_get(&t->vocab, key, (uint32_t)klen);
        if (id >= 0) {
            if (unk_id >= 0) {
                sym_add(sc, &n, unk_id, unk_len);
                unk_id = -1;
            }
            sym_add(sc, &n, id, (uint32_t)cl);
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < klen; k++) all = all && t->byte_id[(uint8_t)key[k]] >= 0;
                if (all) {
                    /* HF adds the bytes without flushing a pending unk first */
                    for (size_t k = 0; k < klen; k++) sym_add(sc, &n, t->byte_id[(uint8_t)key[k]], 1);
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk_id >= 0 && t->fuse_unk) unk_len += cl;
                else {
                    if (unk_id >= 0) sym_add(sc, &n, unk_id, unk_len);
                    unk_id = t->unk_id;
                    unk_len = cl;
                }
            }
        }
        i += cl;
    }
    if (unk_id >= 0) sym_add(sc, &n, unk_id, unk_len);

    /* merge loop */
    size_t hn = 0;
    uint32_t rank;
    int32_t nid;
    for (size_t i = 0; i + 1 < n; i++)
        if (pair_rank(t, sc->sym[i].id, sc->sym[i + 1].id, &rank, &nid))
            heap_push(sc->heap, &hn, (uint64_t)rank << 32 | i);
    while (hn) {
        uint64_t top = heap_pop(sc->heap, &hn);
        uint32_t r = (uint32_t)(top >> 32), pos = (uint32_t)top;
        struct tok_sym *a = &sc->sym[pos];
        if (a->len == 0 || a->next < 0) continue;
        struct tok_sym *b = &sc->sym[a->next];
        if (!pair_rank(t, a->id, b->id, &rank, &nid) || rank != r) continue;
        a->id = nid;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0) sc->sym[a->next].prev = (int32_t)pos;
        if (a->prev >= 0 && pair_rank(t, sc->sym[a->prev].id, a->id, &rank, &nid))
            heap_push(sc->heap, &hn, (uint64_t)rank << 32 | (uint32_t)a->prev);
        if (a->next >= 0 && pair_rank(t, a->id, sc->sym[a->next].id, &rank, &nid))
            heap_push(sc->heap, &hn, (uint64_t)rank << 32 | pos);
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = sc->sym[i].next)
        if ((rc = tok_ids_push(out, sc->sym[i].id)) < 0) return rc;
    return KS_OK;
}

void tok_scratch_free(tok_scratch *sc) {
    if (sc->md) pcre2_match_data_free(sc->md);
    if (sc->mctx) pcre2_match_context_free(sc->mctx);
    if (sc->jit) pcre2_jit_stack_free(sc->jit);
    tok_pieces_free(&sc->a);
    tok_pieces_free(&sc->b);
    tok_buf_free(&sc->norm);
    tok_buf_free(&sc->tmp);
    tok_buf_free(&sc->ptw);
    tok_buf_free(&sc->ptm);
    tok_buf_free(&sc->word);
    free(sc->spans);
    free(sc->sym);
    free(sc->heap);
    memset(sc, 0, sizeof *sc);
}
