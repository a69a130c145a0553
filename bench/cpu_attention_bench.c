/* cpu_attention_bench.c — the CPU backend's decode attention alone, in the
 * shape of tinycoder's batched decode step: S sequences (one token each) of
 * CTX keys, 6 layers (each its own KV pool, so the step reads every layer's
 * keys and values from memory as the model does), 8 query heads over 2 KV
 * heads of 64, KV blocks of 16 laid out as concurrent sequences grow them
 * (block b of sequence s at b * S + s) or shuffled (--random), in the
 * backend's default KV format (bf16) or another (--kv-type f32).
 *   build/cpu_attention_bench [CTX] [THREADS] [--random] [--kv-type T]
 * Prints ms per step and the KV read rate. KESTREL_CPU_ISA=avx2|scalar picks
 * the kernels as in the server. Not a test: compare runs of one machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "backend/backend.h"
#include "base/dtype.h"

#define S 16
#define LAYERS 6
#define NH 8
#define NKV 2
#define HD 64
#define BS 16
#define MAX_CTX 4096

int main(int argc, char **argv) {
    int ctx = argc > 1 ? atoi(argv[1]) : 330, threads = argc > 2 ? atoi(argv[2]) : 2;
    int shuffle = 0;
    const char *kv_type = "bf16";
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--random")) shuffle = 1;
        else if (!strcmp(argv[i], "--kv-type") && i + 1 < argc) kv_type = argv[++i];
        else ctx = 0;
    }
    if (ctx < 1 || ctx > MAX_CTX || threads < 1) {
        fprintf(stderr, "usage: cpu_attention_bench [CTX 1..%d] [THREADS] [--random] [--kv-type bf16|f32]\n", MAX_CTX);
        return 2;
    }
    backend *be;
    if (backend_cpu_new(&be, threads) != 0 || backend_set_kv_type(be, kv_type) != 0) return 1;
    size_t eb = (size_t)be->kv_elem_bytes;
    int max_blocks = MAX_CTX / BS, n_blocks = S * max_blocks;
    size_t pool = (size_t)n_blocks * BS * NKV * HD;
    void *kc[LAYERS], *vc[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        kc[l] = malloc(pool * eb);
        vc[l] = malloc(pool * eb);
        if (!kc[l] || !vc[l]) return 1;
        for (size_t i = 0; i < pool; i++) {
            float k = (float)(i % 13) * 0.01f, v = (float)(i % 7) * 0.01f;
            if (eb == 4) ((float *)kc[l])[i] = k, ((float *)vc[l])[i] = v;
            else ((uint16_t *)kc[l])[i] = f32_to_bf16(k), ((uint16_t *)vc[l])[i] = f32_to_bf16(v);
        }
    }
    int32_t *tables = malloc((size_t)n_blocks * sizeof(int32_t));
    for (int s = 0; s < S; s++)
        for (int b = 0; b < max_blocks; b++) tables[s * max_blocks + b] = b * S + s;
    srand(1);
    for (int i = n_blocks - 1; shuffle && i > 0; i--) {
        int j = rand() % (i + 1), t = tables[i];
        tables[i] = tables[j], tables[j] = t;
    }
    int32_t pos[S], seq[S], slots[S];
    for (int i = 0; i < S; i++) pos[i] = ctx - 1, seq[i] = i, slots[i] = 0;
    int qs = (NH + 2 * NKV) * HD;
    float *q = malloc((size_t)S * qs * sizeof(float)), *o = malloc((size_t)S * NH * HD * sizeof(float));
    for (int i = 0; i < S * qs; i++) q[i] = (float)(i % 11) * 0.01f;
    bk_attn_batch ab = {S, pos, seq, slots, tables, max_blocks, BS, ctx - 1, n_blocks * BS, 0, NULL, 0};
    for (int l = 0; l < LAYERS; l++) be->ops->attention(be, o, q, qs, kc[l], vc[l], &ab, NH, NKV, HD, 0.125f);
    int steps = 0;
    double t0 = now_s(), dt;
    do {
        for (int l = 0; l < LAYERS; l++) be->ops->attention(be, o, q, qs, kc[l], vc[l], &ab, NH, NKV, HD, 0.125f);
        steps++;
        dt = now_s() - t0;
    } while (dt < 1.0);
    double per = dt / steps, bytes = (double)S * ctx * NKV * HD * eb * 2 * LAYERS;
    printf("cpu_attention_bench: %d sequences x %d keys, %d layers, %d threads (%s tables, %s KV): %.3f ms per step, "
           "%.1f GB/s of KV\n", S, ctx, LAYERS, threads, shuffle ? "shuffled" : "interleaved", kv_type, per * 1e3,
           bytes / per / 1e9);
    for (int l = 0; l < LAYERS; l++) free(kc[l]), free(vc[l]);
    free(tables), free(q), free(o);
    backend_free(be);
    return 0;
}
