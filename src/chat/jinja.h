/* jinja.h — a Jinja2 interpreter for the subset chat templates use.
 *
 * Semantics follow jinja2 3.1 as transformers renders chat templates:
 * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
 * loopcontrols, raise_exception(msg), strftime_now(fmt) and transformers'
 * tojson (json.dumps, ensure_ascii=False, no HTML escaping). Values print as
 * Python's str() would (True, None, ['a', 1], {'k': 'v'}).
 *
 * Templates are hostile input: parse and render never crash; nesting depth,
 * macro recursion, loop iterations, memory and output size are limited and
 * exceeding a limit is an error. Errors return a negative status with a
 * message (err_msg()) naming the template line. */
#ifndef KS_JINJA_H
#define KS_JINJA_H

#include <jansson.h>
#include <stddef.h>

typedef struct jinja_template jinja_template;

/* Parses src (len bytes, need not be NUL-terminated). On success *out owns
 * the template (free with jinja_free); syntax errors name line:col. */
int jinja_parse(jinja_template **out, const char *src, size_t len);

/* Renders t with the variables of ctx (a JSON object, may be NULL). On
 * success *out is a malloc'd NUL-terminated string (caller frees) and
 * *out_len (may be NULL) its length. A template's raise_exception(msg)
 * fails with a message containing "TemplateError: msg". The template may be
 * rendered from several threads at once (it is not modified). */
int jinja_render(const jinja_template *t, const json_t *ctx, char **out, size_t *out_len);

void jinja_free(jinja_template *t);

#endif
