/* cpu_dispatch.c — picks the best kernel set the running CPU supports. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

static int has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static int has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

const cpu_kernels *cpu_kernels_select(void) {
    const char *force = getenv("KESTREL_CPU_ISA");
    if (force && !strcmp(force, "scalar")) return &cpu_kernels_scalar;
    if (force && !strcmp(force, "avx2") && has_avx2()) return &cpu_kernels_avx2;
    if (has_avx512()) return &cpu_kernels_avx512;
    if (has_avx2()) return &cpu_kernels_avx2;
    return &cpu_kernels_scalar;
}
