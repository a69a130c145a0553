/* api_parse.c — request JSON getters with parameter-naming errors. */
#include "api/api_parse.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_constraint_cache.h"

int api_fail(api_err *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->param = param;
    return -1;
}

const char *api_str_or(json_t *v, const char *def) {
    const char *s = json_string_value(v);
    return s ? s : def;
}

long api_join_text_parts(json_t *parts, const char *const *types, const char *sep, strbuf *out) {
    size_t k;
    json_t *part;
    json_array_foreach(parts, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        bool known = false;
        for (int i = 0; type && types[i] && !known; i++) known = !strcmp(type, types[i]);
        json_t *txt = json_object_get(part, known && !strcmp(type, "refusal") ? "refusal" : "text");
        if (!known || !json_is_string(txt)) {
            sb_free(out);
            return (long)k;
        }
        if (sep && k && out->len) sb_puts(out, sep);
        sb_append(out, json_string_value(txt), json_string_length(txt));
    }
    return -1;
}

static int bad(api_err *e, const char *key, const char *what) { return api_fail(e, key, "'%s': %s", key, what); }

int api_get_num(json_t *o, const char *key, double lo, double hi, double *out, api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(e, key, "expected a number");
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        char m[128];
        snprintf(m, sizeof m, "%g is out of range [%g, %g]", d, lo, hi);
        return bad(e, key, m);
    }
    *out = d;
    return 1;
}

int api_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else return bad(e, key, "expected an integer");
    if (x < lo || x > hi) {
        char m[128];
        snprintf(m, sizeof m, "%lld is out of range [%lld, %lld]", x, lo, hi);
        return bad(e, key, m);
    }
    *out = x;
    return 1;
}

int api_get_bool(json_t *o, const char *key, bool *out, api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(e, key, "expected a boolean");
    *out = json_is_true(v);
    return 1;
}

int api_get_str(json_t *o, const char *key, const char **out, api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return bad(e, key, "expected a string");
    *out = json_string_value(v);
    return 1;
}

int api_get_stop(json_t *o, const char *key, engine_params *p, api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        p->stop[0] = json_string_value(v);
        p->n_stop = 1;
        return 1;
    }
    if (!json_is_array(v)) return bad(e, key, "expected a string or an array of strings");
    if (json_array_size(v) > ENGINE_MAX_STOP) return bad(e, key, "at most 8 stop sequences");
    size_t i;
    json_t *s;
    p->n_stop = 0;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) return bad(e, key, "expected an array of strings");
        p->stop[p->n_stop++] = json_string_value(s);
    }
    return 1;
}

int api_get_logit_bias(json_t *o, engine_params *p, api_err *e) {
    json_t *v = json_object_get(o, "logit_bias");
    p->n_logit_bias = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return bad(e, "logit_bias", "expected an object mapping token ids to biases");
    if (json_object_size(v) > ENGINE_MAX_LOGIT_BIAS) {
        char m[64];
        snprintf(m, sizeof m, "at most %d entries", ENGINE_MAX_LOGIT_BIAS);
        return bad(e, "logit_bias", m);
    }
    const char *k;
    json_t *b;
    json_object_foreach(v, k, b) {
        char *end;
        errno = 0;
        long id = strtol(k, &end, 10);
        if (!*k || *end || errno || id < 0 || id > INT32_MAX) {
            char m[160];
            snprintf(m, sizeof m, "key \"%.64s\" is not a token id", k);
            return bad(e, "logit_bias", m);
        }
        double d = json_number_value(b);
        if (!json_is_number(b) || !(d >= -100 && d <= 100)) {
            char m[160];
            snprintf(m, sizeof m, "token %ld: the bias must be a number in [-100, 100]", id);
            return bad(e, "logit_bias", m);
        }
        p->logit_bias_id[p->n_logit_bias] = (int32_t)id;
        p->logit_bias[p->n_logit_bias++] = (float)d;
    }
    return 1;
}

json_t *api_parse_body(const char *body, size_t len, api_err *e) {
    json_error_t je;
    e->param = NULL;
    if (len == 0) {
        api_fail(e, NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        api_fail(e, NULL, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        api_fail(e, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

static int compile_schema(const json_t *schema, const char *key, json_constraint **out, api_err *e) {
    char why[400];
    *out = jc_compile_cached(schema, why, sizeof why);
    if (*out) return 1;
    char m[480];
    snprintf(m, sizeof m, "the JSON schema cannot be enforced: %s", why[0] ? why : "out of memory");
    return bad(e, key, m);
}

int api_get_response_format(json_t *o, const char *key, bool flat, json_constraint **out, api_err *e) {
    json_t *rf = json_object_get(o, key);
    *out = NULL;
    if (!rf || json_is_null(rf)) return 0;
    const char *t = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !t || (strcmp(t, "text") && strcmp(t, "json_object") && strcmp(t, "json_schema")))
        return bad(e, key, "expected {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) return compile_schema(NULL, key, out, e);
    json_t *js = flat ? rf : json_object_get(rf, "json_schema");
    if (!json_is_object(js)) return bad(e, key, "json_schema: expected {\"name\": ..., \"schema\": {...}}");
    json_t *schema = json_object_get(js, "schema");
    if (schema && !json_is_object(schema) && !json_is_boolean(schema))
        return bad(e, key, "json_schema.schema: expected a JSON Schema object");
    return compile_schema(schema, key, out, e);
}

int api_get_ollama_format(json_t *o, json_constraint **out, api_err *e) {
    json_t *f = json_object_get(o, "format");
    *out = NULL;
    if (!f || json_is_null(f) || (json_is_string(f) && !json_string_length(f))) return 0;
    if (json_is_string(f) && !strcmp(json_string_value(f), "json")) return compile_schema(NULL, "format", out, e);
    if (json_is_object(f)) return compile_schema(f, "format", out, e);
    return bad(e, "format", "expected \"json\" or a JSON schema");
}

/* The schema of one tool call, {"name": const, "arguments": ...}, for each
 * tool (name NULL) or the one named; a union told apart by "name" when
 * several (json_constraint.h: written first). A tool's arguments follow its
 * parameters schema, unless only strict tools' are to (strict_only) and it
 * is not one: then any object. NULL when no tool matches. A tool is
 * {"function": {"name", "parameters", "strict"}} (Chat Completions) or those
 * fields at its top (Responses; Anthropic's with "input_schema"). */
static json_t *tool_call_schema(json_t *tools, const char *name, bool strict_only) {
    json_t *calls = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_is_object(json_object_get(t, "function")) ? json_object_get(t, "function") : t;
        json_t *nm = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        if (!params) params = json_object_get(fn, "input_schema");
        if (!json_is_string(nm) || (name && strcmp(name, json_string_value(nm)))) continue;
        bool follow = json_is_object(params) && (!strict_only || json_is_true(json_object_get(fn, "strict")));
        json_array_append_new(calls, json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s,s], s:b}", "type", "object", "properties",
                                               "name", "const", nm, "arguments",
                                               follow ? json_incref(params) : json_pack("{s:s}", "type", "object"),
                                               "required", "name", "arguments", "additionalProperties", 0));
    }
    json_t *schema = !json_array_size(calls) ? NULL
                     : json_array_size(calls) == 1 ? json_incref(json_array_get(calls, 0))
                                                   : json_pack("{s:O}", "anyOf", calls);
    json_decref(calls);
    return schema;
}

static int forced_tool_call(json_t *tools, const char *name, const char *param, json_constraint **out, api_err *e) {
    *out = NULL;
    if (!json_array_size(tools)) return bad(e, param, "a tool call was required but no tools were given");
    json_t *schema = tool_call_schema(tools, name, false);
    if (!schema) {
        char m[400];
        snprintf(m, sizeof m, "the function '%.200s' is not among the tools", name ? name : "");
        return bad(e, param, m);
    }
    int r = compile_schema(schema, param, out, e);
    json_decref(schema);
    return r;
}

static int strict_tool_calls(json_t *tools, json_constraint **out, api_err *e) {
    *out = NULL;
    size_t i;
    json_t *t;
    bool strict = false;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_is_object(json_object_get(t, "function")) ? json_object_get(t, "function") : t;
        strict = strict || json_is_true(json_object_get(fn, "strict"));
    }
    if (!strict) return 0;
    json_t *schema = tool_call_schema(tools, NULL, true);
    int r = schema ? compile_schema(schema, "tools", out, e) : 0;
    json_decref(schema);
    return r;
}

int api_tool_constraint(json_t *tools, const char *forced, bool required, bool use_tools, json_constraint **fmt,
                        engine_params *p, api_err *e) {
    if (forced || required) {
        jc_free(*fmt);
        if (forced_tool_call(tools, forced, "tool_choice", fmt, e) < 0) return -1;
    } else if (!*fmt && use_tools) {
        int r = strict_tool_calls(tools, fmt, e);
        if (r < 0) return -1;
        p->constraint_calls = r > 0;
    }
    p->constraint = *fmt;
    return 0;
}

int api_get_sampling(json_t *o, engine_params *p, bool ollama, api_err *e) {
    double d;
    long long x;
    int r;
    if ((r = api_get_num(o, "temperature", 0, 100, &d, e)) < 0) return -1;
    if (r) p->sp.temperature = (float)d;
    if ((r = api_get_num(o, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (r) p->sp.top_p = d <= 0 ? 1e-6f : (float)d;
    if ((r = api_get_int(o, "top_k", -1, 1 << 30, &x, e)) < 0) return -1;
    if (r) p->sp.top_k = x < 0 ? 0 : (int)x;
    if ((r = api_get_num(o, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (r) p->sp.min_p = (float)d;
    if ((r = api_get_num(o, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) p->sp.presence_penalty = (float)d;
    if ((r = api_get_num(o, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) p->sp.frequency_penalty = (float)d;
    if ((r = api_get_num(o, ollama ? "repeat_penalty" : "repetition_penalty", 0.01, 100, &d, e)) < 0) return -1;
    if (r) p->sp.repetition_penalty = (float)d;
    if (ollama && (r = api_get_int(o, "repeat_last_n", -1, 1 << 30, &x, e)) < 0) return -1;
    if (ollama && r) { /* the penalty's window (0: no penalty, -1: the whole context) */
        p->sp.repetition_last_n = x < 0 ? 0 : (int)x;
        if (x == 0) p->sp.repetition_penalty = 1.0f;
    }
    if ((r = api_get_int(o, "seed", -(1LL << 62), 1LL << 62, &x, e)) < 0) return -1;
    if (r) p->seed = (uint64_t)x;
    if (api_get_stop(o, "stop", p, e) < 0) return -1;
    bool b;
    if ((r = api_get_bool(o, "enable_mtp", &b, e)) < 0) return -1; /* kestrel extension */
    if (r) p->mtp = b;
    if ((r = api_get_bool(o, "speculative", &b, e)) < 0) return -1; /* kestrel extension */
    if (r) p->spec = b;
    /* vLLM / llama-server extension (benchmarks): do not stop at the
     * model's end-of-sequence tokens; stop strings and max_tokens still do */
    if ((r = api_get_bool(o, "ignore_eos", &b, e)) < 0) return -1;
    if (r && b) p->n_eos = 0;
    return 0;
}

static const char *type_names(unsigned t, char *buf, size_t cap) {
    static const struct { unsigned bit; const char *name; } names[] = {
        {API_T_STR, "a string"}, {API_T_NUM, "a number"}, {API_T_BOOL, "a boolean"},
        {API_T_OBJ, "an object"}, {API_T_ARR, "an array"}};
    buf[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (t & names[i].bit) snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? " or " : "", names[i].name);
    return buf;
}

int api_check_fields(json_t *o, const api_field *f, int n, api_err *e) {
    for (int i = 0; i < n; i++) {
        json_t *v = json_object_get(o, f[i].key);
        if (!v || json_is_null(v)) continue;
        unsigned t = json_is_string(v) ? API_T_STR : json_is_number(v) ? API_T_NUM : json_is_boolean(v) ? API_T_BOOL
                     : json_is_object(v) ? API_T_OBJ : API_T_ARR;
        if (!(t & f[i].types)) {
            char want[96];
            return api_fail(e, f[i].key, "'%s': expected %s", f[i].key, type_names(f[i].types, want, sizeof want));
        }
    }
    return 0;
}
