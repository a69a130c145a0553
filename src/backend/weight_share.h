/* weight_share.h — the table a backend keeps of the weights it has made, so
 * that a second weight_init of the same source tensors (a tied lm_head is
 * the embedding table again) shares the first one's backend copy instead of
 * making another. Keyed by the first part's host view, the part count, the
 * rows, the columns and the dtype; reference counted. The key holds only
 * while the source is alive and unchanged (the model's mmap): a weight must
 * be released before its host memory is freed or rewritten. The table owns nothing but its entries: the
 * backend allocates and frees the copies.
 *   impl = weight_share_find(t, w)       a copy to reuse (its count taken) or NULL
 *   weight_share_add(t, w)               after making w->impl (count 1)
 *   if (weight_share_release(t, impl))   the last reference: free the copy
 */
#ifndef KS_WEIGHT_SHARE_H
#define KS_WEIGHT_SHARE_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const void *host; /* first part's host view */
    int n_parts;
    int64_t rows, cols;
    dtype_t dtype;    /* the source's (before a backend's own format) */
    void *impl;
    int refs;
} weight_share_entry;

typedef struct {
    weight_share_entry *e;
    int n, cap;
} weight_share;

/* w: as weight_init filled it from the sources (dtype, rows, cols, parts) */
void *weight_share_find(weight_share *t, const bk_weight *w);
/* a failure to grow the table only loses the sharing */
void weight_share_add(weight_share *t, const bk_weight *w);
/* 1 when impl's last reference went (or impl was never in the table) */
int weight_share_release(weight_share *t, const void *impl);
void weight_share_free(weight_share *t);

#ifdef __cplusplus
}
#endif

#endif
