/* test_threadpool.c — tp_run under stress: many short jobs of varying task
 * counts back to back (so late workers of one job overlap the start of the
 * next), each task must run exactly once per job and all of a job's writes
 * must be visible when tp_run returns. Jobs alternate between two functions
 * so a task run with the wrong job's function is seen too. */
#include <stdatomic.h>
#include <string.h>

#include "base/threadpool.h"
#include "test.h"

#define MAX_TASKS 64

typedef struct {
    atomic_int runs[MAX_TASKS];
    int job;
    atomic_int wrong_fn;
} tp_job;

static void task_even(void *v, int i, int thread) {
    (void)thread;
    tp_job *j = v;
    if (j->job % 2) atomic_fetch_add(&j->wrong_fn, 1);
    atomic_fetch_add(&j->runs[i], 1);
}

static void task_odd(void *v, int i, int thread) {
    (void)thread;
    tp_job *j = v;
    if (!(j->job % 2)) atomic_fetch_add(&j->wrong_fn, 1);
    atomic_fetch_add(&j->runs[i], 1);
}

TEST(test_threadpool_runs_every_task_once_per_job) {
    static const int threads[3] = {2, 3, 4};
    int bad = 0, jobs = 0;
    for (int ti = 0; ti < 3; ti++) {
        threadpool *p = tp_new(threads[ti]);
        CHECK(p != NULL);
        tp_job j[2];
        unsigned seed = 1;
        for (int k = 0; k < 100000; k++) {
            tp_job *jb = &j[k % 2];
            memset(jb, 0, sizeof *jb);
            jb->job = k;
            seed = seed * 1103515245u + 12345u;
            int n = 2 + (int)((seed >> 16) % (MAX_TASKS - 1));
            tp_run(p, n, k % 2 ? task_odd : task_even, jb);
            for (int i = 0; i < MAX_TASKS; i++)
                if (atomic_load(&jb->runs[i]) != (i < n)) bad++;
            if (atomic_load(&jb->wrong_fn)) bad++;
            jobs++;
        }
        tp_free(p);
    }
    CHECK_MSG(bad == 0, "%d task counts or functions wrong over %d jobs", bad, jobs);
    printf("    %d jobs of 2..64 tasks on 2-4 threads: every task ran once, with its own job's function\n", jobs);
}
