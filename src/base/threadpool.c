/* threadpool.c — spin-then-sleep worker pool (see threadpool.h). */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ITERS 200000

struct threadpool {
    int n;                       /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;             /* bumped for every job */
    atomic_int pending;          /* workers still running the job */
    atomic_int stop;
    /* current job */
    tp_fn fn;
    void *ctx;
    int n_tasks;
};

typedef struct { threadpool *p; int id; } worker_arg;

static void run_range(threadpool *p, int id) {
    int n = p->n_tasks, t = p->n;
    int lo = (int)((long long)n * id / t), hi = (int)((long long)n * (id + 1) / t);
    for (int i = lo; i < hi; i++) p->fn(p->ctx, i, id);
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
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins > SPIN_ITERS) {
                pthread_mutex_lock(&p->mu);
                while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                    pthread_cond_wait(&p->cv, &p->mu);
                pthread_mutex_unlock(&p->mu);
                spins = 0;
            }
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_range(p, id);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
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
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_range(p, 0);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) sched_yield();
}
