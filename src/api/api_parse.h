/* api_parse.h — typed access to request JSON with errors that name the
 * parameter: each getter returns 0 when the field is absent (out untouched),
 * 1 when present and valid, -1 when present but wrong (err filled). */
#ifndef KS_API_PARSE_H
#define KS_API_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"
#include "engine/engine.h"

typedef struct {
    char msg[512];
    const char *param;  /* static: the offending parameter */
} api_err;

/* fills e (message from fmt, the parameter param) and returns -1 */
int api_fail(api_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* v's string, or def when v is not a string */
const char *api_str_or(json_t *v, const char *def);

/* The text of an array of content parts appended to *out, with sep (NULL:
 * none) before each part after the first once *out holds text. Each part's
 * "type" must be one of types (NULL-terminated); a "refusal" part's text is
 * its "refusal" field. -1 when every part was such a text part, else the
 * index of the first that was not (*out then freed). */
long api_join_text_parts(json_t *parts, const char *const *types, const char *sep, strbuf *out);

int api_get_num(json_t *o, const char *key, double lo, double hi, double *out, api_err *e);
int api_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, api_err *e);
int api_get_bool(json_t *o, const char *key, bool *out, api_err *e);
int api_get_str(json_t *o, const char *key, const char **out, api_err *e);
/* "stop": a string or an array of strings (at most ENGINE_MAX_STOP); the
 * strings stay owned by o. */
int api_get_stop(json_t *o, const char *key, engine_params *p, api_err *e);
/* OpenAI's "logit_bias": an object of token-id strings to biases in [-100,
 * 100] (at most ENGINE_MAX_LOGIT_BIAS; the ids are checked against the
 * vocabulary when the request is submitted). 0 absent, 1 read, -1 bad. */
int api_get_logit_bias(json_t *o, engine_params *p, api_err *e);
/* Output constraints (sample/json_constraint.h). OpenAI's response_format
 * at o[key]: {"type": "text"} none, {"type": "json_object"} any object,
 * {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} that
 * schema — or, with `flat` (the Responses API's text.format), the
 * json_schema fields beside "type". Ollama's "format": "json" (any object)
 * or a schema object. 0 none, 1 *out compiled (the caller jc_free()s it),
 * -1 bad (the schema's refusal in err). */
int api_get_response_format(json_t *o, const char *key, bool flat, json_constraint **out, api_err *e);
int api_get_ollama_format(json_t *o, json_constraint **out, api_err *e);
/* The request's one output constraint, by precedence:
 * 1. a forced tool call (`forced`: the function named; `required`: any of
 *    them — tool_choice "required" / a named function, Anthropic's "any" /
 *    "tool"): the answer is one {"name": ..., "arguments": ...} object,
 *    which the output parser turns into a tool call on every surface;
 * 2. the response format already compiled into *fmt;
 * 3. tools marked "strict": true (use_tools: tool_choice auto): each
 *    <tool_call> the model opens (Hermes / Qwen syntax) is a call of one of
 *    the tools, strict tools' arguments per their schemas (JC_CALLS).
 * tools in any of the three shapes (Chat Completions {"function": {...}},
 * Responses' flat one, Anthropic's with "input_schema"). Replaces *fmt as
 * needed (the caller jc_free()s it), sets p->constraint and
 * p->constraint_calls. 0, or -1 (param "tool_choice" or "tools": no such
 * tool, or a schema that cannot be enforced). */
int api_tool_constraint(json_t *tools, const char *forced, bool required, bool use_tools, json_constraint **fmt,
                        engine_params *p, api_err *e);
/* Sampling fields shared by the surfaces: temperature, top_p, top_k, min_p,
 * presence/frequency penalty, repetition_penalty (Ollama: repeat_penalty,
 * and repeat_last_n, its window),
 * seed, stop. 0 or -1 (err filled). */
int api_get_sampling(json_t *o, engine_params *p, bool ollama, api_err *e);
/* Type checks of fields a surface accepts but does not otherwise read (so
 * that a wrong type is a 400, as the original APIs answer). */
enum { API_T_STR = 1, API_T_NUM = 2, API_T_BOOL = 4, API_T_OBJ = 8, API_T_ARR = 16 };
typedef struct {
    const char *key;
    unsigned types;
} api_field;
int api_check_fields(json_t *o, const api_field *f, int n, api_err *e);
/* Parses the body; NULL with e filled ("invalid JSON at line:col ..." or "the
 * request body must be a JSON object"). */
json_t *api_parse_body(const char *body, size_t len, api_err *e);

#endif
