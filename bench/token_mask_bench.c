/* token_mask_bench.c — what a JSON constraint costs per token: the time of
 * token_mask_fill (the full mask: sampled choices, and greedy ones whose
 * argmax the constraint refuses) and of token_mask_allows (a greedy choice's
 * first try) at several points of a document (free and patterned strings
 * among them), for one tokenizer:
 *   build/token_mask_bench TOKENIZER [ITERS]
 * TOKENIZER: a tokenizer.json or a model directory (scripts/fetch_tokenizers.sh
 * puts Qwen3's, Llama 3's, ... under ~/.cache/kestrel/tokenizers). Also the
 * one-off cost of building the mask's table. Not a test: compare runs of one
 * machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <math.h>

#include "base/clock.h"
#include "sample/sample.h"
#include "sample/token_mask.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: token_mask_bench TOKENIZER [ITERS]\n");
        return 2;
    }
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    tokenizer *t = NULL;
    if (tok_load(&t, argv[1]) < 0) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    int V = tok_vocab_size(t);
    double t0 = now_s();
    token_mask *m = token_mask_new(t, V);
    double t_build = now_s() - t0;
    if (!m) return 1;
    json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"},"
                                "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"alpha\",\"beta\"]}},"
                                "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-\\\\d{3}$\"},"
                                "\"slug\":{\"type\":\"string\",\"pattern\":\"^[a-z]+(-[a-z]+)*$\",\"maxLength\":40}},\"required\":[\"name\"]}",
                                0, NULL);
    char err[200];
    json_constraint *c = jc_compile(schema, err, sizeof err);
    if (!c) {
        fprintf(stderr, "schema: %s\n", err);
        return 1;
    }
    printf("tokenizer %s: %d tokens, table built in %.1f ms\n", argv[1], V, t_build * 1e3);
    const char *at[] = { "", "{\"", "{\"name\": \"some text ", "{\"name\": \"x\", \"n\": 12", "{\"name\": \"x\", \"tags\": [\"al",
                         "{\"code\": \"AB", "{\"slug\": \"some-te" };
    uint8_t *allowed = malloc((size_t)V);
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        jc_state s;
        jc_start(&s, c, 0);
        jc_feed(&s, (const uint8_t *)at[i], strlen(at[i]));
        int n = 0;
        t0 = now_s();
        for (int k = 0; k < iters; k++) n = token_mask_fill(m, &s, allowed);
        double fill = (now_s() - t0) / iters;
        int probes = 0;
        t0 = now_s();
        for (int k = 0; k < iters; k++)
            for (int id = 0; id < V; id += 97) probes += token_mask_allows(m, &s, id);
        double allow = (now_s() - t0) / (iters * ((V + 96) / 97));
        printf("  after %-32s %6d allowed  fill %.3f ms  one token %.3f us\n", at[i][0] ? at[i] : "(start)", n, fill * 1e3,
               allow * 1e6);
    }
    /* JSON mode (any object) chosen greedily from random logits, as on a
     * random-weight checkpoint: the row's argmax (the device's in the
     * engine, untimed) tried first, the full mask and the masked argmax when
     * refused; the host's mean time a token, the deepest nesting reached */
    json_constraint *any = jc_compile(NULL, err, sizeof err);
    float *row = malloc((size_t)V * sizeof *row);
    uint64_t x = 88172645463325252ull;
    jc_state s;
    jc_start(&s, any, 0);
    int max_depth = 0, fills = 0, toks = 0, docs = 0;
    double t_all = 0;
    for (int k = 0; k < iters * 16; k++) {
        for (int id = 0; id < V; id++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            row[id] = (float)(x >> 40) * 0x1p-24f;
        }
        int best = sample_argmax(row, V); /* the device's, in the engine */
        t0 = now_s();
        if (!token_mask_allows(m, &s, best)) { /* as the engine's engine_constrain_row */
            fills++;
            if (!token_mask_fill(m, &s, allowed)) break;
            for (int id = 0; id < V; id++)
                if (!allowed[id]) row[id] = -INFINITY;
            best = sample_argmax(row, V);
        }
        token_mask_feed(m, &s, best);
        t_all += now_s() - t0;
        toks++;
        max_depth = s.depth > max_depth ? s.depth : max_depth;
        if (jc_finished(&s)) jc_start(&s, any, 0), docs++;
    }
    printf("  random logits, JSON mode: %.3f ms a token (%d tokens, %d full masks, %d documents, depth up to %d)\n",
           t_all * 1e3 / toks, toks, fills, docs, max_depth);
    free(row);
    jc_free(any);
    free(allowed);
    jc_free(c);
    json_decref(schema);
    token_mask_free(m);
    tok_free(t);
    return 0;
}
