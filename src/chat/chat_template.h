/* chat_template.h — applies a model's chat template (tokenizer_config.json
 * "chat_template", or chat_template.jinja) to OpenAI-style messages, the way
 * transformers' apply_chat_template(tokenize=False) does: the template sees
 * messages, tools (None when absent), documents (None),
 * add_generation_prompt, bos_token / eos_token, and any extra kwargs
 * (e.g. enable_thinking). */
#ifndef KS_CHAT_TEMPLATE_H
#define KS_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>

typedef struct chat_template chat_template;

/* Loads <model_dir>/chat_template.jinja if present, else "chat_template" of
 * <model_dir>/tokenizer_config.json (a string, or a list of {name, template}
 * from which "default" is used); bos_token / eos_token may be strings,
 * {"content": ...} objects or null. */
int chat_template_load(chat_template **out, const char *model_dir);

/* bos / eos may be NULL (then the template sees them undefined). */
int chat_template_from_string(chat_template **out, const char *tmpl, const char *bos, const char *eos);

/* messages: JSON array of message objects; tools: JSON array or NULL;
 * extra: JSON object of extra template variables or NULL. On success *out is
 * a malloc'd NUL-terminated prompt (caller frees). Errors (bad input, the
 * template's raise_exception, limits) return negative with err_msg() set. */
int chat_template_apply(const chat_template *ct, const json_t *messages, const json_t *tools,
                        bool add_generation_prompt, const json_t *extra, char **out);

void chat_template_free(chat_template *ct);

#endif
