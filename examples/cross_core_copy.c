/* How fast one core copies what another core just wrote: the bound on large
 * shared-memory collectives, which must move each rank's share of the data
 * between cores. Two processes pinned to CPUs 0 and 1 share a buffer; the
 * writer fills it, the reader copies it out, and only the copy is timed.
 *
 *   cc -O2 -o cross_core_copy examples/cross_core_copy.c && ./cross_core_copy [bytes...]
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 500

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        perror("sched_setaffinity (timing unpinned)");
}

static int probe(size_t bytes)
{
    /* [flags: written round, copied round][data] */
    char *shared = mmap(NULL, 4096 + bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        return perror("mmap"), 1;
    _Atomic long *written = (_Atomic long *)shared, *copied = (_Atomic long *)(shared + 128);
    char *data = shared + 4096;
    pid_t child = fork();
    if (child < 0)
        return perror("fork"), 1;
    if (child == 0) { /* the writer */
        pin(1);
        for (long round = 1; round <= ROUNDS; round++) {
            while (atomic_load(copied) != round - 1)
                ;
            memset(data, (int)round, bytes);
            atomic_store(written, round);
        }
        _exit(0);
    }
    pin(0);
    char *mine = malloc(bytes);
    if (!mine)
        return perror("malloc"), 1;
    memset(mine, 0, bytes);
    double busy = 0;
    for (long round = 1; round <= ROUNDS; round++) {
        while (atomic_load(written) != round)
            ;
        double start = seconds();
        memcpy(mine, data, bytes);
        busy += seconds() - start;
        atomic_store(copied, round);
    }
    waitpid(child, NULL, 0);
    printf("%10zu bytes: %8.1f us per copy, %6.2f GB/s\n", bytes, busy / ROUNDS * 1e6,
           (double)bytes * ROUNDS / busy / 1e9);
    free(mine);
    munmap(shared, 4096 + bytes);
    return 0;
}

int main(int argc, char **argv)
{
    static const size_t fallback[] = {32 << 10, 256 << 10, 512 << 10, 1 << 20, 8 << 20};
    int rc = 0;
    if (argc > 1)
        for (int i = 1; i < argc; i++)
            rc |= probe(strtoull(argv[i], NULL, 0));
    else
        for (size_t i = 0; i < sizeof(fallback) / sizeof(*fallback); i++)
            rc |= probe(fallback[i]);
    return rc;
}
