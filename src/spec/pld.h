/* pld.h — prompt lookup decoding (PLD), the model-agnostic draft source: the
 * most recent earlier occurrence of the sequence's last `key_len` tokens is
 * found and the tokens that followed it are proposed. Sources are searched in
 * order: an optional prediction (OpenAI predicted outputs) first, then (when
 * search_ctx: prompt lookup proper) the sequence's own prompt + output. */
#ifndef KS_PLD_H
#define KS_PLD_H

#include <stdbool.h>
#include <stdint.h>

/* Writes up to max_draft tokens into out (drafts found in ctx: at most
 * max_ctx_draft — a prediction is trusted for longer runs); returns how many (0: no match,
 * negative: the proposer failed — the engine then decodes without drafts).
 * ctx[0..n_ctx) is prompt + output so far; pred (may be NULL) the prediction.
 * While the output (the last n_gen tokens of ctx) is a prefix of the
 * prediction, the prediction's next tokens are proposed. */
int pld_propose(const int32_t *ctx, int n_ctx, int n_gen, const int32_t *pred, int n_pred, int key_len,
                int max_draft, int max_ctx_draft, bool search_ctx, int32_t *out);

/* Test hook: the proposer fails (returns -1) once, after `calls` more
 * successful calls; -1 disarms it. */
void pld_test_fail_after(int calls);

/* Prompt-time gate: the fraction of the prompt's 3-grams that already occurred
 * earlier in the prompt (0 = all novel, ~1 = highly repetitive). */
double pld_repetition_score(const int32_t *ids, int n);

#endif
