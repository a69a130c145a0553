/* decode_shapes.h — the decode matvecs of Qwen3-1.7B, Qwen3-8B and
 * tinycoder as the model runs them, for the CUDA benches (cuda_ops_bench
 * --matvec, matvec_sweep): the weight's rows x k (bf16), whether it is the
 * SwiGLU gate|up (rows = 2 x outputs), whether its output adds into the
 * residual (o, down), and whether the layer's input norm comes before it
 * (qkv, gate|up, lm_head: folded into the product where the backend's
 * mv_fold_norm says so). Plain C, one table for C and CUDA C++. */
#ifndef KS_BENCH_DECODE_SHAPES_H
#define KS_BENCH_DECODE_SHAPES_H

typedef struct {
    const char *name;
    int rows, k;
    int sw, add, norm;
} decode_shape;

static const decode_shape decode_shapes[] = {
    {"1.7b qkv", 4096, 2048, 0, 0, 1},      {"1.7b o", 2048, 2048, 0, 1, 0},  {"1.7b gate_up", 12288, 2048, 1, 0, 1},
    {"1.7b down", 2048, 6144, 0, 1, 0},     {"1.7b lm_head", 151936, 2048, 0, 0, 1},
    {"8b qkv", 6144, 4096, 0, 0, 1},        {"8b o", 4096, 4096, 0, 1, 0},    {"8b gate_up", 24576, 4096, 1, 0, 1},
    {"8b down", 4096, 12288, 0, 1, 0},      {"8b lm_head", 151936, 4096, 0, 0, 1},
    {"tiny qkv", 768, 512, 0, 0, 1},        {"tiny o", 512, 512, 0, 1, 0},    {"tiny gate_up", 3072, 512, 1, 0, 1},
    {"tiny down", 512, 1536, 0, 1, 0},      {"tiny lm_head", 8192, 512, 0, 0, 1},
};
#define N_DECODE_SHAPES (int)(sizeof decode_shapes / sizeof *decode_shapes)

#endif
