/* tok_decode.c — ids -> text: the decoder chain (ByteLevel, Metaspace,
 * Replace, ByteFallback, Fuse, Strip) as an incremental pipeline, so that
 * tok_decode() and the streaming detokenizer are the same code and a stream's
 * chunks always concatenate to the full decode.
 *
 * Hugging Face applies decoders to the whole token list; each stage here
 * keeps exactly the state needed to give the same result one token at a time:
 * ByteFallback holds a run of <0xNN> tokens until it ends (an invalid run
 * becomes one U+FFFD per byte, as HF does — so such bytes are emitted only
 * when the next non-byte token or the flush comes), ByteLevel holds an
 * incomplete UTF-8 tail (lossy decoding like Rust's from_utf8_lossy), a
 * Strip after Fuse holds trailing strippable characters, a Replace after Fuse
 * holds a possible partial match. Before Fuse, stages work per token; after
 * Fuse (or ByteLevel, which fuses), on the text stream. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tok/tok_internal.h"

#define FFFD "\xEF\xBF\xBD"

typedef struct {
    tok_buf tmp;  // per-token output scratch
    tok_buf hold; // held bytes
    int count;    // tokens seen (Metaspace) / characters stripped (Strip)
    bool started; // Strip: past the leading characters
    bool fused;   // the stage sees the fused text stream, not tokens
} dec_state;

struct tok_stream {
    const tokenizer *t;
    bool skip_special;
    int n_out_tokens; // tokens that reached the end (for the no-decoder " " join)
    dec_state *st;    // one per decoder
    tok_buf out;      // text returned by the current call
};

static int feed(tok_stream *s, int k, const char *p, size_t n);

/* ---- helpers ------------------------------------------------------------------- */

static int parse_byte_token(const char *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t char_start(const char *p, size_t i) {
    while (i > 0 && ((unsigned char)p[i] & 0xC0) == 0x80) i--;
    return i;
}

static int replace_all(const char *p, size_t n, const char *pat, size_t pl, const char *rep, size_t rl,
                       tok_buf *out) {
    size_t i = 0;
    int rc;
    while (pl && i < n) {
        const char *hit = memmem(p + i, n - i, pat, pl);
        if (!hit) break;
        size_t at = (size_t)(hit - p);
        if ((rc = tok_buf_add(out, p + i, at - i)) < 0 || (rc = tok_buf_add(out, rep, rl)) < 0) return rc;
        i = at + pl;
    }
    return tok_buf_add(out, p + i, n - i);
}

/* Lossy UTF-8 decoding of hold+p: complete characters and U+FFFD for
 * invalid sequences go to `out`, a valid but incomplete tail stays held. */
static int lossy_utf8(tok_buf *hold, const char *p, size_t n, bool final, tok_buf *out) {
    int rc;
    if ((rc = tok_buf_add(hold, p, n)) < 0) return rc;
    const unsigned char *u = (const unsigned char *)hold->p;
    size_t len = hold->len, i = 0;
    while (i < len) {
        unsigned c = u[i];
        if (c < 0x80) {
            size_t j = i;
            while (j < len && u[j] < 0x80) j++;
            if ((rc = tok_buf_add(out, u + i, j - i)) < 0) return rc;
            i = j;
            continue;
        }
        int need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 2;
        else if (c >= 0xE0 && c <= 0xEF) need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else {
            if ((rc = tok_buf_add(out, FFFD, 3)) < 0) return rc;
            i++;
            continue;
        }
        int got = 1;
        while (got < need && i + got < len) {
            unsigned b = u[i + got];
            if (got == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) break;
            got++;
        }
        if (got == need) {
            if ((rc = tok_buf_add(out, u + i, need)) < 0) return rc;
            i += need;
        } else if (i + got == len && !final) {
            break; // incomplete: wait for more bytes
        } else {
            if ((rc = tok_buf_add(out, FFFD, 3)) < 0) return rc;
            i += got;
        }
    }
    memmove(hold->p, hold->p + i, len - i);
    hold->len = len - i;
    return KS_OK;
}

/* A token's characters as bytes of the byte-level alphabet into out
 * (appended); false when one is outside it (out then holds a part). */
static bool bytelevel_bytes(const char *p, size_t n, tok_buf *out, int *rc) {
    for (size_t i = 0; i < n;) {
        int l = tok_utf8_len((const unsigned char *)p + i, n - i);
        int b = l ? tok_cp_to_byte(tok_utf8_decode((const unsigned char *)p + i, l)) : -1;
        if (b < 0) return false;
        char c = (char)b;
        if ((*rc = tok_buf_add(out, &c, 1)) < 0) return false;
        i += l;
    }
    return true;
}

/* ---- the stages ------------------------------------------------------------------------ */

/* The end of the pipeline: append to the output. */
static int emit(tok_stream *s, const char *p, size_t n) {
    int rc;
    if (!s->t->has_decoder && s->n_out_tokens++ > 0 && (rc = tok_buf_add(&s->out, " ", 1)) < 0)
        return rc;
    return tok_buf_add(&s->out, p, n);
}

static int bytefallback_release(tok_stream *s, int k) {
    dec_state *d = &s->st[k];
    int rc = KS_OK;
    if (!d->hold.len) return KS_OK;
    if (tok_utf8_validate(d->hold.p, d->hold.len) == d->hold.len) {
        rc = feed(s, k + 1, d->hold.p, d->hold.len);
    } else {
        for (size_t i = 0; i < d->hold.len && rc >= 0; i++) rc = feed(s, k + 1, FFFD, 3);
    }
    d->hold.len = 0;
    return rc;
}

/* Per-character Strip of a token or stream chunk. With `stream`, the
 * trailing run of strip characters is held until a different character
 * follows (or the flush). */
static int strip_chunk(dec_state *d, const tok_decoder *dc, const char *p, size_t n, bool stream,
                       tok_buf *out) {
    int rc;
    size_t i = 0;
    char enc[4];
    int el = tok_utf8_encode(dc->strip_char, enc);
    if (!stream) { // one whole token
        size_t b = 0, e = n;
        for (int c = 0; c < dc->start && b + el <= e && !memcmp(p + b, enc, el); c++) b += el;
        for (int c = 0; c < dc->stop && e >= b + el && !memcmp(p + e - el, enc, el); c++) e -= el;
        return tok_buf_add(out, p + b, e - b);
    }
    while (i < n) {
        int l = tok_utf8_len((const unsigned char *)p + i, n - i);
        if (!l) l = 1;
        bool is_c = l == el && !memcmp(p + i, enc, el);
        if (!d->started) {
            if (is_c && d->count < dc->start) {
                d->count++;
                i += l;
                continue;
            }
            d->started = true;
        }
        if (dc->stop > 0) {
            if (is_c) rc = tok_buf_add(&d->hold, p + i, l);
            else {
                rc = tok_buf_add(out, d->hold.p ? d->hold.p : "", d->hold.len);
                d->hold.len = 0;
                if (rc >= 0) rc = tok_buf_add(out, p + i, l);
            }
        } else
            rc = tok_buf_add(out, p + i, l);
        if (rc < 0) return rc;
        i += l;
    }
    return KS_OK;
}

static int feed(tok_stream *s, int k, const char *p, size_t n) {
    const tokenizer *t = s->t;
    if (k >= t->n_dec) return emit(s, p, n);
    const tok_decoder *dc = &t->dec[k];
    dec_state *d = &s->st[k];
    tok_buf *o = &d->tmp;
    int rc;
    o->len = 0;
    switch (dc->type) {
    case TOK_DEC_FUSE:
        return feed(s, k + 1, p, n);
    case TOK_DEC_REPLACE:
        if (!d->fused) {
            if ((rc = replace_all(p, n, dc->pat, dc->pat_len, dc->content, dc->content_len, o)) < 0) return rc;
            return feed(s, k + 1, o->p, o->len);
        } else {
            /* stream: keep the last pat_len - 1 bytes (a match may start there) */
            if ((rc = tok_buf_add(&d->hold, p, n)) < 0) return rc;
            size_t keep = dc->pat_len > 1 ? dc->pat_len - 1 : 0, i = 0, h = d->hold.len;
            size_t safe = h > keep ? char_start(d->hold.p, h - keep) : 0;
            while (dc->pat_len && i < h) {
                const char *hit = memmem(d->hold.p + i, h - i, dc->pat, dc->pat_len);
                if (!hit || (size_t)(hit - d->hold.p) >= safe) break;
                size_t at = (size_t)(hit - d->hold.p);
                if ((rc = tok_buf_add(o, d->hold.p + i, at - i)) < 0 ||
                    (rc = tok_buf_add(o, dc->content, dc->content_len)) < 0)
                    return rc;
                i = at + dc->pat_len;
            }
            if (i < safe) {
                if ((rc = tok_buf_add(o, d->hold.p + i, safe - i)) < 0) return rc;
                i = safe;
            }
            memmove(d->hold.p, d->hold.p + i, h - i);
            d->hold.len = h - i;
            return o->len ? feed(s, k + 1, o->p, o->len) : KS_OK;
        }
    case TOK_DEC_METASPACE: {
        bool first = d->fused || d->count++ == 0;
        bool drop = first && dc->scheme != TOK_PREPEND_NEVER;
        if ((rc = replace_all(p, n, dc->pat, dc->pat_len, drop ? "" : " ", drop ? 0 : 1, o)) < 0) return rc;
        return (o->len || !d->fused) ? feed(s, k + 1, o->p, o->len) : KS_OK;
    }
    case TOK_DEC_STRIP:
        if ((rc = strip_chunk(d, dc, p, n, d->fused, o)) < 0) return rc;
        return (o->len || !d->fused) ? feed(s, k + 1, o->p, o->len) : KS_OK;
    case TOK_DEC_BYTEFALLBACK: {
        int b = d->fused ? -1 : parse_byte_token(p, n);
        if (b >= 0) {
            char c = (char)b;
            return tok_buf_add(&d->hold, &c, 1);
        }
        if ((rc = bytefallback_release(s, k)) < 0) return rc;
        return feed(s, k + 1, p, n);
    }
    case TOK_DEC_BYTELEVEL: {
        /* a token whose characters are all in the byte alphabet becomes those
         * bytes; any other token stays as its UTF-8 text */
        tok_buf *bytes = &d->tmp;
        rc = KS_OK;
        bool ok = bytelevel_bytes(p, n, bytes, &rc);
        if (rc < 0) return rc;
        tok_buf text = { 0 };
        rc = ok ? lossy_utf8(&d->hold, bytes->p ? bytes->p : "", bytes->len, false, &text)
                : lossy_utf8(&d->hold, p, n, false, &text);
        if (rc >= 0 && text.len) rc = feed(s, k + 1, text.p, text.len);
        tok_buf_free(&text);
        return rc;
    }
    }
    return err_set(KS_EUNSUPPORTED, "tokenizer: unknown decoder");
}

/* Releases everything stage k holds, then flushes the stages after it. */
static int flush_from(tok_stream *s, int k) {
    const tokenizer *t = s->t;
    int rc = KS_OK;
    for (; k < t->n_dec; k++) {
        const tok_decoder *dc = &t->dec[k];
        dec_state *d = &s->st[k];
        tok_buf *o = &d->tmp;
        o->len = 0;
        switch (dc->type) {
        case TOK_DEC_BYTEFALLBACK:
            rc = bytefallback_release(s, k);
            break;
        case TOK_DEC_BYTELEVEL:
            if (d->hold.len) {
                rc = lossy_utf8(&d->hold, "", 0, true, o);
                if (rc >= 0 && o->len) rc = feed(s, k + 1, o->p, o->len);
            }
            break;
        case TOK_DEC_REPLACE:
            if (d->fused && d->hold.len) {
                rc = replace_all(d->hold.p, d->hold.len, dc->pat, dc->pat_len, dc->content,
                                 dc->content_len, o);
                d->hold.len = 0;
                if (rc >= 0 && o->len) rc = feed(s, k + 1, o->p, o->len);
            }
            break;
        case TOK_DEC_STRIP:
            if (d->fused && d->hold.len) {
                char enc[4];
                size_t el = (size_t)tok_utf8_encode(dc->strip_char, enc);
                size_t cut = (size_t)dc->stop * el;
                size_t keep = d->hold.len > cut ? d->hold.len - cut : 0;
                d->hold.len = 0;
                if (keep) rc = feed(s, k + 1, d->hold.p, keep);
            }
            break;
        default:
            break;
        }
        if (rc < 0) return rc;
    }
    return KS_OK;
}

/* ---- public API ------------------------------------------------------------------------------ */

tok_stream *tok_stream_new(const tokenizer *t, bool skip_special) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip_special = skip_special;
    s->st = calloc(t->n_dec ? t->n_dec : 1, sizeof *s->st);
    if (!s->st) {
        free(s);
        return NULL;
    }
    bool fused = false;
    for (int k = 0; k < t->n_dec; k++) {
        s->st[k].fused = fused;
        if (t->dec[k].type == TOK_DEC_FUSE || t->dec[k].type == TOK_DEC_BYTELEVEL) fused = true;
    }
    return s;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    for (int k = 0; k < s->t->n_dec; k++) {
        tok_buf_free(&s->st[k].tmp);
        tok_buf_free(&s->st[k].hold);
    }
    free(s->st);
    tok_buf_free(&s->out);
    free(s);
}

static int stream_push(tok_stream *s, int32_t id) {
    const tokenizer *t = s->t;
    if (id < 0 || id >= t->n_vocab || !t->piece[id])
        return err_set(KS_EINVAL, "tok_decode: token id %d out of range (vocab %d)", (int)id, t->n_vocab);
    if (s->skip_special && t->is_special[id]) return KS_OK;
    return feed(s, 0, t->piece[id], t->piece_len[id]);
}

const char *tok_stream_push(tok_stream *s, int32_t id, size_t *len) {
    s->out.len = 0;
    if (tok_buf_add(&s->out, "", 0) < 0) return NULL;
    int rc = stream_push(s, id);
    if (rc < 0 && rc != KS_EINVAL) return NULL; // unknown ids are skipped
    *len = s->out.len;
    return s->out.p;
}

const char *tok_stream_flush(tok_stream *s, size_t *len) {
    s->out.len = 0;
    if (tok_buf_add(&s->out, "", 0) < 0 || flush_from(s, 0) < 0) return NULL;
    *len = s->out.len;
    return s->out.p;
}

/* One token's bytes in the middle of a text: the decoder stages applied to
 * the token alone, without what only a text's ends or a whole run decide —
 * Strip (the text's ends), Metaspace's dropped first space, ByteLevel's and
 * ByteFallback's lossy UTF-8 (a token may hold part of a character). With no
 * decoder, tokens are joined by one space. */
int tok_id_bytes(const tokenizer *t, int id, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (!t || id < 0 || id >= t->n_vocab || !t->piece[id])
        return err_set(KS_EINVAL, "tok_id_bytes: token id %d out of range (vocab %d)", id, t ? t->n_vocab : 0);
    tok_buf a = { 0 }, b = { 0 };
    int rc = t->has_decoder ? KS_OK : tok_buf_add(&a, " ", 1);
    if (rc >= 0) rc = tok_buf_add(&a, t->piece[id], t->piece_len[id]);
    for (int k = 0; k < t->n_dec && rc >= 0; k++) {
        const tok_decoder *dc = &t->dec[k];
        b.len = 0;
        switch (dc->type) {
        case TOK_DEC_REPLACE:
            rc = replace_all(a.p, a.len, dc->pat, dc->pat_len, dc->content, dc->content_len, &b);
            break;
        case TOK_DEC_METASPACE:
            rc = replace_all(a.p, a.len, dc->pat, dc->pat_len, " ", 1, &b);
            break;
        case TOK_DEC_BYTEFALLBACK: {
            int v = parse_byte_token(a.p, a.len);
            char c = (char)v;
            rc = v >= 0 ? tok_buf_add(&b, &c, 1) : tok_buf_add(&b, a.p, a.len);
            break;
        }
        case TOK_DEC_BYTELEVEL: /* a token outside the byte alphabet stays its text */
            if (!bytelevel_bytes(a.p ? a.p : "", a.len, &b, &rc) && rc >= 0) {
                b.len = 0;
                rc = tok_buf_add(&b, a.p, a.len);
            }
            break;
        case TOK_DEC_FUSE:
        case TOK_DEC_STRIP:
            rc = tok_buf_add(&b, a.p, a.len);
            break;
        }
        tok_buf tmp = a;
        a = b;
        b = tmp;
    }
    if (rc >= 0) rc = tok_buf_add(&a, "", 0); // a non-NULL buffer for an empty token
    tok_buf_free(&b);
    if (rc < 0) {
        tok_buf_free(&a);
        return rc;
    }
    *out = a.p;
    *out_len = a.len;
    return KS_OK;
}

int tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special, char **out,
               size_t *out_len) {
    int rc = KS_OK;
    *out = NULL;
    *out_len = 0;
    if (!t || n < 0 || (n && !ids)) return err_set(KS_EINVAL, "tok_decode: bad arguments");
    tok_stream *s = tok_stream_new(t, skip_special);
    if (!s) return err_set(KS_ENOMEM, "tok_decode: out of memory");
    if ((rc = tok_buf_add(&s->out, "", 0)) < 0) goto done;
    for (int i = 0; i < n; i++)
        if ((rc = stream_push(s, ids[i])) < 0) goto done;
    if ((rc = flush_from(s, 0)) < 0) goto done;
    *out = s->out.p;
    *out_len = s->out.len;
    s->out.p = NULL;
done:
    tok_stream_free(s);
    return rc;
}
