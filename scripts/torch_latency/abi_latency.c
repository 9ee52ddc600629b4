/* The patterns of latency.cpp through vrampool's PyTorch entry points alone, without PyTorch or a GPU: for
 * timing and profiling the C ABI's path on any machine (callgrind, perf), on the simulated device.
 *
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -o abi_latency scripts/torch_latency/abi_latency.c -ldl -lm
 *   VRAMPOOL_CONF=backend=sim ./abi_latency target/release/libvrampool_c.so churn 31 2000
 *   VRAMPOOL_CONF=backend=sim ./abi_latency target/release/libvrampool_c.so pair 31 2000 4096
 *
 * churn: 1000 live blocks of log-uniform sizes from 256 B to 8 MiB (drawn before timing by splitmix64 from a
 * fixed seed); after 5000 untimed steps, ROUNDS rounds of OPS steps, each step a free of a block chosen at
 * random and an allocation in its place. pair: OPS allocate+free pairs of SIZE bytes per round, after 5000
 * untimed. Prints the median, p10 and p90 of the rounds' nanoseconds per operation, then the pool's
 * allocations, region requests ("fallbacks"), growths, moved chunks, and peak reserved and allocated bytes.
 * Every block is freed at the end; the program exits 1 if an allocation fails or the pool still holds a live
 * block.
 *
 * ABI_EVICT_KIB=N writes N KiB of memory of its own before each round, untimed, so that each round starts
 * with the pool's data pushed out of the nearer caches, as it is on the GPU host where the rounds of the
 * allocator compared run in between (run.py and the CUDA bench take turns). 0 or unset: no eviction.
 *
 * ABI_SPLIT=1 (churn only) also times each call of the timed rounds on its own, with the CPU's time-stamp
 * counter (x86-64), and prints the median and mean nanoseconds of frees and of allocations apart, each for
 * blocks above 4 MiB (larger than the hybrid's largest class by default: region requests) and for the rest.
 * The clock reads add their own cost to every call alike (printed as "empty"), so compare the parts with one
 * another rather than with the median above.
 *
 * ABI_PERF=1 (Linux) also counts, with the CPU's own counters (perf_event_open, this process's user-space
 * work only), what the timed rounds cost per operation: cycles, instructions, mispredicted branches, L1 data
 * misses, last-level misses and data-TLB misses (the writes of ABI_EVICT_KIB are not counted). Where the
 * machine gives no counters it says so and times as usual. Counters the CPU cannot count at once are shared
 * out in time by the kernel and scaled back.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* syscall(), for perf_event_open */
#endif
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#if defined(__linux__)
#include <errno.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef void *(*alloc_fn)(size_t, int, void *);
typedef void (*free_fn)(void *, size_t, int, void *);
typedef char *(*stats_fn)(int);
typedef void (*string_free_fn)(char *);
typedef const char *(*last_error_fn)(void);

enum { LIVE = 1000, WARMUP = 5000 };

static alloc_fn vp_alloc;
static free_fn vp_free;
static last_error_fn vp_last_error;

static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A size log-uniform in [256 B, 8 MiB]: exp of a uniform draw between the logs of the two. */
static size_t log_uniform(uint64_t *state) {
    static const double lo = 5.545177444479562, hi = 15.942385152878742; /* ln 256, ln 8 MiB */
    double unit = (double)(splitmix(state) >> 11) / (double)(1ull << 53);
    return (size_t)exp(lo + (hi - lo) * unit);
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *must_alloc(size_t size) {
    void *p = vp_alloc(size, 0, NULL);
    if (p == NULL) {
        fprintf(stderr, "vrampool_torch_alloc(%zu) failed: %s\n", size, vp_last_error());
        exit(1);
    }
    return p;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The time-stamp counter, or 0 where there is none to read. */
static uint64_t ticks(void) {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
}

/* The parts ABI_SPLIT times: frees and allocations of blocks above 4 MiB and of the rest, and two clock
 * reads with nothing between them. */
enum { FREE_SMALL, FREE_LARGE, ALLOC_SMALL, ALLOC_LARGE, EMPTY, PARTS };
static const char *const PART_NAMES[PARTS] = {"free <= 4 MiB", "free > 4 MiB", "alloc <= 4 MiB", "alloc > 4 MiB",
                                              "empty"};
enum { LARGE = 4 << 20 };

/* Per part, the ticks of each call timed. */
struct Split {
    double *ticks[PARTS];
    size_t count[PARTS];
};

static void split_add(struct Split *split, int part, uint64_t spent) {
    split->ticks[part][split->count[part]++] = (double)spent;
}

/* Prints each part's median and mean in nanoseconds, `ns_per_tick` apart. */
static void split_print(struct Split *split, double ns_per_tick) {
    for (int part = 0; part < PARTS; part++) {
        size_t n = split->count[part];
        if (n == 0) {
            continue;
        }
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            sum += split->ticks[part][i];
        }
        qsort(split->ticks[part], n, sizeof(double), by_value);
        printf("split %-15s %8zu calls: median %7.1f ns, mean %7.1f ns\n", PART_NAMES[part], n,
               split->ticks[part][n / 2] * ns_per_tick, sum / (double)n * ns_per_tick);
    }
}

/* The CPU counters ABI_PERF reads. */
enum { COUNTERS = 6 };
static const char *const COUNTER_NAMES[COUNTERS] = {"cycles",     "instructions", "branch-misses",
                                                    "L1d-misses", "LLC-misses",   "dTLB-misses"};

/* Per counter, its file descriptor (-1 where it could not be opened). */
struct Counters {
    int fd[COUNTERS];
};

#if defined(__linux__)
/* Opens the counters, disabled, for this process's user-space work; returns how many opened (a message on
 * stderr names each that did not). */
static int counters_open(struct Counters *counters) {
    const uint64_t cache_miss = ((uint64_t)PERF_COUNT_HW_CACHE_OP_READ << 8) |
                                ((uint64_t)PERF_COUNT_HW_CACHE_RESULT_MISS << 16);
    const struct {
        uint32_t type;
        uint64_t config;
    } kinds[COUNTERS] = {
        {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
        {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
        {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
        {PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_L1D | cache_miss},
        {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
        {PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_DTLB | cache_miss},
    };
    int open = 0;
    for (int i = 0; i < COUNTERS; i++) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = kinds[i].type;
        attr.config = kinds[i].config;
        attr.disabled = 1;
        attr.exclude_kernel = 1;
        attr.exclude_hv = 1;
        attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
        counters->fd[i] = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
        if (counters->fd[i] < 0) {
            fprintf(stderr, "perf: %s cannot be counted here: %s\n", COUNTER_NAMES[i], strerror(errno));
        } else {
            open++;
        }
    }
    return open;
}

/* Starts (`on`) or stops every open counter. */
static void counters_switch(const struct Counters *counters, int on) {
    for (int i = 0; i < COUNTERS; i++) {
        if (counters->fd[i] >= 0) {
            ioctl(counters->fd[i], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0);
        }
    }
}

/* Prints each open counter's count per operation over `operations`, scaled where the kernel shared the
 * counter out in time, and closes the counters. */
static void counters_print(const struct Counters *counters, double operations) {
    printf("perf per operation:");
    for (int i = 0; i < COUNTERS; i++) {
        uint64_t value[3];
        if (counters->fd[i] < 0 || read(counters->fd[i], value, sizeof value) != (ssize_t)sizeof value) {
            printf(" %s -", COUNTER_NAMES[i]);
            continue;
        }
        double scaled = value[2] > 0 ? (double)value[0] * (double)value[1] / (double)value[2] : 0.0;
        printf(" %s %.2f", COUNTER_NAMES[i], scaled / operations);
    }
    printf("\n");
    for (int i = 0; i < COUNTERS; i++) {
        if (counters->fd[i] >= 0) {
            close(counters->fd[i]);
        }
    }
}
#else
static int counters_open(struct Counters *counters) {
    (void)counters;
    fprintf(stderr, "perf: CPU counters are read on Linux only\n");
    return 0;
}
static void counters_switch(const struct Counters *counters, int on) {
    (void)counters;
    (void)on;
}
static void counters_print(const struct Counters *counters, double operations) {
    (void)counters;
    (void)operations;
}
#endif

/* Looks `name` up in `library` and stores it in the function pointer at `out` (ISO C has no cast from the
 * object pointer dlsym returns to a function pointer; POSIX guarantees the representations match). Returns
 * whether the symbol was found. */
static int symbol(void *library, const char *name, void *out, size_t size) {
    void *found = dlsym(library, name);
    memcpy(out, &found, size);
    return found != NULL;
}

/* The integer after the first `"key":` in `json`, or -1. */
static long long json_number(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(json, pattern);
    return at ? strtoll(at + strlen(pattern), NULL, 10) : -1;
}

/* The `peak` of the counter `key` (an object `{"current": .., "peak": ..}`) in `json`, or -1. */
static long long json_peak(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":{", key);
    const char *at = strstr(json, pattern);
    return at ? json_number(at, "peak") : -1;
}

int main(int argc, char **argv) {
    if (argc < 5 || (strcmp(argv[2], "churn") != 0 && strcmp(argv[2], "pair") != 0) ||
        (strcmp(argv[2], "pair") == 0 && argc < 6)) {
        fprintf(stderr, "usage: %s LIBRARY churn ROUNDS OPS | LIBRARY pair ROUNDS OPS SIZE\n", argv[0]);
        return 2;
    }
    int churn = strcmp(argv[2], "churn") == 0;
    long rounds = atol(argv[3]), ops = atol(argv[4]);
    size_t pair_size = churn ? 0 : (size_t)atoll(argv[5]);
    if (rounds < 1 || ops < 1 || (!churn && pair_size < 1)) {
        fprintf(stderr, "ROUNDS, OPS and SIZE must be at least 1\n");
        return 2;
    }
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        fprintf(stderr, "dlopen(%s) failed: %s\n", argv[1], dlerror());
        return 1;
    }
    stats_fn stats;
    string_free_fn string_free;
    int found = symbol(library, "vrampool_torch_alloc", &vp_alloc, sizeof vp_alloc) &
                symbol(library, "vrampool_torch_free", &vp_free, sizeof vp_free) &
                symbol(library, "vrampool_last_error", &vp_last_error, sizeof vp_last_error) &
                symbol(library, "vrampool_stats_json", &stats, sizeof stats) &
                symbol(library, "vrampool_string_free", &string_free, sizeof string_free);
    if (!found) {
        fprintf(stderr, "%s lacks the vrampool_torch_* entry points\n", argv[1]);
        return 1;
    }

    size_t steps = WARMUP + (size_t)rounds * (size_t)ops;
    size_t *sizes = NULL;
    uint32_t *victims = NULL;
    void *live[LIVE];
    size_t live_size[LIVE];
    if (churn) {
        uint64_t state = 0x5eed;
        sizes = malloc(sizeof *sizes * steps);
        victims = malloc(sizeof *victims * steps);
        if (!sizes || !victims) {
            fprintf(stderr, "no memory for %zu steps\n", steps);
            return 1;
        }
        for (size_t i = 0; i < steps; i++) {
            sizes[i] = log_uniform(&state);
            victims[i] = (uint32_t)(splitmix(&state) % LIVE);
        }
        for (int i = 0; i < LIVE; i++) {
            live_size[i] = log_uniform(&state);
            live[i] = must_alloc(live_size[i]);
        }
    }
    double *per_op = malloc(sizeof *per_op * (size_t)rounds);
    if (!per_op) {
        return 1;
    }
    const char *evict_env = getenv("ABI_EVICT_KIB");
    size_t evict_bytes = evict_env ? (size_t)atoll(evict_env) << 10 : 0;
    volatile unsigned char *evict = evict_bytes ? malloc(evict_bytes) : NULL;
    if (evict_bytes && !evict) {
        fprintf(stderr, "no memory for ABI_EVICT_KIB=%s\n", evict_env);
        return 1;
    }
    struct Split split = {0};
    const char *split_env = getenv("ABI_SPLIT");
    int splitting = churn && split_env != NULL && strcmp(split_env, "1") == 0;
    if (splitting) {
        if (ticks() == 0) {
            fprintf(stderr, "ABI_SPLIT needs the time-stamp counter of an x86-64 CPU\n");
            return 2;
        }
        for (int part = 0; part < PARTS; part++) {
            split.ticks[part] = malloc(sizeof(double) * (size_t)rounds * (size_t)ops);
            if (!split.ticks[part]) {
                fprintf(stderr, "no memory for ABI_SPLIT\n");
                return 1;
            }
        }
    }
    struct Counters counters = {0};
    const char *perf_env = getenv("ABI_PERF");
    int counting = perf_env != NULL && strcmp(perf_env, "1") == 0 && counters_open(&counters) > 0;
    double split_start_ns = now_ns();
    uint64_t split_start_ticks = ticks();
    size_t step = 0;
    for (long r = -1; r < rounds; r++) {
        long count = r < 0 ? WARMUP : ops;
        for (size_t at = 0; at < evict_bytes; at += 64) {
            evict[at] = (unsigned char)(evict[at] + r);
        }
        if (counting && r >= 0) {
            counters_switch(&counters, 1);
        }
        double start = now_ns();
        for (long i = 0; i < count; i++) {
            if (churn && splitting && r >= 0) {
                uint32_t v = victims[step];
                uint64_t t0 = ticks();
                vp_free(live[v], live_size[v], 0, NULL);
                uint64_t t1 = ticks();
                size_t size = sizes[step++];
                void *p = must_alloc(size);
                uint64_t t2 = ticks();
                uint64_t t3 = ticks();
                split_add(&split, live_size[v] > LARGE ? FREE_LARGE : FREE_SMALL, t1 - t0);
                split_add(&split, size > LARGE ? ALLOC_LARGE : ALLOC_SMALL, t2 - t1);
                split_add(&split, EMPTY, t3 - t2);
                live_size[v] = size;
                live[v] = p;
            } else if (churn) {
                uint32_t v = victims[step];
                vp_free(live[v], live_size[v], 0, NULL);
                live_size[v] = sizes[step++];
                live[v] = must_alloc(live_size[v]);
            } else {
                vp_free(must_alloc(pair_size), pair_size, 0, NULL);
            }
        }
        if (r >= 0) {
            per_op[r] = (now_ns() - start) / (double)count;
        }
        if (counting && r >= 0) {
            counters_switch(&counters, 0);
        }
    }
    double split_ns_per_tick = (now_ns() - split_start_ns) / (double)(ticks() - split_start_ticks);
    qsort(per_op, (size_t)rounds, sizeof *per_op, by_value);
    printf("%s: median %.1f ns per operation (p10 %.1f, p90 %.1f) over %ld rounds of %ld\n", argv[2],
           per_op[rounds / 2], per_op[rounds / 10], per_op[rounds * 9 / 10], rounds, ops);
    if (counting) {
        counters_print(&counters, (double)rounds * (double)ops);
    }
    if (splitting) {
        split_print(&split, split_ns_per_tick);
        for (int part = 0; part < PARTS; part++) {
            free(split.ticks[part]);
        }
    }
    if (churn) {
        for (int i = 0; i < LIVE; i++) {
            vp_free(live[i], live_size[i], 0, NULL);
        }
    }
    char *json = stats(0);
    if (json == NULL) {
        fprintf(stderr, "vrampool_stats_json failed: %s\n", vp_last_error());
        return 1;
    }
    long long active = json_number(json, "active_allocations");
    printf("pool: %lld allocations, %lld in the region, %lld growths, %lld chunks moved, %lld MiB reserved at the "
           "peak (%lld MiB allocated at the peak), %lld live at the end\n",
           json_number(json, "allocations"), json_number(json, "fallbacks"), json_number(json, "growths"),
           json_number(json, "chunks_moved"), json_peak(json, "reserved_bytes") >> 20,
           json_peak(json, "allocated_bytes") >> 20, active);
    string_free(json);
    free(per_op);
    free((void *)evict);
    free(sizes);
    free(victims);
    if (active != 0) {
        fprintf(stderr, "the pool still holds %lld live blocks\n", active);
        return 1;
    }
    return 0;
}
