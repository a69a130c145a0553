/* threadpool.h — a fixed pool of worker threads running parallel-for loops.
 *
 * tp_run(pool, n_tasks, fn, ctx) calls fn(ctx, task, thread) for every task in
 * [0, n_tasks) across the pool's threads (the caller's thread is worker 0)
 * and returns when all are done. Threads claim tasks one at a time (one that
 * is preempted or wakes late leaves its share to the others); a task's
 * arithmetic never depends on which thread runs it, so results never depend
 * on scheduling (`thread` only picks per-thread scratch). Workers spin
 * briefly between jobs (decode issues dozens of small jobs per token) and
 * then sleep. */
#ifndef KS_THREADPOOL_H
#define KS_THREADPOOL_H

typedef struct threadpool threadpool;
typedef void (*tp_fn)(void *ctx, int task, int thread);

/* n_threads <= 0: the number of online CPUs. */
threadpool *tp_new(int n_threads);
void tp_free(threadpool *p);
int tp_threads(const threadpool *p);
void tp_run(threadpool *p, int n_tasks, tp_fn fn, void *ctx);

#endif
