/* generate.h — one sequence, start to finish: chunked prefill of the prompt,
 * then decode steps with sampling, until max_tokens, an eos id, the context
 * limit, or the callback asks to stop. The building block the scheduler
 * (continuous batching) will generalise; `kestrel run` uses it directly. */
#ifndef KS_GENERATE_H
#define KS_GENERATE_H

#include <stdint.h>

#include "model/model.h"
#include "sample/sample.h"

#define GEN_MAX_EOS 8

typedef enum { GEN_STOP_LENGTH = 0, GEN_STOP_EOS, GEN_STOP_CALLBACK, GEN_STOP_CONTEXT } gen_stop;

typedef struct {
    int max_tokens;          /* tokens to generate at most */
    sample_params sp;
    uint64_t seed;
    int32_t eos[GEN_MAX_EOS];
    int n_eos;
    int prefill_chunk;       /* prompt tokens per forward (<= 0: 512) */
} gen_request;

typedef struct {
    int n_prompt, n_gen;
    double t_prefill;        /* seconds until the first generated token was chosen */
    double t_decode;         /* seconds from the first to the last generated token */
    gen_stop stop;
} gen_stats;

/* Called for each generated token (eos excluded); non-zero return stops. */
typedef int (*gen_token_cb)(void *ud, int32_t token);

int generate(model *m, kv_cache *kv, const int32_t *prompt, int n_prompt, const gen_request *r,
             gen_token_cb cb, void *ud, gen_stats *st);

#endif
