/* json_schema.c — a JSON Schema (the subset json_constraint.h states)
 * compiled to json_constraint's node table. $ref targets are compiled once
 * and shared (a recursive schema is a cycle of node indices); a schema
 * wrapping one other ($ref, allOf of one) is that other node; an anyOf node
 * refers to its branches' object / array nodes rather than copying them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_constraint.h"
#include "sample/json_pattern.h"

#define MAX_REFS 256
#define MAX_NEST 64

typedef struct {
    const json_t *root;
    json_constraint *c;
    char *err;
    size_t errlen;
    struct { const char *ref; int node; } refs[MAX_REFS];
    int n_refs;
    int any;     /* the any-value node, -1 until needed */
    int nest;
} compiler;

static int fail(compiler *k, const char *fmt, ...) {
    if (k->err && k->errlen && !k->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k->err, k->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int new_node(compiler *k) {
    json_constraint *c = k->c;
    if (c->n_nodes >= JC_MAX_NODES) return fail(k, "schema too large (more than %d nodes)", JC_MAX_NODES);
    if (c->n_nodes == c->cap_nodes) {
        int cap = c->cap_nodes ? 2 * c->cap_nodes : 16;
        jc_node *n = realloc(c->nodes, (size_t)cap * sizeof *n);
        if (!n) return fail(k, "out of memory");
        c->nodes = n;
        c->cap_nodes = cap;
    }
    jc_node *n = &c->nodes[c->n_nodes];
    memset(n, 0, sizeof *n);
    n->additional = -1;
    n->items = -1;
    n->max_items = n->max_len = 1 << 30;
    n->max_props = 65535;
    n->min_int = -JC_INT_LIMIT;
    n->max_int = JC_INT_LIMIT;
    n->mult_int = 1;
    n->min_num = -INFINITY;
    n->max_num = INFINITY;
    n->obj = n->arr = c->n_nodes;
    n->pattern = -1;
    return c->n_nodes++;
}

/* any value: any object (any properties), any array */
static int any_node(compiler *k) {
    if (k->any >= 0) return k->any;
    int id = new_node(k);
    if (id < 0) return -1;
    jc_node *n = &k->c->nodes[id];
    n->kinds = JC_K_ALL;
    n->additional = n->items = id;
    return k->any = id;
}

static int compile(compiler *k, const json_t *s);

static const char *const UNSUPPORTED[] = {
    "not", "if", "then", "else", "prefixItems", "patternProperties", "contains", "dependentSchemas",
    "dependentRequired", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems",
};

/* Adds a literal's compact JSON text t (taken: freed on failure). */
static int add_literal_text(compiler *k, jc_node *n, char *t) {
    if (!t) return fail(k, "out of memory");
    if (n->n_lit >= JC_MAX_LITERALS) {
        free(t);
        return fail(k, "enum with more than %d values", JC_MAX_LITERALS);
    }
    if (strlen(t) > 4096) {
        free(t);
        return fail(k, "an enum value longer than 4096 characters");
    }
    char **l = realloc(n->lit, (size_t)(n->n_lit + 1) * sizeof *l);
    size_t *ll = l ? realloc(n->lit_len, (size_t)(n->n_lit + 1) * sizeof *ll) : NULL;
    if (l) n->lit = l;
    if (!l || !ll) {
        free(t);
        return fail(k, "out of memory");
    }
    n->lit_len = ll;
    n->lit[n->n_lit] = t;
    n->lit_len[n->n_lit++] = strlen(t);
    return 0;
}

static int add_literal(compiler *k, jc_node *n, const json_t *v) {
    return add_literal_text(k, n, json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY));
}

static int kind_of_byte(unsigned char b) {
    if (b == '{') return JC_K_OBJECT;
    if (b == '[') return JC_K_ARRAY;
    if (b == '"') return JC_K_STRING;
    if (b == '-' || (b >= '0' && b <= '9')) return JC_K_NUMBER;
    if (b == 't' || b == 'f') return JC_K_BOOL;
    if (b == 'n') return JC_K_NULL;
    return 0;
}

static int kinds_of_type(compiler *k, const char *t, bool *integer) {
    static const struct { const char *name; int kind; } T[] = {
        { "object", JC_K_OBJECT }, { "array", JC_K_ARRAY }, { "string", JC_K_STRING }, { "number", JC_K_NUMBER },
        { "integer", JC_K_NUMBER }, { "boolean", JC_K_BOOL }, { "null", JC_K_NULL },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(t, T[i].name)) {
            if (!strcmp(t, "integer")) *integer = true;
            return T[i].kind;
        }
    return fail(k, "unknown type '%s'", t);
}

static int fill_object(compiler *k, int id, const json_t *s) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(k, "'properties' must be an object");
    if (json_object_size(props) > JC_MAX_PROPS) return fail(k, "more than %d properties in one object", JC_MAX_PROPS);
    if (props && json_object_size(props)) {
        jc_prop *p = calloc(json_object_size(props), sizeof *p);
        if (!p) return fail(k, "out of memory");
        k->c->nodes[id].props = p;
        const char *name;
        const json_t *sub;
        int i = 0;
        json_object_foreach((json_t *)props, name, sub) {
            for (const char *q = name; *q; q++)
                if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
                    return fail(k, "property name '%s' needs escaping (not supported)", name);
            int child = compile(k, sub);
            if (child < 0) return -1;
            jc_node *n = &k->c->nodes[id]; /* compile may move the table */
            n->props[i].name = strdup(name);
            if (!n->props[i].name) return fail(k, "out of memory");
            n->props[i].len = strlen(name);
            n->props[i].node = child;
            n->n_props = ++i;
        }
    }
    if (req) {
        if (!json_is_array(req)) return fail(k, "'required' must be an array of property names");
        size_t i;
        const json_t *r;
        json_array_foreach(req, i, r) {
            jc_node *n = &k->c->nodes[id];
            int j = 0;
            while (json_is_string(r) && j < n->n_props && strcmp(n->props[j].name, json_string_value(r))) j++;
            if (!json_is_string(r) || j == n->n_props)
                return fail(k, "'required' names '%s', which is not in 'properties'",
                            json_is_string(r) ? json_string_value(r) : "(not a string)");
            n->required |= 1ull << j;
        }
    }
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail(k, "'additionalProperties' must be a boolean or a schema");
    /* absent: the listed properties only (none listed: any) */
    bool none = add ? json_is_false(add) : props != NULL;
    int a = none ? -1 : json_is_object(add) ? compile(k, add) : any_node(k);
    if (!none && a < 0) return -1;
    jc_node *n = &k->c->nodes[id];
    n->additional = a;
    /* minProperties / maxProperties: room for the required ones, and enough properties to name */
    const char *name[2] = { "minProperties", "maxProperties" };
    int *v[2] = { &n->min_props, &n->max_props };
    for (int i = 0; i < 2; i++) {
        const json_t *x = json_object_get(s, name[i]);
        if (!x) continue;
        if (!json_is_integer(x) || json_integer_value(x) < 0) return fail(k, "'%s' must be a non-negative integer", name[i]);
        *v[i] = json_integer_value(x) > 65535 ? 65535 : (int)json_integer_value(x);
    }
    if (n->min_props > n->max_props) return fail(k, "'minProperties' is above 'maxProperties'");
    if (__builtin_popcountll(n->required) > n->max_props) return fail(k, "more required properties than 'maxProperties'");
    if (a < 0 && n->n_props < n->min_props) return fail(k, "'minProperties' above the properties the object may have");
    return 0;
}

static int fill_array(compiler *k, int id, const json_t *s) {
    const json_t *items = json_object_get(s, "items"), *mn = json_object_get(s, "minItems"),
                 *mx = json_object_get(s, "maxItems");
    int it = !items || json_is_true(items) ? any_node(k) : json_is_object(items) ? compile(k, items) : -1;
    if (it < 0) return items && !json_is_object(items) && !json_is_true(items) ? fail(k, "'items' must be a schema") : -1;
    jc_node *n = &k->c->nodes[id];
    n->items = it;
    if (mn) {
        if (!json_is_integer(mn) || json_integer_value(mn) < 0 || json_integer_value(mn) > 1 << 20)
            return fail(k, "'minItems' must be a non-negative integer");
        n->min_items = (int)json_integer_value(mn);
    }
    if (mx) {
        if (!json_is_integer(mx) || json_integer_value(mx) < 0) return fail(k, "'maxItems' must be a non-negative integer");
        if (json_integer_value(mx) < n->max_items) n->max_items = (int)json_integer_value(mx);
    }
    /* uniqueItems over enum items (only those values): each value once, so at most that many */
    const json_t *un = json_object_get(s, "uniqueItems");
    if (un && !json_is_boolean(un)) return fail(k, "'uniqueItems' must be a boolean");
    const jc_node *itn = &k->c->nodes[it];
    if (json_is_true(un) && !itn->kinds && itn->n_lit > 0) {
        n->unique = true;
        if (itn->n_lit < n->max_items) n->max_items = itn->n_lit;
    }
    if (n->min_items > n->max_items)
        return fail(k, n->unique ? "'minItems' is above the enum's values with 'uniqueItems'" : "'minItems' is above 'maxItems'");
    if (n->min_items > 65535) return fail(k, "'minItems' above 65535");
    return 0;
}

/* pieces of the built-in format patterns */
#define DATE_MD "(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
#define HOUR_MIN "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
#define TIME_RE HOUR_MIN ":[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-]" HOUR_MIN ")"
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define URI_CHAR "(?:[A-Za-z0-9\\-._~:/?#\\[\\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})" /* RFC 3986: unreserved, reserved, %XX */
#define H16 "[0-9A-Fa-f]{1,4}" /* an ipv6 group */
#define DUR_N "\\d{1,9}"
#define DUR_DATE "(?:" DUR_N "D|" DUR_N "M(?:" DUR_N "D)?|" DUR_N "Y(?:" DUR_N "M(?:" DUR_N "D)?)?)"
#define DUR_TIME "T(?:" DUR_N "H(?:" DUR_N "M(?:" DUR_N "S)?)?|" DUR_N "M(?:" DUR_N "S)?|" DUR_N "S)"

/* the formats without an automaton of their own (all but email): patterns, and their longest texts */
static const struct { const char *name, *pattern; int max_len; } FMT_PATTERNS[] = {
    {"date", /* RFC 3339 full-date: months 01-12, days 01-31 */
     "^[0-9]{4}-" DATE_MD "$", 10},
    {"time", /* RFC 3339 full-time: 00-23 hours, 00-59 minutes and seconds, a fraction of 1-9 digits, Z or +hh:mm */
     "^" TIME_RE "$", 24},
    {"date-time", "^[0-9]{4}-" DATE_MD "T" TIME_RE "$", 35},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", 36},
    {"ipv4", /* a dotted quad, 0-255, no leading zeros */
     "^(?:" OCTET "\\.){3}" OCTET "$", 15},
    {"hostname", /* RFC 1123 labels of up to 63 letters, digits and '-' (not first or last) */
     "^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$", 253},
    {"ipv6", /* RFC 4291 text: eight groups, or fewer around one "::" (no embedded ipv4) */
     "^(?:(?:" H16 ":){7}" H16 "|"
     "(?:" H16 ":){1,7}:|"
     "(?:" H16 ":){1,6}:" H16 "|"
     "(?:" H16 ":){1,5}(?::" H16 "){1,2}|"
     "(?:" H16 ":){1,4}(?::" H16 "){1,3}|"
     "(?:" H16 ":){1,3}(?::" H16 "){1,4}|"
     "(?:" H16 ":){1,2}(?::" H16 "){1,5}|"
     H16 ":(?::" H16 "){1,6}|"
     ":(?:(?::" H16 "){1,7}|"
     ":))$", 39},
    {"uri", /* RFC 3986: a scheme, ':', then its characters (unreserved, reserved, %XX) */
     "^[A-Za-z][A-Za-z0-9+.\\-]*:" URI_CHAR "*$", 1 << 30},
    {"uri-reference", /* the same characters, no scheme required */
     "^" URI_CHAR "*$", 1 << 30},
    {"duration", /* RFC 3339 appendix A (ISO 8601), each number of up to 9 digits */
     "^P(?:" DUR_DATE "(?:" DUR_TIME ")?|" DUR_TIME "|" DUR_N "W)$", 1 << 30},
    {"json-pointer", /* RFC 6901 */
     "^(?:/(?:[^~/]|~[01])*)*$", 1 << 30},
};

static int string_pattern(compiler *k, int id, const char *fmt, const char *user);

static int fill_string(compiler *k, int id, const json_t *s) {
    jc_node *n = &k->c->nodes[id];
    const char *name[2] = { "minLength", "maxLength" };
    int *v[2] = { &n->min_len, &n->max_len };
    for (int i = 0; i < 2; i++) {
        const json_t *x = json_object_get(s, name[i]);
        if (!x) continue;
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 65535)
            return fail(k, "'%s' must be an integer from 0 to 65535", name[i]);
        *v[i] = (int)json_integer_value(x);
    }
    const char *fmt = json_string_value(json_object_get(s, "format")); /* (others: not enforced) */
    if (fmt && !strcmp(fmt, "email")) { /* the shortest, "a@b.cd": 6 characters */
        if (n->max_len < 6) return fail(k, "a maxLength below 6 with format 'email' is not supported");
        n->email = true;
    }
    if (n->min_len > n->max_len) return fail(k, "'minLength' is above 'maxLength'");
    const json_t *pt = json_object_get(s, "pattern");
    if (pt && !json_is_string(pt)) return fail(k, "'pattern' must be a string");
    if (pt && strlen(json_string_value(pt)) != json_string_length(pt))
        return fail(k, "'pattern' with a NUL character (\\u0000) is not supported");
    if (n->email) return 0; /* (beside email: the format alone, see json_constraint.h) */
    return string_pattern(k, id, fmt, pt ? json_string_value(pt) : NULL);
}

/* node id's DFA: its format's pattern (fmt: FMT_PATTERNS' name, or
 * another), its own pattern (user), or both together; its lengths folded
 * in (the format's longest text caps maxLength) */
static int string_pattern(compiler *k, int id, const char *fmt, const char *user) {
    jc_node *n = &k->c->nodes[id];
    const char *pats[2];
    int n_pats = 0;
    for (size_t f = 0; fmt && f < sizeof FMT_PATTERNS / sizeof FMT_PATTERNS[0]; f++)
        if (!strcmp(fmt, FMT_PATTERNS[f].name)) {
            pats[n_pats++] = FMT_PATTERNS[f].pattern;
            if (n->max_len > FMT_PATTERNS[f].max_len) n->max_len = FMT_PATTERNS[f].max_len;
        }
    if (user) pats[n_pats++] = user; /* (beside a format: both) */
    if (!n_pats) return 0;
    char e[200];
    jp_dfa *d = jp_compile_all(pats, n_pats, n->min_len, n->max_len, e, sizeof e);
    if (!d && !user) return fail(k, "minLength / maxLength that no '%s' text meets are not supported", fmt);
    if (!d && n_pats == 2) return fail(k, "%s (in \"%.80s\" with format '%s')", e, user, fmt);
    if (!d) return fail(k, "%s (in \"%.80s\")", e, user);
    json_constraint *c = k->c;
    jp_dfa **ps = realloc(c->patterns, (size_t)(c->n_patterns + 1) * sizeof *ps);
    if (!ps || c->n_patterns >= INT16_MAX) {
        jp_free(d);
        return fail(k, "out of memory");
    }
    c->patterns = ps;
    c->patterns[c->n_patterns] = d;
    n->pattern = (int16_t)c->n_patterns++;
    return 0;
}

/* a number's bounds: minimum / maximum, or the exclusive ones (numbers,
 * or draft 4's booleans beside minimum / maximum), the tighter where both
 * are given; an integer's as the nearest integers inside (within
 * +-JC_INT_LIMIT) */
static int fill_bounds(compiler *k, int id, const json_t *s) {
    jc_node *n = &k->c->nodes[id];
    const char *name[2] = { "minimum", "maximum" }, *excl[2] = { "exclusiveMinimum", "exclusiveMaximum" };
    double *v[2] = { &n->min_num, &n->max_num };
    bool *open[2] = { &n->min_open, &n->max_open };
    for (int i = 0; i < 2; i++) {
        const json_t *x = json_object_get(s, name[i]), *e = json_object_get(s, excl[i]);
        if (x && !json_is_number(x)) return fail(k, "'%s' must be a number", name[i]);
        if (e && !json_is_number(e) && !json_is_boolean(e)) return fail(k, "'%s' must be a number", excl[i]);
        bool draft4 = e && json_is_boolean(e);
        for (int j = 0; j < 2; j++) {
            const json_t *b = j ? (draft4 ? NULL : e) : x;
            if (!b) continue;
            double d = json_number_value(b);
            bool strict = j || (draft4 && json_is_true(e));
            bool tighter = i == 0 ? d > *v[i] || (d == *v[i] && strict) : d < *v[i] || (d == *v[i] && strict);
            if (tighter) *v[i] = d, *open[i] = strict;
        }
    }
    if (n->min_num > n->max_num || (n->min_num == n->max_num && (n->min_open || n->max_open)))
        return fail(k, "no number lies between the schema's minimum and maximum");
    const json_t *mo = json_object_get(s, "multipleOf");
    if (mo && (!json_is_number(mo) || !(json_number_value(mo) > 0))) return fail(k, "'multipleOf' must be a number above 0");
    /* multipleOf as m x 10^-places, places <= JC_MAX_SCALE (-1: none, or not such a decimal) */
    int64_t m = 1, p10 = 1;
    int places = -1;
    for (int e = 0; mo && e <= JC_MAX_SCALE; e++) {
        double x = json_number_value(mo) * (double)p10, r = nearbyint(x);
        if (r >= 1 && r <= (double)JC_INT_LIMIT && fabs(x - r) <= 1e-9 * r) {
            m = (int64_t)r, places = e;
            break;
        }
        p10 *= 10;
    }
    if (places == 0) n->integer = true; /* a whole multipleOf: its multiples are integers */
    if (!n->integer && places < 0) return 0; /* (a bounded number: in doubles, json_match.c's dec_fits) */
    if (n->integer) { /* an integer i is a multiple of m 10^-k where i 10^k is one of m: of m / gcd(m, 10^k) */
        int64_t a = m, b = p10;
        while (b) {
            int64_t t = a % b;
            a = b, b = t;
        }
        n->mult_int = m / a;
    } else
        n->scale = (uint8_t)places, n->mult_int = m;
    /* the range in units of 10^-scale: the least / greatest unit whose value (the double a
     * parser reads from its text) is inside, searched from just outside inwards */
    double unit = pow(10, n->scale);
    for (int i = 0; i < 2; i++) {
        double want = *v[i];
        int64_t *u = i ? &n->max_int : &n->min_int;
        if (isinf(want) || fabs(want) * unit >= (double)JC_INT_LIMIT) {
            *u = want < 0 ? -JC_INT_LIMIT : JC_INT_LIMIT;
            continue;
        }
        int64_t c = (int64_t)nearbyint(want * unit) + (i ? 2 : -2);
        for (int step = 0; step < 5; step++, c += i ? -1 : 1) {
            double val = jc_dec_value(c, -n->scale, false);
            if (i ? (*open[i] ? val < want : val <= want) : (*open[i] ? val > want : val >= want)) break;
        }
        *u = c;
    }
    if (n->min_int > n->max_int)
        return fail(k, "no %s lies between the schema's minimum and maximum", n->integer ? "integer" : "such decimal");
    int64_t q = n->mult_int, lo = n->min_int, first = lo >= 0 ? (lo + q - 1) / q * q : -(-lo / q * q);
    return first > n->max_int ? fail(k, "no multiple of 'multipleOf' lies between the schema's minimum and maximum") : 0;
}

/* anyOf: node src's kinds joined to dst's; an object or array value of dst
 * follows src's object / array node. */
static int merge_kinds(compiler *k, int dst, int src) {
    jc_node *d = &k->c->nodes[dst], *s = &k->c->nodes[src];
    int clash = d->kinds & s->kinds & (JC_K_OBJECT | JC_K_ARRAY);
    if (clash) return fail(k, "anyOf/oneOf branches that are both %s are not supported",
                           clash & JC_K_OBJECT ? "objects" : "arrays");
    if (s->kinds & JC_K_NUMBER) { /* two number branches: the range either allows (a hull, its ends closed) */
        bool both = d->kinds & JC_K_NUMBER;
        /* integers beside decimals, or decimals of two scales: neither (the range in doubles) */
        bool apart = both && d->scale != s->scale;
        d->scale = apart ? 0 : s->scale;
        d->mult_int = apart || (both && d->mult_int != s->mult_int) ? 1 : s->mult_int;
        d->min_int = both && d->min_int < s->min_int ? d->min_int : s->min_int;
        d->max_int = both && d->max_int > s->max_int ? d->max_int : s->max_int;
        d->min_open = !both && s->min_open, d->max_open = !both && s->max_open;
        d->min_num = both && d->min_num < s->min_num ? d->min_num : s->min_num;
        d->max_num = both && d->max_num > s->max_num ? d->max_num : s->max_num;
        d->integer = both ? d->integer && s->integer && !apart : s->integer;
    }
    if (s->kinds & JC_K_OBJECT) d->obj = s->obj;
    if (s->kinds & JC_K_ARRAY) d->arr = s->arr;
    if (s->kinds & JC_K_STRING) { /* two string branches: the lengths either allows (a hull: wider when they are apart) */
        d->min_len = d->kinds & JC_K_STRING && d->min_len < s->min_len ? d->min_len : s->min_len;
        d->max_len = d->kinds & JC_K_STRING && d->max_len > s->max_len ? d->max_len : s->max_len;
        d->email = d->kinds & JC_K_STRING && d->email != s->email ? false : s->email;
        d->pattern = d->kinds & JC_K_STRING && d->pattern != s->pattern ? -1 : s->pattern; /* (its lengths are s's) */
    }
    d->kinds |= s->kinds;
    for (int i = 0; i < s->n_lit; i++)
        if (add_literal_text(k, d, strdup(s->lit[i])) < 0) return -1;
    return 0;
}

static jc_node *obj_of(compiler *k, int id) { return &k->c->nodes[k->c->nodes[id].obj]; }

/* index of property `name` in node o, -1 when it has none */
static int prop_index(const jc_node *o, const char *name) {
    for (int q = 0; q < o->n_props; q++)
        if (!strcmp(o->props[q].name, name)) return q;
    return -1;
}

/* anyOf of several object schemas: they must share a required property
 * whose value is constant in each (const or enum) and differs between them
 * (a discriminated union); node id's objects then start with that property
 * and go on as the branch its value names. */
static int discriminate(compiler *k, int id, const int *objs, int n) {
    if (k->c->nodes[id].kinds & JC_K_OBJECT) return fail(k, "anyOf/oneOf branches that are both objects are not supported");
    const jc_node *first = obj_of(k, objs[0]);
    const char *key = NULL;
    for (int p = 0; p < first->n_props && !key; p++) {
        bool ok = true;
        for (int b = 0; b < n && ok; b++) {
            const jc_node *o = obj_of(k, objs[b]);
            int q = prop_index(o, first->props[p].name);
            const jc_node *v = q >= 0 ? &k->c->nodes[o->props[q].node] : NULL;
            ok = v && !v->kinds && v->n_lit && (o->required >> q & 1);
        }
        if (ok) key = first->props[p].name; /* the props arrays do not move with the node table */
    }
    if (!key)
        return fail(k, "anyOf/oneOf branches that are objects need a required property that is constant (const / enum) "
                       "in each to tell them apart");
    int lit = new_node(k), u = lit < 0 ? -1 : new_node(k);
    if (u < 0) return -1;
    jc_node *un = &k->c->nodes[u], *L = &k->c->nodes[lit]; /* no new node below: these stay put */
    un->props = calloc(1, sizeof *un->props);
    un->disc_obj = calloc(JC_MAX_LITERALS, sizeof *un->disc_obj);
    char *name = strdup(key);
    if (!un->props || !un->disc_obj || !name) {
        free(name);
        return fail(k, "out of memory");
    }
    un->props[0] = (jc_prop){ name, strlen(name), lit };
    un->n_props = 1;
    un->required = 1;
    un->kinds = JC_K_OBJECT;
    for (int b = 0; b < n; b++) {
        const jc_node *o = obj_of(k, objs[b]);
        const jc_node *v = &k->c->nodes[o->props[prop_index(o, key)].node];
        for (int l = 0; l < v->n_lit; l++) {
            for (int m = 0; m < L->n_lit; m++)
                if (!strcmp(L->lit[m], v->lit[l]))
                    return fail(k, "anyOf/oneOf object branches share the value %s of their constant property", v->lit[l]);
            if (add_literal_text(k, L, strdup(v->lit[l])) < 0) return -1;
            un->disc_obj[L->n_lit - 1] = k->c->nodes[objs[b]].obj;
        }
    }
    k->c->nodes[id].kinds |= JC_K_OBJECT;
    k->c->nodes[id].obj = u;
    return 0;
}

/* Literals and kinds together: a literal a kind already allows is dropped;
 * bare true/false/null beside literals become literals; what is left must
 * start differently from every kind (the matcher picks by the first byte). */
static int settle_literals(compiler *k, int id) {
    jc_node *n = &k->c->nodes[id];
    if (!n->n_lit || !n->kinds) return 0;
    bool drop[JC_MAX_LITERALS];
    for (int i = 0; i < n->n_lit; i++) {
        int kind = kind_of_byte((unsigned char)n->lit[i][0]);
        drop[i] = (kind & n->kinds) && (kind & (JC_K_STRING | JC_K_BOOL | JC_K_NULL | JC_K_NUMBER)) &&
                  !(kind == JC_K_NUMBER && n->integer && strpbrk(n->lit[i], ".eE"));
        if (!drop[i] && (kind & n->kinds)) return fail(k, "an enum value beside a schema of the same type is not supported");
    }
    int keep = 0;
    for (int i = 0; i < n->n_lit; i++) {
        if (drop[i]) free(n->lit[i]);
        else {
            n->lit[keep] = n->lit[i];
            n->lit_len[keep++] = n->lit_len[i];
        }
    }
    n->n_lit = keep;
    return 0;
}

static int fill(compiler *k, int id, const json_t *s) {
    if (json_is_true(s) || (json_is_object(s) && !json_object_size(s))) {
        int a = any_node(k);
        if (a < 0) return -1;
        jc_node *n = &k->c->nodes[id];
        n->kinds = JC_K_ALL;
        n->additional = n->items = a;
        return 0;
    }
    if (json_is_false(s)) return fail(k, "the schema 'false' matches nothing");
    if (!json_is_object(s)) return fail(k, "a schema must be an object or a boolean");
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof UNSUPPORTED[0]; i++)
        if (json_object_get(s, UNSUPPORTED[i])) return fail(k, "'%s' is not supported", UNSUPPORTED[i]);
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    const json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (en || cn) {
        if (en && (!json_is_array(en) || !json_array_size(en))) return fail(k, "'enum' must be a non-empty array");
        if (cn) return add_literal(k, &k->c->nodes[id], cn);
        size_t i;
        const json_t *v;
        json_array_foreach(en, i, v) if (add_literal(k, &k->c->nodes[id], v) < 0) return -1;
        return 0;
    }
    if (any) {
        if (!json_is_array(any) || !json_array_size(any)) return fail(k, "'anyOf' / 'oneOf' must be a non-empty array");
        if (json_array_size(any) > JC_MAX_LITERALS) return fail(k, "'anyOf' with more than %d branches", JC_MAX_LITERALS);
        int objs[JC_MAX_LITERALS], n_obj = 0;
        size_t i;
        const json_t *b;
        json_array_foreach(any, i, b) {
            int child = compile(k, b);
            if (child < 0) return -1;
            if (k->c->nodes[child].kinds == JC_K_OBJECT && !k->c->nodes[child].n_lit) objs[n_obj++] = child;
            else if (merge_kinds(k, id, child) < 0) return -1;
        }
        if (n_obj == 1 && merge_kinds(k, id, objs[0]) < 0) return -1;
        if (n_obj > 1 && discriminate(k, id, objs, n_obj) < 0) return -1;
        return settle_literals(k, id);
    }
    const json_t *type = json_object_get(s, "type");
    bool integer = false;
    int kinds = 0;
    if (json_is_string(type)) kinds = kinds_of_type(k, json_string_value(type), &integer);
    else if (json_is_array(type)) {
        size_t i;
        const json_t *t;
        bool number = false;
        json_array_foreach(type, i, t) {
            if (!json_is_string(t)) return fail(k, "'type' must be a string or an array of strings");
            bool in = false;
            int kk = kinds_of_type(k, json_string_value(t), &in);
            if (kk < 0) return -1;
            if (kk == JC_K_NUMBER && !in) number = true;
            kinds |= kk;
        }
        integer = integer || (kinds & JC_K_NUMBER && !number);
    } else if (type) return fail(k, "'type' must be a string or an array of strings");
    else if (json_object_get(s, "properties") || json_object_get(s, "required") ||
             json_object_get(s, "additionalProperties"))
        kinds = JC_K_OBJECT;
    else if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
        kinds = JC_K_ARRAY;
    else kinds = JC_K_ALL;
    if (kinds < 0) return -1;
    k->c->nodes[id].kinds = (uint8_t)kinds;
    k->c->nodes[id].integer = integer;
    if (kinds & JC_K_OBJECT && fill_object(k, id, s) < 0) return -1;
    if (kinds & JC_K_ARRAY && fill_array(k, id, s) < 0) return -1;
    if (kinds & JC_K_STRING && fill_string(k, id, s) < 0) return -1;
    if (kinds & JC_K_NUMBER && fill_bounds(k, id, s) < 0) return -1;
    return 0;
}

/* The schema a "#/$defs/NAME" (or #/definitions/NAME, or #) points at. */
static const json_t *resolve(compiler *k, const char *ref) {
    if (!strcmp(ref, "#")) return k->root;
    const char *pre[] = { "#/$defs/", "#/definitions/" };
    for (int i = 0; i < 2; i++) {
        size_t l = strlen(pre[i]);
        if (!strncmp(ref, pre[i], l)) {
            const json_t *defs = json_object_get(k->root, i ? "definitions" : "$defs");
            return json_object_get(defs, ref + l);
        }
    }
    return NULL;
}

static int compile(compiler *k, const json_t *s) {
    if (++k->nest > MAX_NEST) {
        k->nest--;
        return fail(k, "schema nested more than %d deep (or a $ref loop)", MAX_NEST);
    }
    int id = -1;
    const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (ref) {
        const char *r = json_string_value(ref);
        const json_t *t = r ? resolve(k, r) : NULL;
        for (int i = 0; i < k->n_refs && id < 0; i++)
            if (r && !strcmp(k->refs[i].ref, r)) id = k->refs[i].node;
        if (id >= 0) goto out;
        if (!t) {
            id = fail(k, "$ref '%s' does not name a schema under #/$defs or #/definitions", r ? r : "(not a string)");
            goto out;
        }
        if (json_object_get(t, "$ref") || json_object_get(t, "allOf")) {
            id = compile(k, t);
            goto out;
        }
        if (k->n_refs == MAX_REFS) {
            id = fail(k, "more than %d $ref targets", MAX_REFS);
            goto out;
        }
        if ((id = new_node(k)) < 0) goto out;
        k->refs[k->n_refs].ref = r;
        k->refs[k->n_refs++].node = id;
        if (fill(k, id, t) < 0) id = -1;
    } else if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            id = fail(k, "'allOf' is supported with one schema only");
        else
            id = compile(k, json_array_get(all, 0));
    } else if ((id = new_node(k)) >= 0 && fill(k, id, s) < 0)
        id = -1;
out:
    k->nest--;
    return id;
}

json_constraint *jc_compile(const json_t *schema, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    json_constraint *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->refs = 1;
    compiler k = { .root = schema, .c = c, .err = err, .errlen = errlen, .any = -1 };
    json_t *obj = NULL;
    if (!schema) schema = obj = json_pack("{s:s}", "type", "object");
    k.root = schema;
    c->root = schema ? compile(&k, schema) : fail(&k, "out of memory");
    json_decref(obj);
    if (c->root < 0) {
        jc_free(c);
        return NULL;
    }
    return c;
}

json_constraint *jc_ref(json_constraint *c) {
    if (c) __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

size_t jc_bytes(const json_constraint *c) {
    size_t b = sizeof *c + (size_t)c->cap_nodes * sizeof *c->nodes;
    for (int i = 0; i < c->n_nodes; i++) {
        const jc_node *n = &c->nodes[i];
        for (int j = 0; j < n->n_props; j++) b += sizeof n->props[j] + n->props[j].len + 1;
        for (int j = 0; j < n->n_lit; j++) b += n->lit_len[j] + 1 + sizeof *n->lit + sizeof *n->lit_len;
        if (n->disc_obj) b += (size_t)n->n_lit * sizeof *n->disc_obj;
    }
    for (int i = 0; i < c->n_patterns; i++) b += jp_bytes(c->patterns[i]);
    return b;
}

void jc_free(json_constraint *c) {
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    for (int i = 0; i < c->n_nodes; i++) {
        jc_node *n = &c->nodes[i];
        for (int j = 0; j < n->n_props; j++) free(n->props[j].name);
        for (int j = 0; j < n->n_lit; j++) free(n->lit[j]);
        free(n->props);
        free(n->disc_obj);
        free(n->lit);
        free(n->lit_len);
    }
    for (int i = 0; i < c->n_patterns; i++) jp_free(c->patterns[i]);
    free(c->patterns);
    free(c->nodes);
    free(c);
}
