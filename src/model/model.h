/* model.h — a loaded model and its forward pass.
 *
 * model_forward() takes a flat, varlen batch (DESIGN.md principle 3): token i
 * belongs to sequence seq[i] at position pos[i]; sequences' block tables come
 * from the paged KV cache and must already be reserved for those positions.
 * The same call serves prefill chunks, decode steps, speculative verification
 * and batched decode. Logits are produced only for the rows listed in
 * logit_rows, into a host buffer (n_logits, vocab).
 *
 * Ownership: model owns its safetensors mapping, backend weights and
 * activation buffers; the backend and KV cache are borrowed. */
#ifndef KS_MODEL_H
#define KS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "kv/kv_cache.h"

#define MODEL_MAX_GRAPHS 64
#define MODEL_GRAPH_MAX_TOKENS 16
/* A proposer's pass (a draft model's catch-up, the MTP head's entries)
 * takes a sequence's rows as prompt rows (model_batch.n_prompt: the bulk
 * path) beyond this many, a prompt chunk's; up to here they stay decode
 * rows, a verify's shapes, replayed as CUDA graphs. Proposer output only
 * shapes drafts, so the cut may follow the count. */
#define MODEL_PROPOSER_PROMPT_ROWS 32
_Static_assert(MODEL_PROPOSER_PROMPT_ROWS >= MODEL_GRAPH_MAX_TOKENS, "prompt rows are never replayed");
/* The MLP runs over row tiles (model_mlp_rows: the largest power of two up
 * to MODEL_MLP_ROWS whose gate|up output, 2 x intermediate floats a row,
 * fits MODEL_MLP_BYTES): that output is the largest activation, so a
 * prompt chunk's memory does not grow with the MLP's width (Qwen3-8B: 1024
 * rows, 101 MB; Qwen3-1.7B and smaller: 2048). H200 prefill of 3.7k
 * tokens, 2048 against 1024 rows: Qwen3-1.7B 100.0k vs 89.8k tok/s (its
 * down GEMM at 1024 rows fills half the SMs), Qwen3-8B 29.8k vs 29.4k. A
 * row's result does not depend on the tiling (every matmul path is
 * row-invariant). */
#define MODEL_MLP_ROWS 2048
#define MODEL_MLP_BYTES (128u << 20)
#define MODEL_MTP_MAX_CHAIN 16 /* head passes whose ids one chain keeps on the device */
/* segments of model.d_step, in upload order (a forward sends the first 5) */
/* (HID_IDX: an input row index per token, the MTP head's hidden rows or a
 * DFlash context entry's feature row; POS2: a second position per token,
 * the MTP head's RoPE positions or a DFlash block row's attention extent) */
enum { MODEL_SEG_TOKENS, MODEL_SEG_POS, MODEL_SEG_SEQ, MODEL_SEG_SLOTS, MODEL_SEG_ROWS, MODEL_SEG_HID_IDX,
       MODEL_SEG_POS2, MODEL_STEP_SEGS };

/* What a recorded op sequence depends on besides the model's own buffers:
 * which sequence (tag), its shape, the KV cache it writes (and its size),
 * one other buffer it reads (dep, e.g. the target's features), and for an
 * MTP pass where in d_mtp_ids it reads its tokens and writes its ids
 * (model_graph_run copies each field into a zeroed key: compared as bytes). */
typedef struct {
    int tag;              /* MODEL_GRAPH_* */
    int n, n_logits, n_seqs;
    unsigned long kv;     /* the KV cache's id (kv_cache.id) */
    int kv_blocks;
    int chain_in;         /* MTP: tokens at d_mtp_ids + chain_in (-1: uploaded) */
    const void *dep;
    const void *dep2;     /* a second (DFlash behind a verify: the target's ids) */
    int n_prompt;         /* leading prompt rows (their kernels differ) */
    int chain_out;        /* MTP: ids to d_mtp_ids + chain_out */
    int aux;              /* a caller's own shape parameter (DFlash: context rows of a pass) */
    bool dense_rows;      /* set by model_graph_run: the logits rows were 0..n-1 (no gather) */
} model_graph_key;

enum { MODEL_GRAPH_FORWARD = 0, MODEL_GRAPH_MTP_TARGET, MODEL_GRAPH_MTP_SELF, MODEL_GRAPH_DFLASH,
       MODEL_GRAPH_FORWARD_NO_FEATURES };

typedef struct {
    bk_weight attn_norm;  /* (hidden) */
    bk_weight wqkv;       /* (n_heads*hd + 2*n_kv*hd, hidden): q|k|v fused */
    bk_weight bqkv;       /* qwen2: (n_heads*hd + 2*n_kv*hd) bias, else unused */
    bk_weight q_norm;     /* qwen3: (hd) */
    bk_weight k_norm;     /* qwen3: (hd) */
    bk_weight wo;         /* (hidden, n_heads*hd) */
    bk_weight ffn_norm;   /* (hidden) */
    bk_weight w_gate_up;  /* (2*inter, hidden): gate|up fused */
    bk_weight w_down;     /* (hidden, inter) */
} model_layer;

/* The native multi-token-prediction head (Qwen3-Next naming, mtp.*): to
 * draft token q+1 from token q and the target's final hidden state h(q-1):
 *   x = fc([RMSNorm_e(embed(t_q)) ; RMSNorm_h(h(q-1))]); x = layer(x) at
 *   position q over the head's own KV; logits = lm_head(norm(x)). */
typedef struct {
    bk_weight pre_e;      /* (hidden) pre_fc_norm_embedding */
    bk_weight pre_h;      /* (hidden) pre_fc_norm_hidden */
    bk_weight fc;         /* (hidden, 2*hidden) */
    bk_weight norm;       /* (hidden) */
    model_layer layer;
} model_mtp;

typedef struct model {
    model_config cfg;
    backend *be;          /* borrowed */
    st_set st;            /* owned mapping of the checkpoint */
    bk_weight embed;      /* (vocab, hidden) */
    bk_weight lm_head;    /* (vocab, hidden); when tied, the embed tensor again (the backend shares its copy) */
    bk_weight final_norm; /* (hidden) */
    model_layer *layers;  /* (n_layers) */
    float *inv_freq;      /* backend buffer (head_dim/2) */
    /* activation buffers (backend), sized for cap_tokens rows: x (hidden)
     * the residual stream; xn (max(hidden, heads x head_dim)) the norms'
     * outputs and the attention's (a layer never needs both at once); qkv
     * its q|k|v rows; gu the MLP's, for MODEL_MLP_ROWS rows (gate|up of
     * prompt rows, silu(gate) * up of decode rows) */
    int cap_tokens;
    float *x, *xn, *qkv, *gu, *logits_dev;
    /* a forward's index arrays travel in one upload: d_step holds
     * MODEL_STEP_SEGS segments of n int32 each for a batch of n tokens
     * (model_prepare_batch stages them in h_step; model_upload_step sends the
     * first k), so the pointers below are d_step + i n; a graph keyed on n
     * finds them where it was captured. */
    int32_t *d_step, *h_step; /* (MODEL_STEP_SEGS * cap) device / host staging (owned) */
    int step_n;               /* n of the batch staged last */
    int32_t *d_tokens, *d_pos, *d_seq, *d_slots, *d_rows, *d_hid_idx, *d_pos2; /* views of d_step */
    bool rows_dense;          /* the batch prepared last has logits rows 0..n-1: the head reads x as it is */
    int32_t *d_tables;
    int32_t *d_tiles;     /* (cap, 2) prompt-row tiles (bk_attn_batch.tiles) */
    void *d_pen, *h_pen;  /* (cap_pen bytes) model_batch.pen, pen_ent, mask_rows, mask_bits, lp_rows: device / host staging (owned) */
    float *d_lp_raw;      /* (cap_lp, vocab) copies of model_batch.lp_rows before the penalties */
    bk_logprobs *d_lp;    /* (cap_lp) their log-probabilities */
    int cap_lp, fwd_lp;   /* rows of d_lp_raw; of them, the last forward's (model_lp_raw_logit) */
    size_t cap_pen;
    int32_t *d_ids;       /* (cap_ids) argmax of each logits row (drafts), then model_dev_ids.n_fetch ids */
    int32_t *h_ids;       /* (cap_ids) host staging of d_ids from the backend's host_alloc (NULL: none) */
    float *h_logits;      /* (cap_h_logits, vocab) model_host_logits' rows */
    int cap_h_logits;
    int32_t *d_mtp_ids;   /* (cap_logits * MODEL_MTP_MAX_CHAIN) the argmax ids of a chain of MTP passes */
    int mtp_chain, mtp_last; /* ids in d_mtp_ids so far; of them, the last pass's */
    int32_t *h_tiles;     /* (cap, 2) host staging of the same (owned) */
    int cap_tables;       /* int32 entries in d_tables */
    int cap_logits;       /* rows of logits_dev (sized by logit rows, not tokens) */
    int fwd_logits;       /* logits rows of the last model_forward_dev (model_logits_rows) */
    int cap_ids;          /* entries of d_ids: argmax ids and the ids fetched beside them */
    int32_t *h_tables;    /* host staging of d_tables (owned) */
    size_t h_cap_tables;
    /* h_tables as a mirror of d_tables: row s holds h_tab_len[s] block ids
     * already on the device, valid while the layout (KV cache tab_kv, row
     * width) stays; tab_kv NULL: nothing on the device counts (a new
     * buffer, a failed upload). Unchanged rows are not sent again. */
    int *h_tab_len, h_cap_tab_len, tab_width;
    const void *tab_kv;
    /* MTP head (NULL without one) and its buffers (backend, cap_tokens rows) */
    model_mtp *mtp;
    float *hid;           /* (cap, hidden) target's final-normed hidden states of the last forward */
    float *mtp_hid;       /* (cap, hidden) the head's output (after its norm) of its last forward */
    float *mtp_in;        /* (cap, 2*hidden) [norm_e(embed) ; norm_h(h)] */
    /* features for a DFlash drafter (model_project_layers): for every row
     * of the last forward, sum over j of feat_proj[j] (the drafter's, borrowed)
     * times the residual stream after layer feat_layer[j] */
    int n_feat;
    int feat_layer[CONFIG_MAX_DFLASH_LAYERS];
    const bk_weight *feat_proj; /* (n_feat) each (feat_width, hidden) */
    int feat_width;
    float *feat;          /* (cap, feat_width) */
    bool borrowed_io;     /* embed and lm_head are views of another model's (DFlash drafters) */
    /* replayable forward graphs of small batches (backends with graph_begin),
     * keyed by batch shape; dropped when the activation buffers move; when
     * all are taken, a new key replaces the one used longest ago */
    struct {
        model_graph_key key;
        int seen;
        void *exec;
        unsigned long used; /* graph_clock at its last use */
    } graphs[MODEL_MAX_GRAPHS];
    int n_graphs;
    unsigned long graph_clock;
} model;

typedef struct {
    int n_tokens;
    const int32_t *tokens;     /* (n_tokens) host; NULL only for a chained MTP pass (model_mtp_forward) */
    const int32_t *pos;        /* (n_tokens) host */
    const int32_t *seq;        /* (n_tokens) host, index into seqs */
    int n_seqs;
    kv_seq *const *seqs;       /* (n_seqs); reserved for every pos */
    int n_logits;
    const int32_t *logit_rows; /* (n_logits) token rows that produce logits */
    /* rows [0, n_prompt) are prompt tokens (every other row: a generated
     * token or a draft). Backends with a bulk path (matmul_prompt) compute
     * them there; a sequence's rows are all prompt rows or none. */
    int n_prompt;
    /* optional (n_logits) host: each logits row's argmax (sample_argmax's
     * rule), computed on the backend; model_forward's logits may then be
     * NULL, and only these ids leave the device (greedy steps). */
    int32_t *argmax;
    /* no row here feeds a DFlash drafter: the forward skips capturing the
     * features of model_capture_layers (one gather per layer id) */
    bool no_features;
    /* optional (n_sample) logits rows to sample on the device (backend
     * sample_rows; only where model_samples_on_device): their ids in argmax
     * are then those draws (argmax is required) */
    const bk_sample_row *sample;
    int n_sample;
    /* optional (n_pen) sequences whose logits rows the backend penalises
     * (penalize_rows, with their n_pen_ent entries) before argmax and
     * sample_rows; model_forward's logits still leave the device as the
     * model computed them */
    const bk_pen_seq *pen;
    int n_pen;
    const bk_pen_ent *pen_ent;
    int n_pen_ent;
    /* optional (n_mask) logits rows the backend masks after penalising
     * them (mask_rows): mask_bits (n_mask, (vocab + 31) / 32), a constraint's
     * allowed ids */
    const int32_t *mask_rows;
    const uint32_t *mask_bits;
    int n_mask;
    /* optional (n_lp) logits rows whose log-probabilities the backend
     * computes (logprob_rows) over the rows as the model computed them,
     * for the id each row's argmax / sample_rows chose, with lp_top (<=
     * BK_MAX_TOP) alternatives: into host lp (n_lp); argmax is required */
    const int32_t *lp_rows;
    int n_lp, lp_top;
    bk_logprobs *lp;
} model_batch;

/* Loads dir (config.json + safetensors) onto the backend. */
int model_load(model **out, const char *dir, backend *be);
void model_free(model *m);
/* Creates a KV cache sized for n_ctx_tokens tokens in total. */
int model_kv_init(const model *m, kv_cache *kv, int n_ctx_tokens);
/* Waits for the backend's queued work (diagnostic timing). */
int model_sync(model *m);
/* logits: (n_logits, vocab) host, or NULL when only b->argmax is wanted. */
int model_forward(model *m, kv_cache *kv, const model_batch *b, float *logits);
/* A host buffer for n_rows rows of logits, pinned where the backend has
 * host_alloc (the copy off the device then runs at the bus's speed, not
 * through the driver's staging); owned by the model, grown on demand
 * (earlier pointers then invalid), freed by model_free. NULL: out of
 * memory. */
float *model_host_logits(model *m, int n_rows);
/* Rows row .. row + n - 1 of the last forward's logits, as the backend left
 * them (penalised: model_batch.pen), into host dst (n, vocab): valid until
 * the next pass that writes logits (a forward, an MTP or DFlash pass on this
 * model). KS_EINVAL outside that forward's rows. */
int model_logits_rows(model *m, int row, int n, float *dst);
/* The logit of id in the k-th log-probability row of the last forward
 * (model_batch.lp_rows: the row as the model computed it), into *out:
 * valid until the next forward. */
int model_lp_raw_logit(model *m, int k, int id, float *out);
/* Whether the backend samples rows itself (model_batch.sample) */
bool model_samples_on_device(const model *m);

/* Ids already on the device (a drafter's drafts, left there so that no wait
 * comes between its pass and the forward that verifies them): ids is
 * another of the backend's buffers (borrowed, read in stream order; it
 * holds every src + n of the runs and n_fetch ids, the caller's bound). Token
 * rows [runs[i].row, + runs[i].n) take ids[runs[i].src ..] (their host
 * tokens are ignored: any valid id); and ids[0 .. n_fetch) come back beside
 * the argmax ids, into b->argmax[n_logits ..] (which then holds n_logits +
 * n_fetch), in the same copy. */
typedef struct {
    int row, src, n;
} model_dev_run;
typedef struct {
    const int32_t *ids;
    int n_runs;
    const model_dev_run *runs;
    int n_fetch;
    /* Optional: called once the forward's work and the copy of its ids are
     * enqueued, before the host waits for them — what it launches (a DFlash
     * block behind its verify) runs while the host takes the ids, on
     * backends with buf_download_start (elsewhere it runs first) */
    void (*behind)(void *arg);
    void *behind_arg;
    /* Optional: called once the forward is enqueued, before its logits rows
     * are edited, to fill the batch's row edits (pen .. lp of *b, a copy of
     * the caller's batch) while the device computes — the host's part of
     * them (penalty entries, constraint masks) hidden behind the forward on
     * backends that run asynchronously. Nonzero: an error (err_set), the
     * forward fails. */
    int (*edits)(void *arg, model_batch *b);
    void *edits_arg;
} model_dev_ids;
/* model_forward with rows from, and ids fetched out of, dev (NULL: none) */
int model_forward_dev(model *m, kv_cache *kv, const model_batch *b, float *logits, const model_dev_ids *dev);

/* out (n, w.rows) = in (n, w.cols) @ w^T, norm and mode (BK_MM_PLAIN /
 * BK_MM_ADD) as matmul_fused's: the first np rows (prompt rows) on the
 * backend's bulk path (matmul_prompt), the others on the decode matvec — a
 * row's role picks its path, never the call's size */
void model_matmul_rows(model *m, float *out, const float *in, const bk_weight *norm, const bk_weight *w,
                       const bk_weight *bias, int np, int n, int mode);
/* Internal to model/: one decoder layer over m->x; batch validation and
 * staging (fills ab; the block tables go up here, the index arrays wait in
 * h_step, where a caller may change or add segments, for
 * model_upload_step, which sends segments 0..k-1 in one copy). */
/* rows of one MLP tile for this model's intermediate size */
int model_mlp_rows(const model *m);
/* a product of the layer's input rows (all n, without its norm) taken with
 * its qkv product: out (n, w.rows) (+)= x @ w^T (a DFlash feature
 * projection of the layer before's output) */
typedef struct {
    float *out;
    const bk_weight *w;
    bool add;
} model_side;
void model_layer_forward(model *m, const model_layer *L, void *k_cache, void *v_cache, const bk_attn_batch *ab,
                         const int32_t *rope_pos, int n, const model_side *side);
/* m->logits_dev (n_logits, vocab) = lm_head(RMSNorm(src[m->d_rows]; g)),
 * no norm when g is NULL (src already normed) */
void model_head_logits(model *m, const float *src, const bk_weight *g, int n_logits);
int model_prepare_batch(model *m, kv_cache *kv, const model_batch *b, bool graph, bk_attn_batch *ab);
int32_t *model_step_seg(model *m, int seg);
int model_upload_step(model *m, int k);
int model_load_layer(model *m, model_layer *L, const char *prefix);

/* Replayable op sequences (CUDA graphs; llama.c): model_graphs_on says
 * whether a call of n rows should use one (backends with graphs, n up to
 * MODEL_GRAPH_MAX_TOKENS); a caller that does prepares its batch with
 * graph = true (block tables span the pool) and passes the same flag to
 * model_graph_run, which runs ops(m, ctx) directly the first time a key is
 * seen, records it the second time and replays it from then on (only buffer
 * contents may change between replays); with graph false it just runs ops.
 * model_graphs_drop forgets them (a buffer they read moved). */
bool model_graphs_on(const model *m, int n);
int model_graph_run(model *m, const model_graph_key *key, bool graph, void (*ops)(model *m, const void *ctx),
                    const void *ctx);
void model_graphs_drop(model *m);
/* Graphs recorded so far, all models (a caller timing its passes leaves out
 * those that recorded one: a recording costs far more than the pass). */
unsigned long model_graph_recordings(void);

/* MTP head (model/mtp.c). Loaded by model_load when config.json has
 * mtp_num_hidden_layers and the checkpoint has mtp.* tensors. */
int model_mtp_load(model *m);
void model_mtp_free(model *m);
/* A one-layer KV cache for the head. */
int model_mtp_kv_init(const model *m, kv_cache *kv, int n_ctx_tokens);
typedef enum { MTP_SRC_TARGET = 0, MTP_SRC_MTP } mtp_src;
/* Head entries for a varlen batch: entry i is token t_q (b->tokens[i]) at
 * RoPE position q (rope_pos[i]), stored at index b->pos[i] of the head's own
 * KV sequence (its entries only, densely: the head attends over entries, not
 * over target positions); h(q-1) is row hid_idx[i] of the target's last
 * forward (MTP_SRC_TARGET) or of the head's last output (MTP_SRC_MTP).
 * For b->logit_rows: the logits rows into logits (when not NULL; the drafts
 * need only the ids) and their argmax ids. Passes chain on the device: a
 * pass with b->tokens starts a chain; a pass with b->tokens NULL continues
 * it, its entries' tokens being the previous pass's first n ids (no host
 * round trip between them). ids (when not NULL) receives the ids of every
 * pass of the chain so far, pass after pass, and ends it; without ids or
 * logits nothing waits for the device. At most as many entries as the
 * target's last forward had rows, and MODEL_MTP_MAX_CHAIN passes a chain. */
int model_mtp_forward(model *m, kv_cache *mkv, const model_batch *b, const int32_t *rope_pos, const int32_t *hid_idx,
                      mtp_src src, float *logits, int32_t *ids);

/* Makes every later forward keep, for each row, sum_j proj[j] (h_j) in
 * m->feat, h_j the residual stream after layer layers[j] (a DFlash
 * drafter's fc applied to the concatenated features, split by its column
 * blocks: the same product, summed per block); proj (n) is borrowed, each
 * (width, hidden). n = 0 stops it. */
int model_project_layers(model *m, const int *layers, const bk_weight *proj, int n, int width);

/* inv_freq (head_dim/2) for the config's rope (theta, llama3 scaling). */
void rope_inv_freq(const model_config *c, float *inv_freq);

#endif
