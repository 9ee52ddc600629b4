#!/usr/bin/env python3
"""Allocation throughput on the GPU machine with several threads at once: PyTorch's CUDA caching allocator against
vrampool's C ABI, in one process.

Builds threads.cpp with torch.utils.cpp_extension.load (run.py's build_extension: a C++ compiler, ninja and the CUDA
headers are needed), then, for each thread count of --threads, runs the churn of
crates/vrampool-bench/src/shared_churn.rs from that many C++ threads on device 0: thread t on a CUDA stream of its
own keeps 125 live blocks of log-uniform sizes from 256 B to 8 MiB (drawn before timing, seed t + 1), each step
frees one and allocates one in its place, and one step in 8 hands its block to the next thread instead, which frees
it (with the block's own size and stream; a mailbox holds at most 64 blocks, past which the thread frees its blocks
itself); one operation is one allocation or one free. The allocators:
`c10::cuda::CUDACachingAllocator::raw_alloc_with_stream`/`raw_delete` (PyTorch's caching allocator, left in place)
and `vrampool_torch_alloc`/`vrampool_torch_free` of libvrampool_c.so (--lib, else $VRAMPOOL_LIB, else the installed
package's; the device pool configured by VRAMPOOL_CONF, or --conf, default the adaptive pool on CUDA virtual
memory). Per thread count: an untimed warm-up round of each, then --rounds rounds of --seconds each, the two
allocators taking turns (PyTorch first in even rounds, vrampool first in odd ones); a round's figure is all threads'
operations over the longest thread's time, the threads starting together. Prints, per thread count, the median
operations per second of each allocator, vrampool's over PyTorch's, and each over its own figure at the first
thread count (1 by default), then one line on what ran; writes every round's figure to --out (JSON).

    python3 scripts/torch_latency/threads.py --out threads.json
    python3 scripts/torch_latency/threads.py --threads 1,4,16 --seconds 0.3 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys

import run  # run.py beside this file

METHODS = ("pytorch", "vrampool")


def measure(extension, threads: int, seconds: float, rounds: int) -> dict:
    """One thread count: a warm-up round of each allocator, then `rounds` timed rounds taking turns."""
    for method in METHODS:
        extension.churn(method, threads, seconds)
    per_round: dict[str, list[float]] = {method: [] for method in METHODS}
    for r in range(rounds):
        for method in METHODS if r % 2 == 0 else METHODS[::-1]:
            per_round[method].append(extension.churn(method, threads, seconds)["ops_per_second"])
    return {method: {"ops_per_second": figures, "median": statistics.median(figures)}
            for method, figures in per_round.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2,4,8,16", help="comma-separated thread counts (default 1,2,4,8,16)")
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per round and allocator (default 0.5)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per thread count and allocator (default 3)")
    parser.add_argument("--lib", help="libvrampool_c.so (default: $VRAMPOOL_LIB, else the installed package's, else "
                                      "target/release/libvrampool_c.so)")
    parser.add_argument("--conf", help="VRAMPOOL_CONF for vrampool's device pool (default: as in the environment)")
    parser.add_argument("--out", help="write the JSON here")
    parser.add_argument("--verbose", action="store_true", help="show the extension's build")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.threads.split(",")]
    except ValueError:
        raise SystemExit(f"--threads takes comma-separated counts, not {args.threads!r}") from None
    if not counts or min(counts) < 1 or args.rounds < 1 or not args.seconds > 0:
        raise SystemExit("thread counts and --rounds must be at least 1, --seconds above 0")

    if args.conf is not None:
        os.environ["VRAMPOOL_CONF"] = args.conf
    vrampool = run.import_vrampool()
    library = run.library_file(vrampool, args.lib)
    vrampool.load(library)

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device is visible to PyTorch")
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")  # initialises CUDA and PyTorch's caching allocator
    extension = run.build_extension(args.verbose, name="vrampool_torch_threads", source="threads.cpp")
    extension.load_vrampool(str(library))

    results = []
    for threads in counts:
        print(f"{threads} threads...", file=sys.stderr, flush=True)
        results.append({"threads": threads, **measure(extension, threads, args.seconds, args.rounds)})
    pool = vrampool.stats(0)
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cpus": cpus,
        "cpus_usable": usable,
        "library": str(library),
        "vrampool_config": pool["config"],
        "vrampool_backend": pool["backend"],
        "live_blocks_per_thread": extension.LIVE_BLOCKS,
        "sizes": [extension.MIN_SIZE, extension.MAX_SIZE],
        "handoff_every": extension.HANDOFF_EVERY,
        "mailbox_every": extension.MAILBOX_EVERY,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "warmup_rounds": 1,
        # Both allocators' peaks over the whole run (PyTorch's with its 512-byte first tensor).
        "pytorch_reserved_bytes_peak": torch.cuda.max_memory_reserved(0),
        "vrampool_reserved_bytes_peak": pool["stats"]["reserved_bytes"]["peak"],
        "results": results,
    }
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    first = results[0]
    base = f"vs {first['threads']} thr"
    print(f"{'threads':>7} {'PyTorch Mops/s':>15} {'vrampool Mops/s':>16} {'vrampool/PyTorch':>17}"
          f" {'PyTorch ' + base:>17} {'vrampool ' + base:>18}")
    for row in results:
        torch_ops, pool_ops = row["pytorch"]["median"], row["vrampool"]["median"]
        print(f"{row['threads']:>7} {torch_ops / 1e6:>15.2f} {pool_ops / 1e6:>16.2f} {pool_ops / torch_ops:>16.2f}x"
              f" {torch_ops / first['pytorch']['median']:>16.2f}x {pool_ops / first['vrampool']['median']:>17.2f}x")
    cpu_text = f"{cpus} CPUs" if usable == cpus else f"{cpus} CPUs ({usable} usable)"
    print(f"{result['gpu']}, {cpu_text}, PyTorch {result['torch']}; vrampool `{result['vrampool_config']}` "
          f"({result['vrampool_backend']}, {library.name}); per thread {extension.LIVE_BLOCKS} live blocks of "
          f"256 B-8 MiB on a stream of its own, 1 step in {extension.HANDOFF_EVERY} freed by the next thread; "
          f"median ops/s (one op = one allocation or one free) of {args.rounds} rounds of {args.seconds} s each, "
          f"after one warm-up round, the allocators taking turns")


if __name__ == "__main__":
    main()
