#!/usr/bin/env bash
# What one churn step (a free and an allocation through vrampool_torch_free / vrampool_torch_alloc) costs the
# CPU under each pool config, counted by valgrind rather than timed: instructions, L1 data-cache misses,
# last-level data-cache misses and mispredicted branches, as callgrind's cache and branch simulation counts
# them inside the two entry points (the harness's own work is not counted). Counts are steady where timings on
# a shared machine are not, so configs and commits compare on any machine.
#
#   cargo build --release -p vrampool-capi
#   scripts/torch_latency/abi_profile.sh [-l LIBRARY] CONF...
#   scripts/torch_latency/abi_profile.sh backend=sim backend=sim,strategy=dynamic
#
# Each CONF is a VRAMPOOL_CONF string (add backend=sim on a machine without a GPU). The churn of abi_latency.c
# runs twice per config, for 10 and for 30 rounds of 5000 steps after its 5000-step warm-up; the difference,
# over 100,000 steps, is what a step costs once the pool is warm (the warm-up, the pool's growth and its
# learning are in both runs and cancel out). Prints one line per config: the counts per step, and the share of
# the steps' allocations the hybrid pool sent to its dynamic region. Needs valgrind and a C compiler.
set -euo pipefail
cd "$(dirname "$0")/../.."
LIB=target/release/libvrampool_c.so
if [ "${1:-}" = -l ]; then
    LIB=${2:?-l needs the path of libvrampool_c.so}
    shift 2
fi
if [ $# -eq 0 ]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
[ -f "$LIB" ] || { echo "no library at $LIB (cargo build --release -p vrampool-capi)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -o "$WORK/abi_latency" scripts/torch_latency/abi_latency.c -ldl -lm

# The totals line of a callgrind run of ROUNDS rounds under CONF: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim.
totals() {
    local conf=$1 rounds=$2
    VRAMPOOL_CONF=$conf valgrind --tool=callgrind --toggle-collect='vrampool_torch_*' --cache-sim=yes \
        --branch-sim=yes --callgrind-out-file="$WORK/out.$rounds" \
        "$WORK/abi_latency" "$LIB" churn "$rounds" 5000 >"$WORK/log.$rounds" 2>&1 ||
        { cat "$WORK/log.$rounds" >&2; exit 1; }
    grep '^totals:' "$WORK/out.$rounds" | cut -d' ' -f2-
}

# The pool's region requests ("fallbacks") in the run of ROUNDS rounds, from abi_latency's last line.
region() {
    sed -n 's/^pool: [0-9]* allocations, \([0-9]*\) in the region.*/\1/p' "$WORK/log.$1"
}

printf '%-56s %12s %9s %9s %12s %9s\n' "config (per step: one free, one allocation)" "instructions" "L1d miss" \
    "LLd miss" "mispredicts" "region"
for conf in "$@"; do
    short=$(totals "$conf" 10)
    short_region=$(region 10)
    long=$(totals "$conf" 30)
    long_region=$(region 30)
    echo "$short" "$short_region" "$long" "$long_region" | awk -v conf="$conf" '{
        steps = 100000
        for (i = 1; i <= 14; i++) d[i] = ($(i + 14) - $i) / steps
        printf "%-56s %12.0f %9.2f %9.2f %12.2f %8.1f%%\n", conf, d[1], d[5] + d[6], d[8] + d[9], d[11] + d[13], 100 * d[14]
    }'
done
