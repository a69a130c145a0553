/* mtp.c — the native MTP head (see model.h): loading the mtp.* tensors and
 * the head's forward over a varlen batch of entries, on the same backend ops
 * and decoder-layer code as the target (model_layer_forward). The head's KV
 * cache has one layer; its positions are the target's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model.h"

static int load_vec(model *m, bk_weight *w, const char *name, int64_t d0, int64_t d1) {
    const st_tensor *t = st_find(&m->st, name);
    if (!t) return err_set(KS_EFORMAT, "checkpoint: missing tensor \"%s\"", name);
    if (t->n_dims != (d1 ? 2 : 1) || t->shape[0] != d0 || (d1 && t->shape[1] != d1))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": unexpected shape", m->st.paths[t->file_index], name);
    const st_tensor *parts[1] = {t};
    return m->be->ops->weight_init(m->be, w, parts, 1);
}

int model_mtp_load(model *m) {
    if (m->cfg.mtp_num_hidden_layers < 1 || !st_find(&m->st, "mtp.fc.weight")) return KS_OK; /* no head */
    int64_t H = m->cfg.hidden_size;
    m->mtp = calloc(1, sizeof *m->mtp);
    if (!m->mtp) return err_set(KS_ENOMEM, "model: out of memory");
    int rc;
    if ((rc = load_vec(m, &m->mtp->pre_e, "mtp.pre_fc_norm_embedding.weight", H, 0)) ||
        (rc = load_vec(m, &m->mtp->pre_h, "mtp.pre_fc_norm_hidden.weight", H, 0)) ||
        (rc = load_vec(m, &m->mtp->fc, "mtp.fc.weight", H, 2 * H)) ||
        (rc = load_vec(m, &m->mtp->norm, "mtp.norm.weight", H, 0)) ||
        (rc = model_load_layer(m, &m->mtp->layer, "mtp.layers.0")))
        return err_wrap(rc, "MTP head");
    return KS_OK;
}

void model_mtp_free(model *m) {
    if (!m->mtp) return;
    bk_weight *ws = (bk_weight *)m->mtp;
    for (size_t i = 0; i < sizeof(model_mtp) / sizeof(bk_weight); i++)
        if (ws[i].n_parts) m->be->ops->weight_release(m->be, &ws[i]);
    free(m->mtp);
    m->mtp = NULL;
}

int model_mtp_kv_init(const model *m, kv_cache *kv, int n_ctx_tokens) {
    int blocks = (n_ctx_tokens + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE;
    return kv_cache_init(kv, m->be, 1, m->cfg.n_kv_heads * m->cfg.head_dim, KV_BLOCK_SIZE, blocks < 1 ? 1 : blocks);
}

typedef struct {
    kv_cache *mkv;
    const bk_attn_batch *ab;
    int n, n_logits;
    mtp_src src;
    const int32_t *tokens; /* the entries' tokens: uploaded, or the chain's last ids */
    int32_t *ids;          /* where the pass's ids go in the chain */
} mtp_ctx;

/* [norm_e(embed(t_q)) ; norm_h(h(q-1))] -> fc -> the head's layer -> norm -> logits rows */
static void mtp_ops(model *m, const void *ctx) {
    const mtp_ctx *x = ctx;
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    int n = x->n, H = c->hidden_size;
    op->mtp_input(be, m->mtp_in, &m->embed, x->tokens, x->src == MTP_SRC_MTP ? m->mtp_hid : m->hid, m->d_hid_idx,
                  &m->mtp->pre_e, &m->mtp->pre_h, n, H, c->rms_norm_eps);
    /* prompt rows (a prompt chunk's entries) on the bulk path */
    model_matmul_rows(m, m->x, m->mtp_in, NULL, &m->mtp->fc, NULL, x->ab->n_prompt, n, BK_MM_PLAIN);
    model_layer_forward(m, &m->mtp->layer, x->mkv->k[0], x->mkv->v[0], x->ab, m->d_pos2, n, NULL);
    op->rmsnorm(be, m->mtp_hid, H, m->x, H, &m->mtp->norm, n, 1, H, c->rms_norm_eps); /* the next pass's input */
    if (x->n_logits <= 0) return;
    model_head_logits(m, m->mtp_hid, NULL, x->n_logits);
    op->argmax(be, x->ids, m->logits_dev, x->n_logits, c->vocab_size);
}

int model_mtp_forward(model *m, kv_cache *mkv, const model_batch *b, const int32_t *rope_pos, const int32_t *hid_idx,
                      mtp_src src, float *logits, int32_t *ids) {
    if (!m->mtp) return err_set(KS_EUNSUPPORTED, "this model has no MTP head");
    m->fwd_logits = 0; /* the forward's logits rows are overwritten (model_logits_rows; d_lp_raw is not) */
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    int n = b->n_tokens;
    /* the hidden rows must outlive the (possible) buffer growth below */
    if (n > m->cap_tokens || !m->hid)
        return err_set(KS_EINVAL, "MTP: %d entries, more than the last forward's %d rows", n, m->cap_tokens);
    for (int i = 0; i < n; i++)
        if (hid_idx[i] < 0 || hid_idx[i] >= m->cap_tokens) return err_set(KS_EINVAL, "MTP: hidden row out of range");
    bool chained = !b->tokens;
    if (chained && n > m->mtp_last) /* (the chain's room is checked once the buffers are sized, below) */
        return err_set(KS_EINVAL, "MTP: a chained pass of %d entries after a pass of %d ids", n, m->mtp_last);
    if (!chained) m->mtp_chain = m->mtp_last = 0;
    bk_attn_batch ab;
    bool graph = model_graphs_on(m, n) && b->n_prompt == 0; /* (prompt rows are not replayed: model_forward_dev) */
    int rc = model_prepare_batch(m, mkv, b, graph, &ab); /* (a chain's buffers stay: its passes are no larger) */
    if (rc) return rc;
    if (m->mtp_chain + b->n_logits > MODEL_MTP_MAX_CHAIN * m->cap_logits)
        return err_set(KS_EINVAL, "MTP: more than %d passes in a chain", MODEL_MTP_MAX_CHAIN);
    memcpy(model_step_seg(m, MODEL_SEG_HID_IDX), hid_idx, (size_t)n * 4);
    memcpy(model_step_seg(m, MODEL_SEG_POS2), rope_pos, (size_t)n * 4);
    if ((rc = model_upload_step(m, MODEL_STEP_SEGS))) return rc;
    /* the chain lives in d_mtp_ids: a chained pass reads the last pass's ids
     * there and every pass writes its own after them */
    int chain_in = chained ? m->mtp_chain - m->mtp_last : -1;
    mtp_ctx x = {mkv, &ab, n, b->n_logits, src, chained ? m->d_mtp_ids + chain_in : m->d_tokens,
                 m->d_mtp_ids + m->mtp_chain};
    model_graph_key k = {.tag = src == MTP_SRC_MTP ? MODEL_GRAPH_MTP_SELF : MODEL_GRAPH_MTP_TARGET, .n = n,
                         .n_logits = b->n_logits, .n_seqs = b->n_seqs, .kv = mkv->id, .kv_blocks = mkv->n_blocks,
                         .chain_in = chain_in, .chain_out = m->mtp_chain, .n_prompt = ab.n_prompt};
    if ((rc = model_graph_run(m, &k, graph, mtp_ops, &x))) return rc;
    if (b->n_logits <= 0) return KS_OK; /* entries only: nothing to wait for */
    m->mtp_last = b->n_logits;
    m->mtp_chain += b->n_logits;
    if (ids) {
        rc = op->buf_download(be, ids, m->d_mtp_ids, (size_t)m->mtp_chain * 4);
        m->mtp_chain = m->mtp_last = 0;
        if (rc) return rc;
    }
    return logits ? op->buf_download(be, logits, m->logits_dev, (size_t)b->n_logits * c->vocab_size * 4) : KS_OK;
}
