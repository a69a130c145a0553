/* llama.c — the Llama-family decoder, written once against backend.h:
 * Llama / Llama 3 (rope scaling), Qwen2 (q/k/v bias), Qwen3 (QK-norm).
 *
 *   x = embed[tokens]
 *   per layer: h = rmsnorm(x); q|k|v = h Wqkv^T (+b); [qwen3: rmsnorm q, k per head]
 *              rope(q, k); store k, v in paged KV; a = attention(q, KV)
 *              x += a Wo^T; h = rmsnorm(x); x += (silu(h Wg^T) * (h Wu^T)) Wd^T
 *   logits = rmsnorm(x[rows]) Wlm^T
 * Shapes are checked against config.json at load; every mismatch names the
 * tensor and its shard file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model.h"

static int get_tensor(const model *m, const char *name, int64_t d0, int64_t d1, const st_tensor **out) {
    const st_tensor *t = st_find(&m->st, name);
    if (!t) return err_set(KS_EFORMAT, "checkpoint: missing tensor \"%s\"", name);
    int nd = d1 ? 2 : 1;
    if (t->n_dims != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char got[128] = "";
        for (int i = 0; i < t->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (nd == 2)
            return err_set(KS_EFORMAT, "%s: tensor \"%s\": shape [%s], expected [%lld, %lld]",
                           m->st.paths[t->file_index], name, got, (long long)d0, (long long)d1);
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": shape [%s], expected [%lld]",
                       m->st.paths[t->file_index], name, got, (long long)d0);
    }
    *out = t;
    return KS_OK;
}

/* Loads `n` tensors named fmt % (layer, part[i]) fused into one weight. */
static int load_weight(model *m, bk_weight *w, int n, const char *const *names, const int64_t *d0, int64_t d1) {
    const st_tensor *parts[BK_MAX_PARTS];
    for (int i = 0; i < n; i++) {
        int rc = get_tensor(m, names[i], d0[i], d1, &parts[i]);
        if (rc) return rc;
    }
    int rc = m->be->ops->weight_init(m->be, w, parts, n);
    if (rc) return err_wrap(rc, "%s", m->st.paths[parts[0]->file_index]);
    return KS_OK;
}

static int load_one(model *m, bk_weight *w, const char *name, int64_t d0, int64_t d1) {
    return load_weight(m, w, 1, &name, &d0, d1);
}

int model_load_layer(model *m, model_layer *L, const char *prefix) {
    const model_config *c = &m->cfg;
    int64_t H = c->hidden_size, hd = c->head_dim, qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
    char n0[160], n1[160], n2[160];
    const char *names[3] = {n0, n1, n2};
    int rc;
#define NAME(buf, suffix) snprintf(buf, sizeof buf, "%s.%s", prefix, suffix)
    NAME(n0, "input_layernorm.weight");
    if ((rc = load_one(m, &L->attn_norm, n0, H, 0))) return rc;
    NAME(n0, "self_attn.q_proj.weight");
    NAME(n1, "self_attn.k_proj.weight");
    NAME(n2, "self_attn.v_proj.weight");
    int64_t qkv_rows[3] = {qd, kvd, kvd};
    if ((rc = load_weight(m, &L->wqkv, 3, names, qkv_rows, H))) return rc;
    if (c->attention_bias) {
        NAME(n0, "self_attn.q_proj.bias");
        NAME(n1, "self_attn.k_proj.bias");
        NAME(n2, "self_attn.v_proj.bias");
        if ((rc = load_weight(m, &L->bqkv, 3, names, qkv_rows, 0))) return rc;
    }
    if (c->qk_norm) {
        NAME(n0, "self_attn.q_norm.weight");
        if ((rc = load_one(m, &L->q_norm, n0, hd, 0))) return rc;
        NAME(n0, "self_attn.k_norm.weight");
        if ((rc = load_one(m, &L->k_norm, n0, hd, 0))) return rc;
    }
    NAME(n0, "self_attn.o_proj.weight");
    if ((rc = load_one(m, &L->wo, n0, H, qd))) return rc;
    NAME(n0, "post_attention_layernorm.weight");
    if ((rc = load_one(m, &L->ffn_norm, n0, H, 0))) return rc;
    NAME(n0, "mlp.gate_proj.weight");
    NAME(n1, "mlp.up_proj.weight");
    int64_t gu_rows[2] = {c->intermediate_size, c->intermediate_size};
    if ((rc = load_weight(m, &L->w_gate_up, 2, names, gu_rows, H))) return rc;
    NAME(n0, "mlp.down_proj.weight");
    if ((rc = load_one(m, &L->w_down, n0, H, c->intermediate_size))) return rc;
#undef NAME
    return KS_OK;
}

int model_load(model **out, const char *dir, backend *be) {
    if (!dir || !be) return err_set(KS_EINVAL, "model_load: no model directory or backend");
    model *m = calloc(1, sizeof *m);
    if (!m) return err_set(KS_ENOMEM, "model: out of memory");
    m->be = be;
    int rc = config_load(&m->cfg, dir);
    if (rc) goto fail;
    rc = st_open_dir(&m->st, dir);
    if (rc) goto fail;
    const model_config *c = &m->cfg;
    if ((rc = load_one(m, &m->embed, "model.embed_tokens.weight", c->vocab_size, c->hidden_size))) goto fail;
    if ((rc = load_one(m, &m->final_norm, "model.norm.weight", c->hidden_size, 0))) goto fail;
    if (st_find(&m->st, "lm_head.weight") && !c->tie_word_embeddings) {
        if ((rc = load_one(m, &m->lm_head, "lm_head.weight", c->vocab_size, c->hidden_size))) goto fail;
    } else if (c->tie_word_embeddings) {
        if ((rc = load_one(m, &m->lm_head, "model.embed_tokens.weight", c->vocab_size, c->hidden_size))) goto fail;
    } else {
        rc = err_set(KS_EFORMAT, "%s: missing tensor \"lm_head.weight\" (tie_word_embeddings is false)", dir);
        goto fail;
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) { rc = err_set(KS_ENOMEM, "model: out of memory"); goto fail; }
    for (int l = 0; l < c->n_layers; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "model.layers.%d", l);
        if ((rc = model_load_layer(m, &m->layers[l], prefix))) goto fail;
        /* the backend has its copies: the file's pages need not stay in RSS
         * (dropped as the layers load, so the peak is one layer of them) */
        st_drop_pages(&m->st);
    }
    if ((rc = model_mtp_load(m))) goto fail;
    st_drop_pages(&m->st);
    float *f = malloc((size_t)(c->head_dim / 2) * sizeof(float));
    m->inv_freq = be->ops->buf_alloc(be, (size_t)(c->head_dim / 2) * sizeof(float));
    if (!f || !m->inv_freq) { free(f); rc = err_set(KS_ENOMEM, "model: out of memory"); goto fail; }
    rope_inv_freq(c, f);
    be->ops->buf_upload(be, m->inv_freq, f, (size_t)(c->head_dim / 2) * sizeof(float));
    free(f);
    *out = m;
    return KS_OK;
fail:
    model_free(m);
    return rc;
}

static void free_graphs(model *m) {
    for (int i = 0; i < m->n_graphs; i++)
        if (m->graphs[i].exec) m->be->ops->graph_free(m->be, m->graphs[i].exec);
    m->n_graphs = 0;
}

/* host staging the backend copies from without waiting (pinned where it
 * has host_alloc), and its release */
static void *host_alloc(model *m, size_t bytes) {
    return m->be->ops->host_alloc ? m->be->ops->host_alloc(m->be, bytes) : malloc(bytes);
}
static void host_free(model *m, void *p) {
    if (!p) return;
    if (m->be->ops->host_alloc) m->be->ops->host_free(m->be, p);
    else free(p);
}

static void free_acts(model *m) {
    backend *be = m->be;
    free_graphs(m);
    void *bufs[] = {m->x,      m->xn,     m->qkv,    m->gu,   m->logits_dev, m->d_step,
                    m->d_tables, m->hid,  m->mtp_hid, m->mtp_in, m->feat, m->d_tiles,
                    m->d_ids,  m->d_mtp_ids};
    if (m->h_ids) be->ops->host_free(be, m->h_ids);
    m->h_ids = NULL;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->buf_free(be, bufs[i]);
    m->x = m->xn = m->qkv = m->gu = m->logits_dev = NULL;
    m->d_step = m->d_tokens = m->d_pos = m->d_seq = m->d_slots = m->d_rows = m->d_tables = NULL;
    m->d_hid_idx = m->d_pos2 = NULL;
    free(m->h_step);
    m->h_step = NULL;
    m->hid = m->mtp_hid = m->mtp_in = m->feat = NULL;
    m->d_tiles = m->d_ids = m->d_mtp_ids = NULL;
    m->mtp_chain = m->mtp_last = 0;
    free(m->h_tiles);
    m->h_tiles = NULL;
    if (m->d_pen) be->ops->buf_free(be, m->d_pen);
    host_free(m, m->h_pen);
    m->d_pen = m->h_pen = NULL;
    m->cap_pen = 0;
    if (m->d_lp_raw) be->ops->buf_free(be, m->d_lp_raw);
    if (m->d_lp) be->ops->buf_free(be, m->d_lp);
    m->d_lp_raw = NULL;
    m->d_lp = NULL;
    m->cap_lp = 0;
    m->tab_kv = NULL; /* d_tables gone: its mirror too */
    m->cap_tokens = 0;
    m->cap_tables = 0;
    m->cap_logits = m->cap_ids = 0;
}

bool model_samples_on_device(const model *m) { return m->be->ops->sample_rows != NULL; }

static void host_logits_free(model *m) {
    host_free(m, m->h_logits);
    m->h_logits = NULL;
    m->cap_h_logits = 0;
}

float *model_host_logits(model *m, int n_rows) {
    if (n_rows <= m->cap_h_logits) return m->h_logits;
    host_logits_free(m);
    m->h_logits = host_alloc(m, (size_t)n_rows * m->cfg.vocab_size * sizeof(float));
    m->cap_h_logits = m->h_logits ? n_rows : 0;
    return m->h_logits;
}

void model_free(model *m) {
    if (!m) return;
    if (m->be) {
        free_acts(m);
        host_logits_free(m);
        if (m->inv_freq) m->be->ops->buf_free(m->be, m->inv_freq);
        bk_weight *ws[] = {&m->final_norm, &m->embed, &m->lm_head};
        for (int i = 0; i < (m->borrowed_io ? 1 : 3); i++)
            if (ws[i]->n_parts) m->be->ops->weight_release(m->be, ws[i]);
        if (m->layers)
            for (int l = 0; l < m->cfg.n_layers; l++) {
                bk_weight *lw = (bk_weight *)&m->layers[l];
                for (size_t i = 0; i < sizeof(model_layer) / sizeof(bk_weight); i++)
                    if (lw[i].n_parts) m->be->ops->weight_release(m->be, &lw[i]);
            }
    }
    if (m->be) model_mtp_free(m);
    free(m->layers);
    free(m->h_tables);
    free(m->h_tab_len);
    st_close(&m->st);
    free(m);
}

int model_kv_init(const model *m, kv_cache *kv, int n_ctx_tokens) {
    int blocks = (n_ctx_tokens + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE;
    return kv_cache_init(kv, m->be, m->cfg.n_layers, m->cfg.n_kv_heads * m->cfg.head_dim, KV_BLOCK_SIZE,
                         blocks < 1 ? 1 : blocks);
}

int model_mlp_rows(const model *m) {
    size_t row = (size_t)m->cfg.intermediate_size * 2 * sizeof(float);
    int rows = MODEL_MLP_ROWS;
    while (rows > 1 && (size_t)rows * row > MODEL_MLP_BYTES) rows /= 2;
    return rows;
}

static int ensure_acts(model *m, int n, int n_logits, int n_ids, int table_entries) {
    backend *be = m->be;
    const model_config *c = &m->cfg;
    if (n > m->cap_tokens) {
        free_acts(m);
        int cap = n < 16 ? 16 : n;
        size_t H = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
        size_t qkv = ((size_t)c->n_heads + 2 * (size_t)c->n_kv_heads) * hd;
        size_t I = (size_t)c->intermediate_size;
        m->x = be->ops->buf_alloc(be, cap * H * 4);
        size_t ad = (size_t)c->n_heads * hd;
        m->xn = be->ops->buf_alloc(be, cap * (H > ad ? H : ad) * 4);
        m->qkv = be->ops->buf_alloc(be, cap * qkv * 4);
        size_t mlp = cap < model_mlp_rows(m) ? cap : model_mlp_rows(m); /* rows of the MLP's own buffer */
        m->gu = be->ops->buf_alloc(be, mlp * 2 * I * 4);
        m->d_step = be->ops->buf_alloc(be, (size_t)cap * MODEL_STEP_SEGS * 4);
        m->h_step = malloc((size_t)cap * MODEL_STEP_SEGS * 4);
        m->d_tiles = be->ops->buf_alloc(be, cap * 8);
        m->h_tiles = malloc(cap * 8);
        if (m->mtp) {
            m->hid = be->ops->buf_alloc(be, cap * H * 4);
            m->mtp_hid = be->ops->buf_alloc(be, cap * H * 4);
            m->mtp_in = be->ops->buf_alloc(be, cap * 2 * H * 4);
            if (!m->hid || !m->mtp_hid || !m->mtp_in) {
                free_acts(m);
                return err_set(KS_ENOMEM, "model: out of memory for MTP activations of %d tokens", n);
            }
        }
        if (m->n_feat && !(m->feat = be->ops->buf_alloc(be, cap * (size_t)m->feat_width * 4))) {
            free_acts(m);
            return err_set(KS_ENOMEM, "model: out of memory for drafter features of %d tokens", n);
        }
        m->cap_tokens = cap;
        if (!m->x || !m->xn || !m->qkv || !m->gu || !m->d_step || !m->h_step || !m->d_tiles ||
            !m->h_tiles) {
            free_acts(m);
            return err_set(KS_ENOMEM, "model: out of memory for activations of %d tokens", n);
        }
    }
    if (n_logits > m->cap_logits) { /* logit rows, not token rows: a prompt chunk needs one */
        free_graphs(m);
        if (m->logits_dev) be->ops->buf_free(be, m->logits_dev);
        int cap = n_logits < 16 ? 16 : n_logits;
        if (m->d_mtp_ids) be->ops->buf_free(be, m->d_mtp_ids);
        m->logits_dev = be->ops->buf_alloc(be, (size_t)cap * c->vocab_size * 4);
        m->d_mtp_ids = m->mtp ? be->ops->buf_alloc(be, (size_t)cap * MODEL_MTP_MAX_CHAIN * 4) : NULL;
        m->mtp_chain = m->mtp_last = 0;
        m->cap_logits = m->logits_dev && (m->d_mtp_ids || !m->mtp) ? cap : 0;
        if (!m->cap_logits) return err_set(KS_ENOMEM, "model: out of memory for %d rows of logits", n_logits);
    }
    if (n_ids > m->cap_ids) { /* the logits rows' argmax ids, and ids fetched beside them (model_dev_ids) */
        free_graphs(m);
        if (m->d_ids) be->ops->buf_free(be, m->d_ids);
        int cap = n_ids < 16 ? 16 : n_ids * 2;
        m->d_ids = be->ops->buf_alloc(be, (size_t)cap * 4);
        if (m->h_ids) be->ops->host_free(be, m->h_ids);
        m->h_ids = be->ops->host_alloc ? be->ops->host_alloc(be, (size_t)cap * 4) : NULL;
        m->cap_ids = m->d_ids && (m->h_ids || !be->ops->host_alloc) ? cap : 0;
        if (!m->cap_ids) return err_set(KS_ENOMEM, "model: out of memory for %d ids", n_ids);
    }
    if (table_entries > m->cap_tables) {
        free_graphs(m);
        if (m->d_tables) be->ops->buf_free(be, m->d_tables);
        int cap = table_entries < 64 ? 64 : table_entries * 2;
        m->d_tables = be->ops->buf_alloc(be, (size_t)cap * 4);
        m->tab_kv = NULL;
        m->cap_tables = m->d_tables ? cap : 0;
        if (!m->d_tables) return err_set(KS_ENOMEM, "model: out of memory for block tables");
    }
    return KS_OK;
}

void model_matmul_rows(model *m, float *out, const float *in, const bk_weight *norm, const bk_weight *w,
                       const bk_weight *bias, int np, int n, int mode) {
    backend *be = m->be;
    float eps = m->cfg.rms_norm_eps;
    if (np) be->ops->matmul_prompt(be, out, in, norm, eps, w, bias, np, mode);
    if (n > np)
        be->ops->matmul_fused(be, out + (size_t)np * w->rows, in + (size_t)np * w->cols, norm, eps, w, bias, n - np,
                              mode);
}

/* One decoder layer over the n rows of m->x (in place), with the KV cache
 * (k_cache, v_cache) of that layer; shared by the target, the MTP head and
 * the DFlash drafter. Decode rows take matmul_fused (the input norms and the
 * residual adds with the products); prompt rows [0, np) the bulk path with
 * the norm and the add apart (m->xn their scratch). */
void model_layer_forward(model *m, const model_layer *L, void *k_cache, void *v_cache, const bk_attn_batch *ab,
                         const int32_t *rope_pos, int n, const model_side *side) {
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    int qkv_dim = (nh + 2 * nkv) * hd, np = ab->n_prompt, nd = n - np;
    float eps = c->rms_norm_eps;
    const bk_weight *bqkv = c->attention_bias ? &L->bqkv : NULL;
    if (side && !np && op->matmul_fused_side) { /* the side product in the same launch */
        op->matmul_fused_side(be, m->qkv, m->x, &L->attn_norm, eps, &L->wqkv, bqkv, nd, side->out, side->w,
                              side->add);
    } else {
        model_matmul_rows(m, m->qkv, m->x, &L->attn_norm, &L->wqkv, bqkv, np, n, BK_MM_PLAIN);
        if (side) op->matmul_fused(be, side->out, m->x, NULL, 0, side->w, NULL, n, side->add ? BK_MM_ADD : BK_MM_PLAIN);
    }
    op->qk_norm_rope(be, m->qkv, qkv_dim, n, nh, nkv, hd, c->qk_norm ? &L->q_norm : NULL,
                     c->qk_norm ? &L->k_norm : NULL, eps, rope_pos, m->inv_freq, k_cache, v_cache, ab);
    /* the attention's rows in xn (the norms went into the matmuls) */
    op->attention(be, m->xn, m->qkv, qkv_dim, k_cache, v_cache, ab, nh, nkv, hd, 1.0f / sqrtf((float)hd));
    model_matmul_rows(m, m->x, m->xn, NULL, &L->wo, NULL, np, n, BK_MM_ADD);
    /* the MLP, model_mlp_rows rows at a time: m->gu holds a tile's prompt
     * rows' gate|up, which their down projection reads as silu(gate) * up,
     * or its decode rows' silu(gate) * up */
    int tile = model_mlp_rows(m);
    for (int r0 = 0; r0 < n; r0 += tile) {
        int rn = n - r0 < tile ? n - r0 : tile;
        int rp = np - r0 < 0 ? 0 : np - r0 < rn ? np - r0 : rn, rd = rn - rp; /* its prompt rows come first */
        float *x = m->x + (size_t)r0 * H;
        if (rp) {
            op->matmul_prompt(be, m->gu, x, &L->ffn_norm, eps, &L->w_gate_up, NULL, rp, BK_MM_PLAIN);
            op->matmul_prompt(be, x, m->gu, NULL, 0, &L->w_down, NULL, rp, BK_MM_ADD | BK_MM_SWIGLU_IN);
        }
        if (rd) {
            x += (size_t)rp * H;
            op->matmul_fused(be, m->gu, x, &L->ffn_norm, eps, &L->w_gate_up, NULL, rd, BK_MM_SWIGLU);
            op->matmul_fused(be, x, m->gu, NULL, 0, &L->w_down, NULL, rd, BK_MM_ADD);
        }
    }
}

/* logits (n_logits, vocab) in m->logits_dev = lm_head(RMSNorm(src rows
 * m->d_rows; g)): the target without an MTP head and the DFlash drafter */
void model_head_logits(model *m, const float *src, const bk_weight *g, int n_logits) {
    backend *be = m->be;
    if (!m->rows_dense) { /* (decode and verify steps want every row: read them in place) */
        be->ops->gather_rows(be, m->xn, src, m->d_rows, n_logits, m->cfg.hidden_size);
        src = m->xn;
    }
    be->ops->matmul_fused(be, m->logits_dev, src, g, m->cfg.rms_norm_eps, &m->lm_head, NULL, n_logits, BK_MM_PLAIN);
}

/* The op sequence of one forward (everything after the uploads). With an MTP
 * head the final norm runs on every row into m->hid (its input later). */
static void run_layers(model *m, kv_cache *kv, const bk_attn_batch *ab, int n, int n_logits, bool features) {
    backend *be = m->be;
    const backend_ops *op = be->ops;
    const model_config *c = &m->cfg;
    int H = c->hidden_size;
    op->embed(be, m->x, &m->embed, m->d_tokens, n);
    /* the features: the first product is written, the others added, in
     * feature order; a feature layer's own product goes with the next
     * layer's qkv (model_side: one launch, where the backend can), the
     * others (the last layer's, several of one layer) after the layer */
    bool first = true;
    int pend = -1; /* the feature whose product the next layer takes */
    for (int l = 0; l < c->n_layers; l++) {
        model_side sd = {m->feat, pend >= 0 ? &m->feat_proj[pend] : NULL, !first};
        model_layer_forward(m, &m->layers[l], kv->k[l], kv->v[l], ab, m->d_pos, n, pend >= 0 ? &sd : NULL);
        if (pend >= 0) first = false;
        pend = -1;
        int here = 0;
        for (int j = 0; features && j < m->n_feat; j++) here += m->feat_layer[j] == l;
        for (int j = 0; features && j < m->n_feat; j++)
            if (m->feat_layer[j] == l) {
                if (here == 1 && l + 1 < c->n_layers) {
                    pend = j;
                    continue;
                }
                op->matmul_fused(be, m->feat, m->x, NULL, 0, &m->feat_proj[j], NULL, n, first ? BK_MM_PLAIN : BK_MM_ADD);
                first = false;
            }
    }
    if (m->mtp) {
        op->rmsnorm(be, m->hid, H, m->x, H, &m->final_norm, n, 1, H, c->rms_norm_eps);
        if (n_logits > 0) model_head_logits(m, m->hid, NULL, n_logits);
    } else if (n_logits > 0) {
        model_head_logits(m, m->x, &m->final_norm, n_logits);
    }
}

int model_project_layers(model *m, const int *layers, const bk_weight *proj, int n, int width) {
    if (n < 0 || n > CONFIG_MAX_DFLASH_LAYERS) return err_set(KS_EINVAL, "model: %d feature layers", n);
    for (int j = 0; j < n; j++) {
        if (layers[j] < 0 || layers[j] >= m->cfg.n_layers)
            return err_set(KS_EINVAL, "model: feature layer %d outside the model's %d layers", layers[j],
                           m->cfg.n_layers);
        if (proj[j].rows != width || proj[j].cols != m->cfg.hidden_size)
            return err_set(KS_EINVAL, "model: feature projection %d is %lld x %lld, not %d x %d", j,
                           (long long)proj[j].rows, (long long)proj[j].cols, width, m->cfg.hidden_size);
    }
    free_acts(m); /* the next forward allocates the feature buffers (and records new graphs) */
    m->n_feat = n;
    m->feat_proj = n ? proj : NULL;
    m->feat_width = n ? width : 0;
    if (n) memcpy(m->feat_layer, layers, (size_t)n * sizeof *layers);
    return KS_OK;
}

/* An on-by-default switch from the environment (NAME=0 turns it off), read
 * once: these are asked on every forward. */
static bool env_on(const char *name, int *cache) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = !e || strcmp(e, "0") != 0;
    }
    return *cache;
}

static int graphs_cache = -1, prompt_cache = -1;
static bool graphs_enabled(void) { return env_on("KESTREL_CUDA_GRAPHS", &graphs_cache); }

bool model_graphs_on(const model *m, int n) {
    return m->be->ops->graph_begin && n <= MODEL_GRAPH_MAX_TOKENS && graphs_enabled();
}

void model_graphs_drop(model *m) { free_graphs(m); }

/* The slot of key k: its own, else a free one, else the one used longest
 * ago (a server meets new shapes for as long as it runs: batch sizes and
 * draft lengths; the table must not fill with old ones for good) */
static int find_graph(model *m, const model_graph_key *k) {
    m->graph_clock++;
    for (int i = 0; i < m->n_graphs; i++)
        if (!memcmp(&m->graphs[i].key, k, sizeof *k)) {
            m->graphs[i].used = m->graph_clock;
            return i;
        }
    int i = m->n_graphs;
    if (i == MODEL_MAX_GRAPHS) {
        i = 0;
        for (int j = 1; j < MODEL_MAX_GRAPHS; j++)
            if (m->graphs[j].used < m->graphs[i].used) i = j;
        if (m->graphs[i].exec) m->be->ops->graph_free(m->be, m->graphs[i].exec);
    } else {
        m->n_graphs++;
    }
    m->graphs[i].key = *k;
    m->graphs[i].seen = 0;
    m->graphs[i].exec = NULL;
    m->graphs[i].used = m->graph_clock;
    return i;
}

static unsigned long recordings;

unsigned long model_graph_recordings(void) { return recordings; }

int model_graph_run(model *m, const model_graph_key *key, bool graph, void (*ops)(model *m, const void *ctx),
                    const void *ctx) {
    backend *be = m->be;
    const backend_ops *op = be->ops;
    model_graph_key k;
    memset(&k, 0, sizeof k); /* padding compared too */
    k.tag = key->tag;
    k.n = key->n;
    k.n_logits = key->n_logits;
    k.n_seqs = key->n_seqs;
    k.n_prompt = key->n_prompt;
    k.kv = key->kv;
    k.kv_blocks = key->kv_blocks;
    k.dep = key->dep;
    k.dep2 = key->dep2;
    k.chain_in = key->chain_in;
    k.chain_out = key->chain_out;
    k.aux = key->aux;
    k.dense_rows = m->rows_dense; /* the head's ops follow it (model_head_logits) */
    int slot = graph && op->graph_begin && graphs_enabled() ? find_graph(m, &k) : -1;
    int rc;
    if (slot >= 0 && m->graphs[slot].exec) {
        if ((rc = op->graph_launch(be, m->graphs[slot].exec)) != 1) return rc;
        op->graph_free(be, m->graphs[slot].exec); /* stale: record it again (buffers are sized) */
        m->graphs[slot].exec = NULL;
    }
    if (slot >= 0 && m->graphs[slot].seen++ > 0 && op->graph_begin(be) == KS_OK) {
        /* second sight of this key: buffers are sized, record it */
        recordings++;
        ops(m, ctx);
        m->graphs[slot].exec = op->graph_end(be);
        if (m->graphs[slot].exec && (rc = op->graph_launch(be, m->graphs[slot].exec)) != 1) return rc;
    }
    ops(m, ctx);
    return KS_OK;
}

static bool prompt_enabled(void) { return env_on("KESTREL_PROMPT_PATH", &prompt_cache); }

/* Cuts the prompt rows [0, b->n_prompt) into tiles of at most
 * BK_PROMPT_TILE consecutive positions of one sequence and uploads them;
 * the tile count is padded to a bound that depends only on n_prompt and
 * n_seqs (fixed launch shapes for graph replays). Backends without a prompt
 * path (or KESTREL_PROMPT_PATH=0) get n_prompt = 0. */
static int prompt_tiles(model *m, const model_batch *b, bk_attn_batch *a) {
    int np = b->n_prompt;
    if (np <= 0 || !m->be->ops->matmul_prompt || !prompt_enabled()) return KS_OK;
    if (np > b->n_tokens) return err_set(KS_EINVAL, "forward: %d prompt rows in a batch of %d", np, b->n_tokens);
    int max_tiles = np / BK_PROMPT_TILE + b->n_seqs + 1, n_tiles = 0;
    if (max_tiles > np) max_tiles = np;
    int32_t *t = m->h_tiles;
    for (int r = 0; r < np;) {
        int e = r + 1;
        while (e < np && e - r < BK_PROMPT_TILE && b->seq[e] == b->seq[r] && b->pos[e] == b->pos[e - 1] + 1) e++;
        if (n_tiles == max_tiles) return err_set(KS_EINVAL, "forward: prompt rows are not grouped by sequence");
        t[2 * n_tiles] = r;
        t[2 * n_tiles + 1] = e - r;
        n_tiles++;
        r = e;
    }
    for (int i = n_tiles; i < max_tiles; i++) t[2 * i] = t[2 * i + 1] = 0;
    m->be->ops->buf_upload(m->be, m->d_tiles, t, (size_t)max_tiles * 8);
    a->n_prompt = np;
    a->tiles = m->d_tiles;
    a->max_tiles = max_tiles;
    return KS_OK;
}

/* Validates a batch, sizes the buffers and uploads tokens, positions,
 * slots, block tables and logit rows; fills *ab. graph: fixed launch shapes
 * (the block table spans the whole pool). */
/* The block tables of a batch's sequences into d_tables (rows of width
 * max_blocks; entries past a sequence's blocks are never read). Only the
 * rows that differ from what the device holds are sent, each as its
 * sequence's blocks: a graph's rows are as wide as the whole pool, and a
 * decoding sequence gains a block only every KV_BLOCK_SIZE tokens. */
static int upload_tables(model *m, const kv_cache *kv, const model_batch *b, int max_blocks) {
    backend *be = m->be;
    int32_t *tables = m->h_tables;
    if (m->tab_kv != (const void *)kv || m->tab_width != max_blocks) {
        m->tab_kv = kv; /* another layout: nothing on the device counts */
        m->tab_width = max_blocks;
        for (int s = 0; s < m->h_cap_tab_len; s++) m->h_tab_len[s] = 0;
    }
    if (b->n_seqs > m->h_cap_tab_len) {
        int cap = b->n_seqs * 2, *nl = realloc(m->h_tab_len, (size_t)cap * sizeof *nl);
        if (!nl) return err_set(KS_ENOMEM, "forward: out of memory");
        for (int s = m->h_cap_tab_len; s < cap; s++) nl[s] = 0;
        m->h_tab_len = nl;
        m->h_cap_tab_len = cap;
    }
    for (int s = 0; s < b->n_seqs; s++) {
        int nb = b->seqs[s]->n_blocks; /* a sequence in the batch may hold no blocks (no tokens here) */
        int32_t *row = tables + (size_t)s * max_blocks;
        if (!nb || (nb <= m->h_tab_len[s] && !memcmp(row, b->seqs[s]->blocks, (size_t)nb * 4))) continue;
        memcpy(row, b->seqs[s]->blocks, (size_t)nb * 4);
        int rc = be->ops->buf_upload(be, m->d_tables + (size_t)s * max_blocks, row, (size_t)nb * 4);
        if (rc) {
            m->tab_kv = NULL;
            return rc;
        }
        m->h_tab_len[s] = nb;
    }
    return KS_OK;
}

/* the host staging of segment seg of the batch prepared last */
int32_t *model_step_seg(model *m, int seg) { return m->h_step + (size_t)seg * m->step_n; }

/* segments 0..k-1 of the batch prepared last, in one copy */
int model_upload_step(model *m, int k) {
    return m->be->ops->buf_upload(m->be, m->d_step, m->h_step, (size_t)k * m->step_n * 4);
}

static int prepare_batch(model *m, kv_cache *kv, const model_batch *b, int n_fetch, bool graph, bk_attn_batch *ab) {
    const model_config *c = &m->cfg;
    int n = b->n_tokens;
    if (n <= 0) return err_set(KS_EINVAL, "forward: empty batch");
    /* host-side indexing: validate and build slots + dense block tables */
    int max_blocks = 1, max_pos = 0;
    for (int s = 0; s < b->n_seqs; s++)
        if (b->seqs[s]->n_blocks > max_blocks) max_blocks = b->seqs[s]->n_blocks;
    if (graph) max_blocks = kv->n_blocks;
    int rc = ensure_acts(m, n, b->n_logits, b->n_logits + n_fetch, b->n_seqs * max_blocks);
    if (rc) return rc;
    /* host staging of the tables, kept between calls (no allocation per
     * decode step); table entries past a sequence's blocks are never read */
    size_t need_tables = (size_t)b->n_seqs * max_blocks;
    if (need_tables > m->h_cap_tables) {
        int32_t *nt = realloc(m->h_tables, need_tables * 2 * 4);
        if (!nt) return err_set(KS_ENOMEM, "forward: out of memory");
        m->h_tables = nt;
        m->h_cap_tables = need_tables * 2;
    }
    if (b->n_logits > n) return err_set(KS_EINVAL, "forward: %d logit rows of %d tokens", b->n_logits, n);
    m->step_n = n;
    int32_t **views[MODEL_STEP_SEGS] = {&m->d_tokens, &m->d_pos,  &m->d_seq,     &m->d_slots,
                                         &m->d_rows,   &m->d_hid_idx, &m->d_pos2};
    for (int i = 0; i < MODEL_STEP_SEGS; i++) *views[i] = m->d_step + (size_t)i * n;
    int32_t *slots = model_step_seg(m, MODEL_SEG_SLOTS);
    for (int i = 0; i < n; i++) {
        int s = b->seq[i], p = b->pos[i];
        int t = b->tokens ? b->tokens[i] : 0; /* (no host tokens: a chained MTP pass's are on the device) */
        if (s < 0 || s >= b->n_seqs || p < 0 || p / kv->block_size >= b->seqs[s]->n_blocks || t < 0 ||
            t >= c->vocab_size) {
            return err_set(KS_EINVAL, "forward: token %d (id %d, seq %d, pos %d) out of range", i, t, s, p);
        }
        slots[i] = b->seqs[s]->blocks[p / kv->block_size] * kv->block_size + p % kv->block_size;
        if (p > max_pos) max_pos = p;
    }
    m->rows_dense = b->n_logits == n;
    for (int r = 0; r < b->n_logits; r++) {
        if (b->logit_rows[r] < 0 || b->logit_rows[r] >= n) {
            return err_set(KS_EINVAL, "forward: logit row %d out of range", b->logit_rows[r]);
        }
        m->rows_dense &= b->logit_rows[r] == r;
    }
    if ((rc = upload_tables(m, kv, b, max_blocks))) return rc;
    if (b->tokens) memcpy(model_step_seg(m, MODEL_SEG_TOKENS), b->tokens, (size_t)n * 4);
    memcpy(model_step_seg(m, MODEL_SEG_POS), b->pos, (size_t)n * 4);
    memcpy(model_step_seg(m, MODEL_SEG_SEQ), b->seq, (size_t)n * 4);
    memcpy(model_step_seg(m, MODEL_SEG_ROWS), b->logit_rows, (size_t)b->n_logits * 4);

    bk_attn_batch a = {n, m->d_pos, m->d_seq, m->d_slots, m->d_tables, max_blocks, kv->block_size, max_pos,
                       kv->n_blocks * kv->block_size, 0, NULL, 0};
    if ((rc = prompt_tiles(m, b, &a))) return rc;
    *ab = a;
    return KS_OK;
}

int model_prepare_batch(model *m, kv_cache *kv, const model_batch *b, bool graph, bk_attn_batch *ab) {
    return prepare_batch(m, kv, b, 0, graph, ab);
}

typedef struct {
    kv_cache *kv;
    const bk_attn_batch *ab;
    int n, n_logits;
    bool features; /* capture the DFlash features (model_capture_layers) */
} forward_ctx;

static void forward_ops(model *m, const void *ctx) {
    const forward_ctx *f = ctx;
    run_layers(m, f->kv, f->ab, f->n, f->n_logits, f->features);
}

int model_sync(model *m) {
    float v;
    return m->x ? m->be->ops->buf_download(m->be, &v, m->x, sizeof v) : KS_OK;
}

/* What a forward does to its logits rows beyond the head (penalize_rows,
 * mask_rows, and copies of the rows logprob_rows reads, made first): the
 * lists go up in one copy; *lp_rows: where the logprob rows' list is on the
 * device. */
static int edit_rows(model *m, const model_batch *b, const int32_t **lp_rows) {
    backend *be = m->be;
    size_t V = (size_t)m->cfg.vocab_size, words = (V + 31) / 32;
    size_t at_ent = (size_t)b->n_pen * sizeof *b->pen, at_rows = at_ent + (size_t)b->n_pen_ent * sizeof *b->pen_ent,
           at_bits = at_rows + (size_t)b->n_mask * 4, at_lp = at_bits + (size_t)b->n_mask * words * 4,
           bytes = at_lp + (size_t)b->n_lp * 4;
    if (bytes > m->cap_pen) {
        if (m->d_pen) be->ops->buf_free(be, m->d_pen);
        host_free(m, m->h_pen);
        m->cap_pen = bytes * 2;
        m->d_pen = be->ops->buf_alloc(be, m->cap_pen);
        m->h_pen = host_alloc(m, m->cap_pen); /* pinned: the copy does not wait for the forward */
        if (!m->d_pen || !m->h_pen) {
            if (m->d_pen) be->ops->buf_free(be, m->d_pen);
            host_free(m, m->h_pen);
            m->d_pen = m->h_pen = NULL;
            m->cap_pen = 0;
            return err_set(KS_ENOMEM, "model: out of memory for %d penalised tokens and %d masks", b->n_pen_ent,
                           b->n_mask);
        }
    }
    if (b->n_lp > m->cap_lp) {
        if (m->d_lp_raw) be->ops->buf_free(be, m->d_lp_raw);
        if (m->d_lp) be->ops->buf_free(be, m->d_lp);
        m->cap_lp = b->n_lp * 2;
        m->d_lp_raw = be->ops->buf_alloc(be, (size_t)m->cap_lp * V * sizeof *m->d_lp_raw);
        m->d_lp = be->ops->buf_alloc(be, (size_t)m->cap_lp * sizeof *m->d_lp);
        if (!m->d_lp_raw || !m->d_lp) {
            m->cap_lp = 0;
            return err_set(KS_ENOMEM, "model: out of memory for %d rows of log-probabilities", b->n_lp);
        }
    }
    char *h = m->h_pen, *d = m->d_pen;
    const void *src[5] = {b->pen, b->pen_ent, b->mask_rows, b->mask_bits, b->lp_rows};
    size_t at[6] = {0, at_ent, at_rows, at_bits, at_lp, bytes};
    for (int i = 0; i < 5; i++)
        if (at[i + 1] > at[i]) memcpy(h + at[i], src[i], at[i + 1] - at[i]); /* (lists left out are NULL) */
    int rc = be->ops->buf_upload(be, d, h, bytes);
    for (int k = 0; !rc && k < b->n_lp; k++) /* (a copy on the device) */
        rc = be->ops->buf_upload(be, m->d_lp_raw + k * V, m->logits_dev + b->lp_rows[k] * V, V * sizeof(float));
    if (rc) return rc;
    *lp_rows = (const int32_t *)(d + at_lp);
    if (b->n_pen)
        be->ops->penalize_rows(be, m->logits_dev, m->cfg.vocab_size, b->n_logits, m->d_tokens, m->d_rows,
                               (const bk_pen_seq *)d, b->n_pen, (const bk_pen_ent *)(d + at_ent));
    if (b->n_mask)
        be->ops->mask_rows(be, m->logits_dev, m->cfg.vocab_size, (const int32_t *)(d + at_rows),
                           (const uint32_t *)(d + at_bits), b->n_mask);
    return KS_OK;
}

/* the penalised sequences of b well formed: rows within the logits rows,
 * apart, entries within the list; masked rows within the logits rows */
static int check_edits(const model_batch *b) {
    if (b->n_pen < 0 || b->n_pen_ent < 0 || (b->n_pen && !b->pen) || (b->n_pen_ent && !b->pen_ent) ||
        b->n_mask < 0 || (b->n_mask && (!b->mask_rows || !b->mask_bits)))
        return err_set(KS_EINVAL, "forward: %d penalised sequences, %d entries, %d masks", b->n_pen, b->n_pen_ent,
                       b->n_mask);
    for (int i = 0; i < b->n_mask; i++)
        if (b->mask_rows[i] < 0 || b->mask_rows[i] >= b->n_logits)
            return err_set(KS_EINVAL, "forward: masked row %d of %d logits rows", b->mask_rows[i], b->n_logits);
    if (b->n_lp < 0 || (b->n_lp && (!b->lp_rows || !b->lp || !b->argmax)) || b->lp_top < 0 || b->lp_top > BK_MAX_TOP)
        return err_set(KS_EINVAL, "forward: %d log-probability rows (top %d)", b->n_lp, b->lp_top);
    for (int i = 0; i < b->n_lp; i++)
        if (b->lp_rows[i] < 0 || b->lp_rows[i] >= b->n_logits)
            return err_set(KS_EINVAL, "forward: log-probability row %d of %d logits rows", b->lp_rows[i], b->n_logits);
    for (int i = 0, end = 0; i < b->n_pen; i++) {
        const bk_pen_seq *p = &b->pen[i];
        if (p->row < end || p->n_rows < 1 || p->n_rows > BK_PEN_MAX_FED + 1 || p->row + p->n_rows > b->n_logits ||
            p->ent < 0 || p->n_ent < 0 || p->ent + p->n_ent > b->n_pen_ent)
            return err_set(KS_EINVAL, "forward: penalised sequence %d (rows %d + %d of %d, entries %d + %d of %d)", i,
                           p->row, p->n_rows, b->n_logits, p->ent, p->n_ent, b->n_pen_ent);
        end = p->row + p->n_rows;
    }
    return KS_OK;
}

int model_logits_rows(model *m, int row, int n, float *dst) {
    if (row < 0 || n < 0 || row + n > m->fwd_logits || !m->logits_dev)
        return err_set(KS_EINVAL, "logits rows %d + %d of the last forward's %d", row, n, m->fwd_logits);
    size_t V = (size_t)m->cfg.vocab_size;
    return n ? m->be->ops->buf_download(m->be, dst, m->logits_dev + row * V, n * V * sizeof *dst) : KS_OK;
}

int model_lp_raw_logit(model *m, int k, int id, float *out) {
    if (k < 0 || k >= m->fwd_lp || id < 0 || id >= m->cfg.vocab_size)
        return err_set(KS_EINVAL, "logit %d of log-probability row %d of the last forward's %d", id, k, m->fwd_lp);
    return m->be->ops->buf_download(m->be, out, m->d_lp_raw + (size_t)k * m->cfg.vocab_size + id, sizeof *out);
}

int model_forward(model *m, kv_cache *kv, const model_batch *b, float *logits) {
    return model_forward_dev(m, kv, b, logits, NULL);
}

int model_forward_dev(model *m, kv_cache *kv, const model_batch *b, float *logits, const model_dev_ids *dev) {
    const model_config *c = &m->cfg;
    int n = b->n_tokens;
    bk_attn_batch ab;
    /* steps with prompt rows are not replayed: the prompt attention's launch
     * shape follows the step's deepest position (they are one per prompt
     * chunk; a decode step is the one that repeats) */
    bool graph = model_graphs_on(m, n) && b->n_prompt == 0;
    model_dev_ids none = {0};
    if (!dev) dev = &none;
    if (dev->n_fetch < 0 || ((dev->n_fetch || dev->n_runs) && !dev->ids) || (dev->n_fetch && !b->argmax))
        return err_set(KS_EINVAL, "forward: %d device ids to fetch without a source or a host buffer", dev->n_fetch);
    if (b->n_sample && (!b->argmax || !m->be->ops->sample_rows || b->n_sample > b->n_logits))
        return err_set(KS_EINVAL, "forward: %d rows to sample on a backend without sampling or without ids",
                       b->n_sample);
    for (int i = 0; i < b->n_sample; i++)
        if (b->sample[i].row < 0 || b->sample[i].row >= b->n_logits || !(b->sample[i].temperature > 0.0f))
            return err_set(KS_EINVAL, "forward: sampled row %d (of %d logits rows) at temperature %g", b->sample[i].row,
                           b->n_logits, b->sample[i].temperature);
    int rc = check_edits(b);
    if (rc || (rc = prepare_batch(m, kv, b, dev->n_fetch, graph, &ab))) return rc;
    if ((rc = model_upload_step(m, MODEL_SEG_ROWS + 1))) return rc;
    for (int i = 0; i < dev->n_runs; i++) { /* token rows whose ids are on the device (after the upload) */
        const model_dev_run *r = &dev->runs[i];
        if (r->row < 0 || r->n < 0 || r->row + r->n > n || r->src < 0)
            return err_set(KS_EINVAL, "forward: device token run %d (rows %d + %d of %d) out of range", i, r->row,
                           r->n, n);
        if ((rc = m->be->ops->buf_upload(m->be, m->d_tokens + r->row, dev->ids + r->src, (size_t)r->n * 4)))
            return rc;
    }
    bool features = m->n_feat && !b->no_features;
    forward_ctx f = {kv, &ab, n, b->n_logits, features};
    model_graph_key k = {.tag = features || !m->n_feat ? MODEL_GRAPH_FORWARD : MODEL_GRAPH_FORWARD_NO_FEATURES,
                         .n = n, .n_logits = b->n_logits, .n_seqs = b->n_seqs, .kv = kv->id,
                         .kv_blocks = kv->n_blocks, .n_prompt = ab.n_prompt};
    m->fwd_logits = m->fwd_lp = 0;
    if ((rc = model_graph_run(m, &k, graph, forward_ops, &f))) return rc;
    m->fwd_logits = b->n_logits;
    model_batch eb = *b; /* its row edits, filled now when dev->edits does (the device runs on meanwhile) */
    if (dev->edits && ((rc = dev->edits(dev->edits_arg, &eb)) || (rc = check_edits(&eb)))) return rc;
    b = &eb;
    /* the argmax ids and the fetched ones leave in one copy (one wait);
     * what dev->behind launches goes between the copy and the wait */
    const backend_ops *op = m->be->ops;
    bool host_rows = b->n_logits > 0 && logits;
    const int32_t *lp_rows = NULL;
    if (b->n_pen || b->n_mask || b->n_lp) { /* the host's rows leave as the model computed them (the host penalises its own) */
        if (host_rows &&
            (rc = op->buf_download(m->be, logits, m->logits_dev, (size_t)b->n_logits * c->vocab_size * 4)))
            return rc;
        host_rows = false;
        if ((rc = edit_rows(m, b, &lp_rows))) return rc;
    }
    int n_am = b->argmax ? b->n_logits : 0, lo = n_am ? 0 : b->n_logits, n_out = n_am + dev->n_fetch;
    if (n_am) op->argmax(m->be, m->d_ids, m->logits_dev, n_am, c->vocab_size);
    if (b->n_sample) op->sample_rows(m->be, m->d_ids, m->logits_dev, c->vocab_size, b->sample, b->n_sample);
    if (b->n_lp) op->logprob_rows(m->be, m->d_lp_raw, c->vocab_size, m->d_ids, lp_rows, b->n_lp, b->lp_top, m->d_lp);
    if (dev->n_fetch && (rc = op->buf_upload(m->be, m->d_ids + b->n_logits, dev->ids, (size_t)dev->n_fetch * 4)))
        return rc;
    if (n_out && m->h_ids) {
        if ((rc = op->buf_download_start(m->be, m->h_ids, m->d_ids + lo, (size_t)n_out * 4))) return rc;
        if (dev->behind) dev->behind(dev->behind_arg);
        if ((rc = op->download_wait(m->be))) return rc;
        memcpy(b->argmax + lo, m->h_ids, (size_t)n_out * 4);
    } else {
        if (dev->behind) dev->behind(dev->behind_arg);
        if (n_out && (rc = op->buf_download(m->be, b->argmax + lo, m->d_ids + lo, (size_t)n_out * 4))) return rc;
    }
    if (b->n_lp && (rc = op->buf_download(m->be, b->lp, m->d_lp, (size_t)b->n_lp * sizeof *b->lp))) return rc;
    m->fwd_lp = b->n_lp;
    if (host_rows)
        return m->be->ops->buf_download(m->be, logits, m->logits_dev, (size_t)b->n_logits * c->vocab_size * 4);
    return KS_OK;
}
