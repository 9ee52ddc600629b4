#!/usr/bin/env python3
"""vrampool as a drop-in for PyTorch's allocator: every memory feature a PyTorch program uses, tested under PyTorch's
own caching allocator and under vrampool, each test in a process of its own, on one GPU.

    python3 scripts/pytorch-dropin.py drive --out DIR [--wheel WHEEL] [--cli PATH] [--tests a,b]
    python3 scripts/pytorch-dropin.py run TEST --allocator pytorch|vrampool [--cli PATH]

`drive` first installs vrampool with one `pip install` of WHEEL into a fresh folder (where --wheel is given; else
the module of this repository is used), then runs every test twice, once per allocator, and prints a table; a test
passes only if it passes under both. The results go to DIR/dropin.json. `run` runs one test in this process and
prints one JSON line.

The tests, by what a program does:

  record_stream       a tensor read on a side stream behind a long kernel, record_stream, freed, and a new tensor of
                      the same size filled at once on the current stream: the side stream's copy is intact
  new_stream          allocations on a stream the allocator has never seen, freed and reused across streams
  graph_capture       torch.cuda.graph capture of a computation that frees an intermediate, replayed with new input;
                      eager tensors made after the capture are not overwritten by replays
  graph_shared_pool   two graphs sharing a pool (graph_pool_handle), the second reading the first's output
  compile_cudagraphs  torch.compile(mode="reduce-overhead") of a small model: inference and training steps
  cudnn_benchmark     cudnn.benchmark = True and a convolution, forward and backward, equal to benchmark = False
  out_of_memory       an allocation twice the GPU's size raises torch.OutOfMemoryError (vrampool's message names the
                      requested, live, reserved and cap bytes); the program frees, allocates again and goes on
  empty_cache         after freeing 2 GiB, torch.cuda.empty_cache() gives it back (memory_reserved drops)
  memory_fraction     set_per_process_memory_fraction(0.1): a 20% allocation is refused, a 5% one served
  statistics          memory_allocated, memory_reserved, max_memory_*, reset_peak_memory_stats, memory_stats keys
  snapshot            _record_memory_history + _snapshot: allocations and frees of the run in PyTorch's format, drawn
                      by PyTorch's memory viewer code and read by `vrampool advise`
  mem_pool            torch.cuda.MemPool + use_mem_pool: the region's tensors live in the pool, others do not
  vrampool_pool       `with vrampool.pool():` after CUDA has started: the region is served by vrampool
  ddp_step            a DistributedDataParallel training step over NCCL, world size 1, gradients as without DDP
  nccl_p2p            NCCL send and receive (to itself) of a tensor freed right after the send
  foreign_pointer     a pointer the allocator never handed out is freed: an error, never a crash; CUDA goes on
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
import time
import traceback

REPO = pathlib.Path(__file__).resolve().parents[1]
GIB = 1 << 30
MIB = 1 << 20


class Context:
    """What a test knows of its run."""

    def __init__(self, allocator: str, cli: str | None):
        self.allocator = allocator
        self.cli = cli
        self.vrampool = allocator == "vrampool"


# ---------------------------------------------------------------------------------------------------------------
# The tests. Each takes torch and the context, raises AssertionError on failure, and returns a short detail string.


def t_record_stream(torch, ctx):
    n = 16_777_216
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    a = torch.full((n,), 3.0, device="cuda")
    b = torch.empty(n, device="cuda")
    side.wait_stream(main)
    with torch.cuda.stream(side):
        torch.cuda._sleep(400_000_000)
        b.copy_(a)
    a.record_stream(side)
    del a
    c = torch.empty(n, device="cuda")
    c.fill_(-1.0)
    torch.cuda.synchronize()
    wrong = int((b != 3.0).sum().item())
    assert wrong == 0, f"{wrong} of {n} elements of b are wrong"
    return f"all {n} elements of b intact"


def t_new_stream(torch, ctx):
    fresh = torch.cuda.Stream()
    with torch.cuda.stream(fresh):
        x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        y = x * 2
    torch.cuda.current_stream().wait_stream(fresh)
    assert float(y[-1].item()) == 2 * ((1 << 20) - 1)
    del x
    with torch.cuda.stream(fresh):
        z = torch.ones(1 << 20, device="cuda")
    torch.cuda.current_stream().wait_stream(fresh)
    w = torch.zeros(1 << 22, device="cuda") + 1
    torch.cuda.synchronize()
    assert float(z.sum().item()) == 1 << 20 and float(w.sum().item()) == 1 << 22
    return "a stream never seen before is served"


def _graph_body(x):
    t = x * 2
    u = t.relu()
    del t
    return u + 1


def t_graph_capture(torch, ctx):
    x = torch.randn(1 << 22, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            _graph_body(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = _graph_body(x)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, _graph_body(x)), "a replay's output differs from eager"
    eager = [torch.full((1 << 22,), 7.0, device="cuda") for _ in range(8)]
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert all(bool((e == 7.0).all()) for e in eager), "a replay overwrote an eager tensor"
    assert torch.equal(y, _graph_body(x))
    del g, y
    torch.cuda.synchronize()
    return "capture, 6 replays, 8 eager tensors untouched"


def t_graph_shared_pool(torch, ctx):
    pool = torch.cuda.graph_pool_handle()
    x = torch.randn(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            _graph_body(_graph_body(x))
    torch.cuda.current_stream().wait_stream(s)
    g1 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, pool=pool):
        y1 = _graph_body(x)
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2, pool=pool):
        y2 = _graph_body(y1)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g1.replay()
        g2.replay()
        torch.cuda.synchronize()
        assert torch.equal(y2, _graph_body(_graph_body(x)))
    del g1, g2, y1, y2
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return "two graphs in one pool, 3 replays each"


def t_compile_cudagraphs(torch, ctx):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(64, 256, device="cuda")
            out = compiled(x).clone()
            assert torch.allclose(out, model(x), atol=1e-3, rtol=1e-3), f"inference step {step} differs from eager"
    train_model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(train_model.parameters(), lr=0.01)
    train = torch.compile(train_model, mode="reduce-overhead")
    losses = []
    for _ in range(6):
        x = torch.randn(128, 256, device="cuda")
        loss = train(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    assert all(l == l and abs(l) < 1e6 for l in losses), losses
    return f"5 inference steps equal to eager, 6 training steps, last loss {losses[-1]:.4f}"


def t_cudnn_benchmark(torch, ctx):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 128, 3, padding=1).cuda()
    x = torch.randn(32, 64, 56, 56, device="cuda", requires_grad=True)
    torch.backends.cudnn.benchmark = False
    reference = conv(x)
    reference.sum().backward()
    grad_reference = x.grad.clone()
    x.grad = None
    torch.backends.cudnn.benchmark = True
    out = conv(x)
    out.sum().backward()
    torch.cuda.synchronize()
    assert torch.allclose(out, reference, atol=1e-3, rtol=1e-3)
    assert torch.allclose(x.grad, grad_reference, atol=1e-2, rtol=1e-2)
    return "benchmark mode ran, results equal to benchmark = False"


def t_out_of_memory(torch, ctx):
    total = torch.cuda.get_device_properties(0).total_memory
    keep = torch.ones(64 * MIB // 4, device="cuda")
    try:
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as err:
        message = str(err)
    else:
        raise AssertionError("an allocation of twice the GPU's memory succeeded")
    assert "out of memory" in message.lower(), message
    if ctx.vrampool:
        for word in ("requested", "live", "reserved", "cap"):
            assert word in message, f"vrampool's message lacks `{word}`: {message}"
    del keep
    x = torch.ones(1 << 28, device="cuda")
    assert float(x.sum().item()) == float(1 << 28)
    return "torch.OutOfMemoryError caught, then 1 GiB allocated: " + message.splitlines()[0][:160]


def t_empty_cache(torch, ctx):
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    x = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    del x
    before = torch.cuda.memory_reserved()
    assert before >= base + 2 * GIB - 64 * MIB, f"2 GiB freed but only {before - base} bytes reserved above the base"
    torch.cuda.empty_cache()
    after = torch.cuda.memory_reserved()
    assert after <= before - 2 * GIB + 64 * MIB, f"empty_cache gave back {before - after} bytes of 2 GiB"
    return f"reserved {before >> 20} MiB before empty_cache, {after >> 20} MiB after"


def t_memory_fraction(torch, ctx):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.1)
    try:
        try:
            torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            pass
        else:
            raise AssertionError("a 20% allocation was served under a fraction of 0.1")
        ok = torch.empty(int(total * 0.05), dtype=torch.uint8, device="cuda")
        ok.fill_(1)
        del ok
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    y = torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")
    del y
    return "20% refused under 0.1, 5% served; 20% served again under 1.0"


def t_statistics(torch, ctx):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    a0 = torch.cuda.memory_allocated()
    x = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
    grew = torch.cuda.memory_allocated() - a0
    assert grew == 64 * MIB, f"memory_allocated grew by {grew}"
    assert torch.cuda.max_memory_allocated() >= a0 + 64 * MIB
    assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
    assert torch.cuda.max_memory_reserved() >= torch.cuda.memory_reserved()
    del x
    assert torch.cuda.memory_allocated() == a0
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated(), (
        torch.cuda.max_memory_allocated(),
        torch.cuda.memory_allocated(),
    )
    stats = torch.cuda.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
        "active_bytes.all.current",
        "requested_bytes.all.current",
        "allocation.all.current",
        "num_ooms",
        "num_alloc_retries",
    ):
        assert key in stats, f"memory_stats() lacks {key}"
    summary = torch.cuda.memory_summary()
    assert "Allocated memory" in summary or "allocated" in summary.lower()
    return f"memory_stats has {len(stats)} keys; peaks reset"


def t_snapshot(torch, ctx):
    started_us = time.time() * 1e6
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    kept = [torch.empty(size, dtype=torch.uint8, device="cuda") for size in (3 * MIB, 5 * MIB, 7 * MIB)]
    time.sleep(0.05)
    freed = torch.empty(11 * MIB, dtype=torch.uint8, device="cuda")
    freed_addr = freed.data_ptr()
    del freed
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ended_us = time.time() * 1e6
    trace = snapshot["device_traces"][torch.cuda.current_device()]
    # Each entry's time is in microseconds of Unix time, as the viewer and `vrampool advise` read it.
    times = [e["time_us"] for e in trace if e["action"] in ("alloc", "free_requested", "free_completed")]
    assert times == sorted(times), "trace times out of order"
    assert all(started_us - 1e6 <= t <= ended_us + 1e6 for t in times), (
        f"trace times {times[0]} to {times[-1]} are not microseconds of Unix time within the test's "
        f"{started_us:.0f} to {ended_us:.0f}"
    )
    assert times[-1] - times[0] >= 40_000, f"the 50 ms sleep spans {times[-1] - times[0]} microseconds in the trace"
    allocs = {(e["addr"], e["size"]) for e in trace if e["action"] == "alloc"}
    for t in kept:
        assert (t.data_ptr(), t.numel()) in allocs, f"no alloc record for {t.numel()} bytes at {t.data_ptr():#x}"
    completed = {e["addr"] for e in trace if e["action"] == "free_completed"}
    assert freed_addr in completed, "no free_completed record for the freed tensor"
    assert snapshot["segments"], "no segments"
    from torch.cuda import _memory_viz

    html = _memory_viz.trace_plot(snapshot)
    assert "<html" in html.lower() or len(html) > 1000
    detail = f"{len(trace)} trace entries, {len(snapshot['segments'])} segments, drawn by _memory_viz"
    if ctx.cli:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "snapshot.pickle")
            with open(path, "wb") as out:
                pickle.dump(snapshot, out)
            advice = subprocess.run([ctx.cli, "advise", path, "--json"], capture_output=True, text=True, timeout=300)
            assert advice.returncode == 0, f"vrampool advise failed: {advice.stderr[-800:]}"
            config = json.loads(advice.stdout)["config"]
            detail += f"; vrampool advise: {config}"
    return detail


def _in_segments(snapshot_segments, ptr):
    return any(s["address"] <= ptr < s["address"] + s["total_size"] for s in snapshot_segments)


def t_mem_pool(torch, ctx):
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.randn(1 << 20, device="cuda")
        y = torch.randn(3 << 20, device="cuda")
    z = torch.randn(1 << 20, device="cuda")
    segments = pool.snapshot()
    assert segments, "the pool's snapshot has no segment"
    assert _in_segments(segments, x.data_ptr()) and _in_segments(segments, y.data_ptr()), "x, y not in the pool"
    assert not _in_segments(segments, z.data_ptr()), "a tensor made outside the pool is in it"
    assert float((x + x).sum().item()) == float(2 * x.sum().item())
    del x, y, pool
    torch.cuda.synchronize()
    return "the region's tensors are in the pool, the rest are not"


def t_vrampool_pool(torch, ctx):
    import vrampool

    torch.ones(1, device="cuda")  # CUDA has started: only a scoped pool can serve from here
    device = torch.cuda.current_device()
    before = vrampool.counters(device)["allocated_bytes"] if vrampool.load().vrampool_device_pool_exists(device) == 1 else 0
    with vrampool.pool() as mem_pool:
        x = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
        x.fill_(2)
    assert int(x.sum(dtype=torch.int64).item()) == 2 * 256 * MIB
    if ctx.vrampool:
        segments = mem_pool.snapshot()
        assert _in_segments(segments, x.data_ptr()), "x is not in vrampool's private pool"
    else:
        served = vrampool.counters(device)["allocated_bytes"] - before
        assert served >= 256 * MIB, f"vrampool served {served} bytes of the region's 256 MiB"
    del x, mem_pool
    torch.cuda.synchronize()
    return "the region was served by vrampool"


def _init_nccl(torch):
    import socket

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", torch.cuda.current_device()))
    return dist


def t_ddp_step(torch, ctx):
    dist = _init_nccl(torch)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
        reference = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
        reference.load_state_dict(model.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        for _ in range(3):
            x = torch.randn(64, 512, device="cuda")
            target = torch.randint(0, 10, (64,), device="cuda")
            for m, o in ((ddp, opt), (reference, ref_opt)):
                loss = torch.nn.functional.cross_entropy(m(x), target)
                o.zero_grad(set_to_none=True)
                loss.backward()
                o.step()
        torch.cuda.synchronize()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert torch.allclose(p, q, atol=1e-5), "DDP's parameters differ from the plain model's"
        return "3 DDP steps over NCCL equal to the plain model's"
    finally:
        dist.destroy_process_group()


def t_nccl_p2p(torch, ctx):
    dist = _init_nccl(torch)
    n = 16_777_216
    try:
        t = torch.full((n,), 5.0, device="cuda")
        r = torch.empty(n, device="cuda")
        try:
            ops = [dist.P2POp(dist.isend, t, 0), dist.P2POp(dist.irecv, r, 0)]
            works = dist.batch_isend_irecv(ops)
            how = "batch_isend_irecv to itself"
        except (ValueError, RuntimeError):
            works = [dist.all_to_all_single(r, t, async_op=True)]
            how = "all_to_all_single (NCCL send and receive to itself)"
        del t
        junk = torch.full((n,), -1.0, device="cuda")
        for work in works:
            work.wait()
        torch.cuda.synchronize()
        wrong = int((r != 5.0).sum().item())
        assert wrong == 0, f"{wrong} of {n} received elements are wrong"
        del junk
        return f"{how}: the sent tensor freed at once, all {n} elements received intact"
    finally:
        dist.destroy_process_group()


def t_foreign_pointer(torch, ctx):
    x = torch.ones(1 << 20, device="cuda")
    raised = None
    try:
        torch.cuda.caching_allocator_delete(0xDEAD000)
    except RuntimeError as err:
        raised = str(err).splitlines()[0]
    y = torch.ones(1 << 20, device="cuda")
    assert float((x + y).sum().item()) == float(2 << 20), "CUDA no longer works after a bad free"
    return f"refused ({raised or 'reported on stderr'}); CUDA goes on"


TESTS = {name[2:]: function for name, function in globals().items() if name.startswith("t_")}


# ---------------------------------------------------------------------------------------------------------------
# Running.


def run_one(test: str, allocator: str, cli: str | None) -> dict:
    started = time.perf_counter()
    record = {"test": test, "allocator": allocator}
    try:
        if allocator == "vrampool":
            import vrampool

            vrampool.install()
            record["vrampool_module"] = str(pathlib.Path(vrampool.__file__).parent)
        import torch

        record["torch"] = torch.__version__
        record["detail"] = TESTS[test](torch, Context(allocator, cli))
        torch.cuda.synchronize()
        record["ok"] = True
    except BaseException as err:  # noqa: BLE001 - every failure is a result
        record["ok"] = False
        record["error"] = f"{type(err).__name__}: {err}"[:2000]
        record["traceback"] = traceback.format_exc()[-3000:]
    record["seconds"] = round(time.perf_counter() - started, 2)
    return record


def drive(args) -> int:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    results = {"install": None, "runs": []}
    if args.wheel:
        site = pathlib.Path(tempfile.mkdtemp(prefix="vrampool-site-"))
        started = time.perf_counter()
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site), args.wheel],
            capture_output=True, text=True,
        )
        results["install"] = {"command": f"pip install {pathlib.Path(args.wheel).name}", "ok": pip.returncode == 0,
                              "seconds": round(time.perf_counter() - started, 1), "tail": pip.stdout[-500:] + pip.stderr[-800:]}
        print(f"pip install: {'ok' if pip.returncode == 0 else 'FAILED'} in {results['install']['seconds']} s", flush=True)
        if pip.returncode != 0:
            print(pip.stderr, flush=True)
            return 1
        env["PYTHONPATH"] = str(site)
        env.pop("VRAMPOOL_LIB", None)
    else:
        env["PYTHONPATH"] = str(REPO / "python")
    tests = args.tests or list(TESTS)
    for test in tests:
        for allocator in ("pytorch", "vrampool"):
            command = [sys.executable, __file__, "run", test, "--allocator", allocator]
            if args.cli:
                command += ["--cli", args.cli]
            try:
                child = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
                lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
                record = json.loads(lines[-1]) if lines else {
                    "test": test, "allocator": allocator, "ok": False,
                    "error": f"exit {child.returncode}: {child.stderr[-1500:]}"}
                record["stderr_tail"] = child.stderr[-1200:]
            except subprocess.TimeoutExpired:
                record = {"test": test, "allocator": allocator, "ok": False, "error": f"timed out after {args.timeout} s"}
            results["runs"].append(record)
            status = "ok" if record.get("ok") else "FAILED"
            print(f"{test:<20} {allocator:<9} {status:<6} {record.get('seconds', '-')!s:>6} s  "
                  f"{record.get('detail') or record.get('error', '')}"[:400], flush=True)
            if not record.get("ok") and record.get("traceback"):
                print(record["traceback"][-1500:], flush=True)
    (out / "dropin.json").write_text(json.dumps(results, indent=1))
    print("\n| test | PyTorch's allocator | vrampool |\n| --- | --- | --- |")
    passed_both = 0
    for test in tests:
        cells = []
        for allocator in ("pytorch", "vrampool"):
            record = next(r for r in results["runs"] if r["test"] == test and r["allocator"] == allocator)
            cells.append("pass" if record.get("ok") else "FAIL")
        passed_both += cells == ["pass", "pass"]
        print(f"| {test} | {cells[0]} | {cells[1]} |")
    print(f"\n{passed_both} of {len(tests)} tests pass under both allocators")
    return 0 if passed_both == len(tests) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one test in this process")
    run.add_argument("test", choices=sorted(TESTS))
    run.add_argument("--allocator", choices=["pytorch", "vrampool"], required=True)
    run.add_argument("--cli", help="the vrampool command, for the snapshot test's `vrampool advise`")
    drive_cmd = sub.add_parser("drive", help="run every test under both allocators")
    drive_cmd.add_argument("--out", required=True)
    drive_cmd.add_argument("--wheel", help="install vrampool from this wheel with pip first")
    drive_cmd.add_argument("--cli")
    drive_cmd.add_argument("--tests", type=lambda s: s.split(","))
    drive_cmd.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args(argv)
    if args.command == "run":
        print(json.dumps(run_one(args.test, args.allocator, args.cli)), flush=True)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
