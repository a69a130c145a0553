/* order_key.cuh — a float's 32-bit key in the floats' order (the argmax's
 * and the sampler's), alone so that tests/emu can compile it for the host. */
#pragma once

#include <stdint.h>

/* value -> 32 bits that order as the floats do (-0 taken as +0, so the two
 * tie); NaN -> 0, below every number's key (-inf's is 0x007fffff); the
 * argmax and the sampler's order */
__device__ __forceinline__ uint32_t order_key(float v) {
    if (v != v) return 0u;
    uint32_t u = __float_as_uint(v == 0.f ? 0.f : v);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}
