/* tok_internal.h — the tokenizer's internal representation, shared by the
 * files of tok/: hash maps (tok_hash.c), tokenizer.json loading
 * (tok_load.c), normalizers and pre-tokenizers (tok_pretok.c), the BPE merge
 * loop (tok_bpe.c), the encode pipeline with added tokens and post-processor
 * (tok_encode.c), decoders and the streaming detokenizer (tok_decode.c).
 * Not part of the public interface (that is tok.h). */
#ifndef KS_TOK_INTERNAL_H
#define KS_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tok/tok.h"

/* ---- hash maps (tok_hash.c) ------------------------------------------- */

uint64_t tok_hash_bytes(const void *p, size_t len);

/* string -> int32 map, open addressing, linear probing. Keys are borrowed:
 * they must outlive the map (they point into the tokenizer's strings). */
typedef struct tok_smap_slot {
    const char *key; // NULL = empty slot
    uint32_t len;
    uint32_t hash;
    int32_t val;
} tok_smap_slot;
typedef struct {
    tok_smap_slot *slots;
    uint32_t cap; // power of two
    uint32_t n;
} tok_smap;
int tok_smap_init(tok_smap *m, uint32_t expected);
void tok_smap_free(tok_smap *m);
/* Inserts or overwrites; returns 1 if the key was new, 0 if overwritten,
 * negative on allocation failure. */
int tok_smap_put(tok_smap *m, const char *key, uint32_t len, int32_t val);
int32_t tok_smap_get(const tok_smap *m, const char *key, uint32_t len); // -1 if absent

/* u64 -> u64 map (merges: key = left << 32 | right, value = rank << 32 | new_id).
 * The key UINT64_MAX is reserved as "empty". */
typedef struct {
    uint64_t *keys;
    uint64_t *vals;
    uint32_t cap, n;
} tok_pmap;
int tok_pmap_init(tok_pmap *m, uint32_t expected);
void tok_pmap_free(tok_pmap *m);
int tok_pmap_put(tok_pmap *m, uint64_t key, uint64_t val); // 1 new, 0 overwritten, <0 error
bool tok_pmap_get(const tok_pmap *m, uint64_t key, uint64_t *val);

/* ---- growable buffers ---------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
} tok_buf;
int tok_buf_reserve(tok_buf *b, size_t extra);
int tok_buf_add(tok_buf *b, const void *p, size_t n);
void tok_buf_free(tok_buf *b);

typedef struct {
    int32_t *p;
    size_t len, cap;
} tok_ids;
int tok_ids_push(tok_ids *v, int32_t id);

/* ---- UTF-8 helpers (tok_hash.c) -------------------------------------------- */

/* Length of a valid UTF-8 sequence starting at s[0] (1..4), or 0 if s does
 * not start with a complete valid sequence within n bytes. */
int tok_utf8_len(const unsigned char *s, size_t n);
/* Byte offset of the first invalid sequence, or n if the text is valid. */
size_t tok_utf8_validate(const char *s, size_t n);
int tok_utf8_encode(uint32_t cp, char out[4]);
uint32_t tok_utf8_decode(const unsigned char *s, int len);

/* ---- normalizers, pre-tokenizers (tok_pretok.c) ---------------------------- */

enum tok_norm_type {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_STRIP,
    TOK_NORM_STRIP_ACCENTS,
};
typedef struct {
    enum tok_norm_type type;
    char *pat;     // PREPEND: text; REPLACE: literal pattern (when re == NULL)
    uint32_t pat_len;
    char *content; // REPLACE: replacement
    uint32_t content_len;
    pcre2_code *re; // REPLACE with a Regex pattern
    bool left, right; // STRIP
} tok_normalizer;

enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
};
enum tok_pretok_type {
    TOK_PRETOK_SPLIT,     // also Whitespace, WhitespaceSplit, Digits, Punctuation
    TOK_PRETOK_BYTELEVEL,
    TOK_PRETOK_METASPACE,
};
enum tok_prepend_scheme { TOK_PREPEND_ALWAYS, TOK_PREPEND_NEVER, TOK_PREPEND_FIRST };
typedef struct {
    enum tok_pretok_type type;
    /* SPLIT (and BYTELEVEL with use_regex: re is the GPT-2 regex) */
    pcre2_code *re;    // regex pattern, or NULL when lit is used
    char *lit;         // literal pattern
    uint32_t lit_len;
    enum tok_split_behavior behavior;
    bool invert;
    /* BYTELEVEL */
    bool add_prefix_space;
    /* METASPACE */
    char repl[8]; // replacement character, UTF-8
    uint32_t repl_len;
    enum tok_prepend_scheme scheme;
    bool split;
} tok_pretok;

/* A list of pieces: strings stored back to back in `buf`. */
typedef struct {
    uint32_t off, len;
    bool at_start; // piece begins at offset 0 of the original text
} tok_piece;
typedef struct {
    tok_buf buf;
    tok_piece *p;
    size_t n, cap;
} tok_pieces;
int tok_pieces_add(tok_pieces *l, const char *s, size_t len, bool at_start);
void tok_pieces_clear(tok_pieces *l);
void tok_pieces_free(tok_pieces *l);

/* Per-call scratch for encode (so the tokenizer itself stays read-only and
 * usable from several threads at once). */
typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    tok_pieces a, b;       // pre-tokenizer double buffer
    tok_buf norm, tmp;     // normalizer buffers
    tok_buf ptw, ptm;      // pre-tokenizer buffers
    struct tok_span { uint32_t start, end; bool match; } *spans; // split matches
    size_t spans_cap;
    /* BPE */
    struct tok_sym *sym;
    size_t sym_cap;
    uint64_t *heap;
    size_t heap_cap;
    tok_buf word;
} tok_scratch;

/* Applies all normalizers to s (NUL not required); result in sc->norm. */
int tok_normalize(const tokenizer *t, tok_scratch *sc, const char *s, size_t len);
/* Runs the pre-tokenizers on one segment; result pieces in sc->a. */
int tok_pretokenize(const tokenizer *t, tok_scratch *sc, const char *s, size_t len,
                    bool at_start);
/* Regex helpers used by normalizers/pre-tokenizers. */
pcre2_code *tok_regex_compile(const char *pat, size_t len, char *errbuf, size_t errlen);
extern const char TOK_GPT2_REGEX[];
void tok_normalizer_free(tok_normalizer *n);
void tok_pretok_free(tok_pretok *p);

/* ---- decoders (tok_decode.c) ------------------------------------------------ */

enum tok_dec_type {
    TOK_DEC_BYTELEVEL,
    TOK_DEC_METASPACE,
    TOK_DEC_REPLACE,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
};
typedef struct {
    enum tok_dec_type type;
    char *pat;    // REPLACE pattern; METASPACE replacement char
    uint32_t pat_len;
    char *content; // REPLACE content
    uint32_t content_len;
    uint32_t strip_char; // STRIP content (a code point)
    int start, stop;     // STRIP counts
    enum tok_prepend_scheme scheme; // METASPACE
} tok_decoder;

/* ---- post-processors ---------------------------------------------------------- */

enum tok_post_type { TOK_POST_TEMPLATE, TOK_POST_BYTELEVEL, TOK_POST_ROBERTA };
typedef struct {
    enum tok_post_type type;
    /* TEMPLATE: single template as a list of items; id -1 = the sequence A,
     * otherwise a special token id (a special token may expand to several ids). */
    int32_t *ids;
    int n_ids;
} tok_post;

/* ---- the tokenizer ---------------------------------------------------------- */

typedef struct {
    char *content;
    uint32_t len;
    int32_t id;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;

/* Byte trie over added-token contents (leftmost-longest matching). Node 0 is
 * the root; children are found through `edges` (key = node << 8 | byte). */
typedef struct {
    tok_pmap edges;   // (node << 8 | byte) -> child node
    int32_t *term;    // node -> index into tokenizer.added, -1 if none
    uint32_t n_nodes, cap_nodes;
} tok_trie;

struct tokenizer {
    char *path; // tokenizer.json path, for messages
    /* model (BPE) */
    char **piece;      // id -> token string (NUL-terminated), NULL when id unused
    uint32_t *piece_len;
    int n_vocab;       // max id + 1 (vocab and added tokens)
    char *vocab_strs;  // the vocab's strings, NUL-separated (piece[] points here)
    tok_smap vocab;    // model vocab: string -> id
    tok_pmap merges;   // (left, right) -> (rank, merged id)
    int32_t unk_id;    // -1 when none
    bool byte_fallback, fuse_unk, ignore_merges;
    char *cont_prefix; // continuing_subword_prefix, NULL when none
    char *eow_suffix;  // end_of_word_suffix, NULL when none
    int32_t byte_id[256]; // byte_fallback: "<0xNN>" ids, -1 when absent
    /* added tokens */
    tok_added *added;
    int n_added;
    tok_smap added_map; // content -> id
    bool *is_special;   // id -> special added token (n_vocab entries)
    bool *is_added;     // id -> added token
    tok_trie trie_raw, trie_norm; // normalized=false / normalized=true tokens
    /* pipeline */
    tok_normalizer *norm;
    int n_norm;
    tok_pretok *pretok;
    int n_pretok;
    tok_decoder *dec;
    int n_dec;
    bool has_decoder;
    tok_post *post;
    int n_post;
    /* tokenizer_config.json fallback when no post-processor adds specials */
    int32_t cfg_bos, cfg_eos; // -1 when not added
};

/* tok_bpe.c: BPE of one pre-token (after pre-tokenization), ids appended. */
int tok_bpe_word(const tokenizer *t, tok_scratch *sc, const char *s, size_t len,
                 tok_ids *out);
void tok_scratch_free(tok_scratch *sc);

/* tok_encode.c: added-token trie */
int tok_trie_add(tok_trie *tr, const char *s, uint32_t len, int32_t idx);
void tok_trie_free(tok_trie *tr);

/* byte-level alphabet (GPT-2 bytes_to_unicode) */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); // -1 if cp is not in the alphabet

#endif
