/* prefill_logits.h — test helper: a prompt prefilled through model_forward
 * in chunks, the last row's logits back (n_prompt: whether the chunks' rows
 * are marked prompt rows, for backends with a prompt path). */
#ifndef KS_TEST_PREFILL_LOGITS_H
#define KS_TEST_PREFILL_LOGITS_H

#include <stdbool.h>
#include <stdlib.h>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "test.h"

/* Prefills ids in chunks of `chunk` tokens and returns the last row's logits
 * (malloc'd; the sequence's KV released). */
static inline float *prefill_logits(model *m, kv_cache *kv, const int32_t *ids, int n, int chunk, bool prompt) {
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof *logits);
    int32_t *pos = malloc((size_t)n * 4), *seq = calloc((size_t)n, 4);
    kv_seq s = {0};
    kv_seq *seqs[1] = {&s};
    for (int off = 0; off < n; off += chunk) {
        int c = n - off < chunk ? n - off : chunk;
        CHECK(kv_seq_reserve(kv, &s, off + c) == 0);
        for (int i = 0; i < c; i++) pos[i] = off + i;
        int32_t last = c - 1;
        model_batch b = {.n_tokens = c, .tokens = ids + off, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = seqs,
                         .n_logits = 1, .logit_rows = &last, .n_prompt = prompt ? c : 0};
        CHECK(model_forward(m, kv, &b, logits) == 0);
    }
    kv_seq_release(kv, &s);
    free(pos);
    free(seq);
    return logits;
}

#endif
