/* token_mask.h — which tokens a JSON constraint allows next: every text
 * token's bytes (tok_id_bytes) sorted, so that tokens sharing a prefix share
 * the recognizer's walk over it — a prefix refused once refuses every token
 * that starts with it without another byte fed.
 *
 * Special tokens and tokens with no bytes are never allowed (the engine
 * adds the end-of-sequence tokens itself when the document may end); ids
 * the model has beyond the tokenizer's vocabulary neither.
 *
 * Ownership: built once per engine (token_mask_new), read-only but for a
 * scratch stack of states: token_mask_fill is for one thread at a time. */
#ifndef KS_TOKEN_MASK_H
#define KS_TOKEN_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "sample/json_constraint.h"
#include "tok/tok.h"

typedef struct token_mask token_mask;

/* n_ids: the model's vocabulary size (ids [0, n_ids)). NULL on failure. */
token_mask *token_mask_new(const tokenizer *t, int n_ids);
void token_mask_free(token_mask *m);
/* allowed[id] = 1 for each token whose bytes s accepts, else 0 (n_ids
 * entries); returns how many are allowed. */
int token_mask_fill(token_mask *m, const jc_state *s, uint8_t *allowed);
/* Whether s accepts token id's bytes. */
bool token_mask_allows(const token_mask *m, const jc_state *s, int id);
/* Feeds token id's bytes to s; false when s refuses them (s undefined). */
bool token_mask_feed(const token_mask *m, jc_state *s, int id);

#endif
