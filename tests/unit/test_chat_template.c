/* test_chat_template.c — chat_template_* against the reference renders in
 * ../shared/fixtures/chat_template_cases.json (transformers 5 +
 * jinja2 3.1: qwen3, llama3_1, gemma3, tinycoder; every case must render
 * byte-exactly or fail with the template's error message), loading
 * tinycoder's template from its model directory, and bad inputs. */
#include "test.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "chat/chat_template.h"

static json_t *load_cases(void) {
    const char *p = test_shared_path("fixtures/chat_template_cases.json");
    if (!p) return NULL;
    json_error_t je;
    return json_load_file(p, 0, &je);
}

/* Renders one fixture case with ct; checks rendered / error. Returns 1 if it passed. */
static int run_case(const chat_template *ct, const char *tname, const char *cname, json_t *c) {
    json_t *in = json_object_get(c, "input");
    json_t *msgs = json_object_get(in, "messages");
    json_t *tools = json_object_get(in, "tools");
    json_t *agp = json_object_get(in, "add_generation_prompt");
    bool add = agp ? json_is_true(agp) : true;  /* the fixtures' generator default */
    json_t *extra = json_object();
    json_object_update(extra, json_object_get(c, "special_tokens"));
    json_t *kw = json_object_get(in, "kwargs");
    if (kw) json_object_update(extra, kw);
    char *out = NULL;
    err_clear();
    int rc = chat_template_apply(ct, msgs, tools, add, extra, &out);
    json_decref(extra);
    const char *want = json_string_value(json_object_get(c, "rendered"));
    const char *werr = json_string_value(json_object_get(c, "error"));
    int ok = 1;
    if (want) {
        if (rc < 0) {
            test_fail(__FILE__, __LINE__, "%s/%s: render failed: %s", tname, cname, err_msg());
            ok = 0;
        } else if (strcmp(out, want) != 0) {
            size_t i = 0;
            while (out[i] && out[i] == want[i]) i++;
            test_fail(__FILE__, __LINE__, "%s/%s: differs at byte %zu:\n got: %.80s\nwant: %.80s", tname, cname, i,
                      out + i, want + i);
            ok = 0;
        }
    } else if (werr) {
        /* "TypeError: msg" / "TemplateError: msg": our message must contain it */
        if (rc >= 0) {
            test_fail(__FILE__, __LINE__, "%s/%s: rendered but expected error %s", tname, cname, werr);
            ok = 0;
        } else if (!strstr(err_msg(), werr)) {
            test_fail(__FILE__, __LINE__, "%s/%s: error \"%s\" does not contain \"%s\"", tname, cname, err_msg(), werr);
            ok = 0;
        }
    }
    free(out);
    return ok;
}

TEST(test_chat_template_fixtures) {
    json_t *root = load_cases();
    if (!root) SKIP("../shared/fixtures/chat_template_cases.json absent");
    json_t *tmpls = json_object_get(root, "templates");
    const char *tname;
    json_t *t;
    int n = 0, passed = 0;
    json_object_foreach(tmpls, tname, t) {
        chat_template *ct = NULL;
        int rc = chat_template_from_string(&ct, json_string_value(json_object_get(t, "template")), NULL, NULL);
        CHECK_MSG(rc == 0, "%s: parse failed: %s", tname, err_msg());
        if (rc < 0) continue;
        const char *cname;
        json_t *c;
        json_object_foreach(json_object_get(t, "cases"), cname, c) {
            n++;
            passed += run_case(ct, tname, cname, c);
        }
        chat_template_free(ct);
    }
    CHECK(n >= 48);
    CHECK_EQ_INT(passed, n);
    json_decref(root);
}

TEST(test_chat_template_load_tinycoder) {
    const char *dir = test_shared_path("models/tinycoder");
    json_t *root = load_cases();
    if (!dir || !root) { json_decref(root); SKIP("../shared/models/tinycoder or fixtures absent"); }
    chat_template *ct = NULL;
    int rc = chat_template_load(&ct, dir);
    CHECK_MSG(rc == 0, "load: %s", err_msg());
    if (rc == 0) {
        json_t *cases = json_object_get(json_object_get(json_object_get(root, "templates"), "tinycoder"), "cases");
        const char *cname;
        json_t *c;
        int n = 0, passed = 0;
        json_object_foreach(cases, cname, c) {
            n++;
            passed += run_case(ct, "tinycoder(load)", cname, c);
        }
        CHECK(n > 0);
        CHECK_EQ_INT(passed, n);
        /* eos_token from tokenizer_config.json, no extra */
        chat_template *ct2 = NULL;
        CHECK(chat_template_from_string(&ct2, "[{{ bos_token }}|{{ eos_token }}]", NULL, "<e>") == 0);
        json_t *msgs = json_array();
        char *out = NULL;
        CHECK(chat_template_apply(ct2, msgs, NULL, false, NULL, &out) == 0);
        CHECK_EQ_STR(out, "[|<e>]");
        free(out);
        json_decref(msgs);
        chat_template_free(ct2);
    }
    chat_template_free(ct);
    json_decref(root);
}

/* Writes tokenizer_config.json text into a temp dir; loads it. */
static int load_text(const char *text, chat_template **ct, char *dir, size_t dn) {
    snprintf(dir, dn, "/tmp/ks_ct_XXXXXX");
    if (!mkdtemp(dir)) return -100;
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -100;
    fputs(text, f);
    fclose(f);
    err_clear();
    int rc = chat_template_load(ct, dir);
    remove(path);
    rmdir(dir);
    return rc;
}

TEST(test_chat_template_load_variants) {
    char dir[64];
    chat_template *ct = NULL;
    /* list form, {content} tokens */
    int rc = load_text("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
                       "{\"name\": \"default\", \"template\": \"{{ bos_token }}D{{ messages|length }}\"}], "
                       "\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": null}", &ct, dir, sizeof dir);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc == 0) {
        json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
        char *out = NULL;
        CHECK(chat_template_apply(ct, m, NULL, true, NULL, &out) == 0);
        CHECK_EQ_STR(out, "<s>D1");
        free(out);
        /* messages must be an array; extra must not clash */
        CHECK(chat_template_apply(ct, json_object_get(json_array_get(m, 0), "role"), NULL, true, NULL, &out) < 0);
        json_t *ex = json_pack("{s:b}", "add_generation_prompt", 1);
        CHECK(chat_template_apply(ct, m, NULL, true, ex, &out) < 0);
        json_decref(ex);
        json_decref(m);
        chat_template_free(ct);
        ct = NULL;
    }
    CHECK(load_text("{\"bos_token\": \"<s>\"}", &ct, dir, sizeof dir) < 0);
    CHECK(strstr(err_msg(), "chat_template") != NULL);
    CHECK(load_text("{\"chat_template\": 5}", &ct, dir, sizeof dir) < 0);
    CHECK(load_text("{\"chat_template\": [{\"name\": \"x\", \"template\": \"T\"}]}", &ct, dir, sizeof dir) < 0);
    CHECK(strstr(err_msg(), "default") != NULL);
    CHECK(load_text("{\"chat_template\": \"{% if %}\"}", &ct, dir, sizeof dir) < 0);
    CHECK(strstr(err_msg(), "1:") != NULL);
    CHECK(load_text("{\"chat_template\": \"x\", \"bos_token\": 3}", &ct, dir, sizeof dir) < 0);
    CHECK(strstr(err_msg(), "bos_token") != NULL);
    CHECK(load_text("not json", &ct, dir, sizeof dir) < 0);
    CHECK(chat_template_load(&ct, "/nonexistent/dir") < 0);
    CHECK(ct == NULL);
}
