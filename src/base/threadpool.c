/* threadpool.c — spin-then-sleep worker pool (see threadpool.h).
 *
 * A job is (fn, ctx, n_tasks) plus a claim word: the job's generation in
 * the high 32 bits, the next unclaimed task in the low 32. Every thread,
 * the caller included, claims tasks one at a time by CAS on that word, so a
 * task can only be claimed while its own job is in progress, and the caller
 * returns once all n_tasks are counted done: a worker that is preempted or
 * wakes late leaves its share to the others instead of holding the caller.
 * Before writing a new job's fields the caller closes the word (index
 * 0xffffffff under the new generation), and the fields are release/acquire
 * atomics: a worker that read any new field then sees the word closed, so
 * a stale worker can never pair the old generation's word with the new
 * job's task count or function. */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* An idle worker spins this long after its last job before it sleeps:
 * longer than the serial stretches inside a forward (norms, rope, the next
 * batch's setup: tens of us), shorter than the host work between steps of
 * a busy server (~0.5 ms at 16 streams on 2 cores), where a spinning
 * worker takes the core the HTTP threads and clients need. */
#define SPIN_NS 100000
#define WAIT_SPINS 20000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct threadpool {
    int n;                       /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;             /* bumped for every job */
    atomic_uint_least64_t claim; /* (gen << 32) | next task */
    atomic_int done;             /* tasks of the current job finished */
    atomic_int stop;
    atomic_int sleepers;         /* workers in (or about to enter) cond_wait */
    /* current job */
    _Atomic(tp_fn) fn;
    _Atomic(void *) ctx;
    atomic_int n_tasks;
};

typedef struct { threadpool *p; int id; } worker_arg;

static long long elapsed_ns(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)(t.tv_sec - t0->tv_sec) * 1000000000LL + (t.tv_nsec - t0->tv_nsec);
}

/* claims and runs tasks of job g until none is left (or g is over) */
static void run_claims(threadpool *p, unsigned g, int id) {
    tp_fn fn = atomic_load_explicit(&p->fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_acquire);
    uint64_t n = (uint64_t)atomic_load_explicit(&p->n_tasks, memory_order_acquire);
    uint64_t c = atomic_load(&p->claim);
    while ((c >> 32) == g && (c & 0xffffffffu) < n) {
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue;
        /* claimed while job g was in progress: fn, ctx and n above were g's */
        fn(ctx, (int)(c & 0xffffffffu), id);
        atomic_fetch_add(&p->done, 1);
        c = atomic_load(&p->claim);
    }
}

static void *worker_main(void *v) {
    worker_arg *a = v;
    threadpool *p = a->p;
    int id = a->id;
    free(a);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            cpu_relax();
            if ((++spins & 63) == 0 && elapsed_ns(&t0) > SPIN_NS) {
                /* counted before the check, under the mutex: a tp_run that
                 * bumps gen and then sees no sleeper knows this check will
                 * see its gen (seq_cst on both sides) */
                pthread_mutex_lock(&p->mu);
                atomic_fetch_add(&p->sleepers, 1);
                while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                    pthread_cond_wait(&p->cv, &p->mu);
                atomic_fetch_sub(&p->sleepers, 1);
                pthread_mutex_unlock(&p->mu);
                clock_gettime(CLOCK_MONOTONIC, &t0);
            }
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_claims(p, g, id);
    }
}

threadpool *tp_new(int n_threads) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    threadpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    if (!p->th) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) { p->n = i; break; }
        a->p = p;
        a->id = i;
        if (pthread_create(&p->th[i], NULL, worker_main, a) != 0) { free(a); p->n = i; break; }
    }
    return p;
}

void tp_free(threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->th);
    free(p);
}

int tp_threads(const threadpool *p) { return p ? p->n : 1; }

void tp_run(threadpool *p, int n_tasks, tp_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    unsigned g = atomic_load(&p->gen) + 1;
    atomic_store(&p->claim, ((uint64_t)g << 32) | 0xffffffffu); /* closed */
    atomic_store_explicit(&p->fn, fn, memory_order_release);
    atomic_store_explicit(&p->ctx, ctx, memory_order_release);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
    atomic_store(&p->done, 0);
    atomic_store(&p->claim, (uint64_t)g << 32);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers) > 0) {
        /* the lock orders this after a sleeper's check; waking after the
         * unlock spares the woken thread a second wait on the mutex */
        pthread_mutex_lock(&p->mu);
        pthread_mutex_unlock(&p->mu);
        pthread_cond_broadcast(&p->cv);
    }
    run_claims(p, g, 0);
    /* only tasks other threads claimed are left: spin briefly before giving
     * the CPU away (a yield on a loaded machine can cost a time slice) */
    for (int spins = 0; atomic_load(&p->done) < n_tasks; spins++) {
        if (spins < WAIT_SPINS) cpu_relax();
        else sched_yield();
    }
}
