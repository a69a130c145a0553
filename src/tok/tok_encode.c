/* tok_encode.c — text -> ids: added/special tokens are cut out first
 * (leftmost-longest over a byte trie, with HF's lstrip/rstrip/single_word/
 * normalized rules), the pieces between them are normalized, pre-tokenized
 * and run through BPE, then the post-processor (TemplateProcessing, Roberta,
 * or tokenizer_config.json's add_bos_token) adds the special tokens. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/err.h"
#include "tok/tok_internal.h"

/* ---- trie of added tokens --------------------------------------------------- */

static int trie_new_node(tok_trie *tr) {
    if (tr->n_nodes == tr->cap_nodes) {
        uint32_t cap = tr->cap_nodes ? tr->cap_nodes * 2 : 64;
        int32_t *nt = realloc(tr->term, cap * sizeof *nt);
        if (!nt) return err_set(KS_ENOMEM, "tokenizer: out of memory (added-token trie)");
        tr->term = nt;
        tr->cap_nodes = cap;
    }
    tr->term[tr->n_nodes] = -1;
    return (int)tr->n_nodes++;
}

int tok_trie_add(tok_trie *tr, const char *s, uint32_t len, int32_t idx) {
    int rc;
    if (!tr->n_nodes) {
        if ((rc = tok_pmap_init(&tr->edges, 64)) < 0) return rc;
        if ((rc = trie_new_node(tr)) < 0) return rc;
    }
    if (tr->n_nodes + len >= (1u << 24)) return err_set(KS_EINVAL, "tokenizer: too many added tokens");
    uint32_t node = 0;
    for (uint32_t i = 0; i < len; i++) {
        uint64_t key = (uint64_t)node << 8 | (uint8_t)s[i], v;
        if (tok_pmap_get(&tr->edges, key, &v)) {
            node = (uint32_t)v;
            continue;
        }
        int nn = trie_new_node(tr);
        if (nn < 0) return nn;
        if ((rc = tok_pmap_put(&tr->edges, key, (uint64_t)nn)) < 0) return rc;
        node = (uint32_t)nn;
    }
    tr->term[node] = idx;
    return KS_OK;
}

void tok_trie_free(tok_trie *tr) {
    tok_pmap_free(&tr->edges);
    free(tr->term);
    memset(tr, 0, sizeof *tr);
}

/* Longest added token starting at s[i]; returns its index or -1. */
static int32_t trie_match(const tok_trie *tr, const char *s, size_t len, size_t i, size_t *end) {
    uint32_t node = 0;
    int32_t best = -1;
    for (size_t j = i; j < len; j++) {
        uint64_t v;
        if (!tok_pmap_get(&tr->edges, (uint64_t)node << 8 | (uint8_t)s[j], &v)) break;
        node = (uint32_t)v;
        if (tr->term[node] >= 0) {
            best = tr->term[node];
            *end = j + 1;
        }
    }
    return best;
}

/* ---- character tests used by the added-token rules ---------------------------- */

static uint32_t cp_at(const char *s, size_t i, size_t n, int *l) {
    *l = tok_utf8_len((const unsigned char *)s + i, n - i);
    if (!*l) *l = 1;
    return tok_utf8_decode((const unsigned char *)s + i, *l);
}

static uint32_t cp_before(const char *s, size_t i, int *l) {
    size_t k = i - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return cp_at(s, k, i, l);
}

static bool cp_is_ws(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* regex \w: letters, marks, decimal digits, connector punctuation */
static bool cp_is_word(uint32_t c) {
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return c == 0x200C || c == 0x200D;
    }
}

/* ---- splitting on added tokens ---------------------------------------------------- */

typedef int (*seg_fn)(const tokenizer *t, tok_scratch *sc, const char *s, size_t len,
                      bool at_start, tok_ids *out);

/* HF AddedVocabulary::find_matches: gaps go to `gap`, matches become ids. */
static int split_added(const tokenizer *t, const tok_trie *tr, tok_scratch *sc, const char *s,
                       size_t len, bool at_start, seg_fn gap, tok_ids *out) {
    size_t done = 0, i = 0;
    int rc;
    if (tr->n_nodes == 0) return len ? gap(t, sc, s, len, at_start, out) : KS_OK;
    while (i < len) {
        size_t end = 0;
        int32_t k = trie_match(tr, s, len, i, &end);
        if (k < 0) {
            i++;
            continue;
        }
        const tok_added *a = &t->added[k];
        size_t start = i, stop = end;
        int l;
        if (a->single_word) {
            bool ok_start = start == 0 || !cp_is_word(cp_before(s, start, &l));
            bool ok_stop = stop == len || !cp_is_word(cp_at(s, stop, len, &l));
            if (!ok_start || !ok_stop) {
                i = end;
                continue;
            }
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                uint32_t c = cp_before(s, ns, &l);
                if (!cp_is_ws(c)) break;
                ns -= l;
            }
            start = ns > done ? ns : done;
        }
        if (a->rstrip)
            while (stop < len) {
                uint32_t c = cp_at(s, stop, len, &l);
                if (!cp_is_ws(c)) break;
                stop += l;
            }
        if (done < start && (rc = gap(t, sc, s + done, start - done, at_start && done == 0, out)) < 0)
            return rc;
        if ((rc = tok_ids_push(out, a->id)) < 0) return rc;
        done = i = stop;
    }
    if (done < len && (rc = gap(t, sc, s + done, len - done, at_start && done == 0, out)) < 0)
        return rc;
    return KS_OK;
}

/* A piece of normalized text without added tokens: pre-tokenize, then BPE. */
static int seg_model(const tokenizer *t, tok_scratch *sc, const char *s, size_t len, bool at_start,
                     tok_ids *out) {
    int rc = tok_pretokenize(t, sc, s, len, at_start);
    if (rc < 0) return rc;
    for (size_t i = 0; i < sc->a.n; i++)
        if ((rc = tok_bpe_word(t, sc, sc->a.buf.p + sc->a.p[i].off, sc->a.p[i].len, out)) < 0)
            return rc;
    return KS_OK;
}

/* A piece of raw text between non-normalized added tokens. */
static int seg_raw(const tokenizer *t, tok_scratch *sc, const char *s, size_t len, bool at_start,
                   tok_ids *out) {
    int rc = tok_normalize(t, sc, s, len);
    if (rc < 0) return rc;
    /* sc->norm stays untouched until this segment is done */
    return split_added(t, &t->trie_norm, sc, sc->norm.p, sc->norm.len, at_start, seg_model, out);
}

/* ---- post-processing ---------------------------------------------------------------- */

static int post_process(const tokenizer *t, tok_ids *ids) {
    bool added = false;
    int rc;
    for (int k = 0; k < t->n_post; k++) {
        const tok_post *p = &t->post[k];
        if (p->type == TOK_POST_BYTELEVEL) continue;
        tok_ids nv = { 0 };
        for (int i = 0; i < p->n_ids; i++) {
            if (p->ids[i] == -1) {
                for (size_t j = 0; j < ids->len; j++)
                    if ((rc = tok_ids_push(&nv, ids->p[j])) < 0) goto fail_nv;
            } else if ((rc = tok_ids_push(&nv, p->ids[i])) < 0)
                goto fail_nv;
            continue;
        fail_nv:
            free(nv.p);
            return rc;
        }
        free(ids->p);
        *ids = nv;
        added = true;
    }
    if (!added && (t->cfg_bos >= 0 || t->cfg_eos >= 0)) {
        tok_ids nv = { 0 };
        if (t->cfg_bos >= 0 && (rc = tok_ids_push(&nv, t->cfg_bos)) < 0) goto fail;
        for (size_t j = 0; j < ids->len; j++)
            if ((rc = tok_ids_push(&nv, ids->p[j])) < 0) goto fail;
        if (t->cfg_eos >= 0 && (rc = tok_ids_push(&nv, t->cfg_eos)) < 0) goto fail;
        free(ids->p);
        *ids = nv;
        return KS_OK;
    fail:
        free(nv.p);
        return rc;
    }
    return KS_OK;
}

/* ---- tok_encode ------------------------------------------------------------------------ */

int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
               int *n_ids) {
    tok_scratch sc = { 0 };
    tok_ids out = { 0 };
    int rc;
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return err_set(KS_EINVAL, "tok_encode: NULL argument");
    if (len > (size_t)INT32_MAX / 4) return err_set(KS_EINVAL, "tok_encode: text too long (%zu bytes)", len);
    size_t bad = tok_utf8_validate(text, len);
    if (bad != len) return err_set(KS_EINVAL, "tok_encode: text is not valid UTF-8 at byte %zu", bad);
    sc.md = pcre2_match_data_create(1, NULL);
    sc.mctx = pcre2_match_context_create(NULL);
    sc.jit = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
    if (!sc.md || !sc.mctx) {
        rc = err_set(KS_ENOMEM, "tok_encode: out of memory");
        goto fail;
    }
    if (sc.jit) pcre2_jit_stack_assign(sc.mctx, NULL, sc.jit);
    if ((rc = split_added(t, &t->trie_raw, &sc, text, len, true, seg_raw, &out)) < 0) goto fail;
    if (add_special && (rc = post_process(t, &out)) < 0) goto fail;
    if (out.len > INT32_MAX) {
        rc = err_set(KS_EINVAL, "tok_encode: too many tokens");
        goto fail;
    }
    if (!out.p && !(out.p = malloc(sizeof *out.p))) {
        rc = err_set(KS_ENOMEM, "tok_encode: out of memory");
        goto fail;
    }
    tok_scratch_free(&sc);
    *ids = out.p;
    *n_ids = (int)out.len;
    return KS_OK;
fail:
    tok_scratch_free(&sc);
    free(out.p);
    return rc;
}
