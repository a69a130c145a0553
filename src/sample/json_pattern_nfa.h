/* json_pattern_nfa.h — json_pattern's first half, for json_pattern.c
 * alone (not an interface of the library): a pattern parsed to a syntax
 * tree (sequences and alternations as child lists, so nothing recurses on a
 * pattern's length, only on its groups' nesting) and the tree to a
 * Thompson NFA (a repeat's body emitted once per copy), in an rx that owns
 * its tree, sets and states (rx_free). */
#ifndef KS_JSON_PATTERN_NFA_H
#define KS_JSON_PATTERN_NFA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CP_MAX 0x10FFFFu
#define MAX_AST 16384
#define MAX_NFA (1 << 17)
#define MAX_GROUP_DEPTH 64

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

/* The error message (once: the first one stays), "pattern: " and fmt's
 * text; returns -1. */
int rx_fail(rx *x, const char *fmt, ...);
/* *p grown to hold need elements of elt bytes (doubling; false: out of memory) */
bool rx_grow(void **p, int *cap, int need, size_t elt);
/* Pattern pat_index (its text from x->p to x->end) as any* R any* and its
 * S_MATCH (set = pat_index), the loops over the set of every code point;
 * returns its start state, -1 on failure (the message in x->err). */
int rx_add_pattern(rx *x, int pat_index);
void rx_free(rx *x);

#endif
