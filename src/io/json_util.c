/* json_util.c — jansson helpers with errors that name file and field (see json_util.h). */
#include "io/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/file.h"

/* "obj_path.key" or "key" into buf. */
static const char *field_name(ju_ctx c, const char *key, char *buf, size_t n) {
    if (c.obj_path && *c.obj_path) snprintf(buf, n, "%s.%s", c.obj_path, key);
    else snprintf(buf, n, "%s", key);
    return buf;
}

const char *ju_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

int ju_load_file(const char *path, json_t **out) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = file_read(path, &buf, &len);
    if (rc < 0) return rc;
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!root)
        return err_set(KS_EFORMAT, "%s: invalid JSON at line %d column %d: %s", path, je.line,
                       je.column, je.text);
    *out = root;
    return KS_OK;
}

/* Looks key up; NULL for absent or null. */
static json_t *get(const json_t *obj, const char *key) {
    json_t *v = obj && json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

int ju_get_int(ju_ctx c, const json_t *obj, const char *key, bool required,
               long long def, long long lo, long long hi, long long *out) {
    char fn[256];
    json_t *v = get(obj, key);
    if (!v) {
        if (required)
            return err_set(KS_EFORMAT, "%s: field \"%s\": missing (expected an integer in [%lld, %lld])",
                           c.file, field_name(c, key, fn, sizeof fn), lo, hi);
        *out = def;
        return KS_OK;
    }
    if (!json_is_integer(v)) {
        const char *want = lo == 1 ? "a positive integer" : lo == 0 ? "a non-negative integer" : "an integer";
        return err_set(KS_EFORMAT, "%s: field \"%s\": expected %s, got %s", c.file,
                       field_name(c, key, fn, sizeof fn), want, ju_type_name(v));
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        if (lo == 1 && x < 1)
            return err_set(KS_EFORMAT, "%s: field \"%s\": expected a positive integer, got %lld",
                           c.file, field_name(c, key, fn, sizeof fn), x);
        return err_set(KS_EFORMAT, "%s: field \"%s\": %lld out of range [%lld, %lld]", c.file,
                       field_name(c, key, fn, sizeof fn), x, lo, hi);
    }
    *out = x;
    return KS_OK;
}

int ju_get_num(ju_ctx c, const json_t *obj, const char *key, bool required,
               double def, double lo, double hi, double *out) {
    char fn[256];
    json_t *v = get(obj, key);
    if (!v) {
        if (required)
            return err_set(KS_EFORMAT, "%s: field \"%s\": missing (expected a number)", c.file,
                           field_name(c, key, fn, sizeof fn));
        *out = def;
        return KS_OK;
    }
    if (!json_is_number(v))
        return err_set(KS_EFORMAT, "%s: field \"%s\": expected a number, got %s", c.file,
                       field_name(c, key, fn, sizeof fn), ju_type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return err_set(KS_EFORMAT, "%s: field \"%s\": %g out of range [%g, %g]", c.file,
                       field_name(c, key, fn, sizeof fn), x, lo, hi);
    *out = x;
    return KS_OK;
}

int ju_get_bool(ju_ctx c, const json_t *obj, const char *key, bool def, bool *out) {
    char fn[256];
    json_t *v = get(obj, key);
    if (!v) {
        *out = def;
        return KS_OK;
    }
    if (!json_is_boolean(v))
        return err_set(KS_EFORMAT, "%s: field \"%s\": expected a boolean, got %s", c.file,
                       field_name(c, key, fn, sizeof fn), ju_type_name(v));
    *out = json_is_true(v);
    return KS_OK;
}

int ju_get_str(ju_ctx c, const json_t *obj, const char *key, bool required, const char **out) {
    char fn[256];
    json_t *v = get(obj, key);
    *out = NULL;
    if (!v) {
        if (required)
            return err_set(KS_EFORMAT, "%s: field \"%s\": missing (expected a string)", c.file,
                           field_name(c, key, fn, sizeof fn));
        return KS_OK;
    }
    if (!json_is_string(v))
        return err_set(KS_EFORMAT, "%s: field \"%s\": expected a string, got %s", c.file,
                       field_name(c, key, fn, sizeof fn), ju_type_name(v));
    *out = json_string_value(v);
    return KS_OK;
}

int ju_get_int_list(ju_ctx c, const json_t *obj, const char *key, long long lo,
                    long long hi, int *ids, int max, int *n) {
    char fn[256];
    json_t *v = get(obj, key);
    *n = 0;
    if (!v) return KS_OK;
    if (json_is_integer(v)) {
        long long x = json_integer_value(v);
        if (x < lo || x > hi)
            return err_set(KS_EFORMAT, "%s: field \"%s\": %lld out of range [%lld, %lld]", c.file,
                           field_name(c, key, fn, sizeof fn), x, lo, hi);
        if (max < 1)
            return err_set(KS_EFORMAT, "%s: field \"%s\": too many values", c.file,
                           field_name(c, key, fn, sizeof fn));
        ids[0] = (int)x;
        *n = 1;
        return KS_OK;
    }
    if (!json_is_array(v))
        return err_set(KS_EFORMAT, "%s: field \"%s\": expected an integer or an array of integers, got %s",
                       c.file, field_name(c, key, fn, sizeof fn), ju_type_name(v));
    size_t cnt = json_array_size(v);
    if (cnt > (size_t)max)
        return err_set(KS_EFORMAT, "%s: field \"%s\": %zu values, at most %d supported", c.file,
                       field_name(c, key, fn, sizeof fn), cnt, max);
    for (size_t i = 0; i < cnt; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e))
            return err_set(KS_EFORMAT, "%s: field \"%s[%zu]\": expected an integer, got %s", c.file,
                           field_name(c, key, fn, sizeof fn), i, ju_type_name(e));
        long long x = json_integer_value(e);
        if (x < lo || x > hi)
            return err_set(KS_EFORMAT, "%s: field \"%s[%zu]\": %lld out of range [%lld, %lld]",
                           c.file, field_name(c, key, fn, sizeof fn), i, x, lo, hi);
        ids[i] = (int)x;
    }
    *n = (int)cnt;
    return KS_OK;
}
