#!/usr/bin/env bash
# Every GPU check and measurement of vrampool, run on a machine with an NVIDIA GPU from binaries built
# elsewhere and copied into .gpu/ (see docs/GPU.md for how to build them). Results go under $OUT.
#
#   scripts/gpu-run.sh checks                 device listing, GPU tests, buffers example, the virtual-memory
#                                             calls' costs on an idle and a busy GPU, live replays of the
#                                             bundled traces checked against the simulation, latency benches
#                                             (CUDA backends against cuMemAlloc and CUDA's pool; CPU patterns;
#                                             threads; PyTorch's caching allocator against the C ABI)
#   scripts/gpu-run.sh timing-ways            both latency benches with each method timed to the end before the
#                                             next (--one-cell-at-a-time, --one-at-a-time), to compare with the
#                                             rounds taking turns that `checks` times, on the same host
#   scripts/gpu-run.sh churn-parts [CONF...]  where the PyTorch churn's time goes: run.py's churn under the default,
#                                             the default without cached blocks for sizes no class serves
#                                             (cached_waste=0), the hybrid with classes for nearly every size, the
#                                             dynamic pool alone (every request in a region) and a fixed pool of
#                                             8 MiB blocks (every request a cached block), and the default with
#                                             .gpu/before/'s library where gpu-build.sh --before made one, twice
#                                             each in turn, each in its own process; prints per run PyTorch's and
#                                             vrampool's ns per op, their ratio, vrampool's region requests and
#                                             both peaks reserved; then abi_latency's churn (the C ABI alone, no
#                                             PyTorch) under the default, the fixed pool and the before library,
#                                             with the caches warm and with 4 MiB and 64 MiB written before each
#                                             round (ABI_EVICT_KIB), twice each in turn: how much of the gap to the
#                                             fixed pool is the tables going cold between rounds. With
#                                             CONFs ("" the default, "before" the library of .gpu/before/,
#                                             "lib:DIR" that of .gpu/DIR/), the PyTorch churn under those alone
#   scripts/gpu-run.sh churn-split [CONF...]  abi_latency's churn with each call timed on its own (ABI_SPLIT=1):
#                                             frees and allocations of blocks above 4 MiB (region requests under
#                                             the default) and of the rest, median and mean ns, under the default
#                                             and each CONF, with the caches warm and with 4 MiB and 64 MiB written
#                                             before each round, twice each in turn
#   scripts/gpu-run.sh churn-perf [CONF...]   abi_latency's churn with the CPU's counters (ABI_PERF=1): cycles,
#                                             instructions, mispredicted branches, L1 data, last-level and data-TLB
#                                             misses per operation, under the default and each CONF ("lib:DIR" the
#                                             default with .gpu/DIR/'s library), with the caches warm and with 4 MiB
#                                             written before each round, twice each in turn
#   scripts/gpu-run.sh churn-pages [CONF...]  whether the pages the pool's tables are spread over cost the churn
#                                             time: abi_latency's churn (warm, and with 4 MiB written before each
#                                             round) and the PyTorch churn, under the default and each CONF, each
#                                             with and without GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc's
#                                             memory in huge pages, where the kernel's transparent huge pages
#                                             allow it), in turn, three or four times each
#   scripts/gpu-run.sh dropin [TESTS]         vrampool as a drop-in for PyTorch's allocator: pip install of the
#                                             wheel, then every test of scripts/pytorch-dropin.py (streams, CUDA
#                                             graphs, torch.compile, cuDNN benchmark, out of memory, empty_cache,
#                                             memory fraction, statistics, snapshots, MemPool, NCCL) under
#                                             PyTorch's allocator and under vrampool, each in its own process
#   scripts/gpu-run.sh threads-torch [THREADS]
#                                             the churn of shared_churn.rs (each thread on a stream of its own, one
#                                             block in 8 freed by the next thread) from 1, 2, 4, 8 and 16 threads
#                                             (or THREADS, e.g. 1,4,16) of one process, through PyTorch's caching
#                                             allocator and through vrampool's C ABI: pip install of the wheel, then
#                                             scripts/torch_latency/threads.py, THREADS_ROUNDS rounds (default 3) of
#                                             THREADS_SECONDS (default 0.5) per allocator after a warm-up round, in
#                                             turns; ops/s per thread count, vrampool's over PyTorch's and each over
#                                             its one-thread figure -> $OUT/threads-torch.txt, .json
#   scripts/gpu-run.sh e2e WORKLOADS [MODES]  PyTorch training and generation under each allocator mode (default:
#                                             all of vrampool, vrampool-advised, pytorch, expandable,
#                                             cudamallocasync, nocache), one untimed warm-up run, then 3 runs
#                                             each (each round starting one mode later), PyTorch's default once
#                                             more for its own spread. A workload too long for one call runs in several
#                                             with a few modes each; `scripts/pytorch-e2e.py report --out DIR`
#                                             merges their runs.jsonl into one table.
#   scripts/gpu-run.sh e2e-deterministic WORKLOADS [MODES [CONF]]
#                                             the same with PyTorch's deterministic kernels (default modes:
#                                             vrampool, pytorch), 2 runs each and PyTorch's default once more, no
#                                             warm-up: the losses of every mode must equal PyTorch's bit for bit.
#                                             These runs are steady (a few %), so vrampool-advised with CONF (else
#                                             the advised config) compares a config with the default in time too
#
# Each phase writes its output to a file of its own as it goes, so a run cut short keeps what finished. The
# checks' many files are packed into $OUT/checks.tar.gz at the end, beside $OUT/summary.txt.
set -u
cd "$(dirname "$0")/.."
DEST=${OUT:-/tmp/vrampool-gpu}
OUT=$DEST
[ "${1:-}" = checks ] && OUT="$DEST/files"
B=.gpu
mkdir -p "$OUT"
export VRAMPOOL_LIB="$PWD/$B/libvrampool_c.so"
pack() { tar -czf "$DEST/checks.tar.gz" -C "$OUT" . && cp "$OUT/summary.txt" "$DEST/"; rm -rf "$OUT"; }

phase() {
    local name=$1
    shift
    local start=$SECONDS
    echo "== $name: $*" >&2
    "$@" >"$OUT/$name.txt" 2>&1
    local status=$?
    echo "$name: exit $status after $((SECONDS - start)) s" | tee -a "$OUT/summary.txt" >&2
    return 0
}

# Installs .gpu/wheel/'s wheel with pip into a fresh folder and puts that folder first on PYTHONPATH, as
# pytorch-dropin.py's `drive --wheel` does; VRAMPOOL_LIB is unset, so that the library is the wheel's.
install_wheel() {
    local site
    site=$(mktemp -d "${TMPDIR:-/tmp}/vrampool-site-XXXXXX") || return 1
    python3 -m pip install --no-deps --no-index --target "$site" "$(ls "$B"/wheel/*.whl)" || return 1
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    unset VRAMPOOL_LIB
}

# The advised config of each bundled trace (from `vrampool advise`, on this machine's CPU), for a GPU that runs
# 5 ms behind the program, as a training GPU does (docs/BENCHMARKS.md, `--gpu-lag-ms`).
advised() {
    "$B/vrampool" advise "traces/$1.pickle.gz" --gpu-lag-ms 5 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["config"])'
}

live_replays() {
    local trace config strategy
    for trace in resnet_train_fixed gpt_train_varlen gpt_serve; do
        "$B/vrampool" compare "traces/$trace.pickle.gz" --json 2>/dev/null >"$OUT/compare-$trace.json"
        for strategy in fixed dynamic hybrid; do
            config=$(python3 -c "import json; print(next(r['config'] for r in json.load(open('$OUT/compare-$trace.json')) if r['strategy'] == '$strategy'))")
            echo "--- $trace $strategy ($config) on cuda-vm"
            "$B/vrampool" replay "traces/$trace.pickle.gz" --strategy "$strategy" --config "$config" \
                --on cuda-vm --check-against-sim --json
            echo "exit $?"
        done
    done
    echo "--- resnet_train_fixed dynamic on cuda (segments)"
    "$B/vrampool" replay traces/resnet_train_fixed.pickle.gz --strategy dynamic --config virtual_memory=off \
        --on cuda --check-against-sim --json
    echo "exit $?"
}

# For the config in $conf, sets $lib (the library to load), $label (how a line names the run) and $conf (the
# config string): the entry `before` is the default with the library of .gpu/before/. Fails where that entry
# names no library (gpu-build.sh --before made none).
pick_library() {
    lib=$VRAMPOOL_LIB
    label=${conf:-default}
    local dir=
    case $conf in
    before) dir=before ;;
    lib:*) dir=${conf#lib:} ;;
    esac
    if [ -n "$dir" ]; then
        [ -f "$B/$dir/libvrampool_c.so" ] || return 1
        lib="$PWD/$B/$dir/libvrampool_c.so"
        label="default, library of $(cat "$B/$dir/COMMIT" 2>/dev/null || echo "$dir")"
        conf=""
    fi
}

# The PyTorch churn under each of CHURN_PARTS's configs in turn, twice, each a process of its own (the hybrid
# learns its classes from the pattern it meets first): one line per run, PyTorch's and vrampool's ns per op,
# their ratio, and how many of vrampool's 68,000 allocations its hybrid pool sent to the dynamic region.
# An entry `before` is the default with the library of .gpu/before/ (skipped where there is none).
CHURN_PARTS=(
    ""
    "strategy=hybrid"
    "strategy=hybrid,cached_waste=0"
    "strategy=hybrid,max_class_size=8MiB,max_waste=0.5,coverage=1.0"
    "strategy=dynamic"
    "strategy=fixed,block_size=8MiB,block_count=1100"
    before
)
# One line for a run of run.py's churn written to JSON: run REP, LABEL, PyTorch's and vrampool's ns per op, their
# ratio, vrampool's region requests and both peaks reserved.
churn_row() {
    python3 - "$@" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
ns = {r["method"]: r["ns_per_op_median"] for r in result["rows"] if r["pattern"] == "churn"}
pool = result["pools"][0]
print(f"run {sys.argv[2]}  {sys.argv[3]:<48} PyTorch {ns['pytorch']:5.0f} ns  vrampool {ns['vrampool']:4.0f} ns"
      f"  {ns['pytorch'] / ns['vrampool']:5.1f}x  region {pool['fallbacks']}"
      f"  {pool['pytorch_reserved_bytes_peak'] >> 20} / {pool['reserved_bytes_peak'] >> 20} MiB")
PY
}

churn_parts() {
    local rep conf label lib
    for rep in 1 2; do
        for conf in "${CHURN_PARTS[@]}"; do
            pick_library || continue
            if ! python3 scripts/torch_latency/run.py --patterns churn --conf "$conf" --lib "$lib" \
                --out "$OUT/churn-parts.json" >/dev/null; then
                echo "run.py failed for [$label]"
                continue
            fi
            churn_row "$OUT/churn-parts.json" "$rep" "$label"
        done
    done
}

# abi_latency's churn through the C ABI on the GPU, each of COLD_CONFS with the caches warm and with 4 MiB and
# 64 MiB written before each round, twice in turn: one line per run with its median ns per operation.
COLD_CONFS=("" "strategy=fixed,block_size=8MiB,block_count=1100" before)
cold_parts() {
    local rep conf evict lib label
    for rep in 1 2; do
        for evict in 0 4096 65536; do
            for conf in "${COLD_CONFS[@]}"; do
                pick_library || continue
                printf 'run %s  evict %5s KiB  %-48s ' "$rep" "$evict" "$label"
                ABI_EVICT_KIB=$evict VRAMPOOL_CONF=$conf "$B/abi_latency" "$lib" churn 61 2000 | head -1
            done
        done
    done
}

# abi_latency's churn with each call timed apart (ABI_SPLIT=1) under the default and each config given.
churn_split() {
    local rep evict conf
    for rep in 1 2; do
        for evict in 0 4096 65536; do
            for conf in "" "$@"; do
                echo "== run $rep  evict $evict KiB  [${conf:-default}]"
                ABI_SPLIT=1 ABI_EVICT_KIB=$evict VRAMPOOL_CONF=$conf "$B/abi_latency" "$VRAMPOOL_LIB" churn 61 2000
            done
        done
    done
}

# abi_latency's churn with the CPU's counters (ABI_PERF=1) under the default and each config given.
churn_perf() {
    local rep evict conf lib label
    for rep in 1 2; do
        for evict in 0 4096; do
            for conf in "" "$@"; do
                pick_library || continue
                echo "== run $rep  evict $evict KiB  [$label]"
                ABI_PERF=1 ABI_EVICT_KIB=$evict VRAMPOOL_CONF=$conf "$B/abi_latency" "$lib" churn 61 2000
            done
        done
    done
}

# The churn with malloc's memory in huge pages and without, under the default and each config given:
# abi_latency's (four times each, warm and with 4 MiB written before each round), then the PyTorch churn's
# (three times each). Also says what the kernel allows, and how much of a churn process's memory huge pages held.
churn_pages() {
    local rep evict tune conf lib label pid
    cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag
    ldd --version | head -1
    for tune in "" glibc.malloc.hugetlb=1; do
        GLIBC_TUNABLES=$tune "$B/abi_latency" "$VRAMPOOL_LIB" churn 6000 2000 >/dev/null &
        pid=$!
        local most=0 kib
        while kill -0 "$pid" 2>/dev/null; do
            kib=$(awk '/AnonHugePages/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null)
            [ "${kib:-0}" -gt "$most" ] && most=$kib
            sleep 0.2
        done
        wait "$pid"
        echo "GLIBC_TUNABLES=[$tune]: at most $most KiB of the churn process's memory in huge pages"
    done
    for rep in 1 2 3 4; do
        for evict in 0 4096; do
            for tune in "" glibc.malloc.hugetlb=1; do
                for conf in "" "$@"; do
                    pick_library || continue
                    printf 'run %s  evict %4s KiB  GLIBC_TUNABLES=[%s]  %-40s ' "$rep" "$evict" "$tune" "$label"
                    GLIBC_TUNABLES=$tune ABI_EVICT_KIB=$evict VRAMPOOL_CONF=$conf "$B/abi_latency" "$lib" \
                        churn 61 2000 | head -1
                done
            done
        done
    done
    for rep in 1 2 3; do
        for tune in "" glibc.malloc.hugetlb=1; do
            for conf in "" "$@"; do
                pick_library || continue
                label="PyTorch churn, GLIBC_TUNABLES=[$tune], $label"
                if ! GLIBC_TUNABLES=$tune python3 scripts/torch_latency/run.py --patterns churn --conf "$conf" \
                    --lib "$lib" --out "$OUT/churn-pages.json" >/dev/null; then
                    echo "run.py failed for [$label]"
                    continue
                fi
                churn_row "$OUT/churn-pages.json" "$rep" "$label"
            done
        done
    done
}

case "${1:-}" in
checks)
    { date -u; nvidia-smi; nproc; lscpu | grep -E "Model name|^CPU\(s\)"; } >"$OUT/machine.txt" 2>&1
    phase devices "$B/vrampool" devices
    phase gpu-tests "$B/gpu-tests" --ignored --nocapture --test-threads 1
    phase cuda-buffers "$B/cuda_buffers"
    phase vm-call-costs "$B/vm_call_costs"
    phase live-replays live_replays
    phase cuda-latency "$B/vrampool-cuda-bench" --json "$OUT/cuda-latency.json"
    phase cpu-bench "$B/vrampool" bench --json --seconds 10
    VRAMPOOL_BENCH_MS=500 phase threads "$B/threads-bench"
    phase torch-latency python3 scripts/torch_latency/run.py --out "$OUT/torch-latency.json"
    phase torch-latency-waste python3 scripts/torch_latency/run.py --conf "strategy=hybrid,max_waste=0.125" \
        --out "$OUT/torch-latency-waste.json"
    pack
    ;;
churn-parts)
    shift
    if [ $# -gt 0 ]; then
        CHURN_PARTS=("$@")
        phase churn-parts churn_parts
        cat "$OUT/churn-parts.txt"
        exit 0
    fi
    phase churn-parts churn_parts
    phase churn-cold cold_parts
    cat "$OUT/churn-parts.txt" "$OUT/churn-cold.txt"
    ;;
churn-perf)
    shift
    phase churn-perf churn_perf "$@"
    cat "$OUT/churn-perf.txt"
    ;;
churn-pages)
    shift
    phase churn-pages churn_pages "$@"
    cat "$OUT/churn-pages.txt"
    ;;
churn-split)
    shift
    phase churn-split churn_split "$@"
    cat "$OUT/churn-split.txt"
    ;;
timing-ways)
    phase cuda-latency-one-at-a-time "$B/vrampool-cuda-bench" --one-cell-at-a-time \
        --json "$OUT/cuda-latency-one-at-a-time.json"
    phase torch-latency-one-at-a-time python3 scripts/torch_latency/run.py --one-at-a-time \
        --out "$OUT/torch-latency-one-at-a-time.json"
    ;;
dropin)
    tests=()
    [ -n "${2:-}" ] && tests=(--tests "$2")
    phase dropin python3 scripts/pytorch-dropin.py drive --out "$OUT/dropin" --wheel "$(ls "$B"/wheel/*.whl)" \
        --cli "$B/vrampool" "${tests[@]}"
    cat "$OUT/dropin.txt"
    ;;
threads-torch)
    if ! install_wheel >"$OUT/threads-torch-install.txt" 2>&1; then
        echo "pip install of $(ls "$B"/wheel/*.whl) failed:" >&2
        cat "$OUT/threads-torch-install.txt" >&2
        exit 1
    fi
    phase threads-torch python3 scripts/torch_latency/threads.py --threads "${2:-1,2,4,8,16}" \
        --seconds "${THREADS_SECONDS:-0.5}" --rounds "${THREADS_ROUNDS:-3}" --out "$OUT/threads-torch.json"
    cat "$OUT/threads-torch.txt"
    ;;
e2e)
    workloads=${2:?workloads}
    modes=${3:-vrampool,vrampool-advised,pytorch,expandable,cudamallocasync,nocache}
    extra=0
    [[ ",$modes," == *,pytorch,* ]] && extra=1
    args=()
    for w in ${workloads//,/ }; do
        args+=(--advised "$w" "$(advised "$w")")
    done
    name="e2e-${workloads//,/-}"
    phase "$name" python3 scripts/pytorch-e2e.py drive --out "$OUT/$name" --workloads "$workloads" \
        --modes "$modes" --reps 3 --extra "$extra" --lib "$VRAMPOOL_LIB" "${args[@]}"
    ;;
e2e-deterministic)
    workloads=${2:?workloads}
    modes=${3:-vrampool,pytorch}
    args=()
    if [[ ",$modes," == *,vrampool-advised,* ]]; then
        for w in ${workloads//,/ }; do
            args+=(--advised "$w" "${4:-$(advised "$w")}")
        done
    fi
    name="e2e-deterministic-${workloads//,/-}"
    phase "$name" python3 scripts/pytorch-e2e.py drive --out "$OUT/$name" --workloads "$workloads" \
        --modes "$modes" --reps 2 --extra 1 --warmup 0 --deterministic --lib "$VRAMPOOL_LIB" "${args[@]}"
    ;;
*)
    echo "usage: $0 checks | dropin [TESTS] | threads-torch [THREADS] | churn-parts [CONF...] | churn-split [CONF...] | churn-perf [CONF...] | churn-pages [CONF...] | timing-ways | e2e WORKLOADS [MODES] | e2e-deterministic WORKLOADS [MODES [CONF]]" >&2
    exit 2
    ;;
esac
