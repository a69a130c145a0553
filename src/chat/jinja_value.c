/* jinja_value.c — the interpreter's runtime values: refcounted strings,
 * lists, ordered dicts and namespaces, functions and loop objects, all
 * registered with the render's jrt so that cycles are freed at the end and
 * memory is budgeted; Python semantics for truth, ==, ordering, str()/repr()
 * and json.dumps (transformers' tojson); conversion from jansson; UTF-8 and
 * growable-buffer helpers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jinja_internal.h"

_Thread_local jrt *jrt_cur;

/* ---- buffers ---- */

int jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->over) return -1;
    if (n > JJ_MAX_OUTPUT || b->n + n > JJ_MAX_OUTPUT) { b->over = true; return -1; }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->over = true; return -1; }
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}
int jbuf_puts(jbuf *b, const char *s) { return jbuf_put(b, s, strlen(s)); }
int jbuf_putc(jbuf *b, char c) { return jbuf_put(b, &c, 1); }
void jbuf_free(jbuf *b) { free(b->p); memset(b, 0, sizeof *b); }
jv jbuf_take(jbuf *b) {
    jv v = jv_str(b->p ? b->p : "", b->n);
    jbuf_free(b);
    return v;
}

/* ---- UTF-8 ---- */

size_t ju_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) { *cp = 0; return 1; }
    unsigned c = u[0];
    size_t w = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (w == 0 || w > n) { *cp = c; return 1; }
    uint32_t v = w == 1 ? c : w == 2 ? (c & 0x1f) : w == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t i = 1; i < w; i++) {
        if ((u[i] & 0xc0) != 0x80) { *cp = c; return 1; }
        v = (v << 6) | (u[i] & 0x3f);
    }
    *cp = v;
    return w;
}
size_t ju_len(const char *s, size_t n) {
    size_t k = 0;
    uint32_t cp;
    for (size_t i = 0; i < n; k++) i += ju_decode(s + i, n - i, &cp);
    return k;
}
size_t ju_offset(const char *s, size_t n, size_t cpi) {
    size_t i = 0;
    uint32_t cp;
    for (size_t k = 0; k < cpi && i < n; k++) i += ju_decode(s + i, n - i, &cp);
    return i;
}
void ju_encode(jbuf *b, uint32_t cp) {
    char t[4];
    if (cp < 0x80) { t[0] = (char)cp; jbuf_put(b, t, 1); }
    else if (cp < 0x800) { t[0] = (char)(0xc0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3f)); jbuf_put(b, t, 2); }
    else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); t[2] = (char)(0x80 | (cp & 0x3f));
        jbuf_put(b, t, 3);
    } else {
        t[0] = (char)(0xf0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); t[3] = (char)(0x80 | (cp & 0x3f));
        jbuf_put(b, t, 4);
    }
}

/* ---- object registry ---- */

void jrt_init(jrt *rt) {
    memset(rt, 0, sizeof *rt);
    rt->head.prev = rt->head.next = &rt->head;
}

static void *obj_new(jv_type kind, size_t size) {
    jrt *rt = jrt_cur;
    if (!rt || rt->oom) { if (rt) rt->oom = true; return NULL; }
    if (rt->mem + size > JJ_MAX_MEMORY) { rt->oom = true; return NULL; }
    jobj *o = calloc(1, size);
    if (!o) { rt->oom = true; return NULL; }
    o->refc = 1;
    o->kind = (uint8_t)kind;
    o->bytes = size;
    rt->mem += size;
    o->next = rt->head.next;
    o->prev = &rt->head;
    rt->head.next->prev = o;
    rt->head.next = o;
    return o;
}

static void obj_release(jobj *o) {
    o->prev->next = o->next;
    o->next->prev = o->prev;
    if (jrt_cur) jrt_cur->mem -= o->bytes;
    switch (o->kind) {
    case JV_LIST: free(((jlist *)o)->v); break;
    case JV_DICT: case JV_NS: free(((jdict *)o)->e); free(((jdict *)o)->idx); break;
    case JV_FUNC: free(((jfunc *)o)->name); break;
    default: break;
    }
    free(o);
}

void jrt_free_all(jrt *rt) {
    while (rt->head.next != &rt->head) obj_release(rt->head.next);
}

jv jv_dup(jv v) {
    if (jv_is_obj(v)) v.o->refc++;
    return v;
}

void jv_drop(jv v) {
    if (!jv_is_obj(v)) return;
    jobj *o = v.o;
    if (--o->refc > 0) return;
    switch (o->kind) {
    case JV_LIST: {
        jlist *l = (jlist *)o;
        for (size_t i = 0; i < l->n; i++) jv_drop(l->v[i]);
        break;
    }
    case JV_DICT: case JV_NS: {
        jdict *d = (jdict *)o;
        for (size_t i = 0; i < d->n; i++) { jv_drop(d->e[i].k); jv_drop(d->e[i].v); }
        break;
    }
    case JV_FUNC: jv_drop(((jfunc *)o)->self); break;
    case JV_LOOP: jv_drop(((jloop *)o)->items); break;
    default: break;
    }
    obj_release(o);
}

jv jv_str(const char *s, size_t n) {
    if (n > JJ_MAX_OUTPUT) { if (jrt_cur) jrt_cur->oom = true; return jv_undef(); }
    jstr *o = obj_new(JV_STR, sizeof(jstr) + n + 1);
    if (!o) return jv_undef();
    if (n) memcpy(o->s, s, n);
    o->s[n] = 0;
    o->len = n;
    jv v = {.t = JV_STR};
    v.o = &o->h;
    return v;
}
jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }

jv jv_list(bool tuple) {
    jlist *o = obj_new(JV_LIST, sizeof(jlist));
    if (!o) return jv_undef();
    o->tuple = tuple;
    jv v = {.t = JV_LIST};
    v.o = &o->h;
    return v;
}

jv jv_dict(jv_type kind) {
    jdict *o = obj_new(kind, sizeof(jdict));
    if (!o) return jv_undef();
    jv v = {.t = kind};
    v.o = &o->h;
    return v;
}

jv jv_func(int kind, const char *name) {
    jfunc *o = obj_new(JV_FUNC, sizeof(jfunc));
    if (!o) return jv_undef();
    o->kind = kind;
    o->self = jv_undef();
    o->name = strdup(name ? name : "");
    if (!o->name) jrt_cur->oom = true;
    jv v = {.t = JV_FUNC};
    v.o = &o->h;
    return v;
}

jv jv_loop(jv items) {
    jloop *o = obj_new(JV_LOOP, sizeof(jloop));
    if (!o) { jv_drop(items); return jv_undef(); }
    o->items = items;
    o->n = items.t == JV_LIST ? JLIST(items)->n : 0;
    jv v = {.t = JV_LOOP};
    v.o = &o->h;
    return v;
}

jv jv_undef_msg(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jv s = jv_cstr(buf);
    jv u = jv_undef();
    if (s.t == JV_STR) u.o = s.o;
    return u;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 4;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

void jlist_push(jv list, jv item) {
    if (list.t != JV_LIST) { jv_drop(item); return; }
    jlist *l = JLIST(list);
    size_t oldcap = l->cap;
    if (l->n >= JJ_MAX_LIST || !grow((void **)&l->v, &l->cap, l->n + 1, sizeof(jv))) {
        jrt_cur->oom = true;
        jv_drop(item);
        return;
    }
    jrt_cur->mem += (l->cap - oldcap) * sizeof(jv);
    l->h.bytes += (l->cap - oldcap) * sizeof(jv);
    if (jrt_cur->mem > JJ_MAX_MEMORY) jrt_cur->oom = true;
    l->v[l->n++] = item;
}

/* ---- dicts ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}
static uint64_t jv_hash(jv k) {
    switch (k.t) {
    case JV_STR: return hash_bytes(JSTR(k)->s, JSTR(k)->len);
    case JV_BOOL: return (uint64_t)k.b * 0x9E3779B97F4A7C15ull;
    case JV_INT: return (uint64_t)k.i * 0x9E3779B97F4A7C15ull;
    case JV_FLOAT:
        if (k.f == floor(k.f) && fabs(k.f) < 9e18) return (uint64_t)(int64_t)k.f * 0x9E3779B97F4A7C15ull;
        return hash_bytes((const char *)&k.f, sizeof k.f);
    case JV_NONE: return 7;
    default: return (uint64_t)(uintptr_t)k.o;
    }
}

static void dict_reindex(jdict *d) {
    free(d->idx);
    d->idx = NULL;
    d->icap = 0;
    if (d->n < 8) return;
    size_t cap = 16;
    while (cap < d->n * 2) cap *= 2;
    d->idx = malloc(cap * sizeof *d->idx);
    if (!d->idx) return;  /* linear search still works */
    memset(d->idx, 0xff, cap * sizeof *d->idx);
    d->icap = cap;
    for (size_t i = 0; i < d->n; i++) {
        size_t h = (size_t)jv_hash(d->e[i].k) & (cap - 1);
        while (d->idx[h] != UINT32_MAX) h = (h + 1) & (cap - 1);
        d->idx[h] = (uint32_t)i;
    }
}

static jdent *dict_find(jdict *d, jv key) {
    if (d->idx) {
        size_t h = (size_t)jv_hash(key) & (d->icap - 1);
        while (d->idx[h] != UINT32_MAX) {
            jdent *e = &d->e[d->idx[h]];
            if (jv_eq(e->k, key)) return e;
            h = (h + 1) & (d->icap - 1);
        }
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->e[i].k, key)) return &d->e[i];
    return NULL;
}

jv *jdict_get(jv dict, jv key) {
    if (dict.t != JV_DICT && dict.t != JV_NS) return NULL;
    jdent *e = dict_find(JDICT(dict), key);
    return e ? &e->v : NULL;
}

jv *jdict_gets(jv dict, const char *key) {
    if (dict.t != JV_DICT && dict.t != JV_NS) return NULL;
    jdict *d = JDICT(dict);
    size_t n = strlen(key);
    if (d->idx) {
        size_t h = (size_t)hash_bytes(key, n) & (d->icap - 1);
        while (d->idx[h] != UINT32_MAX) {
            jdent *e = &d->e[d->idx[h]];
            if (e->k.t == JV_STR && JSTR(e->k)->len == n && !memcmp(JSTR(e->k)->s, key, n)) return &e->v;
            h = (h + 1) & (d->icap - 1);
        }
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++) {
        jv k = d->e[i].k;
        if (k.t == JV_STR && JSTR(k)->len == n && !memcmp(JSTR(k)->s, key, n)) return &d->e[i].v;
    }
    return NULL;
}

void jdict_set(jv dict, jv key, jv val) {
    if (dict.t != JV_DICT && dict.t != JV_NS) { jv_drop(key); jv_drop(val); return; }
    jdict *d = JDICT(dict);
    jdent *e = dict_find(d, key);
    if (e) {
        jv_drop(e->v);
        e->v = val;
        jv_drop(key);
        return;
    }
    size_t oldcap = d->cap;
    if (d->n >= JJ_MAX_LIST || !grow((void **)&d->e, &d->cap, d->n + 1, sizeof(jdent))) {
        jrt_cur->oom = true;
        jv_drop(key);
        jv_drop(val);
        return;
    }
    jrt_cur->mem += (d->cap - oldcap) * sizeof(jdent);
    d->h.bytes += (d->cap - oldcap) * sizeof(jdent);
    if (jrt_cur->mem > JJ_MAX_MEMORY) jrt_cur->oom = true;
    d->e[d->n].k = key;
    d->e[d->n].v = val;
    d->n++;
    if (d->n >= 8 && (d->n * 2 > d->icap)) {
        dict_reindex(d);
    } else if (d->idx) {
        size_t h = (size_t)jv_hash(key) & (d->icap - 1);
        while (d->idx[h] != UINT32_MAX) h = (h + 1) & (d->icap - 1);
        d->idx[h] = (uint32_t)(d->n - 1);
    }
}

/* ---- Python semantics ---- */

bool jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return JSTR(v)->len != 0;
    case JV_LIST: return JLIST(v)->n != 0;
    case JV_DICT: return JDICT(v)->n != 0;
    default: return true;
    }
}

bool jv_is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
double jv_num(jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.t == JV_BOOL ? v.b : 0; }

bool jv_eq(jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.i : a.b) == (b.t == JV_INT ? b.i : b.b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return JSTR(a)->len == JSTR(b)->len && !memcmp(JSTR(a)->s, JSTR(b)->s, JSTR(a)->len);
    case JV_LIST: {
        jlist *x = JLIST(a), *y = JLIST(b);
        if (x == y) return true;
        if (x->n != y->n || x->tuple != y->tuple) return false;
        for (size_t i = 0; i < x->n; i++) if (!jv_eq(x->v[i], y->v[i])) return false;
        return true;
    }
    case JV_DICT: {
        jdict *x = JDICT(a), *y = JDICT(b);
        if (x == y) return true;
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            jv *o = jdict_get(b, x->e[i].k);
            if (!o || !jv_eq(x->e[i].v, *o)) return false;
        }
        return true;
    }
    default: return a.o == b.o;
    }
}

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return JLIST(v)->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return JFUNC(v)->kind == FN_MACRO ? "Macro" : "function";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

int jv_cmp(jv a, jv b, int *res) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_INT ? a.i : a.b, y = b.t == JV_INT ? b.i : b.b;
            *res = x < y ? -1 : x > y;
        } else {
            double x = jv_num(a), y = jv_num(b);
            *res = x < y ? -1 : x > y;
        }
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = JSTR(a)->len < JSTR(b)->len ? JSTR(a)->len : JSTR(b)->len;
        int c = memcmp(JSTR(a)->s, JSTR(b)->s, n);
        *res = c ? (c < 0 ? -1 : 1) : (JSTR(a)->len < JSTR(b)->len ? -1 : JSTR(a)->len > JSTR(b)->len);
        return 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && JLIST(a)->tuple == JLIST(b)->tuple) {
        jlist *x = JLIST(a), *y = JLIST(b);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (jv_eq(x->v[i], y->v[i])) continue;
            return jv_cmp(x->v[i], y->v[i], res);
        }
        *res = x->n < y->n ? -1 : x->n > y->n;
        return 0;
    }
    return err_set(KS_EINVAL, "TypeError: '<' not supported between instances of '%s' and '%s'",
                   jv_type_name(a), jv_type_name(b));
}

/* ---- str() / repr() ---- */

void jv_write_float(jbuf *b, double f) {
    char buf[64];
    if (isnan(f)) { jbuf_puts(b, "nan"); return; }
    if (isinf(f)) { jbuf_puts(b, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { jbuf_puts(b, signbit(f) ? "-0.0" : "0.0"); return; }
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf = [-]d.ddde[+-]xx: digits and exponent */
    char digits[32];
    int nd = 0, exp10;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++) if (*p != '.') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[k++] = '0'; out[k++] = '.';
            for (int i = -1; i > exp10; i--) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > exp10 + 1) for (int i = exp10 + 1; i < nd; i++) out[k++] = digits[i];
            else out[k++] = '0';
        }
        out[k] = 0;
    } else {
        out[k++] = digits[0];
        if (nd > 1) { out[k++] = '.'; for (int i = 1; i < nd; i++) out[k++] = digits[i]; }
        snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    jbuf_puts(b, out);
}

static void write_repr_str(jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t w = ju_decode(s + i, n - i, &cp);
        char t[16];
        if (cp == (uint32_t)q || cp == '\\') { jbuf_putc(b, '\\'); jbuf_putc(b, (char)cp); }
        else if (cp == '\n') jbuf_puts(b, "\\n");
        else if (cp == '\r') jbuf_puts(b, "\\r");
        else if (cp == '\t') jbuf_puts(b, "\\t");
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || (w == 1 && cp >= 0x80)) {
            snprintf(t, sizeof t, "\\x%02x", cp & 0xff); jbuf_puts(b, t);
        } else jbuf_put(b, s + i, w);
        i += w;
    }
    jbuf_putc(b, q);
}

int jv_write(jbuf *b, jv v, bool repr, int depth) {
    if (depth > JJ_MAX_CALL_DEPTH) return jbuf_puts(b, "...");
    char t[64];
    switch (v.t) {
    case JV_UNDEF: if (repr) jbuf_puts(b, "Undefined"); break;
    case JV_NONE: jbuf_puts(b, "None"); break;
    case JV_BOOL: jbuf_puts(b, v.b ? "True" : "False"); break;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v.i); jbuf_puts(b, t); break;
    case JV_FLOAT: jv_write_float(b, v.f); break;
    case JV_STR:
        if (repr) write_repr_str(b, JSTR(v)->s, JSTR(v)->len);
        else jbuf_put(b, JSTR(v)->s, JSTR(v)->len);
        break;
    case JV_LIST: {
        jlist *l = JLIST(v);
        jbuf_putc(b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n && !b->over; i++) {
            if (i) jbuf_puts(b, ", ");
            jv_write(b, l->v[i], true, depth + 1);
        }
        if (l->tuple && l->n == 1) jbuf_putc(b, ',');
        jbuf_putc(b, l->tuple ? ')' : ']');
        break;
    }
    case JV_DICT: case JV_NS: {
        jdict *d = JDICT(v);
        if (v.t == JV_NS) jbuf_puts(b, "<Namespace ");
        jbuf_putc(b, '{');
        for (size_t i = 0; i < d->n && !b->over; i++) {
            if (i) jbuf_puts(b, ", ");
            jv_write(b, d->e[i].k, true, depth + 1);
            jbuf_puts(b, ": ");
            jv_write(b, d->e[i].v, true, depth + 1);
        }
        jbuf_putc(b, '}');
        if (v.t == JV_NS) jbuf_putc(b, '>');
        break;
    }
    case JV_FUNC:
        if (JFUNC(v)->kind == FN_MACRO) {
            jbuf_puts(b, "<Macro ");
            write_repr_str(b, JFUNC(v)->name, strlen(JFUNC(v)->name));
            jbuf_putc(b, '>');
        } else {
            jbuf_puts(b, "<built-in method ");
            jbuf_puts(b, JFUNC(v)->name);
            jbuf_putc(b, '>');
        }
        break;
    case JV_LOOP:
        snprintf(t, sizeof t, "<LoopContext %zu/%zu>", JLOOP(v)->i + 1, JLOOP(v)->n);
        jbuf_puts(b, t);
        break;
    }
    return b->over ? -1 : 0;
}

/* ---- json.dumps ---- */

static void json_str(jbuf *b, const char *s, size_t n, bool ascii) {
    jbuf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char t[16];
        size_t w = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) { snprintf(t, sizeof t, "\\u%04x", c); esc = t; }
        else if (c >= 0x80 && ascii) {
            uint32_t cp;
            w = ju_decode(s + i, n - i, &cp);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(t, sizeof t, "\\u%04x", cp);
            }
            esc = t;
        }
        if (esc) {
            jbuf_put(b, s + i - run, run);
            run = 0;
            jbuf_puts(b, esc);
        } else {
            run++;
        }
        i += w;
    }
    jbuf_put(b, s + n - run, run);
    jbuf_putc(b, '"');
}

static int json_key(jbuf *b, jv k, bool ascii) {
    switch (k.t) {
    case JV_STR: json_str(b, JSTR(k)->s, JSTR(k)->len, ascii); return 0;
    case JV_BOOL: jbuf_puts(b, k.b ? "\"true\"" : "\"false\""); return 0;
    case JV_NONE: jbuf_puts(b, "\"null\""); return 0;
    case JV_INT: case JV_FLOAT: jbuf_putc(b, '"'); jv_write(b, k, false, 0); jbuf_putc(b, '"'); return 0;
    default:
        return err_set(KS_EINVAL, "TypeError: keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static void json_nl(jbuf *b, const char *indent, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < level && !b->over; i++) jbuf_puts(b, indent);
}

static int key_cmp(const void *x, const void *y) {
    const jdent *a = *(const jdent *const *)x, *c = *(const jdent *const *)y;
    int r = 0;
    if (jv_cmp(a->k, c->k, &r) < 0) return 0;
    return r;
}

int jv_tojson(jbuf *b, jv v, const jjson_opts *o, int depth) {
    if (depth > JJ_MAX_CALL_DEPTH) return err_set(KS_EINVAL, "ValueError: value nested too deeply for tojson");
    const char *isep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    int rc = 0;
    switch (v.t) {
    case JV_NONE: jbuf_puts(b, "null"); break;
    case JV_BOOL: jbuf_puts(b, v.b ? "true" : "false"); break;
    case JV_INT: jv_write(b, v, false, 0); break;
    case JV_FLOAT:
        if (isnan(v.f)) jbuf_puts(b, "NaN");
        else if (isinf(v.f)) jbuf_puts(b, v.f < 0 ? "-Infinity" : "Infinity");
        else jv_write_float(b, v.f);
        break;
    case JV_STR: json_str(b, JSTR(v)->s, JSTR(v)->len, o->ensure_ascii); break;
    case JV_LIST: {
        jlist *l = JLIST(v);
        if (l->n == 0) { jbuf_puts(b, "[]"); break; }
        jbuf_putc(b, '[');
        for (size_t i = 0; i < l->n && rc == 0 && !b->over; i++) {
            if (i) jbuf_puts(b, isep);
            if (o->indent) json_nl(b, o->indent, depth + 1);
            rc = jv_tojson(b, l->v[i], o, depth + 1);
        }
        if (o->indent) json_nl(b, o->indent, depth);
        jbuf_putc(b, ']');
        break;
    }
    case JV_DICT: {
        jdict *d = JDICT(v);
        if (d->n == 0) { jbuf_puts(b, "{}"); break; }
        jdent **order = malloc(d->n * sizeof *order);
        if (!order) return err_set(KS_ENOMEM, "tojson: out of memory");
        for (size_t i = 0; i < d->n; i++) order[i] = &d->e[i];
        if (o->sort_keys) qsort(order, d->n, sizeof *order, key_cmp);
        jbuf_putc(b, '{');
        for (size_t i = 0; i < d->n && rc == 0 && !b->over; i++) {
            if (i) jbuf_puts(b, isep);
            if (o->indent) json_nl(b, o->indent, depth + 1);
            if ((rc = json_key(b, order[i]->k, o->ensure_ascii)) < 0) break;
            jbuf_puts(b, ksep);
            rc = jv_tojson(b, order[i]->v, o, depth + 1);
        }
        free(order);
        if (o->indent) json_nl(b, o->indent, depth);
        jbuf_putc(b, '}');
        break;
    }
    default:
        return err_set(KS_EINVAL, "TypeError: Object of type %s is not JSON serializable", jv_type_name(v));
    }
    if (rc == 0 && b->over) return err_set(KS_EINVAL, "output too large (limit %zu bytes)", JJ_MAX_OUTPUT);
    return rc;
}

/* ---- from jansson ---- */

int jv_from_json(const json_t *j, jv *out, int depth) {
    if (depth > JJ_MAX_CALL_DEPTH) return err_set(KS_EINVAL, "chat template input nested too deeply (limit %d)", JJ_MAX_CALL_DEPTH);
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_TRUE: *out = jv_bool(1); return 0;
    case JSON_FALSE: *out = jv_bool(0); return 0;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_STRING: *out = jv_str(json_string_value(j), json_string_length(j)); return 0;
    case JSON_ARRAY: {
        jv l = jv_list(false);
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e) {
            jv x;
            int rc = jv_from_json(e, &x, depth + 1);
            if (rc < 0) { jv_drop(l); return rc; }
            jlist_push(l, x);
        }
        *out = l;
        return 0;
    }
    case JSON_OBJECT: {
        jv d = jv_dict(JV_DICT);
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)j, k, e) {
            jv x;
            int rc = jv_from_json(e, &x, depth + 1);
            if (rc < 0) { jv_drop(d); return rc; }
            jdict_set(d, jv_cstr(k), x);
        }
        *out = d;
        return 0;
    }
    }
    *out = jv_none();
    return 0;
}
