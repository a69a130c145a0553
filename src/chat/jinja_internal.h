/* jinja_internal.h — types shared by the Jinja interpreter's files: tokens
 * (jinja_lex.c), the syntax tree (jinja_parse.c), runtime values
 * (jinja_value.c), the evaluator (jinja_eval.c) and the filters, tests,
 * methods and builtins (jinja_lib.c). Not part of the public API. */
#ifndef KS_JINJA_INTERNAL_H
#define KS_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/jinja.h"

/* Limits against hostile templates and inputs. */
#define JJ_MAX_OUTPUT      ((size_t)64 << 20)   /* bytes of any one string / output */
#define JJ_MAX_MEMORY      ((size_t)1 << 30)    /* bytes of live values in one render */
#define JJ_MAX_PARSE_DEPTH 200                  /* expression / block nesting */
#define JJ_MAX_CALL_DEPTH  200                  /* nesting of values (lists in lists) */
#define JJ_MAX_MACRO_DEPTH 64                   /* macro calls */
#define JJ_MAX_EVAL_DEPTH  1500                 /* evaluator recursion (bounds C stack) */
#define JJ_MAX_ITERATIONS  ((uint64_t)10000000) /* loop iterations in one render */
#define JJ_MAX_RANGE       100000               /* as jinja2's sandbox MAX_RANGE */
#define JJ_MAX_LIST        ((size_t)16 << 20)   /* elements of one list */

/* ---- tokens (jinja_lex.c) ---- */
typedef enum {
    TK_EOF, TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
} jtok_type;

typedef struct {
    jtok_type t;
    int line, col;
    char *s;      /* TEXT / NAME / STRING: owned, NUL-terminated (decoded) */
    size_t n;     /* length of s */
    int64_t i;    /* TK_INT */
    double f;     /* TK_FLOAT */
    char op[4];   /* TK_OP: "+", "//", "==", ... */
} jtok;

typedef struct { jtok *v; size_t n, cap; } jtoks;

int jinja_lex(jtoks *out, const char *src, size_t len);
void jinja_toks_free(jtoks *t);

/* ---- syntax tree (jinja_parse.c) ---- */
typedef enum {
    /* expressions */
    N_NONE, N_BOOL, N_INT, N_FLOAT, N_STR, N_NAME, N_LIST, N_TUPLE, N_DICT,
    N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NEG, N_POS, N_NOT,
    N_BIN, N_AND, N_OR, N_COMPARE, N_CONCAT, N_COND,
    /* statements */
    S_TEXT, S_OUTPUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK,
    S_FILTERBLOCK, S_BREAK, S_CONTINUE, S_WITH, S_SCOPE,
} jnode_kind;

/* Binary / comparison operators (jnode.op). */
enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
};

typedef struct jnode jnode;
typedef struct { jnode **v; int n, cap; } jnodes;

struct jnode {
    jnode_kind kind;
    int line;
    int op;              /* operator; N_TEST: 1 = negated; S_SET: target kind */
    jnode *a, *b, *c, *d;/* operands (see parser for each kind) */
    jnodes kids;         /* positional args, list items, dict k,v pairs, compare operands */
    jnodes kwv;          /* keyword arg values / macro param defaults (NULL = none) */
    char **names;        /* keyword arg names / for-set targets / macro params */
    int nnames;
    int *ops;            /* N_COMPARE: operator per operand */
    char *s;             /* name, string constant, text, filter/test/attr name */
    size_t n;            /* length of s */
    int64_t i;
    double f;
    jnodes body, orelse; /* statement bodies */
    jnode *alloc_next;   /* every node of a template, for freeing */
};

struct jinja_template {
    jnode *root;         /* S_SCOPE holding the top-level body */
    jnode *all;          /* allocation list */
};

/* ---- runtime values (jinja_value.c) ---- */
typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT,
    JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_LOOP,
} jv_type;

typedef struct jobj jobj;
typedef struct {
    jv_type t;
    union { int b; int64_t i; double f; jobj *o; };  /* JV_UNDEF: o = hint (jstr) or NULL */
} jv;

struct jobj {
    int32_t refc;
    uint8_t kind;        /* jv_type of the object */
    jobj *prev, *next;   /* the render's list of live objects */
    size_t bytes;        /* accounted size */
};
typedef struct { jobj h; size_t len; char s[]; } jstr;     /* NUL-terminated */
typedef struct { jobj h; jv *v; size_t n, cap; bool tuple; } jlist;
typedef struct { jv k, v; } jdent;
typedef struct { jobj h; jdent *e; size_t n, cap; uint32_t *idx; size_t icap; } jdict; /* also JV_NS */
enum { FN_MACRO = 1, FN_METHOD, FN_BUILTIN };
typedef struct {
    jobj h;
    int kind;            /* FN_* */
    const jnode *macro;  /* FN_MACRO: S_MACRO or S_CALLBLOCK node (the caller body) */
    void *frame;         /* FN_MACRO of a call block: the jframe it was defined in */
    jv self;             /* FN_METHOD: bound object; FN_MACRO: caller (or undefined) */
    char *name;          /* method / builtin / macro name (owned) */
} jfunc;
typedef struct { jobj h; jv items; size_t i, n; } jloop;

/* The objects alive in one render, so that cycles (ns.x = ns) still get
 * freed at the end, and the memory budget. One per thread while rendering. */
typedef struct { jobj head; size_t mem; bool oom; } jrt;
extern _Thread_local jrt *jrt_cur;
void jrt_init(jrt *rt);
void jrt_free_all(jrt *rt);

#define JSTR(v) ((jstr *)(v).o)
#define JLIST(v) ((jlist *)(v).o)
#define JDICT(v) ((jdict *)(v).o)
#define JFUNC(v) ((jfunc *)(v).o)
#define JLOOP(v) ((jloop *)(v).o)

static inline jv jv_undef(void) { jv v = {.t = JV_UNDEF}; v.o = NULL; return v; }
static inline jv jv_none(void) { jv v = {.t = JV_NONE}; v.o = NULL; return v; }
static inline jv jv_bool(int b) { jv v = {.t = JV_BOOL}; v.i = 0; v.b = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.t = JV_INT}; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.t = JV_FLOAT}; v.f = f; return v; }
static inline bool jv_is_obj(jv v) { return v.t >= JV_STR || (v.t == JV_UNDEF && v.o); }

jv jv_dup(jv v);
void jv_drop(jv v);
/* Allocation failures set jrt_cur->oom and give undefined; every mutator
 * accepts such a value and does nothing. */
jv jv_str(const char *s, size_t n);
jv jv_cstr(const char *s);
jv jv_list(bool tuple);
jv jv_dict(jv_type kind);          /* JV_DICT or JV_NS */
jv jv_func(int kind, const char *name);
jv jv_loop(jv items);               /* takes items (a list) */
jv jv_undef_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void jlist_push(jv list, jv item);  /* takes item */
jv *jdict_get(jv dict, jv key);     /* borrowed, NULL if absent */
jv *jdict_gets(jv dict, const char *key);
void jdict_set(jv dict, jv key, jv val);  /* takes key and val */

bool jv_truthy(jv v);
bool jv_eq(jv a, jv b);
/* Python ordering; <0 TypeError (message set via err_set). */
int jv_cmp(jv a, jv b, int *res);
bool jv_is_num(jv v);              /* bool, int, float */
double jv_num(jv v);
const char *jv_type_name(jv v);    /* Python type name: 'str', 'NoneType', ... */

/* Growable byte buffer with a size limit. */
typedef struct { char *p; size_t n, cap; bool over; } jbuf;
int jbuf_put(jbuf *b, const char *s, size_t n);   /* <0 on limit / no memory */
int jbuf_puts(jbuf *b, const char *s);
int jbuf_putc(jbuf *b, char c);
jv jbuf_take(jbuf *b);                            /* to a string value; resets b */
void jbuf_free(jbuf *b);

/* str(v) (repr=false) or repr(v) appended to b; <0 on limits. */
int jv_write(jbuf *b, jv v, bool repr, int depth);
/* json.dumps options: indent NULL = one line; separators as Python's
 * (", " / ": " without indent, "," / ": " with it) unless given. */
typedef struct {
    const char *indent, *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} jjson_opts;
/* json.dumps(v, ...) appended to b; <0: TypeError message set. */
int jv_tojson(jbuf *b, jv v, const jjson_opts *o, int depth);
int jv_from_json(const json_t *j, jv *out, int depth);
void jv_write_float(jbuf *b, double f);            /* Python repr(float) */

/* UTF-8 helpers: code point count; byte offset of code point i. */
size_t ju_len(const char *s, size_t n);
size_t ju_offset(const char *s, size_t n, size_t cp);
size_t ju_decode(const char *s, size_t n, uint32_t *cp);  /* bytes used (>=1) */
void ju_encode(jbuf *b, uint32_t cp);

/* ---- evaluator (jinja_eval.c) and library (jinja_lib.c) ---- */
typedef struct jframe {
    struct jframe *parent;
    char **names;
    jv *vals;
    int n, cap;
} jframe;

typedef struct {
    jbuf *out;           /* where output goes (swapped for captures) */
    jframe *root;        /* the template's top-level frame */
    jframe *globals;     /* context variables and builtins */
    int depth;           /* macro call depth */
    int edepth;          /* evaluator recursion depth */
    uint64_t iters;
    int line;            /* line of the node being evaluated */
} jx;

typedef struct {
    jv *pos; int npos;
    char **kwn; jv *kwv; int nkw;
} jargs;

int jx_fail(jx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int jx_eval(jx *x, jframe *f, const jnode *n, jv *out);
int jx_call(jx *x, jframe *f, jv callee, jargs *a, jv *out);
int jx_undef_error(jx *x, jv u);
int jx_iter_items(jx *x, jv v, jv *out);           /* list of what `for` iterates */
int jx_getitem(jx *x, jv obj, jv key, jv *out);    /* obj[key] as jinja2's getitem */
jv *jframe_lookup(jframe *f, const char *name);
int jframe_set(jframe *f, const char *name, jv v);   /* takes v */

/* Argument j of a call: by position j or keyword name; NULL if absent. */
jv *jargs_get(jargs *a, int j, const char *name);
int jx_filter(jx *x, jframe *f, const char *name, jv val, jargs *a, jv *out);
int jx_test(jx *x, const char *name, jv val, jargs *a, bool *res);
/* obj.name: attribute or method (bound function) per jinja2's getattr. */
int jx_getattr(jx *x, jv obj, const char *name, jv *out);
int jx_call_method(jx *x, jframe *f, jfunc *fn, jargs *a, jv *out);
void jx_add_builtins(jframe *g);

/* String helpers shared by methods and filters (jinja_methods.c). */
jv jv_soft_str(jv v);                               /* str(v) as a new string */
enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };
jv js_case(const char *s, size_t n, int mode);      /* Python str.upper() ... */
/* Python str.strip(chars): which 1 = left, 2 = right, 3 = both; chars NULL = whitespace. */
jv js_strip(const char *s, size_t n, const jstr *chars, int which);
jv js_replace(const char *s, size_t n, const jstr *old, const jstr *nw, int64_t count);
bool js_is_space(uint32_t cp);

#endif
