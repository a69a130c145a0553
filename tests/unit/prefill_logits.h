/* prefill_logits.h — test helpers for driving model_forward directly.
 * forward_seq: one sequence's tokens at consecutive positions in one
 * forward, the logits of chosen rows back. prefill_logits: a prompt
 * prefilled in chunks, the last row's logits back (prompt: whether the
 * chunks' rows are marked prompt rows, for backends with a prompt path). */
#ifndef KS_TEST_PREFILL_LOGITS_H
#define KS_TEST_PREFILL_LOGITS_H

#include <stdbool.h>
#include <stdlib.h>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "test.h"

/* toks[0..n) of sequence s at positions p0 .. p0 + n - 1 (room reserved in
 * kv), the logits of rows rows[0..n_rows) of the forward (NULL: its last
 * row) into logits (n_rows x vocab). The forward's status. */
static inline int forward_seq(model *m, kv_cache *kv, kv_seq *s, const int32_t *toks, int n, int p0, const int32_t *rows,
                              int n_rows, bool prompt, float *logits) {
    int32_t *pos = malloc((size_t)n * 4), *seq = calloc((size_t)n, 4), last = n - 1;
    kv_seq *seqs[1] = {s};
    int rc = pos && seq ? kv_seq_reserve(kv, s, p0 + n) : -1;
    for (int i = 0; pos && i < n; i++) pos[i] = p0 + i;
    model_batch b = {.n_tokens = n, .tokens = toks, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = seqs,
                     .n_logits = rows ? n_rows : 1, .logit_rows = rows ? rows : &last, .n_prompt = prompt ? n : 0};
    if (!rc) rc = model_forward(m, kv, &b, logits);
    free(pos);
    free(seq);
    return rc;
}

/* Prefills ids in chunks of `chunk` tokens and returns the last row's logits
 * (malloc'd; the sequence's KV released). */
static inline float *prefill_logits(model *m, kv_cache *kv, const int32_t *ids, int n, int chunk, bool prompt) {
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof *logits);
    kv_seq s = {0};
    for (int off = 0; off < n; off += chunk)
        CHECK(forward_seq(m, kv, &s, ids + off, n - off < chunk ? n - off : chunk, off, NULL, 0, prompt, logits) == 0);
    kv_seq_release(kv, &s);
    return logits;
}

#endif
