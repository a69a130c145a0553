/* matvec_rules.c — the table of the tensor-core matvec's tiles and its
 * norm-folding rule (matvec_rules.h says what a tile is).
 *
 * Why tiles differ: more rows a block share each x load (which matters with
 * many tokens) but leave fewer blocks; more k blocks a round keep more bytes
 * in flight a warp but cost registers; pipelining loads the next round while
 * this one multiplies, at twice the registers. The rules are the shapes the
 * H200 was swept at (bench/matvec_sweep.cu: every choice timed with the
 * weights coming from DRAM, as in a decode step, up to 64 tokens;
 * BENCHMARKS.md, twenty-sixth, twenty-seventh, thirty-second and
 * thirty-third sessions), kept where the model's decode agreed. Times below
 * are matvec_sweep's on the H200, "(U,MT)" a tile, p pipelined, w4 / w16
 * blocks of 4 / 16 warps (else 8). */
#include "backend/cuda/matvec_rules.h"

#include <limits.h>

#define BIG INT_MAX
#define LARGE_ROWS (768 * 32) /* the lm_heads and Qwen3-8B's gate|up */
#define T(U, MT, P, W) {U, MT, P, W}

const mv_rule mv_rules[] = {
    /* Qwen3-1.7B's gate|up with its norm (12,288 x 2,048): (1,2)p 13.5 /
     * 13.9 / 13.9 / 17.5 us at 1 / 4 / 8 / 16 tokens against (2,2)p's 16.7
     * / 17.1 / 17.1 / 20.0 and (1,4)'s 16.6 / 15.8 / 16.1 / 18.4 (27th; the
     * unpipelined (4,2) with the norm's loads needed 184 registers, one
     * block an SM); above 16 tokens (2,2): 28.4 / 50.3 us at 32 / 64
     * against 33.7 / 60.1 (33rd) */
    {MV_SWIGLU_NORM, 17, BIG, 2048, BIG, 0, LARGE_ROWS - 1, T(2, 2, false, 8), "Qwen3-1.7B gate|up"},
    {MV_SWIGLU_NORM, 1, 16, 2048, BIG, 0, LARGE_ROWS - 1, T(1, 2, true, 8), "Qwen3-1.7B gate|up"},
    /* tinycoder (k 512 / 1536, its weights L2-resident), up to 8 tokens:
     * gate|up on (2,2)p 2.2 us against (4,2)'s 2.9, down on (8,1) 2.3
     * against (4,1)'s 3.0; tinycoder decode 7,993-8,149 -> 8,375-8,579
     * tok/s (6 rounds interleaved, 27th) */
    {MV_SWIGLU_ANY, 1, 8, 0, 2047, 0, LARGE_ROWS - 1, T(2, 2, true, 8), "tinycoder gate|up"},
    {MV_PLAIN, 1, 8, 1024, 2047, 0, 2048, T(8, 1, false, 8), "tinycoder down"},
    /* Qwen3-1.7B's down (2,048 x 6,144) on 16 warps: (2,1)p 8.9 / 9.1 /
     * 9.2 / 12.9 us at 1 / 4 / 8 / 16 tokens against 8 warps' 9.4 / 9.8 /
     * 10.5 / 14.4; above 16 (4,1)p 17.2 / 30.5 us at 32 / 64 against 17.9
     * / 31.7 (33rd) */
    {MV_PLAIN, 17, BIG, 4096, BIG, 0, 2048, T(4, 1, true, 16), "Qwen3-1.7B down"},
    {MV_PLAIN, 1, 16, 4096, BIG, 0, 2048, T(2, 1, true, 16), "Qwen3-1.7B down"},
    /* Qwen3-1.7B's o (2,048 x 2,048; fewer 16-row blocks than SMs): (4,2)p
     * 3.4 / 3.9 / 4.0 us at 1 / 4 / 8 tokens against (8,1)'s 4.3 / 4.5 /
     * 4.7; above 8 tokens (4,1)p 6.1 against 6.3 at 16 (27th) */
    {MV_PLAIN, 9, BIG, 2048, BIG, 0, 2048, T(4, 1, true, 8), "Qwen3-1.7B o"},
    {MV_PLAIN, 1, 8, 2048, BIG, 0, 2048, T(4, 2, true, 8), "Qwen3-1.7B o"},
    /* the lm_heads at 2048 <= k < 4096 (Qwen3-1.7B's, 151,936 x 2,048, norm
     * folded) on 4 warps: (2,4) 144.7 / 145.7 / 146.0 / 162.4 us at 1 / 4 /
     * 8 / 16 tokens against 8 warps' 148.1 / 149.2 / 149.1 / 165.9; above
     * 16 tokens (1,4) 224.9 / 450.6 us at 32 / 64 against 286.7 / 568.1
     * (33rd) */
    {MV_MATRIX, 17, BIG, 2048, 4095, LARGE_ROWS, BIG, T(1, 4, false, 4), "Qwen3-1.7B lm_head"},
    {MV_MATRIX, 1, 16, 2048, 4095, LARGE_ROWS, BIG, T(2, 4, false, 4), "Qwen3-1.7B lm_head"},
    /* the large SwiGLU (Qwen3-8B's gate|up, 24,576 x 4,096) on 4 warps,
     * 64-row tiles: 49.3 / 49.6 us at 1 / 4 tokens against the 8-warp
     * (2,2)p's 53.0 / 53.7 (32nd) */
    {MV_SWIGLU_ANY, 1, BIG, 0, BIG, LARGE_ROWS, BIG, T(2, 4, false, 4), "Qwen3-8B gate|up"},
    /* 6,144..24,575 rows (Qwen3-8B's qkv) up to 16 tokens on (2,1)p: 13.3
     * / 13.8 / 18.3 us at 1 / 4 / 16 tokens against (2,2)p's 13.9 / 13.9 /
     * 18.9 (Qwen3-8B decode forward 4.996 -> 4.813 ms against the (1,4) /
     * (2,2) before); above 16 unpipelined: 27.3 / 49.0 us at 32 / 64
     * against (2,2)p's 38.4 / 69.4 (32nd, 33rd) */
    {MV_MATRIX, 1, 16, 0, BIG, 192 * 32, LARGE_ROWS - 1, T(2, 1, true, 8), "Qwen3-8B qkv"},
    {MV_MATRIX, 17, BIG, 0, BIG, 192 * 32, LARGE_ROWS - 1, T(2, 1, false, 8), "Qwen3-8B qkv"},
    /* 4,096..6,143 rows above 8 tokens on (4,2)p: at 16 / 32 / 64 tokens
     * 8.8 / 11.8 / 19.6 us against (4,1)'s 9.4 / 13.4 / 22.1 (Qwen3-1.7B
     * qkv), 14.9 / 19.7 / 35.9 against 15.8 / 25.3 / 43.8 (Qwen3-8B o),
     * 35.4 / 49.3 / 92.7 against 36.6 / 52.4 / 97.5 (Qwen3-8B down) (33rd) */
    {MV_MATRIX, 9, BIG, 0, BIG, 4096, 192 * 32 - 1, T(4, 2, true, 8), "Qwen3-1.7B qkv, Qwen3-8B o, down"},
    /* other shapes above 8 tokens (batched decode, verify blocks): more rows
     * a block share its x loads */
    {MV_MATRIX, 9, BIG, 0, BIG, LARGE_ROWS, BIG, T(1, 4, false, 8), "other lm_heads"},
    {MV_SWIGLU_ANY, 9, BIG, 0, BIG, 192 * 32, BIG, T(2, 2, false, 8), "other SwiGLU"},
    {MV_SWIGLU_ANY, 9, BIG, 0, BIG, 0, BIG, T(4, 2, false, 8), "other SwiGLU"},
    {MV_MATRIX, 9, BIG, 0, BIG, 0, BIG, T(4, 1, false, 8), "other"},
    /* the other lm_heads up to 8 tokens: Qwen3-8B's (k 4096) on (2,4) 286
     * us against (2,2)'s 292 at 1 token (8 tiles' k blocks in flight a
     * warp); at k < 2048 (1,4) */
    {MV_MATRIX, 1, 8, 4096, BIG, LARGE_ROWS, BIG, T(2, 4, false, 8), "Qwen3-8B lm_head"},
    {MV_MATRIX, 1, 8, 0, BIG, LARGE_ROWS, BIG, T(1, 4, false, 8), "other lm_heads"},
    {MV_SWIGLU_ANY, 1, 8, 0, BIG, 0, BIG, T(4, 2, false, 8), "other SwiGLU"},
    /* 4,096 rows at k >= 4096 (Qwen3-8B's o and down) up to 8 tokens on
     * (1,1): o 10.4 / 10.4 / 10.6 us at 1 / 4 / 8 tokens against (4,1)'s
     * 11.0 / 11.9 / 12.2, down 26.2 / 26.1 / 26.4 against 27.0 / 28.9 /
     * 29.5 (27th; o on 16 warps, 10.0 alone, lost 2% in model_forward of
     * 16 sequences, 33rd) */
    {MV_PLAIN, 1, 8, 4096, BIG, 4096, BIG, T(1, 1, false, 8), "Qwen3-8B o, down"},
    {MV_MATRIX, 1, 8, 0, BIG, 0, BIG, T(4, 1, false, 8), "other"},
};
const int mv_n_rules = (int)(sizeof mv_rules / sizeof *mv_rules);

int mv_rule_index(int form, int n, int k, int rows) {
    for (int i = 0; i < mv_n_rules; i++) {
        const mv_rule *r = &mv_rules[i];
        if ((r->forms & form) && n >= r->n_min && n <= r->n_max && k >= r->k_min && k <= r->k_max &&
            rows >= r->rows_min && rows <= r->rows_max)
            return i;
    }
    return -1; /* (not reached for n >= 1: the last rules cover every shape of their forms) */
}

mv_tile mv_tile_for(int form, int n, int k, int rows) {
    int i = mv_rule_index(form, n, k, rows);
    if (i >= 0) return mv_rules[i].tile;
    mv_tile t = {4, form & MV_SWIGLU_ANY ? 2 : 1, false, 8};
    return t;
}

/* H200, plain decode after 458 tokens, the norm folded into qkv / gate|up
 * against run apart (both with the residual adds in the epilogue):
 * tinycoder (k 512) +4 / +11%, Qwen3-8B (k 4096) -0.8 / +5.6% (its gate|up
 * on the pipelined SwiGLU tile). Qwen3-1.7B (k 2048) lost 2 / 2.5% while
 * its gate|up took the (4,2) tile (one block an SM with the norm); on the
 * pipelined tile the two folded gain it 5.5% (22nd session). Qwen3-8B's qkv
 * folded: level (15.0-15.1 us against 14.7 apart; 27th, 33rd). Short rows
 * are launch-bound and gain the kernel; long rows pay the block's extra x
 * and weight loads. */
bool mv_fold_norm(int k, int rows, bool swiglu) { return k <= 2048 || (swiglu && rows >= LARGE_ROWS); }
