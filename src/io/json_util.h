/* json_util.h — small jansson helpers for reading hostile JSON files: load a
 * file with a located parse error, and typed field getters whose errors name
 * the file and the JSON path ("config.json: field \"rope_scaling.factor\": ...").
 *
 * Conventions: a field that is absent or JSON null takes the default when the
 * getter is not `required`; a present field of the wrong type or out of range
 * is always an error (KS_EFORMAT). Returned strings are borrowed from the
 * json_t and live as long as it does. */
#ifndef KS_JSON_UTIL_H
#define KS_JSON_UTIL_H

#include <stdbool.h>

#include <jansson.h>

/* Where a field lives, for error messages: the file and the path of the
 * enclosing object ("" or NULL for the top level, else e.g. "rope_scaling"). */
typedef struct {
    const char *file;
    const char *obj_path;
} ju_ctx;

/* Parses the JSON file at `path` (duplicate object keys rejected). On error
 * the message names the file, line and column. Caller json_decref()s *out. */
int ju_load_file(const char *path, json_t **out);

/* Integer field in [lo, hi]. Reals (1.0), strings and bools are errors. */
int ju_get_int(ju_ctx c, const json_t *obj, const char *key, bool required,
               long long def, long long lo, long long hi, long long *out);
/* Number field (integer or real) in [lo, hi]. */
int ju_get_num(ju_ctx c, const json_t *obj, const char *key, bool required,
               double def, double lo, double hi, double *out);
int ju_get_bool(ju_ctx c, const json_t *obj, const char *key, bool def, bool *out);
/* String field; *out = NULL when absent/null and not required. */
int ju_get_str(ju_ctx c, const json_t *obj, const char *key, bool required, const char **out);
/* An integer or an array of integers, each in [lo, hi], at most `max` of
 * them (more is an error, not a truncation). Absent/null gives *n = 0. */
int ju_get_int_list(ju_ctx c, const json_t *obj, const char *key, long long lo,
                    long long hi, int *ids, int max, int *n);

/* "a string", "an array", ... for messages. */
const char *ju_type_name(const json_t *v);

#endif
