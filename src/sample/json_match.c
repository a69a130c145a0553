/* json_match.c — the byte-at-a-time recognizer of json_constraint.h: a
 * pushdown automaton whose stack holds the open containers (schema node,
 * where in the container, properties given) and whose header holds the
 * token being read (string, escape, number, keyword, enum literal). Every
 * byte either keeps the prefix completable or is refused; a prefix it
 * accepts can always be finished (a required property can still be given,
 * an array can still reach minItems), so masking by it never strands the
 * model — short of a schema that demands nesting past JC_MAX_DEPTH. */
#include <stddef.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_constraint.h"
#include "sample/json_pattern.h"

enum { LX_NONE, LX_STR, LX_ESC, LX_HEX, LX_NUM, LX_KW, LX_LIT };
/* container phases */
enum { PH_VALUE, PH_ARR_FIRST, PH_OBJ_FIRST, PH_OBJ_KEY, PH_COLON, PH_AFTER };
/* number sub-states; the _T ones may end the number */
enum { N_MINUS, N_ZERO_T, N_INT_T, N_DOT, N_FRAC_T, N_E, N_ESIGN, N_EXP_T };

/* the <think> block before the document */
enum { TH_NONE, TH_MAY, TH_OPEN, TH_IN, TH_AFTER };
static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
/* free text with tool calls (JC_CALLS): the text, after "<tool_call>" (a
 * little whitespace, then the document), after the document (a little
 * whitespace, then "</tool_call>") */
enum { CL_NONE, CL_TEXT, CL_OPEN, CL_DOC, CL_CLOSE_WS, CL_CLOSE };
static const char CALL_OPEN[] = "<tool_call>", CALL_CLOSE[] = "</tool_call>";
#define CALL_WS 2

static const char *const KW[3] = { "true", "false", "null" };
static const uint8_t KW_LEN[3] = { 4, 5, 4 };

static bool num_terminal(int st) { return st == N_ZERO_T || st == N_INT_T || st == N_FRAC_T || st == N_EXP_T; }

static const jc_node *node(const jc_state *s, int i) { return &s->c->nodes[i]; }
static jc_frame *top(jc_state *s) { return &s->f[s->depth - 1]; }

static uint64_t all_props(const jc_node *n) { return n->n_props == 64 ? ~0ull : (1ull << n->n_props) - 1; }

void jc_start(jc_state *s, const json_constraint *c, int flags) {
    memset(s, 0, offsetof(jc_state, f));
    s->c = c;
    s->calls = flags & JC_CALLS ? CL_TEXT : CL_NONE;
    s->think = flags & JC_THINK && !s->calls ? TH_MAY : TH_NONE;
}

void jc_copy(jc_state *dst, const jc_state *src) {
    memcpy(dst, src, offsetof(jc_state, f) + (size_t)src->depth * sizeof src->f[0]);
}

/* the node of the value that comes next at the current position */
static int value_node(jc_state *s) {
    if (!s->depth) return s->c->root;
    jc_frame *f = top(s);
    const jc_node *n = node(s, f->node);
    if (!f->object) return n->items;
    return f->key >= 0 ? n->props[f->key].node : n->additional;
}

static void value_end(jc_state *s) {
    s->lex = LX_NONE;
    if (!s->depth) s->done = true;
    else if (!top(s)->object && top(s)->count < 0xFFFF) top(s)->count++;
}

static bool push(jc_state *s, int nd, bool object) {
    if (s->depth == JC_MAX_DEPTH) return false;
    jc_frame *f = &s->f[s->depth++];
    memset(f, 0, sizeof *f);
    f->node = (uint16_t)nd;
    f->object = object;
    f->phase = object ? PH_OBJ_FIRST : PH_ARR_FIRST;
    f->key = -1;
    return true;
}

/* the open container is an array whose enum items are each used once */
static bool unique_array(jc_state *s) { return s->depth && !top(s)->object && node(s, top(s)->node)->unique; }

/* Enum literal `idx` is complete. In a discriminated union's object (its
 * constant property's value) the container goes on as the branch it names;
 * in a unique array it is used. */
static void lit_end(jc_state *s, int idx) {
    if (unique_array(s)) top(s)->seen |= 1ull << idx;
    if (s->depth) {
        jc_frame *f = top(s);
        const jc_node *u = node(s, f->node);
        if (f->object && u->disc_obj && f->key == 0) {
            const jc_node *b = node(s, u->disc_obj[idx]);
            f->node = (uint16_t)u->disc_obj[idx];
            for (int i = 0; i < b->n_props; i++)
                if (b->props[i].len == u->props[0].len && !memcmp(b->props[i].name, u->props[0].name, b->props[i].len)) {
                    f->seen = 1ull << i;
                    f->key = (int16_t)i;
                }
        }
    }
    value_end(s);
}

/* complete the enum literal if every candidate still in the race is whole */
static void lit_maybe_end(jc_state *s) {
    const jc_node *n = node(s, s->lit_node);
    for (int i = 0; i < n->n_lit; i++)
        if (s->cand >> i & 1 && n->lit_len[i] != s->off) return;
    lit_end(s, __builtin_ctzll(s->cand));
}

/* the top container's closing bracket: the value it was ends */
static bool close_container(jc_state *s) {
    s->depth--;
    value_end(s);
    return true;
}

/* An integer's or a decimal's (n->scale > 0) range and multipleOf against
 * the number being read (s->num: its digits so far, s->frac_n of them after
 * the point; s->neg), in units of 10^-scale: whether appending digits can
 * still reach a multiple in the range (end: whether the number as it is is
 * one). Digits m become the magnitudes [m 10^e, m 10^e + 10^e - 1] with e
 * = k + scale for k more integer digits (any fraction after them), or e =
 * scale - f after f fraction digits; exactly m 10^e where it ends. A lone
 * 0, or a point, takes no more integer digits; at most JC_MAX_INT_DIGITS -
 * scale integer digits. */
static bool units_fit(const jc_state *s, const jc_node *n, bool end) {
    int sc = n->scale, f = s->frac_n;
    bool frac = s->aux == N_DOT || s->aux == N_FRAC_T, closed = end || frac || s->aux == N_ZERO_T;
    int digits = s->aux == N_ZERO_T ? 1 : (int)s->cand; /* integer digits */
    int64_t q = n->mult_int;
    for (int k = 0;; k++) {
        int64_t u = 1;
        for (int e = frac ? sc - f : k + sc; e > 0; e--) u *= 10;
        int64_t a = s->num * u, b = end ? a : a + u - 1;
        int64_t lo = s->neg ? -b : a, hi = s->neg ? -a : b; /* the values, then those in the range */
        if (lo < n->min_int) lo = n->min_int;
        if (hi > n->max_int) hi = n->max_int;
        int64_t first = lo >= 0 ? (lo + q - 1) / q * q : -(-lo / q * q); /* the least multiple of q >= lo */
        if ((frac || digits + k > 0) && lo <= hi && first <= hi) return true;
        if (closed || digits + k >= JC_MAX_INT_DIGITS - sc) return false;
    }
}

static bool above_min(const jc_node *n, double x) { return n->min_open ? x > n->min_num : x >= n->min_num; }
static bool below_max(const jc_node *n, double x) { return n->max_open ? x < n->max_num : x <= n->max_num; }

/* A bounded non-integer's range against the number being read (s->num: its
 * digits so far, s->frac_n of them after the point): whether some
 * continuation lies in the range (end: whether the number as it is does).
 * A magnitude's integer digits m (d of them) become [m 10^k, (m + 1) 10^k)
 * with k more and any fraction; a fraction's, [m, m + 1) 10^-f; at most
 * JC_MAX_DEC_DIGITS digits in all. An interval [a, b) of magnitudes meets
 * the range where its values' lower end is not above the maximum and the
 * upper end is above the minimum (negated for a minus). */
static bool dec_fits(const jc_state *s, const jc_node *n, bool end) {
    int f = s->frac_n, digits = (s->aux == N_ZERO_T ? 1 : (int)s->cand) + f;
    if (end) {
        double x = jc_dec_value(s->num, -f, s->neg);
        return above_min(n, x) && below_max(n, x);
    }
    bool frac = s->aux == N_DOT || s->aux == N_FRAC_T, closed = frac || s->aux == N_ZERO_T;
    for (int k = 0; digits + k <= JC_MAX_DEC_DIGITS; k++) {
        if (frac || digits + k > 0) { /* (a lone '-' takes a digit first) */
            int e = frac ? -f : k;
            double a = jc_dec_value(s->num, e, s->neg), b = jc_dec_value(s->num + 1, e, s->neg);
            if (s->neg ? above_min(n, a) && b < n->max_num : below_max(n, a) && b > n->min_num) return true;
        }
        if (closed) break;
    }
    return false;
}

/* the number being read against its node's range */
static bool num_fits(const jc_state *s, const jc_node *n, bool end) {
    if (n->integer || n->scale) return units_fit(s, n, end);
    return isinf(n->min_num) && isinf(n->max_num) ? true : dec_fits(s, n, end);
}

static bool value_start(jc_state *s, int nd, uint8_t b) {
    const jc_node *n = node(s, nd);
    int kind = b == '{' ? JC_K_OBJECT : b == '[' ? JC_K_ARRAY : b == '"' ? JC_K_STRING
             : b == '-' || (b >= '0' && b <= '9') ? JC_K_NUMBER : b == 't' || b == 'f' ? JC_K_BOOL
             : b == 'n' ? JC_K_NULL : 0;
    if (kind & n->kinds) {
        switch (kind) {
        case JC_K_OBJECT: return push(s, n->obj, true);
        case JC_K_ARRAY: return push(s, n->arr, false);
        case JC_K_STRING:
            s->lex = LX_STR;
            s->cand = 0;
            s->utf8 = 0;
            s->in_key = false;
            s->off = 0;
            s->fmt_pos = s->fmt_prev = 0;
            s->pat = (int16_t)(n->pattern >= 0 ? jp_start(s->c->patterns[n->pattern]) : -1);
            s->lit_node = (uint16_t)nd;
            return true;
        case JC_K_NUMBER:
            s->lex = LX_NUM;
            s->aux = b == '-' ? N_MINUS : b == '0' ? N_ZERO_T : N_INT_T;
            s->off = 1;
            s->cand = s->aux == N_INT_T;
            s->lit_node = (uint16_t)nd;
            s->neg = b == '-';
            s->num = b == '-' ? 0 : b - '0';
            s->frac_n = 0;
            return num_fits(s, n, false);
        default:
            s->lex = LX_KW;
            s->aux = b == 't' ? 0 : b == 'f' ? 1 : 2;
            s->off = 1;
            return true;
        }
    }
    uint64_t cand = 0;
    for (int i = 0; i < n->n_lit; i++)
        if ((uint8_t)n->lit[i][0] == b) cand |= 1ull << i;
    if (unique_array(s)) cand &= ~top(s)->seen; /* (each value once) */
    if (!cand) return false;
    s->lex = LX_LIT;
    s->lit_node = (uint16_t)nd;
    s->cand = cand;
    s->off = 1;
    lit_maybe_end(s);
    return true;
}

/* the object's next key may be another than a required one still due (not
 * when those fill maxProperties' room) */
static bool others_allowed(const jc_frame *f, const jc_node *n) {
    return f->count + __builtin_popcountll(n->required & ~f->seen) < n->max_props;
}

/* ... and it may be one no property names */
static bool additional_allowed(const jc_frame *f, const jc_node *n) { return n->additional >= 0 && others_allowed(f, n); }

static bool key_start(jc_state *s) {
    jc_frame *f = top(s);
    const jc_node *n = node(s, f->node);
    s->cand = !others_allowed(f, n) ? n->required & ~f->seen : n->additional >= 0 ? all_props(n) : all_props(n) & ~f->seen;
    if (!s->cand && !additional_allowed(f, n)) return false;
    s->lex = LX_STR;
    s->in_key = true;
    s->off = 0;
    s->utf8 = 0;
    return true;
}

static bool key_end(jc_state *s) {
    jc_frame *f = top(s);
    const jc_node *n = node(s, f->node);
    int match = -1;
    for (int i = 0; i < n->n_props && match < 0; i++)
        if (s->cand >> i & 1 && n->props[i].len == s->off) match = i;
    if (match >= 0) {
        if (f->seen >> match & 1) return false; /* a property given twice */
        f->seen |= 1ull << match;
    } else if (!additional_allowed(f, n))
        return false;
    if (f->count < 0xFFFF) f->count++;
    f->key = (int16_t)match;
    f->phase = PH_COLON;
    s->lex = LX_NONE;
    s->in_key = false;
    return true;
}

/* a byte of a key's text: narrow the property names still matching */
static bool key_byte(jc_state *s, uint8_t b) {
    if (!s->in_key) return true;
    const jc_node *n = node(s, top(s)->node);
    uint64_t c = 0;
    for (int i = 0; i < n->n_props; i++)
        if (s->cand >> i & 1 && n->props[i].len > s->off && (uint8_t)n->props[i].name[s->off] == b) c |= 1ull << i;
    s->cand = c;
    if (s->off < 0xFFFF) s->off++;
    return c || additional_allowed(top(s), n);
}

static bool structural(jc_state *s, uint8_t b) {
    if (s->done) return false;
    if (b == ' ' || b == '\n' || b == '\t') {
        if (s->ws >= 1 + JC_INDENT * s->depth || (b == '\n' && s->ws_nl)) return false;
        s->ws++;
        s->ws_nl |= b == '\n';
        return true;
    }
    s->ws = 0;
    s->ws_nl = false;
    if (!s->depth) return value_start(s, s->c->root, b);
    jc_frame *f = top(s);
    const jc_node *n = node(s, f->node);
    switch (f->phase) {
    case PH_VALUE:
        f->phase = PH_AFTER;
        return value_start(s, value_node(s), b);
    case PH_ARR_FIRST:
        if (b == ']') {
            if (n->min_items) return false;
            return close_container(s);
        }
        if (!n->max_items) return false;
        f->phase = PH_AFTER;
        return value_start(s, n->items, b);
    case PH_OBJ_FIRST:
        if (b == '}') {
            if (n->required || n->min_props) return false;
            return close_container(s);
        }
        return b == '"' && key_start(s);
    case PH_OBJ_KEY:
        return b == '"' && key_start(s);
    case PH_COLON:
        if (b != ':') return false;
        f->phase = PH_VALUE;
        return true;
    case PH_AFTER:
        if (b == ',') {
            if (f->object ? (!(all_props(n) & ~f->seen) && n->additional < 0) || f->count >= n->max_props
                          : f->count >= n->max_items)
                return false;
            f->phase = f->object ? PH_OBJ_KEY : PH_VALUE;
            return true;
        }
        if (b != (f->object ? '}' : ']')) return false;
        if (f->object ? (n->required & ~f->seen) != 0 || f->count < n->min_props : f->count < n->min_items) return false;
        return close_container(s);
    }
    return false;
}

/* a byte that starts a character of a string value: refused past maxLength */
static bool string_char(jc_state *s) {
    if (s->in_key) return true;
    if (s->off >= node(s, s->lit_node)->max_len) return false;
    if (s->off < 0xFFFF) s->off++;
    return true;
}

/* email: fmt_pos bit 7: past the '@', bit 6: a dot in the domain, bits
 * 0-5: the current part's length (the local part and each label at most
 * 63 characters); fmt_prev the last character */
static bool email_byte(jc_state *s, uint8_t b) {
    bool domain = s->fmt_pos & 0x80, dot = s->fmt_pos & 0x40;
    bool alnum = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9');
    int len = s->fmt_pos & 0x3F;
    if (b == '"') return domain && dot && len >= 2 && s->fmt_prev != '-';
    if (b == '@') {
        if (domain || !len || s->fmt_prev == '.') return false;
        s->fmt_pos = 0x80;
    } else if (domain && b == '.') {
        if (!len || s->fmt_prev == '-') return false;
        s->fmt_pos = 0x80 | 0x40;
    } else {
        bool ok = domain ? alnum || (b == '-' && len)
                         : alnum || (b && strchr("_%+-", b)) || (b == '.' && len && s->fmt_prev != '.');
        /* (a part's 63rd character must be one it may end with) */
        if (!ok || len == 63 || (len == 62 && (domain ? b == '-' : b == '.'))) return false;
        s->fmt_pos = (uint8_t)((s->fmt_pos & 0xC0) | (len + 1));
    }
    s->fmt_prev = b;
    return true;
}

/* the fewest characters that finish the email address from its state
 * (before the closing quote) */
static int email_rest(const jc_state *s) {
    int p = s->fmt_pos, len = p & 0x3F, fix = s->fmt_prev == '-' || s->fmt_prev == '.';
    if (!(p & 0x80)) return len ? 5 + fix : 6; /* "@b.cd" */
    if (!(p & 0x40)) return len ? 3 + fix : 4; /* ".cd" */
    return len >= 2 ? fix : 2 - len;
}

/* the DFA of the string value being read (NULL: a key, or no pattern) */
static const jp_dfa *pattern_of(const jc_state *s) {
    if (s->in_key) return NULL;
    int p = node(s, s->lit_node)->pattern;
    return p >= 0 ? s->c->patterns[p] : NULL;
}

/* the short escapes' letters and the characters they stand for */
static const char ESC_FROM[] = "\"\\/bfnrt", ESC_TO[] = "\"\\/\b\f\n\r\t";

/* a patterned string's next character cp (its length is checked in the DFA's limits) */
static bool pattern_char(jc_state *s, const jp_dfa *d, uint32_t cp) {
    int t = jp_step(d, s->pat, cp);
    if (!jp_can_finish(d, t, s->off + 1)) return false;
    s->pat = (int16_t)t;
    s->off++;
    return true;
}

/* A byte of a patterned string value: characters as themselves (UTF-8: a
 * lead or continuation byte only where some character it can still become
 * keeps a match reachable) or by a short escape (after '\\': pattern_escape);
 * no \u escapes. s->off counts whole characters. */
static bool pattern_byte(jc_state *s, const jp_dfa *d, uint8_t b) {
    if (s->utf8) {
        if (b < s->utf8_lo || b > s->utf8_hi) return false;
        s->utf8--;
        s->utf8_lo = 0x80;
        s->utf8_hi = 0xBF;
        s->pat_cp = s->pat_cp << 6 | (b & 0x3F);
        if (!s->utf8) return pattern_char(s, d, s->pat_cp);
        uint32_t lo = s->pat_cp << 6 * s->utf8;
        return jp_range_can_finish(d, s->pat, lo, lo | ((1u << 6 * s->utf8) - 1), s->off);
    }
    if (b == '"') {
        if (!jp_can_end(d, s->pat, s->off)) return false;
        value_end(s);
        return true;
    }
    if (b == '\\') {
        for (const char *e = ESC_TO; *e; e++)
            if (jp_can_finish(d, jp_step(d, s->pat, (uint8_t)*e), s->off + 1)) {
                s->lex = LX_ESC;
                return true;
            }
        return false;
    }
    if (b < 0x20) return false;
    if (b < 0x80) return pattern_char(s, d, b);
    int n = jc_utf8_lead(b, &s->utf8_lo, &s->utf8_hi);
    if (!n) return false;
    /* the code points this lead byte starts: a contiguous run (its first continuation's range, then any) */
    uint32_t top = (uint32_t)(b & (0x3F >> n)) << 6 * n, rest = (1u << 6 * (n - 1)) - 1;
    uint32_t lo = top | (uint32_t)(s->utf8_lo & 0x3F) << 6 * (n - 1), hi = (top | (uint32_t)(s->utf8_hi & 0x3F) << 6 * (n - 1)) | rest;
    if (!jp_range_can_finish(d, s->pat, lo, hi, s->off)) return false;
    s->utf8 = (uint8_t)n;
    s->pat_cp = b & (0x3F >> n);
    return true;
}

/* the byte after '\\' in a patterned string */
static bool pattern_escape(jc_state *s, const jp_dfa *d, uint8_t b) {
    const char *at = b ? strchr(ESC_FROM, b) : NULL;
    s->lex = LX_STR;
    return at && pattern_char(s, d, (uint8_t)ESC_TO[at - ESC_FROM]);
}

static bool string_byte(jc_state *s, uint8_t b) {
    const jp_dfa *pd = pattern_of(s);
    if (pd) return pattern_byte(s, pd, b);
    if (!s->in_key && node(s, s->lit_node)->email) { /* (ASCII only, no escapes; a character only where the rest
                                                      * still fits maxLength) */
        if (!email_byte(s, b)) return false;
        if (b != '"') return s->off + 1 + email_rest(s) <= node(s, s->lit_node)->max_len && string_char(s);
        if (s->off < node(s, s->lit_node)->min_len) return false;
        value_end(s);
        return true;
    }
    if (s->utf8) {
        if (b < s->utf8_lo || b > s->utf8_hi) return false;
        s->utf8--;
        s->utf8_lo = 0x80;
        s->utf8_hi = 0xBF;
        return key_byte(s, b);
    }
    if (b == '"') {
        if (s->in_key) return key_end(s);
        if (s->off < node(s, s->lit_node)->min_len) return false;
        value_end(s);
        return true;
    }
    if (b == '\\') {
        s->lex = LX_ESC;
        if (!s->in_key) return string_char(s);
        s->cand = 0; /* an escaped key matches no property name (names needing escapes are refused at compile) */
        return additional_allowed(top(s), node(s, top(s)->node));
    }
    if (b < 0x20) return false;
    if (b >= 0x80 && !(s->utf8 = (uint8_t)jc_utf8_lead(b, &s->utf8_lo, &s->utf8_hi))) return false;
    return string_char(s) && key_byte(s, b);
}

static bool number_byte(jc_state *s, uint8_t b) {
    const jc_node *n = node(s, s->lit_node);
    bool digit = b >= '0' && b <= '9', integer = n->integer;
    bool dec = !integer && (n->scale || !(isinf(n->min_num) && isinf(n->max_num))); /* a decimal or a bounded
                                                                                       * non-integer: no exponent */
    int st = s->aux, next = -1;
    switch (st) {
    case N_MINUS: next = b == '0' ? N_ZERO_T : digit ? N_INT_T : -1; break;
    case N_ZERO_T:
    case N_INT_T:
        if (digit) next = st == N_INT_T ? N_INT_T : -1;
        else if (b == '.' && !integer) next = N_DOT;
        else if ((b == 'e' || b == 'E') && !integer && !dec) next = N_E;
        break;
    case N_DOT: next = digit ? N_FRAC_T : -1; break;
    case N_FRAC_T: next = digit ? N_FRAC_T : (b == 'e' || b == 'E') && !dec ? N_E : -1; break;
    case N_E: next = b == '+' || b == '-' ? N_ESIGN : digit ? N_EXP_T : -1; break;
    case N_ESIGN: next = digit ? N_EXP_T : -1; break;
    case N_EXP_T: next = digit ? N_EXP_T : -1; break;
    }
    if (next >= 0) {
        if (++s->off > JC_MAX_NUMBER) return false;
        /* s->cand counts the digits of the integer part, then of the exponent */
        if (next == N_E) s->cand = 0;
        if ((next == N_INT_T || next == N_EXP_T) && ++s->cand > (next == N_INT_T ? JC_MAX_INT_DIGITS : JC_MAX_EXP_DIGITS))
            return false;
        s->aux = (uint8_t)next;
        if (next == N_FRAC_T && dec) {
            ++s->frac_n;
            if (n->scale ? s->frac_n > n->scale : (int)s->cand + s->frac_n > JC_MAX_DEC_DIGITS) return false;
            s->num = s->num * 10 + (b - '0');
        } else if (next == N_INT_T || next == N_ZERO_T) {
            if (dec && (int)s->cand > (n->scale ? JC_MAX_INT_DIGITS - n->scale : JC_MAX_DEC_DIGITS)) return false;
            s->num = s->num * 10 + (b - '0');
        } else if (next != N_DOT) return true;
        return num_fits(s, n, false);
    }
    if (st == N_ZERO_T && digit) return false; /* a leading zero */
    if (!num_terminal(st) || !num_fits(s, n, true)) return false;
    value_end(s);
    return structural(s, b);
}

static bool lit_byte(jc_state *s, uint8_t b) {
    const jc_node *n = node(s, s->lit_node);
    uint64_t c = 0;
    int whole = -1;
    for (int i = 0; i < n->n_lit; i++)
        if (s->cand >> i & 1) {
            if (n->lit_len[i] > s->off && (uint8_t)n->lit[i][s->off] == b) c |= 1ull << i;
            if (n->lit_len[i] == s->off) whole = i;
        }
    if (c) {
        s->cand = c;
        s->off++;
        lit_maybe_end(s);
        return true;
    }
    if (whole < 0) return false;
    lit_end(s, whole); /* "1" of enum [1, 12] followed by ',' */
    return structural(s, b);
}

/* A byte before the document while a <think> block may come or is open
 * (off: bytes of "<think>" / "</think>" matched). */
static bool think_byte(jc_state *s, uint8_t b) {
    switch (s->think) {
    case TH_MAY:
        s->think = TH_NONE;
        if (b != '<') return structural(s, b);
        s->think = TH_OPEN;
        s->off = 1;
        return true;
    case TH_OPEN:
        if (b != (uint8_t)THINK_OPEN[s->off]) return false;
        if (++s->off == sizeof THINK_OPEN - 1) s->think = TH_IN, s->off = 0;
        return true;
    case TH_IN:
        s->off = b == (uint8_t)THINK_CLOSE[s->off] ? s->off + 1 : b == '<';
        if (s->off == sizeof THINK_CLOSE - 1) s->think = TH_AFTER, s->off = 0, s->ws = 0;
        return true;
    default: /* TH_AFTER */
        if (b == ' ' || b == '\n' || b == '\t') return ++s->ws <= JC_THINK_WS;
        s->think = TH_NONE;
        s->ws = 0;
        return structural(s, b);
    }
}

static bool doc_byte(jc_state *s, uint8_t b);

/* A byte of JC_CALLS's answer: free text (where "<tool_call>" outside a
 * <think> block opens a call), or a call's document and its closing tag.
 * call_off / think_off: bytes of the tag being matched. */
static bool calls_byte(jc_state *s, uint8_t b) {
    bool ws = b == ' ' || b == '\n' || b == '\t';
    switch (s->calls) {
    case CL_TEXT:
        if (s->text_think) {
            s->think_off = b == (uint8_t)THINK_CLOSE[s->think_off] ? s->think_off + 1 : b == '<';
            if (s->think_off == sizeof THINK_CLOSE - 1) s->text_think = false, s->think_off = 0;
            return true;
        }
        s->call_off = b == (uint8_t)CALL_OPEN[s->call_off] ? s->call_off + 1 : b == '<';
        s->think_off = b == (uint8_t)THINK_OPEN[s->think_off] ? s->think_off + 1 : b == '<';
        if (s->think_off == sizeof THINK_OPEN - 1) s->text_think = true, s->think_off = s->call_off = 0;
        if (s->call_off == sizeof CALL_OPEN - 1) { /* a call: a fresh document */
            s->calls = CL_OPEN;
            s->call_off = s->think_off = 0;
            s->depth = s->lex = s->ws = 0;
            s->done = s->ws_nl = s->in_key = false;
        }
        return true;
    case CL_OPEN:
        if (ws) return ++s->ws <= CALL_WS;
        s->ws = 0;
        s->calls = CL_DOC;
        /* fall through */
    case CL_DOC:
        if (!doc_byte(s, b)) return false;
        if (s->done) s->calls = CL_CLOSE_WS, s->ws = 0;
        return true;
    case CL_CLOSE_WS:
        if (ws) return ++s->ws <= CALL_WS;
        s->calls = CL_CLOSE;
        /* fall through */
    default: /* CL_CLOSE */
        if (b != (uint8_t)CALL_CLOSE[s->call_off]) return false;
        if (++s->call_off == sizeof CALL_CLOSE - 1) s->calls = CL_TEXT, s->call_off = 0;
        return true;
    }
}

static bool feed_byte(jc_state *s, uint8_t b) {
    if (s->calls) return calls_byte(s, b);
    if (s->think) return think_byte(s, b);
    return doc_byte(s, b);
}

static bool doc_byte(jc_state *s, uint8_t b) {
    switch (s->lex) {
    case LX_NONE: return structural(s, b);
    case LX_STR: return string_byte(s, b);
    case LX_ESC:
        if (pattern_of(s)) return pattern_escape(s, pattern_of(s), b);
        if (b == 'u') {
            s->lex = LX_HEX;
            s->aux = 4;
            return true;
        }
        s->lex = LX_STR;
        return b && strchr("\"\\/bfnrt", b) != NULL;
    case LX_HEX:
        if (!((b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'))) return false;
        if (--s->aux == 0) s->lex = LX_STR;
        return true;
    case LX_NUM: return number_byte(s, b);
    case LX_KW:
        if (b != (uint8_t)KW[s->aux][s->off]) return false;
        if (++s->off == KW_LEN[s->aux]) value_end(s);
        return true;
    case LX_LIT: return lit_byte(s, b);
    }
    return false;
}

bool jc_feed(jc_state *s, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed_byte(s, p[i])) return false;
    return true;
}

bool jc_can_end(const jc_state *s) {
    if (s->calls) return s->calls == CL_TEXT;
    if (s->done) return true;
    if (s->think) return false;
    if (s->depth) return false;
    if (s->lex == LX_NUM) return num_terminal(s->aux) && num_fits(s, node(s, s->lit_node), true);
    if (s->lex == LX_LIT) {
        const jc_node *n = node(s, s->lit_node);
        for (int i = 0; i < n->n_lit; i++)
            if (s->cand >> i & 1 && n->lit_len[i] == s->off) return true;
    }
    return false;
}

bool jc_finished(const jc_state *s) { return !s->calls && s->done; }

bool jc_in_free_text(const jc_state *s) {
    return (s->think == TH_IN && !s->off) || (s->calls == CL_TEXT && !s->call_off && !s->think_off);
}

bool jc_in_free_string(const jc_state *s) {
    return (!s->calls || s->calls == CL_DOC) && !s->think && s->lex == LX_STR && !s->utf8 &&
           (s->in_key ? !s->cand && additional_allowed(&s->f[s->depth - 1], node(s, s->f[s->depth - 1].node))
                       : !node(s, s->lit_node)->email && node(s, s->lit_node)->pattern < 0);
}

int jc_string_room(const jc_state *s) {
    return s->in_key ? INT_MAX : node(s, s->lit_node)->max_len - s->off;
}
