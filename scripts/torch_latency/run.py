#!/usr/bin/env python3
"""Allocation latency on the GPU machine: PyTorch's CUDA caching allocator against vrampool's C ABI, side by side.

Builds latency.cpp with torch.utils.cpp_extension.load (a C++ compiler, ninja and the CUDA headers are needed),
then times, on PyTorch's current stream of device 0:

  - pairs of one size (4 KiB, 1 MiB, 64 MiB): allocate then free, nanoseconds per pair;
  - churn: 1000 live blocks, log-uniform sizes from 256 B to 8 MiB, free one at random and allocate one (one op =
    one free plus one allocation), nanoseconds per op;

for `c10::cuda::CUDACachingAllocator::raw_alloc_with_stream`/`raw_delete` (PyTorch's caching allocator, left in
place) and for vrampool: by default the same two calls on vrampool's PyTorch allocator (`vrampool.allocator()`,
what PyTorch calls once vrampool is installed; --via torch), or `vrampool_torch_alloc`/`vrampool_torch_free` of the
C ABI alone (--via abi); the pool is configured by VRAMPOOL_CONF, or --conf (default: the adaptive pool on CUDA
virtual memory). Each pattern runs in a process of its own, the two allocators' timed rounds taking turns (so that both are
timed over the same stretch of the host's time), so that each meets the pattern fresh
(vrampool's default pool learns its size classes from its first requests; one process for all patterns would
teach it the first pattern only). Figures: median over rounds of the mean per round. Prints a table, and writes
JSON to --out. After the times, each pattern's peak reserved (and allocated) bytes under both allocators, and
what each allocator asked of the device while its rounds were timed (vrampool: its backend calls, growths, moved
chunks and the time spent in them, from its stats; PyTorch: its segments allocated and freed, from
torch.cuda.memory_stats).

    cargo build --release -p vrampool-capi
    python3 scripts/torch_latency/run.py --out latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]


def build_extension(verbose: bool, name: str = "vrampool_torch_latency", source: str = "latency.cpp"):
    """Builds (once, then from PyTorch's extension cache) and loads `source` of this folder as the extension `name`."""
    from torch.utils import cpp_extension
    from vrampool._extension import cuda_include_dirs

    if shutil.which("ninja") is None:
        raise SystemExit("torch.utils.cpp_extension.load needs ninja: `pip install ninja` (or put it on PATH)")
    with_cuda, include_dirs = cuda_include_dirs(cpp_extension)
    return cpp_extension.load(
        name=name,
        sources=[str(HERE / source)],
        extra_cflags=["-O2"],
        extra_include_paths=[str(HERE), *include_dirs],
        extra_ldflags=["-lc10_cuda", "-ldl"],
        with_cuda=with_cuda,
        verbose=verbose,
    )


def import_vrampool():
    """The vrampool module: the installed package, else this repository's (python/). PyTorch's allocator is left in
    place."""
    try:
        import vrampool
    except ImportError:
        sys.path.insert(0, str(REPO / "python"))
        import vrampool
    return vrampool


def library_file(vrampool, lib: str | None) -> pathlib.Path:
    """The library to load: `lib`, else $VRAMPOOL_LIB, else the installed package's, else the repository's build."""
    library = vrampool.library_path(lib).resolve()
    if not library.is_file():
        raise SystemExit(f"{library} does not exist: build it with `cargo build --release -p vrampool-capi`")
    return library


PATTERNS = ["pair-4KiB", "pair-1MiB", "pair-64MiB", "churn"]

# vrampool's counters of device work, from its stats.
VRAMPOOL_DEVICE_COUNTERS = ["backend_calls", "growths", "chunks_moved", "chunks_aliased", "event_waits",
                            "device_time_ns", "wait_time_ns"]
# PyTorch's counters of device work, from torch.cuda.memory_stats.
PYTORCH_DEVICE_COUNTERS = {"segments_allocated": "segment.all.allocated", "segments_freed": "segment.all.freed"}


def device_counters(vrampool, torch) -> dict:
    """Both allocators' counters of device work now."""
    pool = vrampool.stats(0)["stats"]
    memory = torch.cuda.memory_stats(0)
    return {
        "vrampool": {key: pool.get(key, 0) for key in VRAMPOOL_DEVICE_COUNTERS},
        "pytorch": {name: memory.get(key, 0) for name, key in PYTORCH_DEVICE_COUNTERS.items()},
    }


def measure(args, library) -> dict:
    """Runs the patterns of --patterns in this process; returns the rows and vrampool's pool as it ends."""
    import vrampool

    vrampool.load(library)

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device is visible to PyTorch")
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")  # initialises CUDA and PyTorch's caching allocator
    extension = build_extension(args.verbose)
    patterns = args.patterns.split(",")
    at_start: dict[str, dict] = {}
    while_timed: dict[str, dict] = {}

    def on_timing(pattern: str, moment: str) -> None:
        now = device_counters(vrampool, torch)
        if moment == "start":
            at_start[pattern] = now
            return
        while_timed[pattern] = {
            method: {key: now[method][key] - at_start[pattern][method][key] for key in now[method]}
            for method in now
        }

    allocator = vrampool.allocator() if args.via == "torch" else None
    rows = extension.run(str(library), patterns, args.rounds, args.ops, args.churn_ops, args.warmup, args.seed,
                         not args.one_at_a_time, on_timing, allocator)
    for row in rows:
        row["device_work_while_timed"] = while_timed[row["pattern"]][row["method"]]
    pool = vrampool.stats(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "vrampool_config": pool["config"],
        "vrampool_via": args.via,
        "vrampool_backend": pool["backend"],
        "pools": [{
            "patterns": patterns,
            "fallbacks": pool["stats"]["fallbacks"],
            "fallback_reasons": pool["stats"].get("fallback_reasons", {}),
            "growths": pool["stats"]["growths"],
            "chunks_moved": pool["stats"].get("chunks_moved", 0),
            "chunks_aliased": pool["stats"].get("chunks_aliased", 0),
            "event_waits": pool["stats"].get("event_waits", 0),
            "reserved_bytes_peak": pool["stats"]["reserved_bytes"]["peak"],
            "allocated_bytes_peak": pool["stats"]["allocated_bytes"]["peak"],
            # PyTorch's caching allocator in the same process, over the same pattern (its 512-byte first
            # tensor included).
            "pytorch_reserved_bytes_peak": torch.cuda.max_memory_reserved(0),
            "pytorch_allocated_bytes_peak": torch.cuda.max_memory_allocated(0),
        }],
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", help="libvrampool_c.so (default: $VRAMPOOL_LIB, else target/release/libvrampool_c.so)")
    parser.add_argument("--conf", help="VRAMPOOL_CONF for vrampool's device pool (default: as in the environment)")
    parser.add_argument("--rounds", type=int, default=31, help="timed rounds per pattern (default 31)")
    parser.add_argument("--ops", type=int, default=2000, help="pairs per round (default 2000)")
    parser.add_argument("--churn-ops", type=int, default=2000, help="churn ops per round (default 2000)")
    parser.add_argument("--warmup", type=int, default=5000,
                        help="untimed ops before each pattern (default 5000: past the hybrid pool's 1024-request "
                             "warm-up, in which it learns its size classes)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--patterns", default=",".join(PATTERNS),
                        help=f"comma-separated patterns (default: all of {','.join(PATTERNS)})")
    parser.add_argument("--in-this-process", action="store_true",
                        help="run every pattern of --patterns in this process (what each child does) and print "
                             "its JSON only")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="time all of PyTorch's rounds of a pattern, then all of vrampool's, instead of their "
                             "rounds taking turns")
    parser.add_argument("--via", choices=["torch", "abi"], default="torch",
                        help="vrampool through its PyTorch allocator, what PyTorch calls once vrampool is installed "
                             "(torch, the default), or through the C functions alone (abi)")
    parser.add_argument("--out", help="write the JSON here too")
    parser.add_argument("--verbose", action="store_true", help="show the extension's build")
    args = parser.parse_args()
    unknown = sorted(set(args.patterns.split(",")) - set(PATTERNS))
    if unknown:
        raise SystemExit(f"unknown pattern(s) {', '.join(unknown)}: choose from {', '.join(PATTERNS)}")

    if args.conf is not None:
        os.environ["VRAMPOOL_CONF"] = args.conf
    vrampool = import_vrampool()
    library = library_file(vrampool, args.lib)
    if args.in_this_process:
        print(json.dumps(measure(args, library)))
        return

    result = None
    for pattern in args.patterns.split(","):
        print(f"measuring {pattern} in a fresh process...", file=sys.stderr, flush=True)
        child = [sys.executable, __file__, "--in-this-process", "--patterns", pattern, "--lib", str(library),
                 "--rounds", str(args.rounds), "--ops", str(args.ops), "--churn-ops", str(args.churn_ops),
                 "--warmup", str(args.warmup), "--seed", str(args.seed), "--via", args.via]
        if args.one_at_a_time:
            child.append("--one-at-a-time")
        if args.verbose:
            child.append("--verbose")
        done = subprocess.run(child, stdout=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the process measuring {pattern} failed with exit {done.returncode}")
        part = json.loads(done.stdout.strip().splitlines()[-1])
        if result is None:
            result = part
        else:
            result["rows"] += part["rows"]
            result["pools"] += part["pools"]
    result.update({"rounds": args.rounds, "warmup": args.warmup, "seed": args.seed,
                   "rounds_took_turns": not args.one_at_a_time})
    print(f"{result['gpu']}, PyTorch {result['torch']}; vrampool `{result['vrampool_config']}`")
    print(f"{'pattern':<12} {'pytorch ns':>12} {'vrampool ns':>12} {'ratio':>7}   (median per op; p10-p90)")
    by_pattern: dict[str, dict[str, dict]] = {}
    for row in result["rows"]:
        by_pattern.setdefault(row["pattern"], {})[row["method"]] = row
    for pattern, methods in by_pattern.items():
        torch_row, pool_row = methods["pytorch"], methods["vrampool"]
        ratio = pool_row["ns_per_op_median"] / torch_row["ns_per_op_median"]
        print(
            f"{pattern:<12} {torch_row['ns_per_op_median']:>12.0f} {pool_row['ns_per_op_median']:>12.0f} {ratio:>7.2f}"
            f"   ({torch_row['ns_per_op_p10']:.0f}-{torch_row['ns_per_op_p90']:.0f} /"
            f" {pool_row['ns_per_op_p10']:.0f}-{pool_row['ns_per_op_p90']:.0f})"
        )
    print(f"{'pattern':<12} {'pytorch MiB':>12} {'vrampool MiB':>12}   (peak reserved; peak allocated)")
    mib = lambda pool, key: pool[key] / 2**20
    for pool in result["pools"]:
        print(f"{','.join(pool['patterns']):<12} {mib(pool, 'pytorch_reserved_bytes_peak'):>12.0f}"
              f" {mib(pool, 'reserved_bytes_peak'):>12.0f}   ({mib(pool, 'pytorch_allocated_bytes_peak'):.0f};"
              f" {mib(pool, 'allocated_bytes_peak'):.0f})")
    print(f"{'pattern':<12} while timed: vrampool backend calls (growths, chunks moved), ms in them;"
          " PyTorch segments allocated, freed")
    for pattern, methods in by_pattern.items():
        pool_work = methods["vrampool"]["device_work_while_timed"]
        torch_work = methods["pytorch"]["device_work_while_timed"]
        print(f"{pattern:<12} {pool_work['backend_calls']} ({pool_work['growths']}, {pool_work['chunks_moved']}),"
              f" {pool_work['device_time_ns'] / 1e6:.2f} ms;"
              f" {torch_work['segments_allocated']}, {torch_work['segments_freed']}")
    text = json.dumps(result, indent=2)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
