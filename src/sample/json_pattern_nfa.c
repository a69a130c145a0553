/* json_pattern_nfa.c — json_pattern_nfa.h: a pattern (the ECMA-262 subset
 * json_pattern.h names) parsed to a syntax tree, the tree to a Thompson
 * NFA between two any-character loops (search semantics; ^ passes only
 * before the first character, and no character follows a $). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_pattern.h"
#include "sample/json_pattern_nfa.h"

int rx_fail(rx *x, const char *fmt, ...) {
    if (x->err && x->errlen && !x->err[0]) {
        char m[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        snprintf(x->err, x->errlen, "pattern: %s", m);
    }
    return -1;
}

bool rx_grow(void **p, int *cap, int need, size_t elt) {
    if (need <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elt);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* ---- character sets ---- */

static int cset_add(cset *s, uint32_t lo, uint32_t hi) {
    if (!rx_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) return -1;
    s->r[s->n++] = (range){lo, hi};
    return 0;
}

static int by_lo(const void *a, const void *b) {
    uint32_t x = ((const range *)a)->lo, y = ((const range *)b)->lo;
    return x < y ? -1 : x > y;
}

/* sorted, overlapping and adjacent ranges merged */
static void cset_norm(cset *s) {
    if (!s->n) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, by_lo);
    int w = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[w].hi + 1) {
            if (s->r[i].hi > s->r[w].hi) s->r[w].hi = s->r[i].hi;
        } else
            s->r[++w] = s->r[i];
    }
    s->n = w + 1;
}

/* the complement within 0..CP_MAX (s normalized) */
static int cset_negate(cset *s) {
    cset t = {0};
    uint32_t at = 0;
    bool tail = true;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > at && cset_add(&t, at, s->r[i].lo - 1) < 0) goto oom;
        if (s->r[i].hi == CP_MAX) tail = false;
        at = s->r[i].hi + 1;
    }
    if (tail && cset_add(&t, at, CP_MAX) < 0) goto oom;
    free(s->r);
    *s = t;
    return 0;
oom:
    free(t.r);
    return -1;
}

/* ECMA-262's \d \w \s and their complements (D W S) */
static int cset_add_class(cset *s, char c) {
    static const range DIGIT[] = {{'0', '9'}};
    static const range WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const range SPACE[] = {{9, 13}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                  {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    char l = (char)(c | 0x20);
    const range *r = l == 'd' ? DIGIT : l == 'w' ? WORD : SPACE;
    int n = l == 'd' ? 1 : l == 'w' ? 4 : (int)(sizeof SPACE / sizeof SPACE[0]);
    cset t = {0};
    for (int i = 0; i < n; i++)
        if (cset_add(&t, r[i].lo, r[i].hi) < 0) goto oom;
    if (c != l && cset_negate(&t) < 0) goto oom;
    for (int i = 0; i < t.n; i++)
        if (cset_add(s, t.r[i].lo, t.r[i].hi) < 0) goto oom;
    free(t.r);
    return 0;
oom:
    free(t.r);
    return -1;
}

/* ---- parsing ---- */

static int mk(rx *x, int kind, int a, int n, int min, int max) {
    if (x->n_ast >= MAX_AST) return rx_fail(x, "too long (more than %d parts)", MAX_AST);
    if (!rx_grow((void **)&x->ast, &x->cap_ast, x->n_ast + 1, sizeof *x->ast)) return rx_fail(x, "out of memory");
    x->ast[x->n_ast] = (ast){(uint8_t)kind, a, n, min, max};
    return x->n_ast++;
}

/* a set node taking s (its ranges: taken) */
static int mk_set(rx *x, cset *s) {
    if (!rx_grow((void **)&x->sets, &x->cap_sets, x->n_sets + 1, sizeof *x->sets)) {
        free(s->r);
        return rx_fail(x, "out of memory");
    }
    cset_norm(s);
    x->sets[x->n_sets] = *s;
    return mk(x, A_SET, x->n_sets++, 0, 0, 0);
}

static int mk_char(rx *x, uint32_t cp) {
    cset s = {0};
    if (cset_add(&s, cp, cp) < 0) return rx_fail(x, "out of memory");
    return mk_set(x, &s);
}

/* one UTF-8 character (the pattern is a JSON string: valid UTF-8) */
static uint32_t read_utf8(rx *x) {
    uint8_t c = (uint8_t)*x->p++;
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t cp = n ? c & (0x3F >> n) : c;
    for (; n && x->p < x->end; n--) cp = cp << 6 | ((uint8_t)*x->p++ & 0x3F);
    return cp;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* n hex digits at x->p (-1: not there) */
static long read_hex(rx *x, int n) {
    long v = 0;
    if (x->end - x->p < n) return -1;
    for (int i = 0; i < n; i++) {
        int d = hex_digit(x->p[i]);
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    x->p += n;
    return v;
}

/* after '\\': 1 with *cp a character, 0 with a class added to cls, -1 refused */
static int parse_escape(rx *x, bool in_class, cset *cls, uint32_t *cp) {
    if (x->p >= x->end) return rx_fail(x, "ends with '\\'");
    char c = *x->p;
    if ((uint8_t)c >= 0x80) { /* an identity escape of a non-ASCII character */
        *cp = read_utf8(x);
        return 1;
    }
    x->p++;
    long v;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        return cset_add_class(cls, c) < 0 ? rx_fail(x, "out of memory") : 0;
    case 'b':
        if (in_class) return *cp = 8, 1;
        return rx_fail(x, "word boundaries (\\b) are not supported");
    case 'B': return rx_fail(x, "word boundaries (\\B) are not supported");
    case 't': return *cp = 9, 1;
    case 'n': return *cp = 10, 1;
    case 'v': return *cp = 11, 1;
    case 'f': return *cp = 12, 1;
    case 'r': return *cp = 13, 1;
    case '0':
        if (x->p < x->end && *x->p >= '0' && *x->p <= '9') return rx_fail(x, "octal escapes are not supported");
        return *cp = 0, 1;
    case 'k': return rx_fail(x, "backreferences are not supported");
    case 'p': case 'P': return rx_fail(x, "Unicode property escapes (\\%c{...}) are not supported", c);
    case 'c':
        if (x->p < x->end && ((*x->p | 0x20) >= 'a' && (*x->p | 0x20) <= 'z')) return *cp = (uint32_t)(*x->p++ % 32), 1;
        return rx_fail(x, "\\c must be followed by a letter");
    case 'x':
        if ((v = read_hex(x, 2)) < 0) return rx_fail(x, "\\x must be followed by two hex digits");
        return *cp = (uint32_t)v, 1;
    case 'u':
        if (x->p < x->end && *x->p == '{') {
            v = 0;
            int digits = 0;
            for (x->p++; x->p < x->end && hex_digit(*x->p) >= 0 && v <= CP_MAX; x->p++, digits++) v = v * 16 + hex_digit(*x->p);
            if (!digits || v > CP_MAX || x->p >= x->end || *x->p != '}') return rx_fail(x, "a bad \\u{...} escape");
            x->p++;
            return *cp = (uint32_t)v, 1;
        }
        if ((v = read_hex(x, 4)) < 0) return rx_fail(x, "\\u must be followed by four hex digits");
        if (v >= 0xD800 && v <= 0xDBFF && x->end - x->p >= 6 && x->p[0] == '\\' && x->p[1] == 'u') {
            const char *at = x->p;
            x->p += 2;
            long lo = read_hex(x, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return *cp = (uint32_t)(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00)), 1;
            x->p = at;
        }
        return *cp = (uint32_t)v, 1;
    default:
        if (c >= '1' && c <= '9') return rx_fail(x, "backreferences are not supported");
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return rx_fail(x, "the escape \\%c is not supported", c);
        return *cp = (uint8_t)c, 1;
    }
}

/* a class's member: 1 with *cp a character, 0 with a class added to cls */
static int class_atom(rx *x, cset *cls, uint32_t *cp) {
    if (*x->p != '\\') return *cp = read_utf8(x), 1;
    x->p++;
    return parse_escape(x, true, cls, cp);
}

/* after '[' */
static int parse_class(rx *x) {
    cset s = {0};
    bool neg = x->p < x->end && *x->p == '^';
    x->p += neg;
    for (;;) {
        if (x->p >= x->end) goto bad;
        if (*x->p == ']') break;
        uint32_t lo, hi;
        int one = class_atom(x, &s, &lo);
        if (one < 0) goto fail;
        if (one && x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] != ']') {
            x->p++;
            int two = class_atom(x, &s, &hi);
            if (two < 0) goto fail;
            if (!two) hi = lo, lo = '-'; /* [a-\d]: a, '-' and the class (as ECMA's annex B reads it) */
            else if (hi < lo) {
                rx_fail(x, "a range out of order in [...]");
                goto fail;
            }
            if (!two && cset_add(&s, hi, hi) < 0) goto oom;
        } else if (!one)
            continue;
        else
            hi = lo;
        if (cset_add(&s, lo, hi) < 0) goto oom;
    }
    x->p++;
    cset_norm(&s);
    if (neg && cset_negate(&s) < 0) goto oom;
    return mk_set(x, &s);
bad:
    rx_fail(x, "an unclosed '['");
    goto fail;
oom:
    rx_fail(x, "out of memory");
fail:
    free(s.r);
    return -1;
}

/* {n}, {n,} or {n,m} at p: its counts (max -1: none) and where it ends */
static bool read_braces(const char *p, const char *end, int *min, int *max, const char **after) {
    long v[2] = {-1, -1};
    int k = 0;
    if (p >= end || *p++ != '{') return false;
    for (;; p++) {
        if (p >= end) return false;
        if (*p >= '0' && *p <= '9') {
            long d = *p - '0';
            v[k] = v[k] < 0 ? d : v[k] > 100000 ? v[k] : v[k] * 10 + d;
        } else if (*p == ',' && k == 0 && v[0] >= 0) {
            k = 1;
        } else if (*p == '}' && v[0] >= 0) {
            *min = (int)v[0];
            *max = k ? (int)v[1] : (int)v[0];
            *after = p + 1;
            return true;
        } else
            return false;
    }
}

static int parse_alt(rx *x);

static int parse_atom(rx *x) {
    int min, max;
    const char *after;
    uint32_t cp;
    switch (*x->p) {
    case '(': {
        x->p++;
        if (x->p < x->end && *x->p == '?') {
            x->p++;
            char c = x->p < x->end ? *x->p : 0, d = x->end - x->p > 1 ? x->p[1] : 0;
            if (c == ':') x->p++;
            else if (c == '=' || c == '!') return rx_fail(x, "lookahead (?%c ...) is not supported", c);
            else if (c == '<' && (d == '=' || d == '!')) return rx_fail(x, "lookbehind (?<%c ...) is not supported", d);
            else if (c == '<') { /* a named group: a group */
                const char *gt = memchr(x->p, '>', (size_t)(x->end - x->p));
                if (!gt) return rx_fail(x, "an unclosed group name");
                x->p = gt + 1;
            } else
                return rx_fail(x, "an unknown group (?%c", c ? c : ' ');
        }
        if (++x->depth > MAX_GROUP_DEPTH) return rx_fail(x, "groups nested more than %d deep", MAX_GROUP_DEPTH);
        int a = parse_alt(x);
        x->depth--;
        if (a < 0) return -1;
        if (x->p >= x->end || *x->p != ')') return rx_fail(x, "an unclosed '('");
        x->p++;
        if (x->ast[a].kind == A_BOL || x->ast[a].kind == A_EOL) { /* a group around an assertion may be repeated */
            if (!rx_grow((void **)&x->kids, &x->cap_kids, x->n_kids + 1, sizeof *x->kids)) return rx_fail(x, "out of memory");
            x->kids[x->n_kids++] = a;
            return mk(x, A_SEQ, x->n_kids - 1, 1, 0, 0);
        }
        return a;
    }
    case '[': x->p++; return parse_class(x);
    case '.': {
        x->p++;
        cset s = {0};
        if (cset_add(&s, 0, 9) < 0 || cset_add(&s, 11, 12) < 0 || cset_add(&s, 14, 0x2027) < 0 ||
            cset_add(&s, 0x202A, CP_MAX) < 0) {
            free(s.r);
            return rx_fail(x, "out of memory");
        }
        return mk_set(x, &s);
    }
    case '^': x->p++; return mk(x, A_BOL, 0, 0, 0, 0);
    case '$': x->p++; return mk(x, A_EOL, 0, 0, 0, 0);
    case '\\': {
        x->p++;
        cset s = {0};
        int one = parse_escape(x, false, &s, &cp);
        if (one < 0) {
            free(s.r);
            return -1;
        }
        if (one) free(s.r);
        return one ? mk_char(x, cp) : mk_set(x, &s);
    }
    case '*': case '+': case '?': return rx_fail(x, "nothing to repeat before '%c'", *x->p);
    case '{':
        if (read_braces(x->p, x->end, &min, &max, &after)) return rx_fail(x, "nothing to repeat before '{'");
        /* (a '{' that is no quantifier stands for itself, as in annex B) */
        /* fall through */
    default:
        return mk_char(x, read_utf8(x));
    }
}

static int parse_quant(rx *x) {
    int a = parse_atom(x), min, max;
    const char *after;
    if (a < 0 || x->p >= x->end) return a;
    char c = *x->p;
    if (c == '*' || c == '+' || c == '?') {
        min = c == '+';
        max = c == '?' ? 1 : -1;
        after = x->p + 1;
    } else if (!read_braces(x->p, x->end, &min, &max, &after))
        return a;
    if (x->ast[a].kind == A_BOL || x->ast[a].kind == A_EOL) return rx_fail(x, "nothing to repeat before '%c'", c);
    if (min > JP_MAX_REPEAT || max > JP_MAX_REPEAT) return rx_fail(x, "repeat counts above %d are not supported", JP_MAX_REPEAT);
    if (max >= 0 && min > max) return rx_fail(x, "numbers out of order in {n,m}");
    x->p = after;
    if (x->p < x->end && *x->p == '?') x->p++; /* lazy: the same language */
    int node = mk(x, A_REP, a, 0, min, max);
    if (x->p < x->end && (*x->p == '*' || *x->p == '+' || *x->p == '?' || read_braces(x->p, x->end, &min, &max, &after)))
        return rx_fail(x, "nothing to repeat before '%c'", *x->p);
    return node;
}

/* a list node (kind A_SEQ / A_ALT) of n items; one item is itself */
static int mk_list(rx *x, int kind, const int *items, int n) {
    if (n == 1) return items[0];
    if (!rx_grow((void **)&x->kids, &x->cap_kids, x->n_kids + n, sizeof *x->kids)) return rx_fail(x, "out of memory");
    if (n) memcpy(x->kids + x->n_kids, items, (size_t)n * sizeof *items); /* (n = 0: "()", kids may be NULL) */
    x->n_kids += n;
    return mk(x, kind, x->n_kids - n, n, 0, 0);
}

/* items until the end, '|' or ')' (seq), or sequences separated by '|' until the end or ')' */
static int parse_list(rx *x, bool seq) {
    int *items = NULL, n = 0, cap = 0, r = -1;
    for (;;) {
        if (seq && (x->p >= x->end || *x->p == '|' || *x->p == ')')) break;
        int a = seq ? parse_quant(x) : parse_list(x, true);
        if (a < 0) goto out;
        if (!rx_grow((void **)&items, &cap, n + 1, sizeof *items)) {
            rx_fail(x, "out of memory");
            goto out;
        }
        items[n++] = a;
        if (!seq) {
            if (x->p >= x->end || *x->p != '|') break;
            x->p++;
        }
    }
    r = mk_list(x, seq ? A_SEQ : A_ALT, items, n);
out:
    free(items);
    return r;
}

static int parse_alt(rx *x) { return parse_list(x, false); }

/* ---- NFA ---- */

static int st(rx *x, int op, int out, int out1, int set) {
    if (x->n_nfa >= MAX_NFA) return rx_fail(x, "too large (more than %d automaton states; large repeat counts?)", MAX_NFA);
    if (!rx_grow((void **)&x->nfa, &x->cap_nfa, x->n_nfa + 1, sizeof *x->nfa)) return rx_fail(x, "out of memory");
    x->nfa[x->n_nfa] = (nstate){(uint8_t)op, out, out1, set};
    return x->n_nfa++;
}

/* the fragment of tree node a (f.s < 0: failed) */
static frag emit(rx *x, int a) {
    const ast n = x->ast[a];
    frag f = {-1, -1}, g;
    int e;
    switch (n.kind) {
    case A_SET:
    case A_BOL:
    case A_EOL:
        if ((e = st(x, S_EPS, -1, -1, -1)) < 0) return f;
        f.s = st(x, n.kind == A_SET ? S_SET : n.kind == A_BOL ? S_BOL : S_EOL, e, -1, n.a);
        f.e = e;
        return f;
    case A_SEQ:
        if ((f.s = f.e = st(x, S_EPS, -1, -1, -1)) < 0) return f;
        for (int i = 0; i < n.n; i++) {
            if ((g = emit(x, x->kids[n.a + i])).s < 0) return g;
            x->nfa[f.e].out = g.s;
            f.e = g.e;
        }
        return f;
    case A_ALT:
        if ((e = st(x, S_EPS, -1, -1, -1)) < 0) return f;
        for (int i = 0; i < n.n; i++) {
            if ((g = emit(x, x->kids[n.a + i])).s < 0) return g;
            x->nfa[g.e].out = e;
            f.s = i ? st(x, S_SPLIT, f.s, g.s, -1) : g.s;
            if (f.s < 0) return f;
        }
        f.e = e;
        return f;
    default: /* A_REP: min copies, then a loop or max - min optional ones (each may skip to the exit) */
        if ((f.s = f.e = st(x, S_EPS, -1, -1, -1)) < 0 || (e = st(x, S_EPS, -1, -1, -1)) < 0) return (frag){-1, -1};
        for (int i = 0; i < (n.max < 0 ? n.min + 1 : n.max); i++) {
            if ((g = emit(x, n.a)).s < 0) return g;
            int link = g.s;
            if (i >= n.min) { /* optional: a split before it, to it or to the exit */
                if ((link = st(x, S_SPLIT, g.s, e, -1)) < 0) return (frag){-1, -1};
                if (n.max < 0) x->nfa[g.e].out = link, g.e = -1; /* the loop: back to its split */
            }
            x->nfa[f.e].out = link;
            f.e = g.e >= 0 ? g.e : link;
        }
        if (n.max < 0) f.e = e; /* (the loop's split leads out) */
        else x->nfa[f.e].out = e, f.e = e;
        return f;
    }
}

int rx_add_pattern(rx *x, int pat_index) {
    int root, any, loop0, loop1, match;
    frag r;
    cset all = {0};
    x->depth = 0;
    if (cset_add(&all, 0, CP_MAX) < 0) {
        free(all.r);
        return rx_fail(x, "out of memory");
    }
    if ((any = mk_set(x, &all)) < 0) return -1; /* (mk_set owns all.r, freed on failure) */
    if ((root = parse_alt(x)) < 0) return -1;
    if (x->p < x->end) return rx_fail(x, "an unmatched ')'");
    if ((r = emit(x, root)).s < 0 || (match = st(x, S_MATCH, -1, -1, pat_index)) < 0 ||
        (loop0 = st(x, S_SPLIT, -1, r.s, -1)) < 0 || st(x, S_SET, loop0, -1, x->ast[any].a) < 0 ||
        (loop1 = st(x, S_SPLIT, -1, match, -1)) < 0 || st(x, S_SET, loop1, -1, x->ast[any].a) < 0)
        return -1;
    x->nfa[loop0].out = x->n_nfa - 3; /* (the first loop's set) */
    x->nfa[loop1].out = x->n_nfa - 1;
    x->nfa[r.e].out = loop1;
    return loop0;
}

void rx_free(rx *x) {
    for (int i = 0; i < x->n_sets; i++) free(x->sets[i].r);
    free(x->sets);
    free(x->ast);
    free(x->kids);
    free(x->nfa);
}
