/* drafter.h — a small companion model that drafts tokens for the target
 * (e.g. the 2-layer tinycoder/drafter): same tokenizer, its own paged KV
 * cache. For each sequence the drafter keeps KV for a prefix of the
 * sequence's tokens; a proposal first catches up on the tokens it has not
 * seen (one forward; a long one, such as a request's prompt, as prompt
 * rows), then decodes greedily, one token per forward. Greedy
 * drafts are deterministic (q = 1{d}), so the verifier's rejection rule keeps
 * sampling exact at any temperature.
 *
 * Ownership: the drafter borrows its model; it owns its KV cache and scratch.
 * A drafter_seq's blocks belong to the drafter's cache (drafter_seq_release). */
#ifndef KS_DRAFTER_H
#define KS_DRAFTER_H

#include <stdint.h>

#include "kv/kv_cache.h"
#include "model/model.h"

typedef struct drafter drafter;

typedef struct {
    kv_seq kv;
    int n_cached;   /* tokens of the sequence with drafter KV */
} drafter_seq;

/* kv_tokens: the drafter's KV pool (tokens over all sequences). */
int drafter_new(drafter **out, model *dm, int kv_tokens);
void drafter_free(drafter *d);
/* Writes up to k draft tokens continuing ctx[0..n_ctx) into out; returns how
 * many (0 when the drafter's KV is full), negative on failure. */
int drafter_propose(drafter *d, drafter_seq *s, const int32_t *ctx, int n_ctx, int k, int32_t *out);
/* After verification: only the first n_valid tokens of the sequence keep
 * their drafter KV (the rest were drafts that lost). */
void drafter_rewind(drafter *d, drafter_seq *s, int n_valid);
void drafter_seq_release(drafter *d, drafter_seq *s);
/* Checks that a drafter can serve a target: same vocabulary size. */
int drafter_check(const model *target, const model *dm, const char *dir);

#endif
