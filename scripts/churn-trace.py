#!/usr/bin/env python3
"""Writes a churn as a vrampool CSV event log (time_us,action,addr,size,stream): LIVE blocks of sizes spread
log-uniformly over 256 B to 8 MiB, then OPS replacements of one block at random (its free, then a new block),
one every STEP microseconds, the pattern of scripts/torch_latency's churn with the time between requests made
explicit, so that `vrampool replay` weighs the pool's driver time against it.

    python3 scripts/churn-trace.py --out churn.csv [--live 1000] [--ops 60000] [--step-us 1] [--seed 1]
    vrampool replay churn.csv
"""
import argparse
import math
import random


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--live", type=int, default=1000, help="blocks live at once (default 1000)")
    parser.add_argument("--ops", type=int, default=60000, help="replacements (default 60000)")
    parser.add_argument("--step-us", type=float, default=1.0, help="microseconds per replacement (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    def size() -> int:
        return int(math.exp(rng.uniform(math.log(256), math.log(8 << 20))))

    lines = ["time_us,action,addr,size,stream"]
    addr, now, live = 0x10000, 0.0, []
    for _ in range(args.live):
        live.append((addr, size()))
        lines.append(f"{int(now)},alloc,{addr:#x},{live[-1][1]},0")
        addr += 1 << 24
        now += args.step_us
    for _ in range(args.ops):
        slot = rng.randrange(args.live)
        old, old_size = live[slot]
        lines.append(f"{int(now)},free,{old:#x},{old_size},0")
        now += args.step_us / 2
        live[slot] = (addr, size())
        lines.append(f"{int(now)},alloc,{addr:#x},{live[slot][1]},0")
        addr += 1 << 24
        now += args.step_us / 2
    with open(args.out, "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
