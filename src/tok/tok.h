/* tok.h — Hugging Face tokenizer.json tokenizers (BPE): byte-level (Qwen,
 * Llama 3, GPT-2) and SentencePiece-style (Llama 2, Gemma), added/special
 * tokens matched before the model, NFC normalizer, post-processor BOS;
 * decoding and a streaming detokenizer that never splits a UTF-8 character.
 *
 * Ownership: tokenizer is opaque, tok_free() releases it. Arrays and strings
 * returned through out-parameters are malloc'd and owned by the caller. */
#ifndef KS_TOK_H
#define KS_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* Loads tokenizer.json; `config_path` (tokenizer_config.json) may be NULL.
 * `path` may also be a model directory holding both files. */
int tok_load(tokenizer **out, const char *path);
void tok_free(tokenizer *t);

/* add_special: apply the post-processor's special tokens (e.g. BOS). */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, int *n_ids);
/* skip_special: drop special added tokens from the text. NUL-terminated. */
int tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special,
               char **out, size_t *out_len);

int tok_vocab_size(const tokenizer *t);
/* id of a token's exact content (vocab or added token), -1 when none. */
int tok_piece_id(const tokenizer *t, const char *piece);
/* Content of token id (raw vocab string, e.g. "Ġhello"), NULL if out of range. */
const char *tok_id_piece(const tokenizer *t, int id);
bool tok_is_special(const tokenizer *t, int id);

/* Streaming detokenizer: push ids one at a time, get back the text that is
 * now final (complete UTF-8 characters only; bytes of a partial character
 * are held until completed). tok_stream_flush() returns what is left (an
 * incomplete tail becomes U+FFFD, as a full decode would). The returned
 * pointer is owned by the stream and valid until the next call. */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tokenizer *t, bool skip_special);
const char *tok_stream_push(tok_stream *s, int32_t id, size_t *len);
const char *tok_stream_flush(tok_stream *s, size_t *len);
void tok_stream_free(tok_stream *s);

#endif
