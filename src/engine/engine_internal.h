/* engine_internal.h — what the engine's files share (engine.c: requests,
 * events, thread, start/stop; engine_seq.c: sequences, sampling, stop
 * strings, verification; engine_sched.c: admission, preemption and the step
 * scheduler; engine_mtp.c: the MTP head's entries and drafts;
 * engine_dflash.c: the DFlash drafter's context and blocks). Not part of
 * the engine's interface (engine.h). */
#ifndef KS_ENGINE_INTERNAL_H
#define KS_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "base/clock.h"
#include "engine/engine.h"
#include "kv/prefix_cache.h"
#include "sample/token_mask.h"
#include "spec/drafter.h"

/* A model proposer (MTP head, draft model, DFlash) keeps drafting only where
 * its best chain is expected to beat plain decoding by this factor: the
 * measured pass costs leave out some host work per step, and below ~5% the
 * gain is within run-to-run noise while the loss is real (a DFlash row at
 * 0.93x on prose with the bar at 1). */
#define SPEC_PAY_BAR 1.05
/* The chance that a model proposer's next draft is accepted after the
 * previous one was, before the server has seen any request (prompt lookup's:
 * 0.5). A request starts from the server's estimate (engine.src_prior:
 * what the requests before showed, engine_learn_from_request) and weighs it as 10
 * drafts of its own (engine_src_rates). */
#define SPEC_MODEL_PRIOR 0.7
/* how many drafts a finished request's rate counts as against the server's
 * estimate, at most: a request with n judged drafts of a source moves the
 * estimate by n / (n + SPEC_PRIOR_WEIGHT) of the difference */
#define SPEC_PRIOR_WEIGHT 64.0
/* a speculating request that judged none of a source's drafts (its gate
 * closed at once, or it had none) moves that source's estimate this share
 * of the way back to the default: a source the early requests showed
 * useless is tried again once the traffic may have changed, instead of
 * being closed at the start of every request for good */
#define SPEC_PRIOR_FORGET 0.125
/* ... and its tracked pass cost this share of the way back to its start-up
 * probe (slowly: on a CPU the probe, taken at a short context, reads a
 * DFlash pass at half what it costs later, so each return makes one
 * request try a drafter that does not pay there) */
#define SPEC_COST_FORGET (1.0 / 32)
#define SPEC_DEPTH_WEIGHT 8.0
/* A runtime gate's "off" lasts until the answer has grown by a back-off of
 * this many tokens, doubled each time the same gate closes again; then the
 * source (or the request's drafting as a whole) gets a fresh trial
 * (engine_src_next). A gate judges its first 8 verify steps, and the start
 * of an answer can be harder to predict than the rest: tinycoder after a
 * 4,711-token prompt had 3 of its first 14-25 drafts accepted before every
 * gate closed (CPU), while its MTP head had 161 of 280 accepted over the
 * 256-token answer; closed for good, the gates left auto mode at plain
 * speed in 1 of 5 runs on the H200 (1.6-1.7x in the others). Where
 * drafting never pays, the trials cost ~8 verify steps at 32, 96, 224, ..
 * tokens. A trial judges the source on its own steps from there: the
 * request's acceptance of it is zeroed (so the server learns from the
 * request's last trial of each source, engine_learn_from_request). */
#define SPEC_RETRY_TOKENS 32

struct engine_req {
    atomic_int refs;
    atomic_int cancelled;
    int32_t *prompt;
    int n_prompt;
    engine_params p;
    char *stop_copy[ENGINE_MAX_STOP];
    int32_t *prediction;    /* owned copy of p.prediction */
    double t_submit;
    /* event queue, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_event *evs;
    int ev_head, ev_n, ev_cap;
    bool ended;             /* DONE/ERROR queued */
    bool unwoken;           /* token events queued since the last wake */
    struct engine_req *next;/* waiting list link (engine mutex) */
};

typedef struct {
    engine_req *r;
    kv_seq kv;
    int32_t *ctx;
    int n_ctx, cap, n_cached, n_gen;
    sampler *smp;
    sample_rng rng;
    bool dev_sample;        /* its sampled rows are drawn on the device (model_samples_on_device), one uniform
                             * of rng each, in order: nothing on the host changes its logits */
    /* penalties / logit_bias (engine_penalty.c; pen: the request has some):
     * pen_ent one entry per distinct token of ctx[0..pen_n) that a penalty
     * reads and per logit_bias id, pen_at[id] its index + 1 (0: none);
     * pen_window > 0: the repetition penalty reads only the context's last
     * pen_window tokens (bk_pen_seq's window) */
    bool pen;
    bk_pen_ent *pen_ent;
    int n_pen_ent, cap_pen_ent, pen_n, pen_window;
    int32_t *pen_at; /* (vocab) */
    tok_stream *ts;
    char *pend;             /* text held back while it may start a stop string */
    size_t pend_len, pend_cap;
    double t_first;
    long long admit_order;
    bool stop_hit;          /* a stop string ended it: pend is final */
    jc_state *js;           /* the JSON constraint's state after the committed tokens (NULL: none) */
    bool js_stuck;          /* no token could continue the document: the sequence ends */
    int row0;               /* its first logits row in the step's forward (model_logits_rows) */
    bool dev_mask;          /* sampled under its constraint on the device (masks sent with its rows: engine_constraint.c) */
    bool dev_logprobs;      /* its logprobs are the backend's (logprob_rows), its rows' from lp0 in the step's b_lp */
    int lp0;
    int mask_stuck;         /* the step's row (of its own) with no mask: nothing continued the document there; -1 */
    /* speculation */
    bool spec;              /* drafting on for this sequence (gates may turn it off) */
    bool pld;               /* prompt lookup among the draft sources */
    int32_t draft[ENGINE_MAX_DRAFT];
    int n_draft;            /* drafts fed in the current step */
    bool draft_dev;         /* those drafts are DFlash's, still on the device (draft[] holds 0s until the
                             * forward that verifies them brings them back) */
    int n_drafted, n_accepted, n_verify;
    int n_prompt_cached;    /* prompt tokens served by the prefix cache at admission */
    const char *spec_off_by; /* NULL, or which gate / failure turned drafting off */
    /* the draft model, used when prompt lookup finds nothing */
    drafter_seq dseq;
    bool use_drafter;
    int draft_src;          /* source of the current drafts: DRAFT_SRC_* */
    /* the model's MTP head: entries for positions [mtp_q0, mtp_next) at dense
     * indices of mkv, built from the target's hidden states after each step;
     * drafts for the next step computed right after (recursively, depth) */
    bool use_mtp;
    kv_seq mkv;
    int mtp_q0, mtp_next;
    int32_t mtp_draft[ENGINE_MAX_DRAFT];
    int n_mtp_draft, mtp_depth;
    int mtp_lost;
    int lookup_run;         /* consecutive steps that verified prompt-lookup drafts (engine_mtp_update) */
    /* per source (DRAFT_SRC_*) and depth d (the d+1-th draft): how often a
     * draft there was judged with the ones before it accepted (est_try)
     * and was accepted itself (est_hit), from its own verify steps and from
     * comparing the drafts it had ready but lost the choice with what was
     * committed (so a source never chosen still learns); engine_src_rates() */
    int est_try[DRAFT_SRC_COUNT][ENGINE_MAX_DRAFT], est_hit[DRAFT_SRC_COUNT][ENGINE_MAX_DRAFT];
    double prior[DRAFT_SRC_COUNT];        /* each source's rate before this request's own drafts: the server's at its start */
    int32_t lookup_shadow[ENGINE_MAX_DRAFT]; /* lookup's drafts when another source was chosen */
    int n_shadow[DRAFT_SRC_COUNT];        /* drafts each unchosen source had ready this step */
    double lookup_value;    /* expected tokens per verify cost of next step's lookup drafts (0: none) */
    int n_lookup, lookup_at; /* those drafts (in draft[]), found when ctx held lookup_at tokens (0: none) */
    /* the DFlash drafter: context entries for positions [fl_q0, fl_next)
     * at entry index position - fl_q0; the next step's block drafted right
     * after each forward */
    bool use_dflash;
    bool standby[DRAFT_SRC_COUNT];        /* model proposers (DRAFT_SRC_*) waiting for their turn (engine_src_next) */
    kv_seq fkv;
    int fl_q0, fl_next;
    int32_t fl_draft[ENGINE_MAX_DRAFT];
    int n_fl_draft, fl_lost;
    int fl_slot;            /* its block in the pass whose drafts are still on the device (-1: none;
                             * fl_draft then holds 0s) */
    int fl_idle;            /* consecutive steps whose block was skipped for prompt lookup's drafts */
    bool fl_behind;         /* this step's block goes right behind its verify (engine_dflash_behind) */
    /* per source (DRAFT_SRC_*): its verify steps, drafts and accepted drafts
     * since it last started (the runtime gates) */
    int src_steps[DRAFT_SRC_COUNT], src_drafted[DRAFT_SRC_COUNT], src_accepted[DRAFT_SRC_COUNT];
    /* the request-wide gate's verify steps, drafts and accepted drafts since
     * drafting last started (n_verify, n_drafted, n_accepted: the whole request) */
    int gate_verify, gate_drafted, gate_accepted;
    /* SPEC_RETRY_TOKENS: when (n_gen) a source a runtime gate turned off may
     * start again (0: none due), and its back-off; the same for the request's
     * drafting (spec off by the request-wide gate) */
    int retry_at[DRAFT_SRC_COUNT], retry_gap[DRAFT_SRC_COUNT];
    int spec_retry_at, spec_retry_gap;
} seq_state;

struct engine {
    model *m;
    const tokenizer *tok;
    engine_config cfg;
    kv_cache kv;
    pthread_t th;
    pthread_mutex_t mu;     /* guards waiting list, stop flag */
    pthread_cond_t cv;
    engine_req *wait_head, *wait_tail;
    int n_waiting;
    bool stopping;
    /* engine-thread only */
    seq_state **active;
    int n_active;
    seq_state **preempted;  /* FIFO of sequences to recompute */
    int n_preempted;
    long long admit_counter;
    float *logits;          /* (rows, vocab) the step's rows on the host: model_host_logits' (the model owns it) */
    int32_t *b_tok, *b_pos, *b_seq, *b_rows;
    int32_t *b_ids;         /* (b_cap) argmax of each logits row, from the backend (a device draw for rows in b_sample) */
    bk_sample_row *b_sample; /* (b_cap) the step's rows sampled on the device */
    bk_pen_seq *b_pen;       /* (b_cap) the step's penalised sequences */
    bk_pen_ent *b_pen_ent;   /* (cap_b_pen_ent) their entries */
    int cap_b_pen_ent;
    int32_t *b_lp_rows;      /* (b_cap) the step's rows whose log-probabilities the backend computes */
    bk_logprobs *b_lp;       /* (b_cap) and those */
    int32_t *b_mask_rows;    /* (cap_b_mask) the step's masked rows (engine_constraint_masks) */
    uint32_t *b_mask_bits;   /* (cap_b_mask, (vocab + 31) / 32) their masks */
    int cap_b_mask;
    int b_cap;
    float *raw;             /* vocab scratch for logprobs */
    float *row;             /* vocab: a row fetched for a refused greedy constrained argmax (with tmask) */
    token_mask *tmask;      /* the vocabulary for JSON constraints (built at the first constrained request) */
    uint8_t *allowed;       /* (vocab) token_mask_fill's output */
    /* stats */
    atomic_llong done, prompt_tokens, gen_tokens, preemptions;
    atomic_llong spec_drafted, spec_accepted, spec_verify, gate_prompt_off, gate_runtime_off;
    atomic_llong gate_retries; /* runtime gates' back-offs passed: a proposer or a request's drafting started again */
    atomic_llong prefix_lookup, prefix_hit;
    atomic_llong fl_behind_steps;
    atomic_llong constraint_rows; /* rows fetched for a refused greedy constrained argmax */
    atomic_llong constraint_masks; /* constrained rows masked on the backend */
    atomic_int stat_cached_blocks;
    prefix_cache *pc;       /* NULL when disabled */
    drafter *dr;            /* NULL without a draft model */
    kv_cache mtp_kv;        /* the MTP head's entries (n_blocks 0: no head in use) */
    prefix_cache *mtp_pc;   /* full blocks of its entries from position 1 (lag 1; NULL: no prefix cache) */
    atomic_llong src_drafted_n[DRAFT_SRC_COUNT], src_accepted_n[DRAFT_SRC_COUNT]; /* per source (DRAFT_SRC_*), for /metrics */
    atomic_llong src_verify_n[DRAFT_SRC_COUNT]; /* verify steps, by the source of their drafts */
    atomic_llong src_passes_n[DRAFT_SRC_COUNT]; /* proposer passes run (MTP head passes, DFlash passes with or without a
                                   * block, draft-model drafts), whether their drafts were used or not */
    atomic_llong mtp_depth_steps[ENGINE_MAX_DRAFT + 1]; /* verify steps of MTP drafts, by how many were verified */
    int32_t *mtp_tok, *mtp_idx, *mtp_pos, *mtp_hid, *mtp_seq, *mtp_rows; /* scratch, (cap) */
    int mtp_cap;
    int32_t *mtp_ids;       /* (mtp_depth, max_concurrent) the head's greedy drafts of a chain of passes */
    double st_a, st_b, st_c, st_d; /* step time model, seconds: t(n, L) = a + b n + L (c + d n) (engine_cost.c) */
    double t_decode;        /* seconds of a 1-token decode step at an empty context (engine start) */
    kv_cache fl_kv;         /* the DFlash drafter's entries (n_blocks 0: none in use) */
    prefix_cache *fl_pc;    /* full blocks of its context entries from position 0, keyed like the
                             * target's (NULL: no prefix cache) */
    int fl_block;           /* block size drafted */
    /* per source (DRAFT_SRC_*): the acceptance the finished requests showed
     * (engine_learn_from_request); a model proposer's pass cost in target
     * decode steps (a draft-model forward, an MTP head entry forward, a
     * DFlash pass), tracked as its passes run, and as probed at start (0:
     * not loaded; lookup's 0) */
    double src_prior[DRAFT_SRC_COUNT], src_ratio[DRAFT_SRC_COUNT], probe_ratio[DRAFT_SRC_COUNT];
    /* what the draft model's catch-up costs a context token it takes in, in
     * decode steps (probed at start, tracked as catch-ups run) */
    double drafter_catchup;
    /* the last pass's blocks, left on the device for the next forward (which
     * reads the drafts it verifies there and fetches them all with its own
     * ids: no wait between the pass and that forward); fl_pend_t: the host
     * time the pass took (its launch), to which that forward adds what it
     * waited beyond the step model's time (the pass's cost, tracked) */
    int fl_pend;
    double fl_pend_t;
    /* a block launched behind its verify (engine_dflash_behind): the
     * launch's result and host time (inside the forward's: not part of
     * what that forward waited) */
    int fl_behind_rc;
    double fl_behind_t;
    int32_t *fl_idx, *fl_pos, *fl_seq, *fl_row, *fl_last, *fl_rope0, *fl_entry0, *fl_of; /* scratch */
    int fl_cap;
    int32_t *fl_host;       /* (fl_host_cap) blocks brought back with their pass (a constrained sampled sequence's) */
    size_t fl_host_cap;
    atomic_int stat_active;
    atomic_int stat_kv_free;
};

/* engine.c */
void engine_push_event(engine_req *r, engine_event *ev); /* takes ev->text */
void engine_wake(engine_req *r);
void engine_push_error(engine_req *r, const char *msg);
/* engine_seq.c */
seq_state *engine_seq_new(engine *e, engine_req *r);
void engine_seq_free(engine *e, seq_state *s);
void engine_seq_finish(engine *e, seq_state *s, engine_finish why);
void engine_cache_blocks(engine *e, seq_state *s);
/* rows: the sequence's logits rows, or NULL when it needs no more than the
 * backend's ids each step (engine_seq_needs_logits false; a greedy
 * constrained one fetches a row when its argmax is refused); ids: each
 * row's argmax, or the device's draw. */
bool engine_seq_needs_logits(const seq_state *s);
bool engine_is_eos(const engine_params *p, int tok);
/* engine_constraint.c (s->js): whether the document at state st takes id
 * next; a row masked to the ids it takes (the greedy choice: argmax, the
 * backend's, when allowed; -1: the row's own) — the masked argmax, -1 for a
 * sampled choice; drafts it refuses dropped from s->draft (with those
 * after); the masks of rows row0 .. row0 + n_rows - 1 (row j after drafts
 * 0..j-1) into rows / bits ((vocab + 31) / 32 words each), returning how
 * many — a row whose document takes nothing gets none and is
 * s->mask_stuck (the answer ends there), and none follow it */
bool engine_constraint_allows(engine *e, const jc_state *st, const seq_state *s, int id);
int engine_constrain_row(engine *e, seq_state *s, float *row, bool greedy, int argmax);
void engine_cut_drafts(engine *e, seq_state *s);
int engine_constraint_masks(engine *e, seq_state *s, int row0, int n_rows, int32_t *rows, uint32_t *bits);
/* engine_penalty.c: s->pen's entries made (engine_pen_init, at admission;
 * -1: out of memory) and kept up with s->ctx (engine_pen_sync); the
 * backend's description of its rows row .. row + n_rows - 1 whose entries
 * start at ent of the step's list; a row the host took penalised as the
 * backend would have (engine_pen_row: the context as it is now) */
int engine_pen_init(engine *e, seq_state *s);
void engine_pen_free(seq_state *s);
void engine_pen_sync(engine *e, seq_state *s);
bk_pen_seq engine_pen_seq(const seq_state *s, int row, int n_rows, int ent);
void engine_pen_row(engine *e, seq_state *s, float *row);
int engine_seq_sample(engine *e, seq_state *s, float *rows, const int32_t *ids);
int engine_seq_verify(engine *e, seq_state *s, float *rows, const int32_t *ids, int n_cached_before);
/* engine_sched.c */
int engine_step(engine *e);
/* engine_seq.c: rate[d] (d < ENGINE_MAX_DRAFT): the chance that source
 * src's d+1-th draft is accepted after the ones before it were, for this
 * request — its drafts at every depth pooled (prior: s->prior[src], the
 * server's estimate when the request started, weight 10 drafts); for the
 * DFlash drafter each depth from its own (that pooled rate weighing SPEC_DEPTH_WEIGHT drafts): a block drafter's later drafts
 * are accepted less often than its first (tinycoder's, past the third
 * draft rarely), which one pooled rate cannot say, and its block comes in
 * one pass, so the rates decide only how many of it to verify. Prompt
 * lookup and the chains (MTP head, draft model) keep the pooled rate: with
 * rates by depth for every source, MTP verified one draft on 2-3x as many
 * steps and ran 5-11% slower on code on the H200 (BENCHMARKS.md,
 * nineteenth session). */
void engine_src_rates(const seq_state *s, int src, double *rate);
/* What a finished (or cancelled) request teaches the server: its acceptance
 * per source, folded into the estimate the next requests start from, and,
 * for a proposer it never ran, an easing of that proposer's cost: a request of n
 * judged drafts of a source moves it by n / (n + SPEC_PRIOR_WEIGHT) of the
 * way to that request's rate (one that judged none: SPEC_PRIOR_FORGET of
 * the way back to the default, and the proposer's tracked pass cost
 * SPEC_COST_FORGET of the way back to its start-up probe — a cost read
 * high closes the gate of every later request, and a closed gate runs no
 * passes to correct it: on the H200 the MTP head's read 0.87 decode steps
 * against 0.33 and stayed off for the rest of the run). Not the DFlash
 * drafter's acceptance: its pooled rate is
 * each depth's prior, and pooled over a block (0.29 on tinycoder's code,
 * where its first draft is accepted ~70% of the time) it would close the
 * drafter's gate before a request had shown its first drafts (its cost is
 * still eased back). */
void engine_learn_from_request(engine *e, const seq_state *s);
/* a source's prior before the server has seen a request: 0.5 for prompt
 * lookup, SPEC_MODEL_PRIOR for the model proposers */
double engine_default_prior(int src);
/* Where a step is planned: brings the request's drafting back when its
 * retry is due, and when no model proposer runs (or only a draft model
 * still waiting to take in its context, which then goes back on standby),
 * starts the first in turn order (the MTP head, a DFlash drafter, a draft
 * model) that is on standby or whose retry is due, judged afresh (its gate
 * counts and this request's acceptance of it start again from the
 * server's estimate). */
void engine_src_next(engine *e, seq_state *s);
/* A runtime gate stops drafting with src (a model proposer): it may start
 * again after its back-off (SPEC_RETRY_TOKENS, doubling each time); one
 * closing counted in gate_runtime_off. */
void engine_src_off(engine *e, seq_state *s, int src);
/* The request's drafting stops (why: its spec_off_by — the prompt gate, a
 * proposer's failure, the request-wide runtime gate): the MTP head and a
 * DFlash drafter stop their passes and wait on standby, first in turn if
 * drafting comes back (the runtime gate's back-off, engine_src_next),
 * their own back-offs untouched; the draft model runs no pass while
 * drafting is off. */
void engine_spec_off(engine *e, seq_state *s, const char *why);
/* engine_cost.c: start-up cost probes. probe_ctx is a scratch target sequence
 * after a 1-token step at position 0 (its tokens/positions arrays hold
 * ENGINE_MAX_DRAFT + 1 entries); a probe_fn runs the pass being priced. */
typedef struct {
    kv_seq *seq;
    float *logits;          /* (ENGINE_MAX_DRAFT + 1, vocab) */
    int32_t *tok, *pos, *seq_idx;
} probe_ctx;
typedef int (*probe_fn)(engine *e, const probe_ctx *pc, void *arg);
/* The pass's cost in 1-token decode steps (best of 3 after a warm-up, each
 * right after a 1-token step), or fallback when either fails; sets
 * e->t_decode. */
double engine_probe_cost(engine *e, probe_fn pass, void *arg, double fallback);
/* engine_cost.c: the step-time model (probed once at start) and the
 * costs, in decode steps of a sequence at context L, of verifying k drafts
 * and of a proposer pass whose cost is `ratio` decode steps at an empty
 * context; engine_track_cost follows a pass's ratio from its measured time
 * (moving average, weight 1/8; a sample past twice the estimate counts as
 * twice it, so one host stall cannot close a gate). */
void engine_measure_step(engine *e);
/* engine_dflash.c: the drafter's context through the prefix cache. A
 * sequence whose target KV starts on n_found cached blocks takes its
 * drafter entries for them from fl_pc when that holds all of them (else its
 * context starts after the cached prefix, as before); a sequence's full
 * blocks of entries from position 0 are offered to fl_pc with its target
 * blocks (engine_cache_blocks). */
void engine_dflash_attach(engine *e, seq_state *s, int n_found);
void engine_dflash_cache(engine *e, seq_state *s);
/* engine_mtp.c: the same for the MTP head, whose entry for position q
 * reads the hidden state at q - 1: from n_found cached target blocks it
 * takes n_found - 1 blocks of entries (positions 1 .. 16 (n_found - 1))
 * and returns how many target blocks the sequence keeps — n_found - 1, so
 * that the forward recomputes the last block and the hidden states the
 * next entries need exist — or n_found when the head's cache lacks them. */
int engine_mtp_attach(engine *e, seq_state *s, int n_found);
void engine_mtp_cache(engine *e, seq_state *s);
/* engine_dflash.c: of n DFlash block sizes whose passes cost ratios[i]
 * decode steps, the index of the one whose best step (the best number of
 * its drafts to verify at the prior acceptance, context 0) gives the most
 * tokens per unit of cost; ties: the first. */
int engine_dflash_pick_block(const engine *e, const int *blocks, const double *ratios, int n);
void engine_fit_step(const double t[5], int k1, int L1, int L2, double out[4]);
double engine_measure_mtp(engine *e);
double engine_measure_drafter(engine *e);
/* the draft model's catch-up cost a context token (DRAFTER_CATCHUP_PROBE
 * tokens taken in at once; its warm-up run readies the catch-up's prompt
 * path, whose GEMM kernels a backend's library loads on first use); < 0
 * when the draft model cannot run a forward */
double engine_measure_drafter_catchup(engine *e);
/* Whether a draft model that must first take in `behind` context tokens
 * (a catch-up: a request's first proposal, or a draft model on standby
 * started late) should pay for it now: its chain, at `value` tokens per
 * unit of cost, saves 1 - 1 / value decode steps a token, and the catch-up
 * is bought once that saving over the tokens generated so far (at least
 * one, at most the `left` max_tokens allows) covers its cost — rent until
 * the rent paid equals the price, which pays at most twice what knowing
 * the answer's length would (ski rental). A long prompt with a short answer
 * no longer pays a catch-up it cannot win back (CPU, tinycoder after 4,711
 * tokens: ~310 ms, more than the 128-token answer's whole decode). */
bool engine_catchup_pays(const engine *e, double value, int behind, int n_gen, int left);
/* The context tokens s's draft model has yet to take in when that is a
 * catch-up (more than a step's tokens: a request's first proposal, or one
 * that started late), else 0 */
static inline int engine_drafter_behind(const engine *e, const seq_state *s) {
    int behind = s->n_ctx - s->dseq.n_cached;
    return behind > e->cfg.drafter_len + 1 ? behind : 0;
}
double engine_verify_cost(const engine *e, double k, int L);
/* the step model's time (seconds) of n tokens of one sequence at context L */
double engine_step_time(const engine *e, double n, int L);
double engine_pass_cost(const engine *e, double ratio, int L);
void engine_track_cost(engine *e, double *ratio, double dt, int passes);
/* (1 + r0 + r0 r1 + .. + r0..r(n-1)) / (verify of n drafts + the pass):
 * expected tokens per unit of cost of a chain of n drafts, the d+1-th
 * accepted with probability rate[d] after the ones before were
 * (engine_src_rates) */
double chain_value(const engine *e, const double *rate, int n, double pass_ratio, int L);
/* The chain length n in 1..n_max whose drafts are made by n sequential
 * passes (pass_ratio decode steps each) with the best chain_value; 0 when
 * none beats bar */
int engine_best_chain(const engine *e, const double *rate, int n_max, double pass_ratio, double bar, int L);
/* The best number *best_j of the first n drafts to verify (0: none) and its
 * value (1: plain decoding); with the runtime gates off (tests) always n. */
double engine_best_drafts(const engine *e, const double *rate, int n, int L, int *best_j);
/* engine_mtp.c */
int engine_mtp_update(engine *e, int na, const int *feed, const int *tstart, const int *pstart, const int *done);
void engine_mtp_reset(engine *e, seq_state *s);
/* engine_dflash.c */
int engine_dflash_start(engine *e);
void engine_dflash_stop(engine *e);
int engine_dflash_update(engine *e, int na, const int *feed, const int *tstart, const int *pstart, const int *done);
void engine_dflash_reset(engine *e, seq_state *s);
void engine_dflash_fetched(engine *e, const int32_t *ids, double waited);
/* A step that verifies its one sequence's DFlash drafts greedily drafts the
 * next block right behind the verify, before the host has the verify's ids
 * (model_dev_ids.behind; the device moves the block up by the drafts it
 * finds accepted): no host turn between the verify and the pass, the GPU's
 * idle ~15 us a step. engine_dflash_plan_behind says whether this step
 * does (and reserves its entries), engine_dflash_behind (arg: the engine)
 * launches it, engine_dflash_update keeps the books after the verify. */
bool engine_dflash_plan_behind(engine *e, seq_state *s);
void engine_dflash_behind(void *arg);

#endif
