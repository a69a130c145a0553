/* json_constraint.h — output constrained to JSON: a JSON Schema (a subset)
 * compiled to a table of nodes (json_schema.c), and a byte-at-a-time
 * recognizer over it (json_match.c) that says whether a prefix can still
 * become a matching document. The engine masks the tokens whose bytes the
 * recognizer refuses (sample/token_mask.h), so structured output is exact
 * at any temperature: the choice is the model's distribution restricted to
 * the tokens that keep the text valid.
 *
 * Enforced: type (one or a list), properties / required /
 * additionalProperties (absent means none beyond `properties`, as strict
 * structured-output servers do; true or a schema allows others), items,
 * minItems / maxItems, uniqueItems over enum items (each value once),
 * minProperties / maxProperties (the required ones always with room), a string's minLength / maxLength (at most 65535;
 * an escape counts as one character, so a surrogate pair's two count two),
 * a string's format date, time, date-time (RFC 3339: months 01-12, days
 * 01-31, hours 00-23, minutes and seconds 00-59, an optional fraction of
 * 1-9 digits, Z or a +hh:mm offset; 'T' and 'Z' upper case), uuid, ipv4
 * (dotted quad, 0-255, no leading zeros) or email (a local part of up to
 * 63 letters, digits and ._%+- with no '.' first, last or twice in a row,
 * '@', dot-separated labels of up to 63 letters, digits and '-' neither
 * first nor last, two labels or more, the last of 2 or more), hostname
 * (such labels, one or more, at most 253 characters), ipv6 (RFC 4291's
 * text without an embedded ipv4), uri (a scheme, ':', then RFC 3986's
 * characters or %XX), uri-reference (those characters), duration (RFC
 * 3339 appendix A, numbers of up to 9 digits) or json-pointer (RFC 6901);
 * all but email as built-in patterns (json_schema.c), email by its own
 * automaton (json_match.c: a part's 63-character limit beside its dot
 * rules has no compact regular expression) — with
 * maxLength, a character only where the shortest finish still fits; a
 * length limit no text of the format meets is refused,
 * a string's pattern (json_pattern.h: an ECMA-262 subset, search semantics,
 * with minLength / maxLength; its text's characters as themselves or by the
 * short escapes, no \u escapes; a pattern beside a format: both, but for
 * email, alone; two string branches of an anyOf with different patterns: neither),
 * a number's minimum / maximum / exclusiveMinimum / exclusiveMaximum
 * (every prefix can still reach the range; the value — as a JSON parser
 * reads it into a double — is in it where it ends; a bounded non-integer
 * is written without an exponent, in at most JC_MAX_DEC_DIGITS digits), a
 * multipleOf of at most JC_MAX_SCALE decimal places (m x 10^-k: a number's
 * value a multiple of it, written with at most k fraction digits and no
 * exponent, its range and multiple exact in units of 10^-k; an integer's:
 * a multiple of m / gcd(m, 10^k)), enum / const, anyOf / oneOf whose branches start
 * with different characters (an object and null, a string and a number;
 * all-enum branches merge) or are objects told apart by one required
 * constant property (a discriminated union: that property is written
 * first), allOf of one schema, $ref to #/$defs/NAME or
 * #/definitions/NAME (recursion allowed), true / {} (any value). Accepted but
 * not enforced: other value refinements (other formats, a multipleOf of
 * more decimal places, ...) and annotations. Refused at compile with a message: anything else that
 * changes the structure (prefixItems, not, if/then, allOf of several,
 * branches both starting with '{' ...).
 *
 * The document is one value of the root schema without surrounding text —
 * but for a reasoning model's "<think>...</think>" block, which may come
 * first when jc_start is told so (its text unconstrained, then at most
 * JC_THINK_WS whitespace bytes before the document) — or, with JC_CALLS,
 * any number of documents inside <tool_call> tags in free text.
 * Whitespace between tokens is what compact or indented JSON needs and no
 * more: a run holds at most one newline and 1 + JC_INDENT x (the nesting
 * depth) bytes, so a model cannot run on in blank space (small code models
 * will, given the chance: tinycoder wrote tabs until max_tokens). Nesting
 * at most JC_MAX_DEPTH.
 *
 * Ownership: a json_constraint is immutable after jc_compile and may be
 * shared by any number of states (reference counted: jc_ref / jc_free). A
 * jc_state holds no pointers into anything but its constraint; copy it with
 * jc_copy (which copies the used part only). */
#ifndef KS_JSON_CONSTRAINT_H
#define KS_JSON_CONSTRAINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define JC_MAX_DEPTH 32
#define JC_INDENT 4
#define JC_THINK_WS 4
#define JC_MAX_PROPS 64   /* properties of one object schema */
#define JC_MAX_LITERALS 64 /* values of one enum */
#define JC_MAX_NODES 4096
#define JC_MAX_NUMBER 24  /* characters of one number */
#define JC_MAX_INT_DIGITS 18 /* digits before any '.': every such integer fits int64 */
#define JC_INT_LIMIT 999999999999999999LL /* the largest such integer */
#define JC_MAX_DEC_DIGITS 17 /* digits of a bounded non-integer number (a double's precision) */
#define JC_MAX_SCALE 6       /* decimal places of a multipleOf enforced on numbers (0.000001) */
#define JC_MAX_EXP_DIGITS 2  /* exponent digits: no double overflows (jansson, the tool-call
                              * parser, refuses integers past int64 and reals past DBL_MAX) */


/* first characters a value may start with */
enum {
    JC_K_OBJECT = 1, JC_K_ARRAY = 2, JC_K_STRING = 4, JC_K_NUMBER = 8, JC_K_BOOL = 16, JC_K_NULL = 32,
    JC_K_ALL = 63,
};

typedef struct {
    char *name;
    size_t len;
    int node;
} jc_prop;

typedef struct {
    uint8_t kinds;       /* JC_K_* a value may be (0 with literals: only those) */
    bool integer;        /* a number must be an integer */
    uint8_t scale;       /* a decimal number (scale > 0: a multipleOf of scale decimal places):
                          * at most scale fraction digits, no exponent; the next two in units of
                          * 10^-scale */
    int64_t min_int, max_int; /* integers and decimals: the range (+-JC_INT_LIMIT: unbounded) */
    int64_t mult_int;    /* integers and decimals: multipleOf (1: any) */
    double min_num, max_num;  /* other numbers: the range (+-inf: unbounded), */
    bool min_open, max_open;  /* its ends excluded or not */
    int obj, arr;        /* the nodes whose object / array fields an object / array value
                          * follows: this node's own, or an anyOf branch's (by index, so a
                          * branch still being compiled — a recursive $ref — is followed) */
    /* objects */
    jc_prop *props;
    int n_props;
    uint64_t required;   /* bit i: props[i] required */
    int additional;      /* node of other properties' values, -1: none allowed */
    int min_props, max_props; /* minProperties / maxProperties (65535: unbounded) */
    int *disc_obj;       /* a discriminated union (anyOf of objects told apart by one constant
                          * property, props[0], written first): the object node each literal of
                          * props[0]'s value node leads to */
    /* arrays */
    int items;           /* node of the items */
    int min_items, max_items;
    bool unique;         /* uniqueItems over enum items: each literal once (the frame's seen bits) */
    /* strings (values, not keys): characters (code points; an escape counts one) */
    int min_len, max_len;
    bool email;          /* format email (json_match.c's automaton; the other formats are patterns) */
    int16_t pattern;     /* the constraint's patterns[] entry the text matches (-1: none) */
    /* enum / const: the values' compact JSON texts, matched byte for byte */
    char **lit;
    size_t *lit_len;
    int n_lit;
} jc_node;

typedef struct json_constraint {
    jc_node *nodes;
    struct jp_dfa **patterns; /* (n_patterns) owned: string patterns (json_pattern.h) */
    int n_patterns;
    int root;            /* the document's node */
    int n_nodes, cap_nodes;
    int refs;
} json_constraint;

/* Compiles a schema (NULL: any JSON object — OpenAI's json_object and
 * Ollama's "json"). On failure returns NULL with the reason in err. */
json_constraint *jc_compile(const json_t *schema, char *err, size_t errlen);
json_constraint *jc_ref(json_constraint *c);
void jc_free(json_constraint *c);
/* The bytes a compiled constraint holds (about: its nodes, names, literals
 * and pattern tables). */
size_t jc_bytes(const json_constraint *c);

typedef struct {
    uint16_t node;       /* the container's schema node */
    uint8_t phase;       /* where in the container (json_match.c) */
    bool object;
    int16_t key;         /* object: the property whose value comes next (-1: an additional one) */
    uint16_t count;      /* array: items so far; object: properties so far */
    uint64_t seen;       /* object: properties given; a unique array: its enum's literals used */
} jc_frame;

typedef struct {
    const json_constraint *c;
    uint8_t depth;       /* open containers */
    uint8_t lex;         /* the token being read (json_match.c) */
    uint8_t aux;         /* its sub-state */
    uint8_t utf8;        /* continuation bytes still due in a string */
    uint8_t utf8_lo, utf8_hi; /* the range of the next one */
    uint8_t ws;          /* whitespace bytes in a row */
    bool ws_nl;          /* a newline among them */
    bool done;           /* the root value is complete: nothing may follow */
    bool in_key;         /* the string being read is an object's key */
    uint8_t think;       /* before the document: a <think> block may open / is open / closed */
    uint8_t calls;       /* JC_CALLS: in the text, a call's document, or its closing tag */
    uint8_t call_off, think_off; /* JC_CALLS text: bytes of "<tool_call>" / "<think>" or "</think>" matched */
    bool text_think;     /* JC_CALLS text: inside a <think> block (no call opens there) */
    uint16_t off;        /* bytes of the literal / key / number read; a string value's characters */
    uint16_t lit_node;   /* the enum (number, string value) node being read */
    uint64_t cand;       /* literals / property names still matching */
    uint8_t fmt_pos, fmt_prev; /* an email address: where in it, the last character (json_match.c) */
    int16_t pat;         /* a patterned string: its DFA state (json_pattern.h), */
    uint32_t pat_cp;     /* and the bits of a UTF-8 character half read */
    int64_t num;         /* a number being read: its integer part's magnitude so far */
    bool neg;            /* ... and whether it has a minus (a bounded non-integer: num holds */
    uint8_t frac_n;      /* its fraction's digits too, frac_n of them) */
    jc_frame f[JC_MAX_DEPTH];
} jc_state;

/* flags: JC_THINK: the answer may open with a <think>...</think> block.
 * JC_CALLS: the answer is free text in which each "<tool_call>" outside a
 * <think> block opens a document (the constraint's: a tool call), closed by
 * "</tool_call>" (a little whitespace allowed around it) — the Hermes /
 * Qwen tool-call syntax; the text may end wherever no call is open. */
enum { JC_THINK = 1, JC_CALLS = 2 };
void jc_start(jc_state *s, const json_constraint *c, int flags);
/* A byte c >= 0x80 as a UTF-8 lead byte: how many continuation bytes follow
 * (0: not a lead byte) and the range of the first (the others 0x80..0xBF) —
 * strict UTF-8, no overlongs or surrogates. The recognizer's strings and the
 * token mask's plain-text table share it. */
static inline int jc_utf8_lead(uint8_t c, uint8_t *lo, uint8_t *hi) {
    *lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    *hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    return c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
}
/* The double nearest m x 10^e, negated when neg — as a JSON parser reads
 * that text (json_match.c's number ranges, json_schema.c's bounds in
 * units). */
static inline double jc_dec_value(int64_t m, int e, bool neg) {
    char t[48];
    snprintf(t, sizeof t, "%s%llde%d", neg ? "-" : "", (long long)m, e);
    return strtod(t, NULL);
}
void jc_copy(jc_state *dst, const jc_state *src);
/* Feeds bytes; false when the text can no longer match (s is then
 * undefined: feed a copy when probing). */
bool jc_feed(jc_state *s, const uint8_t *p, size_t n);
/* The text so far is a whole document (it may still go on: a number). */
bool jc_can_end(const jc_state *s);
/* The document is complete and nothing more may follow. */
bool jc_finished(const jc_state *s);
/* Inside a string that takes any text (a value, or a key no property name
 * matches where others are allowed), with no UTF-8 character half read:
 * every byte run without '"', '\\' or control characters that is valid
 * UTF-8 (a character may be cut at its end) and starts at most
 * jc_string_room characters is accepted, and keeps it so. */
bool jc_in_free_string(const jc_state *s);
/* Characters the string being read may still take (its maxLength less those
 * read; INT_MAX-sized when unbounded). */
int jc_string_room(const jc_state *s);
/* In free text (the JC_THINK block, JC_CALLS's text) with no tag partly
 * matched: any bytes without '<' are accepted, and keep it so. */
bool jc_in_free_text(const jc_state *s);

#endif
