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
    /* fc (hidden, n_feat * target hidden) by its column blocks: fc_part[j]
     * (hidden, target hidden) multiplies feature j; the target applies them
     * in its forward (model_project_layers), from these host copies */
    bk_weight fc_part[CONFIG_MAX_DFLASH_LAYERS];
    void *fc_host[CONFIG_MAX_DFLASH_LAYERS];
    bk_weight hidden_norm; /* (hidden) */
    /* context keys/values: the k|v of group_layers consecutive layers fused,
     * (group_layers * 2 * kv_dim, hidden) each, so one matmul serves them
     * (its rows fit the qkv buffer; BK_MAX_PARTS parts at most) */
    bk_weight *wkv;     /* (n_groups) */
    int n_groups, group_layers;
    int block;          /* checkpoint block size */
    int mask_id;
    /* scratch */
    int cap;            /* rows of feat_in */
    float *feat_in;     /* backend (cap, hidden): context rows gathered from the target's features */
    int hcap;
    int32_t *h_tok, *h_pos, *h_seq, *h_rope, *h_rows, *h_apos, *h_ids; /* host (hcap) */
    int32_t *d_behind;  /* backend, 1 int: the drafts of the verify a block follows (dflash_blocks.behind) */
};

/* the tensor name of shape [d0] (d1 0) or [d0, d1] */
static int find_shaped(model *m, const st_tensor **out, const char *name, int64_t d0, int64_t d1) {
    const st_tensor *t = *out = st_find(&m->st, name);
    if (!t) return err_set(KS_EFORMAT, "DFlash drafter: missing tensor \"%s\"", name);
    if (t->n_dims != (d1 ? 2 : 1) || t->shape[0] != d0 || (d1 && t->shape[1] != d1))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": unexpected shape (expected [%lld%s%lld])",
                       m->st.paths[t->file_index], name, (long long)d0, d1 ? ", " : "", (long long)d1);
    return KS_OK;
}

static int load_vec(model *m, bk_weight *w, const char *name, int64_t d0) {
    const st_tensor *parts[1];
    int rc = find_shaped(m, parts, name, d0, 0);
    return rc ? rc : m->be->ops->weight_init(m->be, w, parts, 1);
}

/* the k|v projections of layers l0 .. l0 + n - 1 as one weight */
static int load_kv(model *m, bk_weight *w, int l0, int n) {
    const st_tensor *parts[BK_MAX_PARTS];
    for (int i = 0; i < 2 * n; i++) {
        char name[96];
        snprintf(name, sizeof name, "layers.%d.self_attn.%s_proj.weight", l0 + i / 2, i % 2 ? "v" : "k");
        if (!(parts[i] = st_find(&m->st, name)))
            return err_set(KS_EFORMAT, "DFlash drafter: missing tensor \"%s\"", name);
    }
    return m->be->ops->weight_init(m->be, w, parts, 2 * n); /* shapes were checked by model_load_layer */
}

/* fc's column blocks (one per feature) as weights of their own, copied out
 * of the mapping (the copies stay: a shared weight is known by its host
 * address) */
static int load_fc(dflash *d, int nf, int64_t H, int64_t Ht) {
    model *m = d->dm;
    const st_tensor *t;
    int rc = find_shaped(m, &t, "fc.weight", H, nf * Ht);
    if (rc) return rc;
    size_t es = dtype_size(t->dtype), row = (size_t)Ht * es;
    for (int j = 0; j < nf && !rc; j++) {
        char *h = d->fc_host[j] = malloc((size_t)H * row);
        if (!h) return err_set(KS_ENOMEM, "DFlash drafter: out of memory");
        for (int64_t r = 0; r < H; r++) memcpy(h + r * row, (const char *)t->data + ((size_t)r * nf + j) * row, row);
        st_tensor part = *t;
        part.shape[1] = Ht;
        part.n_elems = H * Ht;
        part.data = h;
        part.nbytes = (size_t)H * row;
        const st_tensor *parts[1] = {&part};
        rc = m->be->ops->weight_init(m->be, &d->fc_part[j], parts, 1);
    }
    return rc;
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
    int64_t H = c->hidden_size, Ht = target->cfg.hidden_size;
    int nf = c->dflash_n_target_layers, L = c->n_layers, kvd = c->n_kv_heads * c->head_dim;
    int fit = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim / (2 * kvd); /* layers whose k|v fit a qkv row */
    d->group_layers = fit < BK_MAX_PARTS / 2 ? fit : BK_MAX_PARTS / 2;
    d->n_groups = (L + d->group_layers - 1) / d->group_layers;
    m->embed = target->embed;
    m->lm_head = target->lm_head;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    d->wkv = calloc((size_t)d->n_groups, sizeof *d->wkv);
    if (!m->layers || !d->wkv) {
        rc = err_set(KS_ENOMEM, "DFlash drafter: out of memory");
        goto fail;
    }
    if ((rc = load_fc(d, nf, H, Ht)) || (rc = load_vec(m, &d->hidden_norm, "hidden_norm.weight", H)) ||
        (rc = load_vec(m, &m->final_norm, "norm.weight", H)))
        goto fail;
    for (int l = 0; l < L; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d", l);
        if ((rc = model_load_layer(m, &m->layers[l], prefix))) goto fail;
    }
    for (int g = 0; g < d->n_groups; g++) {
        int l0 = g * d->group_layers, n = L - l0 < d->group_layers ? L - l0 : d->group_layers;
        if ((rc = load_kv(m, &d->wkv[g], l0, n))) goto fail;
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
    if ((rc = model_project_layers(target, c->dflash_target_layers, d->fc_part, nf, (int)H))) goto fail;
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
    if (d->target && d->target->feat_proj == d->fc_part) model_project_layers(d->target, NULL, NULL, 0, 0);
    if (d->hidden_norm.n_parts) be->ops->weight_release(be, &d->hidden_norm);
    for (int j = 0; j < CONFIG_MAX_DFLASH_LAYERS; j++) {
        if (d->fc_part[j].n_parts) be->ops->weight_release(be, &d->fc_part[j]);
        free(d->fc_host[j]);
    }
    for (int g = 0; d->wkv && g < d->n_groups; g++)
        if (d->wkv[g].n_parts) be->ops->weight_release(be, &d->wkv[g]);
    free(d->wkv);
    if (d->feat_in) be->ops->buf_free(be, d->feat_in);
    if (d->d_behind) be->ops->buf_free(be, d->d_behind);
    int32_t *arrs[7] = {d->h_tok, d->h_pos, d->h_seq, d->h_rope, d->h_rows, d->h_apos, d->h_ids};
    for (int i = 0; i < 7; i++) free(arrs[i]);
    model_free(d->dm);
    free(d);
}

int dflash_block_size(const dflash *d) { return d->block; }

const int32_t *dflash_block_ids(const dflash *d) { return d->dm->d_ids; }

int dflash_kv_init(const dflash *d, kv_cache *kv, int n_tokens) { return model_kv_init(d->dm, kv, n_tokens); }

/* Host scratch for n rows, and the backend's gathered context rows when gather. */
static int ensure(dflash *d, int n, bool gather) {
    backend *be = d->dm->be;
    if (gather && n > d->cap) {
        int cap = n < 64 ? 64 : n * 2;
        model_graphs_drop(d->dm); /* recorded passes read the old buffer */
        if (d->feat_in) be->ops->buf_free(be, d->feat_in);
        d->feat_in = be->ops->buf_alloc(be, (size_t)cap * d->dm->cfg.hidden_size * 4);
        d->cap = d->feat_in ? cap : 0;
        if (!d->cap) return err_set(KS_ENOMEM, "DFlash drafter: out of memory for %d rows", n);
    }
    if (n > d->hcap) {
        int cap = n < 64 ? 64 : n * 2;
        int32_t **arrs[7] = {&d->h_tok, &d->h_pos, &d->h_seq, &d->h_rope, &d->h_rows, &d->h_apos, &d->h_ids};
        for (int i = 0; i < 7; i++) {
            int32_t *p = realloc(*arrs[i], (size_t)cap * 4);
            if (!p) return err_set(KS_ENOMEM, "DFlash drafter: out of memory");
            *arrs[i] = p;
        }
        d->hcap = cap;
    }
    return KS_OK;
}

typedef struct {
    const dflash *d;
    kv_cache *kv;
    const bk_attn_batch *ab_ctx, *ab_blk; /* views of one prepared batch: its context rows, its block rows */
    int n_ctx, n_blk;   /* rows of each (the block rows follow the context rows) */
    bool gather;        /* context rows: gathered (else rows 0..n_ctx-1 of the target's features) */
    bool behind;        /* the block follows its verify on the device (dflash_blocks.behind) */
    const int32_t *table; /* then its sequence's row of the block tables */
} pass_ctx;

/* ctx = hidden_norm(fc([h_l1 ; h_l2 ; ..])) (the fc product is the
 * target's m->feat, rows in m->d_hid_idx); per group of layers: their k|v
 * of ctx in one matmul with the norm folded in, then per layer k_norm,
 * RoPE on k (positions in m->d_pos) and the store into its cache as one
 * qk_norm_rope with no query heads (the results equal rmsnorm, rope,
 * kv_store) */
static void context_ops(model *m, const pass_ctx *x) {
    const dflash *d = x->d;
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    int n = x->n_ctx, kvd = c->n_kv_heads * c->head_dim;
    const float *src = d->target->feat;
    if (x->gather) {
        op->gather_rows(be, d->feat_in, src, m->d_hid_idx, n, c->hidden_size);
        src = d->feat_in;
    }
    for (int g = 0; g < d->n_groups; g++) {
        int l0 = g * d->group_layers, nl = c->n_layers - l0 < d->group_layers ? c->n_layers - l0 : d->group_layers;
        op->matmul_fused(be, m->qkv, src, &d->hidden_norm, c->rms_norm_eps, &d->wkv[g], NULL, n, BK_MM_PLAIN);
        for (int l = l0; l < l0 + nl; l++) {
            const bk_weight *kn = c->qk_norm ? &m->layers[l].k_norm : NULL;
            op->qk_norm_rope(be, m->qkv + (size_t)(l - l0) * 2 * kvd, nl * 2 * kvd, n, 0, c->n_kv_heads, c->head_dim,
                             NULL, kn, c->rms_norm_eps, m->d_pos, m->inv_freq, x->kv->k[l], x->kv->v[l], x->ab_ctx);
        }
    }
}

/* the blocks (rows n_ctx.. of the batch, from row 0 of the activations):
 * embed, the layers (attention extents in ab_blk), norm, lm_head on every
 * row (the first row's id is not a draft; a row more costs less than
 * gathering the others), argmax: the drafts leave as ids */
static void block_ops(model *m, const pass_ctx *x) {
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    int n = x->n_blk;
    op->embed(be, m->x, &m->embed, m->d_tokens + x->n_ctx, n);
    for (int l = 0; l < c->n_layers; l++)
        model_layer_forward(m, &m->layers[l], x->kv->k[l], x->kv->v[l], x->ab_blk, m->d_pos + x->n_ctx, n, NULL);
    op->matmul_fused(be, m->logits_dev, m->x, &m->final_norm, c->rms_norm_eps, &m->lm_head, NULL, n, BK_MM_PLAIN);
    op->argmax(be, m->d_ids, m->logits_dev, n, c->vocab_size);
}

/* a block behind its verify: the drafts the verify accepted (the target's
 * ids against its draft rows 1..) move the block's rows up; the entries
 * (HID_IDX, unused by block rows) hold those with none accepted */
static void shift_ops(model *m, const pass_ctx *x) {
    const model *t = x->d->target;
    int c = x->n_ctx;
    m->be->ops->spec_shift(m->be, t->d_ids, t->d_tokens + 1, x->d->d_behind, m->d_tokens + c, m->d_pos + c,
                           m->d_pos2 + c, m->d_hid_idx + c, m->d_slots + c, x->table, x->kv->block_size, x->n_blk);
}

static void step_ops(model *m, const void *ctx) {
    const pass_ctx *x = ctx;
    if (x->behind) shift_ops(m, x);
    if (x->n_ctx) context_ops(m, x);
    if (x->n_blk) block_ops(m, x);
}

int dflash_step(dflash *d, kv_cache *kv, int n_seqs, kv_seq *const *seqs, const dflash_ctx_rows *cr,
                const dflash_blocks *bl) {
    int nc = cr ? cr->n : 0, nb = bl ? bl->n : 0, B = nb > 0 ? bl->block : 0;
    if (nc < 0 || nb < 0) return err_set(KS_EINVAL, "DFlash: negative row count");
    if (nc + nb == 0) return KS_OK;
    if (nb && (B < 2 || B > d->block)) return err_set(KS_EINVAL, "DFlash: block %d outside 2..%d", B, d->block);
    model *m = d->dm, *t = d->target;
    if (nc && !t->feat) return err_set(KS_EINVAL, "DFlash: the model kept no features");
    int n = nc + nb * B, behind = nb ? bl->behind : 0;
    if (behind && (nb != 1 || behind >= B || !t->d_ids || behind + 1 > t->cap_ids))
        return err_set(KS_EINVAL, "DFlash: a block behind a verify of %d drafts (%d blocks of %d)", behind, nb, B);
    bool gather = false; /* a single sequence's step reads its rows where the forward left them */
    for (int i = 0; i < nc; i++) {
        if (cr->row[i] < 0 || cr->row[i] >= t->cap_tokens) return err_set(KS_EINVAL, "DFlash: feature row out of range");
        gather |= cr->row[i] != i;
    }
    int rc = ensure(d, n, gather);
    if (rc) return rc;
    /* rows: the context entries (no token: the batch needs a valid id),
     * then each block [last, MASK x (B - 1)]; pos = entry indexes (the
     * slots), RoPE positions apart */
    for (int i = 0; i < nc; i++) {
        d->h_tok[i] = d->mask_id;
        d->h_pos[i] = cr->idx[i];
        d->h_seq[i] = cr->seq[i];
    }
    for (int s = 0, i = nc; s < nb; s++)
        for (int j = 0; j < B; j++, i++) {
            d->h_tok[i] = j ? d->mask_id : bl->last[s];
            d->h_pos[i] = bl->entry0[s] + behind + j; /* (behind: checked for the most it can move) */
            d->h_seq[i] = bl->seq[s];
            d->h_rows[i - nc] = i;
        }
    model_batch b = {.n_tokens = n, .tokens = d->h_tok, .pos = d->h_pos, .seq = d->h_seq, .n_seqs = n_seqs,
                     .seqs = seqs, .n_logits = nb * B, .logit_rows = d->h_rows};
    bk_attn_batch ab;
    /* replayed while both parts are bounded like a verify step */
    bool graph = model_graphs_on(m, nc > nb ? nc : nb);
    if ((rc = model_prepare_batch(m, kv, &b, graph, &ab))) return rc;
    int32_t *rope = model_step_seg(m, MODEL_SEG_POS), *hid = model_step_seg(m, MODEL_SEG_HID_IDX);
    int32_t *apos = model_step_seg(m, MODEL_SEG_POS2);
    for (int i = 0; i < nc; i++) {
        rope[i] = cr->rope_pos[i];
        hid[i] = cr->row[i];
        apos[i] = 0;
    }
    for (int s = 0, i = nc; s < nb; s++)
        for (int j = 0; j < B; j++, i++) {
            rope[i] = bl->rope0[s] + j;
            hid[i] = bl->entry0[s] + j; /* (read only behind a verify: the entries with none accepted) */
            apos[i] = bl->entry0[s] + B - 1; /* every block row sees the whole context and the whole block */
        }
    if ((rc = model_upload_step(m, MODEL_SEG_POS2 + 1))) return rc;
    if (behind) {
        if (!d->d_behind && !(d->d_behind = m->be->ops->buf_alloc(m->be, sizeof(int32_t))))
            return err_set(KS_ENOMEM, "DFlash: out of memory");
        if ((rc = m->be->ops->buf_upload(m->be, d->d_behind, &behind, sizeof behind))) return rc;
    }
    bk_attn_batch ab_ctx = ab, ab_blk = ab;
    ab_ctx.n_tokens = nc;
    ab_blk.n_tokens = nb * B;
    ab_blk.pos = m->d_pos2 + nc;
    ab_blk.seq = m->d_seq + nc;
    ab_blk.slots = m->d_slots + nc;
    pass_ctx x = {d, kv, &ab_ctx, &ab_blk, nc, nb * B, gather, behind > 0,
                  behind ? m->d_tables + (size_t)bl->seq[0] * ab.max_blocks : NULL};
    /* the target's features (and behind a verify its ids and tokens: its
     * d_step, allocated with the features) are buffers of its own: in the key */
    model_graph_key k = {.tag = MODEL_GRAPH_DFLASH, .n = n, .n_logits = nb * B,
                         .aux = 4 * nc + 2 * (behind > 0) + gather, .n_seqs = n_seqs, .kv = kv->id,
                         .kv_blocks = kv->n_blocks, .dep = nc || behind ? t->feat : NULL,
                         .dep2 = behind ? t->d_ids : NULL};
    if ((rc = model_graph_run(m, &k, graph, step_ops, &x)) || !nb || !bl->drafts) return rc;
    if ((rc = m->be->ops->buf_download(m->be, d->h_ids, m->d_ids, (size_t)nb * B * 4))) return rc;
    for (int s = 0; s < nb; s++) /* row 0 of each block is its last token's */
        memcpy(bl->drafts + (size_t)s * (B - 1), d->h_ids + (size_t)s * B + 1, (size_t)(B - 1) * 4);
    return KS_OK;
}

int dflash_add_context(dflash *d, kv_cache *kv, int n, const int32_t *idx, const int32_t *rope_pos,
                       const int32_t *seq, const int32_t *row, int n_seqs, kv_seq *const *seqs) {
    dflash_ctx_rows cr = {n, idx, rope_pos, seq, row};
    return dflash_step(d, kv, n_seqs, seqs, &cr, NULL);
}

int dflash_draft(dflash *d, kv_cache *kv, int n_seqs, kv_seq *const *seqs, const int32_t *last,
                 const int32_t *rope0, const int32_t *entry0, int block, int32_t *drafts) {
    if (n_seqs <= 0) return KS_OK;
    int32_t *of = malloc((size_t)n_seqs * sizeof *of);
    if (!of) return err_set(KS_ENOMEM, "DFlash: out of memory");
    for (int s = 0; s < n_seqs; s++) of[s] = s;
    dflash_blocks bl = {n_seqs, of, last, rope0, entry0, block, drafts, 0};
    int rc = dflash_step(d, kv, n_seqs, seqs, NULL, &bl);
    free(of);
    return rc;
}
