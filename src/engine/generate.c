/* generate.c — single-sequence generation loop (see generate.h). */
#include "engine/generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int generate(model *m, kv_cache *kv, const int32_t *prompt, int n_prompt, const gen_request *r,
             gen_token_cb cb, void *ud, gen_stats *st) {
    const int V = m->cfg.vocab_size;
    int cap_ctx = kv->n_blocks * kv->block_size;
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    if (n_prompt <= 0) return err_set(KS_EINVAL, "empty prompt");
    if (n_prompt >= cap_ctx)
        return err_set(KS_EINVAL, "prompt of %d tokens does not fit the context of %d tokens", n_prompt, cap_ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return err_set(KS_EINVAL, "prompt token %d (id %d) outside the vocabulary of %d", i, prompt[i], V);
    int chunk = r->prefill_chunk > 0 ? r->prefill_chunk : 512;
    int cap = n_prompt + (r->max_tokens > 0 ? r->max_tokens : 0) + 1;
    int32_t *ctx = malloc((size_t)cap * sizeof *ctx);
    int32_t *pos = malloc((size_t)chunk * sizeof *pos), *seq = calloc((size_t)chunk, sizeof *seq);
    float *logits = malloc((size_t)V * sizeof *logits);
    sampler *smp = sampler_new(V);
    kv_seq s = {0};
    int rc = KS_OK;
    if (!ctx || !pos || !seq || !logits || !smp) { rc = err_set(KS_ENOMEM, "generate: out of memory"); goto done; }
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    sample_rng rng;
    sample_rng_seed(&rng, r->seed);
    kv_seq *seqs[1] = {&s};
    double t0 = now_s(), t_first = 0;
    /* prefill in chunks; logits only for the last prompt token */
    for (int off = 0; off < n_prompt; off += chunk) {
        int n = n_prompt - off < chunk ? n_prompt - off : chunk;
        if ((rc = kv_seq_reserve(kv, &s, off + n))) goto done;
        for (int i = 0; i < n; i++) pos[i] = off + i;
        int32_t last = n - 1;
        model_batch b = {n, ctx + off, pos, seq, 1, seqs, off + n == n_prompt ? 1 : 0, &last};
        if ((rc = model_forward(m, kv, &b, logits))) goto done;
        s.n_tokens = off + n;
    }
    int n_ctx = n_prompt;
    st->stop = GEN_STOP_LENGTH;
    for (int g = 0; g < r->max_tokens; g++) {
        sample_apply_penalties(smp, &r->sp, logits, ctx, n_ctx, n_prompt);
        int tok = sample_choose(smp, &r->sp, logits, &rng);
        double t = now_s();
        if (g == 0) {
            t_first = t;
            st->t_prefill = t - t0;
        }
        st->t_decode = t - t_first;
        int is_eos = 0;
        for (int e = 0; e < r->n_eos; e++) is_eos |= tok == r->eos[e];
        if (is_eos) { st->stop = GEN_STOP_EOS; break; }
        ctx[n_ctx++] = tok;
        st->n_gen++;
        if (cb && cb(ud, tok)) { st->stop = GEN_STOP_CALLBACK; break; }
        if (g + 1 == r->max_tokens) break;
        if (n_ctx >= cap_ctx) { st->stop = GEN_STOP_CONTEXT; break; }
        if ((rc = kv_seq_reserve(kv, &s, n_ctx))) goto done;
        pos[0] = n_ctx - 1;
        int32_t row = 0;
        model_batch b = {1, &ctx[n_ctx - 1], pos, seq, 1, seqs, 1, &row};
        if ((rc = model_forward(m, kv, &b, logits))) goto done;
        s.n_tokens = n_ctx;
    }
done:
    kv_seq_release(kv, &s);
    sampler_free(smp);
    free(ctx);
    free(pos);
    free(seq);
    free(logits);
    return rc;
}
