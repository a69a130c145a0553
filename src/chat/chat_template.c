/* chat_template.c — loads a model's chat template and renders prompts with
 * the Jinja interpreter (see chat_template.h). */
#include "chat/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "chat/jinja.h"

#define CT_MAX_TEMPLATE_BYTES ((size_t)4 << 20)

struct chat_template {
    jinja_template *tmpl;
    char *bos, *eos;  /* owned, may be NULL */
};

int chat_template_from_string(chat_template **out, const char *tmpl, const char *bos, const char *eos) {
    *out = NULL;
    if (!tmpl) return err_set(KS_EINVAL, "chat template: no template text");
    size_t len = strlen(tmpl);
    if (len > CT_MAX_TEMPLATE_BYTES)
        return err_set(KS_EINVAL, "chat template: %zu bytes is larger than the limit (%zu)", len, CT_MAX_TEMPLATE_BYTES);
    chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return err_set(KS_ENOMEM, "chat template: out of memory");
    int rc = jinja_parse(&ct->tmpl, tmpl, len);
    if (rc < 0) goto fail;
    if ((bos && !(ct->bos = strdup(bos))) || (eos && !(ct->eos = strdup(eos)))) {
        rc = err_set(KS_ENOMEM, "chat template: out of memory");
        goto fail;
    }
    *out = ct;
    return 0;
fail:
    chat_template_free(ct);
    return rc;
}

/* A special token as tokenizer_config.json writes it: "tok", {"content": "tok"} or null. */
static int token_of(const json_t *cfg, const char *key, const char *path, const char **out) {
    json_t *v = json_object_get(cfg, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v))
        return err_set(KS_EFORMAT, "%s: \"%s\" must be a string or an object with a string \"content\"", path, key);
    *out = json_string_value(v);
    return 0;
}

static char *read_file(const char *path, size_t limit, int *rc) {
    FILE *f = fopen(path, "rb");
    *rc = 0;
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    while (1) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) { *rc = err_set(KS_ENOMEM, "%s: out of memory", path); goto fail; }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, 4096, f);
        n += k;
        if (n > limit) { *rc = err_set(KS_EFORMAT, "%s: larger than %zu bytes", path, limit); goto fail; }
        if (k < 4096) break;
    }
    if (ferror(f)) { *rc = err_set(KS_EIO, "%s: read error", path); goto fail; }
    fclose(f);
    buf[n] = 0;
    if (strlen(buf) != n) { *rc = err_set(KS_EFORMAT, "%s: contains a NUL byte", path); free(buf); return NULL; }
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

int chat_template_load(chat_template **out, const char *model_dir) {
    *out = NULL;
    char path[4096], jpath[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir) >= (int)sizeof path ||
        snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", model_dir) >= (int)sizeof jpath)
        return err_set(KS_EINVAL, "chat template: model directory path too long");
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return err_set(KS_EIO, "%s: %s (line %d)", path, je.text, je.line);
    int rc = 0;
    char *jinja_text = NULL;
    if (!json_is_object(cfg)) { rc = err_set(KS_EFORMAT, "%s: not a JSON object", path); goto done; }
    const char *bos, *eos, *tmpl = NULL;
    if ((rc = token_of(cfg, "bos_token", path, &bos)) < 0 || (rc = token_of(cfg, "eos_token", path, &eos)) < 0) goto done;
    jinja_text = read_file(jpath, CT_MAX_TEMPLATE_BYTES, &rc);
    if (rc < 0) goto done;
    if (jinja_text) {
        tmpl = jinja_text;
    } else {
        json_t *t = json_object_get(cfg, "chat_template");
        if (json_is_string(t)) {
            tmpl = json_string_value(t);
            if (strlen(tmpl) != json_string_length(t)) { rc = err_set(KS_EFORMAT, "%s: \"chat_template\" contains a NUL byte", path); goto done; }
        } else if (json_is_array(t)) {
            size_t i;
            json_t *e;
            json_array_foreach(t, i, e) {
                json_t *name = json_object_get(e, "name"), *text = json_object_get(e, "template");
                if (!json_is_string(name) || !json_is_string(text)) {
                    rc = err_set(KS_EFORMAT, "%s: \"chat_template\"[%zu] must be {\"name\": string, \"template\": string}", path, i);
                    goto done;
                }
                if (!strcmp(json_string_value(name), "default")) tmpl = json_string_value(text);
            }
            if (!tmpl) { rc = err_set(KS_EFORMAT, "%s: \"chat_template\" list has no template named \"default\"", path); goto done; }
        } else if (!t || json_is_null(t)) {
            rc = err_set(KS_EFORMAT, "%s: no \"chat_template\" (and no chat_template.jinja)", path);
            goto done;
        } else {
            rc = err_set(KS_EFORMAT, "%s: \"chat_template\" must be a string or a list of {name, template}", path);
            goto done;
        }
    }
    if ((rc = chat_template_from_string(out, tmpl, bos, eos)) < 0)
        err_wrap(rc, "%s", jinja_text ? jpath : path);
done:
    free(jinja_text);
    json_decref(cfg);
    return rc;
}

int chat_template_apply(const chat_template *ct, const json_t *messages, const json_t *tools,
                        bool add_generation_prompt, const json_t *extra, char **out) {
    *out = NULL;
    if (!ct) return err_set(KS_EINVAL, "chat template: none loaded");
    if (!json_is_array(messages)) return err_set(KS_EINVAL, "chat template: messages must be an array");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return err_set(KS_EINVAL, "chat template: tools must be an array");
    if (extra && !json_is_null(extra) && !json_is_object(extra)) return err_set(KS_EINVAL, "chat template: extra arguments must be an object");
    json_t *ctx = json_object();
    if (!ctx) return err_set(KS_ENOMEM, "chat template: out of memory");
    int rc = 0;
    if (ct->bos) json_object_set_new(ctx, "bos_token", json_string(ct->bos));
    if (ct->eos) json_object_set_new(ctx, "eos_token", json_string(ct->eos));
    if (extra && json_is_object(extra)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)extra, k, v) {
            if (!strcmp(k, "messages") || !strcmp(k, "tools") || !strcmp(k, "documents") || !strcmp(k, "add_generation_prompt")) {
                rc = err_set(KS_EINVAL, "chat template: extra argument \"%s\" conflicts with a built-in variable", k);
                goto done;
            }
            json_object_set(ctx, k, v);
        }
    }
    json_object_set(ctx, "messages", (json_t *)messages);
    json_object_set_new(ctx, "tools", tools ? json_incref((json_t *)tools) : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    rc = jinja_render(ct->tmpl, ctx, out, NULL);
done:
    json_decref(ctx);
    return rc;
}

void chat_template_free(chat_template *ct) {
    if (!ct) return;
    jinja_free(ct->tmpl);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}
