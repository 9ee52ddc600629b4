#!/usr/bin/env bash
# Builds, on any Linux machine with cargo, every binary scripts/gpu-run.sh runs on the GPU machine, and puts
# them (stripped) in .gpu/, with the Python package's wheel in .gpu/wheel/ (what `pip install .` builds; the GPU
# machine installs it with pip, as a user would). The CUDA driver is loaded at run time, so no CUDA toolkit is
# needed here.
#
#   scripts/gpu-build.sh                    the working tree's binaries
#   scripts/gpu-build.sh --before COMMIT    and libvrampool_c.so of COMMIT in .gpu/before/ (its name in
#                                           .gpu/before/COMMIT), which `gpu-run.sh churn-parts` runs beside
set -euo pipefail
cd "$(dirname "$0")/.."
B=.gpu
mkdir -p "$B"
if [ "${1:-}" = --before ]; then
    before=${2:?--before needs a commit}
    commit=$(git rev-parse --short "$before^{commit}")
    tree=$(mktemp -d)
    trap 'git worktree remove --force "$tree" >/dev/null 2>&1; rm -rf "$tree"' EXIT
    git worktree add --detach "$tree" "$commit" >/dev/null
    (cd "$tree" && cargo build --release -p vrampool-capi)
    mkdir -p "$B/before"
    cp "$tree/target/release/libvrampool_c.so" "$B/before/"
    strip "$B/before/libvrampool_c.so"
    echo "$commit" >"$B/before/COMMIT"
fi
cargo build --release -p vrampool-cli -p vrampool-capi
cargo build --release -p vrampool-cuda --examples
# The executable cargo builds for test or bench target $1 (of kind $2), from its JSON messages.
executable() {
    local name=$1 kind=$2
    shift 2
    cargo "$@" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
name, kind = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    m = json.loads(line)
    target = m.get("target", {})
    if m.get("executable") and target.get("name") == name and kind in target.get("kind", []):
        print(m["executable"])
' "$name" "$kind"
}
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -o "$B/abi_latency" scripts/torch_latency/abi_latency.c -ldl -lm
cp "$(executable gpu test test --release -p vrampool-cuda --test gpu)" "$B/gpu-tests"
cp "$(executable threads bench bench -p vrampool-bench --bench threads)" "$B/threads-bench"
cp target/release/vrampool target/release/vrampool-cuda-bench target/release/examples/cuda_buffers \
    target/release/examples/vm_call_costs target/release/libvrampool_c.so "$B/"
strip "$B"/vrampool "$B"/vrampool-cuda-bench "$B"/cuda_buffers "$B"/vm_call_costs "$B"/gpu-tests \
    "$B"/threads-bench "$B"/libvrampool_c.so
rm -rf "$B/wheel" build
python3 -m pip wheel . --no-deps --quiet -w "$B/wheel"
rm -rf build python/vrampool.egg-info
ls -l "$B" "$B/wheel"
