/* membw.c — measures this machine's memory read bandwidth: T threads each
 * sum their slice of a buffer much larger than the caches; best of R passes.
 * Prints one JSON object. Used by bench/cpu_bench.sh to state decode speed as
 * a fraction of the bandwidth bound (bytes of weights read per token).
 * usage: membw [threads (default: all cores)] [MiB (default 1024)] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

typedef struct { const uint64_t *p; size_t n; uint64_t sum; pthread_barrier_t *bar; } slice;

static void *reader(void *v) {
    slice *s = v;
    pthread_barrier_wait(s->bar);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= s->n; i += 4) {
        a0 += s->p[i]; a1 += s->p[i + 1]; a2 += s->p[i + 2]; a3 += s->p[i + 3];
    }
    s->sum = a0 + a1 + a2 + a3;
    pthread_barrier_wait(s->bar);
    return NULL;
}

int main(int argc, char **argv) {
    int T = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    if (T < 1 || T > 1024 || mib < 64) { fprintf(stderr, "membw: bad arguments\n"); return 2; }
    size_t n = mib * 1024 * 1024 / 8;
    uint64_t *buf = aligned_alloc(64, n * 8);
    if (!buf) { fprintf(stderr, "membw: out of memory\n"); return 1; }
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    uint64_t check = 0;
    for (int rep = 0; rep < 7; rep++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)T + 1);
        pthread_t th[1024];
        slice sl[1024];
        for (int t = 0; t < T; t++) {
            sl[t].p = buf + n / T * t;
            sl[t].n = n / T;
            sl[t].bar = &bar;
            pthread_create(&th[t], NULL, reader, &sl[t]);
        }
        pthread_barrier_wait(&bar);
        double t0 = now_s();
        pthread_barrier_wait(&bar);
        double dt = now_s() - t0;
        for (int t = 0; t < T; t++) { pthread_join(th[t], NULL); check += sl[t].sum; }
        pthread_barrier_destroy(&bar);
        double gbs = (double)(n / T * T) * 8 / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    printf("{\"threads\": %d, \"mib\": %zu, \"read_gb_s\": %.2f, \"check\": %llu}\n", T, mib, best,
           (unsigned long long)(check & 0xff));
    free(buf);
    return 0;
}
