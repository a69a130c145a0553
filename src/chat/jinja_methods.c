/* jinja_methods.c — attribute access and method calls as jinja2's
 * ImmutableSandboxedEnvironment allows them: str methods (strip, split,
 * startswith, replace, find, join, format, ...), dict items/keys/values/get,
 * list index/count (mutating methods such as append are unsafe in the
 * sandbox and fail), loop attributes and loop.cycle, and the globals
 * range, namespace, dict, raise_exception and strftime_now. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "base/err.h"
#include "chat/jinja_internal.h"

/* ---- string helpers ---- */

bool js_is_space(uint32_t cp) {
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

jv jv_soft_str(jv v) {
    if (v.t == JV_STR) return jv_dup(v);
    jbuf b = {0};
    jv_write(&b, v, false, 0);
    return jbuf_take(&b);
}

static bool is_cased(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

jv js_case(const char *s, size_t n, int mode) {
    jbuf b = {0};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t w = ju_decode(s + i, n - i, &cp);
        if (w == 1 && cp >= 0x80) { jbuf_put(&b, s + i, 1); i++; prev_cased = false; first = false; continue; }
        uint32_t r = cp;
        if (cp == 0xdf && (mode == CASE_UPPER || ((mode == CASE_TITLE && !prev_cased) || (mode == CASE_CAPITALIZE && first)))) {
            jbuf_puts(&b, mode == CASE_UPPER ? "SS" : "Ss");  /* Python's full case mapping of sharp s */
            prev_cased = true;
            first = false;
            i += w;
            continue;
        }
        switch (mode) {
        case CASE_UPPER: r = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); break;
        case CASE_LOWER: r = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
        case CASE_TITLE:
            r = prev_cased ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
            prev_cased = is_cased(cp);
            break;
        case CASE_CAPITALIZE:
            r = first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            break;
        }
        first = false;
        ju_encode(&b, r);
        i += w;
    }
    return jbuf_take(&b);
}

static bool in_chars(const jstr *chars, uint32_t cp) {
    if (!chars) return js_is_space(cp);
    for (size_t i = 0; i < chars->len;) {
        uint32_t c;
        i += ju_decode(chars->s + i, chars->len - i, &c);
        if (c == cp) return true;
    }
    return false;
}

jv js_strip(const char *s, size_t n, const jstr *chars, int which) {
    size_t lo = 0, hi = n;
    if (which & 1)
        while (lo < hi) {
            uint32_t cp;
            size_t w = ju_decode(s + lo, hi - lo, &cp);
            if (!in_chars(chars, cp)) break;
            lo += w;
        }
    if (which & 2)
        while (hi > lo) {
            size_t st = hi - 1;
            while (st > lo && ((unsigned char)s[st] & 0xc0) == 0x80 && hi - st < 4) st--;
            uint32_t cp;
            size_t w = ju_decode(s + st, hi - st, &cp);
            if (st + w != hi) { st = hi - 1; cp = (unsigned char)s[st]; }
            if (!in_chars(chars, cp)) break;
            hi = st;
        }
    return jv_str(s + lo, hi - lo);
}

jv js_replace(const char *s, size_t n, const jstr *old, const jstr *nw, int64_t count) {
    jbuf b = {0};
    if (old->len == 0) {  /* insert between every character */
        int64_t k = 0;
        for (size_t i = 0; i <= n; k++) {
            if (count < 0 || k < count) jbuf_put(&b, nw->s, nw->len);
            if (i == n) break;
            uint32_t cp;
            size_t w = ju_decode(s + i, n - i, &cp);
            jbuf_put(&b, s + i, w);
            i += w;
        }
        return jbuf_take(&b);
    }
    size_t i = 0;
    int64_t k = 0;
    while (i < n && (count < 0 || k < count) && !b.over) {
        const char *h = memmem(s + i, n - i, old->s, old->len);
        if (!h) break;
        jbuf_put(&b, s + i, (size_t)(h - (s + i)));
        jbuf_put(&b, nw->s, nw->len);
        i = (size_t)(h - s) + old->len;
        k++;
    }
    jbuf_put(&b, s + i, n - i);
    if (b.over) { jbuf_free(&b); jrt_cur->oom = true; return jv_undef(); }
    return jbuf_take(&b);
}

/* ---- getattr ---- */

static const char *str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
    "title", "capitalize", "replace", "find", "rfind", "index", "count", "join", "format", "isdigit", "isalpha",
    "isalnum", "isspace", "islower", "isupper", "isnumeric", "removeprefix", "removesuffix", NULL};
static const char *dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *list_methods[] = {"index", "count", "copy", NULL};
static const char *list_unsafe[] = {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove", NULL};

static bool in_list(const char *const *l, const char *s) {
    for (; *l; l++) if (!strcmp(*l, s)) return true;
    return false;
}

static jv bound(jv obj, const char *name) {
    jv f = jv_func(FN_METHOD, name);
    if (f.t == JV_FUNC) JFUNC(f)->self = jv_dup(obj);
    return f;
}

int jx_getattr(jx *x, jv obj, const char *name, jv *out) {
    switch (obj.t) {
    case JV_UNDEF: return jx_undef_error(x, obj);
    case JV_DICT:
        if (in_list(dict_methods, name)) { *out = bound(obj, name); return 0; }
        if (in_list(dict_unsafe, name)) {
            *out = jv_undef_msg("SecurityError: access to attribute '%s' of 'dict' object is unsafe.", name);
            return 0;
        } else {
            jv *v = jdict_gets(obj, name);
            *out = v ? jv_dup(*v) : jv_undef_msg("'dict object' has no attribute '%s'", name);
            return 0;
        }
    case JV_NS: {
        jv *v = jdict_gets(obj, name);
        *out = v ? jv_dup(*v) : jv_undef_msg("'jinja2.utils.Namespace object' has no attribute '%s'", name);
        return 0;
    }
    case JV_STR:
        *out = in_list(str_methods, name) ? bound(obj, name) : jv_undef_msg("'str object' has no attribute '%s'", name);
        return 0;
    case JV_LIST:
        if (in_list(list_methods, name)) *out = bound(obj, name);
        else if (in_list(list_unsafe, name))
            *out = jv_undef_msg("SecurityError: access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
        else *out = jv_undef_msg("'%s object' has no attribute '%s'", jv_type_name(obj), name);
        return 0;
    case JV_LOOP: {
        jloop *l = JLOOP(obj);
        size_t i = l->i, n = l->n;
        jlist *it = JLIST(l->items);
        if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
        else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
        else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
        else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
        else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
        else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
        else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
        else if (!strcmp(name, "depth")) *out = jv_int(1);
        else if (!strcmp(name, "depth0")) *out = jv_int(0);
        else if (!strcmp(name, "previtem"))
            *out = i > 0 && it ? jv_dup(it->v[i - 1]) : jv_undef_msg("there is no previous item");
        else if (!strcmp(name, "nextitem"))
            *out = i + 1 < n && it ? jv_dup(it->v[i + 1]) : jv_undef_msg("there is no next item");
        else if (!strcmp(name, "cycle")) *out = bound(obj, name);
        else *out = jv_undef_msg("'jinja2.runtime.LoopContext object' has no attribute '%s'", name);
        return 0;
    }
    case JV_NONE: *out = jv_undef_msg("'None' has no attribute '%s'", name); return 0;
    default: *out = jv_undef_msg("'%s object' has no attribute '%s'", jv_type_name(obj), name); return 0;
    }
}

/* ---- methods ---- */

static int want_str(jx *x, jv *v, const char *fn, const jstr **out) {
    *out = NULL;
    if (!v || v->t == JV_NONE) { *out = NULL; return 0; }
    if (v->t != JV_STR) return jx_fail(x, "TypeError: %s arg must be None or str, not %s", fn, jv_type_name(*v));
    *out = JSTR(*v);
    return 0;
}

static int want_int(jx *x, jv *v, int64_t dflt, int64_t *out) {
    *out = dflt;
    if (!v || v->t == JV_NONE) { *out = dflt; return 0; }
    if (v->t == JV_INT) { *out = v->i; return 0; }
    if (v->t == JV_BOOL) { *out = v->b; return 0; }
    return jx_fail(x, "TypeError: '%s' object cannot be interpreted as an integer", jv_type_name(*v));
}

/* Python str.split / rsplit. */
static int str_split(jx *x, const jstr *s, jv *sepv, jv *maxv, bool right, jv *out) {
    const jstr *sep;
    int64_t maxsplit;
    int rc;
    if ((rc = want_str(x, sepv, "split()", &sep)) < 0 || (rc = want_int(x, maxv, -1, &maxsplit)) < 0) return rc;
    if (sep && sep->len == 0) return jx_fail(x, "ValueError: empty separator");
    jv l = jv_list(false);
    const char *p = s->s;
    size_t n = s->len;
    if (!sep) {
        /* whitespace split; rsplit with maxsplit handled like split from the right */
        size_t i = 0, j = n;
        int64_t k = 0;
        if (!right) {
            while (1) {
                while (i < n) { uint32_t cp; size_t w = ju_decode(p + i, n - i, &cp); if (!js_is_space(cp)) break; i += w; }
                if (i >= n) break;
                if (maxsplit >= 0 && k >= maxsplit) {
                    size_t e = n;
                    jlist_push(l, jv_str(p + i, e - i));
                    break;
                }
                size_t st = i;
                while (i < n) { uint32_t cp; size_t w = ju_decode(p + i, n - i, &cp); if (js_is_space(cp)) break; i += w; }
                jlist_push(l, jv_str(p + st, i - st));
                k++;
            }
        } else {
            jv tmp = jv_list(false);
            while (1) {
                while (j > 0 && js_is_space((unsigned char)p[j - 1])) j--;
                if (j == 0) break;
                if (maxsplit >= 0 && k >= maxsplit) { jlist_push(tmp, jv_str(p, j)); break; }
                size_t e = j;
                while (j > 0 && !js_is_space((unsigned char)p[j - 1])) j--;
                jlist_push(tmp, jv_str(p + j, e - j));
                k++;
            }
            for (size_t q = tmp.t == JV_LIST ? JLIST(tmp)->n : 0; q > 0; q--) jlist_push(l, jv_dup(JLIST(tmp)->v[q - 1]));
            jv_drop(tmp);
        }
        *out = l;
        return 0;
    }
    if (!right) {
        size_t i = 0;
        int64_t k = 0;
        while (maxsplit < 0 || k < maxsplit) {
            const char *h = memmem(p + i, n - i, sep->s, sep->len);
            if (!h) break;
            jlist_push(l, jv_str(p + i, (size_t)(h - (p + i))));
            i = (size_t)(h - p) + sep->len;
            k++;
            if (jrt_cur->oom) break;
        }
        jlist_push(l, jv_str(p + i, n - i));
    } else {
        jv tmp = jv_list(false);
        size_t j = n;
        int64_t k = 0;
        while ((maxsplit < 0 || k < maxsplit) && j >= sep->len) {
            size_t q = j - sep->len;
            bool found = false;
            while (1) {
                if (!memcmp(p + q, sep->s, sep->len)) { found = true; break; }
                if (q == 0) break;
                q--;
            }
            if (!found) break;
            jlist_push(tmp, jv_str(p + q + sep->len, j - q - sep->len));
            j = q;
            k++;
        }
        jlist_push(tmp, jv_str(p, j));
        for (size_t q = tmp.t == JV_LIST ? JLIST(tmp)->n : 0; q > 0; q--) jlist_push(l, jv_dup(JLIST(tmp)->v[q - 1]));
        jv_drop(tmp);
    }
    *out = l;
    return 0;
}

static bool affix(const jstr *s, const jstr *a, bool end) {
    if (a->len > s->len) return false;
    return !memcmp(end ? s->s + s->len - a->len : s->s, a->s, a->len);
}

/* str.format with {} {0} {name} fields (no format specs). */
static int str_format(jx *x, const jstr *s, jargs *a, jv *out) {
    jbuf b = {0};
    int auto_i = 0;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->s[i];
        if (c == '{' && i + 1 < s->len && s->s[i + 1] == '{') { jbuf_putc(&b, '{'); i++; continue; }
        if (c == '}' && i + 1 < s->len && s->s[i + 1] == '}') { jbuf_putc(&b, '}'); i++; continue; }
        if (c == '}') { jbuf_free(&b); return jx_fail(x, "ValueError: Single '}' encountered in format string"); }
        if (c != '{') { jbuf_putc(&b, c); continue; }
        const char *e = memchr(s->s + i, '}', s->len - i);
        if (!e) { jbuf_free(&b); return jx_fail(x, "ValueError: Single '{' encountered in format string"); }
        char field[128];
        size_t fl = (size_t)(e - (s->s + i + 1));
        if (fl >= sizeof field || memchr(s->s + i + 1, ':', fl) || memchr(s->s + i + 1, '!', fl)) {
            jbuf_free(&b);
            return jx_fail(x, "str.format: format specs and conversions are not supported");
        }
        memcpy(field, s->s + i + 1, fl);
        field[fl] = 0;
        jv *v;
        if (fl == 0) v = jargs_get(a, auto_i++, NULL);
        else if (field[0] >= '0' && field[0] <= '9') v = jargs_get(a, atoi(field), NULL);
        else v = jargs_get(a, -1, field);
        if (!v) { jbuf_free(&b); return jx_fail(x, "IndexError: Replacement index %s out of range for positional args tuple", fl ? field : "?"); }
        jv_write(&b, *v, false, 0);
        i = (size_t)(e - s->s);
    }
    *out = jbuf_take(&b);
    return 0;
}

static int str_method(jx *x, const char *m, const jstr *s, jv self, jargs *a, jv *out) {
    jv *a0 = jargs_get(a, 0, NULL), *a1 = jargs_get(a, 1, NULL);
    const jstr *c;
    int rc;
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        if ((rc = want_str(x, a0, m, &c)) < 0) return rc;
        *out = js_strip(s->s, s->len, c, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
        return 0;
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit"))
        return str_split(x, s, jargs_get(a, 0, "sep"), jargs_get(a, 1, "maxsplit"), m[0] == 'r', out);
    if (!strcmp(m, "splitlines")) {
        jv l = jv_list(false);
        size_t st = 0;
        for (size_t i = 0; i < s->len; i++) {
            if (s->s[i] == '\n' || s->s[i] == '\r') {
                jlist_push(l, jv_str(s->s + st, i - st));
                if (s->s[i] == '\r' && i + 1 < s->len && s->s[i + 1] == '\n') i++;
                st = i + 1;
            }
        }
        if (st < s->len) jlist_push(l, jv_str(s->s + st, s->len - st));
        *out = l;
        return 0;
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        bool end = m[0] == 'e', r = false;
        if (!a0) return jx_fail(x, "TypeError: %s() takes at least 1 argument (0 given)", m);
        if (a0->t == JV_STR) r = affix(s, JSTR(*a0), end);
        else if (a0->t == JV_LIST && JLIST(*a0)->tuple) {
            for (size_t i = 0; i < JLIST(*a0)->n && !r; i++) {
                jv e = JLIST(*a0)->v[i];
                if (e.t != JV_STR) return jx_fail(x, "TypeError: tuple for %s must only contain str", m);
                r = affix(s, JSTR(e), end);
            }
        } else return jx_fail(x, "TypeError: %s first arg must be str or a tuple of str, not %s", m, jv_type_name(*a0));
        *out = jv_bool(r);
        return 0;
    }
    if (!strcmp(m, "upper")) { *out = js_case(s->s, s->len, CASE_UPPER); return 0; }
    if (!strcmp(m, "lower")) { *out = js_case(s->s, s->len, CASE_LOWER); return 0; }
    if (!strcmp(m, "title")) { *out = js_case(s->s, s->len, CASE_TITLE); return 0; }
    if (!strcmp(m, "capitalize")) { *out = js_case(s->s, s->len, CASE_CAPITALIZE); return 0; }
    if (!strcmp(m, "replace")) {
        int64_t count;
        if (!a0 || !a1 || a0->t != JV_STR || a1->t != JV_STR) return jx_fail(x, "TypeError: replace() arguments must be str");
        if ((rc = want_int(x, jargs_get(a, 2, "count"), -1, &count)) < 0) return rc;
        *out = js_replace(s->s, s->len, JSTR(*a0), JSTR(*a1), count);
        return 0;
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "count")) {
        if (!a0 || a0->t != JV_STR) return jx_fail(x, "TypeError: %s() argument must be str", m);
        const jstr *sub = JSTR(*a0);
        if (!strcmp(m, "count")) {
            int64_t k = 0;
            if (sub->len == 0) k = (int64_t)ju_len(s->s, s->len) + 1;
            else for (const char *p = s->s, *h; (h = memmem(p, s->len - (size_t)(p - s->s), sub->s, sub->len)); p = h + sub->len) k++;
            *out = jv_int(k);
            return 0;
        }
        const char *h = NULL;
        if (m[0] == 'r') {
            for (size_t q = s->len >= sub->len ? s->len - sub->len + 1 : 0; q > 0; q--)
                if (!memcmp(s->s + q - 1, sub->s, sub->len)) { h = s->s + q - 1; break; }
        } else {
            h = sub->len ? memmem(s->s, s->len, sub->s, sub->len) : s->s;
        }
        if (!h && !strcmp(m, "index")) return jx_fail(x, "ValueError: substring not found");
        *out = jv_int(h ? (int64_t)ju_len(s->s, (size_t)(h - s->s)) : -1);
        return 0;
    }
    if (!strcmp(m, "join")) {
        if (!a0) return jx_fail(x, "TypeError: join() takes exactly one argument (0 given)");
        jv items;
        if ((rc = jx_iter_items(x, *a0, &items)) < 0) return rc;
        jbuf b = {0};
        for (size_t i = 0; items.t == JV_LIST && i < JLIST(items)->n; i++) {
            jv e = JLIST(items)->v[i];
            if (e.t != JV_STR) {
                jbuf_free(&b);
                jv_drop(items);
                return jx_fail(x, "TypeError: sequence item %zu: expected str instance, %s found", i, jv_type_name(e));
            }
            if (i) jbuf_put(&b, s->s, s->len);
            jbuf_put(&b, JSTR(e)->s, JSTR(e)->len);
        }
        jv_drop(items);
        if (b.over) { jbuf_free(&b); return jx_fail(x, "MemoryError: string too large"); }
        *out = jbuf_take(&b);
        return 0;
    }
    if (!strcmp(m, "format")) return str_format(x, s, a, out);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (!a0 || a0->t != JV_STR) return jx_fail(x, "TypeError: %s() argument must be str", m);
        bool end = m[6] == 's';
        const jstr *af = JSTR(*a0);
        if (affix(s, af, end)) *out = jv_str(end ? s->s : s->s + af->len, s->len - af->len);
        else *out = jv_dup(self);
        return 0;
    }
    if (!strncmp(m, "is", 2)) {
        bool r = s->len > 0, any_cased = false;
        for (size_t i = 0; i < s->len && r;) {
            uint32_t cp;
            i += ju_decode(s->s + i, s->len - i, &cp);
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
            bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            bool digit = cat == UTF8PROC_CATEGORY_ND;
            bool numeric = digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
            if (!strcmp(m, "isdigit")) r = digit;
            else if (!strcmp(m, "isnumeric")) r = numeric;
            else if (!strcmp(m, "isalpha")) r = letter;
            else if (!strcmp(m, "isalnum")) r = letter || numeric;
            else if (!strcmp(m, "isspace")) r = js_is_space(cp);
            else if (!strcmp(m, "islower")) { if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) r = false; any_cased |= cat == UTF8PROC_CATEGORY_LL; }
            else if (!strcmp(m, "isupper")) { if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) r = false; any_cased |= cat == UTF8PROC_CATEGORY_LU; }
        }
        if (!strcmp(m, "islower") || !strcmp(m, "isupper")) r = r && any_cased;
        *out = jv_bool(r);
        return 0;
    }
    return jx_fail(x, "str.%s() is not supported", m);
}

static int dict_method(jx *x, const char *m, jv self, jargs *a, jv *out) {
    jdict *d = JDICT(self);
    if (!strcmp(m, "get")) {
        jv *k = jargs_get(a, 0, NULL), *dflt = jargs_get(a, 1, NULL);
        if (!k) return jx_fail(x, "TypeError: get expected at least 1 argument, got 0");
        jv *v = jdict_get(self, *k);
        *out = v ? jv_dup(*v) : dflt ? jv_dup(*dflt) : jv_none();
        return 0;
    }
    if (!strcmp(m, "copy")) {
        jv r = jv_dict(JV_DICT);
        for (size_t i = 0; i < d->n; i++) jdict_set(r, jv_dup(d->e[i].k), jv_dup(d->e[i].v));
        *out = r;
        return 0;
    }
    jv l = jv_list(false);
    for (size_t i = 0; i < d->n; i++) {
        if (!strcmp(m, "keys")) jlist_push(l, jv_dup(d->e[i].k));
        else if (!strcmp(m, "values")) jlist_push(l, jv_dup(d->e[i].v));
        else {
            jv t = jv_list(true);
            jlist_push(t, jv_dup(d->e[i].k));
            jlist_push(t, jv_dup(d->e[i].v));
            jlist_push(l, t);
        }
    }
    *out = l;
    return 0;
}

static int list_method(jx *x, const char *m, jv self, jargs *a, jv *out) {
    jlist *l = JLIST(self);
    jv *v = jargs_get(a, 0, NULL);
    if (!strcmp(m, "copy")) {
        jv r = jv_list(l->tuple);
        for (size_t i = 0; i < l->n; i++) jlist_push(r, jv_dup(l->v[i]));
        *out = r;
        return 0;
    }
    if (!v) return jx_fail(x, "TypeError: %s() takes exactly one argument (0 given)", m);
    int64_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (!jv_eq(l->v[i], *v)) continue;
        if (!strcmp(m, "index")) { *out = jv_int((int64_t)i); return 0; }
        k++;
    }
    if (!strcmp(m, "index")) return jx_fail(x, "ValueError: value is not in list");
    *out = jv_int(k);
    return 0;
}

/* ---- builtins ---- */

static int builtin(jx *x, const char *name, jargs *a, jv *out) {
    if (!strcmp(name, "range")) {
        int64_t v[3] = {0, 0, 1};
        if (a->npos < 1 || a->npos > 3 || a->nkw) return jx_fail(x, "TypeError: range expected 1 to 3 arguments");
        for (int i = 0; i < a->npos; i++) {
            int rc = want_int(x, &a->pos[i], 0, &v[a->npos == 1 ? 1 : i]);
            if (rc < 0) return rc;
        }
        if (v[2] == 0) return jx_fail(x, "ValueError: range() arg 3 must not be zero");
        int64_t n = 0;
        if (v[2] > 0 && v[1] > v[0]) n = (int64_t)(((__int128)v[1] - v[0] + v[2] - 1) / v[2]);
        if (v[2] < 0 && v[1] < v[0]) n = (int64_t)(((__int128)v[0] - v[1] - v[2] - 1) / -v[2]);
        if (n > JJ_MAX_RANGE)
            return jx_fail(x, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JJ_MAX_RANGE);
        jv l = jv_list(false);
        for (int64_t i = 0; i < n; i++) jlist_push(l, jv_int(v[0] + i * v[2]));
        *out = l;
        return 0;
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        jv d = jv_dict(name[0] == 'n' ? JV_NS : JV_DICT);
        if (a->npos > 1) { jv_drop(d); return jx_fail(x, "TypeError: %s expected at most 1 positional argument", name); }
        if (a->npos == 1) {
            jv p = a->pos[0];
            if (p.t == JV_DICT || p.t == JV_NS) {
                for (size_t i = 0; i < JDICT(p)->n; i++) jdict_set(d, jv_dup(JDICT(p)->e[i].k), jv_dup(JDICT(p)->e[i].v));
            } else {
                jv_drop(d);
                return jx_fail(x, "TypeError: %s argument must be a mapping", name);
            }
        }
        for (int i = 0; i < a->nkw; i++) jdict_set(d, jv_cstr(a->kwn[i]), jv_dup(a->kwv[i]));
        *out = d;
        return 0;
    }
    if (!strcmp(name, "raise_exception")) {
        jv *m = jargs_get(a, 0, "message");
        jbuf b = {0};
        if (m) jv_write(&b, *m, false, 0);
        int rc = jx_fail(x, "TemplateError: %s", b.p ? b.p : "");
        jbuf_free(&b);
        return rc;
    }
    if (!strcmp(name, "strftime_now")) {
        jv *fmt = jargs_get(a, 0, "format");
        if (!fmt || fmt->t != JV_STR) return jx_fail(x, "TypeError: strftime_now() argument must be str");
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[512];
        size_t n = JSTR(*fmt)->len ? strftime(buf, sizeof buf, JSTR(*fmt)->s, &tm) : 0;
        *out = jv_str(buf, n);
        return 0;
    }
    return jx_fail(x, "'%s' is not callable", name);
}

int jx_call_method(jx *x, jframe *f, jfunc *fn, jargs *a, jv *out) {
    (void)f;
    if (fn->kind == FN_BUILTIN) return builtin(x, fn->name, a, out);
    jv self = fn->self;
    switch (self.t) {
    case JV_STR: return str_method(x, fn->name, JSTR(self), self, a, out);
    case JV_DICT: return dict_method(x, fn->name, self, a, out);
    case JV_LIST: return list_method(x, fn->name, self, a, out);
    case JV_LOOP:
        if (a->npos == 0) return jx_fail(x, "TypeError: no items for cycling given");
        *out = jv_dup(a->pos[JLOOP(self)->i % (size_t)a->npos]);
        return 0;
    default: return jx_fail(x, "TypeError: '%s' object is not callable", jv_type_name(self));
    }
}

void jx_add_builtins(jframe *g) {
    static const char *names[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};
    for (int i = 0; names[i]; i++) jframe_set(g, names[i], jv_func(FN_BUILTIN, names[i]));
}
