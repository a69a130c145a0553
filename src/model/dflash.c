/* dflash.c — the DFlash block drafter (see dflash.h): loading, context
 * entries from the target's features, and the block forward, on the same
 * backend ops and decoder-layer code as the target (model_layer_forward). */
#include "model/dflash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

struct dflash {
    model *dm;          /* the drafter's layers; embed/lm_head are the target's (borrowed_io) */
    model *target;      /* borrowed */
    bk_weight fc;       /* (hidden, n_feat * target hidden) */
    bk_weight hidden_norm; /* (hidden) */
    bk_weight *wkv;     /* (n_layers) k|v fused (2 * kv_dim, hidden): context keys/values */
    int block;          /* checkpoint block size */
    int mask_id;
    /* scratch */
    int cap;            /* rows of feat_in / entries of d_fidx, d_apos */
    float *feat_in;     /* backend (cap, n_feat * target hidden) */
    int32_t *d_fidx;    /* backend (cap * n_feat) */
    int32_t *d_apos;    /* backend (cap) attention extents of block rows */
    int hcap;
    int32_t *h_tok, *h_pos, *h_seq, *h_rope, *h_rows, *h_apos, *h_idx; /* host (hcap * n_feat for h_idx) */
};

static int load_vec(model *m, bk_weight *w, const char *name, int64_t d0, int64_t d1) {
    const st_tensor *t = st_find(&m->st, name);
    if (!t) return err_set(KS_EFORMAT, "DFlash drafter: missing tensor \"%s\"", name);
    if (t->n_dims != (d1 ? 2 : 1) || t->shape[0] != d0 || (d1 && t->shape[1] != d1))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": unexpected shape (expected [%lld%s%lld])",
                       m->st.paths[t->file_index], name, (long long)d0, d1 ? ", " : "", (long long)d1);
    const st_tensor *parts[1] = {t};
    return m->be->ops->weight_init(m->be, w, parts, 1);
}

static int load_kv(model *m, bk_weight *w, int layer) {
    char k[96], v[96];
    snprintf(k, sizeof k, "layers.%d.self_attn.k_proj.weight", layer);
    snprintf(v, sizeof v, "layers.%d.self_attn.v_proj.weight", layer);
    const st_tensor *parts[2] = {st_find(&m->st, k), st_find(&m->st, v)};
    if (!parts[0] || !parts[1]) return err_set(KS_EFORMAT, "DFlash drafter: missing tensor \"%s\"", parts[0] ? v : k);
    return m->be->ops->weight_init(m->be, w, parts, 2); /* shapes were checked by model_load_layer */
}

static int fits(const model *t, const model_config *c, const char *dir) {
    const model_config *tc = &t->cfg;
    if (c->hidden_size != tc->hidden_size)
        return err_set(KS_EINVAL, "%s: hidden size %d differs from the model's %d (it uses the model's "
                       "embedding and head)", dir, c->hidden_size, tc->hidden_size);
    if (c->vocab_size != tc->vocab_size)
        return err_set(KS_EINVAL, "%s: vocabulary (%d) differs from the model's (%d)", dir,
                       c->vocab_size, tc->vocab_size);
    for (int j = 0; j < c->dflash_n_target_layers; j++)
        if (c->dflash_target_layers[j] >= tc->n_layers)
            return err_set(KS_EINVAL, "%s: target_layer_ids has layer %d; the model has %d layers", dir,
                           c->dflash_target_layers[j], tc->n_layers);
    if (c->dflash_embed_scale != 1.0f)
        return err_set(KS_EUNSUPPORTED, "%s: input_embedding_scale %g is not supported (only 1)", dir,
                       c->dflash_embed_scale);
    return KS_OK;
}

int dflash_load(dflash **out, const char *dir, model *target) {
    *out = NULL;
    dflash *d = calloc(1, sizeof *d);
    model *m = calloc(1, sizeof *m);
    if (!d || !m) {
        free(d);
        free(m);
        return err_set(KS_ENOMEM, "DFlash drafter: out of memory");
    }
    d->dm = m;
    d->target = target;
    m->be = target->be;
    m->borrowed_io = true;
    int rc = config_load(&m->cfg, dir);
    if (!rc && !m->cfg.dflash)
        rc = err_set(KS_EINVAL, "%s: config.json is not a DFlash drafter (architectures: DFlashDraftModel)", dir);
    if (!rc) rc = fits(target, &m->cfg, dir);
    if (!rc) rc = st_open_dir(&m->st, dir);
    if (rc) goto fail;
    const model_config *c = &m->cfg;
    int64_t H = c->hidden_size, F = (int64_t)c->dflash_n_target_layers * target->cfg.hidden_size;
    m->embed = target->embed;
    m->lm_head = target->lm_head;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    d->wkv = calloc((size_t)c->n_layers, sizeof *d->wkv);
    if (!m->layers || !d->wkv) {
        rc = err_set(KS_ENOMEM, "DFlash drafter: out of memory");
        goto fail;
    }
    if ((rc = load_vec(m, &d->fc, "fc.weight", H, F)) || (rc = load_vec(m, &d->hidden_norm, "hidden_norm.weight", H, 0)) ||
        (rc = load_vec(m, &m->final_norm, "norm.weight", H, 0)))
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d", l);
        if ((rc = model_load_layer(m, &m->layers[l], prefix)) || (rc = load_kv(m, &d->wkv[l], l))) goto fail;
    }
    float *f = malloc((size_t)(c->head_dim / 2) * sizeof(float));
    m->inv_freq = m->be->ops->buf_alloc(m->be, (size_t)(c->head_dim / 2) * sizeof(float));
    if (!f || !m->inv_freq) {
        free(f);
        rc = err_set(KS_ENOMEM, "DFlash drafter: out of memory");
        goto fail;
    }
    rope_inv_freq(c, f);
    m->be->ops->buf_upload(m->be, m->inv_freq, f, (size_t)(c->head_dim / 2) * sizeof(float));
    free(f);
    d->block = c->dflash_block_size;
    d->mask_id = c->dflash_mask_token_id;
    if ((rc = model_capture_layers(target, c->dflash_target_layers, c->dflash_n_target_layers))) goto fail;
    st_drop_pages(&m->st); /* the backend has its copies */
    *out = d;
    return KS_OK;
fail:
    err_wrap(rc, "DFlash drafter");
    dflash_free(d);
    return rc;
}

void dflash_free(dflash *d) {
    if (!d) return;
    backend *be = d->dm->be;
    if (d->target && d->target->n_feat) model_capture_layers(d->target, NULL, 0);
    bk_weight *ws[2] = {&d->fc, &d->hidden_norm};
    for (int i = 0; i < 2; i++)
        if (ws[i]->n_parts) be->ops->weight_release(be, ws[i]);
    for (int l = 0; d->wkv && l < d->dm->cfg.n_layers; l++)
        if (d->wkv[l].n_parts) be->ops->weight_release(be, &d->wkv[l]);
    free(d->wkv);
    void *bufs[3] = {d->feat_in, d->d_fidx, d->d_apos};
    for (int i = 0; i < 3; i++)
        if (bufs[i]) be->ops->buf_free(be, bufs[i]);
    free(d->h_tok);
    free(d->h_pos);
    free(d->h_seq);
    free(d->h_rope);
    free(d->h_rows);
    free(d->h_apos);
    free(d->h_idx);
    model_free(d->dm);
    free(d);
}

int dflash_block_size(const dflash *d) { return d->block; }

int dflash_kv_init(const dflash *d, kv_cache *kv, int n_tokens) { return model_kv_init(d->dm, kv, n_tokens); }

/* Host and backend scratch for n rows. */
static int ensure(dflash *d, int n) {
    backend *be = d->dm->be;
    int nf = d->dm->cfg.dflash_n_target_layers, Ht = d->target->cfg.hidden_size;
    if (n > d->cap) {
        int cap = n < 64 ? 64 : n * 2;
        model_graphs_drop(d->dm); /* recorded passes read the old buffers */
        void *bufs[3] = {d->feat_in, d->d_fidx, d->d_apos};
        for (int i = 0; i < 3; i++)
            if (bufs[i]) be->ops->buf_free(be, bufs[i]);
        d->feat_in = be->ops->buf_alloc(be, (size_t)cap * nf * Ht * 4);
        d->d_fidx = be->ops->buf_alloc(be, (size_t)cap * nf * 4);
        d->d_apos = be->ops->buf_alloc(be, (size_t)cap * 4);
        d->cap = d->feat_in && d->d_fidx && d->d_apos ? cap : 0;
        if (!d->cap) {
            d->feat_in = NULL;
            d->d_fidx = d->d_apos = NULL;
            return err_set(KS_ENOMEM, "DFlash drafter: out of memory for %d rows", n);
        }
    }
    if (n > d->hcap) {
        int cap = n < 64 ? 64 : n * 2;
        int32_t **arrs[6] = {&d->h_tok, &d->h_pos, &d->h_seq, &d->h_rope, &d->h_rows, &d->h_apos};
        for (int i = 0; i < 6; i++) {
            int32_t *p = realloc(*arrs[i], (size_t)cap * 4);
            if (!p) return err_set(KS_ENOMEM, "DFlash drafter: out of memory");
            *arrs[i] = p;
        }
        int32_t *ix = realloc(d->h_idx, (size_t)cap * nf * 4);
        if (!ix) return err_set(KS_ENOMEM, "DFlash drafter: out of memory");
        d->h_idx = ix;
        d->hcap = cap;
    }
    return KS_OK;
}

typedef struct {
    const dflash *d;
    kv_cache *kv;
    const bk_attn_batch *ab;
    int n, nr;          /* rows; logits rows (block pass) */
} pass_ctx;

/* ctx = hidden_norm(fc([h_l1 ; h_l2 ; ..])); per layer: k|v of ctx, then
 * k_norm, RoPE on k (positions in m->d_pos) and the store into the layer's
 * cache as one qk_norm_rope with no query heads (the results equal
 * rmsnorm, rope, kv_store) */
static void context_ops(model *m, const void *ctx) {
    const pass_ctx *x = ctx;
    const dflash *d = x->d;
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    int n = x->n, nf = c->dflash_n_target_layers, Ht = d->target->cfg.hidden_size, H = c->hidden_size;
    int kvd = c->n_kv_heads * c->head_dim;
    op->gather_rows(be, d->feat_in, d->target->feat, d->d_fidx, n * nf, Ht);
    op->matmul(be, m->x, d->feat_in, &d->fc, NULL, n);
    op->rmsnorm(be, m->xn, H, m->x, H, &d->hidden_norm, n, 1, H, c->rms_norm_eps); /* once for every layer */
    for (int l = 0; l < c->n_layers; l++) {
        const bk_weight *kn = c->qk_norm ? &m->layers[l].k_norm : NULL;
        op->matmul(be, m->qkv, m->xn, &d->wkv[l], NULL, n);
        op->qk_norm_rope(be, m->qkv, 2 * kvd, n, 0, c->n_kv_heads, c->head_dim, NULL, kn, c->rms_norm_eps, m->d_pos,
                         m->inv_freq, x->kv->k[l], x->kv->v[l], x->ab);
    }
}

int dflash_add_context(dflash *d, kv_cache *kv, int n, const int32_t *idx, const int32_t *rope_pos,
                       const int32_t *seq, const int32_t *row, int n_seqs, kv_seq *const *seqs) {
    if (n <= 0) return KS_OK;
    model *m = d->dm, *t = d->target;
    backend *be = m->be;
    const backend_ops *op = be->ops;
    int nf = m->cfg.dflash_n_target_layers;
    if (!t->feat) return err_set(KS_EINVAL, "DFlash: the model kept no features");
    int rc = ensure(d, n);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        if (row[i] < 0 || row[i] >= t->cap_tokens) return err_set(KS_EINVAL, "DFlash: feature row out of range");
        for (int j = 0; j < nf; j++) d->h_idx[i * nf + j] = j * t->cap_tokens + row[i];
        d->h_tok[i] = d->mask_id; /* context entries have no token; the batch needs a valid id */
    }
    model_batch b = {n, d->h_tok, idx, seq, n_seqs, seqs, 0, NULL, 0, NULL, false};
    bk_attn_batch ab;
    bool graph = model_graphs_on(m, n);
    if ((rc = model_prepare_batch(m, kv, &b, graph, &ab))) return rc;
    op->buf_upload(be, d->d_fidx, d->h_idx, (size_t)n * nf * 4);
    /* kv_store writes by slot: pos is free for RoPE */
    memcpy(model_step_seg(m, MODEL_SEG_POS), rope_pos, (size_t)n * 4);
    if ((rc = model_upload_step(m, MODEL_SEG_ROWS + 1))) return rc;
    pass_ctx x = {d, kv, &ab, n, 0};
    /* the features' rows are indexed by the target's capacity: a key of their own */
    model_graph_key k = {.tag = MODEL_GRAPH_DFLASH_CTX, .n = n, .n_logits = t->cap_tokens, .n_seqs = n_seqs,
                         .kv = kv->k[0], .kv_blocks = kv->n_blocks, .dep = t->feat};
    if ((rc = model_graph_run(m, &k, graph, context_ops, &x))) return rc;
    return KS_OK;
}

/* the block: embed, the layers (attention extents in ab), norm, lm_head rows */
static void block_ops(model *m, const void *ctx) {
    const pass_ctx *x = ctx;
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    op->embed(be, m->x, &m->embed, m->d_tokens, x->n);
    for (int l = 0; l < c->n_layers; l++)
        model_layer_forward(m, &m->layers[l], x->kv->k[l], x->kv->v[l], x->ab, m->d_pos, x->n);
    model_head_logits(m, m->x, &m->final_norm, x->nr);
    op->argmax(be, m->d_ids, m->logits_dev, x->nr, c->vocab_size); /* the drafts leave as ids */
}

int dflash_draft(dflash *d, kv_cache *kv, int n_seqs, kv_seq *const *seqs, const int32_t *last,
                 const int32_t *rope0, const int32_t *entry0, int block, int32_t *drafts) {
    if (n_seqs <= 0) return KS_OK;
    if (block < 2 || block > d->block) return err_set(KS_EINVAL, "DFlash: block %d outside 2..%d", block, d->block);
    model *m = d->dm;
    backend *be = m->be;
    const backend_ops *op = be->ops;
    int n = n_seqs * block, nr = n_seqs * (block - 1);
    int rc = ensure(d, n);
    if (rc) return rc;
    int32_t *apos = d->h_apos;
    for (int s = 0, i = 0; s < n_seqs; s++)
        for (int j = 0; j < block; j++, i++) {
            d->h_tok[i] = j ? d->mask_id : last[s];
            d->h_pos[i] = entry0[s] + j;
            d->h_seq[i] = s;
            if (j) d->h_rows[s * (block - 1) + j - 1] = i;
        }
    model_batch b = {n, d->h_tok, d->h_pos, d->h_seq, n_seqs, seqs, nr, d->h_rows, 0, NULL, false};
    bk_attn_batch ab;
    bool graph = model_graphs_on(m, n_seqs); /* one block per sequence: bounded like a verify step */
    if ((rc = model_prepare_batch(m, kv, &b, graph, &ab))) return rc;
    /* every block row sees the whole context and the whole block */
    for (int s = 0, i = 0; s < n_seqs; s++)
        for (int j = 0; j < block; j++, i++) {
            apos[i] = entry0[s] + block - 1;
            d->h_rope[i] = rope0[s] + j;
        }
    op->buf_upload(be, d->d_apos, apos, (size_t)n * 4);
    /* RoPE positions (kv_store writes by slot) */
    memcpy(model_step_seg(m, MODEL_SEG_POS), d->h_rope, (size_t)n * 4);
    if ((rc = model_upload_step(m, MODEL_SEG_ROWS + 1))) return rc;
    ab.pos = d->d_apos;
    pass_ctx x = {d, kv, &ab, n, nr};
    model_graph_key k = {.tag = MODEL_GRAPH_DFLASH_BLOCK, .n = n, .n_logits = nr, .n_seqs = n_seqs, .kv = kv->k[0],
                         .kv_blocks = kv->n_blocks};
    if ((rc = model_graph_run(m, &k, graph, block_ops, &x))) return rc;
    return op->buf_download(be, drafts, m->d_ids, (size_t)nr * 4);
}
