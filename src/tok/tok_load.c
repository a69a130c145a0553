/* tok_load.c — reads a Hugging Face tokenizer.json (and tokenizer_config.json
 * beside it) into a tokenizer: BPE vocab and merges, added tokens, the
 * normalizer / pre-tokenizer / decoder / post-processor chains (Sequences
 * flattened). Every malformed or unsupported field is reported as
 * "<file>: <json path>: <what is wrong>". Also the small lookup functions
 * of tok.h and tok_free(). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "tok/tok_internal.h"

#define MAX_VOCAB (1 << 24)
#define MAX_CHAIN 64

typedef struct {
    tokenizer *t;
    const char *file; // for messages
} loader;

static char *xstrndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* JSON accessors: return false and set an error when the field exists with
 * the wrong type; missing fields give the default. */
static int get_bool(loader *ld, json_t *o, const char *where, const char *key, bool def, bool *out) {
    json_t *v = json_object_get(o, key);
    *out = def;
    if (!v || json_is_null(v)) return KS_OK;
    if (!json_is_boolean(v)) return err_set(KS_EFORMAT, "%s: %s.%s: expected boolean", ld->file, where, key);
    *out = json_is_true(v);
    return KS_OK;
}

static int get_str(loader *ld, json_t *o, const char *where, const char *key, bool required,
                   const char **out, size_t *len) {
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (len) *len = 0;
    if (!v || json_is_null(v)) {
        if (required) return err_set(KS_EFORMAT, "%s: %s.%s: missing", ld->file, where, key);
        return KS_OK;
    }
    if (!json_is_string(v)) return err_set(KS_EFORMAT, "%s: %s.%s: expected string", ld->file, where, key);
    *out = json_string_value(v);
    if (len) *len = json_string_length(v);
    return KS_OK;
}

static int get_int(loader *ld, json_t *o, const char *where, const char *key, long long def,
                   long long lo, long long hi, long long *out) {
    json_t *v = json_object_get(o, key);
    *out = def;
    if (!v || json_is_null(v)) return KS_OK;
    if (!json_is_integer(v)) return err_set(KS_EFORMAT, "%s: %s.%s: expected integer", ld->file, where, key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return err_set(KS_EFORMAT, "%s: %s.%s: %lld out of range [%lld, %lld]", ld->file, where, key, x, lo, hi);
    *out = x;
    return KS_OK;
}

/* pattern: {"String": "..."} or {"Regex": "..."} */
static int get_pattern(loader *ld, json_t *o, const char *where, char **lit, uint32_t *lit_len,
                       pcre2_code **re) {
    json_t *p = json_object_get(o, "pattern");
    *lit = NULL;
    *re = NULL;
    *lit_len = 0;
    if (!json_is_object(p)) return err_set(KS_EFORMAT, "%s: %s.pattern: expected object", ld->file, where);
    json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    if (json_is_string(s)) {
        *lit = xstrndup(json_string_value(s), json_string_length(s));
        *lit_len = (uint32_t)json_string_length(s);
        if (!*lit) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
        return KS_OK;
    }
    if (json_is_string(r)) {
        char msg[300];
        *re = tok_regex_compile(json_string_value(r), json_string_length(r), msg, sizeof msg);
        if (!*re) return err_set(KS_EFORMAT, "%s: %s.pattern.Regex: %s", ld->file, where, msg);
        return KS_OK;
    }
    return err_set(KS_EFORMAT, "%s: %s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", ld->file, where);
}

static const char *get_type(json_t *o) {
    json_t *v = json_object_get(o, "type");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- normalizers --------------------------------------------------------------- */

/* Every component node: an object with a "type" string. */
static int node_type(loader *ld, json_t *o, const char *where, const char **type) {
    if (!json_is_object(o)) return err_set(KS_EFORMAT, "%s: %s: expected object", ld->file, where);
    *type = get_type(o);
    if (!*type) return err_set(KS_EFORMAT, "%s: %s.type: missing", ld->file, where);
    return KS_OK;
}

typedef int (*node_parser)(loader *ld, json_t *o, const char *where, int depth);

/* {"type": "Sequence", key: [...]}: each element through fn, in order. */
static int parse_sequence(loader *ld, json_t *o, const char *where, int depth, const char *key, node_parser fn) {
    json_t *arr = json_object_get(o, key);
    if (!json_is_array(arr)) return err_set(KS_EFORMAT, "%s: %s.%s: expected array", ld->file, where, key);
    if (depth > 8) return err_set(KS_EFORMAT, "%s: %s: Sequence nested too deeply", ld->file, where);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char w[256];
        snprintf(w, sizeof w, "%s.%s[%zu]", where, key, i);
        int rc = fn(ld, json_array_get(arr, i), w, depth + 1);
        if (rc < 0) return rc;
    }
    return KS_OK;
}

static int parse_normalizer(loader *ld, json_t *o, const char *where, int depth) {
    tokenizer *t = ld->t;
    int rc;
    const char *type;
    if ((rc = node_type(ld, o, where, &type)) < 0) return rc;
    if (!strcmp(type, "Sequence")) return parse_sequence(ld, o, where, depth, "normalizers", parse_normalizer);
    if (t->n_norm >= MAX_CHAIN) return err_set(KS_EFORMAT, "%s: %s: too many normalizers", ld->file, where);
    tok_normalizer *n = &t->norm[t->n_norm];
    memset(n, 0, sizeof *n);
    if (!strcmp(type, "NFC")) n->type = TOK_NORM_NFC;
    else if (!strcmp(type, "NFD")) n->type = TOK_NORM_NFD;
    else if (!strcmp(type, "NFKC")) n->type = TOK_NORM_NFKC;
    else if (!strcmp(type, "NFKD")) n->type = TOK_NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) n->type = TOK_NORM_LOWERCASE;
    else if (!strcmp(type, "StripAccents")) n->type = TOK_NORM_STRIP_ACCENTS;
    else if (!strcmp(type, "Strip")) {
        n->type = TOK_NORM_STRIP;
        if ((rc = get_bool(ld, o, where, "strip_left", true, &n->left)) < 0 ||
            (rc = get_bool(ld, o, where, "strip_right", true, &n->right)) < 0)
            return rc;
    } else if (!strcmp(type, "Prepend")) {
        const char *s;
        size_t len;
        n->type = TOK_NORM_PREPEND;
        if ((rc = get_str(ld, o, where, "prepend", true, &s, &len)) < 0) return rc;
        if (!(n->pat = xstrndup(s, len))) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
        n->pat_len = (uint32_t)len;
    } else if (!strcmp(type, "Replace")) {
        const char *s;
        size_t len;
        n->type = TOK_NORM_REPLACE;
        t->n_norm++; // owned from here, freed by tok_free
        if ((rc = get_pattern(ld, o, where, &n->pat, &n->pat_len, &n->re)) < 0) return rc;
        if ((rc = get_str(ld, o, where, "content", true, &s, &len)) < 0) return rc;
        if (!(n->content = xstrndup(s, len))) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
        n->content_len = (uint32_t)len;
        return KS_OK;
    } else
        return err_set(KS_EUNSUPPORTED, "%s: %s.type: unsupported normalizer \"%s\"", ld->file, where, type);
    t->n_norm++;
    return KS_OK;
}

/* ---- pre-tokenizers ------------------------------------------------------------------ */

static int parse_behavior(loader *ld, json_t *o, const char *where, enum tok_split_behavior def,
                          enum tok_split_behavior *out) {
    const char *b;
    int rc = get_str(ld, o, where, "behavior", false, &b, NULL);
    *out = def;
    if (rc < 0 || !b) return rc;
    if (!strcmp(b, "Removed")) *out = TOK_SPLIT_REMOVED;
    else if (!strcmp(b, "Isolated")) *out = TOK_SPLIT_ISOLATED;
    else if (!strcmp(b, "MergedWithPrevious")) *out = TOK_SPLIT_MERGED_WITH_PREVIOUS;
    else if (!strcmp(b, "MergedWithNext")) *out = TOK_SPLIT_MERGED_WITH_NEXT;
    else if (!strcmp(b, "Contiguous")) *out = TOK_SPLIT_CONTIGUOUS;
    else return err_set(KS_EFORMAT, "%s: %s.behavior: unknown value \"%s\"", ld->file, where, b);
    return KS_OK;
}

static int parse_scheme(loader *ld, json_t *o, const char *where, enum tok_prepend_scheme *out) {
    const char *s;
    bool aps;
    int rc;
    *out = TOK_PREPEND_ALWAYS;
    if ((rc = get_str(ld, o, where, "prepend_scheme", false, &s, NULL)) < 0) return rc;
    if (s) {
        if (!strcmp(s, "always")) *out = TOK_PREPEND_ALWAYS;
        else if (!strcmp(s, "never")) *out = TOK_PREPEND_NEVER;
        else if (!strcmp(s, "first")) *out = TOK_PREPEND_FIRST;
        else return err_set(KS_EFORMAT, "%s: %s.prepend_scheme: unknown value \"%s\"", ld->file, where, s);
        return KS_OK;
    }
    if ((rc = get_bool(ld, o, where, "add_prefix_space", true, &aps)) < 0) return rc; // legacy form
    *out = aps ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    return KS_OK;
}

static int get_replacement(loader *ld, json_t *o, const char *where, char *buf, uint32_t *len) {
    const char *s;
    size_t l;
    int rc = get_str(ld, o, where, "replacement", false, &s, &l);
    if (rc < 0) return rc;
    if (!s) s = "\xE2\x96\x81", l = 3; // U+2581
    if (l == 0 || l > 4 || tok_utf8_len((const unsigned char *)s, l) != (int)l)
        return err_set(KS_EFORMAT, "%s: %s.replacement: expected one character", ld->file, where);
    memcpy(buf, s, l);
    *len = (uint32_t)l;
    return KS_OK;
}

static int regex_into(loader *ld, tok_pretok *p, const char *where, const char *pat) {
    char msg[300];
    p->re = tok_regex_compile(pat, strlen(pat), msg, sizeof msg);
    if (!p->re) return err_set(KS_EFORMAT, "%s: %s: regex: %s", ld->file, where, msg);
    return KS_OK;
}

static int parse_pretok(loader *ld, json_t *o, const char *where, int depth) {
    tokenizer *t = ld->t;
    int rc;
    const char *type;
    if ((rc = node_type(ld, o, where, &type)) < 0) return rc;
    if (!strcmp(type, "Sequence")) return parse_sequence(ld, o, where, depth, "pretokenizers", parse_pretok);
    if (t->n_pretok >= MAX_CHAIN) return err_set(KS_EFORMAT, "%s: %s: too many pre-tokenizers", ld->file, where);
    tok_pretok *p = &t->pretok[t->n_pretok++]; // owned from here, freed by tok_free
    memset(p, 0, sizeof *p);
    p->type = TOK_PRETOK_SPLIT;
    p->behavior = TOK_SPLIT_ISOLATED;
    if (!strcmp(type, "Split")) {
        if ((rc = get_pattern(ld, o, where, &p->lit, &p->lit_len, &p->re)) < 0) return rc;
        if ((rc = parse_behavior(ld, o, where, TOK_SPLIT_ISOLATED, &p->behavior)) < 0) return rc;
        return get_bool(ld, o, where, "invert", false, &p->invert);
    }
    if (!strcmp(type, "ByteLevel")) {
        bool use_regex;
        p->type = TOK_PRETOK_BYTELEVEL;
        if ((rc = get_bool(ld, o, where, "add_prefix_space", true, &p->add_prefix_space)) < 0 ||
            (rc = get_bool(ld, o, where, "use_regex", true, &use_regex)) < 0)
            return rc;
        return use_regex ? regex_into(ld, p, where, TOK_GPT2_REGEX) : KS_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        p->type = TOK_PRETOK_METASPACE;
        if ((rc = get_replacement(ld, o, where, p->repl, &p->repl_len)) < 0) return rc;
        if ((rc = parse_scheme(ld, o, where, &p->scheme)) < 0) return rc;
        return get_bool(ld, o, where, "split", true, &p->split);
    }
    if (!strcmp(type, "Whitespace")) { // keep \w+ and [^\w\s]+ runs
        p->behavior = TOK_SPLIT_REMOVED;
        p->invert = true;
        return regex_into(ld, p, where, "\\w+|[^\\w\\s]+");
    }
    if (!strcmp(type, "WhitespaceSplit")) {
        p->behavior = TOK_SPLIT_REMOVED;
        return regex_into(ld, p, where, "\\s+");
    }
    if (!strcmp(type, "Digits")) {
        bool individual;
        if ((rc = get_bool(ld, o, where, "individual_digits", false, &individual)) < 0) return rc;
        return regex_into(ld, p, where, individual ? "\\p{N}" : "\\p{N}+");
    }
    if (!strcmp(type, "Punctuation")) {
        if ((rc = parse_behavior(ld, o, where, TOK_SPLIT_ISOLATED, &p->behavior)) < 0) return rc;
        return regex_into(ld, p, where, "\\p{P}|[!-/:-@\\[-`{-~]");
    }
    t->n_pretok--;
    return err_set(KS_EUNSUPPORTED, "%s: %s.type: unsupported pre-tokenizer \"%s\"", ld->file, where, type);
}

/* ---- decoders ---------------------------------------------------------------------------- */

static int parse_decoder(loader *ld, json_t *o, const char *where, int depth) {
    tokenizer *t = ld->t;
    int rc;
    const char *type;
    if ((rc = node_type(ld, o, where, &type)) < 0) return rc;
    if (!strcmp(type, "Sequence")) return parse_sequence(ld, o, where, depth, "decoders", parse_decoder);
    if (t->n_dec >= MAX_CHAIN) return err_set(KS_EFORMAT, "%s: %s: too many decoders", ld->file, where);
    tok_decoder *d = &t->dec[t->n_dec++]; // owned from here
    memset(d, 0, sizeof *d);
    if (!strcmp(type, "ByteLevel")) d->type = TOK_DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) d->type = TOK_DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) d->type = TOK_DEC_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        char r[8];
        uint32_t rl;
        d->type = TOK_DEC_METASPACE;
        if ((rc = get_replacement(ld, o, where, r, &rl)) < 0) return rc;
        if (!(d->pat = xstrndup(r, rl))) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
        d->pat_len = rl;
        return parse_scheme(ld, o, where, &d->scheme);
    } else if (!strcmp(type, "Replace")) {
        pcre2_code *re;
        const char *s;
        size_t len;
        d->type = TOK_DEC_REPLACE;
        if ((rc = get_pattern(ld, o, where, &d->pat, &d->pat_len, &re)) < 0) return rc;
        if (re) {
            pcre2_code_free(re);
            return err_set(KS_EUNSUPPORTED, "%s: %s.pattern: Regex patterns in the Replace decoder are not supported",
                           ld->file, where);
        }
        if ((rc = get_str(ld, o, where, "content", true, &s, &len)) < 0) return rc;
        if (!(d->content = xstrndup(s, len))) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
        d->content_len = (uint32_t)len;
    } else if (!strcmp(type, "Strip")) {
        const char *s;
        size_t len;
        long long a, b;
        d->type = TOK_DEC_STRIP;
        if ((rc = get_str(ld, o, where, "content", true, &s, &len)) < 0) return rc;
        int l = tok_utf8_len((const unsigned char *)s, len);
        if (!l || (size_t)l != len)
            return err_set(KS_EFORMAT, "%s: %s.content: expected one character", ld->file, where);
        d->strip_char = tok_utf8_decode((const unsigned char *)s, l);
        if ((rc = get_int(ld, o, where, "start", 0, 0, 1 << 20, &a)) < 0 ||
            (rc = get_int(ld, o, where, "stop", 0, 0, 1 << 20, &b)) < 0)
            return rc;
        d->start = (int)a;
        d->stop = (int)b;
    } else {
        t->n_dec--;
        return err_set(KS_EUNSUPPORTED, "%s: %s.type: unsupported decoder \"%s\"", ld->file, where, type);
    }
    return KS_OK;
}

/* ---- post-processors ------------------------------------------------------------------------- */

static int post_add(loader *ld, tok_post *p, int32_t id) {
    int32_t *n = realloc(p->ids, (size_t)(p->n_ids + 1) * sizeof *n);
    if (!n) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
    p->ids = n;
    p->ids[p->n_ids++] = id;
    return KS_OK;
}

/* "cls": ["<s>", 0] */
static int roberta_tok(loader *ld, json_t *o, const char *where, const char *key, int32_t *id) {
    json_t *v = json_object_get(o, key);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 1)))
        return err_set(KS_EFORMAT, "%s: %s.%s: expected [token, id]", ld->file, where, key);
    long long x = json_integer_value(json_array_get(v, 1));
    if (x < 0 || x >= ld->t->n_vocab)
        return err_set(KS_EFORMAT, "%s: %s.%s: id %lld out of range", ld->file, where, key, x);
    *id = (int32_t)x;
    return KS_OK;
}

static int parse_post(loader *ld, json_t *o, const char *where, int depth) {
    tokenizer *t = ld->t;
    int rc;
    const char *type;
    if ((rc = node_type(ld, o, where, &type)) < 0) return rc;
    if (!strcmp(type, "Sequence")) return parse_sequence(ld, o, where, depth, "processors", parse_post);
    if (t->n_post >= MAX_CHAIN) return err_set(KS_EFORMAT, "%s: %s: too many post-processors", ld->file, where);
    tok_post *p = &t->post[t->n_post++];
    memset(p, 0, sizeof *p);
    if (!strcmp(type, "ByteLevel")) {
        p->type = TOK_POST_BYTELEVEL;
        return KS_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        int32_t cls, sep;
        p->type = TOK_POST_ROBERTA;
        if ((rc = roberta_tok(ld, o, where, "cls", &cls)) < 0 || (rc = roberta_tok(ld, o, where, "sep", &sep)) < 0)
            return rc;
        if ((rc = post_add(ld, p, cls)) < 0 || (rc = post_add(ld, p, -1)) < 0) return rc;
        return post_add(ld, p, sep);
    }
    if (!strcmp(type, "TemplateProcessing")) {
        p->type = TOK_POST_TEMPLATE;
        json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens");
        if (!json_is_array(single)) return err_set(KS_EFORMAT, "%s: %s.single: expected array", ld->file, where);
        if (specials && !json_is_object(specials))
            return err_set(KS_EFORMAT, "%s: %s.special_tokens: expected object", ld->file, where);
        for (size_t i = 0; i < json_array_size(single); i++) {
            json_t *it = json_array_get(single, i), *st = json_object_get(it, "SpecialToken"),
                   *sq = json_object_get(it, "Sequence");
            if (json_is_object(sq)) {
                const char *sid = json_string_value(json_object_get(sq, "id"));
                if (!sid || strcmp(sid, "A"))
                    return err_set(KS_EFORMAT, "%s: %s.single[%zu].Sequence.id: expected \"A\"", ld->file, where, i);
                if ((rc = post_add(ld, p, -1)) < 0) return rc;
            } else if (json_is_object(st)) {
                const char *name = json_string_value(json_object_get(st, "id"));
                json_t *def = name ? json_object_get(specials, name) : NULL;
                json_t *ids = json_object_get(def, "ids");
                if (!name || !json_is_array(ids))
                    return err_set(KS_EFORMAT, "%s: %s.single[%zu].SpecialToken: \"%s\" not in special_tokens",
                                   ld->file, where, i, name ? name : "(no id)");
                for (size_t k = 0; k < json_array_size(ids); k++) {
                    json_t *x = json_array_get(ids, k);
                    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= t->n_vocab)
                        return err_set(KS_EFORMAT, "%s: %s.special_tokens.%s.ids[%zu]: expected an id below %d",
                                       ld->file, where, name, k, t->n_vocab);
                    if ((rc = post_add(ld, p, (int32_t)json_integer_value(x))) < 0) return rc;
                }
            } else
                return err_set(KS_EFORMAT, "%s: %s.single[%zu]: expected SpecialToken or Sequence", ld->file, where, i);
        }
        return KS_OK;
    }
    t->n_post--;
    return err_set(KS_EUNSUPPORTED, "%s: %s.type: unsupported post-processor \"%s\"", ld->file, where, type);
}

/* ---- model ------------------------------------------------------------------------------------- */

static int parse_added(loader *ld, json_t *arr, int *max_id) {
    tokenizer *t = ld->t;
    if (!arr || json_is_null(arr)) return KS_OK;
    if (!json_is_array(arr)) return err_set(KS_EFORMAT, "%s: added_tokens: expected array", ld->file);
    size_t n = json_array_size(arr);
    if (n > MAX_VOCAB) return err_set(KS_EFORMAT, "%s: added_tokens: too many (%zu)", ld->file, n);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        char w[64];
        const char *s;
        size_t len;
        long long id;
        int rc;
        snprintf(w, sizeof w, "added_tokens[%zu]", i);
        if (!json_is_object(o)) return err_set(KS_EFORMAT, "%s: %s: expected object", ld->file, w);
        tok_added *a = &t->added[t->n_added];
        if (!json_object_get(o, "id")) return err_set(KS_EFORMAT, "%s: %s.id: missing", ld->file, w);
        if ((rc = get_int(ld, o, w, "id", 0, 0, MAX_VOCAB - 1, &id)) < 0 ||
            (rc = get_str(ld, o, w, "content", true, &s, &len)) < 0 ||
            (rc = get_bool(ld, o, w, "special", false, &a->special)) < 0 ||
            (rc = get_bool(ld, o, w, "lstrip", false, &a->lstrip)) < 0 ||
            (rc = get_bool(ld, o, w, "rstrip", false, &a->rstrip)) < 0 ||
            (rc = get_bool(ld, o, w, "single_word", false, &a->single_word)) < 0 ||
            (rc = get_bool(ld, o, w, "normalized", !a->special, &a->normalized)) < 0)
            return rc;
        if (len == 0) return err_set(KS_EFORMAT, "%s: %s.content: empty", ld->file, w);
        if (!(a->content = xstrndup(s, len))) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
        a->len = (uint32_t)len;
        a->id = (int32_t)id;
        t->n_added++;
        if (id > *max_id) *max_id = (int)id;
    }
    return KS_OK;
}

static int parse_model(loader *ld, json_t *root, json_t *model) {
    tokenizer *t = ld->t;
    int rc, max_id = -1;
    if (!json_is_object(model)) return err_set(KS_EFORMAT, "%s: model: %s", ld->file, model ? "expected object" : "missing");
    const char *type = get_type(model);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (type && strcmp(type, "BPE"))
        return err_set(KS_EUNSUPPORTED, "%s: model.type: unsupported tokenizer model \"%s\" (only BPE is supported)",
                       ld->file, type);
    if (!type && !merges)
        return err_set(KS_EUNSUPPORTED, "%s: model.type: missing and no merges (only BPE is supported)", ld->file);
    if (!json_is_object(vocab)) return err_set(KS_EFORMAT, "%s: model.vocab: %s", ld->file, vocab ? "expected object" : "missing");
    if (!json_is_array(merges)) return err_set(KS_EFORMAT, "%s: model.merges: %s", ld->file, merges ? "expected array" : "missing");

    /* vocab */
    size_t nv = json_object_size(vocab);
    if (nv > MAX_VOCAB) return err_set(KS_EFORMAT, "%s: model.vocab: too many entries (%zu)", ld->file, nv);
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= MAX_VOCAB)
            return err_set(KS_EFORMAT, "%s: model.vocab[\"%.40s\"]: expected an id in [0, %d)", ld->file, key, MAX_VOCAB);
        if (json_integer_value(val) > max_id) max_id = (int)json_integer_value(val);
    }
    if ((rc = parse_added(ld, json_object_get(root, "added_tokens"), &max_id)) < 0) return rc;
    t->n_vocab = max_id + 1;
    if (t->n_vocab <= 0) return err_set(KS_EFORMAT, "%s: model.vocab: empty", ld->file);
    t->piece = calloc((size_t)t->n_vocab, sizeof *t->piece);
    t->piece_len = calloc((size_t)t->n_vocab, sizeof *t->piece_len);
    t->is_special = calloc((size_t)t->n_vocab, 1);
    t->is_added = calloc((size_t)t->n_vocab, 1);
    if (!t->piece || !t->piece_len || !t->is_special || !t->is_added ||
        (rc = tok_smap_init(&t->vocab, (uint32_t)nv)) < 0 || (rc = tok_smap_init(&t->added_map, (uint32_t)t->n_added)) < 0)
        return err_set(KS_ENOMEM, "%s: out of memory (vocab of %d)", ld->file, t->n_vocab);
    /* keys: jansson keeps them while the JSON lives; copy into one block */
    size_t total = 0;
    json_object_foreach(vocab, key, val) total += json_object_iter_key_len(json_object_key_to_iter(key)) + 1;
    t->vocab_strs = malloc(total ? total : 1);
    if (!t->vocab_strs) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
    size_t off = 0;
    json_object_foreach(vocab, key, val) {
        size_t kl = json_object_iter_key_len(json_object_key_to_iter(key));
        char *k = t->vocab_strs + off;
        memcpy(k, key, kl);
        k[kl] = 0;
        off += kl + 1;
        int32_t id = (int32_t)json_integer_value(val);
        if ((rc = tok_smap_put(&t->vocab, k, (uint32_t)kl, id)) < 0) return rc;
        if (!t->piece[id]) {
            t->piece[id] = k;
            t->piece_len[id] = (uint32_t)kl;
        }
    }
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        t->piece[a->id] = a->content; // HF: the added vocabulary wins
        t->piece_len[a->id] = a->len;
        t->is_added[a->id] = true;
        t->is_special[a->id] = a->special;
        if ((rc = tok_smap_put(&t->added_map, a->content, a->len, a->id)) < 0) return rc;
    }

    /* options */
    const char *s;
    if ((rc = get_bool(ld, model, "model", "byte_fallback", false, &t->byte_fallback)) < 0 ||
        (rc = get_bool(ld, model, "model", "fuse_unk", false, &t->fuse_unk)) < 0 ||
        (rc = get_bool(ld, model, "model", "ignore_merges", false, &t->ignore_merges)) < 0)
        return rc;
    if ((rc = get_str(ld, model, "model", "unk_token", false, &s, NULL)) < 0) return rc;
    t->unk_id = s ? tok_smap_get(&t->vocab, s, (uint32_t)strlen(s)) : -1;
    if ((rc = get_str(ld, model, "model", "continuing_subword_prefix", false, &s, NULL)) < 0) return rc;
    if (s && *s && !(t->cont_prefix = xstrndup(s, strlen(s)))) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
    if ((rc = get_str(ld, model, "model", "end_of_word_suffix", false, &s, NULL)) < 0) return rc;
    if (s && *s && !(t->eow_suffix = xstrndup(s, strlen(s)))) return err_set(KS_ENOMEM, "%s: out of memory", ld->file);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = tok_smap_get(&t->vocab, name, 6);
    }

    /* merges */
    size_t nm = json_array_size(merges);
    if (nm >= (1u << 31)) return err_set(KS_EFORMAT, "%s: model.merges: too many", ld->file);
    if ((rc = tok_pmap_init(&t->merges, (uint32_t)nm)) < 0) return rc;
    tok_buf cat = { 0 };
    for (size_t i = 0; i < nm; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) {
            a = json_string_value(m);
            size_t ml = json_string_length(m);
            const char *sp = memchr(a, ' ', ml);
            if (!sp || memchr(sp + 1, ' ', ml - (size_t)(sp + 1 - a))) {
                tok_buf_free(&cat);
                return err_set(KS_EFORMAT, "%s: model.merges[%zu]: expected \"a b\" (two tokens, one space)", ld->file, i);
            }
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = ml - al - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            bl = json_string_length(json_array_get(m, 1));
        } else {
            tok_buf_free(&cat);
            return err_set(KS_EFORMAT, "%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", ld->file, i);
        }
        int32_t ia = tok_smap_get(&t->vocab, a, (uint32_t)al), ib = tok_smap_get(&t->vocab, b, (uint32_t)bl);
        cat.len = 0;
        if (tok_buf_add(&cat, a, al) < 0 || tok_buf_add(&cat, b, bl) < 0) {
            tok_buf_free(&cat);
            return KS_ENOMEM;
        }
        int32_t ic = tok_smap_get(&t->vocab, cat.p, (uint32_t)cat.len);
        if (ia < 0 || ib < 0 || ic < 0) {
            rc = err_set(KS_EFORMAT, "%s: model.merges[%zu]: token \"%.*s\" not in model.vocab", ld->file, i,
                         (int)(ia < 0 ? (al > 60 ? 60 : al) : ib < 0 ? (bl > 60 ? 60 : bl) : (cat.len > 60 ? 60 : cat.len)),
                         ia < 0 ? a : ib < 0 ? b : cat.p);
            tok_buf_free(&cat);
            return rc;
        }
        if ((rc = tok_pmap_put(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib,
                               (uint64_t)i << 32 | (uint32_t)ic)) < 0) {
            tok_buf_free(&cat);
            return rc;
        }
    }
    tok_buf_free(&cat);
    return KS_OK;
}

/* Added tokens into the two tries; normalized ones are matched after
 * normalization, so their content is normalized first (as HF does). */
static int build_tries(loader *ld) {
    tokenizer *t = ld->t;
    tok_scratch sc = { 0 };
    int rc = KS_OK;
    for (int i = 0; i < t->n_added && rc >= 0; i++) {
        tok_added *a = &t->added[i];
        if (!a->normalized || t->n_norm == 0) {
            rc = tok_trie_add(a->normalized ? &t->trie_norm : &t->trie_raw, a->content, a->len, i);
            continue;
        }
        sc.md = sc.md ? sc.md : pcre2_match_data_create(1, NULL);
        if (!sc.md) rc = err_set(KS_ENOMEM, "%s: out of memory", ld->file);
        else if ((rc = tok_normalize(t, &sc, a->content, a->len)) >= 0 && sc.norm.len)
            rc = tok_trie_add(&t->trie_norm, sc.norm.p, (uint32_t)sc.norm.len, i);
    }
    tok_scratch_free(&sc);
    return rc;
}

/* tokenizer_config.json: add_bos_token / add_eos_token, used only when the
 * tokenizer.json post-processor adds no special tokens itself. */
static int parse_config(loader *ld, const char *cfg_path) {
    tokenizer *t = ld->t;
    json_error_t je;
    int rc = KS_OK;
    t->cfg_bos = t->cfg_eos = -1;
    for (int k = 0; k < t->n_post; k++)
        if (t->post[k].type != TOK_POST_BYTELEVEL) return KS_OK;
    json_t *c = json_load_file(cfg_path, JSON_DECODE_INT_AS_REAL, &je);
    if (!c) return err_set(KS_EFORMAT, "%s: line %d: %s", cfg_path, je.line, je.text);
    loader cl = { t, cfg_path };
    if (!json_is_object(c)) {
        rc = err_set(KS_EFORMAT, "%s: expected a JSON object", cfg_path);
        goto done;
    }
    static const char *const flags[2] = { "add_bos_token", "add_eos_token" };
    static const char *const names[2] = { "bos_token", "eos_token" };
    for (int k = 0; k < 2; k++) {
        bool on;
        if ((rc = get_bool(&cl, c, "$", flags[k], false, &on)) < 0) goto done;
        if (!on) continue;
        json_t *v = json_object_get(c, names[k]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (!json_is_string(v)) continue;
        int id = tok_piece_id(t, json_string_value(v));
        if (id < 0) {
            rc = err_set(KS_EFORMAT, "%s: %s: \"%s\" is not a token", cfg_path, names[k], json_string_value(v));
            goto done;
        }
        if (k == 0) t->cfg_bos = id;
        else t->cfg_eos = id;
    }
done:
    json_decref(c);
    return rc;
}

int tok_load(tokenizer **out, const char *path) {
    struct stat stt;
    char *json_path = NULL, *cfg_path = NULL;
    json_t *root = NULL;
    json_error_t je;
    int rc;
    *out = NULL;
    if (!path) return err_set(KS_EINVAL, "tok_load: NULL path");
    if (stat(path, &stt) != 0) return err_set(KS_EIO, "%s: %s", path, strerror(errno));
    size_t pl = strlen(path);
    json_path = malloc(pl + 32);
    cfg_path = malloc(pl + 32);
    tokenizer *t = calloc(1, sizeof *t);
    if (!json_path || !cfg_path || !t) {
        free(json_path);
        free(cfg_path);
        free(t);
        return err_set(KS_ENOMEM, "tok_load: out of memory");
    }
    t->cfg_bos = t->cfg_eos = -1;
    t->unk_id = -1;
    if (S_ISDIR(stt.st_mode)) {
        snprintf(json_path, pl + 32, "%s/tokenizer.json", path);
        snprintf(cfg_path, pl + 32, "%s/tokenizer_config.json", path);
    } else {
        memcpy(json_path, path, pl + 1);
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
        memcpy(cfg_path, path, dl);
        memcpy(cfg_path + dl, "tokenizer_config.json", 22);
    }
    t->path = json_path;
    loader ld = { t, json_path };
    root = json_load_file(json_path, JSON_ALLOW_NUL, &je);
    if (!root) {
        rc = access(json_path, R_OK) != 0 ? err_set(KS_EIO, "%s: %s", json_path, strerror(errno))
                                           : err_set(KS_EFORMAT, "%s: line %d: %s", json_path, je.line, je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = err_set(KS_EFORMAT, "%s: expected a JSON object", json_path);
        goto fail;
    }
    t->norm = calloc(MAX_CHAIN, sizeof *t->norm);
    t->pretok = calloc(MAX_CHAIN, sizeof *t->pretok);
    t->dec = calloc(MAX_CHAIN, sizeof *t->dec);
    t->post = calloc(MAX_CHAIN, sizeof *t->post);
    if (!t->norm || !t->pretok || !t->dec || !t->post) {
        rc = err_set(KS_ENOMEM, "tok_load: out of memory");
        goto fail;
    }
    if ((rc = parse_model(&ld, root, json_object_get(root, "model"))) < 0) goto fail;
    json_t *j;
    if ((j = json_object_get(root, "normalizer")) && !json_is_null(j) &&
        (rc = parse_normalizer(&ld, j, "normalizer", 0)) < 0)
        goto fail;
    if ((j = json_object_get(root, "pre_tokenizer")) && !json_is_null(j) &&
        (rc = parse_pretok(&ld, j, "pre_tokenizer", 0)) < 0)
        goto fail;
    if ((j = json_object_get(root, "decoder")) && !json_is_null(j)) {
        t->has_decoder = true;
        if ((rc = parse_decoder(&ld, j, "decoder", 0)) < 0) goto fail;
    }
    if ((j = json_object_get(root, "post_processor")) && !json_is_null(j) &&
        (rc = parse_post(&ld, j, "post_processor", 0)) < 0)
        goto fail;
    if ((rc = build_tries(&ld)) < 0) goto fail;
    if (access(cfg_path, F_OK) == 0 && (rc = parse_config(&ld, cfg_path)) < 0) goto fail;
    json_decref(root);
    free(cfg_path);
    *out = t;
    return KS_OK;
fail:
    json_decref(root);
    free(cfg_path);
    tok_free(t);
    return rc;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->path);
    free(t->piece);
    free(t->piece_len);
    free(t->vocab_strs);
    tok_smap_free(&t->vocab);
    tok_pmap_free(&t->merges);
    free(t->cont_prefix);
    free(t->eow_suffix);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    tok_smap_free(&t->added_map);
    free(t->is_special);
    free(t->is_added);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    for (int i = 0; i < t->n_norm; i++) tok_normalizer_free(&t->norm[i]);
    free(t->norm);
    for (int i = 0; i < t->n_pretok; i++) tok_pretok_free(&t->pretok[i]);
    free(t->pretok);
    for (int i = 0; i < t->n_dec; i++) {
        free(t->dec[i].pat);
        free(t->dec[i].content);
    }
    free(t->dec);
    for (int i = 0; i < t->n_post; i++) free(t->post[i].ids);
    free(t->post);
    free(t);
}

/* ---- lookups ---------------------------------------------------------------------------------- */

int tok_vocab_size(const tokenizer *t) { return t->n_vocab; }

int tok_piece_id(const tokenizer *t, const char *piece) {
    uint32_t len = (uint32_t)strlen(piece);
    int32_t id = tok_smap_get(&t->added_map, piece, len);
    return id >= 0 ? id : tok_smap_get(&t->vocab, piece, len);
}

const char *tok_id_piece(const tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab ? t->piece[id] : NULL;
}

bool tok_is_special(const tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab && t->is_special[id];
}
