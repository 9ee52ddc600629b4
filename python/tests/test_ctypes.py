"""The vrampool module without a GPU: its ctypes side on host memory, and install(), pool() and the snapshot
helpers against a stand-in for PyTorch (the real one runs in scripts/pytorch-dropin.py on the GPU machine).

Run with the library built, as the Rust test `crates/vrampool-capi/tests/python_module.rs` does:

    VRAMPOOL_LIB=target/debug/libvrampool_c.so PYTHONPATH=python python3 -m unittest discover -s python/tests
"""

import contextlib
import ctypes
import gzip
import os
import pathlib
import pickle
import sys
import tempfile
import types
import unittest

import vrampool

MIB = 1 << 20

# The device pools read VRAMPOOL_CONF when the first one is made: host memory, so no GPU is needed.
os.environ.setdefault("VRAMPOOL_CONF", "backend=host")


class DevicePoolStats(unittest.TestCase):
    """`stats()` on the pool the PyTorch entry points make for device 0 (VRAMPOOL_CONF names host memory)."""

    def test_stats_follow_allocations_and_frees(self):
        lib = vrampool.load()
        self.assertEqual(lib.vrampool_device_pool_exists(3), 0)
        with self.assertRaisesRegex(vrampool.VrampoolError, "device 3 has no vrampool pool yet"):
            vrampool.stats(3)

        pointer = lib.vrampool_torch_alloc(5 * MIB, 3, None)
        self.assertTrue(pointer, vrampool.last_error())
        self.assertEqual(pointer % 256, 0)
        before = vrampool.stats(3)
        self.assertEqual(before["device"], 3)
        self.assertIn("backend=host", before["config"])
        self.assertEqual(before["stats"]["allocated_bytes"]["current"], 5 * MIB)
        self.assertGreaterEqual(before["stats"]["reserved_bytes"]["peak"], 5 * MIB)
        self.assertEqual([block["addr"] for block in before["report"]["blocks"]], [pointer])

        lib.vrampool_torch_free(pointer, 5 * MIB, 3, None)
        self.assertEqual(vrampool.last_error(), "")
        after = vrampool.stats(3)
        self.assertEqual(after["stats"]["allocated_bytes"]["current"], 0)
        self.assertEqual(after["stats"]["allocated_bytes"]["peak"], 5 * MIB)
        self.assertEqual(after["stats"]["frees"], 1)
        self.assertGreaterEqual(vrampool.trim(3), 0)
        self.assertGreaterEqual(vrampool.trim(), 0)

        lib.vrampool_torch_free(pointer, 5 * MIB, 3, None)
        self.assertIn("not a live allocation", vrampool.last_error())
        self.assertEqual(vrampool.stats(3)["stats"]["frees"], 1, "a double free changes nothing")

    def test_a_device_out_of_range_is_an_error_not_a_crash(self):
        with self.assertRaisesRegex(vrampool.VrampoolError, "device -2 is not a device ordinal"):
            vrampool.stats(-2)
        with self.assertRaisesRegex(vrampool.VrampoolError, "trim"):
            vrampool.trim(99)


class PoolsThroughTheCApi(unittest.TestCase):
    """A pool made with vrampool_pool_create, used through ctypes."""

    def test_a_host_pool_allocates_frees_and_reports(self):
        lib = vrampool.load()
        pool = lib.vrampool_pool_create(b"strategy=dynamic,backend=host,initial_size=64MiB")
        self.assertTrue(pool, vrampool.last_error())
        try:
            addr = ctypes.c_uint64(0)
            self.assertEqual(lib.vrampool_pool_alloc(pool, 3 * MIB, 0, 0, ctypes.byref(addr)), 0)
            stats = vrampool._take_json(lib.vrampool_pool_stats_json(pool), "pool stats")
            self.assertEqual(stats["strategy"], "dynamic")
            self.assertEqual(stats["stats"]["allocated_bytes"]["current"], 3 * MIB)
            self.assertEqual(lib.vrampool_pool_free(pool, addr.value), 0)
            self.assertEqual(lib.vrampool_pool_free(pool, addr.value), -3, "a double free is NOT_LIVE")
        finally:
            lib.vrampool_pool_destroy(pool)

    def test_a_bad_config_names_the_key(self):
        lib = vrampool.load()
        self.assertFalse(lib.vrampool_pool_create(b"backend=host,growth=fast"))
        self.assertEqual(lib.vrampool_last_error_code(), -5)
        self.assertIn("`growth`", vrampool.last_error())


class FakeTorch:
    """Just enough of `torch` to see what `install` and `pool` ask of it (the real one runs on the GPU machine)."""

    def __init__(self, initialized, version="2.11.0+cu130"):
        self.calls = []
        calls = self.calls

        class CUDAAllocator:
            def __init__(self, inner):
                calls.append(("_CUDAAllocator", inner))
                self.inner = inner

        class MemPool:
            def __init__(self, allocator=None):
                calls.append(("MemPool", allocator))

        @contextlib.contextmanager
        def use_mem_pool(pool, device=None):
            calls.append(("use_mem_pool", type(pool).__name__, device))
            yield

        memory = types.SimpleNamespace(
            _CUDAAllocator=CUDAAllocator,
            change_current_allocator=lambda allocator: calls.append(("change_current_allocator", allocator.inner)),
            _snapshot=lambda: {"segments": [], "device_traces": [[{"action": "alloc", "addr": 256, "size": 8}]]},
        )
        self.module = types.ModuleType("torch")
        self.module.__version__ = version
        self.module.cuda = types.SimpleNamespace(
            is_initialized=lambda: initialized, memory=memory, MemPool=MemPool, use_mem_pool=use_mem_pool
        )


class FakeExtension:
    """The compiled allocator module, as `vrampool._extension.build` returns it."""

    @staticmethod
    def allocator():
        return "the vrampool allocator"


class WithFakeTorch(unittest.TestCase):
    """Runs each test with a stand-in for PyTorch and for the compiled allocator module."""

    def setUp(self):
        self.saved_build = vrampool._extension.build
        self.builds = 0

        def fake_build(verbose=False):
            self.builds += 1
            return FakeExtension

        vrampool._extension.build = fake_build

    def tearDown(self):
        sys.modules.pop("torch", None)
        vrampool._extension.build = self.saved_build
        vrampool._torch._installed = None

    def use(self, fake):
        sys.modules["torch"] = fake.module
        return fake


class Install(WithFakeTorch):
    """`install()`, `pool()` and the snapshot helpers against the stand-in."""

    def test_it_makes_vrampools_allocator_pytorchs_own(self):
        fake = self.use(FakeTorch(initialized=False))
        saved = os.environ.get("VRAMPOOL_CONF")
        try:
            installed = vrampool.install(conf=saved)
            self.assertEqual(os.environ.get("VRAMPOOL_CONF"), saved)
        finally:
            if saved is not None:
                os.environ["VRAMPOOL_CONF"] = saved
        self.assertEqual(installed.inner, "the vrampool allocator")
        self.assertEqual(
            fake.calls,
            [("_CUDAAllocator", "the vrampool allocator"), ("change_current_allocator", "the vrampool allocator")],
        )
        self.assertIs(vrampool.install(), installed, "a second call returns the installed allocator")
        self.assertEqual(len(fake.calls), 2)
        with self.assertRaisesRegex(vrampool.VrampoolError, "installed already"):
            vrampool.install(conf="strategy=fixed")

    def test_it_refuses_once_cuda_is_in_use_and_points_to_pool(self):
        self.use(FakeTorch(initialized=True))
        with self.assertRaisesRegex(RuntimeError, "before any CUDA work.*vrampool.pool"):
            vrampool.install()
        self.assertEqual(self.builds, 0)

    def test_without_pytorch_it_says_so(self):
        sys.modules["torch"] = None  # makes `import torch` fail
        with self.assertRaisesRegex(ImportError, "needs PyTorch"):
            vrampool.install()

    def test_an_unsupported_pytorch_is_refused_naming_its_version(self):
        for version in ("2.10.1+cu128", "2.12.0a0", "1.13.1"):
            self.use(FakeTorch(initialized=False, version=version))
            with self.assertRaises(vrampool.VrampoolError) as caught:
                vrampool.install()
            self.assertIn(version, str(caught.exception))
            self.assertIn("2.11", str(caught.exception))
            with self.assertRaises(vrampool.VrampoolError):
                vrampool.allocator()
        self.assertEqual(self.builds, 0, "nothing is compiled for a version vrampool does not support")

    def test_the_supported_versions_are_accepted(self):
        for version in ("2.11.0", "2.11.0+cu130", "2.11.2+cpu"):
            vrampool._extension.check_torch_version(version)

    def test_pool_serves_a_region_through_a_mempool_over_vrampools_allocator(self):
        fake = self.use(FakeTorch(initialized=True))
        with vrampool.pool(device=0):
            fake.calls.append(("inside",))
        self.assertEqual(
            fake.calls, [("MemPool", "the vrampool allocator"), ("use_mem_pool", "MemPool", 0), ("inside",)]
        )

    def test_dump_snapshot_writes_what_advise_reads(self):
        self.use(FakeTorch(initialized=False))
        with tempfile.TemporaryDirectory() as folder:
            for name in ("snap.pickle", "snap.pickle.gz"):
                path = os.path.join(folder, name)
                vrampool.dump_snapshot(path)
                opener = gzip.open if name.endswith(".gz") else open
                with opener(path, "rb") as saved:
                    self.assertEqual(pickle.load(saved)["device_traces"][0][0]["action"], "alloc")


class ExtensionBuild(unittest.TestCase):
    """What decides whether the allocator's C++ module is built anew."""

    def test_the_module_name_follows_the_pytorch_version_and_the_library(self):
        lib = pathlib.Path("/opt/a/libvrampool_c.so")
        name = vrampool._extension.module_name("2.11.0+cu130", lib)
        self.assertTrue(name.startswith("vrampool_torch_2_11_0_cu130_") and name.isidentifier(), name)
        self.assertNotEqual(name, vrampool._extension.module_name("2.11.1+cu130", lib))
        self.assertNotEqual(name, vrampool._extension.module_name("2.11.0+cu130", pathlib.Path("/opt/b/x.so")))

    def test_every_source_is_in_the_package(self):
        for source in (*vrampool._extension.SOURCES, "allocator.h", "vrampool.h"):
            self.assertTrue((vrampool._extension.CSRC / source).is_file(), source)

    def test_the_library_path_prefers_the_argument_then_the_environment(self):
        self.assertEqual(vrampool.library_path("/x/lib.so"), pathlib.Path("/x/lib.so"))
        self.assertEqual(vrampool.library_path(), pathlib.Path(os.environ["VRAMPOOL_LIB"]))


class CheapCountersAndStreams(unittest.TestCase):
    """The counters call, a block used on a second stream, and private pools, through ctypes on host memory."""

    def test_counters_follow_a_block_used_on_another_stream(self):
        lib = vrampool.load()
        pointer = lib.vrampool_torch_alloc(MIB, 4, None)
        self.assertTrue(pointer, vrampool.last_error())
        before = vrampool.counters(4)
        self.assertEqual((before["allocated_bytes"], before["active_allocations"]), (MIB, 1))
        self.assertEqual(lib.vrampool_torch_record_stream(pointer, 4, 77), 0, vrampool.last_error())
        lib.vrampool_torch_free(pointer, MIB, -1, None)
        self.assertEqual(vrampool.last_error(), "")
        self.assertEqual(vrampool.counters(4)["held_frees_total"], 1)
        with self.assertRaisesRegex(vrampool.VrampoolError, "device 9 has no vrampool pool"):
            vrampool.counters(9)

    def test_a_private_pool_is_a_dynamic_pool_of_its_own(self):
        lib = vrampool.load()
        lib.vrampool_torch_alloc(4096, 6, None)
        pool = lib.vrampool_device_private_pool_create(6)
        self.assertTrue(pool, vrampool.last_error())
        try:
            addr = ctypes.c_uint64(0)
            self.assertEqual(lib.vrampool_pool_alloc(pool, 5000, 0, 3, ctypes.byref(addr)), 0)
            out = vrampool.Counters()
            self.assertEqual(lib.vrampool_pool_counters(pool, ctypes.byref(out)), 0)
            self.assertEqual(out.allocated_bytes, 5000)
            stats = vrampool._take_json(lib.vrampool_pool_stats_json(pool), "private pool")
            self.assertEqual(stats["strategy"], "dynamic")
        finally:
            lib.vrampool_pool_destroy(pool)


if __name__ == "__main__":
    unittest.main(verbosity=2)
