/* jinja_lex.c — turns template source into tokens the way jinja2's lexer
 * does with trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False:
 * line breaks normalised to "\n" (as str.splitlines() sees them), one
 * trailing line break dropped, whitespace control ({%- -%} {{- -}} {#- -#},
 * {%+ +%}), {% raw %} blocks, comments, and inside tags names, numbers,
 * Python-style string literals and operators. Errors name line:col. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jinja_internal.h"

typedef struct {
    const char *s;
    size_t n, pos;
    int line;
    size_t line_start;  /* offset of the current line's first byte */
    jtoks *out;
} lexer;

static int col_of(const lexer *l, size_t pos) { return (int)(pos - l->line_start) + 1; }

/* Moves to newpos, counting lines. */
static void lx_move(lexer *l, size_t newpos) {
    for (size_t i = l->pos; i < newpos && i < l->n; i++)
        if (l->s[i] == '\n') { l->line++; l->line_start = i + 1; }
    l->pos = newpos;
}

static int lx_err(const lexer *l, size_t pos, const char *what) {
    int line = l->line;
    size_t ls = l->line_start;
    for (size_t i = l->pos; i < pos && i < l->n; i++)
        if (l->s[i] == '\n') { line++; ls = i + 1; }
    return err_set(KS_EFORMAT, "chat template syntax error at %d:%d: %s", line, (int)(pos - ls) + 1, what);
}

static jtok *lx_push(lexer *l, jtok_type t, size_t pos) {
    jtoks *o = l->out;
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 64;
        jtok *nv = realloc(o->v, nc * sizeof *nv);
        if (!nv) return NULL;
        o->v = nv;
        o->cap = nc;
    }
    jtok *t0 = &o->v[o->n++];
    memset(t0, 0, sizeof *t0);
    t0->t = t;
    t0->line = l->line;
    t0->col = col_of(l, pos);
    return t0;
}

static int lx_push_str(lexer *l, jtok_type t, size_t pos, const char *s, size_t n) {
    jtok *k = lx_push(l, t, pos);
    if (!k) return err_set(KS_ENOMEM, "chat template: out of memory");
    k->s = malloc(n + 1);
    if (!k->s) return err_set(KS_ENOMEM, "chat template: out of memory");
    memcpy(k->s, s, n);
    k->s[n] = 0;
    k->n = n;
    return 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool starts(const lexer *l, size_t pos, const char *w) {
    size_t k = strlen(w);
    return pos + k <= l->n && memcmp(l->s + pos, w, k) == 0;
}
static size_t skip_ws(const lexer *l, size_t pos) {
    while (pos < l->n && is_ws(l->s[pos])) pos++;
    return pos;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a string literal starting at the quote; sets *end past it. */
static int lx_string(lexer *l, size_t start, size_t *end) {
    char q = l->s[start];
    jbuf b = {0};
    size_t i = start + 1;
    while (1) {
        if (i >= l->n) { jbuf_free(&b); return lx_err(l, start, "unterminated string literal"); }
        char c = l->s[i];
        if (c == q) break;
        if (c != '\\') {
            if (jbuf_putc(&b, c) < 0) goto oom;
            i++;
            continue;
        }
        if (i + 1 >= l->n) { jbuf_free(&b); return lx_err(l, start, "unterminated string literal"); }
        char e = l->s[i + 1];
        i += 2;
        int rc = 0;
        switch (e) {
        case '\n': break;
        case '\\': rc = jbuf_putc(&b, '\\'); break;
        case '\'': rc = jbuf_putc(&b, '\''); break;
        case '"': rc = jbuf_putc(&b, '"'); break;
        case 'a': rc = jbuf_putc(&b, '\a'); break;
        case 'b': rc = jbuf_putc(&b, '\b'); break;
        case 'f': rc = jbuf_putc(&b, '\f'); break;
        case 'n': rc = jbuf_putc(&b, '\n'); break;
        case 'r': rc = jbuf_putc(&b, '\r'); break;
        case 't': rc = jbuf_putc(&b, '\t'); break;
        case 'v': rc = jbuf_putc(&b, '\v'); break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = i + k < l->n ? hexval(l->s[i + k]) : -1;
                if (h < 0) { jbuf_free(&b); return lx_err(l, i - 2, "truncated \\x/\\u/\\U escape in string"); }
                cp = cp * 16 + (uint32_t)h;
            }
            i += nd;
            if (cp > 0x10FFFF) { jbuf_free(&b); return lx_err(l, i - 2, "illegal Unicode character in string"); }
            ju_encode(&b, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < l->n && l->s[i] >= '0' && l->s[i] <= '7'; k++, i++)
                    cp = cp * 8 + (uint32_t)(l->s[i] - '0');
                ju_encode(&b, cp);
            } else {
                rc = jbuf_putc(&b, '\\');
                i--;  /* keep the character itself */
            }
        }
        if (rc < 0 || b.over) goto oom;
    }
    *end = i + 1;
    int rc = lx_push_str(l, TK_STRING, start, b.p ? b.p : "", b.n);
    jbuf_free(&b);
    return rc;
oom:
    jbuf_free(&b);
    return lx_err(l, start, "string literal too long");
}

static int lx_number(lexer *l, size_t start, size_t *end) {
    char buf[128];
    size_t k = 0, i = start;
    bool isfloat = false;
    for (; i < l->n && (is_digit(l->s[i]) || (l->s[i] == '_' && i + 1 < l->n && is_digit(l->s[i + 1]))); i++)
        if (l->s[i] != '_' && k < sizeof buf - 1) buf[k++] = l->s[i];
    if (i + 1 < l->n && l->s[i] == '.' && is_digit(l->s[i + 1])) {
        isfloat = true;
        if (k < sizeof buf - 1) buf[k++] = '.';
        for (i++; i < l->n && (is_digit(l->s[i]) || (l->s[i] == '_' && i + 1 < l->n && is_digit(l->s[i + 1]))); i++)
            if (l->s[i] != '_' && k < sizeof buf - 1) buf[k++] = l->s[i];
    }
    if (i < l->n && (l->s[i] == 'e' || l->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < l->n && (l->s[j] == '+' || l->s[j] == '-')) j++;
        if (j < l->n && is_digit(l->s[j])) {
            isfloat = true;
            for (; i < j; i++) if (k < sizeof buf - 1) buf[k++] = l->s[i];
            for (; i < l->n && (is_digit(l->s[i]) || l->s[i] == '_'); i++)
                if (l->s[i] != '_' && k < sizeof buf - 1) buf[k++] = l->s[i];
        }
    }
    if (k >= sizeof buf - 1) return lx_err(l, start, "number literal too long");
    buf[k] = 0;
    jtok *t = lx_push(l, isfloat ? TK_FLOAT : TK_INT, start);
    if (!t) return err_set(KS_ENOMEM, "chat template: out of memory");
    if (isfloat) {
        t->f = strtod(buf, NULL);
    } else {
        uint64_t v = 0;
        for (size_t j = 0; j < k; j++) {
            uint64_t dg = (uint64_t)(buf[j] - '0');
            if (v > ((uint64_t)INT64_MAX - dg) / 10) return lx_err(l, start, "integer literal too large");
            v = v * 10 + (uint64_t)(buf[j] - '0');
        }
        t->i = (int64_t)v;
    }
    *end = i;
    return 0;
}

static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char ops1[] = "+-*/%~()[]{}.:,|=<>;";

/* Tokens of one {{ }} or {% %} tag; l->pos is just after the opener.
 * Sets *line_starting for the next text's lstrip. */
static int lx_tag(lexer *l, bool block, bool *line_starting) {
    int depth = 0;
    while (1) {
        size_t p = skip_ws(l, l->pos);
        lx_move(l, p);
        if (p >= l->n) return lx_err(l, p, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
        const char *s = l->s;
        if (depth == 0) {
            char sign = 0;
            size_t elen = 0;
            if (block) {
                if (starts(l, p, "-%}")) { sign = '-'; elen = 3; }
                else if (starts(l, p, "+%}")) { sign = '+'; elen = 3; }
                else if (starts(l, p, "%}")) elen = 2;
            } else {
                if (starts(l, p, "-}}")) { sign = '-'; elen = 3; }
                else if (starts(l, p, "}}")) elen = 2;
            }
            if (elen) {
                if (!lx_push(l, block ? TK_BLOCK_END : TK_VAR_END, p)) return err_set(KS_ENOMEM, "chat template: out of memory");
                size_t q = p + elen;
                if (sign == '-') q = skip_ws(l, q);
                else if (block && !sign && q < l->n && s[q] == '\n') q++;
                *line_starting = q > 0 && s[q - 1] == '\n';
                lx_move(l, q);
                return 0;
            }
        }
        size_t q = p;
        int rc = 0;
        char c = s[p];
        if (is_name0(c)) {
            while (q < l->n && (is_name0(s[q]) || is_digit(s[q]))) q++;
            rc = lx_push_str(l, TK_NAME, p, s + p, q - p);
        } else if (is_digit(c)) {
            rc = lx_number(l, p, &q);
        } else if (c == '\'' || c == '"') {
            rc = lx_string(l, p, &q);
        } else {
            const char *op = NULL;
            char one[2] = {c, 0};
            for (int k = 0; ops2[k]; k++)
                if (starts(l, p, ops2[k])) { op = ops2[k]; break; }
            if (!op && c && strchr(ops1, c)) op = one;
            if (!op) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected character '%c'", c);
                return lx_err(l, p, (unsigned char)c >= 32 && (unsigned char)c < 127 ? msg : "unexpected character");
            }
            jtok *t = lx_push(l, TK_OP, p);
            if (!t) return err_set(KS_ENOMEM, "chat template: out of memory");
            snprintf(t->op, sizeof t->op, "%s", op);
            q = p + strlen(op);
            if (c == '(' || c == '[' || c == '{') {
                if (++depth > JJ_MAX_PARSE_DEPTH) return lx_err(l, p, "brackets nested too deeply");
            } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
                depth--;
            }
        }
        if (rc < 0) return rc;
        lx_move(l, q);
    }
}

/* Line breaks as str.splitlines() sees them -> "\n"; drops one trailing one. */
static char *normalize(const char *src, size_t len, size_t *out_len) {
    char *d = malloc(len + 1);
    if (!d) return NULL;
    size_t k = 0;
    bool last_break = false;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)src[i];
        size_t w = 0;
        if (c == '\r') w = (i + 1 < len && src[i + 1] == '\n') ? 2 : 1;
        else if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) w = 1;
        else if (c == 0xC2 && i + 1 < len && (unsigned char)src[i + 1] == 0x85) w = 2;
        else if (c == 0xE2 && i + 2 < len && (unsigned char)src[i + 1] == 0x80 &&
                 ((unsigned char)src[i + 2] == 0xA8 || (unsigned char)src[i + 2] == 0xA9)) w = 3;
        if (w) { d[k++] = '\n'; i += w; last_break = true; }
        else { d[k++] = (char)c; i++; last_break = false; }
    }
    if (last_break) k--;
    d[k] = 0;
    *out_len = k;
    return d;
}

int jinja_lex(jtoks *out, const char *src, size_t len) {
    memset(out, 0, sizeof *out);
    size_t n;
    char *s = normalize(src, len, &n);
    if (!s) return err_set(KS_ENOMEM, "chat template: out of memory");
    lexer l = {.s = s, .n = n, .pos = 0, .line = 1, .line_start = 0, .out = out};
    bool line_starting = true;
    int rc = 0;
    while (l.pos < n) {
        /* next tag opener */
        size_t i = l.pos;
        const char *hit = NULL;
        while (i + 1 < n) {
            hit = memchr(s + i, '{', n - 1 - i);
            if (!hit) break;
            i = (size_t)(hit - s);
            char k = s[i + 1];
            if (k == '{' || k == '%' || k == '#') break;
            i++;
            hit = NULL;
        }
        if (!hit) {
            if ((rc = lx_push_str(&l, TK_TEXT, l.pos, s + l.pos, n - l.pos)) < 0) goto done;
            break;
        }
        char kind = s[i + 1];
        char sign = (i + 2 < n && (s[i + 2] == '-' || s[i + 2] == '+')) ? s[i + 2] : 0;
        size_t tstart = l.pos, tend = i;
        if (sign == '-') {
            while (tend > tstart && is_ws(s[tend - 1])) tend--;
        } else if (sign != '+' && kind != '{') {
            size_t lp = tend;
            while (lp > tstart && s[lp - 1] != '\n') lp--;
            if (lp > tstart || line_starting) {
                size_t j = lp;
                while (j < tend && is_ws(s[j])) j++;
                if (j == tend) tend = lp;
            }
        }
        if (tend > tstart && (rc = lx_push_str(&l, TK_TEXT, tstart, s + tstart, tend - tstart)) < 0) goto done;
        size_t after = i + 2 + (sign ? 1 : 0);
        lx_move(&l, i);
        if (kind == '#') {
            const char *e = NULL;
            size_t p = after;
            while (p + 1 < n) {
                e = memchr(s + p, '#', n - 1 - p);
                if (!e) break;
                p = (size_t)(e - s);
                if (s[p + 1] == '}') break;
                p++;
                e = NULL;
            }
            if (!e) { rc = lx_err(&l, i, "missing end of comment tag"); goto done; }
            size_t q = p + 2;
            char esign = p > after && (s[p - 1] == '-' || s[p - 1] == '+') ? s[p - 1] : 0;
            if (esign == '-') q = skip_ws(&l, q);
            else if (!esign && q < n && s[q] == '\n') q++;
            line_starting = s[q - 1] == '\n';
            lx_move(&l, q);
            continue;
        }
        if (kind == '%') {
            /* {% raw %} ... {% endraw %} */
            size_t p = skip_ws(&l, after);
            if (starts(&l, p, "raw")) {
                size_t q = skip_ws(&l, p + 3);
                size_t bodystart = 0;
                if (starts(&l, q, "-%}")) bodystart = skip_ws(&l, q + 3);
                else if (starts(&l, q, "%}")) bodystart = q + 2;
                if (bodystart) {
                    size_t j = bodystart;
                    while (1) {
                        const char *h = j < n ? strstr(s + j, "{%") : NULL;
                        if (!h) { rc = lx_err(&l, i, "missing end of raw directive"); goto done; }
                        size_t b0 = (size_t)(h - s);
                        size_t k2 = b0 + 2;
                        char bsign = k2 < n && (s[k2] == '-' || s[k2] == '+') ? s[k2] : 0;
                        if (bsign) k2++;
                        k2 = skip_ws(&l, k2);
                        if (!starts(&l, k2, "endraw")) { j = b0 + 2; continue; }
                        k2 = skip_ws(&l, k2 + 6);
                        size_t endq = 0;
                        if (starts(&l, k2, "-%}")) endq = skip_ws(&l, k2 + 3);
                        else if (starts(&l, k2, "+%}")) endq = k2 + 3;
                        else if (starts(&l, k2, "%}")) endq = k2 + 2 + (k2 + 2 < n && s[k2 + 2] == '\n');
                        if (!endq) { j = b0 + 2; continue; }
                        size_t be = b0;
                        if (bsign == '-') while (be > bodystart && is_ws(s[be - 1])) be--;
                        if (be > bodystart && (rc = lx_push_str(&l, TK_TEXT, bodystart, s + bodystart, be - bodystart)) < 0) goto done;
                        line_starting = s[endq - 1] == '\n';
                        lx_move(&l, endq);
                        break;
                    }
                    continue;
                }
            }
        }
        if (!lx_push(&l, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, i)) { rc = err_set(KS_ENOMEM, "chat template: out of memory"); goto done; }
        lx_move(&l, after);
        if ((rc = lx_tag(&l, kind == '%', &line_starting)) < 0) goto done;
    }
    if (!lx_push(&l, TK_EOF, l.pos)) rc = err_set(KS_ENOMEM, "chat template: out of memory");
done:
    free(s);
    if (rc < 0) jinja_toks_free(out);
    return rc;
}

void jinja_toks_free(jtoks *t) {
    for (size_t i = 0; i < t->n; i++) free(t->v[i].s);
    free(t->v);
    memset(t, 0, sizeof *t);
}
