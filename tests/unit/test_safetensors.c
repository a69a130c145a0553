/* test_safetensors.c — safetensors loading: the real tinycoder checkpoint
 * (sharded, bf16) and its drafter, plus synthetic files written to a temp dir,
 * valid and hostile (truncations, lying headers, bad dtypes/shapes/offsets,
 * overlaps, duplicates, bad shard indexes). Hostile files must give an error
 * naming the file (and tensor), never a crash, and leave the set closed. */
#include "test.h"

#include <ftw.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "io/safetensors.h"

/* ---- helpers ---- */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}
static void rm_tree(const char *dir) { nftw(dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS); }

static char *make_tmpdir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/ks_st_XXXXXX");
    return mkdtemp(buf);
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    fclose(f);
    return w == n ? 0 : -1;
}

/* Builds a safetensors image: u64le header length (declared_len, or the real
 * padded length when declared_len == UINT64_MAX), header, data. Malloc'd. */
static unsigned char *st_image(const char *header, const void *data, size_t data_len,
                               uint64_t declared_len, size_t *out_len) {
    size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
    size_t total = 8 + padded + data_len;
    unsigned char *buf = malloc(total);
    if (!buf) return NULL;
    uint64_t L = declared_len == UINT64_MAX ? padded : declared_len;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(L >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    if (data_len) memcpy(buf + 8 + padded, data, data_len);
    *out_len = total;
    return buf;
}

/* Writes dir/name with the given header and data (data may be NULL: zeros). */
static int write_st(const char *dir, const char *name, const char *header, const void *data,
                    size_t data_len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned char *zeros = NULL;
    if (!data && data_len) data = zeros = calloc(1, data_len);
    size_t n;
    unsigned char *img = st_image(header, data, data_len, UINT64_MAX, &n);
    int rc = img ? write_bytes(path, img, n) : -1;
    free(img);
    free(zeros);
    return rc;
}

static int write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return write_bytes(path, text, strlen(text));
}

static int set_is_closed(const st_set *s) {
    return s->n_files == 0 && s->n_tensors == 0 && !s->paths && !s->maps && !s->tensors;
}

/* True when needle is NULL or occurs in m. */
static int msg_has(const char *m, const void *needle) {
    return !needle || strstr(m, (const char *)needle) != NULL;
}
static const char *nz(const void *s) { return s ? (const char *)s : ""; }

/* Opens dir/name (a file) expecting failure; the message must contain the
 * file name and each non-NULL needle. */
#define EXPECT_FILE_FAIL(dir, name, n1, n2)                                              \
    do {                                                                               \
        char _p[512];                                                                  \
        snprintf(_p, sizeof _p, "%s/%s", dir, name);                                   \
        st_set _s;                                                                     \
        err_clear();                                                                   \
        int _rc = st_open_file(&_s, _p);                                               \
        const char *_m = err_msg();                                                    \
        CHECK_MSG(_rc < 0, "%s: opened, expected an error", name);                     \
        CHECK_MSG(strstr(_m, name) != NULL, "message lacks file name %s: %s", name, _m); \
        CHECK_MSG(msg_has(_m, n1), "message lacks \"%s\": %s", nz(n1), _m); \
        CHECK_MSG(msg_has(_m, n2), "message lacks \"%s\": %s", nz(n2), _m); \
        CHECK(set_is_closed(&_s));                                                     \
        st_close(&_s);                                                                 \
    } while (0)

#define EXPECT_DIR_FAIL(dir, n1, n2)                                                     \
    do {                                                                               \
        st_set _s;                                                                     \
        err_clear();                                                                   \
        int _rc = st_open_dir(&_s, dir);                                               \
        const char *_m = err_msg();                                                    \
        CHECK_MSG(_rc < 0, "%s: opened, expected an error", dir);                      \
        CHECK_MSG(msg_has(_m, n1), "message lacks \"%s\": %s", nz(n1), _m); \
        CHECK_MSG(msg_has(_m, n2), "message lacks \"%s\": %s", nz(n2), _m); \
        CHECK(set_is_closed(&_s));                                                     \
        st_close(&_s);                                                                 \
    } while (0)

/* The valid synthetic file: F32 [2,3], F16 [4], BF16 [2,2], an empty F32 [0]. */
static const char *VALID_HDR =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"b.f16\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"a.f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"c.bf16\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[32,40]},"
    "\"d.empty\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[40,40]}}";
static const float F16_VALS[4] = {1.0f, -2.0f, 0.5f, 65504.0f};
static const float BF16_VALS[4] = {1.5f, -3.0f, 0.125f, 1024.0f};

static void valid_data(unsigned char data[40]) {
    for (int i = 0; i < 6; i++) {
        float f = (float)i * 1.25f - 2.0f;
        memcpy(data + 4 * i, &f, 4);
    }
    for (int i = 0; i < 4; i++) {
        uint16_t h = f32_to_f16(F16_VALS[i]), b = f32_to_bf16(BF16_VALS[i]);
        memcpy(data + 24 + 2 * i, &h, 2);
        memcpy(data + 32 + 2 * i, &b, 2);
    }
}

/* ---- synthetic: valid ---- */

TEST(test_st_synthetic_valid) {
    char tmp[64];
    if (!make_tmpdir(tmp, sizeof tmp)) SKIP("mkdtemp failed");
    unsigned char data[40];
    valid_data(data);
    CHECK(write_st(tmp, "model.safetensors", VALID_HDR, data, sizeof data) == 0);

    st_set s;
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    int rc = st_open_file(&s, path);
    CHECK_MSG(rc == 0, "st_open_file: %s", err_msg());
    if (rc == 0) {
        CHECK_EQ_INT(s.n_files, 1);
        CHECK_EQ_INT(s.n_tensors, 4);
        for (int i = 1; i < s.n_tensors; i++) CHECK(strcmp(s.tensors[i - 1].name, s.tensors[i].name) < 0);
        const st_tensor *a = st_find(&s, "a.f32");
        CHECK(a != NULL);
        if (a) {
            CHECK_EQ_INT(a->dtype, DTYPE_F32);
            CHECK_EQ_INT(a->n_dims, 2);
            CHECK_EQ_INT(a->shape[0], 2);
            CHECK_EQ_INT(a->shape[1], 3);
            CHECK_EQ_INT(a->n_elems, 6);
            CHECK_EQ_INT(a->nbytes, 24);
            CHECK_EQ_INT(a->file_index, 0);
            for (int i = 0; i < 6; i++) {
                float f;
                memcpy(&f, (const unsigned char *)a->data + 4 * i, 4);
                CHECK_NEAR(f, i * 1.25 - 2.0, 0);
            }
        }
        const st_tensor *b = st_find(&s, "b.f16");
        CHECK(b != NULL);
        if (b) {
            CHECK_EQ_INT(b->dtype, DTYPE_F16);
            CHECK_EQ_INT(b->nbytes, 8);
            for (int i = 0; i < 4; i++) {
                uint16_t h;
                memcpy(&h, (const unsigned char *)b->data + 2 * i, 2);
                CHECK_NEAR(f16_to_f32(h), F16_VALS[i], 0);
            }
        }
        const st_tensor *c = st_find(&s, "c.bf16");
        CHECK(c != NULL);
        if (c) {
            CHECK_EQ_INT(c->dtype, DTYPE_BF16);
            CHECK_EQ_INT(c->shape[0], 2);
            for (int i = 0; i < 4; i++) {
                uint16_t h;
                memcpy(&h, (const unsigned char *)c->data + 2 * i, 2);
                CHECK_NEAR(bf16_to_f32(h), BF16_VALS[i], 0);
            }
        }
        const st_tensor *d = st_find(&s, "d.empty");
        CHECK(d != NULL);
        if (d) {
            CHECK_EQ_INT(d->n_elems, 0);
            CHECK_EQ_INT(d->nbytes, 0);
        }
        CHECK(st_find(&s, "__metadata__") == NULL);
        CHECK(st_find(&s, "a.f3") == NULL);
        CHECK(st_find(&s, "zzz") == NULL);
        CHECK(st_find(&s, "") == NULL);
    }
    st_close(&s);
    CHECK(set_is_closed(&s));
    st_close(&s); /* twice is safe */

    /* The same file as a directory without an index. */
    rc = st_open_dir(&s, tmp);
    CHECK_MSG(rc == 0, "st_open_dir: %s", err_msg());
    CHECK_EQ_INT(s.n_tensors, 4);
    st_close(&s);
    rm_tree(tmp);
}

TEST(test_st_close_zeroed) {
    st_set s;
    memset(&s, 0, sizeof s);
    st_close(&s);
    CHECK(set_is_closed(&s));
    CHECK(st_find(&s, "x") == NULL);
}

/* ---- synthetic: hostile single files ---- */

TEST(test_st_truncated) {
    char tmp[64], path[512];
    if (!make_tmpdir(tmp, sizeof tmp)) SKIP("mkdtemp failed");
    unsigned char data[40];
    valid_data(data);
    size_t n;
    unsigned char *img = st_image(VALID_HDR, data, sizeof data, UINT64_MAX, &n);
    size_t hlen = n - 8 - sizeof data;

    snprintf(path, sizeof path, "%s/cut_header.safetensors", tmp);
    CHECK(write_bytes(path, img, 8 + hlen / 2) == 0);
    EXPECT_FILE_FAIL(tmp, "cut_header.safetensors", "past the end of the file", NULL);

    snprintf(path, sizeof path, "%s/cut_data.safetensors", tmp);
    CHECK(write_bytes(path, img, n - 4) == 0);
    EXPECT_FILE_FAIL(tmp, "cut_data.safetensors", "past the end of the data area", "tensor \"");

    snprintf(path, sizeof path, "%s/cut_len.safetensors", tmp);
    CHECK(write_bytes(path, img, 5) == 0);
    EXPECT_FILE_FAIL(tmp, "cut_len.safetensors", "too short", NULL);

    snprintf(path, sizeof path, "%s/zero.safetensors", tmp);
    CHECK(write_bytes(path, "", 0) == 0);
    EXPECT_FILE_FAIL(tmp, "zero.safetensors", "0 bytes", NULL);
    free(img);

    /* Header length larger than the file, and absurdly large. */
    img = st_image("{}", NULL, 0, 1000, &n);
    snprintf(path, sizeof path, "%s/long_len.safetensors", tmp);
    CHECK(write_bytes(path, img, n) == 0);
    free(img);
    EXPECT_FILE_FAIL(tmp, "long_len.safetensors", "1000", "past the end of the file");
    img = st_image("{}", NULL, 0, (uint64_t)1 << 62, &n);
    snprintf(path, sizeof path, "%s/huge_len.safetensors", tmp);
    CHECK(write_bytes(path, img, n) == 0);
    free(img);
    EXPECT_FILE_FAIL(tmp, "huge_len.safetensors", "limit", NULL);
    img = st_image("{}", NULL, 0, UINT64_MAX - 3, &n);
    snprintf(path, sizeof path, "%s/max_len.safetensors", tmp);
    CHECK(write_bytes(path, img, n) == 0);
    free(img);
    EXPECT_FILE_FAIL(tmp, "max_len.safetensors", "limit", NULL);

    /* Missing file. */
    EXPECT_FILE_FAIL(tmp, "absent.safetensors", "cannot open", NULL);
    rm_tree(tmp);
}

TEST(test_st_bad_header) {
    char tmp[64];
    if (!make_tmpdir(tmp, sizeof tmp)) SKIP("mkdtemp failed");
    struct { const char *file, *hdr, *n1, *n2; size_t data; } cases[] = {
        {"not_json.safetensors", "{\"a\": {\"dtype\": ", "not valid JSON", NULL, 0},
        {"garbage.safetensors", "\x01\x02\xff\xfe garbage", "not valid JSON", NULL, 0},
        {"empty_hdr.safetensors", "", "not valid JSON", NULL, 0},
        {"array.safetensors", "[1, 2, 3]", "expected an object", NULL, 0},
        {"meta_bad.safetensors", "{\"__metadata__\": 3}", "__metadata__", NULL, 0},
        {"entry_not_obj.safetensors", "{\"w\": [1]}", "tensor \"w\"", "expected an object", 0},
        {"dtype_q9.safetensors", "{\"w\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,2]}}",
         "tensor \"w\"", "unknown dtype \"Q9\"", 2},
        {"dtype_missing.safetensors", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,2]}}", "tensor \"w\"",
         "dtype", 2},
        {"dtype_num.safetensors", "{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,2]}}",
         "tensor \"w\"", "dtype", 2},
        {"shape_neg.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[-1,2],\"data_offsets\":[0,2]}}",
         "tensor \"w\"", "shape[0]", 2},
        {"shape_str.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":\"2\",\"data_offsets\":[0,2]}}",
         "tensor \"w\"", "shape", 2},
        {"shape_real.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[2.0],\"data_offsets\":[0,2]}}",
         "tensor \"w\"", "shape[0]", 2},
        {"shape_dims.safetensors",
         "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
         "tensor \"w\"", "dimensions", 1},
        {"shape_ovf.safetensors",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
         "tensor \"w\"", "overflow", 4},
        {"bytes_ovf.safetensors",
         "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}",
         "tensor \"w\"", "overflow", 8},
        {"offs_past.safetensors",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[1000],\"data_offsets\":[0,4000]}}", "tensor \"w\"",
         "[0, 4000] past the end", 16},
        {"offs_rev.safetensors",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[100,50]}}", "tensor \"w\"",
         "data_offsets [100, 50] invalid", 128},
        {"offs_neg.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
         "tensor \"w\"", "invalid", 16},
        {"offs_len.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}",
         "tensor \"w\"", "needs 16", 16},
        {"offs_three.safetensors",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "tensor \"w\"",
         "two integers", 16},
        {"offs_huge.safetensors",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999999]}}",
         "not valid JSON", NULL, 16},
        {"overlap.safetensors",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         "\"x\" [0, 8]", "overlap", 16},
        {"same_span.safetensors",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         "overlap", NULL, 16},
        {"dup_key.safetensors",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         "duplicate", NULL, 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(write_st(tmp, cases[i].file, cases[i].hdr, NULL, cases[i].data) == 0);
        EXPECT_FILE_FAIL(tmp, cases[i].file, cases[i].n1, cases[i].n2);
    }
    rm_tree(tmp);
}

/* Every dtype name maps; an empty tensor may sit inside another's span. */
TEST(test_st_all_dtypes) {
    char tmp[64], path[512];
    if (!make_tmpdir(tmp, sizeof tmp)) SKIP("mkdtemp failed");
    static const struct { const char *name; dtype_t t; int size; } dts[] = {
        {"F64", DTYPE_F64, 8},   {"F32", DTYPE_F32, 4},         {"F16", DTYPE_F16, 2},
        {"BF16", DTYPE_BF16, 2}, {"I64", DTYPE_I64, 8},         {"I32", DTYPE_I32, 4},
        {"I16", DTYPE_I16, 2},   {"I8", DTYPE_I8, 1},           {"U8", DTYPE_U8, 1},
        {"BOOL", DTYPE_BOOL, 1}, {"F8_E4M3", DTYPE_F8_E4M3, 1}, {"F8_E5M2", DTYPE_F8_E5M2, 1},
    };
    char hdr[4096];
    size_t o = 0, off = 0;
    o += (size_t)snprintf(hdr + o, sizeof hdr - o, "{");
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        o += (size_t)snprintf(hdr + o, sizeof hdr - o,
                              "\"t%02zu\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[%zu,%zu]},",
                              i, dts[i].name, off, off + 3 * (size_t)dts[i].size);
        off += 3 * (size_t)dts[i].size;
    }
    snprintf(hdr + o, sizeof hdr - o,
             "\"empty_inside\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[4,4]}}");
    CHECK(write_st(tmp, "dt.safetensors", hdr, NULL, off) == 0);
    snprintf(path, sizeof path, "%s/dt.safetensors", tmp);
    st_set s;
    int rc = st_open_file(&s, path);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(s.n_tensors, 13);
    for (size_t i = 0; rc == 0 && i < sizeof dts / sizeof dts[0]; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "t%02zu", i);
        const st_tensor *t = st_find(&s, nm);
        CHECK(t != NULL);
        if (t) {
            CHECK_EQ_INT(t->dtype, dts[i].t);
            CHECK_EQ_INT(t->nbytes, 3 * dts[i].size);
        }
    }
    st_close(&s);
    rm_tree(tmp);
}

/* ---- synthetic: directories and shard indexes ---- */

static const char *SHARD1_HDR =
    "{\"w1\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"w2\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
static const char *SHARD2_HDR = "{\"w3\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}";
static const char *GOOD_INDEX =
    "{\"metadata\":{\"total_size\":24},\"weight_map\":{\"w1\":\"m-1.safetensors\","
    "\"w2\":\"m-1.safetensors\",\"w3\":\"m-2.safetensors\"}}";

/* Writes the two good shards into a fresh temp dir. */
static char *sharded_dir(char *buf, size_t n) {
    if (!make_tmpdir(buf, n)) return NULL;
    float a[4] = {1, 2, 3, 4};
    uint16_t b[4];
    for (int i = 0; i < 4; i++) b[i] = f32_to_bf16(10.0f + (float)i);
    if (write_st(buf, "m-1.safetensors", SHARD1_HDR, a, sizeof a) != 0 ||
        write_st(buf, "m-2.safetensors", SHARD2_HDR, b, sizeof b) != 0)
        return NULL;
    return buf;
}

TEST(test_st_sharded_valid) {
    char tmp[64];
    if (!sharded_dir(tmp, sizeof tmp)) SKIP("cannot write temp files");
    CHECK(write_text(tmp, "model.safetensors.index.json", GOOD_INDEX) == 0);
    st_set s;
    int rc = st_open_dir(&s, tmp);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_EQ_INT(s.n_files, 2);
    CHECK_EQ_INT(s.n_tensors, 3);
    const st_tensor *w2 = st_find(&s, "w2"), *w3 = st_find(&s, "w3");
    CHECK(w2 && w3);
    if (w2 && w3) {
        float f;
        memcpy(&f, (const unsigned char *)w2->data + 4, 4);
        CHECK_NEAR(f, 4.0, 0);
        uint16_t h;
        memcpy(&h, (const unsigned char *)w3->data + 6, 2);
        CHECK_NEAR(bf16_to_f32(h), 13.0, 0);
        CHECK(strstr(s.paths[w2->file_index], "m-1.safetensors") != NULL);
        CHECK(strstr(s.paths[w3->file_index], "m-2.safetensors") != NULL);
    }
    st_close(&s);
    rm_tree(tmp);
}

TEST(test_st_sharded_hostile) {
    char tmp[64];
    if (!sharded_dir(tmp, sizeof tmp)) SKIP("cannot write temp files");
    const char *ix = "model.safetensors.index.json";

    /* A shard the index names is missing. */
    CHECK(write_text(tmp, ix,
                     "{\"weight_map\":{\"w1\":\"m-1.safetensors\",\"w2\":\"m-1.safetensors\","
                     "\"w3\":\"m-2.safetensors\",\"w4\":\"m-3.safetensors\"}}") == 0);
    EXPECT_DIR_FAIL(tmp, "m-3.safetensors", ix);

    /* Path traversal. */
    CHECK(write_text(tmp, ix, "{\"weight_map\":{\"w1\":\"../m-1.safetensors\"}}") == 0);
    EXPECT_DIR_FAIL(tmp, "../m-1.safetensors", ix);
    CHECK(write_text(tmp, ix, "{\"weight_map\":{\"w1\":\"..\"}}") == 0);
    EXPECT_DIR_FAIL(tmp, "\"..\"", ix);
    CHECK(write_text(tmp, ix, "{\"weight_map\":{\"w1\":\"/etc/passwd\"}}") == 0);
    EXPECT_DIR_FAIL(tmp, "/etc/passwd", ix);

    /* Index lists a tensor its shard lacks. */
    CHECK(write_text(tmp, ix,
                     "{\"weight_map\":{\"w1\":\"m-1.safetensors\",\"w2\":\"m-1.safetensors\","
                     "\"w3\":\"m-2.safetensors\",\"w9\":\"m-2.safetensors\"}}") == 0);
    EXPECT_DIR_FAIL(tmp, "\"w9\"", "m-2.safetensors");

    /* A shard holds a tensor the index does not list. */
    CHECK(write_text(tmp, ix,
                     "{\"weight_map\":{\"w1\":\"m-1.safetensors\",\"w3\":\"m-2.safetensors\"}}") == 0);
    EXPECT_DIR_FAIL(tmp, "\"w2\"", "not listed");

    /* The index puts a tensor in the wrong shard. */
    CHECK(write_text(tmp, ix,
                     "{\"weight_map\":{\"w1\":\"m-1.safetensors\",\"w2\":\"m-2.safetensors\","
                     "\"w3\":\"m-2.safetensors\"}}") == 0);
    EXPECT_DIR_FAIL(tmp, "\"w2\"", "assigns");

    /* Malformed index / wrong types. */
    CHECK(write_text(tmp, ix, "{\"weight_map\": {") == 0);
    EXPECT_DIR_FAIL(tmp, ix, "invalid JSON");
    CHECK(write_text(tmp, ix, "{\"metadata\": {}}") == 0);
    EXPECT_DIR_FAIL(tmp, ix, "weight_map");
    CHECK(write_text(tmp, ix, "{\"weight_map\":{\"w1\":7}}") == 0);
    EXPECT_DIR_FAIL(tmp, ix, "weight_map.w1");
    CHECK(write_text(tmp, ix, "[]") == 0);
    EXPECT_DIR_FAIL(tmp, ix, "object");

    /* The same tensor in two shards. */
    CHECK(write_st(tmp, "m-2.safetensors",
                   "{\"w3\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                   "\"w1\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                   NULL, 16) == 0);
    CHECK(write_text(tmp, ix, GOOD_INDEX) == 0);
    EXPECT_DIR_FAIL(tmp, "\"w1\" appears twice", "m-2.safetensors");

    /* A hostile shard: the error names the shard file and tensor. */
    CHECK(write_st(tmp, "m-2.safetensors",
                   "{\"w3\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,800]}}", NULL, 8) == 0);
    EXPECT_DIR_FAIL(tmp, "m-2.safetensors: tensor \"w3\"", "past the end");
    rm_tree(tmp);
}

TEST(test_st_dir_missing) {
    char tmp[64];
    if (!make_tmpdir(tmp, sizeof tmp)) SKIP("mkdtemp failed");
    EXPECT_DIR_FAIL(tmp, tmp, "model.safetensors");
    char sub[128];
    snprintf(sub, sizeof sub, "%s/nonexistent", tmp);
    EXPECT_DIR_FAIL(sub, sub, "not a directory");
    /* An empty model.safetensors in a dir. */
    CHECK(write_text(tmp, "model.safetensors", "") == 0);
    EXPECT_DIR_FAIL(tmp, "model.safetensors", "too short");
    rm_tree(tmp);
}

/* ---- the real checkpoint ---- */

static int index_count(const char *dir, int *n_shards) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    if (!root) return -1;
    json_t *wm = json_object_get(root, "weight_map");
    int n = (int)json_object_size(wm);
    const char *names[64];
    int ns = 0;
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *f = json_string_value(v);
        int seen = 0;
        for (int i = 0; i < ns; i++) seen |= strcmp(names[i], f) == 0;
        if (!seen && ns < 64) names[ns++] = f;
    }
    *n_shards = ns;
    json_decref(root);
    return n;
}

TEST(test_st_tinycoder) {
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) SKIP("../shared/models/tinycoder absent");
    int n_shards = 0, expected = index_count(dir, &n_shards);
    CHECK(expected > 0);
    CHECK_EQ_INT(n_shards, 3);
    st_set s;
    int rc = st_open_dir(&s, dir);
    CHECK_MSG(rc == 0, "st_open_dir: %s", err_msg());
    if (rc != 0) return;
    CHECK_EQ_INT(s.n_files, 3);
    CHECK_EQ_INT(s.n_tensors, expected);
    const st_tensor *e = st_find(&s, "model.embed_tokens.weight");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_INT(e->dtype, DTYPE_BF16);
        CHECK_EQ_INT(e->n_dims, 2);
        CHECK_EQ_INT(e->shape[0], 8192);
        CHECK_EQ_INT(e->shape[1], 512);
        CHECK_EQ_INT(e->nbytes, 8192 * 512 * 2);
    }
    const st_tensor *nw = st_find(&s, "model.norm.weight");
    CHECK(nw != NULL);
    if (nw) {
        CHECK_EQ_INT(nw->dtype, DTYPE_BF16);
        CHECK_EQ_INT(nw->n_dims, 1);
        CHECK_EQ_INT(nw->shape[0], 512);
        int finite = 1, nonzero = 0;
        for (int i = 0; i < 8; i++) {
            uint16_t h;
            memcpy(&h, (const unsigned char *)nw->data + 2 * i, 2);
            float f = bf16_to_f32(h);
            finite &= isfinite(f) != 0;
            nonzero |= f != 0.0f;
        }
        CHECK(finite);
        CHECK(nonzero);
    }
    CHECK(st_find(&s, "mtp.fc.weight") != NULL);
    CHECK(st_find(&s, "lm_head.weight") == NULL); /* tied */
    CHECK(st_find(&s, "model.layers.99.mlp.up_proj.weight") == NULL);
    /* Every tensor lies inside its file's mapping. */
    for (int i = 0; i < s.n_tensors; i++) {
        const st_tensor *t = &s.tensors[i];
        CHECK(t->file_index >= 0 && t->file_index < s.n_files);
        const file_mapping *m = &s.maps[t->file_index];
        CHECK((const unsigned char *)t->data >= m->data &&
              (const unsigned char *)t->data + t->nbytes <= m->data + m->size);
    }
    st_close(&s);
    CHECK(set_is_closed(&s));
}

TEST(test_st_drafter) {
    const char *dir = test_shared_path("models/tinycoder/drafter");
    if (!dir) SKIP("../shared/models/tinycoder/drafter absent");
    st_set s;
    int rc = st_open_dir(&s, dir);
    CHECK_MSG(rc == 0, "st_open_dir: %s", err_msg());
    if (rc != 0) return;
    CHECK_EQ_INT(s.n_files, 1);
    CHECK(s.n_tensors > 0);
    const st_tensor *e = st_find(&s, "model.embed_tokens.weight");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_INT(e->dtype, DTYPE_BF16);
        CHECK_EQ_INT(e->shape[0], 8192);
        CHECK_EQ_INT(e->shape[1], 256);
    }
    CHECK(st_find(&s, "model.layers.1.self_attn.q_norm.weight") != NULL);
    CHECK(st_find(&s, "model.layers.2.self_attn.q_norm.weight") == NULL);
    st_close(&s);
}
