/* engine.h — the inference engine: its own thread owns the model, the KV
 * cache and the scheduler; other threads submit requests and read back
 * events (DESIGN.md data flow).
 *
 * Scheduling: every step builds one varlen batch from the active sequences —
 * one decode token each, plus prompt chunks of sequences still prefilling (up
 * to `prefill_chunk` prompt tokens per step) — runs one forward, samples for
 * the sequences that produced logits, detokenizes, applies stop strings and
 * pushes events. Up to `max_concurrent` sequences are active; the rest wait
 * in FIFO order. Results do not depend on batch composition (the forward is
 * batch-invariant, DESIGN.md principle 2).
 *
 * Ownership: engine_submit() returns a request handle shared by the caller
 * and the engine (reference counted); the caller must engine_req_release() it
 * exactly once, after which the engine drops it too (cancelling it if still
 * running). Event strings are owned by the event until engine_event_clear(). */
#ifndef KS_ENGINE_H
#define KS_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/dflash.h"
#include "model/model.h"
#include "sample/json_constraint.h"
#include "sample/sample.h"
#include "tok/tok.h"

#define ENGINE_MAX_EOS 8
#define ENGINE_MAX_STOP 8
#define ENGINE_MAX_TOP_LOGPROBS 20
#define ENGINE_MAX_LOGIT_BIAS 512

typedef struct {
    int max_tokens;                /* > 0 */
    sample_params sp;
    uint64_t seed;
    int32_t eos[ENGINE_MAX_EOS];   /* generation ends (not emitted) on these */
    int n_eos;
    const char *stop[ENGINE_MAX_STOP]; /* stop strings (copied at submit) */
    int n_stop;
    bool logprobs;                 /* per-token logprob of the chosen token */
    int top_logprobs;              /* 0..ENGINE_MAX_TOP_LOGPROBS alternatives */
    int spec;                      /* speculation: -1 server default, 0 off, 1 on (gates still apply) */
    int mtp;                       /* the model's MTP head: -1 server default, 0 off, 1 on */
    const int32_t *prediction;     /* draft source (OpenAI predicted outputs); copied at submit */
    int n_prediction;
    /* OpenAI logit_bias: logit_bias[i] is added to token logit_bias_id[i]'s
     * logit before each choice (after the penalties; the logprobs reported
     * stay the model's own); ids checked against the vocabulary at submit */
    int n_logit_bias;
    int32_t logit_bias_id[ENGINE_MAX_LOGIT_BIAS];
    float logit_bias[ENGINE_MAX_LOGIT_BIAS];
    /* output constrained to JSON (sample/json_constraint.h; NULL: none):
     * every choice is restricted to the tokens that keep the text a prefix
     * of a matching document (the end-of-sequence tokens once it may end)
     * and the request finishes when the document is complete. Borrowed:
     * engine_submit takes a reference of its own. */
    json_constraint *constraint;
    bool constraint_think; /* the constrained answer may open with the model's <think>...</think> block */
    bool constraint_calls; /* the constraint is on the answer's <tool_call> documents only (JC_CALLS) */
} engine_params;

typedef enum {
    ENGINE_EV_TOKEN = 0,  /* one generated token and the text it finalised */
    ENGINE_EV_DONE,       /* last event of a request */
    ENGINE_EV_ERROR,      /* last event of a request that failed */
} engine_ev_type;

typedef enum {
    ENGINE_FINISH_STOP = 0,   /* eos token or stop string */
    ENGINE_FINISH_LENGTH,     /* max_tokens */
    ENGINE_FINISH_CONTEXT,    /* the context window is full */
    ENGINE_FINISH_CANCELLED,
} engine_finish;

typedef struct {
    engine_ev_type type;
    char *text;              /* TOKEN: text delta (may be empty); DONE: trailing text; ERROR: message */
    size_t len;
    int32_t token;           /* TOKEN */
    float logprob;           /* TOKEN, when requested */
    int n_top;
    int32_t top_ids[ENGINE_MAX_TOP_LOGPROBS];
    float top_logprobs[ENGINE_MAX_TOP_LOGPROBS];
    engine_finish finish;    /* DONE */
    int n_prompt, n_gen;     /* DONE: usage */
    double t_first_token;    /* DONE: seconds from submit to first token */
    double t_total;          /* DONE: seconds from submit to the end */
    int n_drafted;           /* DONE: draft tokens verified (PLD / prediction) */
    int n_accepted;          /* DONE: of which accepted */
    int n_cached;            /* DONE: prompt tokens whose KV came from the prefix cache */
} engine_event;

typedef struct {
    int max_concurrent;      /* sequences decoded together (>= 1) */
    int prefill_chunk;       /* prompt tokens per step */
    int ctx_size;            /* most tokens (prompt + output) of one sequence */
    int kv_tokens;           /* KV pool size in tokens (0: ctx_size * max_concurrent) */
    bool pld;                /* prompt lookup decoding on by default */
    int pld_key_len;         /* n-gram length looked up (default 3) */
    int pld_draft_len;       /* draft tokens per verify step (default 5, at most ENGINE_MAX_DRAFT) */
    double spec_min_repetition; /* prompt gate: 3-gram repetition score below which a request
                                   runs without speculation (< 0: default) */
    bool no_runtime_gates;   /* draft whatever the measured costs say (tests: timing-independent) */
    bool log_requests;       /* one debug line per finished request on stderr (also KESTREL_LOG=debug) */
    bool log_steps;          /* one line per forward, waited for and timed (also KESTREL_STEP_LOG=1) */
    bool mtp;                /* draft with the model's native MTP head when it has one */
    int mtp_depth;           /* most MTP drafts per step (default 3); a controller picks 1..this */
    model *drafter;          /* draft model (borrowed; NULL: none), drafts when PLD finds nothing */
    int drafter_len;         /* drafter tokens per verify step (default 4) */
    dflash *dflash;          /* DFlash block drafter (borrowed; NULL: none) */
    int dflash_block;        /* its block size (0: the checkpoint's; at most ENGINE_MAX_DRAFT) */
    bool prefix_cache;       /* keep full KV blocks for later requests (kv/prefix_cache.h) */
    int prefix_cache_blocks; /* most blocks kept (0: the whole pool) */
} engine_config;

#define ENGINE_MAX_DRAFT 16
/* Prompt gate: a prompt of at least ENGINE_GATE_MIN_PROMPT tokens whose
 * 3-gram repetition score is below the threshold runs without drafting.
 * Calibration (tinycoder tokenizer; docs/DESIGN.md "Speculation"): novel
 * prose 0.012 (first 512 tokens of bench/prose.txt), code completion prompts
 * median 0.137 (p10 0.017), edit prompts median 0.040 but short (median 156
 * tokens: no verdict below 256, the runtime gate decides). */
#define ENGINE_DEFAULT_MIN_REPETITION 0.02
#define ENGINE_GATE_MIN_PROMPT 256

typedef struct engine engine;
typedef struct engine_req engine_req;

/* Borrows m and tok (they must outlive the engine). Starts the thread. */
int engine_start(engine **out, model *m, const tokenizer *tok, const engine_config *cfg);
/* Stops the thread after cancelling everything in flight; frees the engine. */
void engine_stop(engine *e);
int engine_ctx_size(const engine *e);

/* Copies prompt and params. NULL with err_msg() set when the request can
 * never run (empty or too long prompt, bad ids). */
engine_req *engine_submit(engine *e, const int32_t *prompt, int n_prompt, const engine_params *p);
/* Blocks until the next event (timeout_ms < 0: forever). 1 = got one,
 * 0 = timeout. After DONE/ERROR no further events come. */
int engine_next_event(engine_req *r, engine_event *ev, int timeout_ms);
void engine_event_clear(engine_event *ev);
void engine_cancel(engine_req *r);
void engine_req_release(engine_req *r);

/* Draft sources, the index of the per-source counters: prompt lookup (and
 * predicted outputs), then the model proposers. */
enum { DRAFT_SRC_LOOKUP = 0, DRAFT_SRC_DRAFTER, DRAFT_SRC_MTP, DRAFT_SRC_DFLASH, DRAFT_SRC_COUNT };

/* Counters for /metrics (approximate, lock-free reads). */
typedef struct {
    int queued, active;
    int kv_blocks_free, kv_blocks_total;
    long long requests_done, prompt_tokens, generated_tokens, preemptions;
    long long spec_drafted, spec_accepted, spec_verify_steps;
    /* by draft source (DRAFT_SRC_*): draft tokens verified and accepted,
     * verify steps, passes run by a model proposer (MTP head passes, DFlash
     * passes with or without a block, draft-model drafts; lookup's 0), and
     * the measured cost of one pass over a target decode step (0: not
     * loaded, and lookup) */
    long long src_drafted[DRAFT_SRC_COUNT], src_accepted[DRAFT_SRC_COUNT];
    long long src_verify_steps[DRAFT_SRC_COUNT], src_passes[DRAFT_SRC_COUNT];
    double src_cost_ratio[DRAFT_SRC_COUNT];
    long long mtp_depth_steps[ENGINE_MAX_DRAFT + 1]; /* MTP verify steps by the depth verified */
    long long dflash_behind_steps;               /* DFlash blocks launched behind their verify (engine_dflash_behind) */
    long long constraint_rows; /* logits rows a greedy constrained choice fetched (its argmax refused) */
    long long constraint_masks; /* constrained rows masked on the backend (sampled there) */
    long long gate_prompt_off, gate_runtime_off; /* requests the prompt gate turned speculation off for; runtime gate closings */
    long long gate_retries; /* runtime gates' back-offs passed (SPEC_RETRY_TOKENS): drafting started again */
    double verify_cost_ratio;                    /* measured cost of a k+1-token step / 1-token step */
    long long prefix_lookup_tokens, prefix_hit_tokens; /* prompt tokens looked up / served from the cache */
    int prefix_cached_blocks;
    bool has_mem; /* the backend reports its device memory: */
    bk_mem mem;
} engine_stats;
void engine_get_stats(engine *e, engine_stats *s);

#endif
