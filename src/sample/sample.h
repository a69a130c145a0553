/* sample.h — logits processing and token sampling.
 *
 * Order (as Hugging Face generate applies its processors, with vLLM's
 * OpenAI-style penalties): repetition penalty over prompt + output,
 * presence/frequency penalties over the output only, logit_bias (these
 * three by the backend: backend.h bk_pen_seq); then temperature <= 0
 * means greedy (argmax, lowest id on ties); else temperature, top-k, top-p,
 * min-p, softmax, draw with a seeded xoshiro256** generator. */
#ifndef KS_SAMPLE_H
#define KS_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    float temperature;        /* <= 0: greedy */
    int top_k;                /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 1: off (HF: logit / p if > 0 else logit * p) */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    int repetition_last_n;    /* > 0: the repetition penalty reads only the context's last this many tokens
                                 (Ollama's repeat_last_n); 0: the whole context */
} sample_params;

typedef struct { uint64_t s[4]; } sample_rng;

void sample_params_default(sample_params *p);
void sample_rng_seed(sample_rng *r, uint64_t seed);
/* Uniform double in [0, 1). */
double sample_rng_uniform(sample_rng *r);

typedef struct sampler sampler;
/* Per-request scratch sized for the vocabulary. NULL on OOM. */
sampler *sampler_new(int vocab);
void sampler_free(sampler *s);

/* Whether p's penalties change any logit (applied by the backend: backend.h
 * penalize_rows, engine_penalty.c). */
bool sample_penalties_on(const sample_params *p);
/* The final sampling distribution of (penalised) logits at temperature > 0:
 * kept ids in descending probability and their probabilities (summing to 1),
 * after temperature, top-k, top-p and min-p. The arrays belong to the
 * sampler (valid until its next use); logits are clobbered. */
int sample_dist(sampler *s, const sample_params *p, float *logits, const int32_t **ids, const float **probs);
/* Draws from (ids, probs); `exclude` (or -1) is left out and the rest
 * renormalised — the residual of the speculative rejection rule for a
 * one-token draft distribution. */
int sample_draw(const int32_t *ids, const float *probs, int n, int exclude, sample_rng *rng);
/* The same draw at a given uniform u in [0, 1) (nothing excluded). */
int sample_draw_u(const int32_t *ids, const float *probs, int n, double u);
/* Speculative rejection rule (Leviathan/Chen) for a draft token d proposed
 * with q = 1{d} (deterministic drafters: PLD, predictions): accept d with
 * probability min(1, p(d)/q(d)) = p(d), otherwise draw from
 * norm(max(0, p - q)) = p without d. The result is distributed exactly as p. */
int sample_spec_accept(const int32_t *ids, const float *probs, int n, int d, sample_rng *rng);
/* Chooses the next token from (already penalised) logits; logits are
 * clobbered. */
int sample_choose(sampler *s, const sample_params *p, float *logits, sample_rng *rng);
int sample_argmax(const float *logits, int vocab);

#endif
