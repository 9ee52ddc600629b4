#!/usr/bin/env python3
"""Writes the test data of vrampool-trace into this folder.

Run from anywhere with Python 3 (no third-party packages): `python3 crates/vrampool-trace/tests/data/generate.py`.
It writes small crafted snapshots, malformed and malicious pickles, CSV logs, the snapshot the example of
`traces/README.md` writes (`readme_tiny.pickle`), and `real_traces_expected.txt`:
figures that Python's own `pickle` module reads from the snapshots in `traces/`, which the Rust tests compare
against their own decoding. The tests never run Python.
"""

import gzip
import io
import math
import os
import pickle
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "traces"))
REAL_TRACES = ["resnet_train_fixed.pickle.gz", "gpt_train_varlen.pickle.gz", "gpt_serve.pickle.gz"]

# The order of vrampool_trace::EventKind, for the event hash.
KIND_CODES = {
    "alloc": 0,
    "free_requested": 1,
    "free_completed": 2,
    "segment_alloc": 3,
    "segment_free": 4,
    "segment_map": 5,
    "segment_unmap": 6,
    "oom": 7,
}
MASK = (1 << 64) - 1
PRIME = 1099511628211


def write(name, data):
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(HERE, name), mode) as f:
        f.write(data)


def gz(data):
    # mtime=0 keeps the output identical from run to run.
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as f:
        f.write(data)
    return out.getvalue()


def entry(action, addr, size, stream=0, time_us=0, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": time_us}
    e.update(extra)
    return e


FRAMES = [{"filename": "train.py", "line": 12, "name": "forward"}, {"filename": "nn.py", "line": 3, "name": "f"}]
BIG_STREAM = 0x7F3C_2000_1230
T0 = 1_796_219_185_214_220
MIB = 1 << 20


def future_values(protocol):
    """Values of a key the reader does not know, of every kind the protocol writes as plain data (older
    protocols write bytes and sets as calls, which the reader refuses)."""
    values = [1, 2.5, None, 10**30, -(10**30), -5, True, (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], {}]
    if protocol >= 3:
        values += [b"raw", b"x" * 300]
    if protocol >= 4:
        values += [{1, 2}, frozenset({3}), set()]
    if protocol >= 5:
        values += [bytearray(b"buffer")]
    return tuple(values)


def small_snapshot(protocol=4):
    """Two devices. Device 0 starts mid-ring-buffer (two blocks live from the start), uses every action."""
    a, b, s, x, y, m = 0x7F00_0000_0000, 0x7F00_0000_0400, 0x7F10_0000_0000, 0x7F10_0000_0000, 0x7F10_0000_1000, 0x7F20_0000_0000
    device0 = [
        entry("free_requested", a, 512, time_us=T0, frames=FRAMES, compile_context="N/A", user_metadata=""),
        entry("free_completed", a, 512, time_us=T0 + 1, frames=[], compile_context="N/A", user_metadata=""),
        entry("free_completed", b, 1024, time_us=T0 + 2),
        entry("segment_alloc", s, 2 * MIB, time_us=T0 + 3),
        entry("alloc", x, 1000, time_us=T0 + 4, frames=FRAMES, future_key=future_values(protocol)),
        {"action": "annotate", "time_us": T0 + 5, "user_metadata": {"stage": "START", "name": "step"}},
        entry("alloc", y, 3000, stream=BIG_STREAM, time_us=T0 + 6),
        entry("snapshot", 0, 0, time_us=T0 + 7),
        entry("free_requested", x, 1000, time_us=T0 + 8),
        entry("oom", 123_456_789, 64 * MIB, time_us=T0 + 9),
        entry("free_completed", x, 1000, time_us=T0 + 10),
        entry("segment_map", m, 2 * MIB, time_us=T0 + 11),
        entry("segment_unmap", m, 2 * MIB, time_us=T0 + 12),
        entry("user_defined", 0, 0, time_us=T0 + 13),
        entry("free_requested", y, 3000, stream=BIG_STREAM, time_us=T0 + 14),
        entry("free_completed", y, 3000, stream=BIG_STREAM, time_us=T0 + 15),
        entry("segment_free", s, 2 * MIB, time_us=T0 + 16),
        entry("alloc", 1 << 63, 7, time_us=T0 + 17),
    ]
    device1 = [
        entry("segment_alloc", 0x7E00_0000_0000, 20 * MIB, stream=7, time_us=T0 + 100),
        entry("alloc", 0x7E00_0000_0000, 5 * MIB, stream=7, time_us=T0 + 101),
        entry("alloc", 0x7E00_0050_0000, 6 * MIB, stream=7, time_us=T0 + 102),
    ]
    return {
        "segments": [
            {
                "device": 0,
                "address": s,
                "total_size": 2 * MIB,
                "allocated_size": 0,
                "stream": 0,
                "segment_type": "small",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": FRAMES,
                "blocks": [{"address": s, "size": 2 * MIB, "requested_size": 0, "state": "inactive", "frames": []}],
            }
        ],
        "device_traces": [device0, device1],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0},
        "external_annotations": [{"stage": "START", "name": "step", "device": 0, "time_us": T0}],
    }


class RunsCommand:
    """An object whose unpickling would run a shell command."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/vrampool-trace-test-pwned",))


def crafted():
    for protocol in (0, 1, 2, 3, 4, 5):
        write(f"small_snapshot.p{protocol}.pickle", pickle.dumps(small_snapshot(protocol), protocol=protocol))
    snap = small_snapshot()
    write("small_snapshot.p4.pickle.gz", gz(pickle.dumps(snap, protocol=4)))

    one = {"segments": [], "device_traces": [[], small_snapshot()["device_traces"][1]]}
    write("second_device_only.pickle", pickle.dumps(one, protocol=4))

    # Bad entries on device 0; the good ones around them still read.
    bad = [
        entry("alloc", 0x1000, 256, time_us=1),
        {"action": "alloc", "size": 256, "stream": 0, "time_us": 2},  # 1: no addr
        entry("alloc", 0x2000, "256", time_us=3),  # 2: size is a string
        entry("free_completed", 0x2000, 256, time_us=4),  # 3: free of the skipped allocation
        entry("alloc", 0x3000, -4, time_us=5),  # 4: negative size
        entry("free_completed", 0x1000, 256, time_us=6),
        entry("free_completed", 0x1000, 256, time_us=7),  # 6: double free
        entry("alloc", 0x4000, 512, time_us=8),
        entry("alloc", 0x4000, 512, time_us=9),  # 8: address in use
        entry("free_completed", 0x4000, 100, time_us=10),  # 9: size mismatch
        {"addr": 0x5000, "size": 1},  # 10: no action
        42,  # 11: not a dict
        {"action": 7, "addr": 0, "size": 0},  # 12: action is not a string
        entry("free_completed", 0x4000, 512, time_us=13),
    ]
    write("bad_entries.pickle", pickle.dumps({"segments": [], "device_traces": [bad]}, protocol=4))

    write("not_snapshot.pickle", pickle.dumps({"hello": [1, 2, 3]}, protocol=4))
    write("list_top.pickle", pickle.dumps([1, 2, 3], protocol=2))
    write("device_traces_not_list.pickle", pickle.dumps({"device_traces": {"0": []}}, protocol=4))
    write("device_trace_not_list.pickle", pickle.dumps({"device_traces": [[], 5]}, protocol=4))

    whole = pickle.dumps(snap, protocol=4)
    write("truncated.pickle", whole[: len(whole) * 2 // 3])
    write("truncated.pickle.gz", gz(whole)[:600])

    write("malicious_reduce.p0.pickle", pickle.dumps(RunsCommand(), protocol=0))
    write("malicious_reduce.p4.pickle", pickle.dumps(RunsCommand(), protocol=4))
    write("malicious_global.p2.pickle", pickle.dumps(os.system, protocol=2))
    hidden = small_snapshot()
    hidden["device_traces"][0][4]["user_metadata"] = RunsCommand()
    write("malicious_in_entry.pickle.gz", gz(pickle.dumps(hidden, protocol=4)))


def csv_logs():
    write(
        "rmm_small.csv",
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "140573312345856,23:59:59.500000,allocate,0x7f8a40000000,1024,0x0\n"
        "140573312345856,23:59:59.750000,allocate,0x7f8a40000400,2048,0x7f8a38001020\n"
        "140573312345857,23:59:59.900000,allocate failure,0x0,1099511627776,0x0\n"
        "\n"
        "140573312345856,00:00:00.250000,free,0x7f8a40000000,1024,0x0\n"
        "140573312345856,00:00:01.000000,free,0x7f8a40000400,2048,0x7f8a38001020\n",
    )
    write(
        "rmm_bare_hex.csv",
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "7,10:00:00.000001,allocate,7f8a40000000,4096,10\n"
        "7,10:00:00.000002,free,7f8a40000000,4096,10\n",
    )
    write(
        "rmm_unknown_free.csv",
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "1,10:00:00.000001,allocate,0x1000,256,0x0\n"
        "1,10:00:00.000002,free,0x2000,256,0x0\n"
        "1,10:00:00.000003,free,0x1000,256,0x0\n",
    )
    write(
        "rmm_malformed.csv",
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "1,10:00:00.000001,allocate,0x1000,256,0x0\n"
        "1,10:00:00.000002,allocate,0xZZZZ,256,0x0\n"
        "1,10:00:00.000003,allocate,0x3000,256\n"
        "1,10:00:00.000004,reallocate,0x3000,256,0x0\n"
        "1,10:00:00.000005,free,0x1000,256,0x0\n",
    )
    write(
        "vrampool_small.csv",
        "time_us,action,addr,size,stream\n"
        "0,segment_alloc,0x7f0000000000,2097152,0\n"
        "1,alloc,0x7f0000000000,1000,0\n"
        "2,alloc,0x7f0000000400,24,0x10\n"
        "3,free_requested,0x7f0000000000,1000,0\n"
        "4,free,0x7f0000000000,1000,0\n"
        "5,alloc,139637976727552,4000,0\n"
        "6,oom,0,4294967296,0\n"
        "7,alloc_failure,0,4294967296,0\n"
        "8,free,0x7f0000000400,24,16\n",
    )
    write(
        "vrampool_double_free.csv",
        "time_us,action,addr,size,stream\n"
        "0,alloc,0x1000,64,0\n"
        "1,free,0x1000,64,0\n"
        "2,free,0x1000,64,0\n",
    )
    write(
        "vrampool_malformed.csv",
        "time_us,action,addr,size,stream\n"
        "0,alloc,0x1000,64,0\n"
        "x,alloc,0x2000,64,0\n"
        "2,alloc,0x3000,-64,0\n"
        "3,free,0x3000,64,0\n"
        "4,free,0x1000,64,0\n",
    )
    write("unknown_format.txt", "this is not a trace\n1,2,3\n")


def polyhash(trace):
    h = 0
    for e in trace:
        for v in (KIND_CODES[e["action"]], e["addr"], e["size"], e["stream"], e["time_us"]):
            h = (h * PRIME + (v & MASK)) & MASK
    return h


def nearest_rank(sorted_sizes, percent):
    rank = max(1, math.ceil(len(sorted_sizes) * percent / 100))
    return sorted_sizes[rank - 1]


def real():
    lines = ["# file entries allocations distinct_sizes p50 p90 max peak_live peak_reserved event_hash"]
    for name in REAL_TRACES:
        with gzip.open(os.path.join(TRACES, name)) as f:
            trace = pickle.load(f)["device_traces"][0]
        sizes = sorted(e["size"] for e in trace if e["action"] == "alloc")
        live = peak_live = reserved = peak_reserved = 0
        blocks = {}
        for e in trace:
            if e["action"] == "alloc":
                blocks[e["addr"]] = e["size"]
                live += e["size"]
                peak_live = max(peak_live, live)
            elif e["action"] == "free_completed":
                live -= blocks.pop(e["addr"])
            elif e["action"] in ("segment_alloc", "segment_map"):
                reserved += e["size"]
                peak_reserved = max(peak_reserved, reserved)
            elif e["action"] in ("segment_free", "segment_unmap"):
                reserved -= e["size"]
        figures = [
            len(trace),
            len(sizes),
            len(set(sizes)),
            nearest_rank(sizes, 50),
            nearest_rank(sizes, 90),
            sizes[-1],
            peak_live,
            peak_reserved,
            polyhash(trace),
        ]
        lines.append(" ".join([name] + [str(v) for v in figures]))
    write("real_traces_expected.txt", "\n".join(lines) + "\n")


def readme_example():
    """Runs the Python example of traces/README.md (its one ```python block) in a scratch folder and keeps what it
    writes, `tiny.pickle`, as `readme_tiny.pickle`: the snapshot tests/readme_examples.rs reads and compares with
    the entries the example lists."""
    with open(os.path.join(TRACES, "README.md")) as f:
        readme = f.read()
    blocks = readme.split("```python\n")
    assert len(blocks) == 2, "traces/README.md has one ```python block"
    code = blocks[1].split("```")[0]
    with tempfile.TemporaryDirectory() as scratch:
        here = os.getcwd()
        os.chdir(scratch)
        try:
            exec(code, {})
        finally:
            os.chdir(here)
        with open(os.path.join(scratch, "tiny.pickle"), "rb") as f:
            write("readme_tiny.pickle", f.read())


if __name__ == "__main__":
    crafted()
    csv_logs()
    real()
    readme_example()
