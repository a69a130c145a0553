/* jinja_parse.c — builds the syntax tree of a template from its tokens,
 * with jinja2's grammar and operator precedence (condexpr < or < and < not <
 * compare < + - < ~ < * / // % < ** < unary - + < primary.postfix | filter
 * / is test). Statements: if/elif/else, for (unpacking, inline if, else),
 * set (name, tuple, ns.attr, block), macro, call, filter, with, break,
 * continue, generation (transformers' assistant-mask tag, a no-op here).
 * Errors name line:col and what was expected. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jinja_internal.h"

typedef struct {
    jtoks *tk;
    size_t i;
    jinja_template *t;
    int depth;       /* nesting of expressions / blocks */
    int loops;       /* enclosing for loops (for break/continue) */
} parser;

static jtok *cur(parser *p) { return &p->tk->v[p->i]; }
static jtok *peek(parser *p, size_t k) {
    size_t j = p->i + k;
    return &p->tk->v[j < p->tk->n ? j : p->tk->n - 1];
}
static void adv(parser *p) { if (p->i + 1 < p->tk->n) p->i++; }
static bool is_op(jtok *t, const char *op) { return t->t == TK_OP && strcmp(t->op, op) == 0; }
static bool is_name(jtok *t, const char *w) { return t->t == TK_NAME && strcmp(t->s, w) == 0; }

static const char *tok_desc(jtok *t, char *buf, size_t n) {
    switch (t->t) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_NAME: snprintf(buf, n, "'%.40s'", t->s); return buf;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_OP: snprintf(buf, n, "'%s'", t->op); return buf;
    }
    return "token";
}

static int perr(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(parser *p, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jtok *t = cur(p);
    return err_set(KS_EFORMAT, "chat template syntax error at %d:%d: %s", t->line, t->col, msg);
}
static int unexpected(parser *p, const char *expected) {
    char b[64];
    return perr(p, "unexpected %s, expected %s", tok_desc(cur(p), b, sizeof b), expected);
}

static jnode *node_new(parser *p, jnode_kind k) {
    jnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->kind = k;
    n->line = cur(p)->line;
    n->alloc_next = p->t->all;
    p->t->all = n;
    return n;
}
#define NEW(var, kind) do { if (!((var) = node_new(p, (kind)))) return err_set(KS_ENOMEM, "chat template: out of memory"); } while (0)

static int nodes_push(jnodes *l, jnode *n) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        jnode **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return err_set(KS_ENOMEM, "chat template: out of memory");
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = n;
    return 0;
}
static int names_push(jnode *n, const char *s) {
    char **nv = realloc(n->names, (size_t)(n->nnames + 1) * sizeof *nv);
    if (!nv) return err_set(KS_ENOMEM, "chat template: out of memory");
    n->names = nv;
    if (!(n->names[n->nnames] = strdup(s))) return err_set(KS_ENOMEM, "chat template: out of memory");
    n->nnames++;
    return 0;
}
static int set_str(jnode *n, const char *s, size_t len) {
    n->s = malloc(len + 1);
    if (!n->s) return err_set(KS_ENOMEM, "chat template: out of memory");
    memcpy(n->s, s, len);
    n->s[len] = 0;
    n->n = len;
    return 0;
}

static int expect_op(parser *p, const char *op) {
    if (!is_op(cur(p), op)) {
        char e[16];
        snprintf(e, sizeof e, "'%s'", op);
        return unexpected(p, e);
    }
    adv(p);
    return 0;
}
static int expect_block_end(parser *p) {
    if (cur(p)->t != TK_BLOCK_END) return unexpected(p, "end of statement '%}'");
    adv(p);
    return 0;
}

static int parse_expr(parser *p, bool with_cond, jnode **out);
static int parse_unary(parser *p, bool with_filter, jnode **out);
static int parse_primary(parser *p, jnode **out);
static int parse_postfix(parser *p, jnode **node);

/* "(" item ("," item)* [","] ")", item(p, n) parsing one entry into n:
 * call arguments and macro parameters. */
static int parse_paren_list(parser *p, jnode *n, int (*item)(parser *p, jnode *n)) {
    int rc;
    if ((rc = expect_op(p, "(")) < 0) return rc;
    while (!is_op(cur(p), ")")) {
        if ((rc = item(p, n)) < 0) return rc;
        if (is_op(cur(p), ",")) adv(p);
        else if (!is_op(cur(p), ")")) return unexpected(p, "',' or ')'");
    }
    adv(p);
    return 0;
}

/* one call argument: positional into n->kids, keyword into names/kwv */
static int parse_call_arg(parser *p, jnode *n) {
    int rc;
    if (is_op(cur(p), "*") || is_op(cur(p), "**")) return perr(p, "*args and **kwargs are not supported");
    jnode *v;
    if (cur(p)->t == TK_NAME && is_op(peek(p, 1), "=")) {
        if ((rc = names_push(n, cur(p)->s)) < 0) return rc;
        adv(p);
        adv(p);
        if ((rc = parse_expr(p, true, &v)) < 0) return rc;
        return nodes_push(&n->kwv, v);
    }
    if (n->nnames) return perr(p, "positional argument follows keyword argument");
    if ((rc = parse_expr(p, true, &v)) < 0) return rc;
    return nodes_push(&n->kids, v);
}

/* ( args ) — positional into n->kids, keywords into names/kwv. */
static int parse_call_args(parser *p, jnode *n) { return parse_paren_list(p, n, parse_call_arg); }

static int parse_primary(parser *p, jnode **out) {
    jtok *t = cur(p);
    jnode *n;
    int rc;
    switch (t->t) {
    case TK_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            NEW(n, N_BOOL);
            n->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            NEW(n, N_NONE);
        } else {
            NEW(n, N_NAME);
            if ((rc = set_str(n, t->s, t->n)) < 0) return rc;
        }
        adv(p);
        break;
    case TK_STRING: {
        NEW(n, N_STR);
        jbuf b = {0};
        while (cur(p)->t == TK_STRING) {  /* adjacent literals concatenate */
            if (jbuf_put(&b, cur(p)->s, cur(p)->n) < 0) { jbuf_free(&b); return perr(p, "string literal too long"); }
            adv(p);
        }
        rc = set_str(n, b.p ? b.p : "", b.n);
        jbuf_free(&b);
        if (rc < 0) return rc;
        break;
    }
    case TK_INT: NEW(n, N_INT); n->i = t->i; adv(p); break;
    case TK_FLOAT: NEW(n, N_FLOAT); n->f = t->f; adv(p); break;
    case TK_OP:
        if (is_op(t, "(")) {
            adv(p);
            if (is_op(cur(p), ")")) { adv(p); NEW(n, N_TUPLE); break; }
            jnode *e;
            if ((rc = parse_expr(p, true, &e)) < 0) return rc;
            if (is_op(cur(p), ",")) {
                NEW(n, N_TUPLE);
                if ((rc = nodes_push(&n->kids, e)) < 0) return rc;
                while (is_op(cur(p), ",")) {
                    adv(p);
                    if (is_op(cur(p), ")")) break;
                    if ((rc = parse_expr(p, true, &e)) < 0) return rc;
                    if ((rc = nodes_push(&n->kids, e)) < 0) return rc;
                }
            } else {
                n = e;
            }
            if ((rc = expect_op(p, ")")) < 0) return rc;
        } else if (is_op(t, "[")) {
            adv(p);
            NEW(n, N_LIST);
            while (!is_op(cur(p), "]")) {
                jnode *e;
                if ((rc = parse_expr(p, true, &e)) < 0) return rc;
                if ((rc = nodes_push(&n->kids, e)) < 0) return rc;
                if (is_op(cur(p), ",")) adv(p);
                else if (!is_op(cur(p), "]")) return unexpected(p, "',' or ']'");
            }
            adv(p);
        } else if (is_op(t, "{")) {
            adv(p);
            NEW(n, N_DICT);
            while (!is_op(cur(p), "}")) {
                jnode *k, *v;
                if ((rc = parse_expr(p, true, &k)) < 0) return rc;
                if ((rc = expect_op(p, ":")) < 0) return rc;
                if ((rc = parse_expr(p, true, &v)) < 0) return rc;
                if ((rc = nodes_push(&n->kids, k)) < 0 || (rc = nodes_push(&n->kids, v)) < 0) return rc;
                if (is_op(cur(p), ",")) adv(p);
                else if (!is_op(cur(p), "}")) return unexpected(p, "',' or '}'");
            }
            adv(p);
        } else {
            return unexpected(p, "an expression");
        }
        break;
    default:
        return unexpected(p, "an expression");
    }
    *out = n;
    return 0;
}

static int parse_subscript(parser *p, jnode **node) {
    int rc;
    jnode *n;
    if (is_op(cur(p), ".")) {
        adv(p);
        if (cur(p)->t == TK_NAME) {
            NEW(n, N_ATTR);
            if ((rc = set_str(n, cur(p)->s, cur(p)->n)) < 0) return rc;
            n->a = *node;
            adv(p);
        } else if (cur(p)->t == TK_INT) {
            NEW(n, N_ITEM);
            jnode *k;
            NEW(k, N_INT);
            k->i = cur(p)->i;
            n->a = *node;
            n->b = k;
            adv(p);
        } else {
            return unexpected(p, "attribute name");
        }
        *node = n;
        return 0;
    }
    adv(p);  /* '[' */
    jnode *start = NULL, *stop = NULL, *step = NULL;
    if (!is_op(cur(p), ":")) {
        if ((rc = parse_expr(p, true, &start)) < 0) return rc;
        if (is_op(cur(p), "]")) {
            adv(p);
            NEW(n, N_ITEM);
            n->a = *node;
            n->b = start;
            *node = n;
            return 0;
        }
        if (!is_op(cur(p), ":")) return unexpected(p, "']' or ':'");
    }
    adv(p);  /* ':' */
    if (!is_op(cur(p), "]") && !is_op(cur(p), ":"))
        if ((rc = parse_expr(p, true, &stop)) < 0) return rc;
    if (is_op(cur(p), ":")) {
        adv(p);
        if (!is_op(cur(p), "]"))
            if ((rc = parse_expr(p, true, &step)) < 0) return rc;
    }
    if ((rc = expect_op(p, "]")) < 0) return rc;
    NEW(n, N_SLICE);
    n->a = *node;
    n->b = start;
    n->c = stop;
    n->d = step;
    *node = n;
    return 0;
}

static int parse_postfix(parser *p, jnode **node) {
    int rc;
    while (1) {
        if (is_op(cur(p), ".") || is_op(cur(p), "[")) {
            if ((rc = parse_subscript(p, node)) < 0) return rc;
        } else if (is_op(cur(p), "(")) {
            jnode *n;
            NEW(n, N_CALL);
            n->a = *node;
            if ((rc = parse_call_args(p, n)) < 0) return rc;
            *node = n;
        } else {
            return 0;
        }
    }
}

/* | name(args) — n->a = operand (may be NULL for filter blocks). */
static int parse_filter(parser *p, jnode *operand, jnode **out) {
    int rc;
    if (cur(p)->t != TK_NAME) return unexpected(p, "filter name");
    jnode *n;
    NEW(n, N_FILTER);
    if ((rc = set_str(n, cur(p)->s, cur(p)->n)) < 0) return rc;
    n->a = operand;
    adv(p);
    if (is_op(cur(p), "(") && (rc = parse_call_args(p, n)) < 0) return rc;
    *out = n;
    return 0;
}

static int parse_filter_expr(parser *p, jnode **node) {
    int rc;
    while (1) {
        if (is_op(cur(p), "|")) {
            adv(p);
            if ((rc = parse_filter(p, *node, node)) < 0) return rc;
        } else if (is_name(cur(p), "is")) {
            adv(p);
            jnode *n;
            NEW(n, N_TEST);
            if (is_name(cur(p), "not")) { n->op = 1; adv(p); }
            if (cur(p)->t != TK_NAME) return unexpected(p, "test name");
            if ((rc = set_str(n, cur(p)->s, cur(p)->n)) < 0) return rc;
            n->a = *node;
            adv(p);
            jtok *t = cur(p);
            if (is_op(t, "(")) {
                if ((rc = parse_call_args(p, n)) < 0) return rc;
            } else if ((t->t == TK_NAME || t->t == TK_STRING || t->t == TK_INT || t->t == TK_FLOAT ||
                        is_op(t, "[") || is_op(t, "{")) &&
                       !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and") && !is_name(t, "if")) {
                if (is_name(t, "is")) return perr(p, "You cannot chain multiple tests with is");
                jnode *arg;
                if ((rc = parse_primary(p, &arg)) < 0 || (rc = parse_postfix(p, &arg)) < 0) return rc;
                if ((rc = nodes_push(&n->kids, arg)) < 0) return rc;
            }
            *node = n;
        } else if (is_op(cur(p), "(")) {
            jnode *n;
            NEW(n, N_CALL);
            n->a = *node;
            if ((rc = parse_call_args(p, n)) < 0) return rc;
            *node = n;
        } else {
            return 0;
        }
    }
}

static int parse_unary(parser *p, bool with_filter, jnode **out) {
    int rc;
    if (++p->depth > JJ_MAX_PARSE_DEPTH) return perr(p, "expression nested too deeply");
    jnode *n;
    if (is_op(cur(p), "-") || is_op(cur(p), "+")) {
        jnode *u;
        NEW(u, is_op(cur(p), "-") ? N_NEG : N_POS);
        adv(p);
        if ((rc = parse_unary(p, false, &u->a)) < 0) return rc;
        n = u;
    } else if ((rc = parse_primary(p, &n)) < 0) {
        return rc;
    }
    if ((rc = parse_postfix(p, &n)) < 0) return rc;
    if (with_filter && (rc = parse_filter_expr(p, &n)) < 0) return rc;
    p->depth--;
    *out = n;
    return 0;
}

static int bin(parser *p, int op, jnode *a, jnode *b, jnode **out) {
    jnode *n;
    NEW(n, N_BIN);
    n->op = op;
    n->a = a;
    n->b = b;
    *out = n;
    return 0;
}

/* A level of left-associative binary operators over the level below it
 * (Jinja's precedence, tightest first: **, then * / // %, then ~ (a
 * concat node of its own), then + -). */
typedef struct {
    const char *sym;
    int op;
} binop;
static const binop pow_ops[] = {{"**", OP_POW}, {NULL, 0}};
static const binop mul_ops[] = {{"*", OP_MUL}, {"/", OP_DIV}, {"//", OP_FLOORDIV}, {"%", OP_MOD}, {NULL, 0}};
static const binop add_ops[] = {{"+", OP_ADD}, {"-", OP_SUB}, {NULL, 0}};

static int parse_level(parser *p, const binop *ops, int (*operand)(parser *p, jnode **out), jnode **out) {
    int rc;
    jnode *l, *r;
    if ((rc = operand(p, &l)) < 0) return rc;
    while (1) {
        const binop *o = ops;
        while (o->sym && !is_op(cur(p), o->sym)) o++;
        if (!o->sym) break;
        adv(p);
        if ((rc = operand(p, &r)) < 0 || (rc = bin(p, o->op, l, r, &l)) < 0) return rc;
    }
    *out = l;
    return 0;
}

static int parse_filtered(parser *p, jnode **out) { return parse_unary(p, true, out); }
static int parse_pow(parser *p, jnode **out) { return parse_level(p, pow_ops, parse_filtered, out); }
static int parse_math2(parser *p, jnode **out) { return parse_level(p, mul_ops, parse_pow, out); }

static int parse_concat(parser *p, jnode **out) {
    int rc;
    jnode *l;
    if ((rc = parse_math2(p, &l)) < 0) return rc;
    if (is_op(cur(p), "~")) {
        jnode *n;
        NEW(n, N_CONCAT);
        if ((rc = nodes_push(&n->kids, l)) < 0) return rc;
        while (is_op(cur(p), "~")) {
            adv(p);
            if ((rc = parse_math2(p, &l)) < 0 || (rc = nodes_push(&n->kids, l)) < 0) return rc;
        }
        l = n;
    }
    *out = l;
    return 0;
}

static int parse_math1(parser *p, jnode **out) { return parse_level(p, add_ops, parse_concat, out); }

static int parse_compare(parser *p, jnode **out) {
    int rc;
    jnode *l;
    if ((rc = parse_math1(p, &l)) < 0) return rc;
    jnode *n = NULL;
    while (1) {
        jtok *t = cur(p);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
               : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : 0;
        if (!op && is_name(t, "not") && is_name(peek(p, 1), "in")) { op = OP_NOTIN; adv(p); }
        if (!op) break;
        adv(p);
        if (!n) {
            NEW(n, N_COMPARE);
            if ((rc = nodes_push(&n->kids, l)) < 0) return rc;
        }
        jnode *r;
        if ((rc = parse_math1(p, &r)) < 0 || (rc = nodes_push(&n->kids, r)) < 0) return rc;
        int *no = realloc(n->ops, (size_t)n->kids.n * sizeof *no);
        if (!no) return err_set(KS_ENOMEM, "chat template: out of memory");
        n->ops = no;
        n->ops[n->kids.n - 2] = op;
    }
    *out = n ? n : l;
    return 0;
}

static int parse_not(parser *p, jnode **out) {
    if (is_name(cur(p), "not")) {
        if (++p->depth > JJ_MAX_PARSE_DEPTH) return perr(p, "expression nested too deeply");
        jnode *n;
        NEW(n, N_NOT);
        adv(p);
        int rc = parse_not(p, &n->a);
        if (rc < 0) return rc;
        p->depth--;
        *out = n;
        return 0;
    }
    return parse_compare(p, out);
}

static int parse_andor(parser *p, bool is_or, jnode **out) {
    int rc;
    jnode *l, *r;
    if ((rc = is_or ? parse_andor(p, false, &l) : parse_not(p, &l)) < 0) return rc;
    while (is_name(cur(p), is_or ? "or" : "and")) {
        adv(p);
        if ((rc = is_or ? parse_andor(p, false, &r) : parse_not(p, &r)) < 0) return rc;
        jnode *n;
        NEW(n, is_or ? N_OR : N_AND);
        n->a = l;
        n->b = r;
        l = n;
    }
    *out = l;
    return 0;
}

static int parse_expr(parser *p, bool with_cond, jnode **out) {
    int rc;
    if (++p->depth > JJ_MAX_PARSE_DEPTH) return perr(p, "expression nested too deeply");
    jnode *l;
    if ((rc = parse_andor(p, true, &l)) < 0) return rc;
    while (with_cond && is_name(cur(p), "if")) {
        adv(p);
        jnode *n;
        NEW(n, N_COND);
        n->b = l;
        if ((rc = parse_andor(p, true, &n->a)) < 0) return rc;
        if (is_name(cur(p), "else")) {
            adv(p);
            if ((rc = parse_expr(p, true, &n->c)) < 0) return rc;
        }
        l = n;
    }
    p->depth--;
    *out = l;
    return 0;
}

/* expr or expr, expr, ... (a tuple) — for set values and for iterables. */
static int parse_tuple_expr(parser *p, bool with_cond, jnode **out) {
    int rc;
    jnode *e;
    if ((rc = parse_expr(p, with_cond, &e)) < 0) return rc;
    if (!is_op(cur(p), ",")) { *out = e; return 0; }
    jnode *n;
    NEW(n, N_TUPLE);
    if ((rc = nodes_push(&n->kids, e)) < 0) return rc;
    while (is_op(cur(p), ",")) {
        adv(p);
        if (cur(p)->t == TK_BLOCK_END || is_name(cur(p), "if")) break;
        if ((rc = parse_expr(p, with_cond, &e)) < 0 || (rc = nodes_push(&n->kids, e)) < 0) return rc;
    }
    *out = n;
    return 0;
}

/* ---- statements ---- */

static int parse_body(parser *p, jnodes *body, const char *const *ends, int *which);

/* Names for a for/set target: a, b  or (a, b). Returns count; op=1 if tuple. */
static int parse_targets(parser *p, jnode *n) {
    int rc;
    bool paren = is_op(cur(p), "(");
    if (paren) adv(p);
    while (1) {
        if (cur(p)->t != TK_NAME) return unexpected(p, "a variable name");
        if ((rc = names_push(n, cur(p)->s)) < 0) return rc;
        adv(p);
        if (!is_op(cur(p), ",")) break;
        adv(p);
        n->op = 1;
    }
    if (paren) {
        n->op = 1;
        if ((rc = expect_op(p, ")")) < 0) return rc;
    }
    return 0;
}

static int parse_end(parser *p, jnodes *body, const char *const *ends, int *which) {
    int rc;
    if (++p->depth > JJ_MAX_PARSE_DEPTH) return perr(p, "blocks nested too deeply");
    rc = parse_body(p, body, ends, which);
    p->depth--;
    return rc;
}

static int parse_if(parser *p, jnode **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    int rc, which;
    jnode *n;
    NEW(n, S_IF);
    if ((rc = parse_expr(p, true, &n->a)) < 0 || (rc = expect_block_end(p)) < 0) return rc;
    if ((rc = parse_end(p, &n->body, ends, &which)) < 0) return rc;
    if (which == 0) {
        jnode *e;
        if ((rc = parse_if(p, &e)) < 0 || (rc = nodes_push(&n->orelse, e)) < 0) return rc;
    } else if (which == 1) {
        if ((rc = expect_block_end(p)) < 0 || (rc = parse_end(p, &n->orelse, endif, &which)) < 0) return rc;
        if ((rc = expect_block_end(p)) < 0) return rc;
    } else if ((rc = expect_block_end(p)) < 0) {
        return rc;
    }
    *out = n;
    return 0;
}

static int parse_for(parser *p, jnode **out) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    int rc, which;
    jnode *n;
    NEW(n, S_FOR);
    if ((rc = parse_targets(p, n)) < 0) return rc;
    if (!is_name(cur(p), "in")) return unexpected(p, "'in'");
    adv(p);
    if ((rc = parse_tuple_expr(p, false, &n->a)) < 0) return rc;
    if (is_name(cur(p), "if")) {
        adv(p);
        if ((rc = parse_expr(p, true, &n->b)) < 0) return rc;
    }
    if (is_name(cur(p), "recursive")) return perr(p, "recursive for loops are not supported");
    if ((rc = expect_block_end(p)) < 0) return rc;
    p->loops++;
    rc = parse_end(p, &n->body, ends, &which);
    p->loops--;
    if (rc < 0 || (rc = expect_block_end(p)) < 0) return rc;
    if (which == 1) {
        if ((rc = parse_end(p, &n->orelse, endfor, &which)) < 0 || (rc = expect_block_end(p)) < 0) return rc;
    }
    *out = n;
    return 0;
}

static int parse_filter_chain(parser *p, jnode **out) {
    int rc;
    jnode *f = NULL;
    do {
        if ((rc = parse_filter(p, f, &f)) < 0) return rc;
        if (!is_op(cur(p), "|")) break;
        adv(p);
    } while (1);
    *out = f;
    return 0;
}

static int parse_set(parser *p, jnode **out) {
    static const char *const ends[] = {"endset", NULL};
    int rc, which;
    jnode *n;
    NEW(n, S_SET);
    if (cur(p)->t == TK_NAME && is_op(peek(p, 1), ".") && peek(p, 2)->t == TK_NAME) {
        n->op = 2;
        if ((rc = names_push(n, cur(p)->s)) < 0 || (rc = set_str(n, peek(p, 2)->s, peek(p, 2)->n)) < 0) return rc;
        adv(p); adv(p); adv(p);
    } else if ((rc = parse_targets(p, n)) < 0) {
        return rc;
    }
    if (is_op(cur(p), "=")) {
        adv(p);
        if ((rc = parse_tuple_expr(p, true, &n->a)) < 0 || (rc = expect_block_end(p)) < 0) return rc;
        *out = n;
        return 0;
    }
    if (n->op != 0) return unexpected(p, "'='");
    n->kind = S_SETBLOCK;
    if (is_op(cur(p), "|")) {
        adv(p);
        if ((rc = parse_filter_chain(p, &n->a)) < 0) return rc;
    }
    if ((rc = expect_block_end(p)) < 0) return rc;
    if ((rc = parse_end(p, &n->body, ends, &which)) < 0 || (rc = expect_block_end(p)) < 0) return rc;
    *out = n;
    return 0;
}

/* one macro parameter: its name into names, its default (or NULL) into kwv */
static int parse_param(parser *p, jnode *n) {
    int rc;
    if (cur(p)->t != TK_NAME) return unexpected(p, "a parameter name");
    if ((rc = names_push(n, cur(p)->s)) < 0) return rc;
    adv(p);
    jnode *d = NULL;
    if (is_op(cur(p), "=")) {
        adv(p);
        if ((rc = parse_expr(p, true, &d)) < 0) return rc;
    }
    return nodes_push(&n->kwv, d);
}

/* ( a, b=default, ... ) into names / kwv (NULL default when none). */
static int parse_params(parser *p, jnode *n) { return parse_paren_list(p, n, parse_param); }

static int parse_macro(parser *p, jnode **out) {
    static const char *const ends[] = {"endmacro", NULL};
    int rc, which;
    jnode *n;
    NEW(n, S_MACRO);
    if (cur(p)->t != TK_NAME) return unexpected(p, "macro name");
    if ((rc = set_str(n, cur(p)->s, cur(p)->n)) < 0) return rc;
    adv(p);
    if ((rc = parse_params(p, n)) < 0 || (rc = expect_block_end(p)) < 0) return rc;
    int loops = p->loops;
    p->loops = 0;
    rc = parse_end(p, &n->body, ends, &which);
    p->loops = loops;
    if (rc < 0) return rc;
    if (cur(p)->t == TK_NAME) adv(p);  /* {% endmacro name %} */
    if ((rc = expect_block_end(p)) < 0) return rc;
    *out = n;
    return 0;
}

static int parse_callblock(parser *p, jnode **out) {
    static const char *const ends[] = {"endcall", NULL};
    int rc, which;
    jnode *n;
    NEW(n, S_CALLBLOCK);
    if (is_op(cur(p), "(") && (rc = parse_params(p, n)) < 0) return rc;
    if ((rc = parse_expr(p, true, &n->a)) < 0) return rc;
    if (n->a->kind != N_CALL) return perr(p, "expected a call expression in {%% call %%}");
    if ((rc = expect_block_end(p)) < 0) return rc;
    int loops = p->loops;
    p->loops = 0;
    rc = parse_end(p, &n->body, ends, &which);
    p->loops = loops;
    if (rc < 0 || (rc = expect_block_end(p)) < 0) return rc;
    *out = n;
    return 0;
}

static int parse_simple_block(parser *p, jnode *n, const char *end) {
    const char *const ends[] = {end, NULL};
    int rc, which;
    if ((rc = expect_block_end(p)) < 0) return rc;
    if ((rc = parse_end(p, &n->body, ends, &which)) < 0) return rc;
    return expect_block_end(p);
}

static int parse_statement(parser *p, jnode **out) {
    jtok *t = cur(p);
    if (t->t != TK_NAME) return unexpected(p, "a statement name");
    char name[32];
    snprintf(name, sizeof name, "%s", t->s);
    adv(p);
    int rc;
    jnode *n;
    if (!strcmp(name, "if")) return parse_if(p, out);
    if (!strcmp(name, "for")) return parse_for(p, out);
    if (!strcmp(name, "set")) return parse_set(p, out);
    if (!strcmp(name, "macro")) return parse_macro(p, out);
    if (!strcmp(name, "call")) return parse_callblock(p, out);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!p->loops) { p->i--; return perr(p, "'%s' outside of a loop", name); }
        NEW(n, name[0] == 'b' ? S_BREAK : S_CONTINUE);
        if ((rc = expect_block_end(p)) < 0) return rc;
        *out = n;
        return 0;
    }
    if (!strcmp(name, "filter")) {
        NEW(n, S_FILTERBLOCK);
        if ((rc = parse_filter_chain(p, &n->a)) < 0) return rc;
        if ((rc = parse_simple_block(p, n, "endfilter")) < 0) return rc;
        *out = n;
        return 0;
    }
    if (!strcmp(name, "with")) {
        NEW(n, S_WITH);
        while (cur(p)->t == TK_NAME) {
            if ((rc = names_push(n, cur(p)->s)) < 0) return rc;
            adv(p);
            jnode *v;
            if ((rc = expect_op(p, "=")) < 0 || (rc = parse_expr(p, true, &v)) < 0) return rc;
            if ((rc = nodes_push(&n->kids, v)) < 0) return rc;
            if (!is_op(cur(p), ",")) break;
            adv(p);
        }
        if ((rc = parse_simple_block(p, n, "endwith")) < 0) return rc;
        *out = n;
        return 0;
    }
    if (!strcmp(name, "generation")) {
        NEW(n, S_SCOPE);
        n->op = 1;  /* not a new scope */
        if ((rc = parse_simple_block(p, n, "endgeneration")) < 0) return rc;
        *out = n;
        return 0;
    }
    p->i--;
    return perr(p, "unknown tag '%s'", name);
}

/* Parses until one of ends (NULL-terminated; NULL = until EOF). The end's
 * name is consumed; the rest of its tag is left to the caller. */
static int parse_body(parser *p, jnodes *body, const char *const *ends, int *which) {
    int rc;
    while (1) {
        jtok *t = cur(p);
        jnode *n = NULL;
        if (t->t == TK_EOF) {
            if (!ends) return 0;
            char exp[128] = "";
            for (int k = 0; ends[k]; k++) {
                size_t l = strlen(exp);
                snprintf(exp + l, sizeof exp - l, "%s'%s'", k ? " or " : "", ends[k]);
            }
            return perr(p, "unexpected end of template, expected %s", exp);
        }
        if (t->t == TK_TEXT) {
            NEW(n, S_TEXT);
            if ((rc = set_str(n, t->s, t->n)) < 0) return rc;
            adv(p);
        } else if (t->t == TK_VAR_BEGIN) {
            adv(p);
            NEW(n, S_OUTPUT);
            if ((rc = parse_tuple_expr(p, true, &n->a)) < 0) return rc;
            if (cur(p)->t != TK_VAR_END) return unexpected(p, "end of print statement '}}'");
            adv(p);
        } else if (t->t == TK_BLOCK_BEGIN) {
            adv(p);
            jtok *k = cur(p);
            if (k->t == TK_NAME && ends) {
                for (int e = 0; ends[e]; e++) {
                    if (!strcmp(k->s, ends[e])) {
                        *which = e;
                        adv(p);
                        return 0;
                    }
                }
            }
            if (k->t == TK_NAME && (!strncmp(k->s, "end", 3) || !strcmp(k->s, "elif") || !strcmp(k->s, "else"))) {
                if (!ends) return perr(p, "unexpected '%s', no block is open", k->s);
                return perr(p, "unexpected '%s', expected '%s'", k->s, ends[0]);
            }
            if ((rc = parse_statement(p, &n)) < 0) return rc;
        } else {
            return unexpected(p, "template text or a tag");
        }
        if ((rc = nodes_push(body, n)) < 0) return rc;
    }
}

int jinja_parse(jinja_template **out, const char *src, size_t len) {
    *out = NULL;
    if (!src && len) return err_set(KS_EINVAL, "chat template: no source");
    jtoks tk;
    int rc = jinja_lex(&tk, src ? src : "", len);
    if (rc < 0) return rc;
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) { jinja_toks_free(&tk); return err_set(KS_ENOMEM, "chat template: out of memory"); }
    parser p = {.tk = &tk, .t = t};
    jnode *root = node_new(&p, S_SCOPE);
    if (!root) { rc = err_set(KS_ENOMEM, "chat template: out of memory"); goto fail; }
    t->root = root;
    if ((rc = parse_body(&p, &root->body, NULL, NULL)) < 0) goto fail;
    jinja_toks_free(&tk);
    *out = t;
    return 0;
fail:
    jinja_toks_free(&tk);
    jinja_free(t);
    return rc;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    for (jnode *n = t->all, *nx; n; n = nx) {
        nx = n->alloc_next;
        free(n->kids.v);
        free(n->kwv.v);
        free(n->body.v);
        free(n->orelse.v);
        for (int i = 0; i < n->nnames; i++) free(n->names[i]);
        free(n->names);
        free(n->ops);
        free(n->s);
        free(n);
    }
    free(t);
}
