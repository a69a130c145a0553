/* dflash.h — a DFlash block drafter (z-lab DFlashDraftModel, the layout of
 * ../shared/models/tinycoder/dflash): a few non-causal decoder layers that
 * draft a whole block in one forward, reading the target's own hidden states.
 *
 *   ctx(p)  = hidden_norm(fc([h_l1(p) ; h_l2(p) ; ..]))   h_l: the target's
 *             residual stream after layer l (target_layer_ids), position p
 *   block   = embed([last token, MASK x (B-1)]) at positions a..a+B-1
 *   layer:  queries from the block (input_layernorm), keys/values from
 *           [ctx(0..a-1) ; block] (k_norm, RoPE at the positions), no mask
 *           inside the block; then the Qwen3 MLP
 *   drafts  = argmax of target lm_head(norm(x)) at block rows 1..B-1
 *
 * Context keys/values are computed once per position and kept in the
 * drafter's own paged KV cache (one entry per position, stored densely from
 * the sequence's first context position: entry index = position - q0); the
 * block's keys/values are written after the context entries and overwritten
 * by the next block. The drafter has no embedding or head of its own: it
 * borrows the target's. Greedy drafts (q = 1{d}) keep the verifier exact at
 * any temperature; output_multiplier and softcapping are monotonic, so they
 * do not change them.
 *
 * Ownership: the dflash owns its layers (a model without embedding/head
 * weights of its own) and scratch; the target is borrowed and must outlive
 * it. dflash_load makes the target capture the features (model_capture_layers). */
#ifndef KS_DFLASH_H
#define KS_DFLASH_H

#include <stdint.h>

#include "kv/kv_cache.h"
#include "model/model.h"

typedef struct dflash dflash;

/* Loads the drafter in dir for target; refuses one whose hidden size,
 * vocabulary or layer ids do not fit the target. */
int dflash_load(dflash **out, const char *dir, model *target);
void dflash_free(dflash *d);
/* The checkpoint's block size (drafts per block: block size - 1). */
int dflash_block_size(const dflash *d);
/* The last step's blocks on the backend, (n, block) ids: row 0 of block s
 * at s * block is its last token's (no draft), then its block - 1 drafts.
 * Valid until the next step (the forward that verifies them reads them
 * there: model_forward_dev). */
const int32_t *dflash_block_ids(const dflash *d);
/* A KV cache for the drafter's layers, n_tokens entries over all sequences. */
int dflash_kv_init(const dflash *d, kv_cache *kv, int n_tokens);

/* One drafter step, one pass on the backend: n context entries, entry i
 * being target position rope_pos[i] of sequence seq[i] (index into the
 * step's seqs), stored at entry index idx[i], its features row row[i] of
 * the target's last forward; then (n > 0) a block for each of n sequences:
 * sequence seq[s]'s block starts with last[s] at position rope0[s], entries
 * from entry0[s] (its context: entries 0..entry0[s]-1, including this
 * step's). */
typedef struct {
    int n;
    const int32_t *idx, *rope_pos, *seq, *row;
} dflash_ctx_rows;
typedef struct {
    int n;
    const int32_t *seq, *last, *rope0, *entry0;
    int block;         /* <= the checkpoint's block size */
    int32_t *drafts;   /* out (n, block - 1); NULL: the drafts stay on the device (dflash_block_ids) */
    /* > 0: the one block (n == 1) follows a greedy verify of `behind`
     * drafts — one sequence's, rows 0..behind of the target's last forward,
     * their argmax ids in its d_ids — launched before the host has those
     * ids (model_dev_ids.behind). last, rope0 and entry0 are the block's
     * values with no draft accepted; on the device it moves up by the
     * drafts accepted and starts with the verify's next token (backend op
     * spec_shift). Its sequence is reserved for entry0 + behind + block. */
    int behind;
} dflash_blocks;

/* The step (either part may be NULL or empty); seqs reserved for every
 * entry written (a block's: entry0 + block). Without blocks, or with the
 * drafts left on the device, nothing waits for the device: an error shows
 * at the next wait (a backend failure is sticky). */
int dflash_step(dflash *d, kv_cache *kv, int n_seqs, kv_seq *const *seqs, const dflash_ctx_rows *ctx,
                const dflash_blocks *blocks);
/* The step's parts alone: context entries; blocks for sequences 0..n_seqs-1. */
int dflash_add_context(dflash *d, kv_cache *kv, int n, const int32_t *idx, const int32_t *rope_pos,
                       const int32_t *seq, const int32_t *row, int n_seqs, kv_seq *const *seqs);
int dflash_draft(dflash *d, kv_cache *kv, int n_seqs, kv_seq *const *seqs, const int32_t *last,
                 const int32_t *rope0, const int32_t *entry0, int block, int32_t *drafts);

#endif
