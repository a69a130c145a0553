/* config.h — config.json (architecture and shape) and generation_config.json
 * (sampling defaults) of a Hugging Face model directory.
 *
 * Supported architectures: Qwen3 (QK-norm), Qwen2 (q/k/v bias), Llama
 * (including Llama 3 rope_scaling), and DFlash block drafters whose layers
 * are one of those. rope_theta is read at the top level or
 * from transformers-5's rope_parameters. Missing required fields, wrong
 * types and out-of-range values are errors naming the file and JSON field. */
#ifndef KS_CONFIG_H
#define KS_CONFIG_H

#include <stdbool.h>

#define CONFIG_MAX_EOS 8
#define CONFIG_MAX_DFLASH_LAYERS 8

typedef enum { ARCH_LLAMA = 0, ARCH_QWEN2, ARCH_QWEN3 } model_arch;
typedef enum { ROPE_SCALING_NONE = 0, ROPE_SCALING_LLAMA3 } rope_scaling_type;

typedef struct {
    model_arch arch;
    char arch_name[64];         /* "Qwen3ForCausalLM", ... */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;               /* head_dim field, else hidden_size / n_heads */
    float rms_norm_eps;
    double rope_theta;
    rope_scaling_type rope_scaling;
    float rope_factor;          /* llama3: factor */
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    int rope_original_max_pos;  /* original_max_position_embeddings */
    int max_position_embeddings;
    bool tie_word_embeddings;
    bool qk_norm;               /* qwen3 */
    bool attention_bias;        /* qwen2 (always), others from "attention_bias" */
    int bos_token_id;           /* -1 when absent/null */
    int eos_ids[CONFIG_MAX_EOS];
    int n_eos;
    int mtp_num_hidden_layers;  /* 0 when absent */
    /* DFlash block drafter (architectures ["DFlashDraftModel"]; its layers
     * follow model_type): dflash_config.{block_size, mask_token_id,
     * target_layer_ids}, optional input_embedding_scale, output_multiplier,
     * final_logit_softcapping (in dflash_config or at the top level) */
    bool dflash;
    int dflash_block_size;
    int dflash_mask_token_id;
    int dflash_target_layers[CONFIG_MAX_DFLASH_LAYERS];
    int dflash_n_target_layers;
    float dflash_embed_scale;   /* 1 when absent */
    float dflash_out_mult;      /* 1 when absent */
    float dflash_softcap;       /* 0 (off) when absent */
} model_config;

typedef struct {
    bool do_sample;             /* false -> greedy by default */
    float temperature;          /* defaults: 1.0 */
    float top_p;                /* 1.0 */
    int top_k;                  /* 0 = off */
    float min_p;                /* 0 = off */
    float repetition_penalty;   /* 1.0 = off */
    int bos_token_id;           /* -1 when absent */
    int eos_ids[CONFIG_MAX_EOS];
    int n_eos;                  /* 0 when absent */
} gen_config;

/* Parses dir/config.json. */
int config_load(model_config *c, const char *dir);
/* Parses dir/generation_config.json; a missing file gives the defaults. */
int gen_config_load(gen_config *g, const char *dir);
void gen_config_defaults(gen_config *g);

#endif
