/* tok.h — Hugging Face tokenizer.json tokenizers (BPE): byte-level (Qwen,
 * Llama 3, GPT-2) and SentencePiece-style (Llama 2, Gemma), added/special
 * tokens matched before the model, NFC normalizer, post-processor BOS;
 * decoding and a streaming detokenizer that never splits a UTF-8 character.
 *
 * Ownership: tokenizer is opaque, tok_free() releases it. Arrays and strings
 * returned through out-parameters are malloc'd and owned by the caller.
 * A loaded tokenizer is read-only: tok_encode/tok_decode/streams may be used
 * from several threads at once (each call has its own scratch). */
#ifndef KS_TOK_H
#define KS_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* Loads tokenizer.json. `path` is the file or a model directory holding it;
 * tokenizer_config.json beside it is read when present (its add_bos_token /
 * add_eos_token apply only when tokenizer.json has no post-processor that
 * adds special tokens). Errors name the file and JSON field. */
int tok_load(tokenizer **out, const char *path);
void tok_free(tokenizer *t);

/* add_special: apply the post-processor's special tokens (e.g. BOS).
 * `text` must be valid UTF-8 (else KS_EINVAL); added/special tokens written
 * in the text are always matched. *ids is non-NULL on success. */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, int *n_ids);
/* skip_special: drop special added tokens from the text. NUL-terminated.
 * An id outside the vocabulary is KS_EINVAL. */
int tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special,
               char **out, size_t *out_len);

/* The bytes token id adds to a decoded text in its middle (a byte-level
 * token holding part of a UTF-8 character gives those raw bytes; Metaspace's
 * first-token space and Strip are left out: they act on a text's ends).
 * Special tokens give their content. *out is malloc'd, NUL-terminated. */
int tok_id_bytes(const tokenizer *t, int id, char **out, size_t *out_len);
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
 * pointer is owned by the stream and valid until the next call; NULL only
 * when out of memory. Ids outside the vocabulary are skipped. The chunks of
 * push*N + flush concatenate to exactly tok_decode() of the same ids; where
 * the decoder needs lookahead to be exact (a run of <0xNN> byte-fallback
 * tokens, which HF turns into U+FFFD per byte if the run is not valid UTF-8;
 * trailing characters a Strip decoder may remove) the text is held until the
 * next token decides it. */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tokenizer *t, bool skip_special);
const char *tok_stream_push(tok_stream *s, int32_t id, size_t *len);
const char *tok_stream_flush(tok_stream *s, size_t *len);
void tok_stream_free(tok_stream *s);

#endif
