/* matvec_rules.h — the tensor-core matvec's choices by shape (k_matmul.cu):
 * whether a layer's input norm folds into the product, and the tile a call
 * runs on. Plain C, so the CUDA launcher and a CPU unit test
 * (tests/unit/test_matvec_rules.c) read the same table (matvec_rules.c).
 *
 * A tile: U k blocks (32 wide) in flight a warp and round, MT 16-row tiles
 * a block, pipelined or not (the next round's weights loaded while this
 * one multiplies), and the block's warps (4, 8 or 16); above 16 tokens
 * the launcher caps MT at 2 (1 on 16 warps: the reduction's shared memory)
 * and raises U to keep the bytes in flight. U, MT and the
 * pipelining never change a row's arithmetic, so they may follow the token
 * count; the warps are the block's k split, part of the arithmetic, so a
 * rule's warps follow the shape alone (DESIGN.md principle 2: decode,
 * verify and batched decode rows bitwise equal) — the unit test checks it. */
#ifndef KS_MATVEC_RULES_H
#define KS_MATVEC_RULES_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* a call's form: the product alone, with the input norm folded in, the
 * SwiGLU gate|up (W = [gate; up], out = silu(gate) * up), or both */
enum { MV_PLAIN = 1, MV_NORM = 2, MV_SWIGLU = 4, MV_SWIGLU_NORM = 8 };
#define MV_MATRIX (MV_PLAIN | MV_NORM)
#define MV_SWIGLU_ANY (MV_SWIGLU | MV_SWIGLU_NORM)

static inline int mv_form(bool swiglu, bool norm) {
    return swiglu ? (norm ? MV_SWIGLU_NORM : MV_SWIGLU) : (norm ? MV_NORM : MV_PLAIN);
}

typedef struct {
    int u, mt;
    bool pipe;
    int warps;
} mv_tile;

/* One rule: the forms it serves and the ranges it covers (inclusive), the
 * tile, and the shape it was swept for. The first matching rule wins; the
 * last ones match every shape of their forms. */
typedef struct {
    int forms;
    int n_min, n_max, k_min, k_max, rows_min, rows_max;
    mv_tile tile;
    const char *what;
} mv_rule;

extern const mv_rule mv_rules[];
extern const int mv_n_rules;

/* the index of the rule a call takes (n tokens, W rows x k) */
int mv_rule_index(int form, int n, int k, int rows);
mv_tile mv_tile_for(int form, int n, int k, int rows);

/* whether the input norm folds into the product (else a norm kernel first):
 * by shape alone, so a row's arithmetic never depends on the token count */
bool mv_fold_norm(int k, int rows, bool swiglu);

/* The tiles each form's launcher instantiates, X(U, MT, PIPE, WARPS): what
 * the table gives that form (the unit test checks both ways). */
#define MV_TILES_PLAIN(X)                                                                                  \
    X(8, 1, false, 8) X(4, 1, true, 16) X(2, 1, true, 16) X(4, 1, true, 8) X(4, 2, true, 8) X(1, 4, false, 4) \
    X(2, 4, false, 4) X(2, 1, true, 8) X(2, 1, false, 8) X(1, 4, false, 8) X(4, 1, false, 8)                \
    X(2, 4, false, 8) X(1, 1, false, 8)
#define MV_TILES_NORM(X)                                                                                     \
    X(1, 4, false, 4) X(2, 4, false, 4) X(2, 1, true, 8) X(2, 1, false, 8) X(4, 2, true, 8) X(1, 4, false, 8) \
    X(4, 1, false, 8) X(2, 4, false, 8)
#define MV_TILES_SWIGLU(X) X(2, 2, true, 8) X(2, 4, false, 4) X(2, 2, false, 8) X(4, 2, false, 8)
#define MV_TILES_SWIGLU_NORM(X) \
    X(2, 2, false, 8) X(1, 2, true, 8) X(2, 2, true, 8) X(2, 4, false, 4) X(4, 2, false, 8)

#ifdef __cplusplus
}
#endif

#endif
