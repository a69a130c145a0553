/* jinja_filters.c — jinja2's filters and tests as chat templates use them:
 * tojson (transformers' json.dumps variant), trim, length/count, first/last,
 * join, upper/lower/title/capitalize, replace, default/d, list, string, int,
 * float, abs, round, map, select/reject/selectattr/rejectattr, items,
 * dictsort, unique, sort, reverse, indent, safe, escape/e, batch, wordcount,
 * sum/min/max; tests defined, none, string, number, mapping, iterable, ... */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jinja_internal.h"

/* ---- helpers ---- */

static int items_of(jx *x, jv v, jv *out) { return jx_iter_items(x, v, out); }
static size_t list_n(jv l) { return l.t == JV_LIST ? JLIST(l)->n : 0; }

/* attribute path "a.b.0" as jinja2's make_attrgetter; dflt may be NULL. */
static int attr_get(jx *x, jv item, const char *path, jv *dflt, jv *out) {
    jv cur = jv_dup(item);
    const char *p = path;
    while (1) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char part[256];
        if (n >= sizeof part) { jv_drop(cur); return jx_fail(x, "attribute name too long"); }
        memcpy(part, p, n);
        part[n] = 0;
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= part[i] >= '0' && part[i] <= '9';
        jv key = digits ? jv_int(atoll(part)) : jv_cstr(part), nx;
        int rc = jx_getitem(x, cur, key, &nx);
        jv_drop(key);
        jv_drop(cur);
        if (rc < 0) return rc;
        cur = nx;
        if (!dot) break;
        p = dot + 1;
    }
    if (dflt && cur.t == JV_UNDEF) { jv_drop(cur); cur = jv_dup(*dflt); }
    *out = cur;
    return 0;
}

/* Sort key: attribute and/or lower-cased string. */
static int sort_key(jx *x, jv item, const char *attr, bool case_sensitive, jv *out) {
    jv k;
    int rc = attr ? attr_get(x, item, attr, NULL, &k) : (k = jv_dup(item), 0);
    if (rc < 0) return rc;
    if (!case_sensitive && k.t == JV_STR) {
        jv l = js_case(JSTR(k)->s, JSTR(k)->len, CASE_LOWER);
        jv_drop(k);
        k = l;
    }
    *out = k;
    return 0;
}

typedef struct { jv key, val; } kv;

/* Stable merge sort by key; <0 on incomparable keys. */
static int msort(jx *x, kv *a, kv *tmp, size_t n) {
    if (n < 2) return 0;
    size_t h = n / 2;
    int rc;
    if ((rc = msort(x, a, tmp, h)) < 0 || (rc = msort(x, a + h, tmp, n - h)) < 0) return rc;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        if (a[j].key.t == JV_UNDEF || a[i].key.t == JV_UNDEF) c = 0;
        else if (jv_cmp(a[j].key, a[i].key, &c) < 0)
            return jx_fail(x, "TypeError: '<' not supported between instances of '%s' and '%s'",
                           jv_type_name(a[j].key), jv_type_name(a[i].key));
        tmp[k++] = c < 0 ? a[j++] : a[i++];
    }
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
    return 0;
}

/* Sorts vals (list) by keys computed per item; returns a new list. */
static int sort_list(jx *x, jv items, const char *attr, bool cs, bool reverse, int pair_idx, jv *out) {
    size_t n = list_n(items);
    kv *a = calloc(n + 1, sizeof *a), *tmp = calloc(n + 1, sizeof *tmp);
    int rc = 0;
    if (!a || !tmp) { free(a); free(tmp); return err_set(KS_ENOMEM, "chat template: out of memory"); }
    size_t k = 0;
    for (; k < n && rc == 0; k++) {
        jv item = JLIST(items)->v[k];
        jv src = item;
        if (pair_idx >= 0 && item.t == JV_LIST && JLIST(item)->n == 2)
            src = JLIST(item)->v[pair_idx];
        a[k].val = item;
        rc = sort_key(x, src, attr, cs, &a[k].key);
    }
    if (rc == 0) rc = msort(x, a, tmp, n);
    if (rc == 0) {
        jv r = jv_list(false);
        for (size_t i = 0; i < n; i++) jlist_push(r, jv_dup(a[reverse ? n - 1 - i : i].val));
        *out = r;
    }
    for (size_t i = 0; i < k; i++) jv_drop(a[i].key);
    free(a);
    free(tmp);
    return rc;
}

static bool kw_bool(jargs *a, int pos, const char *name, bool dflt) {
    jv *v = jargs_get(a, pos, name);
    return v ? jv_truthy(*v) : dflt;
}
static const char *kw_str(jargs *a, int pos, const char *name) {
    jv *v = jargs_get(a, pos, name);
    return v && v->t == JV_STR ? JSTR(*v)->s : NULL;
}

/* args without the first `skip` positionals */
static jargs args_shift(jargs *a, int skip) {
    jargs r = *a;
    if (skip > r.npos) skip = r.npos;
    r.pos += skip;
    r.npos -= skip;
    return r;
}

/* select / reject / selectattr / rejectattr */
static int filter_select(jx *x, jv val, jargs *a, bool attr, bool keep, jv *out) {
    jv items;
    int rc = items_of(x, val, &items);
    if (rc < 0) return rc;
    const char *aname = NULL;
    int first = 0;
    if (attr) {
        aname = kw_str(a, 0, NULL);
        if (!aname) { jv_drop(items); return jx_fail(x, "TypeError: selectattr/rejectattr need an attribute name"); }
        first = 1;
    }
    const char *test = kw_str(a, first, NULL);
    jargs targs = args_shift(a, first + 1);
    jv r = jv_list(false);
    for (size_t i = 0; i < list_n(items) && rc == 0; i++) {
        jv item = JLIST(items)->v[i], probe;
        if (attr) { if ((rc = attr_get(x, item, aname, NULL, &probe)) < 0) break; }
        else probe = jv_dup(item);
        bool t;
        if (test) rc = jx_test(x, test, probe, &targs, &t);
        else t = jv_truthy(probe);
        jv_drop(probe);
        if (rc == 0 && t == keep) jlist_push(r, jv_dup(item));
    }
    jv_drop(items);
    if (rc < 0) { jv_drop(r); return rc; }
    *out = r;
    return 0;
}

static int filter_tojson(jx *x, jv val, jargs *a, jv *out) {
    jjson_opts o = {0};
    char ind[64];
    jv *iv = jargs_get(a, 1, "indent");  /* tojson(x, ensure_ascii, indent, separators, sort_keys) */
    if (a->npos >= 1) o.ensure_ascii = jv_truthy(a->pos[0]);
    else o.ensure_ascii = kw_bool(a, -1, "ensure_ascii", false);
    if (iv && iv->t == JV_INT) {
        int64_t k = iv->i < 0 ? 0 : iv->i > 32 ? 32 : iv->i;
        memset(ind, ' ', (size_t)k);
        ind[k] = 0;
        o.indent = ind;
    } else if (iv && iv->t == JV_STR) {
        o.indent = JSTR(*iv)->s;
    } else if (iv && iv->t != JV_NONE) {
        return jx_fail(x, "TypeError: tojson indent must be an int or a str");
    }
    jv *sep = jargs_get(a, 2, "separators");
    if (sep && sep->t == JV_LIST && JLIST(*sep)->n == 2 && JLIST(*sep)->v[0].t == JV_STR && JLIST(*sep)->v[1].t == JV_STR) {
        o.item_sep = JSTR(JLIST(*sep)->v[0])->s;
        o.key_sep = JSTR(JLIST(*sep)->v[1])->s;
    }
    o.sort_keys = kw_bool(a, 3, "sort_keys", false);
    jbuf b = {0};
    int rc = jv_tojson(&b, val, &o, 0);
    if (rc < 0) { jbuf_free(&b); return err_wrap(rc, "chat template line %d", x->line); }
    *out = jbuf_take(&b);
    return 0;
}

static int filter_indent(jx *x, jv val, jargs *a, jv *out) {
    jv w = jargs_get(a, 0, "width") ? *jargs_get(a, 0, "width") : jv_int(4);
    bool first = kw_bool(a, 1, "first", false), blank = kw_bool(a, 2, "blank", false);
    jbuf ind = {0};
    if (w.t == JV_STR) jbuf_put(&ind, JSTR(w)->s, JSTR(w)->len);
    else if (w.t == JV_INT) for (int64_t i = 0; i < w.i && i < 1024; i++) jbuf_putc(&ind, ' ');
    else return jx_fail(x, "TypeError: indent width must be an int or a str");
    jv s = jv_soft_str(val);
    if (s.t != JV_STR) { jbuf_free(&ind); return 0; }
    /* lines of s + "\n" per str.splitlines() */
    const char *p = JSTR(s)->s;
    size_t n = JSTR(s)->len;
    jbuf b = {0};
    if (first) jbuf_put(&b, ind.p ? ind.p : "", ind.n);
    size_t st = 0, line = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '\n' && p[i] != '\r') continue;
        size_t e = i;
        if (i == n && st == n) break;  /* the appended "\n" ends the last line */
        if (line > 0) {
            jbuf_putc(&b, '\n');
            if (blank || e > st) jbuf_put(&b, ind.p ? ind.p : "", ind.n);
        }
        jbuf_put(&b, p + st, e - st);
        if (i < n && p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') i++;
        st = i + 1;
        line++;
    }
    jbuf_free(&ind);
    jv_drop(s);
    if (b.over) { jbuf_free(&b); return jx_fail(x, "MemoryError: string too large"); }
    *out = jbuf_take(&b);
    return 0;
}

static jv html_escape(jv v) {
    jv s = jv_soft_str(v);
    if (s.t != JV_STR) return s;
    jbuf b = {0};
    for (size_t i = 0; i < JSTR(s)->len; i++) {
        char c = JSTR(s)->s[i];
        switch (c) {
        case '&': jbuf_puts(&b, "&amp;"); break;
        case '<': jbuf_puts(&b, "&lt;"); break;
        case '>': jbuf_puts(&b, "&gt;"); break;
        case '"': jbuf_puts(&b, "&#34;"); break;
        case '\'': jbuf_puts(&b, "&#39;"); break;
        default: jbuf_putc(&b, c);
        }
    }
    jv_drop(s);
    return jbuf_take(&b);
}

static int to_number(jv v, bool want_int, jv dflt, jv *out) {
    if (v.t == JV_INT) { *out = want_int ? v : jv_float((double)v.i); return 0; }
    if (v.t == JV_BOOL) { *out = want_int ? jv_int(v.b) : jv_float(v.b); return 0; }
    if (v.t == JV_FLOAT) {
        if (want_int) {
            if (!isfinite(v.f) || fabs(v.f) > 9.2e18) { *out = dflt; return 0; }
            *out = jv_int((int64_t)v.f);
        } else *out = v;
        return 0;
    }
    if (v.t == JV_STR) {
        char buf[128];
        size_t k = 0;
        for (size_t i = 0; i < JSTR(v)->len && k < sizeof buf - 1; i++)
            if (JSTR(v)->s[i] != '_') buf[k++] = JSTR(v)->s[i];
        buf[k] = 0;
        char *s = buf, *e;
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (want_int) {
            long long i = strtoll(s, &e, 10);
            while (*e == ' ' || *e == '\t' || *e == '\n') e++;
            if (e != s && !*e) { *out = jv_int(i); return 0; }
        }
        double d = strtod(s, &e);
        while (*e == ' ' || *e == '\t' || *e == '\n') e++;
        if (e != s && !*e && JSTR(v)->len < sizeof buf) return to_number(jv_float(d), want_int, dflt, out);
    }
    *out = dflt;
    return 0;
}

static int filter_round(jx *x, jv val, jargs *a, jv *out) {
    int64_t prec = 0;
    jv *pv = jargs_get(a, 0, "precision");
    if (pv && pv->t == JV_INT) prec = pv->i;
    const char *method = kw_str(a, 1, "method");
    if (!method) method = "common";
    if (!jv_is_num(val)) return jx_fail(x, "TypeError: type %s doesn't define __round__ method", jv_type_name(val));
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jx_fail(x, "FilterArgumentError: method must be common, ceil or floor");
    if (val.t != JV_FLOAT && !strcmp(method, "common")) { *out = jv_int(val.t == JV_INT ? val.i : val.b); return 0; }
    double v = jv_num(val), r;
    if (!strcmp(method, "common")) {
        if (prec >= 0 && prec < 300) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, v);
            r = strtod(buf, NULL);
        } else {
            double m = pow(10, (double)-prec);
            r = nearbyint(v / m) * m;
        }
    } else {
        double m = pow(10, (double)prec);
        r = (method[0] == 'c' ? ceil(v * m) : floor(v * m)) / m;
    }
    *out = jv_float(r);
    return 0;
}

/* ---- filters ---- */

int jx_filter(jx *x, jframe *f, const char *name, jv val, jargs *a, jv *out) {
    int rc = 0;
    jv items;
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv *dv = jargs_get(a, 0, "default_value");
        bool boolean = kw_bool(a, 1, "boolean", false);
        if (val.t == JV_UNDEF || (boolean && !jv_truthy(val))) *out = dv ? jv_dup(*dv) : jv_cstr("");
        else *out = jv_dup(val);
        return 0;
    }
    if (!strcmp(name, "tojson")) return filter_tojson(x, val, a, out);
    if (!strcmp(name, "safe") || !strcmp(name, "string")) { *out = jv_soft_str(val); return 0; }
    if (!strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape")) { *out = html_escape(val); return 0; }
    if (!strcmp(name, "trim") || !strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
        !strcmp(name, "title") || !strcmp(name, "replace") || !strcmp(name, "wordcount")) {
        jv s = jv_soft_str(val);
        if (s.t != JV_STR) return 0;
        const char *p = JSTR(s)->s;
        size_t n = JSTR(s)->len;
        if (name[0] == 't' && name[1] == 'r') {
            jv *ch = jargs_get(a, 0, "chars");
            *out = js_strip(p, n, ch && ch->t == JV_STR ? JSTR(*ch) : NULL, 3);
        } else if (!strcmp(name, "upper")) *out = js_case(p, n, CASE_UPPER);
        else if (!strcmp(name, "lower")) *out = js_case(p, n, CASE_LOWER);
        else if (!strcmp(name, "capitalize")) *out = js_case(p, n, CASE_CAPITALIZE);
        else if (!strcmp(name, "title")) {
            /* jinja2: each word (split on whitespace and -({[<) gets first upper, rest lower */
            jbuf b = {0};
            bool start = true;
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t w = ju_decode(p + i, n - i, &cp);
                bool sep = js_is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
                if (sep) { jbuf_put(&b, p + i, w); start = true; }
                else {
                    jv c = js_case(p + i, w, start ? CASE_UPPER : CASE_LOWER);
                    if (c.t == JV_STR) jbuf_put(&b, JSTR(c)->s, JSTR(c)->len);
                    jv_drop(c);
                    start = false;
                }
                i += w;
            }
            *out = jbuf_take(&b);
        } else if (!strcmp(name, "wordcount")) {
            int64_t k = 0;
            bool in = false;
            for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)p[i];
                bool wc = c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
                if (wc && !in) k++;
                in = wc;
            }
            *out = jv_int(k);
        } else {
            jv *o = jargs_get(a, 0, "old"), *nw = jargs_get(a, 1, "new"), *cnt = jargs_get(a, 2, "count");
            if (!o || !nw) { jv_drop(s); return jx_fail(x, "TypeError: replace filter needs old and new"); }
            jv os = jv_soft_str(*o), ns = jv_soft_str(*nw);
            if (os.t == JV_STR && ns.t == JV_STR)
                *out = js_replace(p, n, JSTR(os), JSTR(ns), cnt && cnt->t == JV_INT ? cnt->i : -1);
            jv_drop(os);
            jv_drop(ns);
        }
        jv_drop(s);
        return 0;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        switch (val.t) {
        case JV_UNDEF: *out = jv_int(0); return 0;
        case JV_STR: *out = jv_int((int64_t)ju_len(JSTR(val)->s, JSTR(val)->len)); return 0;
        case JV_LIST: *out = jv_int((int64_t)JLIST(val)->n); return 0;
        case JV_DICT: *out = jv_int((int64_t)JDICT(val)->n); return 0;
        case JV_LOOP: *out = jv_int((int64_t)JLOOP(val)->n); return 0;
        default: return jx_fail(x, "TypeError: object of type '%s' has no len()", jv_type_name(val));
        }
    }
    if (!strcmp(name, "int") || !strcmp(name, "float")) {
        bool wi = name[0] == 'i';
        jv *dv = jargs_get(a, 0, "default");
        jv dflt = dv && jv_is_num(*dv) ? *dv : wi ? jv_int(0) : jv_float(0);
        if (dv && !jv_is_num(*dv)) { *out = jv_dup(*dv); jv tmp; to_number(val, wi, jv_none(), &tmp); if (tmp.t != JV_NONE) { jv_drop(*out); *out = tmp; } return 0; }
        return to_number(val, wi, dflt, out);
    }
    if (!strcmp(name, "abs")) {
        if (val.t == JV_INT) { if (val.i == INT64_MIN) return jx_fail(x, "OverflowError: integer too large"); *out = jv_int(val.i < 0 ? -val.i : val.i); }
        else if (val.t == JV_BOOL) *out = jv_int(val.b);
        else if (val.t == JV_FLOAT) *out = jv_float(fabs(val.f));
        else return jx_fail(x, "TypeError: bad operand type for abs(): '%s'", jv_type_name(val));
        return 0;
    }
    if (!strcmp(name, "round")) return filter_round(x, val, a, out);
    if (!strcmp(name, "indent")) return filter_indent(x, val, a, out);
    if (!strcmp(name, "items")) {
        if (val.t == JV_UNDEF) { *out = jv_list(false); return 0; }
        if (val.t != JV_DICT) return jx_fail(x, "TypeError: Can only get item pairs from a mapping.");
        jv l = jv_list(false);
        for (size_t i = 0; i < JDICT(val)->n; i++) {
            jv t = jv_list(true);
            jlist_push(t, jv_dup(JDICT(val)->e[i].k));
            jlist_push(t, jv_dup(JDICT(val)->e[i].v));
            jlist_push(l, t);
        }
        *out = l;
        return 0;
    }
    /* everything below iterates */
    if (!strcmp(name, "reverse") && val.t == JV_STR) {
        jbuf b = {0};
        const char *p = JSTR(val)->s;
        size_t n = JSTR(val)->len, e = n;
        while (e > 0) {
            size_t s0 = e - 1;
            while (s0 > 0 && ((unsigned char)p[s0] & 0xc0) == 0x80 && e - s0 < 4) s0--;
            uint32_t cp;
            if (s0 + ju_decode(p + s0, e - s0, &cp) != e) s0 = e - 1;
            jbuf_put(&b, p + s0, e - s0);
            e = s0;
        }
        *out = jbuf_take(&b);
        return 0;
    }
    if (!strcmp(name, "join")) {
        const char *d = kw_str(a, 0, "d");
        const char *attr = kw_str(a, 1, "attribute");
        if ((rc = items_of(x, val, &items)) < 0) return rc;
        jbuf b = {0};
        for (size_t i = 0; i < list_n(items) && rc == 0; i++) {
            jv e = JLIST(items)->v[i], v2;
            if (attr) { if ((rc = attr_get(x, e, attr, NULL, &v2)) < 0) break; }
            else v2 = jv_dup(e);
            if (i && d) jbuf_puts(&b, d);
            jv_write(&b, v2, false, 0);
            jv_drop(v2);
        }
        jv_drop(items);
        if (rc == 0 && b.over) rc = jx_fail(x, "MemoryError: string too large");
        if (rc < 0) { jbuf_free(&b); return rc; }
        *out = jbuf_take(&b);
        return 0;
    }
    if (!strcmp(name, "select") || !strcmp(name, "reject")) return filter_select(x, val, a, false, name[0] == 's', out);
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr")) return filter_select(x, val, a, true, name[0] == 's', out);
    static const char *const iterating[] = {"list", "first", "last", "reverse", "map", "sort", "dictsort", "unique",
                                            "min", "max", "sum", "batch", NULL};
    bool known = false;
    for (int i = 0; iterating[i] && !known; i++) known = !strcmp(iterating[i], name);
    if (!known) return jx_fail(x, "TemplateAssertionError: No filter named '%s'.", name);
    if ((rc = items_of(x, val, &items)) < 0) return rc;
    size_t n = list_n(items);
    if (!strcmp(name, "list")) { *out = items; return 0; }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        if (n == 0) *out = jv_undef_msg("No %s item, sequence was empty.", name);
        else *out = jv_dup(JLIST(items)->v[name[0] == 'f' ? 0 : n - 1]);
    } else if (!strcmp(name, "reverse")) {
        jv r = jv_list(false);
        for (size_t i = n; i > 0; i--) jlist_push(r, jv_dup(JLIST(items)->v[i - 1]));
        *out = r;
    } else if (!strcmp(name, "map")) {
        const char *attr = kw_str(a, -1, "attribute");
        jv *dflt = jargs_get(a, -1, "default");
        const char *fname = attr ? NULL : kw_str(a, 0, NULL);
        if (!attr && !fname) { jv_drop(items); return jx_fail(x, "map requires a filter name or attribute="); }
        jargs rest = args_shift(a, 1);
        rest.nkw = 0;
        jv r = jv_list(false);
        for (size_t i = 0; i < n && rc == 0; i++) {
            jv m;
            if (attr) rc = attr_get(x, JLIST(items)->v[i], attr, dflt, &m);
            else rc = jx_filter(x, f, fname, JLIST(items)->v[i], &rest, &m);
            if (rc == 0) jlist_push(r, m);
        }
        if (rc < 0) jv_drop(r);
        else *out = r;
    } else if (!strcmp(name, "sort")) {
        rc = sort_list(x, items, kw_str(a, 2, "attribute"), kw_bool(a, 1, "case_sensitive", false),
                       kw_bool(a, 0, "reverse", false), -1, out);
    } else if (!strcmp(name, "dictsort")) {
        if (val.t != JV_DICT) { jv_drop(items); return jx_fail(x, "TypeError: dictsort needs a mapping"); }
        jv pairs;
        jargs none = {0};
        jfunc tmp = {.kind = FN_METHOD, .self = val, .name = "items"};
        if ((rc = jx_call_method(x, f, &tmp, &none, &pairs)) == 0) {
            const char *by = kw_str(a, 1, "by");
            int idx = by && !strcmp(by, "value") ? 1 : 0;
            rc = sort_list(x, pairs, NULL, kw_bool(a, 0, "case_sensitive", false), kw_bool(a, 2, "reverse", false), idx, out);
            jv_drop(pairs);
        }
    } else if (!strcmp(name, "unique")) {
        bool cs = kw_bool(a, 0, "case_sensitive", false);
        const char *attr = kw_str(a, 1, "attribute");
        jv seen = jv_list(false), r = jv_list(false);
        for (size_t i = 0; i < n && rc == 0; i++) {
            jv k;
            if ((rc = sort_key(x, JLIST(items)->v[i], attr, cs, &k)) < 0) break;
            bool dup = false;
            for (size_t j = 0; j < list_n(seen) && !dup; j++) dup = jv_eq(JLIST(seen)->v[j], k);
            if (!dup) { jlist_push(seen, k); jlist_push(r, jv_dup(JLIST(items)->v[i])); }
            else jv_drop(k);
        }
        jv_drop(seen);
        if (rc < 0) jv_drop(r);
        else *out = r;
    } else if (!strcmp(name, "min") || !strcmp(name, "max")) {
        if (n == 0) *out = jv_undef_msg("No aggregated item, sequence was empty.");
        else {
            jv sorted;
            rc = sort_list(x, items, kw_str(a, 1, "attribute"), kw_bool(a, 0, "case_sensitive", false), false, -1, &sorted);
            if (rc == 0) { *out = jv_dup(JLIST(sorted)->v[name[1] == 'i' ? 0 : n - 1]); jv_drop(sorted); }
        }
    } else if (!strcmp(name, "sum")) {
        const char *attr = kw_str(a, 0, "attribute");
        jv *st = jargs_get(a, 1, "start");
        jv acc = st ? jv_dup(*st) : jv_int(0);
        for (size_t i = 0; i < n && rc == 0; i++) {
            jv e, r;
            if (attr) { if ((rc = attr_get(x, JLIST(items)->v[i], attr, NULL, &e)) < 0) break; }
            else e = jv_dup(JLIST(items)->v[i]);
            if (!jv_is_num(acc) || !jv_is_num(e)) rc = jx_fail(x, "TypeError: unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(e));
            else if (acc.t == JV_FLOAT || e.t == JV_FLOAT) r = jv_float(jv_num(acc) + jv_num(e));
            else {
                int64_t s;
                if (__builtin_add_overflow((int64_t)(acc.t == JV_INT ? acc.i : acc.b), (int64_t)(e.t == JV_INT ? e.i : e.b), &s))
                    rc = jx_fail(x, "OverflowError: integer result too large");
                r = jv_int(s);
            }
            jv_drop(e);
            if (rc == 0) { jv_drop(acc); acc = r; }
        }
        if (rc < 0) jv_drop(acc);
        else *out = acc;
    } else if (!strcmp(name, "batch")) {
        jv *cnt = jargs_get(a, 0, "linecount"), *fill = jargs_get(a, 1, "fill_with");
        if (!cnt || cnt->t != JV_INT || cnt->i <= 0) { jv_drop(items); return jx_fail(x, "batch needs a positive line count"); }
        jv r = jv_list(false), cur = jv_undef();
        for (size_t i = 0; i < n; i++) {
            if (cur.t != JV_LIST) cur = jv_list(false);
            jlist_push(cur, jv_dup(JLIST(items)->v[i]));
            if ((int64_t)list_n(cur) == cnt->i) { jlist_push(r, cur); cur = jv_undef(); }
        }
        if (cur.t == JV_LIST) {
            while (fill && (int64_t)list_n(cur) < cnt->i && !jrt_cur->oom) jlist_push(cur, jv_dup(*fill));
            jlist_push(r, cur);
        }
        *out = r;
    } else {
        rc = jx_fail(x, "TemplateAssertionError: No filter named '%s'.", name);
    }
    jv_drop(items);
    return rc;
}

/* ---- tests ---- */

int jx_test(jx *x, const char *name, jv v, jargs *a, bool *res) {
    jv *arg = jargs_get(a, 0, NULL);
    int rc = 0;
    if (!strcmp(name, "defined")) *res = v.t != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *res = v.t == JV_UNDEF;
    else if (!strcmp(name, "none")) *res = v.t == JV_NONE;
    else if (!strcmp(name, "boolean")) *res = v.t == JV_BOOL;
    else if (!strcmp(name, "true")) *res = v.t == JV_BOOL && v.b;
    else if (!strcmp(name, "false")) *res = v.t == JV_BOOL && !v.b;
    else if (!strcmp(name, "integer")) *res = v.t == JV_INT;
    else if (!strcmp(name, "float")) *res = v.t == JV_FLOAT;
    else if (!strcmp(name, "number")) *res = jv_is_num(v);
    else if (!strcmp(name, "string")) *res = v.t == JV_STR;
    else if (!strcmp(name, "mapping")) *res = v.t == JV_DICT;
    else if (!strcmp(name, "iterable")) *res = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    else if (!strcmp(name, "sequence")) *res = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT;
    else if (!strcmp(name, "callable")) *res = v.t == JV_FUNC;
    else if (!strcmp(name, "escaped")) *res = false;
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        jv s = jv_soft_str(v);
        bool cased = false, ok = true;
        for (size_t i = 0; s.t == JV_STR && i < JSTR(s)->len; i++) {
            char c = JSTR(s)->s[i];
            if (c >= 'a' && c <= 'z') { cased = true; if (name[0] == 'u') ok = false; }
            if (c >= 'A' && c <= 'Z') { cased = true; if (name[0] == 'l') ok = false; }
        }
        jv_drop(s);
        *res = cased && ok;
    } else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        int64_t m = 2;
        if (name[0] == 'd') {
            if (!arg || (arg->t != JV_INT && arg->t != JV_BOOL)) return jx_fail(x, "TypeError: divisibleby needs an integer");
            m = arg->t == JV_INT ? arg->i : arg->b;
            if (m == 0) return jx_fail(x, "ZeroDivisionError: integer division or modulo by zero");
        }
        if (v.t == JV_UNDEF) return jx_undef_error(x, v);
        int64_t r;
        if (v.t == JV_INT || v.t == JV_BOOL) { int64_t i = v.t == JV_INT ? v.i : v.b; r = m == -1 ? 0 : i % m; }
        else if (v.t == JV_FLOAT) r = fmod(v.f, (double)m) != 0;
        else return jx_fail(x, "TypeError: unsupported operand type(s) for %%: '%s' and 'int'", jv_type_name(v));
        *res = name[0] == 'o' ? r != 0 : r == 0;
    } else if (!strcmp(name, "sameas")) {
        if (!arg) return jx_fail(x, "TypeError: sameas needs an argument");
        *res = v.t == arg->t && (jv_is_obj(v) ? v.o == arg->o : jv_eq(v, *arg));
    } else {
        static const struct { const char *n; int op; } cmp[] = {
            {"eq", OP_EQ}, {"equalto", OP_EQ}, {"==", OP_EQ}, {"ne", OP_NE}, {"!=", OP_NE},
            {"lt", OP_LT}, {"lessthan", OP_LT}, {"<", OP_LT}, {"le", OP_LE}, {"<=", OP_LE},
            {"gt", OP_GT}, {"greaterthan", OP_GT}, {">", OP_GT}, {"ge", OP_GE}, {">=", OP_GE}, {"in", OP_IN}};
        for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
            if (strcmp(name, cmp[i].n)) continue;
            if (!arg) return jx_fail(x, "TypeError: test '%s' needs an argument", name);
            int op = cmp[i].op, c;
            if (op == OP_EQ) { *res = jv_eq(v, *arg); return 0; }
            if (op == OP_NE) { *res = !jv_eq(v, *arg); return 0; }
            if (op == OP_IN) {
                jv items;
                if (arg->t == JV_STR) {
                    if (v.t != JV_STR) return jx_fail(x, "TypeError: 'in <string>' requires string as left operand, not %s", jv_type_name(v));
                    *res = memmem(JSTR(*arg)->s, JSTR(*arg)->len, JSTR(v)->s, JSTR(v)->len) != NULL || JSTR(v)->len == 0;
                    return 0;
                }
                if ((rc = jx_iter_items(x, *arg, &items)) < 0) return rc;
                *res = false;
                for (size_t j = 0; j < list_n(items) && !*res; j++) *res = jv_eq(JLIST(items)->v[j], v);
                jv_drop(items);
                return 0;
            }
            if (v.t == JV_UNDEF) return jx_undef_error(x, v);
            if (jv_cmp(v, *arg, &c) < 0) return err_wrap(KS_EINVAL, "chat template line %d", x->line);
            *res = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
            return 0;
        }
        return jx_fail(x, "TemplateAssertionError: No test named '%s'.", name);
    }
    return rc;
}
