/*
 * The C API of vrampool as a C program sees it, on host memory (no GPU needed).
 *
 *     api_test            pools made with vrampool_pool_create, then the PyTorch entry points on the device
 *                         pools (run with VRAMPOOL_CONF=backend=host,... in the environment)
 *     api_test bad-conf   the PyTorch entry points with an invalid VRAMPOOL_CONF: every allocation fails
 *
 * Prints one line per failed check and a closing "api_test: N checks passed, M failed"; exits 1 on any failure.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vrampool.h"

static int passed = 0;
static int failed = 0;

#define CHECK(cond, ...)                                                                                             \
    do {                                                                                                             \
        if (cond) {                                                                                                  \
            passed++;                                                                                                \
        } else {                                                                                                     \
            failed++;                                                                                                \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                                   \
            printf(__VA_ARGS__);                                                                                     \
            printf(" (last error: %d \"%s\")\n", vrampool_last_error_code(), vrampool_last_error());                 \
        }                                                                                                            \
    } while (0)

#define MIB (1024u * 1024u)

/* Whether the last error's message contains `text`. */
static int last_error_mentions(const char *text) {
    return strstr(vrampool_last_error(), text) != NULL;
}

/* What a visit of a pool's report saw. */
struct tally {
    int segments;
    int blocks;
    uint64_t first_block;
};

static void count_segment(void *context, const vrampool_segment_info *segment) {
    struct tally *tally = context;
    tally->segments += segment->size >= segment->reserved_bytes ? 1 : 1000;
}

static void count_block(void *context, const vrampool_block_info *block) {
    struct tally *tally = context;
    if (tally->blocks++ == 0) {
        tally->first_block = block->addr;
    }
}

static void pools_made_by_the_program(void) {
    /* Config strings: a good one makes a pool, a bad key or value names the key. */
    vrampool_pool *pool = vrampool_pool_create("strategy=hybrid,backend=host");
    CHECK(pool != NULL, "a host-memory pool is made");
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK && strcmp(vrampool_last_error(), "") == 0,
          "success leaves no error");

    vrampool_pool *bad = vrampool_pool_create("backend=host,colour=blue");
    CHECK(bad == NULL, "an unknown key is refused");
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_CONFIG, "with the bad-config status");
    CHECK(last_error_mentions("`colour`"), "naming the key");

    bad = vrampool_pool_create("backend=host,strategy=magic");
    CHECK(bad == NULL && last_error_mentions("`strategy`"), "a bad value names its key");
    bad = vrampool_pool_create("backend=host,strategy=dynamic,initial_size=64GiB");
    CHECK(bad == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_CONFIG &&
              last_error_mentions("initial_size"),
          "a size the device cannot hold names its key");
    bad = vrampool_pool_create_on_device("backend=host", -1);
    CHECK(bad == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_ARGUMENT, "a negative device");

    /* NULL is the default: CUDA virtual memory on device 0, which works on a GPU machine only. */
    vrampool_pool *gpu = vrampool_pool_create(NULL);
    if (gpu != NULL) {
        vrampool_pool_destroy(gpu);
    } else {
        int code = vrampool_last_error_code();
        CHECK(code == VRAMPOOL_STATUS_DEVICE || code == VRAMPOOL_STATUS_UNSUPPORTED,
              "without a GPU the default pool fails with a device status, not %d", code);
        CHECK(strlen(vrampool_last_error()) > 0, "and says why");
    }

    /* Allocation and alignment. */
    uint64_t a = 0, b = 0, c = 0;
    CHECK(vrampool_pool_alloc(pool, MIB, 0, 0, &a) == VRAMPOOL_STATUS_OK, "1 MiB");
    CHECK(a != 0 && a % 256 == 0, "at a 256-byte aligned address, not %#" PRIx64, a);
    CHECK(vrampool_pool_alloc(pool, 1000, 4096, 7, &b) == VRAMPOOL_STATUS_OK, "1000 bytes aligned to 4 KiB");
    CHECK(b % 4096 == 0 && b != a, "at %#" PRIx64, b);
    CHECK(vrampool_pool_alloc(pool, 64, 3, 0, &c) == VRAMPOOL_STATUS_BAD_ARGUMENT, "alignment 3");
    CHECK(last_error_mentions("power of two"), "says why");
    CHECK(vrampool_pool_alloc(pool, 64, 0, 0, NULL) == VRAMPOOL_STATUS_BAD_ARGUMENT, "a NULL out-pointer");
    CHECK(last_error_mentions("out_addr"), "names the argument");
    c = 12345;
    CHECK(vrampool_pool_alloc(pool, 0, 0, 0, &c) == VRAMPOOL_STATUS_OK && c == 0, "size 0 gives address 0");
    CHECK(vrampool_pool_alloc(pool, (size_t)64 << 30, 0, 0, &c) == VRAMPOOL_STATUS_OUT_OF_MEMORY,
          "64 GiB from a 4 GiB device");
    CHECK(last_error_mentions("68719476736"), "names the bytes requested");

    /* Frees: the right one, a double free, foreign and interior addresses, 0. */
    CHECK(vrampool_pool_free(pool, a + 256) == VRAMPOOL_STATUS_FOREIGN_ADDRESS, "an address inside a block");
    CHECK(vrampool_pool_free(pool, a) == VRAMPOOL_STATUS_OK, "free");
    CHECK(vrampool_pool_free(pool, a) == VRAMPOOL_STATUS_NOT_LIVE, "double free");
    CHECK(last_error_mentions("not a live allocation"), "says so");
    CHECK(vrampool_pool_free(pool, 0x1234) == VRAMPOOL_STATUS_FOREIGN_ADDRESS, "foreign address");
    CHECK(vrampool_pool_free(pool, 0) == VRAMPOOL_STATUS_OK, "free of 0 does nothing");

    /* Stats JSON. */
    char *json = vrampool_pool_stats_json(pool);
    CHECK(json != NULL, "stats JSON");
    if (json != NULL) {
        CHECK(json[0] == '{' && json[strlen(json) - 1] == '}', "is one object");
        CHECK(strstr(json, "\"allocated_bytes\":{\"current\":1000,") != NULL, "1000 bytes live: %.200s", json);
        CHECK(strstr(json, "\"reserved_bytes\"") != NULL, "reserved bytes");
        CHECK(strstr(json, "\"blocks\":[{") != NULL, "the report lists the live block");
        CHECK(strstr(json, "\"config\":\"strategy=hybrid,backend=host\"") != NULL, "the config: %.300s", json);
        vrampool_string_free(json);
        CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK, "the string is taken back");
        vrampool_string_free(json);
        CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_ARGUMENT, "a second free of it is refused");
    }

    /* Counters and the report, one record at a time. */
    vrampool_counters counters;
    CHECK(vrampool_pool_counters(pool, &counters) == VRAMPOOL_STATUS_OK, "counters");
    CHECK(counters.allocated_bytes == 1000 && counters.active_allocations == 1 && counters.allocations == 2 &&
              counters.frees == 1 && counters.reserved_bytes >= 1000,
          "1000 bytes in one block live after two allocations and a free");
    struct tally tally = {0, 0, 0};
    CHECK(vrampool_pool_visit(pool, count_segment, count_block, &tally) == VRAMPOOL_STATUS_OK, "visit");
    CHECK(tally.segments >= 1 && tally.blocks == 1 && tally.first_block == b, "one segment or more, block b");
    CHECK(vrampool_pool_visit(pool, NULL, NULL, NULL) == VRAMPOOL_STATUS_OK, "visit with no visitors");

    /* A block used on another stream: its free is held until that stream's work has run (at once on host
     * memory, which runs nothing), and a second free of it is refused. */
    uint64_t shared = 0;
    CHECK(vrampool_pool_alloc(pool, 2 * MIB, 0, 7, &shared) == VRAMPOOL_STATUS_OK, "a block on stream 7");
    CHECK(vrampool_pool_record_stream(pool, shared, 8) == VRAMPOOL_STATUS_OK, "used on stream 8 too");
    CHECK(vrampool_pool_record_stream(pool, 0, 8) == VRAMPOOL_STATUS_OK, "address 0 does nothing");
    CHECK(vrampool_pool_free(pool, shared) == VRAMPOOL_STATUS_OK, "its free is held");
    CHECK(vrampool_pool_counters(pool, &counters) == VRAMPOOL_STATUS_OK && counters.held_frees_total == 1,
          "one held free");
    CHECK(vrampool_pool_free(pool, shared) == VRAMPOOL_STATUS_NOT_LIVE || counters.held_frees == 0,
          "a second free of a held block is refused");
    CHECK(vrampool_pool_counters(NULL, &counters) == VRAMPOOL_STATUS_BAD_ARGUMENT, "counters of NULL");

    /* A limit set at run time, and peaks started again. */
    uint64_t limit = 0;
    CHECK(vrampool_pool_set_limit(pool, 300 * MIB, &limit) == VRAMPOOL_STATUS_OK && limit == 300 * MIB, "limit");
    CHECK(vrampool_pool_alloc(pool, 400 * MIB, 0, 0, &c) == VRAMPOOL_STATUS_OUT_OF_MEMORY && last_error_mentions("314572800"),
          "400 MiB refused under a 300 MiB limit, naming it");
    CHECK(vrampool_pool_set_limit(pool, UINT64_MAX, &limit) == VRAMPOOL_STATUS_OK && limit > 300 * MIB,
          "UINT64_MAX gives the configured cap back (%" PRIu64 ")", limit);
    CHECK(vrampool_pool_alloc(pool, 400 * MIB, 0, 0, &c) == VRAMPOOL_STATUS_OK, "400 MiB then");
    CHECK(vrampool_pool_free(pool, c) == VRAMPOOL_STATUS_OK, "free it");
    CHECK(vrampool_pool_reset_peaks(pool) == VRAMPOOL_STATUS_OK, "reset the peaks");
    CHECK(vrampool_pool_counters(pool, &counters) == VRAMPOOL_STATUS_OK &&
              counters.allocated_bytes_peak == counters.allocated_bytes &&
              counters.reserved_bytes_peak == counters.reserved_bytes,
          "the peaks are the values now");
    CHECK(vrampool_pool_set_limit(NULL, 1, NULL) == VRAMPOOL_STATUS_BAD_ARGUMENT, "limit of NULL");
    CHECK(vrampool_pool_reset_peaks(NULL) == VRAMPOOL_STATUS_BAD_ARGUMENT, "reset of NULL");

    /* Trim. */
    CHECK(vrampool_pool_free(pool, b) == VRAMPOOL_STATUS_OK, "free the last block");
    uint64_t trimmed = UINT64_MAX;
    CHECK(vrampool_pool_trim(pool, &trimmed) == VRAMPOOL_STATUS_OK, "trim");
    CHECK(trimmed != UINT64_MAX, "reports the bytes given back (%" PRIu64 ")", trimmed);
    CHECK(vrampool_pool_trim(pool, NULL) == VRAMPOOL_STATUS_OK, "trim without an out-pointer");

    /* A fixed pool that rejects oversize requests. */
    vrampool_pool *fixed = vrampool_pool_create("strategy=fixed,block_size=1MiB,block_count=4,fallback=reject,backend=host");
    CHECK(fixed != NULL, "a fixed pool");
    CHECK(vrampool_pool_alloc(fixed, 2 * MIB, 0, 0, &c) == VRAMPOOL_STATUS_OUT_OF_MEMORY, "refuses 2 MiB");
    CHECK(last_error_mentions("block"), "saying which block size would fit");
    vrampool_pool_destroy(fixed);

    /* NULL and dead handles. */
    CHECK(vrampool_pool_alloc(NULL, 64, 0, 0, &c) == VRAMPOOL_STATUS_BAD_ARGUMENT, "a NULL pool");
    CHECK(vrampool_pool_free(NULL, 64) == VRAMPOOL_STATUS_BAD_ARGUMENT, "free on a NULL pool");
    CHECK(vrampool_pool_stats_json(NULL) == NULL, "stats of a NULL pool");
    CHECK(vrampool_pool_trim(NULL, NULL) == VRAMPOOL_STATUS_BAD_ARGUMENT, "trim of a NULL pool");
    vrampool_pool_destroy(NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK, "destroying NULL does nothing");
    vrampool_pool_destroy(pool);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK, "destroy");
    CHECK(vrampool_pool_alloc(pool, 64, 0, 0, &c) == VRAMPOOL_STATUS_NO_POOL, "a destroyed pool is refused");
    CHECK(vrampool_pool_free(pool, 64) == VRAMPOOL_STATUS_NO_POOL, "free on a destroyed pool");
    vrampool_pool_destroy(pool);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_NO_POOL, "a second destroy is refused");
    CHECK(vrampool_pool_alloc((vrampool_pool *)(uintptr_t)0xdeadbeef, 64, 0, 0, &c) == VRAMPOOL_STATUS_NO_POOL,
          "a made-up handle is refused");
}

/* Allocations and frees on device 0 from several threads at once. */
static void *torch_churn(void *arg) {
    size_t seed = (size_t)(uintptr_t)arg;
    void *live[64] = {0};
    size_t failures = 0;
    for (size_t i = 0; i < 4000; i++) {
        size_t slot = (seed * 2654435761u + i * 40503u) % 64;
        if (live[slot] != NULL) {
            vrampool_torch_free(live[slot], 0, 0, NULL);
            failures += vrampool_last_error_code() != VRAMPOOL_STATUS_OK;
            live[slot] = NULL;
        } else {
            size_t size = ((i * 7919u + seed) % 4096u + 1u) * 256u;
            live[slot] = vrampool_torch_alloc(size, 0, (void *)(uintptr_t)(seed % 3));
            failures += live[slot] == NULL;
        }
    }
    for (size_t slot = 0; slot < 64; slot++) {
        if (live[slot] != NULL) {
            vrampool_torch_free(live[slot], 0, 0, NULL);
            failures += vrampool_last_error_code() != VRAMPOOL_STATUS_OK;
        }
    }
    return (void *)(uintptr_t)failures;
}

static void torch_entry_points(void) {
    CHECK(vrampool_device_pool_exists(0) == 0, "no pool before the first allocation");
    uint64_t limit = 0;
    CHECK(vrampool_device_set_limit(2, 8 * MIB, &limit) == VRAMPOOL_STATUS_OK && limit == 8 * MIB,
          "a limit before the pool exists");
    CHECK(vrampool_torch_alloc(16 * MIB, 2, NULL) == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_OUT_OF_MEMORY,
          "applies to the pool made at the first allocation");
    CHECK(vrampool_device_set_limit(2, UINT64_MAX, NULL) == VRAMPOOL_STATUS_OK, "lifted");
    void *lifted = vrampool_torch_alloc(16 * MIB, 2, NULL);
    CHECK(lifted != NULL, "16 MiB then");
    vrampool_torch_free(lifted, 16 * MIB, 2, NULL);
    CHECK(vrampool_device_reset_peaks(2) == VRAMPOOL_STATUS_OK, "peaks of device 2 reset");
    CHECK(vrampool_device_reset_peaks(11) == VRAMPOOL_STATUS_NO_POOL, "device 11 has no pool");
    CHECK(vrampool_stats_json(0) == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_NO_POOL,
          "no stats before the first allocation");
    CHECK(vrampool_torch_alloc(0, 0, NULL) == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_OK,
          "size 0 gives NULL without error");

    void *p = vrampool_torch_alloc(3 * MIB, 0, NULL);
    CHECK(p != NULL, "an allocation through the PyTorch entry point");
    CHECK(((uintptr_t)p) % 256 == 0, "256-byte aligned");
    void *q = vrampool_torch_alloc(4096, 0, NULL);
    CHECK(q != NULL && q != p, "a second one");
    CHECK(vrampool_device_pool_exists(0) == 1, "device 0 has a pool now");
    CHECK(vrampool_device_pool_exists(1) == 0, "device 1 does not");
    CHECK(vrampool_device_pool_exists(-1) == VRAMPOOL_STATUS_BAD_ARGUMENT, "-1 is no device");
    CHECK(vrampool_torch_alloc(64, -1, NULL) == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_ARGUMENT,
          "nor can it allocate");

    char *json = vrampool_stats_json(0);
    CHECK(json != NULL, "stats of device 0");
    if (json != NULL) {
        CHECK(strstr(json, "\"device\":0") != NULL, "name the device");
        CHECK(strstr(json, "\"allocated_bytes\":{\"current\":3149824,") != NULL, "3 MiB + 4 KiB live: %.300s", json);
        CHECK(strstr(json, "backend=host") != NULL, "the config from VRAMPOOL_CONF");
        vrampool_string_free(json);
    }

    vrampool_torch_free(p, 3 * MIB, 0, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK, "free through the PyTorch entry point");
    vrampool_torch_free(p, 3 * MIB, 0, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_NOT_LIVE, "a double free is refused, not a crash");
    vrampool_torch_free((void *)(uintptr_t)0x10, 16, 0, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_FOREIGN_ADDRESS, "a foreign pointer is refused");
    vrampool_torch_free((void *)(uintptr_t)0x10, 16, 1, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_FOREIGN_ADDRESS,
          "a foreign pointer named on a device without a pool is refused");
    vrampool_torch_free(NULL, 0, 0, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK, "freeing NULL does nothing");
    vrampool_torch_free(q, 4096, 1, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK,
          "a free that names another device finds the pool that handed the pointer out");
    vrampool_torch_free(q, 4096, -1, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_NOT_LIVE, "a double free through any device is refused");
    q = vrampool_torch_alloc(4096, 0, NULL);
    CHECK(q != NULL, "allocate again");
    CHECK(vrampool_torch_record_stream(q, 0, (void *)(uintptr_t)9) == VRAMPOOL_STATUS_OK, "record a second stream");
    vrampool_counters counters;
    CHECK(vrampool_device_counters(0, &counters) == VRAMPOOL_STATUS_OK, "counters of device 0");
    CHECK(counters.active_allocations == 1 && counters.allocated_bytes == 4096, "one block of 4 KiB live");
    vrampool_torch_free(q, 4096, -1, NULL);
    CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_OK, "free of a block used on another stream");
    CHECK(vrampool_device_counters(0, &counters) == VRAMPOOL_STATUS_OK, "counters again");
    CHECK(counters.held_frees_total == 1, "its free went through the held frees");
    CHECK(vrampool_device_counters(0, NULL) == VRAMPOOL_STATUS_BAD_ARGUMENT, "a NULL out-pointer is refused");
    CHECK(vrampool_device_counters(7, &counters) == VRAMPOOL_STATUS_NO_POOL, "no counters without a pool");

    /* A private pool beside the device pool: dynamic, on the device config's backend. */
    vrampool_pool *private_pool = vrampool_device_private_pool_create(0);
    CHECK(private_pool != NULL, "a private pool on device 0");
    uint64_t r = 0;
    CHECK(vrampool_pool_alloc(private_pool, 3000, 0, 5, &r) == VRAMPOOL_STATUS_OK && r != 0, "allocates");
    json = vrampool_pool_stats_json(private_pool);
    CHECK(json != NULL && strstr(json, "\"strategy\":\"dynamic\"") != NULL, "a dynamic pool");
    vrampool_string_free(json);
    CHECK(vrampool_pool_free(private_pool, r) == VRAMPOOL_STATUS_OK, "frees");
    vrampool_pool_destroy(private_pool);
    CHECK(vrampool_device_private_pool_create(-3) == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_ARGUMENT,
          "no private pool on device -3");
    struct tally tally = {0, 0, 0};
    CHECK(vrampool_device_counters(0, &counters) == VRAMPOOL_STATUS_OK, "counters of device 0");
    CHECK(vrampool_device_visit(0, count_segment, count_block, &tally) == VRAMPOOL_STATUS_OK &&
              (uint64_t)tally.blocks == counters.active_allocations && tally.segments >= 1,
          "device 0's report lists its live blocks (%d against %" PRIu64 ")", tally.blocks,
          counters.active_allocations);
    CHECK(vrampool_device_visit(9, count_segment, count_block, &tally) == VRAMPOOL_STATUS_NO_POOL, "device 9 has none");

    enum { THREADS = 4 };
    pthread_t threads[THREADS];
    for (size_t t = 0; t < THREADS; t++) {
        pthread_create(&threads[t], NULL, torch_churn, (void *)(uintptr_t)(t + 1));
    }
    for (size_t t = 0; t < THREADS; t++) {
        void *failures = NULL;
        pthread_join(threads[t], &failures);
        CHECK((uintptr_t)failures == 0, "thread %zu: %zu failed calls", t, (size_t)(uintptr_t)failures);
    }
    json = vrampool_stats_json(0);
    CHECK(json != NULL && strstr(json, "\"allocated_bytes\":{\"current\":0,") != NULL,
          "everything freed after the threads: %.300s", json ? json : "(null)");
    vrampool_string_free(json);

    uint64_t trimmed = UINT64_MAX;
    CHECK(vrampool_device_trim(0, &trimmed) == VRAMPOOL_STATUS_OK && trimmed != UINT64_MAX, "trim device 0");
    CHECK(vrampool_device_trim(1, NULL) == VRAMPOOL_STATUS_NO_POOL, "device 1 has nothing to trim");
    CHECK(vrampool_device_trim_all(&trimmed) == VRAMPOOL_STATUS_OK, "trim every device");
}

static void torch_with_a_bad_config(void) {
    for (int i = 0; i < 3; i++) {
        CHECK(vrampool_torch_alloc(MIB, 0, NULL) == NULL, "every allocation fails");
        CHECK(vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_CONFIG, "with the bad-config status");
        CHECK(last_error_mentions("VRAMPOOL_CONF") && last_error_mentions("`colour`"), "naming the key");
    }
    CHECK(vrampool_device_pool_exists(0) == 0, "no pool is made");
    CHECK(vrampool_stats_json(0) == NULL && vrampool_last_error_code() == VRAMPOOL_STATUS_BAD_CONFIG,
          "stats say why");
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bad-conf") == 0) {
        torch_with_a_bad_config();
    } else {
        pools_made_by_the_program();
        torch_entry_points();
    }
    printf("api_test: %d checks passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
