/* json_pattern.c — json_pattern.h: the pattern parsed to a syntax tree
 * (sequences and alternations as child lists, so nothing recurses on a
 * pattern's length, only on its groups' nesting), the tree to a Thompson
 * NFA (a repeat's body emitted once per copy) between two any-character
 * loops (search semantics; ^ passes only before the first character, and
 * no character follows a $), the NFA to a DFA by subsets over classes of
 * code points (the intervals no set's edge splits), then for each state
 * and each count k of characters still owed to minLength the fewest
 * characters to a match k or more long. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_pattern.h"

#define CP_MAX 0x10FFFFu
#define INF (1 << 29)
#define MAX_AST 16384
#define MAX_NFA (1 << 17)
#define MAX_GROUP_DEPTH 64
#define MAX_FEWEST (1 << 20)  /* entries of the (minLength + 1) x states table */
#define MAX_NEXT (1 << 22)    /* entries of the states x classes table (16 MB) */
#define MAX_WORK 40000000LL   /* the subset construction's steps (NFA states visited, bitset words
                               * cleared; a visit ~2.5 ns on this VM): about 0.1 s at most, for a
                               * compile that runs on a request's thread */

typedef struct { uint32_t lo, hi; } range;
typedef struct { range *r; int n, cap; } cset;

/* syntax tree: A_SEQ / A_ALT hold n kids from kids[a]; A_REP kid a, min..max (-1: no max) */
enum { A_SET, A_SEQ, A_ALT, A_REP, A_BOL, A_EOL };
typedef struct { uint8_t kind; int a, n, min, max; } ast;

enum { S_SET, S_SPLIT, S_EPS, S_BOL, S_EOL, S_MATCH };
typedef struct { uint8_t op; int out, out1, set; } nstate;
typedef struct { int s, e; } frag; /* start state, end state (an S_EPS whose out is patched) */

typedef struct {
    const char *p, *end;
    char *err;
    size_t errlen;
    int depth;
    ast *ast;
    int n_ast, cap_ast;
    int *kids;
    int n_kids, cap_kids;
    cset *sets;
    int n_sets, cap_sets;
    nstate *nfa;
    int n_nfa, cap_nfa;
} rx;

struct jp_dfa {
    int n_states, n_classes, start;
    uint32_t *bound;     /* (n_classes) each class's first code point, ascending from 0 */
    int16_t ascii[128];  /* an ASCII character's class */
    int32_t *next;       /* (n_states x n_classes) -1: dead, or a character no string carries */
    uint8_t *accept;     /* (n_states) */
    int min_len, max_len;
    int32_t *fewest;     /* ((min_len + 1) x n_states): [k][s] the fewest characters from s to a match, k or more */
};

static int rx_fail(rx *x, const char *fmt, ...) {
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

static bool grow(void **p, int *cap, int need, size_t elt) {
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
    if (!grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) return -1;
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
    if (!grow((void **)&x->ast, &x->cap_ast, x->n_ast + 1, sizeof *x->ast)) return rx_fail(x, "out of memory");
    x->ast[x->n_ast] = (ast){(uint8_t)kind, a, n, min, max};
    return x->n_ast++;
}

/* a set node taking s (its ranges: taken) */
static int mk_set(rx *x, cset *s) {
    if (!grow((void **)&x->sets, &x->cap_sets, x->n_sets + 1, sizeof *x->sets)) {
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
            if (!grow((void **)&x->kids, &x->cap_kids, x->n_kids + 1, sizeof *x->kids)) return rx_fail(x, "out of memory");
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
    if (!grow((void **)&x->kids, &x->cap_kids, x->n_kids + n, sizeof *x->kids)) return rx_fail(x, "out of memory");
    memcpy(x->kids + x->n_kids, items, (size_t)n * sizeof *items);
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
        if (!grow((void **)&items, &cap, n + 1, sizeof *items)) {
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
    if (!grow((void **)&x->nfa, &x->cap_nfa, x->n_nfa + 1, sizeof *x->nfa)) return rx_fail(x, "out of memory");
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

/* ---- DFA ---- */

/* a character a JSON string carries as itself or by a short escape */
static bool writable(uint32_t c) { return (c >= 8 && c <= 10) || c == 12 || c == 13 || (c >= 0x20 && c < 0xD800) || c >= 0xE000; }

static int class_of(const jp_dfa *d, uint32_t cp) {
    if (cp < 128) return d->ascii[cp];
    int lo = 0, hi = d->n_classes - 1; /* the last class whose first code point is <= cp */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->bound[mid] <= cp) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static int by_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* the classes: every set's range ends, and the edges of what strings carry */
static int make_classes(rx *x, jp_dfa *d) {
    static const uint32_t FIXED[] = {0, 8, 11, 12, 14, 0x20, 0xD800, 0xE000};
    int n = 0, cap = 0;
    uint32_t *b = NULL;
    for (int i = 0; i < (int)(sizeof FIXED / sizeof FIXED[0]); i++) {
        if (!grow((void **)&b, &cap, n + 1, sizeof *b)) goto oom;
        b[n++] = FIXED[i];
    }
    for (int i = 0; i < x->n_sets; i++)
        for (int j = 0; j < x->sets[i].n; j++) {
            if (!grow((void **)&b, &cap, n + 2, sizeof *b)) goto oom;
            b[n++] = x->sets[i].r[j].lo;
            if (x->sets[i].r[j].hi < CP_MAX) b[n++] = x->sets[i].r[j].hi + 1;
        }
    qsort(b, (size_t)n, sizeof *b, by_u32);
    int w = 0;
    for (int i = 0; i < n; i++)
        if (!w || b[i] != b[w - 1]) b[w++] = b[i];
    d->bound = b;
    d->n_classes = w;
    d->n_classes = w;
    for (uint32_t c = 0, k = 0; c < 128; c++) {
        while (k + 1 < (uint32_t)w && b[k + 1] <= c) k++;
        d->ascii[c] = (int16_t)k;
    }
    return 0;
oom:
    free(b);
    return rx_fail(x, "out of memory");
}

static bool in_set(const cset *s, uint32_t cp) {
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < s->r[mid].lo) hi = mid - 1;
        else if (cp > s->r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

typedef struct {
    rx *x;
    jp_dfa *d;
    int words;           /* uint64s of an NFA state set */
    int32_t *keys;       /* each DFA state's live S_SET states, ascending, back to back */
    size_t *key_at;      /* (n_states + 1) where each state's run starts */
    size_t cap_keys;
    uint32_t *hash;
    int32_t *slot;       /* (2 x JP_MAX_STATES) state + 1 by hash, 0: free */
    int cap;
    int *stack;          /* closure work: state x 2 + after-$ */
    uint64_t *seen;      /* (2 x words) visited, before / after a $ */
    uint64_t *key;       /* (words) the closure's live S_SET states, cleared as read into list */
    int32_t *list;       /* the closure's live S_SET states, ascending */
    int n_list;
    long long work;      /* steps so far (MAX_WORK) */
    int all;             /* every pattern's bit */
} builder;

/* the closure of the seeds (states entered before any $): the S_SET
 * states live in b->list (ascending), and the patterns whose match is
 * reached, a bit each (a path through $ may match but take no character) */
static int closure(builder *b, const int *seeds, int n, bool at_start) {
    const nstate *nfa = b->x->nfa;
    int sp = 0, accept = 0; /* (a bit per pattern whose match is reached) */
    int lo = b->words, hi = -1; /* the key words touched */
    memset(b->seen, 0, 2 * (size_t)b->words * sizeof *b->seen);
    b->work += b->words / 8 + 1;
    b->n_list = 0;
    for (int i = 0; i < n; i++) b->stack[sp++] = seeds[i] * 2;
    while (sp) {
        int v = b->stack[--sp], q = v >> 1, post = v & 1;
        uint64_t *seen = b->seen + post * b->words;
        if (seen[q >> 6] >> (q & 63) & 1) continue;
        seen[q >> 6] |= 1ull << (q & 63);
        b->work++;
        const nstate *s = &nfa[q];
        switch (s->op) {
        case S_SET: /* (kept in the key bitset: the list comes out in order) */
            if (!post) {
                b->key[q >> 6] |= 1ull << (q & 63);
                if (q >> 6 < lo) lo = q >> 6;
                if (q >> 6 > hi) hi = q >> 6;
            }
            break;
        case S_MATCH: accept |= 1 << s->set; break;
        case S_SPLIT: b->stack[sp++] = s->out1 * 2 + post; /* fall through */
        case S_EPS: b->stack[sp++] = s->out * 2 + post; break;
        case S_BOL:
            if (at_start) b->stack[sp++] = s->out * 2 + post;
            break;
        case S_EOL: b->stack[sp++] = s->out * 2 + 1; break;
        }
    }
    for (int w = lo; w <= hi; w++) {
        for (uint64_t m = b->key[w]; m; m &= m - 1) b->list[b->n_list++] = w * 64 + __builtin_ctzll(m);
        b->key[w] = 0;
    }
    b->work += hi - lo + 1;
    return accept;
}

/* the DFA state of b->list / accept (the patterns matched, a bit each;
 * kept in d->accept until build_dfa turns it into all or not), added when
 * new (-1: dead — nothing live and not every pattern matched; -2: too
 * many; -3: out of memory); found through an open-addressed table of
 * state + 1 by hash (JP_MAX_STATES x 2 slots) */
static int state_of(builder *b, int accept) {
    jp_dfa *d = b->d;
    int n = b->n_list;
    if (!n && accept != b->all) return -1;
    uint32_t h = 2166136261u ^ accept;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)b->list[i]) * 16777619u;
    uint32_t at = h & (2 * JP_MAX_STATES - 1);
    for (; b->slot[at]; at = (at + 1) & (2 * JP_MAX_STATES - 1)) {
        int s = b->slot[at] - 1;
        b->work++;
        if (b->hash[s] == h && d->accept[s] == accept && b->key_at[s + 1] - b->key_at[s] == (size_t)n &&
            !memcmp(b->keys + b->key_at[s], b->list, (size_t)n * sizeof *b->list))
            return s;
    }
    if (d->n_states >= JP_MAX_STATES) return -2;
    if (d->n_states + 1 >= b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        size_t *ka = realloc(b->key_at, (size_t)(cap + 1) * sizeof *ka);
        if (ka) b->key_at = ka;
        uint32_t *hh = realloc(b->hash, (size_t)cap * sizeof *hh);
        if (hh) b->hash = hh;
        uint8_t *ac = realloc(d->accept, (size_t)cap);
        if (ac) d->accept = ac;
        if (!ka || !hh || !ac) return -3;
        if (!b->cap) b->key_at[0] = 0;
        b->cap = cap;
    }
    size_t k0 = b->key_at[d->n_states];
    if (k0 + (size_t)n > b->cap_keys) {
        size_t cap = (k0 + (size_t)n) * 2;
        int32_t *k = realloc(b->keys, cap * sizeof *k);
        if (!k) return -3;
        b->keys = k;
        b->cap_keys = cap;
    }
    memcpy(b->keys + k0, b->list, (size_t)n * sizeof *b->list);
    b->key_at[d->n_states + 1] = k0 + (size_t)n;
    b->hash[d->n_states] = h;
    d->accept[d->n_states] = (uint8_t)accept;
    b->slot[at] = d->n_states + 1;
    return d->n_states++;
}

/* subsets from the patterns' starts: states numbered as found, each
 * state's row of next filled in turn; a state accepts where every pattern
 * matches */
static int build_dfa(rx *x, jp_dfa *d, const int *starts, int n_pat) {
    builder b = {.x = x, .d = d, .words = (x->n_nfa + 63) / 64, .all = (1 << n_pat) - 1};
    int rc = -1, nc = d->n_classes, *seeds = NULL, cap_next = 0;
    /* takes[set][c]: a set's S_SET states take class c */
    uint8_t *takes = malloc((size_t)x->n_sets * nc);
    b.stack = malloc(sizeof *b.stack * (6 * (size_t)x->n_nfa + 16)); /* (seeds, then two pushes a visit of a state before or after a $) */
    b.seen = malloc(2 * (size_t)b.words * 8);
    b.list = malloc(sizeof *b.list * (size_t)x->n_nfa);
    b.key = calloc((size_t)b.words, 8);
    seeds = malloc(sizeof *seeds * (size_t)x->n_nfa);
    b.slot = calloc(2 * JP_MAX_STATES, sizeof *b.slot);
    if (!takes || !b.stack || !b.seen || !b.list || !b.key || !seeds || !b.slot) goto oom;
    for (int i = 0; i < x->n_sets; i++)
        for (int c = 0; c < nc; c++) takes[(size_t)i * nc + c] = in_set(&x->sets[i], d->bound[c]);
    d->start = state_of(&b, closure(&b, starts, n_pat, true));
    if (d->start == -3) goto oom;
    for (int s = 0; s < d->n_states; s++) {
        if (!grow((void **)&d->next, &cap_next, (s + 1) * nc, sizeof *d->next)) goto oom;
        for (int c = 0; c < nc; c++) {
            int t = -1;
            if (writable(d->bound[c])) {
                int n = 0;
                for (size_t k = b.key_at[s]; k < b.key_at[s + 1]; k++) {
                    int q = b.keys[k];
                    if (takes[(size_t)x->nfa[q].set * nc + c]) seeds[n++] = x->nfa[q].out;
                }
                b.work += (long long)(b.key_at[s + 1] - b.key_at[s]);
                if (n) t = state_of(&b, closure(&b, seeds, n, false));
                if (t == -3) goto oom;
                if (t == -2) {
                    rx_fail(x, "too complex (more than %d automaton states)", JP_MAX_STATES);
                    goto out;
                }
                if (b.work > MAX_WORK || (long long)d->n_states * nc > MAX_NEXT) {
                    rx_fail(x, "too complex to compile quickly");
                    goto out;
                }
            }
            d->next[(size_t)s * nc + c] = t;
        }
    }
    for (int s = 0; s < d->n_states; s++) d->accept[s] = d->accept[s] == b.all;
    rc = 0;
    goto out;
oom:
    rx_fail(x, "out of memory");
out:
    free(takes);
    free(b.stack);
    free(b.seen);
    free(b.list);
    free(b.key);
    free(b.keys);
    free(b.key_at);
    free(b.hash);
    free(b.slot);
    free(seeds);
    return rc;
}

/* fewest[0][s]: the distance to an accepting state (backwards from them,
 * breadth first); fewest[k][s] = 1 + min over s's successors t of
 * fewest[k - 1][t] (a match k or more characters on) */
static int make_fewest(rx *x, jp_dfa *d) {
    int ns = d->n_states, nc = d->n_classes, K = d->min_len;
    if ((long)(K + 1) * ns > MAX_FEWEST)
        return rx_fail(x, "minLength %d with a pattern of %d automaton states is not supported", K, ns);
    int *cnt = calloc((size_t)ns + 1, sizeof *cnt), *from = NULL, *queue = malloc(sizeof *queue * (size_t)ns);
    d->fewest = malloc(sizeof *d->fewest * (size_t)(K + 1) * ns);
    if (!cnt || !queue || !d->fewest) goto oom;
    /* predecessors by target (CSR; a row's runs of one target counted once) */
    for (int s = 0; s < ns; s++)
        for (int c = 0, last = -1; c < nc; c++) {
            int t = d->next[(size_t)s * nc + c];
            if (t >= 0 && t != last) cnt[t + 1]++, last = t;
        }
    for (int t = 0; t < ns; t++) cnt[t + 1] += cnt[t];
    if (!(from = malloc(sizeof *from * ((size_t)cnt[ns] + 1)))) goto oom;
    for (int s = 0; s < ns; s++)
        for (int c = 0, last = -1; c < nc; c++) {
            int t = d->next[(size_t)s * nc + c];
            if (t >= 0 && t != last) from[cnt[t]++] = s, last = t;
        }
    for (int t = ns; t > 0; t--) cnt[t] = cnt[t - 1]; /* (back to row starts) */
    cnt[0] = 0;
    int32_t *f0 = d->fewest, qh = 0, qt = 0;
    for (int s = 0; s < ns; s++) {
        f0[s] = d->accept[s] ? 0 : INF;
        if (d->accept[s]) queue[qt++] = s;
    }
    while (qh < qt) {
        int t = queue[qh++];
        for (int i = cnt[t]; i < cnt[t + 1]; i++)
            if (f0[from[i]] == INF) f0[from[i]] = f0[t] + 1, queue[qt++] = from[i];
    }
    for (int k = 1; k <= K; k++) {
        const int32_t *prev = d->fewest + (size_t)(k - 1) * ns;
        int32_t *cur = d->fewest + (size_t)k * ns;
        for (int s = 0; s < ns; s++) cur[s] = INF;
        for (int t = 0; t < ns; t++)
            if (prev[t] < INF)
                for (int i = cnt[t]; i < cnt[t + 1]; i++)
                    if (prev[t] + 1 < cur[from[i]]) cur[from[i]] = prev[t] + 1;
    }
    free(cnt);
    free(from);
    free(queue);
    return 0;
oom:
    free(cnt);
    free(from);
    free(queue);
    return rx_fail(x, "out of memory");
}

void jp_free(jp_dfa *d) {
    if (!d) return;
    free(d->bound);
    free(d->next);
    free(d->accept);
    free(d->fewest);
    free(d);
}

size_t jp_bytes(const jp_dfa *d) {
    size_t ns = (size_t)d->n_states, nc = (size_t)d->n_classes;
    return sizeof *d + nc * sizeof *d->bound + ns * nc * sizeof *d->next + ns +
           ((size_t)d->min_len + 1) * ns * sizeof *d->fewest;
}

jp_dfa *jp_compile(const char *pattern, int min_len, int max_len, char *err, size_t errlen) {
    return jp_compile_all(&pattern, 1, min_len, max_len, err, errlen);
}

jp_dfa *jp_compile_all(const char *const *patterns, int n_pat, int min_len, int max_len, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    rx x = {.err = err, .errlen = errlen};
    jp_dfa *d = calloc(1, sizeof *d);
    int starts[JP_MAX_PATTERNS], any = -1;
    if (!d || n_pat < 1 || n_pat > JP_MAX_PATTERNS) goto fail;
    d->min_len = min_len;
    d->max_len = max_len;
    /* each pattern: any* R any* then its match, the loops over one "any" set */
    cset all = {0};
    if (cset_add(&all, 0, CP_MAX) < 0 || (any = mk_set(&x, &all)) < 0) goto fail;
    for (int p = 0; p < n_pat; p++) {
        int root, loop0, loop1, match;
        frag r;
        x.p = patterns[p];
        x.end = patterns[p] + strlen(patterns[p]);
        x.depth = 0;
        if ((root = parse_alt(&x)) < 0) goto fail;
        if (x.p < x.end) {
            rx_fail(&x, "an unmatched ')'");
            goto fail;
        }
        if ((r = emit(&x, root)).s < 0 || (match = st(&x, S_MATCH, -1, -1, p)) < 0 ||
            (loop0 = st(&x, S_SPLIT, -1, r.s, -1)) < 0 || st(&x, S_SET, loop0, -1, x.ast[any].a) < 0 ||
            (loop1 = st(&x, S_SPLIT, -1, match, -1)) < 0 || st(&x, S_SET, loop1, -1, x.ast[any].a) < 0)
            goto fail;
        x.nfa[loop0].out = x.n_nfa - 3; /* (the first loop's set) */
        x.nfa[loop1].out = x.n_nfa - 1;
        x.nfa[r.e].out = loop1;
        starts[p] = loop0;
    }
    if (make_classes(&x, d) < 0 || build_dfa(&x, d, starts, n_pat) < 0) goto fail;
    if (d->start < 0) {
        rx_fail(&x, "no string matches it");
        goto fail;
    }
    if (make_fewest(&x, d) < 0) goto fail;
    if (!jp_can_finish(d, d->start, 0)) {
        rx_fail(&x, "no string of %d to %d characters matches it", min_len, max_len);
        goto fail;
    }
    goto done;
fail:
    jp_free(d);
    d = NULL;
    if (err && errlen && !err[0]) snprintf(err, errlen, "pattern: out of memory");
done:
    for (int i = 0; i < x.n_sets; i++) free(x.sets[i].r);
    free(x.sets);
    free(x.ast);
    free(x.kids);
    free(x.nfa);
    return d;
}

int jp_start(const jp_dfa *d) { return d->start; }

int jp_step(const jp_dfa *d, int state, uint32_t cp) {
    return state < 0 || cp > CP_MAX ? -1 : d->next[(size_t)state * d->n_classes + class_of(d, cp)];
}

bool jp_can_finish(const jp_dfa *d, int state, int len) {
    if (state < 0) return false;
    int need = d->min_len > len ? d->min_len - len : 0;
    int32_t f = d->fewest[(size_t)need * d->n_states + state];
    return f < INF && (long)len + f <= d->max_len;
}

bool jp_range_can_finish(const jp_dfa *d, int state, uint32_t lo, uint32_t hi, int len) {
    if (state < 0) return false;
    for (int c = class_of(d, lo); c < d->n_classes && d->bound[c] <= hi; c++)
        if (jp_can_finish(d, d->next[(size_t)state * d->n_classes + c], len + 1)) return true;
    return false;
}

bool jp_can_end(const jp_dfa *d, int state, int len) { return state >= 0 && d->accept[state] && len >= d->min_len; }
