/* weight_share.c — see weight_share.h. */
#include "backend/weight_share.h"

#include <stdlib.h>

void *weight_share_find(weight_share *t, const bk_weight *w) {
    for (int i = 0; i < t->n; i++) {
        weight_share_entry *s = &t->e[i];
        if (s->host == w->part_data[0] && s->n_parts == w->n_parts && s->rows == w->rows && s->cols == w->cols &&
            s->dtype == w->dtype) {
            s->refs++;
            return s->impl;
        }
    }
    return NULL;
}

void weight_share_add(weight_share *t, const bk_weight *w) {
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        weight_share_entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
        if (!ne) return;
        t->e = ne;
        t->cap = cap;
    }
    t->e[t->n++] = (weight_share_entry){w->part_data[0], w->n_parts, w->rows, w->cols, w->dtype, w->impl, 1};
}

int weight_share_release(weight_share *t, const void *impl) {
    for (int i = 0; i < t->n; i++)
        if (t->e[i].impl == impl) {
            if (--t->e[i].refs > 0) return 0;
            t->e[i] = t->e[--t->n];
            return 1;
        }
    return 1;
}

void weight_share_free(weight_share *t) {
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}
