/* clock.h — seconds on the monotonic clock, for timing steps, requests and
 * benchmarks (differences only: the origin is arbitrary). */
#ifndef KS_CLOCK_H
#define KS_CLOCK_H

#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
