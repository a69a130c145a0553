/* tok_pretok.c — normalizers (NFC/NFD/NFKC/NFKD via utf8proc, Lowercase,
 * Prepend, Replace, Strip, StripAccents) and pre-tokenizers (Split with
 * PCRE2 regexes or literal patterns and all five split behaviors, ByteLevel,
 * Metaspace), applied the way Hugging Face tokenizers applies them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/err.h"
#include "tok/tok_internal.h"

/* GPT-2's pre-tokenizer regex (ByteLevel with use_regex). */
const char TOK_GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

pcre2_code *tok_regex_compile(const char *pat, size_t len, char *errbuf, size_t errlen) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) {
        char msg[256];
        pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
        snprintf(errbuf, errlen, "%s at offset %zu", msg, (size_t)eo);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // falls back to the interpreter on failure
    return re;
}

void tok_normalizer_free(tok_normalizer *n) {
    free(n->pat);
    free(n->content);
    if (n->re) pcre2_code_free(n->re);
}

void tok_pretok_free(tok_pretok *p) {
    if (p->re) pcre2_code_free(p->re);
    free(p->lit);
}

/* ---- pieces ---------------------------------------------------------------- */

int tok_pieces_add(tok_pieces *l, const char *s, size_t len, bool at_start) {
    if (len > UINT32_MAX || l->buf.len + len > UINT32_MAX)
        return err_set(KS_EINVAL, "tokenizer: text too long (%zu bytes)", l->buf.len + len);
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        tok_piece *np = realloc(l->p, ncap * sizeof *np);
        if (!np) return err_set(KS_ENOMEM, "tokenizer: out of memory (%zu pieces)", ncap);
        l->p = np;
        l->cap = ncap;
    }
    uint32_t off = (uint32_t)l->buf.len;
    int rc = tok_buf_add(&l->buf, s, len);
    if (rc < 0) return rc;
    l->p[l->n++] = (tok_piece){ off, (uint32_t)len, at_start };
    return KS_OK;
}

void tok_pieces_clear(tok_pieces *l) {
    l->n = 0;
    l->buf.len = 0;
}

void tok_pieces_free(tok_pieces *l) {
    tok_buf_free(&l->buf);
    free(l->p);
    l->p = NULL;
    l->n = l->cap = 0;
}

/* ---- character classes ------------------------------------------------------- */

/* Rust's char::is_whitespace (Unicode White_Space). */
static bool cp_is_whitespace(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Next code point of s[i..n) (valid UTF-8 assumed); returns its byte length. */
static int next_cp(const char *s, size_t i, size_t n, uint32_t *cp) {
    int l = tok_utf8_len((const unsigned char *)s + i, n - i);
    if (!l) l = 1; // not reached for validated text
    *cp = tok_utf8_decode((const unsigned char *)s + i, l);
    return l;
}

/* ---- normalizers ------------------------------------------------------------------ */

static int norm_unicode(const char *s, size_t len, int opts, tok_buf *out) {
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &res,
                                      opts | UTF8PROC_STABLE);
    if (n < 0) return err_set(KS_EINVAL, "tokenizer: unicode normalization failed: %s", utf8proc_errmsg(n));
    int rc = tok_buf_add(out, res, (size_t)n);
    free(res);
    return rc;
}

static int replace_literal(const char *s, size_t len, const char *pat, size_t plen,
                           const char *rep, size_t rlen, tok_buf *out) {
    size_t i = 0;
    int rc = tok_buf_reserve(out, len);
    if (rc < 0) return rc;
    if (plen == 0) return tok_buf_add(out, s, len);
    while (i < len) {
        const char *hit = memmem(s + i, len - i, pat, plen);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if ((rc = tok_buf_add(out, s + i, at - i)) < 0 || (rc = tok_buf_add(out, rep, rlen)) < 0)
            return rc;
        i = at + plen;
    }
    return tok_buf_add(out, s + i, len - i);
}

/* Calls pcre2_match; returns 1 on a match (ovector filled), 0 on none. */
static int regex_find(const pcre2_code *re, tok_scratch *sc, const char *s, size_t len,
                      size_t start, size_t *ms, size_t *me) {
    int r = pcre2_match(re, (PCRE2_SPTR)s, len, start, PCRE2_NO_UTF_CHECK, sc->md, sc->mctx);
    if (r == PCRE2_ERROR_NOMATCH) return 0;
    if (r < 0) {
        char msg[256];
        pcre2_get_error_message(r, (PCRE2_UCHAR *)msg, sizeof msg);
        return err_set(KS_EINVAL, "tokenizer: regex match failed: %s", msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

static int replace_regex(tok_scratch *sc, const pcre2_code *re, const char *s, size_t len,
                         const char *rep, size_t rlen, tok_buf *out) {
    size_t i = 0, pos = 0, ms, me;
    int rc;
    while (pos <= len) {
        rc = regex_find(re, sc, s, len, pos, &ms, &me);
        if (rc < 0) return rc;
        if (rc == 0) break;
        if (me == ms) { // empty match: not replaced, step one character
            uint32_t cp;
            if (ms >= len) break;
            pos = ms + next_cp(s, ms, len, &cp);
            continue;
        }
        if ((rc = tok_buf_add(out, s + i, ms - i)) < 0 || (rc = tok_buf_add(out, rep, rlen)) < 0)
            return rc;
        i = pos = me;
    }
    return tok_buf_add(out, s + i, len - i);
}

static int norm_one(const tok_normalizer *nz, tok_scratch *sc, const char *s, size_t len, tok_buf *out) {
    uint32_t cp;
    int rc = KS_OK;
    out->len = 0;
    if ((rc = tok_buf_reserve(out, len + 8)) < 0) return rc;
    switch (nz->type) {
    case TOK_NORM_NFC: return norm_unicode(s, len, UTF8PROC_COMPOSE, out);
    case TOK_NORM_NFD: return norm_unicode(s, len, UTF8PROC_DECOMPOSE, out);
    case TOK_NORM_NFKC: return norm_unicode(s, len, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case TOK_NORM_NFKD: return norm_unicode(s, len, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case TOK_NORM_LOWERCASE:
        for (size_t i = 0; i < len;) {
            int l = next_cp(s, i, len, &cp);
            char enc[4];
            int el = tok_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), enc);
            if ((rc = tok_buf_add(out, enc, el)) < 0) return rc;
            i += l;
        }
        return tok_buf_add(out, "", 0);
    case TOK_NORM_PREPEND:
        if (len && (rc = tok_buf_add(out, nz->pat, nz->pat_len)) < 0) return rc;
        return tok_buf_add(out, s, len);
    case TOK_NORM_REPLACE:
        if (nz->re) return replace_regex(sc, nz->re, s, len, nz->content, nz->content_len, out);
        return replace_literal(s, len, nz->pat, nz->pat_len, nz->content, nz->content_len, out);
    case TOK_NORM_STRIP: {
        size_t b = 0, e = len;
        if (nz->left)
            while (b < e) {
                int l = next_cp(s, b, e, &cp);
                if (!cp_is_whitespace(cp)) break;
                b += l;
            }
        if (nz->right)
            while (e > b) {
                size_t k = e - 1;
                while (k > b && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
                next_cp(s, k, e, &cp);
                if (!cp_is_whitespace(cp)) break;
                e = k;
            }
        return tok_buf_add(out, s + b, e - b);
    }
    case TOK_NORM_STRIP_ACCENTS:
        for (size_t i = 0; i < len;) {
            int l = next_cp(s, i, len, &cp);
            if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN &&
                (rc = tok_buf_add(out, s + i, l)) < 0)
                return rc;
            i += l;
        }
        return tok_buf_add(out, "", 0);
    }
    return err_set(KS_EUNSUPPORTED, "tokenizer: unknown normalizer");
}

int tok_normalize(const tokenizer *t, tok_scratch *sc, const char *s, size_t len) {
    int rc;
    sc->norm.len = 0;
    if ((rc = tok_buf_add(&sc->norm, s, len)) < 0) return rc;
    for (int i = 0; i < t->n_norm; i++) {
        if ((rc = norm_one(&t->norm[i], sc, sc->norm.p, sc->norm.len, &sc->tmp)) < 0) return rc;
        tok_buf sw = sc->norm;
        sc->norm = sc->tmp;
        sc->tmp = sw;
    }
    return KS_OK;
}

/* ---- pre-tokenizers ------------------------------------------------------------------ */

static int span_push(tok_scratch *sc, size_t *n, uint32_t s, uint32_t e, bool match) {
    if (*n == sc->spans_cap) {
        size_t ncap = sc->spans_cap ? sc->spans_cap * 2 : 256;
        struct tok_span *np = realloc(sc->spans, ncap * sizeof *np);
        if (!np) return err_set(KS_ENOMEM, "tokenizer: out of memory (%zu spans)", ncap);
        sc->spans = np;
        sc->spans_cap = ncap;
    }
    sc->spans[(*n)++] = (struct tok_span){ s, e, match };
    return KS_OK;
}

/* Hugging Face NormalizedString::split: the piece s[0..len) is cut at the
 * pattern's matches, then grouped by `behavior`; non-empty results are added
 * to `dst`. */
static int split_piece(tok_scratch *sc, const pcre2_code *re, const char *lit, size_t lit_len,
                       enum tok_split_behavior behavior, bool invert, const char *s, size_t len,
                       bool at_start, tok_pieces *dst) {
    size_t n = 0, prev = 0, pos = 0, ms, me;
    int rc;
    if (len == 0) return KS_OK;
    /* 1. matches and the gaps between them */
    while (pos < len) {
        if (re) {
            rc = regex_find(re, sc, s, len, pos, &ms, &me);
            if (rc < 0) return rc;
            if (rc == 0) break;
        } else {
            const char *hit = lit_len ? memmem(s + pos, len - pos, lit, lit_len) : NULL;
            if (!hit) break;
            ms = (size_t)(hit - s);
            me = ms + lit_len;
        }
        if (me == ms) { // empty match: skip one character
            uint32_t cp;
            if (ms >= len) break;
            pos = ms + next_cp(s, ms, len, &cp);
            continue;
        }
        if (prev != ms && (rc = span_push(sc, &n, (uint32_t)prev, (uint32_t)ms, invert)) < 0) return rc;
        if ((rc = span_push(sc, &n, (uint32_t)ms, (uint32_t)me, !invert)) < 0) return rc;
        prev = pos = me;
    }
    if (prev != len && (rc = span_push(sc, &n, (uint32_t)prev, (uint32_t)len, invert)) < 0) return rc;

    /* 2. group by behavior: in place, `m` spans kept; `remove` marked by match */
    struct tok_span *sp = sc->spans;
    size_t m = 0;
    bool prev_match = false;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
    case TOK_SPLIT_REMOVED:
        m = n;
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            if (sp[i].match == prev_match && m > 0) sp[m - 1].end = sp[i].end;
            else sp[m++] = (struct tok_span){ sp[i].start, sp[i].end, false };
            prev_match = sp[i].match;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < n; i++) {
            if (sp[i].match && !prev_match && m > 0) sp[m - 1].end = sp[i].end;
            else sp[m++] = (struct tok_span){ sp[i].start, sp[i].end, false };
            prev_match = sp[i].match;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_NEXT: {
        /* walk backwards, then the kept spans are in reverse order at the end */
        size_t w = n; // write index from the back
        for (size_t k = n; k-- > 0;) {
            struct tok_span cur = sp[k];
            if (cur.match && !prev_match && w < n) sp[w].start = cur.start;
            else sp[--w] = (struct tok_span){ cur.start, cur.end, false };
            prev_match = cur.match;
        }
        memmove(sp, sp + w, (n - w) * sizeof *sp);
        m = n - w;
        break;
    }
    }
    for (size_t i = 0; i < m; i++) {
        if (behavior == TOK_SPLIT_REMOVED && sp[i].match) continue;
        if (sp[i].end == sp[i].start) continue;
        if ((rc = tok_pieces_add(dst, s + sp[i].start, sp[i].end - sp[i].start,
                                 at_start && sp[i].start == 0)) < 0)
            return rc;
    }
    return KS_OK;
}

/* Maps each byte to its byte-level alphabet character. */
static int bytelevel_map(const char *s, size_t len, tok_buf *out) {
    int rc = tok_buf_reserve(out, len * 2);
    if (rc < 0) return rc;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)s[i]);
        if (cp < 0x80) out->p[out->len++] = (char)cp;
        else {
            out->p[out->len++] = (char)(0xC0 | (cp >> 6));
            out->p[out->len++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out->p[out->len] = 0;
    return KS_OK;
}

static int pretok_one(const tok_pretok *pt, tok_scratch *sc, const char *s, size_t len,
                      bool at_start, tok_pieces *dst) {
    int rc;
    switch (pt->type) {
    case TOK_PRETOK_SPLIT:
        return split_piece(sc, pt->re, pt->lit, pt->lit_len, pt->behavior, pt->invert, s, len,
                           at_start, dst);
    case TOK_PRETOK_BYTELEVEL: {
        tok_buf *w = &sc->ptw;
        w->len = 0;
        if (pt->add_prefix_space && (len == 0 || s[0] != ' ') && (rc = tok_buf_add(w, " ", 1)) < 0)
            return rc;
        if ((rc = tok_buf_add(w, s, len)) < 0) return rc;
        size_t first = dst->n;
        if (pt->re) {
            if ((rc = split_piece(sc, pt->re, NULL, 0, TOK_SPLIT_ISOLATED, false, w->p, w->len,
                                  at_start, dst)) < 0)
                return rc;
        } else if (w->len && (rc = tok_pieces_add(dst, w->p, w->len, at_start)) < 0)
            return rc;
        /* map the new pieces' bytes in place: rebuild them at the end of dst */
        tok_buf *m = &sc->ptm;
        for (size_t i = first; i < dst->n; i++) {
            m->len = 0;
            if ((rc = bytelevel_map(dst->buf.p + dst->p[i].off, dst->p[i].len, m)) < 0) return rc;
            size_t at = dst->buf.len;
            if ((rc = tok_buf_add(&dst->buf, m->p, m->len)) < 0) return rc;
            dst->p[i].off = (uint32_t)at;
            dst->p[i].len = (uint32_t)m->len;
        }
        return KS_OK;
    }
    case TOK_PRETOK_METASPACE: {
        tok_buf *w = &sc->ptw;
        w->len = 0;
        bool prepend = false;
        bool starts = len >= pt->repl_len && memcmp(s, pt->repl, pt->repl_len) == 0;
        if (pt->scheme == TOK_PREPEND_ALWAYS) prepend = !starts;
        else if (pt->scheme == TOK_PREPEND_FIRST) prepend = !starts && at_start;
        /* the prepend test looks at the string after spaces became the replacement */
        if (!starts && len && s[0] == ' ' && pt->repl_len) prepend = false;
        if (prepend && (rc = tok_buf_add(w, pt->repl, pt->repl_len)) < 0) return rc;
        if ((rc = replace_literal(s, len, " ", 1, pt->repl, pt->repl_len, w)) < 0) return rc;
        if (pt->split)
            return split_piece(sc, NULL, pt->repl, pt->repl_len, TOK_SPLIT_MERGED_WITH_NEXT, false,
                               w->p, w->len, at_start, dst);
        return w->len ? tok_pieces_add(dst, w->p, w->len, at_start) : KS_OK;
    }
    }
    return err_set(KS_EUNSUPPORTED, "tokenizer: unknown pre-tokenizer");
}

int tok_pretokenize(const tokenizer *t, tok_scratch *sc, const char *s, size_t len, bool at_start) {
    int rc;
    tok_pieces_clear(&sc->a);
    if ((rc = tok_pieces_add(&sc->a, s, len, at_start)) < 0) return rc;
    for (int k = 0; k < t->n_pretok; k++) {
        tok_pieces_clear(&sc->b);
        for (size_t i = 0; i < sc->a.n; i++) {
            tok_piece p = sc->a.p[i];
            if ((rc = pretok_one(&t->pretok[k], sc, sc->a.buf.p + p.off, p.len, p.at_start, &sc->b)) < 0)
                return rc;
        }
        tok_pieces sw = sc->a;
        sc->a = sc->b;
        sc->b = sw;
    }
    return KS_OK;
}
