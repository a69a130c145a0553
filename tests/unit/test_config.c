/* test_config.c — config.json / generation_config.json parsing: tinycoder's
 * real files, synthetic Llama 3 / Qwen2 / Qwen3 configs, and hostile ones
 * (unknown architecture, missing or mistyped fields, bad ranges, bad JSON),
 * each of which must fail with a message naming the file and the field. */
#include "test.h"

#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "io/config.h"

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

/* A temp dir holding one file `name` with `text`. */
typedef struct { char dir[64]; } tdir;

static int tdir_make(tdir *t, const char *name, const char *text) {
    snprintf(t->dir, sizeof t->dir, "/tmp/ks_cfg_XXXXXX");
    if (!mkdtemp(t->dir)) return -1;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", t->dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}
static void tdir_free(tdir *t) { nftw(t->dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS); }

/* Loads text as config.json; returns the status, fills *c. */
static int load_cfg(const char *text, model_config *c) {
    tdir t;
    if (tdir_make(&t, "config.json", text) != 0) return -100;
    err_clear();
    int rc = config_load(c, t.dir);
    tdir_free(&t);
    return rc;
}

/* True when needle is NULL or occurs in m. */
static int msg_has(const char *m, const void *needle) {
    return !needle || strstr(m, (const char *)needle) != NULL;
}
static const char *nz(const void *s) { return s ? (const char *)s : ""; }

#define EXPECT_CFG_FAIL(text, status, n1, n2)                                            \
    do {                                                                               \
        model_config _c;                                                               \
        int _rc = load_cfg(text, &_c);                                                 \
        const char *_m = err_msg();                                                    \
        CHECK_MSG(_rc == (status), "status %d, expected %d (%s)", _rc, (status), _m);  \
        CHECK_MSG(strstr(_m, "config.json") != NULL, "message lacks file: %s", _m);    \
        CHECK_MSG(msg_has(_m, n1), "message lacks \"%s\": %s", nz(n1), _m); \
        CHECK_MSG(msg_has(_m, n2), "message lacks \"%s\": %s", nz(n2), _m); \
    } while (0)

/* A minimal valid body; tests append fields after it. */
#define BASE_FIELDS                                                                    \
    "\"vocab_size\": 1000, \"hidden_size\": 256, \"intermediate_size\": 512, "          \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 4"

TEST(test_config_tinycoder) {
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) SKIP("../shared/models/tinycoder absent");
    model_config c;
    int rc = config_load(&c, dir);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc != 0) return;
    CHECK_EQ_INT(c.arch, ARCH_QWEN3);
    CHECK_EQ_STR(c.arch_name, "Qwen3ForCausalLM");
    CHECK_EQ_INT(c.vocab_size, 8192);
    CHECK_EQ_INT(c.hidden_size, 512);
    CHECK_EQ_INT(c.n_layers, 6);
    CHECK_EQ_INT(c.n_heads, 8);
    CHECK_EQ_INT(c.n_kv_heads, 2);
    CHECK_EQ_INT(c.head_dim, 64);
    CHECK_EQ_INT(c.intermediate_size, 1536);
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK_EQ_INT(c.rope_scaling, ROPE_SCALING_NONE);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-12);
    CHECK(c.tie_word_embeddings);
    CHECK(c.qk_norm);
    CHECK(!c.attention_bias);
    CHECK_EQ_INT(c.max_position_embeddings, 4096);
    CHECK_EQ_INT(c.bos_token_id, 8181);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_ids[0], 8183);
    CHECK_EQ_INT(c.mtp_num_hidden_layers, 1);

    gen_config g;
    rc = gen_config_load(&g, dir);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK(g.do_sample);
    CHECK_NEAR(g.temperature, 0.7, 1e-6);
    CHECK_NEAR(g.top_p, 0.8, 1e-6);
    CHECK_EQ_INT(g.top_k, 20);
    CHECK_NEAR(g.min_p, 0, 0);
    CHECK_NEAR(g.repetition_penalty, 1, 0);
    CHECK_EQ_INT(g.bos_token_id, 8181);
    CHECK_EQ_INT(g.n_eos, 2);
    CHECK_EQ_INT(g.eos_ids[0], 8183);
    CHECK_EQ_INT(g.eos_ids[1], 8181);
}

TEST(test_config_drafter) {
    const char *dir = test_shared_path("models/tinycoder/drafter");
    if (!dir) SKIP("../shared/models/tinycoder/drafter absent");
    model_config c;
    int rc = config_load(&c, dir);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(c.hidden_size, 256);
    CHECK_EQ_INT(c.n_layers, 2);
    CHECK_EQ_INT(c.n_heads, 4);
    CHECK_EQ_INT(c.head_dim, 64);
    CHECK_EQ_INT(c.mtp_num_hidden_layers, 0);
}

TEST(test_config_llama3) {
    model_config c;
    int rc = load_cfg(
        "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 128256, \"hidden_size\": 4096,"
        " \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        " \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
        " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
        "   \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
        " \"max_position_embeddings\": 131072, \"bos_token_id\": 128000,"
        " \"eos_token_id\": [128001, 128008, 128009], \"tie_word_embeddings\": false,"
        " \"head_dim\": null, \"attention_bias\": false}", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(c.arch, ARCH_LLAMA);
    CHECK_EQ_STR(c.arch_name, "LlamaForCausalLM");
    CHECK_EQ_INT(c.head_dim, 128);
    CHECK_EQ_INT(c.n_kv_heads, 8);
    CHECK(!c.qk_norm);
    CHECK(!c.attention_bias);
    CHECK(!c.tie_word_embeddings);
    CHECK_NEAR(c.rms_norm_eps, 1e-5, 1e-10);
    CHECK_NEAR(c.rope_theta, 500000, 0);
    CHECK_EQ_INT(c.rope_scaling, ROPE_SCALING_LLAMA3);
    CHECK_NEAR(c.rope_factor, 8, 0);
    CHECK_NEAR(c.rope_low_freq_factor, 1, 0);
    CHECK_NEAR(c.rope_high_freq_factor, 4, 0);
    CHECK_EQ_INT(c.rope_original_max_pos, 8192);
    CHECK_EQ_INT(c.max_position_embeddings, 131072);
    CHECK_EQ_INT(c.bos_token_id, 128000);
    CHECK_EQ_INT(c.n_eos, 3);
    CHECK_EQ_INT(c.eos_ids[2], 128009);
    CHECK_EQ_INT(c.mtp_num_hidden_layers, 0);

    /* transformers 5 spelling: rope_parameters with "type" and the theta inside. */
    rc = load_cfg("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rope_parameters\": {"
                  "\"rope_theta\": 500000, \"type\": \"llama3\", \"factor\": 32,"
                  " \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                  " \"original_max_position_embeddings\": 8192}}", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(c.arch, ARCH_LLAMA);
    CHECK_EQ_STR(c.arch_name, "LlamaForCausalLM");
    CHECK_NEAR(c.rope_theta, 500000, 0);
    CHECK_EQ_INT(c.rope_scaling, ROPE_SCALING_LLAMA3);
    CHECK_NEAR(c.rope_factor, 32, 0);
    CHECK_EQ_INT(c.max_position_embeddings, 2048); /* LlamaConfig default */

    /* llama3 missing a field, and an unsupported rope type. */
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rope_scaling\": {"
                    "\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1,"
                    " \"high_freq_factor\": 4}}",
                    KS_EFORMAT, "rope_scaling.original_max_position_embeddings", "missing");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rope_scaling\": {"
                    "\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4,"
                    " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}",
                    KS_EFORMAT, "high_freq_factor", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rope_scaling\": {"
                    "\"type\": \"yarn\", \"factor\": 4}}",
                    KS_EUNSUPPORTED, "\"yarn\"", "rope_scaling.type");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rope_parameters\": {"
                    "\"rope_type\": \"linear\", \"factor\": 4}}",
                    KS_EUNSUPPORTED, "\"linear\"", "rope_parameters.rope_type");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rope_scaling\": 3}",
                    KS_EFORMAT, "rope_scaling", NULL);
}

TEST(test_config_qwen2) {
    model_config c;
    int rc = load_cfg("{\"architectures\": [\"Qwen2ForCausalLM\"], " BASE_FIELDS
                      ", \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true,"
                      " \"bos_token_id\": null, \"eos_token_id\": 999}", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(c.arch, ARCH_QWEN2);
    CHECK(c.attention_bias);
    CHECK(!c.qk_norm);
    CHECK(c.tie_word_embeddings);
    CHECK_EQ_INT(c.head_dim, 32);
    CHECK_EQ_INT(c.bos_token_id, -1);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_ids[0], 999);
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK_EQ_INT(c.max_position_embeddings, 32768);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-12);
}

TEST(test_config_defaults_and_theta) {
    model_config c;
    /* No num_key_value_heads, no head_dim, no rope_theta, no eos. */
    int rc = load_cfg("{\"model_type\": \"qwen3\", \"vocab_size\": 100, \"hidden_size\": 64,"
                      " \"intermediate_size\": 128, \"num_hidden_layers\": 1,"
                      " \"num_attention_heads\": 4}", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(c.arch, ARCH_QWEN3);
    CHECK(c.qk_norm);
    CHECK_EQ_INT(c.n_kv_heads, 4);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_NEAR(c.rope_theta, 10000, 0);
    CHECK_EQ_INT(c.n_eos, 0);
    CHECK_EQ_INT(c.bos_token_id, -1);
    CHECK(!c.tie_word_embeddings);
    /* Top-level rope_theta wins over rope_parameters'. */
    rc = load_cfg("{\"model_type\": \"qwen3\", " BASE_FIELDS ", \"rope_theta\": 123456,"
                  " \"rope_parameters\": {\"rope_theta\": 7, \"rope_type\": \"default\"}}", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_NEAR(c.rope_theta, 123456, 0);
    rc = load_cfg("{\"model_type\": \"qwen3\", " BASE_FIELDS ", \"rope_parameters\": {\"rope_theta\": 250000}}",
                  &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_NEAR(c.rope_theta, 250000, 0);
    CHECK_EQ_INT(c.rope_scaling, ROPE_SCALING_NONE);
    /* Explicit head_dim different from hidden/heads (Qwen3 style). */
    rc = load_cfg("{\"model_type\": \"qwen3\", " BASE_FIELDS ", \"head_dim\": 128}", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(c.head_dim, 128);
}

TEST(test_config_hostile) {
    EXPECT_CFG_FAIL("{\"architectures\": [\"MambaForCausalLM\"], " BASE_FIELDS "}", KS_EUNSUPPORTED,
                    "\"MambaForCausalLM\" not supported", "Qwen3ForCausalLM");
    EXPECT_CFG_FAIL("{\"model_type\": \"gpt2\", " BASE_FIELDS "}", KS_EUNSUPPORTED, "\"gpt2\"", NULL);
    EXPECT_CFG_FAIL("{" BASE_FIELDS "}", KS_EFORMAT, "architectures", "model_type");
    EXPECT_CFG_FAIL("{\"architectures\": [], " BASE_FIELDS "}", KS_EFORMAT, "architectures", NULL);
    EXPECT_CFG_FAIL("{\"architectures\": \"LlamaForCausalLM\", " BASE_FIELDS "}", KS_EFORMAT,
                    "architectures", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"intermediate_size\": 512,"
                    " \"num_hidden_layers\": 2, \"num_attention_heads\": 8}",
                    KS_EFORMAT, "field \"hidden_size\"", "missing");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"hidden_size\": \"4096\"}",
                    KS_EFORMAT, "duplicate", NULL); /* duplicate keys rejected */
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": \"256\","
                    " \"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8}",
                    KS_EFORMAT, "field \"hidden_size\": expected a positive integer", "string");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 256.5,"
                    " \"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8}",
                    KS_EFORMAT, "field \"hidden_size\"", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 0,"
                    " \"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8}",
                    KS_EFORMAT, "field \"hidden_size\": expected a positive integer", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 99999999999,"
                    " \"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8}",
                    KS_EFORMAT, "field \"hidden_size\"", "out of range");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 256,"
                    " \"intermediate_size\": 512, \"num_hidden_layers\": 5000, \"num_attention_heads\": 8}",
                    KS_EFORMAT, "num_hidden_layers", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 256,"
                    " \"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8,"
                    " \"num_key_value_heads\": 3}",
                    KS_EFORMAT, "num_key_value_heads", "does not divide");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 250,"
                    " \"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8}",
                    KS_EFORMAT, "head_dim", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"head_dim\": 33}", KS_EFORMAT,
                    "head_dim", "even");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"eos_token_id\": 1000}", KS_EFORMAT,
                    "eos_token_id", "out of range");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"eos_token_id\": [1, \"2\"]}",
                    KS_EFORMAT, "eos_token_id[1]", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS
                    ", \"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", KS_EFORMAT, "eos_token_id", "at most");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"tie_word_embeddings\": \"yes\"}",
                    KS_EFORMAT, "tie_word_embeddings", "boolean");
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rope_theta\": -5}", KS_EFORMAT,
                    "rope_theta", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS ", \"rms_norm_eps\": \"1e-6\"}",
                    KS_EFORMAT, "rms_norm_eps", NULL);
    EXPECT_CFG_FAIL("{\"model_type\": \"llama\", " BASE_FIELDS, KS_EFORMAT, "invalid JSON", "line");
    EXPECT_CFG_FAIL("[1, 2]", KS_EFORMAT, "object", NULL);
    EXPECT_CFG_FAIL("", KS_EFORMAT, "invalid JSON", NULL);

    /* Missing file: an I/O error naming the path. */
    char d[64];
    snprintf(d, sizeof d, "/tmp/ks_cfg_XXXXXX");
    if (mkdtemp(d)) {
        model_config c;
        CHECK(config_load(&c, d) == KS_EIO);
        CHECK(strstr(err_msg(), "config.json") != NULL);
        rmdir(d);
    }
}

TEST(test_config_gen_defaults) {
    char d[64];
    snprintf(d, sizeof d, "/tmp/ks_cfg_XXXXXX");
    if (!mkdtemp(d)) SKIP("mkdtemp failed");
    gen_config g;
    memset(&g, 0x5a, sizeof g);
    CHECK_EQ_INT(gen_config_load(&g, d), KS_OK);
    rmdir(d);
    CHECK(!g.do_sample);
    CHECK_NEAR(g.temperature, 1, 0);
    CHECK_NEAR(g.top_p, 1, 0);
    CHECK_EQ_INT(g.top_k, 0);
    CHECK_NEAR(g.min_p, 0, 0);
    CHECK_NEAR(g.repetition_penalty, 1, 0);
    CHECK_EQ_INT(g.bos_token_id, -1);
    CHECK_EQ_INT(g.n_eos, 0);
}

static int load_gen(const char *text, gen_config *g) {
    tdir t;
    if (tdir_make(&t, "generation_config.json", text) != 0) return -100;
    err_clear();
    int rc = gen_config_load(g, t.dir);
    tdir_free(&t);
    return rc;
}

TEST(test_config_gen_fields) {
    gen_config g;
    int rc = load_gen("{\"do_sample\": false, \"temperature\": 0.6, \"top_p\": 0.95, \"top_k\": 40,"
                      " \"min_p\": 0.05, \"repetition_penalty\": 1.1, \"bos_token_id\": 1,"
                      " \"eos_token_id\": 2, \"transformers_version\": \"4.51.0\"}", &g);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK(!g.do_sample);
    CHECK_NEAR(g.temperature, 0.6, 1e-6);
    CHECK_NEAR(g.top_p, 0.95, 1e-6);
    CHECK_EQ_INT(g.top_k, 40);
    CHECK_NEAR(g.min_p, 0.05, 1e-6);
    CHECK_NEAR(g.repetition_penalty, 1.1, 1e-6);
    CHECK_EQ_INT(g.bos_token_id, 1);
    CHECK_EQ_INT(g.n_eos, 1);
    CHECK_EQ_INT(g.eos_ids[0], 2);
    /* Integers where floats are expected, nulls meaning "default". */
    rc = load_gen("{\"temperature\": 1, \"top_p\": null, \"top_k\": null}", &g);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_NEAR(g.temperature, 1, 0);
    CHECK_NEAR(g.top_p, 1, 0);

    const char *bad[][3] = {
        {"{\"temperature\": 0.7,", "invalid JSON", NULL},
        {"{\"temperature\": \"hot\"}", "temperature", "number"},
        {"{\"temperature\": -1}", "temperature", "out of range"},
        {"{\"top_p\": 1.5}", "top_p", NULL},
        {"{\"top_k\": -3}", "top_k", NULL},
        {"{\"top_k\": 2.5}", "top_k", NULL},
        {"{\"do_sample\": 1}", "do_sample", "boolean"},
        {"{\"eos_token_id\": {}}", "eos_token_id", NULL},
        {"{\"eos_token_id\": [-1]}", "eos_token_id[0]", NULL},
        {"[1, 2]", "object", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_clear();
        rc = load_gen(bad[i][0], &g);
        const char *m = err_msg();
        CHECK_MSG(rc < 0, "case %zu accepted", i);
        CHECK_MSG(strstr(m, "generation_config.json") != NULL, "case %zu: no file: %s", i, m);
        CHECK_MSG(strstr(m, bad[i][1]) != NULL, "case %zu: lacks %s: %s", i, bad[i][1], m);
        if (bad[i][2]) CHECK_MSG(strstr(m, bad[i][2]) != NULL, "case %zu: lacks %s: %s", i, bad[i][2], m);
    }
}
