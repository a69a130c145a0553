/* drafter.c — draft-model proposer (see drafter.h). Only the greedy id of
 * each forward leaves the backend (model_batch.argmax: 4 bytes, not a
 * vocabulary of logits and a host scan), and a catch-up of more than
 * MODEL_PROPOSER_PROMPT_ROWS tokens (a request's prompt) runs as prompt rows, on
 * the backend's bulk path, not as that many decode rows. */
#include "spec/drafter.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

struct drafter {
    model *m;
    kv_cache kv;
    int32_t *pos, *seq, *tok;
    int cap;         /* entries in pos/seq/tok */
};

int drafter_check(const model *target, const model *dm, const char *dir) {
    if (target->cfg.vocab_size != dm->cfg.vocab_size)
        return err_set(KS_EINVAL, "%s: drafter vocabulary (%d) differs from the model's (%d)", dir, dm->cfg.vocab_size,
                       target->cfg.vocab_size);
    return KS_OK;
}

int drafter_new(drafter **out, model *dm, int kv_tokens) {
    drafter *d = calloc(1, sizeof *d);
    if (!d) return err_set(KS_ENOMEM, "drafter: out of memory");
    d->m = dm;
    int rc = model_kv_init(dm, &d->kv, kv_tokens);
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    return KS_OK;
}

void drafter_free(drafter *d) {
    if (!d) return;
    if (d->kv.n_blocks) kv_cache_free(&d->kv);
    free(d->pos);
    free(d->seq);
    free(d->tok);
    free(d);
}

static int ensure(drafter *d, int n) {
    if (n <= d->cap) return 0;
    int cap = n * 2;
    int32_t *a = realloc(d->pos, (size_t)cap * 4), *b, *c;
    if (!a) return -1;
    d->pos = a;
    if (!(b = realloc(d->seq, (size_t)cap * 4))) return -1;
    d->seq = b;
    if (!(c = realloc(d->tok, (size_t)cap * 4))) return -1;
    d->tok = c;
    d->cap = cap;
    return 0;
}

/* One forward of tokens[0..n) at positions from..from+n; next greedy token. */
static int step(drafter *d, drafter_seq *s, const int32_t *tokens, int n, int from) {
    if (ensure(d, n) != 0) return err_set(KS_ENOMEM, "drafter: out of memory");
    if (kv_seq_reserve(&d->kv, &s->kv, from + n) != 0) return 0; /* pool full: no draft */
    for (int i = 0; i < n; i++) {
        d->pos[i] = from + i;
        d->seq[i] = 0;
    }
    int32_t row = n - 1, id = 0;
    kv_seq *seqs[1] = {&s->kv};
    model_batch b = {.n_tokens = n, .tokens = tokens, .pos = d->pos, .seq = d->seq, .n_seqs = 1, .seqs = seqs,
                     .n_logits = 1, .logit_rows = &row, .n_prompt = n > MODEL_PROPOSER_PROMPT_ROWS ? n : 0,
                     .argmax = &id};
    int rc = model_forward(d->m, &d->kv, &b, NULL);
    if (rc) return rc;
    s->n_cached = from + n;
    s->kv.n_tokens = s->n_cached;
    return 1 + id; /* token + 1 (0 = none) */
}

int drafter_propose(drafter *d, drafter_seq *s, const int32_t *ctx, int n_ctx, int k, int32_t *out) {
    if (k <= 0 || n_ctx <= 0) return 0;
    if (s->n_cached >= n_ctx) drafter_rewind(d, s, n_ctx - 1); /* the last token must be fed */
    int r = step(d, s, ctx + s->n_cached, n_ctx - s->n_cached, s->n_cached);
    if (r <= 0) return r;
    out[0] = r - 1;
    int n = 1;
    while (n < k) {
        r = step(d, s, &out[n - 1], 1, n_ctx + n - 1);
        if (r <= 0) break;
        out[n++] = r - 1;
    }
    return r < 0 ? r : n;
}

void drafter_rewind(drafter *d, drafter_seq *s, int n_valid) {
    if (n_valid < 0) n_valid = 0;
    if (s->n_cached > n_valid) s->n_cached = n_valid;
    kv_seq_truncate(&d->kv, &s->kv, s->n_cached);
}

void drafter_seq_release(drafter *d, drafter_seq *s) {
    kv_seq_release(&d->kv, &s->kv);
    s->n_cached = 0;
}
