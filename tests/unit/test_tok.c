/* test_tok.c — tokenizer tests: the six real tokenizers of
 * ../shared/fixtures/tokenizer_cases.json (ids, ids with special tokens,
 * decode, streaming decode == full decode, chunks never split a UTF-8
 * character), malformed tokenizer.json files, small synthetic tokenizers for
 * features the fixtures do not use, and the speed of a 100 KB encode. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "test.h"
#include "tok/tok.h"

/* ---- helpers ----------------------------------------------------------------- */

static bool utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        int l = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!l || i + l > n) return false;
        for (int k = 1; k < l; k++)
            if ((u[i + k] & 0xC0) != 0x80) return false;
        i += l;
    }
    return true;
}

static json_t *fixtures(void) {
    static json_t *root;
    static bool tried;
    if (!tried) {
        tried = true;
        const char *p = test_shared_path("fixtures/tokenizer_cases.json");
        if (p) root = json_load_file(p, 0, NULL);
    }
    return root;
}

/* Runs scripts/fetch_tokenizers.sh once; returns the cache dir or NULL
 * (reason in *why). */
static const char *tokenizer_cache(const char **why) {
    static char dir[1024], reason[1200];
    static int state; // 0 not run, 1 ok, -1 failed
    if (state == 0) {
        state = -1;
        FILE *f = popen("scripts/fetch_tokenizers.sh 2>/tmp/kestrel-fetch-tok.err", "r");
        if (!f) snprintf(reason, sizeof reason, "cannot run scripts/fetch_tokenizers.sh");
        else {
            char line[1024] = "";
            while (fgets(line, sizeof line, f)) snprintf(dir, sizeof dir, "%s", line);
            int st = pclose(f);
            dir[strcspn(dir, "\n")] = 0;
            if (st == 0 && dir[0]) state = 1;
            else {
                char err[900] = "";
                FILE *e = fopen("/tmp/kestrel-fetch-tok.err", "r");
                if (e) {
                    size_t n = fread(err, 1, sizeof err - 1, e);
                    err[n] = 0;
                    err[strcspn(err, "\n")] = 0;
                    fclose(e);
                }
                snprintf(reason, sizeof reason, "scripts/fetch_tokenizers.sh failed (no network?): %s", err);
            }
        }
    }
    *why = reason;
    return state == 1 ? dir : NULL;
}

/* Loads a fixture tokenizer once and keeps it for the run. */
static tokenizer *fixture_tokenizer(const char *name, const char **why) {
    static struct { const char *name; tokenizer *t; } cache[8];
    static char reason[1400];
    for (int i = 0; i < 8; i++)
        if (cache[i].name && !strcmp(cache[i].name, name)) return cache[i].t;
    char path[1200];
    if (!strcmp(name, "tinycoder")) {
        const char *p = test_shared_path("models/tinycoder");
        if (!p) {
            *why = "../shared/models/tinycoder absent";
            return NULL;
        }
        snprintf(path, sizeof path, "%s", p);
    } else {
        const char *dir = tokenizer_cache(why);
        if (!dir) return NULL;
        snprintf(path, sizeof path, "%s/%s", dir, name);
    }
    tokenizer *t = NULL;
    if (tok_load(&t, path) < 0) {
        snprintf(reason, sizeof reason, "tok_load(%s): %s", path, err_msg());
        *why = reason;
        return NULL;
    }
    for (int i = 0; i < 8; i++)
        if (!cache[i].name) {
            cache[i].name = name;
            cache[i].t = t;
            break;
        }
    return t;
}

static bool ids_equal(const int32_t *a, int na, json_t *b) {
    if (!json_is_array(b) || (size_t)na != json_array_size(b)) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != json_integer_value(json_array_get(b, i))) return false;
    return true;
}

static void print_ids(const char *label, const int32_t *a, int n) {
    printf("      %s [", label);
    for (int i = 0; i < n && i < 40; i++) printf(i ? ",%d" : "%d", (int)a[i]);
    printf(n > 40 ? ",...]\n" : "]\n");
}

static void print_json_ids(const char *label, json_t *a) {
    printf("      %s [", label);
    for (size_t i = 0; i < json_array_size(a) && i < 40; i++)
        printf(i ? ",%lld" : "%lld", (long long)json_integer_value(json_array_get(a, i)));
    printf(json_array_size(a) > 40 ? ",...]\n" : "]\n");
}

/* Streams ids through tok_stream; returns the concatenation (malloc'd) and
 * checks that every chunk is valid UTF-8. */
static char *stream_all(const tokenizer *t, const int32_t *ids, int n, bool skip, bool *chunks_ok) {
    tok_stream *s = tok_stream_new(t, skip);
    size_t cap = 256, len = 0, cl;
    char *out = malloc(cap);
    *chunks_ok = true;
    for (int i = 0; i <= n; i++) {
        const char *c = i < n ? tok_stream_push(s, ids[i], &cl) : tok_stream_flush(s, &cl);
        if (!c) {
            *chunks_ok = false;
            continue;
        }
        if (!utf8_valid(c, cl)) *chunks_ok = false;
        while (len + cl + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + len, c, cl);
        len += cl;
    }
    out[len] = 0;
    tok_stream_free(s);
    return out;
}

/* The tokens' tok_id_bytes concatenated give the decoded text, but for the
 * one leading space a text's start may drop (Metaspace, Strip). */
static bool id_bytes_match(const tokenizer *t, const int32_t *ids, int n, const char *dec, size_t dl) {
    size_t cap = dl + 16, len = 0;
    char *all = malloc(cap);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        char *b;
        size_t bl;
        if (tok_id_bytes(t, ids[i], &b, &bl) < 0) {
            ok = false;
            break;
        }
        while (len + bl > cap) all = realloc(all, cap *= 2);
        memcpy(all + len, b, bl);
        len += bl;
        free(b);
    }
    ok = ok && ((len == dl && !memcmp(all, dec, dl)) || (len == dl + 1 && all[0] == ' ' && !memcmp(all + 1, dec, dl)));
    free(all);
    return ok;
}

/* ---- fixture cases ---------------------------------------------------------------- */

static void run_fixture(const char *name) {
    json_t *root = fixtures();
    if (!root) SKIP("../shared/fixtures/tokenizer_cases.json absent");
    json_t *tj = json_object_get(json_object_get(root, "tokenizers"), name);
    json_t *cases = json_object_get(tj, "cases");
    CHECK(json_is_array(cases));
    const char *why = "";
    tokenizer *t = fixture_tokenizer(name, &why);
    if (!t) {
        if (strstr(why, "tok_load")) CHECK_MSG(0, "%s", why);
        else SKIP(why);
        return;
    }
    json_t *vs = json_object_get(tj, "vocab_size");
    if (vs) CHECK_EQ_INT(tok_vocab_size(t), json_is_string(vs) ? atoi(json_string_value(vs)) : json_integer_value(vs));
    int n_cases = (int)json_array_size(cases), pass = 0, shown = 0;
    for (int i = 0; i < n_cases; i++) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t tlen = json_string_length(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "ids"), *want_sp = json_object_get(c, "ids_add_special");
        const char *want_dec = json_string_value(json_object_get(c, "decoded"));
        int32_t *ids = NULL, *ids_sp = NULL;
        int n = 0, n_sp = 0;
        char *dec = NULL, *dec_skip = NULL, *st = NULL, *st_skip = NULL;
        size_t dl = 0, dsl = 0;
        bool ok = true, chunks_ok = true, chunks_ok2 = true;
        const char *what = "";
        if (tok_encode(t, text, tlen, false, &ids, &n) < 0 || !ids_equal(ids, n, want)) ok = false, what = "ids";
        else if (tok_encode(t, text, tlen, true, &ids_sp, &n_sp) < 0 || !ids_equal(ids_sp, n_sp, want_sp))
            ok = false, what = "ids_add_special";
        if (ok) {
            /* decode the fixture's ids (not ours) */
            int nw = (int)json_array_size(want);
            int32_t *w = malloc(sizeof *w * (nw ? nw : 1));
            for (int k = 0; k < nw; k++) w[k] = (int32_t)json_integer_value(json_array_get(want, k));
            if (tok_decode(t, w, nw, false, &dec, &dl) < 0 || strcmp(dec, want_dec) || dl != strlen(want_dec))
                ok = false, what = "decoded";
            else if (tok_decode(t, w, nw, true, &dec_skip, &dsl) < 0)
                ok = false, what = "decode(skip_special)";
            else {
                st = stream_all(t, w, nw, false, &chunks_ok);
                st_skip = stream_all(t, w, nw, true, &chunks_ok2);
                if (strcmp(st, dec) || strcmp(st_skip, dec_skip)) ok = false, what = "stream != decode";
                else if (!chunks_ok || !chunks_ok2) ok = false, what = "stream chunk not valid UTF-8";
                else if (!id_bytes_match(t, w, nw, dec, dl)) ok = false, what = "tok_id_bytes";
            }
            free(w);
        }
        if (ok) pass++;
        else if (shown++ < 4) {
            printf("    %s case %d (%s mismatch): text \"%.80s\"\n", name, i, what, text);
            if (!strcmp(what, "ids")) {
                print_ids("got ", ids, n);
                print_json_ids("want", want);
            } else if (!strcmp(what, "ids_add_special")) {
                print_ids("got ", ids_sp, n_sp);
                print_json_ids("want", want_sp);
            } else if (!strcmp(what, "decoded"))
                printf("      got  \"%s\"\n      want \"%s\"\n", dec ? dec : err_msg(), want_dec);
            else if (st)
                printf("      stream \"%s\"\n      decode \"%s\"\n", st, dec);
        }
        free(ids);
        free(ids_sp);
        free(dec);
        free(dec_skip);
        free(st);
        free(st_skip);
    }
    printf("    %s: %d/%d cases pass\n", name, pass, n_cases);
    CHECK_EQ_INT(pass, n_cases);
}

TEST(test_tok_fixture_qwen3) { run_fixture("qwen3"); }
TEST(test_tok_fixture_llama3) { run_fixture("llama3"); }
TEST(test_tok_fixture_llama3_1) { run_fixture("llama3_1"); }
TEST(test_tok_fixture_gemma3) { run_fixture("gemma3"); }
TEST(test_tok_fixture_llama2) { run_fixture("llama2"); }
TEST(test_tok_fixture_tinycoder) { run_fixture("tinycoder"); }

/* ---- synthetic tokenizers -------------------------------------------------------------
 * Features the six real tokenizers do not use (Metaspace pre-tokenizer with
 * prepend_scheme "first", byte fallback without a ByteFallback decoder,
 * lstrip/rstrip/single_word/normalized added tokens, NFKC+Lowercase+Strip,
 * ByteLevel with add_prefix_space and the GPT-2 regex, RobertaProcessing,
 * Split behaviors and invert, Digits/Punctuation/WhitespaceSplit, fuse_unk,
 * Replace and Strip after Fuse). Expected values come from Hugging Face
 * tokenizers 0.23.2 (the npm "tokenizers" package) run on these same files. */

static const char SYN_SP_JSON[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,\"con"
    "tent\":\"<unk>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":fal"
    "se,\"special\":true},{\"id\":1,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":2,\"content\":\"</s>\",\"si"
    "ngle_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":283,\"content\":\"<mask>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":false,"
    "\"normalized\":false,\"special\":false},{\"id\":284,\"content\":\"[R]\",\"single_word\":fal"
    "se,\"lstrip\":false,\"rstrip\":true,\"normalized\":false,\"special\":true},{\"id\":285,\"co"
    "ntent\":\"bar\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,"
    "\"special\":false}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replace"
    "ment\":\"\342\226\201\",\"prepend_scheme\":\"first\",\"split\":true},\"post_processor\":{\""
    "type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}}"
    ",{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\""
    ":0}}],\"pair\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"Sequence\":{\"id\":\"B\",\"t"
    "ype_id\":1}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}"
    ",\"</s>\":{\"id\":\"</s>\",\"ids\":[2],\"tokens\":[\"</s>\"]}}},\"decoder\":{\"type\":\"Met"
    "aspace\",\"replacement\":\"\342\226\201\",\"prepend_scheme\":\"first\",\"split\":true},\"mo"
    "del\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"continuing_subword_prefi"
    "x\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":true,\"ignore_mer"
    "ges\":false,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"\342\226\201\":259,\"a\":260,\"b"
    "\":261,\"c\":262,\"h\":263,\"e\":264,\"l\":265,\"o\":266,\"f\":267,\"r\":268,\"x\":269,\"["
    "\":270,\"]\":271,\"X\":272,\"\342\226\201h\":273,\"ll\":274,\"\342\226\201he\":275,\"llo\":"
    "276,\"\342\226\201hello\":277,\"fo\":278,\"foo\":279,\"\342\226\201fo\":280,\"\342\226\201f"
    "oo\":281,\"ba\":282},\"merges\":[\"\342\226\201 h\",\"l l\",\"\342\226\201h e\",\"ll o\",\""
    "\342\226\201he llo\",\"f o\",\"fo o\",\"\342\226\201 fo\",\"\342\226\201fo o\",\"b a\"]}}";

static const char SYN_SP_CASES[] =
    "[{\"text\":\"hello hello\",\"ids\":[277,277],\"ids_sp\":[1,277,277,2],\"dec\":\"hello hello"
    "\",\"dec_skip\":\"hello hello\"},{\"text\":\" hello\",\"ids\":[277],\"ids_sp\":[1,277,2],\""
    "dec\":\"hello\",\"dec_skip\":\"hello\"},{\"text\":\"h\303\251llo\",\"ids\":[273,198,172,276"
    "],\"ids_sp\":[1,273,198,172,276,2],\"dec\":\"h<0xC3><0xA9>llo\",\"dec_skip\":\"h<0xC3><0xA9"
    ">llo\"},{\"text\":\"a <mask> b\",\"ids\":[259,260,283,259,261],\"ids_sp\":[1,259,260,283,25"
    "9,261,2],\"dec\":\"a<mask> b\",\"dec_skip\":\"a<mask> b\"},{\"text\":\"a  <mask>b\",\"ids\""
    ":[259,260,283,261],\"ids_sp\":[1,259,260,283,261,2],\"dec\":\"a<mask>b\",\"dec_skip\":\"a<m"
    "ask>b\"},{\"text\":\"x[R]  hello\",\"ids\":[259,269,284,263,264,276],\"ids_sp\":[1,259,269,"
    "284,263,264,276,2],\"dec\":\"x[R]hello\",\"dec_skip\":\"xhello\"},{\"text\":\"bar foobar ba"
    "r\",\"ids\":[285,259,279,282,268,259,285],\"ids_sp\":[1,285,259,279,282,268,259,285,2],\"de"
    "c\":\"bar foobar bar\",\"dec_skip\":\"bar foobar bar\"},{\"text\":\"xbar bar.\",\"ids\":[25"
    "9,269,282,268,259,285,49],\"ids_sp\":[1,259,269,282,268,259,285,49,2],\"dec\":\"xbar bar<0x"
    "2E>\",\"dec_skip\":\"xbar bar<0x2E>\"},{\"text\":\"x<s>hello\",\"ids\":[259,269,1,263,264,2"
    "76],\"ids_sp\":[1,259,269,1,263,264,276,2],\"dec\":\"x<s>hello\",\"dec_skip\":\"xhello\"},{"
    "\"text\":\"\",\"ids\":[],\"ids_sp\":[1,2],\"dec\":\"\",\"dec_skip\":\"\"},{\"text\":\"  \","
    "\"ids\":[259,259],\"ids_sp\":[1,259,259,2],\"dec\":\" \",\"dec_skip\":\" \"},{\"text\":\"he"
    "llo  \",\"ids\":[277,259,259],\"ids_sp\":[1,277,259,259,2],\"dec\":\"hello  \",\"dec_skip\""
    ":\"hello  \"},{\"text\":\"foo\303\251\342\202\254\",\"ids\":[259,279,198,172,229,133,175],"
    "\"ids_sp\":[1,259,279,198,172,229,133,175,2],\"dec\":\"foo<0xC3><0xA9><0xE2><0x82><0xAC>\","
    "\"dec_skip\":\"foo<0xC3><0xA9><0xE2><0x82><0xAC>\"},{\"text\":\"ba ba\",\"ids\":[259,282,25"
    "9,282],\"ids_sp\":[1,259,282,259,282,2],\"dec\":\"ba ba\",\"dec_skip\":\"ba ba\"}]";

static const char SYN_BL_JSON[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,\"con"
    "tent\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false"
    ",\"special\":true},{\"id\":1,\"content\":\"</s>\",\"single_word\":false,\"lstrip\":false,\""
    "rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":35,\"content\":\"<|tag|>\",\""
    "single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,\"special\":false"
    "}],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"L"
    "owercase\"},{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}]},\"pre_tokenizer"
    "\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":tr"
    "ue},\"post_processor\":{\"type\":\"RobertaProcessing\",\"sep\":[\"</s>\",1],\"cls\":[\"<s>"
    "\",0],\"trim_offsets\":true,\"add_prefix_space\":true},\"decoder\":{\"type\":\"ByteLevel\","
    "\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\"model\":{\"type\":\"B"
    "PE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,\"end_of_word_s"
    "uffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"vocab\":{\"<s>\":0,\"</s>\":1,\"<"
    "pad>\":2,\"\304\240\":3,\"a\":4,\"b\":5,\"c\":6,\"d\":7,\"e\":8,\"h\":9,\"l\":10,\"o\":11,"
    "\"w\":12,\"r\":13,\"1\":14,\"2\":15,\"!\":16,\"<\":17,\">\":18,\"|\":19,\"t\":20,\"g\":21,"
    "\"\304\212\":22,\"\303\203\":23,\"\302\251\":24,\"\304\240h\":25,\"el\":26,\"\304\240hel\":"
    "27,\"lo\":28,\"\304\240hello\":29,\"\304\240w\":30,\"or\":31,\"\304\240wor\":32,\"12\":33,"
    "\"\303\203\302\251\":34},\"merges\":[[\"\304\240\",\"h\"],[\"e\",\"l\"],[\"\304\240h\",\"el"
    "\"],[\"l\",\"o\"],[\"\304\240hel\",\"lo\"],[\"\304\240\",\"w\"],[\"o\",\"r\"],[\"\304\240w"
    "\",\"or\"],[\"1\",\"2\"],[\"\303\203\",\"\302\251\"]]}}";

static const char SYN_BL_CASES[] =
    "[{\"text\":\"Hello World\",\"ids\":[29,32,10,7],\"ids_sp\":[0,29,32,10,7,1],\"dec\":\" hell"
    "o world\",\"dec_skip\":\" hello world\"},{\"text\":\"  HELLO world!!  \",\"ids\":[29,32,10,"
    "7,16,16],\"ids_sp\":[0,29,32,10,7,16,16,1],\"dec\":\" hello world!!\",\"dec_skip\":\" hello"
    " world!!\"},{\"text\":\"<|TAG|> hello<|tag|>\",\"ids\":[35,29,35],\"ids_sp\":[0,35,29,35,1]"
    ",\"dec\":\"<|tag|> hello<|tag|>\",\"dec_skip\":\"<|tag|> hello<|tag|>\"},{\"text\":\"12 121"
    "\",\"ids\":[3,33,3,33,14],\"ids_sp\":[0,3,33,3,33,14,1],\"dec\":\" 12 121\",\"dec_skip\":\""
    " 12 121\"},{\"text\":\"\303\251\",\"ids\":[3,34],\"ids_sp\":[0,3,34,1],\"dec\":\" \303\251"
    "\",\"dec_skip\":\" \303\251\"},{\"text\":\"\357\275\210\357\275\205\357\275\214\357\275\214"
    "\357\275\217\",\"ids\":[29],\"ids_sp\":[0,29,1],\"dec\":\" hello\",\"dec_skip\":\" hello\"}"
    ",{\"text\":\"<s>hello</s>\",\"ids\":[0,29,1],\"ids_sp\":[0,0,29,1,1],\"dec\":\"<s> hello</s"
    ">\",\"dec_skip\":\" hello\"},{\"text\":\"\\n\\nhello\\n\",\"ids\":[29],\"ids_sp\":[0,29,1],"
    "\"dec\":\" hello\",\"dec_skip\":\" hello\"},{\"text\":\"hello   world\",\"ids\":[29,3,3,32,"
    "10,7],\"ids_sp\":[0,29,3,3,32,10,7,1],\"dec\":\" hello   world\",\"dec_skip\":\" hello   wo"
    "rld\"}]";

static const char SYN_SP3_JSON[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[],\"normalizer"
    "\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"z"
    "+\"},\"content\":\"_\"},{\"type\":\"Prepend\",\"prepend\":\"_\"}]},\"pre_tokenizer\":{\"typ"
    "e\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"be"
    "havior\":\"MergedWithNext\",\"invert\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":\""
    "x+\"},\"behavior\":\"MergedWithPrevious\",\"invert\":false},{\"type\":\"Split\",\"pattern\""
    ":{\"Regex\":\"[ac]\"},\"behavior\":\"Contiguous\",\"invert\":true},{\"type\":\"Digits\",\"i"
    "ndividual_digits\":true},{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"},{\"type\":\"W"
    "hitespaceSplit\"}]},\"post_processor\":null,\"decoder\":{\"type\":\"Sequence\",\"decoders\""
    ":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"_\"},\"content\":\" \"},{\"type\":\"Fuse"
    "\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\"abc\"},\"content\":\"Z\"},{\"type\":\"S"
    "trip\",\"content\":\" \",\"start\":2,\"stop\":2}]},\"model\":{\"type\":\"BPE\",\"dropout\":"
    "null,\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null"
    ",\"fuse_unk\":true,\"byte_fallback\":false,\"vocab\":{\"[UNK]\":0,\"a\":1,\"b\":2,\"c\":3,"
    "\"-\":4,\"1\":5,\"2\":6,\"3\":7,\"_\":8,\".\":9,\",\":10,\" \":11,\"x\":12,\"y\":13,\"##b\""
    ":14,\"ab\":15,\"abc\":16},\"merges\":[\"a b\",\"ab c\"]}}";

static const char SYN_SP3_CASES[] =
    "[{\"text\":\"abc-abc\",\"ids\":[8,1,2,3,4,1,2,3],\"ids_sp\":[8,1,2,3,4,1,2,3],\"dec\":\"Z-Z"
    "\",\"dec_skip\":\"Z-Z\"},{\"text\":\"a-b--c\",\"ids\":[8,1,4,2,4,4,3],\"ids_sp\":[8,1,4,2,4"
    ",4,3],\"dec\":\"a-b--c\",\"dec_skip\":\"a-b--c\"},{\"text\":\"xxabcxx\",\"ids\":[8,12,12,1,"
    "2,3,12,12],\"ids_sp\":[8,12,12,1,2,3,12,12],\"dec\":\"xxZxx\",\"dec_skip\":\"xxZxx\"},{\"te"
    "xt\":\"ab 12.3,c\",\"ids\":[8,1,2,5,6,9,7,10,3],\"ids_sp\":[8,1,2,5,6,9,7,10,3],\"dec\":\"a"
    "b12.3,c\",\"dec_skip\":\"ab12.3,c\"},{\"text\":\"zzabc\",\"ids\":[8,8,1,2,3],\"ids_sp\":[8,"
    "8,1,2,3],\"dec\":\"Z\",\"dec_skip\":\"Z\"},{\"text\":\"yyy qq\",\"ids\":[8,13,13,13,0],\"id"
    "s_sp\":[8,13,13,13,0],\"dec\":\"yyy[UNK]\",\"dec_skip\":\"yyy[UNK]\"},{\"text\":\"a_b\",\"i"
    "ds\":[8,1,8,2],\"ids_sp\":[8,1,8,2],\"dec\":\"a b\",\"dec_skip\":\"a b\"},{\"text\":\"---\""
    ",\"ids\":[8,4,4,4],\"ids_sp\":[8,4,4,4],\"dec\":\"---\",\"dec_skip\":\"---\"},{\"text\":\" "
    "abc \",\"ids\":[8,1,2,3],\"ids_sp\":[8,1,2,3],\"dec\":\"Z\",\"dec_skip\":\"Z\"},{\"text\":"
    "\"cab_x-y\",\"ids\":[8,3,1,2,8,12,4,13],\"ids_sp\":[8,3,1,2,8,12,4,13],\"dec\":\"cab x-y\","
    "\"dec_skip\":\"cab x-y\"}]";

/* Writes `text` to a fresh temp dir as tokenizer.json; returns the file path
 * (static buffer) or NULL. */
static const char *write_temp_tokenizer(const char *text, size_t len) {
    static char path[256];
    char dir[] = "/tmp/kestrel-tok-XXXXXX";
    if (!mkdtemp(dir)) return NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fwrite(text, 1, len, f);
    fclose(f);
    return path;
}

static void remove_temp_tokenizer(const char *path) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    unlink(path);
    if (slash) {
        *slash = 0;
        rmdir(dir);
    }
}

static void run_synthetic(const char *name, const char *json_text, const char *cases_text, bool add_bytes) {
    json_t *root = json_loads(json_text, 0, NULL), *cases = json_loads(cases_text, 0, NULL);
    CHECK(root && cases);
    if (!root || !cases) return;
    if (add_bytes) { // <0x00>..<0xFF> as ids 3..258
        json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
        for (int b = 0; b < 256; b++) {
            char k[8];
            snprintf(k, sizeof k, "<0x%02X>", b);
            json_object_set_new(vocab, k, json_integer(3 + b));
        }
    }
    char *text = json_dumps(root, JSON_COMPACT);
    const char *path = write_temp_tokenizer(text, strlen(text));
    free(text);
    json_decref(root);
    tokenizer *t = NULL;
    int rc = path ? tok_load(&t, path) : -1;
    CHECK_MSG(rc == 0, "%s: tok_load: %s", name, err_msg());
    if (path) remove_temp_tokenizer(path);
    if (rc < 0) {
        json_decref(cases);
        return;
    }
    int pass = 0, n_cases = (int)json_array_size(cases);
    for (int i = 0; i < n_cases; i++) {
        json_t *c = json_array_get(cases, i);
        const char *s = json_string_value(json_object_get(c, "text"));
        int32_t *ids = NULL, *ids_sp = NULL;
        int n = 0, n_sp = 0;
        char *dec = NULL, *dec_skip = NULL, *st = NULL;
        size_t dl, dsl;
        bool chunks_ok = true, ok = true;
        ok = tok_encode(t, s, strlen(s), false, &ids, &n) == 0 && ids_equal(ids, n, json_object_get(c, "ids")) &&
             tok_encode(t, s, strlen(s), true, &ids_sp, &n_sp) == 0 &&
             ids_equal(ids_sp, n_sp, json_object_get(c, "ids_sp")) &&
             tok_decode(t, ids, n, false, &dec, &dl) == 0 &&
             !strcmp(dec, json_string_value(json_object_get(c, "dec"))) &&
             tok_decode(t, ids_sp, n_sp, true, &dec_skip, &dsl) == 0 &&
             !strcmp(dec_skip, json_string_value(json_object_get(c, "dec_skip")));
        if (ok) {
            st = stream_all(t, ids_sp, n_sp, true, &chunks_ok);
            ok = chunks_ok && !strcmp(st, dec_skip);
        }
        if (ok) pass++;
        else {
            printf("    %s case %d: text \"%s\"\n", name, i, s);
            print_ids("got ids   ", ids, n);
            print_json_ids("want ids  ", json_object_get(c, "ids"));
            print_ids("got ids_sp", ids_sp, n_sp);
            print_json_ids("want ids_sp", json_object_get(c, "ids_sp"));
            printf("      dec \"%s\" want \"%s\"; skip \"%s\" want \"%s\"; stream \"%s\"\n", dec ? dec : "",
                   json_string_value(json_object_get(c, "dec")), dec_skip ? dec_skip : "",
                   json_string_value(json_object_get(c, "dec_skip")), st ? st : "");
        }
        free(ids);
        free(ids_sp);
        free(dec);
        free(dec_skip);
        free(st);
    }
    printf("    %s: %d/%d cases pass\n", name, pass, n_cases);
    CHECK_EQ_INT(pass, n_cases);
    json_decref(cases);
    tok_free(t);
}

TEST(test_tok_synthetic_metaspace) { run_synthetic("metaspace", SYN_SP_JSON, SYN_SP_CASES, true); }
TEST(test_tok_synthetic_bytelevel) { run_synthetic("bytelevel", SYN_BL_JSON, SYN_BL_CASES, false); }
TEST(test_tok_synthetic_split) { run_synthetic("split", SYN_SP3_JSON, SYN_SP3_CASES, false); }

/* ---- malformed input ---------------------------------------------------------------------- */

static void expect_load_error(const char *label, const char *text, int want_rc, const char *want_sub) {
    const char *path = write_temp_tokenizer(text, strlen(text));
    CHECK(path != NULL);
    if (!path) return;
    tokenizer *t = NULL;
    err_clear();
    int rc = tok_load(&t, path);
    CHECK_MSG(rc < 0 && t == NULL, "%s: tok_load accepted it", label);
    if (rc < 0) {
        CHECK_MSG(want_rc == 0 || rc == want_rc, "%s: status %d, expected %d (%s)", label, rc, want_rc, err_msg());
        CHECK_MSG(strstr(err_msg(), "tokenizer.json") != NULL, "%s: message does not name the file: %s", label,
                  err_msg());
        CHECK_MSG(strstr(err_msg(), want_sub) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err_msg(), want_sub);
    }
    tok_free(t);
    remove_temp_tokenizer(path);
}

#define MODEL_OK "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}"

TEST(test_tok_malformed) {
    expect_load_error("not json", "this is { not json", KS_EFORMAT, "line 1");
    expect_load_error("empty file", "", KS_EFORMAT, "tokenizer.json");
    expect_load_error("array root", "[1,2,3]", KS_EFORMAT, "expected a JSON object");
    expect_load_error("missing model", "{\"version\":\"1.0\"}", KS_EFORMAT, "model: missing");
    expect_load_error("model not object", "{\"model\":[1]}", KS_EFORMAT, "model: expected object");
    expect_load_error("vocab wrong type", "{\"model\":{\"type\":\"BPE\",\"vocab\":[\"a\"],\"merges\":[]}}",
                      KS_EFORMAT, "model.vocab: expected object");
    expect_load_error("vocab id wrong type", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}",
                      KS_EFORMAT, "model.vocab[\"a\"]");
    expect_load_error("vocab id negative", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-5},\"merges\":[]}}",
                      KS_EFORMAT, "model.vocab[\"a\"]");
    expect_load_error("vocab id huge", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999},\"merges\":[]}}",
                      KS_EFORMAT, "model.vocab[\"a\"]");
    expect_load_error("merges missing", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", KS_EFORMAT,
                      "model.merges: missing");
    expect_load_error("merge unknown token",
                      "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\",\"a c\"]}}",
                      KS_EFORMAT, "model.merges[1]: token \"c\" not in model.vocab");
    expect_load_error("merge result unknown",
                      "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",\"b\"]]}}",
                      KS_EFORMAT, "model.merges[0]: token \"ab\" not in model.vocab");
    expect_load_error("merge bad shape",
                      "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[1,2]]}}",
                      KS_EFORMAT, "model.merges[0]");
    expect_load_error("merge three parts",
                      "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b c\"]}}",
                      KS_EFORMAT, "model.merges[0]");
    expect_load_error("WordPiece", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}", KS_EUNSUPPORTED,
                      "unsupported tokenizer model \"WordPiece\"");
    expect_load_error("Unigram", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1.0]]}}", KS_EUNSUPPORTED,
                      "unsupported tokenizer model \"Unigram\"");
    expect_load_error("added_tokens wrong type", "{\"added_tokens\":{}," MODEL_OK "}", KS_EFORMAT,
                      "added_tokens: expected array");
    expect_load_error("added token without content", "{\"added_tokens\":[{\"id\":5}]," MODEL_OK "}", KS_EFORMAT,
                      "added_tokens[0].content: missing");
    expect_load_error("bad regex",
                      "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(unclosed\"},"
                      "\"behavior\":\"Isolated\"}," MODEL_OK "}",
                      KS_EFORMAT, "pre_tokenizer.pattern.Regex");
    expect_load_error("unknown behavior",
                      "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                      "{\"String\":\" \"},\"behavior\":\"Sideways\"}]}," MODEL_OK "}",
                      KS_EFORMAT, "pre_tokenizer.pretokenizers[0].behavior");
    expect_load_error("unsupported pre-tokenizer", "{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"}," MODEL_OK "}",
                      KS_EUNSUPPORTED, "unsupported pre-tokenizer \"BertPreTokenizer\"");
    expect_load_error("unsupported normalizer", "{\"normalizer\":{\"type\":\"Precompiled\"}," MODEL_OK "}",
                      KS_EUNSUPPORTED, "unsupported normalizer \"Precompiled\"");
    expect_load_error("unsupported decoder", "{\"decoder\":{\"type\":\"WordPiece\"}," MODEL_OK "}",
                      KS_EUNSUPPORTED, "unsupported decoder \"WordPiece\"");
    expect_load_error("normalizer without type", "{\"normalizer\":{\"prepend\":\"x\"}," MODEL_OK "}", KS_EFORMAT,
                      "normalizer.type: missing");
    expect_load_error("template unknown special",
                      "{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                      "{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{}}," MODEL_OK "}",
                      KS_EFORMAT, "\"<s>\" not in special_tokens");
    expect_load_error("template id out of range",
                      "{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                      "{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[77]}}},"
                      MODEL_OK "}",
                      KS_EFORMAT, "special_tokens.<s>.ids[0]");

    /* missing files */
    tokenizer *t = NULL;
    CHECK_EQ_INT(tok_load(&t, "/nonexistent/kestrel/tokenizer.json"), KS_EIO);
    CHECK(strstr(err_msg(), "/nonexistent/kestrel/tokenizer.json") != NULL);
    char dir[] = "/tmp/kestrel-tok-XXXXXX";
    if (mkdtemp(dir)) {
        CHECK_EQ_INT(tok_load(&t, dir), KS_EIO);
        CHECK_MSG(strstr(err_msg(), "tokenizer.json") != NULL, "empty dir: %s", err_msg());
        rmdir(dir);
    }

    /* a valid minimal tokenizer: bad input to encode/decode is an error, not a crash */
    const char *ok = "{" MODEL_OK "}";
    const char *path = write_temp_tokenizer(ok, strlen(ok));
    CHECK(path && tok_load(&t, path) == 0);
    if (path) remove_temp_tokenizer(path);
    if (t) {
        int32_t *ids = NULL;
        int n = 0;
        CHECK_EQ_INT(tok_encode(t, "ab", 2, false, &ids, &n), 0);
        CHECK_EQ_INT(n, 1);
        if (n == 1) CHECK_EQ_INT(ids[0], 2);
        free(ids);
        CHECK_EQ_INT(tok_encode(t, "a\xff" "b", 3, false, &ids, &n), KS_EINVAL);
        CHECK(strstr(err_msg(), "UTF-8") != NULL);
        CHECK_EQ_INT(tok_encode(t, "", 0, true, &ids, &n), 0);
        CHECK_EQ_INT(n, 0);
        free(ids);
        char *s = NULL;
        size_t sl;
        int32_t bad[2] = { 0, 12345 };
        CHECK_EQ_INT(tok_decode(t, bad, 2, false, &s, &sl), KS_EINVAL);
        CHECK(s == NULL);
        int32_t neg = -1;
        CHECK_EQ_INT(tok_decode(t, &neg, 1, false, &s, &sl), KS_EINVAL);
        CHECK_EQ_INT(tok_decode(t, bad, 1, false, &s, &sl), 0);
        CHECK_EQ_STR(s, "a");
        free(s);
        tok_free(t);
    }
}

/* ---- lookups and streaming details ------------------------------------------------------ */

TEST(test_tok_api) {
    const char *why = "";
    tokenizer *t = fixture_tokenizer("tinycoder", &why);
    if (!t) SKIP(why);
    CHECK_EQ_INT(tok_vocab_size(t), 8192);
    int im_end = tok_piece_id(t, "<|im_end|>");
    CHECK(im_end > 0);
    CHECK(tok_is_special(t, im_end));
    CHECK_EQ_STR(tok_id_piece(t, im_end), "<|im_end|>");
    CHECK(tok_id_piece(t, -1) == NULL);
    CHECK(tok_id_piece(t, 8192) == NULL);
    CHECK_EQ_INT(tok_piece_id(t, "no such piece at all"), -1);
    int sp = tok_piece_id(t, "\xC4\xA0"); // "Ġ" = a space byte
    CHECK(sp >= 0 && !tok_is_special(t, sp));

    /* emoji split over byte-level tokens: no chunk may hold half a character,
     * skip_special drops <|im_end|>, and flush turns a dangling byte into U+FFFD */
    const char *text = "hi 👨‍👩‍👧 ok";
    int32_t *ids = NULL;
    int n = 0;
    CHECK_EQ_INT(tok_encode(t, text, strlen(text), false, &ids, &n), 0);
    int32_t *ids2 = malloc(sizeof *ids2 * (n + 2));
    memcpy(ids2, ids, sizeof *ids * n);
    ids2[n] = im_end;
    bool chunks_ok;
    char *s = stream_all(t, ids2, n + 1, true, &chunks_ok);
    CHECK(chunks_ok);
    CHECK_EQ_STR(s, text);
    free(s);
    s = stream_all(t, ids2, n + 1, false, &chunks_ok);
    CHECK(chunks_ok);
    CHECK(strstr(s, "<|im_end|>") != NULL);
    free(s);
    /* a lone lead byte of a 4-byte character: decode gives U+FFFD */
    int lead = tok_piece_id(t, "\xC3\xB0"); // byte 0xF0 in the byte-level alphabet ("ð")
    if (lead >= 0) {
        int32_t one[2] = { lead, tok_piece_id(t, "a") };
        char *d = NULL;
        size_t dl;
        CHECK_EQ_INT(tok_decode(t, one, 2, false, &d, &dl), 0);
        CHECK_EQ_STR(d, "\xEF\xBF\xBD" "a");
        free(d);
        tok_stream *st = tok_stream_new(t, false);
        size_t cl;
        const char *c = tok_stream_push(st, lead, &cl);
        CHECK(c && cl == 0);
        c = tok_stream_flush(st, &cl);
        CHECK(c && cl == 3 && !memcmp(c, "\xEF\xBF\xBD", 3));
        tok_stream_free(st);
    }
    free(ids);
    free(ids2);
}

/* ---- speed ------------------------------------------------------------------------------------ */

static char *code_text(size_t want, size_t *len) {
    static const char *files[] = { "src/tok/tok_load.c", "src/tok/tok_decode.c", "src/tok/tok_bpe.c",
                                   "src/tok/tok_pretok.c", "src/tok/tok_encode.c", "tests/unit/test_tok.c" };
    char *buf = malloc(want + 1);
    size_t n = 0;
    while (n < want) {
        size_t before = n;
        for (size_t i = 0; i < sizeof files / sizeof *files && n < want; i++) {
            FILE *f = fopen(test_repo_path(files[i]), "rb");
            if (!f) continue;
            n += fread(buf + n, 1, want - n, f);
            fclose(f);
        }
        if (n == before) break;
    }
    /* cut back to a character boundary */
    while (n > 0 && ((unsigned char)buf[n - 1] & 0x80)) n--;
    buf[n] = 0;
    *len = n;
    return buf;
}

TEST(test_tok_speed_100k) {
    const char *why = "";
    tokenizer *t = fixture_tokenizer("tinycoder", &why);
    if (!t) SKIP(why);
    size_t len;
    char *text = code_text(100 * 1024, &len);
    if (len < 50 * 1024) {
        free(text);
        SKIP("could not read the repository's sources for the speed text");
    }
    int32_t *ids = NULL;
    int n = 0;
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        free(ids);
        double t0 = now_s();
        CHECK_EQ_INT(tok_encode(t, text, len, false, &ids, &n), 0);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    char *dec = NULL;
    size_t dl = 0;
    double t0 = now_s();
    CHECK_EQ_INT(tok_decode(t, ids, n, false, &dec, &dl), 0);
    double dt_dec = now_s() - t0;
    CHECK(dec && dl == len && !memcmp(dec, text, len));
    printf("    tinycoder: encode %zu bytes of code -> %d tokens in %.2f ms (%.1f MB/s); decode %.2f ms\n", len, n,
           best * 1e3, len / best / 1e6, dt_dec * 1e3);
    CHECK_MSG(best < 2.0, "encoding 100 KB took %.3f s", best);
    free(dec);
    free(ids);

    /* adversarial shapes: one 100 KB word, 100 KB of spaces, 100 KB of digits */
    const char fills[3] = { 'a', ' ', '7' };
    for (int k = 0; k < 3; k++) {
        memset(text, fills[k], len);
        t0 = now_s();
        CHECK_EQ_INT(tok_encode(t, text, len, false, &ids, &n), 0);
        double dt = now_s() - t0;
        printf("    tinycoder: 100 KB of '%c' -> %d tokens in %.2f ms\n", fills[k], n, dt * 1e3);
        CHECK_MSG(dt < 2.0, "encoding 100 KB of '%c' took %.3f s", fills[k], dt);
        free(ids);
    }
    free(text);
}

/* ---- tokenizer_config.json add_bos_token ------------------------------------------------ */

/* With no post-processor in tokenizer.json, add_bos_token/add_eos_token of
 * tokenizer_config.json decide (as transformers does); a post-processor that
 * adds special tokens wins (gemma3's fixture checks that side). */
TEST(test_tok_config_bos) {
    char dir[] = "/tmp/kestrel-tok-XXXXXX", p1[300], p2[300];
    if (!mkdtemp(dir)) SKIP("mkdtemp failed");
    snprintf(p1, sizeof p1, "%s/tokenizer.json", dir);
    snprintf(p2, sizeof p2, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(p1, "w");
    fputs("{\"added_tokens\":[{\"id\":7,\"content\":\"<s>\",\"special\":true},{\"id\":8,\"content\":\"</s>\","
          "\"special\":true}],\"post_processor\":null,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,"
          "\"ab\":2},\"merges\":[\"a b\"]}}", f);
    fclose(f);
    f = fopen(p2, "w");
    fputs("{\"add_bos_token\":true,\"add_eos_token\":true,\"bos_token\":{\"content\":\"<s>\"},\"eos_token\":\"</s>\","
          "\"model_max_length\":1000000000000000019884624838656}", f);
    fclose(f);
    tokenizer *t = NULL;
    CHECK_MSG(tok_load(&t, dir) == 0, "%s", err_msg());
    if (t) {
        int32_t *ids = NULL;
        int n = 0;
        CHECK_EQ_INT(tok_encode(t, "aba", 3, true, &ids, &n), 0);
        CHECK_EQ_INT(n, 4);
        if (n == 4) {
            CHECK_EQ_INT(ids[0], 7);
            CHECK_EQ_INT(ids[1], 2);
            CHECK_EQ_INT(ids[2], 0);
            CHECK_EQ_INT(ids[3], 8);
        }
        free(ids);
        CHECK_EQ_INT(tok_encode(t, "aba", 3, false, &ids, &n), 0);
        CHECK_EQ_INT(n, 2);
        free(ids);
        tok_free(t);
    }
    /* a config naming a token that does not exist is an error naming the file */
    f = fopen(p2, "w");
    fputs("{\"add_bos_token\":true,\"bos_token\":\"<nope>\"}", f);
    fclose(f);
    CHECK(tok_load(&t, dir) < 0);
    CHECK(strstr(err_msg(), "tokenizer_config.json") != NULL);
    unlink(p1);
    unlink(p2);
    rmdir(dir);
}

/* ---- robustness: truncated and mutated files never crash ------------------------------ */

static void mutate_file(const char *src) {
    size_t len = strlen(src);
    char *buf = malloc(len + 1);
    int loaded = 0, rejected = 0;
    /* every truncation is invalid JSON */
    for (size_t cut = 0; cut < len; cut += 7) {
        const char *path = write_temp_tokenizer(src, cut);
        tokenizer *t = NULL;
        CHECK_MSG(tok_load(&t, path) < 0, "truncated at %zu: accepted", cut);
        tok_free(t);
        remove_temp_tokenizer(path);
    }
    /* single-byte mutations: either a clear error or a tokenizer that works */
    static const char subst[] = { '{', '"', '1', ']', 'x', '-', ':', ',' };
    for (size_t i = 0; i < len; i += 3) {
        memcpy(buf, src, len + 1);
        buf[i] = subst[i % sizeof subst];
        const char *path = write_temp_tokenizer(buf, len);
        tokenizer *t = NULL;
        if (tok_load(&t, path) == 0) {
            int32_t *ids = NULL;
            int n = 0;
            char *dec = NULL;
            size_t dl;
            loaded++;
            if (tok_encode(t, "ab-c 12 x_y", 11, true, &ids, &n) == 0) {
                if (tok_decode(t, ids, n, false, &dec, &dl) == 0) free(dec);
                free(ids);
            }
            tok_free(t);
        } else {
            rejected++;
            CHECK_MSG(strstr(err_msg(), "tokenizer.json") != NULL, "mutation at %zu: message lacks the file: %s", i,
                      err_msg());
        }
        remove_temp_tokenizer(path);
    }
    printf("    mutations: %d loaded, %d rejected with an error\n", loaded, rejected);
    free(buf);
}

TEST(test_tok_malformed_mutations) {
    mutate_file(SYN_SP3_JSON);
    mutate_file(SYN_SP_JSON);
    mutate_file(SYN_BL_JSON);
}
