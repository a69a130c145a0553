/* config.c — config.json and generation_config.json of a Hugging Face model
 * directory (see config.h). Everything is range-checked here so later code
 * can multiply dims in int64 without overflow: dims <= 2^20, vocab <= 2^22,
 * layers < 1024, token ids inside the vocabulary. */
#include "io/config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "io/json_util.h"

#define CFG_MAX_DIM (1LL << 20)
#define CFG_MAX_VOCAB (1LL << 22)
#define CFG_MAX_LAYERS 1023
#define CFG_MAX_POS (1LL << 28)
#define CFG_SUPPORTED "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM"

static const struct {
    const char *arch, *model_type;
    model_arch id;
    int default_max_pos; /* transformers' default max_position_embeddings */
} cfg_archs[] = {
    {"Qwen3ForCausalLM", "qwen3", ARCH_QWEN3, 32768},
    {"Qwen2ForCausalLM", "qwen2", ARCH_QWEN2, 32768},
    {"LlamaForCausalLM", "llama", ARCH_LLAMA, 2048},
};

static int get_i(ju_ctx c, const json_t *o, const char *key, bool req, long long def,
                 long long lo, long long hi, int *out) {
    long long v;
    int rc = ju_get_int(c, o, key, req, def, lo, hi, &v);
    if (rc < 0) return rc;
    *out = (int)v;
    return KS_OK;
}

static int get_f(ju_ctx c, const json_t *o, const char *key, bool req, double def, double lo,
                 double hi, float *out) {
    double v;
    int rc = ju_get_num(c, o, key, req, def, lo, hi, &v);
    if (rc < 0) return rc;
    *out = (float)v;
    return KS_OK;
}

static int parse_arch(const char *path, const json_t *root, model_config *c, int *default_max_pos) {
    ju_ctx x = {path, NULL};
    const char *name = NULL;
    bool from_type = false;
    json_t *archs = json_object_get(root, "architectures");
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs) || json_array_size(archs) == 0 ||
            !json_is_string(json_array_get(archs, 0)))
            return err_set(KS_EFORMAT, "%s: field \"architectures\": expected a non-empty array of strings",
                           path);
        name = json_string_value(json_array_get(archs, 0));
    }
    if (name && strcmp(name, "DFlashDraftModel") == 0) { /* a block drafter: its layers follow model_type */
        c->dflash = true;
        name = NULL;
    }
    if (!name) {
        int rc = ju_get_str(x, root, "model_type", false, &name);
        if (rc < 0) return rc;
        if (!name)
            return err_set(KS_EFORMAT, "%s: neither \"architectures\" nor \"model_type\" is present", path);
        from_type = true;
    }
    for (size_t i = 0; i < sizeof cfg_archs / sizeof cfg_archs[0]; i++) {
        if (strcmp(name, from_type ? cfg_archs[i].model_type : cfg_archs[i].arch) == 0) {
            c->arch = cfg_archs[i].id;
            snprintf(c->arch_name, sizeof c->arch_name, "%s", cfg_archs[i].arch);
            *default_max_pos = cfg_archs[i].default_max_pos;
            return KS_OK;
        }
    }
    return err_set(KS_EUNSUPPORTED, "%s: %s \"%.200s\" not supported (supported: %s)", path,
                   from_type ? "model_type" : "architecture", name,
                   from_type ? "qwen3, qwen2, llama" : CFG_SUPPORTED);
}

/* rope_scaling (transformers < 5) or rope_parameters (transformers 5). */
static int parse_rope_scaling(const char *path, const json_t *root, model_config *c) {
    const char *oname = "rope_scaling";
    json_t *rs = json_object_get(root, oname);
    if (!rs || json_is_null(rs)) {
        oname = "rope_parameters";
        rs = json_object_get(root, oname);
    }
    c->rope_scaling = ROPE_SCALING_NONE;
    if (!rs || json_is_null(rs)) return KS_OK;
    if (!json_is_object(rs))
        return err_set(KS_EFORMAT, "%s: field \"%s\": expected an object, got %s", path, oname,
                       ju_type_name(rs));
    ju_ctx x = {path, oname};
    const char *type = NULL;
    const char *tkey = "rope_type";
    int rc = ju_get_str(x, rs, tkey, false, &type);
    if (rc < 0) return rc;
    if (!type) {
        tkey = "type";
        rc = ju_get_str(x, rs, tkey, false, &type);
        if (rc < 0) return rc;
    }
    if (!type || strcmp(type, "default") == 0) return KS_OK;
    if (strcmp(type, "llama3") != 0)
        return err_set(KS_EUNSUPPORTED,
                       "%s: field \"%s.%s\": rope scaling \"%.100s\" not supported (supported: default, llama3)",
                       path, oname, tkey, type);
    c->rope_scaling = ROPE_SCALING_LLAMA3;
    if ((rc = get_f(x, rs, "factor", true, 0, 1e-6, 1e6, &c->rope_factor)) < 0 ||
        (rc = get_f(x, rs, "low_freq_factor", true, 0, 1e-6, 1e6, &c->rope_low_freq_factor)) < 0 ||
        (rc = get_f(x, rs, "high_freq_factor", true, 0, 1e-6, 1e6, &c->rope_high_freq_factor)) < 0 ||
        (rc = get_i(x, rs, "original_max_position_embeddings", true, 0, 1, CFG_MAX_POS,
                    &c->rope_original_max_pos)) < 0)
        return rc;
    /* The llama3 smoothing divides by (high - low). */
    if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
        return err_set(KS_EFORMAT, "%s: field \"%s.high_freq_factor\": %g must exceed low_freq_factor %g",
                       path, oname, c->rope_high_freq_factor, c->rope_low_freq_factor);
    return KS_OK;
}

/* dflash_config of a DFlash drafter; the optional scales may also sit at the
 * top level. Sliding-window layers are refused (not implemented). */
static int parse_dflash(const char *path, const json_t *root, model_config *c) {
    json_t *d = json_object_get(root, "dflash_config");
    if (!d || !json_is_object(d))
        return err_set(KS_EFORMAT, "%s: field \"dflash_config\": expected an object (DFlashDraftModel)", path);
    ju_ctx x = {path, "dflash_config"}, xt = {path, NULL};
    int rc;
    if ((rc = get_i(x, d, "block_size", true, 0, 2, 64, &c->dflash_block_size)) < 0 ||
        (rc = get_i(x, d, "mask_token_id", true, 0, 0, c->vocab_size - 1, &c->dflash_mask_token_id)) < 0 ||
        (rc = ju_get_int_list(x, d, "target_layer_ids", 0, CFG_MAX_LAYERS, c->dflash_target_layers,
                              CONFIG_MAX_DFLASH_LAYERS, &c->dflash_n_target_layers)) < 0)
        return rc;
    if (c->dflash_n_target_layers < 1)
        return err_set(KS_EFORMAT, "%s: field \"dflash_config.target_layer_ids\": expected at least one layer", path);
    static const char *scales[3] = {"input_embedding_scale", "output_multiplier", "final_logit_softcapping"};
    float *outs[3] = {&c->dflash_embed_scale, &c->dflash_out_mult, &c->dflash_softcap};
    for (int i = 0; i < 3; i++) {
        const json_t *o = json_object_get(d, scales[i]) ? d : root;
        if ((rc = get_f(o == d ? x : xt, o, scales[i], false, i == 2 ? 0.0 : 1.0, i == 2 ? 0.0 : 1e-6, 1e6,
                        outs[i])) < 0)
            return rc;
    }
    json_t *lt = json_object_get(root, "layer_types");
    for (size_t i = 0; lt && json_is_array(lt) && i < json_array_size(lt); i++) {
        const char *t = json_string_value(json_array_get(lt, i));
        if (!t || strcmp(t, "full_attention") != 0)
            return err_set(KS_EUNSUPPORTED, "%s: field \"layer_types[%zu]\": \"%.60s\" not supported in a DFlash "
                           "drafter (only full_attention layers)", path, i, t ? t : "(not a string)");
    }
    return KS_OK;
}

static int parse_config(const char *path, const json_t *root, model_config *c) {
    ju_ctx x = {path, NULL};
    int rc, default_max_pos = 2048;
    if (!json_is_object(root))
        return err_set(KS_EFORMAT, "%s: expected a JSON object, got %s", path, ju_type_name(root));
    if ((rc = parse_arch(path, root, c, &default_max_pos)) < 0) return rc;
    c->qk_norm = c->arch == ARCH_QWEN3;

    if ((rc = get_i(x, root, "vocab_size", true, 0, 1, CFG_MAX_VOCAB, &c->vocab_size)) < 0 ||
        (rc = get_i(x, root, "hidden_size", true, 0, 1, CFG_MAX_DIM, &c->hidden_size)) < 0 ||
        (rc = get_i(x, root, "intermediate_size", true, 0, 1, CFG_MAX_DIM, &c->intermediate_size)) < 0 ||
        (rc = get_i(x, root, "num_hidden_layers", true, 0, 1, CFG_MAX_LAYERS, &c->n_layers)) < 0 ||
        (rc = get_i(x, root, "num_attention_heads", true, 0, 1, CFG_MAX_DIM, &c->n_heads)) < 0 ||
        (rc = get_i(x, root, "num_key_value_heads", false, c->n_heads, 1, CFG_MAX_DIM,
                    &c->n_kv_heads)) < 0)
        return rc;
    if (c->n_heads % c->n_kv_heads != 0)
        return err_set(KS_EFORMAT,
                       "%s: field \"num_key_value_heads\": %d does not divide num_attention_heads %d",
                       path, c->n_kv_heads, c->n_heads);
    json_t *hd = json_object_get(root, "head_dim");
    if ((!hd || json_is_null(hd)) && c->hidden_size % c->n_heads != 0)
        return err_set(KS_EFORMAT,
                       "%s: field \"head_dim\": absent and hidden_size %d is not divisible by "
                       "num_attention_heads %d", path, c->hidden_size, c->n_heads);
    if ((rc = get_i(x, root, "head_dim", false, c->hidden_size / c->n_heads, 1, CFG_MAX_DIM,
                    &c->head_dim)) < 0)
        return rc;
    if (c->head_dim % 2 != 0)
        return err_set(KS_EFORMAT, "%s: field \"head_dim\": %d must be even (RoPE rotates pairs)", path,
                       c->head_dim);
    if ((long long)c->n_heads * c->head_dim > CFG_MAX_DIM)
        return err_set(KS_EFORMAT, "%s: num_attention_heads %d x head_dim %d exceeds %lld", path,
                       c->n_heads, c->head_dim, CFG_MAX_DIM);

    double eps, theta;
    if ((rc = ju_get_num(x, root, "rms_norm_eps", false, 1e-6, 1e-30, 1.0, &eps)) < 0) return rc;
    c->rms_norm_eps = (float)eps;
    json_t *rp = json_object_get(root, "rope_parameters");
    json_t *top = json_object_get(root, "rope_theta");
    if ((!top || json_is_null(top)) && rp && json_is_object(rp)) {
        ju_ctx xr = {path, "rope_parameters"};
        rc = ju_get_num(xr, rp, "rope_theta", false, 10000.0, 1.0, 1e12, &theta);
    } else {
        rc = ju_get_num(x, root, "rope_theta", false, 10000.0, 1.0, 1e12, &theta);
    }
    if (rc < 0) return rc;
    c->rope_theta = theta;
    if ((rc = parse_rope_scaling(path, root, c)) < 0) return rc;

    if ((rc = get_i(x, root, "max_position_embeddings", false, default_max_pos, 1, CFG_MAX_POS,
                    &c->max_position_embeddings)) < 0 ||
        (rc = ju_get_bool(x, root, "tie_word_embeddings", false, &c->tie_word_embeddings)) < 0 ||
        (rc = ju_get_bool(x, root, "attention_bias", false, &c->attention_bias)) < 0 ||
        (rc = get_i(x, root, "bos_token_id", false, -1, 0, c->vocab_size - 1, &c->bos_token_id)) < 0 ||
        (rc = ju_get_int_list(x, root, "eos_token_id", 0, c->vocab_size - 1, c->eos_ids,
                              CONFIG_MAX_EOS, &c->n_eos)) < 0 ||
        (rc = get_i(x, root, "mtp_num_hidden_layers", false, 0, 0, 64, &c->mtp_num_hidden_layers)) < 0)
        return rc;
    /* Qwen2 always has q/k/v bias (its config has no attention_bias field). */
    if (c->arch == ARCH_QWEN2) c->attention_bias = true;
    if (c->dflash && (rc = parse_dflash(path, root, c)) < 0) return rc;
    return KS_OK;
}

int config_load(model_config *c, const char *dir) {
    memset(c, 0, sizeof *c);
    char *path = path_join(dir, "config.json");
    if (!path) return err_set(KS_ENOMEM, "%s: out of memory", dir);
    json_t *root = NULL;
    int rc = ju_load_file(path, &root);
    if (rc >= 0) rc = parse_config(path, root, c);
    json_decref(root);
    free(path);
    if (rc < 0) memset(c, 0, sizeof *c);
    return rc;
}

void gen_config_defaults(gen_config *g) {
    memset(g, 0, sizeof *g);
    g->do_sample = false;
    g->temperature = 1.0f;
    g->top_p = 1.0f;
    g->top_k = 0;
    g->min_p = 0.0f;
    g->repetition_penalty = 1.0f;
    g->bos_token_id = -1;
    g->n_eos = 0;
}

static int parse_gen(const char *path, const json_t *root, gen_config *g) {
    ju_ctx x = {path, NULL};
    int rc;
    if (!json_is_object(root))
        return err_set(KS_EFORMAT, "%s: expected a JSON object, got %s", path, ju_type_name(root));
    if ((rc = ju_get_bool(x, root, "do_sample", false, &g->do_sample)) < 0 ||
        (rc = get_f(x, root, "temperature", false, 1.0, 0.0, 1e4, &g->temperature)) < 0 ||
        (rc = get_f(x, root, "top_p", false, 1.0, 0.0, 1.0, &g->top_p)) < 0 ||
        (rc = get_i(x, root, "top_k", false, 0, 0, INT_MAX, &g->top_k)) < 0 ||
        (rc = get_f(x, root, "min_p", false, 0.0, 0.0, 1.0, &g->min_p)) < 0 ||
        (rc = get_f(x, root, "repetition_penalty", false, 1.0, 1e-6, 1e4, &g->repetition_penalty)) < 0 ||
        (rc = get_i(x, root, "bos_token_id", false, -1, 0, INT_MAX, &g->bos_token_id)) < 0 ||
        (rc = ju_get_int_list(x, root, "eos_token_id", 0, INT_MAX, g->eos_ids, CONFIG_MAX_EOS,
                              &g->n_eos)) < 0)
        return rc;
    return KS_OK;
}

int gen_config_load(gen_config *g, const char *dir) {
    gen_config_defaults(g);
    char *path = path_join(dir, "generation_config.json");
    if (!path) return err_set(KS_ENOMEM, "%s: out of memory", dir);
    int rc = KS_OK;
    if (file_exists(path)) {
        json_t *root = NULL;
        rc = ju_load_file(path, &root);
        if (rc >= 0) rc = parse_gen(path, root, g);
        json_decref(root);
        if (rc < 0) gen_config_defaults(g);
    }
    free(path);
    return rc;
}
