/* safetensors.c — memory-mapped safetensors files and sharded sets (see
 * safetensors.h). Every header field is validated before a pointer into the
 * mapping is formed:
 *
 *   file  = u64le N | N bytes JSON header | data area
 *   header = {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]},
 *             ..., "__metadata__": {...}}
 *   offsets are relative to the data area; e - b == prod(shape) * dtype size;
 *   0 <= b <= e <= data area size; tensors do not overlap.
 *
 * Sharded: model.safetensors.index.json {"weight_map": {tensor: shard}}; every
 * shard opened once, and the index and the shards must agree exactly. */
#include "io/safetensors.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/json_util.h"

#define ST_MAX_HEADER (100u * 1024u * 1024u)
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

static const struct { const char *name; dtype_t t; } st_dtypes[] = {
    {"F64", DTYPE_F64},   {"F32", DTYPE_F32},         {"F16", DTYPE_F16},
    {"BF16", DTYPE_BF16}, {"I64", DTYPE_I64},         {"I32", DTYPE_I32},
    {"I16", DTYPE_I16},   {"I8", DTYPE_I8},           {"U8", DTYPE_U8},
    {"BOOL", DTYPE_BOOL}, {"F8_E4M3", DTYPE_F8_E4M3}, {"F8_E5M2", DTYPE_F8_E5M2},
};

static int dtype_from_str(const char *s, dtype_t *out) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *out = st_dtypes[i].t;
            return 1;
        }
    return 0;
}

void st_drop_pages(const st_set *s) {
    for (int i = 0; i < s->n_files; i++) file_drop_pages(&s->maps[i]);
}

void st_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_tensors; i++) free(s->tensors ? s->tensors[i].name : NULL);
    free(s->tensors);
    for (int i = 0; i < s->n_files; i++) {
        if (s->maps) file_unmap(&s->maps[i]);
        if (s->paths) free(s->paths[i]);
    }
    free(s->maps);
    free(s->paths);
    memset(s, 0, sizeof *s);
}

/* Appends an empty file slot (path copied); on success the file is
 * s->n_files - 1 and is unmapped until the caller maps it. */
static int add_file(st_set *s, const char *path) {
    char **np = realloc(s->paths, (size_t)(s->n_files + 1) * sizeof *np);
    if (!np) return err_set(KS_ENOMEM, "%s: out of memory", path);
    s->paths = np;
    file_mapping *nm = realloc(s->maps, (size_t)(s->n_files + 1) * sizeof *nm);
    if (!nm) return err_set(KS_ENOMEM, "%s: out of memory", path);
    s->maps = nm;
    char *p = strdup(path);
    if (!p) return err_set(KS_ENOMEM, "%s: out of memory", path);
    s->paths[s->n_files] = p;
    s->maps[s->n_files].data = NULL;
    s->maps[s->n_files].size = 0;
    s->n_files++;
    return KS_OK;
}

typedef struct {
    uint64_t begin, end;
    int idx; /* index into s->tensors */
} st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Validates one tensor entry and fills *t (name not set here). */
static int parse_entry(const char *path, const char *name, json_t *e, uint64_t data_size,
                       st_tensor *t, uint64_t *begin, uint64_t *end) {
    if (!json_is_object(e))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": expected an object, got %s", path, name,
                       ju_type_name(e));
    json_t *jd = json_object_get(e, "dtype");
    if (!jd || !json_is_string(jd))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": \"dtype\" missing or not a string", path, name);
    if (!dtype_from_str(json_string_value(jd), &t->dtype))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name,
                       json_string_value(jd));

    json_t *js = json_object_get(e, "shape");
    if (!js || !json_is_array(js))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": \"shape\" missing or not an array", path, name);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": %zu dimensions, at most %d supported", path,
                       name, nd, ST_MAX_DIMS);
    int64_t n = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return err_set(KS_EFORMAT, "%s: tensor \"%s\": shape[%zu] is not a non-negative integer",
                           path, name, i);
        int64_t v = json_integer_value(d);
        if (v > 0 && n > INT64_MAX / v)
            return err_set(KS_EFORMAT, "%s: tensor \"%s\": shape element count overflows", path, name);
        n *= v;
        t->shape[i] = v;
    }
    t->n_dims = (int)nd;
    t->n_elems = n;
    uint64_t esz = dtype_size(t->dtype);
    if ((uint64_t)n > UINT64_MAX / esz)
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": byte size overflows", path, name);
    uint64_t nbytes = (uint64_t)n * esz;

    json_t *jo = json_object_get(e, "data_offsets");
    if (!jo || !json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": \"data_offsets\" must be an array of two integers",
                       path, name);
    long long b = json_integer_value(json_array_get(jo, 0));
    long long en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < b)
        return err_set(KS_EFORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] invalid", path, name,
                       b, en);
    if ((uint64_t)en > data_size)
        return err_set(KS_EFORMAT,
                       "%s: tensor \"%s\": data_offsets [%lld, %lld] past the end of the data area "
                       "(%llu bytes)", path, name, b, en, (unsigned long long)data_size);
    if ((uint64_t)(en - b) != nbytes)
        return err_set(KS_EFORMAT,
                       "%s: tensor \"%s\": data_offsets [%lld, %lld] hold %lld bytes but %s x %lld "
                       "elements needs %llu", path, name, b, en, en - b, dtype_name(t->dtype),
                       (long long)n, (unsigned long long)nbytes);
    t->nbytes = (size_t)nbytes;
    *begin = (uint64_t)b;
    *end = (uint64_t)en;
    return KS_OK;
}

/* Parses the header of the mapped file s->maps[fi] and appends its tensors. */
static int parse_file(st_set *s, int fi) {
    const char *path = s->paths[fi];
    const file_mapping *m = &s->maps[fi];
    json_t *root = NULL;
    st_span *spans = NULL;
    int first = s->n_tensors, rc;

    if (m->size < 8) {
        rc = err_set(KS_EFORMAT, "%s: file is %zu bytes, too short for a safetensors header", path,
                     m->size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | m->data[i];
    if (hlen > ST_MAX_HEADER) {
        rc = err_set(KS_EFORMAT, "%s: header length %llu exceeds the %u-byte limit", path,
                     (unsigned long long)hlen, ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > m->size - 8) {
        rc = err_set(KS_EFORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)",
                     path, (unsigned long long)hlen, m->size);
        goto fail;
    }
    uint64_t data_size = m->size - 8 - hlen;
    const unsigned char *data = m->data + 8 + hlen;

    json_error_t je;
    root = json_loadb((const char *)m->data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        rc = err_set(KS_EFORMAT, "%s: header is not valid JSON (header byte %d): %s", path,
                     je.position, je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = err_set(KS_EFORMAT, "%s: header is %s, expected an object", path, ju_type_name(root));
        goto fail;
    }
    size_t cnt = json_object_size(root);
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta) {
        if (!json_is_object(meta)) {
            rc = err_set(KS_EFORMAT, "%s: \"__metadata__\" is %s, expected an object", path,
                         ju_type_name(meta));
            goto fail;
        }
        cnt--;
    }
    if (cnt > (size_t)(INT32_MAX - s->n_tensors)) {
        rc = err_set(KS_EFORMAT, "%s: too many tensors", path);
        goto fail;
    }
    st_tensor *nt = realloc(s->tensors, (size_t)(s->n_tensors + cnt + 1) * sizeof *nt);
    if (!nt) {
        rc = err_set(KS_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    s->tensors = nt;
    spans = malloc((cnt + 1) * sizeof *spans);
    if (!spans) {
        rc = err_set(KS_ENOMEM, "%s: out of memory", path);
        goto fail;
    }

    const char *key;
    json_t *val;
    size_t ns = 0;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue;
        st_tensor t;
        memset(&t, 0, sizeof t);
        uint64_t b = 0, e = 0;
        rc = parse_entry(path, key, val, data_size, &t, &b, &e);
        if (rc < 0) goto fail;
        t.name = strdup(key);
        if (!t.name) {
            rc = err_set(KS_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        t.data = data + b;
        t.file_index = fi;
        s->tensors[s->n_tensors] = t;
        spans[ns].begin = b;
        spans[ns].end = e;
        spans[ns].idx = s->n_tensors;
        ns++;
        s->n_tensors++;
    }

    /* No two tensors share bytes (empty tensors hold none). */
    qsort(spans, ns, sizeof *spans, span_cmp);
    const st_span *prev = NULL;
    for (size_t i = 0; i < ns; i++) {
        if (spans[i].begin == spans[i].end) continue;
        if (prev && spans[i].begin < prev->end) {
            rc = err_set(KS_EFORMAT,
                         "%s: tensors \"%s\" [%llu, %llu] and \"%s\" [%llu, %llu] overlap", path,
                         s->tensors[prev->idx].name, (unsigned long long)prev->begin,
                         (unsigned long long)prev->end, s->tensors[spans[i].idx].name,
                         (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
            goto fail;
        }
        prev = &spans[i];
    }
    free(spans);
    json_decref(root);
    return KS_OK;

fail:
    /* Drop this file's tensors; st_close() frees the rest. */
    for (int i = first; i < s->n_tensors; i++) free(s->tensors[i].name);
    s->n_tensors = first;
    free(spans);
    json_decref(root);
    return rc;
}

static int map_and_parse(st_set *s, const char *path) {
    int rc = add_file(s, path);
    if (rc < 0) return rc;
    int fi = s->n_files - 1;
    rc = file_map(path, &s->maps[fi]);
    if (rc < 0) return rc;
    return parse_file(s, fi);
}

static int tensor_name_cmp(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* Sorts by name and rejects duplicate names (within or across files). */
static int sort_and_check(st_set *s) {
    if (s->n_tensors > 1) qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, tensor_name_cmp);
    for (int i = 1; i < s->n_tensors; i++) {
        const st_tensor *a = &s->tensors[i - 1], *b = &s->tensors[i];
        if (strcmp(a->name, b->name) == 0)
            return err_set(KS_EFORMAT, "tensor \"%s\" appears twice: in %s and in %s", a->name,
                           s->paths[a->file_index], s->paths[b->file_index]);
    }
    return KS_OK;
}

int st_open_file(st_set *s, const char *path) {
    memset(s, 0, sizeof *s);
    int rc = map_and_parse(s, path);
    if (rc >= 0) rc = sort_and_check(s);
    if (rc < 0) st_close(s);
    return rc;
}

const st_tensor *st_find(const st_set *s, const char *name) {
    if (!s || !name) return NULL;
    int lo = 0, hi = s->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(name, s->tensors[mid].name);
        if (c == 0) return &s->tensors[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

static int cstr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Basename of a path (for comparing a tensor's file with the index's shard). */
static const char *base_name(const char *p) {
    const char *sl = strrchr(p, '/');
    return sl ? sl + 1 : p;
}

static int open_index(st_set *s, const char *dir, const char *index_path) {
    json_t *root = NULL;
    const char **shards = NULL;
    char *shard_path = NULL;
    int rc = ju_load_file(index_path, &root);
    if (rc < 0) return rc;
    if (!json_is_object(root)) {
        rc = err_set(KS_EFORMAT, "%s: expected a JSON object, got %s", index_path, ju_type_name(root));
        goto out;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!wm || !json_is_object(wm)) {
        rc = err_set(KS_EFORMAT, "%s: field \"weight_map\": missing or not an object", index_path);
        goto out;
    }
    size_t n = json_object_size(wm);
    if (n == 0) {
        rc = err_set(KS_EFORMAT, "%s: field \"weight_map\" is empty", index_path);
        goto out;
    }
    shards = malloc(n * sizeof *shards);
    if (!shards) {
        rc = err_set(KS_ENOMEM, "%s: out of memory", index_path);
        goto out;
    }
    const char *key;
    json_t *val;
    size_t k = 0;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) {
            rc = err_set(KS_EFORMAT, "%s: field \"weight_map.%s\": expected a shard file name, got %s",
                         index_path, key, ju_type_name(val));
            goto out;
        }
        const char *f = json_string_value(val);
        if (!*f || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0) {
            rc = err_set(KS_EFORMAT,
                         "%s: field \"weight_map.%s\": shard \"%s\" is not a plain file name in the "
                         "model directory", index_path, key, f);
            goto out;
        }
        shards[k++] = f;
    }
    qsort(shards, k, sizeof *shards, cstr_cmp);
    for (size_t i = 0; i < k; i++) {
        if (i > 0 && strcmp(shards[i], shards[i - 1]) == 0) continue;
        shard_path = path_join(dir, shards[i]);
        if (!shard_path) {
            rc = err_set(KS_ENOMEM, "%s: out of memory", index_path);
            goto out;
        }
        rc = map_and_parse(s, shard_path);
        if (rc < 0) {
            if (rc == KS_EIO) err_wrap(rc, "%s: shard \"%s\"", index_path, shards[i]);
            goto out;
        }
        free(shard_path);
        shard_path = NULL;
    }
    rc = sort_and_check(s);
    if (rc < 0) goto out;
    /* Each tensor of each shard is listed, for that shard... */
    for (int i = 0; i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        const char *file = base_name(s->paths[t->file_index]);
        json_t *v = json_object_get(wm, t->name);
        if (!v) {
            rc = err_set(KS_EFORMAT, "%s: tensor \"%s\" is not listed in %s", s->paths[t->file_index],
                         t->name, index_path);
            goto out;
        }
        if (strcmp(json_string_value(v), file) != 0) {
            rc = err_set(KS_EFORMAT, "%s: tensor \"%s\" found in %s but the index assigns it to %s",
                         index_path, t->name, file, json_string_value(v));
            goto out;
        }
    }
    /* ...and each listed tensor is in its shard. */
    json_object_foreach(wm, key, val) {
        if (!st_find(s, key)) {
            rc = err_set(KS_EFORMAT, "%s: tensor \"%s\" is listed for shard %s but that shard does not "
                         "contain it", index_path, key, json_string_value(val));
            goto out;
        }
    }
    rc = KS_OK;
out:
    free(shard_path);
    free(shards);
    json_decref(root);
    return rc;
}

int st_open_dir(st_set *s, const char *dir) {
    memset(s, 0, sizeof *s);
    int rc;
    char *index_path = path_join(dir, ST_INDEX_NAME);
    char *single = path_join(dir, ST_SINGLE_NAME);
    if (!index_path || !single) {
        rc = err_set(KS_ENOMEM, "%s: out of memory", dir);
        goto out;
    }
    if (!path_is_dir(dir)) {
        rc = err_set(KS_EIO, "%s: not a directory", dir);
        goto out;
    }
    if (file_exists(index_path)) {
        rc = open_index(s, dir, index_path);
    } else if (file_exists(single)) {
        rc = map_and_parse(s, single);
        if (rc >= 0) rc = sort_and_check(s);
    } else {
        rc = err_set(KS_EIO, "%s: no %s or %s", dir, ST_INDEX_NAME, ST_SINGLE_NAME);
    }
out:
    if (rc < 0) st_close(s);
    free(index_path);
    free(single);
    return rc;
}
