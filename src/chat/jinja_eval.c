/* jinja_eval.c — renders a parsed template: scopes (frames), expression
 * evaluation with jinja2/Python semantics (undefined handling, arithmetic,
 * comparisons, `in`, and/or returning operands), statements (if, for with
 * loop object and else, set / namespace attributes / block set, macros and
 * call blocks, filter blocks, with, break/continue) and jinja_render().
 * Limits: output size, memory, iterations, macro depth, recursion depth. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jinja_internal.h"

enum { JX_BREAK = 1, JX_CONTINUE = 2 };

int jx_fail(jx *x, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(KS_EINVAL, "chat template line %d: %s", x->line, msg);
}

int jx_undef_error(jx *x, jv u) {
    if (u.o) {
        const char *m = JSTR(u)->s;
        if (!strncmp(m, "SecurityError", 13)) return jx_fail(x, "%s", m);
        return jx_fail(x, "UndefinedError: %s", m);
    }
    return jx_fail(x, "UndefinedError: value is undefined");
}

/* ---- frames ---- */

static jframe *frame_new(jframe *parent) {
    jframe *f = calloc(1, sizeof *f);
    if (f) f->parent = parent;
    return f;
}
static void frame_free(jframe *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) { free(f->names[i]); jv_drop(f->vals[i]); }
    free(f->names);
    free(f->vals);
    free(f);
}
jv *jframe_lookup(jframe *f, const char *name) {
    for (; f; f = f->parent)
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->names[i], name)) return &f->vals[i];
    return NULL;
}
int jframe_set(jframe *f, const char *name, jv v) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) { jv_drop(f->vals[i]); f->vals[i] = v; return 0; }
    if (f->n == f->cap) {
        int nc = f->cap ? f->cap * 2 : 8;
        char **nn = realloc(f->names, (size_t)nc * sizeof *nn);
        if (nn) f->names = nn;
        jv *nv = nn ? realloc(f->vals, (size_t)nc * sizeof *nv) : NULL;
        if (nv) f->vals = nv;
        if (!nn || !nv) { jv_drop(v); return err_set(KS_ENOMEM, "chat template: out of memory"); }
        f->cap = nc;
    }
    if (!(f->names[f->n] = strdup(name))) { jv_drop(v); return err_set(KS_ENOMEM, "chat template: out of memory"); }
    f->vals[f->n++] = v;
    return 0;
}

/* ---- arguments ---- */

jv *jargs_get(jargs *a, int j, const char *name) {
    if (j >= 0 && j < a->npos) return &a->pos[j];
    if (name)
        for (int i = 0; i < a->nkw; i++)
            if (!strcmp(a->kwn[i], name)) return &a->kwv[i];
    return NULL;
}

static void args_free(jargs *a) {
    for (int i = 0; i < a->npos; i++) jv_drop(a->pos[i]);
    for (int i = 0; i < a->nkw; i++) jv_drop(a->kwv[i]);
    free(a->pos);
    free(a->kwv);
    memset(a, 0, sizeof *a);
}

/* Evaluates n's positional (kids) and keyword (names/kwv) arguments; extra
 * slots for one more keyword (the call block's caller). */
static int args_eval(jx *x, jframe *f, const jnode *n, jargs *a) {
    memset(a, 0, sizeof *a);
    a->pos = calloc((size_t)n->kids.n + 1, sizeof(jv));
    a->kwv = calloc((size_t)n->kwv.n + 1, sizeof(jv));
    a->kwn = n->names;
    if (!a->pos || !a->kwv) { args_free(a); return err_set(KS_ENOMEM, "chat template: out of memory"); }
    for (int i = 0; i < n->kids.n; i++) {
        int rc = jx_eval(x, f, n->kids.v[i], &a->pos[i]);
        if (rc < 0) { args_free(a); return rc; }
        a->npos++;
    }
    for (int i = 0; i < n->kwv.n; i++) {
        int rc = jx_eval(x, f, n->kwv.v[i], &a->kwv[i]);
        if (rc < 0) { args_free(a); return rc; }
        a->nkw++;
    }
    return 0;
}

/* ---- output ---- */

static int out_check(jx *x) {
    if (x->out->over) return jx_fail(x, "output too large (limit %zu bytes)", JJ_MAX_OUTPUT);
    if (jrt_cur->oom) return jx_fail(x, "out of memory (template values exceed %zu bytes or allocation failed)", JJ_MAX_MEMORY);
    return 0;
}

static int out_value(jx *x, jv v) {
    jv_write(x->out, v, false, 0);
    return out_check(x);
}

static int exec_body(jx *x, jframe *f, const jnodes *body);

/* Renders body into a fresh buffer (new frame child of f unless same) and
 * returns it as a string value. */
static int capture(jx *x, jframe *f, const jnodes *body, bool new_frame, jv *out) {
    jbuf b = {0}, *saved = x->out;
    jframe *g = new_frame ? frame_new(f) : f;
    if (!g) return err_set(KS_ENOMEM, "chat template: out of memory");
    x->out = &b;
    int rc = exec_body(x, g, body);
    x->out = saved;
    if (new_frame) frame_free(g);
    if (rc < 0) { jbuf_free(&b); return rc; }
    if (b.over) { jbuf_free(&b); return jx_fail(x, "output too large (limit %zu bytes)", JJ_MAX_OUTPUT); }
    *out = jbuf_take(&b);
    return out_check(x);
}

/* ---- calls ---- */

static int call_macro(jx *x, jfunc *fn, jargs *a, jv *out) {
    const jnode *m = fn->macro;
    if (x->depth >= JJ_MAX_MACRO_DEPTH)
        return jx_fail(x, "RecursionError: macro calls nested deeper than %d", JJ_MAX_MACRO_DEPTH);
    if (m->kind == S_CALLBLOCK && !fn->frame)
        return jx_fail(x, "caller() used after its call block ended");
    if (a->npos > m->nnames)
        return jx_fail(x, "TypeError: macro '%s' takes not more than %d argument(s)", fn->name, m->nnames);
    for (int i = 0; i < a->nkw; i++) {
        bool ok = !strcmp(a->kwn[i], "caller") && m->kind == S_MACRO;
        for (int j = 0; j < m->nnames && !ok; j++) ok = !strcmp(m->names[j], a->kwn[i]);
        if (!ok) return jx_fail(x, "TypeError: macro '%s' takes no keyword argument '%s'", fn->name, a->kwn[i]);
    }
    jframe *g = frame_new(m->kind == S_CALLBLOCK ? (jframe *)fn->frame : x->root);
    if (!g) return err_set(KS_ENOMEM, "chat template: out of memory");
    int rc = 0;
    x->depth++;
    for (int j = 0; j < m->nnames && rc == 0; j++) {
        jv *v = jargs_get(a, j, m->names[j]);
        jv val;
        if (v) val = jv_dup(*v);
        else if (m->kwv.v[j]) { if ((rc = jx_eval(x, g, m->kwv.v[j], &val)) < 0) break; }
        else val = jv_undef_msg("parameter '%s' was not provided", m->names[j]);
        rc = jframe_set(g, m->names[j], val);
    }
    if (rc == 0 && m->kind == S_MACRO) {
        jv *c = jargs_get(a, -1, "caller");
        if (c) rc = jframe_set(g, "caller", jv_dup(*c));
    }
    if (rc == 0) rc = capture(x, g, &m->body, false, out);
    x->depth--;
    frame_free(g);
    return rc;
}

int jx_call(jx *x, jframe *f, jv callee, jargs *a, jv *out) {
    if (callee.t == JV_UNDEF) return jx_undef_error(x, callee);
    if (callee.t != JV_FUNC) return jx_fail(x, "TypeError: '%s' object is not callable", jv_type_name(callee));
    jfunc *fn = JFUNC(callee);
    if (fn->kind == FN_MACRO) return call_macro(x, fn, a, out);
    return jx_call_method(x, f, fn, a, out);
}

/* ---- operators ---- */

static int arith_type_error(jx *x, const char *op, jv a, jv b) {
    if (a.t == JV_STR && !strcmp(op, "+"))
        return jx_fail(x, "TypeError: can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (a.t == JV_LIST && !strcmp(op, "+"))
        return jx_fail(x, "TypeError: can only concatenate %s (not \"%s\") to %s", jv_type_name(a), jv_type_name(b), jv_type_name(a));
    return jx_fail(x, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static int repeat(jx *x, jv seq, int64_t k, jv *out) {
    if (k < 0) k = 0;
    if (seq.t == JV_STR) {
        jstr *s = JSTR(seq);
        if (s->len && (uint64_t)k > JJ_MAX_OUTPUT / s->len) return jx_fail(x, "MemoryError: string repetition too large");
        jbuf b = {0};
        for (int64_t i = 0; i < k; i++) jbuf_put(&b, s->s, s->len);
        *out = jbuf_take(&b);
        return 0;
    }
    jlist *l = JLIST(seq);
    if (l->n && (uint64_t)k > JJ_MAX_LIST / l->n) return jx_fail(x, "MemoryError: list repetition too large");
    jv r = jv_list(l->tuple);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < l->n; j++) jlist_push(r, jv_dup(l->v[j]));
    *out = r;
    return 0;
}

static int binop(jx *x, int op, jv a, jv b, jv *out) {
    static const char *names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF) return jx_undef_error(x, a);
    if (b.t == JV_UNDEF) return jx_undef_error(x, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t ia = a.t == JV_INT ? a.i : a.b, ib = b.t == JV_INT ? b.i : b.b, r;
        double fa = jv_num(a), fb = jv_num(b);
        switch (op) {
        case OP_ADD:
            if (ints) { if (__builtin_add_overflow(ia, ib, &r)) goto overflow; *out = jv_int(r); }
            else *out = jv_float(fa + fb);
            return 0;
        case OP_SUB:
            if (ints) { if (__builtin_sub_overflow(ia, ib, &r)) goto overflow; *out = jv_int(r); }
            else *out = jv_float(fa - fb);
            return 0;
        case OP_MUL:
            if (ints) { if (__builtin_mul_overflow(ia, ib, &r)) goto overflow; *out = jv_int(r); }
            else *out = jv_float(fa * fb);
            return 0;
        case OP_DIV:
            if (fb == 0) return jx_fail(x, "ZeroDivisionError: division by zero");
            *out = jv_float(fa / fb);
            return 0;
        case OP_FLOORDIV: case OP_MOD:
            if (ints) {
                if (ib == 0) return jx_fail(x, op == OP_MOD ? "ZeroDivisionError: integer modulo by zero" : "ZeroDivisionError: integer division or modulo by zero");
                if (ia == INT64_MIN && ib == -1) goto overflow;
                int64_t q = ia / ib, m = ia % ib;
                if (m != 0 && ((m < 0) != (ib < 0))) { q--; m += ib; }
                *out = jv_int(op == OP_MOD ? m : q);
            } else {
                if (fb == 0) return jx_fail(x, "ZeroDivisionError: float modulo");
                double m = fmod(fa, fb);
                if (m != 0 && ((m < 0) != (fb < 0))) m += fb;
                *out = jv_float(op == OP_MOD ? m : floor(fa / fb));
            }
            return 0;
        case OP_POW:
            if (ints && ib >= 0) {
                int64_t acc = 1, base = ia;
                for (int64_t e = ib; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) goto overflow;
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
                }
                *out = jv_int(acc);
            } else {
                if (fa == 0 && fb < 0) return jx_fail(x, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
                *out = jv_float(pow(fa, fb));
            }
            return 0;
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        jbuf s = {0};
        jbuf_put(&s, JSTR(a)->s, JSTR(a)->len);
        jbuf_put(&s, JSTR(b)->s, JSTR(b)->len);
        if (s.over) { jbuf_free(&s); return jx_fail(x, "MemoryError: string too large"); }
        *out = jbuf_take(&s);
        return 0;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && JLIST(a)->tuple == JLIST(b)->tuple) {
        jv r = jv_list(JLIST(a)->tuple);
        for (size_t i = 0; i < JLIST(a)->n; i++) jlist_push(r, jv_dup(JLIST(a)->v[i]));
        for (size_t i = 0; i < JLIST(b)->n; i++) jlist_push(r, jv_dup(JLIST(b)->v[i]));
        *out = r;
        return 0;
    }
    if (op == OP_MUL) {
        if ((a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL)) return repeat(x, a, b.t == JV_INT ? b.i : b.b, out);
        if ((b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL)) return repeat(x, b, a.t == JV_INT ? a.i : a.b, out);
    }
    return arith_type_error(x, names[op], a, b);
overflow:
    return jx_fail(x, "OverflowError: integer result too large");
}

/* item in container */
static int contains(jx *x, jv item, jv c, bool *res) {
    *res = false;
    switch (c.t) {
    case JV_UNDEF: return 0;
    case JV_STR:
        if (item.t != JV_STR)
            return jx_fail(x, "TypeError: 'in <string>' requires string as left operand, not %s", jv_type_name(item));
        *res = JSTR(item)->len == 0 || memmem(JSTR(c)->s, JSTR(c)->len, JSTR(item)->s, JSTR(item)->len) != NULL;
        return 0;
    case JV_LIST:
        for (size_t i = 0; i < JLIST(c)->n && !*res; i++) *res = jv_eq(JLIST(c)->v[i], item);
        return 0;
    case JV_DICT: *res = jdict_get(c, item) != NULL; return 0;
    default:
        return jx_fail(x, "TypeError: argument of type '%s' is not iterable", jv_type_name(c));
    }
}

static int compare(jx *x, int op, jv a, jv b, bool *res) {
    int c = 0, rc;
    switch (op) {
    case OP_EQ: *res = jv_eq(a, b); return 0;
    case OP_NE: *res = !jv_eq(a, b); return 0;
    case OP_IN: return contains(x, a, b, res);
    case OP_NOTIN: rc = contains(x, a, b, res); *res = !*res; return rc;
    }
    if (a.t == JV_UNDEF) return jx_undef_error(x, a);
    if (b.t == JV_UNDEF) return jx_undef_error(x, b);
    if ((rc = jv_cmp(a, b, &c)) < 0) {
        static const char *sym[] = {[OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">="};
        return jx_fail(x, "TypeError: '%s' not supported between instances of '%s' and '%s'", sym[op],
                       jv_type_name(a), jv_type_name(b));
    }
    *res = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
    return 0;
}

/* Python slice of a list / tuple / str. */
static jv do_slice(jv obj, jv start, jv stop, jv step) {
    int64_t n;
    if (obj.t == JV_STR) n = (int64_t)ju_len(JSTR(obj)->s, JSTR(obj)->len);
    else if (obj.t == JV_LIST) n = (int64_t)JLIST(obj)->n;
    else return jv_undef_msg("'%s object' is not subscriptable", jv_type_name(obj));
    int64_t st = 1;
    if (step.t == JV_INT) st = step.i;
    else if (step.t != JV_NONE && step.t != JV_UNDEF) return jv_undef_msg("slice indices must be integers or None");
    if (st == 0) return jv_undef_msg("slice step cannot be zero");
    int64_t lo, hi;
    for (int k = 0; k < 2; k++) {
        jv v = k ? stop : start;
        int64_t *d = k ? &hi : &lo;
        if (v.t == JV_NONE || v.t == JV_UNDEF) {
            *d = st > 0 ? (k ? n : 0) : (k ? -1 : n - 1);
            continue;
        }
        if (v.t != JV_INT && v.t != JV_BOOL) return jv_undef_msg("slice indices must be integers or None");
        int64_t i = v.t == JV_INT ? v.i : v.b;
        if (i < 0) { i += n; if (i < 0) i = st > 0 ? 0 : -1; }
        else if (i >= n) i = st > 0 ? n : n - 1;
        *d = i;
    }
    if (obj.t == JV_STR) {
        const char *s = JSTR(obj)->s;
        size_t len = JSTR(obj)->len;
        jbuf b = {0};
        if (st == 1) {
            if (hi > lo) {
                size_t o1 = ju_offset(s, len, (size_t)lo), o2 = ju_offset(s, len, (size_t)hi);
                jbuf_put(&b, s + o1, o2 - o1);
            }
        } else {
            /* code point offsets */
            size_t *offs = malloc(((size_t)n + 1) * sizeof *offs);
            if (!offs) { jrt_cur->oom = true; return jv_undef(); }
            size_t i = 0, k = 0;
            uint32_t cp;
            while (i < len) { offs[k++] = i; i += ju_decode(s + i, len - i, &cp); }
            offs[k] = len;
            for (int64_t j = lo; st > 0 ? j < hi : j > hi; j += st)
                jbuf_put(&b, s + offs[j], offs[j + 1] - offs[j]);
            free(offs);
        }
        return jbuf_take(&b);
    }
    jlist *l = JLIST(obj);
    jv r = jv_list(l->tuple);
    for (int64_t j = lo; st > 0 ? j < hi : j > hi; j += st) jlist_push(r, jv_dup(l->v[j]));
    return r;
}

/* obj[key] per jinja2's getitem: item, else attribute for str keys, else undefined. */
int jx_getitem(jx *x, jv obj, jv key, jv *out) {
    if (obj.t == JV_UNDEF) return jx_undef_error(x, obj);
    if (obj.t == JV_LIST || obj.t == JV_STR) {
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = key.t == JV_INT ? key.i : key.b;
            int64_t n = obj.t == JV_LIST ? (int64_t)JLIST(obj)->n : (int64_t)ju_len(JSTR(obj)->s, JSTR(obj)->len);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                if (obj.t == JV_LIST) { *out = jv_dup(JLIST(obj)->v[i]); return 0; }
                const char *s = JSTR(obj)->s;
                size_t len = JSTR(obj)->len, o = ju_offset(s, len, (size_t)i);
                uint32_t cp;
                *out = jv_str(s + o, ju_decode(s + o, len - o, &cp));
                return 0;
            }
            *out = jv_undef_msg("%s object has no element %lld", jv_type_name(obj), (long long)(key.t == JV_INT ? key.i : key.b));
            return 0;
        }
    } else if (obj.t == JV_DICT) {
        jv *v = jdict_get(obj, key);
        if (v) { *out = jv_dup(*v); return 0; }
    }
    if (key.t == JV_STR) return jx_getattr(x, obj, JSTR(key)->s, out);
    jbuf b = {0};
    jv_write(&b, key, true, 0);
    *out = jv_undef_msg("%s object has no element %s", jv_type_name(obj), b.p ? b.p : "");
    jbuf_free(&b);
    return 0;
}

/* ---- expressions ---- */

static int eval_inner(jx *x, jframe *f, const jnode *n, jv *out);

int jx_eval(jx *x, jframe *f, const jnode *n, jv *out) {
    *out = jv_undef();
    if (++x->edepth > JJ_MAX_EVAL_DEPTH) { x->edepth--; return jx_fail(x, "RecursionError: template nested too deeply"); }
    int saved = x->line;
    x->line = n->line;
    int rc = eval_inner(x, f, n, out);
    if (rc == 0 && jrt_cur->oom) rc = out_check(x);
    if (rc < 0) { jv_drop(*out); *out = jv_undef(); }
    else x->line = saved;
    x->edepth--;
    return rc;
}

static int eval_filter(jx *x, jframe *f, const jnode *n, jv val, jv *out) {
    jargs a;
    int rc = args_eval(x, f, n, &a);
    if (rc < 0) return rc;
    x->line = n->line;
    rc = jx_filter(x, f, n->s, val, &a, out);
    args_free(&a);
    return rc;
}

/* Applies a filter chain (innermost operand NULL) to val (borrowed). */
static int apply_chain(jx *x, jframe *f, const jnode *n, jv val, jv *out) {
    if (!n->a) return eval_filter(x, f, n, val, out);
    jv mid;
    int rc = apply_chain(x, f, n->a, val, &mid);
    if (rc < 0) return rc;
    rc = eval_filter(x, f, n, mid, out);
    jv_drop(mid);
    return rc;
}

static int eval_inner(jx *x, jframe *f, const jnode *n, jv *out) {
    int rc = 0;
    jv a = jv_undef(), b = jv_undef(), c = jv_undef(), d = jv_undef();
    switch (n->kind) {
    case N_NONE: *out = jv_none(); return 0;
    case N_BOOL: *out = jv_bool((int)n->i); return 0;
    case N_INT: *out = jv_int(n->i); return 0;
    case N_FLOAT: *out = jv_float(n->f); return 0;
    case N_STR: *out = jv_str(n->s, n->n); return 0;
    case N_NAME: {
        jv *v = jframe_lookup(f, n->s);
        *out = v ? jv_dup(*v) : jv_undef_msg("'%s' is undefined", n->s);
        return 0;
    }
    case N_LIST: case N_TUPLE: {
        jv l = jv_list(n->kind == N_TUPLE);
        for (int i = 0; i < n->kids.n; i++) {
            if ((rc = jx_eval(x, f, n->kids.v[i], &a)) < 0) { jv_drop(l); return rc; }
            jlist_push(l, a);
        }
        *out = l;
        return 0;
    }
    case N_DICT: {
        jv dct = jv_dict(JV_DICT);
        for (int i = 0; i + 1 < n->kids.n; i += 2) {
            if ((rc = jx_eval(x, f, n->kids.v[i], &a)) < 0) { jv_drop(dct); return rc; }
            if (a.t != JV_STR && a.t != JV_INT && a.t != JV_BOOL && a.t != JV_NONE && a.t != JV_FLOAT &&
                !(a.t == JV_LIST && JLIST(a)->tuple)) {
                rc = jx_fail(x, "TypeError: unhashable type: '%s'", jv_type_name(a));
                jv_drop(a);
                jv_drop(dct);
                return rc;
            }
            if ((rc = jx_eval(x, f, n->kids.v[i + 1], &b)) < 0) { jv_drop(a); jv_drop(dct); return rc; }
            jdict_set(dct, a, b);
        }
        *out = dct;
        return 0;
    }
    case N_ATTR:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) return rc;
        rc = jx_getattr(x, a, n->s, out);
        break;
    case N_ITEM:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0 || (rc = jx_eval(x, f, n->b, &b)) < 0) break;
        rc = jx_getitem(x, a, b, out);
        break;
    case N_SLICE:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        if (a.t == JV_UNDEF) { rc = jx_undef_error(x, a); break; }
        if (n->b && (rc = jx_eval(x, f, n->b, &b)) < 0) break;
        if (n->c && (rc = jx_eval(x, f, n->c, &c)) < 0) break;
        if (n->d && (rc = jx_eval(x, f, n->d, &d)) < 0) break;
        *out = do_slice(a, b, c, d);
        break;
    case N_CALL: {
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        jargs args;
        if ((rc = args_eval(x, f, n, &args)) < 0) break;
        x->line = n->line;
        rc = jx_call(x, f, a, &args, out);
        args_free(&args);
        break;
    }
    case N_FILTER:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        rc = eval_filter(x, f, n, a, out);
        break;
    case N_TEST: {
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        jargs args;
        if ((rc = args_eval(x, f, n, &args)) < 0) break;
        bool r = false;
        x->line = n->line;
        rc = jx_test(x, n->s, a, &args, &r);
        args_free(&args);
        *out = jv_bool(n->op ? !r : r);
        break;
    }
    case N_NEG: case N_POS:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        if (a.t == JV_UNDEF) rc = jx_undef_error(x, a);
        else if (a.t == JV_FLOAT) *out = jv_float(n->kind == N_NEG ? -a.f : a.f);
        else if (a.t == JV_INT || a.t == JV_BOOL) {
            int64_t i = a.t == JV_INT ? a.i : a.b;
            if (n->kind == N_NEG && i == INT64_MIN) rc = jx_fail(x, "OverflowError: integer result too large");
            else *out = jv_int(n->kind == N_NEG ? -i : i);
        } else {
            rc = jx_fail(x, "TypeError: bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', jv_type_name(a));
        }
        break;
    case N_NOT:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        *out = jv_bool(!jv_truthy(a));
        break;
    case N_AND: case N_OR:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        if (jv_truthy(a) == (n->kind == N_OR)) { *out = a; return 0; }
        jv_drop(a);
        return jx_eval(x, f, n->b, out);
    case N_BIN:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0 || (rc = jx_eval(x, f, n->b, &b)) < 0) break;
        x->line = n->line;
        rc = binop(x, n->op, a, b, out);
        break;
    case N_CONCAT: {
        jbuf s = {0};
        for (int i = 0; i < n->kids.n && rc == 0; i++) {
            if ((rc = jx_eval(x, f, n->kids.v[i], &a)) < 0) break;
            jv_write(&s, a, false, 0);
            jv_drop(a);
            a = jv_undef();
        }
        if (rc == 0 && s.over) rc = jx_fail(x, "MemoryError: string too large");
        if (rc < 0) jbuf_free(&s);
        else *out = jbuf_take(&s);
        break;
    }
    case N_COMPARE: {
        if ((rc = jx_eval(x, f, n->kids.v[0], &a)) < 0) break;
        bool r = true;
        for (int i = 1; i < n->kids.n && r; i++) {
            if ((rc = jx_eval(x, f, n->kids.v[i], &b)) < 0) break;
            x->line = n->line;
            if ((rc = compare(x, n->ops[i - 1], a, b, &r)) < 0) break;
            jv_drop(a);
            a = b;
            b = jv_undef();
        }
        *out = jv_bool(r);
        break;
    }
    case N_COND:
        if ((rc = jx_eval(x, f, n->a, &a)) < 0) break;
        if (jv_truthy(a)) rc = jx_eval(x, f, n->b, out);
        else if (n->c) rc = jx_eval(x, f, n->c, out);
        else *out = jv_undef_msg("the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
        break;
    default:
        rc = jx_fail(x, "internal error: bad expression node %d", n->kind);
    }
    jv_drop(a);
    jv_drop(b);
    jv_drop(c);
    jv_drop(d);
    return rc;
}

/* ---- statements ---- */

/* Items a for loop / unpacking iterates over: a new list reference. */
int jx_iter_items(jx *x, jv v, jv *out) {
    switch (v.t) {
    case JV_UNDEF: *out = jv_list(false); return 0;
    case JV_LIST: *out = jv_dup(v); return 0;
    case JV_DICT: {
        jv l = jv_list(false);
        for (size_t i = 0; i < JDICT(v)->n; i++) jlist_push(l, jv_dup(JDICT(v)->e[i].k));
        *out = l;
        return 0;
    }
    case JV_STR: {
        jv l = jv_list(false);
        const char *s = JSTR(v)->s;
        size_t len = JSTR(v)->len;
        uint32_t cp;
        for (size_t i = 0; i < len && !jrt_cur->oom;) {
            size_t w = ju_decode(s + i, len - i, &cp);
            jlist_push(l, jv_str(s + i, w));
            i += w;
        }
        *out = l;
        return 0;
    }
    default:
        return jx_fail(x, "TypeError: '%s' object is not iterable", jv_type_name(v));
    }
}

/* Binds names (tuple unpacking when tuple) to val in frame g; takes val. */
static int bind(jx *x, jframe *g, char **names, int nnames, bool tuple, jv val) {
    if (!tuple) return jframe_set(g, names[0], val);
    jv items;
    int rc = jx_iter_items(x, val, &items);
    if (rc < 0) {
        jv_drop(val);
        return jx_fail(x, "TypeError: cannot unpack non-iterable %s object", jv_type_name(val));
    }
    jv_drop(val);
    jlist *l = JLIST(items);
    size_t n = l ? l->n : 0;
    if (n != (size_t)nnames) {
        jv_drop(items);
        if (n < (size_t)nnames) return jx_fail(x, "ValueError: not enough values to unpack (expected %d, got %zu)", nnames, n);
        return jx_fail(x, "ValueError: too many values to unpack (expected %d)", nnames);
    }
    for (int i = 0; i < nnames && rc == 0; i++) rc = jframe_set(g, names[i], jv_dup(l->v[i]));
    jv_drop(items);
    return rc;
}

static int exec_for(jx *x, jframe *f, const jnode *n) {
    jv it, items;
    int rc = jx_eval(x, f, n->a, &it);
    if (rc < 0) return rc;
    x->line = n->line;
    rc = jx_iter_items(x, it, &items);
    jv_drop(it);
    if (rc < 0) return rc;
    jframe *g = frame_new(f);
    if (!g) { jv_drop(items); return err_set(KS_ENOMEM, "chat template: out of memory"); }
    if (n->b && items.t == JV_LIST) {  /* inline filter: for x in xs if cond */
        jv kept = jv_list(false);
        for (size_t i = 0; i < JLIST(items)->n && rc == 0; i++) {
            if (++x->iters > JJ_MAX_ITERATIONS) { rc = jx_fail(x, "too many loop iterations (limit %llu)", (unsigned long long)JJ_MAX_ITERATIONS); break; }
            jv item = JLIST(items)->v[i], cond;
            if ((rc = bind(x, g, n->names, n->nnames, n->op == 1, jv_dup(item))) < 0) break;
            if ((rc = jx_eval(x, g, n->b, &cond)) < 0) break;
            if (jv_truthy(cond)) jlist_push(kept, jv_dup(item));
            jv_drop(cond);
        }
        jv_drop(items);
        items = kept;
    }
    size_t count = items.t == JV_LIST ? JLIST(items)->n : 0;
    jv loopv = jv_undef();
    if (rc == 0) {
        loopv = jv_loop(jv_dup(items));
        jloop *lo = loopv.t == JV_LOOP ? JLOOP(loopv) : NULL;
        if ((rc = jframe_set(g, "loop", jv_dup(loopv))) < 0) lo = NULL;
        for (size_t i = 0; lo && i < count && rc == 0; i++) {
            if (++x->iters > JJ_MAX_ITERATIONS) { rc = jx_fail(x, "too many loop iterations (limit %llu)", (unsigned long long)JJ_MAX_ITERATIONS); break; }
            lo->i = i;
            if ((rc = bind(x, g, n->names, n->nnames, n->op == 1, jv_dup(JLIST(items)->v[i]))) < 0) break;
            jframe *h = frame_new(g);  /* each iteration starts from a fresh scope, as in jinja2 */
            if (!h) { rc = err_set(KS_ENOMEM, "chat template: out of memory"); break; }
            rc = exec_body(x, h, &n->body);
            frame_free(h);
            if (rc == JX_BREAK) { rc = 0; break; }
            if (rc == JX_CONTINUE) rc = 0;
        }
    }
    jv_drop(loopv);
    jv_drop(items);
    frame_free(g);
    if (rc == 0 && count == 0 && n->orelse.n) rc = exec_body(x, f, &n->orelse);
    return rc;
}

static int exec_set(jx *x, jframe *f, const jnode *n, jv val) {
    if (n->op == 2) {
        jv *ns = jframe_lookup(f, n->names[0]);
        if (!ns || ns->t != JV_NS) {
            jv_drop(val);
            return jx_fail(x, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        }
        jdict_set(*ns, jv_cstr(n->s), val);
        return out_check(x);
    }
    return bind(x, f, n->names, n->nnames, n->op == 1, val);
}

static int exec_stmt(jx *x, jframe *f, const jnode *n) {
    int rc = 0;
    jv v;
    x->line = n->line;
    switch (n->kind) {
    case S_TEXT:
        jbuf_put(x->out, n->s, n->n);
        return out_check(x);
    case S_OUTPUT:
        if ((rc = jx_eval(x, f, n->a, &v)) < 0) return rc;
        rc = out_value(x, v);
        jv_drop(v);
        return rc;
    case S_IF:
        if ((rc = jx_eval(x, f, n->a, &v)) < 0) return rc;
        rc = exec_body(x, f, jv_truthy(v) ? &n->body : &n->orelse);
        jv_drop(v);
        return rc;
    case S_FOR: return exec_for(x, f, n);
    case S_SET:
        if ((rc = jx_eval(x, f, n->a, &v)) < 0) return rc;
        x->line = n->line;
        return exec_set(x, f, n, v);
    case S_SETBLOCK: {
        if ((rc = capture(x, f, &n->body, true, &v)) < 0) return rc;
        if (n->a) {
            jv r;
            rc = apply_chain(x, f, n->a, v, &r);
            jv_drop(v);
            if (rc < 0) return rc;
            v = r;
        }
        return exec_set(x, f, n, v);
    }
    case S_MACRO: {
        jv fn = jv_func(FN_MACRO, n->s);
        if (fn.t == JV_FUNC) JFUNC(fn)->macro = n;
        return jframe_set(f, n->s, fn);
    }
    case S_CALLBLOCK: {
        const jnode *call = n->a;
        jv callee, caller = jv_func(FN_MACRO, "caller");
        if (caller.t != JV_FUNC) return out_check(x);
        JFUNC(caller)->macro = n;
        JFUNC(caller)->frame = f;
        if ((rc = jx_eval(x, f, call->a, &callee)) < 0) { jv_drop(caller); return rc; }
        jargs a;
        if ((rc = args_eval(x, f, call, &a)) < 0) { jv_drop(callee); jv_drop(caller); return rc; }
        /* append caller= keyword */
        char **kwn = malloc(((size_t)a.nkw + 1) * sizeof *kwn);
        if (!kwn) rc = err_set(KS_ENOMEM, "chat template: out of memory");
        if (rc == 0) {
            for (int i = 0; i < a.nkw; i++) kwn[i] = a.kwn[i];
            kwn[a.nkw] = "caller";
            a.kwn = kwn;
            a.kwv[a.nkw++] = jv_dup(caller);
            x->line = n->line;
            rc = jx_call(x, f, callee, &a, &v);
            if (rc == 0) { rc = out_value(x, v); jv_drop(v); }
        }
        free(kwn);
        args_free(&a);
        JFUNC(caller)->frame = NULL;  /* caller() stored away must not outlive f */
        jv_drop(caller);
        jv_drop(callee);
        return rc;
    }
    case S_FILTERBLOCK: {
        if ((rc = capture(x, f, &n->body, true, &v)) < 0) return rc;
        jv r;
        rc = apply_chain(x, f, n->a, v, &r);
        jv_drop(v);
        if (rc < 0) return rc;
        rc = out_value(x, r);
        jv_drop(r);
        return rc;
    }
    case S_BREAK: return JX_BREAK;
    case S_CONTINUE: return JX_CONTINUE;
    case S_WITH: {
        jframe *g = frame_new(f);
        if (!g) return err_set(KS_ENOMEM, "chat template: out of memory");
        for (int i = 0; i < n->kids.n && rc == 0; i++) {
            if ((rc = jx_eval(x, f, n->kids.v[i], &v)) < 0) break;
            rc = jframe_set(g, n->names[i], v);
        }
        if (rc == 0) rc = exec_body(x, g, &n->body);
        frame_free(g);
        return rc;
    }
    case S_SCOPE: return exec_body(x, f, &n->body);
    default: return jx_fail(x, "internal error: bad statement node %d", n->kind);
    }
}

static int exec_body(jx *x, jframe *f, const jnodes *body) {
    if (++x->edepth > JJ_MAX_EVAL_DEPTH) { x->edepth--; return jx_fail(x, "RecursionError: template nested too deeply"); }
    int rc = 0;
    for (int i = 0; i < body->n && rc == 0; i++) rc = exec_stmt(x, f, body->v[i]);
    x->edepth--;
    return rc;
}

/* ---- entry point ---- */

int jinja_render(const jinja_template *t, const json_t *ctx, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return err_set(KS_EINVAL, "chat template: no template");
    if (ctx && !json_is_object(ctx)) return err_set(KS_EINVAL, "chat template: context must be a JSON object");
    jrt rt, *saved_rt = jrt_cur;
    jrt_init(&rt);
    jrt_cur = &rt;
    jbuf buf = {0};
    jx x = {.out = &buf, .line = 1};
    int rc = 0;
    jframe *g = frame_new(NULL), *root = g ? frame_new(g) : NULL;
    if (!root) { rc = err_set(KS_ENOMEM, "chat template: out of memory"); goto done; }
    x.globals = g;
    x.root = root;
    jx_add_builtins(g);
    if (ctx) {
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)ctx, k, e) {
            jv v;
            if ((rc = jv_from_json(e, &v, 0)) < 0) goto done;
            if ((rc = jframe_set(g, k, v)) < 0) goto done;
        }
    }
    if ((rc = out_check(&x)) < 0) goto done;
    rc = exec_body(&x, root, &t->root->body);
    if (rc > 0) rc = 0;
    if (rc == 0 && buf.over) rc = err_set(KS_EINVAL, "chat template: output too large (limit %zu bytes)", JJ_MAX_OUTPUT);
done:
    frame_free(root);
    frame_free(g);
    jrt_free_all(&rt);
    jrt_cur = saved_rt;
    if (rc < 0) { jbuf_free(&buf); return rc; }
    if (!buf.p && !(buf.p = calloc(1, 1))) return err_set(KS_ENOMEM, "chat template: out of memory");
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return 0;
}
