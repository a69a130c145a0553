/* test_matvec_rules.c — the tensor-core matvec's tile table
 * (src/backend/cuda/matvec_rules.c) over a grid of shapes: every shape has
 * a rule; a shape's warps (the block's k split, part of the arithmetic)
 * never change with the token count; SwiGLU tiles pair (MT even, at most 8
 * warps); each form gets exactly the tiles its launcher instantiates
 * (matvec_rules.h's lists: a tile missing there would launch the fallback,
 * a listed one never given is dead code); no rule is shadowed by the ones
 * before it. Plain C: runs without a GPU. */
#include "backend/cuda/matvec_rules.h"
#include "test.h"

static const int grid_k[] = {32, 512, 992, 1024, 1536, 2016, 2048, 3072, 4064, 4096, 6144, 12288, 16384};
static const int grid_rows[] = {16, 512, 2048, 2064, 4080, 4096, 6128, 6144, 12288, 24560, 24576, 151936};
#define N_K (int)(sizeof grid_k / sizeof *grid_k)
#define N_ROWS (int)(sizeof grid_rows / sizeof *grid_rows)
#define MAX_N 64
static const int forms[] = {MV_PLAIN, MV_NORM, MV_SWIGLU, MV_SWIGLU_NORM};

static bool same_tile(mv_tile a, mv_tile b) {
    return a.u == b.u && a.mt == b.mt && a.pipe == b.pipe && a.warps == b.warps;
}

TEST(test_matvec_rules_cover_every_shape_with_warps_fixed_by_shape) {
    int bad_cover = 0, bad_warps = 0, bad_swiglu = 0;
    for (int f = 0; f < 4; f++)
        for (int ki = 0; ki < N_K; ki++)
            for (int ri = 0; ri < N_ROWS; ri++) {
                int k = grid_k[ki], rows = grid_rows[ri], warps = 0;
                for (int n = 1; n <= MAX_N; n++) {
                    int i = mv_rule_index(forms[f], n, k, rows);
                    if (i < 0) {
                        if (!bad_cover++) test_fail(__FILE__, __LINE__, "form %d n %d k %d rows %d: no rule", forms[f], n, k, rows);
                        continue;
                    }
                    mv_tile t = mv_rules[i].tile;
                    if (!warps) warps = t.warps;
                    if (t.warps != warps && !bad_warps++)
                        test_fail(__FILE__, __LINE__, "form %d k %d rows %d: %d warps at n %d, %d below", forms[f], k,
                                  rows, t.warps, n, warps);
                    if ((forms[f] & MV_SWIGLU_ANY) && (t.mt % 2 || t.warps > 8) && !bad_swiglu++)
                        test_fail(__FILE__, __LINE__, "SwiGLU form %d given (%d,%d) on %d warps (rule %d)", forms[f],
                                  t.u, t.mt, t.warps, i);
                }
            }
    CHECK(bad_cover == 0);
    CHECK(bad_warps == 0);
    CHECK(bad_swiglu == 0);
}

/* the tiles of one form's list (matvec_rules.h), as the launcher sees them */
#define MAX_LISTED 32
typedef struct {
    mv_tile t[MAX_LISTED];
    bool seen[MAX_LISTED];
    int n;
} tile_list;
#define ADD_TILE(U, MT, P, W) l->t[l->n++] = (mv_tile){U, MT, P, W};
static void list_of(int form, tile_list *l) {
    l->n = 0;
    memset(l->seen, 0, sizeof l->seen);
    if (form == MV_PLAIN) { MV_TILES_PLAIN(ADD_TILE) }
    if (form == MV_NORM) { MV_TILES_NORM(ADD_TILE) }
    if (form == MV_SWIGLU) { MV_TILES_SWIGLU(ADD_TILE) }
    if (form == MV_SWIGLU_NORM) { MV_TILES_SWIGLU_NORM(ADD_TILE) }
}

TEST(test_matvec_rules_give_each_form_the_tiles_it_instantiates) {
    bool rule_hit[64] = {0};
    CHECK(mv_n_rules <= 64);
    for (int f = 0; f < 4; f++) {
        tile_list l;
        list_of(forms[f], &l);
        CHECK(l.n > 0);
        for (int a = 0; a < l.n; a++)
            for (int b = a + 1; b < l.n; b++)
                if (same_tile(l.t[a], l.t[b]))
                    test_fail(__FILE__, __LINE__, "form %d lists (%d,%d) twice", forms[f], l.t[a].u, l.t[a].mt);
        int unlisted = 0;
        for (int ki = 0; ki < N_K; ki++)
            for (int ri = 0; ri < N_ROWS; ri++)
                for (int n = 1; n <= MAX_N; n++) {
                    int i = mv_rule_index(forms[f], n, grid_k[ki], grid_rows[ri]);
                    if (i < 0) continue; /* (the test above) */
                    if (i < 64) rule_hit[i] = true;
                    mv_tile t = mv_rules[i].tile;
                    int j = 0;
                    while (j < l.n && !same_tile(l.t[j], t)) j++;
                    if (j < l.n) l.seen[j] = true;
                    else if (!unlisted++)
                        test_fail(__FILE__, __LINE__, "form %d: rule %d's tile (%d,%d)%s w%d is not in its list",
                                  forms[f], i, t.u, t.mt, t.pipe ? "p" : "", t.warps);
                }
        CHECK(unlisted == 0);
        for (int j = 0; j < l.n; j++)
            if (!l.seen[j])
                test_fail(__FILE__, __LINE__, "form %d lists (%d,%d)%s w%d, which no shape gets", forms[f], l.t[j].u,
                          l.t[j].mt, l.t[j].pipe ? "p" : "", l.t[j].warps);
    }
    for (int i = 0; i < mv_n_rules && i < 64; i++)
        if (!rule_hit[i]) test_fail(__FILE__, __LINE__, "rule %d (%s) is taken by no shape", i, mv_rules[i].what);
}
