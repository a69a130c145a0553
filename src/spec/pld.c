/* pld.c — prompt lookup drafts and the prompt repetition score (see pld.h). */
#include "spec/pld.h"

#include <stdlib.h>
#include <string.h>

/* Latest i < limit with src[i..i+k) == key (i + k <= n_src), or -1. */
static int find_last(const int32_t *src, int n_src, int limit, const int32_t *key, int k) {
    for (int i = limit - 1; i >= 0; i--) {
        if (i + k > n_src) continue;
        if (src[i] == key[0] && !memcmp(src + i, key, (size_t)k * sizeof *key)) return i;
    }
    return -1;
}

static _Atomic int fail_after = -1; /* test hook, see pld.h */

void pld_test_fail_after(int calls) { fail_after = calls; }

int pld_propose(const int32_t *ctx, int n_ctx, int n_gen, const int32_t *pred, int n_pred, int key_len,
                int max_draft, int max_ctx_draft, bool search_ctx, int32_t *out) {
    if (max_draft <= 0) return 0;
    if (fail_after >= 0 && fail_after-- == 0) return -1;
    /* the output so far is a prefix of the prediction: propose what follows */
    if (pred && n_gen < n_pred && n_gen <= n_ctx && !memcmp(ctx + n_ctx - n_gen, pred, (size_t)n_gen * sizeof *ctx)) {
        int n = n_pred - n_gen < max_draft ? n_pred - n_gen : max_draft;
        memcpy(out, pred + n_gen, (size_t)n * sizeof *out);
        return n;
    }
    for (int k = key_len; k >= 1; k--) { /* longest key first, then shorter */
        if (n_ctx < k + 1) continue;
        const int32_t *key = ctx + n_ctx - k;
        if (pred && n_pred > 0) {
            int i = find_last(pred, n_pred, n_pred - k, key, k);
            if (i >= 0) {
                int start = i + k, n = n_pred - start < max_draft ? n_pred - start : max_draft;
                if (n > 0) {
                    memcpy(out, pred + start, (size_t)n * sizeof *out);
                    return n;
                }
            }
        }
        /* in ctx the match must end before the key itself */
        int i = search_ctx ? find_last(ctx, n_ctx - 1, n_ctx - k, key, k) : -1;
        if (i >= 0) {
            int lim = max_ctx_draft < max_draft ? max_ctx_draft : max_draft;
            int start = i + k, n = n_ctx - start < lim ? n_ctx - start : lim;
            if (n > 0) {
                memcpy(out, ctx + start, (size_t)n * sizeof *out);
                return n;
            }
        }
        if (k <= 2) break; /* keys of one token match too much to pay off */
    }
    return 0;
}

typedef struct {
    int32_t a, b, c;
    int used;
} slot;

double pld_repetition_score(const int32_t *ids, int n) {
    if (n < 4) return 0.0;
    int grams = n - 2, cap = 16;
    while (cap < grams * 2) cap *= 2;
    slot *t = calloc((size_t)cap, sizeof *t);
    if (!t) return 0.0;
    int repeats = 0;
    for (int i = 0; i < grams; i++) {
        uint64_t k = ((uint64_t)(uint32_t)ids[i] * 0x9e3779b97f4a7c15ull) ^
                     ((uint64_t)(uint32_t)ids[i + 1] * 0xc2b2ae3d27d4eb4full) ^ (uint64_t)(uint32_t)ids[i + 2];
        size_t h = (size_t)(k ^ (k >> 29)) & (size_t)(cap - 1);
        for (;;) {
            if (!t[h].used) {
                t[h].used = 1;
                t[h].a = ids[i];
                t[h].b = ids[i + 1];
                t[h].c = ids[i + 2];
                break;
            }
            if (t[h].a == ids[i] && t[h].b == ids[i + 1] && t[h].c == ids[i + 2]) {
                repeats++;
                break;
            }
            h = (h + 1) & (size_t)(cap - 1);
        }
    }
    free(t);
    return (double)repeats / grams;
}
