#!/usr/bin/env bash
# Which lines of data one round of the churn fetches from memory when the pool's tables have gone cold
# between rounds, by function: abi_latency.c's churn through vrampool_torch_free / vrampool_torch_alloc
# under callgrind's cache simulation with a 2 MiB last level (like the GPU host's L2), ABI_EVICT_KIB KiB
# (default 4096) of other memory written before each round, as another allocator's rounds do on the GPU
# host. Counts are steady where timings on a shared machine are not.
#
#   cargo build --release -p vrampool-capi
#   scripts/torch_latency/abi_cold_lines.sh [-l LIBRARY] [-n TOP] CONF
#   scripts/torch_latency/abi_cold_lines.sh backend=sim
#
# The churn runs twice, for 10 and for 30 rounds of 2000 operations after its 5000-step warm-up; the
# difference, over 20 rounds, is what a round costs once the pool is warm. Prints per round: instructions,
# L1 data misses and last-level data misses (lines fetched from memory) in all, then the TOP functions
# (default 25) by last-level data misses. Needs valgrind and a C compiler.
set -euo pipefail
cd "$(dirname "$0")/../.."
LIB=target/release/libvrampool_c.so
TOP=25
while [ $# -gt 1 ]; do
    case $1 in
    -l) LIB=$2; shift 2 ;;
    -n) TOP=$2; shift 2 ;;
    *) break ;;
    esac
done
if [ $# -ne 1 ]; then
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
CONF=$1
[ -f "$LIB" ] || { echo "no library at $LIB (cargo build --release -p vrampool-capi)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -o "$WORK/abi_latency" scripts/torch_latency/abi_latency.c -ldl -lm

for rounds in 10 30; do
    ABI_EVICT_KIB=${ABI_EVICT_KIB:-4096} VRAMPOOL_CONF=$CONF valgrind --tool=callgrind --cache-sim=yes \
        --LL=2097152,16,64 --toggle-collect='vrampool_torch_*' --callgrind-out-file="$WORK/out.$rounds" \
        "$WORK/abi_latency" "$LIB" churn "$rounds" 2000 >"$WORK/log.$rounds" 2>&1 ||
        { cat "$WORK/log.$rounds" >&2; exit 1; }
    # Per function: last-level data misses, L1 data misses, instructions (the library's path left out, so
    # that two libraries' names agree).
    callgrind_annotate --auto=no --show=DLmr,DLmw,D1mr,D1mw,Ir --threshold=100 "$WORK/out.$rounds" |
        sed 's/([ 0-9.]*%)//g; s/ \[[^]]*\]$//' |
        awk 'NF >= 6 && $1 ~ /^[0-9,.]+$/ {
            for (i = 1; i <= 5; i++) { gsub(",", "", $i); if ($i == ".") $i = 0 }
            name = $6; for (i = 7; i <= NF; i++) name = name " " $i
            print $1 + $2 "\t" $3 + $4 "\t" $5 "\t" name
        }' >"$WORK/functions.$rounds"
done
awk -F'\t' -v top="$TOP" '
    NR == FNR { lines[$4] = $1; l1[$4] = $2; ir[$4] = $3; next }
    $4 == "PROGRAM TOTALS" {
        printf "per round of 2000 operations: %.0f instructions, %.0f L1d misses, %.0f lines fetched from memory\n",
            ($3 - ir[$4]) / 20, ($2 - l1[$4]) / 20, ($1 - lines[$4]) / 20
        next
    }
    { printf "%9.1f %9.1f %11.0f  %s\n", ($1 - lines[$4]) / 20, ($2 - l1[$4]) / 20, ($3 - ir[$4]) / 20, $4 }
' "$WORK/functions.10" "$WORK/functions.30" >"$WORK/table"
grep '^per round' "$WORK/table"
printf '%9s %9s %11s  %s\n' "lines" "L1d miss" "instr" "function (per round)"
grep -v '^per round' "$WORK/table" | sort -rn | head -n "$TOP"
